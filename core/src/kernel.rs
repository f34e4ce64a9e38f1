//! The kernel's typed command surface, with its requests, receipts and views.
//!
//! Every mutating method takes a [`CommandContext`] (goal, acting agent, idempotency key) and
//! returns a [`Receipt`]. A receipt's JSON is what `--json` prints; a replay of the same
//! idempotency key returns the first receipt unchanged.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::agent::AgentType;
use crate::decision::{OpenQuestion, QuotaView, ShouldRunAnswer};
use crate::error::Result;
use crate::ids::{AgentId, EvidenceId, GateId, GoalId, HandoffId, IdempotencyKey, RunId, SpendId, TodoId};
use crate::model::{
    Agent, DeliveryOutcome, Evidence, EvidenceKind, Gate, GateBlocks, GateStatus, Goal, GoalStatus, Handoff,
    HandoffMode, Lease, Priority, ResumeWhen, Role, RunRecord, RuntimeProfile, Spend, Todo, TodoClass,
    TodoStatus, Validation,
};
use crate::time::Timestamp;

/// Version of every `--json` document; bumped on an incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Who is acting, on which goal, and whether this is a replayable turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandContext {
    /// The goal; `None` means the project's default goal.
    pub goal: Option<GoalId>,
    /// The acting agent; `None` means a person (`user`), or the only registered agent.
    pub agent: Option<AgentId>,
    /// With a key, the mutation is applied at most once.
    pub key: Option<IdempotencyKey>,
    /// The host session whose tool environment the command runs in (the host marks it, e.g.
    /// `CLAUDE_CODE_SESSION_ID`): an agent's command. Without an agent id it acts as the
    /// session's bound agent; it never acts as a person, and never governs.
    pub session: Option<BindThread>,
    /// Signs a person's decision with their key, for a goal in strict mode.
    pub signer: Option<SignerRef>,
}

/// Signs a person's decisions with their key (Ed25519); the kernel asks it inside the commit,
/// with the message that binds the goal, the event and its place in the log.
pub trait Signer: Send + Sync {
    /// The public half, hex.
    fn public_key(&self) -> String;
    /// The signature of `message`, hex.
    fn sign(&self, message: &[u8]) -> String;
}

/// A [`Signer`] in a [`CommandContext`]: equal when the keys are.
#[derive(Clone)]
pub struct SignerRef(pub std::sync::Arc<dyn Signer>);

impl std::fmt::Debug for SignerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignerRef({})", self.0.public_key())
    }
}

impl PartialEq for SignerRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.public_key() == other.0.public_key()
    }
}

impl Eq for SignerRef {}

/// The answer to a mutation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Receipt<T> {
    pub goal_id: GoalId,
    /// The event that committed this change (or, for a no-op, the log head).
    pub seq: u64,
    /// False when the command changed nothing (already claimed by you, already complete, …).
    pub changed: bool,
    #[serde(flatten)]
    pub body: T,
    /// True when this is the stored receipt of an earlier call with the same key.
    #[serde(skip)]
    pub replayed: bool,
}

// ---- goals -------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CreateGoal {
    pub id: GoalId,
    pub objective: String,
    pub title: Option<String>,
    /// Make it the project's default goal (the first goal always is).
    pub make_default: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SetGoal {
    pub objective: Option<String>,
    pub title: Option<String>,
    pub make_default: bool,
    pub quota: QuotaChange,
    pub handoff_mode: Option<HandoffMode>,
    /// Replace the paths agents may edit (globs under the project root; empty: no limit).
    pub write_scope: Option<Vec<String>>,
    /// How the person is told a gate needs them.
    pub notify: Option<crate::model::NotifyPolicy>,
    /// Tell nobody any more.
    pub clear_notify: bool,
    /// The brakes of `loopx drive` to change: each setting given replaces the goal's.
    pub brakes: crate::model::Brakes,
    /// The person pointed the goal's webhook at another URL (kept in their configuration, not
    /// in the goal): recorded, without the URL, even when the goal names the same entry.
    pub webhook_changed: bool,
}

