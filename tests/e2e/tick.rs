//! The tick through real processes: should-run → claim → complete → refresh-state → spend.

use loopx_tests::{Sandbox, events};

/// One full tick for `agent` with turn `turn`; returns the should-run answer.
fn tick(s: &Sandbox, agent: &str, turn: &str) -> serde_json::Value {
    let answer = s.json(&["quota", "should-run", "--agent-id", agent, "--turn-instance-id", turn]);
    if answer["decision"] != "run" {
        return answer;
    }
    let todo = answer["selected_todo"]["id"].as_str().unwrap().to_owned();
    if answer["selected_todo"]["claim_required"] == true {
        s.ok(&["todo", "claim", "--todo-id", &todo, "--agent-id", agent, "--turn-instance-id", turn]);
    }
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        &todo,
        "--agent-id",
        agent,
        "--turn-instance-id",
        turn,
        "--evidence",
        "tests pass",
        "--evidence-kind",
        "test",
    ]);
    s.ok(&[
        "refresh-state",
        "--agent-id",
        agent,
        "--todo-id",
        &todo,
        "--turn-instance-id",
        turn,
        "--classification",
        "implement",
        "--delivery-outcome",
        "outcome_progress",
    ]);
    s.ok(&["quota", "spend-slot", "--agent-id", agent, "--todo-id", &todo, "--turn-instance-id", turn]);
    answer
}

#[test]
fn one_agent_ticks_to_terminal() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cc", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "parse", "--priority", "P1"]);
    s.ok(&["todo", "add", "--text", "print", "--priority", "P2"]);
    let first = tick(&s, "cc", "turn-1");
    assert_eq!(first["selected_todo"]["id"], "t1");
    assert_eq!(first["scheduler"]["profile"], "claude_loop");
    let second = tick(&s, "cc", "turn-2");
    assert_eq!(second["selected_todo"]["id"], "t2");
    // All done, but nothing said "no follow-up": the agent is asked to replan.
    let third = s.json(&["quota", "should-run", "--agent-id", "cc", "--turn-instance-id", "turn-3"]);
    assert_eq!((third["decision"].as_str(), third["should_run"].as_bool()), (Some("replan"), Some(true)));
    s.ok(&["todo", "add", "--text", "release notes"]);
    let answer = s.json(&["quota", "should-run", "--agent-id", "cc", "--turn-instance-id", "turn-4"]);
    s.ok(&["todo", "claim", "--todo-id", "t3", "--agent-id", "cc"]);
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t3",
        "--agent-id",
        "cc",
        "--no-follow-up",
        "--note",
        "nothing left",
    ]);
    s.ok(&[
        "refresh-state",
        "--agent-id",
        "cc",
        "--todo-id",
        "t3",
        "--turn-instance-id",
        "turn-4",
        "--classification",
        "docs",
        "--delivery-outcome",
        "goal_outcome",
    ]);
    s.ok(&["quota", "spend-slot", "--agent-id", "cc", "--todo-id", "t3", "--turn-instance-id", "turn-4"]);
    assert_eq!(answer["selected_todo"]["id"], "t3");
    let end = s.json(&["quota", "should-run", "--agent-id", "cc"]);
    assert_eq!((end["decision"].as_str(), end["state"].as_str()), (Some("stop"), Some("terminal")));
    assert_eq!(end["scheduler"]["action"], "stop_until_resume");
    let q = s.json(&["quota", "status"]);
    assert_eq!(q["quota"]["used_slots"], 3);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn two_agents_with_a_scoped_gate_answered_half_way() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cc", "--agent-type", "claude-code"]);
    s.ok(&["agent", "register", "--agent-id", "cx", "--agent-type", "codex-app"]);
    s.ok(&["todo", "add", "--agent-id", "cc", "--text", "migrate the schema", "--priority", "P0"]);
    s.ok(&["todo", "add", "--agent-id", "cc", "--text", "write the docs", "--priority", "P2"]);
    s.ok(&["todo", "add", "--agent-id", "cc", "--text", "write the tests", "--priority", "P1"]);
    let gate = s.json(&[
        "gate",
        "ask",
        "--question",
        "May the migration drop the legacy column?",
        "--blocks",
        "todos:t1",
    ]);
    assert_eq!(gate["gate"]["id"], "g1");

    // While the gate is open both agents work around it, and each is told about it.
    let a = tick(&s, "cc", "cc-1");
    assert_eq!((a["selected_todo"]["id"].as_str(), a["state"].as_str()), (Some("t3"), Some("operator_gate")));
    assert_eq!(a["user_channel"]["questions"][0]["gate"], "g1");
    let b = tick(&s, "cx", "cx-1");
    assert_eq!(b["selected_todo"]["id"], "t2");
    assert_eq!(b["scheduler"]["rrule"], "FREQ=MINUTELY;INTERVAL=3");
    // Only the gated todo is left: row 5.
    let wait = s.json(&["quota", "should-run", "--agent-id", "cx"]);
    assert_eq!((wait["decision"].as_str(), wait["should_run"].as_bool()), (Some("ask_user"), Some(false)));
    assert_eq!(wait["scheduler"]["action"], "wait_for_user");
    let st = s.ok(&["status"]).stdout;
    assert!(st.contains("needs you:   g1 May the migration"), "{st}");
    let md = std::fs::read_to_string(s.state_dir().join("goals/main/GOAL.md")).unwrap();
    let (gates_at, next_at) = (md.find("## Needs you").unwrap(), md.find("## Next per agent").unwrap());
    assert!(gates_at < next_at && md.contains("g1 \"May the migration"), "{md}");
    assert!(md.contains("Quota: 2/1440 slots"), "{md}");

    // An agent cannot answer; a person can.
    s.fails(1, &["gate", "answer", "g1", "--approve", "--agent-id", "cx"]);
    s.ok(&["gate", "answer", "g1", "--approve", "--note", "yes, it is unused"]);
    let a = tick(&s, "cx", "cx-2");
    assert_eq!((a["selected_todo"]["id"].as_str(), a["state"].as_str()), (Some("t1"), Some("eligible")));
    let spends = s.json(&["quota", "status"]);
    assert_eq!(spends["quota"]["used_slots"], 3);
    let kinds: Vec<String> =
        events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "slot_spent").count(), 3);
    assert_eq!(kinds.iter().filter(|k| *k == "run_recorded").count(), 3);
}

