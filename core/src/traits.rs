//! The extension points around the kernel: agents act, providers observe the world,
//! capabilities turn observations into proposals. (Host adapters are in [`crate::host`].)
//!
//! Execution path: Agent → Capability → Provider → world. Control path back: Provider readback
//! → Capability (typed, validated proposal) → Kernel (commits or refuses). None of these
//! writes `.loopx/`; only the kernel does.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::agent::AgentType;
use crate::continuation::Continuation;
use crate::error::Result;
use crate::ids::{AgentId, TodoId};
use crate::model::{EvidenceKind, Priority};
use crate::time::Timestamp;

/// Proof an agent or capability proposes to attach to a todo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceDraft {
    pub kind: EvidenceKind,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
}

/// A todo an agent proposes: one line of a replan's bounded delta.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoDraft {
    pub text: String,
    pub priority: Priority,
    /// A check (argv, no shell) the kernel must see pass before the todo completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Vec<String>>,
}

/// Work an agent passes on: the receiving host and what it should know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffDraft {
    pub to_host: AgentType,
    pub note: String,
}

/// What an agent reports after one bounded turn. Everything in it is a proposal: the kernel
/// checks the evidence, gates the question and records the handoff, or refuses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnReport {
    pub todo: Option<TodoId>,
    pub summary: String,
    pub evidence: Vec<EvidenceDraft>,
    /// The agent believes the todo is done; the kernel still checks the evidence.
    pub completed: bool,
    /// Nothing follows from the completed todo (it may end the goal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_follow_up: bool,
    /// Todos to add (a replan).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<TodoDraft>,
    /// A question only a person can answer; it holds the turn's todo until answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// Pass the turn's todo to another host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffDraft>,
}

/// One registered peer acting through a host.
#[async_trait]
pub trait Agent: Send + Sync {
    /// The registered id. Stable for the agent's life.
    fn id(&self) -> &AgentId;
    /// Which host the agent acts through; decides its runtime profile.
    fn agent_type(&self) -> AgentType;
    /// Performs one bounded turn for `continuation` and reports what it did. Called once per
    /// turn the kernel allows; never called for `Stop` or `Wait`. Need not be idempotent: the
    /// kernel's turn ids make the writeback idempotent instead.
    async fn act(&self, continuation: &Continuation) -> Result<TurnReport>;
}

/// What a provider asks of the outside world.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObservationRequest {
    /// Run a command (argv, no shell) in `cwd`, bounded by `timeout_ms`.
    RunCommand { argv: Vec<String>, cwd: PathBuf, timeout_ms: u64 },
    /// Ask a check service whether the named check is green.
    CheckStatus { name: String },
    /// Read the time.
    Now,
}

/// A provider's raw readback. An observation is not a transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Observation {
    CommandExited {
        argv: Vec<String>,
        /// `None` when the command was killed (time-out or signal).
        exit_code: Option<i32>,
        output_digest: String,
        duration_ms: u64,
    },
    CheckReported {
        name: String,
        green: bool,
        detail: String,
    },
    TimeObserved {
        now: Timestamp,
    },
}

/// Calls to an external system and their raw readback. Swappable and mockable.
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short stable name (`process`, `github`).
    fn name(&self) -> &'static str;
    /// Performs `request` and returns what was seen. May be called any number of times; has
    /// no effect on loopx state. A request this provider does not serve returns an error of
    /// kind `Usage`.
    async fn observe(&self, request: &ObservationRequest) -> Result<Observation>;
}

/// A typed change a capability proposes; the kernel commits or refuses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransitionProposal {
    CompleteTodo { todo: TodoId, evidence: EvidenceDraft },
    AddEvidence { todo: TodoId, evidence: EvidenceDraft },
    KeepWaiting { reason: String },
}

/// Why an observation does not support a transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub reason: String,
}

/// The outcome contract: normalises and validates observations into proposals.
pub trait Capability: Send + Sync {
    /// A short stable name (`validation-command`, `ci-green`, `timer`).
    fn name(&self) -> &'static str;
    /// Pure: the same observation always gives the same answer. Never schedules, claims or
    /// writes. An observation of a kind this capability does not understand is a rejection.
    fn validate(
        &self,
        todo: TodoId,
        observation: &Observation,
    ) -> std::result::Result<TransitionProposal, Rejection>;
}
