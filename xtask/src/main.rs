//! Project automation. `cargo xtask ci` runs everything CI runs.

mod bench;
mod dist;
mod sim;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci                              format check, clippy (warnings denied), and the whole test suite
  bench [--quick] [--drive|--hooks|--report|--startup] [--json FILE]   fresh-process benchmarks of the release binary (see BENCHMARKS.md); --drive: only loopx drive's; --hooks: only the hook answers; --report: only loopx report's; --startup: --version against should-run on a long goal, alternated, then should_run and update_task calls to a long-lived loopx mcp there
        [--bin PATH]              (measure this binary instead of building the release one)
        [--against PATH]…         (these binaries in the same rounds, run by run: with --startup
                                  their --version and should-run, with --hooks their hook answers)
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
    if asks_for_help(&args) {
        println!("{USAGE}");
        return Ok(());
    }
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
                    "--startup" => opts.startup_only = true,
                    "--against" => {
                        let bin = PathBuf::from(it.next().context("--against needs a path")?);
                        opts.against.push(
                            bin.canonicalize().with_context(|| format!("no binary at {}", bin.display()))?,
                        );
                    }
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
        None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown xtask command {other:?}\n\n{USAGE}"),
    }
}

/// Whether the words ask for the usage: `-h` or `--help` anywhere, as in `cargo xtask bench
/// --help` (no option of any command takes a value that begins with `-`).
fn asks_for_help(args: &[String]) -> bool {
    args.iter().any(|a| a == "-h" || a == "--help")
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

/// What the tests need from the machine beyond Rust, checked before anything runs: each
/// missing tool as (what, its Debian package). `.ci/run` installs them.
fn missing_tools() -> Vec<(&'static str, &'static str)> {
    let on_path = |name: &str| {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    let skipped = |var: &str| std::env::var(var).as_deref() == Ok("1");
    let mut missing = Vec::new();
    let hosts_given = HOSTS.iter().all(|(_, _, var, _)| std::env::var_os(var).is_some());
    if !(hosts_given || on_path("node") && on_path("npm")) {
        missing.push(("Node.js and npm (the real-host tests install the pinned hosts)", "nodejs npm"));
    }
    if !skipped("LOOPX_SKIP_PG") && loopx_tests::pg::binaries().is_none() {
        missing.push(("PostgreSQL (the PostgreSQL store's tests; LOOPX_SKIP_PG=1 skips them)", "postgresql"));
    }
    let chromium = ["/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !(skipped("LOOPX_SKIP_BROWSER") || chromium && on_path("chromedriver")) {
        missing.push((
            "Chromium and chromedriver (the dashboard's browser test; LOOPX_SKIP_BROWSER=1 skips it)",
            "chromium chromium-driver",
        ));
    }
    if !on_path("script") {
        missing.push(("util-linux's script (the tests that type into a terminal)", "bsdutils"));
    }
    missing
}

fn ci() -> Result<()> {
    let missing = missing_tools();
    if !missing.is_empty() {
        let what: Vec<&str> = missing.iter().map(|m| m.0).collect();
        let packages: Vec<&str> = missing.iter().map(|m| m.1).collect();
        bail!(
            "the tests need what this machine lacks: {}.\nInstall it (Debian, Ubuntu: sudo apt-get install {}), or run `bash .ci/run`, which installs it and then runs this; nothing was run",
            what.join("; "),
            packages.join(" ")
        );
    }
    run("cargo fmt --check", cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(
        "cargo clippy",
        cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]),
    )?;
    ensure_hosts()?;
    // The PostgreSQL store's tests need a database; the server stops when `_server` drops.
    let (url, _server) = loopx_tests::pg::for_tests().map_err(anyhow::Error::msg)?;
    // The binary the end-to-end tests run, built once for the whole run.
    run(
        "cargo build (the loopx binary)",
        cargo().args(["build", "--locked", "-p", "loopx-cli", "--bin", "loopx"]),
    )?;
    let bin = workspace_root().join("target/debug").join(format!("loopx{}", std::env::consts::EXE_SUFFIX));
    let has_nextest = cargo().args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    let mut tests = cargo();
    if has_nextest {
        tests.args(["nextest", "run", "--workspace", "--locked", "--profile", "ci"]);
    } else {
        tests.args(["test", "--workspace", "--locked"]);
    }
    tests.env("LOOPX_BIN", &bin);
    if let Some(url) = url {
        tests.env("LOOPX_TEST_PG_URL", url);
    }
    let ran = run(if has_nextest { "cargo nextest run" } else { "cargo test" }, &mut tests);
    if has_nextest {
        print_slowest(&workspace_root().join("target/nextest/ci/junit.xml"), 10);
    }
    ran
}

/// Prints the `n` slowest tests of a nextest run from its JUnit report (nothing without one).
fn print_slowest(junit: &Path, n: usize) {
    let Ok(xml) = std::fs::read_to_string(junit) else { return };
    let mut times = slowest(&xml);
    times.truncate(n);
    if times.is_empty() {
        return;
    }
    eprintln!("xtask: the {} slowest tests", times.len());
    for (secs, name) in times {
        eprintln!("{secs:>8.1} s  {name}");
    }
}

/// Every `<testcase>` of a JUnit report as (seconds, name), slowest first.
fn slowest(xml: &str) -> Vec<(f64, String)> {
    let attr = |tag: &str, name: &str| {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = tag[start..].find('"')?;
        Some(tag[start..start + len].to_owned())
    };
    let mut out: Vec<(f64, String)> = xml
        .split("<testcase")
        .skip(1)
        .filter_map(|rest| {
            let tag = &rest[..rest.find('>')?];
            let time = attr(tag, "time")?.parse().ok()?;
            Some((time, attr(tag, "name")?))
        })
        .collect();
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out
}

#[cfg(test)]
mod tests {
    use super::{asks_for_help, slowest};

    #[test]
    fn the_slowest_tests_come_from_the_junit_report_slowest_first() {
        let xml = r#"<testsuites><testsuite name="e2e">
<testcase name="a::quick" classname="loopx-tests::e2e" timestamp="t" time="0.250"></testcase>
<testcase name="b::slow" classname="loopx-tests::e2e" timestamp="t" time="21.5"><failure/></testcase>
<testcase name="c::mid" classname="x" time="3"/>
</testsuite></testsuites>"#;
        let names: Vec<(f64, String)> = slowest(xml);
        assert_eq!(
            names,
            [(21.5, "b::slow".to_owned()), (3.0, "c::mid".to_owned()), (0.25, "a::quick".to_owned())]
        );
        assert!(slowest("<testsuites/>").is_empty());
    }

    #[test]
    fn help_is_asked_for_anywhere_among_the_words() {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        for asks in ["--help", "-h", "bench --help", "sim --seed 3 -h", "man --out x --help"] {
            assert!(asks_for_help(&words(asks)), "{asks}");
        }
        for not in ["", "bench --hooks", "sim --steps 1,2", "bench --json help.json"] {
            assert!(!asks_for_help(&words(not)), "{not}");
        }
    }
}
