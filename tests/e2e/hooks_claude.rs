//! `loopx hook claude-code <event>` from fixture stdin: every event and branch, garbage input,
//! no project, and a corrupted state (Stop lets the session stop; PreToolUse denies).

use std::io::Write;
use std::process::Stdio;

use serde_json::{Value, json};

use loopx_tests::{Run, Sandbox};

fn hook(s: &Sandbox, event: &str, stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = s.command();
    cmd.args(["hook", "claude-code", event])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn input(s: &Sandbox, session: &str, extra: Value) -> String {
    let mut v = json!({"session_id": session, "transcript_path": "/dev/null", "cwd": s.root});
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    v.to_string()
}

fn prompt(s: &Sandbox, session: &str, text: &str) -> Value {
    let r = hook(
        s,
        "user-prompt-submit",
        &input(s, session, json!({"hook_event_name": "UserPromptSubmit", "prompt": text})),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap_or(Value::Null)
}

fn context(v: &Value) -> String {
    v["hookSpecificOutput"]["additionalContext"].as_str().unwrap_or("").to_owned()
}

fn stop(s: &Sandbox, session: &str, env: &[(&str, &str)]) -> Run {
    hook(
        s,
        "stop",
        &input(
            s,
            session,
            json!({"hook_event_name": "Stop", "stop_hook_active": true, "last_assistant_message": "done"}),
        ),
        env,
    )
}

fn tool(s: &Sandbox, session: &str, name: &str, tool_input: Value) -> Run {
    hook(
        s,
        "pre-tool-use",
        &input(
            s,
            session,
            json!({"hook_event_name": "PreToolUse", "tool_name": name, "tool_input": tool_input, "tool_use_id": "x"}),
        ),
        &[],
    )
}

fn denied(r: &Run) -> bool {
    serde_json::from_str::<Value>(&r.stdout)
        .is_ok_and(|v| v["hookSpecificOutput"]["permissionDecision"] == "deny")
}

#[test]
fn without_a_project_every_hook_stays_out_of_the_way() {
    let s = Sandbox::new();
    let r = hook(&s, "session-start", &input(&s, "s1", json!({"source": "startup"})), &[]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    assert_eq!(stop(&s, "s1", &[]).stdout, "");
    assert!(!denied(&tool(&s, "s1", "Edit", json!({"file_path": "a.rs"}))));
    assert!(hook(&s, "statusline", &input(&s, "s1", json!({})), &[]).stdout.contains("no project"));
    assert!(!s.state_dir().exists());
}

#[test]
fn slash_loopx_joins_as_this_sessions_own_agent() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    let c = context(&prompt(&s, "sess-AAA-111", "/loopx write the parser"));
    assert!(
        c.contains("agent claude-sessaaa111 on goal main: \"ship the feature\"; loop armed")
            && c.contains("Added t1"),
        "{c}"
    );
    // A second session is a second agent; the Codex agent is still there.
    let c = context(&prompt(&s, "sess-BBB-222", "/loopx"));
    assert!(c.contains("agent claude-sessbbb222"), "{c}");
    let agents: Vec<String> = s.json(&["agent", "list"])["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(agents, ["codex-1", "claude-sessaaa111", "claude-sessbbb222"]);
    // Other prompts pass untouched; /loopxyz is not /loopx.
    assert_eq!(prompt(&s, "sess-AAA-111", "please fix it"), Value::Null);
    assert_eq!(prompt(&s, "sess-AAA-111", "/loopxyz"), Value::Null);
    let c = context(&prompt(&s, "sess-AAA-111", "/loopx status"));
    assert!(c.contains("Your next todo: t1"), "{c}");
    // The session's context names its agent and next todo.
    let r = hook(
        &s,
        "session-start",
        &input(&s, "sess-AAA-111", json!({"hook_event_name": "SessionStart", "source": "resume"})),
        &[],
    );
    let c = context(&serde_json::from_str(&r.stdout).unwrap());
    assert!(
        c.contains("Goal main: \"ship the feature\"") && c.contains("You are agent claude-sessaaa111"),
        "{c}"
    );
}

/// A `/loopx` that finds its work done (the session joined, its loop armed, no handoff waiting)
/// changes nothing, so it answers without the goal's lock: another process holding it does not
/// hold the prompt up. One that adds a task needs the lock, and says the goal is busy.
#[test]
fn slash_loopx_with_nothing_to_change_answers_while_the_goal_is_locked() {
    let s = Sandbox::new();
    s.init();
    let c = context(&prompt(&s, "sess-AAA-111", "/loopx write the parser"));
    assert!(c.contains("loop armed") && c.contains("Added t1"), "{c}");
    let lock = std::fs::OpenOptions::new().write(true).open(s.root.join(".loopx/goals/main/lock")).unwrap();
    lock.lock().unwrap();
    let locked = [("LOOPX_LOCK_TIMEOUT_MS", "50")];
    let again = input(&s, "sess-AAA-111", json!({"hook_event_name": "UserPromptSubmit", "prompt": "/loopx"}));
    let r = hook(&s, "user-prompt-submit", &again, &locked);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c = context(&serde_json::from_str(&r.stdout).unwrap());
    assert!(
        c.contains("agent claude-sessaaa111 on goal main: \"ship the feature\"; loop armed")
            && c.contains("Next: t1"),
        "{c}"
    );
    let add =
        input(&s, "sess-AAA-111", json!({"hook_event_name": "UserPromptSubmit", "prompt": "/loopx more"}));
    let r = hook(&s, "user-prompt-submit", &add, &locked);
    assert!(r.stderr.contains("goal main is busy"), "{r:?}");
    lock.unlock().unwrap();
    assert_eq!(s.json(&["todo", "list"])["todos"].as_array().unwrap().len(), 1);
}

#[test]
fn slash_loopx_creates_the_project_and_goal_when_there_is_none() {
    let s = Sandbox::new();
    let c = context(&prompt(&s, "s-new", "/loopx port the CLI to clap"));
    assert!(c.contains("loop armed"), "{c}");
    let g = s.json(&["goal", "show"]);
    assert_eq!(g["goal"]["objective"], "port the CLI to clap");
    assert_eq!(s.json(&["todo", "list"])["todos"][0]["text"], "port the CLI to clap");
}

#[test]
fn the_stop_driver_continues_only_while_loopx_says_run_and_up_to_its_cap() {
    let s = Sandbox::new();
    s.init();
    prompt(&s, "s1", "/loopx first task");
    let r = stop(&s, "s1", &[("LOOPX_STOP_CAP", "2")]);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["decision"], "block");
    assert!(v["reason"].as_str().unwrap().contains("continue with t1"), "{v}");
    assert_eq!(stop(&s, "s1", &[("LOOPX_STOP_CAP", "2")]).code, 0);
    let third = stop(&s, "s1", &[("LOOPX_STOP_CAP", "2")]);
    assert_eq!((third.code, third.stdout.as_str()), (0, ""), "the session's own cap ends it");
    assert!(third.stderr.contains("cap of 2"), "{}", third.stderr);
    // Unbound sessions and disarmed loops are never kept going.
    assert_eq!(stop(&s, "other", &[]).stdout, "");
    prompt(&s, "s2", "/loopx second task");
    prompt(&s, "s2", "/loopx off");
    assert_eq!(stop(&s, "s2", &[]).stdout, "");
    // When loopx says stop (terminal), the driver lets the session stop.
    let agent = s.json(&["agent", "list"])["agents"][0]["id"].as_str().unwrap().to_owned();
    for t in ["t1", "t2"] {
        s.ok(&["todo", "complete", "--todo-id", t, "--agent-id", &agent, "--no-follow-up", "--note", "done"]);
    }
    prompt(&s, "s3", "/loopx");
    assert_eq!(stop(&s, "s3", &[]).stdout, "");
}

/// A person's question asked while a session works is shown to it once at its next stop (a
/// continuation that says what waits); one asked before its loop was armed, which its entry
/// showed, and one that blocks only another agent are not.
#[test]
fn a_question_asked_while_a_session_works_is_shown_to_it_once() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["gate", "ask", "--question", "Which licence?", "--blocks", "goal"]);
    let c = context(&prompt(&s, "s1", "/loopx write the parser"));
    assert!(c.contains("Which licence?"), "the entry showed it: {c}");
    assert_eq!(stop(&s, "s1", &[]).stdout, "", "not shown again");
    s.ok(&["gate", "answer", "g1", "--approve"]);
    s.ok(&["agent", "register", "--agent-id", "other", "--agent-type", "other"]);
    s.ok(&["gate", "ask", "--question", "Rename it?", "--blocks", "agent:other"]);
    s.ok(&["gate", "ask", "--question", "May it push to main?", "--blocks", "goal"]);
    let v: Value = serde_json::from_str(&stop(&s, "s1", &[]).stdout).unwrap();
    assert_eq!(v["decision"], "block", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("g3 \"May it push to main?\" (blocks goal)") && reason.contains("end your turn"),
        "{reason}"
    );
    assert!(!reason.contains("Rename it?"), "{reason}");
    assert_eq!(stop(&s, "s1", &[]).stdout, "", "shown once");
}

