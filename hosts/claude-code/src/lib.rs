//! Facts about Claude Code (checked against version 2.1): where its files live, what its hooks
//! receive on stdin and must print, and how to find it. Reads and parses; never writes; holds
//! no loop policy (that is the kernel's).
//!
//! Hook protocol, per event:
//! - every event's stdin has `session_id`, `transcript_path`, `cwd`, `hook_event_name`;
//! - `Stop` adds `stop_hook_active`, `last_assistant_message`, …; printing
//!   `{"decision":"block","reason":R}` (exit 0) makes the model continue with R; exit 1 or
//!   no output lets it stop. Claude Code overrides the 9th consecutive block, and
//!   `stop_hook_active` stays true for the rest of the prompt, so it cannot count iterations;
//! - `SessionStart` (with `source`) and `UserPromptSubmit` (with `prompt`) pass
//!   `hookSpecificOutput.additionalContext` to the model;
//! - `PreToolUse` (with `tool_name`, `tool_input`) may answer
//!   `hookSpecificOutput.permissionDecision: "deny"` with a reason, which wins even when
//!   permissions are bypassed;
//! - the status line command gets session JSON on stdin and shows its first stdout line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Value, json};

use loopx_core::traits::{HostAnswer, InstallScope};
use loopx_core::{Error, Result};

/// The host's name in `loopx host …` and `loopx hook …`.
pub const HOST: &str = "claude-code";

/// The hook events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    Stop,
    StatusLine,
}

impl HookEvent {
    pub const ALL: [HookEvent; 5] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::Stop,
        HookEvent::StatusLine,
    ];

    /// The event's name in Claude Code's settings and stdin (`hook_event_name`).
    pub fn host_name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::Stop => "Stop",
            HookEvent::StatusLine => "StatusLine",
        }
    }

    /// The event's name on loopx's command line (`loopx hook claude-code session-start`).
    pub fn cli_name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session-start",
            HookEvent::UserPromptSubmit => "user-prompt-submit",
            HookEvent::PreToolUse => "pre-tool-use",
            HookEvent::Stop => "stop",
            HookEvent::StatusLine => "statusline",
        }
    }
}

impl FromStr for HookEvent {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|e| e.cli_name() == s || e.host_name() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|e| e.cli_name()).collect();
            Error::usage(format!("unknown Claude Code hook event {s:?}"))
                .with_hint(format!("one of: {}", names.join(", ")))
        })
    }
}

/// What a hook receives on stdin. Unknown fields are ignored; missing optional ones default.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HookInput {
    pub session_id: String,
    pub transcript_path: Option<String>,
    pub cwd: Option<String>,
    pub hook_event_name: Option<String>,
    // Stop
    pub stop_hook_active: bool,
    pub last_assistant_message: Option<String>,
    pub permission_mode: Option<String>,
    // SessionStart
    pub source: Option<String>,
    // UserPromptSubmit
    pub prompt: Option<String>,
    // PreToolUse
    pub tool_name: Option<String>,
    pub tool_input: Option<Value>,
    pub tool_use_id: Option<String>,
    // Status line
    pub workspace: Option<Workspace>,
}

/// The status line's `workspace` object.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Workspace {
    pub current_dir: Option<String>,
    pub project_dir: Option<String>,
}

/// Longest hook stdin accepted (a transcript excerpt can be large, but not this large).
pub const MAX_STDIN: usize = 4 << 20;

