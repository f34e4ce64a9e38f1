//! `loopx serve` through the real binary over plain HTTP: who may ask (the token in the query, never a cookie, `Host`,
//! `Origin`, the form's token), the inbox across projects, answering a gate and adding a todo
//! as the person, escaping of untrusted text, live change events, pagination, and a dashboard
//! started inside an agent's session that only shows. (`browser.rs` drives a real browser.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use loopx_tests::Sandbox;
use loopx_tests::web::{self, Served, request};

/// Two indexed projects: `api` (goal main, an agent, a person's gate on the goal) and `web`.
fn two_projects(s: &Sandbox) -> (PathBuf, PathBuf) {
    let dir = |name: &str| {
        let d = s.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let (api, site) = (dir("api"), dir("web"));
    let ok = |d: &Path, args: &[&str]| s.ok_in(d, args);
    ok(&api, &["init", "--goal-id", "main", "--objective", "ship the api"]);
    ok(&api, &["agent", "register", "--agent-id", "claude", "--agent-type", "claude-code"]);
    ok(&api, &["todo", "add", "--agent-id", "user", "--text", "write the handler"]);
    ok(&api, &["gate", "ask", "--agent-id", "claude", "--question", "Deploy to prod?", "--blocks", "goal"]);
    ok(&site, &["init", "--goal-id", "site", "--objective", "the site"]);
    for d in [&api, &site] {
        ok(d, &["projects", "add"]);
    }
    (api, site)
}

/// The key of the project whose goal `goal` the page links to.
pub(crate) fn key_of(page: &str, goal: &str) -> String {
    let at = page
        .find(&format!("/{goal}?token="))
        .or_else(|| page.find(&format!("/{goal}\"")))
        .unwrap_or_else(|| panic!("no link to {goal} in {page}"));
    let start = page[..at].rfind("/p/").unwrap() + 3;
    page[start..at].to_owned()
}

#[test]
fn only_this_dashboards_own_pages_with_the_token_get_in() {
    let s = Sandbox::new();
    let (_, site) = two_projects(&s);
    let d = Served::start(&s, &site, &[]);
    let host = ("Host".to_owned(), format!("127.0.0.1:{}", d.port));
    // No token, a wrong one, a token in a cookie: refused.
    assert_eq!(request(d.port, "GET", "/", std::slice::from_ref(&host), None).status, 401);
    let cookie = ("Cookie".to_owned(), format!("loopx_token_{}={}", d.port, d.token));
    assert_eq!(request(d.port, "GET", "/", &[host.clone(), cookie], None).status, 401);
    assert_eq!(request(d.port, "GET", "/?token=nope", std::slice::from_ref(&host), None).status, 401);
    // The printed URL: the page, and no cookie (a browser would send it to every port of
    // 127.0.0.1); every link and form of the page carries the token instead.
    let first = request(d.port, "GET", &format!("/?token={}", d.token), std::slice::from_ref(&host), None);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("set-cookie"), None);
    assert_eq!(first.header("referrer-policy"), Some("same-origin"));
    let links: Vec<&str> = first.body.split("href=\"").skip(1).filter_map(|r| r.split('"').next()).collect();
    for l in links.iter().filter(|l| l.starts_with('/') && !l.starts_with("/assets/")) {
        assert!(l.contains(&format!("token={}", d.token)), "a link without the token: {l}");
    }
    assert!(first.header("content-security-policy").unwrap().contains("script-src 'self'"));
    // The stylesheet and the script need no token: they are the same for everyone.
    assert_eq!(request(d.port, "GET", "/assets/app.css", std::slice::from_ref(&host), None).status, 200);
    // A path that would read as another site never leads off this one.
    let r = request(
        d.port,
        "GET",
        &format!("//evil.example/?token={}", d.token),
        std::slice::from_ref(&host),
        None,
    );
    assert!(r.header("location").is_none_or(|l| !l.contains("evil.example")), "{:?}", r.header("location"));
    // A foreign Host (DNS rebinding) and a foreign Origin, token and all: refused.
    let mut foreign_host = d.own();
    foreign_host[0].1 = format!("rebound.example:{}", d.port);
    assert_eq!(request(d.port, "GET", &d.at("/"), &foreign_host, None).status, 403);
    let mut foreign_origin = d.own();
    foreign_origin.push(("Origin".into(), "http://evil.example".into()));
    assert_eq!(request(d.port, "GET", &d.at("/"), &foreign_origin, None).status, 403);
    let mut cross = d.own();
    cross.push(("Sec-Fetch-Site".into(), "cross-site".into()));
    assert_eq!(request(d.port, "GET", &d.at("/"), &cross, None).status, 403);
    // localhost names it too.
    let mut local = d.own();
    local[0].1 = format!("localhost:{}", d.port);
    assert_eq!(request(d.port, "GET", &d.at("/"), &local, None).status, 200);
    // A port in use: refused (1) with a hint, not a usage error.
    let r = s.run_in(&site, &["serve", "--port", &d.port.to_string()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--port 0"), "{}", r.stderr);
}

#[test]
fn a_gate_from_another_project_is_answered_on_the_page_as_the_person() {
    let s = Sandbox::new();
    let (api, site) = two_projects(&s);
    // Started in `web`: the inbox shows `api`'s gate.
    let d = Served::start(&s, &site, &[]);
    let inbox = d.get("/").body;
    assert!(inbox.contains("Deploy to prod?") && inbox.contains(&api.display().to_string()), "{inbox}");
    let key = key_of(&inbox, "main");
    let before = s.run_in(&api, &["quota", "should-run", "--agent-id", "claude", "--json"]).json();
    assert_eq!(before["decision"], "ask_user", "{before}");
    let gate = format!("/p/{key}/main/gate/g1");
    let attempts = [
        // No form token, a wrong one, an agent named in the form, a foreign Origin: refused,
        // and nothing changes.
        ("decision=approve&back=/".to_owned(), 422),
        ("token=0000&decision=approve&back=/".to_owned(), 409),
        (format!("token={}&decision=approve&agent_id=claude&back=/", d.token), 422),
    ];
    for (form, status) in &attempts {
        assert_eq!(d.post(&gate, form).status, *status, "{form}");
    }
    let mut foreign = d.own();
    foreign.push(("Origin".into(), "http://evil.example".into()));
    foreign.push(("Content-Type".into(), "application/x-www-form-urlencoded".into()));
    let form = format!("token={}&decision=approve&back=/", d.token);
    assert_eq!(request(d.port, "POST", &d.at(&gate), &foreign, Some(&form)).status, 403);
    // A write must say where it comes from: no Origin, no write.
    let mut silent = d.own();
    silent.push(("Content-Type".into(), "application/x-www-form-urlencoded".into()));
    assert_eq!(request(d.port, "POST", &d.at(&gate), &silent, Some(&form)).status, 403);
    assert_eq!(
        request(d.port, "GET", &d.at(&format!("{gate}?decision=approve")), &d.own(), None).status,
        405
    );
    let still = s.run_in(&api, &["gate", "list", "--json"]).json();
    assert_eq!(still["gates"][0]["status"], "open", "{still}");

    let answered = d.post(&gate, &format!("token={}&decision=approve&note=go+ahead&back=/", d.token));
    assert_eq!(answered.status, 303, "{}", answered.body);
    assert_eq!(answered.header("location"), Some(d.at("/").as_str()));
    let gates = s.run_in(&api, &["gate", "list", "--all", "--json"]).json();
    assert_eq!(gates["gates"][0]["status"], "approved");
    assert_eq!(gates["gates"][0]["answered_by"], "user");
    assert_eq!(gates["gates"][0]["note"], "go ahead");
    let after = s.run_in(&api, &["quota", "should-run", "--agent-id", "claude", "--json"]).json();
    assert_eq!(after["decision"], "run", "{after}");
    // Answering it again is the kernel's refusal, shown as a page.
    let again = d.post(&gate, &format!("token={}&decision=reject&back=/", d.token));
    assert!(again.status >= 400 && again.body.contains("g1"), "{}: {}", again.status, again.body);
}

#[test]
fn untrusted_text_renders_as_text() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "<img src=x onerror=alert(1)> objective"]);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "<script>alert('todo')</script> & \"quotes\""]);
    s.ok(&["gate", "ask", "--question", "</form><script>alert(2)</script>", "--blocks", "goal"]);
    let d = Served::start(&s, &s.root, &[]);
    let inbox = d.get("/").body;
    let key = key_of(&inbox, "main");
    let page = d.get(&format!("/p/{key}/main")).body;
    for body in [&inbox, &page] {
        assert!(!body.contains("<script>alert"), "{body}");
        assert!(!body.contains("<img src=x"), "{body}");
    }
    assert!(page.contains("&lt;script&gt;alert('todo')&lt;/script&gt; &amp; &quot;quotes&quot;"), "{page}");
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt; objective"), "{page}");
    assert!(inbox.contains("&lt;/form&gt;&lt;script&gt;alert(2)&lt;/script&gt;"), "{inbox}");
}