#[test]
fn the_tool_gate_denies_mutation_while_loopx_says_no() {
    let s = Sandbox::new();
    s.init();
    // Unarmed: nothing is gated.
    assert!(!denied(&tool(&s, "s1", "Edit", json!({"file_path": "src/a.rs"}))));
    prompt(&s, "s1", "/loopx write the parser");
    assert!(!denied(&tool(&s, "s1", "Read", json!({"file_path": "src/a.rs"}))));
    assert!(!denied(&tool(&s, "s1", "Edit", json!({"file_path": "src/a.rs"}))));
    assert!(denied(&tool(&s, "s1", "Bash", json!({"command": "git push --force"}))));
    assert!(!denied(&tool(&s, "s1", "Bash", json!({"command": "cargo test"}))));
    s.ok(&["goal", "stop", "--reason", "review first"]);
    let r = tool(&s, "s1", "Write", json!({"file_path": "src/b.rs", "content": "x"}));
    assert!(denied(&r) && r.stdout.contains("review first"), "{}", r.stdout);
    assert!(!denied(&tool(&s, "s1", "Grep", json!({"pattern": "x"}))), "read-only tools are never blocked");
}

#[test]
fn garbage_and_corruption_fail_open_for_stop_and_closed_for_tools() {
    let s = Sandbox::new();
    s.init();
    prompt(&s, "s1", "/loopx write the parser");
    for garbage in ["", "not json", "[1]", r#"{"session_id": 5}"#] {
        let r = hook(&s, "stop", garbage, &[]);
        assert_eq!((r.code, r.stdout.as_str()), (1, ""), "stop must let the session stop: {garbage:?}");
        assert!(denied(&hook(&s, "pre-tool-use", garbage, &[])), "tools are refused: {garbage:?}");
    }
    // A tool call whose input is not what the tool takes: denied, even unarmed, never passed.
    let state = s.root.join(".loopx/goals/main/snapshot.json").display().to_string();
    for (name, input) in [
        ("Write", json!(state)),
        ("Write", json!({"file_path": [state]})),
        ("Edit", json!({"path": state})),
        ("Bash", json!(["loopx", "goal", "stop"])),
        ("Bash", json!({"cmd": "loopx goal stop"})),
        ("mcp__other__x", json!("x")),
    ] {
        for session in ["s1", "unarmed"] {
            let r = tool(&s, session, name, input.clone());
            assert!(denied(&r), "{name} {input} in {session}: {}", r.stdout);
        }
    }
    let r = hook(&s, "pre-tool-use", &input(&s, "s1", json!({"tool_input": {"command": "ls"}})), &[]);
    assert!(denied(&r), "no tool_name: {}", r.stdout);
    // A person's command however it is spelled, and the dashboard, which answers as the person.
    for line in [
        "unset CLAUDECODE; X=answer; loopx gate $X g1 --approve",
        "env -u CLAUDECODE -u CLAUDE_CODE_SESSION_ID loopx serve",
        "python3 -c \"import os; os.system('loopx goal stop')\"",
    ] {
        let r = tool(&s, "unarmed", "Bash", json!({ "command": line }));
        assert!(denied(&r) && r.stdout.contains("person's decision"), "{line}: {}", r.stdout);
    }
    // A log edited by hand: the state cannot be trusted.
    let log = s.events_path("main");
    let text = std::fs::read_to_string(&log).unwrap().replacen("write the parser", "write the pArser", 1);
    std::fs::write(&log, text).unwrap();
    let r = stop(&s, "s1", &[]);
    assert_eq!((r.code, r.stdout.as_str()), (1, ""), "{}", r.stderr);
    assert!(denied(&tool(&s, "s1", "Edit", json!({"file_path": "src/a.rs"}))));
    assert!(!denied(&tool(&s, "s1", "Read", json!({"file_path": "src/a.rs"}))), "read-only tools still pass");
    // Unknown events and hosts are errors that never block (exit 1, not 2).
    assert_eq!(hook(&s, "teleport", "{}", &[]).code, 1);
    let r = s.command().args(["hook", "vim", "stop"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(r.status.code(), Some(1));
}

#[test]
fn the_status_line_is_one_line() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "write the parser"]);
    let line = hook(&s, "statusline", &input(&s, "s1", json!({})), &[]).stdout;
    assert_eq!(line, "loopx main ▶ 1 open · 0 done · next t1 write the parser\n");
    s.ok(&["gate", "ask", "--question", "ok?", "--blocks", "goal"]);
    assert!(hook(&s, "statusline", &input(&s, "s1", json!({})), &[]).stdout.starts_with("loopx main ⚠"));
}

