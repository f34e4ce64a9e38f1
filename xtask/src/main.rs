//! Project automation. `cargo xtask ci` runs everything CI runs.

mod bench;
mod dist;
mod sim;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci                              format check, clippy (warnings denied), and the whole test suite
  bench [--quick] [--drive|--hooks|--report] [--json FILE]   fresh-process benchmarks of the release binary (see BENCHMARKS.md); --drive: only loopx drive's; --hooks: only the hook answers; --report: only loopx report's
        [--bin PATH]              (measure this binary instead of building the release one)
  sim [--seed N] [--seeds K]     deterministic simulation of long-running goals, every invariant
      [--hours H] [--agents A]    checked after every step (default: seeds 1–20, i.e. K seeds
      [--store memory|files|both] from N, on both stores, 200 h, 4 agents, 1 job); a failure is
      [--jobs J] [--steps A,B,…]  shrunk to its fewest steps, replayed with --steps; --trace
      [--trace]                   prints each run's every step
  man [--out DIR]                 man pages from the CLI's definition (default target/man)
  dist                            release archive: binary, completions, man pages, docs
                                  (target/dist/loopx-<version>-<host>.tar.gz)";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench-fixture") => bench::build_fixture(&args[1..]),
        Some("bench") => {
            let mut opts = bench::Options::default();
            let mut it = args.iter().skip(1);
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--quick" => opts.quick = true,
                    "--drive" => opts.drive_only = true,
                    "--hooks" => opts.hooks_only = true,
                    "--report" => opts.report_only = true,
                    "--json" => opts.json = Some(PathBuf::from(it.next().context("--json needs a file")?)),
                    "--bin" => {
                        let bin = PathBuf::from(it.next().context("--bin needs a path")?);
                        opts.bin = Some(
                            bin.canonicalize().with_context(|| format!("no binary at {}", bin.display()))?,
                        );
                    }
                    other => bail!("unknown bench option {other:?}\n\n{USAGE}"),
                }
            }
            bench::run(&opts, &workspace_root()).map(|_| ())
        }
        Some("sim") => sim::run(&sim::Options::parse(&args[1..])?),
        Some("man") => {
            let out = match args.get(1).map(String::as_str) {
                Some("--out") => PathBuf::from(args.get(2).context("--out needs a directory")?),
                Some(other) => bail!("unknown man option {other:?}\n\n{USAGE}"),
                None => workspace_root().join("target/man"),
            };
            let pages = dist::man_pages(&out)?;
            eprintln!("xtask: wrote {} man pages to {}", pages.len(), out.display());
            Ok(())
        }
        Some("dist") => dist::dist(&workspace_root()).map(|_| ()),
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown xtask command {other:?}\n\n{USAGE}"),
    }
}

/// The workspace root: xtask's manifest directory's parent.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), PathBuf::from)
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

fn run(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {what}");
    let status = cmd.status().with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The host versions the real-host tests drive: (npm package, directory under target/, the
/// variable that names another binary instead, the binary's name).
const HOSTS: [(&str, &str, &str, &str); 4] = [
    ("@anthropic-ai/claude-code@2.1.197", "claude-code", "LOOPX_CLAUDE_BIN", "claude"),
    ("@openai/codex@0.169.0", "codex", "LOOPX_CODEX_BIN", "codex"),
    ("@google/gemini-cli@0.61.0", "gemini-cli", "LOOPX_GEMINI_BIN", "gemini"),
    ("opencode-ai@1.18.33", "opencode", "LOOPX_OPENCODE_BIN", "opencode"),
];

/// Installs the pinned hosts under `target/<dir>/` (from the npm registry) unless they are
/// there, or a variable names another binary.
fn ensure_hosts() -> Result<()> {
    for (package, dir, var, bin) in HOSTS {
        let dir = workspace_root().join("target").join(dir);
        if std::env::var_os(var).is_some() || dir.join("node_modules/.bin").join(bin).exists() {
            continue;
        }
        run(
            &format!("npm install {package} (for the real-host tests)"),
            Command::new("npm").args(["install", "--prefix"]).arg(&dir).args([
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                package,
            ]),
        )?;
    }
    Ok(())
}

fn ci() -> Result<()> {
    run("cargo fmt --check", cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(
        "cargo clippy",
        cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]),
    )?;
    ensure_hosts()?;
    // The PostgreSQL store's tests need a database; the server stops when `_server` drops.
    let (url, _server) = loopx_tests::pg::for_tests().map_err(anyhow::Error::msg)?;
    let has_nextest = cargo().args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    let mut tests = cargo();
    if has_nextest {
        tests.args(["nextest", "run", "--workspace", "--locked"]);
    } else {
        tests.args(["test", "--workspace", "--locked"]);
    }
    if let Some(url) = url {
        tests.env("LOOPX_TEST_PG_URL", url);
    }
    run(if has_nextest { "cargo nextest run" } else { "cargo test" }, &mut tests)
}
