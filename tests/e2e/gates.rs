//! Gates that close themselves: the GitHub provider against a mock GitHub on every path (and
//! what the kernel records for each), a CI gate end to end through the binary, timer and command
//! gates, the person notified once (and reminded once) through a webhook, and no token ever
//! written or printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use loopx_core::kernel::{AskGate, CommandContext, CreateGoal, Kernel};
use loopx_core::model::{GateBlocks, GateKind, GateStatus, PullRef};
use loopx_core::{GateId, GoalId};
use loopx_kernel::gates::GateRuntime;
use loopx_kernel::{FileKernel, Silent, StoreOptions, SystemClock};
use loopx_tests::{Run, Sandbox};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

const SHA: &str = "abc1234def5678";

fn pr_json(sha: &str, state: &str, merged: bool) -> Value {
    json!({"number": 7, "state": state, "merged": merged, "html_url": "https://github.com/acme/importer/pull/7",
           "head": {"sha": sha}})
}

fn runs(checks: &[(&str, &str, Option<&str>)]) -> Value {
    let runs: Vec<Value> =
        checks.iter().map(|(n, s, c)| json!({"name": n, "status": s, "conclusion": c})).collect();
    json!({"total_count": runs.len(), "check_runs": runs})
}

/// A mock GitHub for `acme/importer#7` at head `sha` with these check runs and no statuses.
async fn github(server: &MockServer, sha: &str, checks: &[(&str, &str, Option<&str>)]) {
    Mock::given(method("GET"))
        .and(path("/repos/acme/importer/pulls/7"))
        .respond_with(ResponseTemplate::new(200).set_body_json(pr_json(sha, "open", false)))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/repos/acme/importer/commits/{sha}/check-runs")))
        .respond_with(ResponseTemplate::new(200).set_body_json(runs(checks)))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/repos/acme/importer/commits/{sha}/status")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"state": "pending", "statuses": []})))
        .mount(server)
        .await;
}

