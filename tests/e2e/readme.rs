//! The README's examples, run as a newcomer would paste them: every `sh` and `console` block in
//! order, line by line, in one fresh directory, with `loopx` on `PATH`. A line's exit code must
//! be 0 unless its comment says `(exit N)`; a `console` block's output must match what the
//! README shows. Lines that build or install loopx itself (`cargo …`) are left to CI, except
//! that what follows `cargo build … &&` runs (with `target/release/loopx` pointing at the
//! binary under test). `claude` on `PATH` is a scripted agent (`tests/fixtures/drive/bin`), so
//! the examples of `loopx drive` run for real without a model.

use std::path::{Path, PathBuf};
use std::process::Command;

use loopx_tests::{Sandbox, loopx_bin};

/// One runnable line and what it must do.
#[derive(Debug)]
struct Step {
    /// The README line, for messages.
    line: usize,
    command: String,
    exit: i32,
    /// The exact stdout a `console` block shows.
    output: Option<String>,
}

/// The command and the exit code a line's comment promises (`# … (exit 1)`).
fn split_comment(text: &str) -> (String, i32) {
    let (command, comment) = match text.find("  #") {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    let exit = comment
        .split("(exit ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .map_or(0, |n| n.trim().parse().expect("an exit code in a README comment"));
    (command.trim().to_owned(), exit)
}

/// The steps of every `sh` and `console` block, in order.
fn steps(readme: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut block: Option<&str> = None;
    for (i, raw) in readme.lines().enumerate() {
        let line = i + 1;
        if let Some(info) = raw.strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(info.trim()),
            };
            if block.is_none()
                && let Some(last) = out.last_mut()
                && let Some(o) = &mut last.output
            {
                // The block ended: its last command's output is complete.
                *o = o.trim_end().to_owned();
            }
            continue;
        }
        match block {
            Some("sh") if !raw.trim().is_empty() && !raw.trim_start().starts_with('#') => {
                let (command, exit) = split_comment(raw);
                out.push(Step { line, command, exit, output: None });
            }
            Some("console") => match raw.strip_prefix("$ ") {
                Some(cmd) => {
                    let (command, exit) = split_comment(cmd);
                    out.push(Step { line, command, exit, output: Some(String::new()) });
                }
                None => {
                    let o = out.last_mut().and_then(|s| s.output.as_mut()).expect("output after a `$` line");
                    o.push_str(raw.trim_end());
                    o.push('\n');
                }
            },
            _ => {}
        }
    }
    out
}

/// Runs the README's steps in a fresh sandbox; the first failure, described.
fn run(readme: &str) -> Result<usize, String> {
    let s = Sandbox::new();
    let bin_dir = loopx_bin().parent().unwrap().to_path_buf();
    let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/drive/bin");
    let path = std::env::join_paths(
        [bin_dir, agents]
            .into_iter()
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let release = s.root.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(loopx_bin(), release.join("loopx")).unwrap();
    let mut cwd: PathBuf = s.root.clone();
    let mut ran = 0;
    for step in steps(readme) {
        let mut command = step.command.as_str();
        if let Some(rest) = command.strip_prefix("cargo ") {
            // Building and installing loopx is CI's; what a build line then runs is ours.
            match rest.split_once("&&") {
                Some((_, after)) => command = after.trim(),
                None => continue,
            }
        }
        if let Some(dir) = command.strip_prefix("cd ") {
            cwd = cwd.join(dir.trim());
            continue;
        }
        let out = Command::new("bash")
            .args(["-c", command])
            .current_dir(&cwd)
            .env_clear()
            .env("HOME", &s.home)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env(loopx_tests::ANCESTRY_ROOT, loopx_tests::ancestry_root())
            .output()
            .map_err(|e| format!("README line {}: cannot run bash: {e}", step.line))?;
        ran += 1;
        let code = out.status.code().unwrap_or(-1);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if code != step.exit {
            return Err(format!(
                "README line {}: `{command}` exited {code}, not {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                step.line, step.exit
            ));
        }
        if let Some(want) = &step.output
            && stdout.trim_end() != want
        {
            return Err(format!(
                "README line {}: `{command}` printed\n{stdout}\nbut the README shows\n{want}",
                step.line
            ));
        }
    }
    Ok(ran)
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap()
}

#[test]
fn every_readme_example_runs_as_shown() {
    let ran = run(&readme()).unwrap_or_else(|e| panic!("{e}"));
    assert!(ran >= 60, "the README's story runs {ran} commands");
}

/// The test fails when an example drifts: a todo that does not exist, a flag that changed, an
/// output that no longer reads as shown.
#[test]
fn a_broken_example_fails_the_readme_test() {
    let text = readme();
    for (from, to) in [
        (
            "loopx todo claim --todo-id t4 --agent-id claude-1 --turn-instance-id turn-8",
            "loopx todo claim --todo-id t9 --agent-id claude-1 --turn-instance-id turn-8",
        ),
        ("--takeover-reason \"back to you\"", "--takeover \"back to you\""),
        (
            "t4    P1 open       handle quoted fields  — for claude-1, unclaimed",
            "t4    P1 open       handle quoted fields  — claude-1",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let err = run(&text.replacen(from, to, 1)).expect_err("a broken example must fail");
        assert!(err.contains("README line"), "{err}");
    }
}
