//! `loopx drive`: loopx's own outer loop. Each turn: ask the kernel whether the agent should
//! run (recording the decision under a new turn id), build the turn's prompt, run the agent
//! command as a child with the turn's identity in its environment, then end the turn through
//! the kernel, which finds the writeback and spends it once. Every other decision has a
//! behaviour: sleep until the person answers, until the time named or a slot frees, or until
//! anything changes; exit on a handoff, a finished goal or a spent budget.
//!
//! Sleeping costs nothing: the driver waits on its wake signal (rung by the store's change
//! feed, wired by the command line) or a timer, never polls. It holds a lease on its agent,
//! renewed while it runs, so a second driver for the same agent is refused; a driver that
//! dies loses the lease at its expiry, or at once to a driver on the same machine that finds
//! its process gone, which then ends the dead driver's turn (spending its writeback once).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Notify;

use loopx_core::continuation::{Continuation, StopCause};
use loopx_core::decision::{DecisionKind, ShouldRunAnswer};
use loopx_core::drive::{DriverOp, DriverRequest, EndTurn, TurnEnd, TurnExit, TurnUsage};
use loopx_core::host::HostDriver;
use loopx_core::kernel::{CommandContext, Kernel};
use loopx_core::{AgentId, Clock, Error, ErrorKind, GoalId, IdempotencyKey, Result, Timestamp, TodoId, exit};
use loopx_kernel::DynKernel;
use loopx_kernel::drive::PromptFor;
use loopx_kernel::turn_log::{Limits, TurnLog};

use crate::child::{self, Stream};

/// The longest turn prompt, in bytes.
pub const PROMPT_BUDGET: usize = 4000;
/// Seconds to wait before the next turn after 0, 1, 2, … failed turns in a row: one failure
/// is tried again at once (the todo is picked again), more wait longer.
const FAILURE_BACKOFF: [u64; 6] = [0, 0, 5, 20, 60, 300];
/// Seconds to wait on a host's limit that gave no reset time, after its 1st, 2nd, … limited
/// turn in a row: the host is asked again then, its turn not spent.
const LIMIT_BACKOFF: [u64; 5] = [60, 300, 900, 1800, 3600];
/// The longest line of a child's standard output read for usage.
const MAX_LINE: usize = 1 << 20;

/// What a driver is asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub goal: GoalId,
    pub agent: AgentId,
    /// The host adapter's name (`claude-code`, `codex`), or `other`.
    pub host: String,
    /// The agent command as the person gave it.
    pub command: Vec<String>,
    /// The prompt goes as the command's last argument instead of on its stdin.
    pub prompt_arg: bool,
    pub turn_timeout: Duration,
    pub max_turns: Option<u64>,
    /// Exit instead of sleeping when there is nothing to run.
    pub until_idle: bool,
    /// One turn (or one decision that is not a turn), then exit.
    pub once: bool,
    /// Continue the host's session across turns (`session_turns` at most), when the host can.
    pub resume_session: bool,
    pub session_turns: u32,
    /// Failed turns in a row after which the driver gives up.
    pub max_failures: u32,
    /// The project directory: the child's working directory and `LOOPX_PROJECT`.
    pub project: PathBuf,
    /// How the child's shell reaches loopx, for the prompt.
    pub loopx: String,
    pub lease_ttl: Duration,
    /// This machine's name and this process's id, for the lease.
    pub machine: String,
    pub pid: u32,
    pub log_limits: Limits,
    /// The host's configuration directory on this machine, where its own files tell what its
    /// output does not (Codex's session log).
    pub host_home: Option<PathBuf>,
    /// A line of output that says the command's own limit ended the turn (`--limit-pattern`).
    pub limit_pattern: Option<LimitPattern>,
    /// The host that takes the work over while this one is limited (`--fallback`).
    pub fallback: Option<Box<Fallback>>,
    /// For a fallback's drive: when the first host's limit resets; at the first todo boundary
    /// after it the work goes back (none: it stays).
    pub return_at: Option<Timestamp>,
    /// For a fallback's drive: the agent whose work it took over.
    pub fallback_of: Option<AgentId>,
}

/// A second host a drive hands the goal's work to while the first is limited, and takes it
/// back from at the next todo boundary after the first host's reset (`prefer_first`).
#[derive(Clone)]
pub struct Fallback {
    pub agent: AgentId,
    pub host: String,
    pub command: Vec<String>,
    pub driver: Option<&'static dyn HostDriver>,
    pub host_home: Option<PathBuf>,
    /// How its agent's shell reaches loopx, for its prompts.
    pub loopx: String,
    pub prefer_first: bool,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fallback")
            .field("agent", &self.agent)
            .field("host", &self.host)
            .field("command", &self.command)
            .field("prefer_first", &self.prefer_first)
            .finish_non_exhaustive()
    }
}

/// `--limit-pattern`: a line of a command's output (either stream) that says its own quota or
/// rate limit ended the turn, for a host loopx has no reader for. A group named `secs` is the
/// seconds until it resets, one named `epoch` the Unix time it resets at.
#[derive(Clone, Debug)]
pub struct LimitPattern(regex::Regex);

impl LimitPattern {
    pub fn new(pattern: &str) -> Result<Self> {
        regex::RegexBuilder::new(pattern).size_limit(1 << 20).build().map(Self).map_err(|e| {
            Error::usage(format!("invalid --limit-pattern: {e}"))
                .with_hint("e.g. --limit-pattern 'rate limit.*retry in (?<secs>[0-9]+)s'")
        })
    }

