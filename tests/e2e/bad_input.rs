//! Bad input gets a clear error, the documented exit code, and changes nothing.

use std::io::Write;
use std::process::Stdio;

use loopx_tests::Sandbox;

/// (args, exit code, fragments the error must contain)
type Case<'a> = (&'a [&'a str], i32, &'a [&'a str]);

fn check(s: &Sandbox, cases: &[Case<'_>]) {
    for (args, code, fragments) in cases {
        let before = s.tree();
        let r = s.run(args);
        assert_eq!(r.code, *code, "loopx {args:?}\nstderr: {}", r.stderr);
        for f in *fragments {
            assert!(r.stderr.contains(f), "loopx {args:?}: stderr lacks {f:?}:\n{}", r.stderr);
        }
        assert!(r.stderr.starts_with("error:") || *code == 2, "loopx {args:?}:\n{}", r.stderr);
        assert_eq!(s.tree(), before, "loopx {args:?} changed files");
        // The same with --json gives a machine-readable error on stdout.
        if !r.stderr.contains("Usage:") {
            let mut a = args.to_vec();
            a.push("--json");
            let j = s.run(&a);
            assert_eq!(j.code, *code);
            assert!(j.json()["error"]["message"].is_string(), "{}", j.stdout);
        }
    }
}

#[test]
fn outside_a_project_nothing_is_created() {
    let s = Sandbox::new();
    check(
        &s,
        &[
            (&["status"], 1, &["not inside a loopx project", "loopx init"]),
            (&["todo", "add", "--text", "x"], 1, &["loopx init"]),
            (&["init", "--goal-id", "../x", "--objective", "escape"], 2, &["invalid goal id", "--goal-id"]),
            (&["init", "--goal-id", "my goal", "--objective", "spaces"], 2, &["invalid goal id"]),
            (&["init", "--goal-id", "main", "--objective", ""], 2, &["objective is empty"]),
        ],
    );
    assert!(!s.state_dir().exists());
}

#[test]
fn malformed_values_are_refused_before_anything_is_written() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "cc"]);
    s.ok(&["todo", "add", "--text", "real work"]);
    let long_text = "x".repeat(100_000);
    let long_text = long_text.as_str();
    check(
        &s,
        &[
            (&["--goal-id", "../x", "status"], 2, &["invalid goal id"]),
            (
                &["--goal-id", "nope", "status"],
                1,
                &["goal nope not found", "loopx goal create --goal-id nope"],
            ),
            (&["goal", "create", "--goal-id", "Bad Id", "--objective", "x"], 2, &["invalid goal id"]),
            (
                &["agent", "register", "--agent-id", "x", "--agent-type", "codex"],
                2,
                &["ambiguous", "codex-app, codex-cli, codex-ide"],
            ),
            (
                &["agent", "register", "--agent-id", "has space", "--agent-type", "cc"],
                2,
                &["invalid agent id"],
            ),
            (
                &["agent", "register", "--agent-id", "b", "--agent-type", "robot"],
                2,
                &["unknown agent type", "claude-code"],
            ),
            (&["todo", "add", "--text", ""], 2, &["todo text is empty"]),
            (&["todo", "add", "--text", "   "], 2, &["todo text is empty"]),
            (&["todo", "add", "--text", long_text], 2, &["100000 bytes", "limit"]),
            (&["todo", "add", "--text", "x", "--priority", "P9"], 2, &["invalid priority", "P0"]),
            (&["todo", "add", "--text", "x", "--role", "boss"], 2, &["invalid role"]),
            (&["todo", "add", "--text", "x", "--turn-instance-id", "turn 1"], 2, &["invalid turn id"]),
            (&["todo", "claim", "--todo-id", "7"], 2, &["invalid todo"]),
            (&["todo", "claim", "--todo-id", "t99"], 1, &["todo t99 not found"]),
            (
                &["todo", "claim", "--todo-id", "t1", "--agent-id", "ghost"],
                1,
                &["not registered", "loopx agent register"],
            ),
            (&["todo", "update", "--todo-id", "t1", "--status", "finished"], 2, &["invalid todo status"]),
            (
                &["todo", "update", "--todo-id", "t1", "--status", "deferred", "--resume-when", "later"],
                2,
                &["invalid resume condition"],
            ),
            (&["todo", "list", "--status", "nope"], 2, &["invalid todo status"]),
            (
                &[
                    "evidence",
                    "add",
                    "--todo-id",
                    "t1",
                    "--kind",
                    "test",
                    "--summary",
                    "x",
                    "--command",
                    "unterminated 'quote",
                ],
                2,
                &["--command"],
            ),
            (&["todo", "add"], 2, &["--text"]),
            (&["todo", "frobnicate"], 2, &[]),
            (&["--color", "sometimes", "status"], 2, &[]),
        ],
    );
}

