//! State you can trust: claim races, claim-next, a hammer of mixed mutations, kill -9 at random
//! and at each commit step, corruption handling, lock liveness, leases and takeovers.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use loopx_tests::{Run, Sandbox, events};

fn spawn_many(s: &Arc<Sandbox>, argvs: Vec<Vec<String>>) -> Vec<Run> {
    let barrier = Arc::new(Barrier::new(argvs.len()));
    let handles: Vec<_> = argvs
        .into_iter()
        .map(|argv| {
            let (s, barrier) = (s.clone(), barrier.clone());
            thread::spawn(move || {
                let args: Vec<&str> = argv.iter().map(String::as_str).collect();
                barrier.wait();
                s.run(&args)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A small deterministic random source, so a failure can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Trials per process count: a quick run by default; `LOOPX_CLAIM_TRIALS` for the long form.
fn claim_trials() -> usize {
    std::env::var("LOOPX_CLAIM_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(3)
}

#[test]
fn claim_races_have_exactly_one_winner() {
    let s = Arc::new(Sandbox::new());
    s.init();
    for a in 0..32 {
        s.ok(&["agent", "register", "--agent-id", &format!("p{a}"), "--agent-type", "other"]);
    }
    let mut rng = Rng(0x5eed_1234);
    let mut todo = 0;
    for procs in [2usize, 8, 32] {
        for trial in 0..claim_trials() {
            todo += 1;
            let id = format!("t{todo}");
            s.ok(&["todo", "add", "--agent-id", "p0", "--text", &format!("contested {todo}")]);
            // Random agents in a random order.
            let mut agents: Vec<usize> = (0..32).collect();
            for i in (1..agents.len()).rev() {
                agents.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let argvs = agents[..procs]
                .iter()
                .map(|a| {
                    ["todo", "claim", "--todo-id", &id, "--agent-id", &format!("p{a}")]
                        .map(String::from)
                        .to_vec()
                })
                .collect();
            let runs = spawn_many(&s, argvs);
            let winners: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
            assert_eq!(winners.len(), 1, "{procs} processes, trial {trial}: {runs:#?}");
            for r in runs.iter().filter(|r| r.code != 0) {
                assert_eq!(r.code, 1, "{}", r.stderr);
                assert!(r.stderr.contains("is claimed by p"), "{}", r.stderr);
            }
        }
    }
    let claims = events(&s.events_path("main")).iter().filter(|e| e["kind"] == "todo_claimed").count();
    assert_eq!(claims, todo, "one claim event per contested todo");
}

#[test]
fn claim_next_hands_sixteen_processes_sixteen_todos() {
    let s = Arc::new(Sandbox::new());
    s.init();
    for a in 0..16 {
        s.ok(&["agent", "register", "--agent-id", &format!("n{a}"), "--agent-type", "other"]);
    }
    for t in 0..16 {
        s.ok(&["todo", "add", "--agent-id", "n0", "--text", &format!("job {t}")]);
    }
    let argvs = (0..16)
        .map(|a| ["todo", "claim-next", "--agent-id", &format!("n{a}"), "--json"].map(String::from).to_vec())
        .collect();
    let runs = spawn_many(&s, argvs);
    let mut got = BTreeSet::new();
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(got.insert(r.json()["todo"]["id"].as_str().unwrap().to_owned()), "double claim: {runs:#?}");
    }
    assert_eq!(got.len(), 16);
    // Nothing left: a clear refusal.
    s.ok(&["agent", "register", "--agent-id", "late", "--agent-type", "other"]);
    let r = s.fails(1, &["todo", "claim-next", "--agent-id", "late"]);
    assert!(r.stderr.contains("nothing on goal main is free"), "{}", r.stderr);
    // An agent that holds a todo gets that one back.
    let again = s.json(&["todo", "claim-next", "--agent-id", "n3"]);
    assert_eq!(again["changed"], false);
}

#[test]
fn a_hammer_of_mixed_mutations_loses_nothing() {
    const WORKERS: usize = 32;
    const CYCLES: usize = 20; // five mutations each: 100 per worker
    let s = Arc::new(Sandbox::new());
    s.init();
    for w in 0..WORKERS {
        s.ok(&["agent", "register", "--agent-id", &format!("w{w}"), "--agent-type", "other"]);
    }
    let barrier = Arc::new(Barrier::new(WORKERS));
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (s, barrier) = (s.clone(), barrier.clone());
            thread::spawn(move || {
                let me = format!("w{w}");
                // Busy (exit 3) never committed anything: retrying it is the protocol.
                let run = |args: &[&str]| loop {
                    let out = s.command().env("LOOPX_LOCK_TIMEOUT_MS", "60000").args(args).output().unwrap();
                    match out.status.code() {
                        Some(3) => continue,
                        Some(0) => return String::from_utf8(out.stdout).unwrap(),
                        _ => panic!("{args:?}: {}", String::from_utf8_lossy(&out.stderr)),
                    }
                };
                barrier.wait();
                let mut acked = 0;
                for c in 0..CYCLES {
                    let text = format!("{me} job {c}");
                    let added: serde_json::Value = serde_json::from_str(&run(&[
                        "todo",
                        "add",
                        "--agent-id",
                        &me,
                        "--text",
                        &text,
                        "--json",
                    ]))
                    .unwrap();
                    let id = added["todo"]["id"].as_str().unwrap().to_owned();
                    run(&["todo", "claim", "--todo-id", &id, "--agent-id", &me]);
                    run(&[
                        "todo",
                        "update",
                        "--todo-id",
                        &id,
                        "--agent-id",
                        &me,
                        "--note",
                        &format!("{me} note {c}"),
                    ]);
                    run(&[
                        "evidence",
                        "add",
                        "--todo-id",
                        &id,
                        "--agent-id",
                        &me,
                        "--kind",
                        "test",
                        "--summary",
                        &format!("{me} proof {c}"),
                    ]);
                    run(&["todo", "complete", "--todo-id", &id, "--agent-id", &me]);
                    acked += 5;
                }
                acked
            })
        })
        .collect();
    let acked: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(acked, WORKERS * CYCLES * 5);
    let ev = events(&s.events_path("main"));
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &ev {
        *per.entry((e["actor"].as_str().unwrap().to_owned(), e["kind"].as_str().unwrap().to_owned()))
            .or_default() += 1;
    }
    for w in 0..WORKERS {
        for kind in ["todo_added", "todo_claimed", "todo_updated", "evidence_added", "todo_completed"] {
            assert_eq!(per.get(&(format!("w{w}"), kind.to_owned())), Some(&CYCLES), "w{w} {kind}");
        }
    }
    let list = s.json(&["todo", "list", "--status", "done"]);
    assert_eq!(list["todos"].as_array().unwrap().len(), WORKERS * CYCLES);
    assert_eq!(s.json(&["doctor"])["healthy"], true, "chain valid, snapshot equal to a full replay");
}

#[test]
fn kill_minus_nine_at_random_points_leaves_a_committed_prefix() {
    let s = Sandbox::new();
    s.init();
    let mut rng = Rng(0xdead_beef);
    let mut acked = Vec::new();
    let mut tried = Vec::new();
    // At least 40 kills, and more (with a widening window) until some landed before and some
    // after a commit, however loaded the machine is.
    let mut i = 0u64;
    while i < 40 || ((acked.len() < 3 || tried.len() - acked.len() < 3) && i < 300) {
        let text = format!("crash test {i}");
        let window = 6000 + 200 * i;
        i += 1;
        let mut child = s
            .command()
            .args(["todo", "add", "--text", &text])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_micros(rng.below(window)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        if status.success() {
            acked.push(text.clone());
        }
        tried.push(text);
        // The next command always succeeds, recovering if it must.
        let r = s.run(&["todo", "list", "--json"]);
        assert_eq!(r.code, 0, "after kill {i}: {}", r.stderr);
    }
    assert!(
        !acked.is_empty() && acked.len() < tried.len(),
        "kills landed both before and after commits: {} of {}",
        acked.len(),
        tried.len()
    );
    let list = s.json(&["todo", "list", "--all"]);
    let texts: Vec<String> =
        list["todos"].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap().to_owned()).collect();
    for a in &acked {
        assert_eq!(texts.iter().filter(|t| *t == a).count(), 1, "acknowledged {a:?} is there exactly once");
    }
    // What is there is a prefix of what was tried, in order, each at most once.
    let mut expected = tried.iter();
    for t in &texts {
        assert!(expected.any(|x| x == t), "{t:?} out of order in {texts:?}");
    }
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_crash_at_each_commit_step_is_recovered() {
    // (fault point, whether the interrupted add is committed, whether a todo came before it:
    // the goal's first todo begins its body file, a later one appends to it)
    for (point, committed, before) in [
        ("after-lock", false, true),
        ("after-append", true, true),
        ("before-snapshot-rename", true, true),
        ("before-goal-md", true, true),
        ("after-bodies", true, true),
        ("after-bodies", true, false),
        ("before-bodies-rename", true, false),
    ] {
        let s = Sandbox::new();
        s.init();
        if before {
            s.ok(&["todo", "add", "--text", "before"]);
        }
        let out = s
            .command()
            .env("LOOPX_FAULT", point)
            .args(["todo", "add", "--text", "interrupted"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{point}: the process must die");
        let r = s.ok(&["todo", "list", "--json"]);
        let texts: Vec<String> = r.json()["todos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(texts.contains(&"interrupted".to_owned()), committed, "{point}: {texts:?}");
        assert_eq!(texts.contains(&"before".to_owned()), before, "{point}: {texts:?}");
        let dir = s.state_dir().join("goals/main");
        let bodies = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("todos-"))
            .count();
        assert_eq!(bodies, 1, "{point}: one body file, the one the snapshot names");
        s.ok(&["todo", "add", "--text", "after"]);
        assert_eq!(s.json(&["doctor"])["healthy"], true, "{point}");
        let md = std::fs::read_to_string(dir.join("GOAL.md")).unwrap();
        assert!(md.contains("after"), "{point}: GOAL.md is current again");
    }
}

fn goal_with_history() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "cc"]);
    for i in 0..5 {
        s.ok(&["todo", "add", "--text", &format!("task {i}")]);
    }
    s
}

fn rejected_files(s: &Sandbox) -> Vec<String> {
    let mut v: Vec<String> = s.tree().keys().filter(|k| k.contains(".rejected-")).cloned().collect();
    v.sort();
    v
}

#[test]
fn corruption_truncated_snapshot_and_missing_goal_md_are_recovered() {
    let s = goal_with_history();
    let snap = s.state_dir().join("goals/main/snapshot.json");
    let bytes = std::fs::read(&snap).unwrap();
    std::fs::write(&snap, &bytes[..bytes.len() / 2]).unwrap();
    let r = s.ok(&["status", "--json"]);
    assert!(r.stderr.contains("snapshot.json was unreadable"), "{}", r.stderr);
    assert_eq!(r.json()["counts"]["total"], 5);
    let md = s.state_dir().join("goals/main/GOAL.md");
    std::fs::remove_file(&md).unwrap();
    assert_eq!(s.fails(4, &["doctor"]).code, 4);
    let r = s.ok(&["todo", "list"]);
    assert!(r.stderr.contains("GOAL.md was missing"), "{}", r.stderr);
    assert!(md.exists());
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn corruption_snapshot_ahead_of_the_log_is_refused_then_repaired() {
    let s = goal_with_history();
    let log = s.events_path("main");
    let earlier = std::fs::read(&log).unwrap();
    s.ok(&["todo", "add", "--text", "lost later"]);
    std::fs::write(&log, &earlier).unwrap(); // the log loses its last committed event
    let before = s.tree();
    let r = s.fails(4, &["status"]);
    assert!(
        r.stderr.contains("snapshot.json is at event 8 but events.jsonl ends at event 7"),
        "{}",
        r.stderr
    );
    let d = s.fails(4, &["doctor"]);
    assert!(d.stdout.contains("snapshot"), "{}", d.stdout);
    assert_eq!(s.tree(), before, "refusals and doctor change nothing");
    // The repair keeps what verifies; the lost event stays missing until a person accepts it.
    let r = s.fails(4, &["doctor", "--repair", "--json"]);
    assert!(r.stdout.contains("1 committed event is missing"), "{}", r.stdout);
    s.forget_heads();
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    assert_eq!(rejected_files(&s).len(), 1, "the old snapshot is kept aside");
    assert_eq!(s.json(&["todo", "list"])["total"], 5);
}

#[test]
fn corruption_garbage_appended_is_refused_then_moved_aside() {
    let s = goal_with_history();
    let log = s.events_path("main");
    let good = std::fs::read(&log).unwrap();
    let mut bad = good.clone();
    bad.extend_from_slice(b"garbage written by hand\n");
    std::fs::write(&log, &bad).unwrap();
    let r = s.fails(4, &["todo", "add", "--text", "more"]);
    assert!(r.stderr.contains("line 8"), "{}", r.stderr);
    assert!(s.fails(4, &["doctor"]).stdout.contains("line 8"));
    let r = s.ok(&["doctor", "--repair"]);
    assert!(r.stdout.contains("moved 24 byte(s)"), "{}", r.stdout);
    assert_eq!(std::fs::read(&log).unwrap(), good);
    let aside = rejected_files(&s);
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(s.root.join(&aside[0])).unwrap(), b"garbage written by hand\n");
    s.ok(&["todo", "add", "--text", "more"]);
}

#[test]
fn corruption_a_chain_broken_in_the_middle_keeps_the_valid_prefix() {
    let s = goal_with_history();
    let log = s.events_path("main");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Drop line 4: line 5 no longer chains.
    let broken: String =
        lines.iter().enumerate().filter(|(i, _)| *i != 3).map(|(_, l)| format!("{l}\n")).collect();
    std::fs::write(&log, &broken).unwrap();
    s.fails(4, &["status"]);
    let d = s.fails(4, &["doctor", "--json"]).json();
    assert!(d["goals"][0]["checks"][0]["detail"].as_str().unwrap().starts_with("line 4"), "{d}");
    let r = s.fails(4, &["doctor", "--repair"]);
    assert!(r.stdout.contains("4 committed events are missing"), "{}", r.stdout);
    assert_eq!(events(&log).len(), 3, "the three events before the break are kept");
    s.forget_heads();
    let aside = rejected_files(&s);
    let moved =
        std::fs::read_to_string(s.root.join(aside.iter().find(|f| f.contains("events.jsonl")).unwrap()))
            .unwrap();
    assert_eq!(moved.lines().count(), lines.len() - 4, "everything from the break on is kept aside");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn corruption_project_json_not_json_is_rebuilt_by_repair() {
    let s = goal_with_history();
    s.ok(&["goal", "create", "--goal-id", "second", "--objective", "another"]);
    let pj = s.state_dir().join("project.json");
    std::fs::write(&pj, "{ truncated").unwrap();
    s.fails(4, &["status"]);
    let r = s.ok(&["doctor", "--repair"]);
    assert!(r.stdout.contains("rebuilt it from goals/"), "{}", r.stdout);
    let l = s.json(&["goal", "list"]);
    let ids: Vec<&str> = l["goals"].as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["main", "second"]);
    assert_eq!(l["default_goal"], "main");
    let aside = rejected_files(&s);
    assert_eq!(std::fs::read_to_string(s.root.join(&aside[0])).unwrap(), "{ truncated");
}

#[test]
fn a_hung_lock_holder_times_out_others_and_a_dead_one_blocks_no_one() {
    let s = goal_with_history();
    let mut hung = s
        .command()
        .env("LOOPX_FAULT", "hang-after-lock")
        .args(["todo", "add", "--text", "hangs"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until it holds the lock.
    let lock = s.state_dir().join("goals/main/lock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&lock).unwrap_or_default().contains(&format!("pid {}", hung.id())) {
        assert!(Instant::now() < deadline, "the hanging process never took the lock");
        thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    let out = s
        .command()
        .env("LOOPX_LOCK_TIMEOUT_MS", "600")
        .args(["todo", "add", "--text", "blocked"])
        .output()
        .unwrap();
    let waited = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("pid {} (loopx todo add) since", hung.id())), "{stderr}");
    assert!(stderr.contains("waiting for the lock on goal main"), "{stderr}");
    assert!(waited < Duration::from_secs(5), "the wait is bounded: {waited:?}");
    // A read of a current snapshot needs no lock.
    s.ok(&["status"]);
    hung.kill().unwrap();
    hung.wait().unwrap();
    let start = Instant::now();
    s.ok(&["todo", "add", "--text", "after the holder died"]);
    assert!(start.elapsed() < Duration::from_secs(2), "a dead holder's lock is free at once");
}

#[test]
fn leases_bind_one_owner_for_a_time() {
    let s = Sandbox::new();
    s.init();
    for a in ["a", "b"] {
        s.ok(&["agent", "register", "--agent-id", a, "--agent-type", "other"]);
    }
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "parser", "--scope", "src/parser/**"]);
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "lexer"]);
    let got = s.json(&[
        "lease",
        "acquire",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--ttl",
        "45m",
        "--idempotency-key",
        "k1",
        "--write-scope",
        "src/parser/**",
    ]);
    assert_eq!(
        (got["active"].as_bool(), got["version"].as_u64(), got["claimed_by"].as_str()),
        (Some(true), Some(1), Some("a"))
    );
    // Same owner and key: no-op. Another agent, or another key: refused.
    assert_eq!(
        s.json(&["lease", "acquire", "--todo-id", "t1", "--agent-id", "a", "--idempotency-key", "k1"])["changed"],
        false
    );
    let r = s.fails(1, &["lease", "acquire", "--todo-id", "t1", "--agent-id", "b"]);
    assert!(r.stderr.contains("leased by a until"), "{}", r.stderr);
    // Overlapping write scopes of two active leases are refused.
    let r =
        s.fails(1, &["lease", "acquire", "--todo-id", "t2", "--agent-id", "b", "--write-scope", "src/**"]);
    assert!(r.stderr.contains("overlaps src/parser/**"), "{}", r.stderr);
    s.ok(&["lease", "acquire", "--todo-id", "t2", "--agent-id", "b", "--write-scope", "docs/*.md"]);
    // Renew, transfer and release need the owner and the key; --expected-version is a CAS.
    s.fails(1, &["lease", "renew", "--todo-id", "t1", "--agent-id", "b", "--idempotency-key", "k1"]);
    s.fails(1, &["lease", "renew", "--todo-id", "t1", "--agent-id", "a"]);
    let r = s.fails(
        1,
        &[
            "lease",
            "renew",
            "--todo-id",
            "t1",
            "--agent-id",
            "a",
            "--idempotency-key",
            "k1",
            "--expected-version",
            "7",
        ],
    );
    assert!(r.stderr.contains("version 1, not 7"), "{}", r.stderr);
    let renewed = s.json(&[
        "lease",
        "renew",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--idempotency-key",
        "k1",
        "--expected-version",
        "1",
    ]);
    assert_eq!(renewed["version"], 2);
    let moved = s.json(&[
        "lease",
        "transfer",
        "--todo-id",
        "t1",
        "--agent-id",
        "a",
        "--idempotency-key",
        "k1",
        "--to-agent",
        "b",
    ]);
    assert_eq!((moved["claimed_by"].as_str(), moved["lease"]["owner"].as_str()), (Some("b"), Some("b")));
    let shown = s.json(&["lease", "show", "--todo-id", "t1"]);
    assert_eq!(shown["version"], 3);
    s.fails(1, &["lease", "release", "--todo-id", "t1", "--agent-id", "a"]);
    let released = s.json(&["lease", "release", "--todo-id", "t1", "--agent-id", "b"]);
    assert!(released.get("lease").is_none());
    s.fails(2, &["lease", "acquire", "--todo-id", "t1", "--agent-id", "b", "--ttl", "soon"]);
}

#[test]
fn an_expired_lease_is_ignored_and_takeovers_are_explicit() {
    let s = Sandbox::new();
    s.init();
    for a in ["a", "b"] {
        s.ok(&["agent", "register", "--agent-id", a, "--agent-type", "other"]);
    }
    s.ok(&["todo", "add", "--agent-id", "a", "--text", "contested"]);
    s.ok(&["lease", "acquire", "--todo-id", "t1", "--agent-id", "a", "--ttl", "3s"]);
    // While a's lease is active, b cannot take over.
    let r = s.fails(
        1,
        &[
            "todo",
            "update",
            "--todo-id",
            "t1",
            "--agent-id",
            "b",
            "--claimed-by",
            "b",
            "--takeover-reason",
            "a is slow",
        ],
    );
    assert!(r.stderr.contains("once a's lease has expired"), "{}", r.stderr);
    s.advance(Duration::from_millis(3100));
    let shown = s.json(&["lease", "show", "--todo-id", "t1"]);
    assert_eq!(shown["active"], false);
    // The claim is not overridden implicitly, even now: a lease acquire by b is refused.
    s.fails(1, &["lease", "acquire", "--todo-id", "t1", "--agent-id", "b"]);
    let taken = s.json(&[
        "todo",
        "update",
        "--todo-id",
        "t1",
        "--agent-id",
        "b",
        "--claimed-by",
        "b",
        "--takeover-reason",
        "a's lease expired",
    ]);
    assert_eq!(taken["todo"]["claimed_by"], "b");
    let last = events(&s.events_path("main")).pop().unwrap();
    assert_eq!(last["kind"], "todo_taken_over");
    assert_eq!((last["data"]["from"].as_str(), last["data"]["to"].as_str()), (Some("a"), Some("b")));
    // The owner may hand over at any time; the reason is required.
    s.fails(2, &["todo", "update", "--todo-id", "t1", "--agent-id", "b", "--claimed-by", "a"]);
    s.ok(&[
        "todo",
        "update",
        "--todo-id",
        "t1",
        "--agent-id",
        "b",
        "--claimed-by",
        "a",
        "--takeover-reason",
        "back to you",
    ]);
}

#[test]
fn hard_lease_mode_requires_the_active_lease() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    s.ok(&["todo", "add", "--text", "careful work"]);
    s.ok(&["goal", "set", "--handoff-mode", "hard_lease"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert!(d["next_commands"][0].as_str().unwrap().starts_with("loopx lease acquire"), "{d}");
    let r = s.fails(1, &["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    assert!(r.stderr.contains("loopx lease acquire"), "{}", r.stderr);
    s.ok(&["lease", "acquire", "--todo-id", "t1", "--agent-id", "a", "--ttl", "1s"]);
    s.advance(Duration::from_millis(1100));
    let r = s.fails(1, &["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--evidence", "done"]);
    assert!(r.stderr.contains("needs a's active lease"), "{}", r.stderr);
    s.ok(&["lease", "renew", "--todo-id", "t1", "--agent-id", "a", "--ttl", "10m"]);
    s.ok(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--evidence", "done"]);
    s.fails(2, &["goal", "set", "--handoff-mode", "strict"]);
}

#[test]
fn a_temporary_file_left_by_a_crash_is_found_and_cleaned() {
    let s = Sandbox::new();
    s.init();
    // Adds a todo, the process killed at `point` of the commit.
    let crash_adding = |point: &str, text: &str| {
        let out =
            s.command().env("LOOPX_FAULT", point).args(["todo", "add", "--text", text]).output().unwrap();
        assert!(!out.status.success(), "killed at {point}");
    };
    // The goal's first todo makes its body file, written whole into a temporary file first.
    crash_adding("before-bodies-rename", "interrupted");
    let goal_dir = s.state_dir().join("goals/main");
    let tmp = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    };
    assert_eq!(tmp(&goal_dir).len(), 1, "the crash left its temporary body file");
    // doctor, before anything else runs, names it.
    let d = s.fails(4, &["doctor", "--json"]).json();
    assert_eq!(d["healthy"], false);
    assert!(d.to_string().contains(".todos-"), "{d}");
    // The next command recovers the goal (the event was committed) and removes it.
    let r = s.ok(&["todo", "list"]);
    assert!(r.stderr.contains("left by a write that never finished"), "{}", r.stderr);
    assert!(r.stdout.contains("interrupted"), "{}", r.stdout);
    assert!(tmp(&goal_dir).is_empty());
    // A crash before the snapshot is swapped in leaves no temporary file: the new snapshot
    // sits in the spare the next commit writes over anyway.
    crash_adding("before-snapshot-rename", "second");
    assert!(tmp(&goal_dir).is_empty());
    let r = s.ok(&["todo", "list"]);
    assert!(r.stdout.contains("second") && r.stderr.contains("behind the log"), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    // One planted by hand (a dead writer's pid) is removed by --repair, and named.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    std::fs::write(goal_dir.join(format!(".GOAL.md.{pid}.0.tmp")), "half").unwrap();
    assert!(s.fails(4, &["doctor"]).stdout.contains(".GOAL.md."));
    let r = s.ok(&["doctor", "--repair"]);
    assert!(r.stdout.contains("removed") && r.stdout.contains(".GOAL.md."), "{}", r.stdout);
    assert!(tmp(&goal_dir).is_empty());
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}
