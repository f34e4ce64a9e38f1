//! The real `gemini` binary (Gemini CLI, from npm) against a scripted Gemini API on 127.0.0.1.
//! `loopx host install gemini` wires it; `/loopx <task>` joins through the BeforeAgent hook; the
//! model works through loopx's MCP tools and its shell tool (whose commands loopx ties to the
//! session through the `gemini` process above them); the AfterAgent driver continues the
//! session while loopx says run and lets it end when loopx says stop or a person must answer;
//! the BeforeTool gate refuses a person's decision.
//!
//! Traffic stays on this machine: the fake API listens on 127.0.0.1, and Gemini CLI runs with
//! usage statistics and the auto-updater off. `cargo xtask ci` installs the pinned Gemini CLI
//! under `target/gemini-cli/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::fake_model::FakeModel;
use loopx_tests::{Sandbox, events, loopx_bin};

pub(crate) fn gemini_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOOPX_GEMINI_BIN") {
        return PathBuf::from(p);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/gemini-cli/node_modules/.bin/gemini");
    assert!(
        local.exists(),
        "Gemini CLI is not installed: run `cargo xtask ci` (it installs it under target/gemini-cli), \
         or `npm install --prefix target/gemini-cli @google/gemini-cli@0.61.0`"
    );
    local
}

/// One scripted model turn: the parts of one answer.
pub(crate) type Step = Vec<Value>;

pub(crate) fn call(name: &str, args: Value) -> Step {
    vec![json!({"functionCall": {"name": name, "args": args}})]
}

pub(crate) fn shell(command: &str) -> Step {
    call("run_shell_command", json!({"command": command}))
}

pub(crate) fn say(text: &str) -> Step {
    vec![json!({"text": text})]
}

/// How many model turns a request's conversation already has.
fn model_turns(req: &Value) -> usize {
    req["contents"].as_array().map_or(0, |c| c.iter().filter(|c| c["role"] == "model").count())
}

/// A fake Gemini API: the conversation's k-th model turn is `script[k]`, then a short text.
pub(crate) fn fake_api(script: Vec<Step>) -> FakeModel {
    fake_api_with(move |req| {
        script.get(model_turns(req)).cloned().unwrap_or_else(|| say("Nothing more to do."))
    })
}

/// A fake Gemini API answering the conversation with `step(request)`; Gemini CLI's own
/// structured calls (whether the model speaks next) hear that the user does.
pub(crate) fn fake_api_with(step: impl Fn(&Value) -> Step + Send + Sync + 'static) -> FakeModel {
    FakeModel::start(move |path, req| {
        let structured = req["generationConfig"]["responseJsonSchema"].is_object()
            || req["generationConfig"]["responseSchema"].is_object();
        let (parts, keep) = if structured {
            (say(r#"{"reasoning": "the turn is over", "next_speaker": "user"}"#), false)
        } else {
            (step(req), true)
        };
        let chunk = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": "gemini-2.5-flash"});
        if path.contains(":streamGenerateContent") {
            ("text/event-stream", format!("data: {chunk}\r\n\r\n"), keep)
        } else if path.contains(":generateContent") {
            ("application/json", chunk.to_string(), keep)
        } else if path.contains(":countTokens") {
            ("application/json", json!({"totalTokens": 10}).to_string(), false)
        } else {
            ("application/json", "{}".to_owned(), false)
        }
    })
}

/// A Gemini CLI home that talks only to the fake API (the user's own settings), with loopx
/// installed in it at user scope with `flags`.
pub(crate) fn setup(s: &Sandbox, flags: &[&str]) {
    offline_settings(s);
    let mut args = vec!["host", "install", "gemini", "--scope", "user"];
    args.extend_from_slice(flags);
    s.ok(&args);
}

/// The user's Gemini CLI settings: an API key's auth, no usage statistics, no auto-update.
pub(crate) fn offline_settings(s: &Sandbox) {
    let dir = s.home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false}, "general": {"enableAutoUpdate": false}});
    std::fs::write(dir.join("settings.json"), serde_json::to_string_pretty(&settings).unwrap()).unwrap();
}

/// The environment that points Gemini CLI at the fake API and trusts the project.
pub(crate) fn offline_env(api: &FakeModel) -> Vec<(&'static str, String)> {
    vec![
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
        ("GOOGLE_GEMINI_BASE_URL", format!("http://127.0.0.1:{}", api.port)),
        ("GEMINI_API_KEY", "not-a-key".to_owned()),
    ]
}

