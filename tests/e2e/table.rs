//! The live todos as a table (kernel `table`): `snapshot.json` holds a key line per live todo
//! and their JSON lives in a body file that commits append to; a file mostly dead is replaced
//! by a new one. A crash while replacing it, and stores written before it, are mended (a crash
//! at each commit step, the body file's included: `trust.rs`).

use std::path::PathBuf;

use loopx_tests::{Sandbox, expected, fixture_project};

fn body_files(s: &Sandbox) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(s.state_dir().join("goals/main"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("todos-"))
        .collect();
    files.sort();
    files
}

fn notes(s: &Sandbox, todo: &str) -> usize {
    s.json(&["todo", "show", "--todo-id", todo])["todo"]["notes"].as_array().map_or(0, Vec::len)
}

#[test]
fn commits_append_to_the_body_file_and_a_mostly_dead_one_is_replaced() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "grows"]);
    s.ok(&["todo", "add", "--text", "stays"]);
    let first = body_files(&s);
    assert_eq!(first.len(), 1, "{first:?}");
    // Each note rewrites t1, so the file keeps a dead copy of it; once dead copies pass 1 MiB
    // (and twice what is live), the commit writes the live todos to a new file. That commit
    // is killed just before its new file is renamed into place.
    let note = "n".repeat(4000);
    let mut sent = 0;
    loop {
        sent += 1;
        assert!(sent < 40, "no new body file after {sent} notes");
        let out = s
            .command()
            .env("LOOPX_FAULT", "before-bodies-rename")
            .args(["todo", "update", "--todo-id", "t1", "--note", &note])
            .output()
            .unwrap();
        if !out.status.success() {
            break;
        }
        assert_eq!(body_files(&s), first, "note {sent}: appended to the same file");
    }
    assert!(sent > 10, "replaced only when mostly dead (after {sent} notes)");
    // The event was durable before the file: the note is committed, and the next command
    // rebuilds the views from the log, into one new file holding what is live.
    assert_eq!(notes(&s, "t1"), sent);
    let now = body_files(&s);
    assert_eq!(now.len(), 1, "the old file and the half-written one are gone: {now:?}");
    assert_ne!(now, first);
    let live = std::fs::metadata(&now[0]).unwrap().len();
    assert!(live < (sent as u64 + 4) * 4100, "{live} bytes: only the live copies");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    // Without the fault, the same happens on the way: appends, then a new file.
    let before = body_files(&s);
    s.ok(&["todo", "update", "--todo-id", "t2", "--note", "a small note"]);
    assert_eq!(body_files(&s), before, "a small change appends");
    let t2 = s.json(&["todo", "show", "--todo-id", "t2"]);
    assert_eq!(t2["todo"]["text"], "stays");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_store_from_before_the_table_is_upgraded_on_first_use() {
    // Written by the loopx before the todo table (`tests/fixtures/store-v2`): 81 todos, 70
    // closed and 6 of them archived, a claim, a deferred todo, a gate on two todos, a person's
    // todo; with what that loopx printed for it.
    let (s, want) = fixture_project("store-v2");
    let log_before = std::fs::read(s.events_path("main")).unwrap();
    let archive = s.state_dir().join("goals/main/archive.jsonl");
    let archive_before = std::fs::read(&archive).unwrap();
    let r = s.ok(&["todo", "list", "--all", "--json"]);
    assert!(r.stderr.contains("written by an older loopx (version 2)"), "{}", r.stderr);
    assert_eq!(r.json(), expected(&want, "todo-list-all.json"), "every todo reads as before");
    // Nothing is added to the log or the archive: only the views are written anew.
    assert_eq!(std::fs::read(s.events_path("main")).unwrap(), log_before);
    assert_eq!(std::fs::read(&archive).unwrap(), archive_before);
    let snapshot = std::fs::read_to_string(s.state_dir().join("goals/main/snapshot.json")).unwrap();
    assert!(snapshot.starts_with("{\"schema_version\":4,"), "{snapshot}");
    assert_eq!(body_files(&s).len(), 1);
    for (args, file) in [
        (&["status"][..], "status.json"),
        (&["gate", "list"], "gate-list.json"),
        (&["todo", "show", "--todo-id", "t72"], "todo-show-t72.json"),
        (&["evidence", "list"], "evidence-list.json"),
    ] {
        assert_eq!(s.json(args), expected(&want, file), "{args:?} reads as before");
    }
    let (now, old) =
        (s.json(&["quota", "should-run", "--agent-id", "a"]), expected(&want, "should-run-a.json"));
    for field in ["decision", "reason", "state", "selected_todo", "user_channel"] {
        assert_eq!(now[field], old[field], "should-run's {field}");
    }
    // The log's last root is of the older kind until the next commit; reads trust it, once
    // checked, and the next commit goes on from it.
    let again = s.ok(&["todo", "list", "--all", "--json"]);
    assert!(again.stderr.is_empty(), "read as current: {}", again.stderr);
    s.ok(&["todo", "claim", "--todo-id", "t76", "--agent-id", "a"]);
    s.ok(&["todo", "complete", "--todo-id", "t76", "--agent-id", "a", "--evidence", "after the upgrade"]);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    let log = std::fs::read(s.events_path("main")).unwrap();
    assert_eq!(log[..log_before.len()], log_before[..], "the old log is kept as it was");
}