#[test]
fn a_todo_added_on_the_page_is_the_persons_and_a_commit_anywhere_wakes_the_page() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    s.ok(&["agent", "register", "--agent-id", "claude", "--agent-type", "claude-code"]);
    let d = Served::start(&s, &s.root, &[]);
    let key = key_of(&d.get("/").body, "main");
    let mut events = web::events(&d);
    // A todo from the command line wakes the page...
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "from the terminal"]);
    assert!(web::change_within(&mut events, Duration::from_secs(2)), "no change event within 2 s");
    assert!(d.get(&format!("/p/{key}/main")).body.contains("from the terminal"));
    // ...and one from the page is added as the person, for the person when asked.
    let form = format!("token={}&text=review+the+copy&priority=P1&role=user", d.token);
    let added = d.post(&format!("/p/{key}/main/todo"), &form);
    assert_eq!(added.status, 303, "{}", added.body);
    assert!(web::change_within(&mut events, Duration::from_secs(2)));
    let list = s.json(&["todo", "list"]);
    let t =
        list["todos"].as_array().unwrap().iter().find(|t| t["text"] == "review the copy").unwrap().clone();
    assert_eq!((t["priority"].as_str(), t["role"].as_str()), (Some("P1"), Some("user")), "{t}");
    let shown = s.json(&["todo", "show", "--todo-id", t["id"].as_str().unwrap()]);
    assert_eq!(shown["todo"]["created_by"], "user", "{shown}");
    // Bad input is refused and adds nothing.
    let bad = format!("token={}&text=x&priority=P9&role=user", d.token);
    assert_eq!(d.post(&format!("/p/{key}/main/todo"), &bad).status, 400);
    assert_eq!(s.json(&["todo", "list"])["todos"].as_array().unwrap().len(), 2);
}

