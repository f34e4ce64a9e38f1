//! claude-code-slash: binds Claude Code to the kernel with `/loopx`, `.claude/loop.md` for
//! native `/loop`, the `loopx` MCP server in `.mcp.json`, and hooks in `settings.json`
//! (SessionStart and UserPromptSubmit always; the Stop driver, the PreToolUse gate and the
//! status line on request).
//!
//! Only declarations: what to install (rendered from `templates/claude-code-slash/`), and the
//! Claude Code protocol facts from `loopx-host-claude-code`. The kernel's installer applies
//! the spec; the kernel's hook driver answers the hooks.

use handlebars::Handlebars;
use serde::Serialize;
use serde_json::json;

use loopx_core::agent::{Cadence, HostType, RuntimeProfile};
use loopx_core::host::{
    AdapterCapabilities, Entry, Feature, Format, HookPoint, HostAdapter, HostPath, HostProtocol, InstallEnv,
    InstallOptions, InstallScope, InstallSpec, MARKER, ManagedFile, unsupported_features,
};
use loopx_core::{AgentType, Error, Result};
use loopx_host_claude_code::{self as cc, HookEvent, Paths};

/// What the tool gate's command ends with: exit 2 (Claude Code blocks the call) when loopx did
/// not answer with 0 (it answers a denial with 0 too).
pub const GATE_FAILS_CLOSED: &str = " || exit 2";

/// The Claude Code adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClaudeCodeSlash;

#[derive(Serialize)]
struct CommandContext<'a> {
    marker: &'a str,
    loopx: &'a str,
}

#[derive(Serialize)]
struct LoopContext<'a> {
    marker: &'a str,
    loopx: &'a str,
    goal: &'a str,
}

