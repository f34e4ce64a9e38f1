//! `loopx serve` in a real headless browser (Debian's Chromium, driven over WebDriver by
//! chromedriver): the inbox lists a gate from a second project and approving it on the page
//! lets the agent run; a todo added on the command line appears on the open page within 2 s
//! without a reload; a `<script>` todo renders as text; a page without the token, a page
//! reached through another host name (DNS rebinding) and a form posted from another origin are
//! refused. Takes the README's screenshots at 1280×800 (written to `docs/` when
//! `LOOPX_UPDATE_SCREENSHOTS=1`).
//!
//! Needs `chromium` and `chromedriver` (`.ci/run` installs them); `LOOPX_SKIP_BROWSER=1` skips
//! it, loudly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use loopx_tests::Sandbox;
use loopx_tests::web::Served;

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port()
}

/// chromedriver and the Chromium binary, or why the test cannot run.
pub(crate) fn browser() -> Option<(PathBuf, PathBuf)> {
    let found = which::which("chromedriver").ok().zip(
        ["/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists()),
    );
    if found.is_none() {
        if std::env::var_os("LOOPX_SKIP_BROWSER").is_some_and(|v| v == "1") {
            eprintln!("SKIPPED: the browser test (LOOPX_SKIP_BROWSER=1; chromium or chromedriver missing)");
            return None;
        }
        panic!(
            "the browser test needs chromium and chromedriver (apt-get install chromium chromium-driver; .ci/run does), or LOOPX_SKIP_BROWSER=1"
        );
    }
    found
}

fn start_driver(driver: &Path) -> Driver {
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let d = Driver { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

async fn session(d: &Driver, chromium: &Path) -> Client {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", "--hide-scrollbars", "--force-device-scale-factor=1",
                // A name of another site that resolves to this machine: DNS rebinding.
                "--host-resolver-rules=MAP rebound.test 127.0.0.1",
            ]
        }
    });
    let Value::Object(caps) = caps else { unreachable!() };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let c = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", d.port))
        .await
        .expect("a browser session");
    // A viewport of 1280×800: the window is that plus the browser's own frame.
    let frame = c.execute(
        "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]",
        vec![],
    );
    let frame: Vec<u32> = serde_json::from_value(frame.await.unwrap()).unwrap();
    c.set_window_size(1280 + frame[0], 800 + frame[1]).await.unwrap();
    c
}

