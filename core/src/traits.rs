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
use crate::ids::{AgentId, GateId, TodoId};
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
    /// A pull request: its state, its head commit, and that commit's checks.
    PullRequest { owner: String, repo: String, number: u64 },
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
    PullRequestObserved {
        /// `open` or `closed`.
        state: String,
        merged: bool,
        head_sha: String,
        url: String,
        /// Every check run and commit status of the head commit.
        checks: Vec<CheckResult>,
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

/// One check of a commit: a check run, or a commit status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    /// `queued`, `in_progress`, `completed` (check runs); statuses are always completed.
    pub status: String,
    /// Once completed: `success`, `failure`, `neutral`, `cancelled`, `skipped`, `timed_out`,
    /// `action_required`, `stale`; a status's `success`, `failure`, `error` or `pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<String>,
}

impl CheckResult {
    pub fn passed(&self) -> bool {
        self.status == "completed"
            && matches!(self.conclusion.as_deref(), Some("success" | "neutral" | "skipped"))
    }
    pub fn failed(&self) -> bool {
        self.status == "completed"
            && matches!(
                self.conclusion.as_deref(),
                Some("failure" | "cancelled" | "timed_out" | "action_required" | "error" | "stale")
            )
    }
}

/// What a capability's proposal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    Todo(TodoId),
    Gate(GateId),
}

/// A typed change a capability proposes; the kernel commits or refuses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransitionProposal {
    CompleteTodo {
        todo: TodoId,
        evidence: EvidenceDraft,
    },
    AddEvidence {
        todo: TodoId,
        evidence: EvidenceDraft,
    },
    /// Answer a gate loopx checks itself: approved (what it waited for happened), rejected
    /// (it cannot happen as things stand), or open again (a rejected CI gate's pull request has
    /// a new head commit).
    AnswerGate {
        gate: GateId,
        status: crate::model::GateStatus,
        summary: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_sha: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
    KeepWaiting {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_sha: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
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
        subject: Subject,
        observation: &Observation,
    ) -> std::result::Result<TransitionProposal, Rejection>;
}

/// A message for a person: a gate needs them, or the goal's work is finished and waits for
/// them to confirm it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub goal: crate::ids::GoalId,
    /// The gate that asks; none when the notice is that the goal's work is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateId>,
    pub question: String,
    /// The command that answers it.
    pub answer_with: String,
    pub reminder: bool,
    /// The project the goal is in.
    #[serde(default)]
    pub project: std::path::PathBuf,
}

/// Tells a person. Implementations (a webhook, a local command) live outside the kernel, which
/// records every attempt; a failure never blocks the loop.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Delivers `n` under `policy`; returns the channels used, or why it failed.
    async fn notify(&self, policy: &crate::model::NotifyPolicy, n: &Notification) -> Result<String>;
}
