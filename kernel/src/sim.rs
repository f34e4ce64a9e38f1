//! A deterministic simulation of a long-running goal (`cargo xtask sim`; feature `testkit`).
//!
//! The real kernel over the in-memory store runs under a simulated clock for a number of
//! simulated hours. A seeded scheduler drives scripted agents on the four hosts' agent types
//! through the real tick (should-run → claim → work → settle with evidence, or complete,
//! write back and spend in three commands, or give the todo back, or ask a person), delivers
//! some turns twice, and lets a simulated person answer questions late or never, pause and
//! resume compute, change the allowance and the budget, and add work. Rogue agents try what
//! only a person may do. The clock now and then leaps hours ahead (a machine asleep) or is set
//! back a few minutes.
//!
//! After every step the checker reads the log's new lines and folds them into a shadow state
//! of its own, checking each line against the state before it: the hash chain; every
//! acknowledged mutation present; no claim of a todo another agent holds or a gate holds back;
//! no run decided on gated work; every spend after its turn's writeback, inside the quota
//! window's allowance, never while paused or over budget, and at most one per turn; every agent
//! completion with evidence; no agent answering a gate or changing governance; and the store's
//! state equal to the shadow's. A violation names the seed, the step, the invariant and the
//! trace's last steps; the same seed replays the same trace byte for byte.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use sha2::{Digest, Sha256};

use loopx_core::agent::AgentType;
use loopx_core::event::Event;
use loopx_core::kernel::{
    AddTodo, AnswerGate, AskGate, CommandContext, CompleteTodo, CreateGoal, Kernel, NewEvidence, QuotaChange,
    RefreshState, RegisterAgent, SetGoal, SettleTurn, SpendSlot,
};
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateKind, GateStatus, Priority, Role, Spend, TodoClass,
    TodoStatus,
};
use loopx_core::{AgentId, Clock, GoalId, IdempotencyKey, Timestamp, TodoId};

use crate::log::{self, EventLine};
use crate::state::GoalState;
use crate::store::Store;
use crate::{MemKernel, MemStore, Silent, quota};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub hours: u64,
    pub agents: usize,
    /// A bug planted in the system under test, to show the checker finds it.
    pub plant: Option<Plant>,
}

/// Bugs the simulation can plant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// Now and then a spend is committed for a turn that wrote nothing back, as if the rule
    /// that asks for the writeback were missing.
    SpendBeforeWriteback,
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
    pub duplicate_deliveries: u64,
    pub refusals: u64,
    /// Idle gaps of hours, and the clock set back.
    pub clock_jumps: u64,
    pub events: u64,
    pub invariants_checked: u64,
    /// SHA-256 of the whole trace: equal for equal seeds.
    pub trace_hash: String,
}

/// A broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub step: u64,
    pub invariant: &'static str,
    pub detail: String,
    /// The trace's last steps.
    pub trace: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} step {}: {} — {}", self.seed, self.step, self.invariant, self.detail)?;
        writeln!(f, "replay it with: cargo xtask sim --seed {}", self.seed)?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
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
}

/// The simulated clock: moved only by the scheduler.
#[derive(Debug)]
struct SimClock(AtomicI64);

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.0.load(Ordering::SeqCst))
    }
}

const MINUTE: i64 = 60_000;
/// 2026-01-01T00:00:00Z.
const START_MS: i64 = 1_767_225_600_000;
const TRACE_KEPT: usize = 40;

struct Sim {
    cfg: SimConfig,
    rng: Rng,
    clock: Arc<SimClock>,
    k: MemKernel,
    goal: GoalId,
    agents: Vec<AgentId>,
    summary: Summary,
    trace: Vec<String>,
    hasher: Sha256,
    step: u64,
    /// Seq → actor of every mutation acknowledged to a caller.
    acked: BTreeMap<u64, String>,
    /// Turns begun and not yet ended, by agent.
    in_flight: BTreeMap<String, Flight>,
    /// Per agent, the `should-run` answers in a row that said run and left it nothing to take.
    idle_runs: BTreeMap<String, u32>,
    /// A spin seen by a turn, for the next check to report.
    spin: Option<String>,
    checker: Checker,
}

/// How many answers in a row may say "run" to an agent that then finds nothing to take: more is
/// a loop spending turns on nothing (a host would wake it again and again).
const SPIN_LIMIT: u32 = 3;

