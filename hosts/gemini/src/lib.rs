//! Facts about Gemini CLI (checked against 0.61.0, driven offline against a fake model
//! server): where its files live, what its hooks receive on stdin and must print, how its
//! tools name things, and how to find it. Reads and parses; never writes; holds no loop policy.
//!
//! Hook protocol (hooks in `settings.json`, `hooks.<Event>` = groups of commands):
//! - every event's stdin has `session_id`, `transcript_path`, `cwd`, `hook_event_name`,
//!   `timestamp`; `SessionStart` adds `source`, `BeforeAgent` the `prompt` (a custom command
//!   already expanded), `BeforeTool` `tool_name` and `tool_input`, `AfterAgent` `prompt`,
//!   `prompt_response` and `stop_hook_active`;
//! - `BeforeAgent` passes `hookSpecificOutput.additionalContext` to the model as a part of its
//!   own. `SessionStart`'s context is put in front of the prompt in headless runs, where a
//!   `/loopx …` prompt then is no longer read as a command: loopx speaks at `BeforeAgent`;
//! - `BeforeTool` answering `{"decision":"deny","reason":R}` blocks the tool, and the model
//!   reads `Tool execution blocked: R`;
//! - `AfterAgent` answering `{"decision":"deny","reason":R}` sends R as the next prompt in the
//!   same process (the next `AfterAgent` has `stop_hook_active: true`; Gemini sets no cap);
//! - JSON on stdout is read whatever the exit code; otherwise an exit code of 2 or more blocks
//!   with the text (stderr when stdout is empty) as the reason, and 1 is a warning. A
//!   BeforeTool `"ask"` would hang a headless run: loopx never answers it.
//!
//! Identity: hooks get `GEMINI_SESSION_ID` and `GEMINI_PROJECT_DIR`; the shell tool and MCP
//! servers get `GEMINI_CLI=1` and no session id, but they run under the same `gemini` process
//! as the hooks, which is how a command there is tied to its session.

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
pub const HOST: &str = "gemini";

/// The agent type a Gemini CLI session registers as.
pub const AGENT_TYPE: loopx_core::AgentType = loopx_core::AgentType::from_static("gemini");

/// How long Gemini CLI waits for one hook command, in milliseconds (`timeout` in a hook).
pub const HOOK_TIMEOUT_MS: u64 = 30_000;

/// Set to the project directory in hooks.
pub const PROJECT_DIR_ENV: &str = "GEMINI_PROJECT_DIR";

/// Set in every process Gemini CLI starts for its agent: hooks, the shell tool's commands and
/// MCP servers. None of them but hooks sees the session id.
pub const TOOL_ENV_MARKER: &str = "GEMINI_CLI";

/// The agent's own process: `node` running the package's script (its `gemini` link, or the
/// bundle it relaunches itself with).
pub const AGENT_PROGRAMS: &[&str] = &["gemini"];
pub const NPM_PACKAGE: &str = "@google/gemini-cli";

/// How the model sees an MCP server's tools: `mcp_<server>_<tool>`.
pub fn mcp_tool(server: &str, tool: &str) -> String {
    format!("mcp_{server}_{tool}")
}

/// The hook events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    BeforeAgent,
    BeforeTool,
    AfterAgent,
}

/// Gemini CLI's hook events loopx answers: the name it gives each, loopx's command line's, and
/// the hook point each one is. No session start: its context would break a `/loopx` prompt.
pub const HOOKS: HookTable<HookEvent> = HookTable {
    host: "Gemini CLI",
    events: &[
        HookBinding {
            event: HookEvent::BeforeAgent,
            native: "BeforeAgent",
            cli: "before-agent",
            point: HookPoint::PromptSubmit,
        },
        HookBinding {
            event: HookEvent::BeforeTool,
            native: "BeforeTool",
            cli: "before-tool",
            point: HookPoint::ToolGate,
        },
        HookBinding {
            event: HookEvent::AfterAgent,
            native: "AfterAgent",
            cli: "after-agent",
            point: HookPoint::Stop,
        },
    ],
};

