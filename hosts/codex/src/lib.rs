//! Facts about Codex (checked against `codex-cli` 0.169.0): where its files live, what its
//! hooks receive and must print, how it decides to trust a hook, how it marks its agent's
//! commands, how its MCP client names the session, and how to find it. Reads and parses; never
//! writes; holds no loop policy.
//!
//! - `CODEX_HOME` (default `~/.codex`) holds `config.toml`, `hooks.json` and `skills/`; a
//!   project has `.agents/skills/` and `.codex/hooks.json` (the latter only for a project the
//!   user trusts in `config.toml`).
//! - Hooks have Claude Code's shape. stdin: `session_id`, `transcript_path`, `cwd`,
//!   `hook_event_name`, `model`, `permission_mode`; SessionStart adds `source`,
//!   UserPromptSubmit `prompt`, Stop `turn_id`, `stop_hook_active`, `last_assistant_message`.
//!   SessionStart and UserPromptSubmit pass `hookSpecificOutput.additionalContext` to the
//!   model; Stop `{"decision":"block","reason":R}` continues the turn with R (Codex never caps
//!   that: loopx must); exit code 1 is a failure that does not block.
//! - A hook runs only if trusted: `[hooks.state."<source file>:<event>:<group>:<handler>"]
//!   trusted_hash = "sha256:<hex>"` in the user's `config.toml`, the hex being SHA-256 of the
//!   compact, key-sorted JSON of the handler ([`trust_hash`]). A changed command is untrusted
//!   again; an untrusted hook is skipped silently.
//! - The shell tool (`exec_command`) runs `bash -lc` (a login shell resets `PATH`) with
//!   `CODEX_THREAD_ID` = `CODEX_SESSION_ID` = the hooks' `session_id`; hooks get no thread id in
//!   their environment. MCP servers get a filtered environment; each `tools/call` carries
//!   `params._meta.threadId`, and the client says `clientInfo.name = "codex-mcp-client"`.

pub mod drive;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use loopx_core::host::{
    AgentProcess, HookBinding, HookEventName, HookPoint, HookReply, HookSample, HookTable, HostAnswer,
    HostDriver, HostEvent, HostEventKind, HostProtocol, McpClient, ToolEffect, ToolEnv, parse_hook_stdin,
    printed_json, tool_call,
};
use loopx_core::{Error, Result};

/// The host's name in `loopx host …` and `loopx hook …`.
pub const HOST: &str = "codex";

/// The agent types of Codex's surfaces: the App (a heartbeat automation), the CLI (`/goal`,
/// hooks) and an IDE extension.
pub const APP: loopx_core::AgentType = loopx_core::AgentType::from_static("codex-app");
pub const CLI: loopx_core::AgentType = loopx_core::AgentType::from_static("codex-cli");
pub const IDE: loopx_core::AgentType = loopx_core::AgentType::from_static("codex-ide");

/// Where Codex keeps its configuration unless `CODEX_HOME` says otherwise (under the home).
pub const DEFAULT_HOME: &str = ".codex";
pub const HOME_ENV: &str = "CODEX_HOME";

/// Set in the environment of the commands the model runs (its shell tool), to the session id.
pub const THREAD_ENV: &str = "CODEX_THREAD_ID";

/// The agent's own process: the native `codex` binary, started by `node` running the npm
/// package's `bin/codex.js`.
pub const AGENT_PROGRAMS: &[&str] = &["codex"];
pub const NPM_PACKAGE: &str = "@openai/codex";

/// The MCP client's `clientInfo.name`, and the `_meta` key that names the session.
pub const MCP_CLIENT_NAME: &str = "codex-mcp-client";
pub const MCP_SESSION_META: &str = "threadId";

/// The longest `/goal` body the CLI and IDE accept.
pub const MAX_GOAL_CHARS: usize = 4000;

/// `$CODEX_HOME`, or `~/.codex`.
pub fn codex_home(home: &Path, get: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    get(HOME_ENV).map_or_else(|| home.join(DEFAULT_HOME), PathBuf::from)
}