/// A turn an agent has begun (claimed its todo) and not yet ended.
struct Flight {
    turn: String,
    todo: TodoId,
    tries: u32,
}

/// The checker's own fold of the log, and what it has seen.
struct Checker {
    goal: GoalId,
    shadow: Option<GoalState>,
    /// The state root the last line records.
    root: Option<String>,
    head: String,
    offset: usize,
    spent_turns: HashSet<(String, String)>,
}

type Check = std::result::Result<(), (&'static str, String)>;

fn fail(invariant: &'static str, detail: String) -> Check {
    Err((invariant, detail))
}

fn is_agent(actor: &str, agents: &[AgentId]) -> bool {
    agents.iter().any(|a| a.as_str() == actor)
}

impl Checker {
    /// Checks one line against the state before it, then folds it in.
    fn line(
        &mut self,
        line: &EventLine,
        raw: &[u8],
        agents: &[AgentId],
        acked: &BTreeMap<u64, String>,
    ) -> Check {
        if line.prev != self.head {
            return fail(
                "hash chain",
                format!("line {} names {} before it, not {}", line.seq, line.prev, self.head),
            );
        }
        self.head = log::line_hash(raw);
        if let Some(actor) = acked.get(&line.seq)
            && *actor != line.actor
        {
            return fail(
                "acknowledged mutations kept",
                format!("line {} is by {}, acknowledged to {actor}", line.seq, line.actor),
            );
        }
        let Some(pre) = self.shadow.as_mut() else {
            let state = GoalState::genesis(&self.goal, line).map_err(|e| ("replay", e))?;
            self.shadow = Some(state);
            return Ok(());
        };
        let agent = is_agent(&line.actor, agents);
        match &line.event {
            Event::TurnSettled { steps } => {
                let mut scratch = pre.clone();
                for step in steps {
                    step_check(&scratch, step, line, agent, &mut self.spent_turns)?;
                    scratch.apply_step(step, line.at, &line.actor).map_err(|e| ("replay", e))?;
                }
            }
            e => step_check(pre, e, line, agent, &mut self.spent_turns)?,
        }
        pre.apply(line).map_err(|e| ("replay", e))?;
        self.root = line.root.clone();
        Ok(())
    }
}

/// The gate holding todo `t` back in `s`, if an open one does.
fn gated(s: &GoalState, t: TodoId, agent: Option<&AgentId>) -> Option<String> {
    s.gates
        .iter()
        .filter(|g| g.status == GateStatus::Open)
        .find(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Todos(ids) => ids.contains(&t),
            GateBlocks::Agent(a) => agent == Some(a),
        })
        .map(|g| g.id.to_string())
}

fn step_check(
    pre: &GoalState,
    event: &Event,
    line: &EventLine,
    agent: bool,
    spent_turns: &mut HashSet<(String, String)>,
) -> Check {
    let seq = line.seq;
    match event {
        Event::TodoClaimed { todo, agent: by } => {
            if let Some(t) = pre.todo(*todo)
                && let Some(holder) = &t.claimed_by
                && holder != by
            {
                return fail(
                    "one holder per todo",
                    format!("line {seq}: {by} claimed {todo}, held by {holder}"),
                );
            }
            if let Some(g) = gated(pre, *todo, Some(by)) {
                return fail(
                    "gated work is never taken",
                    format!("line {seq}: {by} claimed {todo} while {g} is open"),
                );
            }
        }
        Event::DecisionRecorded { record } => {
            if record.todo().is_some() {
                let q = quota::view(pre, line.at);
                if quota::is_paused(pre) || quota::budget_exhausted(pre) || q.used_slots >= q.allowed_slots {
                    let why = format!(
                        "line {seq}: a run for {} with {} of {} slots used, compute {}, budget spent: {}",
                        record.agent,
                        q.used_slots,
                        q.allowed_slots,
                        q.compute,
                        quota::budget_exhausted(pre)
                    );
                    return fail("runs start only inside the quota", why);
                }
            }
            if let Some(t) = record.todo()
                && let Some(g) = gated(pre, t, Some(&record.agent))
            {
                return fail(
                    "gated work is never selected",
                    format!("line {seq}: run on {t} while {g} is open"),
                );
            }
        }
        Event::SlotSpent { spend } => spend_check(pre, spend, line, spent_turns)?,
        Event::TodoCompleted { todo, evidence, .. } if agent => {
            let had = pre.todo(*todo).is_some_and(|t| !t.evidence.is_empty());
            if evidence.is_empty() && !had {
                return fail(
                    "agent completions carry evidence",
                    format!("line {seq}: {todo} completed by {} without evidence", line.actor),
                );
            }
        }
        Event::GateAnswered { .. } if agent => {
            return fail(
                "only a person answers a gate",
                format!("line {seq}: answered by agent {}", line.actor),
            );
        }
        Event::GoalUpdated { .. }
        | Event::GoalStopped { .. }
        | Event::GoalResumed {}
        | Event::SlotVoided { .. }
            if agent =>
        {
            return fail(
                "agents never govern",
                format!("line {seq}: {} by agent {}", event.kind(), line.actor),
            );
        }
        _ => {}
    }
    Ok(())
}

