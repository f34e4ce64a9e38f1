//! Every command through the real binary: success and refusal paths.

use loopx_tests::{Sandbox, events};

#[test]
fn init_creates_state_and_reuses_it_without_overwriting() {
    let s = Sandbox::new();
    let r = s.json(&["init", "--goal-id", "main", "--objective", "ship the feature"]);
    assert_eq!(r["created_project"], true);
    assert_eq!(r["created_goal"], true);
    assert_eq!(r["goal"]["goal"]["objective"], "ship the feature");
    let gitignore = std::fs::read_to_string(s.state_dir().join(".gitignore")).unwrap();
    assert!(gitignore.lines().any(|l| l == "*"), "{gitignore}");
    let before = s.tree();

    // Same again, and with another objective: the goal is kept, nothing is rewritten.
    let r = s.json(&["init", "--goal-id", "main", "--objective", "ship the feature"]);
    assert_eq!((r["created_project"].as_bool(), r["created_goal"].as_bool()), (Some(false), Some(false)));
    let r = s.run(&["connect", "--goal-id", "main", "--objective", "something else"]);
    assert_eq!(r.code, 0);
    assert!(r.stderr.contains("exists with another objective"), "{}", r.stderr);
    assert_eq!(s.tree(), before);
    assert_eq!(s.json(&["status"])["objective"], "ship the feature");
}

#[test]
fn init_without_a_goal_creates_only_the_project() {
    let s = Sandbox::new();
    let r = s.json(&["init"]);
    assert_eq!(r["created_project"], true);
    assert!(r.get("goal").is_none());
    let r = s.fails(1, &["status"]);
    assert!(r.stderr.contains("no goal yet") && r.stderr.contains("loopx goal create"), "{}", r.stderr);
    let r = s.fails(2, &["init", "--goal-id", "other"]);
    assert!(r.stderr.contains("--objective is needed"), "{}", r.stderr);
}

#[test]
fn commands_find_the_project_from_a_subdirectory_or_by_flag() {
    let s = Sandbox::new();
    s.init();
    let sub = s.root.join("src/deep/er");
    std::fs::create_dir_all(&sub).unwrap();
    let r = s.run_in(&sub, &["status", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["goal_id"], "main");
    let elsewhere = s.home.clone();
    let project = s.root.to_string_lossy().into_owned();
    let r = s.run_in(&elsewhere, &["--project", &project, "status", "--json"]);
    assert_eq!(r.json()["goal_id"], "main");
    let r = s
        .command()
        .current_dir(&elsewhere)
        .env("LOOPX_PROJECT", &project)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(r.status.success());
}

#[test]
fn goals_are_created_listed_shown_set_stopped_and_resumed() {
    let s = Sandbox::new();
    s.init();
    let r =
        s.json(&["goal", "create", "--goal-id", "docs", "--objective", "write the docs", "--title", "Docs"]);
    assert_eq!(r["goal"]["id"], "docs");
    assert_eq!(r["is_default"], false);
    let r = s.fails(1, &["goal", "create", "--goal-id", "docs", "--objective", "again"]);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);

    let l = s.json(&["goal", "list"]);
    assert_eq!(l["default_goal"], "main");
    assert_eq!(l["goals"].as_array().unwrap().len(), 2);

    let r = s.json(&["goal", "set", "--goal-id", "docs", "--default"]);
    assert_eq!((r["changed"].as_bool(), r["is_default"].as_bool()), (Some(true), Some(true)));
    assert_eq!(s.json(&["status"])["goal_id"], "docs");

    let r = s.json(&["goal", "set", "--goal-id", "main", "--objective", "ship the feature, tested"]);
    assert_eq!(r["goal"]["objective"], "ship the feature, tested");
    let r = s.json(&["goal", "set", "--goal-id", "main", "--objective", "ship the feature, tested"]);
    assert_eq!(r["changed"], false);
    s.fails(2, &["goal", "set", "--goal-id", "main"]);

    let r = s.json(&["goal", "stop", "--goal-id", "main", "--reason", "waiting for review"]);
    assert_eq!(r["goal"]["status"], "stopped");
    assert_eq!(r["goal"]["stop_reason"], "waiting for review");
    assert_eq!(s.json(&["goal", "stop", "--goal-id", "main"])["changed"], false);
    let r = s.json(&["goal", "resume", "--goal-id", "main"]);
    assert_eq!(r["goal"]["status"], "active");
    assert!(r["goal"].get("stop_reason").is_none());

    let d = s.json(&["goal", "show", "--goal-id", "main"]);
    assert_eq!(d["events"], 4);
    assert_eq!(d["counts"]["total"], 0);
    s.fails(1, &["goal", "show", "--goal-id", "nope"]);
    s.fails(2, &["goal", "create", "--objective", "no id"]);
}