/// How the model sees an MCP server's tool: `mcp__<server>` is a namespace holding it.
pub fn mcp_tool(server: &str, tool: &str) -> String {
    format!("mcp__{server}.{tool}")
}

/// The hook events loopx answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    Stop,
    /// Before a tool runs (`--harden`): `tool_name`, `tool_input`; denied with
    /// `hookSpecificOutput.permissionDecision = "deny"` and a non-empty reason.
    PreToolUse,
}

/// Codex's hook events: the name it gives each, loopx's command line's, and the hook point
/// each one is.
pub const HOOKS: HookTable<HookEvent> = HookTable {
    host: "Codex",
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
        HookBinding { event: HookEvent::Stop, native: "Stop", cli: "stop", point: HookPoint::Stop },
        HookBinding {
            event: HookEvent::PreToolUse,
            native: "PreToolUse",
            cli: "pre-tool-use",
            point: HookPoint::ToolGate,
        },
    ],
};

impl HookEvent {
    pub const ALL: [HookEvent; 4] =
        [HookEvent::SessionStart, HookEvent::UserPromptSubmit, HookEvent::Stop, HookEvent::PreToolUse];

    /// The event's name in trust keys (`session_start`).
    pub fn state_name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::Stop => "stop",
            HookEvent::PreToolUse => "pre_tool_use",
        }
    }
}

/// What a hook receives on stdin. Unknown fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HookInput {
    pub session_id: String,
    pub turn_id: Option<String>,
    pub transcript_path: Option<String>,
    pub cwd: Option<String>,
    pub hook_event_name: Option<String>,
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub source: Option<String>,
    pub prompt: Option<String>,
    pub stop_hook_active: bool,
    pub last_assistant_message: Option<String>,
    pub tool_name: Option<String>,
    pub tool_input: Option<Value>,
}

/// Parses hook stdin ([`parse_hook_stdin`]: one bounded JSON object).
pub fn parse_input(bytes: &[u8]) -> Result<HookInput> {
    parse_hook_stdin(bytes)
}

/// One command handler in `hooks.json`, as Codex's trust hash covers it.
pub fn handler(command: &str, timeout: u64) -> Value {
    json!({"type": "command", "command": command, "timeout": timeout})
}

