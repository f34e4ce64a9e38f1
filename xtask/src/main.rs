//! Project automation. `cargo xtask ci` runs everything CI runs.

use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci      format check, clippy (warnings denied), and the whole test suite";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown xtask command {other:?}\n\n{USAGE}"),
    }
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

fn ci() -> Result<()> {
    run("cargo fmt --check", cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(
        "cargo clippy",
        cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]),
    )?;
    let has_nextest = cargo().args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    if has_nextest {
        run("cargo nextest run", cargo().args(["nextest", "run", "--workspace", "--locked"]))
    } else {
        run("cargo test", cargo().args(["test", "--workspace", "--locked"]))
    }
}
