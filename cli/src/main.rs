//! `loopx`: the command-line interface. Thin: parses argv, reads the environment, asks the
//! kernel, prints, and chooses the exit code.

// On Unix the C library calls `main` below directly (see `start`).
#![cfg_attr(all(unix, not(test)), no_main)]

use loopx_cli::{args, registry};
mod approve;
mod commands;
mod demo;
mod drive;
mod hook;
mod host;
mod output;
mod person;
mod projects;
mod report;
mod serve;
mod start;
mod store;
mod text;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use loopx_core::{Error, exit};
use loopx_hostkit::identity::{Driven, Walk};
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
    /// The providers gates are checked with and the notifier, from the environment.
    pub gates: loopx_kernel::gates::GateRuntime,
    /// The wall clock; in a debug build, `LOOPX_TEST_CLOCK_SKEW_MS` moves it, so tests can
    /// reach a gate's next check without waiting for it. A release build ignores the variable.
    pub clock: Arc<dyn loopx_core::Clock>,
}

fn clock() -> Arc<dyn loopx_core::Clock> {
    if let Some(path) = drive::test_clock_file() {
        return Arc::new(loopx_kernel::SkewedClock::File(path));
    }
    let skew = std::env::var("LOOPX_TEST_CLOCK_SKEW_MS").ok().and_then(|v| v.trim().parse::<i64>().ok());
    match skew {
        Some(ms) if cfg!(debug_assertions) => Arc::new(loopx_kernel::SkewedClock::By(ms)),
        _ => Arc::new(loopx_kernel::SystemClock),
    }
}

/// Gate providers from the environment: GitHub at `LOOPX_GITHUB_API` (default api.github.com)
/// with the token in `GITHUB_TOKEN` or `GH_TOKEN` (read, never stored), and the notifier; each
/// call bounded by `LOOPX_HTTP_DEADLINE_MS` (20 s).
fn gate_runtime() -> Result<loopx_kernel::gates::GateRuntime, Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let deadline = match var("LOOPX_HTTP_DEADLINE_MS") {
        Some(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
            Error::usage(format!("LOOPX_HTTP_DEADLINE_MS must be a number of milliseconds, not {ms:?}"))
                .with_hint("e.g. LOOPX_HTTP_DEADLINE_MS=20000, or unset it for the default")
        })?),
        None => Duration::from_secs(20),
    };
    let base = var("LOOPX_GITHUB_API").unwrap_or_else(|| loopx_providers::github::DEFAULT_BASE.to_owned());
    let token = var("GITHUB_TOKEN").or_else(|| var("GH_TOKEN"));
    let github = loopx_providers::GitHub::new(&base, token, deadline).map_err(|e| {
        Error::usage(format!("LOOPX_GITHUB_API: {}", e.message)).with_hint(e.hint.unwrap_or_default())
    })?;
    // A `config:NAME` webhook is read from the person's own configuration when a notice goes.
    let config = Box::new(|name: &str| {
        let file = projects::config_file("webhooks.json").ok()?;
        loopx_machine::webhooks::read(&file).ok()?.webhooks.remove(name)
    });
    let notify =
        loopx_providers::Notify::new(Box::new(move |k| std::env::var(k).ok()), deadline)?.with_config(config);
    Ok(loopx_kernel::gates::GateRuntime {
        pulls: Some(Arc::new(github)),
        processes: Some(Arc::new(loopx_providers::ProcessProvider)),
        notifier: Some(Arc::new(notify)),
        poll_on_should_run: true,
        commands: Some(projects::config_file("commands.json")?),
        agent_tools: false,
    })
}

fn env_options() -> Result<StoreOptions, Error> {
    let mut options = StoreOptions::default();
    if let Ok(ms) = std::env::var("LOOPX_LOCK_TIMEOUT_MS") {
        let ms: u64 = ms.trim().parse().map_err(|_| {
            Error::usage(format!("LOOPX_LOCK_TIMEOUT_MS must be a number of milliseconds, not {ms:?}"))
                .with_hint("e.g. LOOPX_LOCK_TIMEOUT_MS=5000, or unset it for the default")
        })?;
        options.lock_timeout = Duration::from_millis(ms);
    }
    options.witness = projects::config_file("heads").ok();
    let words: Vec<String> = raw_args().into_iter().filter(|a| !a.starts_with('-')).take(2).collect();
    options.holder = format!("loopx {}", words.join(" "));
    // Test-only fault injection; compiled out of release builds.
    #[cfg(debug_assertions)]
    {
        options.fault = std::env::var("LOOPX_FAULT").ok();
    }
    Ok(options)
}

