//! Next steps, typed. The kernel says *what* comes next; each front end renders it in its own
//! language: the CLI as a command line (`loopx todo claim --todo-id t3 …`), the MCP server as
//! a tool call (`claim_task {"todo_id": "t3"}`). A step names only what varies; the goal, the
//! agent and the turn come from the answer it rides in.

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, GoalId, TodoId};

/// One thing to do next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum NextStep {
    /// Ask again whether to run.
    ShouldRun,
    /// Claim the todo (exactly one claimer wins).
    Claim { todo: TodoId },
    /// Take a lease on the todo (hard-lease goals).
    AcquireLease { todo: TodoId, ttl: String },
    /// Complete the todo with evidence.
    Complete { todo: TodoId },
    /// Write the turn back.
    RefreshState { todo: TodoId },
    /// Account the turn's compute.
    SpendSlot { todo: TodoId },
    /// Add the next todo.
    AddTodo,
    /// See every todo.
    ListTodos,
    /// See the questions waiting on a person.
    ListGates,
    /// A person resumes the stopped goal.
    ResumeGoal,
    /// A person gives the paused goal compute again (it was set to 0).
    RestoreCompute,
    /// The goal's status.
    Status,
    /// Record the cadence the host's scheduler applied.
    SchedulerAck {
        cadence_minutes: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rrule: Option<String>,
    },
    /// Record that the host could not apply the scheduler hint.
    SchedulerFail,
    /// Take over the handoff waiting for this host (`loopx resume`).
    Resume { host: String },
}

/// Who takes the steps, on which goal, in which turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepContext<'a> {
    pub goal: Option<&'a GoalId>,
    pub agent: Option<&'a AgentId>,
    pub turn: Option<&'a str>,
}

/// Steps with their context, as an error carries them (the way out of a refusal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Next {
    pub goal: Option<GoalId>,
    pub agent: Option<AgentId>,
    pub turn: Option<String>,
    pub steps: Vec<NextStep>,
}

impl Next {
    pub fn context(&self) -> StepContext<'_> {
        StepContext { goal: self.goal.as_ref(), agent: self.agent.as_ref(), turn: self.turn.as_deref() }
    }
}

impl NextStep {
    /// Every step, with placeholder values: for tests that render each one.
    pub fn examples() -> Vec<NextStep> {
        let t = TodoId::from_number(3);
        vec![
            NextStep::ShouldRun,
            NextStep::Claim { todo: t },
            NextStep::AcquireLease { todo: t, ttl: "45m".to_owned() },
            NextStep::Complete { todo: t },
            NextStep::RefreshState { todo: t },
            NextStep::SpendSlot { todo: t },
            NextStep::AddTodo,
            NextStep::ListTodos,
            NextStep::ListGates,
            NextStep::ResumeGoal,
            NextStep::RestoreCompute,
            NextStep::Status,
            NextStep::SchedulerAck { cadence_minutes: 6, rrule: Some("FREQ=MINUTELY;INTERVAL=6".to_owned()) },
            NextStep::SchedulerAck { cadence_minutes: 3, rrule: None },
            NextStep::SchedulerFail,
            NextStep::Resume { host: "my-host".to_owned() },
        ]
    }
}
