//! `loopx import loopx-py`: a project made by the real LoopX (Python) 0.4.9 comes over with
//! what LoopX itself reports about it — todos, gates, claims, evidence, the spend — and what
//! cannot come over is listed with its file and line. The source is never changed; a second
//! import changes nothing; a broken source is refused before anything is written.

use std::collections::BTreeMap;

use loopx_tests::{Sandbox, expected, loopx_py_fixture};
use serde_json::Value;

/// Every file of the sandbox outside loopx's own `.loopx/` state (the Python registry lives in
/// `.loopx/` too).
fn source_tree(s: &Sandbox) -> BTreeMap<String, Vec<u8>> {
    s.tree().into_iter().filter(|(p, _)| !p.starts_with(".loopx/") || p == ".loopx/registry.json").collect()
}

/// Our todo for each LoopX todo id, by the import's report.
fn mapping(report: &Value, goal: &str) -> BTreeMap<String, String> {
    let g = report["goals"].as_array().unwrap().iter().find(|g| g["source_goal"] == goal).unwrap();
    g["todo_ids"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_loopx_python_project_comes_over_field_for_field() {
    let (s, exp) = loopx_py_fixture();
    let before = source_tree(&s);

    // A dry run reports and writes nothing, not even loopx's project.
    let dry = s.json(&["import", "loopx-py", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert!(dry["goals"].as_array().unwrap().iter().all(|g| g["outcome"] == "would_import"), "{dry}");
    assert!(!s.state_dir().join("project.json").exists());
    assert_eq!(source_tree(&s), before);

    let report = s.json(&["import", "loopx-py"]);
    assert_eq!(source_tree(&s), before, "the source was changed");
    assert_eq!(report["goals"].as_array().unwrap().len(), 2, "{report}");
    let agents: usize =
        report["goals"].as_array().unwrap().iter().map(|g| g["agents"].as_u64().unwrap() as usize).sum();
    assert_eq!(agents, 3);

    for goal in ["alpha", "beta"] {
        let ids = mapping(&report, goal);
        let py = expected(&exp, &format!("todo-list-{goal}.json"));
        let ours = s.json(&["--goal-id", goal, "todo", "list", "--all"]);
        let ours: BTreeMap<String, &Value> = ours["todos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_str().unwrap().to_owned(), t))
            .collect();
        let gates = s.json(&["--goal-id", goal, "gate", "list", "--all"]);
        let gates = gates["gates"].as_array().unwrap();
        for t in py["todos"].as_array().unwrap() {
            let py_id = t["todo_id"].as_str().unwrap();
            let title = t["title"].as_str().or(t["text"].as_str()).unwrap();
            if t["task_class"] == "user_gate" {
                // A person's gate: a loopx gate with its question and scope.
                let g =
                    gates.iter().find(|g| g["question"] == title).unwrap_or_else(|| panic!("gate {title}"));
                assert_eq!(g["status"], if t["status"] == "done" { "approved" } else { "open" }, "{title}");
                let scope = match (t["global_gate"].as_bool(), t["blocks_agent"].as_str()) {
                    (Some(true), _) => serde_json::json!({"scope": "goal"}),
                    (_, Some(a)) => serde_json::json!({"scope": "agent", "ids": a}),
                    _ => serde_json::json!({"scope": "goal"}),
                };
                assert_eq!(g["blocks"], scope, "{title}");
                continue;
            }
            let ours = ours[&ids[py_id]];
            assert_eq!(ours["text"], title, "{py_id}");
            assert_eq!(ours["priority"], t["priority"].as_str().unwrap_or("P2"), "{py_id}");
            assert_eq!(ours["role"], t["role"], "{py_id}");
            let status = match (t["status"].as_str().unwrap(), t["note"].as_str()) {
                ("done", Some("superseded")) => "superseded",
                (s, _) => s,
            };
            assert_eq!(ours["status"], status, "{py_id}");
            let class = match t["task_class"].as_str() {
                Some("blocker") => "blocker",
                Some("continuous_monitor") => "monitor",
                _ => "advance",
            };
            assert_eq!(ours["class"], class, "{py_id}");
            if status != "done" && status != "superseded" {
                assert_eq!(ours["claimed_by"], t["claimed_by"], "{py_id}");
            }
            // The source id is kept as a reference on the todo.
            let shown = s.json(&["--goal-id", goal, "todo", "show", "--todo-id", &ids[py_id]]);
            assert!(shown.to_string().contains(py_id), "{py_id} not kept on {}", ids[py_id]);
        }
        // `status` counts what LoopX's own summaries count, read the loopx way: LoopX counts a
        // blocked todo as open and a deferred one as done, and a person's gate as their todo;
        // its archived todos (which it does not list) come over done.
        let (pa, pu) = (&py["agent_todos"], &py["user_todos"]);
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        let gate_items = py["todos"].as_array().unwrap().iter().filter(|t| t["task_class"] == "user_gate");
        let open_gates = gate_items.clone().filter(|t| t["status"] != "done").count() as u64;
        let answered = gate_items.filter(|t| t["status"] == "done").count() as u64;
        let md = std::fs::read_to_string(s.root.join(format!(".codex/goals/{goal}/ACTIVE_GOAL_STATE.md")))
            .unwrap();
        let archived = md
            .split("## Completed Work Archive")
            .nth(1)
            .map_or(0, |a| a.lines().filter(|l| l.trim_start().starts_with("- [")).count())
            as u64;
        let counts = &s.json(&["--goal-id", goal, "status"])["counts"];
        let deferred = n(pa, "deferred_count") + n(pu, "deferred_count");
        assert_eq!(
            n(counts, "open") + n(counts, "blocked"),
            n(pa, "open_count") + n(pu, "open_count") - open_gates,
            "{goal}"
        );
        assert_eq!(n(counts, "deferred"), deferred, "{goal}");
        assert_eq!(
            n(counts, "done") + n(counts, "superseded"),
            n(pa, "done_count") + n(pu, "done_count") - deferred - answered + archived,
            "{goal}"
        );
        let claimed = ours
            .values()
            .filter(|t| {
                t["claimed_by"].is_string()
                    && !["done", "superseded"].contains(&t["status"].as_str().unwrap())
            })
            .count() as u64;
        assert_eq!(claimed, n(pa, "claimed_open_count"), "{goal}");

        // LoopX lists the live todos; the archived ones come over closed.
        let listed =
            py["todos"].as_array().unwrap().iter().filter(|t| t["task_class"] != "user_gate").count();
        assert!(ours.len() >= listed, "{goal}: {} todos for {listed}", ours.len());
        assert!(ours.len() > listed || goal == "alpha", "{goal}: the archived todos are missing");

        // History: each of LoopX's runs is a spend here, or listed as not imported.
        let runs = expected(&exp, &format!("history-{goal}.json"));
        let g = report["goals"].as_array().unwrap().iter().find(|g| g["source_goal"] == goal).unwrap();
        let ours_hist = s.json(&["--goal-id", goal, "history", "--limit", "1000"]);
        let spent =
            ours_hist["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "slot_spent").count();
        for run in runs["runs"].as_array().unwrap() {
            let c = run["classification"].as_str().unwrap();
            let reported =
                g["not_imported"].as_array().unwrap().iter().any(|n| n["what"].as_str().unwrap().contains(c));
            assert!(c == "quota_slot_spent" || reported, "run {c} neither imported nor reported");
        }
        let py_spends = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["classification"] == "quota_slot_spent")
            .count();
        assert_eq!(spent, py_spends, "{goal}");
        assert_eq!(ours_hist["events"][1]["kind"], "imported");

        // `loopx report` on the imported goal agrees with its state: each run a spent turn,
        // each closed todo done or superseded, each answered gate an answer.
        let r = s.json(&["--goal-id", goal, "report"]);
        let counts = &s.json(&["--goal-id", goal, "status"])["counts"];
        assert_eq!(r["turns"]["turns"].as_u64(), Some(py_spends as u64), "{goal}: {r}");
        assert_eq!(r["turns"]["spent"].as_u64(), Some(py_spends as u64), "{goal}");
        assert_eq!(r["work"]["done"], counts["done"], "{goal}");
        assert_eq!(r["work"]["superseded"], counts["superseded"], "{goal}");
        let answered = gates.iter().filter(|g| g["status"] != "open").count() as u64;
        assert_eq!(r["gates"]["person"]["answered"].as_u64(), Some(answered), "{goal}");
        let t = &r["time"];
        let parts = ["working_ms", "paused_ms", "person_ms", "checks_ms", "quota_ms", "idle_ms"];
        assert_eq!(
            parts.iter().map(|k| t[k].as_u64().unwrap()).sum::<u64>(),
            t["elapsed_ms"].as_u64().unwrap()
        );
    }

    // Status counts agree with the todo list.
    let status = s.json(&["--goal-id", "alpha", "status"]);
    assert_eq!(status["counts"]["blocked"], 1);
    assert_eq!(status["counts"]["deferred"], 1);
    assert_eq!(status["gates"].as_array().map_or(0, Vec::len), 2, "{status}");

    // Again: nothing changes, and it says so.
    let log = std::fs::read(s.events_path("alpha")).unwrap();
    let again = s.ok(&["import", "loopx-py"]);
    assert!(again.stdout.contains("nothing changed"), "{}", again.stdout);
    assert_eq!(std::fs::read(s.events_path("alpha")).unwrap(), log);
    assert_eq!(source_tree(&s), before);
}

#[test]
fn a_broken_source_is_refused_naming_the_file_and_line_and_nothing_is_written() {
    let (s, _) = loopx_py_fixture();
    let state = s.root.join(".codex/goals/alpha/ACTIVE_GOAL_STATE.md");
    let text = std::fs::read_to_string(&state).unwrap();
    // Cut inside a todo's metadata comment, as a truncated copy would be.
    let at = text.find("<!-- loopx:todo").unwrap() + 30;
    std::fs::write(&state, &text[..at]).unwrap();
    let line = text[..at].matches('\n').count() + 1;
    let before = s.tree();
    let r = s.fails(4, &["import", "loopx-py"]);
    assert!(r.stderr.contains(&format!("ACTIVE_GOAL_STATE.md:{line}")), "{}", r.stderr);
    assert_eq!(s.tree(), before, "something was written");

    // A registry that is not JSON names its line too.
    std::fs::write(&state, &text).unwrap();
    let registry = s.root.join(".loopx/registry.json");
    let bytes = std::fs::read(&registry).unwrap();
    std::fs::write(&registry, &bytes[..bytes.len() / 2]).unwrap();
    let r = s.fails(4, &["import", "loopx-py"]);
    assert!(r.stderr.contains("registry.json:"), "{}", r.stderr);
    assert!(!s.state_dir().join("project.json").exists());
}

#[test]
fn a_goal_taken_by_another_is_refused_unless_renamed() {
    let (s, _) = loopx_py_fixture();
    s.ok(&["init", "--goal-id", "alpha", "--objective", "our own alpha"]);
    let log = std::fs::read(s.events_path("alpha")).unwrap();
    let r = s.fails(1, &["import", "loopx-py"]);
    assert!(r.stderr.contains("goal alpha exists") && r.stderr.contains("--rename"), "{}", r.stderr);
    assert!(!s.events_path("beta").exists(), "a refused import wrote beta");
    let report = s.json(&["import", "loopx-py", "--rename"]);
    assert_eq!(report["goals"][0]["goal_id"], "alpha-py");
    // Renamed, the same source again still changes nothing.
    let again = s.json(&["import", "loopx-py", "--rename"]);
    assert_eq!(again["goals"][0]["goal_id"], "alpha-py", "{again}");
    assert!(again["goals"].as_array().unwrap().iter().all(|g| g["outcome"] == "unchanged"), "{again}");
    assert_eq!(std::fs::read(s.events_path("alpha")).unwrap(), log, "our alpha was changed");
    assert_eq!(s.json(&["--goal-id", "alpha-py", "status"])["objective"], "Ship the alpha parser");
}

#[test]
fn a_state_file_cut_anywhere_is_imported_or_refused_never_a_crash() {
    let (s, _) = loopx_py_fixture();
    let state = s.root.join(".codex/goals/beta/ACTIVE_GOAL_STATE.md");
    let text = std::fs::read(&state).unwrap();
    let mut refused = 0;
    // Every 23rd byte: a cut inside the front matter, a heading, a checkbox, a comment.
    for at in (0..text.len()).step_by(23) {
        std::fs::write(&state, &text[..at]).unwrap();
        let r = s.run(&["import", "loopx-py", "--dry-run", "--json"]);
        match r.code {
            0 => assert!(
                r.json()["goals"].as_array().is_some_and(|g| g.len() == 2),
                "cut at {at}: {}",
                r.stdout
            ),
            4 => {
                assert!(r.stderr.contains("ACTIVE_GOAL_STATE.md:"), "cut at {at}: {}", r.stderr);
                refused += 1;
            }
            code => panic!("cut at {at}: exit {code}\n{}", r.stderr),
        }
    }
    assert!(refused > 0, "no cut was refused");
    assert!(!s.state_dir().join("project.json").exists(), "a dry run wrote");
}

/// Points the registry's `state_file` of goal alpha at `to`.
fn point_alpha_at(s: &Sandbox, to: &str) {
    let registry = s.root.join(".loopx/registry.json");
    let text = std::fs::read_to_string(&registry).unwrap();
    let text = text.replacen("\".codex/goals/alpha/ACTIVE_GOAL_STATE.md\"", &format!("{to:?}"), 1);
    std::fs::write(&registry, text).unwrap();
}

/// Runs the import, which must end within a minute (a FIFO must not hang it).
fn import_within_a_minute(s: &Sandbox) -> loopx_tests::Run {
    let mut child = s
        .command()
        .args(["import", "loopx-py"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the import hung");
        }
        std::thread::park_timeout(std::time::Duration::from_millis(20));
    }
    loopx_tests::Run::from(child.wait_with_output().unwrap())
}

/// A way of breaking the fixture, and its name.
type Breakage<'a> = (&'a str, &'a dyn Fn(&Sandbox));

#[test]
fn the_import_reads_only_regular_files_inside_the_project() {
    let cases: [Breakage<'_>; 5] = [
        ("an absolute path", &|s| point_alpha_at(s, "/etc/hostname")),
        ("a path that climbs out", &|s| {
            std::fs::write(s.root.parent().unwrap().join("outside.md"), "---\nobjective: x\n---\n").unwrap();
            point_alpha_at(s, "../outside.md");
        }),
        ("a symbolic link", &|s| {
            let state = s.root.join(".codex/goals/alpha/ACTIVE_GOAL_STATE.md");
            let away = s.root.parent().unwrap().join("away.md");
            std::fs::rename(&state, &away).unwrap();
            std::os::unix::fs::symlink(&away, &state).unwrap();
        }),
        ("a device", &|s| point_alpha_at(s, "/dev/zero")),
        ("a FIFO", &|s| {
            let state = s.root.join(".codex/goals/alpha/ACTIVE_GOAL_STATE.md");
            std::fs::remove_file(&state).unwrap();
            let ok = std::process::Command::new("mkfifo").arg(&state).status().unwrap();
            assert!(ok.success());
        }),
    ];
    for (what, make) in cases {
        let (s, _) = loopx_py_fixture();
        make(&s);
        let r = import_within_a_minute(&s);
        assert_eq!(r.code, 1, "{what}: {}", r.stderr);
        assert!(r.stderr.contains("only regular files inside the project"), "{what}: {}", r.stderr);
        assert!(!s.state_dir().join("project.json").exists(), "{what}: a refused import wrote");
    }
}

#[test]
fn an_offset_out_of_range_is_refused_and_escapes_never_reach_the_terminal() {
    let (s, _) = loopx_py_fixture();
    let index = s.root.join(".loopx-runtime/goals/alpha/runs/index.jsonl");
    let text = std::fs::read_to_string(&index).unwrap();
    std::fs::write(&index, text.replacen("+00:00", "+1000000:00", 1)).unwrap();
    let before = s.tree();
    let r = s.fails(4, &["import", "loopx-py"]);
    assert!(r.stderr.contains("index.jsonl:1"), "{}", r.stderr);
    assert_eq!(s.tree(), before, "a refused import wrote");

    let (s, _) = loopx_py_fixture();
    let registry = s.root.join(".loopx/registry.json");
    let text = std::fs::read_to_string(&registry).unwrap();
    let evil = text.replacen(
        "\"write_scope\": []",
        "\"write_scope\": [\"\\u001b[31mred\\u001b]0;title\\u0007\"]",
        1,
    );
    assert_ne!(evil, text);
    std::fs::write(&registry, evil).unwrap();
    let r = s.ok(&["import", "loopx-py", "--dry-run"]);
    assert!(r.stdout.contains("red"), "{}", r.stdout);
    assert!(!r.stdout.contains('\u{1b}') && !r.stdout.contains('\u{7}'), "{:?}", r.stdout);
}