/// A value clap refused, shown cut to its first characters when long: a 309-digit number is
/// refused for its range, not printed back whole.
fn shorten_invalid_value(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    const SHOWN: usize = 24;
    if let Some(ContextValue::String(v)) = e.get(ContextKind::InvalidValue)
        && v.chars().count() > SHOWN
    {
        let short =
            format!("{}… ({} characters)", v.chars().take(SHOWN).collect::<String>(), v.chars().count());
        e.insert(ContextKind::InvalidValue, ContextValue::String(short));
    }
    e
}

/// The arguments after the program name, as text (never a panic on bytes that are not UTF-8).
fn raw_args() -> Vec<String> {
    start::args().iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect()
}

/// `loopx [global options] hook [<host> [<event>]] …`, however it was spelled: the host and
/// event words, if this is a hook. A hook must answer in its host's protocol whatever goes
/// wrong, so it is recognised before (and without) the full parse.
fn hook_words(args: &[String]) -> Option<(Option<String>, Option<String>)> {
    let mut positional = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if matches!(a.as_str(), "--project" | "--goal-id" | "--color") {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            positional.push(a.clone());
        }
        i += 1;
    }
    (positional.first().map(String::as_str) == Some("hook"))
        .then(|| (positional.get(1).cloned(), positional.get(2).cloned()))
}

/// `loopx hook <host> <event>`, with `--agent-id <agent>` after them or not: the words every
/// installed hook is called with, read without clap. Building the parser is half of a hook's own
/// work: clap copies each of the four global options into every one of the top-level commands
/// before it reads a word (116 copies, 0.58 M of a read-only hook's 1.13 M instructions). Any
/// other spelling (global options, flags elsewhere, `--help`, a word that begins with `-` or is
/// not UTF-8) is `None`, left to clap, which reads these words to the same arguments.
fn hook_fast(args: &[std::ffi::OsString]) -> Option<args::HookArgs> {
    let words: Vec<&str> = args.iter().skip(1).map(|a| a.to_str()).collect::<Option<_>>()?;
    let plain = |w: &str| !w.is_empty() && !w.starts_with('-');
    let (host, event, agent_id) = match words[..] {
        ["hook", host, event] => (host, event, None),
        ["hook", host, event, flag] => (host, event, Some(flag.strip_prefix("--agent-id=")?)),
        ["hook", host, event, "--agent-id", agent] => (host, event, Some(agent)),
        _ => return None,
    };
    if !(plain(host) && plain(event) && agent_id.is_none_or(plain)) {
        return None;
    }
    Some(args::HookArgs {
        host: host.to_owned(),
        event: event.to_owned(),
        agent_id: agent_id.map(str::to_owned),
    })
}

/// `loopx quota should-run …` in the plain forms agents write every turn, read without clap:
/// building the `quota` command's parser costs more than the decision on a small goal (0.64 M
/// instructions of 1.84 M). Only `--agent-id`, `--turn-instance-id` (or `--idempotency-key`),
/// `--runtime-profile`, `--goal-id` (each once, as `--flag value` or `--flag=value`, the value
/// not empty and not starting with `-`) and `--json` are taken, and only when the environment
/// sets none of the variables clap would read (`LOOPX_PROJECT`, `LOOPX_GOAL_ID`); anything
/// else is clap's to read, and to refuse. `env` reads a variable.
fn should_run_fast(args: &[std::ffi::OsString], env: impl Fn(&str) -> bool) -> Option<args::Cli> {
    let words: Vec<&str> = args.iter().skip(1).map(|a| a.to_str()).collect::<Option<_>>()?;
    let ["quota", "should-run", rest @ ..] = &words[..] else { return None };
    if env("LOOPX_PROJECT") || env("LOOPX_GOAL_ID") {
        return None;
    }
    let (mut agent_id, mut turn, mut profile, mut goal_id, mut json) = (None, None, None, None, false);
    let mut rest = rest.iter();
    while let Some(word) = rest.next() {
        if *word == "--json" && !json {
            json = true;
            continue;
        }
        let (flag, value) = match word.split_once('=') {
            Some((flag, value)) => (flag, value),
            None => (*word, *rest.next()?),
        };
        let slot = match flag {
            "--agent-id" => &mut agent_id,
            "--turn-instance-id" | "--idempotency-key" => &mut turn,
            "--runtime-profile" => &mut profile,
            "--goal-id" => &mut goal_id,
            _ => return None,
        };
        if slot.is_some() || value.is_empty() || value.starts_with('-') {
            return None;
        }
        *slot = Some(value.to_owned());
    }
    Some(args::Cli {
        project: None,
        goal_id,
        json,
        color: args::ColorChoice::Auto,
        command: args::Command::Quota(args::QuotaCommand::ShouldRun {
            runtime_profile: profile,
            acting: args::Acting { agent_id, turn_instance_id: turn },
        }),
        session: None,
        driven: None,
        told_by: None,
    })
}

