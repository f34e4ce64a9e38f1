//! The real `codex` binary (Codex CLI, from npm) against a scripted Responses API on 127.0.0.1.
//! `loopx host install codex --with-hooks --trust-hooks --with-mcp` wires it; `$loopx <task>`
//! joins through the UserPromptSubmit hook; the model works the tick through its shell tool and
//! through loopx's MCP tools; the Stop hook continues the turn while loopx says run, lets it end
//! when loopx says stop or a person must answer, and never past loopx's own cap.
//!
//! Traffic stays on this machine: the fake API listens on 127.0.0.1 and Codex runs with
//! analytics off. `cargo xtask ci` installs the pinned Codex under `target/codex/`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use loopx_tests::{Sandbox, events, loopx_bin};

pub(crate) fn codex_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOOPX_CODEX_BIN") {
        return PathBuf::from(p);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/codex/node_modules/.bin/codex");
    assert!(
        local.exists(),
        "Codex is not installed: run `cargo xtask ci` (it installs it under target/codex), \
         or `npm install --prefix target/codex @openai/codex@0.169.0`"
    );
    local
}

/// One scripted model turn: the output items of one response.
type Step = Vec<Value>;

pub(crate) fn shell(n: usize, cmd: &str) -> Step {
    vec![
        json!({"type": "function_call", "call_id": format!("call_{n}"), "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()}),
    ]
}

pub(crate) fn mcp(n: usize, tool: &str, args: Value) -> Step {
    vec![
        json!({"type": "function_call", "call_id": format!("call_{n}"), "namespace": "mcp__loopx", "name": tool, "arguments": args.to_string()}),
    ]
}

pub(crate) fn say(text: &str) -> Step {
    vec![json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})]
}

/// A fake Responses API: the k-th request gets `script[k]`, then a short message.
pub(crate) struct FakeApi {
    pub(crate) port: u16,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
    /// Replies the next `/responses` requests get instead of an answer.
    pub(crate) refusals: crate::fake_model::Refusals,
}

/// What the fake API answers the `n`-th request (from 0): the output items.
pub(crate) type Respond = dyn Fn(&Value, usize) -> Step + Send + Sync;

fn sse(n: usize, items: &[Value]) -> String {
    let mut ev = vec![json!({"type": "response.created", "response": {"id": format!("resp_{n}")}})];
    for (k, item) in items.iter().enumerate() {
        let mut item = item.clone();
        item["id"] = json!(format!("item_{n}_{k}"));
        ev.push(json!({"type": "response.output_item.done", "output_index": k, "item": item}));
    }
    ev.push(json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "usage": {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}));
    ev.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect()
}

