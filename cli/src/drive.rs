//! `loopx drive`: the command line around the host platform's driver (`loopx-hostkit`):
//! which agent and host, the store's change feed that wakes it, Ctrl-C and termination
//! signals, and how it shows what it does (a live status line on a terminal, log lines
//! otherwise, one JSON object a line with `--json`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopx_core::{AgentId, Error, GoalId, Result};
use loopx_hostkit::drive::{Config, Driver, Fallback, Interrupt, LimitPattern, Report, Sink};
use loopx_hostkit::pick;
use loopx_kernel::Reporter;

use crate::Env;
use crate::args::{Cli, DriveArgs, DriveUntil};

/// `--fallback HOST=COMMAND`: the host and its command line, refused as `--host` and the
/// command after `--` would be.
fn fallback_of(spec: &str) -> Result<(String, Vec<String>)> {
    let hint = "e.g. --fallback 'codex=codex exec --sandbox workspace-write -'";
    let Some((host, command)) = spec.split_once('=') else {
        return Err(Error::usage("--fallback is HOST=COMMAND").with_hint(hint));
    };
    let argv = shell_words::split(command)
        .map_err(|e| Error::usage(format!("--fallback's command does not parse: {e}")).with_hint(hint))?;
    if argv.is_empty() {
        return Err(Error::usage("--fallback names no command").with_hint(hint));
    }
    if let Some(d) =
        pick::host_of(crate::registry::adapters(), host.trim())?.and_then(|h| h.protocol().driver())
    {
        d.turn_argv(&argv, None, true)?;
    }
    Ok((host.trim().to_owned(), argv))
}

/// The host's configuration directory on this machine (Codex's `$CODEX_HOME`).
fn host_home_of(host: Option<&'static dyn loopx_core::host::HostAdapter>) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    host?.protocol().host_home(&home, &|k: &str| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// How the agent's shell reaches this loopx: as the host's adapter says (Codex's login shell
/// resets `PATH`, so there it is the absolute path), and never a `loopx` on `PATH` that is not
/// this binary.
fn this_loopx(host: Option<&dyn loopx_core::host::HostAdapter>) -> String {
    let Some(this) = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok()) else {
        return "loopx".to_owned();
    };
    let absolute = shell_words::quote(&this.display().to_string()).into_owned();
    let said = host.map_or_else(|| "loopx".to_owned(), |h| h.loopx_command(&absolute));
    if said != "loopx" {
        return said;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("loopx"))
            .find(|p| p.is_file())
            .and_then(|p| p.canonicalize().ok())
    });
    if on_path.as_ref() == Some(&this) { said } else { absolute }
}

/// This machine's name, for the lease.
fn machine() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The duration `--flag` gives, within `lo..=hi`: anything else is refused, naming the range.
fn duration(flag: &str, value: &str, lo: Duration, hi: Duration) -> Result<Duration> {
    let d = loopx_core::time::parse_duration(value).map_err(|e| {
        Error::usage(format!("--{flag}: {}", e.message)).with_hint(format!("e.g. --{flag} 30m"))
    })?;
    if d < lo || d > hi {
        let show = loopx_core::time::format_duration;
        return Err(Error::usage(format!("--{flag} must be between {} and {}", show(lo), show(hi)))
            .with_hint(format!("e.g. --{flag} 30m")));
    }
    Ok(d)
}