    /// The limit `line` reports, if it matches.
    pub fn read(&self, line: &str) -> Option<loopx_core::drive::HostLimit> {
        let caps = self.0.captures(line)?;
        let mut limit = loopx_core::drive::HostLimit::new("declared", Some(line));
        let number = |name: &str| caps.name(name).and_then(|m| m.as_str().parse::<u64>().ok());
        limit.retry_after_secs = number("secs");
        limit.resets_at = number("epoch")
            .filter(|s| *s < 1 << 40)
            .and_then(|s| i64::try_from(s).ok())
            .map(|s| Timestamp::from_unix_millis(s * 1000));
        Some(limit)
    }
}

/// A person's wish to stop: Ctrl-C once lets the running turn finish, twice (or a termination
/// signal) stops it now.
#[derive(Debug, Default)]
pub struct Interrupt {
    presses: AtomicU32,
    terminated: AtomicBool,
    rung: Notify,
}

impl Interrupt {
    /// Ctrl-C.
    pub fn press(&self) {
        self.presses.fetch_add(1, Ordering::SeqCst);
        self.rung.notify_one();
    }
    /// A termination signal: stop now.
    pub fn terminate(&self) {
        self.terminated.store(true, Ordering::SeqCst);
        self.presses.fetch_add(2, Ordering::SeqCst);
        self.rung.notify_one();
    }
    fn asked(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 0
    }
    fn now(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 1
    }
    fn code(&self) -> i32 {
        if self.terminated.load(Ordering::SeqCst) { exit::TERMINATED } else { exit::INTERRUPTED }
    }
}

/// What the driver reports as it goes: the command line shows it as a status line, log lines
/// or one JSON object a line.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Report {
    Started {
        goal: GoalId,
        agent: AgentId,
        host: String,
        pid: u32,
        machine: String,
        lease_until: Timestamp,
        #[serde(skip_serializing_if = "Option::is_none")]
        replaced: Option<String>,
    },
    /// A turn a dead driver left running, ended by this one.
    Recovered {
        turn: String,
        end: TurnEnd,
        killed: usize,
    },
    TurnStarted {
        n: u64,
        turn: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        todo: Option<TodoId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        log: Option<String>,
        /// Slots used and allowed when it started.
        used_slots: u32,
        allowed_slots: u32,
    },
    TurnEnded {
        n: u64,
        end: TurnEnd,
        /// Wall time of the agent command.
        child_ms: f64,
        /// The driver's own time for the turn: everything but the agent command.
        overhead_ms: f64,
    },
    /// Nothing to run now: the decision, why, and when the driver looks again at the latest
    /// (it also looks whenever the goal changes).
    Sleeping {
        decision: DecisionKind,
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        until: Option<Timestamp>,
    },
    /// After failed turns in a row, the next waits this long.
    Backoff {
        failures: u32,
        secs: u64,
    },
    /// The host's own quota or rate limit ended the turn: the driver waits for its reset (or
    /// on a back-off when the host gave none).
    HostLimited {
        host: String,
        limit: loopx_core::drive::HostLimit,
        /// When the driver asks the host again.
        until: Timestamp,
    },
    /// The first host is limited: its work is handed to the fallback host's agent, which
    /// drives until the first host's reset (or for good).
    Failover {
        from_agent: AgentId,
        from_host: String,
        to_agent: AgentId,
        to_host: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        handoff: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        until: Option<Timestamp>,
    },
    /// Ctrl-C once: the running turn finishes first.
    Finishing,
    Note {
        message: String,
    },
    Exited {
        reason: String,
        code: i32,
        turns: u64,
        spent: u64,
        failed: u64,
    },
}

/// Where reports go.
pub trait Sink: Send {
    fn report(&mut self, r: &Report);
    /// Whether [`Sink::tick`] is wanted every second (a live status line).
    fn wants_ticks(&self) -> bool {
        false
    }
    /// A second passed while a turn runs or the driver sleeps.
    fn tick(&mut self) {}
}

/// How a drive ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub reason: String,
    pub turns: u64,
    pub spent: u64,
    pub failed: u64,
}

impl Outcome {
    fn add(&mut self, run: &Run) {
        self.turns += run.turns;
        self.spent += run.spent;
        self.failed += run.failed;
    }
}

