//! Facts about Cursor, from its documentation (no Cursor binary runs in loopx's tests, so they
//! are held to the documented formats): where its files live, the rule format, what its hooks
//! receive and must print, and how to find it. Reads and parses; never writes; holds no loop
//! policy.
//!
//! - Rules: `.cursor/rules/<name>.mdc`, YAML front matter with `description` (a string),
//!   `globs` and `alwaysApply` (a boolean); Cursor skips a rule whose front matter does not
//!   parse, silently.
//! - MCP: `.cursor/mcp.json` (project) or `~/.cursor/mcp.json`, stdio servers under
//!   `mcpServers` with `command`, `args`, `env`. The server sees nothing of the chat calling it.
//! - Skills: `.cursor/skills/<name>/SKILL.md` or `~/.cursor/skills/…`; Cursor also reads
//!   `.claude/skills` and `.codex/skills`, which belong to other hosts' adapters.
//! - Hooks: `.cursor/hooks.json` or `~/.cursor/hooks.json`, `{"version": 1, "hooks": {"<event>":
//!   [{"command": …, "loop_limit"?: n}]}}`. Every hook gets JSON on stdin with
//!   `conversation_id`, `generation_id`, `hook_event_name` and `workspace_roots` (some builds
//!   start it with a UTF-8 byte-order mark). `stop` adds `status` and `loop_count` and may
//!   answer `{"followup_message": …}`, which Cursor submits as the next user message, at most
//!   `loop_limit` times; `beforeShellExecution` adds `command` and `cwd` and answers
//!   `{"permission": "allow" | "deny" | "ask", "user_message"?, "agent_message"?}`;
//!   `beforeSubmitPrompt` adds `prompt` and answers `{"continue": true | false,
//!   "user_message"?}` (it cannot add context for the model). A hook answers with exit 0 and
//!   its JSON on stdout.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use loopx_core::host::{
    AgentProcess, HookBinding, HookEventName, HookPoint, HookReply, HookSample, HookTable, HostAnswer,
    HostEvent, HostEventKind, HostProtocol, ToolEffect, parse_hook_stdin,
};
use loopx_core::{Error, Result};

/// The host's name in `loopx host …` and `loopx hook …`.
pub const HOST: &str = "cursor";

/// The agent type a Cursor agent registers as.
pub const AGENT_TYPE: loopx_core::AgentType = loopx_core::AgentType::from_static("cursor");

/// Cursor's configuration directory, in the project and under the home.
pub const DIR: &str = ".cursor";

/// Cursor's command-line agent. The editor's own processes are not an agent's: a person's
/// terminal runs under them too.
pub const AGENT_PROGRAMS: &[&str] = &["cursor-agent"];

/// The hook events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    BeforeSubmitPrompt,
    BeforeShellExecution,
    Stop,
}

/// Cursor's hook events: the name it gives each, loopx's command line's, and the hook point
/// each one is.
pub const HOOKS: HookTable<HookEvent> = HookTable {
    host: "Cursor",
    events: &[
        HookBinding {
            event: HookEvent::BeforeSubmitPrompt,
            native: "beforeSubmitPrompt",
            cli: "before-submit-prompt",
            point: HookPoint::PromptSubmit,
        },
        HookBinding {
            event: HookEvent::BeforeShellExecution,
            native: "beforeShellExecution",
            cli: "before-shell-execution",
            point: HookPoint::ToolGate,
        },
        HookBinding { event: HookEvent::Stop, native: "stop", cli: "stop", point: HookPoint::Stop },
    ],
};

impl HookEvent {
    pub const ALL: [HookEvent; 3] =
        [HookEvent::BeforeSubmitPrompt, HookEvent::BeforeShellExecution, HookEvent::Stop];
}

/// What a hook receives on stdin. Unknown fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HookInput {
    pub conversation_id: String,
    pub generation_id: Option<String>,
    pub hook_event_name: Option<String>,
    pub workspace_roots: Vec<String>,
    /// `stop`: `completed`, `aborted` or `error`.
    pub status: Option<String>,
    /// `stop`: how many follow-ups this loop has had.
    pub loop_count: Option<u32>,
    /// `beforeShellExecution`.
    pub command: Option<String>,
    pub cwd: Option<String>,
    /// `beforeSubmitPrompt`.
    pub prompt: Option<String>,
}

