//! Closed work leaves the live state for the goal's archive: it stays readable, it can no longer
//! change, hand edits and crashes are caught and mended, and a store written before the archive
//! is upgraded on first use.

use std::path::Path;

use loopx_tests::{Sandbox, events, expected, fixture_project, normalize};
use serde_json::Value;

/// The live state keeps this many closed todos (kernel `state::CLOSED_KEPT`).
const CLOSED_KEPT: usize = 64;

/// A goal whose agent `a` has completed `n` todos (`t1`…`tn`, one evidence record each) and
/// holds `t{n+1}` open.
fn goal_with_closed(n: usize) -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "add", "--text", "todo 1"]);
    for i in 1..=n {
        let id = format!("t{i}");
        s.ok(&["todo", "claim", "--todo-id", &id, "--agent-id", "a"]);
        s.ok(&[
            "todo",
            "complete",
            "--todo-id",
            &id,
            "--agent-id",
            "a",
            "--evidence",
            &format!("proof {i}"),
            "--next-todo",
            &format!("todo {}", i + 1),
        ]);
    }
    s
}

fn goal_file(s: &Sandbox, name: &str) -> std::path::PathBuf {
    s.state_dir().join("goals/main").join(name)
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

fn ids(list: &Value) -> Vec<String> {
    list["todos"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn closed_work_moves_to_the_archive_and_stays_readable() {
    let s = goal_with_closed(CLOSED_KEPT + 10);
    let archive = goal_file(&s, "archive.jsonl");
    assert_eq!(lines(&archive), 10, "the ten oldest closed todos left the live state");
    // The live state lists t11 onwards: a key line each (their JSON is in the body file).
    let snapshot = std::fs::read_to_string(goal_file(&s, "snapshot.json")).unwrap();
    let listed = |id: &str| snapshot.lines().any(|l| l.starts_with(&format!("{id}\t")));
    assert!(!listed("t1") && !listed("t10") && listed("t11"), "t1…t10 are archived: {snapshot}");

    // Everything still reads as one goal.
    let all = s.json(&["todo", "list", "--all"]);
    assert_eq!(ids(&all).len(), CLOSED_KEPT + 11);
    assert_eq!(ids(&all)[..3], ["t1", "t2", "t3"], "in id order");
    assert_eq!(all["total"], CLOSED_KEPT + 11);
    assert_eq!(ids(&s.json(&["todo", "list", "--status", "done"])).len(), CLOSED_KEPT + 10);
    assert_eq!(ids(&s.json(&["todo", "list"])), [format!("t{}", CLOSED_KEPT + 11)], "open work only");
    let t1 = s.json(&["todo", "show", "--todo-id", "t1"]);
    assert_eq!(t1["todo"]["status"], "done");
    assert_eq!(t1["todo"]["successors"][0], "t2");
    assert_eq!(t1["evidence"][0]["summary"], "proof 1");
    let ev = s.json(&["evidence", "list", "--todo-id", "t1"]);
    assert_eq!(ev["evidence"].as_array().unwrap().len(), 1);
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), CLOSED_KEPT + 10);
    let st = s.json(&["status"]);
    assert_eq!(st["counts"]["done"], CLOSED_KEPT + 10);
    assert_eq!(st["counts"]["total"], CLOSED_KEPT + 11);
    assert_eq!(st["evidence"], CLOSED_KEPT + 10);

    // Archived work can no longer change; the refusal says how to read it.
    let before = s.tree();
    let r = s.fails(1, &["todo", "update", "--todo-id", "t1", "--agent-id", "a", "--note", "late"]);
    assert!(r.stderr.contains("todo t1 is closed and archived"), "{}", r.stderr);
    assert!(r.stderr.contains("loopx todo show --todo-id t1"), "{}", r.stderr);
    s.fails(1, &["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    assert_eq!(s.tree(), before);

    // A todo that waits for an archived one resumes: its condition came true.
    s.ok(&["todo", "add", "--text", "after t1"]);
    let waiting = format!("t{}", CLOSED_KEPT + 12);
    s.ok(&[
        "todo",
        "update",
        "--todo-id",
        &waiting,
        "--agent-id",
        "a",
        "--status",
        "deferred",
        "--resume-when",
        "todo:t1",
    ]);
    let open = ids(&s.json(&["todo", "list", "--status", "deferred"]));
    assert_eq!(open, [waiting]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(d["decision"], "run", "{d}");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_todo_waiting_for_a_superseded_one_still_waits_once_it_is_archived() {
    let s = goal_with_closed(1);
    s.ok(&["todo", "add", "--text", "dropped"]); // t3
    s.ok(&["todo", "supersede", "--todo-id", "t3", "--agent-id", "a", "--by", "t2"]);
    s.ok(&["todo", "add", "--text", "waits for the dropped one", "--priority", "P0"]); // t4
    s.ok(&[
        "todo",
        "update",
        "--todo-id",
        "t4",
        "--agent-id",
        "a",
        "--status",
        "deferred",
        "--resume-when",
        "todo:t3",
    ]);
    // Close enough todos after it that t3 leaves the live state.
    for i in 0..CLOSED_KEPT {
        let id = format!("t{}", 5 + i);
        s.ok(&["todo", "add", "--text", &format!("filler {i}")]);
        s.ok(&["todo", "supersede", "--todo-id", &id, "--agent-id", "a", "--by", "t2"]);
    }
    let t3 = s.json(&["todo", "show", "--todo-id", "t3"]);
    assert_eq!(t3["todo"]["status"], "superseded");
    assert!(std::fs::read_to_string(goal_file(&s, "archive.jsonl")).unwrap().contains("\"dropped\""));
    // For another agent (t2 is a's), t4 is the only candidate, and it still waits for t3.
    s.ok(&["agent", "register", "--agent-id", "b", "--agent-type", "claude-code"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "b"]);
    assert!(d["selected_todo"].is_null(), "t4 still waits for t3: {d}");
    let st = s.json(&["status"]);
    assert_eq!(st["counts"]["superseded"], CLOSED_KEPT + 1);
    assert_eq!(st["counts"]["deferred"], 1);
    assert_eq!(st["latest_evidence"]["summary"], "proof 1", "the latest evidence left with t1: {st}");
}

#[test]
fn a_hand_edited_archive_is_caught_and_rebuilt_from_the_log() {
    let s = goal_with_closed(CLOSED_KEPT + 3);
    let archive = goal_file(&s, "archive.jsonl");
    let good = std::fs::read(&archive).unwrap();

    // Same length, one word changed: reads of closed work refuse, doctor names the file.
    let edited = String::from_utf8(good.clone()).unwrap().replacen("proof 1", "proof X", 1);
    std::fs::write(&archive, &edited).unwrap();
    let r = s.fails(4, &["todo", "list", "--all"]);
    assert!(r.stderr.contains("archive.jsonl") && r.stderr.contains("doctor --repair"), "{}", r.stderr);
    s.fails(4, &["todo", "show", "--todo-id", "t1"]);
    let doc = s.fails(4, &["doctor", "--json"]).json();
    assert_eq!(doc["healthy"], false);
    let checks = doc["goals"][0]["checks"].as_array().unwrap();
    let check = checks.iter().find(|c| c["name"] == "archive").unwrap();
    assert_eq!(check["ok"], false, "{check}");
    // Open work goes on meanwhile; repair gives the archive back, byte for byte.
    s.ok(&["quota", "should-run", "--agent-id", "a"]);
    s.ok(&["doctor", "--repair"]);
    assert_eq!(std::fs::read(&archive).unwrap(), good);
    assert_eq!(s.json(&["todo", "show", "--todo-id", "t1"])["evidence"][0]["summary"], "proof 1");

    // Lines lost (a shorter archive): the next command notices and rebuilds it.
    std::fs::write(&archive, &good[..good.len() / 2]).unwrap();
    let r = s.ok(&["todo", "list", "--all", "--json"]);
    assert_eq!(ids(&r.json()).len(), CLOSED_KEPT + 4, "{}", r.stderr);
    assert_eq!(std::fs::read(&archive).unwrap(), good);
    // Removed: the same.
    std::fs::remove_file(&archive).unwrap();
    s.ok(&["status"]);
    assert_eq!(std::fs::read(&archive).unwrap(), good);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_crash_while_archiving_is_recovered() {
    // (fault point, whether the interrupted completion is committed)
    for (point, committed) in [
        ("after-lock", false),
        ("after-append", true),
        ("after-archive", true),
        ("before-goal-md", true),
        ("after-bodies", true),
        ("before-snapshot-rename", true),
    ] {
        let s = goal_with_closed(CLOSED_KEPT);
        let next = format!("t{}", CLOSED_KEPT + 1);
        s.ok(&["todo", "claim", "--todo-id", &next, "--agent-id", "a"]);
        assert_eq!(lines(&goal_file(&s, "archive.jsonl")), 0, "{point}: nothing archived yet");
        let out = s
            .command()
            .env("LOOPX_FAULT", point)
            .args(["todo", "complete", "--todo-id", &next, "--agent-id", "a", "--evidence", "the crossing"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{point}: the process must die");
        let all = s.json(&["todo", "list", "--all"]);
        let done = all["todos"].as_array().unwrap().iter().filter(|t| t["status"] == "done").count();
        assert_eq!(done, CLOSED_KEPT + usize::from(committed), "{point}");
        assert_eq!(lines(&goal_file(&s, "archive.jsonl")), usize::from(committed), "{point}");
        assert_eq!(s.json(&["doctor"])["healthy"], true, "{point}");
        // And the goal goes on: the next completion archives the next todo.
        let id = if committed {
            s.ok(&["todo", "add", "--text", "one more"]);
            format!("t{}", CLOSED_KEPT + 2)
        } else {
            next.clone()
        };
        s.ok(&["todo", "claim", "--todo-id", &id, "--agent-id", "a"]);
        s.ok(&["todo", "complete", "--todo-id", &id, "--agent-id", "a", "--evidence", "after"]);
        assert_eq!(lines(&goal_file(&s, "archive.jsonl")), 1 + usize::from(committed), "{point}");
        assert_eq!(s.json(&["doctor"])["healthy"], true, "{point}");
    }
}

/// A copy of a project written by loopx before the archive (`tests/fixtures/store-v1`: 103
/// todos, 83 closed, evidence added to a long-closed todo, a todo waiting on a superseded one),
/// with what that loopx printed for it.
fn v1_project() -> (Sandbox, std::path::PathBuf) {
    fixture_project("store-v1")
}

#[test]
fn a_store_from_before_the_archive_is_upgraded_on_first_use() {
    let (s, want) = v1_project();
    let log_before = std::fs::read(s.events_path("main")).unwrap();
    let r = s.ok(&["todo", "list", "--all", "--json"]);
    assert!(r.stderr.contains("upgraded its store"), "{}", r.stderr);
    assert!(!r.stderr.contains("unreadable"), "an old snapshot is not a damaged one: {}", r.stderr);
    assert_eq!(r.json(), expected(&want, "todo-list-all.json"), "every todo reads as before");
    // The log is kept as it was, with the upgrade recorded once after it.
    let log = std::fs::read(s.events_path("main")).unwrap();
    assert_eq!(log[..log_before.len()], log_before[..]);
    let ev = events(&s.events_path("main"));
    assert_eq!(ev.last().unwrap()["kind"], "store_upgraded");
    assert_eq!(lines(&goal_file(&s, "archive.jsonl")), 19);
    assert_eq!(s.json(&["evidence", "list"]), expected(&want, "evidence-list.json"));
    assert_eq!(s.json(&["todo", "show", "--todo-id", "t2"]), expected(&want, "todo-show-t2.json"));
    let mut status = s.json(&["status"]);
    let mut old = expected(&want, "status.json");
    for v in [&mut status, &mut old] {
        v["events"] = Value::Null;
        v["last_event_at"] = Value::Null;
    }
    assert_eq!(normalize(&status), normalize(&old), "status reads as before, but for the new event");
    // The decision is the old one too.
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!((d["decision"].as_str(), d["selected_todo"]["id"].as_str()), (Some("run"), Some("t88")));
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    let upgrades = events(&s.events_path("main")).iter().filter(|e| e["kind"] == "store_upgraded").count();
    assert_eq!(upgrades, 1, "upgraded once");
}

#[test]
fn an_old_store_whose_log_disagrees_with_itself_is_refused_not_upgraded() {
    let (s, _) = v1_project();
    // A completion rewritten as another agent's, its line's hash left alone: the chain breaks.
    // Here the last line's state root is changed instead: the chain still verifies, and only the
    // old encoding's root can tell.
    let path = s.events_path("main");
    let text = std::fs::read_to_string(&path).unwrap();
    let last = text.trim_end().lines().last().unwrap();
    let root = last.split("\"root\":\"").nth(1).unwrap().split('"').next().unwrap();
    let forged = text.replace(last, &last.replace(root, "AAAAAAAAAAAAAAAA"));
    std::fs::write(&path, &forged).unwrap();
    std::fs::remove_file(goal_file(&s, "snapshot.json")).unwrap();
    let before = s.tree();
    let r = s.fails(4, &["status"]);
    assert!(r.stderr.contains("does not give the state its last event records"), "{}", r.stderr);
    assert_eq!(s.tree(), before, "nothing written");
}

#[test]
fn kill_minus_nine_while_archiving_leaves_a_committed_prefix() {
    let s = goal_with_closed(CLOSED_KEPT);
    let mut seed: u64 = 0x5eed_cafe;
    let mut below = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let (mut acked, mut killed) = (0usize, 0usize);
    let mut i = 0u64;
    // Every completion now archives a todo; kill some of them anywhere on the way.
    while i < 40 || ((acked < 3 || killed < 3) && i < 200) {
        let id = format!("t{}", CLOSED_KEPT as u64 + 1 + i);
        s.ok(&["todo", "add", "--text", &format!("more {i}")]);
        s.ok(&["todo", "claim", "--todo-id", &id, "--agent-id", "a"]);
        let mut child = s
            .command()
            .args(["todo", "complete", "--todo-id", &id, "--agent-id", "a", "--evidence", "done"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(below(6000 + 100 * i)));
        let _ = child.kill();
        if child.wait().unwrap().success() {
            acked += 1;
        } else {
            killed += 1;
        }
        // The next command always succeeds, recovering if it must, and every acknowledged
        // completion is there.
        let r = s.run(&["todo", "list", "--status", "done", "--json"]);
        assert_eq!(r.code, 0, "after kill {i}: {}", r.stderr);
        assert!(ids(&r.json()).len() >= CLOSED_KEPT + acked, "after kill {i}");
        i += 1;
    }
    let done = ids(&s.json(&["todo", "list", "--status", "done"])).len();
    assert!(done >= CLOSED_KEPT + acked && done <= CLOSED_KEPT + acked + killed);
    assert_eq!(
        lines(&goal_file(&s, "archive.jsonl")),
        done - CLOSED_KEPT,
        "one line per completion past the kept"
    );
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}