/// A person's own todo is marked done from the inbox, the note its evidence; an agent's todo,
/// a missing note or a missing token is refused and changes nothing.
#[test]
fn a_persons_own_todo_is_done_from_the_inbox_with_a_note_as_evidence() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "sign the release", "--role", "user"]);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "an agent's work"]);
    let d = Served::start(&s, &s.root, &[]);
    let inbox = d.get("/").body;
    let key = key_of(&inbox, "main");
    assert!(inbox.contains(&format!("/p/{key}/main/todo/t1/done")), "a Done form for t1: {inbox}");
    let log = std::fs::read(s.events_path("main")).unwrap();
    for (todo, form) in [
        ("t1", format!("token={}&note=&back=/", d.token)),
        ("t2", format!("token={}&note=done&back=/", d.token)),
        ("t1", "token=wrong&note=signed&back=/".to_owned()),
    ] {
        let r = d.post(&format!("/p/{key}/main/todo/{todo}/done"), &form);
        assert!(r.status >= 400, "{todo} {form}: {} {}", r.status, r.body);
    }
    assert_eq!(std::fs::read(s.events_path("main")).unwrap(), log, "refusals change nothing");
    let r = d.post(
        &format!("/p/{key}/main/todo/t1/done"),
        &format!("token={}&note=signed+on+paper&back=/", d.token),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let shown = s.json(&["todo", "show", "--todo-id", "t1"]);
    assert_eq!(shown["todo"]["status"], "done", "{shown}");
    assert_eq!(shown["evidence"][0]["summary"], "signed on paper", "{shown}");
    assert_eq!(s.json(&["todo", "show", "--todo-id", "t2"])["todo"]["status"], "open");
}

#[test]
fn in_an_agents_session_the_dashboard_never_starts() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    // Its page would answer as the person, and its token would be the agent's to use.
    let r = s.run_with(
        &["serve", "--port", "0"],
        b"",
        &[("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "sess-1")],
    );
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("person's own terminal") && r.stdout.is_empty(), "{}", r.stderr);
}

