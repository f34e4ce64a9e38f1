//! Events: the source of truth. One committed command appends exactly one event line, so a
//! commit is all-or-nothing even when it has several effects (a completion that also creates
//! its successor todo is one event).

use serde::{Deserialize, Serialize};

use crate::agent::AgentType;
use crate::ids::{AgentId, TodoId};
use crate::model::{CompletionContinuation, Evidence, NewTodo, Priority, ResumeWhen, TodoStatus};

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
    },
    GoalStopped {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    GoalResumed {},
    AgentRegistered {
        agent: AgentId,
        agent_type: AgentType,
    },
    TodoAdded {
        todo: NewTodo,
    },
    TodoClaimed {
        todo: TodoId,
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
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Evidence>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<NewTodo>,
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
}

impl Event {
    /// The `kind` tag as written in the log.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::GoalCreated { .. } => "goal_created",
            Event::GoalUpdated { .. } => "goal_updated",
            Event::GoalStopped { .. } => "goal_stopped",
            Event::GoalResumed {} => "goal_resumed",
            Event::AgentRegistered { .. } => "agent_registered",
            Event::TodoAdded { .. } => "todo_added",
            Event::TodoClaimed { .. } => "todo_claimed",
            Event::TodoReleased { .. } => "todo_released",
            Event::TodoUpdated { .. } => "todo_updated",
            Event::TodoCompleted { .. } => "todo_completed",
            Event::TodoSuperseded { .. } => "todo_superseded",
            Event::EvidenceAdded { .. } => "evidence_added",
        }
    }

    /// A one-line summary for `loopx history`.
    pub fn summary(&self) -> String {
        match self {
            Event::GoalCreated { objective, .. } => format!("goal created: {objective}"),
            Event::GoalUpdated { objective: Some(o), .. } => format!("objective set: {o}"),
            Event::GoalUpdated { .. } => "goal updated".to_owned(),
            Event::GoalStopped { reason } => match reason {
                Some(r) => format!("goal stopped: {r}"),
                None => "goal stopped".to_owned(),
            },
            Event::GoalResumed {} => "goal resumed".to_owned(),
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
            Event::TodoSuperseded { todo, by, .. } => {
                let by: Vec<String> = by.iter().map(ToString::to_string).collect();
                format!("{todo} superseded by {}", by.join(", "))
            }
            Event::EvidenceAdded { evidence } => {
                format!("{} on {}: {}", evidence.id, evidence.todo, evidence.summary)
            }
        }
    }
}
