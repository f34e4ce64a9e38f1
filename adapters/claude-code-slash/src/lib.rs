//! claude-code-slash: binds Claude Code to the kernel with `/loopx`, `.claude/loop.md` for
//! native `/loop`, the `loopx` MCP server in `.mcp.json`, hooks (SessionStart and
//! UserPromptSubmit always; the Stop driver, the PreToolUse gate and the status line on
//! request) in `settings.json`.
//!
//! Pure: it computes install and uninstall *plans* from the current file contents the caller
//! read; the kernel applies them. Files it writes carry a managed marker (Markdown) or are
//! recorded in an ownership file (host JSON, where only our keys are touched), so re-install
//! is `unchanged`, a same-named file the user owns is skipped, and uninstall gives the user's
//! bytes back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use handlebars::Handlebars;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use loopx_core::traits::{FileAction, InstallPlan, InstallScope};
use loopx_core::{Error, Result};
use loopx_host_claude_code::{HookEvent, Paths};

/// The marker in every Markdown file loopx writes.
pub const MARKER: &str = "loopx:managed v1";

/// What to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub scope: InstallScope,
    /// The Stop hook that keeps an armed session working while loopx says run.
    pub stop_driver: bool,
    /// The PreToolUse gate on mutating tools.
    pub harden: bool,
    pub statusline: bool,
    /// How hooks and templates call loopx (`loopx`, or an absolute path).
    pub loopx: String,
    /// The goal named in `.claude/loop.md`'s marker.
    pub goal: String,
}

/// The ownership record kept beside the files (`.claude/loopx-owned.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    pub schema_version: u32,
    /// Per host JSON file (path as given): what it held before loopx first touched it.
    pub json: BTreeMap<String, JsonRecord>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRecord {
    /// The file's bytes before loopx's first install; `None` if loopx created it.
    pub original: Option<String>,
    /// What loopx last wrote, to tell whether the user changed it since.
    pub written: String,
}

/// The files a plan reads and may write, for a scope.
pub fn files(paths: &Paths) -> Vec<PathBuf> {
    let mut v = vec![paths.command("loopx"), paths.settings.clone(), ownership_path(paths)];
    v.extend(paths.loop_md.clone());
    v.extend(paths.mcp_json.clone());
    v
}

pub fn ownership_path(paths: &Paths) -> PathBuf {
    paths.settings.with_file_name("loopx-owned.json")
}

/// The current contents of the files, as read by the caller (`None`: no such file).
pub type Current = BTreeMap<PathBuf, Option<String>>;

fn render(template: &str, ctx: &Value) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.render_template(template, ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// `/loopx` — the command file.
pub fn render_command(opts: &Options) -> Result<String> {
    render(
        include_str!("../../../templates/claude-code-slash/loopx.md.hbs"),
        &json!({"marker": MARKER, "loopx": opts.loopx}),
    )
}

/// `.claude/loop.md` — the per-turn protocol native `/loop` runs.
pub fn render_loop(opts: &Options) -> Result<String> {
    render(
        include_str!("../../../templates/claude-code-slash/loop.md.hbs"),
        &json!({"marker": MARKER, "loopx": opts.loopx, "goal": opts.goal}),
    )
}

fn hook_command(opts: &Options, event: HookEvent) -> String {
    format!("{} hook claude-code {}", opts.loopx, event.cli_name())
}

/// Whether a hook command is one of ours, whatever the loopx path.
fn is_ours(command: &str) -> bool {
    command.contains(" hook claude-code ") && (command.starts_with("loopx") || command.contains("/loopx"))
}

fn parse(path: &Path, text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => {
            Err(Error::refused(format!("{} is not a JSON object; loopx leaves it alone", path.display())))
        }
        Err(e) => Err(Error::refused(format!(
            "{} is not valid JSON ({e}); loopx will not replace it",
            path.display()
        ))
        .with_hint("fix the file, then install again")),
    }
}

fn pretty(v: &Map<String, Value>) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// Removes every hook group of ours from `settings`, and our other entries.
fn strip_settings(settings: &mut Map<String, Value>) {
    if let Some(Value::Object(hooks)) = settings.get_mut("hooks") {
        for groups in hooks.values_mut() {
            if let Value::Array(gs) = groups {
                gs.retain(|g| {
                    let cmds = g.get("hooks").and_then(Value::as_array);
                    !cmds.is_some_and(|c| {
                        !c.is_empty()
                            && c.iter().all(|h| h.get("command").and_then(Value::as_str).is_some_and(is_ours))
                    })
                });
            }
        }
        hooks.retain(|_, g| g.as_array().is_none_or(|a| !a.is_empty()));
        if hooks.is_empty() {
            settings.remove("hooks");
        }
    }
    if let Some(Value::Object(p)) = settings.get_mut("permissions") {
        if let Some(Value::Array(allow)) = p.get_mut("allow") {
            allow.retain(|v| v.as_str() != Some("mcp__loopx"));
            if allow.is_empty() {
                p.remove("allow");
            }
        }
        if p.is_empty() {
            settings.remove("permissions");
        }
    }
    if let Some(Value::Array(en)) = settings.get_mut("enabledMcpjsonServers") {
        en.retain(|v| v.as_str() != Some("loopx"));
        if en.is_empty() {
            settings.remove("enabledMcpjsonServers");
        }
    }
    if settings.get("statusLine").and_then(|s| s.get("command")).and_then(Value::as_str).is_some_and(is_ours)
    {
        settings.remove("statusLine");
    }
}