impl HookEvent {
    pub const ALL: [HookEvent; 3] = [HookEvent::BeforeAgent, HookEvent::BeforeTool, HookEvent::AfterAgent];
}

/// What a hook receives on stdin. Unknown fields are ignored; missing optional ones default.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HookInput {
    pub session_id: String,
    pub transcript_path: Option<String>,
    pub cwd: Option<String>,
    pub hook_event_name: Option<String>,
    pub timestamp: Option<String>,
    // BeforeAgent, AfterAgent
    pub prompt: Option<String>,
    // AfterAgent
    pub prompt_response: Option<String>,
    pub stop_hook_active: bool,
    // BeforeTool
    pub tool_name: Option<String>,
    pub tool_input: Option<Value>,
}

/// Classifies a tool call from `tool_name` and `tool_input`. An input that is not an object, or
/// lacks the path or command the tool acts on, is an error: the gate denies what it cannot read.
pub fn tool_effect(name: &str, input: Option<&Value>) -> Result<ToolEffect> {
    let field = |k: &str| loopx_core::host::tool_input_str(name, input, k);
    loopx_core::host::tool_input(name, input)?;
    Ok(match name {
        "read_file"
        | "read_many_files"
        | "list_directory"
        | "glob"
        | "grep_search"
        | "search_file_content"
        | "google_web_search"
        | "web_fetch"
        | "write_todos"
        | "list_mcp_resources"
        | "read_mcp_resource"
        | "get_internal_docs"
        | "enter_plan_mode"
        | "exit_plan_mode"
        | "update_topic"
        | "ask_user"
        | "activate_skill"
        | "tracker_get_task"
        | "tracker_list_tasks"
        | "tracker_visualize" => ToolEffect::ReadOnly,
        "write_file" | "replace" => ToolEffect::Edits(vec![field("file_path")?]),
        "run_shell_command" => ToolEffect::Shell(field("command")?),
        // loopx's own tools are governed by the kernel itself.
        n if n.starts_with("mcp_loopx_") => ToolEffect::ReadOnly,
        _ => ToolEffect::Other,
    })
}

/// Where Gemini CLI keeps the files loopx installs, relative to the scope's base (the project,
/// or home for user scope): the same layout under `.gemini/` in both.
pub const SETTINGS: &str = ".gemini/settings.json";
pub const COMMANDS_DIR: &str = ".gemini/commands";
/// Gemini's context file names (`context.fileName`); `GEMINI.md` is its default.
pub const DEFAULT_CONTEXT_FILE: &str = "GEMINI.md";

/// The custom command file for `/name`.
pub fn command(name: &str) -> String {
    format!("{COMMANDS_DIR}/{name}.toml")
}

/// A context file loopx installs under `.gemini/`, and the name `context.fileName` finds it
/// by: Gemini looks for each name in the project's directories (so `.gemini/loopx.md`) and in
/// `~/.gemini/` (so `loopx.md`).
pub fn context_file(scope: InstallScope, file: &str) -> (String, String) {
    match scope {
        InstallScope::Project => (format!(".gemini/{file}"), format!(".gemini/{file}")),
        InstallScope::User => (format!(".gemini/{file}"), file.to_owned()),
    }
}

const SAMPLE_SESSION: &str = "4b7b16b4-33b0-4796-8eda-7f65c32643e7";

/// Gemini CLI's protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gemini;