#[test]
fn a_turn_replayed_a_hundred_times_spends_one_slot() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cx", "--agent-type", "codex-app"]);
    s.ok(&["todo", "add", "--text", "the only task"]);
    s.ok(&["todo", "add", "--text", "another task", "--priority", "P3"]);
    let turn = ["--agent-id", "cx", "--turn-instance-id", "hb-1"];
    // Spend before writeback: refused, and says what would make it legal.
    let r = s.fails(1, &[&["quota", "spend-slot", "--todo-id", "t1"][..], &turn].concat());
    assert!(r.stderr.contains("no writeback") && r.stderr.contains("loopx refresh-state"), "{}", r.stderr);
    let first = s.ok(&[&["quota", "should-run", "--json"][..], &turn].concat()).json();
    assert_eq!(first["selected_todo"]["id"], "t1");
    // The turn is bound to t1: a writeback or spend for t2 is refused.
    let r = s.fails(
        1,
        &[
            &[
                "refresh-state",
                "--todo-id",
                "t2",
                "--classification",
                "x",
                "--delivery-outcome",
                "surface_only",
            ][..],
            &turn,
        ]
        .concat(),
    );
    assert!(r.stderr.contains("decided for t1"), "{}", r.stderr);
    let mut spend_receipts = Vec::new();
    for _ in 0..100 {
        let again = s.ok(&[&["quota", "should-run", "--json"][..], &turn].concat()).json();
        assert_eq!(again["selected_todo"]["id"], "t1");
        assert_eq!(again["turn"]["replayed"], true);
        s.ok(&[
            &[
                "refresh-state",
                "--todo-id",
                "t1",
                "--classification",
                "implement",
                "--delivery-outcome",
                "outcome_progress",
            ][..],
            &turn,
        ]
        .concat());
        let r = s.ok(&[&["quota", "spend-slot", "--todo-id", "t1", "--json"][..], &turn].concat());
        spend_receipts.push(r.stdout);
    }
    assert!(
        spend_receipts.iter().all(|r| *r == spend_receipts[0]),
        "every replay returns the first receipt byte for byte"
    );
    // The same turn id for another spend is not a replay: refused.
    let r = s.fails(1, &[&["quota", "spend-slot", "--todo-id", "t2"][..], &turn].concat());
    assert!(r.stderr.contains("already used for a different request"), "{}", r.stderr);
    // A new turn decided for t1 cannot spend for t2 either.
    let turn2 = ["--agent-id", "cx", "--turn-instance-id", "hb-2"];
    s.ok(&[&["quota", "should-run"][..], &turn2].concat());
    let r = s.fails(1, &[&["quota", "spend-slot", "--todo-id", "t2"][..], &turn2].concat());
    assert!(r.stderr.contains("decided for t1"), "{}", r.stderr);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 1);
    let kinds: Vec<String> =
        events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect();
    for (kind, n) in [("decision_recorded", 2), ("run_recorded", 1), ("slot_spent", 1)] {
        assert_eq!(kinds.iter().filter(|k| *k == kind).count(), n, "{kind}: {kinds:?}");
    }
    // Without a turn id, a second spend needs a second writeback.
    s.ok(&[
        "refresh-state",
        "--agent-id",
        "cx",
        "--todo-id",
        "t2",
        "--classification",
        "implement",
        "--delivery-outcome",
        "outcome_gap",
    ]);
    s.ok(&["quota", "spend-slot", "--agent-id", "cx", "--todo-id", "t2"]);
    s.fails(1, &["quota", "spend-slot", "--agent-id", "cx", "--todo-id", "t2"]);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 2);
}