fn render(template: &str, ctx: &impl Serialize) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.render_template(template, ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// `/loopx`: the command file.
pub fn render_command(opts: &InstallOptions) -> Result<String> {
    render(
        include_str!("../../../templates/claude-code-slash/loopx.md.hbs"),
        &CommandContext { marker: MARKER, loopx: &shell_words::quote(&opts.loopx) },
    )
}

/// `.claude/loop.md`: the per-turn protocol native `/loop` runs.
pub fn render_loop(opts: &InstallOptions) -> Result<String> {
    render(
        include_str!("../../../templates/claude-code-slash/loop.md.hbs"),
        &LoopContext { marker: MARKER, loopx: &shell_words::quote(&opts.loopx), goal: opts.goal.as_str() },
    )
}

fn hook(opts: &InstallOptions, event: HookEvent, matcher: Option<&str>) -> Entry {
    let mut command =
        format!("{} hook {} {}", shell_words::quote(&opts.loopx), cc::HOST, cc::HOOKS.cli(event));
    if event == HookEvent::PreToolUse {
        // The tool gate fails closed: when loopx cannot answer at all (its binary gone, killed),
        // the shell's exit code would be one Claude Code lets the call through on; 2 blocks it.
        // Only here: the other hooks let the session go on whatever happens.
        command.push_str(GATE_FAILS_CLOSED);
    }
    let mut group = json!({"hooks": [{"type": "command", "command": command, "timeout": 30}]});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    Entry::push(&["hooks", cc::HOOKS.native(event)], group)
}

impl HostAdapter for ClaudeCodeSlash {
    fn protocol(&self) -> &dyn HostProtocol {
        &cc::ClaudeCode
    }
    fn name(&self) -> &'static str {
        "claude-code-slash"
    }
    fn capabilities(&self) -> AdapterCapabilities {
        AdapterCapabilities {
            hook_points: HookPoint::ALL.to_vec(),
            features: vec![Feature::StopDriver, Feature::Harden, Feature::Statusline],
            scopes: vec![InstallScope::Project, InstallScope::User],
            mcp: true,
            scheduler_rrule: false,
            max_prompt_chars: None,
            install_agent: false,
        }
    }
    fn host_types(&self) -> Vec<HostType> {
        vec![HostType {
            name: cc::AGENT_TYPE,
            aliases: vec!["cc", "claude"],
            description: "Claude Code (CLI or IDE)",
            // `/loop` and the Stop hook poll every 3 minutes; three unchanged polls stop them.
            cadence: Cadence {
                profile: RuntimeProfile::from_static("claude_loop"),
                base_minutes: Some(3),
                unchanged_poll_limit: Some(3),
                rrule: false,
            },
        }]
    }
    fn agent_prefix(&self) -> &'static str {
        "claude"
    }
    fn entry_command(&self) -> Option<&'static str> {
        Some("/loopx")
    }
    fn install_hint(&self) -> &'static str {
        "npm install -g @anthropic-ai/claude-code"
    }
    fn after_install(&self) -> &'static str {
        "in Claude Code, /loopx <task> joins the goal; /loop keeps turning"
    }
    fn keep_turning(&self) -> &'static str {
        "Run /loop to keep turning."
    }

    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        (*agent_type == cc::AGENT_TYPE).then(|| {
            vec![
                "loopx host install claude-code --with stop-driver   # --dry-run first; add --with harden for the tool gate".to_owned(),
                "in Claude Code, /loopx <task> joins the goal as this session's own agent".to_owned(),
                "/loop keeps turning, one loopx turn at a time; /loopx off disarms".to_owned(),
            ]
        })
    }

    fn install_plan(&self, opts: &InstallOptions, _env: &InstallEnv<'_>) -> Result<InstallSpec> {
        unsupported_features(self, opts)?;
        let paths = Paths::new(opts.scope);
        let at = |rel: &str| HostPath::in_scope(opts.scope, rel);
        let mut settings =
            vec![hook(opts, HookEvent::SessionStart, None), hook(opts, HookEvent::UserPromptSubmit, None)];
        if opts.has(Feature::StopDriver) {
            settings.push(hook(opts, HookEvent::Stop, None));
        }
        if opts.has(Feature::Harden) {
            // Every tool, MCP tools included: the driver lets read-only ones through.
            settings.push(hook(opts, HookEvent::PreToolUse, None));
        }
        if opts.has(Feature::Statusline) {
            let command = format!(
                "{} hook {} {}",
                shell_words::quote(&opts.loopx),
                cc::HOST,
                cc::HOOKS.cli(HookEvent::StatusLine)
            );
            settings.push(Entry::set(&["statusLine"], json!({"type": "command", "command": command})));
        }
        settings.push(Entry::ensure(&["permissions", "allow"], json!("mcp__loopx")));
        if paths.mcp_json.is_some() {
            settings.push(Entry::ensure(&["enabledMcpjsonServers"], json!("loopx")));
        }
        let mut files =
            vec![ManagedFile::Text { path: at(&paths.command("loopx"))?, content: render_command(opts)? }];
        if let Some(l) = paths.loop_md {
            files.push(ManagedFile::Text { path: at(l)?, content: render_loop(opts)? });
        }
        files.push(ManagedFile::Entries {
            path: at(paths.settings)?,
            format: Format::Json,
            entries: settings,
        });
        if let Some(mcp) = paths.mcp_json {
            let server = json!({"command": opts.loopx, "args": ["mcp"]});
            files.push(ManagedFile::Entries {
                path: at(mcp)?,
                format: Format::Json,
                entries: vec![Entry::set(&["mcpServers", "loopx"], server)],
            });
        }
        Ok(InstallSpec { files })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> InstallOptions {
        InstallOptions {
            scope: InstallScope::Project,
            features: [Feature::StopDriver, Feature::Harden, Feature::Statusline].into_iter().collect(),
            loopx: "loopx".into(),
            goal: loopx_core::GoalId::new("main").unwrap(),
            agent: None,
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
    fn a_path_with_spaces_is_quoted_in_hook_commands() {
        let o = InstallOptions { loopx: "/opt/my tools/loopx".into(), ..opts() };
        let roots = loopx_core::host::Roots { project: "/p".into(), home: "/h".into(), host_home: None };
        let spec = ClaudeCodeSlash.install_plan(&o, &InstallEnv { roots: &roots, read: &|_| None }).unwrap();
        let text = serde_json::to_string(&spec).unwrap();
        assert!(text.contains(r"'/opt/my tools/loopx' hook claude-code stop"), "{text}");
    }
}
