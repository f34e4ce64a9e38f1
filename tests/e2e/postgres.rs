//! The PostgreSQL store through the real binary: projects on several "machines" (directories)
//! sharing one database, races and crowds of processes, clients killed mid-transaction, a
//! database restart, a database that is down, a tampered row, migration both ways, and commit
//! notices. Each test uses a project name of its own in the database `LOOPX_TEST_PG_URL` names
//! (`cargo xtask ci` starts one); the restart test starts a server of its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loopx_core::GoalId;
use loopx_kernel::store::{Doctor, Store};
use loopx_kernel::{Silent, StoreOptions, SystemClock};
use loopx_pgstore::PgStore;
use loopx_tests::pg::{test_url, unique_project};
use loopx_tests::{Run, Sandbox};

/// `url` with a password inserted (the test server trusts loopback, so any password works).
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, host) = rest.split_once('@').unwrap();
    let user = user.split(':').next().unwrap();
    format!("{scheme}://{user}:{password}@{host}")
}

/// `n` project directories ("machines") in the sandbox.
fn machines(s: &Sandbox, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let d = s.root.join(format!("machine{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect()
}

/// `loopx <args>` in `dir`, with `env`.
fn run_at(s: &Sandbox, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = s.command();
    c.current_dir(dir).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    Run::from(c.output().unwrap())
}

fn ok_at(s: &Sandbox, dir: &Path, args: &[&str]) -> Run {
    s.ok_in(dir, args)
}

/// Every machine pointed at project `ns` of `url`, the first creating goal `main`.
fn team(s: &Sandbox, url: &str, ns: &str, n: usize) -> Vec<PathBuf> {
    let dirs = machines(s, n);
    for (i, d) in dirs.iter().enumerate() {
        let mut args = vec!["init", "--store", url, "--store-project", ns];
        if i == 0 {
            args.extend(["--goal-id", "main", "--objective", "ship the importer"]);
        }
        ok_at(s, d, &args);
    }
    dirs
}

fn store(url: &str, ns: &str) -> PgStore {
    PgStore::connect(
        url,
        ns,
        Path::new("."),
        Arc::new(SystemClock),
        Arc::new(Silent),
        &StoreOptions::default(),
    )
    .unwrap()
}

fn main_goal() -> GoalId {
    GoalId::new("main").unwrap()
}

#[test]
fn two_machines_share_a_goal_and_the_password_is_never_written() {
    let Some(url) = test_url("the teams test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("teams");
    let secret = with_password(&url, "not-for-files");
    let [laptop, runner] = &machines(&s, 2)[..] else { unreachable!() };
    ok_at(
        &s,
        laptop,
        &["init", "--store", &secret, "--store-project", &ns, "--goal-id", "main", "--objective", "ship"],
    );
    // The second machine names the store through the environment.
    let r = run_at(&s, runner, &[("LOOPX_STORE_URL", &secret)], &["init", "--store-project", &ns]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("goal main"), "joins the existing goal: {}", r.stdout);
    for d in [laptop, runner] {
        let text = std::fs::read_to_string(d.join(".loopx/project.json")).unwrap();
        assert!(text.contains("\"kind\": \"postgres\"") && !text.contains("not-for-files"), "{text}");
        assert!(!d.join(".loopx/goals").exists(), "no state is kept in the directory");
    }
    ok_at(&s, laptop, &["agent", "register", "--agent-id", "laptop", "--agent-type", "claude-code"]);
    ok_at(&s, runner, &["agent", "register", "--agent-id", "ci-runner", "--agent-type", "codex-cli"]);
    let status = ok_at(&s, laptop, &["status", "--json"]).json();
    let agents: Vec<&str> = status["agents"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert_eq!(agents, ["laptop", "ci-runner"], "{status}");
    let shown = ok_at(&s, runner, &["store", "show"]).stdout;
    assert!(shown.contains(&format!("(project {ns})")) && shown.contains("goals: main"), "{shown}");
    // A second `init --store` elsewhere is refused in a file project, and a file init in a
    // database project is refused: nothing is moved by `init`.
    let file = s.root.join("file-project");
    std::fs::create_dir_all(&file).unwrap();
    ok_at(&s, &file, &["init"]);
    let r = run_at(&s, &file, &[], &["init", "--store", &url, "--store-project", &ns]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("loopx store migrate --to"), "{}", r.stderr);
}

#[test]
fn one_winner_in_every_claim_race_across_eight_machines() {
    let Some(url) = test_url("the cross-machine claim race") else { return };
    let s = Sandbox::new();
    let ns = unique_project("race");
    let dirs = team(&s, &url, &ns, 8);
    for i in 0..8 {
        ok_at(&s, &dirs[0], &["agent", "register", "--agent-id", &format!("a{i}"), "--agent-type", "other"]);
    }
    let rounds = 25;
    for round in 1..=rounds {
        ok_at(&s, &dirs[0], &["todo", "add", "--agent-id", "user", "--text", &format!("race {round}")]);
        let todo = format!("t{round}");
        let children: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut c = s.command();
                c.current_dir(d)
                    .args(["todo", "claim", "--todo-id", &todo, "--agent-id", &format!("a{i}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                c.spawn().unwrap()
            })
            .collect();
        let codes: Vec<i32> =
            children.into_iter().map(|c| c.wait_with_output().unwrap().status.code().unwrap_or(-1)).collect();
        assert_eq!(codes.iter().filter(|c| **c == 0).count(), 1, "round {round}: exits {codes:?}");
        assert!(codes.iter().all(|c| *c == 0 || *c == 1), "round {round}: losers are refused: {codes:?}");
    }
    let doctor = ok_at(&s, &dirs[3], &["doctor"]);
    assert!(doctor.stdout.contains("hash chain verified"), "{}", doctor.stdout);
}

#[test]
fn thirty_two_processes_of_mixed_mutations_lose_nothing() {
    let Some(url) = test_url("the crowd of writers") else { return };
    let s = Sandbox::new();
    let ns = unique_project("crowd");
    let dirs = team(&s, &url, &ns, 4);
    const WRITERS: usize = 32;
    const ROUNDS: usize = 33; // three mutations a round: 99 a writer, and its registration
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (s, dir) = (&s, dirs[w % dirs.len()].clone());
            scope.spawn(move || {
                let me = format!("w{w}");
                let go = |args: &[&str]| loop {
                    let r = run_at(s, &dir, &[], args);
                    match r.code {
                        0 => return r,
                        3 => continue, // busy: safe to retry
                        _ => panic!("loopx {args:?}: {}", r.stderr),
                    }
                };
                go(&["agent", "register", "--agent-id", &me, "--agent-type", "other"]);
                for i in 0..ROUNDS {
                    let text = format!("{me} item {i}");
                    let added = go(&["todo", "add", "--agent-id", &me, "--text", &text, "--json"]).json();
                    let id = added["todo"]["id"].as_str().unwrap().to_owned();
                    go(&["todo", "claim", "--todo-id", &id, "--agent-id", &me]);
                    go(&["todo", "complete", "--todo-id", &id, "--agent-id", &me, "--evidence", "checked"]);
                }
            });
        }
    });
    let db = store(&url, &ns);
    let state = db.read(&main_goal()).unwrap();
    assert_eq!(state.seq, 1 + (WRITERS * (1 + 3 * ROUNDS)) as u64);
    assert_eq!(state.todos_total, (WRITERS * ROUNDS) as u64);
    let mut texts = BTreeSet::new();
    let live = state.todos.iter().cloned();
    let archived = db.archive(&main_goal(), &state.archive).unwrap().into_iter().map(|a| a.todo);
    for t in live.chain(archived) {
        assert!(t.status.is_closed(), "{} is {:?}", t.id, t.status);
        assert!(texts.insert(t.text.clone()), "{} twice", t.text);
    }
    assert_eq!(texts.len(), WRITERS * ROUNDS);
    let report = db.doctor(None).unwrap();
    assert!(report.healthy, "{report:?}");
}

#[test]
fn clients_killed_mid_transaction_leave_every_acknowledged_mutation_once() {
    let Some(url) = test_url("the kill -9 test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("kill");
    let dirs = team(&s, &url, &ns, 2);
    let acked = Mutex::new(Vec::new());
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::scope(|scope| {
        for w in 0..6 {
            let (s, dir, acked) = (&s, dirs[w % 2].clone(), &acked);
            scope.spawn(move || {
                let mut i = 0;
                while Instant::now() < deadline {
                    i += 1;
                    let text = format!("w{w} n{i}");
                    let mut c = s.command();
                    c.current_dir(&dir)
                        .args(["todo", "add", "--agent-id", "user", "--text", &text])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    let mut child = c.spawn().unwrap();
                    // Every third one is killed a few milliseconds in: mid-connect, mid-lock
                    // or mid-transaction.
                    if i % 3 == 0 {
                        std::thread::sleep(Duration::from_millis(2 + (i % 7) as u64));
                        let _ = child.kill();
                    }
                    if child.wait().unwrap().success() {
                        acked.lock().unwrap().push(text);
                    }
                }
            });
        }
    });
    let db = store(&url, &ns);
    let state = db.read(&main_goal()).unwrap();
    let texts: Vec<&str> = state.todos.iter().map(|t| t.text.as_str()).collect();
    let unique: BTreeSet<&str> = texts.iter().copied().collect();
    assert_eq!(unique.len(), texts.len(), "no mutation applied twice");
    let acked = acked.into_inner().unwrap();
    assert!(acked.len() > 20, "the run did work: {} acknowledged", acked.len());
    for a in &acked {
        assert!(unique.contains(a.as_str()), "acknowledged {a} is missing");
    }
    assert!(db.doctor(None).unwrap().healthy);
}

#[test]
fn a_database_restart_loses_no_acknowledged_mutation() {
    if test_url("the database restart test").is_none() {
        return;
    }
    // A server of its own: the shared one serves the other tests meanwhile.
    let server = loopx_tests::pg::start().unwrap();
    let s = Sandbox::new();
    let dirs = team(&s, &server.url, "restart", 1);
    let acked = Mutex::new(Vec::new());
    let busy = Mutex::new(0);
    let deadline = Instant::now() + Duration::from_secs(4);
    std::thread::scope(|scope| {
        for w in 0..4 {
            let (s, dir, acked, busy) = (&s, dirs[0].clone(), &acked, &busy);
            scope.spawn(move || {
                let mut i = 0;
                while Instant::now() < deadline {
                    i += 1;
                    let text = format!("w{w} n{i}");
                    let r = run_at(s, &dir, &[], &["todo", "add", "--agent-id", "user", "--text", &text]);
                    match r.code {
                        0 => acked.lock().unwrap().push(text),
                        3 => *busy.lock().unwrap() += 1,
                        c => panic!("exit {c}: {}", r.stderr),
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1500));
        server.restart().unwrap();
    });
    let r = ok_at(&s, &dirs[0], &["todo", "list", "--json"]).json();
    let texts: Vec<String> =
        r["todos"].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap().to_owned()).collect();
    let unique: BTreeSet<&String> = texts.iter().collect();
    assert_eq!(unique.len(), texts.len(), "no mutation applied twice");
    for a in acked.into_inner().unwrap() {
        assert!(unique.contains(&a), "acknowledged {a} is missing after the restart");
    }
    assert!(ok_at(&s, &dirs[0], &["doctor"]).stdout.contains("healthy"));
}

#[test]
fn a_database_that_is_down_is_busy_and_changes_nothing() {
    let s = Sandbox::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://loopx@127.0.0.1:{port}/postgres");
    // `init` reaches the database before it writes anything.
    let r = run_at(&s, &s.root, &[], &["init", "--store", &url, "--goal-id", "main", "--objective", "x"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("not reachable") && r.stderr.contains("try again"), "{}", r.stderr);
    assert!(!s.root.join(".loopx").exists(), "nothing was written");
    // A project whose database went down: every command is busy, and nothing changes.
    std::fs::create_dir_all(s.root.join(".loopx")).unwrap();
    let pointer = format!(
        r#"{{"schema_version": 1, "default_goal": null, "goals": [], "store": {{"kind": "postgres", "url": "{url}", "project": "down"}}}}"#
    );
    std::fs::write(s.root.join(".loopx/project.json"), &pointer).unwrap();
    ok_at(&s, &s.root, &["store", "trust"]);
    let before = s.tree();
    for args in [&["status"][..], &["todo", "add", "--text", "x"][..], &["doctor"][..]] {
        let r = run_at(&s, &s.root, &[], args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
    }
    assert_eq!(s.tree(), before);
}

#[test]
fn a_tampered_row_is_refused_by_every_command_and_named_by_doctor() {
    let Some(url) = test_url("the tampered row test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("tamper");
    let dir = &team(&s, &url, &ns, 1)[0];
    for t in ["one", "two"] {
        ok_at(&s, dir, &["todo", "add", "--text", t]);
    }
    // A changed byte in event 2's payload, as someone with the database's password could make.
    store(&url, &ns)
        .edit_log(&main_goal(), &|log| {
            let text = String::from_utf8(log.clone()).unwrap().replacen("\"one\"", "\"ONE\"", 1);
            *log = text.into_bytes();
        })
        .unwrap();
    for args in
        [&["status"][..], &["todo", "add", "--text", "three"][..], &["history"][..], &["todo", "list"][..]]
    {
        let r = run_at(&s, dir, &[], args);
        assert_eq!(r.code, 4, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("line 3"), "{args:?} names the line: {}", r.stderr);
    }
    let r = run_at(&s, dir, &[], &["doctor"]);
    assert_eq!(r.code, 4);
    assert!(r.stdout.contains("event log") && r.stdout.contains("line 3"), "{}", r.stdout);
}

#[test]
fn a_project_moves_to_the_database_and_back_with_its_history_whole() {
    let Some(url) = test_url("the migration test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("migrate");
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "other"]);
    for i in 0..70 {
        s.ok(&["todo", "add", "--text", &format!("item {i}")]);
    }
    for i in 1..=66 {
        let t = format!("t{i}");
        s.ok(&["todo", "claim", "--todo-id", &t, "--agent-id", "a"]);
        s.ok(&["todo", "complete", "--todo-id", &t, "--agent-id", "a", "--evidence", "done"]);
    }
    let history = |s: &Sandbox| s.json(&["history", "--limit", "1000"]);
    let listing = |s: &Sandbox| s.json(&["todo", "list", "--all"]);
    let (h0, l0) = (history(&s), listing(&s));
    // A dry run changes nothing, here or there.
    let before = s.tree();
    let dry = s.json(&["store", "migrate", "--to", &url, "--store-project", &ns, "--dry-run"]);
    assert_eq!((dry["dry_run"].as_bool(), dry["events"].as_u64()), (Some(true), Some(204)));
    assert_eq!(s.tree(), before);
    let moved = s.json(&["store", "migrate", "--to", &url, "--store-project", &ns]);
    assert_eq!(moved["goals"][0]["events"], 204);
    assert_eq!((history(&s), listing(&s)), (h0.clone(), l0.clone()), "the same facts from the database");
    assert!(s.ok(&["store", "show"]).stdout.contains("postgres"));
    // Migrating where the goal already is refuses, changing nothing.
    let other = Sandbox::new();
    other.init();
    let r = other.fails(1, &["store", "migrate", "--to", &url, "--store-project", &ns]);
    assert!(r.stderr.contains("exists in the target"), "{}", r.stderr);
    // Work goes on in the database, then everything comes back to files.
    s.ok(&["todo", "add", "--text", "in the database"]);
    s.ok(&["store", "migrate", "--to", "file"]);
    let (h2, l2) = (history(&s), listing(&s));
    assert_eq!(h2["events"].as_array().unwrap().len(), h0["events"].as_array().unwrap().len() + 1);
    assert_eq!(l2["todos"].as_array().unwrap().len(), 71);
    let doctor = s.ok(&["doctor"]).stdout;
    assert!(doctor.contains("205 events, hash chain verified") && doctor.contains("healthy"), "{doctor}");
}

#[test]
fn a_listener_hears_of_each_commit() {
    let Some(url) = test_url("the commit notice test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("listen");
    let dir = &team(&s, &url, &ns, 1)[0];
    let mut listener = store(&url, &ns).listen().unwrap();
    ok_at(&s, dir, &["todo", "add", "--text", "wake up"]);
    let notice = listener.wait(Duration::from_secs(10)).unwrap().expect("a notice within 10 s");
    assert_eq!((notice.goal.as_str(), notice.seq), ("main", 2));
    // Nothing committed: nothing heard.
    assert_eq!(listener.wait(Duration::from_millis(200)).unwrap(), None);
}

#[test]
fn connections_are_secured_as_the_url_says() {
    if test_url("the TLS test").is_none() {
        return;
    }
    // A CA, and a certificate it signed for localhost, for a server of its own with TLS on.
    let server = loopx_tests::pg::start_with(|dir| {
        let sh = |script: &str| {
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| e.to_string())?
                .success();
            if ok { Ok(()) } else { Err(format!("failed: {script}")) }
        };
        sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=loopx test CA'")?;
        sh("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj '/CN=localhost'")?;
        sh("printf 'subjectAltName=DNS:localhost' > san && openssl x509 -req -in server.csr -CA ca.pem \
            -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san")?;
        for f in ["server.key", "server.pem"] {
            loopx_tests::pg::give_to_server(&dir.join(f))?;
        }
        let ca = dir.join("ca.pem");
        std::fs::copy(&ca, std::env::temp_dir().join(format!("loopx-test-ca-{}.pem", std::process::id())))
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            dir.join("server.pem").display(),
            dir.join("server.key").display()
        ))
    })
    .unwrap();
    let ca = std::env::temp_dir().join(format!("loopx-test-ca-{}.pem", std::process::id()));
    let base = server.url.replace("127.0.0.1", "localhost");
    let s = Sandbox::new();
    let dirs = machines(&s, 4);
    let init = |dir: &Path, query: &str, ns: &str| {
        run_at(&s, dir, &[], &["init", "--store", &format!("{base}?{query}"), "--store-project", ns])
    };
    // Checked against the CA the URL names: it works, and the URL is kept as given.
    let verified = format!("sslmode=verify-full&sslrootcert={}", ca.display());
    let r = init(&dirs[0], &verified, "tls");
    assert_eq!(r.code, 0, "{}", r.stderr);
    ok_at(&s, &dirs[0], &["goal", "create", "--goal-id", "main", "--objective", "over TLS"]);
    assert!(ok_at(&s, &dirs[0], &["status"]).stdout.contains("over TLS"));
    // Checked against the public roots only: refused, saying how to name the CA.
    let r = init(&dirs[1], "sslmode=verify-full", "tls");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("could not be secured") && r.stderr.contains("sslrootcert"), "{}", r.stderr);
    // Encrypted without a check, and plain: both reach the same goal.
    for (dir, query) in [(&dirs[2], "sslmode=require"), (&dirs[3], "sslmode=disable")] {
        let r = init(dir, query, "tls");
        assert_eq!(r.code, 0, "{query}: {}", r.stderr);
        assert!(ok_at(&s, dir, &["status"]).stdout.contains("over TLS"), "{query}");
    }
    assert!(!dirs[1].join(".loopx").exists(), "a refused init writes nothing");
    let r = init(&dirs[1], "sslmode=sometimes", "tls");
    assert_eq!(r.code, 2, "{}", r.stderr);
    let _ = std::fs::remove_file(ca);
}

/// The backends loopx has open on `url`'s server (other than the one asking).
fn loopx_backends(url: &str) -> BTreeSet<i32> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'loopx' AND pid <> pg_backend_pid()",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn an_mcp_server_keeps_one_connection_and_reconnects_after_a_restart() {
    if test_url("the MCP connection test").is_none() {
        return;
    }
    let server = loopx_tests::pg::start().unwrap();
    let s = Sandbox::new();
    let dirs = team(&s, &server.url, "mcp", 1);
    let dir = dirs[0].to_str().unwrap();
    ok_at(&s, &dirs[0], &["agent", "register", "--agent-id", "w", "--agent-type", "other"]);
    ok_at(&s, &dirs[0], &["todo", "add", "--agent-id", "user", "--text", "keep notes"]);
    let mut mcp = crate::mcp::Session::start(&s, &["--project", dir, "--agent-id", "w"]);
    let note = |mcp: &mut crate::mcp::Session, n: usize| {
        mcp.call("update_task", serde_json::json!({"todo_id": "t1", "note": format!("note {n}")}))
    };
    assert!(!note(&mut mcp, 0).0);
    let first = loopx_backends(&server.url);
    assert_eq!(first.len(), 1, "one connection for the server: {first:?}");
    for n in 1..=20 {
        assert!(!note(&mut mcp, n).0);
    }
    assert_eq!(loopx_backends(&server.url), first, "twenty calls later, the same connection");

    server.restart().unwrap();
    // The first call after the restart may find the old connection's end (busy, retryable);
    // the server connects again instead of staying broken.
    let (err, body) = note(&mut mcp, 21);
    let (err, body) = if err { note(&mut mcp, 22) } else { (err, body) };
    assert!(!err, "the call after a restart: {body}");
    let after = loopx_backends(&server.url);
    assert_eq!(after.len(), 1);
    assert!(after.is_disjoint(&first), "a new connection after the restart");
    let shown = ok_at(&s, &dirs[0], &["todo", "show", "--todo-id", "t1", "--json"]).json();
    let notes = shown.to_string().matches("note ").count();
    assert!((22..=23).contains(&notes), "every acknowledged note once: {notes}\n{shown}");
}

#[test]
fn a_dashboard_hears_a_commit_made_on_another_machine() {
    let Some(url) = test_url("the dashboard's database feed") else { return };
    let s = Sandbox::new();
    let dirs = team(&s, &url, &unique_project("dash"), 2);
    let d = loopx_tests::web::Served::start(&s, &dirs[0], &[]);
    let key = crate::dashboard::key_of(&d.get("/").body, "main");
    let mut events = loopx_tests::web::events(&d);
    ok_at(&s, &dirs[1], &["todo", "add", "--agent-id", "user", "--text", "from the other machine"]);
    assert!(
        loopx_tests::web::change_within(&mut events, Duration::from_secs(2)),
        "no change event within 2 s"
    );
    assert!(d.get(&format!("/p/{key}/main")).body.contains("from the other machine"));
}

#[test]
fn two_drivers_on_two_machines_finish_one_goal_together() {
    use crate::drive::{Driving, agent_script, of, path_with_loopx};
    let Some(url) = test_url("the drivers test") else { return };
    let s = Sandbox::new();
    let ns = unique_project("drive");
    let dirs = team(&s, &url, &ns, 2);
    for n in 1..=10 {
        let text = if n == 10 { format!("todo {n} [slow] [last]") } else { format!("todo {n} [slow]") };
        ok_at(&s, &dirs[0], &["todo", "add", "--text", &text]);
    }
    let drivers: Vec<Driving> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut c = s.command();
            c.current_dir(d)
                .env("PATH", path_with_loopx())
                .args(["drive", "--json", "--agent-id", &format!("m{i}"), "--"])
                .arg(agent_script());
            Driving::spawn(c)
        })
        .collect();
    let mut worked = Vec::new();
    for d in drivers {
        let (code, ev, stderr) = d.finish();
        assert_eq!(code, 0, "{stderr}");
        assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().contains("finished"), "{ev:?}");
        worked.push(of(&ev, "turn_ended").iter().filter(|e| e["end"]["spent_by"].is_string()).count());
    }
    assert_eq!(worked.iter().sum::<usize>(), 10, "{worked:?}");
    assert!(worked.iter().all(|n| *n > 0), "both machines worked: {worked:?}");
    let status = ok_at(&s, &dirs[1], &["status", "--json"]).json();
    assert_eq!(status["counts"]["done"], 10, "{status}");
    assert_eq!(status["quota"]["used_slots"], 10);
    let doctor = run_at(&s, &dirs[0], &[], &["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
}

/// An edit in the middle of the history is refused by every command, even when it was made
/// with the triggers that mark edits bypassed (a replica session) or disabled; the doctor
/// names a disabled trigger and `--repair` enables it again.
#[test]
fn a_mid_history_edit_is_refused_by_every_command_whatever_bypasses_the_triggers() {
    // A server of its own: disabling a trigger is table-wide, and other tests share the
    // suite's database.
    if test_url("the mid-history edit test").is_none() {
        return;
    }
    let server = loopx_tests::pg::start().unwrap();
    let url = server.url.clone();
    let ways = [
        "SET session_replication_role = replica",
        "ALTER TABLE loopx_events DISABLE TRIGGER loopx_events_changed",
    ];
    for way in ways {
        let s = Sandbox::new();
        let ns = unique_project("midedit");
        let dir = &team(&s, &url, &ns, 1)[0];
        for n in 1..=20 {
            ok_at(&s, dir, &["todo", "add", "--text", &format!("todo number {n}")]);
        }
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let rows = |db: &mut postgres::Client| -> i64 {
            db.query_one("SELECT count(*) FROM loopx_events WHERE ns = $1", &[&ns]).unwrap().get(0)
        };
        db.batch_execute(way).unwrap();
        let edited = db
            .execute(
                "UPDATE loopx_events SET line = replace(line, 'todo number 12', 'todo number 99') WHERE ns = $1 AND seq = 13",
                &[&ns],
            )
            .unwrap();
        assert_eq!(edited, 1);
        db.batch_execute("RESET session_replication_role").unwrap();
        let before = rows(&mut db);
        for args in [
            &["status"][..],
            &["todo", "list"][..],
            &["quota", "should-run"][..],
            &["todo", "add", "--text", "after the edit"][..],
            &["history"][..],
        ] {
            let r = run_at(&s, dir, &[], args);
            assert_eq!(r.code, 4, "{way}: {args:?}: {}", r.stderr);
            assert!(r.stderr.contains("line 14"), "{way}: {args:?} names the line: {}", r.stderr);
        }
        assert_eq!(rows(&mut db), before, "{way}: a refused command appended");
        if way.starts_with("ALTER") {
            // Put the line back: the doctor still names the disabled trigger; repair enables it.
            db.execute(
                "UPDATE loopx_events SET line = replace(line, 'todo number 99', 'todo number 12') WHERE ns = $1 AND seq = 13",
                &[&ns],
            )
            .unwrap();
            let r = run_at(&s, dir, &[], &["doctor"]);
            assert_eq!(r.code, 4, "{}", r.stdout);
            assert!(r.stdout.contains("edit triggers"), "{}", r.stdout);
            ok_at(&s, dir, &["doctor", "--repair"]);
            ok_at(&s, dir, &["doctor"]);
            ok_at(&s, dir, &["todo", "add", "--text", "after the repair"]);
        }
    }
}

/// A server of its own that asks `bob` for his password (`pw`), over SCRAM; `loopx` gets in
/// without one.
fn password_server() -> loopx_tests::pg::Server {
    let server = loopx_tests::pg::start_with(|dir| {
        let hba = dir.join("hba.conf");
        std::fs::write(
            &hba,
            "local all all trust\nhost all loopx 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
        )
        .map_err(|e| e.to_string())?;
        loopx_tests::pg::give_to_server(&hba)?;
        Ok(format!("-c hba_file={}", hba.display()))
    })
    .unwrap();
    let mut db = postgres::Client::connect(&server.url, postgres::NoTls).unwrap();
    db.batch_execute("CREATE ROLE bob LOGIN SUPERUSER PASSWORD 'pw'").unwrap();
    server
}

/// `url` as `bob`, with `password` (none: without).
fn as_bob(url: &str, password: Option<&str>) -> String {
    let auth = password.map_or_else(|| "bob".to_owned(), |p| format!("bob:{p}"));
    url.replacen("loopx@", &format!("{auth}@"), 1)
}

#[test]
fn a_password_given_to_init_is_used_never_kept_and_asked_for_after() {
    if test_url("the password test").is_none() {
        return;
    }
    let server = password_server();
    let s = Sandbox::new();
    let [dir, file_dir] = &machines(&s, 2)[..] else { unreachable!() };
    let with = as_bob(&server.url, Some("pw"));
    let r = run_at(
        &s,
        dir,
        &[],
        &["init", "--store", &with, "--store-project", "pw", "--goal-id", "main", "--objective", "x"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("is not kept"), "{}", r.stdout);
    let kept = std::fs::read_to_string(dir.join(".loopx/project.json")).unwrap();
    assert!(!kept.contains(":pw@") && kept.contains("bob@"), "{kept}");
    // Without the password, a later command is refused (1), not "busy" (3), and says where to
    // give it; with it, it works.
    let r = run_at(&s, dir, &[], &["status"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("asks for a password") && r.stderr.contains("PGPASSWORD"), "{}", r.stderr);
    let r = run_at(&s, dir, &[("PGPASSWORD", "pw")], &["status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run_at(&s, dir, &[("PGPASSWORD", "wrong")], &["status"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("refused the login"), "{}", r.stderr);
    // `store show` says where the state is even without the password, and shows none.
    let r = run_at(&s, dir, &[], &["store", "show"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("bob@127.0.0.1") && r.stdout.contains("not read"), "{}", r.stdout);
    // A file project moved there the same way: copied, pointed at it, the password not kept.
    ok_at(&s, file_dir, &["init", "--goal-id", "main", "--objective", "moving"]);
    let r = run_at(&s, file_dir, &[], &["store", "migrate", "--to", &with, "--store-project", "moved"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!std::fs::read_to_string(file_dir.join(".loopx/project.json")).unwrap().contains(":pw@"));
    assert_eq!(run_at(&s, file_dir, &[], &["status"]).code, 1);
    let r = run_at(&s, file_dir, &[("PGPASSWORD", "pw")], &["status"]);
    assert!(r.code == 0 && r.stdout.contains("moving"), "{}", r.stderr);
}

/// A port that counts the connections made to it, and answers none.
fn counting_port() -> (u16, Arc<Mutex<usize>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(Mutex::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            *seen.lock().unwrap() += 1;
            drop(c);
        }
    });
    (port, count)
}

/// A project whose `project.json` names `url`, as a cloned repository could bring it.
fn cloned_project(s: &Sandbox, url: &str) -> PathBuf {
    let dir = s.root.join("cloned");
    std::fs::create_dir_all(dir.join(".loopx")).unwrap();
    let project = serde_json::json!({"schema_version": 1, "default_goal": null, "goals": [],
        "store": {"kind": "postgres", "url": url, "project": "theirs"}});
    std::fs::write(dir.join(".loopx/project.json"), project.to_string()).unwrap();
    dir
}

#[test]
fn a_database_a_cloned_project_names_is_not_contacted_until_trusted() {
    // No database needed: a port that counts connections stands in for someone else's.
    let s = Sandbox::new();
    let (port, connections) = counting_port();
    let dir =
        cloned_project(&s, &format!("postgres://victim:secret@127.0.0.1:{port}/theirs?sslmode=disable"));
    let pw = [("PGPASSWORD", "my-own-password")];
    for args in [&["status"][..], &["todo", "list"][..], &["quota", "should-run"][..]] {
        let r = run_at(&s, &dir, &pw, args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("nobody on this machine has trusted") && r.stderr.contains("loopx store trust"),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("secret"), "{}", r.stderr);
    }
    // A hook on opening the repository fails open, and connects to nothing either.
    let mut c = s.command();
    c.current_dir(&dir).args(["hook", "claude-code", "session-start"]).env("PGPASSWORD", "my-own-password");
    let stdin = serde_json::json!({"session_id": "s1", "cwd": dir, "hook_event_name": "SessionStart", "source": "startup"});
    let out = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(stdin.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "a hook never blocks the host when loopx cannot answer");
    // `store show` says where, without the password, and without connecting.
    let r = run_at(&s, &dir, &pw, &["store", "show", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("secret") && r.stdout.contains("victim"), "{}", r.stdout);
    assert_eq!(*connections.lock().unwrap(), 0, "loopx contacted the database before it was trusted");
    // An agent cannot trust it on the person's behalf.
    let r = run_at(&s, &dir, &[("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "s1")], &["store", "trust"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(*connections.lock().unwrap(), 0);
    // Once the person trusts it, loopx connects (here to a port that is no database).
    ok_at(&s, &dir, &["store", "trust"]);
    let r = run_at(&s, &dir, &pw, &["status"]);
    assert_ne!(r.code, 0);
    assert!(*connections.lock().unwrap() >= 1, "a trusted store was not contacted");
    ok_at(&s, &dir, &["store", "trust", "--revoke"]);
    assert_eq!(run_at(&s, &dir, &pw, &["status"]).code, 1);
}

#[test]
fn a_password_never_goes_to_another_machine_without_tls() {
    let s = Sandbox::new();
    let dir = cloned_project(&s, "postgres://me@db.example.invalid:5432/work");
    ok_at(&s, &dir, &["store", "trust"]);
    let r = run_at(&s, &dir, &[("PGPASSWORD", "pw")], &["status"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("only over TLS") && r.stderr.contains("sslmode=require"), "{}", r.stderr);
}