/// Changes to a goal's quota policy; `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QuotaChange {
    pub compute: Option<f64>,
    pub window_hours: Option<u32>,
    pub slot_minutes: Option<u32>,
    pub allowed_slots: Option<u32>,
    pub budget_tokens: Option<u64>,
    pub budget_usd: Option<f64>,
}

impl QuotaChange {
    pub fn is_empty(&self) -> bool {
        *self == QuotaChange::default()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalBody {
    pub goal: Goal,
    pub is_default: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalListEntry {
    pub id: GoalId,
    pub title: Option<String>,
    pub created_at: Timestamp,
    pub is_default: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalList {
    pub default_goal: Option<GoalId>,
    pub goals: Vec<GoalListEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalDetail {
    pub goal: Goal,
    pub is_default: bool,
    pub agents: Vec<Agent>,
    pub counts: TodoCounts,
    pub events: u64,
}

// ---- agents ------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegisterAgent {
    pub id: AgentId,
    pub agent_type: AgentType,
    /// Refuse if the id is already registered.
    pub require_new: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentBody {
    pub agent: Agent,
    /// Every agent registered on the goal after this call.
    pub agents: Vec<AgentId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentList {
    pub goal_id: GoalId,
    pub agents: Vec<Agent>,
}

// ---- todos -------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddTodo {
    pub text: String,
    pub priority: Priority,
    pub role: Role,
    pub class: TodoClass,
    pub scopes: Vec<String>,
    /// Runnable only once this gate is approved.
    pub after_gate: Option<GateId>,
    /// Completion requires the kernel to run this and see exit code 0.
    pub validation: Option<Validation>,
}

impl AddTodo {
    /// An agent's todo that moves the goal forward, free of scopes, gates and checks.
    pub fn agent(text: &str, priority: Priority) -> Self {
        AddTodo {
            text: text.to_owned(),
            priority,
            role: Role::Agent,
            class: TodoClass::Advance,
            scopes: vec![],
            after_gate: None,
            validation: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpdateTodo {
    pub todo: TodoId,
    pub text: Option<String>,
    pub priority: Option<Priority>,
    /// `open`, `blocked` or `deferred`; `done` only through completion.
    pub status: Option<TodoStatus>,
    pub resume_when: Option<ResumeWhen>,
    pub clear_claim: bool,
    pub note: Option<String>,
    pub evidence: Option<NewEvidence>,
    /// Hand the claim to this agent (with `takeover_reason`): by the owner, or by anyone once
    /// the owner's lease has expired.
    pub claimed_by: Option<AgentId>,
    pub takeover_reason: Option<String>,
}

impl UpdateTodo {
    /// An update of `todo` that changes nothing yet: set the fields to change.
    pub fn of(todo: TodoId) -> Self {
        UpdateTodo {
            todo,
            text: None,
            priority: None,
            status: None,
            resume_when: None,
            clear_claim: false,
            note: None,
            evidence: None,
            claimed_by: None,
            takeover_reason: None,
        }
    }

    /// Hands `todo`'s claim to `to`, saying why.
    pub fn takeover(todo: TodoId, to: AgentId, reason: &str) -> Self {
        UpdateTodo { claimed_by: Some(to), takeover_reason: Some(reason.to_owned()), ..UpdateTodo::of(todo) }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CompleteTodo {
    pub todo: TodoId,
    /// New evidence recorded with the completion.
    pub evidence: Option<NewEvidence>,
    /// Nothing follows from this todo (needs evidence or a note).
    pub no_follow_up: bool,
    pub note: Option<String>,
    /// Create this successor todo and link it.
    pub next_todo: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SupersedeTodo {
    pub todo: TodoId,
    /// Existing todos that replace it.
    pub by: Vec<TodoId>,
    /// Texts of new todos that replace it (same priority, role and class).
    pub new_texts: Vec<String>,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TodoFilter {
    /// Only these statuses; empty means every status that is not closed.
    pub statuses: Vec<TodoStatus>,
    /// Every todo, closed ones too.
    pub all: bool,
    pub role: Option<Role>,
    pub claimed_by: Option<AgentId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoBody {
    pub todo: Todo,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompleteBody {
    pub todo: Todo,
    /// Evidence recorded with this completion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<Todo>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SupersedeBody {
    pub todo: Todo,
    pub replacements: Vec<Todo>,
}

/// One line of `todo list`: enough to choose, not the whole record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoSummary {
    pub id: TodoId,
    pub text: String,
    pub priority: Priority,
    pub role: Role,
    pub class: TodoClass,
    pub status: TodoStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<AgentId>,
    /// The agent an unclaimed todo waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<AgentId>,
}

impl From<&Todo> for TodoSummary {
    fn from(t: &Todo) -> Self {
        Self {
            id: t.id,
            text: t.text.clone(),
            priority: t.priority,
            role: t.role,
            class: t.class,
            status: t.status,
            claimed_by: t.claimed_by.clone(),
            assignee: t.assignee.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoList {
    pub goal_id: GoalId,
    pub todos: Vec<TodoSummary>,
    /// Todos in the goal, of any status.
    pub total: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoDetail {
    pub goal_id: GoalId,
    pub todo: Todo,
    pub evidence: Vec<Evidence>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoCounts {
    pub open: usize,
    pub blocked: usize,
    pub deferred: usize,
    pub done: usize,
    pub superseded: usize,
    pub total: usize,
}

// ---- evidence ----------------------------------------------------------------------------

/// Evidence as a caller gives it; the kernel assigns the id, author and time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NewEvidence {
    pub kind: EvidenceKind,
    pub summary: String,
    pub command: Option<Vec<String>>,
    pub exit_code: Option<i32>,
    pub link: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddEvidence {
    pub todo: TodoId,
    pub evidence: NewEvidence,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceBody {
    pub evidence: Evidence,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceList {
    pub goal_id: GoalId,
    pub evidence: Vec<Evidence>,
}

// ---- views -------------------------------------------------------------------------------

/// Something waiting on a person: an open question (gate) or a user todo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo: Option<TodoId>,
    pub text: String,
    /// A user todo's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// What a gate holds back: `goal`, `agent:<id>` or `todos:<ids>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<String>,
}

/// A todo an agent holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimView {
    pub todo: TodoId,
    pub agent: AgentId,
    pub text: String,
}

/// The next todo for one agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentNext {
    pub agent: AgentId,
    pub todo: Option<TodoSummary>,
}

/// `loopx status`: the objective, what needs the user, what is next, what proves progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub goal_id: GoalId,
    pub objective: String,
    pub goal_status: GoalStatus,
    /// Why a person stopped the goal, when it is stopped and they said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The goal is active and its work is finished (every todo closed, one with nothing to
    /// follow, no gate open): a person confirms it (`loopx goal complete`) or adds work. Left
    /// out while false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub work_finished: bool,
    /// Open gates: questions only a person can answer.
    pub gates: Vec<OpenQuestion>,
    /// Everything waiting on a person: the open gates first, then user todos.
    pub needs_user: Vec<UserItem>,
    pub next_todo: Option<TodoSummary>,
    /// Each agent's next todo, as should-run would pick it; none on a done goal.
    pub next_by_agent: Vec<AgentNext>,
    pub quota: QuotaView,
    pub runs: u64,
    pub in_progress: Vec<ClaimView>,
    pub counts: TodoCounts,
    pub agents: Vec<AgentId>,
    pub evidence: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_evidence: Option<Evidence>,
    pub events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_at: Option<Timestamp>,
    /// Pending handoffs: work waiting for another host or agent to take it over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handoffs: Vec<Handoff>,
    /// The `loopx drive` processes running the goal's agents (active leases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drivers: Vec<crate::drive::DriverLease>,
}

/// Which events `loopx history` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    /// The newest this many matching events.
    pub limit: usize,
    /// Only events this agent committed or that name it.
    pub agent: Option<AgentId>,
    /// Only events about this todo.
    pub todo: Option<TodoId>,
    /// Only events of this turn (its decision, writeback, spend, end, and the commands keyed
    /// by it).
    pub turn: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub seq: u64,
    pub at: Timestamp,
    pub actor: String,
    pub kind: String,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryView {
    pub goal_id: GoalId,
    /// With a turn filter: the turn's output log, if loopx drive kept one on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_log: Option<String>,
    /// Events in the log.
    pub total: u64,
    /// Events the filter matched, of which the newest are shown.
    pub matched: u64,
    pub events: Vec<HistoryEntry>,
}

/// One check `loopx doctor` ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoctorCheck {
    pub name: String,
    pub ok: bool,
    pub detail: String,
    /// Not a failure, but worth saying (a snapshot an older loopx wrote, which the next
    /// command rebuilds): `ok`, and shown as a note.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub note: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoctorGoal {
    pub goal_id: GoalId,
    pub events: u64,
    pub checks: Vec<DoctorCheck>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoctorReport {
    pub healthy: bool,
    pub project: Vec<DoctorCheck>,
    pub goals: Vec<DoctorGoal>,
}

/// The kernel's command surface. `kernel::FileKernel` implements it over the file store.
///
/// Contract for every method: validation happens before anything is written; a refused command
/// changes nothing; mutations are serialised per goal and each commits exactly one event (or
/// none, for a no-op); reads of a current snapshot take no lock. Methods are called once per
/// user command or hook invocation; they are idempotent when the context carries a key.
#[async_trait]
pub trait Kernel: Send + Sync {
    /// Creates a goal. Refuses an id that exists.
    async fn create_goal(&self, req: CreateGoal) -> Result<Receipt<GoalBody>>;
    /// Lists the project's goals.
    async fn list_goals(&self) -> Result<GoalList>;
    /// One goal with its agents and counts.
    async fn show_goal(&self, goal: Option<&GoalId>) -> Result<GoalDetail>;
    /// Changes the objective or title, or makes the goal the default.
    async fn set_goal(&self, ctx: &CommandContext, req: SetGoal) -> Result<Receipt<GoalBody>>;
    /// Stops the goal for every agent. With `now`, a running driven turn is ended at once
    /// instead of let finish. Stopping a stopped goal is a no-op (but for a plain stop made
    /// `now`).
    async fn stop_goal(
        &self,
        ctx: &CommandContext,
        reason: Option<String>,
        now: bool,
    ) -> Result<Receipt<GoalBody>>;
    /// Resumes a stopped or completed goal. Resuming an active goal is a no-op.
    async fn resume_goal(&self, ctx: &CommandContext) -> Result<Receipt<GoalBody>>;
    /// A person confirms the goal's objective is met: its status becomes `done` and every
    /// agent's `should-run` says stop (done). Refused while a todo or a gate is open;
    /// completing a completed goal is a no-op.
    async fn complete_goal(&self, ctx: &CommandContext, note: Option<String>) -> Result<Receipt<GoalBody>>;
    /// Puts the goal in strict mode under the person's key (hex Ed25519): from then on, a
    /// person's decision is committed only signed by it. A person's decision itself, signed by
    /// the key it sets (or, for a goal in strict mode already, by its key). The same key again
    /// is a no-op.
    async fn set_person_key(&self, ctx: &CommandContext, public_key: String) -> Result<Receipt<GoalBody>>;

    /// Registers an agent additively: never removes another. Re-registering the same id and
    /// type is a no-op; another type is refused.
    async fn register_agent(&self, ctx: &CommandContext, req: RegisterAgent) -> Result<Receipt<AgentBody>>;
    async fn list_agents(&self, goal: Option<&GoalId>) -> Result<AgentList>;

    async fn add_todo(&self, ctx: &CommandContext, req: AddTodo) -> Result<Receipt<TodoBody>>;
    async fn list_todos(&self, goal: Option<&GoalId>, filter: &TodoFilter) -> Result<TodoList>;
    async fn show_todo(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<TodoDetail>;
    /// Claims an open agent todo for the acting agent: exactly one winner; a re-claim by the
    /// owner is a no-op; a claim by another agent is a conflict naming the owner.
    async fn claim_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>>;
    /// Changes text, priority, status (never to done), claim, or adds a note or evidence.
    async fn update_todo(&self, ctx: &CommandContext, req: UpdateTodo) -> Result<Receipt<TodoBody>>;
    /// Completes a todo with evidence or an explicit no-follow-up note. Completing a done todo
    /// is a no-op.
    async fn complete_todo(&self, ctx: &CommandContext, req: CompleteTodo) -> Result<Receipt<CompleteBody>>;
    /// Closes a todo in favour of replacements.
    async fn supersede_todo(
        &self,
        ctx: &CommandContext,
        req: SupersedeTodo,
    ) -> Result<Receipt<SupersedeBody>>;
    /// Gives up the acting agent's claim.
    async fn release_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>>;

    async fn add_evidence(&self, ctx: &CommandContext, req: AddEvidence) -> Result<Receipt<EvidenceBody>>;
    async fn list_evidence(&self, goal: Option<&GoalId>, todo: Option<TodoId>) -> Result<EvidenceList>;

    /// The five questions: objective, what needs the user, what is next, progress, proof.
    async fn status(&self, goal: Option<&GoalId>) -> Result<StatusView>;
    /// The newest matching events, oldest first.
    async fn history(&self, goal: Option<&GoalId>, filter: &HistoryFilter) -> Result<HistoryView>;
    /// Verifies the chain, the snapshot and GOAL.md of one goal, or of every goal.
    async fn doctor(&self, goal: Option<&GoalId>) -> Result<DoctorReport>;
    /// Keeps each log's valid prefix, moves the rest aside into dated files, rebuilds
    /// snapshots, GOAL.md and an unreadable project.json. Deletes nothing.
    async fn repair(&self, goal: Option<&GoalId>) -> Result<DoctorReport>;

    /// The decision table (ARCHITECTURE.md) for `ctx.agent`. Without a key it is a pure read;
    /// with one (the turn id) the decision is recorded once, and a replay returns the same
    /// decision. `profile` overrides the agent type's runtime profile.
    async fn should_run(
        &self,
        ctx: &CommandContext,
        profile: Option<RuntimeProfile>,
    ) -> Result<ShouldRunAnswer>;
    /// Asks a person a question; the blocking mode is always explicit.
    async fn ask_gate(&self, ctx: &CommandContext, req: AskGate) -> Result<Receipt<GateBody>>;
    /// Answers an open gate (approve, reject or cancel). Answering twice is refused.
    async fn answer_gate(&self, ctx: &CommandContext, req: AnswerGate) -> Result<Receipt<GateBody>>;
    /// Open gates, or every gate with `all`.
    async fn list_gates(&self, goal: Option<&GoalId>, all: bool) -> Result<GateList>;
    /// Records what a turn did: the writeback a spend needs. Replays with a key append nothing.
    async fn refresh_state(&self, ctx: &CommandContext, req: RefreshState) -> Result<Receipt<RunBody>>;
    /// Accounts compute for an unspent writeback of the same turn (or todo). Never first.
    async fn spend_slot(&self, ctx: &CommandContext, req: SpendSlot) -> Result<Receipt<SpendBody>>;
    /// Completes, writes back and spends a turn in one commit. Needs a turn id; a replay
    /// returns the first receipt.
    async fn settle_turn(&self, ctx: &CommandContext, req: SettleTurn) -> Result<Receipt<SettleBody>>;
    /// Compensates a spend; nothing is deleted.
    async fn void_slot(&self, ctx: &CommandContext, req: VoidSlot) -> Result<Receipt<SpendBody>>;
    async fn quota_status(&self, goal: Option<&GoalId>) -> Result<QuotaStatus>;
    /// Records what the host's scheduler applied, or that it failed to. Never spends.
    /// Acquires, renews, transfers or releases a todo's lease.
    async fn lease(&self, ctx: &CommandContext, req: LeaseRequest) -> Result<Receipt<LeaseBody>>;
    async fn show_lease(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<LeaseBody>;
    /// Selects the agent's next todo (the decision table's row 8) and claims it, in one step under the lock.
    async fn claim_next(&self, ctx: &CommandContext) -> Result<Receipt<TodoBody>>;
    /// Binds a host session to the acting agent: one agent per session, one session per agent
    /// and host. Binding again is a no-op.
    async fn bind_thread(&self, ctx: &CommandContext, req: BindThread) -> Result<Receipt<SessionView>>;
    /// Unbinds `agent`'s host session (a person, or the agent itself). A session that is not
    /// bound is a no-op.
    async fn unbind_thread(
        &self,
        ctx: &CommandContext,
        agent: AgentId,
        req: BindThread,
    ) -> Result<Receipt<SessionView>>;
    /// Arms or disarms the acting agent's host loop.
    async fn set_armed(&self, ctx: &CommandContext, armed: bool) -> Result<Receipt<SessionView>>;
    /// A stop hook's turn end, in one transaction: the session (as `agent` when one is named,
    /// as [`Kernel::agent_session`] reads it, otherwise as [`Kernel::session`] does), and, when it
    /// is armed, under `cap` continuations and should-run says run, one more continuation
    /// recorded with the decision that asked for it.
    async fn stop_turn(&self, agent: Option<&AgentId>, req: BindThread, cap: u32) -> Result<StopTurn>;
    /// The agent, arming and stop count of a host session.
    async fn session(&self, goal: Option<&GoalId>, req: &BindThread) -> Result<SessionView>;
    /// A host session's view when every session of the host acts as `agent` (a host installed
    /// with one agent): whether it is registered and armed, and the session's stop count.
    async fn agent_session(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        req: &BindThread,
    ) -> Result<SessionView>;
    /// Why `agent` may not edit `paths` (absolute, or relative to `cwd`): a path outside the
    /// goal's write scope or outside the scopes of the todos it holds. `None`: every path is in.
    async fn check_edits(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        cwd: &std::path::Path,
        paths: &[String],
    ) -> Result<Option<String>>;
    async fn scheduler_report(
        &self,
        ctx: &CommandContext,
        req: SchedulerReport,
    ) -> Result<Receipt<SchedulerBody>>;

    /// Hands the acting agent's work to another host or agent: releases its claims (and, in
    /// `hard_lease` mode, its leases) on the todos and reserves them for the receiver until
    /// the handoff is accepted, cancelled or expires. Refuses a todo the agent does not hold.
    async fn handoff(&self, ctx: &CommandContext, req: OfferHandoff) -> Result<Receipt<HandoffBody>>;
    /// Takes over the handoff waiting for the acting agent (registered additively, as
    /// `req.host`, when it is not yet): claims its todos and transfers their leases, all in
    /// one commit. Changes nothing when no handoff waits.
    async fn accept_handoff(&self, ctx: &CommandContext, req: AcceptHandoff) -> Result<Receipt<ResumeBody>>;
    /// Withdraws a pending handoff (its sender or a person); the todos go back to the sender.
    async fn cancel_handoff(&self, ctx: &CommandContext, req: CancelHandoff) -> Result<Receipt<HandoffBody>>;
    /// Checks the gates loopx answers itself that are due (or `only`, due or not, but never
    /// twice in a minute), records what it saw and the answers it gives, and tells the person
    /// about their open gates (once, and one reminder). A command gate's check runs for the
    /// context's actor: an agent's command only for that agent, until a person approves it.
    async fn poll_gates(&self, ctx: &CommandContext, only: Option<GateId>) -> Result<GatePoll>;
    /// Pending handoffs, or every handoff with `all`.
    async fn list_handoffs(&self, goal: Option<&GoalId>, all: bool) -> Result<HandoffList>;
    /// `loopx drive`'s lease on the acting agent: start it (refused while another driver's
    /// lease is active, unless the request names that lease as replaced), renew it with the
    /// turn that runs now, or stop it. Called by the driver at start, every few minutes, at
    /// each turn's start, and at its end.
    async fn drive_lease(
        &self,
        ctx: &CommandContext,
        req: crate::drive::DriverRequest,
    ) -> Result<Receipt<crate::drive::DriverBody>>;
    /// Ends the acting agent's driven turn: finds its writeback and spends it once (unless the
    /// agent did, or the goal is paused), records how its command ended and what the host
    /// reported it used (counted against the budget). Ending an ended turn changes nothing;
    /// a writeback for it after this is refused.
    async fn end_turn(
        &self,
        ctx: &CommandContext,
        req: crate::drive::EndTurn,
    ) -> Result<Receipt<crate::drive::TurnEndBody>>;
    /// A turn of `agent` as it stands: its decision's todo, writeback, spend and end.
    async fn turn(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        turn: &str,
    ) -> Result<crate::drive::TurnView>;
    /// What a receiver on `host` (as `agent`, when known) is told first: the oldest pending
    /// handoff it may take, with the goal's progress.
    async fn handoff_packet(
        &self,
        goal: Option<&GoalId>,
        host: AgentType,
        agent: Option<&AgentId>,
    ) -> Result<Option<HandoffPacket>>;
}

/// What `loopx gate poll` did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatePoll {
    pub goal_id: GoalId,
    /// The gates it checked, as they stand now.
    pub checked: Vec<Gate>,
    /// The notices it sent (or tried to): `(gate, error)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notified: Vec<NoticeResult>,
    /// Why a gate asked for was not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeResult {
    /// The gate the notice was about; none for the notice that the goal's work is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateId>,
    pub reminder: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---- handoffs -----------------------------------------------------------------------------

/// How long a handoff waits to be accepted before its todos are free again.
pub const DEFAULT_HANDOFF_TTL_SECS: u64 = 24 * 3600;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OfferHandoff {
    pub to_host: AgentType,
    /// One agent of that host; `None`: whichever of its agents takes it first.
    pub to_agent: Option<AgentId>,
    /// The todos handed over; empty: every open todo the sender holds.
    pub todos: Vec<TodoId>,
    pub note: Option<String>,
    pub ttl_secs: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AcceptHandoff {
    /// The receiving host: the agent type an unregistered receiver registers as.
    pub host: AgentType,
    /// This handoff; `None`: the oldest pending one for the receiver.
    pub handoff: Option<HandoffId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CancelHandoff {
    pub handoff: HandoffId,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffBody {
    /// The handoff, its status as of now.
    pub handoff: Handoff,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffList {
    pub goal_id: GoalId,
    pub handoffs: Vec<Handoff>,
}

/// A done todo and what proves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoneItem {
    pub todo: TodoId,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
}

/// What the receiving side is shown before anything else: the objective, what was done with
/// its evidence, what is left, the questions open to a person, and the sender's note.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffPacket {
    pub handoff: Handoff,
    pub objective: String,
    /// The latest done todos (at most 10), newest last.
    pub done: Vec<DoneItem>,
    /// Open agent todos, the handed-over ones first (at most 20).
    pub left: Vec<TodoSummary>,
    pub gates: Vec<OpenQuestion>,
}

/// `loopx resume`: the handoff taken over, if one waited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResumeBody {
    pub agent: AgentId,
    /// The receiver was registered by this call.
    pub registered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet: Option<HandoffPacket>,
    /// The receiver's next todo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_todo: Option<TodoSummary>,
}

// ---- gates --------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AskGate {
    pub question: String,
    pub blocks: GateBlocks,
    /// A person answers it, or a check loopx makes itself.
    pub kind: crate::model::GateKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnswerGate {
    pub gate: GateId,
    /// `approved`, `rejected` or `cancelled`.
    pub status: GateStatus,
    pub note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateBody {
    pub gate: Gate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateList {
    pub goal_id: GoalId,
    pub gates: Vec<Gate>,
}

// ---- the tick -----------------------------------------------------------------------------

/// `loopx refresh-state`: the durable writeback of a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefreshState {
    pub todo: TodoId,
    pub classification: String,
    pub delivery_outcome: DeliveryOutcome,
    pub next_action: Option<String>,
}

/// A turn settled at once: the todo's completion, the writeback and the spend, committed as
/// one event under the turn id (`complete_task`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SettleTurn {
    pub complete: CompleteTodo,
    pub classification: String,
    pub delivery_outcome: DeliveryOutcome,
    pub slots: u32,
    pub tokens: Option<u64>,
    pub usd: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettleBody {
    pub todo: Todo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<TodoId>,
    /// Evidence the settlement recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceId>,
    pub run: RunId,
    pub spend: SpendId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunBody {
    pub run: RunRecord,
}

/// `loopx quota spend-slot`: account compute after a writeback.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpendSlot {
    pub todo: TodoId,
    pub slots: u32,
    pub tokens: Option<u64>,
    pub usd: Option<f64>,
    /// Validate and preview; commit nothing.
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpendBody {
    pub spend: Spend,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The quota just after the change, for a person's reading; not part of the receipt (a
    /// replayed receipt has none, and its reader asks for the quota now).
    #[serde(skip)]
    pub quota: Option<crate::decision::QuotaView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VoidSlot {
    pub spend: SpendId,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SchedulerReport {
    /// What the host applied (`scheduler-ack`), or `None` with `error` for `scheduler-fail`.
    pub cadence_minutes: Option<u32>,
    pub rrule: Option<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulerBody {
    pub agent_id: AgentId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cadence_minutes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `loopx quota status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaStatus {
    pub goal_id: GoalId,
    pub quota: QuotaView,
    pub paused: bool,
    pub throttled: bool,
    pub budget_exhausted: bool,
    /// The latest spends, newest last (at most 10).
    pub recent_spends: Vec<Spend>,
}

// ---- leases -------------------------------------------------------------------------------

/// What to do with a todo's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LeaseOp {
    Acquire { ttl_secs: u64, write_scope: Vec<String> },
    Renew { ttl_secs: u64 },
    Transfer { to: AgentId },
    Release,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseRequest {
    pub todo: TodoId,
    pub op: LeaseOp,
    /// The lease key: set on acquire, presented on renew, transfer and release.
    pub key: Option<String>,
    /// Compare-and-set: refuse unless the todo's lease version is this.
    pub expected_version: Option<u64>,
}

/// A todo's lease as it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeaseBody {
    pub todo: TodoId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<AgentId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    pub active: bool,
    pub version: u64,
}

// ---- host sessions ------------------------------------------------------------------------

/// A host session (thread) bound to an agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BindThread {
    pub host: String,
    pub thread: String,
}

/// The end of the host name of a session's process (see [`BindThread::process`]).
pub const PROCESS_HOST_SUFFIX: &str = "+process";

impl BindThread {
    /// The host process a session runs in, standing for the session: for a host whose tools see
    /// no session id but run under the same agent process as its hooks (see
    /// `HostAdapter::sessions_by_process`). `key` names one process for its whole life (its
    /// pid and start time). An agent has one such process per host: binding a newer one (the
    /// session resumed in a new process) replaces the older.
    pub fn process(host: &str, key: &str) -> Self {
        Self { host: format!("{host}{PROCESS_HOST_SUFFIX}"), thread: key.to_owned() }
    }

    /// Whether this names a session's process rather than the session.
    pub fn is_process(&self) -> bool {
        is_process_host(&self.host)
    }
}

/// Whether `host` is the host name of a session's process ([`BindThread::process`]).
pub fn is_process_host(host: &str) -> bool {
    host.len() > PROCESS_HOST_SUFFIX.len() && host.ends_with(PROCESS_HOST_SUFFIX)
}

/// What loopx knows of one host session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    pub goal_id: GoalId,
    pub host: String,
    pub thread: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    pub armed: bool,
    /// How often a stop hook has kept this session going.
    pub stop_blocks: u32,
}

/// What a stop hook's turn end came to ([`Kernel::stop_turn`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StopTurn {
    /// The session as the turn ended (its agent, whether armed, its continuations before this).
    pub session: SessionView,
    /// The decision that keeps the session working, recorded as one more continuation; `None`
    /// when the session rests (not armed, at its cap, or should-run says not to run).
    pub continued: Option<crate::decision::ShouldRunAnswer>,
    /// The person's questions the session is shown once more instead, each once: asked since
    /// its loop was armed, they stop it, and the model says what it waits for.
    pub told: Vec<crate::decision::OpenQuestion>,
}

/// What `loopx init` did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InitReport {
    pub project_root: String,
    pub created_project: bool,
    pub created_goal: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalBody>,
    /// Commands that make sense next.
    pub next: Vec<String>,
    /// What the person should know (where a password given with `--store` is not kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
