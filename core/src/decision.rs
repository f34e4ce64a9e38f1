//! The answer to "should this agent run now, and on what?" (the decision table in
//! ARCHITECTURE.md).

use serde::{Deserialize, Serialize};

use crate::continuation::Continuation;
use crate::ids::{AgentId, GateId, GoalId, TodoId};
use crate::model::{Priority, RuntimeProfile};
use crate::next::NextStep;
use crate::time::Timestamp;

/// The decision, as a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Run,
    AskUser,
    Wait,
    Replan,
    Handoff,
    Stop,
}

impl DecisionKind {
    pub const ALL: [DecisionKind; 6] = [
        DecisionKind::Run,
        DecisionKind::AskUser,
        DecisionKind::Wait,
        DecisionKind::Replan,
        DecisionKind::Handoff,
        DecisionKind::Stop,
    ];

    /// The word, as in JSON (`ask_user`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Run => "run",
            DecisionKind::AskUser => "ask_user",
            DecisionKind::Wait => "wait",
            DecisionKind::Replan => "replan",
            DecisionKind::Handoff => "handoff",
            DecisionKind::Stop => "stop",
        }
    }
}

/// The goal's state as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// A person confirmed the goal is done.
    Done,
    Paused,
    BudgetExhausted,
    Terminal,
    OperatorGate,
    Throttled,
    Waiting,
    Eligible,
}

/// The todo picked for the turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectedTodo {
    pub id: TodoId,
    pub text: String,
    pub priority: Priority,
    /// The agent must `todo claim` it before working (it is not yet its own).
    pub claim_required: bool,
    /// The kernel runs this before accepting completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
}

/// A question waiting on a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenQuestion {
    pub gate: GateId,
    pub question: String,
    /// `goal`, `agent:<id>` or `todos:<ids>`.
    pub blocks: String,
    /// For a gate loopx answers itself: `timer`, `command`, `ci` or `pr-merged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What loopx saw the last time it checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<String>,
    /// When it checks next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_at: Option<Timestamp>,
}

/// What the agent should surface to its person.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserChannel {
    pub notify: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<OpenQuestion>,
    /// Open todos only a person can do.
    pub user_todos: usize,
}

/// Quota numbers at decision time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaView {
    pub compute: f64,
    pub window_hours: u32,
    pub slot_minutes: u32,
    pub allowed_slots: u32,
    pub used_slots: u32,
    /// When the next slot frees, if none is free now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_slot_at: Option<Timestamp>,
    pub tokens_used: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
    pub usd_used: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// What a host scheduler should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerAction {
    RunNow,
    Backoff,
    WaitForUser,
    WaitUntil,
    StopUntilResume,
}

impl SchedulerAction {
    pub const ALL: [SchedulerAction; 5] = [
        SchedulerAction::RunNow,
        SchedulerAction::Backoff,
        SchedulerAction::WaitForUser,
        SchedulerAction::WaitUntil,
        SchedulerAction::StopUntilResume,
    ];

    /// The word, as in JSON (`stop_until_resume`).
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerAction::RunNow => "run_now",
            SchedulerAction::Backoff => "backoff",
            SchedulerAction::WaitForUser => "wait_for_user",
            SchedulerAction::WaitUntil => "wait_until",
            SchedulerAction::StopUntilResume => "stop_until_resume",
        }
    }
}

/// The cadence advice for the agent's runtime profile. Changing cadence never spends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerHint {
    pub profile: RuntimeProfile,
    pub action: SchedulerAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cadence_minutes: Option<u32>,
    pub reason_code: String,
    /// Recorded polls since the goal's work last changed.
    pub unchanged_polls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged_poll_limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_until: Option<Timestamp>,
    /// Codex App heartbeat: the automation's RRULE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrule: Option<String>,
    /// The step that records the cadence the host applied (`ack_command` on the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<NextStep>,
    /// The step that records a failure to apply it (`fail_command` on the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<NextStep>,
}

/// The turn a decision was recorded for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRef {
    pub id: String,
    /// The event that recorded the decision.
    pub recorded_seq: u64,
    /// True when this turn's decision had been recorded before: the same decision again.
    pub replayed: bool,
}

/// `loopx quota should-run`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShouldRunAnswer {
    pub goal_id: GoalId,
    /// The acting agent; absent only when the goal is paused and no agent was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    pub decision: DecisionKind,
    pub should_run: bool,
    pub reason: String,
    pub state: RunState,
    pub continuation: Continuation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_todo: Option<SelectedTodo>,
    pub user_channel: UserChannel,
    pub quota: QuotaView,
    pub scheduler: SchedulerHint,
    /// What to do next, typed: the CLI prints these as `next_commands`, the MCP server as
    /// `next_tools`.
    pub next: Vec<NextStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnRef>,
}

/// A decision recorded for a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    #[serde(default = "crate::line::lines_agent", skip_serializing_if = "crate::line::is_lines_agent")]
    pub agent: AgentId,
    pub turn: String,
    pub state: RunState,
    pub continuation: Continuation,
}

impl DecisionRecord {
    pub fn decision(&self) -> DecisionKind {
        self.continuation.kind()
    }

    /// The todo the turn is bound to: refresh-state and spend-slot of this turn must name it.
    pub fn todo(&self) -> Option<TodoId> {
        match self.continuation {
            Continuation::Run { todo, .. } => Some(todo),
            _ => None,
        }
    }
}

// A continuation's decision is told here, beside the decisions, so continuations name none.
impl Continuation {
    /// The decision this continuation carries.
    pub fn kind(&self) -> DecisionKind {
        use DecisionKind as K;
        match self {
            Continuation::Run { .. } => K::Run,
            Continuation::AskUser { .. } => K::AskUser,
            Continuation::Wait { .. } => K::Wait,
            Continuation::Replan { .. } => K::Replan,
            Continuation::Handoff { .. } => K::Handoff,
            Continuation::Stop { .. } => K::Stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continuation::StopCause;

    #[test]
    fn words_are_the_json_words() {
        for k in DecisionKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for a in SchedulerAction::ALL {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        for c in StopCause::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }
}