#[test]
fn agent_registration_is_additive() {
    let s = Sandbox::new();
    s.init();
    let r = s.json(&["agent", "register", "--agent-id", "claude-1", "--agent-type", "cc"]);
    assert_eq!(r["agent"]["agent_type"], "claude-code");
    let r = s.json(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-app"]);
    assert_eq!(r["agents"], serde_json::json!(["claude-1", "codex-1"]));
    // Re-registering is a no-op; another type or --require-new is refused.
    let r = s.json(&["agent", "register", "--agent-id", "claude-1", "--agent-type", "claude-code"]);
    assert_eq!(r["changed"], false);
    assert_eq!(r["agents"], serde_json::json!(["claude-1", "codex-1"]));
    s.fails(1, &["agent", "register", "--agent-id", "claude-1", "--agent-type", "cursor"]);
    let r =
        s.fails(1, &["agent", "register", "--agent-id", "claude-1", "--agent-type", "cc", "--require-new"]);
    assert!(r.stderr.contains("already registered"), "{}", r.stderr);
    s.fails(2, &["agent", "register", "--agent-id", "user", "--agent-type", "manual"]);

    let l = s.json(&["agent", "list"]);
    let ids: Vec<&str> = l["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["claude-1", "codex-1"]);
    let t = s.json(&["agent", "types"]);
    assert_eq!(t["agent_types"].as_array().unwrap().len(), 9);
}

#[test]
fn agent_types_need_no_project() {
    let s = Sandbox::new();
    let r = s.ok(&["agent", "types"]);
    assert!(r.stdout.contains("codex-cli"), "{}", r.stdout);
}

/// A goal with two agents and three todos.
fn two_agents() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["agent", "register", "--agent-id", "b", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "write the parser", "--priority", "P1"]);
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "write the docs", "--priority", "P3"]);
    s.ok(&["todo", "add", "--text", "approve the schema", "--role", "user", "--priority", "P0"]);
    s
}