/// Parses hook stdin. Empty, oversized or non-object input is an error the caller answers in
/// the event's fail-open or fail-closed way.
pub fn parse_input(bytes: &[u8]) -> Result<HookInput> {
    if bytes.len() > MAX_STDIN {
        return Err(Error::usage(format!("hook input is {} bytes, more than {MAX_STDIN}", bytes.len())));
    }
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| Error::usage(format!("hook input is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::usage("hook input is not a JSON object"));
    }
    serde_json::from_value(v)
        .map_err(|e| Error::usage(format!("hook input has a field of the wrong type: {e}")))
}

impl HookInput {
    /// The directory the session works in: `cwd`, else the status line's workspace.
    pub fn dir(&self) -> Option<PathBuf> {
        self.cwd
            .as_deref()
            .or_else(|| {
                self.workspace.as_ref().and_then(|w| w.project_dir.as_deref().or(w.current_dir.as_deref()))
            })
            .map(PathBuf::from)
    }
}

fn answer(stdout: String, exit_code: i32) -> HostAnswer {
    HostAnswer { stdout, stderr: String::new(), exit_code }
}

/// Nothing to say: the host goes on as it would have.
pub fn pass() -> HostAnswer {
    answer(String::new(), 0)
}

/// `Stop`: keep the model working, with `reason` as its next instruction.
pub fn stop_block(reason: &str) -> HostAnswer {
    answer(json!({"decision": "block", "reason": reason}).to_string(), 0)
}

/// `SessionStart` / `UserPromptSubmit`: context the model sees.
pub fn additional_context(event: HookEvent, text: &str) -> HostAnswer {
    answer(
        json!({"hookSpecificOutput": {"hookEventName": event.host_name(), "additionalContext": text}})
            .to_string(),
        0,
    )
}

/// `PreToolUse`: refuse the tool call, telling the model why.
pub fn pre_tool_deny(reason: &str) -> HostAnswer {
    answer(
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}})
            .to_string(),
        0,
    )
}

/// The status line: one line of text.
pub fn status_line(text: &str) -> HostAnswer {
    answer(format!("{}\n", text.lines().next().unwrap_or("")), 0)
}

/// What a tool call would do, as far as a gate cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolEffect {
    /// Reads only.
    ReadOnly,
    /// Writes these paths.
    Edits(Vec<String>),
    /// Runs a shell command.
    Shell(String),
    /// Anything else that may change the world (an MCP tool, a notebook edit).
    Other,
}

/// Classifies a tool call from `tool_name` and `tool_input`.
pub fn tool_effect(name: &str, input: Option<&Value>) -> ToolEffect {
    let field = |k: &str| input.and_then(|v| v.get(k)).and_then(Value::as_str).map(str::to_owned);
    match name {
        "Read"
        | "Glob"
        | "Grep"
        | "LS"
        | "WebFetch"
        | "WebSearch"
        | "TodoWrite"
        | "Task"
        | "ExitPlanMode"
        | "BashOutput"
        | "ListMcpResourcesTool"
        | "ReadMcpResourceTool" => ToolEffect::ReadOnly,
        "Write" | "Edit" | "MultiEdit" => ToolEffect::Edits(field("file_path").into_iter().collect()),
        "NotebookEdit" => ToolEffect::Edits(field("notebook_path").into_iter().collect()),
        "Bash" => ToolEffect::Shell(field("command").unwrap_or_default()),
        // loopx's own tools are governed by the kernel itself.
        n if n.starts_with("mcp__loopx__") => ToolEffect::ReadOnly,
        _ => ToolEffect::Other,
    }
}

/// Whether a shell command is destructive: removes trees, rewrites history, discards work,
/// publishes, or escalates. Conservative: a match is a reason to ask, not proof of harm.
pub fn is_destructive(command: &str) -> bool {
    let c = command.split_whitespace().collect::<Vec<_>>().join(" ");
    const PATTERNS: [&str; 14] = [
        "rm -rf",
        "rm -fr",
        "rm -r ",
        "git push",
        "git reset --hard",
        "git clean -f",
        "git checkout -- ",
        "git branch -D",
        "git rebase",
        "dd if=",
        "mkfs",
        "chmod -R",
        "sudo ",
        "> /dev/",
    ];
    PATTERNS.iter().any(|p| c.contains(p)) || (c.starts_with("rm ") && c.contains(" -r"))
}

/// Where Claude Code keeps the files loopx installs, for a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    pub commands_dir: PathBuf,
    pub settings: PathBuf,
    /// Project scope only: the loop protocol `/loop` runs and the project's MCP servers.
    pub loop_md: Option<PathBuf>,
    pub mcp_json: Option<PathBuf>,
}

impl Paths {
    /// `project` is the project root; `home` the user's home directory.
    pub fn new(scope: InstallScope, project: &Path, home: &Path) -> Self {
        match scope {
            InstallScope::Project => Self {
                commands_dir: project.join(".claude/commands"),
                settings: project.join(".claude/settings.json"),
                loop_md: Some(project.join(".claude/loop.md")),
                mcp_json: Some(project.join(".mcp.json")),
            },
            InstallScope::User => Self {
                commands_dir: home.join(".claude/commands"),
                settings: home.join(".claude/settings.json"),
                loop_md: None,
                mcp_json: None,
            },
        }
    }