/// The hash Codex trusts a hook by: SHA-256 of the compact JSON of the event, the handler
/// (with `async: false` and the timeout, 600 when unset), and the group's matcher if any, keys
/// sorted, as `sha256:<hex>`.
pub fn trust_hash(event: HookEvent, command: &str, timeout: u64, matcher: Option<&str>) -> String {
    // Keys are written in sorted order: the map keeps insertion order.
    let mut v = json!({
        "event_name": event.state_name(),
        "hooks": [{"async": false, "command": command, "timeout": timeout, "type": "command"}],
    });
    if let (Some(m), Some(o)) = (matcher, v.as_object_mut()) {
        o.insert("matcher".to_owned(), json!(m));
    }
    let digest = Sha256::digest(v.to_string().as_bytes());
    format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The key of a hook's trust entry: its source file, event, group and handler index.
pub fn trust_key(source: &Path, event: HookEvent, group: usize, handler: usize) -> String {
    format!("{}:{}:{group}:{handler}", source.display(), event.state_name())
}

/// Classifies a `PreToolUse` call: the shell tool is `Bash` with `tool_input.command`, a patch
/// is `apply_patch` with the patch in `tool_input.command`, an MCP tool is `mcp__<server>__<tool>`.
/// An input that is not an object, or lacks the command, is an error: the gate denies it.
pub fn tool_effect(name: &str, input: Option<&Value>) -> Result<ToolEffect> {
    let command = || loopx_core::host::tool_input_str(name, input, "command");
    loopx_core::host::tool_input(name, input)?;
    Ok(match name {
        "Bash" => ToolEffect::Shell(command()?),
        "apply_patch" => {
            let paths = patch_paths(&command()?);
            if paths.is_empty() {
                return Err(Error::usage("an apply_patch call names no file loopx can read").with_hint(
                    "a patch names each file: *** Add File:, *** Update File:, *** Delete File:",
                ));
            }
            ToolEffect::Edits(paths)
        }
        "view_image" | "get_goal" | "web_search" | "request_user_input" | "update_plan" => {
            ToolEffect::ReadOnly
        }
        // loopx's own tools are governed by the kernel itself.
        n if n.starts_with("mcp__loopx__") => ToolEffect::ReadOnly,
        _ => ToolEffect::Other,
    })
}

/// The files a Codex patch adds, changes, deletes or moves to.
pub fn patch_paths(patch: &str) -> Vec<String> {
    const HEADS: [&str; 4] = ["*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "];
    patch
        .lines()
        .filter_map(|l| HEADS.iter().find_map(|h| l.strip_prefix(h)))
        .map(|p| p.trim().to_owned())
        .collect()
}

/// Codex's protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Codex;

impl HostProtocol for Codex {
    fn host(&self) -> &'static str {
        HOST
    }
    fn binaries(&self) -> &'static [&'static str] {
        AGENT_PROGRAMS
    }
    fn tool_env(&self) -> Option<ToolEnv> {
        Some(ToolEnv { marker: THREAD_ENV, session: Some(THREAD_ENV) })
    }
    fn agent_process(&self) -> Option<AgentProcess> {
        Some(AgentProcess { programs: AGENT_PROGRAMS, packages: &[NPM_PACKAGE] })
    }
    fn mcp_client(&self) -> Option<McpClient> {
        Some(McpClient { name: MCP_CLIENT_NAME, session_meta: MCP_SESSION_META })
    }
    fn host_home(&self, home: &Path, get: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        Some(codex_home(home, get))
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
            HookEvent::Stop => HostEventKind::Stop,
            HookEvent::PreToolUse => {
                tool_call("PreToolUse", input.tool_name.as_deref(), input.tool_input.as_ref(), tool_effect)?
            }
        };
        Ok(HostEvent {
            session: input.session_id.clone(),
            cwd: input.cwd.as_deref().map(PathBuf::from),
            kind,
        })
    }

    /// A reply the event cannot carry is nothing.
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
            // Codex refuses an empty reason; "allow" and "ask" it does not support: passing is
            // saying nothing.
            (HookEvent::PreToolUse, HookReply::Deny(reason)) => {
                let reason = if reason.trim().is_empty() { "loopx denies this tool call" } else { reason };
                HostAnswer::print(
                    json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}})
                        .to_string(),
                )
            }
            _ => HostAnswer::default(),
        }
    }

    fn tool_name(&self, tool: &str) -> String {
        mcp_tool("loopx", tool)
    }

    /// Fixture stdin for every event, as Codex 0.169 sends it.
    fn samples(&self) -> Vec<HookSample> {
        let session = "01a22c26-c833-7ee1-9b5d-c26b06462ba8";
        let base = |event: &str| {
            json!({"session_id": session, "transcript_path": "/home/u/.codex/sessions/2026/11/30/rollout.jsonl",
                   "cwd": "/home/u/p", "hook_event_name": event, "model": "gpt-5.5", "permission_mode": "default"})
        };
        let with = |event: &str, extra: Value| {
            let mut v = base(event);
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v.to_string()
        };
        let ev =
            |kind| HostEvent { session: session.to_owned(), cwd: Some(PathBuf::from("/home/u/p")), kind };
        vec![
            HookSample {
                event: "session-start",
                stdin: with("SessionStart", json!({"source": "startup"})),
                expected: ev(HostEventKind::SessionStart),
            },
            HookSample {
                event: "user-prompt-submit",
                stdin: with(
                    "UserPromptSubmit",
                    json!({"turn_id": "01a22c26-c850", "prompt": "$loopx write the parser"}),
                ),
                expected: ev(HostEventKind::PromptSubmitted { prompt: "$loopx write the parser".to_owned() }),
            },
            HookSample {
                event: "stop",
                stdin: with(
                    "Stop",
                    json!({"turn_id": "01a22c26-c850-7080-b2e8-065af11c7016", "stop_hook_active": false, "last_assistant_message": "done"}),
                ),
                expected: ev(HostEventKind::Stop),
            },
            HookSample {
                event: "pre-tool-use",
                stdin: with(
                    "PreToolUse",
                    json!({"turn_id": "01a22c26-c850", "tool_name": "Bash", "tool_input": {"command": "cargo test"}, "tool_use_id": "call_1"}),
                ),
                expected: ev(HostEventKind::ToolCall {
                    tool: "Bash".to_owned(),
                    effect: ToolEffect::Shell("cargo test".to_owned()),
                }),
            },
            HookSample {
                event: "pre-tool-use",
                stdin: with(
                    "PreToolUse",
                    json!({"turn_id": "01a22c26-c850", "tool_name": "apply_patch", "tool_input": {"command": "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** End Patch\n"}, "tool_use_id": "call_2"}),
                ),
                expected: ev(HostEventKind::ToolCall {
                    tool: "apply_patch".to_owned(),
                    effect: ToolEffect::Edits(vec!["src/a.rs".to_owned()]),
                }),
            },
        ]
    }

    /// Whether `a` is an answer Codex accepts without blocking by accident.
    fn check_answer(&self, point: Option<HookPoint>, a: &HostAnswer) -> Result<()> {
        let event = point.and_then(|p| HOOKS.for_point(p).ok());
        let bad = |why: String| Err(Error::internal(format!("not a valid Codex answer: {why}")));
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
            Some(HookEvent::PreToolUse) => {
                out["hookEventName"] == "PreToolUse"
                    && out["permissionDecision"] == "deny"
                    && out["permissionDecisionReason"].as_str().is_some_and(|r| !r.trim().is_empty())
            }
            Some(e) => out["hookEventName"] == HOOKS.native(e) && out["additionalContext"].is_string(),
            None => false,
        };
        if ok { Ok(()) } else { bad(format!("{event:?} does not read {}", a.stdout)) }
    }

    fn driver(&self) -> Option<&dyn HostDriver> {
        Some(&drive::CodexDriver)
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

    /// Pinned from the real binary: `codex app-server`'s `hooks/list` reported these
    /// `currentHash` values for these handlers (0.169.0).
    #[test]
    fn the_trust_hash_is_the_one_codex_computes() {
        assert_eq!(
            trust_hash(HookEvent::Stop, "loopx hook codex stop", 30, None),
            "sha256:7396377e2fdcb620d12e833fbaf38afcf50842156390d56f7702818508bb6c8b"
        );
        assert_eq!(
            trust_hash(HookEvent::SessionStart, "loopx hook codex session-start", 30, None),
            "sha256:145285547923468be7eed8fbf21a4a018b5ebcc299197f7b77221eba32d2cc8b"
        );
        assert_ne!(
            trust_hash(HookEvent::Stop, "loopx hook codex stop ", 30, None),
            trust_hash(HookEvent::Stop, "loopx hook codex stop", 30, None),
            "a changed command is another hook"
        );
        assert_eq!(
            trust_key(Path::new("/h/.codex/hooks.json"), HookEvent::Stop, 1, 0),
            "/h/.codex/hooks.json:stop:1:0"
        );
    }

    #[test]
    fn input_and_answers() {
        let h = parse_input(br#"{"session_id":"s","cwd":"/p","turn_id":"t","new_field":[1]}"#).unwrap();
        assert_eq!((h.session_id.as_str(), h.turn_id.as_deref()), ("s", Some("t")));
        for bad in [&b""[..], b"[1]", br#"{"session_id": 1}"#] {
            assert!(parse_input(bad).is_err());
        }
        assert_eq!(
            Codex.encode(HookPoint::Stop, &HookReply::Continue("go".into())).stdout,
            r#"{"decision":"block","reason":"go"}"#
        );
        assert!(Codex.check_answer(Some(HookPoint::Stop), &Codex.fail_open(None, "x")).is_ok());
        assert!(
            Codex
                .check_answer(
                    Some(HookPoint::Stop),
                    &HostAnswer { exit_code: 2, ..Codex.fail_open(None, "x") }
                )
                .is_err()
        );
        assert_eq!(codex_home(Path::new("/h"), &|_| None), PathBuf::from("/h/.codex"));
        assert_eq!(codex_home(Path::new("/h"), &|_| Some("/c".into())), PathBuf::from("/c"));
    }
}