#[test]
fn sixty_four_megabytes_of_text_on_stdin_are_refused_without_being_read() {
    let s = Sandbox::new();
    s.init();
    let before = s.tree();
    let mut child = s
        .command()
        .args(["todo", "add", "--text", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&vec![b'y'; 64 << 20]));
    let out = child.wait_with_output().unwrap();
    let written = writer.join().unwrap();
    assert!(written.is_err(), "loopx stops reading at the limit: the rest of the input is never taken");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("longer than the limit of 4000 bytes"));
    assert_eq!(s.tree(), before);
    // Short text on stdin works.
    let mut child = s
        .command()
        .args(["todo", "add", "--text", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from stdin\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["todo"]["text"], "from stdin");
}

#[test]
fn a_bad_lock_timeout_is_a_usage_error() {
    let s = Sandbox::new();
    s.init();
    let out = s.command().env("LOOPX_LOCK_TIMEOUT_MS", "soon").args(["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LOOPX_LOCK_TIMEOUT_MS"));
}

/// A time or a duration of any size is read or refused, never a crash: a timer a thousand
/// years off, a duration that overflows, a time after 9999.
#[test]
fn times_past_what_a_clock_can_write_are_refused_not_a_crash() {
    let s = Sandbox::new();
    s.init();
    check(
        &s,
        &[
            (
                &["gate", "ask", "--kind", "timer", "--until", "+7973y", "--blocks", "goal"],
                2,
                &["longer than a thousand years"],
            ),
            (
                &["gate", "ask", "--kind", "timer", "--until", "+99999999999999999999y", "--blocks", "goal"],
                2,
                &["invalid duration"],
            ),
            (
                &["gate", "ask", "--kind", "timer", "--until", "10000-01-01T00:00:00Z", "--blocks", "goal"],
                2,
                &["invalid time"],
            ),
            (
                &["gate", "ask", "--kind", "timer", "--until", "2026-02-30T00:00:00Z", "--blocks", "goal"],
                2,
                &["invalid time"],
            ),
            (
                &["lease", "acquire", "--todo-id", "t1", "--ttl", "5000y"],
                2,
                &["longer than a thousand years"],
            ),
        ],
    );
    // The furthest time there is still reads and prints.
    s.ok(&["gate", "ask", "--kind", "timer", "--until", "9999-12-31T23:59:59Z", "--blocks", "goal"]);
    assert!(s.ok(&["gate", "list"]).stdout.contains("9999-12-31T23:59:59"));
}