#[test]
fn the_tool_gate_keeps_edits_inside_the_write_scope() {
    let s = Sandbox::new();
    s.init();
    prompt(&s, "s1", "/loopx write the parser");
    let edit = |p: &str| tool(&s, "s1", "Edit", json!({"file_path": s.root.join(p)}));
    // No scope: every path in the project may be edited, but never loopx's own state.
    assert!(!denied(&edit("README.md")));
    let r = edit(".loopx/goals/main/snapshot.json");
    assert!(denied(&r) && r.stdout.contains("loopx's state"), "{}", r.stdout);
    // A goal scope is a set of real globs: `*.rs` no longer lets README.md through.
    s.ok(&["goal", "set", "--write-scope", "src/**", "--write-scope", "*.rs"]);
    assert_eq!(s.json(&["goal", "show"])["goal"]["write_scope"], json!(["src/**", "*.rs"]));
    assert!(!denied(&edit("src/parser/lexer.rs")));
    assert!(!denied(&edit("build.rs")));
    let r = edit("README.md");
    assert!(denied(&r) && r.stdout.contains("outside the goal's write scope (src/**, *.rs)"), "{}", r.stdout);
    assert!(denied(&edit("docs/a.rs")), "* stays within one directory");
    assert!(denied(&tool(&s, "s1", "Write", json!({"file_path": "/etc/passwd", "content": "x"}))));
    assert!(denied(&tool(&s, "s1", "Edit", json!({"file_path": s.root.join("src/../Cargo.toml")}))));
    // A claimed todo's scope narrows it further.
    let agent = s.json(&["agent", "list"])["agents"][0]["id"].as_str().unwrap().to_owned();
    s.ok(&[
        "todo",
        "add",
        "--agent-id",
        &agent,
        "--text",
        "the lexer",
        "--scope",
        "src/lexer/**",
        "--priority",
        "P0",
    ]);
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", &agent]);
    assert!(!denied(&edit("src/lexer/mod.rs")));
    let r = edit("src/parser/mod.rs");
    assert!(denied(&r) && r.stdout.contains("outside the scope of t2 (src/lexer/**)"), "{}", r.stdout);
    // Clearing the goal's scope is a person's decision, and leaves the todo's.
    s.ok(&["goal", "set", "--clear-write-scope"]);
    assert!(s.json(&["goal", "show"])["goal"].get("write_scope").is_none());
    assert!(!denied(&edit("src/lexer/x.rs")));
    assert!(
        s.fails(2, &["goal", "set", "--write-scope", "src/[", "--json"])
            .stdout
            .contains("invalid scope glob")
    );
}

