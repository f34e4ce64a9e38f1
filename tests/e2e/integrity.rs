//! A log changed by hand is refused; a torn final line is recovered; doctor explains.

use std::fs;

use loopx_tests::Sandbox;

fn goal_with_history() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "cc"]);
    for i in 0..6 {
        s.ok(&["todo", "add", "--text", &format!("task number {i}")]);
    }
    s
}

#[test]
fn a_byte_changed_mid_log_is_refused_by_every_command() {
    let s = goal_with_history();
    let path = s.events_path("main");
    let mut bytes = fs::read(&path).unwrap();
    // Change one byte inside line 4's todo text ("task number 1" → "task number 9").
    let text = String::from_utf8(bytes.clone()).unwrap();
    let at = text.find("task number 1").unwrap() + "task number ".len();
    let line = text[..at].matches('\n').count() + 1;
    bytes[at] = b'9';
    fs::write(&path, &bytes).unwrap();
    let before = s.tree();

    for args in [
        &["status"][..],
        &["todo", "list"],
        &["todo", "show", "--todo-id", "t1"],
        &["todo", "add", "--text", "more"],
        &["todo", "claim", "--todo-id", "t1"],
        &["goal", "show"],
        &["agent", "list"],
        &["evidence", "list"],
        &["history"],
    ] {
        let r = s.fails(4, args);
        assert!(r.stderr.contains("loopx doctor"), "{args:?}: {}", r.stderr);
    }
    let r = s.fails(4, &["doctor"]);
    // The edited line still parses, so the break shows on the line after it.
    let named = format!("line {}", line + 1);
    assert!(r.stdout.contains(&named), "doctor should name {named}:\n{}", r.stdout);
    assert_eq!(s.tree(), before, "refusals and doctor change nothing");
}

#[test]
fn an_unparseable_line_is_named_by_doctor() {
    let s = goal_with_history();
    let path = s.events_path("main");
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{not json";
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    s.fails(4, &["status"]);
    let d = s.fails(4, &["doctor", "--json"]).json();
    let detail = d["goals"][0]["checks"][0]["detail"].as_str().unwrap();
    assert!(detail.starts_with("line 3"), "{detail}");
}

#[test]
fn a_torn_final_line_is_cut_and_reported() {
    let s = goal_with_history();
    let path = s.events_path("main");
    let committed = fs::read(&path).unwrap();
    let mut torn = committed.clone();
    torn.extend_from_slice(br#"{"seq":9,"at":"2026-11-29T10:00:00.000Z","actor":"a","kind":"todo_add"#);
    fs::write(&path, &torn).unwrap();

    let d = s.fails(4, &["doctor"]);
    assert!(d.stdout.contains("incomplete final line"), "{}", d.stdout);
    let r = s.ok(&["todo", "list", "--json"]);
    assert!(r.stderr.contains("recovered") && r.stderr.contains("incomplete final line"), "{}", r.stderr);
    assert_eq!(r.json()["total"], 6);
    assert_eq!(fs::read(&path).unwrap(), committed);
    s.ok(&["todo", "add", "--text", "after the crash"]);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_missing_or_stale_snapshot_is_rebuilt() {
    let s = goal_with_history();
    let snap = s.state_dir().join("goals/main/snapshot.json");
    let old = fs::read(&snap).unwrap();
    s.ok(&["todo", "add", "--text", "one more"]);
    // A snapshot one event behind (a crash before its rename) is caught up.
    fs::write(&snap, &old).unwrap();
    let r = s.ok(&["status", "--json"]);
    assert!(r.stderr.contains("behind the log"), "{}", r.stderr);
    assert_eq!(r.json()["counts"]["total"], 7);
    fs::remove_file(&snap).unwrap();
    let r = s.ok(&["todo", "list", "--json"]);
    assert!(r.stderr.contains("snapshot.json was missing"), "{}", r.stderr);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_hand_edited_goal_md_is_reported_and_overwritten() {
    let s = goal_with_history();
    let md = s.state_dir().join("goals/main/GOAL.md");
    fs::write(&md, "# all done, stop working\n").unwrap();
    let d = s.fails(4, &["doctor"]);
    assert!(d.stdout.contains("edited by hand"), "{}", d.stdout);
    let r = s.ok(&["todo", "add", "--text", "keep going"]);
    assert!(r.stderr.contains("edited by hand"), "{}", r.stderr);
    assert!(fs::read_to_string(&md).unwrap().contains("keep going"));
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn an_unreadable_project_file_is_an_integrity_error() {
    let s = goal_with_history();
    fs::write(s.state_dir().join("project.json"), "{ not json").unwrap();
    let before = s.tree();
    let r = s.fails(4, &["status"]);
    assert!(r.stderr.contains("project.json is not valid"), "{}", r.stderr);
    s.fails(4, &["init", "--goal-id", "main", "--objective", "ship the feature"]);
    assert_eq!(s.tree(), before);
}

/// Every file in `dir`, recursively (names only).
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_in(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

/// A directory inside `.loopx/` that is a symbolic link (or `.loopx` itself) is never written
/// through, whatever the command: nothing lands where the link points.
#[test]
fn a_linked_directory_inside_loopx_is_never_written_through() {
    let cases: [(&str, &[&[&str]]); 4] = [
        (".loopx/goals/g2", &[&["goal", "create", "--goal-id", "g2", "--objective", "elsewhere"]]),
        (
            ".loopx/goals",
            &[
                &["goal", "create", "--goal-id", "g3", "--objective", "elsewhere"],
                &["todo", "add", "--text", "x"],
            ],
        ),
        (".loopx/installs", &[&["host", "install", "claude-code"]]),
        (
            ".loopx",
            &[
                &["init", "--goal-id", "main", "--objective", "x"],
                &["goal", "create", "--goal-id", "g4", "--objective", "x"],
            ],
        ),
    ];
    for (link, commands) in cases {
        let s = Sandbox::new();
        let elsewhere = s.root.parent().unwrap().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        if link != ".loopx" {
            s.init();
            let at = s.root.join(link);
            if at.exists() {
                // Keep what was there, behind the link, as a person moving it would.
                for e in fs::read_dir(&at).unwrap().flatten() {
                    fs::rename(e.path(), elsewhere.join(e.file_name())).unwrap();
                }
                fs::remove_dir(&at).unwrap();
            }
            std::os::unix::fs::symlink(&elsewhere, &at).unwrap();
        } else {
            std::os::unix::fs::symlink(&elsewhere, s.root.join(".loopx")).unwrap();
        }
        let before = files_in(&elsewhere);
        for args in commands {
            let r = s.run(args);
            // Refused as a link, or (a linked `.loopx/` holding no project) as no project.
            assert!(matches!(r.code, 1 | 4), "{link}: loopx {args:?}: {}{}", r.stdout, r.stderr);
            assert!(
                r.stderr.contains("symbolic link") || r.stderr.contains("not inside a loopx project"),
                "{link}: {}",
                r.stderr
            );
        }
        assert_eq!(files_in(&elsewhere), before, "{link}: something was written through the link");
    }
}
