//! Typed continuations: the decision for a turn as a value, not prose. Every host adapter
//! translates the same value into its host's language (a Stop-hook block, an RRULE, a
//! `followup_message`, an MCP tool result).

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, GateId, HandoffId, TodoId};
use crate::time::Timestamp;

/// Why a goal stopped running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// Stopped by a person, or compute set to 0.
    Paused,
    /// Every todo is done and nothing follows.
    Terminal,
    /// The rolling-window slot allowance is spent.
    Throttled,
    /// The hard token or money budget is spent.
    BudgetExhausted,
    /// A person confirmed the goal is done.
    Done,
}

impl StopCause {
    pub const ALL: [StopCause; 5] = [
        StopCause::Paused,
        StopCause::Terminal,
        StopCause::Throttled,
        StopCause::BudgetExhausted,
        StopCause::Done,
    ];

    /// The word, as in JSON (`budget_exhausted`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::Paused => "paused",
            StopCause::Terminal => "terminal",
            StopCause::Throttled => "throttled",
            StopCause::BudgetExhausted => "budget_exhausted",
            StopCause::Done => "done",
        }
    }
}

/// What an agent should do with its next turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Continuation {
    /// Work on `todo`; claim it first when `claim_required`.
    Run { todo: TodoId, claim_required: bool },
    /// A person must answer these gates; `fallback` is safe work meanwhile, if any.
    AskUser {
        gates: Vec<GateId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<TodoId>,
    },
    /// Nothing to do until a time or an event.
    Wait {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<Timestamp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on: Option<String>,
    },
    /// Nothing is runnable but the goal is not finished: write a bounded todo delta.
    Replan { reason: String },
    /// This agent handed its work to another host or agent: nothing to do until the
    /// handoff is accepted (then look again), cancelled, or expires.
    Handoff {
        handoff: HandoffId,
        to_host: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_agent: Option<AgentId>,
    },
    /// Do not run.
    Stop { cause: StopCause },
}