impl HostProtocol for Gemini {
    fn host(&self) -> &'static str {
        HOST
    }
    fn binaries(&self) -> &'static [&'static str] {
        AGENT_PROGRAMS
    }
    fn project_dir_env(&self) -> Option<&'static str> {
        Some(PROJECT_DIR_ENV)
    }
    fn tool_env(&self) -> Option<ToolEnv> {
        Some(ToolEnv { marker: TOOL_ENV_MARKER, session: None })
    }
    fn agent_process(&self) -> Option<AgentProcess> {
        Some(AgentProcess { programs: AGENT_PROGRAMS, packages: &[NPM_PACKAGE] })
    }
    fn sessions_by_process(&self) -> bool {
        true
    }
    fn hook_events(&self) -> Vec<HookEventName> {
        HOOKS.names()
    }

    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        let event = HOOKS.for_point(point)?;
        let input: HookInput = parse_hook_stdin(stdin)?;
        let kind = match event {
            HookEvent::BeforeAgent => {
                HostEventKind::PromptSubmitted { prompt: input.prompt.clone().unwrap_or_default() }
            }
            HookEvent::BeforeTool => {
                tool_call("BeforeTool", input.tool_name.as_deref(), input.tool_input.as_ref(), tool_effect)?
            }
            HookEvent::AfterAgent => HostEventKind::Stop,
        };
        Ok(HostEvent { session: input.session_id, cwd: input.cwd.map(PathBuf::from), kind })
    }

    /// A reply the event cannot carry is nothing (no output: the event goes on as it would
    /// have).
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        let Ok(event) = HOOKS.for_point(point) else { return HostAnswer::default() };
        match (event, reply) {
            (HookEvent::AfterAgent, HookReply::Continue(reason))
            | (HookEvent::BeforeTool, HookReply::Deny(reason)) => {
                HostAnswer::print(json!({"decision": "deny", "reason": reason}).to_string())
            }
            (HookEvent::BeforeAgent, HookReply::Context(text)) => HostAnswer::print(
                json!({"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": text}})
                    .to_string(),
            ),
            _ => HostAnswer::default(),
        }
    }

    fn tool_name(&self, tool: &str) -> String {
        mcp_tool("loopx", tool)
    }

    /// Fixture stdin for every event, as Gemini CLI 0.61.0 sends it.
    fn samples(&self) -> Vec<HookSample> {
        let with = |event: &str, extra: Value| {
            let mut v = json!({"session_id": SAMPLE_SESSION,
                "transcript_path": "/home/u/.gemini/tmp/p/chats/session-2026-12-02T01-53-4b7b16b4.jsonl",
                "cwd": "/home/u/p", "hook_event_name": event, "timestamp": "2026-12-02T01:53:51.061Z"});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v.to_string()
        };
        let ev = |kind: HostEventKind| HostEvent {
            session: SAMPLE_SESSION.to_owned(),
            cwd: Some(PathBuf::from("/home/u/p")),
            kind,
        };
        vec![
            HookSample {
                event: "before-agent",
                stdin: with("BeforeAgent", json!({"prompt": "/loopx write the parser"})),
                expected: ev(HostEventKind::PromptSubmitted { prompt: "/loopx write the parser".to_owned() }),
            },
            HookSample {
                event: "before-tool",
                stdin: with(
                    "BeforeTool",
                    json!({"tool_name": "write_file", "tool_input": {"file_path": "/home/u/p/src/a.rs", "content": "b"}}),
                ),
                expected: ev(HostEventKind::ToolCall {
                    tool: "write_file".to_owned(),
                    effect: ToolEffect::Edits(vec!["/home/u/p/src/a.rs".to_owned()]),
                }),
            },
            HookSample {
                event: "after-agent",
                stdin: with(
                    "AfterAgent",
                    json!({"prompt": "go on", "prompt_response": "Done.", "stop_hook_active": true}),
                ),
                expected: ev(HostEventKind::Stop),
            },
        ]
    }

    /// Never exit code 2, which blocks; on exit 0 stdout is one JSON object the event reads.
    fn check_answer(&self, point: Option<HookPoint>, a: &HostAnswer) -> Result<()> {
        let event = point.and_then(|p| HOOKS.for_point(p).ok());
        let bad = |why: String| Err(Error::internal(format!("not a valid Gemini CLI answer: {why}")));
        let v = match printed_json(a, |code| !(0..2).contains(&code)) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(why) => return bad(why),
        };
        let Some(o) = v.as_object() else { return bad("stdout is not a JSON object".to_owned()) };
        if o.is_empty() {
            return Ok(());
        }
        let reason = || v["reason"].as_str().is_some_and(|r| !r.is_empty());
        let ok = match event {
            // Only a denial: a headless run waits forever on `ask`.
            Some(HookEvent::AfterAgent | HookEvent::BeforeTool) => v["decision"] == "deny" && reason(),
            Some(HookEvent::BeforeAgent) => {
                let out = &v["hookSpecificOutput"];
                out["hookEventName"] == "BeforeAgent" && out["additionalContext"].is_string()
            }
            None => false,
        };
        if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
    }

    fn driver(&self) -> Option<&dyn HostDriver> {
        Some(&drive::GeminiDriver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_parses_and_unknown_fields_are_ignored() {
        let s = Gemini.samples();
        assert_eq!(Gemini.decode(HookPoint::Stop, s[2].stdin.as_bytes()).unwrap(), s[2].expected);
        for bad in
            [&b""[..], b"not json", b"[1,2]", br#"{"session_id": 7}"#, br#"{"stop_hook_active": "yes"}"#]
        {
            assert!(Gemini.decode(HookPoint::Stop, bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn answers_follow_the_protocol() {
        let cont = Gemini.encode(HookPoint::Stop, &HookReply::Continue("do t3".into()));
        assert_eq!(cont.stdout, r#"{"decision":"deny","reason":"do t3"}"#);
        let ctx: Value = serde_json::from_str(
            &Gemini.encode(HookPoint::PromptSubmit, &HookReply::Context("goal: x".into())).stdout,
        )
        .unwrap();
        assert_eq!(ctx["hookSpecificOutput"]["additionalContext"], "goal: x");
        assert_eq!(Gemini.encode(HookPoint::Stop, &HookReply::Pass).stdout, "");
        for e in HookEvent::ALL {
            let p = HOOKS.point(e);
            Gemini.check_answer(Some(p), &Gemini.encode(p, &HookReply::Pass)).unwrap();
        }
        assert!(
            Gemini
                .check_answer(
                    Some(HookPoint::Stop),
                    &HostAnswer { exit_code: 2, ..Gemini.fail_open(None, "x") }
                )
                .is_err()
        );
        assert!(
            Gemini
                .check_answer(
                    Some(HookPoint::Stop),
                    &Gemini.encode(HookPoint::PromptSubmit, &HookReply::Context("x".into()))
                )
                .is_err()
        );
        Gemini.check_answer(None, &Gemini.fail_open(None, "x")).unwrap();
    }

    #[test]
    fn tools_are_classified() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let effect = |tool: &str, input: &str| tool_effect(tool, Some(&v(input))).unwrap();
        assert_eq!(effect("read_file", r#"{"file_path":"a"}"#), ToolEffect::ReadOnly);
        assert_eq!(
            effect("replace", r#"{"file_path":"src/a.rs"}"#),
            ToolEffect::Edits(vec!["src/a.rs".into()])
        );
        assert_eq!(effect("run_shell_command", r#"{"command":"ls"}"#), ToolEffect::Shell("ls".into()));
        assert_eq!(effect("mcp_other_x", "{}"), ToolEffect::Other);
        assert_eq!(effect("mcp_loopx_status", "{}"), ToolEffect::ReadOnly);
        for (tool, input) in
            [("write_file", "{}"), ("run_shell_command", r#"{"cmd": "x"}"#), ("read_file", "[1]")]
        {
            assert!(tool_effect(tool, Some(&v(input))).is_err(), "{tool} {input}");
        }
    }

    #[test]
    fn events_have_two_names_and_a_point() {
        HOOKS.check(&HookEvent::ALL).unwrap();
        assert!(HOOKS.parse("Bogus").is_err());
    }
}
