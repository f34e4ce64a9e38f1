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
//! - exit code 2 blocks (and feeds stderr to the model); any other non-zero code is a
//!   non-blocking error shown to the user;
//! - the status line command gets session JSON on stdin and shows its first stdout line.

pub mod drive;

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use loopx_core::host::{
    AgentProcess, HookBinding, HookEventName, HookPoint, HookReply, HookSample, HookTable, HostAnswer,
    HostDriver, HostEvent, HostEventKind, HostProtocol, InstallScope, ToolEffect, ToolEnv, parse_hook_stdin,
    printed_json, tool_call,
};
use loopx_core::{Error, Result};

/// The host's name in `loopx host …` and `loopx hook …`.
pub const HOST: &str = "claude-code";

/// The agent type a Claude Code session registers as.
pub const AGENT_TYPE: loopx_core::AgentType = loopx_core::AgentType::from_static("claude-code");

/// The environment variable Claude Code sets to the project directory in hooks.
pub const PROJECT_DIR_ENV: &str = "CLAUDE_PROJECT_DIR";

/// Set in every process Claude Code starts for its agent: hooks, the Bash tool's commands, MCP
/// servers (checked against 2.1.197: all three see `CLAUDECODE=1`).
pub const TOOL_ENV_MARKER: &str = "CLAUDECODE";
/// The session id, in the same processes; equal to hook stdin's `session_id`.
pub const SESSION_ID_ENV: &str = "CLAUDE_CODE_SESSION_ID";

/// The agent's own process: the native `claude` binary (`claude.exe` in the npm package), or
/// `node` running the package's script in older releases.
pub const AGENT_PROGRAMS: &[&str] = &["claude", "claude.exe"];
pub const NPM_PACKAGE: &str = "@anthropic-ai/claude-code";

/// How the model sees an MCP server's tools: `mcp__<server>__<tool>`.
pub fn mcp_tool(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// The hook events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    Stop,
    StatusLine,
}

/// Claude Code's hook events: the name it gives each, loopx's command line's, and the hook point
/// each one is.
pub const HOOKS: HookTable<HookEvent> = HookTable {
    host: "Claude Code",
    events: &[
        HookBinding {
            event: HookEvent::SessionStart,
            native: "SessionStart",
            cli: "session-start",
            point: HookPoint::SessionStart,
        },
        HookBinding {
            event: HookEvent::UserPromptSubmit,
            native: "UserPromptSubmit",
            cli: "user-prompt-submit",
            point: HookPoint::PromptSubmit,
        },
        HookBinding {
            event: HookEvent::PreToolUse,
            native: "PreToolUse",
            cli: "pre-tool-use",
            point: HookPoint::ToolGate,
        },
        HookBinding { event: HookEvent::Stop, native: "Stop", cli: "stop", point: HookPoint::Stop },
        HookBinding {
            event: HookEvent::StatusLine,
            native: "StatusLine",
            cli: "statusline",
            point: HookPoint::StatusLine,
        },
    ],
};

impl HookEvent {
    pub const ALL: [HookEvent; 5] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::Stop,
        HookEvent::StatusLine,
    ];
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

/// Parses hook stdin ([`parse_hook_stdin`]: one bounded JSON object).
pub fn parse_input(bytes: &[u8]) -> Result<HookInput> {
    parse_hook_stdin(bytes)
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

/// Classifies a tool call from `tool_name` and `tool_input`. An input that is not an object, or
/// lacks the path or command the tool acts on, is an error: the gate denies what it cannot read.
pub fn tool_effect(name: &str, input: Option<&Value>) -> Result<ToolEffect> {
    let field = |k: &str| loopx_core::host::tool_input_str(name, input, k);
    loopx_core::host::tool_input(name, input)?;
    Ok(match name {
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
        "Write" | "Edit" | "MultiEdit" => ToolEffect::Edits(vec![field("file_path")?]),
        "NotebookEdit" => ToolEffect::Edits(vec![field("notebook_path")?]),
        "Bash" => ToolEffect::Shell(field("command")?),
        // loopx's own tools are governed by the kernel itself.
        n if n.starts_with("mcp__loopx__") => ToolEffect::ReadOnly,
        _ => ToolEffect::Other,
    })
}

/// Where Claude Code keeps the files loopx installs, relative to the scope's base (the
/// project, or home for user scope).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    pub commands_dir: &'static str,
    pub settings: &'static str,
    /// Project scope only: the loop protocol `/loop` runs and the project's MCP servers.
    pub loop_md: Option<&'static str>,
    pub mcp_json: Option<&'static str>,
}

impl Paths {
    pub fn new(scope: InstallScope) -> Self {
        match scope {
            InstallScope::Project => Self {
                commands_dir: ".claude/commands",
                settings: ".claude/settings.json",
                loop_md: Some(".claude/loop.md"),
                mcp_json: Some(".mcp.json"),
            },
            InstallScope::User => Self {
                commands_dir: ".claude/commands",
                settings: ".claude/settings.json",
                loop_md: None,
                mcp_json: None,
            },
        }
    }

    pub fn command(&self, name: &str) -> String {
        format!("{}/{name}.md", self.commands_dir)
    }
}