#[test]
fn todos_are_added_listed_and_shown() {
    let s = two_agents();
    let l = s.json(&["todo", "list"]);
    assert_eq!(l["total"], 3);
    let ids: Vec<&str> = l["todos"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    let users = s.json(&["todo", "list", "--role", "user"]);
    assert_eq!(users["todos"][0]["id"], "t3");
    let shown = s.json(&["todo", "show", "--todo-id", "t3"]);
    assert_eq!(shown["todo"]["role"], "user");
    assert_eq!(shown["todo"]["created_by"], "user");
    s.fails(1, &["todo", "show", "--todo-id", "t9"]);

    // With two agents, claiming needs --agent-id; a todo added from a person's terminal is
    // the person's.
    let r = s.fails(1, &["todo", "claim", "--todo-id", "t1"]);
    assert!(r.stderr.contains("--agent-id"), "{}", r.stderr);
    let added = s.json(&["todo", "add", "--text", "orphan"]);
    assert_eq!(added["todo"]["created_by"], "user");
    let r = s.fails(1, &["todo", "add", "--agent-id", "ghost", "--text", "x"]);
    assert!(r.stderr.contains("loopx agent register --agent-id ghost"), "{}", r.stderr);

    // The status view puts the user's todo first and picks the next agent todo by priority.
    let st = s.json(&["status"]);
    assert_eq!(st["needs_user"][0]["todo"], "t3");
    assert_eq!(st["next_todo"]["id"], "t1");
}

#[test]
fn claims_have_one_owner() {
    let s = two_agents();
    let r = s.json(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    assert_eq!((r["changed"].as_bool(), r["todo"]["claimed_by"].as_str()), (Some(true), Some("a")));
    // Re-claim by the owner: success, nothing appended.
    let before = events(&s.events_path("main")).len();
    let r = s.json(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    assert_eq!(r["changed"], false);
    assert_eq!(events(&s.events_path("main")).len(), before);
    // Another agent is refused, naming the owner.
    let r = s.fails(1, &["todo", "claim", "--todo-id", "t1", "--agent-id", "b", "--json"]);
    assert_eq!(r.json()["error"]["kind"], "conflict");
    assert!(r.stderr.contains("claimed by a"), "{}", r.stderr);
    // Users' todos are never claimed by agents; claims need an agent.
    s.fails(1, &["todo", "claim", "--todo-id", "t3", "--agent-id", "b"]);
    s.fails(1, &["todo", "claim", "--todo-id", "t2"]);
    // Only the owner releases.
    s.fails(1, &["todo", "release", "--todo-id", "t1", "--agent-id", "b"]);
    let r = s.json(&["todo", "release", "--todo-id", "t1", "--agent-id", "a"]);
    assert!(r["todo"].get("claimed_by").is_none());
    assert_eq!(s.json(&["todo", "release", "--todo-id", "t1", "--agent-id", "a"])["changed"], false);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "b"]);
    // Blocked todos cannot be claimed.
    s.ok(&["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--status", "blocked"]);
    s.fails(1, &["todo", "claim", "--todo-id", "t2", "--agent-id", "a"]);
}

#[test]
fn updates_change_fields_but_never_complete() {
    let s = two_agents();
    let r = s.json(&[
        "todo",
        "update",
        "--todo-id",
        "t2",
        "--agent-id",
        "a",
        "--text",
        "write the user docs",
        "--priority",
        "P2",
        "--note",
        "scope grew",
    ]);
    assert_eq!(r["todo"]["text"], "write the user docs");
    assert_eq!(r["todo"]["priority"], "P2");
    assert_eq!(r["todo"]["notes"][0]["text"], "scope grew");
    assert_eq!(r["todo"]["notes"][0]["by"], "a");

    let r = s.json(&[
        "todo",
        "update",
        "--todo-id",
        "t2",
        "--agent-id",
        "a",
        "--status",
        "deferred",
        "--resume-when",
        "todo:t1",
    ]);
    assert_eq!(r["todo"]["status"], "deferred");
    assert_eq!(r["todo"]["resume_when"], serde_json::json!({"todo_done": "t1"}));
    let r = s.json(&["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--status", "open"]);
    assert!(r["todo"].get("resume_when").is_none());
    // Waiting on a gate's answer: a gate of the goal is taken, one it does not have is refused.
    s.ok(&[
        "gate",
        "ask",
        "--agent-id",
        "a",
        "--question",
        "ship the docs on Friday?",
        "--blocks",
        "todos:t1",
    ]);
    let defer_until = |g: &str| {
        ["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--status", "deferred", "--resume-when", g]
            .map(str::to_owned)
    };
    let r = s.json(&defer_until("gate:g1").each_ref().map(String::as_str));
    assert_eq!(r["todo"]["resume_when"], serde_json::json!({"gate_answered": "g1"}));
    let r = s.fails(1, &defer_until("gate:g9").each_ref().map(String::as_str));
    assert!(r.stderr.contains("gate g9 not found"), "{}", r.stderr);
    s.json(&["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--status", "open"]);

    let r = s.fails(2, &["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--status", "done"]);
    assert!(r.stderr.contains("loopx todo complete"), "{}", r.stderr);
    s.fails(2, &["todo", "update", "--todo-id", "t2", "--agent-id", "a"]);
    s.fails(2, &["todo", "update", "--todo-id", "t2", "--agent-id", "a", "--resume-when", "todo:t1"]);
    s.fails(
        2,
        &[
            "todo",
            "update",
            "--todo-id",
            "t2",
            "--agent-id",
            "a",
            "--status",
            "deferred",
            "--resume-when",
            "todo:t2",
        ],
    );

    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    s.fails(1, &["todo", "update", "--todo-id", "t1", "--agent-id", "b", "--note", "mine now"]);
    let r = s.json(&["todo", "update", "--todo-id", "t1", "--agent-id", "a", "--clear-claim"]);
    assert!(r["todo"].get("claimed_by").is_none());
    let r = s.json(&[
        "todo",
        "update",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--evidence",
        "parser sketch in notes/parser.md",
    ]);
    assert_eq!(r["todo"]["evidence"], serde_json::json!(["e1"]));
    // Setting a field to its current value changes nothing.
    assert_eq!(
        s.json(&["todo", "update", "--todo-id", "t1", "--agent-id", "a", "--priority", "P1"])["changed"],
        false
    );
}

#[test]
fn completion_needs_proof_and_records_its_continuation() {
    let s = two_agents();
    let r = s.fails(1, &["todo", "complete", "--todo-id", "t1", "--agent-id", "a"]);
    assert!(r.stderr.contains("needs evidence") && r.stderr.contains("--no-follow-up"), "{}", r.stderr);
    s.fails(1, &["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--no-follow-up"]);

    let r = s.json(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--evidence",
        "cargo test: 42 passed",
        "--evidence-kind",
        "test",
        "--next-todo",
        "benchmark the parser",
    ]);
    assert_eq!(r["todo"]["status"], "done");
    assert_eq!(r["todo"]["completion"]["continuation"], "successor");
    assert_eq!(r["todo"]["successors"], serde_json::json!(["t4"]));
    assert_eq!(r["evidence"][0]["kind"], "test");
    assert_eq!(r["successor"]["id"], "t4");
    assert_eq!(r["successor"]["predecessor"], "t1");
    assert_eq!(r["successor"]["priority"], "P1");

    // Completing twice is a no-op.
    let before = events(&s.events_path("main")).len();
    let again = s.json(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--evidence", "again"]);
    assert_eq!(again["changed"], false);
    assert_eq!(events(&s.events_path("main")).len(), before);

    let r = s.json(&[
        "todo",
        "complete",
        "--todo-id",
        "t2",
        "--agent-id",
        "b",
        "--no-follow-up",
        "--note",
        "docs live in the README",
    ]);
    assert_eq!(r["todo"]["completion"]["continuation"], "no_followup");
    s.fails(
        2,
        &[
            "todo",
            "complete",
            "--todo-id",
            "t4",
            "--agent-id",
            "a",
            "--no-follow-up",
            "--note",
            "x",
            "--next-todo",
            "y",
        ],
    );

    // A user todo is completed by a person, not by an agent.
    s.fails(1, &["todo", "complete", "--todo-id", "t3", "--agent-id", "b"]);
    let r = s.json(&["todo", "complete", "--todo-id", "t3", "--agent-id", "user"]);
    assert_eq!(r["todo"]["completion"]["by"], "user");
    let r = s.json(&["todo", "complete", "--todo-id", "t4", "--agent-id", "a", "--evidence", "bench: 3 ms"]);
    assert_eq!(r["todo"]["completion"]["continuation"], "active_goal");
    s.fails(1, &["todo", "update", "--todo-id", "t4", "--agent-id", "a", "--note", "late"]);
    let all = s.json(&["todo", "list", "--all"]);
    assert_eq!(all["todos"].as_array().unwrap().len(), 4);
    assert_eq!(s.json(&["todo", "list"])["todos"].as_array().unwrap().len(), 0);
}

#[test]
fn supersede_closes_a_todo_in_favour_of_replacements() {
    let s = two_agents();
    let r = s.json(&[
        "todo",
        "supersede",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--by",
        "t2",
        "--text",
        "write the lexer",
        "--text",
        "write the grammar",
        "--note",
        "split",
    ]);
    assert_eq!(r["todo"]["status"], "superseded");
    assert_eq!(r["todo"]["superseded_by"], serde_json::json!(["t2", "t4", "t5"]));
    let ids: Vec<&str> =
        r["replacements"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["t2", "t4", "t5"]);
    assert_eq!(r["replacements"][1]["predecessor"], "t1");
    s.fails(1, &["todo", "supersede", "--todo-id", "t1", "--agent-id", "a", "--text", "again"]);
    s.fails(2, &["todo", "supersede", "--todo-id", "t2", "--agent-id", "a"]);
    s.fails(2, &["todo", "supersede", "--todo-id", "t2", "--agent-id", "a", "--by", "t2"]);
    s.fails(1, &["todo", "supersede", "--todo-id", "t2", "--agent-id", "a", "--by", "t99"]);
}

#[test]
fn evidence_is_recorded_and_listed() {
    let s = two_agents();
    let r = s.json(&[
        "evidence",
        "add",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--kind",
        "command",
        "--summary",
        "tests pass",
        "--command",
        "cargo test -p 'my crate'",
        "--exit-code",
        "0",
    ]);
    assert_eq!(r["evidence"]["id"], "e1");
    assert_eq!(r["evidence"]["command"], serde_json::json!(["cargo", "test", "-p", "my crate"]));
    assert_eq!(r["evidence"]["author"], "a");
    s.ok(&[
        "evidence",
        "add",
        "--todo-id",
        "t2",
        "--agent-id",
        "b",
        "--kind",
        "link",
        "--summary",
        "draft",
        "--link",
        "docs/draft.md",
    ]);
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    let one = s.json(&["evidence", "list", "--todo-id", "t2"]);
    assert_eq!(one["evidence"][0]["id"], "e2");
    s.fails(1, &["evidence", "list", "--todo-id", "t9"]);
    s.fails(
        2,
        &["evidence", "add", "--todo-id", "t1", "--agent-id", "a", "--kind", "vibes", "--summary", "x"],
    );
    // Evidence already attached lets the todo complete without more.
    let r = s.json(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a"]);
    assert_eq!(r["todo"]["status"], "done");
}

#[test]
fn a_single_registered_agent_is_implied() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "solo", "--agent-type", "cc"]);
    s.ok(&["todo", "add", "--text", "one thing"]);
    let r = s.json(&["todo", "claim", "--todo-id", "t1"]);
    assert_eq!(r["todo"]["claimed_by"], "solo");
}

