//! Strict mode: a goal under a person key takes a person's decision only signed by it. The
//! passphrase comes from a terminal (a pseudo-terminal here), never from stdin or an argument.

use loopx_tests::Sandbox;
use loopx_tests::web::Served;

use crate::dashboard::key_of;

const PASS: &str = "correct horse battery";

fn log_bytes(s: &Sandbox) -> Vec<u8> {
    std::fs::read(s.events_path("main")).unwrap()
}

/// A goal with an open person's gate, in strict mode under a fresh key.
fn strict() -> Sandbox {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    let r = s.on_terminal(&["person", "init"], &format!("{PASS}\n{PASS}\n"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("goal main is in strict mode"), "{}", r.stdout);
    s
}

#[test]
fn a_person_decision_needs_the_key_and_its_passphrase() {
    let s = strict();
    let before = log_bytes(&s);
    // No terminal (an agent's pipe): nothing to sign with.
    let r = s.run_with(&["gate", "answer", "g1", "--approve"], format!("{PASS}\n").as_bytes(), &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("asked on a terminal"), "{}", r.stderr);
    // A wrong passphrase.
    let r = s.on_terminal(&["gate", "answer", "g1", "--approve"], "wrong horse battery\n");
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("wrong passphrase"), "{}", r.stdout);
    assert_eq!(log_bytes(&s), before, "nothing written");
    // The passphrase on the terminal: signed and taken.
    for args in
        [&["gate", "answer", "g1", "--approve"][..], &["goal", "set", "--compute", "0.2"], &["goal", "stop"]]
    {
        let r = s.on_terminal(args, &format!("{PASS}\n"));
        assert_eq!(r.code, 0, "{args:?}: {}", r.stdout);
    }
    let log = loopx_tests::events(&s.events_path("main"));
    let signed: Vec<&str> =
        log.iter().filter(|e| e["signature"].is_string()).map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(signed, ["person_key_set", "gate_answered", "goal_updated", "goal_stopped"]);
    let d = s.ok(&["doctor"]).stdout;
    assert!(d.contains("ok   person decisions: 4 signed by the person's key"), "{d}");
}

#[test]
fn another_key_and_an_agent_cannot_take_the_persons_place() {
    let s = strict();
    let before = log_bytes(&s);
    // An agent's session never signs and never puts a goal under a key of its own.
    let session = [("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "s1")];
    let r = s.run_with(&["person", "init"], b"", &session);
    assert_eq!(r.code, 1, "{}", r.stderr);
    // A key of its own (made where it can write, the person's key file moved away): refused,
    // for the goal takes decisions from the person's key only.
    let config = s.home.join(".config/loopx");
    std::fs::rename(config.join("person.json"), config.join("person.json.mine")).unwrap();
    let r = s.on_terminal(&["person", "init"], "forged passphrase!\nforged passphrase!\n");
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("not by goal main's person key"), "{}", r.stdout);
    let r = s.on_terminal(&["goal", "resume"], "forged passphrase!\n");
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("is not the one this goal takes decisions from"), "{}", r.stdout);
    assert_eq!(log_bytes(&s), before);
    // With the person's own key back, the person decides as before.
    std::fs::rename(config.join("person.json.mine"), config.join("person.json")).unwrap();
    let r = s.on_terminal(&["goal", "stop", "--reason", "signed"], &format!("{PASS}\n"));
    assert_eq!(r.code, 0, "{}", r.stdout);
}

#[test]
fn the_dashboard_asks_for_the_passphrase_and_signs_on_the_server() {
    let s = strict();
    let d = Served::start(&s, &s.root, &[]);
    let inbox = d.get(&d.at("/")).body;
    let key = key_of(&inbox, "main");
    let page = d.get(&d.at(&format!("/p/{key}/main"))).body;
    assert!(page.contains("type=\"password\" name=\"passphrase\""), "{page}");
    let answer = |pass: &str| {
        d.post(
            &d.at(&format!("/p/{key}/main/gate/g1")),
            &format!("token={}&decision=approve&back=/&passphrase={}", d.token, pass.replace(' ', "+")),
        )
    };
    let before = log_bytes(&s);
    for (pass, says) in [("", "strict mode"), ("wrong horse battery", "wrong passphrase")] {
        let r = answer(pass);
        assert!(r.status >= 400 && r.body.contains(says), "{pass:?}: {} {}", r.status, r.body);
        assert_eq!(log_bytes(&s), before);
    }
    let r = answer(PASS);
    assert!(r.status < 400, "{} {}", r.status, r.body);
    assert_eq!(s.json(&["gate", "list", "--all"])["gates"][0]["status"], "approved");
}

/// Cuts goal main's log back to its first `keep` lines and removes the snapshot, as anyone
/// with plain file access could (no key, no loopx command).
fn cut_back(s: &Sandbox, keep: usize) {
    let text = String::from_utf8(log_bytes(s)).unwrap();
    let kept: String = text.lines().take(keep).map(|l| format!("{l}\n")).collect();
    std::fs::write(s.events_path("main"), kept).unwrap();
    let snapshot = s.events_path("main").with_file_name("snapshot.json");
    std::fs::remove_file(snapshot).unwrap();
}

#[test]
fn a_log_cut_back_is_refused_and_a_goal_once_strict_stays_strict() {
    // A person rejects a gate and stops the goal; then the log's tail is cut.
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "o"]);
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "goal"]);
    let lines = log_bytes(&s).split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    s.ok(&["gate", "answer", "g1", "--reject"]);
    s.ok(&["goal", "stop"]);
    cut_back(&s, lines);
    let before = s.tree();
    for args in
        [&["status"][..], &["gate", "list"], &["quota", "should-run", "--agent-id", "user"], &["doctor"]]
    {
        let r = s.run(args);
        assert_eq!(r.code, 4, "{args:?}: {}\n{}", r.stdout, r.stderr);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(said.contains("2 committed events are missing"), "{args:?}: {said}");
    }
    assert_eq!(s.tree(), before, "a refusal changes nothing");
    // A person who cut it on purpose accepts it by removing this machine's record.
    s.forget_heads();
    assert_eq!(s.json(&["gate", "list"])["gates"][0]["status"], "open");

    // In strict mode, cutting back past the key is refused; accepted, the goal stays strict.
    let s = strict();
    let lines = log_bytes(&s).split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    let r = s.on_terminal(&["goal", "stop"], &format!("{PASS}\n"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    cut_back(&s, lines - 1);
    let r = s.run(&["goal", "set", "--compute", "0.9"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stderr.contains("2 committed events are missing"), "{}", r.stderr);
    s.forget_heads();
    let before = log_bytes(&s);
    let r = s.run(&["goal", "set", "--compute", "0.9"]);
    assert_eq!(r.code, 1, "an unsigned decision on a goal this machine saw strict: {}", r.stderr);
    assert!(r.stderr.contains("strict mode"), "{}", r.stderr);
    assert_eq!(log_bytes(&s), before);
    let r = s.on_terminal(&["goal", "set", "--compute", "0.9"], &format!("{PASS}\n"));
    assert_eq!(r.code, 0, "signed by the key this machine saw: {}", r.stdout);
}