/// A project with a CI gate on `acme/importer#7` requiring `build`, checked in-process through
/// the real provider against `server`; returns the gate after one poll.
async fn poll_once(server: &MockServer, deadline: Duration) -> loopx_core::model::Gate {
    let dir = tempfile::tempdir().unwrap();
    let github = loopx_providers::GitHub::new(&server.uri(), Some("tok-test".into()), deadline).unwrap();
    let (k, _) =
        FileKernel::init(dir.path(), Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
            .unwrap();
    let k = k.with_gates(GateRuntime {
        pulls: Some(Arc::new(github)),
        processes: None,
        notifier: None,
        poll_on_should_run: true,
        commands: None,
        agent_tools: false,
    });
    let goal = GoalId::new("main").unwrap();
    k.create_goal(CreateGoal { id: goal.clone(), objective: "ship".into(), title: None, make_default: true })
        .await
        .unwrap();
    let kind = GateKind::Ci {
        pr: PullRef::parse("acme/importer#7").unwrap(),
        required: vec!["build".into()],
        every_secs: 120,
    };
    let ask = AskGate { question: "CI green".into(), blocks: GateBlocks::Goal, kind };
    k.ask_gate(&Default::default(), ask).await.unwrap();
    let p = k.poll_gates(&CommandContext::default(), Some(GateId::from_number(1))).await.unwrap();
    assert_eq!(p.checked.len(), 1, "{p:?}");
    p.checked[0].clone()
}

fn summary(g: &loopx_core::model::Gate) -> String {
    g.check.as_ref().map(|c| c.summary.clone()).unwrap_or_default()
}

#[test]
fn the_github_provider_on_every_path_and_what_the_kernel_records() {
    let rt = rt();
    rt.block_on(async {
        // Success, with the check runs paginated (the second page holds `build`).
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7"))
            .and(header("authorization", "Bearer tok-test"))
            .respond_with(ResponseTemplate::new(200).set_body_json(pr_json(SHA, "open", false)))
            .mount(&s)
            .await;
        let page2 = format!("{}/page2", s.uri());
        Mock::given(method("GET"))
            .and(path(format!("/repos/acme/importer/commits/{SHA}/check-runs")))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(runs(&[("lint", "completed", Some("success"))]))
                    .insert_header("link", format!("<{page2}>; rel=\"next\"").as_str()),
            )
            .mount(&s)
            .await;
        Mock::given(method("GET"))
            .and(path("/page2"))
            .respond_with(ResponseTemplate::new(200).set_body_json(runs(&[(
                "build",
                "completed",
                Some("success"),
            )])))
            .mount(&s)
            .await;
        Mock::given(method("GET"))
            .and(path(format!("/repos/acme/importer/commits/{SHA}/status")))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"statuses": [{"context": "deploy", "state": "pending"}]})),
            )
            .mount(&s)
            .await;
        let g = poll_once(&s, Duration::from_secs(5)).await;
        assert_eq!((g.status, summary(&g).as_str()), (GateStatus::Approved, "build passed on abc1234"));
        assert_eq!(g.answered_by.as_deref(), Some("loopx"));
        assert_eq!(g.check.as_ref().unwrap().head_sha.as_deref(), Some(SHA));

        // A failed required check rejects, naming it.
        let s = MockServer::start().await;
        github(&s, SHA, &[("build", "completed", Some("failure"))]).await;
        let g = poll_once(&s, Duration::from_secs(5)).await;
        assert_eq!(g.status, GateStatus::Rejected);
        assert!(summary(&g).contains("build (failure)"), "{}", summary(&g));

        // 401, 403, 404: clear, not retried, never an answer.
        for (code, words) in
            [(401, "GITHUB_TOKEN"), (403, "Pull requests, Checks, Commit statuses: read"), (404, "404")]
        {
            let s = MockServer::start().await;
            Mock::given(method("GET")).respond_with(ResponseTemplate::new(code)).mount(&s).await;
            let g = poll_once(&s, Duration::from_secs(5)).await;
            assert_eq!(g.status, GateStatus::Open, "{code}");
            let c = g.check.as_ref().unwrap();
            assert!(c.summary.starts_with("unknown, will retry") && c.unknown == 1, "{code}: {c:?}");
            assert!(c.summary.contains(&code.to_string()), "{code}: {}", c.summary);
            let _ = words;
            assert_eq!(s.received_requests().await.unwrap().len(), 1, "{code} is not retried");
        }
        let s = MockServer::start().await;
        Mock::given(method("GET")).respond_with(ResponseTemplate::new(403)).mount(&s).await;
        let dir = tempfile::tempdir().unwrap();
        let _ = dir;

        // 429 with Retry-After, then success: waited, then answered.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7"))
            .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&s)
            .await;
        github(&s, SHA, &[("build", "completed", Some("success"))]).await;
        let start = Instant::now();
        let g = poll_once(&s, Duration::from_secs(5)).await;
        assert_eq!(g.status, GateStatus::Approved);
        assert!(start.elapsed() >= Duration::from_secs(1), "Retry-After was honoured");

        // 500 then success.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7"))
            .respond_with(ResponseTemplate::new(500))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&s)
            .await;
        github(&s, SHA, &[("build", "completed", Some("success"))]).await;
        assert_eq!(poll_once(&s, Duration::from_secs(5)).await.status, GateStatus::Approved);

        // 500 until the deadline: unknown.
        let s = MockServer::start().await;
        Mock::given(method("GET")).respond_with(ResponseTemplate::new(502)).mount(&s).await;
        let g = poll_once(&s, Duration::from_millis(900)).await;
        assert_eq!(g.status, GateStatus::Open);
        assert!(summary(&g).contains("kept failing"), "{}", summary(&g));

        // Malformed JSON.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string("<html>"))
            .mount(&s)
            .await;
        let g = poll_once(&s, Duration::from_secs(5)).await;
        assert!(g.status == GateStatus::Open && summary(&g).contains("not JSON"), "{}", summary(&g));

        // A slow server past the deadline.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(pr_json(SHA, "open", false))
                    .set_delay(Duration::from_secs(3)),
            )
            .mount(&s)
            .await;
        let start = Instant::now();
        let g = poll_once(&s, Duration::from_millis(500)).await;
        assert!(start.elapsed() < Duration::from_secs(3), "the deadline bounds the call");
        assert!(g.status == GateStatus::Open && summary(&g).contains("deadline"), "{}", summary(&g));

        // A redirect is followed.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7"))
            .respond_with(
                ResponseTemplate::new(301).insert_header(
                    "location",
                    format!("{}/repos/acme/importer/pulls/7-moved", s.uri()).as_str(),
                ),
            )
            .mount(&s)
            .await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7-moved"))
            .respond_with(ResponseTemplate::new(200).set_body_json(pr_json(SHA, "open", false)))
            .mount(&s)
            .await;
        github(&s, SHA, &[("build", "completed", Some("success"))]).await;
        assert_eq!(poll_once(&s, Duration::from_secs(5)).await.status, GateStatus::Approved);

        // Merged, through the merge gate's own capability.
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/repos/acme/importer/pulls/7"))
            .respond_with(ResponseTemplate::new(200).set_body_json(pr_json(SHA, "closed", true)))
            .mount(&s)
            .await;
        github(&s, SHA, &[]).await;
        let dir = tempfile::tempdir().unwrap();
        let gh = loopx_providers::GitHub::new(&s.uri(), None, Duration::from_secs(5)).unwrap();
        let (k, _) =
            FileKernel::init(dir.path(), Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
                .unwrap();
        let k = k.with_gates(GateRuntime {
            pulls: Some(Arc::new(gh)),
            processes: None,
            notifier: None,
            poll_on_should_run: true,
            commands: None,
            agent_tools: false,
        });
        k.create_goal(CreateGoal {
            id: GoalId::new("main").unwrap(),
            objective: "x".into(),
            title: None,
            make_default: true,
        })
        .await
        .unwrap();
        let kind = GateKind::PrMerged { pr: PullRef::parse("acme/importer#7").unwrap(), every_secs: 300 };
        k.ask_gate(
            &Default::default(),
            AskGate { question: "merged".into(), blocks: GateBlocks::Goal, kind },
        )
        .await
        .unwrap();
        let p = k.poll_gates(&CommandContext::default(), None).await.unwrap();
        assert_eq!(p.checked[0].status, GateStatus::Approved, "{p:?}");
        let again = k.poll_gates(&CommandContext::default(), Some(GateId::from_number(1))).await.unwrap();
        assert!(again.checked.is_empty() && again.skipped.is_some(), "an approved gate is not checked again");
    });
}