/// Every number a person types is bounded: a budget, a quota, a count, a duration outside its
/// range (a 309-digit budget, a number too large for its type, a negative one, not a number)
/// is refused naming the flag and the range, shown cut when long, and changes nothing.
#[test]
fn every_number_a_person_types_is_bounded_naming_the_flag_and_its_range() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "cc"]);
    s.ok(&["todo", "add", "--text", "real work"]);
    let huge = "9".repeat(309);
    let huge = huge.as_str();
    check(
        &s,
        &[
            (
                &["goal", "set", "--budget-usd", huge],
                2,
                &["--budget-usd", "between 0 and 1000000", "(309 characters)"],
            ),
            (&["goal", "set", "--budget-usd", "inf"], 2, &["--budget-usd", "between 0 and 1000000"]),
            (&["goal", "set", "--budget-usd", "NaN"], 2, &["--budget-usd", "between 0 and 1000000"]),
            (&["goal", "set", "--budget-usd", "-1"], 2, &["--budget-usd", "between 0 and 1000000"]),
            (
                &["goal", "set", "--budget-tokens", huge],
                2,
                &["--budget-tokens", "between 0 and 1000000000000"],
            ),
            (
                &["goal", "set", "--budget-tokens", "1000000000001"],
                2,
                &["--budget-tokens", "and 1000000000000"],
            ),
            (&["goal", "set", "--allowed-slots", "10081"], 2, &["--allowed-slots", "between 0 and 10080"]),
            (&["goal", "set", "--compute", "1.5"], 2, &["--compute", "between 0 and 1"]),
            (&["goal", "set", "--window-hours", "169"], 2, &["--window-hours", "between 1 and 168"]),
            (&["goal", "set", "--slot-minutes", "0"], 2, &["--slot-minutes", "between 1 and 1440"]),
            (&["goal", "set", "--stall-turns", "10001"], 2, &["--stall-turns", "between 0 and 10000"]),
            (&["goal", "set", "--hourly-turn-cap", huge], 2, &["--hourly-turn-cap", "between 0 and 60"]),
            (
                &["quota", "spend-slot", "--todo-id", "t1", "--agent-id", "a", "--tokens", huge],
                2,
                &["--tokens", "between 0 and 1000000000000"],
            ),
            (
                &["quota", "spend-slot", "--todo-id", "t1", "--agent-id", "a", "--usd", "1e309"],
                2,
                &["--usd", "between 0 and 1000000"],
            ),
            (
                &["quota", "spend-slot", "--todo-id", "t1", "--agent-id", "a", "--slots", "10081"],
                2,
                &["--slots", "between 1 and 10080"],
            ),
            (
                &["quota", "scheduler-ack", "--agent-id", "a", "--cadence-minutes", "0"],
                2,
                &["--cadence-minutes", "between 1 and 1440"],
            ),
            (&["history", "--limit", "0"], 2, &["--limit", "between 1 and 10000"]),
            (&["history", "--limit", huge], 2, &["--limit", "between 1 and 10000"]),
            // `--json` before the drive's `--`, where check() would add it after.
            (
                &["drive", "--json", "--max-turns", "0", "--", "true"],
                2,
                &["--max-turns", "between 1 and 1000000"],
            ),
            (
                &["drive", "--json", "--max-turns", huge, "--", "true"],
                2,
                &["--max-turns", "between 1 and 1000000"],
            ),
            (
                &["drive", "--json", "--session-turns", "1001", "--", "true"],
                2,
                &["--session-turns", "between 1 and 1000"],
            ),
            (
                &["drive", "--json", "--max-failures", "0", "--", "true"],
                2,
                &["--max-failures", "between 1 and 1000"],
            ),
            (
                &["drive", "--json", "--turn-timeout", "8d", "--", "true"],
                2,
                &["--turn-timeout must be between 1s and 7days"],
            ),
            (
                &["drive", "--json", "--lease", "5s", "--", "true"],
                2,
                &["--lease must be between 10s and 1day", "hint: e.g. --lease"],
            ),
            (
                &[
                    "gate", "ask", "--kind", "command", "--check", "true", "--every", "10s", "--blocks",
                    "goal",
                ],
                2,
                &["--every must be between 1 min and 24 h"],
            ),
            (&["serve", "--port", "70000"], 2, &["--port", "between 0 and 65535"]),
        ],
    );
    let r = s.fails(2, &["goal", "set", "--budget-usd", huge]);
    assert!(!r.stderr.contains(&huge[..100]), "the number is shown cut: {}", r.stderr);
    let r = s.fails(2, &["drive", "--lease", "5s", "--", "true"]);
    assert!(!r.stderr.contains("--lease-minutes"), "a flag that does not exist: {}", r.stderr);
    // The bounds themselves are taken.
    s.ok(&[
        "goal",
        "set",
        "--budget-usd",
        "1000000",
        "--budget-tokens",
        "1000000000000",
        "--allowed-slots",
        "10080",
    ]);
    s.ok(&["history", "--limit", "10000"]);
}