    pub fn command(&self, name: &str) -> PathBuf {
        self.commands_dir.join(format!("{name}.md"))
    }
}

/// Whether Claude Code is installed, and which version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    pub path: Option<PathBuf>,
    pub version: Option<String>,
}

/// Looks for `claude` on `PATH` and asks it its version.
pub fn detect() -> Detection {
    let path = which::which("claude").ok();
    let version = path.as_ref().and_then(|p| {
        let out = Command::new(p).arg("--version").output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    Detection { path, version }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_input_parses_and_unknown_fields_are_ignored() {
        let stdin = br#"{"session_id":"s-1","transcript_path":"/t.jsonl","cwd":"/p","hook_event_name":"Stop",
            "prompt_id":"p","permission_mode":"default","stop_hook_active":true,"last_assistant_message":"done",
            "background_tasks":[],"session_crons":[],"something_new":{"x":1}}"#;
        let h = parse_input(stdin).unwrap();
        assert_eq!((h.session_id.as_str(), h.stop_hook_active), ("s-1", true));
        assert_eq!(h.dir(), Some(PathBuf::from("/p")));
    }

    #[test]
    fn bad_input_is_an_error() {
        for bad in
            [&b""[..], b"not json", b"[1,2]", br#"{"session_id": 7}"#, br#"{"stop_hook_active": "yes"}"#]
        {
            assert!(parse_input(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse_input(&vec![b' '; MAX_STDIN + 1]).is_err());
    }

    #[test]
    fn answers_follow_the_protocol() {
        assert_eq!(stop_block("do t3").stdout, r#"{"decision":"block","reason":"do t3"}"#);
        let ctx: Value =
            serde_json::from_str(&additional_context(HookEvent::SessionStart, "goal: x").stdout).unwrap();
        assert_eq!(ctx["hookSpecificOutput"]["hookEventName"], "SessionStart");
        assert_eq!(ctx["hookSpecificOutput"]["additionalContext"], "goal: x");
        let deny: Value = serde_json::from_str(&pre_tool_deny("paused").stdout).unwrap();
        assert_eq!(deny["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(status_line("a\nb").stdout, "a\n");
        assert_eq!(pass().stdout, "");
    }

    #[test]
    fn tools_are_classified() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(tool_effect("Read", Some(&v(r#"{"file_path":"a"}"#))), ToolEffect::ReadOnly);
        assert_eq!(
            tool_effect("Edit", Some(&v(r#"{"file_path":"src/a.rs"}"#))),
            ToolEffect::Edits(vec!["src/a.rs".into()])
        );
        assert_eq!(tool_effect("Bash", Some(&v(r#"{"command":"ls"}"#))), ToolEffect::Shell("ls".into()));
        assert_eq!(tool_effect("mcp__other__x", None), ToolEffect::Other);
        assert_eq!(tool_effect("mcp__loopx__status", None), ToolEffect::ReadOnly);
        assert!(is_destructive("rm  -rf build"));
        assert!(is_destructive("git push --force origin main"));
        assert!(!is_destructive("cargo test"));
        assert!(!is_destructive("grep -r foo ."));
    }

    #[test]
    fn events_have_two_names() {
        for e in HookEvent::ALL {
            assert_eq!(e.cli_name().parse::<HookEvent>().unwrap(), e);
            assert_eq!(e.host_name().parse::<HookEvent>().unwrap(), e);
        }
        assert!("Bogus".parse::<HookEvent>().is_err());
    }

    #[test]
    fn paths_per_scope() {
        let p = Paths::new(InstallScope::Project, Path::new("/p"), Path::new("/h"));
        assert_eq!(p.command("loopx"), PathBuf::from("/p/.claude/commands/loopx.md"));
        assert_eq!(p.mcp_json, Some(PathBuf::from("/p/.mcp.json")));
        let u = Paths::new(InstallScope::User, Path::new("/p"), Path::new("/h"));
        assert_eq!(u.settings, PathBuf::from("/h/.claude/settings.json"));
        assert_eq!(u.loop_md, None);
    }
}