#[test]
fn a_long_goal_pages_its_todos_and_an_unknown_page_is_refused() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    for i in 0..120 {
        s.ok(&["todo", "add", "--agent-id", "user", "--text", &format!("todo number {i}")]);
    }
    let d = Served::start(&s, &s.root, &[]);
    let key = key_of(&d.get("/").body, "main");
    let first = d.get(&format!("/p/{key}/main")).body;
    assert!(
        first.contains("page 1 of 3")
            && first.contains("todo number 0<")
            && !first.contains("todo number 50<")
    );
    let third = d.get(&format!("/p/{key}/main?page=2")).body;
    assert!(third.contains("page 3 of 3") && third.contains("todo number 119<"), "{third}");
    assert_eq!(d.get("/p/000000000000/main").status, 404);
    assert_eq!(d.get(&format!("/p/{key}/nope")).status, 404);
    assert_eq!(d.get(&format!("/p/{key}/main?page=x")).status, 400);
}

/// Goal `main` in the sandbox's project with `n` todos each claimed by agent `a` and
/// completed with one piece of evidence, built in-process (the same kernel, faster).
fn closed_goal(s: &Sandbox, n: usize) {
    use std::sync::Arc;

    use loopx_core::kernel::{
        AddTodo, CommandContext, CompleteTodo, CreateGoal, Kernel, NewEvidence, RegisterAgent,
    };
    use loopx_core::model::{EvidenceKind, Priority, Role, TodoClass};
    use loopx_core::{AgentId, AgentType, GoalId};
    use loopx_kernel::{FileKernel, Silent, StoreOptions, SystemClock};

    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let (k, _) =
            FileKernel::init(&s.root, Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
                .unwrap();
        let goal = GoalId::new("main").unwrap();
        k.create_goal(CreateGoal {
            id: goal,
            objective: "a long goal".into(),
            title: None,
            make_default: true,
        })
        .await
        .unwrap();
        let a = CommandContext { agent: Some(AgentId::new("a").unwrap()), ..CommandContext::default() };
        let user = CommandContext { agent: Some(AgentId::new("user").unwrap()), ..CommandContext::default() };
        k.register_agent(
            &user,
            RegisterAgent {
                id: AgentId::new("a").unwrap(),
                agent_type: AgentType::from_static("codex-cli"),
                require_new: true,
            },
        )
        .await
        .unwrap();
        for i in 1..=n {
            let add = AddTodo {
                text: format!("closed number {i}"),
                priority: Priority::P2,
                role: Role::Agent,
                class: TodoClass::Advance,
                scopes: vec![],
                after_gate: None,
                validation: None,
            };
            let t = k.add_todo(&user, add).await.unwrap().body.todo.id;
            k.claim_todo(&a, t).await.unwrap();
            let evidence = NewEvidence {
                kind: EvidenceKind::Test,
                summary: format!("proof number {i}"),
                command: None,
                exit_code: None,
                link: None,
            };
            let done = CompleteTodo {
                todo: t,
                evidence: Some(evidence),
                no_follow_up: true,
                note: None,
                next_todo: None,
            };
            k.complete_todo(&a, done).await.unwrap();
        }
    });
}

#[test]
fn closed_work_pages_from_the_live_state_into_the_archive_newest_first() {
    let s = Sandbox::new();
    closed_goal(&s, 130);
    // 64 closed todos stay live; 66 are archived.
    let d = Served::start(&s, &s.root, &[]);
    let key = key_of(&d.get("/").body, "main");
    let done = |page: usize| -> Vec<String> {
        let body = d.get(&format!("/p/{key}/main?page={page}")).body;
        let lane =
            body.split("data-lane=\"Done\"").nth(1).unwrap().split("</div></div>").next().unwrap().to_owned();
        lane.split("closed number ").skip(1).map(|x| x.split('<').next().unwrap().to_owned()).collect()
    };
    let want = |from: usize, to: usize| -> Vec<String> { (to..=from).rev().map(|i| i.to_string()).collect() };
    assert_eq!(done(0), want(130, 81), "the 50 most recently closed, from the live state");
    assert_eq!(done(1), want(80, 31), "14 live and 36 archived");
    assert_eq!(done(2), want(30, 1), "the oldest, from the archive");
    let page = d.get(&format!("/p/{key}/main")).body;
    assert!(page.contains("page 1 of 3") && page.contains("Done <span class=\"count\">130</span>"), "{page}");
    // The newest evidence first: proof 130 down to proof 101.
    let timeline = page.split("class=\"timeline\"").nth(1).unwrap().split("</ol>").next().unwrap();
    let proofs: Vec<&str> =
        timeline.split("proof number ").skip(1).map(|x| x.split('<').next().unwrap()).collect();
    assert_eq!(proofs.first(), Some(&"130"));
    assert_eq!(proofs.len(), 30);
    assert_eq!(proofs.last(), Some(&"101"));
}