fn env<'a>(server: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut e = vec![
        ("LOOPX_GITHUB_API", server),
        ("GITHUB_TOKEN", "tok-SECRET-0451"),
        ("LOOPX_HTTP_DEADLINE_MS", "3000"),
    ];
    e.extend_from_slice(extra);
    e
}

fn should_run(s: &Sandbox, server: &str, skew: &str) -> Value {
    let r = s.run_with(
        &["quota", "should-run", "--agent-id", "a", "--json"],
        b"",
        &env(server, &[("LOOPX_TEST_CLOCK_SKEW_MS", skew)]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json()
}

#[test]
fn a_ci_gate_closes_itself_through_the_binary() {
    let rt = rt();
    let server = rt.block_on(MockServer::start());
    let uri = server.uri();
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "release the importer"]);
    s.ok(&[
        "gate",
        "ask",
        "--kind",
        "ci",
        "--pr",
        "acme/importer#7",
        "--required-checks",
        "build,test",
        "--blocks",
        "todos:t1",
    ]);
    rt.block_on(github(&server, SHA, &[("build", "in_progress", None)]));
    let d = should_run(&s, &uri, "0");
    assert_eq!(d["decision"], "wait", "{d}");
    assert!(
        d["reason"].as_str().unwrap().contains("g1 waits for build, test to pass on acme/importer#7"),
        "{d}"
    );
    assert!(d["reason"].as_str().unwrap().contains("waiting for build, test on abc1234"), "{d}");
    assert_eq!(d["user_channel"]["notify"], false, "nobody needs to act: {d}");
    assert_eq!(d["user_channel"]["questions"][0]["kind"], "ci");
    let status = s.ok(&["status"]).stdout;
    assert!(status.contains("waits on:    g1 ci (todos:t1)"), "{status}");
    assert!(
        std::fs::read_to_string(s.state_dir().join("goals/main/GOAL.md"))
            .unwrap()
            .contains("## Waiting on checks")
    );

    // Within the minute, nothing asks GitHub again.
    let before = rt.block_on(server.received_requests()).unwrap().len();
    should_run(&s, &uri, "0");
    assert_eq!(rt.block_on(server.received_requests()).unwrap().len(), before, "never twice in a minute");

    // The checks go green: the next should-run (past the 2-minute period) approves the gate
    // and selects the todo.
    rt.block_on(server.reset());
    rt.block_on(github(
        &server,
        SHA,
        &[("build", "completed", Some("success")), ("test", "completed", Some("success"))],
    ));
    let d = should_run(&s, &uri, "130000");
    assert_eq!((d["decision"].as_str(), d["selected_todo"]["id"].as_str()), (Some("run"), Some("t1")), "{d}");
    let g = s.json(&["gate", "list", "--all"]);
    assert_eq!(
        (g["gates"][0]["status"].as_str(), g["gates"][0]["answered_by"].as_str()),
        (Some("approved"), Some("loopx"))
    );

    // A failed required check rejects a second gate, with the check's name.
    s.ok(&["todo", "add", "--text", "publish the docs"]);
    s.ok(&[
        "gate",
        "ask",
        "--kind",
        "ci",
        "--pr",
        "acme/importer#7",
        "--required-checks",
        "build",
        "--blocks",
        "todos:t2",
    ]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "a"]);
    s.ok(&["todo", "complete", "--todo-id", "t1", "--agent-id", "a", "--evidence", "released"]);
    rt.block_on(server.reset());
    rt.block_on(github(&server, SHA, &[("build", "completed", Some("failure"))]));
    let d = should_run(&s, &uri, "260000");
    assert_eq!(d["decision"], "wait", "{d}");
    let g = &s.json(&["gate", "list", "--all"])["gates"][1];
    assert_eq!(g["status"], "rejected", "{g}");
    assert!(g["check"]["summary"].as_str().unwrap().contains("build (failure)"), "{g}");
    // A new head commit re-arms it.
    rt.block_on(server.reset());
    rt.block_on(github(&server, "fed9876", &[("build", "queued", None)]));
    should_run(&s, &uri, "400000");
    let g = &s.json(&["gate", "list", "--all"])["gates"][1];
    assert_eq!(
        (g["status"].as_str(), g["check"]["head_sha"].as_str()),
        (Some("open"), Some("fed9876")),
        "{g}"
    );
    let history = s.ok(&["history", "--limit", "50"]).stdout;
    assert!(history.contains("g1 approved by loopx: build, test passed on abc1234"), "{history}");
    assert!(
        history.contains("g2 rejected by loopx: required check failed on abc1234: build (failure)"),
        "{history}"
    );
    assert!(history.contains("g2 re-armed: waiting for build on fed9876"), "{history}");
    // `gate poll` says what it did.
    rt.block_on(server.reset());
    rt.block_on(github(&server, "fed9876", &[("build", "completed", Some("success"))]));
    let r = s.run_with(&["gate", "poll"], b"", &env(&uri, &[("LOOPX_TEST_CLOCK_SKEW_MS", "600000")]));
    assert!(r.stdout.contains("g2 ci approved: build passed on fed9876"), "{}", r.stdout);
}

