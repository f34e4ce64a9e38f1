#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // helpers shared by test files, each using some
//! A goal built event by event through the kernel's rules, for the kernel's tests: the state
//! and a clock that moves one second per event.

use loopx_core::event::Event;
use loopx_core::kernel::{
    AddTodo, AnswerGate, AskGate, CompleteTodo, NewEvidence, QuotaChange, RefreshState, SpendSlot,
};
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateStatus, Priority, ResumeWhen, Role, TodoClass,
};
use loopx_core::{AgentId, AgentType, ErrorKind, GateId, GoalId, Timestamp, TodoId};
use loopx_kernel::decide::{self, Decision};
use loopx_kernel::log::{EventLine, GENESIS};
use loopx_kernel::rules::{self, Actor};
use loopx_kernel::state::GoalState;

/// Runs a kernel call to its end, polling it until it is ready: the kernel needs no runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// What `agent` says with a command on `goal`, in turn `turn` when given.
pub fn agent_ctx(goal: &GoalId, agent: AgentId, turn: Option<&str>) -> loopx_core::kernel::CommandContext {
    loopx_core::kernel::CommandContext {
        goal: Some(goal.clone()),
        agent: Some(agent),
        key: turn.map(|t| loopx_core::IdempotencyKey::new(t).unwrap()),
        session: None,
        signer: None,
    }
}

/// What a person says with a command on `goal`.
pub fn person_ctx(goal: &GoalId) -> loopx_core::kernel::CommandContext {
    loopx_core::kernel::CommandContext { goal: Some(goal.clone()), ..Default::default() }
}

pub const T0: i64 = 1_800_000_000_000;

/// A goal built event by event, with a clock that moves one second per event.
#[derive(Clone)]
pub struct Sim {
    pub state: GoalState,
    pub now: Timestamp,
}

pub fn agent(id: &str) -> AgentId {
    AgentId::new(id).unwrap()
}

impl Sim {
    pub fn new() -> Self {
        let first = EventLine {
            seq: 1,
            at: Timestamp::from_unix_millis(T0),
            actor: "user".into(),
            event: Event::GoalCreated { objective: "test".into(), title: None },
            turn: None,
            receipt: None,
            root: None,
            prev: GENESIS.into(),
            signature: None,
        };
        let state = GoalState::genesis(&GoalId::new("g").unwrap(), &first).unwrap();
        Sim { state, now: Timestamp::from_unix_millis(T0) }
    }

    pub fn apply(&mut self, actor: &str, event: Event) {
        self.now = Timestamp::from_unix_millis(self.now.unix_millis() + 1000);
        let line = EventLine {
            seq: self.state.seq + 1,
            at: self.now,
            actor: actor.into(),
            event,
            turn: None,
            receipt: None,
            root: None,
            prev: String::new(),
            signature: None,
        };
        self.state.apply(&line).unwrap();
    }

    pub fn agents(mut self, ids: &[&str]) -> Self {
        for id in ids {
            self.apply(
                "user",
                Event::AgentRegistered { agent: agent(id), agent_type: AgentType::from_static("codex-app") },
            );
        }
        self
    }

    pub fn todo_with(&mut self, text: &str, priority: Priority, role: Role, class: TodoClass) -> TodoId {
        let req = AddTodo { role, class, ..AddTodo::agent(text, priority) };
        let e = rules::add_todo(&self.state, &req).unwrap();
        self.apply("user", e);
        self.state.todos.last().unwrap().id
    }

    pub fn todo(&mut self, text: &str, priority: Priority) -> TodoId {
        self.todo_with(text, priority, Role::Agent, TodoClass::Advance)
    }

    pub fn claim(&mut self, who: &str, t: TodoId) {
        let e = rules::claim(&self.state, &Actor::Agent(agent(who)), t, self.now).unwrap().unwrap();
        self.apply(who, e);
    }

