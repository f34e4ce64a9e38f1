//! Events: the source of truth. One committed command appends exactly one event line, so a
//! commit is all-or-nothing even when it has several effects (a completion that also creates
//! its successor todo is one event).

use serde::{Deserialize, Serialize};

use crate::agent::AgentType;
use crate::decision::DecisionRecord;
use crate::drive::{DriverLease, TurnBrake, TurnEnd};
use crate::ids::{AgentId, GateId, HandoffId, SpendId, TodoId};
use crate::model::{
    Brakes, CompletionContinuation, Evidence, GateBlocks, GateCheck, GateKind, GateStatus, Handoff,
    HandoffMode, NewTodo, NotifyPolicy, Priority, QuotaPolicy, ResumeWhen, RunRecord, Spend, TodoStatus,
};
use crate::time::Timestamp;

/// What happened. Serialised adjacently tagged: `"kind":"todo_added","data":{…}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum Event {
    GoalCreated {
        objective: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    GoalUpdated {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        objective: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// The whole new quota policy, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quota: Option<QuotaPolicy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handoff_mode: Option<HandoffMode>,
        /// The whole new write scope, when it changed (empty: no limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        write_scope: Option<Vec<String>>,
        /// The whole new notify policy, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notify: Option<NotifyPolicy>,
        /// Nobody is notified any more.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        clear_notify: bool,
        /// The whole new brakes of `loopx drive`, when they changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        brakes: Option<Brakes>,
        /// The person pointed the goal's webhook at another URL: the URL is kept in their own
        /// configuration, never here, so the log says only that where notices go changed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        webhook_changed: bool,
    },
    GoalStopped {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Stop now: a running driven turn is ended at once (`goal stop --now`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        now: bool,
    },
    GoalResumed {},
    /// A person confirmed the goal's objective is met: agents stop (`done`) until it is
    /// resumed.
    GoalCompleted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A notice that the goal's work is finished (every todo closed, nothing follows): `todos`
    /// is how many todos the goal had then, so work added and finished again is told again.
    FinishNotified {
        todos: u64,
        /// `webhook`, `command`, or both, comma-separated.
        channel: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        attempt: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The person's key (Ed25519, hex): from now on the goal takes a person's decision only
    /// signed by it (strict mode). Signed itself by the key it sets.
    PersonKeySet {
        public_key: String,
    },
    /// This loopx took over a goal written before the archive: `archived` closed todos left
    /// the live state for `archive.jsonl`. Changes no work.
    StoreUpgraded {
        archived: u64,
    },
    /// The goal was brought over from another tool's state by `loopx import`: what it was
    /// read from, and a digest of the bytes read, so importing the same source again changes
    /// nothing. Changes no work.
    Imported {
        source: String,
        digest: String,
    },
    AgentRegistered {
        agent: AgentId,
        agent_type: AgentType,
    },
    TodoAdded {
        todo: NewTodo,
    },
    TodoClaimed {
        todo: TodoId,
        #[serde(default = "crate::line::lines_agent", skip_serializing_if = "crate::line::is_lines_agent")]
        agent: AgentId,
    },
    TodoReleased {
        todo: TodoId,
    },
    TodoUpdated {
        todo: TodoId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<Priority>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<TodoStatus>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_when: Option<ResumeWhen>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        clear_claim: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Evidence>,
    },
    TodoCompleted {
        todo: TodoId,
        continuation: CompletionContinuation,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// The validation the kernel ran, then what the agent gave.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        evidence: Vec<Evidence>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<NewTodo>,
    },
    /// Nothing follows a todo completed before: its completion now says so (a replan turn that
    /// found nothing left to do). The goal's work is finished once nothing else is open.
    NothingFollows {
        todo: TodoId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    TodoSuperseded {
        todo: TodoId,
        /// Existing and newly created replacements, in order.
        by: Vec<TodoId>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        new: Vec<NewTodo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    EvidenceAdded {
        evidence: Evidence,
    },
    LeaseAcquired {
        todo: TodoId,
        owner: AgentId,
        expires_at: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        write_scope: Vec<String>,
    },
    LeaseRenewed {
        todo: TodoId,
        expires_at: Timestamp,
    },
    LeaseTransferred {
        todo: TodoId,
        to: AgentId,
    },
    LeaseReleased {
        todo: TodoId,
    },
    /// A claim moved from one agent to another, explicitly.
    TodoTakenOver {
        todo: TodoId,
        from: AgentId,
        to: AgentId,
        reason: String,
    },
    GateAsked {
        gate: GateId,
        question: String,
        blocks: GateBlocks,
        #[serde(default, skip_serializing_if = "GateKind::is_person")]
        kind: GateKind,
    },
    /// loopx checked a gate it answers itself: what it saw, and the answer it gives, if any
    /// (`open` re-arms a rejected gate whose pull request has a new head commit).
    GateChecked {
        gate: GateId,
        check: GateCheck,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verdict: Option<GateStatus>,
    },
    /// loopx told the person about their gate, or failed to, or (`attempt`) is about to: the
    /// attempt is recorded first, so two processes never send the same notice.
    GateNotified {
        gate: GateId,
        /// `webhook`, `command`, or both, comma-separated.
        channel: String,
        reminder: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        attempt: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    GateAnswered {
        gate: GateId,
        status: GateStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    DecisionRecorded {
        record: DecisionRecord,
    },
    RunRecorded {
        run: RunRecord,
    },
    SlotSpent {
        spend: Spend,
    },
    SlotVoided {
        spend: SpendId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    SchedulerAcked {
        agent: AgentId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cadence_minutes: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rrule: Option<String>,
    },
    SchedulerFailed {
        agent: AgentId,
        error: String,
    },
    /// A host session (thread) acts as this agent from now on.
    ThreadBound {
        agent: AgentId,
        host: String,
        thread: String,
    },
    /// A host session no longer acts as this agent.
    ThreadUnbound {
        agent: AgentId,
        host: String,
        thread: String,
    },
    /// The agent's host loop is armed (hooks may keep it going) or disarmed.
    LoopArmed {
        agent: AgentId,
        armed: bool,
    },
    /// A host's stop hook kept the agent working once more in this thread: to work on, or, when
    /// `told` names gates, to show the session the questions asked of a person since it was
    /// armed (each once), so the model can say what it waits for.
    StopBlocked {
        agent: AgentId,
        thread: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        told: Vec<GateId>,
    },
    /// An agent handed work to another host or agent; its claims (and leases) on the todos
    /// are released and reserved for the receiver.
    HandoffOffered {
        handoff: Handoff,
    },
    /// The receiver took a handoff over: registered when `registered` says so, the todos
    /// claimed (and their leases transferred) in this one commit.
    HandoffAccepted {
        handoff: HandoffId,
        from: AgentId,
        agent: AgentId,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        todos: Vec<TodoId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registered: Option<AgentType>,
    },
    /// The sender or a person withdrew a pending handoff; the todos go back to the sender.
    HandoffCancelled {
        handoff: HandoffId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A turn settled in one commit: the todo's completion (absent when it was already
    /// complete), the writeback, and the spend, applied in order.
    TurnSettled {
        steps: Vec<Event>,
    },
    /// A `loopx drive` took the agent's driver lease; `replaced` names the lease of a driver
    /// that died without giving it up.
    DriverStarted {
        lease: DriverLease,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaced: Option<String>,
    },
    /// The driver extended its lease and said which turn runs now (none: between turns).
    DriverRenewed {
        agent: AgentId,
        id: String,
        expires_at: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        todo: Option<TodoId>,
    },
    /// The driver gave its lease up.
    DriverStopped {
        agent: AgentId,
        id: String,
        reason: String,
    },
    /// A driven turn ended: how its command ended, its writeback, and the spend this end made
    /// when the writeback was not yet accounted (the turn's tokens and cost count against the
    /// budget here).
    TurnEnded {
        end: TurnEnd,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spend: Option<Spend>,
        /// The brakes' count of the turn's todo, and the question they open for a person.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        brake: Option<Box<TurnBrake>>,
    },
}

/// A key's first 16 hex digits, as people read it.
pub fn key_short(key: &str) -> &str {
    key.get(..16).unwrap_or(key)
}

impl Event {
    /// Whether the event changes the goal's work (as opposed to recording a poll or a
    /// scheduler acknowledgement). Unchanged-poll backoff resets on such events.
    pub fn changes_work(&self) -> bool {
        !matches!(
            self,
            Event::DecisionRecorded { .. }
                | Event::StoreUpgraded { .. }
                | Event::Imported { .. }
                | Event::SchedulerAcked { .. }
                | Event::SchedulerFailed { .. }
                | Event::StopBlocked { .. }
                | Event::DriverStarted { .. }
                | Event::DriverRenewed { .. }
                | Event::DriverStopped { .. }
                | Event::FinishNotified { .. }
        )
    }

    /// Whether the event, made by a person (`user`), is a person's decision: in strict mode it
    /// must be signed by the person's key. Changing the goal, stopping, resuming or completing
    /// it, voiding a spend, answering a gate, setting the key.
    pub fn is_persons_decision(&self) -> bool {
        matches!(
            self,
            Event::GoalUpdated { .. }
                | Event::GoalStopped { .. }
                | Event::GoalResumed {}
                | Event::GoalCompleted { .. }
                | Event::SlotVoided { .. }
                | Event::GateAnswered { .. }
                | Event::PersonKeySet { .. }
        )
    }

    /// When the event's own records say it happened: the time of its spend, run or evidence.
    /// A commit writes its line at that time when it can (the records then leave their time
    /// out, [`crate::line`]).
    pub fn own_time(&self) -> Option<Timestamp> {
        match self {
            Event::SlotSpent { spend } | Event::TurnEnded { spend: Some(spend), .. } => Some(spend.at),
            Event::RunRecorded { run } => Some(run.at),
            Event::EvidenceAdded { evidence } => Some(evidence.at),
            Event::TodoUpdated { evidence: Some(evidence), .. } => Some(evidence.at),
            Event::TodoCompleted { evidence, .. } => evidence.first().map(|e| e.at),
            Event::TurnSettled { steps } => steps.iter().find_map(Event::own_time),
            _ => None,
        }
    }

    /// Whether the event may be a step of a [`Event::TurnSettled`].
    pub fn settles_a_turn(&self) -> bool {
        matches!(self, Event::TodoCompleted { .. } | Event::RunRecorded { .. } | Event::SlotSpent { .. })
    }

    /// The `kind` tag as written in the log.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::GoalCreated { .. } => "goal_created",
            Event::GoalUpdated { .. } => "goal_updated",
            Event::GoalStopped { .. } => "goal_stopped",
            Event::GoalResumed {} => "goal_resumed",
            Event::GoalCompleted { .. } => "goal_completed",
            Event::FinishNotified { .. } => "finish_notified",
            Event::PersonKeySet { .. } => "person_key_set",
            Event::StoreUpgraded { .. } => "store_upgraded",
            Event::Imported { .. } => "imported",
            Event::AgentRegistered { .. } => "agent_registered",
            Event::TodoAdded { .. } => "todo_added",
            Event::TodoClaimed { .. } => "todo_claimed",
            Event::TodoReleased { .. } => "todo_released",
            Event::TodoUpdated { .. } => "todo_updated",
            Event::TodoCompleted { .. } => "todo_completed",
            Event::NothingFollows { .. } => "nothing_follows",
            Event::TodoSuperseded { .. } => "todo_superseded",
            Event::EvidenceAdded { .. } => "evidence_added",
            Event::LeaseAcquired { .. } => "lease_acquired",
            Event::LeaseRenewed { .. } => "lease_renewed",
            Event::LeaseTransferred { .. } => "lease_transferred",
            Event::LeaseReleased { .. } => "lease_released",
            Event::TodoTakenOver { .. } => "todo_taken_over",
            Event::GateAsked { .. } => "gate_asked",
            Event::GateChecked { .. } => "gate_checked",
            Event::GateNotified { .. } => "gate_notified",
            Event::GateAnswered { .. } => "gate_answered",
            Event::DecisionRecorded { .. } => "decision_recorded",
            Event::RunRecorded { .. } => "run_recorded",
            Event::SlotSpent { .. } => "slot_spent",
            Event::SlotVoided { .. } => "slot_voided",
            Event::SchedulerAcked { .. } => "scheduler_acked",
            Event::SchedulerFailed { .. } => "scheduler_failed",
            Event::ThreadBound { .. } => "thread_bound",
            Event::ThreadUnbound { .. } => "thread_unbound",
            Event::LoopArmed { .. } => "loop_armed",
            Event::StopBlocked { .. } => "stop_blocked",
            Event::HandoffOffered { .. } => "handoff_offered",
            Event::HandoffAccepted { .. } => "handoff_accepted",
            Event::HandoffCancelled { .. } => "handoff_cancelled",
            Event::TurnSettled { .. } => "turn_settled",
            Event::DriverStarted { .. } => "driver_started",
            Event::DriverRenewed { .. } => "driver_renewed",
            Event::DriverStopped { .. } => "driver_stopped",
            Event::TurnEnded { .. } => "turn_ended",
        }
    }

    /// A one-line summary for `loopx history`.
    pub fn summary(&self) -> String {
        match self {
            Event::GoalCreated { objective, .. } => format!("goal created: {objective}"),
            Event::GoalUpdated { objective: Some(o), .. } => format!("objective set: {o}"),
            Event::GoalUpdated { quota: Some(q), .. } => format!(
                "quota set: compute {}, {} slots per {} h",
                q.compute,
                q.effective_allowed_slots(),
                q.window_hours
            ),
            Event::GoalUpdated { write_scope: Some(w), .. } if w.is_empty() => {
                "write scope cleared".to_owned()
            }
            Event::GoalUpdated { write_scope: Some(w), .. } => format!("write scope set: {}", w.join(" ")),
            Event::GoalUpdated { notify: Some(n), .. } => {
                let mut how = Vec::new();
                if n.webhook.is_some() {
                    how.push(format!("a {} webhook", n.format));
                }
                if let Some(c) = &n.command {
                    how.push(format!("`{}`", c.join(" ")));
                }
                format!("the person is notified through {}", how.join(" and "))
            }
            Event::GoalUpdated { clear_notify: true, .. } => "notifications off".to_owned(),
            Event::GoalUpdated { webhook_changed: true, .. } => {
                "notices go to another webhook URL (kept in the person's configuration)".to_owned()
            }
            Event::GoalUpdated { .. } => "goal updated".to_owned(),
            Event::GoalStopped { reason, now } => {
                let how = if *now { "goal stopped now (a running turn is ended)" } else { "goal stopped" };
                match reason {
                    Some(r) => format!("{how}: {r}"),
                    None => how.to_owned(),
                }
            }
            Event::GoalResumed {} => "goal resumed".to_owned(),
            Event::GoalCompleted { note } => match note {
                Some(n) => format!("goal completed: {n}"),
                None => "goal completed".to_owned(),
            },
            Event::FinishNotified { channel, attempt, error, .. } => match (attempt, error) {
                (true, _) => format!("the work is finished: telling the person ({channel})"),
                (false, Some(e)) => format!("the notice that the work is finished failed ({channel}): {e}"),
                (false, None) => format!("the person was told the work is finished ({channel})"),
            },
            Event::PersonKeySet { public_key } => {
                format!("strict mode: a person's decisions are signed by key {}", key_short(public_key))
            }
            Event::StoreUpgraded { archived } => {
                format!("store upgraded: {archived} closed todo(s) moved to the archive")
            }
            Event::Imported { source, .. } => format!("imported from {source}"),
            Event::AgentRegistered { agent, agent_type } => {
                format!("agent {agent} registered ({agent_type})")
            }
            Event::TodoAdded { todo } => format!("{} added: {}", todo.id, todo.text),
            Event::TodoClaimed { todo, agent } => format!("{todo} claimed by {agent}"),
            Event::TodoReleased { todo } => format!("{todo} released"),
            Event::TodoUpdated { todo, status, note, .. } => match (status, note) {
                (Some(s), _) => format!("{todo} marked {s}"),
                (None, Some(n)) => format!("{todo} note: {n}"),
                _ => format!("{todo} updated"),
            },
            Event::TodoCompleted { todo, successor, .. } => match successor {
                Some(s) => format!("{todo} completed; successor {}", s.id),
                None => format!("{todo} completed"),
            },
            Event::NothingFollows { todo, note } => match note {
                Some(n) => format!("nothing follows {todo}: {n}"),
                None => format!("nothing follows {todo}"),
            },
            Event::TodoSuperseded { todo, by, .. } => {
                let by: Vec<String> = by.iter().map(ToString::to_string).collect();
                format!("{todo} superseded by {}", by.join(", "))
            }
            Event::EvidenceAdded { evidence } => {
                format!("{} on {}: {}", evidence.id, evidence.todo, evidence.summary)
            }
            Event::LeaseAcquired { todo, owner, expires_at, .. } => {
                format!("lease on {todo} acquired by {owner} until {expires_at}")
            }
            Event::LeaseRenewed { todo, expires_at } => format!("lease on {todo} renewed until {expires_at}"),
            Event::LeaseTransferred { todo, to } => format!("lease on {todo} transferred to {to}"),
            Event::LeaseReleased { todo } => format!("lease on {todo} released"),
            Event::TodoTakenOver { todo, from, to, reason } => {
                format!("{todo} taken over from {from} by {to}: {reason}")
            }
            Event::GateAsked { gate, question, blocks, kind } if kind.is_person() => {
                format!("{gate} asked ({blocks}): {question}")
            }
            Event::GateAsked { gate, blocks, kind, .. } => {
                format!("{gate} waits for {} ({blocks})", kind.describe())
            }
            Event::GateChecked { gate, check, verdict } => match verdict {
                Some(GateStatus::Open) => format!("{gate} re-armed: {}", check.summary),
                Some(s) => format!("{gate} {s} by loopx: {}", check.summary),
                None => format!("{gate} checked: {}", check.summary),
            },
            Event::GateNotified { gate, channel, reminder, attempt, error } => {
                let what = if *reminder { "reminder" } else { "notice" };
                match (attempt, error) {
                    (true, _) => format!("{gate}: sending the person a {what} ({channel})"),
                    (false, Some(e)) => format!("{gate}: the {what} to the person failed ({channel}): {e}"),
                    (false, None) => format!("{gate}: the person was sent a {what} ({channel})"),
                }
            }
            Event::GateAnswered { gate, status, .. } => format!("{gate} {status}"),
            Event::DecisionRecorded { record } => match record.todo() {
                Some(t) => {
                    format!(
                        "turn {} for {}: {} on {t}",
                        record.turn,
                        record.agent,
                        record.decision().as_str()
                    )
                }
                None => format!("turn {} for {}: {}", record.turn, record.agent, record.decision().as_str()),
            },
            Event::RunRecorded { run } => {
                format!(
                    "{} by {} on {}: {} ({})",
                    run.id, run.agent, run.todo, run.classification, run.delivery_outcome
                )
            }
            Event::SlotSpent { spend } => {
                format!("{} spent {} slot(s) for {} on {}", spend.agent, spend.slots, spend.id, spend.todo)
            }
            Event::SlotVoided { spend, .. } => format!("{spend} voided"),
            Event::SchedulerAcked { agent, cadence_minutes, .. } => match cadence_minutes {
                Some(m) => format!("{agent} applied a cadence of {m} min"),
                None => format!("{agent} acknowledged the scheduler hint"),
            },
            Event::SchedulerFailed { agent, error } => format!("{agent} could not apply the hint: {error}"),
            Event::ThreadBound { agent, host, thread } => format!("{host} session {thread} acts as {agent}"),
            Event::ThreadUnbound { agent, host, thread } => {
                format!("{host} session {thread} no longer acts as {agent}")
            }
            Event::LoopArmed { agent, armed: true } => format!("{agent}'s loop armed"),
            Event::LoopArmed { agent, armed: false } => format!("{agent}'s loop disarmed"),
            Event::StopBlocked { agent, thread, told } if told.is_empty() => {
                format!("{agent} kept going in session {thread}")
            }
            Event::StopBlocked { agent, thread, told } => {
                let gates: Vec<String> = told.iter().map(ToString::to_string).collect();
                format!("{agent}'s session {thread} was shown {}", gates.join(", "))
            }
            Event::HandoffOffered { handoff: h } => {
                let what = if h.todos.is_empty() {
                    "the goal".to_owned()
                } else {
                    ids(h.todos.iter().map(|t| t.todo))
                };
                let note = h.note.as_ref().map(|n| format!(": {n}")).unwrap_or_default();
                format!("{} handed {what} off to {} ({}){note}", h.from, h.receiver(), h.id)
            }
            Event::HandoffAccepted { handoff, from, agent, todos, .. } if todos.is_empty() => {
                format!("{agent} took over from {from} ({handoff})")
            }
            Event::HandoffAccepted { handoff, from, agent, todos, .. } => {
                format!("{agent} took over {} from {from} ({handoff})", ids(todos.iter().copied()))
            }
            Event::HandoffCancelled { handoff, reason } => match reason {
                Some(r) => format!("{handoff} cancelled: {r}"),
                None => format!("{handoff} cancelled"),
            },
            Event::TurnSettled { steps } => {
                let parts: Vec<String> = steps.iter().map(Event::summary).collect();
                format!("turn settled: {}", parts.join("; "))
            }
            Event::DriverStarted { lease, replaced } => {
                let replaced = replaced.as_ref().map(|r| format!(", replacing {r}")).unwrap_or_default();
                format!(
                    "{} driven by loopx drive ({}, pid {} on {}{replaced})",
                    lease.agent, lease.host, lease.pid, lease.machine
                )
            }
            Event::DriverRenewed { agent, turn: Some(t), todo, .. } => match todo {
                Some(todo) => format!("{agent}'s driver runs turn {t} on {todo}"),
                None => format!("{agent}'s driver runs turn {t}"),
            },
            Event::DriverRenewed { agent, expires_at, .. } => {
                format!("{agent}'s driver lease renewed until {expires_at}")
            }
            Event::DriverStopped { agent, reason, .. } => format!("{agent}'s driver stopped: {reason}"),
            Event::TurnEnded { end, brake, .. } => {
                let asked = brake
                    .as_ref()
                    .and_then(|b| b.gate.as_ref())
                    .map(|g| format!("; the brakes ask the person ({}): {}", g.id, g.question))
                    .unwrap_or_default();
                format!("turn {} of {} ended: {}{asked}", end.turn, end.agent, end.describe())
            }
        }
    }

    /// The todos the event is about (for `loopx history --todo`).
    pub fn todos(&self) -> Vec<TodoId> {
        match self {
            Event::TodoAdded { todo } => vec![todo.id],
            Event::TodoClaimed { todo, .. }
            | Event::TodoReleased { todo }
            | Event::TodoUpdated { todo, .. }
            | Event::TodoSuperseded { todo, .. }
            | Event::NothingFollows { todo, .. }
            | Event::LeaseAcquired { todo, .. }
            | Event::LeaseRenewed { todo, .. }
            | Event::LeaseTransferred { todo, .. }
            | Event::LeaseReleased { todo }
            | Event::TodoTakenOver { todo, .. } => vec![*todo],
            Event::TodoCompleted { todo, successor, .. } => {
                std::iter::once(*todo).chain(successor.as_ref().map(|s| s.id)).collect()
            }
            Event::EvidenceAdded { evidence } => vec![evidence.todo],
            Event::GateAsked { blocks: GateBlocks::Todos(ids), .. } => ids.clone(),
            Event::DecisionRecorded { record } => record.todo().into_iter().collect(),
            Event::RunRecorded { run } => vec![run.todo],
            Event::SlotSpent { spend } => vec![spend.todo],
            Event::HandoffOffered { handoff } => handoff.todos.iter().map(|t| t.todo).collect(),
            Event::HandoffAccepted { todos, .. } => todos.clone(),
            Event::TurnSettled { steps } => steps.iter().flat_map(Event::todos).collect(),
            Event::DriverRenewed { todo: Some(t), .. } => vec![*t],
            Event::TurnEnded { end, .. } => end.todo.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The turn the event belongs to, when it names one.
    pub fn turn(&self) -> Option<&str> {
        match self {
            Event::DecisionRecorded { record } => Some(&record.turn),
            Event::RunRecorded { run } => run.turn.as_deref(),
            Event::SlotSpent { spend } => spend.turn.as_deref(),
            Event::DriverRenewed { turn, .. } => turn.as_deref(),
            Event::TurnEnded { end, .. } => Some(&end.turn),
            Event::TurnSettled { steps } => steps.iter().find_map(Event::turn),
            _ => None,
        }
    }

    /// The agents the event names besides its actor (for `loopx history --agent`).
    pub fn agents(&self) -> Vec<&AgentId> {
        match self {
            Event::AgentRegistered { agent, .. }
            | Event::TodoClaimed { agent, .. }
            | Event::SchedulerAcked { agent, .. }
            | Event::SchedulerFailed { agent, .. }
            | Event::ThreadBound { agent, .. }
            | Event::ThreadUnbound { agent, .. }
            | Event::LoopArmed { agent, .. }
            | Event::StopBlocked { agent, .. } => vec![agent],
            Event::LeaseAcquired { owner, .. } => vec![owner],
            Event::LeaseTransferred { to, .. } => vec![to],
            Event::TodoTakenOver { from, to, .. } => vec![from, to],
            Event::GateAsked { blocks: GateBlocks::Agent(a), .. } => vec![a],
            Event::DecisionRecorded { record } => vec![&record.agent],
            Event::RunRecorded { run } => vec![&run.agent],
            Event::SlotSpent { spend } => vec![&spend.agent],
            Event::HandoffOffered { handoff } => {
                std::iter::once(&handoff.from).chain(handoff.to_agent.as_ref()).collect()
            }
            Event::HandoffAccepted { from, agent, .. } => vec![from, agent],
            Event::TurnSettled { steps } => steps.iter().flat_map(Event::agents).collect(),
            Event::DriverStarted { lease, .. } => vec![&lease.agent],
            Event::DriverRenewed { agent, .. } | Event::DriverStopped { agent, .. } => vec![agent],
            Event::TurnEnded { end, .. } => vec![&end.agent],
            _ => Vec::new(),
        }
    }
}

fn ids(todos: impl Iterator<Item = TodoId>) -> String {
    todos.map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}
