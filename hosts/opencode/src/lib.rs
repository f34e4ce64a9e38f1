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

    /// The event's name in OpenCode's plugin API.
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

/// Decodes one hook's stdin into the host-neutral event.
pub fn decode(event: HookEvent, stdin: &[u8]) -> Result<HostEvent> {
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

fn answer(stdout: String) -> HostAnswer {
    HostAnswer { stdout, stderr: String::new(), exit_code: 0 }
}

/// Writes a reply for the plugin to act on. A reply the event cannot carry is nothing.
pub fn encode(event: HookEvent, reply: &HookReply) -> HostAnswer {
    match (event, reply) {
        (HookEvent::ChatMessage, HookReply::Context(text)) => answer(json!({"context": text}).to_string()),
        (HookEvent::ToolExecuteBefore, HookReply::Deny(reason)) => {
            answer(json!({"deny": reason}).to_string())
        }
        (HookEvent::SessionIdle, HookReply::Continue(text)) => answer(json!({"continue": text}).to_string()),
        _ => answer(String::new()),
    }
}

/// A failure of loopx: exit 1 with the message on stderr. The plugin lets the event go on,
/// except at the tool gate, where it blocks the call.
pub fn fail_open(message: &str) -> HostAnswer {
    HostAnswer { stdout: String::new(), stderr: message.to_owned(), exit_code: 1 }
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

/// Looks for `opencode` on `PATH` and asks it its version.
pub fn detect() -> Detection {
    let path = which::which("opencode").ok();
    let version = path.as_ref().and_then(|p| {
        let out = Command::new(p).arg("--version").output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    Detection { path, version }
}

const SAMPLE_SESSION: &str = "ses_dcb848dddffeiibyiS9a5beW2v";

/// Fixture stdin for every event, as loopx's plugin writes it.
pub fn samples() -> Vec<HookSample> {
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

/// Whether `a` is an answer loopx's plugin reads for `event` (`None`: an answer to an event
/// loopx could not even name): exit 0 with nothing or the one JSON object the event reads, or
/// a failure with nothing on stdout.
pub fn check_answer(event: Option<HookEvent>, a: &HostAnswer) -> Result<()> {
    let bad =
        |why: String| Err(Error::internal(format!("not an answer loopx's OpenCode plugin reads: {why}")));
    if a.stdout.is_empty() {
        return Ok(());
    }
    if a.exit_code != 0 {
        return bad("the plugin ignores stdout on a non-zero exit".to_owned());
    }
    let v: Value = match serde_json::from_str(&a.stdout) {
        Ok(v) => v,
        Err(e) => return bad(format!("stdout is not JSON ({e})")),
    };
    let key = match event {
        Some(HookEvent::ChatMessage) => "context",
        Some(HookEvent::ToolExecuteBefore) => "deny",
        Some(HookEvent::SessionIdle) => "continue",
        None => return bad("an answer to no event".to_owned()),
    };
    let ok = v
        .as_object()
        .is_some_and(|o| o.len() == 1 && o.get(key).and_then(Value::as_str).is_some_and(|t| !t.is_empty()));
    if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_parses_and_bad_input_is_an_error() {
        for s in samples() {
            assert_eq!(decode(s.event.parse().unwrap(), s.stdin.as_bytes()).unwrap(), s.expected);
        }
        for bad in [&b""[..], b"not json", b"[1,2]", br#"{"session_id": 7}"#, br#"{"prompt": ["x"]}"#] {
            assert!(decode(HookEvent::ChatMessage, bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn answers_follow_the_plugins_protocol() {
        assert_eq!(
            encode(HookEvent::SessionIdle, &HookReply::Continue("do t3".into())).stdout,
            r#"{"continue":"do t3"}"#
        );
        assert_eq!(
            encode(HookEvent::ToolExecuteBefore, &HookReply::Deny("no".into())).stdout,
            r#"{"deny":"no"}"#
        );
        assert_eq!(
            encode(HookEvent::ChatMessage, &HookReply::Context("x".into())).stdout,
            r#"{"context":"x"}"#
        );
        for e in HookEvent::ALL {
            check_answer(Some(e), &encode(e, &HookReply::Pass)).unwrap();
        }
        let ctx = encode(HookEvent::ChatMessage, &HookReply::Context("x".into()));
        assert!(check_answer(Some(HookEvent::SessionIdle), &ctx).is_err());
        assert!(check_answer(Some(HookEvent::ChatMessage), &HostAnswer { exit_code: 1, ..ctx }).is_err());
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
        assert!("Bogus".parse::<HookEvent>().is_err());
    }
}
