//! The real `opencode` binary (OpenCode, from npm) against a scripted chat-completions API on
//! 127.0.0.1. `loopx host install opencode` wires it: `/loopx <task>` joins through the
//! plugin's message hook; the model works through loopx's MCP tools and its bash tool (whose
//! commands the plugin tells their session); the plugin's loop driver continues the session
//! while loopx says run and lets it end when loopx says stop or a person must answer; the tool
//! gate refuses a person's decision.
//!
//! Traffic stays on this machine: the fake API listens on 127.0.0.1; OpenCode runs with its
//! model list fetch and auto-update off, and npm offline (so it does not wait for the registry
//! to install its plugin package). `cargo xtask ci` installs the pinned OpenCode under
//! `target/opencode/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::fake_model::FakeModel;
use loopx_tests::{Sandbox, events, loopx_bin};

pub(crate) fn opencode_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOOPX_OPENCODE_BIN") {
        return PathBuf::from(p);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/opencode/node_modules/.bin/opencode");
    assert!(
        local.exists(),
        "OpenCode is not installed: run `cargo xtask ci` (it installs it under target/opencode), \
         or `npm install --prefix target/opencode opencode-ai@1.18.33`"
    );
    local
}

/// One scripted model turn: a tool call (name, arguments), or a text.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    Call(String, Value),
    Say(String),
}

pub(crate) fn call(name: &str, args: Value) -> Step {
    Step::Call(name.to_owned(), args)
}

pub(crate) fn bash(command: &str) -> Step {
    call("bash", json!({"command": command, "description": "loopx"}))
}

pub(crate) fn say(text: &str) -> Step {
    Step::Say(text.to_owned())
}

fn assistant_turns(req: &Value) -> usize {
    req["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// A fake chat-completions API: the main conversation (a request that offers tools) gets
/// `step(request)`; the title request gets a title.
pub(crate) fn fake_api_with(step: impl Fn(&Value) -> Step + Send + Sync + 'static) -> FakeModel {
    FakeModel::start(move |path, req| {
        if !path.contains("/chat/completions") {
            return ("application/json", json!({"object": "list", "data": []}).to_string(), false);
        }
        let main = req["tools"].as_array().is_some_and(|t| !t.is_empty());
        let next = if main { step(req) } else { say("A title") };
        let n = assistant_turns(req);
        let base = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk", "created": 1, "model": "fake-model"});
        let chunk = |choice: Value, usage: Option<Value>| {
            let mut c = base.clone();
            c["choices"] = json!([choice]);
            if let Some(u) = usage {
                c["usage"] = u;
            }
            format!("data: {c}\n\n")
        };
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107});
        let (delta, finish) = match &next {
            Step::Call(name, args) => (
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_{n}"), "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}),
                "tool_calls",
            ),
            Step::Say(text) => (json!({"role": "assistant", "content": text}), "stop"),
        };
        let body = chunk(json!({"index": 0, "delta": delta}), None)
            + &chunk(json!({"index": 0, "delta": {}, "finish_reason": finish}), Some(usage))
            + "data: [DONE]\n\n";
        ("text/event-stream", body, main)
    })
}

/// [`fake_api_with`] the main conversation's k-th assistant turn `script[k]`, then a text.
pub(crate) fn fake_api(script: Vec<Step>) -> FakeModel {
    fake_api_with(move |req| {
        script.get(assistant_turns(req)).cloned().unwrap_or_else(|| say("Nothing more to do."))
    })
}

