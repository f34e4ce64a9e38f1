//! Facts about OpenCode (checked against 1.18.33, driven offline against a fake model server):
//! where its files live, what loopx's plugin hands its hooks on stdin and reads back, how its
//! tools name things, and how to find it. Reads and parses; never writes; holds no loop policy.
//!
//! OpenCode has no shell hooks: a JS plugin (`plugins/loopx.js` in a config directory, loaded
//! by OpenCode's own Bun) hooks its events and hands each to `loopx hook opencode <event>`, one
//! JSON object on stdin, one JSON object (or nothing) back:
//! - `chat.message` (every user message, a `/loopx` command already expanded to
//!   `/loopx <arguments>`): stdin `{session_id, cwd, prompt}`; `{"context": T}` appends T to the
//!   message the model reads;
//! - `tool.execute.before` (every tool call; throwing blocks it, and the model reads the error
//!   text as the tool's result): stdin `{session_id, cwd, tool, args}`; `{"deny": R}` throws R;
//!   no answer at all (loopx missing, a crash) throws too: the gate fails closed;
//! - `session.idle` (the session finished its reply): stdin `{session_id, cwd}`;
//!   `{"continue": T}` sends T as the session's next message (`client.session.promptAsync`).
//!   Under `opencode serve` (and `run --attach` to it) and the TUI the session goes on; a
//!   one-shot `opencode run` ends as the session goes idle, so there the plugin does not ask;
//! - `shell.env`: the plugin puts the session id in the bash tool's environment
//!   (`OPENCODE_SESSION_ID`), without asking loopx.
//!
//! Identity: the bash tool and MCP servers get `OPENCODE=1` and `OPENCODE_PID`; they, and the
//! processes the plugin starts, are children of the one `opencode` process.

pub mod drive;

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use loopx_core::host::{
    AgentProcess, HOOK_STDIN_HINT, HookBinding, HookEventName, HookPoint, HookReply, HookSample, HookTable,
    HostAnswer, HostDriver, HostEvent, HostEventKind, HostFile, HostProtocol, InstallScope, ToolEffect,
    ToolEnv, parse_hook_stdin, printed_json,
};
use loopx_core::{Error, Result};

/// The host's name in `loopx host …` and `loopx hook …`.
pub const HOST: &str = "opencode";

/// The agent type an OpenCode session registers as.
pub const AGENT_TYPE: loopx_core::AgentType = loopx_core::AgentType::from_static("opencode");

/// Set in every process OpenCode starts for its agent: the bash tool's commands, MCP servers.
pub const TOOL_ENV_MARKER: &str = "OPENCODE";
/// The session id, which loopx's plugin adds to the bash tool's environment (`shell.env`).
pub const SESSION_ID_ENV: &str = "OPENCODE_SESSION_ID";

/// The agent's own process: the compiled `opencode` binary (`opencode.exe` in the npm package).
pub const AGENT_PROGRAMS: &[&str] = &["opencode", "opencode.exe"];

/// The `.gitignore` OpenCode writes into each of its config directories that has none (the
/// project's `.opencode/`, `~/.config/opencode/`), for the packages it installs there.
pub const GITIGNORE: &str = "node_modules\npackage.json\npackage-lock.json\nbun.lock\n.gitignore";

/// How the model sees an MCP server's tools: `<server>_<tool>`.
pub fn mcp_tool(server: &str, tool: &str) -> String {
    format!("{server}_{tool}")
}

/// The plugin events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    ChatMessage,
    ToolExecuteBefore,
    SessionIdle,
}

/// OpenCode's plugin events loopx answers: OpenCode's name for each, loopx's command line's,
/// and the hook point each one is.
pub const HOOKS: HookTable<HookEvent> = HookTable {
    host: "OpenCode",
    events: &[
        HookBinding {
            event: HookEvent::ChatMessage,
            native: "chat.message",
            cli: "chat-message",
            point: HookPoint::PromptSubmit,
        },
        HookBinding {
            event: HookEvent::ToolExecuteBefore,
            native: "tool.execute.before",
            cli: "tool-execute-before",
            point: HookPoint::ToolGate,
        },
        HookBinding {
            event: HookEvent::SessionIdle,
            native: "session.idle",
            cli: "session-idle",
            point: HookPoint::Stop,
        },
    ],
};

impl HookEvent {
    pub const ALL: [HookEvent; 3] =
        [HookEvent::ChatMessage, HookEvent::ToolExecuteBefore, HookEvent::SessionIdle];
}

/// What the plugin hands a hook on stdin. Unknown fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HookInput {
    pub session_id: String,
    pub cwd: Option<String>,
    // chat.message
    pub prompt: Option<String>,
    // tool.execute.before
    pub tool: Option<String>,
    pub args: Option<Value>,
}