#[test]
fn spend_rules_dry_run_void_and_pause() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    s.ok(&["agent", "register", "--agent-id", "b", "--agent-type", "other"]);
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "work"]);
    s.ok(&[
        "refresh-state",
        "--agent-id",
        "a",
        "--todo-id",
        "t1",
        "--classification",
        "implement",
        "--delivery-outcome",
        "outcome_progress",
    ]);
    // Identity-less and another agent's writeback: refused.
    s.fails(1, &["quota", "spend-slot", "--todo-id", "t1"]);
    s.fails(1, &["quota", "spend-slot", "--agent-id", "b", "--todo-id", "t1"]);
    // Dry run previews and writes nothing.
    let before = s.tree();
    let preview = s.json(&[
        "quota",
        "spend-slot",
        "--agent-id",
        "a",
        "--todo-id",
        "t1",
        "--dry-run",
        "--tokens",
        "1200",
    ]);
    assert_eq!((preview["dry_run"].as_bool(), preview["changed"].as_bool()), (Some(true), Some(false)));
    assert_eq!(
        (preview["spend"]["id"].as_str(), preview["spend"]["tokens"].as_u64()),
        (Some("s1"), Some(1200))
    );
    assert_eq!(s.tree(), before);
    // Paused: no spending.
    s.ok(&["goal", "set", "--compute", "0"]);
    let r = s.fails(1, &["quota", "spend-slot", "--agent-id", "a", "--todo-id", "t1"]);
    assert!(r.stderr.contains("paused"), "{}", r.stderr);
    let paused = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(paused["state"], "paused");
    s.ok(&["goal", "set", "--compute", "1"]);
    let spend =
        ["quota", "spend-slot", "--agent-id", "a", "--todo-id", "t1", "--execute", "--tokens", "1200"];
    let spent = s.ok(&[&spend[..], &["--usd", "0.5"]].concat()).stdout;
    assert!(
        spent.starts_with("s1 spent 1 slot(s) for a on t1\n")
            && spent.contains("quota: 1 of 1,440 one-minute slots used in the last 24 h"),
        "{spent}"
    );
    let voided = s.json(&["quota", "void-slot", "--spend-id", "s1", "--reason", "host retried"]);
    assert_eq!(voided["spend"]["voided"], true);
    // A replayed void tells the quota as it is now.
    let again = s.ok(&["quota", "void-slot", "--spend-id", "s1"]).stdout;
    assert!(again.contains("quota: 0 of 1,440 one-minute slots used"), "{again}");
    let q = s.json(&["quota", "status"]);
    assert_eq!((q["quota"]["used_slots"].as_u64(), q["quota"]["tokens_used"].as_u64()), (Some(0), Some(0)));
    assert_eq!(s.json(&["quota", "void-slot", "--spend-id", "s1"])["changed"], false);
    s.fails(1, &["quota", "void-slot", "--spend-id", "s9"]);
    let text = s.ok(&["quota", "status"]).stdout;
    assert!(
        text.contains("0 of 1,440 one-minute slots used in the last 24 h") && text.contains("(voided)"),
        "{text}"
    );
}

