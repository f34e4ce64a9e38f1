//! A goal whose work is finished says so everywhere a person looks (status, GOAL.md, `status
//! --all`, a notifier) and asks them to confirm it; only a person completes it, agents then
//! stop (done), and a completed goal takes new work only once resumed.

use loopx_tests::Sandbox;

#[test]
fn a_finished_goal_asks_the_person_and_the_person_completes_it() {
    let s = Sandbox::new();
    s.init();
    let notice = s.home.join("notice");
    let script = format!(
        "cat > {0}.json; printf '%s|%s' \"$LOOPX_GOAL_ID\" \"${{LOOPX_GATE_ID-none}}\" > {0}.env; printf '%s' \"$1\" > {0}.msg",
        notice.display()
    );
    s.ok(&["goal", "set", "--notify-command", &shell_words::join(["sh", "-c", script.as_str(), "sh"])]);
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "write the parser"]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    s.ok(&["projects", "add"]);

    // Open work: not finished, and a person cannot complete the goal yet; nothing changes.
    assert_eq!(s.json(&["status"]).get("work_finished"), None, "left out while false");
    let events = std::fs::read(s.events_path("main")).unwrap();
    let r = s.fails(1, &["goal", "complete"]);
    assert!(r.stderr.contains("goal main still has 1 open todo (t1); it is not finished"), "{}", r.stderr);
    assert!(r.stderr.contains("loopx goal stop"), "{}", r.stderr);
    assert_eq!(std::fs::read(s.events_path("main")).unwrap(), events, "a refusal writes nothing");

    // The agent finishes: nothing follows.
    let args =
        ["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--no-follow-up", "--note", "parser done"];
    s.ok(&args);
    let ask = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!((&ask["decision"], &ask["state"]), (&"stop".into(), &"terminal".into()), "{ask}");

    // Status, text and JSON, says the work is finished and asks the person.
    let st = s.json(&["status"]);
    assert_eq!((&st["goal_status"], &st["work_finished"]), (&"active".into(), &true.into()), "{st}");
    let text = s.ok(&["status"]).stdout;
    assert!(text.starts_with("goal main — active · its work is finished\n"), "{text}");
    assert!(
        text.contains(
            "needs you:   finished every todo is closed: is the objective met? loopx goal complete"
        ),
        "{text}"
    );
    let goal_md = std::fs::read_to_string(s.state_dir().join("goals/main/GOAL.md")).unwrap();
    assert!(goal_md.contains("## Needs you\n\n- The work is finished: every todo is closed"), "{goal_md}");
    // The notifier was told once, with no gate.
    let read = |ext: &str| std::fs::read_to_string(notice.with_extension(ext)).unwrap();
    let sent: serde_json::Value = serde_json::from_str(&read("json")).unwrap();
    assert_eq!((&sent["kind"], &sent["gate"]), (&"finished".into(), &serde_json::Value::Null), "{sent}");
    assert!(sent["answer_with"].as_str().unwrap().contains("goal complete"), "{sent}");
    assert_eq!(read("env"), "main|none");
    assert!(
        read("msg").starts_with("loopx: goal main's work is finished. every todo is closed (1 done)"),
        "{}",
        read("msg")
    );
    std::fs::remove_file(notice.with_extension("json")).unwrap();
    s.ok(&["quota", "should-run", "--agent-id", "a"]);
    assert!(!notice.with_extension("json").exists(), "told once, not at every poll");
    let history = s.ok(&["history"]).stdout;
    assert!(history.contains("the person was told the work is finished (command)"), "{history}");

    // `status --all` lists it with the command that completes it; an agent may not run it.
    let all = s.json(&["status", "--all"]);
    let need = &all["needs_you"][0];
    assert_eq!(need["kind"], "finished", "{all}");
    let command = need["command"].as_str().unwrap().split("   #").next().unwrap().to_owned();
    let r = s.fails(1, &["goal", "complete", "--agent-id", "a"]);
    assert!(r.stderr.contains("completing the goal"), "{}", r.stderr);
    let words = shell_words::split(&command).unwrap();
    assert_eq!(words[..1], ["loopx"]);
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    assert!(args.ends_with(&["goal", "complete"]), "{command}");
    s.ok(&args);

    // Done: every agent stops (done), the person's inbox is empty, status says done.
    let st = s.json(&["status"]);
    assert_eq!((&st["goal_status"], st.get("work_finished")), (&"done".into(), None), "{st}");
    assert_eq!(st["next_by_agent"], serde_json::json!([]), "a done goal starts no agent: {st}");
    let text = s.ok(&["status"]).stdout;
    assert!(text.starts_with("goal main — done\n"), "{text}");
    assert!(
        text.contains(
            "\nnext:        nothing: the goal is done; to add work, resume it: loopx goal resume\n"
        ),
        "{text}"
    );
    let ask = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!((&ask["decision"], &ask["state"]), (&"stop".into(), &"done".into()), "{ask}");
    assert_eq!(ask["continuation"]["cause"], "done", "{ask}");
    assert_eq!(s.json(&["status", "--all"])["needs_you"], serde_json::json!([]));
    assert!(s.ok(&["history"]).stdout.contains("goal completed"));
    assert_eq!(s.json(&["goal", "complete"])["changed"], false, "completing again changes nothing");

    // A done goal takes new work only once a person resumes it.
    let r = s.fails(1, &["todo", "add", "--text", "one more thing"]);
    assert!(r.stderr.contains("goal main is done") && r.stderr.contains("goal resume"), "{}", r.stderr);
    s.ok(&["goal", "resume"]);
    s.ok(&["todo", "add", "--text", "one more thing"]);
    assert_eq!(s.json(&["status"]).get("work_finished"), None, "left out while false");
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "a"]);
    s.ok(&["todo", "complete", "--todo-id", "t2", "--agent-id", "a", "--no-follow-up", "--note", "done too"]);
    // Finished again, with more work: told again.
    let sent: serde_json::Value = serde_json::from_str(&read("json")).unwrap();
    assert!(sent["question"].as_str().unwrap().contains("(2 done)"), "{sent}");
}