/// Classifies a tool call from its name and arguments. Arguments that are not an object, or
/// lack the path or command the tool acts on, are an error: the gate denies what it cannot
/// read.
pub fn tool_effect(name: &str, input: Option<&Value>) -> Result<ToolEffect> {
    let field = |k: &str| loopx_core::host::tool_input_str(name, input, k);
    loopx_core::host::tool_input(name, input)?;
    Ok(match name {
        "read" | "glob" | "grep" | "list" | "webfetch" | "websearch" | "codesearch" | "todowrite"
        | "todoread" | "skill" | "question" | "lsp" => ToolEffect::ReadOnly,
        "write" | "edit" => ToolEffect::Edits(vec![field("filePath")?]),
        "bash" => ToolEffect::Shell(field("command")?),
        // loopx's own tools are governed by the kernel itself.
        n if n.starts_with("loopx_") => ToolEffect::ReadOnly,
        _ => ToolEffect::Other,
    })
}

/// Where OpenCode keeps what loopx installs: the project's `.opencode/` and `opencode.json`, or
/// the user's `~/.config/opencode/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    pub dir: &'static str,
    pub config: &'static str,
}

impl Paths {
    pub fn new(scope: InstallScope) -> Self {
        match scope {
            InstallScope::Project => Self { dir: ".opencode", config: "opencode.json" },
            InstallScope::User => Self { dir: ".config/opencode", config: ".config/opencode/opencode.json" },
        }
    }

    /// A file in the config directory (`command/loopx.md`).
    pub fn file(&self, rel: &str) -> String {
        format!("{}/{rel}", self.dir)
    }

    /// How `instructions` in the config names a file of the config directory: relative to the
    /// project (OpenCode looks for it from the working directory up), or from home (`~/`).
    pub fn instruction(&self, scope: InstallScope, rel: &str) -> String {
        match scope {
            InstallScope::Project => self.file(rel),
            InstallScope::User => format!("~/{}", self.file(rel)),
        }
    }
}

const SAMPLE_SESSION: &str = "ses_dcb848dddffeiibyiS9a5beW2v";

/// OpenCode's protocol, as loopx's plugin speaks it.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenCode;

