//! The benchmark harness builds its fixtures and runs end to end (`--quick`), so it cannot rot.
//! Timings are not asserted here; they live in BENCHMARKS.md.

use std::process::Command;

use loopx_tests::loopx_bin;

#[test]
fn bench_quick_runs_end_to_end() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("bench.json");
    let out = Command::new(cargo)
        .args(["run", "--quiet", "--package", "xtask", "--", "bench", "--quick", "--bin"])
        .arg(loopx_bin())
        .arg("--json")
        .arg(&report)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUST_BACKTRACE", "0")
        .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root())
        .output()
        .unwrap();
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