/// What a snapshot's state root covers, as the release before the glance encoded it: its lines
/// after the header but the body offsets; of a snapshot with a glance, its marker line as that
/// release wrote it (the number of todos alone) and no glance.
fn hashed_form(snapshot: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(snapshot).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if let Some(marker) = lines[1].strip_prefix("loopx-state 4 ") {
        lines[1] = format!("loopx-state 3 {}", marker.split(' ').next().unwrap());
        let glance: Vec<usize> =
            lines[3].strip_prefix("glance ").unwrap().split(' ').map(|n| n.parse().unwrap()).collect();
        lines.drain(3..4 + glance[3]);
    }
    assert!(lines.len() > 3 && lines[1].starts_with("loopx-state 3 "), "{text}");
    lines[1..lines.len() - 1].join("\n").into_bytes()
}

#[test]
fn a_store_of_the_release_before_the_open_host_catalog_verifies_byte_for_byte() {
    // Written by the release before the host catalog opened (`tests/fixtures/store-v3`, by its
    // make.sh): an agent of every host type, claims, evidence, a handoff, gates, a spend.
    let (s, want) = fixture_project("store-v3");
    let dir = s.state_dir().join("goals/main");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (log, goal_md, state) = (read("events.jsonl"), read("GOAL.md"), hashed_form(&read("snapshot.json")));
    for (args, file) in [
        (&["agent", "list"][..], "agent-list.json"),
        (&["todo", "list", "--all"], "todo-list-all.json"),
        (&["gate", "list", "--all"], "gate-list.json"),
        (&["evidence", "list"], "evidence-list.json"),
        (&["handoff", "list", "--all"], "handoff-list.json"),
    ] {
        assert_eq!(s.json(args), expected(&want, file), "{args:?} reads as before");
    }
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    // Rebuilt from the log alone, the state's root is the one the log recorded (a rebuild
    // refuses a state whose root differs), and what it hashes is the same, byte for byte.
    std::fs::remove_file(dir.join("snapshot.json")).unwrap();
    for body in body_files(&s) {
        std::fs::remove_file(body).unwrap();
    }
    let r = s.ok(&["agent", "list", "--json"]);
    assert!(r.stderr.contains("rebuilt from the event log"), "{}", r.stderr);
    assert_eq!(r.json(), expected(&want, "agent-list.json"));
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    let snapshot = read("snapshot.json");
    assert!(snapshot.starts_with(b"{\"schema_version\":4,"), "the snapshot is of this loopx");
    assert_eq!(hashed_form(&snapshot), state, "the state encodes as the release did, but for its glance");
    assert!(read("events.jsonl") == log, "the log is as it was");
    // GOAL.md is as the release wrote it but for the event number its status line no longer
    // shows, and for one section: that release listed a next todo for each agent while the
    // open goal-wide gate g2 held all work; this one says so, as should-run does.
    let goal_md = String::from_utf8(goal_md).unwrap();
    let at = goal_md.find(" · event ").unwrap();
    let eol = at + goal_md[at..].find('\n').unwrap();
    let goal_md = format!("{}{}", &goal_md[..at], &goal_md[eol..]);
    let (before, rest) = goal_md.split_once("## Next per agent\n\n").unwrap();
    let after = &rest[rest.find("\n## ").unwrap()..];
    let held: String = ["cc1", "cxa", "cxc", "cxi", "cu1", "me", "ot1"]
        .iter()
        .map(|a| format!("- {a}: held until g2 closes\n"))
        .collect();
    assert_eq!(
        String::from_utf8(read("GOAL.md")).unwrap(),
        format!("{before}## Next per agent\n\n{held}{after}"),
        "GOAL.md is as it was, but for the work g2 holds"
    );
}