#[test]
fn a_turn_id_makes_a_mutation_happen_once() {
    let s = two_agents();
    let args = ["todo", "add", "--agent-id", "a", "--text", "retry-safe", "--turn-instance-id", "turn-7"];
    let first = s.ok(&[&args[..], &["--json"]].concat()).stdout;
    let second = s.run(&[&args[..], &["--json"]].concat());
    assert_eq!(second.code, 0);
    assert_eq!(second.stdout, first, "a replay returns the first receipt byte for byte");
    assert_eq!(s.json(&["todo", "list"])["total"], 4);
    // The same key by another agent, or for another command, is a different turn.
    s.ok(&["todo", "add", "--agent-id", "b", "--text", "retry-safe", "--turn-instance-id", "turn-7"]);
    assert_eq!(s.json(&["todo", "list"])["total"], 5);
    // A replay after other work still returns the first receipt.
    assert_eq!(s.run(&[&args[..], &["--json"]].concat()).stdout, first);
    // A claim replayed after the todo moved on describes the todo as it is now, and appends nothing.
    let claim =
        ["todo", "claim", "--todo-id", "t1", "--agent-id", "a", "--turn-instance-id", "turn-8", "--json"];
    s.ok(&claim);
    s.ok(&["todo", "update", "--todo-id", "t1", "--agent-id", "a", "--note", "halfway"]);
    let n = events(&s.events_path("main")).len();
    let again = s.ok(&claim).json();
    assert_eq!(again["todo"]["notes"][0]["text"], "halfway");
    assert_eq!(events(&s.events_path("main")).len(), n);
    let ev = events(&s.events_path("main"));
    let turns: Vec<&str> = ev.iter().filter_map(|e| e["turn"].as_str()).collect();
    assert_eq!(turns.len(), 3, "{turns:?}");
    assert!(turns[1].starts_with("todo.add:b:turn-7#"), "{turns:?}");
    assert!(
        ev.iter().any(|e| e["kind"] == "todo_claimed" && e.get("receipt").is_none()),
        "a claim keeps only its key"
    );
}

