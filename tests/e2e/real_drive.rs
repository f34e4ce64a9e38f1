//! `loopx drive` with the real hosts: the pinned Claude Code (`claude -p`), Codex
//! (`codex exec`), Gemini CLI (`gemini`, headless) and OpenCode (`opencode run`), each against
//! a scripted model on 127.0.0.1. Every turn is a fresh host
//! session (or, with `--resume-session`, the same one continued); the scripted model works the
//! turn through the host's shell tool with plain loopx commands, which find the turn in the
//! `LOOPX_*` variables the driver set; the driver reads the host's session id and tokens from
//! its output and records them on the turn.

use std::process::Command;

use serde_json::{Value, json};

use loopx_tests::{Sandbox, loopx_bin};

use crate::drive::{Driving, goal, log, loopx, of, spends};
use crate::real_claude::{self, assistant_turns, claude_bin, step, text, trust_workspace};
use crate::real_codex::{self, codex_bin, say, shell};
use crate::real_gemini::{self, gemini_bin};
use crate::real_opencode::{self, opencode_bin};

/// The shell commands of a turn: complete the turn's todo with evidence naming it (with
/// nothing to follow for the one marked `[last]`), then write the turn back.
fn turn_commands(loopx: &str) -> [String; 2] {
    [
        format!(
            "F=; {loopx} todo show --todo-id \"$LOOPX_TODO_ID\" | grep -q '\\[last\\]' && F=--no-follow-up; \
             {loopx} todo complete --evidence \"$LOOPX_TODO_ID done by the host\" --evidence-kind test $F"
        ),
        format!("{loopx} refresh-state --classification implement --delivery-outcome outcome_progress"),
    ]
}

/// A scripted Claude: in each turn of the main conversation (the request offering the Bash
/// tool), the two commands, then a word; tool ids numbered through the whole conversation, so
/// a resumed session stays consistent.
pub(crate) fn claude_api() -> real_claude::FakeApi {
    let [complete, refresh] = turn_commands("loopx");
    real_claude::FakeApi::respond(move |req| {
        let main = req["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "Bash"));
        if !main {
            return None;
        }
        let k = assistant_turns(req);
        let bash = |cmd: &str| json!([{"type": "tool_use", "id": format!("toolu_{k:03}"), "name": "Bash", "input": {"command": cmd, "description": "loopx"}}]);
        Some(match k % 3 {
            0 => step(bash(&complete), "tool_use"),
            1 => step(bash(&refresh), "tool_use"),
            _ => step(text("The turn is written back."), "end_turn"),
        })
    })
}

fn drive_claude(s: &Sandbox, api: &real_claude::FakeApi, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let mut c = claude_drive(s, api, extra);
    c.env("ANTHROPIC_API_KEY", "sk-test-not-a-key");
    Driving::spawn(c).finish()
}

/// `loopx drive --host claude-code` against the fake API, signed in by neither key nor token
/// (the caller adds one).
pub(crate) fn claude_drive(s: &Sandbox, api: &real_claude::FakeApi, extra: &[&str]) -> Command {
    let mut c = loopx(s);
    c.args(["drive", "--json", "--host", "claude-code"])
        .args(extra)
        .arg("--")
        .arg(claude_bin())
        .args(["-p", "--permission-mode", "bypassPermissions"])
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{}", api.port))
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("IS_SANDBOX", "1");
    c
}

/// What every driven turn of a real host must show: it wrote back and spent once, the host's
/// tokens and session were read, and the `LOOPX_*` variables reached its shell tool.
fn check_turns(s: &Sandbox, ev: &[Value], turns: usize) -> Vec<String> {
    let ended = of(ev, "turn_ended");
    assert_eq!(ended.len(), turns, "{ev:#?}");
    let mut sessions = Vec::new();
    for e in &ended {
        let end = &e["end"];
        assert!(end["spent_by"].is_string(), "{end}");
        assert!(end["tokens"].as_u64().is_some_and(|t| t > 0), "tokens from the host's output: {end}");
        sessions.push(end["session"].as_str().expect("the host's session id").to_owned());
    }
    assert_eq!(spends(&log(s)).len(), turns);
    let evidence = s.json(&["evidence", "list"]);
    for (n, e) in evidence["evidence"].as_array().unwrap().iter().enumerate() {
        assert_eq!(e["summary"], format!("t{} done by the host", n + 1), "{e}");
    }
    assert_eq!(s.json(&["status"])["counts"]["done"], turns);
    sessions
}

#[test]
fn real_claude_code_is_driven_to_the_goals_end_one_fresh_session_a_turn() {
    let s = goal(&["write a.txt", "write b.txt", "ship it [last]"]);
    trust_workspace(&s);
    let api = claude_api();
    let (code, ev, stderr) = drive_claude(&s, &api, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().contains("finished"));
    let sessions = check_turns(&s, &ev, 3);
    let mut distinct = sessions.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "a fresh session each turn: {sessions:?}");
    // The driver registered a Claude Code agent and the model saw the turn's prompt.
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "claude-code");
    let first = serde_json::to_string(&api.requests.lock().unwrap()[0]).unwrap();
    assert!(first.contains("This turn: t1"), "the prompt reached the model: {first}");
}

