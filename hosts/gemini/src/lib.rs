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
use std::process::Command;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Value, json};

use loopx_core::host::{
    Detection, HOOK_STDIN_HINT, HookBinding, HookPoint, HookReply, HookSample, HookTable, HostAnswer,
    HostEvent, HostEventKind, InstallScope, ToolEffect, parse_hook_stdin,
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

    /// The event's name in Gemini CLI's settings and on stdin.
    pub fn host_name(self) -> &'static str {
        HOOKS.native(self)
    }

    /// The event's name on loopx's command line.
    pub fn cli_name(self) -> &'static str {
        HOOKS.cli(self)
    }
}

impl FromStr for HookEvent {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        HOOKS.parse(s)
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

/// Decodes one hook's stdin into the host-neutral event.
pub fn decode(event: HookEvent, stdin: &[u8]) -> Result<HostEvent> {
    let input: HookInput = parse_hook_stdin(stdin)?;
    let kind = match event {
        HookEvent::BeforeAgent => {
            HostEventKind::PromptSubmitted { prompt: input.prompt.clone().unwrap_or_default() }
        }
        HookEvent::BeforeTool => {
            let tool = input.tool_name.clone().filter(|t| !t.is_empty()).ok_or_else(|| {
                Error::usage("a BeforeTool hook input names no tool_name").with_hint(HOOK_STDIN_HINT)
            })?;
            HostEventKind::ToolCall { effect: tool_effect(&tool, input.tool_input.as_ref())?, tool }
        }
        HookEvent::AfterAgent => HostEventKind::Stop,
    };
    Ok(HostEvent { session: input.session_id, cwd: input.cwd.map(PathBuf::from), kind })
}

fn answer(stdout: String) -> HostAnswer {
    HostAnswer { stdout, stderr: String::new(), exit_code: 0 }
}

/// Writes a reply in Gemini CLI's protocol for `event`. A reply the event cannot carry is
/// nothing (no output: the event goes on as it would have).
pub fn encode(event: HookEvent, reply: &HookReply) -> HostAnswer {
    match (event, reply) {
        (HookEvent::AfterAgent, HookReply::Continue(reason))
        | (HookEvent::BeforeTool, HookReply::Deny(reason)) => {
            answer(json!({"decision": "deny", "reason": reason}).to_string())
        }
        (HookEvent::BeforeAgent, HookReply::Context(text)) => answer(
            json!({"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": text}})
                .to_string(),
        ),
        _ => answer(String::new()),
    }
}

/// A non-blocking error: exit 1 with the message on stderr, which Gemini CLI shows as a
/// warning. Never 2, which blocks.
pub fn fail_open(message: &str) -> HostAnswer {
    HostAnswer { stdout: String::new(), stderr: message.to_owned(), exit_code: 1 }
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

/// Looks for `gemini` on `PATH` and asks it its version.
pub fn detect() -> Detection {
    let path = which::which("gemini").ok();
    let version = path.as_ref().and_then(|p| {
        let out = Command::new(p).arg("--version").output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    Detection { path, version }
}

const SAMPLE_SESSION: &str = "4b7b16b4-33b0-4796-8eda-7f65c32643e7";

/// Fixture stdin for every event, as Gemini CLI 0.61.0 sends it.
pub fn samples() -> Vec<HookSample> {
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

/// Whether `a` is an answer Gemini CLI accepts for `event` (`None`: an answer to an event loopx
/// could not even name): never exit code 2, which blocks; on exit 0 stdout is one JSON object
/// the event reads.
pub fn check_answer(event: Option<HookEvent>, a: &HostAnswer) -> Result<()> {
    let bad = |why: String| Err(Error::internal(format!("not a valid Gemini CLI answer: {why}")));
    if a.exit_code >= 2 || a.exit_code < 0 {
        return bad(format!("exit code {} blocks", a.exit_code));
    }
    if a.exit_code != 0 {
        return if a.stdout.is_empty() {
            Ok(())
        } else {
            bad("stdout is ignored on a non-zero exit".to_owned())
        };
    }
    if a.stdout.is_empty() {
        return Ok(());
    }
    let v: Value = match serde_json::from_str(&a.stdout) {
        Ok(v) => v,
        Err(e) => return bad(format!("stdout is not JSON ({e})")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_parses_and_unknown_fields_are_ignored() {
        let s = samples();
        assert_eq!(decode(HookEvent::AfterAgent, s[2].stdin.as_bytes()).unwrap(), s[2].expected);
        for bad in
            [&b""[..], b"not json", b"[1,2]", br#"{"session_id": 7}"#, br#"{"stop_hook_active": "yes"}"#]
        {
            assert!(decode(HookEvent::AfterAgent, bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn answers_follow_the_protocol() {
        let cont = encode(HookEvent::AfterAgent, &HookReply::Continue("do t3".into()));
        assert_eq!(cont.stdout, r#"{"decision":"deny","reason":"do t3"}"#);
        let ctx: Value = serde_json::from_str(
            &encode(HookEvent::BeforeAgent, &HookReply::Context("goal: x".into())).stdout,
        )
        .unwrap();
        assert_eq!(ctx["hookSpecificOutput"]["additionalContext"], "goal: x");
        assert_eq!(encode(HookEvent::AfterAgent, &HookReply::Pass).stdout, "");
        for e in HookEvent::ALL {
            check_answer(Some(e), &encode(e, &HookReply::Pass)).unwrap();
        }
        assert!(
            check_answer(Some(HookEvent::AfterAgent), &HostAnswer { exit_code: 2, ..fail_open("x") })
                .is_err()
        );
        assert!(
            check_answer(
                Some(HookEvent::AfterAgent),
                &encode(HookEvent::BeforeAgent, &HookReply::Context("x".into()))
            )
            .is_err()
        );
        check_answer(None, &fail_open("x")).unwrap();
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
        assert!("Bogus".parse::<HookEvent>().is_err());
    }
}