/// The identity walk (who runs this command) over the registered adapters' marks and agent
/// processes, up to [`ancestry_root`].
fn identity_walk() -> Walk<'static> {
    Walk { adapters: registry::adapters(), root: ancestry_root() }
}

/// Where the walk up the process tree stops: in a debug build, the process named by
/// `LOOPX_TEST_ANCESTRY_ROOT` (a test's own, so the ancestry a test sees is the one it built,
/// wherever the suite runs); a release build walks to the top.
fn ancestry_root() -> Option<u32> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var("LOOPX_TEST_ANCESTRY_ROOT").ok()?.trim().parse().ok()
}

/// A hook's identity check, then its answer: what follows the parse of `loopx hook …`. A hook's
/// session is in its stdin, so only the environment's marks are read here.
fn run_hook_checked(a: &args::HookArgs) -> ! {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match identity_walk().find(get, false) {
        Ok(id) => run_hook(a, id.driven.as_ref()),
        Err(e) => hook_failed(Some(&a.host), Some(&a.event), &e),
    }
}

/// Prints a hook's answer and ends the process with its exit code.
fn answer_hook(answer: &loopx_core::host::HostAnswer) -> ! {
    if !answer.stderr.is_empty() {
        eprintln!("{}", loopx_core::untrusted::printable(&answer.stderr));
    }
    let mut out = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut out, answer.stdout.as_bytes());
    let _ = std::io::Write::flush(&mut out);
    std::process::exit(answer.exit_code);
}

/// A hook that cannot even start (a usage error, a bad environment value): the event's safe
/// answer in the host's protocol, never an exit code the host reads as blocking.
fn hook_failed(host: Option<&str>, event: Option<&str>, e: &Error) -> ! {
    let answer = match host.map(registry::find) {
        Some(Ok(a)) => loopx_hostkit::hook::refuse(a, event, e),
        _ => loopx_core::host::HostAnswer {
            stdout: String::new(),
            stderr: format!("loopx: {}", e.message),
            exit_code: exit::REFUSED,
        },
    };
    answer_hook(&answer)
}

/// The process's entry on Unix, called by the C library (see `start`).
#[cfg(all(unix, not(test)))]
#[allow(unsafe_code)] // `no_mangle`: this is the C `main` symbol
#[unsafe(no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    start::enter(argc, argv, cli_main)
}

#[cfg(any(not(unix), test))]
fn main() {
    std::process::exit(cli_main())
}