#[test]
fn real_claude_code_resumes_its_session_with_resume_session() {
    let s = goal(&["write a.txt", "ship it [last]"]);
    trust_workspace(&s);
    let api = claude_api();
    let (code, ev, stderr) = drive_claude(&s, &api, &["--resume-session"]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 2);
    assert_eq!(sessions[0], sessions[1], "the second turn continued the first's session");
    // The second turn's conversation began with the first turn's.
    let reqs = api.requests.lock().unwrap();
    assert!(
        reqs.iter()
            .any(|r| assistant_turns(r) >= 3 && serde_json::to_string(r).unwrap().contains("This turn: t2"))
    );
}

pub(crate) fn codex_api() -> real_codex::FakeApi {
    let [complete, refresh] = turn_commands(&loopx_bin().display().to_string());
    real_codex::FakeApi::respond(move |req, n| {
        // Where this turn is: the tool results since its prompt (the last user message).
        let input = req["input"].as_array().cloned().unwrap_or_default();
        let since = input.iter().rposition(|i| i["role"] == "user").map_or(0, |p| p + 1);
        let done = input[since..].iter().filter(|i| i["type"] == "function_call_output").count();
        match done {
            0 => shell(n, &complete),
            1 => shell(n, &refresh),
            _ => say("The turn is written back."),
        }
    })
}

fn drive_codex(s: &Sandbox, api: &real_codex::FakeApi, extra: &[&str]) -> (i32, Vec<Value>, String) {
    Driving::spawn(codex_drive(s, api, extra)).finish()
}

/// `loopx drive --host codex` against the fake API, in a Codex home of the sandbox's.
pub(crate) fn codex_drive(s: &Sandbox, api: &real_codex::FakeApi, extra: &[&str]) -> Command {
    let mut c: Command = loopx(s);
    c.args(["drive", "--json", "--host", "codex"])
        .args(extra)
        .arg("--")
        .arg(codex_bin())
        .args(["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-"])
        .envs(codex_env(s, api));
    c
}

/// A Codex home of the sandbox's that talks only to the fake API, and what Codex needs in its
/// environment to use it.
pub(crate) fn codex_env(s: &Sandbox, api: &real_codex::FakeApi) -> Vec<(String, String)> {
    let home = real_codex::codex_home(s);
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        "model = \"gpt-test\"\nmodel_provider = \"fake\"\nanalytics = {{ enabled = false }}\n\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_API_KEY\"\n",
        api.port
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    vec![
        ("CODEX_HOME".to_owned(), home.display().to_string()),
        ("FAKE_API_KEY".to_owned(), "not-a-key".to_owned()),
    ]
}

/// The Codex command line a drive runs (after the driver adds `--json`).
pub(crate) fn codex_command() -> String {
    shell_words::join([
        codex_bin().display().to_string().as_str(),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-",
    ])
}

#[test]
fn real_codex_is_driven_to_the_goals_end_one_fresh_thread_a_turn() {
    let s = goal(&["write a.txt", "write b.txt", "ship it [last]"]);
    let api = codex_api();
    let (code, ev, stderr) = drive_codex(&s, &api, &[]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 3);
    let mut distinct = sessions.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "a fresh thread each turn: {sessions:?}");
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "codex-cli");
    assert!(api.all().contains("This turn: t1"), "the prompt reached the model");
}

#[test]
fn real_codex_resumes_its_thread_with_resume_session() {
    let s = goal(&["write a.txt", "ship it [last]"]);
    let api = codex_api();
    let (code, ev, stderr) = drive_codex(&s, &api, &["--resume-session"]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 2);
    assert_eq!(sessions[0], sessions[1], "the second turn continued the first's thread");
    let reqs = api.requests.lock().unwrap();
    let second = reqs.iter().find(|r| serde_json::to_string(r).unwrap().contains("This turn: t2")).unwrap();
    assert!(
        serde_json::to_string(second).unwrap().contains("This turn: t1"),
        "the thread held the first turn"
    );
}

/// A scripted Gemini: in each turn (from its prompt, the last user text), the two commands,
/// then a word.
pub(crate) fn gemini_api() -> crate::fake_model::FakeModel {
    let [complete, refresh] = turn_commands("loopx");
    let script = move |req: &Value| {
        let contents = req["contents"].as_array().cloned().unwrap_or_default();
        let prompt = contents.iter().rposition(|c| c["role"] == "user" && c["parts"][0]["text"].is_string());
        let done = contents[prompt.map_or(0, |p| p + 1)..].iter().filter(|c| c["role"] == "user").count();
        match done {
            0 => real_gemini::shell(&complete),
            1 => real_gemini::shell(&refresh),
            _ => real_gemini::say("The turn is written back."),
        }
    };
    real_gemini::fake_api_with(script)
}