/// One driver: the kernel it asks, the host it runs (none for `--host other`), and the
/// signals that wake it.
pub struct Driver {
    pub kernel: Arc<DynKernel>,
    pub config: Config,
    pub host: Option<&'static dyn HostDriver>,
    pub clock: Arc<dyn Clock>,
    /// Rung when the goal may have changed (a commit, a test clock moved).
    pub wake: Arc<Notify>,
    pub interrupt: Arc<Interrupt>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What the loop keeps between turns.
#[derive(Debug)]
struct Run {
    lease_id: String,
    lease_until: Timestamp,
    turns: u64,
    spent: u64,
    failed: u64,
    failures_in_row: u32,
    /// The host session to resume, and how many turns it has had.
    session: Option<(String, u32)>,
    /// Idle wakes in a row that found a time already past (guards against a spin).
    idle_spins: u32,
    /// Turn ids are `d<start>-<n>`: this driver's start (base 36 milliseconds), and the count.
    turn_base: String,
    turn_seq: u64,
    /// The host's limit the latest turn ended on: the limit, when that turn ended, when the
    /// first of the limited turns in a row ended, and how many there were.
    limited: Option<Limited>,
    /// The fallback host's own limit, until which it takes nothing over.
    fallback_limited_until: Option<Timestamp>,
    /// Turns the drive's lanes before this one ran (`--max-turns` counts the whole drive).
    turns_before: u64,
}

#[derive(Debug, Clone)]
struct Limited {
    limit: loopx_core::drive::HostLimit,
    at: Timestamp,
    since: Timestamp,
    in_row: u32,
}

/// What to do about a host's limit.
enum LimitWait {
    /// Its reset has passed: ask the host again.
    Over,
    Until(Timestamp),
    /// Longer than the goal lets a driver wait.
    GiveUp(String),
}

/// Why the loop stops.
struct Stop {
    code: i32,
    reason: String,
    then: Then,
}

/// What follows a lane's stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// The drive ends.
    Exit,
    /// The first host is limited until then (none: longer than the goal waits): the fallback
    /// takes over.
    Failover(Option<Timestamp>),
    /// The fallback gives the work back: the first host's reset has passed.
    Return,
    /// The fallback is limited too, until then: back to the first host, which waits.
    Limited(Timestamp),
}

