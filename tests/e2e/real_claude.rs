//! The real `claude` binary (Claude Code, from npm) against a scripted Anthropic Messages API
//! on 127.0.0.1: `/loopx <task>` in print mode sets the goal up through the installed hooks,
//! the model works the tick through loopx's MCP tools, the Stop driver keeps it going while
//! loopx says run and lets it stop when loopx says stop.
//!
//! Traffic stays on this machine: the fake API listens on 127.0.0.1, and Claude Code runs with
//! non-essential traffic, telemetry and the auto-updater off. `cargo xtask ci` installs the
//! pinned Claude Code under `target/claude-code/` when it is missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use loopx_tests::{Sandbox, events, loopx_bin};

pub(crate) fn claude_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOOPX_CLAUDE_BIN") {
        return PathBuf::from(p);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/claude-code/node_modules/.bin/claude");
    if local.exists() {
        return local;
    }
    which_on_path("claude").unwrap_or_else(|| {
        panic!(
            "Claude Code is not installed: run `cargo xtask ci` (it installs it under target/claude-code), \
             or `npm install --prefix target/claude-code @anthropic-ai/claude-code`"
        )
    })
}

fn which_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// One scripted assistant message: its content blocks and stop reason.
pub(crate) fn step(content: Value, stop: &str) -> (Value, String) {
    (content, stop.to_owned())
}

pub(crate) fn tool_use(n: usize, name: &str, input: Value) -> Value {
    json!([{"type": "tool_use", "id": format!("toolu_{n:02}"), "name": name, "input": input}])
}

pub(crate) fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

/// A fake Messages API: the main conversation (the request that offers loopx's MCP tools)
/// gets `script[k]` for its k-th assistant turn; anything else gets a short text.
pub(crate) struct FakeApi {
    pub(crate) port: u16,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
    /// Replies the next requests of the main conversation get instead of an answer.
    pub(crate) refusals: crate::fake_model::Refusals,
}

/// What the fake API answers a request: its content blocks and stop reason, or `None` for a
/// request of no interest (it gets a short text, and is not kept).
pub(crate) type Respond = dyn Fn(&Value) -> Option<(Value, String)> + Send + Sync;

fn sse(id: usize, content: &Value, stop: &str) -> String {
    let mut ev = vec![
        json!({"type": "message_start", "message": {"id": format!("msg_{id:04}"), "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ];
    for (i, block) in content.as_array().unwrap().iter().enumerate() {
        if block["type"] == "text" {
            ev.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
            ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}));
        } else {
            ev.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}));
            ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}));
        }
        ev.push(json!({"type": "content_block_stop", "index": i}));
    }
    ev.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}));
    ev.push(json!({"type": "message_stop"}));
    ev.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect()
}