fn add_hook(settings: &mut Map<String, Value>, event: HookEvent, matcher: Option<&str>, command: String) {
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    if !hooks.is_object() {
        *hooks = json!({});
    }
    let Some(hooks) = hooks.as_object_mut() else { return };
    let groups = hooks.entry(event.host_name()).or_insert_with(|| json!([]));
    if let Some(gs) = groups.as_array_mut() {
        let mut group = json!({"hooks": [{"type": "command", "command": command, "timeout": 30}]});
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        gs.push(group);
    }
}

fn push_unique(settings: &mut Map<String, Value>, path: &[&str], value: &str) {
    let mut cur = settings;
    for key in &path[..path.len() - 1] {
        let e = cur.entry(*key).or_insert_with(|| json!({}));
        if !e.is_object() {
            *e = json!({});
        }
        let Some(next) = e.as_object_mut() else { return };
        cur = next;
    }
    let last = path[path.len() - 1];
    let arr = cur.entry(last).or_insert_with(|| json!([]));
    if let Some(a) = arr.as_array_mut()
        && !a.iter().any(|v| v.as_str() == Some(value))
    {
        a.push(json!(value));
    }
}

/// Our settings on top of the user's.
fn merged_settings(opts: &Options, current: Option<&Map<String, Value>>) -> Result<Map<String, Value>> {
    let mut s = current.cloned().unwrap_or_default();
    if opts.statusline
        && let Some(cmd) = s.get("statusLine").and_then(|x| x.get("command")).and_then(Value::as_str)
        && !is_ours(cmd)
    {
        return Err(Error::refused(format!(
            "settings already have a status line ({cmd}); loopx will not replace it"
        ))
        .with_hint("install without --statusline, or remove your statusLine first"));
    }
    strip_settings(&mut s);
    add_hook(&mut s, HookEvent::SessionStart, None, hook_command(opts, HookEvent::SessionStart));
    add_hook(&mut s, HookEvent::UserPromptSubmit, None, hook_command(opts, HookEvent::UserPromptSubmit));
    if opts.stop_driver {
        add_hook(&mut s, HookEvent::Stop, None, hook_command(opts, HookEvent::Stop));
    }
    if opts.harden {
        add_hook(
            &mut s,
            HookEvent::PreToolUse,
            Some("Write|Edit|MultiEdit|NotebookEdit|Bash"),
            hook_command(opts, HookEvent::PreToolUse),
        );
    }
    if opts.statusline {
        s.insert(
            "statusLine".to_owned(),
            json!({"type": "command", "command": hook_command(opts, HookEvent::StatusLine)}),
        );
    }
    push_unique(&mut s, &["permissions", "allow"], "mcp__loopx");
    if opts.scope == InstallScope::Project {
        push_unique(&mut s, &["enabledMcpjsonServers"], "loopx");
    }
    Ok(s)
}

fn merged_mcp(opts: &Options, current: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut m = current.cloned().unwrap_or_default();
    let servers = m.entry("mcpServers").or_insert_with(|| json!({}));
    if !servers.is_object() {
        *servers = json!({});
    }
    if let Some(s) = servers.as_object_mut() {
        s.insert("loopx".to_owned(), json!({"command": opts.loopx, "args": ["mcp"]}));
    }
    m
}

fn strip_mcp(m: &mut Map<String, Value>) {
    if let Some(Value::Object(s)) = m.get_mut("mcpServers") {
        s.remove("loopx");
        if s.is_empty() {
            m.remove("mcpServers");
        }
    }
}

fn action(path: &Path, current: Option<&String>, content: String) -> FileAction {
    match current {
        Some(c) if *c == content => FileAction::Unchanged { path: path.to_path_buf() },
        Some(_) => FileAction::Update { path: path.to_path_buf(), content },
        None => FileAction::Create { path: path.to_path_buf(), content },
    }
}

fn get<'a>(current: &'a Current, p: &Path) -> Option<&'a String> {
    current.get(p).and_then(Option::as_ref)
}

fn ownership(paths: &Paths, current: &Current) -> Result<Ownership> {
    let p = ownership_path(paths);
    match get(current, &p) {
        None => Ok(Ownership { schema_version: 1, ..Ownership::default() }),
        Some(t) => serde_json::from_str(t).map_err(|e| {
            Error::refused(format!("{} is not a loopx ownership record ({e})", p.display()))
                .with_hint("restore it, or remove loopx's entries by hand")
        }),
    }
}

