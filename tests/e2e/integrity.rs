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

/// `loopx <args>` in `s`, reaped with `wait4`: its exit code, its stderr and its peak memory
/// (resident, in KiB), its own and no other process's.
#[allow(unsafe_code, clippy::zombie_processes)] // reaped by wait4, which std does not know
fn run_measured(s: &Sandbox, args: &[&str]) -> (i32, String, u64) {
    let err = s.root.parent().unwrap().join("measured.stderr");
    let child = s
        .command()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let mut status: libc::c_int = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `status` and `usage` point to writable memory of the types wait4 fills; the child
    // is ours and not yet reaped (its `Child` is dropped without a wait).
    let got = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    // SAFETY: wait4 returned the pid, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    (code, fs::read_to_string(&err).unwrap(), u64::try_from(usage.ru_maxrss).unwrap())
}

/// A torn final line of 64 MiB (what a runaway append leaves, no newline in it) is cut by the
/// next command without being read whole: the command's peak memory stays far below the
/// tail's size, and the log is its committed lines again.
#[test]
fn a_huge_torn_tail_is_cut_without_being_read_whole() {
    let s = goal_with_history();
    let path = s.events_path("main");
    let committed = fs::read(&path).unwrap();
    let (code, _, small) = run_measured(&s, &["status"]);
    assert_eq!(code, 0);
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        f.write_all(br#"{"seq":8,"at":"2026-11-29T10:00:00.000Z","note":""#).unwrap();
        for _ in 0..64 {
            f.write_all(&chunk).unwrap();
        }
    }
    let (code, stderr, peak) = run_measured(&s, &["status"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("cut an incomplete final line") && stderr.contains("never committed"),
        "{stderr}"
    );
    assert_eq!(fs::read(&path).unwrap(), committed, "the log is its committed lines again");
    eprintln!("peak memory: {peak} KiB recovering, {small} KiB for a plain status");
    assert!(peak < small + 16 * 1024, "{peak} KiB to cut a 64 MiB tail ({small} KiB for a plain status)");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}