#[test]
fn a_budget_stops_the_goal_and_quota_flags_are_validated() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    s.ok(&["todo", "add", "--text", "work"]);
    let r =
        s.json(&["goal", "set", "--budget-tokens", "1000", "--allowed-slots", "5", "--window-hours", "2"]);
    assert_eq!(r["goal"]["quota"]["budget_tokens"], 1000);
    assert_eq!(r["goal"]["quota"]["allowed_slots"], 5);
    s.ok(&[
        "refresh-state",
        "--agent-id",
        "a",
        "--todo-id",
        "t1",
        "--classification",
        "implement",
        "--delivery-outcome",
        "outcome_progress",
    ]);
    s.ok(&["quota", "spend-slot", "--agent-id", "a", "--todo-id", "t1", "--tokens", "1000"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!((d["decision"].as_str(), d["state"].as_str()), (Some("stop"), Some("budget_exhausted")));
}

#[test]
fn a_validation_command_leaves_nothing_running_even_out_of_its_group() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    let pid = s.root.join("escaped.pid");
    // A check that starts a process in a session of its own (`setsid`), then passes; and one
    // that does so and then hangs past its timeout.
    let passes = format!(
        "sh -c 'setsid sh -c \"echo \\$\\$ > {0}; exec sleep 600\" & sleep 0.3; exit 0'",
        pid.display()
    );
    let hangs =
        format!("sh -c 'setsid sh -c \"echo \\$\\$ > {0}; exec sleep 600\" & exec sleep 600'", pid.display());
    s.ok(&["todo", "add", "--text", "passes", "--validation-command", &passes]);
    s.ok(&["todo", "add", "--text", "hangs", "--validation-command", &hangs, "--validation-timeout", "1s"]);
    for (todo, code) in [("t1", 0), ("t2", 1)] {
        let _ = std::fs::remove_file(&pid);
        let r = s.run(&["todo", "complete", "--todo-id", todo, "--agent-id", "a"]);
        assert_eq!(r.code, code, "{}", r.stderr);
        let escaped = std::fs::read_to_string(&pid).unwrap();
        let running = std::fs::read_to_string(format!("/proc/{}/stat", escaped.trim()))
            .is_ok_and(|st| !st.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
        assert!(!running, "{todo}: the process in its own session ({}) outlived the check", escaped.trim());
    }
}

#[test]
fn validation_commands_are_run_by_the_kernel() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    s.ok(&["todo", "add", "--text", "must pass", "--validation-command", "true"]);
    s.ok(&["todo", "add", "--text", "will fail", "--validation-command", "sh -c 'echo nope; exit 3'"]);
    let ok = s.json(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a"]);
    assert_eq!(ok["todo"]["status"], "done");
    assert_eq!(ok["evidence"][0]["author"], "loopx");
    assert_eq!(ok["evidence"][0]["exit_code"], 0);
    assert_eq!(ok["evidence"][0]["command"], serde_json::json!(["true"]));
    assert!(ok["evidence"][0]["output_digest"].as_str().unwrap().starts_with("sha256:"));
    let r = s.fails(1, &["todo", "complete", "--todo-id", "t2", "--agent-id", "a", "--evidence", "trust me"]);
    assert!(
        r.stderr.contains("exit code 3") && r.stderr.contains("completion of t2 refused"),
        "{}",
        r.stderr
    );
    let shown = s.json(&["todo", "show", "--todo-id", "t2"]);
    assert_eq!(shown["todo"]["status"], "open");
    assert_eq!(shown["evidence"][0]["exit_code"], 3, "the failure is recorded");
    // The working directory of the check is the project.
    s.ok(&["todo", "add", "--text", "needs the project dir", "--validation-command", "test -d .loopx"]);
    s.ok(&["todo", "complete", "--todo-id", "t3", "--agent-id", "a"]);
    s.fails(
        2,
        &["todo", "add", "--text", "x", "--validation-command", "true", "--validation-timeout", "forever"],
    );
}

#[test]
fn scheduler_reports_and_user_gate_spelling() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cx", "--agent-type", "codex-app"]);
    let r = s.json(&[
        "quota",
        "scheduler-ack",
        "--agent-id",
        "cx",
        "--cadence-minutes",
        "6",
        "--rrule",
        "FREQ=MINUTELY;INTERVAL=6",
    ]);
    assert_eq!(r["cadence_minutes"], 6);
    let r = s.json(&["quota", "scheduler-fail", "--agent-id", "cx", "--error", "automation API unavailable"]);
    assert_eq!(r["error"], "automation API unavailable");
    s.fails(2, &["quota", "scheduler-ack", "--agent-id", "cx", "--rrule", "every minute"]);
    // The prior art's spelling of a goal-wide gate.
    let g =
        s.json(&["todo", "add", "--role", "user", "--task-class", "user_gate", "--text", "Which license?"]);
    assert_eq!(g["gate"]["blocks"], serde_json::json!({"scope": "goal"}));
    let d = s.json(&["quota", "should-run", "--agent-id", "cx"]);
    assert_eq!(d["decision"], "ask_user");
    s.fails(2, &["todo", "add", "--task-class", "user_gate", "--text", "agent role"]);
    // A cadence change never spends.
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 0);
}