/// `loopx` itself: the process's exit code.
fn cli_main() -> i32 {
    if let Some(a) = hook_fast(start::args()) {
        run_hook_checked(&a)
    }
    let hook = hook_words(&raw_args());
    let parsed = match should_run_fast(start::args(), |k| std::env::var_os(k).is_some()) {
        Some(cli) => Ok(cli),
        None => Cli::try_parse_from(start::args()),
    };
    let cli = match parsed.map_err(shorten_invalid_value) {
        Ok(mut cli) => {
            if let args::Command::Hook(a) = &cli.command {
                run_hook_checked(a)
            }
            let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            match identity_walk().find(get, true) {
                Ok(id) => {
                    cli.session = id.session;
                    cli.driven = id.driven;
                    cli.told_by = id.by;
                }
                Err(e) => {
                    let json = cli.json;
                    let printer = Printer::new(json, args::ColorChoice::Never, output::ColorEnv::default());
                    std::process::exit(printer.error(&e));
                }
            }
            cli
        }
        Err(e) if e.use_stderr() && hook.is_some() => {
            let (host, event) = hook.unwrap_or_default();
            let first = e.render().to_string().lines().next().unwrap_or("usage error").to_owned();
            hook_failed(host.as_deref(), event.as_deref(), &Error::usage(first.trim_start_matches("error: ")))
        }
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            // A value outside its range: the message names the flag and the range, the hint
            // where to read more, like every other refusal.
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("usage error").trim_start_matches("error: ");
            let flag = match e.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(a)) => a.split(' ').next().unwrap_or("it").to_owned(),
                _ => "it".to_owned(),
            };
            let err =
                Error::usage(first).with_hint(format!("give {flag} a value in that range (see --help)"));
            let json = raw_args().iter().any(|a| a == "--json");
            std::process::exit(
                Printer::new(json, args::ColorChoice::Never, output::ColorEnv::default()).error(&err),
            );
        }
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                std::process::exit(exit::SUCCESS); // --help, --version
            }
            if raw_args().iter().any(|a| a == "--json") {
                // Keep the --json promise: one document on stdout, even for a usage error.
                let rendered = e.render().to_string();
                let first = rendered.lines().next().unwrap_or("usage error");
                let err = Error::usage(first.trim_start_matches("error: ")).with_hint("see loopx --help");
                Printer::new(true, args::ColorChoice::Never, output::ColorEnv::default())
                    .error_document(&err);
            }
            std::process::exit(exit::USAGE);
        }
    };
    let color_env = output::ColorEnv::from_values(
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("CLICOLOR_FORCE").as_deref(),
    );
    let printer = Arc::new(Printer::new(cli.json, cli.color, color_env));
    match run(&cli, &printer) {
        Ok(code) => code,
        Err(e) => printer.error(&name_the_session(e, &cli)),
    }
}

/// A refusal because this command runs in an agent's session names the process that makes it
/// so (a person who sees it from their own terminal learns what loopx found above them).
fn name_the_session(mut e: Error, cli: &Cli) -> Error {
    let refusal = matches!(e.kind, loopx_core::ErrorKind::Refused | loopx_core::ErrorKind::Identity);
    if let (true, Some(session), Some(by)) = (refusal, &cli.session, &cli.told_by)
        && e.message.contains(&format!("{} session", session.host))
    {
        e.message.push_str(&format!(" ({by} is above it)"));
    }
    e
}

/// `loopx hook <host> <event>`: every failure, of the environment too, becomes the event's
/// safe answer. In a turn of `loopx drive` (its host's hooks installed too) the session is the
/// driver's agent's, as if installed with it: told who it is, never joined as another.
fn run_hook(a: &args::HookArgs, driven: Option<&Driven>) -> ! {
    let setup = || -> Result<_, Error> {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::internal(format!("cannot read the working directory: {e}")))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))?;
        let named = a.agent_id.as_deref().map(loopx_core::AgentId::new).transpose()?;
        let agent = named.or_else(|| driven.map(|d| d.agent.clone()));
        Ok((cwd, env_options()?, runtime, agent))
    };
    let (cwd, options, runtime, agent) = match setup() {
        Ok(s) => s,
        Err(e) => hook_failed(Some(&a.host), Some(&a.event), &e),
    };
    let printer = Arc::new(Printer::new(false, args::ColorChoice::Never, output::ColorEnv::default()));
    let reporter: Arc<dyn Reporter> = Arc::new(StderrReporter { printer, timings: false });
    let mut stdin = Vec::new();
    let _ = std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::stdin().lock(), hook::MAX_STDIN + 1),
        &mut stdin,
    );
    answer_hook(&runtime.block_on(hook::answer(&a.host, &a.event, &stdin, cwd, agent, options, reporter)))
}

/// The agent `loopx mcp` acts as: `--agent-id`, or in a turn of `loopx drive` the driver's
/// (naming another there is refused).
fn mcp_agent(named: Option<&str>, driven: Option<&Driven>) -> Result<Option<loopx_core::AgentId>, Error> {
    let named = named.map(loopx_core::AgentId::new).transpose()?;
    Driven::acting(driven, named, true)
}

