//! A newcomer's first hour: the commands people expect, and answers that say what is true.

use loopx_tests::Sandbox;

#[test]
fn init_inside_a_project_asks_for_nested_before_a_second_loopx_dir() {
    let s = Sandbox::new();
    s.init();
    let sub = s.root.join("crates/parser");
    std::fs::create_dir_all(&sub).unwrap();
    let r = s.run_in(&sub, &["init", "--goal-id", "parser", "--objective", "parse"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is inside the loopx project at"), "{}", r.stderr);
    assert!(r.stderr.contains("--nested"), "{}", r.stderr);
    assert!(!sub.join(".loopx").exists(), "nothing created");
    let r = s.run_in(&sub, &["init", "--nested", "--goal-id", "parser", "--objective", "parse"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(sub.join(".loopx").is_dir());
    // Re-running init in the project itself is fine.
    s.ok(&["init"]);
}

#[test]
fn loopx_status_in_a_session_without_a_project_creates_nothing() {
    let s = Sandbox::new();
    for prompt in ["/loopx status", "/loopx off"] {
        let input = serde_json::json!({"session_id": "s1", "cwd": s.root, "hook_event_name": "UserPromptSubmit", "prompt": prompt});
        let r = s.run_with(&["hook", "claude-code", "user-prompt-submit"], input.to_string().as_bytes(), &[]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains("there is no loopx project here"), "{}", r.stdout);
        assert!(!s.state_dir().exists(), "{prompt} created nothing");
    }
    let r = s.run_with(&["join", "status"], b"", &[("CODEX_THREAD_ID", "t-1")]);
    assert!(r.stdout.contains("there is no loopx project here"), "{}", r.stdout);
    assert!(!s.state_dir().exists());
}

#[test]
fn host_doctor_passes_on_good_wiring_and_warns_when_the_host_is_missing() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["host", "install", "claude-code", "--stop-driver"]);
    // The sandbox's PATH has no claude: a warning, not a failure of loopx's wiring.
    let r = s.run_with(&["host", "doctor", "claude-code"], b"", &[("PATH", "/usr/bin:/bin")]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("warn claude-code on PATH"), "{}", r.stdout);
    assert!(r.stdout.contains("loopx's wiring is fine; claude-code itself is not on PATH"), "{}", r.stdout);
    let v: serde_json::Value = serde_json::from_str(
        &s.run_with(&["host", "doctor", "claude-code", "--json"], b"", &[("PATH", "/usr/bin:/bin")]).stdout,
    )
    .unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["warnings"][0].as_str()),
        (Some(true), Some("claude-code is not on PATH"))
    );
    // Broken wiring still fails.
    std::fs::remove_file(s.root.join(".claude/loop.md")).unwrap();
    let r = s.run_with(&["host", "doctor", "claude-code"], b"", &[("PATH", "/usr/bin:/bin")]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("repair with: loopx host install claude-code --with stop-driver"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_session_binding_can_be_undone_by_a_person() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-app"]);
    let bind = ["agent", "bind-thread", "--agent-id", "codex-1", "--host", "codex-app", "--thread"];
    s.ok(&[&bind[..], &["0199-a"]].concat());
    let r = s.fails(1, &[&bind[..], &["0199-b"]].concat());
    assert!(
        r.stderr.contains("loopx agent unbind-thread --agent-id codex-1 --host codex-app --thread 0199-a"),
        "{}",
        r.stderr
    );
    let r = s.ok(&[
        "agent",
        "unbind-thread",
        "--agent-id",
        "codex-1",
        "--host",
        "codex-app",
        "--thread",
        "0199-a",
    ]);
    assert!(r.stdout.contains("no longer acts as codex-1"), "{}", r.stdout);
    s.ok(&[&bind[..], &["0199-b"]].concat());
    let again = s.json(&[
        "agent",
        "unbind-thread",
        "--agent-id",
        "codex-1",
        "--host",
        "codex-app",
        "--thread",
        "0199-a",
    ]);
    assert_eq!(again["changed"], false, "an unbound session: nothing to do");
    // The session's own agent may unbind itself, never another's session.
    let env = [("CODEX_THREAD_ID", "0199-b")];
    let r = s.run_with(
        &["agent", "unbind-thread", "--agent-id", "codex-1", "--host", "codex", "--thread", "0199-b"],
        b"",
        &env,
    );
    assert_eq!(r.code, 1, "the codex host names its own session: {}", r.stderr);
    assert!(s.ok(&["history"]).stdout.contains("codex-app session 0199-a no longer acts as codex-1"));
}

#[test]
fn a_paused_goal_names_the_command_that_really_resumes_it() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "work"]);
    s.ok(&["goal", "set", "--compute", "0"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(d["next_commands"][0], "loopx goal set --goal-id main --compute 1", "{d}");
    s.ok(&["goal", "set", "--compute", "1"]);
    s.ok(&["goal", "stop"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(d["next_commands"][0], "loopx goal resume --goal-id main", "{d}");
    s.ok(&["goal", "resume"]);
    // A recorded decision reads in the documented words.
    s.ok(&["quota", "should-run", "--agent-id", "a", "--turn-instance-id", "turn-1"]);
    assert!(s.ok(&["history"]).stdout.contains("turn turn-1 for a: run on t1"));
}

#[test]
fn help_lists_a_commands_own_options_before_the_global_ones() {
    let s = Sandbox::new();
    let help = s.ok(&["todo", "claim", "--help"]).stdout;
    let own = help.find("--todo-id").unwrap();
    let global = help.find("Global options:").unwrap();
    assert!(own < global && help[global..].contains("--project"), "{help}");
}

/// A hint that needs an agent type names the ones there are, never a bare `<type>`.
#[test]
fn hints_name_the_agent_types_there_are() {
    let s = Sandbox::new();
    s.init();
    let r = s.run(&["quota", "should-run", "--agent-id", "ghost"]);
    assert_ne!(r.code, 0);
    let err = r.stderr;
    assert!(!err.contains("<type>"), "{err}");
    assert!(
        err.contains(
            "--agent-type <claude-code|codex-app|codex-cli|codex-ide|cursor|gemini|opencode|manual|other>"
        ),
        "{err}"
    );
    let list = s.ok(&["agent", "list"]).stdout;
    assert!(!list.contains("<type>") && list.contains("<claude-code|"), "{list}");
    let json = s.run(&["quota", "should-run", "--agent-id", "ghost", "--json"]).json();
    assert!(json["error"]["hint"].as_str().unwrap().contains("|gemini|"), "{json}");
}

/// While a gate holds the whole goal, status names no next todo (should-run says ask_user);
/// a gate on some todos holds only those.
#[test]
fn status_names_no_next_todo_while_a_gate_holds_the_goal() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "ship it"]);
    s.ok(&["agent", "register", "--agent-id", "a1", "--agent-type", "other"]);
    s.ok(&["gate", "ask", "--question", "May we ship?", "--blocks", "todos:t1"]);
    s.ok(&["todo", "add", "--text", "write docs"]);
    let st = s.json(&["status"]);
    assert_eq!(st["next_by_agent"][0]["todo"]["id"], "t2", "{st}");
    s.ok(&["gate", "ask", "--question", "Stop everything?", "--blocks", "goal"]);
    let st = s.json(&["status"]);
    assert!(st["next_by_agent"][0].get("todo").is_none_or(serde_json::Value::is_null), "{st}");
    assert!(st.get("next_todo").is_none_or(serde_json::Value::is_null), "{st}");
    assert_eq!(s.json(&["quota", "should-run", "--agent-id", "a1"])["decision"], "ask_user");
    assert!(s.ok(&["status"]).stdout.contains("next for a1: held until g2 closes"));
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}