/// Whether a process with `pattern` in its command line runs.
fn alive(pattern: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(pattern))
    })
}

#[test]
fn timer_and_command_gates_close_themselves() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "deploy after the freeze"]);
    s.ok(&["gate", "ask", "--kind", "timer", "--until", "+1s", "--blocks", "todos:t1"]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(d["decision"], "wait", "{d}");
    assert!(d["scheduler"]["wait_until"].is_string(), "{d}");
    let r = s.run_with(
        &["quota", "should-run", "--agent-id", "a", "--json"],
        b"",
        &[("LOOPX_TEST_CLOCK_SKEW_MS", "2000")],
    );
    assert_eq!(r.json()["selected_todo"]["id"], "t1", "the timer closed itself: {}", r.stdout);
    assert_eq!(s.json(&["gate", "list", "--all"])["gates"][0]["status"], "approved");

    // A check that hangs is killed at its timeout, its children too; the gate stays open.
    s.ok(&["todo", "add", "--text", "ship when the check passes"]);
    s.ok(&[
        "gate",
        "ask",
        "--kind",
        "command",
        "--check",
        "sh -c 'sleep 301.25 & sleep 302.5'",
        "--timeout",
        "1s",
        "--blocks",
        "todos:t2",
    ]);
    let start = Instant::now();
    let r = s.ok(&["gate", "poll", "--gate-id", "g2"]);
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    assert!(
        r.stdout.contains("g2 command open: check `sh -c 'sleep 301.25 & sleep 302.5'` was killed"),
        "{}",
        r.stdout
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!alive("sleep 301.25") && !alive("sleep 302.5"), "the whole group was killed");
    // A check that passes once its file exists.
    s.ok(&[
        "gate",
        "ask",
        "--kind",
        "command",
        "--check",
        "test -f ready.txt",
        "--every",
        "1m",
        "--blocks",
        "agent:a",
    ]);
    let d = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(d["decision"], "wait", "{d}");
    std::fs::write(s.root.join("ready.txt"), "").unwrap();
    let r = s.run_with(
        &["quota", "should-run", "--agent-id", "a", "--json"],
        b"",
        &[("LOOPX_TEST_CLOCK_SKEW_MS", "61000")],
    );
    assert_eq!(r.json()["decision"], "run", "{}", r.stdout);
    assert_eq!(s.json(&["gate", "list", "--all"])["gates"][2]["status"], "approved");
    // Bad kinds and flags change nothing; nor does a question from an unknown agent, though a
    // gate is due.
    s.ok(&["gate", "ask", "--kind", "command", "--check", "true", "--blocks", "todos:t2"]);
    let before = s.tree();
    s.fails(1, &["quota", "should-run", "--agent-id", "nobody"]);
    s.fails(1, &["quota", "should-run", "--agent-id", "nobody", "--turn-instance-id", "t-1"]);
    s.fails(2, &["gate", "ask", "--kind", "timer", "--blocks", "goal"]);
    s.fails(2, &["gate", "ask", "--kind", "ci", "--pr", "not-a-pr", "--blocks", "goal"]);
    s.fails(
        2,
        &["gate", "ask", "--kind", "command", "--check", "true", "--every", "10s", "--blocks", "goal"],
    );
    s.fails(2, &["gate", "ask", "--kind", "person", "--blocks", "goal"]);
    s.fails(2, &["gate", "ask", "--kind", "cron", "--blocks", "goal"]);
    s.fails(2, &["gate", "ask", "--question", "q", "--pr", "acme/x#1", "--blocks", "goal"]);
    assert_eq!(s.tree(), before);
}