#[test]
fn history_and_status_describe_the_goal() {
    let s = two_agents();
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    let h = s.json(&["history", "--limit", "2"]);
    assert_eq!(h["total"], 7);
    let kinds: Vec<&str> =
        h["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["todo_added", "todo_claimed"]);
    let text = s.ok(&["status"]).stdout;
    for want in [
        "objective:   ship the feature",
        "needs you:   t3 P0 approve the schema",
        "in progress: t1 write the parser — a",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let d = s.json(&["doctor"]);
    assert_eq!(d["healthy"], true);
}

#[test]
fn goal_md_is_regenerated_and_lists_the_work() {
    let s = two_agents();
    let md = std::fs::read_to_string(s.state_dir().join("goals/main/GOAL.md")).unwrap();
    assert!(md.contains("**Objective:** \"ship the feature\""), "{md}");
    assert!(md.contains("## Needs you") && md.contains("t3 P0 \"approve the schema\""), "{md}");
    assert!(md.contains("## Next") && md.contains("t1 P1 \"write the parser\""), "{md}");
}

/// GOAL.md shows the goal, not the log's position: a commit that changes nothing it shows (a
/// turn's decision recorded) leaves the file as it was, not even rewritten; one that does
/// rewrites it.
#[test]
fn goal_md_is_rewritten_only_when_what_it_shows_changes() {
    use std::os::unix::fs::MetadataExt;
    let s = two_agents();
    let path = s.state_dir().join("goals/main/GOAL.md");
    let read = || (std::fs::read_to_string(&path).unwrap(), std::fs::metadata(&path).unwrap().ino());
    let before = read();
    let events = || events(&s.state_dir().join("goals/main/events.jsonl")).len();
    let n = events();
    s.ok(&["quota", "should-run", "--agent-id", "a", "--turn-instance-id", "turn-1"]);
    assert_eq!(events(), n + 1, "the decision is committed");
    assert_eq!(read(), before, "GOAL.md left as it was");
    s.ok(&["todo", "add", "--text", "one more", "--agent-id", "user"]);
    let after = read();
    assert!(after.0.contains("one more") && after.1 != before.1, "{}", after.0);
}

#[test]
fn a_host_session_binds_to_one_agent() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cx-1", "--agent-type", "codex-app"]);
    s.ok(&["agent", "register", "--agent-id", "cx-2", "--agent-type", "codex-app"]);
    let r =
        s.json(&["agent", "bind-thread", "--agent-id", "cx-1", "--host", "codex-app", "--thread", "thr-9"]);
    assert_eq!((r["agent"].as_str(), r["changed"].as_bool()), (Some("cx-1"), Some(true)));
    assert_eq!(
        s.json(&["agent", "bind-thread", "--agent-id", "cx-1", "--host", "codex-app", "--thread", "thr-9"])["changed"],
        false
    );
    let r = s.fails(
        1,
        &["agent", "bind-thread", "--agent-id", "cx-2", "--host", "codex-app", "--thread", "thr-9"],
    );
    assert!(r.stderr.contains("already acts as cx-1"), "{}", r.stderr);
    let r = s.fails(
        1,
        &["agent", "bind-thread", "--agent-id", "cx-1", "--host", "codex-app", "--thread", "thr-10"],
    );
    assert!(r.stderr.contains("never share an identity"), "{}", r.stderr);
    s.fails(1, &["agent", "bind-thread", "--agent-id", "ghost", "--host", "codex-app", "--thread", "t"]);
    s.fails(2, &["agent", "bind-thread", "--agent-id", "cx-2", "--host", "codex app", "--thread", "t"]);
}

#[test]
fn coloured_tables_line_up_like_plain_ones() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "open one"]);
    s.ok(&["todo", "add", "--text", "done one"]);
    s.ok(&["todo", "add", "--text", "blocked one"]);
    s.ok(&["todo", "complete", "--todo-id", "t2", "--evidence", "checked"]);
    s.ok(&["todo", "update", "--todo-id", "t3", "--status", "blocked"]);
    let plain = s.ok(&["todo", "list", "--all"]).stdout;
    let coloured = s.ok(&["todo", "list", "--all", "--color", "always"]).stdout;
    assert!(coloured.contains('\x1b'), "colour is on: {coloured:?}");
    let visible = strip_ansi(&coloured);
    assert_eq!(visible, plain, "the same columns with colour on");
    let text_at: Vec<usize> = plain
        .lines()
        .zip(["open one", "done one", "blocked one"])
        .map(|(l, text)| l.find(text).unwrap())
        .collect();
    assert!(text_at.windows(2).all(|w| w[0] == w[1]), "{plain}");
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn a_refusal_names_the_command_out_of_it() {
    let s = two_agents();
    s.ok(&["goal", "set", "--handoff-mode", "hard_lease"]);
    let r = s.fails(1, &["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    let want = "loopx lease acquire --goal-id main --todo-id t1 --agent-id a --ttl 45m";
    assert!(r.stderr.contains(&format!("hint: take a lease on it instead: {want}")), "{}", r.stderr);
    let j = s.fails(1, &["todo", "claim", "--todo-id", "t1", "--agent-id", "a", "--json"]).json();
    assert_eq!(j["error"]["next_commands"], serde_json::json!([want]));
    // The command it names works.
    let words: Vec<&str> = want.split(' ').skip(1).collect();
    s.ok(&words);
}

/// An open todo someone holds reads `claimed`, and `--status claimed` lists just those.
#[test]
fn a_claimed_todo_reads_claimed_and_filters_so() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "held"]);
    s.ok(&["todo", "add", "--text", "free"]);
    s.ok(&["agent", "register", "--agent-id", "a1", "--agent-type", "other"]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a1"]);
    let list = s.ok(&["todo", "list"]).stdout;
    assert!(
        list.contains("t1    P2 claimed    held  — by a1") && list.contains("t2    P2 open       free"),
        "{list}"
    );
    let ids = |args: &[&str]| -> Vec<String> {
        let v = s.json(&[&["todo", "list"][..], args].concat());
        v["todos"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(&["--status", "claimed"]), ["t1"]);
    assert_eq!(ids(&["--status", "claimed", "--status", "open"]), ["t1", "t2"]);
    assert_eq!(ids(&["--status", "open"]), ["t1", "t2"], "claimed is a kind of open");
    s.fails(2, &["todo", "list", "--status", "grabbed"]);
}