impl Stop {
    fn done(reason: impl Into<String>) -> Self {
        Self { code: exit::SUCCESS, reason: reason.into(), then: Then::Exit }
    }
    fn exit(code: i32, reason: impl Into<String>) -> Self {
        Self { code, reason: reason.into(), then: Then::Exit }
    }
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Driver {
    fn ctx(&self, turn: Option<&str>) -> Result<CommandContext> {
        Ok(CommandContext {
            goal: Some(self.config.goal.clone()),
            agent: Some(self.config.agent.clone()),
            key: turn.map(IdempotencyKey::new).transpose()?,
            session: None,
            signer: None,
        })
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs `call` until it is not refused as busy (a lock held long, a database
    /// restarting), waiting longer each time; a hard interrupt ends the retries.
    async fn patiently<T, F, Fut>(&self, sink: &mut dyn Sink, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut wait = Duration::from_millis(250);
        loop {
            match call().await {
                Err(e) if e.kind == ErrorKind::Busy && !self.interrupt.now() => {
                    sink.report(&Report::Note {
                        message: format!("{}; retrying in {:.1} s", e.message, wait.as_secs_f64()),
                    });
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(60));
                }
                other => return other,
            }
        }
    }

    /// Drives until the goal says stop, a limit is reached, or a person interrupts. With a
    /// fallback host, a limit of the first hands the work to the fallback's agent, and the
    /// first host takes it back at the next todo boundary after its reset.
    pub async fn run(&self, sink: &mut dyn Sink) -> Result<Outcome> {
        let mut total = Outcome { code: exit::SUCCESS, reason: String::new(), turns: 0, spent: 0, failed: 0 };
        let mut carried: (Option<Limited>, Option<Timestamp>) = (None, None);
        let stop = loop {
            let (stop, run) = self.lane(sink, carried.0.take(), carried.1.take(), total.turns).await?;
            total.add(&run);
            let (Then::Failover(until), Some(fb)) = (stop.then, &self.config.fallback) else { break stop };
            let handoff = self.hand_over(fb, &run, sink).await;
            sink.report(&Report::Failover {
                from_agent: self.config.agent.clone(),
                from_host: self.config.host.clone(),
                to_agent: fb.agent.clone(),
                to_host: fb.host.clone(),
                handoff,
                until,
            });
            let second = self.fallback_driver(fb, until.filter(|_| fb.prefer_first));
            let (back, run2) = second.lane(sink, None, None, total.turns).await?;
            total.add(&run2);
            match back.then {
                Then::Return => carried = (None, run.fallback_limited_until),
                Then::Limited(t) => carried = (run.limited.clone(), Some(t)),
                _ => break back,
            }
        };
        // A person's Ctrl-C (or a termination signal) says how the drive ended, even when
        // the turn it let finish was the last anyway (--once, the last of --max-turns, the
        // work finished).
        let (code, reason) = if self.interrupt.asked() && stop.code == exit::SUCCESS {
            (self.interrupt.code(), format!("stopped by a person; {}", stop.reason))
        } else {
            (stop.code, stop.reason)
        };
        let outcome = Outcome { code, reason, ..total };
        sink.report(&Report::Exited {
            reason: outcome.reason.clone(),
            code: outcome.code,
            turns: outcome.turns,
            spent: outcome.spent,
            failed: outcome.failed,
        });
        Ok(outcome)
    }

    /// One agent's stretch of the drive: its lease taken, its turns, its lease given up.
    async fn lane(
        &self,
        sink: &mut dyn Sink,
        limited: Option<Limited>,
        fallback_limited_until: Option<Timestamp>,
        turns_before: u64,
    ) -> Result<(Stop, Run)> {
        let mut run = self.start(sink).await?;
        run.limited = limited;
        run.fallback_limited_until = fallback_limited_until;
        run.turns_before = turns_before;
        let stop = match self.turns(&mut run, sink).await {
            Ok(stop) => stop,
            Err(e) => {
                self.release(&run, &format!("stopped by an error: {}", e.message), sink).await;
                return Err(e);
            }
        };
        self.release(&run, &stop.reason, sink).await;
        Ok((stop, run))
    }

    /// The first host is limited (until `until`; none: longer than the goal waits): whether
    /// its work goes to the fallback host now. Not when there is none, the goal forbids it
    /// (`goal set --failover off`), this is the fallback's own drive, or the fallback is
    /// limited itself.
    fn fail_over(&self, run: &Run, until: Option<Timestamp>, why: &str) -> Result<Option<Stop>> {
        let Some(fb) = &self.config.fallback else { return Ok(None) };
        if !self.kernel.brakes(&self.config.goal)?.failover()
            || run.fallback_limited_until.is_some_and(|t| t > self.now())
        {
            return Ok(None);
        }
        Ok(Some(Stop {
            code: exit::SUCCESS,
            reason: format!("{why}: the work goes to {} ({})", fb.agent, fb.host),
            then: Then::Failover(until),
        }))
    }

    /// Hands the open todos the first host's agent holds to the fallback's agent, with the
    /// limit in the packet's note. Returns the handoff's id, if one was made.
    async fn hand_over(&self, fb: &Fallback, run: &Run, sink: &mut dyn Sink) -> Option<String> {
        let note = run.limited.as_ref().map(|l| {
            let said = l.limit.message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
            format!("{}{said}; {} takes over meanwhile", l.limit.describe(&self.config.host), fb.agent)
        });
        let to_host = fb.driver.map_or_else(loopx_core::AgentType::other, HostDriver::agent_type);
        let req = loopx_core::kernel::OfferHandoff {
            to_host,
            to_agent: Some(fb.agent.clone()),
            todos: Vec::new(),
            note: note.map(|n| loopx_core::untrusted::flatten(&n, 1000)),
            ttl_secs: 24 * 3600,
        };
        let ctx = self.ctx(None).ok()?;
        match self.patiently(sink, || self.kernel.handoff(&ctx, req.clone())).await {
            Ok(r) if !r.body.handoff.todos.is_empty() => Some(r.body.handoff.id.to_string()),
            Ok(_) => None,
            Err(e) => {
                sink.report(&Report::Note {
                    message: format!("the work was not handed over: {}", e.message),
                });
                None
            }
        }
    }

    /// The driver of the fallback host, giving the work back after `return_at`.
    fn fallback_driver(&self, fb: &Fallback, return_at: Option<Timestamp>) -> Driver {
        let config = Config {
            agent: fb.agent.clone(),
            host: fb.host.clone(),
            command: fb.command.clone(),
            host_home: fb.host_home.clone(),
            loopx: fb.loopx.clone(),
            fallback: None,
            return_at,
            fallback_of: Some(self.config.agent.clone()),
            ..self.config.clone()
        };
        Driver {
            kernel: self.kernel.clone(),
            config,
            host: fb.driver,
            clock: self.clock.clone(),
            wake: self.wake.clone(),
            interrupt: self.interrupt.clone(),
        }
    }

    /// Takes the lease (replacing one whose driver died on this machine), and ends the turn
    /// a dead driver left behind.
    async fn start(&self, sink: &mut dyn Sink) -> Result<Run> {
        let c = &self.config;
        let before = self.kernel.driver_lease(&c.goal, &c.agent)?;
        let now = self.now();
        let replaces = before
            .as_ref()
            .filter(|d| {
                d.is_active(now) && d.machine == c.machine && (d.pid == c.pid || !child::is_driver(d.pid))
            })
            .map(|d| d.id.clone());
        let started_ms = u64::try_from(now.unix_millis()).unwrap_or(0);
        let lease_id = format!("{}.{}", c.pid, base36(started_ms));
        let req = DriverRequest {
            id: lease_id.clone(),
            op: DriverOp::Start {
                host: c.host.clone(),
                machine: c.machine.clone(),
                pid: c.pid,
                ttl_secs: c.lease_ttl.as_secs(),
                replaces: replaces.clone(),
            },
        };
        let ctx = self.ctx(None)?;
        let r = self.patiently(sink, || self.kernel.drive_lease(&ctx, req.clone())).await?;
        let lease = r.body.lease.ok_or_else(|| Error::internal("the driver lease was not granted"))?;
        sink.report(&Report::Started {
            goal: c.goal.clone(),
            agent: c.agent.clone(),
            host: c.host.clone(),
            pid: c.pid,
            machine: c.machine.clone(),
            lease_until: lease.expires_at,
            replaced: before.as_ref().filter(|d| d.id != lease_id).map(|d| d.id.clone()),
        });
        let run = Run {
            lease_id,
            lease_until: lease.expires_at,
            turns: 0,
            spent: 0,
            failed: 0,
            failures_in_row: 0,
            session: None,
            idle_spins: 0,
            turn_base: base36(started_ms),
            turn_seq: 0,
            limited: None,
            fallback_limited_until: None,
            turns_before: 0,
        };
        // The lease was granted: the driver before, if any, is gone, and its turn with it.
        if let Some(turn) = before.and_then(|d| d.turn) {
            let killed = child::kill_leftovers(c.agent.as_str(), &turn);
            let req = EndTurn {
                turn: turn.clone(),
                exit: TurnExit::Lost,
                exit_code: None,
                signal: None,
                started_at: now,
                usage: TurnUsage::default(),
                tail: None,
            };
            let r = self.patiently(sink, || self.kernel.end_turn(&ctx, req.clone())).await?;
            sink.report(&Report::Recovered { turn, end: r.body.end, killed });
        }
        Ok(run)
    }

    /// Gives the lease up (best effort: a lease not given up expires).
    async fn release(&self, run: &Run, reason: &str, sink: &mut dyn Sink) {
        let Ok(ctx) = self.ctx(None) else { return };
        let req =
            DriverRequest { id: run.lease_id.clone(), op: DriverOp::Stop { reason: reason.to_owned() } };
        if let Err(e) = self.kernel.drive_lease(&ctx, req).await {
            sink.report(&Report::Note {
                message: format!("could not give the driver lease up: {}", e.message),
            });
        }
    }

    /// Renews the lease (saying which turn runs) when a third of it has passed, or always
    /// when `turn` changes.
    async fn renew(
        &self,
        run: &mut Run,
        turn: Option<(&str, Option<TodoId>)>,
        force: bool,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let ttl = self.config.lease_ttl;
        let due = self.now().saturating_add(ttl * 2 / 3) >= run.lease_until;
        if !due && !force {
            return Ok(());
        }
        let req = DriverRequest {
            id: run.lease_id.clone(),
            op: DriverOp::Renew {
                ttl_secs: ttl.as_secs(),
                turn: turn.map(|(t, _)| t.to_owned()),
                todo: turn.and_then(|(_, t)| t),
            },
        };
        let ctx = self.ctx(None)?;
        let r = self.patiently(sink, || self.kernel.drive_lease(&ctx, req.clone())).await?;
        if let Some(l) = r.body.lease {
            run.lease_until = l.expires_at;
        }
        Ok(())
    }

    /// How long until the lease wants renewing.
    fn renew_in(&self, run: &Run) -> Duration {
        let at = run.lease_until.unix_millis()
            - i64::try_from((self.config.lease_ttl * 2 / 3).as_millis()).unwrap_or(0);
        Duration::from_millis(u64::try_from(at - self.now().unix_millis()).unwrap_or(0).max(1000))
    }

    async fn turns(&self, run: &mut Run, sink: &mut dyn Sink) -> Result<Stop> {
        loop {
            if self.interrupt.asked() {
                return Ok(Stop::exit(self.interrupt.code(), "stopped by a person"));
            }
            self.renew(run, None, false, sink).await?;
            let began = Instant::now();
            let ctx = self.ctx(None)?;
            let a = self.patiently(sink, || self.kernel.should_run(&ctx, None)).await?;
            // The fallback gives the work back at a todo boundary after the first host's reset,
            // once it has taken over what was handed to it (its first turn).
            if let (Some(at), Some(first)) = (self.config.return_at, &self.config.fallback_of)
                && run.turns > 0
                && self.now() >= at
                && a.selected_todo.as_ref().is_none_or(|t| t.claim_required)
                && !matches!(a.continuation, Continuation::Stop { .. } | Continuation::Handoff { .. })
            {
                return Ok(Stop {
                    code: exit::SUCCESS,
                    reason: format!("the first host's limit has reset: the work goes back to {first}"),
                    then: Then::Return,
                });
            }
            match (a.decision, &a.continuation) {
                (DecisionKind::Run | DecisionKind::Replan, _) => {
                    if let Some(max) = self.config.max_turns
                        && run.turns_before + run.turns >= max
                    {
                        return Ok(Stop::done(format!("ran {max} turn(s) (--max-turns)")));
                    }
                    if let Some(l) = run.limited.clone() {
                        match self.limit_wait(&l)? {
                            LimitWait::Over => {}
                            LimitWait::Until(until) => {
                                let said = l.limit.describe(&self.config.host);
                                if let Some(first) = &self.config.fallback_of {
                                    return Ok(Stop {
                                        code: exit::SUCCESS,
                                        reason: format!("{said}: the work goes back to {first}"),
                                        then: Then::Limited(until),
                                    });
                                }
                                if let Some(stop) = self.fail_over(run, Some(until), &said)? {
                                    return Ok(stop);
                                }
                                let wait = Duration::from_millis(
                                    u64::try_from(until.unix_millis() - self.now().unix_millis())
                                        .unwrap_or(0),
                                );
                                sink.report(&Report::Sleeping {
                                    decision: a.decision,
                                    reason: l.limit.describe(&self.config.host),
                                    until: Some(until),
                                });
                                self.sleep(wait.min(self.renew_in(run)), true, sink).await;
                                continue;
                            }
                            LimitWait::GiveUp(reason) => {
                                if let Some(stop) = self.fail_over(run, None, &reason)? {
                                    return Ok(stop);
                                }
                                return Ok(Stop::exit(exit::BUSY, reason));
                            }
                        }
                    }
                    if run.failures_in_row >= self.config.max_failures {
                        return Ok(Stop {
                            then: Then::Exit,
                            code: exit::REFUSED,
                            reason: format!(
                                "the agent command failed {} turns in a row; see loopx history --agent {} and the turn logs",
                                run.failures_in_row, self.config.agent
                            ),
                        });
                    }
                    let backoff = FAILURE_BACKOFF[usize::try_from(run.failures_in_row)
                        .unwrap_or(usize::MAX)
                        .min(FAILURE_BACKOFF.len() - 1)];
                    if backoff > 0 {
                        sink.report(&Report::Backoff { failures: run.failures_in_row, secs: backoff });
                        if self.sleep(Duration::from_secs(backoff), false, sink).await {
                            continue;
                        }
                    }
                    if self.turn(run, began, sink).await? {
                        run.idle_spins = 0;
                    } else {
                        // Decided otherwise at once, or the claim went to another: look again,
                        // later each time this repeats, never in a spin.
                        run.idle_spins = run.idle_spins.saturating_add(1);
                        if run.idle_spins > 2 {
                            self.sleep(Duration::from_millis(100u64 << run.idle_spins.min(9)), true, sink)
                                .await;
                        }
                        continue;
                    }
                    if self.config.once {
                        return Ok(Stop::done("one turn (--once)"));
                    }
                }
                (DecisionKind::Stop, Continuation::Stop { cause: StopCause::Terminal }) => {
                    return Ok(Stop::done(format!("the goal's work is finished: {}", a.reason)));
                }
                (DecisionKind::Stop, Continuation::Stop { cause: StopCause::Done }) => {
                    return Ok(Stop::done(format!("the goal is done: {}", a.reason)));
                }
                (DecisionKind::Stop, Continuation::Stop { cause: StopCause::BudgetExhausted }) => {
                    return Ok(Stop::done(format!("the goal's budget is spent: {}", a.reason)));
                }
                (DecisionKind::Handoff, Continuation::Handoff { handoff, to_host, to_agent }) => {
                    let to =
                        to_agent.as_ref().map_or_else(|| to_host.clone(), |a| format!("{a} ({to_host})"));
                    return Ok(Stop::done(format!(
                        "the work is handed off to {to} ({handoff}); it is theirs now"
                    )));
                }
                _ => {
                    if let Some(stop) = self.idle(run, &a, sink).await? {
                        return Ok(stop);
                    }
                }
            }
        }
    }

    /// Whether to wait on the host's limit `l` the latest turns ended on: until its reset (and
    /// a few seconds more, so the host has turned over), or, when the host gave no reset, on a
    /// back-off; never longer than the goal's brakes allow (`goal set --host-wait`), read
    /// afresh at each look so a person's change applies to a wait under way.
    fn limit_wait(&self, l: &Limited) -> Result<LimitWait> {
        let now = self.now();
        let brakes = self.kernel.brakes(&self.config.goal)?;
        let jitter = Duration::from_secs(5 + u64::from(self.config.pid % 26));
        let until = match l.limit.resets_at {
            Some(t) if t > l.at => t.saturating_add(jitter),
            _ => {
                let step = usize::try_from(l.in_row.saturating_sub(1)).unwrap_or(usize::MAX);
                l.at.saturating_add(Duration::from_secs(LIMIT_BACKOFF[step.min(LIMIT_BACKOFF.len() - 1)]))
            }
        };
        if until <= now {
            return Ok(LimitWait::Over);
        }
        let said = l.limit.describe(&self.config.host);
        let max = brakes.host_wait_secs();
        if max == 0 {
            return Ok(LimitWait::GiveUp(format!(
                "{said}; the goal waits on no host's limit (loopx goal set --host-wait 12h lets a driver wait)"
            )));
        }
        let waited = u64::try_from(until.unix_millis() - l.since.unix_millis()).unwrap_or(0) / 1000;
        if waited > max {
            return Ok(LimitWait::GiveUp(format!(
                "{said}: longer than the goal's longest wait on a host ({}); start loopx drive again then, or raise it with loopx goal set --host-wait",
                loopx_core::time::format_duration(Duration::from_secs(max))
            )));
        }
        Ok(LimitWait::Until(until))
    }

    /// Nothing to run: exit (`--until idle`, `--once`) or sleep until the goal changes, the
    /// time the answer names, or the lease wants renewing.
    async fn idle(&self, run: &mut Run, a: &ShouldRunAnswer, sink: &mut dyn Sink) -> Result<Option<Stop>> {
        if self.config.until_idle || self.config.once {
            return Ok(Some(Stop::done(format!("idle ({}): {}", a.decision.as_str(), a.reason))));
        }
        let now = self.now();
        let mut times: Vec<Timestamp> = Vec::new();
        if let Continuation::Wait { until: Some(t), .. } = &a.continuation {
            times.push(*t);
        }
        times.extend(a.scheduler.wait_until);
        times.extend(a.quota.next_slot_at);
        times.extend(a.user_channel.questions.iter().filter_map(|q| q.next_check_at));
        times.extend(self.config.return_at);
        let until = times.into_iter().min();
        sink.report(&Report::Sleeping { decision: a.decision, reason: a.reason.clone(), until });
        let mut wait = match until {
            Some(t) if t > now => {
                run.idle_spins = 0;
                Duration::from_millis(u64::try_from(t.unix_millis() - now.unix_millis()).unwrap_or(0))
            }
            // A time already past that did not change the decision: look again soon, later
            // each time, never in a spin.
            Some(_) => {
                run.idle_spins = run.idle_spins.saturating_add(1);
                Duration::from_secs(1u64 << run.idle_spins.min(6))
            }
            None => Duration::MAX,
        };
        wait = wait.min(self.renew_in(run));
        self.sleep(wait, true, sink).await;
        Ok(None)
    }

    /// Sleeps `d`, or until the goal changes (with `on_change`), or a person interrupts.
    /// Returns whether it was woken early.
    async fn sleep(&self, d: Duration, on_change: bool, sink: &mut dyn Sink) -> bool {
        let deadline = tokio::time::Instant::now() + d.min(Duration::from_secs(365 * 24 * 3600));
        let ticks = sink.wants_ticks();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return false,
                _ = self.wake.notified(), if on_change => return true,
                _ = self.interrupt.rung.notified() => {
                    // Wake the loop on the next wait too, so a later wait also sees it.
                    self.interrupt.rung.notify_one();
                    return true;
                }
                _ = tokio::time::sleep(Duration::from_secs(1)), if ticks => sink.tick(),
            }
        }
    }