#[test]
fn bad_tick_input_is_refused_and_changes_nothing() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    s.ok(&["todo", "add", "--text", "work"]);
    let cases: &[(&[&str], i32, &str)] = &[
        (&["gate", "ask", "--question", "q", "--blocks", "everyone"], 2, "invalid blocking mode"),
        (&["gate", "ask", "--question", "q", "--blocks", "todos:t9"], 1, "todo t9 not found"),
        (&["gate", "ask", "--question", "q", "--blocks", "agent:ghost"], 1, "not registered"),
        (&["gate", "ask", "--question", "q"], 2, "--blocks"),
        (&["gate", "answer", "g7", "--approve"], 1, "gate g7 not found"),
        (&["gate", "answer", "g1"], 2, "--approve"),
        (&["gate", "answer", "g1", "--approve", "--reject"], 2, "cannot be used with"),
        (&["quota", "spend-slot", "--agent-id", "a", "--todo-id", "t1", "--slots", "0"], 2, "--slots"),
        (&["goal", "set", "--budget-usd", "-1"], 2, "between 0 and 1000000"),
        (&["goal", "set", "--budget-tokens", "-5"], 2, "--budget-tokens"),
        (&["goal", "set", "--compute", "1.5"], 2, "between 0 and 1"),
        (&["goal", "set", "--window-hours", "0"], 2, "--window-hours"),
        (&["quota", "should-run", "--agent-id", "a", "--turn-instance-id", "turn 1"], 2, "invalid turn id"),
        (
            &["quota", "should-run", "--agent-id", "a", "--runtime-profile", "turbo"],
            2,
            "invalid runtime profile",
        ),
        (&["quota", "should-run", "--agent-id", "ghost"], 1, "not registered"),
        (
            &[
                "refresh-state",
                "--agent-id",
                "a",
                "--todo-id",
                "t1",
                "--classification",
                "Big Thing",
                "--delivery-outcome",
                "outcome_gap",
            ],
            2,
            "invalid classification",
        ),
        (
            &[
                "refresh-state",
                "--agent-id",
                "a",
                "--todo-id",
                "t1",
                "--classification",
                "fix",
                "--delivery-outcome",
                "great",
            ],
            2,
            "invalid delivery outcome",
        ),
        (&["quota", "void-slot", "--spend-id", "x1"], 2, "invalid spend"),
        (&["todo", "add", "--text", "x", "--after-gate", "g5"], 1, "gate g5 not found"),
    ];
    for (args, code, fragment) in cases {
        let before = s.tree();
        let r = s.run(args);
        assert_eq!(r.code, *code, "loopx {args:?}: {}", r.stderr);
        assert!(r.stderr.contains(fragment), "loopx {args:?}: stderr lacks {fragment:?}:\n{}", r.stderr);
        assert_eq!(s.tree(), before, "loopx {args:?} changed files");
    }
}
