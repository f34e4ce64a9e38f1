//! `loopx demo`: the scripted goal runs to its end through the real kernel, tells its story in
//! order, and leaves a project that `status` and `history` can read when kept.

use std::path::Path;

use loopx_tests::Sandbox;

/// The timeline without its times: who did what, in order.
fn story(v: &serde_json::Value) -> String {
    v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let who = match b["host"].as_str() {
                Some(h) => format!("{} @{h}", b["who"].as_str().unwrap()),
                None => b["who"].as_str().unwrap().to_owned(),
            };
            format!("{who}: {}\n", b["what"].as_str().unwrap())
        })
        .collect()
}

#[test]
fn the_demo_runs_a_goal_across_two_hosts_to_its_end() {
    let s = Sandbox::new();
    let v = s.json(&["demo"]);
    insta::assert_snapshot!("demo_timeline", story(&v));
    let st = &v["status"];
    assert_eq!(st["goal_status"], "done", "the person completed it");
    assert_eq!(st["counts"]["done"], 4);
    assert_eq!(st["counts"]["total"], 4);
    assert_eq!(st["agents"], serde_json::json!(["codex-1", "claude-1"]));
    assert_eq!(st["runs"], 7, "every turn written back");
    assert_eq!(st["quota"]["used_slots"], 7, "one spend per turn");
    assert_eq!(v["kept"], false);
    assert!(!Path::new(v["project"].as_str().unwrap()).exists(), "the project is removed");
    // The text tells the same story for a person.
    let text = s.ok(&["demo"]).stdout;
    assert!(text.contains("codex-1 @codex-cli"), "{text}");
    assert!(text.contains("hands t3 off to claude-code (h1)"), "{text}");
    // The agents stop when the work is finished; the person completes the goal.
    assert!(text.contains("maya                  completes goal demo (loopx goal complete)"), "{text}");
    assert!(text.contains("should-run → stop (done)"), "{text}");
    assert!(text.contains("final: goal demo done · 4 of 4 todos done"), "{text}");
}

#[test]
fn a_kept_demo_project_is_a_real_project() {
    let s = Sandbox::new();
    let v = s.json(&["demo", "--keep"]);
    let dir = v["project"].as_str().unwrap().to_owned();
    let project = scopeguard(&dir);
    assert_eq!(v["kept"], true);
    let st = s.json(&["--project", &dir, "status"]);
    assert_eq!(st["counts"]["done"], 4);
    let h = s.json(&["--project", &dir, "handoff", "list", "--all"]);
    assert_eq!(h["handoffs"][0]["status"], "accepted");
    assert_eq!(h["handoffs"][0]["accepted_by"], "claude-1");
    let t3 = s.ok(&["--project", &dir, "history", "--todo", "t3"]).stdout;
    for line in [
        "t3 claimed by codex-1",
        "codex-1 handed t3 off to claude-code (h1)",
        "claude-1 took over t3 from codex-1 (h1)",
        "t3 completed",
    ] {
        assert!(t3.contains(line), "{line:?} in\n{t3}");
    }
    let t4 = s.json(&["--project", &dir, "todo", "show", "--todo-id", "t4"]);
    let kinds: Vec<(&str, Option<i64>)> = t4["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["author"].as_str().unwrap(), e["exit_code"].as_i64()))
        .collect();
    assert_eq!(
        kinds,
        [("loopx", Some(1)), ("loopx", Some(0)), ("claude-1", None)],
        "the check failed once, then loopx saw it pass"
    );
    assert_eq!(s.json(&["--project", &dir, "doctor"])["healthy"], true);
    drop(project);
}

/// Removes the kept project when the test ends, however it ends.
fn scopeguard(dir: &str) -> impl Drop + '_ {
    struct Guard<'a>(&'a str);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    Guard(dir)
}