/// The longest `--turn-timeout`: a week.
const MAX_TURN_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Starts a thread that rings `wake` whenever `feed` hears of a change; a feed that fails is
/// opened again with `reopen` after a pause.
fn ring_on(
    name: &str,
    mut feed: Box<dyn loopx_kernel::feed::ChangeFeed>,
    reopen: impl Fn() -> Result<Box<dyn loopx_kernel::feed::ChangeFeed>> + Send + 'static,
    wake: Arc<tokio::sync::Notify>,
) -> Result<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            loop {
                match feed.wait(Duration::from_secs(3600)) {
                    Ok(true) => wake.notify_one(),
                    Ok(false) => {}
                    Err(_) => {
                        std::thread::sleep(Duration::from_secs(5));
                        if let Ok(f) = reopen() {
                            feed = f;
                            wake.notify_one();
                        }
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|e| Error::internal(format!("cannot start the change feed: {e}")))
}

/// Reports as lines for people on stderr, with a status line on a terminal.
struct TextSink {
    tty: bool,
    /// What the status line says, and since when.
    state: Option<(String, Instant)>,
}

impl TextSink {
    fn line(&mut self, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{}", loopx_core::untrusted::printable(text));
        self.redraw(&mut err);
    }

    fn redraw(&self, err: &mut impl Write) {
        if let (true, Some((what, since))) = (self.tty, &self.state) {
            let secs = since.elapsed().as_secs();
            let _ =
                write!(err, "\r\x1b[2K{what} · {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
            let _ = err.flush();
        }
    }
}

fn short(s: &str) -> String {
    loopx_core::untrusted::flatten(s, 80)
}

impl Sink for TextSink {
    fn report(&mut self, r: &Report) {
        let text = match r {
            Report::Started { goal, agent, host, pid, machine, lease_until, replaced } => {
                let replaced =
                    replaced.as_ref().map(|r| format!("; took over from lease {r}")).unwrap_or_default();
                format!(
                    "driving {agent} ({host}) on goal {goal}: pid {pid} on {machine}, lease until {lease_until}{replaced}"
                )
            }
            Report::Recovered { turn, end, killed } => {
                let killed = if *killed > 0 {
                    format!("; killed {killed} process(es) it left running")
                } else {
                    String::new()
                };
                format!("turn {turn} of the driver before ended: {}{killed}", end.describe())
            }
            Report::TurnStarted { n, turn, todo, text, log, used_slots, allowed_slots } => {
                let what = match (todo, text) {
                    (Some(t), Some(x)) => format!("{t}: {}", short(x)),
                    _ => "replan".to_owned(),
                };
                self.state =
                    Some((format!("turn {n} · {what} · {used_slots}/{allowed_slots} slots"), Instant::now()));
                let log = log.as_ref().map(|l| format!("\n  output: {l}")).unwrap_or_default();
                format!("turn {n} ({turn}) on {what}{log}")
            }
            Report::TurnEnded { n, end, child_ms, .. } => {
                self.state = None;
                let usage = match (end.usage.tokens, end.usage.usd) {
                    (Some(t), Some(u)) => format!(", {t} tokens, ${u:.4}"),
                    (Some(t), None) => format!(", {t} tokens"),
                    _ => String::new(),
                };
                let tail = match (&end.tail, end.failed()) {
                    (Some(t), true) if !t.trim().is_empty() => {
                        let last: Vec<&str> = t.trim_end().lines().rev().take(3).collect();
                        let last: Vec<&str> = last.into_iter().rev().collect();
                        format!("\n  last output: {}", last.join("\n  "))
                    }
                    _ => String::new(),
                };
                format!("turn {n} ended after {:.1} s: {}{usage}{tail}", child_ms / 1000.0, end.describe())
            }
            Report::Sleeping { decision, reason, until } => {
                let when = until.map_or_else(
                    || "until the goal changes".to_owned(),
                    |u| format!("until {u} or the goal changes"),
                );
                self.state = Some((
                    format!(
                        "{} · next look {}",
                        decision.as_str(),
                        until.map_or("on a change".to_owned(), |u| u.to_string())
                    ),
                    Instant::now(),
                ));
                format!("{}: {} — sleeping {when}", decision.as_str(), short(reason))
            }
            Report::Failover { from_agent, from_host, to_agent, to_host, handoff, until } => {
                let packet = handoff.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
                let back = until.map_or_else(
                    || "; it stays there".to_owned(),
                    |u| format!("; back to {from_agent} at the first todo boundary after {u}"),
                );
                format!("{from_host} is limited: the work goes to {to_agent} ({to_host}){packet}{back}")
            }
            Report::Backoff { failures, secs } => {
                format!("{failures} failed turn(s) in a row: waiting {secs} s")
            }
            Report::HostLimited { host, limit, until } => {
                let said = limit.message.as_deref().map(|m| format!(" — {}", short(m))).unwrap_or_default();
                format!("{}{said}; asking it again at {until}", limit.describe(host))
            }
            Report::Finishing => "stopping after this turn (Ctrl-C again to stop it now)".to_owned(),
            Report::Note { message } => format!("note: {message}"),
            Report::Exited { reason, turns, spent, failed, .. } => {
                self.state = None;
                format!("stopped: {reason} ({turns} turn(s): {spent} spent, {failed} failed)")
            }
        };
        self.line(&text);
    }

    fn wants_ticks(&self) -> bool {
        self.tty
    }

    fn tick(&mut self) {
        self.redraw(&mut std::io::stderr().lock());
    }
}

/// Reports as one JSON object a line on stdout, for supervisors.
struct JsonSink;

impl Sink for JsonSink {
    fn report(&mut self, r: &Report) {
        if let Ok(mut v) = serde_json::to_value(r) {
            if let Some(m) = v.as_object_mut() {
                m.insert("schema_version".to_owned(), loopx_core::kernel::SCHEMA_VERSION.into());
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
        }
    }
}

/// Reads the test clock's file, if a debug build was given one (`LOOPX_TEST_CLOCK_FILE`).
pub fn test_clock_file() -> Option<PathBuf> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var_os("LOOPX_TEST_CLOCK_FILE").map(PathBuf::from)
}

pub async fn run(a: &DriveArgs, cli: &Cli, env: &Env, reporter: Arc<dyn Reporter>) -> Result<i32> {
    // Everything that can be refused is, before anything is written.
    let turn_timeout = duration("turn-timeout", &a.turn_timeout, Duration::from_secs(1), MAX_TURN_TIMEOUT)?;
    let lease_ttl = duration(
        "lease",
        &a.lease,
        Duration::from_secs(loopx_kernel::drive::MIN_LEASE_SECS),
        Duration::from_secs(loopx_kernel::drive::MAX_LEASE_SECS),
    )?;
    if let Some(id) = &a.agent_id {
        AgentId::new_registrable(id)?;
    }
    if let Some(h) = a
        .host
        .as_deref()
        .map(|h| pick::host_of(crate::registry::adapters(), h))
        .transpose()?
        .flatten()
        .and_then(|h| h.protocol().driver())
    {
        h.turn_argv(&a.command, None, !a.prompt_arg)?;
    }
    let limit_pattern = a.limit_pattern.as_deref().map(LimitPattern::new).transpose()?;
    let fallback = a.fallback.as_deref().map(fallback_of).transpose()?;
    let root = crate::commands::project_root(cli, env)?;
    let kernel = Arc::new(crate::commands::open_at(&root, env, reporter)?);
    let goal = kernel.resolve_goal(cli.goal_id.as_deref().map(GoalId::new).transpose()?.as_ref())?;
    let (agent, host) = pick::agent_and_host(
        &kernel,
        crate::registry::adapters(),
        &goal,
        a.agent_id.as_deref(),
        a.host.as_deref(),
    )
    .await?;
    let fallback = match &fallback {
        Some((fb_host, command)) => {
            let (fb_agent, fb_adapter) = pick::agent_and_host(
                &kernel,
                crate::registry::adapters(),
                &goal,
                a.fallback_agent_id.as_deref(),
                Some(fb_host.as_str()),
            )
            .await?;
            if fb_agent == agent {
                return Err(Error::usage(format!(
                    "the fallback drives agent {fb_agent}, the agent the drive runs"
                ))
                .with_hint("name another agent with --fallback-agent-id"));
            }
            Some(Box::new(Fallback {
                agent: fb_agent,
                host: fb_adapter.map_or("other", |h| h.host()).to_owned(),
                command: command.clone(),
                driver: fb_adapter.and_then(|h| h.protocol().driver()),
                host_home: host_home_of(fb_adapter),
                loopx: this_loopx(fb_adapter),
                prefer_first: !a.stay,
            }))
        }
        None => None,
    };
    let config = Config {
        goal: goal.clone(),
        agent,
        host: host.map_or("other", |h| h.host()).to_owned(),
        command: a.command.clone(),
        prompt_arg: a.prompt_arg,
        turn_timeout,
        max_turns: a.max_turns,
        until_idle: a.until == Some(DriveUntil::Idle),
        once: a.once,
        resume_session: a.resume_session,
        session_turns: a.session_turns,
        max_failures: a.max_failures,
        project: root.clone(),
        loopx: this_loopx(host),
        lease_ttl,
        machine: machine(),
        pid: std::process::id(),
        log_limits: loopx_kernel::turn_log::Limits::default(),
        host_home: host_home_of(host),
        limit_pattern,
        fallback,
        return_at: None,
        fallback_of: None,
    };
    if let Some(h) = host.and_then(|h| h.protocol().driver()) {
        // A command line the host cannot run a turn with is refused before anything starts.
        h.turn_argv(&config.command, None, !config.prompt_arg)?;
    }
    let wake = Arc::new(tokio::sync::Notify::new());
    let feed = crate::store::change_feed(&root, Some(&goal), env.clock.clone())?;
    let reopen = {
        let (root, goal, clock) = (root.clone(), goal.clone(), env.clock.clone());
        move || crate::store::change_feed(&root, Some(&goal), clock.clone())
    };
    ring_on("loopx-drive-feed", feed, reopen, wake.clone())?;
    if let Some(path) = test_clock_file() {
        let open = move || -> Result<Box<dyn loopx_kernel::feed::ChangeFeed>> {
            Ok(Box::new(loopx_kernel::feed::FileFeed::file(&path)?))
        };
        ring_on("loopx-drive-clock", open()?, open, wake.clone())?;
    }
    let interrupt = Arc::new(Interrupt::default());
    listen_for_signals(&interrupt)?;
    let driver = Driver {
        kernel,
        config,
        host: host.and_then(|h| h.protocol().driver()),
        clock: env.clock.clone(),
        wake,
        interrupt,
    };
    let mut text;
    let mut json = JsonSink;
    let sink: &mut dyn Sink = if cli.json {
        &mut json
    } else {
        text = TextSink { tty: std::io::stderr().is_terminal(), state: None };
        &mut text
    };
    let outcome = driver.run(sink).await?;
    Ok(outcome.code)
}

/// Ctrl-C presses and termination signals go to `interrupt`.
fn listen_for_signals(interrupt: &Arc<Interrupt>) -> Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let cannot = |e: std::io::Error| Error::internal(format!("cannot listen for signals: {e}"));
        let mut int = signal(SignalKind::interrupt()).map_err(cannot)?;
        let mut term = signal(SignalKind::terminate()).map_err(cannot)?;
        let i = interrupt.clone();
        tokio::spawn(async move {
            while int.recv().await.is_some() {
                i.press();
            }
        });
        let i = interrupt.clone();
        tokio::spawn(async move {
            while term.recv().await.is_some() {
                i.terminate();
            }
        });
    }
    #[cfg(not(unix))]
    {
        let i = interrupt.clone();
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                i.press();
            }
        });
    }
    Ok(())
}