/// Parses hook stdin ([`parse_hook_stdin`]: one bounded JSON object).
pub fn parse_input(bytes: &[u8]) -> Result<HookInput> {
    parse_hook_stdin(bytes)
}

fn answer(v: Value) -> HostAnswer {
    HostAnswer::print(v.to_string())
}

/// One hook entry in `hooks.json`.
pub fn hook_entry(command: &str, loop_limit: Option<u32>) -> Value {
    match loop_limit {
        Some(n) => json!({"command": command, "loop_limit": n}),
        None => json!({"command": command}),
    }
}

/// Cursor's protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor;

impl HostProtocol for Cursor {
    fn host(&self) -> &'static str {
        HOST
    }
    /// Its command-line agent, or the editor's launcher.
    fn binaries(&self) -> &'static [&'static str] {
        &["cursor-agent", "cursor"]
    }
    fn agent_process(&self) -> Option<AgentProcess> {
        Some(AgentProcess { programs: AGENT_PROGRAMS, packages: &[] })
    }
    fn hook_events(&self) -> Vec<HookEventName> {
        HOOKS.names()
    }

    /// The chat is the session; its directory is the shell's `cwd`, else the first workspace
    /// root.
    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        let event = HOOKS.for_point(point)?;
        let input = parse_input(stdin)?;
        let kind = match event {
            HookEvent::BeforeSubmitPrompt => {
                HostEventKind::PromptSubmitted { prompt: input.prompt.clone().unwrap_or_default() }
            }
            HookEvent::BeforeShellExecution => HostEventKind::ToolCall {
                tool: "shell".to_owned(),
                effect: ToolEffect::Shell(input.command.clone().unwrap_or_default()),
            },
            HookEvent::Stop => HostEventKind::Stop,
        };
        let cwd = input.cwd.clone().or_else(|| input.workspace_roots.first().cloned()).map(PathBuf::from);
        Ok(HostEvent { session: input.conversation_id.clone(), cwd, kind })
    }

    /// Every event gets a JSON object: a permission hook that prints nothing may be taken as a
    /// failure.
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        let Ok(event) = HOOKS.for_point(point) else { return answer(json!({})) };
        match (event, reply) {
            (HookEvent::Stop, HookReply::Continue(next)) => answer(json!({"followup_message": next})),
            (HookEvent::Stop, _) => answer(json!({})),
            (HookEvent::BeforeShellExecution, HookReply::Deny(why)) => {
                answer(json!({"permission": "deny", "user_message": why, "agent_message": why}))
            }
            (HookEvent::BeforeShellExecution, _) => answer(json!({"permission": "allow"})),
            (HookEvent::BeforeSubmitPrompt, _) => answer(json!({"continue": true})),
        }
    }

    /// Exit 0 with the event's neutral answer (`{}`, or letting the prompt through), the
    /// message on stderr. The shell gate never fails open: the driver answers it with a denial.
    fn fail_open(&self, point: Option<HookPoint>, message: &str) -> HostAnswer {
        let stdout = match point.and_then(|p| HOOKS.for_point(p).ok()) {
            Some(HookEvent::BeforeSubmitPrompt) => json!({"continue": true}),
            _ => json!({}),
        };
        HostAnswer { stdout: stdout.to_string(), stderr: message.to_owned(), exit_code: 0 }
    }

    /// Cursor shows the server's tools by their own names.
    fn tool_name(&self, tool: &str) -> String {
        format!("the loopx tool `{tool}`")
    }

    /// Fixture stdin for every event, in the documented shape.
    fn samples(&self) -> Vec<HookSample> {
        let chat = "6d1f0c2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f";
        let base = |event: &str, extra: Value| {
            let mut v = json!({"conversation_id": chat, "generation_id": "9f8e7d6c", "hook_event_name": event,
                               "workspace_roots": ["/home/u/p"]});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v.to_string()
        };
        let ev = |kind| HostEvent { session: chat.to_owned(), cwd: Some(PathBuf::from("/home/u/p")), kind };
        vec![
            HookSample {
                event: "before-submit-prompt",
                stdin: base(
                    "beforeSubmitPrompt",
                    json!({"prompt": "/loopx write the parser", "attachments": []}),
                ),
                expected: ev(HostEventKind::PromptSubmitted { prompt: "/loopx write the parser".to_owned() }),
            },
            HookSample {
                event: "before-shell-execution",
                stdin: base("beforeShellExecution", json!({"command": "cargo test", "cwd": "/home/u/p"})),
                expected: ev(HostEventKind::ToolCall {
                    tool: "shell".to_owned(),
                    effect: ToolEffect::Shell("cargo test".to_owned()),
                }),
            },
            HookSample {
                event: "stop",
                stdin: base("stop", json!({"status": "completed", "loop_count": 0})),
                expected: ev(HostEventKind::Stop),
            },
        ]
    }

    fn check_answer(&self, point: Option<HookPoint>, a: &HostAnswer) -> Result<()> {
        let event = point.and_then(|p| HOOKS.for_point(p).ok());
        let bad = |why: String| Err(Error::internal(format!("not a valid Cursor answer: {why}")));
        if a.exit_code != 0 {
            return bad(format!("exit code {}: Cursor reads a hook's answer only on exit 0", a.exit_code));
        }
        let v: Value = match serde_json::from_str(&a.stdout) {
            Ok(v) => v,
            Err(e) => return bad(format!("stdout is not JSON ({e})")),
        };
        let Some(o) = v.as_object() else { return bad("stdout is not a JSON object".to_owned()) };
        let ok = match event {
            Some(HookEvent::Stop) => {
                o.is_empty()
                    || (o.len() == 1 && o["followup_message"].as_str().is_some_and(|m| !m.is_empty()))
            }
            Some(HookEvent::BeforeShellExecution) => {
                matches!(o.get("permission").and_then(Value::as_str), Some("allow" | "deny" | "ask"))
            }
            Some(HookEvent::BeforeSubmitPrompt) => o.get("continue").is_some_and(Value::is_boolean),
            None => o.is_empty(),
        };
        if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_table_has_one_row_an_event_and_one_event_a_point() {
        HOOKS.check(&HookEvent::ALL).unwrap();
        assert!(HOOKS.parse("Bogus").unwrap_err().hint.unwrap().contains("stop"));
    }

    #[test]
    fn input_and_answers() {
        let h =
            parse_input(b"\xEF\xBB\xBF{\"conversation_id\":\"c\",\"workspace_roots\":[\"/p\"],\"new\":1}")
                .unwrap();
        assert_eq!((h.conversation_id.as_str(), h.workspace_roots.len()), ("c", 1));
        for bad in [&b""[..], b"[1]", br#"{"conversation_id": 1}"#, br#"{"workspace_roots": "/p"}"#] {
            assert!(parse_input(bad).is_err());
        }
        let e =
            Cursor.decode(HookPoint::Stop, br#"{"conversation_id":"c","workspace_roots":["/w"]}"#).unwrap();
        assert_eq!(e.cwd, Some(PathBuf::from("/w")));
        assert_eq!(
            Cursor.encode(HookPoint::Stop, &HookReply::Continue("go on".into())).stdout,
            r#"{"followup_message":"go on"}"#
        );
        assert_eq!(Cursor.encode(HookPoint::Stop, &HookReply::Pass).stdout, "{}");
        let deny = Cursor.encode(HookPoint::ToolGate, &HookReply::Deny("no".into()));
        assert!(Cursor.check_answer(Some(HookPoint::ToolGate), &deny).is_ok());
        assert!(deny.stdout.contains(r#""permission":"deny""#));
        assert!(
            Cursor.check_answer(Some(HookPoint::Stop), &Cursor.fail_open(Some(HookPoint::Stop), "x")).is_ok()
        );
        assert!(
            Cursor
                .check_answer(
                    Some(HookPoint::Stop),
                    &HostAnswer { exit_code: 2, ..Cursor.fail_open(None, "x") }
                )
                .is_err()
        );
        assert!(
            Cursor.check_answer(Some(HookPoint::Stop), &answer(json!({"followup_message": ""}))).is_err()
        );
    }
}