/// A time given as `+2h` or `2h` is read on the kernel's clock, the one its decisions and its
/// events' times read (a debug build's tests move it), and so is a hook's: a timer asked a day
/// ahead waits its two hours from then, a report's window ends then, a hook's event is dated then.
#[test]
fn relative_times_and_hooks_read_the_kernels_clock() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--text", "deploy after the freeze"]);
    let day = 86_400_000_i64;
    let at_with = |skew: i64, args: &[&str], stdin: &[u8]| {
        let r = s.run_with(args, stdin, &[("LOOPX_TEST_CLOCK_SKEW_MS", &skew.to_string())]);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r
    };
    let at = |skew: i64, args: &[&str]| at_with(skew, args, b"");
    let millis = |v: &Value| loopx_core::Timestamp::parse_rfc3339(v.as_str().unwrap()).unwrap().unix_millis();
    let real_now = || loopx_core::Timestamp::from_system_time(std::time::SystemTime::now()).unix_millis();
    let before = real_now();
    at(day, &["gate", "ask", "--kind", "timer", "--until", "+2h", "--blocks", "todos:t1"]);
    let until = millis(&s.json(&["gate", "list"])["gates"][0]["kind"]["until"]);
    assert!(until >= before + day + 7_200_000 && until <= real_now() + day + 7_200_000, "{until}");
    let d = at(day, &["quota", "should-run", "--agent-id", "a", "--json"]).json();
    assert_eq!(d["decision"], "wait", "two hours from the kernel's now: {d}");
    let d = at(day + 7_201_000, &["quota", "should-run", "--agent-id", "a", "--json"]).json();
    assert_eq!(d["decision"], "run", "{d}");

    let r = at(day, &["report", "--since", "1h", "--json"]).json();
    assert!(millis(&r["to"]) >= before + day, "the report's window ends at the kernel's now: {r}");

    let join = json!({"session_id": "clock-1", "cwd": s.root, "hook_event_name": "UserPromptSubmit", "prompt": "/loopx write the parser"});
    at_with(2 * day, &["hook", "claude-code", "user-prompt-submit"], join.to_string().as_bytes());
    let last = millis(&loopx_tests::events(&s.events_path("main")).last().unwrap()["at"]);
    assert!(last >= before + 2 * day, "the hook's commit is dated by the kernel's clock");
}