/// A settlement over MCP that finishes the work tells the person at once, before any poll.
#[test]
fn an_mcp_settlement_that_finishes_the_work_tells_the_person_at_once() {
    let s = Sandbox::new();
    s.init();
    let notice = s.home.join("notice.json");
    let script = format!("cat > {}", notice.display());
    s.ok(&["goal", "set", "--notify-command", &shell_words::join(["sh", "-c", script.as_str()])]);
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "write the parser"]);
    let mut m = crate::mcp::Session::start(&s, &[]);
    m.ok("claim_task", serde_json::json!({"todo_id": "t1", "turn_id": "turn-1"}));
    assert!(!notice.exists(), "nothing is finished yet");
    let done = serde_json::json!({"todo_id": "t1", "turn_id": "turn-1", "evidence": "tests pass", "no_follow_up": true, "note": "complete"});
    m.ok("complete_task", done);
    let sent: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&notice).unwrap()).unwrap();
    assert_eq!(sent["kind"], "finished", "{sent}");
}

/// `status` says why a stopped goal waits and how it resumes, and names the next todos as the
/// kernel will start them: once the goal resumes.
#[test]
fn status_says_why_a_stopped_goal_waits_and_how_it_resumes() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "write the parser"]);
    s.ok(&["goal", "stop", "--reason", "lunch"]);
    let text = s.ok(&["status"]).stdout;
    assert!(text.starts_with("goal main — stopped\nobjective:   "), "{text}");
    let stopped = "\nstopped:     \"lunch\"; agents start no turn until a person runs: loopx goal resume\n";
    assert!(text.contains(stopped), "{text}");
    assert!(text.contains("\nnext:        t1 P2 write the parser (once the goal resumes)\n"), "{text}");
    assert_eq!(s.json(&["status"])["stop_reason"], "lunch");
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "codex-cli"]);
    let text = s.ok(&["status"]).stdout;
    assert!(text.contains("\nnext for a: t1 P2 write the parser (once the goal resumes)\n"), "{text}");
    let ask = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!((&ask["decision"], &ask["state"]), (&"stop".into(), &"paused".into()), "{ask}");
    s.ok(&["goal", "resume"]);
    let text = s.ok(&["status"]).stdout;
    assert!(text.contains("\nnext for a: t1 P2 write the parser\n") && !text.contains("stopped"), "{text}");
    assert_eq!(s.json(&["status"]).get("stop_reason"), None, "left out while active");
}

/// A done goal changes only through `goal resume`: `goal stop` (which would drop the person's
/// completion without a word), an agent's `gate ask` and `goal set` are refused, each naming
/// `loopx goal resume`, and nothing in `.loopx/` changes; resumed, the goal takes them again.
#[test]
fn a_done_goal_refuses_a_stop_and_a_question_until_resumed() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "write the parser"]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    s.ok(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--no-follow-up", "--note", "done"]);
    s.ok(&["goal", "complete"]);
    let before = s.tree();
    for args in [
        &["goal", "stop"][..],
        &["goal", "stop", "--now", "--reason", "enough"],
        &["gate", "ask", "--agent-id", "a", "--question", "may I go on?", "--blocks", "goal"],
        &["goal", "set", "--objective", "something else"],
    ] {
        let r = s.fails(1, args);
        assert!(r.stderr.contains("goal main is done"), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("loopx goal resume"), "{args:?}: {}", r.stderr);
        assert_eq!(s.tree(), before, "{args:?} changed nothing");
    }
    assert_eq!(s.json(&["status"])["goal_status"], "done", "still done, its completion kept");
    s.ok(&["goal", "resume"]);
    s.ok(&["gate", "ask", "--agent-id", "a", "--question", "may I go on?", "--blocks", "goal"]);
    s.ok(&["goal", "stop"]);
    assert_eq!(s.json(&["status"])["goal_status"], "stopped");
}
