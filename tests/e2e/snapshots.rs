//! The `--json` documents, snapshot-tested (times normalised).

use loopx_tests::{Sandbox, normalize};

fn snap(s: &Sandbox, name: &str, args: &[&str]) {
    let v = normalize(&s.json(args));
    insta::assert_json_snapshot!(name, v);
}

#[test]
fn json_documents() {
    let s = Sandbox::new();
    // The project root differs per run; everything else is fixed.
    let mut init =
        s.json(&["init", "--goal-id", "main", "--objective", "ship the feature", "--title", "Feature"]);
    init["project_root"] = "[root]".into();
    insta::assert_json_snapshot!("init", normalize(&init));
    snap(&s, "agent_register", &["agent", "register", "--agent-id", "claude-1", "--agent-type", "cc"]);
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-app"]);
    snap(
        &s,
        "todo_add",
        &[
            "todo",
            "add",
            "--agent-id",
            "claude-1",
            "--text",
            "write the parser",
            "--priority",
            "P1",
            "--scope",
            "src/parser/**",
        ],
    );
    s.ok(&["todo", "add", "--agent-id", "claude-1", "--text", "write the docs"]);
    s.ok(&["todo", "add", "--text", "approve the schema", "--role", "user", "--priority", "P0"]);
    snap(&s, "todo_claim", &["todo", "claim", "--todo-id", "t1", "--agent-id", "claude-1"]);
    snap(
        &s,
        "evidence_add",
        &[
            "evidence",
            "add",
            "--todo-id",
            "t1",
            "--agent-id",
            "claude-1",
            "--kind",
            "test",
            "--summary",
            "parser tests pass",
            "--command",
            "cargo test -p parser",
            "--exit-code",
            "0",
        ],
    );
    snap(
        &s,
        "todo_complete",
        &[
            "todo",
            "complete",
            "--todo-id",
            "t1",
            "--agent-id",
            "claude-1",
            "--evidence",
            "42 tests pass",
            "--evidence-kind",
            "test",
            "--next-todo",
            "fuzz the parser",
        ],
    );
    snap(
        &s,
        "todo_supersede",
        &["todo", "supersede", "--todo-id", "t2", "--agent-id", "codex-1", "--text", "write the user guide"],
    );
    snap(
        &s,
        "todo_update",
        &[
            "todo",
            "update",
            "--todo-id",
            "t4",
            "--agent-id",
            "claude-1",
            "--status",
            "deferred",
            "--resume-when",
            "time:2030-01-01T00:00:00Z",
            "--note",
            "after the release",
        ],
    );
    snap(&s, "todo_list", &["todo", "list", "--all"]);
    snap(&s, "todo_show", &["todo", "show", "--todo-id", "t1"]);
    snap(&s, "evidence_list", &["evidence", "list"]);
    snap(&s, "agent_list", &["agent", "list"]);
    snap(&s, "goal_show", &["goal", "show"]);
    snap(&s, "goal_list", &["goal", "list"]);
    snap(&s, "status", &["status"]);
    snap(&s, "history", &["history", "--limit", "3"]);
    snap(&s, "doctor", &["doctor"]);
    snap(&s, "agent_types", &["agent", "types"]);
    let err = s.fails(1, &["todo", "claim", "--todo-id", "t3", "--agent-id", "codex-1", "--json"]);
    insta::assert_json_snapshot!("error", err.json());
}