fn serve(
    mut stream: TcpStream,
    respond: Arc<Respond>,
    requests: Arc<Mutex<Vec<Value>>>,
    ids: Arc<AtomicUsize>,
    refusals: crate::fake_model::Refusals,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut head = String::new();
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
        }
        let mut body = vec![0u8; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if head.starts_with("HEAD") {
            if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
                return;
            }
            continue;
        }
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (content, stop) = match respond(&req) {
            Some(_) if let Some(refusal) = refusals.take() => {
                if stream.write_all(refusal.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
            Some(answer) => {
                requests.lock().unwrap().push(req.clone());
                answer
            }
            None => (text("ok"), "end_turn".to_owned()),
        };
        let id = ids.fetch_add(1, Ordering::SeqCst);
        let (kind, payload) = if head.starts_with("POST") && req["stream"] == true {
            ("text/event-stream", sse(id, &content, &stop))
        } else if head.starts_with("POST") {
            let msg = json!({"id": format!("msg_{id:04}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": content, "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 5}});
            ("application/json", msg.to_string())
        } else {
            ("application/json", "{}".to_owned())
        };
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n{payload}",
            payload.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// How many assistant turns a request's conversation already has.
pub(crate) fn assistant_turns(req: &Value) -> usize {
    req["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

impl FakeApi {
    pub(crate) fn start(script: Vec<(Value, String)>) -> Self {
        Self::respond(move |req| {
            let main = req["tools"].as_array().is_some_and(|t| {
                t.iter().any(|t| t["name"].as_str().is_some_and(|n| n.starts_with("mcp__loopx__")))
            });
            main.then(|| {
                script
                    .get(assistant_turns(req))
                    .cloned()
                    .unwrap_or_else(|| (text("Nothing more to do."), "end_turn".to_owned()))
            })
        })
    }

    pub(crate) fn respond(
        respond: impl Fn(&Value) -> Option<(Value, String)> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<Respond> = Arc::new(respond);
        let (reqs, ids) = (requests.clone(), Arc::new(AtomicUsize::new(1)));
        let refusals = crate::fake_model::Refusals::default();
        let refuse = refusals.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (respond, reqs, ids, refuse) =
                    (respond.clone(), reqs.clone(), ids.clone(), refuse.clone());
                std::thread::spawn(move || serve(stream, respond, reqs, ids, refuse));
            }
        });
        Self { port, requests, refusals }
    }
}

/// Runs the real Claude Code in print mode on `prompt`, against the fake API, with loopx on
/// PATH and nothing of the machine's environment.
pub(crate) fn run_claude(claude: &Path, s: &Sandbox, api: &FakeApi, prompt: &str) -> std::process::Output {
    let bin_dir = loopx_bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    std::process::Command::new(claude)
        .args(["-p", prompt, "--permission-mode", "bypassPermissions"])
        .current_dir(&s.root)
        .env_clear()
        .env("HOME", &s.home)
        .env("PATH", &path)
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{}", api.port))
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("IS_SANDBOX", "1")
        .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Claude Code asks to trust a new workspace; a test trusts it the way its config does.
pub(crate) fn trust_workspace(s: &Sandbox) {
    let trust = json!({"hasCompletedOnboarding": true, "projects": {s.root.to_string_lossy(): {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}}});
    std::fs::write(s.home.join(".claude.json"), trust.to_string()).unwrap();
}

#[test]
fn real_claude_code_works_the_tick_and_the_stop_driver_ends_on_loopx_stop() {
    let claude = claude_bin();
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "polish the README", "--priority", "P2"]);
    s.ok(&["host", "install", "claude-code", "--stop-driver"]);
    trust_workspace(&s);

    let script = vec![
        // Turn 1, decided for t2 (the /loopx task, P1).
        step(tool_use(1, "mcp__loopx__should_run", json!({"turn_id": "turn-1"})), "tool_use"),
        step(
            tool_use(2, "mcp__loopx__claim_task", json!({"todo_id": "t2", "turn_id": "turn-1"})),
            "tool_use",
        ),
        step(
            tool_use(
                3,
                "mcp__loopx__complete_task",
                json!({"todo_id": "t2", "turn_id": "turn-1", "evidence": "hello.txt written and read back"}),
            ),
            "tool_use",
        ),
        step(text("t2 is done."), "end_turn"),
        // The Stop driver sends the model on to t1.
        step(
            tool_use(4, "mcp__loopx__claim_task", json!({"todo_id": "t1", "turn_id": "turn-2"})),
            "tool_use",
        ),
        step(
            tool_use(
                5,
                "mcp__loopx__complete_task",
                json!({"todo_id": "t1", "turn_id": "turn-2", "evidence": "README reviewed", "no_follow_up": true, "note": "nothing follows"}),
            ),
            "tool_use",
        ),
        step(text("Both todos are done."), "end_turn"),
    ];
    let api = FakeApi::start(script);
    let out = run_claude(&claude, &s, &api, "/loopx write hello");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Both todos are done."), "{stdout}");

    // The model saw loopx's answers: should_run selected t2, and the Stop driver named t1.
    let reqs = api.requests.lock().unwrap();
    let all = serde_json::to_string(&*reqs).unwrap();
    assert!(all.contains(r#"\"selected_todo\":{\"id\":\"t2\""#), "should_run's answer reached the model");
    assert!(all.contains("continue with t1"), "the Stop driver's instruction reached the model");

    // The state: both todos done with evidence, two slots spent, one stop-driver continuation.
    let list = s.json(&["todo", "list", "--all"]);
    for t in list["todos"].as_array().unwrap() {
        assert_eq!(t["status"], "done", "{t}");
    }
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 2);
    let kinds: Vec<String> =
        events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "stop_blocked").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "thread_bound").count(), 1);
    let end =
        s.json(&["quota", "should-run", "--agent-id", list["todos"][1]["claimed_by"].as_str().unwrap()]);
    assert_eq!(end["state"], "terminal");
}

/// The scripted model tries to answer its own gate from its Bash tool. Without `--harden`, the
/// command runs, inside Claude Code's tool environment: loopx sees the session, refuses a
/// person's decision, and the gate stays open. With `--harden`, the tool gate denies the call
/// before it runs, however the command hides loopx (here: unsetting the session's variables).
#[test]
fn real_claude_code_cannot_answer_its_own_gate() {
    let claude = claude_bin();
    for harden in [false, true] {
        let s = Sandbox::new();
        s.init();
        s.ok(&["todo", "add", "--text", "push the release"]);
        s.ok(&["gate", "ask", "--question", "May the agent push?", "--blocks", "goal"]);
        let mut install = vec!["host", "install", "claude-code", "--stop-driver"];
        if harden {
            install.push("--harden");
        }
        s.ok(&install);
        trust_workspace(&s);
        let command = if harden {
            "env -u CLAUDECODE -u CLAUDE_CODE_SESSION_ID loopx gate answer g1 --approve"
        } else {
            "loopx gate answer g1 --approve"
        };
        // A second agent: a command without --agent-id works only if loopx knows the session.
        s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
        let claim = json!({"command": "loopx todo claim --todo-id t1", "description": "claim"});
        let answer = json!({"command": command, "description": "approve the gate"});
        let script = vec![
            step(tool_use(1, "Bash", claim), "tool_use"),
            step(tool_use(2, "Bash", answer), "tool_use"),
            step(text("I could not approve it."), "end_turn"),
        ];
        let api = FakeApi::start(script);
        let out = run_claude(&claude, &s, &api, "/loopx");
        assert!(out.status.success(), "claude failed: {}", String::from_utf8_lossy(&out.stderr));
        let gates = s.json(&["gate", "list", "--all"]);
        assert_eq!(gates["gates"][0]["status"], "open", "harden={harden}: {gates}");
        assert!(gates["gates"][0].get("answered_by").is_none(), "{gates}");
        let reqs = serde_json::to_string(&*api.requests.lock().unwrap()).unwrap();
        assert!(reqs.contains("a person's decision"), "harden={harden}: the model was told why: {reqs}");
        let kinds: Vec<String> =
            events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect();
        assert!(!kinds.contains(&"gate_answered".to_owned()), "{kinds:?}");
        // The Bash tool's command acted as the agent /loopx bound to this very session.
        let me = s.json(&["agent", "list"])["agents"][1]["id"].as_str().unwrap().to_owned();
        assert!(me.starts_with("claude-"), "{me}");
        assert_eq!(s.json(&["todo", "show", "--todo-id", "t1"])["todo"]["claimed_by"], me.as_str());
    }
}
