//! A deterministic simulation of a long-running goal (`cargo xtask sim`; feature `testkit`).
//!
//! The real kernel, over the in-memory store or the file store in a temporary directory, runs under
//! a simulated clock for a number of simulated hours. A seeded scheduler drives scripted agents on
//! the four hosts' agent types through the real tick (should-run → claim → work → settle with
//! evidence, or complete, write back and spend in three commands, or give the todo back, or ask a
//! person, or hand it to another host), delivers some turns twice, keeps the cadence each answer
//! gives (a host does not wake its agent before it, and now and then acknowledges it, or reports it
//! could not), takes leases that run out and takes over todos whose lease did. A simulated person
//! answers questions late or never, pauses and resumes compute, stops and resumes the goal, changes
//! the allowance and the budget, adds work (some of it with a check the kernel runs before it
//! counts as done: one that passes, one that fails the first time, one that never passes),
//! supersedes work and calls off handoffs no one takes. Rogue agents try what only a person may do,
//! or what another agent holds. The clock now and then leaps hours ahead (a machine asleep) or is
//! set back a few minutes. On the file store, faults are injected: the process killed at each step
//! of a commit (and started again, the host delivering the turn it was ending once more), a write
//! torn halfway, the goal's lock held by another process, a full disk, views that cannot be
//! written.
//!
//! After every step the checker (`check.rs`) reads the log's new lines and folds them into a shadow
//! state of its own, checking each line against the state before it: the hash chain; every
//! acknowledged mutation present; no claim of a todo another agent holds, a gate holds back or a
//! handoff reserves for someone else; no lease over another's, no takeover of a running lease; a
//! handoff taken only by its receiver while it waits; no run decided on gated work or outside the
//! quota; every spend after its turn's writeback, never while paused, at most one per turn, and
//! beyond the window's allowance only for a run the quota let start; every agent completion with
//! evidence, and a checked todo completed only on the kernel's own passing run of its check; no
//! agent answering a gate or changing governance; the store's state equal to the shadow's and the
//! log's state root to the replay's; after a crash, the doctor finding the recovered store whole;
//! no panic; no agent told to run again and again with nothing to take; a backoff that never
//! shortens while nothing changes.
//!
//! A violation names the seed, the step, the invariant, the trace's last steps and the command that
//! replays it; [`shrink`] cuts a failing run down to steps none of which can be left out alone and
//! still fail (each step draws from its own generator, so a step left out leaves the others as they
//! were). The same seed replays the same trace byte for byte (the log's bytes may differ where a
//! check records how long it ran).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use sha2::{Digest, Sha256};

use loopx_core::agent::AgentType;
use loopx_core::decision::{DecisionKind, SchedulerAction};
use loopx_core::event::Event;
use loopx_core::kernel::{
    AcceptHandoff, AddTodo, AnswerGate, AskGate, CancelHandoff, CommandContext, CompleteTodo, CreateGoal,
    Kernel, LeaseOp, LeaseRequest, NewEvidence, OfferHandoff, QuotaChange, RefreshState, RegisterAgent,
    SchedulerReport, SetGoal, SettleTurn, SpendSlot, SupersedeTodo, UpdateTodo,
};
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateKind, GateStatus, GoalStatus, Priority, Spend, TodoStatus,
    Validation,
};
use loopx_core::{AgentId, Clock, GoalId, IdempotencyKey, ManualClock, Timestamp, TodoId};

use loopx_core::traits::{Observation, ObservationRequest, Provider};
use loopx_kernel::gates::GateRuntime;
use loopx_kernel::log::EventLine;
use loopx_kernel::store::{FAULT_POINTS, InjectedCrash, Store, StoreOptions};
use loopx_kernel::{DynKernel, FileStore, MemStore, Silent, StateKernel};

mod check;

use check::Checker;

/// Which store the kernel runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimStore {
    /// The in-memory store: the fastest, no faults below the kernel.
    Memory,
    /// The file store in a temporary directory, with faults injected: a process killed at
    /// each commit step, a torn write, a lock held by another process, a full disk, views
    /// that cannot be written.
    Files,
}

impl SimStore {
    pub fn name(self) -> &'static str {
        match self {
            SimStore::Memory => "memory",
            SimStore::Files => "files",
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub hours: u64,
    pub agents: usize,
    pub store: SimStore,
    /// A bug planted in the system under test, to show the checker finds it.
    pub plant: Option<Plant>,
    /// Only these steps act; the others only move the clock (a shrunk trace). `None`: all.
    pub steps: Option<BTreeSet<u64>>,
    /// Where the run makes its project directory (removed when it ends).
    pub scratch: PathBuf,
    /// Called with every line of the trace as it happens.
    pub echo: Option<fn(&str)>,
}

impl SimConfig {
    /// A run of `seed` for `hours` with `agents` agents on `store`, its files under `scratch`.
    pub fn new(seed: u64, hours: u64, agents: usize, store: SimStore, scratch: &Path) -> Self {
        SimConfig {
            seed,
            hours,
            agents,
            store,
            plant: None,
            steps: None,
            scratch: scratch.to_path_buf(),
            echo: None,
        }
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        let mut cmd = format!("cargo xtask sim --seed {} --store {}", self.seed, self.store.name());
        if self.hours != 200 {
            cmd.push_str(&format!(" --hours {}", self.hours));
        }
        if self.agents != 4 {
            cmd.push_str(&format!(" --agents {}", self.agents));
        }
        if let Some(steps) = &self.steps {
            let list: Vec<String> = steps.iter().map(u64::to_string).collect();
            cmd.push_str(&format!(" --steps {}", list.join(",")));
        }
        cmd
    }
}

/// Bugs the simulation can plant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// Now and then a spend is committed for a turn that wrote nothing back, as if the rule
    /// that asks for the writeback were missing.
    SpendBeforeWriteback,
    /// Now and then a todo another agent holds is claimed straight in the store, as if the
    /// claim skipped the lock and the rule that reads the holder.
    ClaimWithoutLock,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub seed: u64,
    pub simulated_hours: u64,
    pub steps: u64,
    pub turns: u64,
    pub settled: u64,
    pub spends: u64,
    pub gates_asked: u64,
    pub gates_answered: u64,
    pub handoffs_offered: u64,
    pub handoffs_accepted: u64,
    pub leases: u64,
    pub takeovers: u64,
    /// Completions refused because the kernel's run of the todo's check failed.
    pub failed_checks: u64,
    /// Turns a host did not wake its agent for, keeping to the cadence it was told.
    pub backoffs: u64,
    pub duplicate_deliveries: u64,
    pub refusals: u64,
    /// Idle gaps of hours, and the clock set back.
    pub clock_jumps: u64,
    /// Processes killed mid-commit (torn writes included), and restarted.
    pub crashes: u64,
    /// Other faults: locks held by another process, full disks, views not written.
    pub faults: u64,
    pub events: u64,
    pub invariants_checked: u64,
    /// SHA-256 of the whole trace: equal for equal seeds.
    pub trace_hash: String,
}