/// Whether this command runs where an agent's own tools run (its shell in its host session or
/// its driven turn), so that agent's own unapproved commands may run here. A driver, an MCP
/// server and a dashboard run outside the agent's sandbox even when started under it.
fn in_agent_tools(cli: &Cli) -> bool {
    let outside =
        matches!(cli.command, args::Command::Mcp(_) | args::Command::Drive(_) | args::Command::Serve(_));
    (cli.session.is_some() || cli.driven.is_some()) && !outside
}

fn run(cli: &Cli, printer: &Arc<Printer>) -> Result<i32, Error> {
    // A person-only command (core's one table, which the tool gate reads too) is refused inside
    // an agent's host session before anything else.
    loopx_core::person_only::refuse_in_session(&raw_args(), cli.session.as_ref().map(|s| s.host.as_str()))?;
    let env = Env {
        cwd: std::env::current_dir()
            .map_err(|e| Error::internal(format!("cannot read the working directory: {e}")))?,
        options: env_options()?,
        gates: loopx_kernel::gates::GateRuntime { agent_tools: in_agent_tools(cli), ..gate_runtime()? },
        clock: clock(),
    };
    let timings = std::env::var_os("LOOPX_TIMINGS").is_some_and(|v| v != "0");
    let reporter: Arc<dyn Reporter> = Arc::new(StderrReporter { printer: printer.clone(), timings });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))?;
    if let args::Command::Mcp(a) = &cli.command {
        let server = loopx_hostkit::mcp::Server {
            project: cli.project.as_ref().map(|p| env.cwd.join(p)),
            start_dir: env.cwd.clone(),
            goal: cli.goal_id.as_deref().map(loopx_core::GoalId::new).transpose()?,
            agent: mcp_agent(a.agent_id.as_deref(), cli.driven.as_ref())?,
            named: std::sync::Mutex::new(None),
            session: cli.session.clone(),
            options: env.options.clone(),
            gates: env.gates.clone(),
            clock: env.clock.clone(),
            reporter,
            open: store::opener(),
            hosts: registry::catalog(),
            adapters: registry::adapters(),
            client: std::sync::OnceLock::new(),
            kernel: loopx_hostkit::mcp::KernelCache::default(),
            turn: cli.driven.as_ref().and_then(|d| d.turn.clone()),
        };
        let stdin = std::io::stdin().lock();
        runtime
            .block_on(loopx_hostkit::mcp::serve(&server, stdin, std::io::stdout().lock()))
            .map_err(|e| Error::internal(format!("the MCP stream failed: {e}")))?;
        return Ok(exit::SUCCESS);
    }
    if let args::Command::Drive(a) = &cli.command {
        return runtime.block_on(drive::run(a, cli, &env, reporter));
    }
    if let args::Command::Serve(a) = &cli.command {
        return runtime.block_on(serve::run(a, cli, &env, reporter, printer));
    }
    let rendered = runtime.block_on(commands::dispatch(cli, &env, reporter, printer.style))?;
    Ok(printer.emit(rendered))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn argv(words: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("loopx").chain(words.iter().copied()).map(Into::into).collect()
    }

    fn fields(a: &args::HookArgs) -> (String, String, Option<String>) {
        (a.host.clone(), a.event.clone(), a.agent_id.clone())
    }

    /// Whatever the quick reading of a hook's words takes, clap reads to the same arguments;
    /// what it leaves (every other spelling, and words clap would refuse or read otherwise) is
    /// clap's to read.
    #[test]
    fn a_hooks_words_read_quickly_are_read_as_clap_reads_them() {
        let taken: &[&[&str]] = &[
            &["hook", "claude-code", "pre-tool-use"],
            &["hook", "cursor", "before-shell-execution", "--agent-id", "cursor-1"],
            &["hook", "cursor", "stop", "--agent-id=cursor-1"],
            &["hook", "no-such-host", "no-such-event"],
            &["hook", "codex", "stop", "--agent-id", "Not An Id"],
        ];
        for words in taken {
            let quick = hook_fast(&argv(words)).unwrap_or_else(|| panic!("{words:?} not taken"));
            let cli = Cli::try_parse_from(argv(words)).unwrap();
            let args::Command::Hook(parsed) = &cli.command else { panic!("{words:?}: not a hook") };
            assert_eq!(fields(&quick), fields(parsed), "{words:?}");
        }
        let left: &[&[&str]] = &[
            &["hook"],
            &["hook", "claude-code"],
            &["hook", "claude-code", "stop", "extra"],
            &["hook", "claude-code", "stop", "--agent-id"],
            &["hook", "claude-code", "stop", "--agent-id="],
            &["hook", "claude-code", "stop", "--agent-id", "-x"],
            &["hook", "claude-code", "stop", "--agent-id", ""],
            &["hook", "claude-code", "--help"],
            &["hook", "claude-code", ""],
            &["hook", "claude-code", "stop", "--help"],
            &["hook", "claude-code", "stop", "--json"],
            &["hook", "--agent-id", "a", "claude-code", "stop"],
            &["hook", "-x", "stop"],
            &["hook", "", "stop"],
            &["--json", "hook", "claude-code", "stop"],
            &["--project", ".", "hook", "claude-code", "stop"],
            &["status"],
            &["todo", "add", "--text", "hook"],
        ];
        for words in left {
            assert!(hook_fast(&argv(words)).is_none(), "{words:?} taken");
        }
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let mut bytes = argv(&["hook", "claude-code", "stop"]);
            bytes[2] = std::ffi::OsString::from_vec(b"caf\xe9".to_vec());
            assert!(hook_fast(&bytes).is_none());
        }
    }

    /// Whatever the quick reading of `quota should-run` takes, clap reads to the same command
    /// line; every other spelling, and anything clap would refuse, read from the environment or
    /// answer itself (`--help`), is left to clap.
    #[test]
    fn should_runs_words_read_quickly_are_read_as_clap_reads_them() {
        let taken: &[&[&str]] = &[
            &["quota", "should-run"],
            &["quota", "should-run", "--json"],
            &["quota", "should-run", "--agent-id", "a", "--json"],
            &["quota", "should-run", "--json", "--agent-id=a"],
            &[
                "quota",
                "should-run",
                "--agent-id",
                "codex-1",
                "--turn-instance-id",
                "t-9",
                "--runtime-profile",
                "claude_loop",
                "--goal-id",
                "main",
                "--json",
            ],
            &["quota", "should-run", "--idempotency-key", "k=1", "--agent-id", "Not An Id"],
            &["quota", "should-run", "--goal-id=g2", "--runtime-profile=manual"],
        ];
        // clap reads these from the environment when the words do not give them; the quick
        // reading leaves any command line to clap when they are set.
        let from_env = |k: &str| std::env::var_os(k).is_some();
        for words in taken {
            let quick =
                should_run_fast(&argv(words), |_| false).unwrap_or_else(|| panic!("{words:?} not taken"));
            let mut cli = Cli::try_parse_from(argv(words)).unwrap();
            if from_env("LOOPX_PROJECT") {
                cli.project = None;
            }
            if from_env("LOOPX_GOAL_ID") && !words.iter().any(|w| w.starts_with("--goal-id")) {
                cli.goal_id = None;
            }
            assert_eq!(format!("{quick:?}"), format!("{cli:?}"), "{words:?}");
        }
        let left: &[&[&str]] = &[
            &["quota"],
            &["quota", "should-run", "--agent-id"],
            &["quota", "should-run", "--agent-id="],
            &["quota", "should-run", "--agent-id", "-x"],
            &["quota", "should-run", "--agent-id", ""],
            &["quota", "should-run", "--agent-id", "a", "--agent-id", "b"],
            &["quota", "should-run", "--json", "--json"],
            &["quota", "should-run", "--json=true"],
            &["quota", "should-run", "--agent", "a"],
            &["quota", "should-run", "--project", "."],
            &["quota", "should-run", "--color", "never"],
            &["quota", "should-run", "--help"],
            &["quota", "should-run", "-h"],
            &["quota", "should-run", "extra"],
            &["--json", "quota", "should-run"],
            &["quota", "spend-slot", "--todo-id", "t1"],
            &["status"],
        ];
        for words in left {
            assert!(should_run_fast(&argv(words), |_| false).is_none(), "{words:?} taken");
        }
        for var in ["LOOPX_PROJECT", "LOOPX_GOAL_ID"] {
            let words = argv(&["quota", "should-run", "--agent-id", "a"]);
            assert!(should_run_fast(&words, |k| k == var).is_none(), "taken with {var} set");
        }
    }
}