/// A Markdown file of ours: written unless the user owns a file of that name.
fn markdown(path: &Path, current: Option<&String>, content: String) -> FileAction {
    match current {
        Some(c) if !c.contains(MARKER) => FileAction::Skipped {
            path: path.to_path_buf(),
            reason: "a file of this name exists and is not loopx's; it was left as it is".to_owned(),
        },
        c => action(path, c, content),
    }
}

/// The install plan. Refuses (changing nothing) when a host JSON file cannot be parsed.
pub fn install_plan(paths: &Paths, opts: &Options, current: &Current) -> Result<InstallPlan> {
    let mut own = ownership(paths, current)?;
    let mut actions =
        vec![markdown(&paths.command("loopx"), get(current, &paths.command("loopx")), render_command(opts)?)];
    if let Some(l) = &paths.loop_md {
        actions.push(markdown(l, get(current, l), render_loop(opts)?));
    }
    let mut json_files: Vec<(PathBuf, String)> = Vec::new();
    let settings_now = get(current, &paths.settings).map(|t| parse(&paths.settings, t)).transpose()?;
    json_files.push((paths.settings.clone(), pretty(&merged_settings(opts, settings_now.as_ref())?)));
    if let Some(mcp) = &paths.mcp_json {
        let now = get(current, mcp).map(|t| parse(mcp, t)).transpose()?;
        json_files.push((mcp.clone(), pretty(&merged_mcp(opts, now.as_ref()))));
    }
    for (path, content) in json_files {
        let now = get(current, &path);
        let a = action(&path, now, content.clone());
        let key = path.to_string_lossy().into_owned();
        let original = own.json.get(&key).map_or_else(|| now.cloned(), |r| r.original.clone());
        own.json.insert(key, JsonRecord { original, written: content });
        actions.push(a);
    }
    let own_path = ownership_path(paths);
    let mut record = serde_json::to_string_pretty(&own).map_err(|e| Error::internal(e.to_string()))?;
    record.push('\n');
    actions.push(action(&own_path, get(current, &own_path), record));
    Ok(InstallPlan { actions })
}

/// The uninstall plan: removes what loopx owns and gives the user's bytes back.
pub fn uninstall_plan(paths: &Paths, current: &Current) -> Result<InstallPlan> {
    let own = ownership(paths, current)?;
    let mut actions = Vec::new();
    let mut md = vec![paths.command("loopx")];
    md.extend(paths.loop_md.clone());
    for p in md {
        match get(current, &p) {
            Some(c) if c.contains(MARKER) => actions.push(FileAction::Remove { path: p }),
            Some(_) => {
                actions.push(FileAction::Skipped { path: p, reason: "not loopx's; left as it is".to_owned() })
            }
            None => {}
        }
    }
    for (key, rec) in &own.json {
        let path = PathBuf::from(key);
        let Some(now) = get(current, &path) else { continue };
        if *now == rec.written {
            // Untouched since loopx wrote it: the user's original bytes come back exactly.
            actions.push(match &rec.original {
                Some(orig) => action(&path, Some(now), orig.clone()),
                None => FileAction::Remove { path },
            });
            continue;
        }
        // Changed since: take out only loopx's entries.
        let mut m = parse(&path, now)?;
        strip_settings(&mut m);
        strip_mcp(&mut m);
        if m.is_empty() && rec.original.is_none() {
            actions.push(FileAction::Remove { path });
        } else {
            actions.push(action(&path, Some(now), pretty(&m)));
        }
    }
    let own_path = ownership_path(paths);
    if get(current, &own_path).is_some() {
        actions.push(FileAction::Remove { path: own_path });
    }
    Ok(InstallPlan { actions })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            scope: InstallScope::Project,
            stop_driver: true,
            harden: true,
            statusline: true,
            loopx: "loopx".into(),
            goal: "main".into(),
        }
    }

    #[test]
    fn templates_render_with_the_marker() {
        let c = render_command(&opts()).unwrap();
        assert!(
            c.starts_with("---\ndescription:")
                && c.contains(MARKER)
                && c.contains("!`loopx status 2>&1 || true`"),
            "{c}"
        );
        assert!(c.contains("allowed-tools: Bash"), "a ! line needs Bash allowed");
        let l = render_loop(&opts()).unwrap();
        assert!(l.contains("goal=main") && l.contains("mcp__loopx__should_run"), "{l}");
    }

    #[test]
    fn settings_keep_the_users_entries_and_ours_are_replaced_not_duplicated() {
        let user = json!({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]},
                          "permissions": {"allow": ["Bash(ls:*)"]}});
        let once = merged_settings(&opts(), user.as_object()).unwrap();
        let twice = merged_settings(&opts(), Some(&once)).unwrap();
        assert_eq!(once, twice, "re-install changes nothing");
        assert_eq!(once["model"], "opus");
        assert_eq!(once["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(once["permissions"]["allow"], json!(["Bash(ls:*)", "mcp__loopx"]));
        let mut stripped = once.clone();
        strip_settings(&mut stripped);
        assert_eq!(Value::Object(stripped), user);
    }
}