/// The project's own `opencode.json`: a provider that is the fake API.
pub(crate) fn project_config(s: &Sandbox, api: &FakeModel) {
    let config = json!({"$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "fake",
            "options": {"baseURL": format!("http://127.0.0.1:{}/v1", api.port), "apiKey": "not-a-key"},
            "models": {"fake-model": {}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": false, "share": "disabled"});
    std::fs::write(s.root.join("opencode.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// The environment OpenCode runs offline in.
pub(crate) fn offline_env() -> Vec<(&'static str, String)> {
    vec![
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
        // Seeing a plugin, OpenCode installs its plugin package from npm first: offline, at once.
        ("npm_config_offline", "true".to_owned()),
    ]
}

/// Runs the real OpenCode once (`opencode run <args>`), in the project, against the fake API,
/// with loopx on PATH and nothing of the machine's environment; `stdin` is the prompt.
pub(crate) fn run_opencode(
    s: &Sandbox,
    args: &[&str],
    stdin: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    use std::io::Write;
    let mut child = opencode(s, env)
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// `opencode serve` on the project: where the plugin's loop driver continues a session (a
/// one-shot `opencode run` ends as its session goes idle). Stopped when dropped.
pub(crate) struct Server {
    child: std::process::Child,
    pub(crate) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn opencode(s: &Sandbox, env: &[(&str, &str)]) -> std::process::Command {
    let bin_dir = loopx_bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(opencode_bin());
    cmd.current_dir(&s.root)
        .env_clear()
        .env("HOME", &s.home)
        .env("PATH", &path)
        .envs(offline_env())
        // OpenCode runs its tools in `$PWD`, not in its working directory.
        .env("PWD", &s.root)
        .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

pub(crate) fn serve(s: &Sandbox, env: &[(&str, &str)]) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = opencode(s, env)
        .args(["serve", "--hostname", "127.0.0.1", "--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, url: format!("http://127.0.0.1:{port}") };
    until("opencode serve listens", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    server
}

/// Waits (at most 90 s) until `done`, checking every 50 ms.
pub(crate) fn until(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < std::time::Duration::from_secs(90), "gave up waiting: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// That nothing more reaches the model for a while: the loop driver has let the session stop.
fn stays_quiet(api: &FakeModel, requests: usize) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(1500) {
        assert_eq!(api.requests.lock().unwrap().len(), requests, "the session went on");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub(crate) fn setup(s: &Sandbox, api: &FakeModel, flags: &[&str]) {
    project_config(s, api);
    let mut args = vec!["host", "install", "opencode"];
    args.extend_from_slice(flags);
    s.ok(&args);
}

fn kinds(s: &Sandbox) -> Vec<String> {
    events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
}

fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "opencode failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn real_opencode_joins_works_two_todos_through_the_plugins_driver_and_stops_on_loopx_stop() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "polish the README", "--priority", "P2"]);
    // A second agent: a bash command without --agent-id works only if loopx knows the session.
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    let script = vec![
        call("loopx_should_run", json!({"turn_id": "turn-1"})),
        bash("loopx todo claim --todo-id t2"),
        call(
            "loopx_complete_task",
            json!({"todo_id": "t2", "turn_id": "turn-1", "evidence": "hello.txt written and read back"}),
        ),
        say("t2 is done."),
        call("loopx_claim_task", json!({"todo_id": "t1", "turn_id": "turn-2"})),
        call(
            "loopx_complete_task",
            json!({"todo_id": "t1", "turn_id": "turn-2", "evidence": "README reviewed", "no_follow_up": true, "note": "nothing follows"}),
        ),
        say("Both todos are done."),
    ];
    let api = fake_api(script);
    setup(&s, &api, &["--with", "stop-driver"]);
    let server = serve(&s, &[]);
    // The attached run ends at the session's first idle; the server's plugin goes on.
    ok(&run_opencode(&s, &["--attach", &server.url, "--command", "loopx", "write", "hello"], "", &[]));
    until("the second todo's turn", || api.requests.lock().unwrap().len() == 7);
    stays_quiet(&api, 7);
    drop(server);

    let all = api.all();
    assert!(all.contains("this session is agent opencode-"), "the /loopx context reached the model: {all}");
    assert!(all.contains(r#"\"selected_todo\":{\"id\":\"t2\""#), "should_run's answer reached the model");
    assert!(all.contains("continue with t1"), "the plugin's driver sent loopx's instruction on");
    let agents = s.json(&["agent", "list"]);
    let me = agents["agents"][1]["id"].as_str().unwrap().to_owned();
    assert!(me.starts_with("opencode-"), "{agents}");
    let list = s.json(&["todo", "list", "--all"]);
    for t in list["todos"].as_array().unwrap() {
        assert_eq!((&t["status"], t["claimed_by"].as_str()), (&json!("done"), Some(me.as_str())), "{t}");
    }
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 2, "one spend per turn");
    assert_eq!(kinds(&s).iter().filter(|k| *k == "stop_blocked").count(), 1);
    assert_eq!(s.json(&["quota", "should-run", "--agent-id", &me])["state"], "terminal");
}

#[test]
fn real_opencode_a_model_that_never_finishes_is_stopped_by_loopx_s_cap() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "an endless task"]);
    let api = fake_api(Vec::new());
    setup(&s, &api, &["--with", "stop-driver"]);
    let server = serve(&s, &[("LOOPX_STOP_CAP", "2")]);
    ok(&run_opencode(&s, &["--attach", &server.url], "/loopx", &[]));
    until("two continuations", || api.requests.lock().unwrap().len() == 3);
    stays_quiet(&api, 3);
    assert_eq!(kinds(&s).iter().filter(|k| *k == "stop_blocked").count(), 2);
}

#[test]
fn real_opencode_ends_at_once_on_a_goal_wide_gate_with_the_question_shown() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "push the release"]);
    s.ok(&["gate", "ask", "--question", "May the agent push to main?", "--blocks", "goal"]);
    let api = fake_api(vec![say("I will wait for the user.")]);
    setup(&s, &api, &["--with", "stop-driver"]);
    let server = serve(&s, &[]);
    ok(&run_opencode(&s, &["--attach", &server.url, "--command", "loopx"], "", &[]));
    stays_quiet(&api, 1);
    assert!(api.all().contains("May the agent push to main?"), "the question reached the model");
    assert!(!kinds(&s).contains(&"stop_blocked".to_owned()));
}

/// A question a person asks while the session works stops it, and the model is shown the
/// question once before it ends (the plugin's driver continues it that one time); the
/// `/loopx` entry names the goal's objective.
#[test]
fn real_opencode_is_shown_a_question_asked_mid_session_once_and_then_ends() {
    let s = Sandbox::new();
    s.init();
    let person = s.person();
    let api = fake_api_with(move |req| match assistant_turns(req) {
        0 => call("loopx_should_run", json!({"turn_id": "turn-1"})),
        1 => {
            let r = person(&["gate", "ask", "--question", "May the agent push to main?", "--blocks", "goal"]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            say("Pushing next.")
        }
        _ => say("I will wait for the user."),
    });
    setup(&s, &api, &["--with", "stop-driver"]);
    let server = serve(&s, &[]);
    ok(&run_opencode(
        &s,
        &["--attach", &server.url, "--command", "loopx", "push", "the", "release"],
        "",
        &[],
    ));
    until("the question's turn", || api.requests.lock().unwrap().len() == 3);
    stays_quiet(&api, 3);
    drop(server);
    let all = api.all();
    assert!(all.contains(r#"goal main: \"ship the feature\""#), "the objective reached the model");
    let shown =
        api.requests.lock().unwrap().iter().filter(|r| r.to_string().contains("May the agent push")).count();
    assert_eq!(shown, 1, "shown once, in the last request");
    let told: Vec<_> = events(&s.events_path("main"))
        .into_iter()
        .filter(|e| e["kind"] == "stop_blocked")
        .map(|e| e["data"]["told"].clone())
        .collect();
    assert_eq!(told, [json!(["g1"])], "one continuation, to show g1");
}

#[test]
fn real_opencode_tool_gate_denies_a_persons_decision_from_bash() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "push the release"]);
    s.ok(&["gate", "ask", "--question", "May the agent push?", "--blocks", "goal"]);
    let api = fake_api(vec![
        bash("env -u OPENCODE -u OPENCODE_SESSION_ID loopx gate answer g1 --approve"),
        say("I could not."),
    ]);
    project_config(&s, &api);
    let config = std::fs::read_to_string(s.root.join("opencode.json")).unwrap();
    s.ok(&["host", "install", "opencode", "--with", "harden"]);
    ok(&run_opencode(&s, &["--command", "loopx"], "", &[]));
    let gates = s.json(&["gate", "list", "--all"]);
    assert_eq!(gates["gates"][0]["status"], "open", "{gates}");
    assert!(api.all().contains("a person's decision"), "the model was told why: {}", api.all());
    assert!(!kinds(&s).contains(&"gate_answered".to_owned()));
    // OpenCode wrote a .gitignore into .opencode/, which loopx created: uninstall takes both.
    assert!(s.root.join(".opencode/.gitignore").exists());
    s.ok(&["host", "uninstall", "opencode"]);
    assert!(!s.root.join(".opencode").exists(), "the host's own .gitignore went with loopx's directory");
    assert_eq!(
        std::fs::read_to_string(s.root.join("opencode.json")).unwrap(),
        config,
        "the user's config as it was"
    );
}