#[test]
fn the_gate_lets_reads_through_and_never_lets_an_agent_govern() {
    let s = Sandbox::new();
    s.init();
    prompt(&s, "s1", "/loopx write the parser");
    let bash = |c: &str| tool(&s, "s1", "Bash", json!({"command": c}));
    s.ok(&["goal", "stop", "--reason", "review first"]);
    // Stopped: reading is fine, changing is not.
    for c in
        ["ls -la", "cat src/a.rs | grep fn", "git status", "loopx status", "loopx quota should-run --json"]
    {
        assert!(!denied(&bash(c)), "{c} only reads");
    }
    for c in ["touch b.rs", "cargo build", "echo x > a.txt"] {
        assert!(denied(&bash(c)), "{c} waits while loopx says stop");
    }
    s.ok(&["goal", "resume"]);
    // Running: governance is still a person's, however loopx is reached.
    for c in [
        "loopx gate answer g1 --approve",
        "env -u CLAUDE_CODE_SESSION_ID loopx goal set --compute 1",
        "sh -c 'loopx goal stop'",
        "/usr/local/bin/loopx --goal-id main goal resume",
        "echo $(loopx quota void-slot --spend-id s1)",
        // Through launchers, known or not, and every person-only command.
        "setsid -f loopx gate answer g1 --approve",
        "stdbuf -oL loopx goal stop",
        "flock /tmp/l -c 'loopx goal resume'",
        "find . -maxdepth 0 -exec loopx gate answer g1 --approve ;",
        "git -c 'alias.x=!loopx goal stop' x",
        "fish -c 'loopx goal stop'",
        "busybox sh -c 'loopx goal stop'",
        "chpst loopx gate answer g1 --approve",
        "loopx goal complete",
    ] {
        let r = bash(c);
        assert!(denied(&r) && r.stdout.contains("a person's decision"), "{c}: {}", r.stdout);
    }
    for c in [
        "echo x > .loopx/goals/main/snapshot.json",
        "rm -rf .loopx",
        "sed -i s/0/1/ .loopx/goals/main/snapshot.json",
    ] {
        let r = bash(c);
        assert!(denied(&r) && r.stdout.contains("loopx's state"), "{c}: {}", r.stdout);
    }
    // Another server's MCP tool is a mutation like any other; loopx's own are governed inside.
    s.ok(&["goal", "stop"]);
    assert!(denied(&tool(&s, "s1", "mcp__github__create_issue", json!({"title": "x"}))));
    assert!(!denied(&tool(&s, "s1", "mcp__loopx__status", json!({}))));
}

#[test]
fn a_session_whose_work_is_held_by_a_peer_is_let_stop() {
    let s = Sandbox::new();
    s.init();
    prompt(&s, "sA", "/loopx the only task");
    prompt(&s, "sB", "/loopx");
    let agents: Vec<String> = s.json(&["agent", "list"])["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", &agents[1]]);
    let r = stop(&s, "sA", &[]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "A waits for B instead of inventing work: {}", r.stdout);
    let d = s.json(&["quota", "should-run", "--agent-id", &agents[0]]);
    assert_eq!((d["decision"].as_str(), d["state"].as_str()), (Some("wait"), Some("waiting")), "{d}");
    let v: Value = serde_json::from_str(&stop(&s, "sB", &[]).stdout).unwrap();
    assert!(v["reason"].as_str().unwrap().contains("continue with t1"), "B goes on: {v}");
}