/// A broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    pub config: SimConfig,
    pub step: u64,
    pub invariant: &'static str,
    pub detail: String,
    /// The trace's last steps (all of them for a shrunk run).
    pub trace: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seed = self.config.seed;
        writeln!(f, "seed {seed} step {}: {} — {}", self.step, self.invariant, self.detail)?;
        writeln!(f, "replay it with: {}", self.config.replay_command())?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    /// The generator for one step of one seed: each step draws from its own, so a step left
    /// out (shrinking) leaves the others' choices as they were.
    fn for_step(seed: u64, step: u64) -> Self {
        let mut r = Rng(seed.wrapping_mul(0xA24B_AED4_963E_E407) ^ step.wrapping_mul(0x9FB2_1C65_1E98_DF25));
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[usize::try_from(self.below(items.len() as u64)).unwrap_or(0)]
    }
}

const MINUTE: i64 = 60_000;
/// 2026-01-01T00:00:00Z.
const START_MS: i64 = 1_767_225_600_000;
const TRACE_KEPT: usize = 40;

/// A directory of its own under the scratch directory, removed with it.
struct TempDir(PathBuf);

impl TempDir {
    fn new(under: &Path, seed: u64) -> std::io::Result<Self> {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let dir = under.join(format!("loopx-sim-{}-{seed}-{n}", std::process::id()));
        std::fs::create_dir_all(under)?;
        if std::fs::create_dir(&dir).is_err() {
            // Left by an earlier process that had this one's id: start from nothing.
            std::fs::remove_dir_all(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The simulation's process runner: it runs nothing, but answers a todo's check as its argv
/// says: `check pass` exits 0, `check fail` exits 3, `check fail-once NAME` exits 1 the first
/// time and 0 after.
#[derive(Debug, Default)]
struct ScriptedChecks {
    failed_once: std::sync::Mutex<BTreeSet<String>>,
}

#[async_trait::async_trait]
impl Provider for ScriptedChecks {
    fn name(&self) -> &'static str {
        "scripted checks"
    }

    async fn observe(&self, request: &ObservationRequest) -> loopx_core::Result<Observation> {
        let ObservationRequest::RunCommand { argv, .. } = request else {
            return Err(loopx_core::Error::usage("the simulation runs checks only"));
        };
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        let exit_code = match words.as_slice() {
            ["check", "pass"] => 0,
            ["check", "fail"] => 3,
            ["check", "fail-once", name] => {
                let first = self.failed_once.lock().map_or(false, |mut seen| seen.insert((*name).to_owned()));
                if first { 1 } else { 0 }
            }
            _ => return Err(loopx_core::Error::usage(format!("the simulation has no check {argv:?}"))),
        };
        let digest = Sha256::digest(argv.join(" ").as_bytes());
        Ok(Observation::CommandExited {
            argv: argv.clone(),
            exit_code: Some(exit_code),
            output_digest: format!(
                "sha256:{}",
                digest.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            duration_ms: 0,
        })
    }
}

/// The kernel over `store`, its todos' checks run by `checks`.
fn kernel_over(store: Box<dyn Store>, checks: &Arc<ScriptedChecks>) -> DynKernel {
    let processes: Arc<dyn Provider> = checks.clone();
    StateKernel::over(store).with_gates(GateRuntime { processes: Some(processes), ..GateRuntime::default() })
}

/// The store under the kernel, as the simulation reaches it besides the kernel. Each has a
/// project directory of its own.
enum Backing {
    Memory(MemStore, #[allow(dead_code)] TempDir),
    Files(TempDir),
}

impl Backing {
    /// The store again, as a process starting now opens it, with `fault` armed.
    fn open(&self, clock: &Arc<ManualClock>, fault: Option<String>) -> loopx_core::Result<Box<dyn Store>> {
        match self {
            Backing::Memory(m, _) => Ok(Box::new(m.clone())),
            Backing::Files(dir) => {
                let options = StoreOptions { holder: "loopx sim".into(), fault, ..StoreOptions::default() };
                Ok(Box::new(FileStore::open(&dir.0, clock.clone(), Arc::new(Silent), options)?))
            }
        }
    }

    /// Goal `id`'s log from byte `offset` on.
    fn log_from(&self, id: &GoalId, offset: usize) -> loopx_core::Result<Vec<u8>> {
        match self {
            Backing::Memory(m, _) => m.log_from(id, offset),
            Backing::Files(dir) => {
                let path = loopx_kernel::Layout::new(&dir.0).events(id);
                let io = |e: std::io::Error| loopx_core::Error::io("read", &path, &e);
                let mut file = std::fs::File::open(&path).map_err(io)?;
                file.seek(SeekFrom::Start(offset as u64)).map_err(io)?;
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).map_err(io)?;
                Ok(bytes)
            }
        }
    }
}

/// Runs `f`, catching an unwind: the store's injected crash, or anything else.
async fn catch<F: Future>(f: F) -> std::thread::Result<F::Output> {
    let mut f = Box::pin(f);
    std::future::poll_fn(move |cx| match std::panic::catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(cx))) {
        Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(payload) => Poll::Ready(Err(payload)),
    })
    .await
}

struct Sim {
    cfg: SimConfig,
    rng: Rng,
    /// The simulated clock: moved only by the scheduler.
    clock: Arc<ManualClock>,
    backing: Backing,
    /// Runs the todos' checks (a kernel opened again keeps what they did).
    checks: Arc<ScriptedChecks>,
    k: DynKernel,
    goal: GoalId,
    agents: Vec<AgentId>,
    types: Vec<AgentType>,
    summary: Summary,
    trace: Vec<String>,
    hasher: Sha256,
    step: u64,
    /// Seq → actor of every mutation acknowledged to a caller.
    acked: BTreeMap<u64, String>,
    /// Turns begun and not yet ended, by agent.
    in_flight: BTreeMap<String, Flight>,
    /// The turn being ended now: a crash puts it back, for the host to deliver again.
    finishing: Option<(String, Flight)>,
    /// Per agent, the `should-run` answers in a row that said run and left it nothing to take.
    idle_runs: BTreeMap<String, u32>,
    /// Per agent, when its host wakes it next (the cadence it was told), in ms.
    wake: BTreeMap<String, i64>,
    /// Per agent, the last backoff it was told: unchanged polls and cadence.
    backoff: BTreeMap<String, (u32, u32)>,
    /// An invariant a turn saw broken, for the next check to report.
    broken: Option<(&'static str, String)>,
    /// The process was killed this step: the next check asks the doctor too.
    crashed: bool,
    checker: Checker,
}

/// How many answers in a row may say "run" to an agent that then finds nothing to take: more is
/// a loop spending turns on nothing (a host would wake it again and again).
const SPIN_LIMIT: u32 = 3;

/// A turn an agent has begun (claimed its todo) and not yet ended.
#[derive(Clone)]
struct Flight {
    turn: String,
    todo: TodoId,
    tries: u32,
}

impl Sim {
    fn note(&mut self, line: String) {
        let line = format!("{:>5} {} {line}", self.step, self.clock.now());
        if let Some(echo) = self.cfg.echo {
            echo(&line);
        }
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.trace.push(line);
        // A shrunk run keeps its whole (short) trace.
        if self.trace.len() > TRACE_KEPT * 2 && self.cfg.steps.is_none() {
            self.trace.drain(..TRACE_KEPT);
        }
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Box<Violation> {
        let from = if self.cfg.steps.is_some() { 0 } else { self.trace.len().saturating_sub(TRACE_KEPT) };
        Box::new(Violation {
            config: self.cfg.clone(),
            step: self.step,
            invariant,
            detail,
            trace: self.trace[from..].to_vec(),
        })
    }

    fn ctx(&self, agent: Option<&AgentId>, turn: Option<String>) -> CommandContext {
        CommandContext {
            goal: Some(self.goal.clone()),
            agent: Some(
                agent.cloned().unwrap_or_else(|| AgentId::new("user").unwrap_or_else(|_| unreachable!())),
            ),
            key: turn.and_then(|t| IdempotencyKey::new(&t).ok()),
            session: None,
            signer: None,
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().unix_millis()
    }

    fn pick_agent(&mut self) -> (AgentId, AgentType) {
        let i = usize::try_from(self.rng.below(self.agents.len() as u64)).unwrap_or(0);
        (self.agents[i].clone(), self.types[i].clone())
    }

    /// Records what a call did: its receipt's event as acknowledged, or its refusal.
    fn outcome<T>(
        &mut self,
        what: &str,
        by: &str,
        r: loopx_core::Result<loopx_core::kernel::Receipt<T>>,
    ) -> Option<loopx_core::kernel::Receipt<T>> {
        match r {
            Ok(receipt) => {
                if receipt.changed && !receipt.replayed {
                    self.acked.insert(receipt.seq, by.to_owned());
                }
                let tag = if receipt.replayed { " (replayed)" } else { "" };
                self.note(format!("{by} {what} → {}{tag}", receipt.seq));
                Some(receipt)
            }
            Err(e) => {
                self.summary.refusals += 1;
                self.note(format!("{by} {what} refused: {:?}", e.kind));
                None
            }
        }
    }

    /// One step: maybe a fault armed, then an agent's turn, the person, or a rogue agent; a
    /// crash restarts the "process" (a new kernel over the store as the crash left it).
    async fn act(&mut self) {
        let armed =
            if self.cfg.store == SimStore::Files && self.rng.chance(4) { self.arm_fault() } else { false };
        let what = self.rng.below(100);
        let acted = catch(async {
            match what {
                0..70 => self.agent_turn().await,
                70..95 => self.person().await,
                _ => self.rogue().await,
            }
        })
        .await;
        if let Err(payload) = acted {
            let crash = match payload.downcast::<InjectedCrash>() {
                Ok(crash) => crash,
                Err(other) => {
                    // Not ours: a panic in the system under test, reported like any violation.
                    let message = other
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| other.downcast_ref::<&str>().map(|m| (*m).to_owned()))
                        .unwrap_or_default();
                    self.broken = Some(("the kernel never panics", message));
                    return;
                }
            };
            self.summary.crashes += 1;
            self.crashed = true;
            self.note(format!("the process is killed at {}; it starts again", crash.point));
            // The host delivers the turn it was ending again.
            if let Some((a, f)) = self.finishing.take() {
                self.in_flight.insert(a, f);
            }
        }
        self.finishing = None;
        if armed {
            match self.backing.open(&self.clock, None) {
                Ok(store) => self.k = kernel_over(store, &self.checks),
                Err(e) => self.broken = Some(("the store opens after a crash", e.message)),
            }
        }
    }

    /// Arms one fault for this step. Returns whether the kernel was replaced (and must be
    /// replaced again after the step).
    fn arm_fault(&mut self) -> bool {
        let kind = self.rng.below(FAULT_POINTS.len() as u64 + 4);
        let fault = match usize::try_from(kind).unwrap_or(0) {
            i if i < FAULT_POINTS.len() => format!("unwind-{}", FAULT_POINTS[i]),
            7 => "unwind-torn-append".to_owned(),
            // Another process holds the goal's lock all step: every mutation is refused busy.
            // (Injected in the store rather than held for real, so no wait depends on time.)
            8 => "busy-lock".to_owned(),
            9 => "disk-full".to_owned(),
            _ => "fail-projections".to_owned(),
        };
        if !fault.starts_with("unwind-") {
            self.summary.faults += 1;
        }
        self.note(format!("fault armed: {fault}"));
        match self.backing.open(&self.clock, Some(fault)) {
            Ok(store) => {
                self.k = kernel_over(store, &self.checks);
                true
            }
            Err(e) => {
                self.broken = Some(("the store opens", e.message));
                false
            }
        }
    }

    async fn agent_turn(&mut self) {
        let (a, kind) = self.pick_agent();
        if let Some(f) = self.in_flight.remove(a.as_str()) {
            self.finish(a, f).await;
            return;
        }
        if self.wake.get(a.as_str()).is_some_and(|at| *at > self.now_ms()) {
            // Its host keeps the cadence it was told: no turn yet.
            self.summary.backoffs += 1;
            return;
        }
        self.summary.turns += 1;
        let turn = format!("{a}-turn-{}", self.summary.turns);
        let ctx = self.ctx(Some(&a), Some(turn.clone()));
        if self.rng.chance(3) && self.take_over_expired(&a, &turn).await {
            return;
        }
        // A host starting a session asks first whether work was handed to it.
        let packet = self.k.handoff_packet(Some(&self.goal), kind.clone(), Some(&a)).await;
        if packet.is_ok_and(|p| p.is_some()) && self.rng.chance(80) {
            self.accept(&a, kind, turn).await;
            return;
        }
        let answer = match self.k.should_run(&ctx, None).await {
            Ok(ans) => ans,
            Err(e) => {
                self.summary.refusals += 1;
                self.note(format!("{a} should-run refused: {:?}", e.kind));
                return;
            }
        };
        self.note(format!("{a} should-run: {}", answer.decision.as_str()));
        if answer.decision == DecisionKind::Handoff {
            return;
        }
        self.keep_cadence(&a, &answer.scheduler).await;
        // A turn told to plan (nothing is open) is the scripted agent's to skip.
        let Some(todo) = answer.selected_todo.as_ref().map(|t| t.id).filter(|_| answer.should_run) else {
            return;
        };
        let r = self.k.claim_todo(&ctx, todo).await;
        let claimed = self.outcome(&format!("claim {todo}"), a.as_str(), r).map(|_| todo);
        // Told to run on a todo, it could not take it: a turn spent on nothing.
        let idle = self.idle_runs.entry(a.to_string()).or_default();
        let Some(todo) = claimed else {
            *idle += 1;
            if *idle > SPIN_LIMIT {
                let detail = format!("{a} was told to run {idle} times in a row and found nothing to take");
                self.broken = Some(("never spins", detail));
            }
            return;
        };
        *idle = 0;
        match self.cfg.plant {
            Some(Plant::SpendBeforeWriteback) if self.rng.chance(5) => self.planted_spend(&a, todo, &turn),
            Some(Plant::ClaimWithoutLock) if self.rng.chance(10) => self.planted_claim(&a),
            _ => {}
        }
        if self.rng.chance(25) {
            // A lease with a write scope, for a while; a turn that outlasts it may be taken over.
            let scope =
                (*self.rng.pick(&["src/kernel", "src/kernel/rules.rs", "src/cli", "docs"])).to_owned();
            let ttl_secs = 60 * (10 + self.rng.below(80));
            let op = LeaseOp::Acquire { ttl_secs, write_scope: vec![scope.clone()] };
            let req = LeaseRequest { todo, op, key: Some(turn.clone()), expected_version: None };
            let leased = self.k.lease(&ctx, req).await;
            if self
                .outcome(&format!("lease {todo} on {scope} for {} min", ttl_secs / 60), a.as_str(), leased)
                .is_some()
            {
                self.summary.leases += 1;
            }
        }
        // Most turns take a while: others act (and the person) before this one ends.
        if self.rng.chance(60) {
            self.in_flight.insert(a.to_string(), Flight { turn, todo, tries: 0 });
            return;
        }
        self.finish(a, Flight { turn, todo, tries: 0 }).await;
    }

    /// The host keeps the cadence the answer gave (and tells loopx it did, or that it could
    /// not); and a backoff never shortens while nothing changes.
    async fn keep_cadence(&mut self, a: &AgentId, hint: &loopx_core::decision::SchedulerHint) {
        let minutes = match hint.action {
            SchedulerAction::RunNow => return,
            SchedulerAction::StopUntilResume => 60,
            _ => hint.cadence_minutes.unwrap_or(30),
        };
        if hint.action == SchedulerAction::Backoff {
            let (polls, cadence) = (hint.unchanged_polls, hint.cadence_minutes.unwrap_or(0));
            if let Some((before, was)) = self.backoff.insert(a.to_string(), (polls, cadence))
                && polls == before + 1
                && cadence < was
            {
                let detail =
                    format!("{a}: {polls} unchanged polls and a cadence of {cadence} min after {was}");
                self.broken = Some(("backoff never shortens while nothing changes", detail));
            }
        }
        self.wake.insert(a.to_string(), self.now_ms() + i64::from(minutes) * MINUTE);
        if hint.cadence_minutes.is_some() && self.rng.chance(50) {
            let failed = self.rng.chance(10);
            let report = SchedulerReport {
                cadence_minutes: (!failed).then_some(minutes),
                rrule: hint.rrule.clone(),
                error: failed.then(|| "the automation could not be updated".to_owned()),
            };
            let ctx = self.ctx(Some(a), None);
            let r = self.k.scheduler_report(&ctx, report).await;
            let what =
                if failed { "report a cadence failure".to_owned() } else { format!("keep {minutes} min") };
            self.outcome(&what, a.as_str(), r);
        }
    }

    /// Takes the handoff waiting for agent `a` over.
    async fn accept(&mut self, a: &AgentId, kind: AgentType, turn: String) {
        let ctx = self.ctx(Some(a), Some(turn.clone()));
        let r = self.k.accept_handoff(&ctx, AcceptHandoff { host: kind, handoff: None }).await;
        let Some(receipt) = self.outcome("take the handoff over", a.as_str(), r) else { return };
        if receipt.body.packet.is_some() {
            // It holds the work now; its next turn asks whether to run on it, like any other.
            self.summary.handoffs_accepted += 1;
        }
    }

    /// Takes over a todo whose holder's lease expired (the next turn asks whether to run on
    /// it); returns whether it did.
    async fn take_over_expired(&mut self, a: &AgentId, turn: &str) -> bool {
        let Ok(s) = self.k.store().read(&self.goal) else { return false };
        let now = self.clock.now();
        let stale = held_by_another(&s, a, |t| t.lease.as_ref().is_some_and(|l| !l.is_active(now)));
        let Some(todo) = stale.map(|t| t.id) else { return false };
        let req = UpdateTodo::takeover(todo, a.clone(), "its lease expired");
        let ctx = self.ctx(Some(a), Some(turn.to_owned()));
        let r = self.k.update_todo(&ctx, req).await;
        if self.outcome(&format!("take {todo} over"), a.as_str(), r).is_none() {
            return false;
        }
        self.summary.takeovers += 1;
        true
    }

    /// Ends agent `a`'s turn on `f.todo`: settled, or completed, written back and spent, or
    /// a question asked and the todo given back, or handed to another host, or given back. A
    /// turn refused (the goal paused meanwhile) is tried again later, three times at most.
    async fn finish(&mut self, a: AgentId, f: Flight) {
        self.finishing = Some((a.to_string(), f.clone()));
        let Flight { turn, todo, tries } = f;
        let ctx = self.ctx(Some(&a), Some(turn.clone()));
        let evidence = NewEvidence {
            kind: EvidenceKind::Test,
            summary: format!("checks pass for {todo}"),
            command: None,
            exit_code: Some(0),
            link: None,
        };
        let no_follow_up = self.rng.chance(70);
        let complete = CompleteTodo {
            todo,
            evidence: Some(evidence),
            no_follow_up,
            note: None,
            next_todo: (!no_follow_up).then(|| format!("follow up on {todo}")),
        };
        let tokens = Some(1_000 + self.rng.below(4_000));
        if self.rng.chance(5) {
            // A confused agent accounts its turn before writing it back: refused.
            let early = SpendSlot { todo, slots: 1, tokens, usd: None, dry_run: false };
            let r = self.k.spend_slot(&ctx, early).await;
            self.outcome(&format!("(early) spend {todo}"), a.as_str(), r);
        }
        match self.rng.below(100) {
            0..60 => {
                let req = SettleTurn {
                    complete,
                    classification: "sim".into(),
                    delivery_outcome: DeliveryOutcome::OutcomeProgress,
                    slots: 1,
                    tokens,
                    usd: None,
                };
                let settled = self.k.settle_turn(&ctx, req.clone()).await;
                if self.outcome(&format!("settle {todo}"), a.as_str(), settled).is_some() {
                    self.summary.settled += 1;
                    self.summary.spends += 1;
                } else if tries < 3 {
                    self.in_flight.insert(a.to_string(), Flight { turn, todo, tries: tries + 1 });
                    return;
                } else {
                    let released = self.k.release_todo(&self.ctx(Some(&a), None), todo).await;
                    self.outcome(&format!("give up {todo}"), a.as_str(), released);
                    return;
                }
                if self.rng.chance(15) {
                    // The host delivers the same call again.
                    self.summary.duplicate_deliveries += 1;
                    let again = self.k.settle_turn(&ctx, req).await;
                    self.outcome(&format!("settle {todo} again"), a.as_str(), again);
                }
            }
            60..73 => {
                let done = self.k.complete_todo(&ctx, complete).await;
                if self.outcome(&format!("complete {todo}"), a.as_str(), done).is_none() {
                    return;
                }
                let refresh = RefreshState {
                    todo,
                    classification: "sim".into(),
                    delivery_outcome: DeliveryOutcome::OutcomeProgress,
                    next_action: None,
                };
                let written = self.k.refresh_state(&ctx, refresh).await;
                if self.outcome(&format!("refresh {todo}"), a.as_str(), written).is_none() {
                    return;
                }
                let spend = SpendSlot { todo, slots: 1, tokens, usd: None, dry_run: false };
                if self
                    .outcome(
                        &format!("spend {todo}"),
                        a.as_str(),
                        self.k.spend_slot(&ctx, spend.clone()).await,
                    )
                    .is_some()
                {
                    self.summary.spends += 1;
                }
                if self.rng.chance(15) {
                    self.summary.duplicate_deliveries += 1;
                    let again = self.k.spend_slot(&ctx, spend).await;
                    self.outcome(&format!("spend {todo} again"), a.as_str(), again);
                }
            }
            73..83 => {
                let ask = AskGate {
                    question: format!("May {a} go ahead with {todo}?"),
                    blocks: GateBlocks::Todos(vec![todo]),
                    kind: GateKind::Person,
                };
                if self
                    .outcome(&format!("ask about {todo}"), a.as_str(), self.k.ask_gate(&ctx, ask).await)
                    .is_some()
                {
                    self.summary.gates_asked += 1;
                }
                let released = self.k.release_todo(&self.ctx(Some(&a), None), todo).await;
                self.outcome(&format!("release {todo}"), a.as_str(), released);
            }
            83..91 => {
                // The work moves to another host: one agent of it, or whichever comes first.
                let (to, to_host) = self.pick_agent();
                let named = self.rng.chance(50);
                let offer = OfferHandoff {
                    to_host: to_host.clone(),
                    to_agent: named.then(|| to.clone()),
                    todos: vec![todo],
                    note: Some(format!("{todo} continues on {}", to_host.name())),
                    ttl_secs: 60 * (30 + self.rng.below(360)),
                };
                let who = if named { to.to_string() } else { to_host.name().to_owned() };
                let handed = self.k.handoff(&ctx, offer).await;
                if self.outcome(&format!("hand {todo} to {who}"), a.as_str(), handed).is_some() {
                    self.summary.handoffs_offered += 1;
                }
            }
            _ => {
                let released = self.k.release_todo(&ctx, todo).await;
                self.outcome(&format!("give back {todo}"), a.as_str(), released);
            }
        }
    }

    /// The planted bug: a spend committed straight to the store, skipping the rules.
    fn planted_spend(&mut self, a: &AgentId, todo: TodoId, turn: &str) {
        let goal = self.goal.clone();
        let at = self.clock.now();
        let event = |s: &loopx_kernel::state::GoalState| Event::SlotSpent {
            spend: Spend {
                id: s.next_spend_id(),
                agent: a.clone(),
                todo,
                run: loopx_core::RunId::from_number(s.runs_total + 1),
                turn: Some(turn.to_owned()),
                slots: 1,
                tokens: None,
                usd: None,
                at,
                voided: false,
            },
        };
        self.planted(a, &goal, &event, &format!("spend on {todo}"));
    }

    /// The planted bug: a claim of a todo another agent holds, committed straight to the
    /// store without asking the rules.
    fn planted_claim(&mut self, a: &AgentId) {
        let goal = self.goal.clone();
        let Ok(s) = self.k.store().read(&goal) else { return };
        let Some(todo) = held_by_another(&s, a, |_| true).map(|t| t.id) else { return };
        let event = |_: &loopx_kernel::state::GoalState| Event::TodoClaimed { todo, agent: a.clone() };
        self.planted(a, &goal, &event, &format!("claim of {todo}"));
    }

    fn planted(
        &mut self,
        a: &AgentId,
        goal: &GoalId,
        event: &dyn Fn(&loopx_kernel::state::GoalState) -> Event,
        what: &str,
    ) {
        let store = self.k.store();
        let mut seq = 0;
        let done = store.transact(goal, &mut |txn| {
            let e = event(txn.state());
            seq = txn.commit(a.as_str(), e, None, false, |_| Ok(()))?.seq;
            Ok(())
        });
        if done.is_ok() {
            self.acked.insert(seq, a.to_string());
            self.note(format!("{a} PLANTED {what} → {seq}"));
        }
    }

    async fn person(&mut self) {
        let user = self.ctx(None, None);
        let stopped = self.k.store().read(&self.goal).is_ok_and(|s| s.goal.status == GoalStatus::Stopped);
        if stopped && self.rng.chance(15) {
            let r = self.k.resume_goal(&user).await;
            self.outcome("resume the goal", "user", r);
            return;
        }
        match self.rng.below(100) {
            0..2 if !stopped => {
                let r = self
                    .k
                    .stop_goal(&user, Some("stopped for a while in the simulation".into()), false)
                    .await;
                self.outcome("stop the goal", "user", r);
            }
            2..7 => {
                // A todo is no longer wanted as it stands: a narrower one replaces it.
                let Ok(s) = self.k.store().read(&self.goal) else { return };
                let open: Vec<TodoId> =
                    s.todos.iter().filter(|t| t.status == TodoStatus::Open).map(|t| t.id).collect();
                if open.is_empty() {
                    return;
                }
                let todo = *self.rng.pick(&open);
                let req = SupersedeTodo {
                    todo,
                    by: vec![],
                    new_texts: vec![format!("a narrower {todo}")],
                    note: Some("the person changed their mind".into()),
                };
                let r = self.k.supersede_todo(&user, req).await;
                self.outcome(&format!("supersede {todo}"), "user", r);
            }
            7..42 => {
                let Ok(gates) = self.k.list_gates(Some(&self.goal), false).await else { return };
                // Some questions wait a long time, some are never answered.
                let Some(g) = gates.gates.iter().find(|g| g.id.number() % 5 != 0).map(|g| g.id) else {
                    return;
                };
                let status = if self.rng.chance(75) { GateStatus::Approved } else { GateStatus::Rejected };
                let req = AnswerGate { gate: g, status, note: Some("answered in the simulation".into()) };
                if self
                    .outcome(
                        &format!("answer {g} {}", status.as_str()),
                        "user",
                        self.k.answer_gate(&user, req).await,
                    )
                    .is_some()
                {
                    self.summary.gates_answered += 1;
                }
            }
            42..45 => {
                // A handoff no one takes is called off.
                let Ok(list) = self.k.list_handoffs(Some(&self.goal), false).await else { return };
                let Some(h) = list.handoffs.first().map(|h| h.id) else { return };
                let req = CancelHandoff { handoff: h, reason: Some("no one took it".into()) };
                let r = self.k.cancel_handoff(&user, req).await;
                self.outcome(&format!("cancel {h}"), "user", r);
            }
            45..70 => {
                let n = 1 + self.rng.below(3);
                for i in 0..n {
                    let name = format!("{}-{i}", self.step);
                    // Some todos are done only when the kernel's own run of a check passes:
                    // one that passes, one that fails the first time, one that never passes.
                    // (Scripted: see [`ScriptedChecks`].)
                    let check = |words: &[&str]| Validation {
                        argv: words.iter().map(|w| (*w).to_owned()).collect(),
                        timeout_secs: 10,
                    };
                    let validation = match self.rng.below(20) {
                        0 => Some(check(&["check", "pass"])),
                        1 => Some(check(&["check", "fail-once", &name])),
                        2 => Some(check(&["check", "fail"])),
                        _ => None,
                    };
                    let priority = *self.rng.pick(&[Priority::P0, Priority::P1, Priority::P2, Priority::P3]);
                    let add =
                        AddTodo { validation, ..AddTodo::agent(&format!("work item {name}"), priority) };
                    let added = self.k.add_todo(&user, add).await;
                    self.outcome("add a todo", "user", added);
                }
            }
            70..85 => {
                let compute = if self.rng.chance(30) { 0.0 } else { 1.0 };
                let quota = QuotaChange { compute: Some(compute), ..QuotaChange::default() };
                self.set_goal(quota, &format!("compute {compute}")).await;
            }
            85..95 => {
                let slots = 2 + u32::try_from(self.rng.below(30)).unwrap_or(0);
                let quota = QuotaChange { allowed_slots: Some(slots), ..QuotaChange::default() };
                self.set_goal(quota, &format!("allow {slots} slots")).await;
            }
            _ => {
                let used =
                    self.k.quota_status(Some(&self.goal)).await.map(|q| q.quota.tokens_used).unwrap_or(0);
                let budget = used + self.rng.below(40_000);
                let quota = QuotaChange { budget_tokens: Some(budget), ..QuotaChange::default() };
                self.set_goal(quota, &format!("budget {budget} tokens")).await;
            }
        }
    }

    async fn set_goal(&mut self, quota: QuotaChange, what: &str) {
        let req = SetGoal { quota, ..SetGoal::default() };
        let user = self.ctx(None, None);
        let done = self.k.set_goal(&user, req).await;
        self.outcome(what, "user", done);
    }

    /// An agent tries what only a person may do, or what another agent holds; the kernel
    /// must refuse.
    async fn rogue(&mut self) {
        let (a, kind) = self.pick_agent();
        let ctx = self.ctx(Some(&a), None);
        let Ok(s) = self.k.store().read(&self.goal) else { return };
        let now = self.clock.now();
        let held = held_by_another(&s, &a, |_| true)
            .map(|t| (t.id, t.lease.as_ref().is_some_and(|l| l.is_active(now))));
        // Work a pending handoff reserves for someone else.
        let reserved = s
            .handoffs
            .iter()
            .filter(|h| h.is_pending(now) && !h.is_for(&a, &kind))
            .find_map(|h| h.todos.first().map(|t| t.todo));
        match self.rng.below(100) {
            0..15 => {
                let Some((t, _)) = held else { return };
                let r = self.k.claim_todo(&ctx, t).await;
                self.outcome(&format!("(rogue) claim {t}"), a.as_str(), r);
            }
            15..20 => {
                // Leases a todo another agent holds: refused.
                let Some((t, _)) = held else { return };
                let op = LeaseOp::Acquire { ttl_secs: 3600, write_scope: vec!["src/kernel".into()] };
                let req = LeaseRequest { todo: t, op, key: None, expected_version: None };
                let r = self.k.lease(&ctx, req).await;
                self.outcome(&format!("(rogue) lease {t}"), a.as_str(), r);
            }
            20..25 => {
                let Some(t) = reserved else { return };
                let r = self.k.claim_todo(&ctx, t).await;
                self.outcome(&format!("(rogue) claim handed-off {t}"), a.as_str(), r);
            }
            25..40 => {
                // Takes over a todo whose holder's lease is still running: refused.
                let Some((t, true)) = held else { return };
                let req = UpdateTodo::takeover(t, a.clone(), "impatient");
                let r = self.k.update_todo(&ctx, req).await;
                self.outcome(&format!("(rogue) take {t} over"), a.as_str(), r);
            }
            40..70 => {
                let Ok(gates) = self.k.list_gates(Some(&self.goal), false).await else { return };
                let Some(g) = gates.gates.first().map(|g| g.id) else { return };
                let req = AnswerGate { gate: g, status: GateStatus::Approved, note: None };
                let r = self.k.answer_gate(&ctx, req).await;
                self.outcome(&format!("(rogue) answer {g}"), a.as_str(), r);
            }
            _ => {
                let quota = QuotaChange { allowed_slots: Some(10_000), ..QuotaChange::default() };
                let r = self.k.set_goal(&ctx, SetGoal { quota, ..SetGoal::default() }).await;
                self.outcome("(rogue) allow 10000 slots", a.as_str(), r);
            }
        }
    }

    /// Reads the log's new lines and checks each; then the store's state against the shadow.
    fn check(&mut self) -> Result<(), Box<Violation>> {
        self.summary.invariants_checked += 1;
        if let Some((invariant, detail)) = self.broken.take() {
            return Err(self.violation(invariant, detail));
        }
        let bytes = self
            .backing
            .log_from(&self.goal, self.checker.offset)
            .map_err(|e| self.violation("the log reads", e.message))?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for raw in bytes[..complete].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line: EventLine =
                serde_json::from_slice(raw).map_err(|e| self.violation("the log decodes", e.to_string()))?;
            // The chain, the acknowledgement, and the rules for the line's event.
            self.summary.invariants_checked += 3;
            if let Err((inv, detail)) = self.checker.line(&line, raw, &self.agents, &self.acked) {
                return Err(self.violation(inv, detail));
            }
            self.summary.events = line.seq;
        }
        self.checker.offset += complete;
        let shadow = self.checker.shadow.as_ref().map(|s| s.seq).unwrap_or(0);
        if let Some((&seq, _)) = self.acked.iter().next_back()
            && seq > shadow
        {
            return Err(self.violation(
                "acknowledged mutations kept",
                format!("event {seq} acknowledged, the log ends at {shadow}"),
            ));
        }
        // The store's state equals the shadow's replay (compared field by field, and by their
        // roots, the canonical form, when the fields differ), and the root the last line
        // records is the replay's (a root covers the whole state, each todo through its hash).
        let stored =
            self.k.store().read(&self.goal).map_err(|e| self.violation("the state reads", e.message))?;
        let Some(shadow) = self.checker.shadow.as_ref() else {
            return Err(self.violation("the state equals a replay of the log", "no log".into()));
        };
        let root =
            |s: &loopx_kernel::state::GoalState| loopx_kernel::store::root_of(s).map_err(|e| e.message);
        self.summary.invariants_checked += 1;
        if *shadow != *stored {
            let same = match (root(shadow), root(&stored)) {
                (Ok(m), Ok(t)) => m == t,
                (Err(e), _) | (_, Err(e)) => return Err(self.violation("the state encodes", e)),
            };
            if !same {
                let at = format!("at event {}", stored.seq);
                return Err(self.violation("the state equals a replay of the log", at));
            }
        }
        if complete > 0 {
            self.summary.invariants_checked += 1;
            let mine = root(shadow).map_err(|e| self.violation("the state encodes", e))?;
            if self.checker.root.as_ref().is_some_and(|r| *r != mine) {
                let at = format!("at event {}", stored.seq);
                return Err(self.violation("the log's state root is its replay's", at));
            }
        }
        if std::mem::take(&mut self.crashed) {
            // Recovered by the read above: whatever the crash left, the doctor finds it whole.
            let report = self
                .k
                .store()
                .doctor(Some(&self.goal))
                .map_err(|e| self.violation("the doctor runs", e.message))?;
            let failed: Vec<String> = report
                .project
                .iter()
                .chain(report.goals.iter().flat_map(|g| &g.checks))
                .filter(|c| !c.ok)
                .map(|c| format!("{}: {}", c.name, c.detail))
                .collect();
            self.summary.invariants_checked += 1;
            if !report.healthy {
                return Err(self.violation("the store is whole after a crash", failed.join("; ")));
            }
        }
        Ok(())
    }
}

/// The first open todo in `s` an agent other than `a` holds that `also` accepts.
fn held_by_another<'s>(
    s: &'s loopx_kernel::state::GoalState,
    a: &AgentId,
    also: impl Fn(&loopx_core::model::Todo) -> bool,
) -> Option<&'s loopx_core::model::Todo> {
    s.todos
        .iter()
        .find(|t| t.status == TodoStatus::Open && t.claimed_by.as_ref().is_some_and(|h| h != a) && also(t))
}

/// Runs one simulation.
pub async fn run(cfg: &SimConfig) -> Result<Summary, Box<Violation>> {
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(START_MS)));
    let goal = GoalId::new("sim").unwrap_or_else(|_| unreachable!("a valid id"));
    let fatal = |invariant: &'static str, e: String| {
        Box::new(Violation { config: cfg.clone(), step: 0, invariant, detail: e, trace: Vec::new() })
    };
    let dir =
        TempDir::new(&cfg.scratch, cfg.seed).map_err(|e| fatal("a temporary directory", e.to_string()))?;
    let backing = match cfg.store {
        SimStore::Memory => Backing::Memory(MemStore::new(&dir.0, clock.clone(), Arc::new(Silent)), dir),
        SimStore::Files => {
            FileStore::init(&dir.0, clock.clone(), Arc::new(Silent), StoreOptions::default())
                .map_err(|e| fatal("the store opens", e.message))?;
            Backing::Files(dir)
        }
    };
    let store = backing.open(&clock, None).map_err(|e| fatal("the store opens", e.message))?;
    let checks = Arc::new(ScriptedChecks::default());
    let types = [
        AgentType::from_static("claude-code"),
        AgentType::from_static("codex-cli"),
        AgentType::from_static("codex-app"),
        AgentType::from_static("cursor"),
    ];
    const NAMES: [&str; 4] = ["claude", "codex-cli", "codex-app", "cursor"];
    let agents: Vec<AgentId> =
        (0..cfg.agents.max(1)).filter_map(|i| AgentId::new(&format!("{}-{i}", NAMES[i % 4])).ok()).collect();
    let mut sim = Sim {
        cfg: cfg.clone(),
        rng: Rng::for_step(cfg.seed, 0),
        clock,
        backing,
        k: kernel_over(store, &checks),
        checks,
        goal: goal.clone(),
        types: (0..agents.len()).map(|i| types[i % 4].clone()).collect(),
        agents: agents.clone(),
        summary: Summary { seed: cfg.seed, simulated_hours: cfg.hours, ..Summary::default() },
        trace: Vec::new(),
        hasher: Sha256::new(),
        step: 0,
        acked: BTreeMap::new(),
        in_flight: BTreeMap::new(),
        finishing: None,
        idle_runs: BTreeMap::new(),
        wake: BTreeMap::new(),
        backoff: BTreeMap::new(),
        broken: None,
        crashed: false,
        checker: Checker::new(goal.clone()),
    };
    let made = sim
        .k
        .create_goal(CreateGoal {
            id: goal,
            objective: "a long simulated goal".into(),
            title: None,
            make_default: true,
        })
        .await;
    sim.outcome("create the goal", "user", made);
    for (i, a) in agents.iter().enumerate() {
        let req = RegisterAgent { id: a.clone(), agent_type: sim.types[i].clone(), require_new: true };
        let user = sim.ctx(None, None);
        let r = sim.k.register_agent(&user, req).await;
        sim.outcome(&format!("register {a}"), "user", r);
    }
    sim.set_goal(
        QuotaChange { allowed_slots: Some(12), window_hours: Some(4), ..QuotaChange::default() },
        "allow 12 slots in 4 h",
    )
    .await;
    sim.check()?;
    let end = START_MS + i64::try_from(cfg.hours).unwrap_or(i64::MAX / 2 / 3_600_000) * 60 * MINUTE;
    let last = cfg.steps.as_ref().and_then(|s| s.last().copied());
    while sim.clock.now().unix_millis() < end && last.is_none_or(|l| sim.step < l) {
        sim.step += 1;
        sim.rng = Rng::for_step(cfg.seed, sim.step);
        let dt = match sim.rng.below(1000) {
            // The machine slept: a gap of hours.
            0..3 => 60 * (1 + i64::try_from(sim.rng.below(12)).unwrap_or(0)),
            // The wall clock was set back a little (NTP, a VM restored).
            3..13 => -(1 + i64::try_from(sim.rng.below(30)).unwrap_or(0)),
            _ => 1 + i64::try_from(sim.rng.below(20)).unwrap_or(0),
        };
        sim.clock.advance_millis(dt * MINUTE);
        if cfg.steps.as_ref().is_some_and(|s| !s.contains(&sim.step)) {
            continue;
        }
        if !(0..=60).contains(&dt) {
            sim.summary.clock_jumps += 1;
            sim.note(format!("the clock jumps {dt} min"));
        }
        sim.act().await;
        sim.check()?;
    }
    sim.summary.steps = sim.step;
    sim.summary.failed_checks = sim.checker.seen.failed_checks;
    sim.summary.trace_hash = format!("{:x}", sim.hasher.clone().finalize());
    Ok(sim.summary)
}