/// `quota should-run` reads the snapshot only as far as its glance (the head and the few todos
/// a decision may need), checked against the log: with everything after the glance cut away,
/// it answers as before and says nothing, while a command that reads the whole state finds the
/// snapshot short and rebuilds it from the log.
#[test]
fn should_run_reads_the_snapshot_only_as_far_as_its_glance() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "codex-app"]);
    for i in 0..24 {
        s.ok(&["todo", "add", "--text", &format!("todo {i}")]);
    }
    let ask = ["quota", "should-run", "--agent-id", "a"];
    let before = s.json(&ask);
    let path = s.state_dir().join("goals/main/snapshot.json");
    let text = std::fs::read_to_string(&path).unwrap();
    // The header line, the marker line, then as many bytes as the marker says.
    let header = text.find('\n').unwrap() + 1;
    let marker = header + text[header..].find('\n').unwrap() + 1;
    let len: usize = text[header..marker - 1].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(!text[..marker + len].contains("\nt24\t"), "the glance holds the 16 best todos, not t24");
    std::fs::write(&path, &text[..marker + len]).unwrap();
    let r = s.ok(&["quota", "should-run", "--agent-id", "a", "--json"]);
    assert!(r.stderr.is_empty(), "answered at a glance: {}", r.stderr);
    assert_eq!(r.json(), before);
    let r = s.ok(&["status", "--json"]);
    assert!(r.stderr.contains("rebuilt"), "{}", r.stderr);
    assert_eq!(s.json(&ask), before);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

/// Right after an upgrade, `loopx doctor` says a snapshot an older loopx wrote is a note, not a
/// failure: the log verifies, the next command rebuilds the snapshot, and doctor exits 0 and
/// writes nothing; after that command, the snapshot checks out.
#[test]
fn doctor_right_after_an_upgrade_notes_the_older_snapshot_and_passes() {
    for fixture in ["store-v1", "store-v2", "store-v3"] {
        let (s, _) = fixture_project(fixture);
        let before = s.tree();
        let text = s.ok(&["doctor"]).stdout;
        assert!(text.contains("note snapshot: written by an older loopx"), "{fixture}: {text}");
        assert!(!text.contains("FAIL") && text.ends_with("healthy\n"), "{fixture}: {text}");
        let d = s.json(&["doctor"]);
        assert_eq!(d["healthy"], true, "{fixture}: {d}");
        let snapshot =
            &d["goals"][0]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "snapshot").unwrap();
        assert_eq!(
            (&snapshot["ok"], &snapshot["note"]),
            (&true.into(), &true.into()),
            "{fixture}: {snapshot}"
        );
        assert_eq!(s.tree(), before, "{fixture}: doctor writes nothing");
        s.ok(&["status"]);
        let text = s.ok(&["doctor"]).stdout;
        assert!(text.contains("ok   snapshot: matches a full replay"), "{fixture}: {text}");
    }
}
