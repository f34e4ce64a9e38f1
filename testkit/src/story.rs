//! A goal of known shape, for `loopx report`'s golden test and its benchmark: every cycle the
//! same things happen for the same minutes, through the real kernel under a clock that moves
//! only when the story says so. The figures a report must give follow from [`Shape`].
//!
//! One cycle, from its start (minutes):
//!
//! | at | what | lasts |
//! |---|---|---|
//! | 0 | the person adds 4 todos (2 in a quiet cycle, which ends at 55 after 10 idle) | |
//! | 0 | `claude-1` (Claude Code, a host's turn) runs one and settles it with evidence | 20 |
//! | 20 | `codex-1` (driven by `loopx drive`) runs one, completes it, writes back; its end spends | 30 |
//! | 50 | `codex-1` runs another and fails (exit 1, no writeback) | 5 |
//! | 55 | `claude-1` asks the person a goal-wide question; answered | 90 |
//! | 145 | `claude-1` waits on a timer gate; loopx closes it | 20 |
//! | 165 | the person stops the goal; resumes it | 30 |
//! | 195 | `claude-1` runs one, writes back, spends, hands it to Codex | 10 |
//! | 205 | `codex-1` takes the handoff and completes the todo in a driven turn | 15 |
//! | 220 | nothing | 10 |

use std::path::Path;
use std::sync::Arc;

use loopx_core::continuation::Continuation;
use loopx_core::drive::{DriverOp, DriverRequest, EndTurn, TurnExit, TurnUsage};
use loopx_core::kernel::*;
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateKind, GateStatus, Priority, Role, TodoClass,
};
use loopx_core::{
    AgentId, AgentType, Clock, Error, GoalId, IdempotencyKey, ManualClock, Result, Timestamp, TodoId,
};
use loopx_kernel::{FileKernel, MemKernel, MemStore, Silent, StateKernel, Store, StoreOptions};

/// Minutes of one cycle, as the table above has them.
pub const CYCLE_MINUTES: u64 = 230;
/// Of a cycle: agents working, waiting on a person, on a timer, paused, idle.
pub const WORKING_MINUTES: u64 = 20 + 30 + 5 + 10 + 15;
pub const PERSON_MINUTES: u64 = 90;
pub const CHECKS_MINUTES: u64 = 20;
pub const PAUSED_MINUTES: u64 = 30;
pub const IDLE_MINUTES: u64 = 10;
/// Tokens and cost `codex-1` reports for each driven turn.
pub const TURN_TOKENS: u64 = 1200;
pub const TURN_USD: f64 = 0.25;

/// When the story begins.
pub const START: Timestamp = Timestamp::from_unix_millis(1_793_610_000_000); // 2026-11-02T09:00:00Z

/// How long the story runs.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub cycles: usize,
    /// Every this many cycles one is whole; the others are quiet: their turns only, without
    /// the question, the timer, the pause and the handoff (a goal's state keeps every gate and
    /// handoff, so a story of a million events with one in each cycle would spend its time
    /// re-encoding them). 1: every cycle whole.
    pub whole_every: usize,
}

impl Shape {
    /// `cycles` whole cycles.
    pub fn whole(cycles: usize) -> Self {
        Self { cycles, whole_every: 1 }
    }
}

/// Plays the story into a new project at `root` (its file store), goal `shaped`.
pub async fn into_project(root: &Path, shape: Shape) -> Result<()> {
    let clock = Arc::new(ManualClock::new(START));
    let (k, _) = FileKernel::init(root, clock.clone(), Arc::new(Silent), StoreOptions::default())?;
    play(&k, &clock, shape).await
}

/// Plays the story in memory, then copies the goal into a new project at `root` in one write
/// (a long story without a sync per event).
pub async fn into_project_at_once(root: &Path, shape: Shape) -> Result<()> {
    let clock = Arc::new(ManualClock::new(START));
    let k: MemKernel = StateKernel::over(MemStore::new(root, clock.clone(), Arc::new(Silent)));
    play(&k, &clock, shape).await?;
    let (target, _) = loopx_kernel::FileStore::init(root, clock, Arc::new(Silent), StoreOptions::default())?;
    loopx_machine::migrate::copy_goals(k.store(), &target)?;
    Ok(())
}