/// Runs the real Gemini CLI headless on `args` (`-p <prompt>` among them), in the project,
/// against the fake API, with loopx on PATH and nothing of the machine's environment.
pub(crate) fn run_gemini(
    s: &Sandbox,
    api: &FakeModel,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let bin_dir = loopx_bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(gemini_bin());
    cmd.args(args)
        .args(["-m", "gemini-2.5-flash", "--approval-mode", "yolo"])
        .current_dir(&s.root)
        .env_clear()
        .env("HOME", &s.home)
        .env("PATH", &path)
        .envs(offline_env(api))
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

fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "gemini failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn real_gemini_joins_works_two_todos_through_the_after_agent_driver_and_stops_on_loopx_stop() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "polish the README", "--priority", "P2"]);
    // A second agent: a shell command without --agent-id works only if loopx knows the session.
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    setup(&s, &["--with", "stop-driver"]);
    let script = vec![
        // Turn 1, decided for t2 (the /loopx task, P1), claimed from the shell tool.
        call("mcp_loopx_should_run", json!({"turn_id": "turn-1"})),
        shell("loopx todo claim --todo-id t2"),
        call(
            "mcp_loopx_complete_task",
            json!({"todo_id": "t2", "turn_id": "turn-1", "evidence": "hello.txt written and read back"}),
        ),
        say("t2 is done."),
        // The AfterAgent driver sends the model on to t1.
        call("mcp_loopx_claim_task", json!({"todo_id": "t1", "turn_id": "turn-2"})),
        call(
            "mcp_loopx_complete_task",
            json!({"todo_id": "t1", "turn_id": "turn-2", "evidence": "README reviewed", "no_follow_up": true, "note": "nothing follows"}),
        ),
        say("Both todos are done."),
    ];
    let api = fake_api(script);
    let stdout = ok(&run_gemini(&s, &api, &["-p", "/loopx write hello"], &[]));
    assert!(stdout.contains("Both todos are done."), "{stdout}");

    let all = api.all();
    assert!(all.contains(r#"\"selected_todo\":{\"id\":\"t2\""#), "should_run's answer reached the model");
    assert!(all.contains("continue with t1"), "the AfterAgent driver's instruction reached the model");
    // The shell tool's command acted as the session's own agent.
    let agents = s.json(&["agent", "list"]);
    let me = agents["agents"][1]["id"].as_str().unwrap().to_owned();
    assert!(me.starts_with("gemini-"), "{agents}");
    let list = s.json(&["todo", "list", "--all"]);
    for t in list["todos"].as_array().unwrap() {
        assert_eq!((&t["status"], t["claimed_by"].as_str()), (&json!("done"), Some(me.as_str())), "{t}");
    }
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 2, "one spend per turn");
    let kinds = kinds(&s);
    assert_eq!(kinds.iter().filter(|k| *k == "stop_blocked").count(), 1, "{kinds:?}");
    assert_eq!(s.json(&["quota", "should-run", "--agent-id", &me])["state"], "terminal");
}

#[test]
fn real_gemini_a_model_that_never_finishes_is_stopped_by_loopx_s_cap() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "an endless task"]);
    setup(&s, &["--with", "stop-driver"]);
    let api = fake_api(Vec::new());
    let out = run_gemini(&s, &api, &["-p", "/loopx"], &[("LOOPX_STOP_CAP", "2")]);
    ok(&out);
    let kinds = kinds(&s);
    assert_eq!(kinds.iter().filter(|k| *k == "stop_blocked").count(), 2, "{kinds:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cap of 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(api.requests.lock().unwrap().len(), 3, "the prompt and two continuations");
}

#[test]
fn real_gemini_ends_at_once_on_a_goal_wide_gate_with_the_question_shown() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "push the release"]);
    s.ok(&["gate", "ask", "--question", "May the agent push to main?", "--blocks", "goal"]);
    setup(&s, &["--with", "stop-driver"]);
    let api = fake_api(vec![say("I will wait for the user.")]);
    ok(&run_gemini(&s, &api, &["-p", "/loopx"], &[]));
    assert!(api.all().contains("May the agent push to main?"), "the question reached the model");
    assert_eq!(api.requests.lock().unwrap().len(), 1, "no continuation while a person must answer");
    assert!(!kinds(&s).contains(&"stop_blocked".to_owned()));
}

/// A question a person asks while the session works stops it, and the model is shown the
/// question once before it ends (the AfterAgent driver continues it that one time); the
/// `/loopx` entry names the goal's objective.
#[test]
fn real_gemini_is_shown_a_question_asked_mid_session_once_and_then_ends() {
    let s = Sandbox::new();
    s.init();
    setup(&s, &["--with", "stop-driver"]);
    let person = s.person();
    let api = fake_api_with(move |req| match model_turns(req) {
        0 => call("mcp_loopx_should_run", json!({"turn_id": "turn-1"})),
        1 => {
            let r = person(&["gate", "ask", "--question", "May the agent push to main?", "--blocks", "goal"]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            say("Pushing next.")
        }
        _ => say("I will wait for the user."),
    });
    let stdout = ok(&run_gemini(&s, &api, &["-p", "/loopx push the release"], &[]));
    assert!(stdout.contains("I will wait for the user."), "{stdout}");
    let all = api.all();
    assert!(all.contains(r#"goal main: \"ship the feature\""#), "the objective reached the model: {all}");
    assert_eq!(all.matches("May the agent push to main?").count(), 1, "shown once: {all}");
    assert_eq!(api.requests.lock().unwrap().len(), 3, "the prompt, the tool result, the question");
    let events = events(&s.events_path("main"));
    let told: Vec<_> =
        events.iter().filter(|e| e["kind"] == "stop_blocked").map(|e| &e["data"]["told"]).collect();
    assert_eq!(told, [&json!(["g1"])], "one continuation, to show g1");
}

/// With `--harden`, the model's shell cannot answer its own gate, however the command hides
/// loopx from the environment: the BeforeTool gate denies it before it runs.
#[test]
fn real_gemini_tool_gate_denies_a_persons_decision_from_the_shell() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "push the release"]);
    s.ok(&["gate", "ask", "--question", "May the agent push?", "--blocks", "goal"]);
    setup(&s, &["--with", "harden"]);
    let script =
        vec![shell("env -u GEMINI_CLI loopx gate answer g1 --approve"), say("I could not approve it.")];
    let api = fake_api(script);
    ok(&run_gemini(&s, &api, &["-p", "/loopx"], &[]));
    let gates = s.json(&["gate", "list", "--all"]);
    assert_eq!(gates["gates"][0]["status"], "open", "{gates}");
    let all = api.all();
    assert!(all.contains("a person's decision"), "the model was told why: {all}");
    assert!(!kinds(&s).contains(&"gate_answered".to_owned()));
}