    /// One turn: its decision recorded under a new id, the prompt, the agent command, the end.
    /// Whether a turn ran (none when the recorded decision was not to run, or the claim was
    /// lost).
    async fn turn(&self, run: &mut Run, began: Instant, sink: &mut dyn Sink) -> Result<bool> {
        let c = &self.config;
        run.turn_seq += 1;
        let turn = format!("d{}-{}", run.turn_base, run.turn_seq);
        let ctx = self.ctx(Some(&turn))?;
        let mut a = self.patiently(sink, || self.kernel.should_run(&ctx, None)).await?;
        if !a.should_run {
            // The goal changed between the look and the turn: the loop looks again.
            return Ok(false);
        }
        let todo = a.selected_todo.as_ref().map(|t| t.id);
        // The driver claims the todo for its agent before the turn: a driver that loses the
        // claim to another starts no turn, and looks again.
        if let Some(t) = a.selected_todo.as_mut().filter(|t| t.claim_required) {
            match self.patiently(sink, || self.kernel.claim_todo(&ctx, t.id)).await {
                Ok(_) => t.claim_required = false,
                Err(e) if e.kind == ErrorKind::Conflict || e.kind == ErrorKind::Refused => {
                    sink.report(&Report::Note {
                        message: format!("{} went to another: {}", t.id, e.message),
                    });
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        self.renew(run, Some((&turn, todo)), true, sink).await?;
        let prompt = self.kernel.turn_prompt(
            Some(&c.goal),
            &a,
            &PromptFor { loopx: &c.loopx, turn: &turn, budget: PROMPT_BUDGET },
        )?;
        let resume = run
            .session
            .as_ref()
            .filter(|(_, n)| c.resume_session && *n < c.session_turns)
            .map(|(s, _)| s.clone());
        let mut argv = match self.host {
            Some(h) => h.turn_argv(&c.command, resume.as_deref(), !c.prompt_arg)?,
            None => c.command.clone(),
        };
        if c.prompt_arg {
            argv.push(prompt.clone());
        }
        let mut log = match self.kernel.turn_log(&c.goal, &turn, c.log_limits) {
            Ok(log) => log,
            Err(e) => {
                sink.report(&Report::Note {
                    message: format!("the turn's output is not kept in a file: {}", e.message),
                });
                TurnLog::in_memory(c.log_limits)
            }
        };
        let mut env = vec![
            ("LOOPX_AGENT_ID".to_owned(), c.agent.to_string()),
            ("LOOPX_GOAL_ID".to_owned(), c.goal.to_string()),
            ("LOOPX_TURN_ID".to_owned(), turn.clone()),
            ("LOOPX_PROJECT".to_owned(), c.project.display().to_string()),
        ];
        if let Some(t) = todo {
            env.push(("LOOPX_TODO_ID".to_owned(), t.to_string()));
        }
        let n = run.turns + 1;
        sink.report(&Report::TurnStarted {
            n,
            turn: turn.clone(),
            todo,
            text: a.selected_todo.as_ref().map(|t| t.text.clone()),
            log: log.path().map(|p| p.display().to_string()),
            used_slots: a.quota.used_slots,
            allowed_slots: a.quota.allowed_slots,
        });
        let started_at = self.now();
        let child_began = Instant::now();
        let stdin = (!c.prompt_arg).then(|| prompt.into_bytes());
        let (exit, status, usage) = match child::spawn(
            &argv,
            &c.project,
            &env,
            if todo.is_none() { &["LOOPX_TODO_ID"] } else { &[] },
            stdin,
        ) {
            Ok((running, output)) => self.watch(run, running, output, (&turn, todo), &mut log, sink).await?,
            Err(e) => {
                log.write(format!("loopx: cannot start {}: {e}\n", argv[0]).as_bytes());
                (TurnExit::NotStarted, None, TurnUsage::default())
            }
        };
        let child_time = child_began.elapsed();
        log.finish();
        let mut usage = usage;
        if let Some(h) = self.host {
            h.after_turn(c.host_home.as_deref(), &mut usage);
        }
        if let Some(l) = usage.limit.as_mut()
            && l.resets_at.is_none()
            && let Some(secs) = l.retry_after_secs.take()
        {
            l.resets_at = Some(self.now().saturating_add(Duration::from_secs(secs)));
        }
        let (exit_code, signal) = status.as_ref().map_or((None, None), child::exit_of);
        let req = EndTurn {
            turn: turn.clone(),
            exit,
            exit_code,
            signal,
            started_at,
            usage: usage.clone(),
            tail: Some(log.tail()),
        };
        let ctx = self.ctx(None)?;
        let end = self.patiently(sink, || self.kernel.end_turn(&ctx, req.clone())).await?.body.end;
        run.turns += 1;
        match end.limited() {
            Some(limit) => {
                let (since, in_row) = run.limited.as_ref().map_or((end.ended_at, 0), |l| (l.since, l.in_row));
                let l = Limited { limit: limit.clone(), at: end.ended_at, since, in_row: in_row + 1 };
                if let LimitWait::Until(until) = self.limit_wait(&l)? {
                    sink.report(&Report::HostLimited { host: c.host.clone(), limit: limit.clone(), until });
                }
                // The person hears of it once a stretch, from here (the driver's process).
                if in_row == 0 {
                    let what = format!("{} ({} on goal {})", limit.describe(&c.host), c.agent, c.goal);
                    if let Err(e) = self.kernel.tell_host_limited(&c.goal, &what).await {
                        sink.report(&Report::Note {
                            message: format!("the person was not told: {}", e.message),
                        });
                    }
                }
                run.limited = Some(l);
                run.session = None;
            }
            None => run.limited = None,
        }
        if end.failed() {
            run.failed += 1;
            run.failures_in_row += 1;
            run.session = None;
        } else if end.limited().is_none() {
            run.failures_in_row = 0;
            if end.spent_by.is_some() {
                run.spent += 1;
            }
            run.session = match (usage.session, run.session.take()) {
                (Some(s), Some((old, k))) if s == old => Some((s, k + 1)),
                (Some(s), _) => Some((s, 1)),
                (None, _) => None,
            };
            if run.session.as_ref().is_some_and(|(_, k)| *k >= c.session_turns) {
                run.session = None;
            }
        }
        let total = began.elapsed();
        sink.report(&Report::TurnEnded {
            n,
            end,
            child_ms: ms(child_time),
            overhead_ms: ms(total.saturating_sub(child_time)),
        });
        Ok(true)
    }

    /// Watches the running agent command until it exits, its time runs out, or a person
    /// stops it; keeps its output and reads what the host reports; renews the lease meanwhile.
    async fn watch(
        &self,
        run: &mut Run,
        mut running: child::Running,
        mut output: child::Output,
        at: (&str, Option<TodoId>),
        log: &mut TurnLog,
        sink: &mut dyn Sink,
    ) -> Result<(TurnExit, Option<std::process::ExitStatus>, TurnUsage)> {
        let deadline = tokio::time::Instant::now() + self.config.turn_timeout;
        let mut usage = TurnUsage::default();
        let mut line = Vec::new();
        let mut finishing = false;
        let ticks = sink.wants_ticks();
        let mut open = true;
        let pattern = self.config.limit_pattern.as_ref();
        let mut err_line = Vec::new();
        let read = |stream: Stream,
                    bytes: &[u8],
                    log: &mut TurnLog,
                    usage: &mut TurnUsage,
                    line: &mut Vec<u8>,
                    err_line: &mut Vec<u8>| {
            log.write(bytes);
            if self.host.is_none() && pattern.is_none() {
                return;
            }
            let buf = if stream == Stream::Stdout { line } else { err_line };
            for b in bytes {
                if *b == b'\n' {
                    self.read_line(stream, &String::from_utf8_lossy(buf), usage);
                    buf.clear();
                } else if buf.len() < MAX_LINE {
                    buf.push(*b);
                }
            }
        };
        let (exit, status) = loop {
            if self.interrupt.now() {
                break (TurnExit::Interrupted, running.kill().await);
            }
            // Checked at every wake, so a chatty command never keeps the renewal away.
            self.renew(run, Some(at), false, sink).await?;
            let renew_in = self.renew_in(run);
            tokio::select! {
                s = running.wait() => break (TurnExit::Exited, s.ok()),
                piece = output.recv(), if open => match piece {
                    Some((stream, bytes)) => read(stream, &bytes, log, &mut usage, &mut line, &mut err_line),
                    None => open = false,
                },
                _ = tokio::time::sleep_until(deadline) => break (TurnExit::TimedOut, running.kill().await),
                // The goal changed: a person's `goal stop --now` ends the turn at once.
                _ = self.wake.notified() => {
                    if self.kernel.stopped_now(&self.config.goal)? {
                        sink.report(&Report::Note {
                            message: "a person stopped the goal now: ending the turn".to_owned(),
                        });
                        break (TurnExit::Interrupted, running.kill().await);
                    }
                }
                _ = self.interrupt.rung.notified() => {
                    if !self.interrupt.now() && !finishing {
                        finishing = true;
                        sink.report(&Report::Finishing);
                    }
                }
                _ = tokio::time::sleep(renew_in) => self.renew(run, Some(at), false, sink).await?,
                _ = tokio::time::sleep(Duration::from_secs(1)), if ticks => sink.tick(),
            }
        };
        // Whatever it left running goes with it, in its group or out of it (`setsid`); then
        // its output is read to the end, for a short while at most.
        running.signal_group(true);
        child::kill_leftovers(self.config.agent.as_str(), at.0);
        let grace = tokio::time::Instant::now() + child::KILL_GRACE;
        while open {
            match tokio::time::timeout_at(grace, output.recv()).await {
                Ok(Some((stream, bytes))) => read(stream, &bytes, log, &mut usage, &mut line, &mut err_line),
                _ => open = false,
            }
        }
        for (stream, rest) in [(Stream::Stdout, &line), (Stream::Stderr, &err_line)] {
            if !rest.is_empty() {
                self.read_line(stream, &String::from_utf8_lossy(rest), &mut usage);
            }
        }
        Ok((exit, status, usage))
    }

    /// One whole line of the turn's output: the host reads its standard output; a declared
    /// limit pattern reads both streams.
    fn read_line(&self, stream: Stream, line: &str, usage: &mut TurnUsage) {
        if stream == Stream::Stdout
            && let Some(host) = self.host
        {
            host.read_line(line, usage);
        }
        if usage.limit.is_none()
            && let Some(p) = &self.config.limit_pattern
        {
            usage.limit = p.read(line);
        }
    }
}