fn drive_gemini(
    s: &Sandbox,
    api: &crate::fake_model::FakeModel,
    extra: &[&str],
) -> (i32, Vec<Value>, String) {
    Driving::spawn(gemini_drive(s, api, extra)).finish()
}

/// `loopx drive --host gemini` against the fake model, offline.
pub(crate) fn gemini_drive(s: &Sandbox, api: &crate::fake_model::FakeModel, extra: &[&str]) -> Command {
    real_gemini::offline_settings(s);
    let mut c: Command = loopx(s);
    c.args(["drive", "--json", "--host", "gemini"])
        .args(extra)
        .arg("--")
        .arg(gemini_bin())
        .args(["-p", "-m", "gemini-2.5-flash", "--approval-mode", "yolo"])
        .envs(real_gemini::offline_env(api));
    c
}

#[test]
fn real_gemini_is_driven_to_the_goals_end_one_fresh_session_a_turn() {
    let s = goal(&["write a.txt", "write b.txt", "ship it [last]"]);
    let api = gemini_api();
    let (code, ev, stderr) = drive_gemini(&s, &api, &[]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 3);
    let mut distinct = sessions.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "a fresh session each turn: {sessions:?}");
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "gemini");
    assert!(api.all().contains("This turn: t1"), "the prompt reached the model");
}

#[test]
fn real_gemini_resumes_its_session_with_resume_session() {
    let s = goal(&["write a.txt", "ship it [last]"]);
    let api = gemini_api();
    let (code, ev, stderr) = drive_gemini(&s, &api, &["--resume-session"]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 2);
    assert_eq!(sessions[0], sessions[1], "the second turn continued the first's session");
    let reqs = api.requests.lock().unwrap();
    let second = reqs.iter().find(|r| serde_json::to_string(r).unwrap().contains("This turn: t2")).unwrap();
    assert!(
        serde_json::to_string(second).unwrap().contains("This turn: t1"),
        "the session held the first turn"
    );
}

/// A scripted OpenCode model: in each turn (from its prompt, the last user message), the two
/// commands, then a word.
pub(crate) fn opencode_api() -> crate::fake_model::FakeModel {
    let [complete, refresh] = turn_commands("loopx");
    real_opencode::fake_api_with(move |req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let prompt = messages.iter().rposition(|m| m["role"] == "user").map_or(0, |p| p + 1);
        match messages[prompt..].iter().filter(|m| m["role"] == "tool").count() {
            0 => real_opencode::bash(&complete),
            1 => real_opencode::bash(&refresh),
            _ => real_opencode::say("The turn is written back."),
        }
    })
}

fn drive_opencode(
    s: &Sandbox,
    api: &crate::fake_model::FakeModel,
    extra: &[&str],
) -> (i32, Vec<Value>, String) {
    Driving::spawn(opencode_drive(s, api, extra)).finish()
}

/// `loopx drive --host opencode` against the fake model, offline.
pub(crate) fn opencode_drive(s: &Sandbox, api: &crate::fake_model::FakeModel, extra: &[&str]) -> Command {
    real_opencode::project_config(s, api);
    let mut c: Command = loopx(s);
    c.args(["drive", "--json", "--host", "opencode"])
        .args(extra)
        .arg("--")
        .arg(opencode_bin())
        .arg("run")
        .envs(real_opencode::offline_env());
    c
}

#[test]
fn real_opencode_is_driven_to_the_goals_end_one_fresh_session_a_turn() {
    let s = goal(&["write a.txt", "write b.txt", "ship it [last]"]);
    let api = opencode_api();
    let (code, ev, stderr) = drive_opencode(&s, &api, &[]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 3);
    let mut distinct = sessions.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "a fresh session each turn: {sessions:?}");
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "opencode");
    assert!(api.all().contains("This turn: t1"), "the prompt reached the model");
}

#[test]
fn real_opencode_resumes_its_session_with_resume_session() {
    let s = goal(&["write a.txt", "ship it [last]"]);
    let api = opencode_api();
    let (code, ev, stderr) = drive_opencode(&s, &api, &["--resume-session"]);
    assert_eq!(code, 0, "{stderr}");
    let sessions = check_turns(&s, &ev, 2);
    assert_eq!(sessions[0], sessions[1], "the second turn continued the first's session");
    let reqs = api.requests.lock().unwrap();
    let second = reqs.iter().find(|r| serde_json::to_string(r).unwrap().contains("This turn: t2")).unwrap();
    assert!(
        serde_json::to_string(second).unwrap().contains("This turn: t1"),
        "the session held the first turn"
    );
}
