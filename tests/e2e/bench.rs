//! The benchmark harness builds its fixtures and runs end to end (`--quick`), so it cannot rot.
//! Timings are not asserted here; they live in BENCHMARKS.md.

use std::ffi::OsStr;
use std::process::{Command, Output};

use loopx_tests::loopx_bin;

/// `cargo xtask bench <args> --bin <the binary under test>`, its output.
fn bench(args: &[&OsStr]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    loopx_tests::without_agent_marks(&mut Command::new(cargo))
        .args(["run", "--quiet", "--package", "xtask", "--", "bench"])
        .args(args)
        .arg("--bin")
        .arg(loopx_bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUST_BACKTRACE", "0")
        .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root())
        .output()
        .unwrap()
}

#[test]
fn bench_quick_runs_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("bench.json");
    let out = bench(&["--quick".as_ref(), "--json".as_ref(), report.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| start-up: loopx --version |"), "{stdout}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["claim_race"]["double_winners"], 0);
    let names: Vec<&str> =
        r["timings"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for want in ["tick 1000 todos: whole tick", "status, 10000 events", "should-run, 1000 todos"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // Six rows on the file store (1, 8 and 32 processes, run as commands and as MCP servers),
    // and six on PostgreSQL unless it was skipped (said why).
    let rows = if r["postgres_skipped"].is_null() { 12 } else { 6 };
    let tput = r["throughput"].as_array().unwrap();
    assert_eq!(tput.len(), rows, "{}", r["postgres_skipped"]);
    assert!(tput.iter().all(|t| t["per_second"].as_f64().unwrap() > 0.0), "{tput:?}");
    assert_eq!(tput.iter().filter(|t| t["client"] == "mcp").count(), rows / 2);
    if rows == 12 {
        assert_eq!(r["claim_race_postgres"]["double_winners"], 0);
        assert!(names.contains(&"tick 10 todos, PostgreSQL: whole tick"), "{names:?}");
    }
    assert!(r["sizes"]["snapshot bytes, 1000 todos"].as_u64().unwrap() > 0);
}

/// `--startup` times `--version` against `should-run` on a long goal in alternating rounds,
/// with each `--against` build's two in the same rounds, then the same decision and a note from
/// a long-lived `loopx mcp`; a missing build is refused.
#[test]
fn bench_startup_alternates_version_and_should_run() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("startup.json");
    let startup = |extra: &[&OsStr]| bench(&[&["--startup".as_ref(), "--quick".as_ref()], extra].concat());
    let out =
        startup(&["--against".as_ref(), loopx_bin().as_os_str(), "--json".as_ref(), report.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("× --version's").count(), 2);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let timings = r["timings"].as_array().unwrap();
    let names: Vec<&str> = timings.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let other = format!(": {}", loopx_bin().display());
    assert_eq!(
        names,
        [
            "start-up: loopx --version".to_owned(),
            "should-run, 1000 todos (90 % closed)".to_owned(),
            format!("start-up: loopx --version{other}"),
            format!("should-run, 1000 todos (90 % closed){other}"),
            "loopx mcp should_run call, 1000 todos (90 % closed)".to_owned(),
            "loopx mcp update_task call, 1000 todos (90 % closed)".to_owned(),
        ]
    );
    assert!(timings.iter().all(|t| t["runs"] == 40 && t["p50_ms"].as_f64().unwrap() > 0.0), "{timings:?}");
    let missing = dir.path().join("no-such-loopx");
    let out = startup(&["--against".as_ref(), missing.as_os_str()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no binary at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--hooks --against OTHER` has the other build answer every hook sample in the same rounds:
/// a row for each, each answer checked by its host's oracle.
#[test]
fn bench_hooks_alternate_with_another_build() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("hooks.json");
    let out = bench(&[
        "--hooks".as_ref(),
        "--quick".as_ref(),
        "--against".as_ref(),
        loopx_bin().as_os_str(),
        "--json".as_ref(),
        report.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let names: Vec<&str> =
        r["timings"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let other = format!("hook claude-code stop, 1000 todos: {}", loopx_bin().display());
    assert!(
        names.contains(&"hook claude-code stop, 1000 todos") && names.contains(&other.as_str()),
        "{names:?}"
    );
    let (own, others): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| !n.contains(": "));
    assert_eq!(own.len(), others.len(), "{names:?}");
    assert!(own.len() >= 15, "every host's hook points: {names:?}");
}