    pub fn complete(&mut self, t: TodoId, no_follow_up: bool) {
        let req =
            CompleteTodo { todo: t, evidence: Some(evidence()), no_follow_up, note: None, next_todo: None };
        let e = rules::complete(&self.state, &Actor::User, &req, None, self.now).unwrap().unwrap();
        self.apply("user", e);
    }

    pub fn gate(&mut self, blocks: GateBlocks) -> GateId {
        let req = AskGate { question: "may I?".into(), blocks, kind: loopx_core::model::GateKind::Person };
        let e = rules::ask_gate(&self.state, &req, self.now).unwrap();
        self.apply("user", e);
        self.state.gates.last().unwrap().id
    }

    pub fn answer(&mut self, g: GateId, status: GateStatus) {
        let e = rules::answer_gate(&self.state, &Actor::User, &AnswerGate { gate: g, status, note: None })
            .unwrap();
        self.apply("user", e);
    }

    pub fn quota(&mut self, change: QuotaChange) {
        let req = loopx_core::kernel::SetGoal { quota: change, ..Default::default() };
        if let Some(e) = rules::set_goal(&self.state, &req).unwrap() {
            self.apply("user", e);
        }
    }

    /// A written-back and spent turn of `who` on `t`.
    pub fn spend(&mut self, who: &str, t: TodoId, tokens: Option<u64>) {
        let a = Actor::Agent(agent(who));
        let refresh = RefreshState {
            todo: t,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        let e = rules::refresh_state(&self.state, &a, None, &refresh, self.now).unwrap();
        self.apply(who, e.expect("a turn without an id always writes back"));
        let req = SpendSlot { todo: t, slots: 1, tokens, usd: None, dry_run: false };
        let e = rules::spend_slot(&self.state, &a, None, &req, self.now).unwrap();
        self.apply(who, e);
    }

    /// A person sets `t` aside as deferred, to resume on `when` (or never by itself).
    pub fn deferring(&self, t: TodoId, when: Option<ResumeWhen>) -> loopx_core::Result<Option<Event>> {
        let req = loopx_core::kernel::UpdateTodo {
            status: Some(loopx_core::model::TodoStatus::Deferred),
            resume_when: when,
            ..loopx_core::kernel::UpdateTodo::of(t)
        };
        rules::update(&self.state, &Actor::User, &req, self.now)
    }

    pub fn defer(&mut self, t: TodoId, when: ResumeWhen) {
        let e = self.deferring(t, Some(when)).unwrap().unwrap();
        self.apply("user", e);
    }

    /// `from` hands `t` to `to` (a Codex App agent), waiting `ttl_secs`.
    pub fn handoff(&mut self, from: &str, to: Option<&str>, t: TodoId, ttl_secs: u64) {
        let req = loopx_core::kernel::OfferHandoff {
            to_host: AgentType::from_static("codex-app"),
            to_agent: to.map(agent),
            todos: vec![t],
            note: Some("over to you".into()),
            ttl_secs,
        };
        let e = rules::offer_handoff(&self.state, &Actor::Agent(agent(from)), &req, self.now).unwrap();
        self.apply(from, e);
    }

    pub fn stop(&mut self) {
        self.apply("user", Event::GoalStopped { reason: Some("lunch".into()), now: false });
    }

    pub fn decide(&self, who: Option<&str>) -> Decision {
        let a = who.map(agent);
        decide::decide(&self.state, a.as_ref(), self.now).unwrap().1
    }

    pub fn decide_err(&self, who: Option<&str>) -> ErrorKind {
        let a = who.map(agent);
        decide::decide(&self.state, a.as_ref(), self.now).unwrap_err().kind
    }
}

/// Proof that a test passed, as an agent gives it.
pub fn evidence() -> NewEvidence {
    NewEvidence {
        kind: EvidenceKind::Test,
        summary: "passes".into(),
        command: None,
        exit_code: None,
        link: None,
    }
}

pub fn t(n: u64) -> TodoId {
    TodoId::from_number(n)
}