/// A webhook that records what it receives.
async fn webhook() -> MockServer {
    let s = MockServer::start().await;
    Mock::given(method("POST")).and(path("/hook")).respond_with(ResponseTemplate::new(200)).mount(&s).await;
    s
}

fn bodies(rt: &tokio::runtime::Runtime, s: &MockServer) -> Vec<Value> {
    rt.block_on(s.received_requests())
        .unwrap()
        .iter()
        .map(|r: &Request| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

#[test]
fn the_person_is_notified_once_and_reminded_once() {
    let rt = rt();
    let hook = rt.block_on(webhook());
    let url = format!("{}/hook", hook.uri());
    let s = Sandbox::new();
    s.init();
    s.ok(&["goal", "set", "--notify-webhook", &url, "--notify-format", "slack", "--notify-reminder", "2s"]);
    s.ok(&["gate", "ask", "--question", "May the importer drop rows with bad dates?", "--blocks", "goal"]);
    let got = bodies(&rt, &hook);
    assert_eq!(got.len(), 1, "one message when the gate opens");
    let text = got[0]["text"].as_str().unwrap();
    assert!(text.contains("May the importer drop rows with bad dates?"), "{text}");
    assert!(
        text.contains("loopx --goal-id main gate answer g1 --approve"),
        "the command that answers it: {text}"
    );
    s.ok(&["gate", "poll"]);
    s.ok(&["status"]);
    assert_eq!(bodies(&rt, &hook).len(), 1, "not again before the reminder");
    s.advance(Duration::from_millis(2100));
    let r = s.ok(&["gate", "poll"]);
    assert!(r.stdout.contains("g1: reminder sent (webhook)"), "{}", r.stdout);
    let got = bodies(&rt, &hook);
    assert_eq!(got.len(), 2);
    assert!(got[1]["text"].as_str().unwrap().contains("still needs you"));
    s.ok(&["gate", "poll"]);
    assert_eq!(bodies(&rt, &hook).len(), 2, "one reminder, not more");
    // Gates loopx checks itself need nobody.
    s.ok(&["gate", "ask", "--kind", "timer", "--until", "+1h", "--blocks", "goal"]);
    assert_eq!(bodies(&rt, &hook).len(), 2);
    // Feishu's shape.
    s.ok(&["gate", "answer", "g1", "--approve"]);
    s.ok(&["goal", "set", "--notify-format", "feishu"]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    let got = bodies(&rt, &hook);
    assert_eq!(got[2]["msg_type"], "text");
    assert!(got[2]["content"]["text"].as_str().unwrap().contains("Ship it?"));

    // A webhook that is down changes nothing else: the question is asked, the failure is
    // recorded, and it is tried again later.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", l.local_addr().unwrap())
    };
    s.ok(&["goal", "set", "--notify-webhook", &down]);
    let r = s.ok(&["gate", "ask", "--question", "And the docs?", "--blocks", "goal", "--json"]);
    assert_eq!(r.json()["gate"]["id"], "g4");
    let g = &s.json(&["gate", "list"])["gates"];
    let g4 = g.as_array().unwrap().iter().find(|g| g["id"] == "g4").unwrap();
    assert_eq!(g4["notified"]["failures"], 1, "{g4}");
    assert!(g4["notified"]["last_error"].as_str().unwrap().contains("could not be reached"), "{g4}");
    assert!(!g4["notified"]["last_error"].as_str().unwrap().contains("127.0.0.1"), "no address in the error");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    // Not a web address: refused.
    s.fails(2, &["goal", "set", "--notify-webhook", "ftp://hooks.example.com/x"]);
    s.fails(2, &["goal", "set", "--notify-webhook", "config:no spaces"]);
}

/// A webhook's URL is often its secret (Slack's and Feishu's tokens are in the path; others in
/// a query parameter or the fragment): loopx keeps it in the person's own configuration, never
/// in `.loopx/` (which many teams commit), and the notice still goes there.
#[test]
fn a_webhook_url_never_lands_in_loopx_dir() {
    let rt = rt();
    let hook = rt.block_on(webhook());
    let s = Sandbox::new();
    s.init();
    let urls = [
        format!("{}/hook/services/T0001/B0002/slack-secret-7731", hook.uri()),
        format!("{}/hook/open-apis/bot/v2/hook/feishu-secret-7731", hook.uri()),
        format!("{}/hook?access_token=query-secret-7731", hook.uri()),
        format!("{}/hook?apikey=query-secret-7732&code=query-secret-7733", hook.uri()),
        "https://user:pass-secret-7731@hooks.example.com/x#fragment-secret-7731".to_owned(),
    ];
    for url in &urls {
        let r = s.ok(&["goal", "set", "--notify-webhook", url]);
        assert!(
            !r.stdout.contains("secret-77") && !r.stderr.contains("secret-77"),
            "{}{}",
            r.stdout,
            r.stderr
        );
        for (path, bytes) in s.tree() {
            assert!(!String::from_utf8_lossy(&bytes).contains("secret-77"), "{url} reached {path}");
        }
    }
    let status = s.json(&["goal", "show"]);
    let named = status["goal"]["notify"]["webhook"].as_str().unwrap();
    assert!(named.starts_with("config:main."), "{status}");
    // Kept in the person's configuration, readable by them only.
    let config = s.home.join(".config/loopx/webhooks.json");
    let kept = std::fs::read_to_string(&config).unwrap();
    assert!(kept.contains("fragment-secret-7731"), "{kept}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // The notice goes to the URL kept there.
    s.ok(&["goal", "set", "--notify-webhook", &urls[0]]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    assert_eq!(bodies(&rt, &hook).len(), 1, "the notice reached the webhook");
    // A name must be one.
    s.fails(2, &["goal", "set", "--notify-webhook", "config:"]);
}

#[test]
fn no_token_or_credential_ever_reaches_loopx_dir_or_output() {
    let rt = rt();
    let server = rt.block_on(MockServer::start());
    rt.block_on(github(&server, SHA, &[("build", "completed", Some("failure"))]));
    let hook = rt.block_on(webhook());
    let secret_url = format!("{}/hook?path=secret-webhook-path-7731", hook.uri());
    let uri = server.uri();
    let s = Sandbox::new();
    let e = env(&uri, &[("LOOPX_HOOK", secret_url.as_str())]);
    let mut out = String::new();
    let mut run = |args: &[&str]| {
        let r: Run = s.run_with(args, b"", &e);
        out.push_str(&r.stdout);
        out.push_str(&r.stderr);
        r
    };
    run(&["init", "--goal-id", "main", "--objective", "ship"]);
    run(&["agent", "register", "--agent-id", "a", "--agent-type", "claude-code"]);
    run(&["goal", "set", "--notify-webhook", "env:LOOPX_HOOK"]);
    run(&["todo", "add", "--text", "release"]);
    run(&["gate", "ask", "--kind", "ci", "--pr", "acme/importer#7", "--blocks", "todos:t1", "--json"]);
    run(&["gate", "ask", "--question", "ok?", "--blocks", "agent:a"]);
    run(&["quota", "should-run", "--agent-id", "a", "--json"]);
    run(&["gate", "poll", "--json"]);
    run(&["gate", "list", "--all", "--json"]);
    run(&["status", "--json"]);
    run(&["history", "--limit", "100", "--json"]);
    run(&["doctor", "--json"]);
    // 401 from GitHub, its error text included.
    rt.block_on(server.reset());
    rt.block_on(async {
        Mock::given(method("GET")).respond_with(ResponseTemplate::new(401)).mount(&server).await
    });
    run(&["gate", "ask", "--kind", "ci", "--pr", "acme/importer#7", "--blocks", "goal"]);
    run(&["gate", "poll", "--json"]);
    // The token was used: GitHub saw it.
    let seen = rt.block_on(server.received_requests()).unwrap();
    assert!(
        seen.iter().all(|r| r.headers.get("authorization").is_some_and(|v| v == "Bearer tok-SECRET-0451"))
    );
    assert!(!bodies(&rt, &hook).is_empty(), "the webhook from the variable was used");
    let mut files = String::new();
    for (name, bytes) in s.tree() {
        files.push_str(&name);
        files.push_str(&String::from_utf8_lossy(&bytes));
    }
    for secret in ["tok-SECRET-0451", "Bearer", "secret-webhook-path-7731"] {
        assert!(!files.contains(secret), "{secret} is in .loopx/");
        assert!(!out.contains(secret), "{secret} was printed:\n{out}");
    }
    assert!(!files.to_ascii_lowercase().contains("authorization"));
    // An API address with credentials is refused before anything is sent.
    let r = s.run_with(&["status"], b"", &[("LOOPX_GITHUB_API", "https://user:pw@github.example.com")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains("pw@"), "{}", r.stderr);
}

/// `status` says why nothing is next when the open work waits on gates, and on what.
#[test]
fn status_says_the_work_waits_on_a_gate() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "publish the notes"]);
    s.ok(&["gate", "ask", "--kind", "timer", "--until", "+2h", "--blocks", "todos:t1"]);
    let out = s.ok(&["status"]).stdout;
    assert!(out.contains("next:        nothing free to pick up: every open todo is held or waits"), "{out}");
    assert!(out.contains("waits on:    g1 timer (todos:t1): waiting for the time "), "{out}");
    s.ok(&["gate", "answer", "g1", "--cancel"]);
    let out = s.ok(&["status"]).stdout;
    assert!(out.contains("next:        t1 P2 publish the notes"), "{out}");
}

/// A notify command gets the message as its last argument, the gate as JSON on stdin, and the
/// goal, gate and project in its environment, so a script can act on it.
#[test]
fn a_notify_command_gets_the_gate_as_json_and_its_ids_in_the_environment() {
    let s = Sandbox::new();
    s.init();
    let out = s.home.join("notice");
    let script = format!(
        "cat > {0}.json; printf '%s|%s|%s' \"$LOOPX_GOAL_ID\" \"$LOOPX_GATE_ID\" \"$LOOPX_PROJECT\" > {0}.env; printf '%s' \"$1\" > {0}.msg",
        out.display()
    );
    s.ok(&["goal", "set", "--notify-command", &shell_words::join(["sh", "-c", script.as_str(), "sh"])]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    let read = |ext: &str| std::fs::read_to_string(out.with_extension(ext)).unwrap();
    let gate: serde_json::Value = serde_json::from_str(&read("json")).unwrap();
    assert_eq!(
        (&gate["goal"], &gate["gate"], &gate["question"]),
        (&"main".into(), &"g1".into(), &"Ship it?".into())
    );
    assert_eq!(gate["project"], s.root.display().to_string(), "{gate}");
    assert!(gate["answer_with"].as_str().unwrap().contains("gate answer g1"), "{gate}");
    assert_eq!(read("env"), format!("main|g1|{}", s.root.display()));
    assert!(read("msg").starts_with("loopx: goal main needs you. g1 asks: Ship it?"), "{}", read("msg"));
}

/// A new webhook URL under the goal's same entry changes the person's configuration, not the
/// goal: `goal set` still says what changed and the log records that the person changed where
/// notices go (without the URL); the same URL again changes nothing and records nothing.
#[test]
fn a_new_webhook_url_is_said_and_recorded_without_the_url() {
    let s = Sandbox::new();
    s.init();
    let first = "https://hooks.example.com/first-secret-7741";
    let second = "https://hooks.example.com/second-secret-7742";
    s.ok(&["goal", "set", "--notify-webhook", first]);
    let lines = std::fs::read_to_string(s.events_path("main")).unwrap().lines().count();
    let r = s.ok(&["goal", "set", "--notify-webhook", second]);
    assert!(!r.stdout.contains("nothing changed"), "{}", r.stdout);
    assert!(
        r.stdout.contains("goal main updated")
            && r.stdout.contains("notices: the webhook posts to a new URL"),
        "{}",
        r.stdout
    );
    let log = loopx_tests::events(&s.events_path("main"));
    assert_eq!(log.len(), lines + 1, "one event");
    let last = log.last().unwrap();
    assert_eq!((&last["kind"], &last["actor"]), (&"goal_updated".into(), &"user".into()), "{last}");
    assert_eq!(last["data"]["webhook_changed"], true, "{last}");
    for (path, bytes) in s.tree() {
        assert!(!String::from_utf8_lossy(&bytes).contains("secret-774"), "a URL reached {path}");
    }
    let kept = std::fs::read_to_string(s.home.join(".config/loopx/webhooks.json")).unwrap();
    assert!(kept.contains("second-secret-7742") && !kept.contains("first-secret-7741"), "{kept}");
    assert!(s.ok(&["history"]).stdout.contains("notices go to another webhook URL"));
    // The same URL again: nothing changed, nothing recorded.
    let before = s.tree();
    let r = s.ok(&["goal", "set", "--notify-webhook", second]);
    assert!(r.stdout.contains("nothing changed"), "{}", r.stdout);
    assert_eq!(s.tree(), before);
}
