//! `loopx report`: a goal's trajectory, told exactly. A goal of known shape (turns of known
//! length, a question open a known time, a timer gate, a pause, a handoff; `testkit::story`)
//! reports its shape to the millisecond in all three forms, and so does `loopx demo`'s story;
//! the picture has the lanes, bars and marks the story makes; `--since`/`--until` report a
//! part; bad input changes nothing.

use serde_json::Value;

use loopx_testkit::story::{self, Shape};
use loopx_tests::{Run, Sandbox};

const MIN: u64 = 60_000;

fn shaped(s: &Sandbox, cycles: usize) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(story::into_project(&s.root, Shape::whole(cycles))).unwrap();
}

fn count(svg: &str, needle: &str) -> usize {
    svg.matches(needle).count()
}

#[test]
fn a_goal_of_known_shape_reports_its_shape_exactly() {
    let s = Sandbox::new();
    let n = 3u64;
    shaped(&s, n as usize);
    let r = s.json(&["report"]);
    assert_eq!(r["schema_version"], 1);
    let t = &r["time"];
    // The story's last ten idle minutes come after its last event: not in the window.
    let elapsed = (n * story::CYCLE_MINUTES - story::IDLE_MINUTES) * MIN;
    assert_eq!(t["elapsed_ms"], elapsed);
    assert_eq!(t["working_ms"], n * story::WORKING_MINUTES * MIN);
    assert_eq!(t["person_ms"], n * story::PERSON_MINUTES * MIN);
    assert_eq!(t["checks_ms"], n * story::CHECKS_MINUTES * MIN);
    assert_eq!(t["paused_ms"], n * story::PAUSED_MINUTES * MIN);
    assert_eq!(t["idle_ms"], (n - 1) * story::IDLE_MINUTES * MIN);
    assert_eq!(t["quota_ms"], 0);
    assert_eq!(t["agent_ms"], n * story::WORKING_MINUTES * MIN);

    let agents = r["agents"].as_array().unwrap();
    let (claude, codex) = (&agents[0], &agents[1]);
    assert_eq!((claude["agent"].as_str(), claude["host"].as_str()), (Some("claude-1"), Some("claude-code")));
    assert_eq!((claude["turns"].as_u64(), claude["spent"].as_u64()), (Some(2 * n), Some(2 * n)));
    assert_eq!(claude["driven"], 0);
    assert_eq!(claude["working_ms"], n * 30 * MIN);
    assert_eq!(claude["tokens"], n * 800);
    assert_eq!((codex["agent"].as_str(), codex["host"].as_str()), (Some("codex-1"), Some("codex")));
    assert_eq!(codex["turns"], 3 * n);
    assert_eq!(codex["driven"], 3 * n);
    assert_eq!(codex["spent"], 2 * n);
    assert_eq!(codex["failed"], n);
    assert_eq!(codex["interrupted"], 0);
    assert_eq!(codex["working_ms"], n * 50 * MIN);
    assert_eq!(codex["tokens"], 3 * n * story::TURN_TOKENS);
    assert_eq!(codex["usd"].as_f64().unwrap(), 3.0 * n as f64 * story::TURN_USD);

    let g = &r["gates"];
    assert_eq!(g["person"]["asked"], n);
    assert_eq!(g["person"]["answered"], n);
    assert_eq!(g["person"]["median_ms"], story::PERSON_MINUTES * MIN);
    assert_eq!(g["person"]["longest_ms"], story::PERSON_MINUTES * MIN);
    assert_eq!(g["checks"]["asked"], n);
    assert_eq!(g["checks"]["total_ms"], n * story::CHECKS_MINUTES * MIN);
    assert_eq!(g["list"].as_array().unwrap().len() as u64, 2 * n);
    assert_eq!(g["list"][1]["kind"], "timer");
    assert_eq!(g["list"][1]["status"], "approved");

    let p = &r["people"];
    assert_eq!(p["interventions"], 7 * n, "4 todos, an answer, a stop and a resume a cycle");
    assert_eq!((p["todos_added"].as_u64(), p["gate_answers"].as_u64()), (Some(4 * n), Some(n)));
    assert_eq!(p["goal_changes"], 2 * n);
    assert_eq!(p["per_day"], 7.0 * n as f64, "a window under a day counts as one");
    assert_eq!(p["per_100_turns"], 7.0 * n as f64 * 100.0 / (5 * n) as f64);
    assert_eq!(p["response_median_ms"], story::PERSON_MINUTES * MIN);

    let w = &r["work"];
    assert_eq!(w["todos_added"], 4 * n);
    assert_eq!(w["done"], 3 * n);
    assert_eq!(w["done_with_evidence"], 3 * n);
    assert_eq!((w["done_validated"].as_u64(), w["done_without_evidence"].as_u64()), (Some(0), Some(0)));
    assert_eq!((w["handoffs_offered"].as_u64(), w["handoffs_accepted"].as_u64()), (Some(n), Some(n)));
    assert_eq!(w["host_switches"], n);
    assert_eq!(r["days"].as_array().unwrap().len(), 1);
    assert_eq!(r["from"], "2026-11-02T09:00:00.000Z");

    // The same figures for people, exactly; the text on one screen.
    let text = s.ok(&["report"]).stdout;
    assert!(text.lines().count() <= 24, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    insta::assert_snapshot!("report_shaped_text", text);
    insta::assert_snapshot!("report_shaped_markdown", s.ok(&["report", "--markdown"]).stdout);

    // The picture: a lane per agent, a bar per turn coloured by outcome, the person's waits and
    // answers, the timer's waits, the pauses, the handoffs, and the burn-up's three lines.
    let file = s.root.join("picture.svg");
    s.ok(&["report", "--svg", file.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(count(&svg, r#"<g class="lane" data-agent="#), 2);
    assert_eq!(count(&svg, r#"data-agent="claude-1""#), 1);
    assert_eq!(count(&svg, r#"class="turn spent""#) as u64, 4 * n);
    assert_eq!(count(&svg, r#"class="turn failed""#) as u64, n);
    assert_eq!(count(&svg, r#"class="turn wrote-back""#), 0);
    assert_eq!(count(&svg, r#"class="wait person""#) as u64, n);
    assert_eq!(count(&svg, r#"<circle class="answer""#) as u64, n);
    assert_eq!(count(&svg, r#"class="wait check""#) as u64, n);
    assert_eq!(count(&svg, r#"<rect class="pause""#) as u64, n);
    assert_eq!(count(&svg, r#"<line class="handoff""#) as u64, n);
    assert_eq!(count(&svg, "<polyline class="), 3);
    assert!(!svg.contains("density"), "a short goal is drawn item by item");
}

#[test]
fn a_window_reports_only_its_part() {
    let s = Sandbox::new();
    shaped(&s, 2);
    // The second cycle alone: from its start to its last event.
    let r = s.json(&["report", "--since", "2026-11-02T12:50:00Z"]);
    let t = &r["time"];
    assert_eq!(t["elapsed_ms"], (story::CYCLE_MINUTES - story::IDLE_MINUTES) * MIN);
    assert_eq!(t["working_ms"], story::WORKING_MINUTES * MIN);
    assert_eq!(t["person_ms"], story::PERSON_MINUTES * MIN);
    assert_eq!(r["turns"]["turns"], 5);
    assert_eq!(r["work"]["done"], 3);
    assert_eq!(r["people"]["interventions"], 7);
    // The first cycle alone: later lines are not read.
    let r = s.json(&["report", "--until", "2026-11-02T12:40:00Z"]);
    assert_eq!(r["time"]["elapsed_ms"], (story::CYCLE_MINUTES - story::IDLE_MINUTES) * MIN);
    assert_eq!(r["work"]["done"], 3);
    assert_eq!(r["to"], "2026-11-02T12:40:00.000Z");
}

/// The same goal on PostgreSQL (moved there with its history) reports the same figures, read
/// in batches of rows: the goal is longer than one batch.
#[test]
fn on_postgres_the_report_is_the_same() {
    let Some(url) = loopx_tests::pg::test_url("the report on PostgreSQL") else { return };
    let s = Sandbox::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(story::into_project_at_once(&s.root, Shape::whole(140))).unwrap();
    let files = s.ok(&["report", "--json"]).stdout;
    let text = s.ok(&["report", "--until", "2026-11-03T09:00:00Z"]).stdout;
    assert!(serde_json::from_str::<Value>(&files).unwrap()["events"].as_u64().unwrap() > 4096);
    let ns = loopx_tests::pg::unique_project("report");
    s.ok(&["store", "migrate", "--to", &url, "--store-project", &ns]);
    assert!(s.ok(&["store", "show"]).stdout.contains("postgres"));
    assert_eq!(s.ok(&["report", "--json"]).stdout, files);
    assert_eq!(s.ok(&["report", "--until", "2026-11-03T09:00:00Z"]).stdout, text);
}

#[test]
fn the_demo_tells_its_story_in_figures() {
    let s = Sandbox::new();
    let v = s.json(&["demo", "--keep"]);
    let dir = v["project"].as_str().unwrap().to_owned();
    let _gone = Removed(&dir);
    let r = s.json(&["--project", &dir, "report"]);
    let t = &r["time"];
    assert_eq!(t["elapsed_ms"], 150 * MIN);
    assert_eq!(t["working_ms"], 124 * MIN);
    assert_eq!(r["turns"]["turns"], 7);
    assert_eq!(r["turns"]["spent"], 7);
    assert_eq!(r["gates"]["person"]["longest_ms"], 56 * MIN);
    assert_eq!(r["work"]["done_validated"], 1, "the export check loopx ran itself");
    assert_eq!(r["work"]["host_switches"], 1);
    assert_eq!(r["agents"][1]["validation_failures"], 1);
    // The story's clock starts four hours before now: its dates change, its figures not.
    let dated = |text: String| undated(&text);
    let text = s.ok(&["--project", &dir, "report"]).stdout;
    // README's "What happened?" shows this report: it stays true.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let shown = readme.split("$ loopx --project /tmp/loopx-demo-… report\n").nth(1).unwrap();
    assert_eq!(undated(shown.split("```").next().unwrap()), undated(&text), "README's report of the demo");
    insta::assert_snapshot!("report_demo_text", dated(text));
    insta::assert_snapshot!(
        "report_demo_markdown",
        dated(s.ok(&["--project", &dir, "report", "--markdown"]).stdout)
    );
    let mut json: Value = r.clone();
    for key in ["from", "to"] {
        json[key] = "[date]".into();
    }
    for g in json["gates"]["list"].as_array_mut().unwrap() {
        g["asked_at"] = "[date]".into();
        g["closed_at"] = "[date]".into();
    }
    // The story may cross midnight (UTC): its days are added up, not snapshotted.
    let days = json["days"].as_array().unwrap();
    let done: u64 = days.iter().map(|d| d["done"].as_u64().unwrap()).sum();
    let turns: u64 = days.iter().map(|d| d["turns"].as_u64().unwrap()).sum();
    assert_eq!((done, turns), (4, 7));
    json["days"] = "[days]".into();
    insta::assert_snapshot!("report_demo_json", serde_json::to_string_pretty(&json).unwrap());
}

/// A voided spend gives its turn's slot back: the report reads that turn as written back, not
/// spent, as the quota counts it (in the figures and in the picture).
#[test]
fn a_voided_spend_makes_its_turn_written_back_not_spent() {
    let s = Sandbox::new();
    let v = s.json(&["demo", "--keep"]);
    let dir = v["project"].as_str().unwrap().to_owned();
    let _gone = Removed(&dir);
    let turns = |r: &Value| (r["turns"]["spent"].clone(), r["turns"]["wrote_back"].clone());
    assert_eq!(turns(&s.json(&["--project", &dir, "report"])), (7.into(), 0.into()));
    // s1 accounted a turn long finished, s7 the last turn of the story.
    for spend in ["s1", "s7"] {
        s.ok(&["--project", &dir, "quota", "void-slot", "--spend-id", spend, "--reason", "the host retried"]);
    }
    let r = s.json(&["--project", &dir, "report"]);
    assert_eq!(turns(&r), (5.into(), 2.into()), "{}", r["turns"]);
    let spent: Vec<&Value> = r["agents"].as_array().unwrap().iter().map(|a| &a["spent"]).collect();
    assert_eq!(spent, [&Value::from(3), &Value::from(2)], "codex-1 spent s1, claude-1 s7");
    let svg = s.home.join("voided.svg");
    s.ok(&["--project", &dir, "report", "--svg", svg.to_str().unwrap()]);
    let svg = std::fs::read_to_string(svg).unwrap();
    assert_eq!((count(&svg, "class=\"turn spent\""), count(&svg, "class=\"turn wrote-back\"")), (5, 2));
}

#[test]
fn bad_report_input_is_refused_and_changes_nothing() {
    let s = Sandbox::new();
    shaped(&s, 1);
    let before = s.tree();
    let r = s.fails(2, &["report", "--since", "yesterday-ish"]);
    assert!(r.stderr.contains("invalid time"), "{}", r.stderr);
    let r = s.fails(2, &["report", "--since", "2026-11-03T00:00:00Z", "--until", "2026-11-02T00:00:00Z"]);
    assert!(r.stderr.contains("is after --until"), "{}", r.stderr);
    let r = s.fails(2, &["report", "--markdown", "--json"]);
    assert!(r.stderr.contains("choose one"), "{}", r.stderr);
    let r = s.run(&["--goal-id", "nope", "report"]);
    assert_ne!(r.code, 0);
    // No rasteriser on PATH: --png is refused before anything is written.
    let png = s.root.join("p.png");
    let out =
        s.command().env("PATH", "/nonexistent").args(["report", "--png", png.to_str().unwrap()]).output();
    let r = Run::from(out.unwrap());
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("rsvg-convert"), "{}", r.stderr);
    assert!(!png.exists());
    assert_eq!(s.tree(), before, "a report writes nothing in the project");
}

/// `text` with every `YYYY-MM-DD HH:MM` replaced by `[date]`.
fn undated(text: &str) -> String {
    let shape = b"dddd-dd-dd dd:dd";
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let fits = bytes.len() - i >= shape.len()
            && shape
                .iter()
                .zip(&bytes[i..])
                .all(|(s, b)| if *s == b'd' { b.is_ascii_digit() } else { s == b });
        if fits {
            out.push_str("[date]");
            i += shape.len();
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Removes the demo's kept project at the end of the test.
struct Removed<'a>(&'a str);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0);
    }
}

/// The dashboard's report: the goal page's section, the report page, and the picture and the
/// figures as downloads — the same figures `loopx report --json` gives.
#[test]
fn the_dashboard_serves_the_same_report() {
    let s = Sandbox::new();
    shaped(&s, 2);
    let d = loopx_tests::web::Served::start(&s, &s.root, &[]);
    let key = crate::dashboard::key_of(&d.get("/").body, "shaped");
    let goal = d.get(&format!("/p/{key}/shaped")).body;
    assert!(goal.contains("What happened") && goal.contains("class=\"burnup\""), "{goal}");
    let page = d.get(&format!("/p/{key}/shaped/report")).body;
    assert_eq!(count(&page, r#"class="turn spent""#), 8);
    assert!(page.contains("agents working 2h 40m"), "{page}");
    let json: Value = serde_json::from_str(&d.get(&format!("/p/{key}/shaped/report.json")).body).unwrap();
    assert_eq!(json, s.json(&["report"]));
    let svg = d.get(&format!("/p/{key}/shaped/report.svg"));
    assert_eq!(svg.status, 200);
    assert!(svg.body.starts_with("<svg") && svg.body.contains("class=\"timeline\""));
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    assert_eq!(d.get(&format!("/p/{key}/shaped/report.txt")).status, 404);
}

/// `--png` with a rasteriser on `PATH` (Chromium here, which the browser test needs anyway): the
/// picture as a PNG of the SVG's width.
#[test]
fn the_picture_is_written_as_png_by_the_rasteriser_on_path() {
    let Some((_, chromium)) = crate::browser::browser() else { return };
    let s = Sandbox::new();
    shaped(&s, 1);
    let bin = s.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&chromium, bin.join("chromium")).unwrap();
    let png = s.root.join("trajectory.png");
    let out = s.command().env("PATH", &bin).args(["report", "--png", png.to_str().unwrap()]).output();
    let r = Run::from(out.unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 960, "the SVG's width");
    assert!(r.stderr.contains("the picture is in"), "{}", r.stderr);
}

/// `--svg`/`--png` replace only a regular file: a symbolic link, a FIFO, a device, a directory
/// or a file with other names (hard links) is refused with what it is, and left as it was, the
/// project too; `-` prints the picture on stdout on purpose, and nothing else there.
#[test]
fn the_picture_replaces_only_a_regular_file_or_goes_to_stdout() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let s = Sandbox::new();
    shaped(&s, 1);
    // A rasteriser that writes a PNG's first bytes where `-o` says.
    let bin = s.root.parent().unwrap().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let rsvg = bin.join("rsvg-convert");
    std::fs::write(
        &rsvg,
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && printf '\\211PNG fake' > \"$2\"; shift; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&rsvg, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let report = |args: &[&str]| {
        let out = s.command().env("PATH", &path).arg("report").args(args).output().unwrap();
        (out.status.code().unwrap(), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
    };

    let out = s.root.parent().unwrap().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mine = s.home.join("notes.txt");
    std::fs::write(&mine, "the user's own notes").unwrap();
    let link = out.join("link.svg");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let fifo = out.join("pipe.svg");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let dir = out.join("dir.svg");
    std::fs::create_dir(&dir).unwrap();
    let shared = out.join("shared.svg");
    std::fs::write(&shared, "shared bytes").unwrap();
    std::fs::hard_link(&shared, s.home.join("shared-too")).unwrap();
    let before = s.tree();
    let cases = [
        (link.as_path(), "a symbolic link"),
        (fifo.as_path(), "a FIFO"),
        (dir.as_path(), "a directory"),
        (shared.as_path(), "other names (hard links)"),
        (std::path::Path::new("/dev/null"), "a device"),
    ];
    for (target, what) in cases {
        for flag in ["--svg", "--png"] {
            let (code, stdout, stderr) = report(&[flag, target.to_str().unwrap()]);
            assert_eq!(code, 1, "{flag} {}: {stderr}", target.display());
            assert!(stderr.contains(what) && stderr.contains(&format!("{flag} -")), "{stderr}");
            assert!(stdout.is_empty());
        }
    }
    assert_eq!(s.tree(), before, "a refused report changes nothing in the project");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "the user's own notes");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    assert_eq!(std::fs::read_to_string(s.home.join("shared-too")).unwrap(), "shared bytes");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4, "no file left beside them");

    // On purpose: the picture on stdout, and only the picture.
    let (code, stdout, stderr) = report(&["--svg", "-"]);
    assert_eq!(code, 0, "{stderr}");
    let svg = String::from_utf8(stdout).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
    let (code, stdout, stderr) = report(&["--png", "-", "--svg", out.join("new.svg").to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"\x89PNG fake");
    assert!(std::fs::read_to_string(out.join("new.svg")).unwrap().starts_with("<svg"));
    for args in [&["--svg", "-", "--png", "-"][..], &["--svg", "-", "--json"], &["--png", "-", "--markdown"]]
    {
        let (code, stdout, stderr) = report(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("choose one"), "{stderr}");
        // Nothing on stdout but, with --json, the error's document.
        assert!(stdout.is_empty() || stdout.starts_with(b"{\"schema_version\""), "{args:?}");
    }
    // A regular file is still replaced.
    std::fs::write(out.join("old.svg"), "old").unwrap();
    let (code, _, stderr) = report(&["--svg", out.join("old.svg").to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(std::fs::read_to_string(out.join("old.svg")).unwrap().starts_with("<svg"));
    assert_eq!(s.tree(), before);
}