/// Shrinks a failing run to steps that still break the same invariant and none of which can be
/// left out alone (steps left out only move the clock), trying at most `budget` runs. Returns
/// the shortest failure found, its `steps` set (all of the run's when nothing shorter fails).
pub async fn shrink(found: &Violation, budget: usize) -> Violation {
    let mut keep: Vec<u64> = match &found.config.steps {
        Some(s) => s.iter().copied().filter(|s| *s <= found.step).collect(),
        None => (1..=found.step).collect(),
    };
    let mut best = found.clone();
    best.config.steps = Some(keep.iter().copied().collect());
    let mut chunk = keep.len().div_ceil(2).max(1);
    let mut runs = 0;
    while runs < budget {
        let mut removed = false;
        let mut i = 0;
        while i < keep.len() && runs < budget {
            let trial: BTreeSet<u64> =
                keep[..i].iter().chain(&keep[(i + chunk).min(keep.len())..]).copied().collect();
            if trial.is_empty() {
                i += chunk;
                continue;
            }
            runs += 1;
            let cfg = SimConfig { steps: Some(trial.clone()), echo: None, ..found.config.clone() };
            match run(&cfg).await {
                Err(v) if v.invariant == found.invariant => {
                    keep = trial.into_iter().filter(|s| *s <= v.step).collect();
                    best = *v;
                    removed = true;
                }
                _ => i += chunk,
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    best
}