/// Claude Code's protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClaudeCode;

impl HostProtocol for ClaudeCode {
    fn host(&self) -> &'static str {
        HOST
    }
    fn binaries(&self) -> &'static [&'static str] {
        &["claude"]
    }
    fn project_dir_env(&self) -> Option<&'static str> {
        Some(PROJECT_DIR_ENV)
    }
    fn tool_env(&self) -> Option<ToolEnv> {
        Some(ToolEnv { marker: TOOL_ENV_MARKER, session: Some(SESSION_ID_ENV) })
    }
    fn agent_process(&self) -> Option<AgentProcess> {
        Some(AgentProcess { programs: AGENT_PROGRAMS, packages: &[NPM_PACKAGE] })
    }
    fn hook_events(&self) -> Vec<HookEventName> {
        HOOKS.names()
    }

    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        let event = HOOKS.for_point(point)?;
        let input = parse_input(stdin)?;
        let kind = match event {
            HookEvent::SessionStart => HostEventKind::SessionStart,
            HookEvent::UserPromptSubmit => {
                HostEventKind::PromptSubmitted { prompt: input.prompt.clone().unwrap_or_default() }
            }
            HookEvent::PreToolUse => {
                tool_call("PreToolUse", input.tool_name.as_deref(), input.tool_input.as_ref(), tool_effect)?
            }
            HookEvent::Stop => HostEventKind::Stop,
            HookEvent::StatusLine => HostEventKind::StatusLine,
        };
        Ok(HostEvent { session: input.session_id.clone(), cwd: input.dir(), kind })
    }

    /// A reply the event cannot carry (a denial at session start, say) is nothing.
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        let Ok(event) = HOOKS.for_point(point) else { return HostAnswer::default() };
        match (event, reply) {
            (HookEvent::Stop, HookReply::Continue(reason)) => {
                HostAnswer::print(json!({"decision": "block", "reason": reason}).to_string())
            }
            (HookEvent::SessionStart | HookEvent::UserPromptSubmit, HookReply::Context(text)) => HostAnswer::print(
                json!({"hookSpecificOutput": {"hookEventName": HOOKS.native(event), "additionalContext": text}})
                    .to_string(),
            ),
            (HookEvent::PreToolUse, HookReply::Deny(reason)) => HostAnswer::print(
                json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}})
                    .to_string(),
            ),
            (HookEvent::StatusLine, HookReply::Status(text)) => {
                HostAnswer::print(format!("{}\n", text.lines().next().unwrap_or("")))
            }
            _ => HostAnswer::default(),
        }
    }

    fn tool_name(&self, tool: &str) -> String {
        mcp_tool("loopx", tool)
    }

    /// Fixture stdin for every event, as Claude Code 2.1 sends it.
    fn samples(&self) -> Vec<HookSample> {
        let base = |event: &str| {
            json!({"session_id": "4f1c9a2e-77b0-4d11-9c3e-1a2b3c4d5e6f", "transcript_path": "/home/u/.claude/projects/p/4f1c.jsonl",
                   "cwd": "/home/u/p", "hook_event_name": event, "permission_mode": "default"})
        };
        let with = |event: &str, extra: Value| {
            let mut v = base(event);
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v.to_string()
        };
        let ev = |kind: HostEventKind, cwd: Option<&str>| HostEvent {
            session: "4f1c9a2e-77b0-4d11-9c3e-1a2b3c4d5e6f".to_owned(),
            cwd: cwd.map(PathBuf::from),
            kind,
        };
        vec![
            HookSample {
                event: "session-start",
                stdin: with("SessionStart", json!({"source": "startup", "model": "claude-sonnet-4-5"})),
                expected: ev(HostEventKind::SessionStart, Some("/home/u/p")),
            },
            HookSample {
                event: "user-prompt-submit",
                stdin: with("UserPromptSubmit", json!({"prompt": "/loopx write the parser"})),
                expected: ev(HostEventKind::PromptSubmitted { prompt: "/loopx write the parser".to_owned() }, Some("/home/u/p")),
            },
            HookSample {
                event: "pre-tool-use",
                stdin: with(
                    "PreToolUse",
                    json!({"tool_name": "Edit", "tool_input": {"file_path": "/home/u/p/src/a.rs", "old_string": "a", "new_string": "b"}, "tool_use_id": "toolu_01"}),
                ),
                expected: ev(
                    HostEventKind::ToolCall { tool: "Edit".to_owned(), effect: ToolEffect::Edits(vec!["/home/u/p/src/a.rs".to_owned()]) },
                    Some("/home/u/p"),
                ),
            },
            HookSample {
                event: "stop",
                stdin: with("Stop", json!({"stop_hook_active": true, "last_assistant_message": "Done.", "background_tasks": []})),
                expected: ev(HostEventKind::Stop, Some("/home/u/p")),
            },
            HookSample {
                event: "statusline",
                stdin: json!({"session_id": "4f1c9a2e-77b0-4d11-9c3e-1a2b3c4d5e6f", "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet"},
                              "workspace": {"current_dir": "/home/u/p/src", "project_dir": "/home/u/p"}, "version": "2.1.197"})
                .to_string(),
                expected: ev(HostEventKind::StatusLine, Some("/home/u/p")),
            },
        ]
    }

    /// The exit code must never be 2 unless a reply blocks by design, and stdout must be empty
    /// or the JSON the event reads.
    fn check_answer(&self, point: Option<HookPoint>, a: &HostAnswer) -> Result<()> {
        let event = point.and_then(|p| HOOKS.for_point(p).ok());
        let bad = |why: String| Err(Error::internal(format!("not a valid Claude Code answer: {why}")));
        if event == Some(HookEvent::StatusLine) && a.exit_code == 0 {
            return if a.stdout.lines().count() <= 1 {
                Ok(())
            } else {
                bad("a status line is one line".to_owned())
            };
        }
        let v = match printed_json(a, |code| code == 2) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(why) => return bad(why),
        };
        let out = &v["hookSpecificOutput"];
        let ok = match event {
            Some(HookEvent::Stop) => {
                v["decision"] == "block" && v["reason"].as_str().is_some_and(|r| !r.is_empty())
            }
            Some(e @ (HookEvent::SessionStart | HookEvent::UserPromptSubmit)) => {
                out["hookEventName"] == HOOKS.native(e) && out["additionalContext"].is_string()
            }
            Some(HookEvent::PreToolUse) => {
                out["hookEventName"] == "PreToolUse"
                    && matches!(out["permissionDecision"].as_str(), Some("allow" | "deny" | "ask"))
                    && out["permissionDecisionReason"].is_string()
            }
            _ => false,
        };
        if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
    }

    fn driver(&self) -> Option<&dyn HostDriver> {
        Some(&drive::ClaudeDriver)
    }
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
        assert!(parse_input(&vec![b' '; loopx_core::host::MAX_HOOK_STDIN + 1]).is_err());
    }

    #[test]
    fn answers_follow_the_protocol() {
        let stop = ClaudeCode.encode(HookPoint::Stop, &HookReply::Continue("do t3".into()));
        assert_eq!(stop.stdout, r#"{"decision":"block","reason":"do t3"}"#);
        let ctx: Value = serde_json::from_str(
            &ClaudeCode.encode(HookPoint::SessionStart, &HookReply::Context("goal: x".into())).stdout,
        )
        .unwrap();
        assert_eq!(ctx["hookSpecificOutput"]["hookEventName"], "SessionStart");
        assert_eq!(ctx["hookSpecificOutput"]["additionalContext"], "goal: x");
        let deny: Value = serde_json::from_str(
            &ClaudeCode.encode(HookPoint::ToolGate, &HookReply::Deny("paused".into())).stdout,
        )
        .unwrap();
        assert_eq!(deny["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(ClaudeCode.encode(HookPoint::StatusLine, &HookReply::Status("a\nb".into())).stdout, "a\n");
        assert_eq!(ClaudeCode.encode(HookPoint::Stop, &HookReply::Pass).stdout, "");
        assert_eq!(ClaudeCode.fail_open(None, "x").exit_code, 1);
        // The oracle rejects what Claude Code would misread.
        assert!(
            ClaudeCode
                .check_answer(
                    Some(HookPoint::Stop),
                    &HostAnswer { exit_code: 2, ..ClaudeCode.fail_open(None, "x") }
                )
                .is_err()
        );
        assert!(
            ClaudeCode
                .check_answer(
                    Some(HookPoint::Stop),
                    &ClaudeCode.encode(HookPoint::SessionStart, &HookReply::Context("x".into()))
                )
                .is_err()
        );
    }

    #[test]
    fn tools_are_classified() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let effect = |tool: &str, input: &str| tool_effect(tool, Some(&v(input))).unwrap();
        assert_eq!(effect("Read", r#"{"file_path":"a"}"#), ToolEffect::ReadOnly);
        assert_eq!(effect("Edit", r#"{"file_path":"src/a.rs"}"#), ToolEffect::Edits(vec!["src/a.rs".into()]));
        assert_eq!(effect("Bash", r#"{"command":"ls"}"#), ToolEffect::Shell("ls".into()));
        assert_eq!(effect("mcp__other__x", "{}"), ToolEffect::Other);
        assert_eq!(effect("mcp__loopx__status", "{}"), ToolEffect::ReadOnly);
        // What the gate cannot read is an error, which it answers with a denial.
        for (tool, input) in [
            ("Write", r#""/p/.loopx/goals/main/snapshot.json""#),
            ("Write", r#"{"file_path": ["a"]}"#),
            ("Edit", "{}"),
            ("Bash", r#"{"cmd": "loopx goal stop"}"#),
            ("Bash", "null"),
            ("Read", "[1]"),
        ] {
            assert!(tool_effect(tool, Some(&v(input))).is_err(), "{tool} {input}");
        }
        assert!(tool_effect("Bash", None).is_err());
    }

    #[test]
    fn events_have_two_names_and_a_point() {
        HOOKS.check(&HookEvent::ALL).unwrap();
        assert!(HOOKS.parse("Bogus").is_err());
    }
}