/// Runs `script` until it returns true or `timeout` passes; whether it did.
async fn until(c: &Client, script: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if c.execute(script, vec![]).await.ok() == Some(Value::Bool(true)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn body_text(c: &Client) -> String {
    c.find(Locator::Css("body")).await.unwrap().text().await.unwrap()
}

/// Saves a screenshot (to `docs/` when asked to update them) and checks it is 1280×800.
async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let (w, h) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (1280, 800), "{name} is {w}×{h}");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let dir = if std::env::var_os("LOOPX_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
        docs
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots")
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

/// The demo's finished goal with more work on it (claimed, held by a question, for the
/// person), and a second project whose agent waits on a person's gate.
fn projects(s: &Sandbox) -> (PathBuf, PathBuf) {
    let ok = |d: &Path, args: &[&str]| s.ok_in(d, args);
    let r = s.command().env("TMPDIR", &s.root).args(["demo", "--keep", "--json"]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let demo: Value = serde_json::from_slice(&r.stdout).unwrap();
    let reports = PathBuf::from(demo["project"].as_str().unwrap());
    // The demo ends with its goal done; the person reopens it for the next stretch of work.
    ok(&reports, &["goal", "resume"]);
    for (text, prio) in [
        ("Paginate the export for reports over 10,000 rows", "P1"),
        ("Stream the CSV instead of building it in memory", "P2"),
        ("Add the export to the scheduled email", "P2"),
        ("Document the export columns", "P3"),
    ] {
        ok(&reports, &["todo", "add", "--agent-id", "user", "--priority", prio, "--text", text]);
    }
    ok(&reports, &["todo", "claim", "--todo-id", "t5", "--agent-id", "claude-1"]);
    ok(
        &reports,
        &[
            "todo",
            "add",
            "--agent-id",
            "user",
            "--role",
            "user",
            "--priority",
            "P1",
            "--text",
            "Pick the date format for the CSV",
        ],
    );
    ok(
        &reports,
        &[
            "gate",
            "ask",
            "--agent-id",
            "codex-1",
            "--question",
            "May the scheduled email attach files over 5 MB?",
            "--blocks",
            "todos:t7",
        ],
    );
    let web = s.root.join("web");
    std::fs::create_dir_all(&web).unwrap();
    ok(&web, &["init", "--goal-id", "launch", "--objective", "Launch the new pricing page"]);
    ok(&web, &["agent", "register", "--agent-id", "claude", "--agent-type", "claude-code"]);
    ok(&web, &["todo", "add", "--agent-id", "user", "--text", "Switch the pricing route to the new page"]);
    ok(&web, &["gate", "ask", "--agent-id", "claude", "--question", "Deploy to prod?", "--blocks", "goal"]);
    // A second goal there whose work is finished: it waits for the person to confirm it.
    let docs = |args: &[&str]| ok(&web, &[&["--goal-id", "docs"][..], args].concat());
    ok(&web, &["goal", "create", "--goal-id", "docs", "--objective", "Document the pricing page"]);
    docs(&["agent", "register", "--agent-id", "claude", "--agent-type", "claude-code"]);
    docs(&["todo", "add", "--text", "Write the pricing FAQ"]);
    docs(&["todo", "claim", "--todo-id", "t1", "--agent-id", "claude"]);
    docs(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "claude",
        "--no-follow-up",
        "--note",
        "FAQ live",
    ]);
    ok(&reports, &["projects", "add"]);
    ok(&web, &["projects", "add"]);
    (reports, web)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    let Some((chromedriver, chromium)) = browser() else { return };
    let s = Sandbox::new();
    let (reports, web) = projects(&s);
    let served = Served::start(&s, &reports, &[]);
    let driver = start_driver(&chromedriver);
    let c = session(&driver, &chromium).await;
    let port = served.port;

    // The printed URL: in. The token stays in the address (and in every link of the page):
    // never in a cookie, which the browser would send to every port of 127.0.0.1.
    c.goto(&served.url).await.unwrap();
    assert_eq!(c.current_url().await.unwrap().as_str(), served.url);
    assert_eq!(c.get_all_cookies().await.unwrap().len(), 0);
    let inbox = body_text(&c).await;
    assert!(inbox.contains("Deploy to prod?") && inbox.contains(&web.display().to_string()), "{inbox}");
    screenshot(&c, "dashboard-inbox.png").await;

    // Approve the other project's gate on the page: the agent there may run.
    let before = s.run_in(&web, &["quota", "should-run", "--agent-id", "claude", "--json"]).json();
    assert_eq!(before["should_run"], false, "{before}");
    let approve = "//li[contains(., 'Deploy to prod?')]//button[@value='approve']";
    c.find(Locator::XPath(approve)).await.unwrap().click().await.unwrap();
    assert!(
        until(&c, "return !document.body.innerText.includes('Deploy to prod?')", Duration::from_secs(5))
            .await,
        "{}",
        body_text(&c).await
    );
    assert_eq!(c.current_url().await.unwrap().path(), "/", "{}", body_text(&c).await);
    let after = s.run_in(&web, &["quota", "should-run", "--agent-id", "claude", "--json"]).json();
    assert_eq!(after["decision"], "run", "{after}");
    let gates = s.run_in(&web, &["gate", "list", "--all", "--json"]).json();
    assert_eq!(gates["gates"][0]["answered_by"], "user", "{gates}");

    // The finished goal asks the person to confirm it; the button completes it.
    let finished = "//li[@data-kind='finished'][contains(., 'docs')]";
    let text = c.find(Locator::XPath(finished)).await.unwrap().text().await.unwrap();
    assert!(text.contains("its work is finished (1 done): is the objective met?"), "{text}");
    let complete = format!("{finished}//button[contains(., 'Complete goal')]");
    c.find(Locator::XPath(&complete)).await.unwrap().click().await.unwrap();
    assert!(
        until(
            &c,
            "return document.querySelector(\"li[data-kind='finished']\") === null",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        body_text(&c).await
    );
    let done = s.run_in(&web, &["--goal-id", "docs", "status", "--json"]).json();
    assert_eq!(done["goal_status"], "done", "{done}");
    let ask = s
        .run_in(&web, &["--goal-id", "docs", "quota", "should-run", "--agent-id", "claude", "--json"])
        .json();
    assert_eq!(ask["continuation"]["cause"], "done", "{ask}");

    // The reports goal's page, left open: a todo added on the command line appears within
    // 2 s, without a reload (a mark set on the page survives).
    let link = "//div[@class='project'][contains(., 'loopx-demo')]//a";
    c.find(Locator::XPath(link)).await.unwrap().click().await.unwrap();
    assert!(until(&c, "return document.querySelector('.kanban') !== null", Duration::from_secs(5)).await);
    c.execute("window.__kept = 'this page'; return true", vec![]).await.unwrap();
    s.run_in(&reports, &["todo", "add", "--agent-id", "user", "--text", "Added from the terminal"]);
    let shown =
        "return document.body.innerText.includes('Added from the terminal') && window.__kept === 'this page'";
    assert!(
        until(&c, shown, Duration::from_secs(2)).await,
        "the new todo did not appear within 2 s without a reload: {:?}",
        c.execute("return [document.getElementById('live').className, document.body.dataset.updated, window.__kept]", vec![]).await
    );

    // Untrusted text is text.
    let evil = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">";
    s.run_in(&reports, &["todo", "add", "--agent-id", "user", "--text", evil]);
    let script = format!(
        "return [...document.querySelectorAll('.todo .text')].some(e => e.textContent === {})",
        serde_json::to_string(evil).unwrap()
    );
    assert!(until(&c, &script, Duration::from_secs(2)).await, "the script todo is not shown as its text");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_ne!(c.title().await.unwrap(), "pwned");
    assert_eq!(
        c.execute("return document.querySelectorAll('main script, main img').length", vec![]).await.unwrap(),
        json!(0)
    );
    s.run_in(
        &reports,
        &[
            "todo",
            "update",
            "--agent-id",
            "user",
            "--todo-id",
            "t11",
            "--status",
            "blocked",
            "--note",
            "not for now",
        ],
    );
    assert!(
        until(
            &c,
            "return document.querySelector('[data-lane=Blocked]').innerText.includes('pwned')",
            Duration::from_secs(2)
        )
        .await
    );
    screenshot(&c, "dashboard-goal.png").await;

    // The goal's report: where its time went, the timeline and the burn-up, drawn on the server
    // (no script draws them: the content security policy lets no other script run).
    let goal_url = c.current_url().await.unwrap();
    let mut report_url = goal_url.clone();
    report_url.set_path(&format!("{}/report", goal_url.path()));
    c.goto(report_url.as_str()).await.unwrap();
    let drawn = "return document.querySelectorAll('svg.timeline g.lane[data-agent]').length == 2 \
        && document.querySelectorAll('svg.timeline rect.turn').length == 7 \
        && document.querySelectorAll('svg.burnup polyline').length == 3";
    assert!(until(&c, drawn, Duration::from_secs(5)).await, "{}", body_text(&c).await);
    let text = body_text(&c).await;
    assert!(text.contains("agents working") && text.contains("handoffs: 1 offered, 1 taken"), "{text}");
    screenshot(&c, "dashboard-report.png").await;
    c.goto(goal_url.as_str()).await.unwrap();
    assert!(body_text(&c).await.contains("What happened"));

    // A form posted to the dashboard from another origin, token and all: refused, the gate
    // still open.
    let key_path: String = c.current_url().await.unwrap().path().to_owned();
    let foreign = format!(
        "data:text/html,<form method=post action='http://127.0.0.1:{port}{key_path}/gate/g2?token={0}'><input name=token value={0}><input name=decision value=approve></form><script>document.forms[0].submit()</script>",
        served.token
    );
    c.goto(&foreign).await.unwrap();
    assert!(
        until(&c, "return document.body.innerText.includes('refused')", Duration::from_secs(5)).await,
        "{}",
        body_text(&c).await
    );
    let open = s.run_in(&reports, &["gate", "list", "--json"]).json();
    assert_eq!(open["gates"][0]["status"], "open", "{open}");

    // Without the token: refused.
    c.goto(&format!("http://127.0.0.1:{port}/")).await.unwrap();
    assert!(body_text(&c).await.contains("refused: this dashboard needs the token"));
    // Another host name for this machine (DNS rebinding), token and all: refused.
    c.goto(&format!("http://rebound.test:{port}/?token={}", served.token)).await.unwrap();
    assert!(body_text(&c).await.contains("refused: the Host header"));
    c.close().await.unwrap();
}