fn goal() -> GoalId {
    GoalId::new("shaped").unwrap_or_else(|_| GoalId::main())
}

fn ctx(agent: Option<&str>, turn: Option<&str>) -> Result<CommandContext> {
    Ok(CommandContext {
        goal: Some(goal()),
        agent: agent.map(AgentId::new).transpose()?,
        key: turn.map(IdempotencyKey::new).transpose()?,
        session: None,
        signer: None,
    })
}

fn evidence(summary: &str) -> NewEvidence {
    NewEvidence {
        kind: EvidenceKind::Test,
        summary: summary.to_owned(),
        command: None,
        exit_code: Some(0),
        link: None,
    }
}

fn complete(todo: TodoId) -> CompleteTodo {
    CompleteTodo {
        todo,
        evidence: Some(evidence("tests pass")),
        no_follow_up: false,
        note: None,
        next_todo: None,
    }
}

struct Story<'a, S: Store> {
    k: &'a StateKernel<S>,
    clock: &'a ManualClock,
    turns: u64,
}

impl<S: Store> Story<'_, S> {
    /// The story's clock moves `minutes` on.
    fn pass(&self, minutes: u64) {
        self.clock.advance_minutes(i64::try_from(minutes).unwrap_or(0));
    }

    fn turn_id(&mut self) -> String {
        self.turns += 1;
        format!("turn-{}", self.turns)
    }

    /// A `run` decision for `agent`, its todo claimed.
    async fn run(&self, agent: &str, turn: &str) -> Result<TodoId> {
        let d = self.k.should_run(&ctx(Some(agent), Some(turn))?, None).await?;
        let Continuation::Run { todo, claim_required } = d.continuation else {
            return Err(Error::internal(format!("{agent} was not given work: {}", d.reason)));
        };
        if claim_required {
            self.k.claim_todo(&ctx(Some(agent), None)?, todo).await?;
        }
        Ok(todo)
    }

    /// A driven turn of `codex-1`: decided, worked for `minutes`, ended (`done`: completed and
    /// written back; else exit 1 without a writeback).
    async fn driven(&mut self, minutes: u64, done: bool) -> Result<()> {
        let turn = self.turn_id();
        let started_at = self.clock.now();
        let todo = self.run("codex-1", &turn).await?;
        self.pass(minutes);
        let c = ctx(Some("codex-1"), Some(&turn))?;
        if done {
            self.k.complete_todo(&ctx(Some("codex-1"), None)?, complete(todo)).await?;
            let req = RefreshState {
                todo,
                classification: "implement".into(),
                delivery_outcome: DeliveryOutcome::OutcomeProgress,
                next_action: None,
            };
            self.k.refresh_state(&c, req).await?;
        }
        let end = EndTurn {
            turn,
            exit: TurnExit::Exited,
            exit_code: Some(if done { 0 } else { 1 }),
            signal: None,
            started_at,
            usage: TurnUsage { session: None, tokens: Some(TURN_TOKENS), usd: Some(TURN_USD), limit: None },
            tail: (!done).then(|| "error: the build failed".to_owned()),
        };
        self.k.end_turn(&ctx(Some("codex-1"), None)?, end).await?;
        Ok(())
    }

    async fn cycle(&mut self, n: usize, whole: bool) -> Result<()> {
        let person = ctx(Some("user"), None)?;
        let renew = DriverRequest {
            id: "driver-1".into(),
            op: DriverOp::Renew { ttl_secs: 86_400, turn: None, todo: None },
        };
        self.k.drive_lease(&ctx(Some("codex-1"), None)?, renew).await?;
        // A quiet cycle adds what it finishes, so the open work stays as it is.
        for i in 0..if whole { 4 } else { 2 } {
            let req = AddTodo {
                text: format!("cycle {n} task {i}"),
                priority: Priority::P2,
                role: Role::Agent,
                class: TodoClass::Advance,
                scopes: vec![],
                after_gate: None,
                validation: None,
            };
            self.k.add_todo(&person, req).await?;
        }
        // claude-1: a host's turn, settled in one commit.
        let turn = self.turn_id();
        let todo = self.run("claude-1", &turn).await?;
        self.pass(20);
        let settle = SettleTurn {
            complete: complete(todo),
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            slots: 1,
            tokens: Some(800),
            usd: None,
        };
        self.k.settle_turn(&ctx(Some("claude-1"), Some(&turn))?, settle).await?;
        // codex-1: a driven turn that works, and one that fails.
        self.driven(30, true).await?;
        self.driven(5, false).await?;
        if !whole {
            self.pass(IDLE_MINUTES);
            return Ok(());
        }
        // A question for the person, holding all work.
        let ask = AskGate {
            question: format!("cycle {n}: may we ship?"),
            blocks: GateBlocks::Goal,
            kind: GateKind::Person,
        };
        let gate = self.k.ask_gate(&ctx(Some("claude-1"), None)?, ask).await?.body.gate.id;
        self.pass(PERSON_MINUTES);
        let answer = AnswerGate { gate, status: GateStatus::Approved, note: None };
        self.k.answer_gate(&person, answer).await?;
        // A timer gate loopx closes itself.
        let until = Timestamp::from_unix_millis(self.clock.now().unix_millis() + 20 * 60_000);
        let wait = AskGate {
            question: "let the canary bake".into(),
            blocks: GateBlocks::Goal,
            kind: GateKind::Timer { until },
        };
        self.k.ask_gate(&ctx(Some("claude-1"), None)?, wait).await?;
        self.pass(CHECKS_MINUTES);
        self.k.poll_gates(&person, None).await?;
        // A pause.
        self.k.stop_goal(&person, Some("lunch".into()), false).await?;
        self.pass(PAUSED_MINUTES);
        self.k.resume_goal(&person).await?;
        // claude-1 writes back and hands its todo to Codex, which finishes it.
        let turn = self.turn_id();
        let todo = self.run("claude-1", &turn).await?;
        self.pass(10);
        let c = ctx(Some("claude-1"), Some(&turn))?;
        let req = RefreshState {
            todo,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeGap,
            next_action: None,
        };
        self.k.refresh_state(&c, req).await?;
        self.k.spend_slot(&c, SpendSlot { todo, slots: 1, tokens: None, usd: None, dry_run: false }).await?;
        let offer = OfferHandoff {
            to_host: AgentType::from_static("codex"),
            to_agent: None,
            todos: vec![todo],
            note: Some("finish it".into()),
            ttl_secs: DEFAULT_HANDOFF_TTL_SECS,
        };
        self.k.handoff(&ctx(Some("claude-1"), None)?, offer).await?;
        let accept = AcceptHandoff { host: AgentType::from_static("codex"), handoff: None };
        self.k.accept_handoff(&ctx(Some("codex-1"), None)?, accept).await?;
        self.driven(15, true).await?;
        self.pass(IDLE_MINUTES);
        Ok(())
    }
}

/// The story on any kernel whose store's clock is `clock`.
pub async fn play<S: Store>(k: &StateKernel<S>, clock: &ManualClock, shape: Shape) -> Result<()> {
    let create =
        CreateGoal { id: goal(), objective: "A goal of known shape".into(), title: None, make_default: true };
    k.create_goal(create).await?;
    let person = ctx(Some("user"), None)?;
    for (id, t) in [("claude-1", "claude-code"), ("codex-1", "codex")] {
        let req =
            RegisterAgent { id: AgentId::new(id)?, agent_type: AgentType::from_static(t), require_new: true };
        k.register_agent(&person, req).await?;
    }
    let lease = DriverRequest {
        id: "driver-1".into(),
        op: DriverOp::Start {
            host: "codex".into(),
            machine: "story".into(),
            pid: 1,
            ttl_secs: 86_400,
            replaces: None,
        },
    };
    k.drive_lease(&ctx(Some("codex-1"), None)?, lease).await?;
    let mut story = Story { k, clock, turns: 0 };
    for n in 0..shape.cycles {
        story.cycle(n, n % shape.whole_every.max(1) == 0).await?;
    }
    Ok(())
}