fn spend_check(
    pre: &GoalState,
    spend: &Spend,
    line: &EventLine,
    spent_turns: &mut HashSet<(String, String)>,
) -> Check {
    let seq = line.seq;
    let written_back = pre
        .runs
        .iter()
        .any(|r| r.id == spend.run && r.todo == spend.todo && r.agent == spend.agent && r.spent_by.is_none());
    if !written_back {
        return fail(
            "no spend without its writeback",
            format!("line {seq}: {} spent on {} with no writeback", spend.agent, spend.todo),
        );
    }
    if quota::is_paused(pre) {
        return fail(
            "no spend while paused",
            format!("line {seq}: {} spent while compute was 0", spend.agent),
        );
    }
    if let Some(turn) = &spend.turn
        && !spent_turns.insert((spend.agent.to_string(), turn.clone()))
    {
        return fail("a turn spends once", format!("line {seq}: turn {turn} of {} spent again", spend.agent));
    }
    Ok(())
}

impl Sim {
    fn note(&mut self, line: String) {
        let line = format!("{:>5} {} {line}", self.step, self.clock.now());
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.trace.push(line);
        if self.trace.len() > TRACE_KEPT * 2 {
            self.trace.drain(..TRACE_KEPT);
        }
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Box<Violation> {
        let from = self.trace.len().saturating_sub(TRACE_KEPT);
        Box::new(Violation {
            seed: self.cfg.seed,
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
        }
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

    async fn agent_turn(&mut self) {
        let a = self.agents[usize::try_from(self.rng.below(self.agents.len() as u64)).unwrap_or(0)].clone();
        if let Some(f) = self.in_flight.remove(a.as_str()) {
            self.finish(a, f).await;
            return;
        }
        self.summary.turns += 1;
        let turn = format!("{a}-turn-{}", self.summary.turns);
        let ctx = self.ctx(Some(&a), Some(turn.clone()));
        let answer = match self.k.should_run(&ctx, None).await {
            Ok(ans) => ans,
            Err(e) => {
                self.summary.refusals += 1;
                self.note(format!("{a} should-run refused: {:?}", e.kind));
                return;
            }
        };
        self.note(format!("{a} should-run: {}", answer.decision.as_str()));
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
                self.spin =
                    Some(format!("{a} was told to run {idle} times in a row and found nothing to take"));
            }
            return;
        };
        *idle = 0;
        if self.cfg.plant == Some(Plant::SpendBeforeWriteback) && self.rng.chance(5) {
            self.planted_spend(&a, todo, &turn);
        }
        // Most turns take a while: others act (and the person) before this one ends.
        if self.rng.chance(60) {
            self.in_flight.insert(a.to_string(), Flight { turn, todo, tries: 0 });
            return;
        }
        self.finish(a, Flight { turn, todo, tries: 0 }).await;
    }

    /// Ends agent `a`'s turn on `f.todo`: settled, or completed, written back and spent, or
    /// a question asked and the todo given back, or the todo given back. A turn refused (the
    /// goal paused meanwhile) is tried again later, three times at most.
    async fn finish(&mut self, a: AgentId, f: Flight) {
        let Flight { turn, todo, tries } = f;
        let ctx = self.ctx(Some(&a), Some(turn.clone()));
        let evidence = NewEvidence {
            kind: EvidenceKind::Test,
            summary: format!("checks pass for {todo}"),
            command: None,
            exit_code: Some(0),
            link: None,
        };
        let complete = CompleteTodo {
            todo,
            evidence: Some(evidence),
            no_follow_up: self.rng.chance(70),
            note: None,
            next_todo: None,
        };
        let complete = CompleteTodo {
            next_todo: (!complete.no_follow_up).then(|| format!("follow up on {todo}")),
            ..complete
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
            60..75 => {
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
            75..85 => {
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
            _ => {
                let released = self.k.release_todo(&ctx, todo).await;
                self.outcome(&format!("give back {todo}"), a.as_str(), released);
            }
        }
    }

    /// The planted bug: a spend committed straight to the store, skipping the rules.
    fn planted_spend(&mut self, a: &AgentId, todo: TodoId, turn: &str) {
        let goal = self.goal.clone();
        let store = self.k.store();
        let mut seq = 0;
        let done = store.transact(&goal, &mut |txn| {
            let s = txn.state();
            let spend = Spend {
                id: s.next_spend_id(),
                agent: a.clone(),
                todo,
                run: loopx_core::RunId::from_number(s.runs_total + 1),
                turn: Some(turn.to_owned()),
                slots: 1,
                tokens: None,
                usd: None,
                at: self.clock.now(),
                voided: false,
            };
            seq = txn.commit(a.as_str(), Event::SlotSpent { spend }, None, false, |_| Ok(()))?.seq;
            Ok(())
        });
        if done.is_ok() {
            self.acked.insert(seq, a.to_string());
            self.note(format!("{a} PLANTED spend on {todo} → {seq}"));
        }
    }

    async fn person(&mut self) {
        let user = self.ctx(None, None);
        match self.rng.below(100) {
            0..45 => {
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
            45..70 => {
                let n = 1 + self.rng.below(3);
                for i in 0..n {
                    let add = AddTodo {
                        text: format!("work item {}-{i}", self.step),
                        priority: [Priority::P0, Priority::P1, Priority::P2, Priority::P3]
                            [usize::try_from(self.rng.below(4)).unwrap_or(0)],
                        role: Role::Agent,
                        class: TodoClass::Advance,
                        scopes: vec![],
                        after_gate: None,
                        validation: None,
                    };
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

    /// An agent tries what only a person may do; the kernel must refuse.
    async fn rogue(&mut self) {
        let a = self.agents[usize::try_from(self.rng.below(self.agents.len() as u64)).unwrap_or(0)].clone();
        let ctx = self.ctx(Some(&a), None);
        if self.rng.chance(30) {
            // Takes a todo another agent holds: refused.
            let Ok(s) = self.k.store().read(&self.goal) else { return };
            let held = s
                .todos
                .iter()
                .find(|t| t.status == TodoStatus::Open && t.claimed_by.as_ref().is_some_and(|h| *h != a))
                .map(|t| t.id);
            let Some(t) = held else { return };
            let r = self.k.claim_todo(&ctx, t).await;
            self.outcome(&format!("(rogue) claim {t}"), a.as_str(), r);
        } else if self.rng.chance(50) {
            let Ok(gates) = self.k.list_gates(Some(&self.goal), false).await else { return };
            let Some(g) = gates.gates.first().map(|g| g.id) else { return };
            let req = AnswerGate { gate: g, status: GateStatus::Approved, note: None };
            let r = self.k.answer_gate(&ctx, req).await;
            self.outcome(&format!("(rogue) answer {g}"), a.as_str(), r);
        } else {
            let quota = QuotaChange { allowed_slots: Some(10_000), ..QuotaChange::default() };
            let r = self.k.set_goal(&ctx, SetGoal { quota, ..SetGoal::default() }).await;
            self.outcome("(rogue) allow 10000 slots", a.as_str(), r);
        }
    }

    /// Reads the log's new lines and checks each; then the store's state against the shadow.
    fn check(&mut self) -> Result<(), Box<Violation>> {
        self.summary.invariants_checked += 1;
        if let Some(detail) = self.spin.take() {
            return Err(self.violation("never spins", detail));
        }
        let bytes = self
            .k
            .store()
            .log_from(&self.goal, self.checker.offset)
            .map_err(|e| self.violation("the log reads", e.message))?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for raw in bytes[..complete].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line: EventLine =
                serde_json::from_slice(raw).map_err(|e| self.violation("the log decodes", e.to_string()))?;
            self.summary.invariants_checked += 8;
            let agents = self.agents.clone();
            if let Err((inv, detail)) = self.checker.line(&line, raw, &agents, &self.acked) {
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
        // The store's state, the shadow's replay and the root the last line records agree.
        let stored =
            self.k.store().read(&self.goal).map_err(|e| self.violation("the state reads", e.message))?;
        let encode = |s: &GoalState| crate::store::encode_state(s).map_err(|e| e.message);
        let (mine, theirs) = match (self.checker.shadow.as_ref().map(encode).transpose(), encode(&stored)) {
            (Ok(Some(m)), Ok(t)) => (m, t),
            (Err(e), _) | (_, Err(e)) => return Err(self.violation("the state encodes", e)),
            (Ok(None), _) => {
                return Err(self.violation("the state equals a replay of the log", "no log".into()));
            }
        };
        self.summary.invariants_checked += 2;
        if mine != theirs {
            return Err(
                self.violation("the state equals a replay of the log", format!("at event {}", stored.seq))
            );
        }
        let root = self.checker.shadow.as_ref().map(crate::store::root_of).transpose();
        let root = root.map_err(|e| self.violation("the state encodes", e.message))?;
        if self.checker.root.is_some() && self.checker.root != root {
            return Err(
                self.violation("the log's state root is its replay's", format!("at event {}", stored.seq))
            );
        }
        Ok(())
    }
}

/// Runs one simulation.
pub async fn run(cfg: &SimConfig) -> Result<Summary, Box<Violation>> {
    let clock = Arc::new(SimClock(AtomicI64::new(START_MS)));
    let store = MemStore::new(Path::new("/nonexistent/sim"), clock.clone(), Arc::new(Silent));
    let goal = GoalId::new("sim").unwrap_or_else(|_| unreachable!("a valid id"));
    let types = [AgentType::ClaudeCode, AgentType::CodexCli, AgentType::CodexApp, AgentType::Cursor];
    const NAMES: [&str; 4] = ["claude", "codex-cli", "codex-app", "cursor"];
    let agents: Vec<AgentId> =
        (0..cfg.agents.max(1)).filter_map(|i| AgentId::new(&format!("{}-{i}", NAMES[i % 4])).ok()).collect();
    let mut sim = Sim {
        cfg: cfg.clone(),
        rng: Rng(cfg.seed),
        clock,
        k: MemKernel::over(store),
        goal: goal.clone(),
        agents: agents.clone(),
        summary: Summary { seed: cfg.seed, simulated_hours: cfg.hours, ..Summary::default() },
        trace: Vec::new(),
        hasher: Sha256::new(),
        step: 0,
        acked: BTreeMap::new(),
        in_flight: BTreeMap::new(),
        idle_runs: BTreeMap::new(),
        spin: None,
        checker: Checker {
            goal: goal.clone(),
            shadow: None,
            root: None,
            head: log::GENESIS.to_owned(),
            offset: 0,
            spent_turns: HashSet::new(),
        },
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
        let req = RegisterAgent { id: a.clone(), agent_type: types[i % 4], require_new: true };
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
    while sim.clock.now().unix_millis() < end {
        sim.step += 1;
        let dt = match sim.rng.below(1000) {
            // The machine slept: a gap of hours.
            0..3 => 60 * (1 + i64::try_from(sim.rng.below(12)).unwrap_or(0)),
            // The wall clock was set back a little (NTP, a VM restored).
            3..13 => -(1 + i64::try_from(sim.rng.below(30)).unwrap_or(0)),
            _ => 1 + i64::try_from(sim.rng.below(20)).unwrap_or(0),
        };
        if !(0..=60).contains(&dt) {
            sim.summary.clock_jumps += 1;
            sim.note(format!("the clock jumps {dt} min"));
        }
        sim.clock.0.fetch_add(dt * MINUTE, Ordering::SeqCst);
        match sim.rng.below(100) {
            0..70 => sim.agent_turn().await,
            70..95 => sim.person().await,
            _ => sim.rogue().await,
        }
        sim.check()?;
    }
    sim.summary.steps = sim.step;
    sim.summary.trace_hash = format!("{:x}", sim.hasher.clone().finalize());
    Ok(sim.summary)
}