impl HostProtocol for OpenCode {
    fn host(&self) -> &'static str {
        HOST
    }
    fn binaries(&self) -> &'static [&'static str] {
        &["opencode"]
    }
    fn tool_env(&self) -> Option<ToolEnv> {
        Some(ToolEnv { marker: TOOL_ENV_MARKER, session: Some(SESSION_ID_ENV) })
    }
    fn agent_process(&self) -> Option<AgentProcess> {
        Some(AgentProcess { programs: AGENT_PROGRAMS, packages: &[] })
    }
    /// The bash tool hears its session from the plugin; MCP servers only from the process.
    fn sessions_by_process(&self) -> bool {
        true
    }
    fn host_files(&self) -> &'static [HostFile] {
        &[HostFile { name: ".gitignore", content: GITIGNORE }]
    }
    fn hook_events(&self) -> Vec<HookEventName> {
        HOOKS.names()
    }

    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        let event = HOOKS.for_point(point)?;
        let input: HookInput = parse_hook_stdin(stdin)?;
        let kind = match event {
            HookEvent::ChatMessage => {
                HostEventKind::PromptSubmitted { prompt: input.prompt.clone().unwrap_or_default() }
            }
            HookEvent::ToolExecuteBefore => {
                let tool = input.tool.clone().filter(|t| !t.is_empty()).ok_or_else(|| {
                    Error::usage("a tool.execute.before hook input names no tool").with_hint(HOOK_STDIN_HINT)
                })?;
                HostEventKind::ToolCall { effect: tool_effect(&tool, input.args.as_ref())?, tool }
            }
            HookEvent::SessionIdle => HostEventKind::Stop,
        };
        Ok(HostEvent { session: input.session_id, cwd: input.cwd.map(PathBuf::from), kind })
    }

    /// A reply for the plugin to act on. A reply the event cannot carry is nothing.
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        let Ok(event) = HOOKS.for_point(point) else { return HostAnswer::default() };
        let key = match (event, reply) {
            (HookEvent::ChatMessage, HookReply::Context(text)) => ("context", text),
            (HookEvent::ToolExecuteBefore, HookReply::Deny(reason)) => ("deny", reason),
            (HookEvent::SessionIdle, HookReply::Continue(text)) => ("continue", text),
            _ => return HostAnswer::default(),
        };
        HostAnswer::print(json!({key.0: key.1}).to_string())
    }

    fn tool_name(&self, tool: &str) -> String {
        mcp_tool("loopx", tool)
    }

    /// Fixture stdin for every event, as loopx's plugin writes it.
    fn samples(&self) -> Vec<HookSample> {
        let with = |extra: Value| {
            let mut v = json!({"session_id": SAMPLE_SESSION, "cwd": "/home/u/p"});
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
                event: "chat-message",
                stdin: with(json!({"prompt": "/loopx write the parser"})),
                expected: ev(HostEventKind::PromptSubmitted { prompt: "/loopx write the parser".to_owned() }),
            },
            HookSample {
                event: "tool-execute-before",
                stdin: with(
                    json!({"tool": "edit", "args": {"filePath": "/home/u/p/src/a.rs", "oldString": "a", "newString": "b"}}),
                ),
                expected: ev(HostEventKind::ToolCall {
                    tool: "edit".to_owned(),
                    effect: ToolEffect::Edits(vec!["/home/u/p/src/a.rs".to_owned()]),
                }),
            },
            HookSample { event: "session-idle", stdin: with(json!({})), expected: ev(HostEventKind::Stop) },
        ]
    }

    /// Exit 0 with nothing or the one JSON object the event reads, or a failure with nothing on
    /// stdout.
    fn check_answer(&self, point: Option<HookPoint>, a: &HostAnswer) -> Result<()> {
        let event = point.and_then(|p| HOOKS.for_point(p).ok());
        let bad =
            |why: String| Err(Error::internal(format!("not an answer loopx's OpenCode plugin reads: {why}")));
        // The plugin blocks on no exit code: a failure lets the event go on (but at the gate).
        let v = match printed_json(a, |_| false) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(why) => return bad(why),
        };
        let key = match event {
            Some(HookEvent::ChatMessage) => "context",
            Some(HookEvent::ToolExecuteBefore) => "deny",
            Some(HookEvent::SessionIdle) => "continue",
            None => return bad("an answer to no event".to_owned()),
        };
        let ok = v.as_object().is_some_and(|o| {
            o.len() == 1 && o.get(key).and_then(Value::as_str).is_some_and(|t| !t.is_empty())
        });
        if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
    }

    fn driver(&self) -> Option<&dyn HostDriver> {
        Some(&drive::OpenCodeDriver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_parses_and_bad_input_is_an_error() {
        for s in OpenCode.samples() {
            assert_eq!(
                OpenCode.decode(HOOKS.point(HOOKS.parse(s.event).unwrap()), s.stdin.as_bytes()).unwrap(),
                s.expected
            );
        }
        for bad in [&b""[..], b"not json", b"[1,2]", br#"{"session_id": 7}"#, br#"{"prompt": ["x"]}"#] {
            assert!(
                OpenCode.decode(HookPoint::PromptSubmit, bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn answers_follow_the_plugins_protocol() {
        assert_eq!(
            OpenCode.encode(HookPoint::Stop, &HookReply::Continue("do t3".into())).stdout,
            r#"{"continue":"do t3"}"#
        );
        assert_eq!(
            OpenCode.encode(HookPoint::ToolGate, &HookReply::Deny("no".into())).stdout,
            r#"{"deny":"no"}"#
        );
        assert_eq!(
            OpenCode.encode(HookPoint::PromptSubmit, &HookReply::Context("x".into())).stdout,
            r#"{"context":"x"}"#
        );
        for e in HookEvent::ALL {
            let p = HOOKS.point(e);
            OpenCode.check_answer(Some(p), &OpenCode.encode(p, &HookReply::Pass)).unwrap();
        }
        let ctx = OpenCode.encode(HookPoint::PromptSubmit, &HookReply::Context("x".into()));
        assert!(OpenCode.check_answer(Some(HookPoint::Stop), &ctx).is_err());
        assert!(
            OpenCode
                .check_answer(Some(HookPoint::PromptSubmit), &HostAnswer { exit_code: 1, ..ctx })
                .is_err()
        );
    }

    #[test]
    fn tools_are_classified() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let effect = |tool: &str, input: &str| tool_effect(tool, Some(&v(input))).unwrap();
        assert_eq!(effect("read", r#"{"filePath":"a"}"#), ToolEffect::ReadOnly);
        assert_eq!(
            effect("write", r#"{"filePath":"src/a.rs","content":""}"#),
            ToolEffect::Edits(vec!["src/a.rs".into()])
        );
        assert_eq!(effect("bash", r#"{"command":"ls"}"#), ToolEffect::Shell("ls".into()));
        assert_eq!(effect("other_x", "{}"), ToolEffect::Other);
        assert_eq!(effect("loopx_status", "{}"), ToolEffect::ReadOnly);
        for (tool, input) in [("edit", "{}"), ("bash", r#"{"cmd": "x"}"#), ("read", "[1]")] {
            assert!(tool_effect(tool, Some(&v(input))).is_err(), "{tool} {input}");
        }
    }

    #[test]
    fn events_have_two_names_and_a_point() {
        HOOKS.check(&HookEvent::ALL).unwrap();
        assert!(HOOKS.parse("Bogus").is_err());
    }
}
