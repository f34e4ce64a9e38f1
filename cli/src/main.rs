//! `loopx`: the command-line interface. Thin: parses argv, reads the environment, asks the
//! kernel, prints, and chooses the exit code.

mod args;
mod commands;
mod hook;
mod host;
mod mcp;
mod next;
mod output;
mod registry;
mod text;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use loopx_core::{Error, exit};
use loopx_kernel::{Reporter, StoreOptions};

use crate::args::Cli;
use crate::output::Printer;

/// Prints the kernel's side notes (recoveries, lock waits) on stderr.
#[derive(Debug)]
struct StderrReporter {
    printer: Arc<Printer>,
    /// `LOOPX_TIMINGS=1`: also report lock wait and hold times.
    timings: bool,
}

impl Reporter for StderrReporter {
    fn warn(&self, message: &str) {
        self.printer.warn(message);
    }
    fn waiting_for_lock(&self, what: &str, holder: &str) {
        eprintln!("waiting for the lock on {what}, held by {holder}…");
    }
    fn lock_released(&self, what: &str, waited: Duration, held: Duration) {
        if self.timings {
            eprintln!(
                "timing: lock on {what} waited {:.3} ms, held {:.3} ms",
                waited.as_secs_f64() * 1e3,
                held.as_secs_f64() * 1e3
            );
        }
    }
}

/// What the process environment contributes.
#[derive(Debug)]
pub struct Env {
    pub cwd: PathBuf,
    pub options: StoreOptions,
}

fn env_options() -> Result<StoreOptions, Error> {
    let mut options = StoreOptions::default();
    if let Ok(ms) = std::env::var("LOOPX_LOCK_TIMEOUT_MS") {
        let ms: u64 = ms.trim().parse().map_err(|_| {
            Error::usage(format!("LOOPX_LOCK_TIMEOUT_MS must be a number of milliseconds, not {ms:?}"))
        })?;
        options.lock_timeout = Duration::from_millis(ms);
    }
    let words: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).take(2).collect();
    options.holder = format!("loopx {}", words.join(" "));
    // Test-only fault injection; compiled out of release builds.
    #[cfg(debug_assertions)]
    {
        options.fault = std::env::var("LOOPX_FAULT").ok();
    }
    Ok(options)
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                std::process::exit(exit::SUCCESS); // --help, --version
            }
            if std::env::args().any(|a| a == "--json") {
                // Keep the --json promise: one document on stdout, even for a usage error.
                let rendered = e.render().to_string();
                let first = rendered.lines().next().unwrap_or("usage error");
                let err = Error::usage(first.trim_start_matches("error: ")).with_hint("see loopx --help");
                Printer::new(true, args::ColorChoice::Never, true).error_document(&err);
            }
            std::process::exit(exit::USAGE);
        }
    };
    let printer = Arc::new(Printer::new(cli.json, cli.color, std::env::var_os("NO_COLOR").is_some()));
    let code = match run(&cli, &printer) {
        Ok(code) => code,
        Err(e) => printer.error(&e),
    };
    std::process::exit(code);
}

fn run(cli: &Cli, printer: &Arc<Printer>) -> Result<i32, Error> {
    let env = Env {
        cwd: std::env::current_dir()
            .map_err(|e| Error::internal(format!("cannot read the working directory: {e}")))?,
        options: env_options()?,
    };
    let timings = std::env::var_os("LOOPX_TIMINGS").is_some_and(|v| v != "0");
    let reporter: Arc<dyn Reporter> = Arc::new(StderrReporter { printer: printer.clone(), timings });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))?;
    if let args::Command::Hook(a) = &cli.command {
        let mut stdin = Vec::new();
        let _ = std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin().lock(), hook::MAX_STDIN + 1),
            &mut stdin,
        );
        let answer = runtime.block_on(hook::answer(
            &a.host,
            &a.event,
            &stdin,
            env.cwd.clone(),
            env.options.clone(),
            reporter,
        ));
        if !answer.stderr.is_empty() {
            eprintln!("{}", answer.stderr);
        }
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, answer.stdout.as_bytes());
        let _ = std::io::Write::flush(&mut out);
        return Ok(answer.exit_code);
    }
    if let args::Command::Mcp(a) = &cli.command {
        let server = mcp::Server {
            project: cli.project.as_ref().map(|p| env.cwd.join(p)),
            start_dir: env.cwd.clone(),
            goal: cli.goal_id.as_deref().map(loopx_core::GoalId::new).transpose()?,
            agent: a.agent_id.as_deref().map(loopx_core::AgentId::new).transpose()?,
            options: env.options.clone(),
            reporter,
        };
        let stdin = std::io::stdin().lock();
        runtime
            .block_on(mcp::serve(&server, stdin, std::io::stdout().lock()))
            .map_err(|e| Error::internal(format!("the MCP stream failed: {e}")))?;
        return Ok(exit::SUCCESS);
    }
    let rendered = runtime.block_on(commands::dispatch(cli, &env, reporter, printer.style))?;
    Ok(printer.emit(rendered))
}