fn serve(
    mut stream: TcpStream,
    respond: Arc<Respond>,
    requests: Arc<Mutex<Vec<Value>>>,
    next: Arc<AtomicUsize>,
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
        if head.starts_with("POST")
            && head.contains("/responses")
            && let Some(refusal) = refusals.take()
        {
            if stream.write_all(refusal.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let (kind, payload) = if head.starts_with("POST") && head.contains("/responses") {
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let n = next.fetch_add(1, Ordering::SeqCst);
            let items = respond(&req, n);
            requests.lock().unwrap().push(req);
            ("text/event-stream", sse(n, &items))
        } else {
            ("application/json", json!({"models": [], "data": []}).to_string())
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

impl FakeApi {
    pub(crate) fn start(script: Vec<Step>) -> Self {
        Self::respond(move |_, n| script.get(n).cloned().unwrap_or_else(|| say("Nothing more to do.")))
    }

    pub(crate) fn respond(respond: impl Fn(&Value, usize) -> Step + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<Respond> = Arc::new(respond);
        let (reqs, next) = (requests.clone(), Arc::new(AtomicUsize::new(0)));
        let refusals = crate::fake_model::Refusals::default();
        let refuse = refusals.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (respond, reqs, next, refuse) =
                    (respond.clone(), reqs.clone(), next.clone(), refuse.clone());
                std::thread::spawn(move || serve(stream, respond, reqs, next, refuse));
            }
        });
        Self { port, requests, refusals }
    }

    pub(crate) fn all(&self) -> String {
        serde_json::to_string(&*self.requests.lock().unwrap()).unwrap()
    }
}

pub(crate) fn codex_home(s: &Sandbox) -> PathBuf {
    s.home.join(".codex")
}

/// A Codex home that talks only to the fake API, with loopx installed in it.
pub(crate) fn setup(s: &Sandbox, api: &FakeApi) {
    setup_with(s, api, "gpt-test", &[]);
}

/// [`setup`] for `model` (one Codex knows offers more tools: `apply_patch` for gpt-5.5), with
/// more install flags; again on the same sandbox, it points Codex at another fake API.
pub(crate) fn setup_with(s: &Sandbox, api: &FakeApi, model: &str, flags: &[&str]) {
    let home = codex_home(s);
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        "# the user's own settings\nmodel = \"{model}\"   # a local fake\nmodel_provider = \"fake\"\nanalytics = {{ enabled = false }}\n\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_API_KEY\"\n",
        api.port
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    let mut args =
        vec!["host", "install", "codex", "--scope", "user", "--with-hooks", "--trust-hooks", "--with-mcp"];
    args.extend_from_slice(flags);
    let r = s.run_with(&args, b"", &[("CODEX_HOME", home.to_str().unwrap())]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

pub(crate) fn run_codex(s: &Sandbox, prompt: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(codex_bin());
    cmd.args(["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt])
        .current_dir(&s.root)
        .env_clear()
        .env("HOME", &s.home)
        .env("CODEX_HOME", codex_home(s))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("FAKE_API_KEY", "not-a-key")
        .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root())
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

pub(crate) fn kinds(s: &Sandbox) -> Vec<String> {
    events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn real_codex_joins_works_two_todos_and_stops_on_loopx_stop() {
    let s = Sandbox::new();
    let loopx = loopx_bin().display().to_string();
    let l = |rest: &str| format!("{loopx} {rest}");
    let script = vec![
        // Turn 1 through the shell tool, as the $loopx skill teaches.
        shell(1, &l("quota should-run --turn-instance-id turn-1 --json")),
        shell(2, &l("todo claim --todo-id t1 --turn-instance-id turn-1")),
        shell(
            3,
            &l(
                "todo complete --todo-id t1 --turn-instance-id turn-1 --evidence 'parser tests pass' --next-todo 'fuzz the parser'",
            ),
        ),
        shell(
            4,
            &l(
                "refresh-state --todo-id t1 --turn-instance-id turn-1 --classification implement --delivery-outcome outcome_progress",
            ),
        ),
        shell(5, &l("quota spend-slot --todo-id t1 --turn-instance-id turn-1")),
        say("t1 is done."),
        // The Stop hook sends the model on to t2; turn 2 through the MCP tools.
        mcp(6, "claim_task", json!({"todo_id": "t2", "turn_id": "turn-2"})),
        mcp(
            7,
            "complete_task",
            json!({"todo_id": "t2", "turn_id": "turn-2", "evidence": "fuzzed for a minute", "no_follow_up": true, "note": "nothing follows"}),
        ),
        say("Both todos are done."),
    ];
    let api = FakeApi::start(script);
    setup(&s, &api);
    let out = run_codex(&s, "$loopx write the parser", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "codex failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Both todos are done."), "{stdout}");

    let all = api.all();
    assert!(all.contains("loopx: one governed turn at a time"), "$loopx injected the skill");
    assert!(all.contains("this session is agent codex-"), "the UserPromptSubmit hook joined the session");
    assert!(all.contains("continue with t2"), "the Stop hook's instruction reached the model");
    let list = s.json(&["todo", "list", "--all"]);
    let todos = list["todos"].as_array().unwrap();
    assert_eq!(todos.len(), 2, "{list}");
    let agent = todos[0]["claimed_by"].as_str().unwrap().to_owned();
    assert!(agent.starts_with("codex-"), "{list}");
    for t in todos {
        assert_eq!(
            (t["status"].as_str(), t["claimed_by"].as_str()),
            (Some("done"), Some(agent.as_str())),
            "{t}"
        );
    }
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    let q = s.json(&["quota", "status"]);
    assert_eq!(q["quota"]["used_slots"], 2, "one spend per turn: {q}");
    let k = kinds(&s);
    assert_eq!(k.iter().filter(|k| *k == "stop_blocked").count(), 1, "{k:?}");
    assert!(k.contains(&"turn_settled".to_owned()), "{k:?}");
    let end = s.json(&["quota", "should-run", "--agent-id", &agent]);
    assert_eq!(end["state"], "terminal");
}

#[test]
fn real_codex_a_model_that_never_finishes_is_stopped_by_loopx_s_cap() {
    let s = Sandbox::new();
    let api = FakeApi::start(vec![]);
    setup(&s, &api);
    let out = run_codex(&s, "$loopx write the parser", &[("LOOPX_STOP_CAP", "3")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let k = kinds(&s);
    assert_eq!(k.iter().filter(|k| *k == "stop_blocked").count(), 3, "loopx's own cap ends it: {k:?}");
    assert_eq!(api.requests.lock().unwrap().len(), 4, "the first turn and three continuations");
}

#[test]
fn real_codex_ends_at_once_on_a_goal_wide_gate_with_the_question_shown() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "push the release"]);
    s.ok(&["gate", "ask", "--question", "May the agent push to main?", "--blocks", "goal"]);
    let api = FakeApi::start(vec![say("I need your answer first.")]);
    setup(&s, &api);
    let out = run_codex(&s, "$loopx", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(api.requests.lock().unwrap().len(), 1, "no continuation while a person must answer");
    assert!(api.all().contains("May the agent push to main?"), "the question reached the model");
    assert!(!kinds(&s).contains(&"stop_blocked".to_owned()));
}

/// The hooks run only because loopx trusted them: change the joining hook's command by one
/// byte and Codex skips it (as untrusted), so `$loopx` joins nothing.
#[test]
fn real_codex_skips_a_hook_whose_command_no_longer_matches_its_trust() {
    let s = Sandbox::new();
    let api = FakeApi::start(vec![say("Nothing happened.")]);
    setup(&s, &api);
    let hooks = codex_home(&s).join("hooks.json");
    let text = std::fs::read_to_string(&hooks)
        .unwrap()
        .replace("hook codex user-prompt-submit", "hook codex user-prompt-submit ");
    std::fs::write(&hooks, text).unwrap();
    let out = run_codex(&s, "$loopx write the parser", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!s.state_dir().exists(), "the untrusted hook never ran: no goal was set up");
    assert!(!api.all().contains("this session is agent codex-"));
}

/// A patch through Codex's `apply_patch` tool (offered to models Codex knows, such as gpt-5.5).
fn patch(n: usize, file: &str) -> Step {
    let input = format!("*** Begin Patch\n*** Add File: {file}\n+hi\n*** End Patch\n");
    vec![
        json!({"type": "custom_tool_call", "call_id": format!("call_{n}"), "name": "apply_patch", "input": input}),
    ]
}

/// What Codex's model was told a tool call gave back, by call id.
fn tool_output(api: &FakeApi, call: &str) -> String {
    let all: Value = serde_json::from_str(&api.all()).unwrap();
    let items =
        all.as_array().unwrap().iter().flat_map(|r| r["input"].as_array().cloned().unwrap_or_default());
    items
        .filter(|i| i["call_id"] == call && i["type"].as_str().is_some_and(|t| t.ends_with("_output")))
        .map(|i| i["output"].to_string())
        .next()
        .unwrap_or_default()
}

#[test]
fn real_codex_cannot_answer_a_persons_gate_however_the_command_is_spelled() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    let loopx = loopx_bin().display().to_string();
    // Without the tool gate: the kernel knows the command is the agent's from who started it,
    // whatever its environment lost.
    let shed = format!("env -u CODEX_THREAD_ID -u CODEX_SESSION_ID {loopx} gate answer g1 --approve");
    let api = FakeApi::start(vec![shell(1, &shed)]);
    setup_with(&s, &api, "gpt-5.5", &[]);
    let out = run_codex(&s, "answer it", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tool_output(&api, "call_1").contains("a person's decision"), "{}", tool_output(&api, "call_1"));
    assert_eq!(s.json(&["gate", "list"])["gates"][0]["status"], "open");

    // With it (--harden): the line never runs; a patch to loopx's state is denied, another passes.
    let spelled = format!("unset CODEX_THREAD_ID; X=answer; {loopx} gate $X g1 --approve");
    let api = FakeApi::start(vec![
        shell(1, &spelled),
        patch(2, ".loopx/goals/main/forged.json"),
        patch(3, "hello.txt"),
    ]);
    setup_with(&s, &api, "gpt-5.5", &["--harden"]);
    let out = run_codex(&s, "answer it", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let denied = tool_output(&api, "call_1");
    assert!(denied.contains("is a person's decision, not an agent's"), "the tool gate denied it: {denied}");
    assert!(tool_output(&api, "call_2").contains("loopx's state"), "{}", tool_output(&api, "call_2"));
    assert!(!s.root.join(".loopx/goals/main/forged.json").exists());
    assert!(s.root.join("hello.txt").exists(), "{}", tool_output(&api, "call_3"));
    assert_eq!(s.json(&["gate", "list"])["gates"][0]["status"], "open");
    assert!(!kinds(&s).contains(&"gate_answered".to_owned()));
}
