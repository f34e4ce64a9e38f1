//! The domain: goals, agents, todos, evidence, gates and quota policy.
//!
//! These are plain data. How they change is decided by the kernel, one event at a time.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::agent::AgentType;
pub use crate::agent::RuntimeProfile;
use crate::error::Error;
use crate::ids::{AgentId, EvidenceId, GateId, GoalId, HandoffId, RunId, SpendId, TodoId, quote_input};
use crate::time::Timestamp;

/// Longest todo text, note or evidence summary, in bytes. Detail belongs in a file or a link.
pub const MAX_TEXT_LEN: usize = 4000;

/// Characters that make text display other than it reads: bidirectional overrides and
/// isolates, line and paragraph separators. They have no place in a todo or a question.
pub fn reorders(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// Validates a one-line reference (an argv word, a link, a glob, a session id): no control
/// character and nothing that reorders text.
pub fn check_ref(what: &str, s: &str, max: usize) -> Result<(), Error> {
    if s.trim().is_empty() || s.len() > max || s.chars().any(|c| c.is_control() || reorders(c)) {
        return Err(Error::usage(format!("invalid {what} {}", quote_input(s)))
            .with_hint(format!("a {what} is one line of printable text, at most {max} bytes")));
    }
    Ok(())
}

/// Validates free text (an objective, todo text, a note): not blank, at most
/// [`MAX_TEXT_LEN`] bytes, no control characters other than newline and tab.
pub fn check_text(what: &str, s: &str) -> Result<(), Error> {
    if s.trim().is_empty() {
        return Err(Error::usage(format!("{what} is empty"))
            .with_hint(format!("give the {what} as a short sentence")));
    }
    if s.len() > MAX_TEXT_LEN {
        return Err(Error::usage(format!(
            "{what} is {} bytes, more than the limit of {MAX_TEXT_LEN}",
            s.len()
        ))
        .with_hint("keep it short; put detail in a file and reference it"));
    }
    if s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(Error::usage(format!("{what} contains control characters"))
            .with_hint("remove them; newlines and tabs are kept (`-` reads the text from stdin)"));
    }
    if s.chars().any(reorders) {
        return Err(Error::usage(format!("{what} contains bidirectional override or separator characters"))
            .with_hint("remove them: they make text display other than it reads"));
    }
    Ok(())
}

macro_rules! word_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $word)] $variant),+
        }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                let lower = s.trim().to_ascii_lowercase();
                $(if lower == $word.to_ascii_lowercase() { return Ok($name::$variant); })+
                Err(Error::usage(format!("invalid {} {}", $what, quote_input(s)))
                    .with_hint(format!("choose one of: {}", [$($word),+].join(", "))))
            }
        }
    };
}

word_enum!(
    /// Whether a goal may run.
    GoalStatus, "goal status" { Active = "active", Stopped = "stopped", Done = "done" }
);
word_enum!(
    /// Todo priority, P0 (most urgent) to P4.
    Priority, "priority" { P0 = "P0", P1 = "P1", P2 = "P2", P3 = "P3", P4 = "P4" }
);
word_enum!(
    /// Who works a todo: an agent, or a person (never selected for agents).
    Role, "role" { Agent = "agent", User = "user" }
);
word_enum!(
    /// What kind of work a todo is.
    TodoClass, "todo class" { Advance = "advance", Monitor = "monitor", Blocker = "blocker" }
);
word_enum!(
    /// A todo's lifecycle. `done` and `superseded` are closed.
    TodoStatus, "todo status" {
        Open = "open", Blocked = "blocked", Deferred = "deferred", Done = "done",
        Superseded = "superseded",
    }
);
word_enum!(
    /// What kind of proof an evidence record is.
    EvidenceKind, "evidence kind" {
        Command = "command", Test = "test", Link = "link", Note = "note", Artifact = "artifact",
    }
);
word_enum!(
    /// Where a gate stands. `approved` and `cancelled` release what it held; `rejected`
    /// keeps it held until the work is replanned.
    GateStatus, "gate status" {
        Open = "open", Approved = "approved", Rejected = "rejected", Cancelled = "cancelled",
    }
);
word_enum!(
    /// What a turn delivered, as the agent reports it in `refresh-state`.
    DeliveryOutcome, "delivery outcome" {
        SurfaceOnly = "surface_only", OutcomeGap = "outcome_gap",
        OutcomeProgress = "outcome_progress", GoalOutcome = "goal_outcome",
    }
);
word_enum!(
    /// Where a handoff stands. `expired` is never stored: a pending handoff past its time reads
    /// as expired, and what it held is free again.
    HandoffStatus, "handoff status" {
        Pending = "pending", Accepted = "accepted", Cancelled = "cancelled", Expired = "expired",
    }
);
word_enum!(
    /// Whether completion and claim changes must present the active lease.
    HandoffMode, "handoff mode" { SoftClaim = "soft_claim", HardLease = "hard_lease" }
);

impl TodoStatus {
    pub fn is_closed(self) -> bool {
        matches!(self, TodoStatus::Done | TodoStatus::Superseded)
    }
}

/// A goal: the objective a loop works toward.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    pub id: GoalId,
    pub objective: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub status: GoalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// A person stopped the goal with `--now`: a running driven turn is ended at once, not
    /// let finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_now: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_scope: Vec<String>,
    pub handoff_mode: HandoffMode,
    pub quota: QuotaPolicy,
    /// How `loopx drive` brakes an unattended loop.
    #[serde(default, skip_serializing_if = "Brakes::is_default")]
    pub brakes: Brakes,
    /// How a person is told when a gate needs them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifyPolicy>,
    /// Strict mode: the public half (hex) of the person's key, which signs every decision of
    /// theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_key: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// How an unattended loop (`loopx drive`) brakes: a person's settings. Each is left out while
/// it is not set, and then has its default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Brakes {
    /// Driven turns in a row on one todo that change nothing that counts, after which a person
    /// is asked about it (default 3; 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_turns: Option<u32>,
    /// Most driven turns one todo may take before a person is asked (0 or unset: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo_turn_cap: Option<u32>,
    /// Most driven turns the goal may run in an hour before a person is asked (0 or unset: no
    /// cap; at most [`Brakes::MAX_HOURLY_CAP`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly_turn_cap: Option<u32>,
    /// Longest a driver waits on a host's quota or rate limit, in seconds (default 12 h; 0:
    /// it never waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_wait_secs: Option<u64>,
    /// Whether a driver may hand the work to another host it was given while one is limited
    /// (default yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<bool>,
}

impl Brakes {
    pub const DEFAULT_STALL_TURNS: u32 = 3;
    pub const DEFAULT_HOST_WAIT_SECS: u64 = 12 * 3600;
    pub const MAX_HOST_WAIT_SECS: u64 = 30 * 86_400;
    pub const MAX_HOURLY_CAP: u32 = 60;
    pub const MAX_TURN_SETTING: u32 = 10_000;

    pub fn is_default(&self) -> bool {
        *self == Brakes::default()
    }
    /// Turns without progress in a row before a person is asked; none: never.
    pub fn stall_turns(&self) -> Option<u32> {
        Some(self.stall_turns.unwrap_or(Self::DEFAULT_STALL_TURNS)).filter(|n| *n > 0)
    }
    pub fn todo_turn_cap(&self) -> Option<u32> {
        self.todo_turn_cap.filter(|n| *n > 0)
    }
    pub fn hourly_turn_cap(&self) -> Option<u32> {
        self.hourly_turn_cap.filter(|n| *n > 0)
    }
    /// The longest wait on a host's limit, in seconds (0: none).
    pub fn host_wait_secs(&self) -> u64 {
        self.host_wait_secs.unwrap_or(Self::DEFAULT_HOST_WAIT_SECS)
    }
    pub fn failover(&self) -> bool {
        self.failover.unwrap_or(true)
    }
    /// These brakes with every setting `change` makes.
    pub fn merged(&self, change: &Brakes) -> Brakes {
        Brakes {
            stall_turns: change.stall_turns.or(self.stall_turns),
            todo_turn_cap: change.todo_turn_cap.or(self.todo_turn_cap),
            hourly_turn_cap: change.hourly_turn_cap.or(self.hourly_turn_cap),
            host_wait_secs: change.host_wait_secs.or(self.host_wait_secs),
            failover: change.failover.or(self.failover),
        }
    }
}

/// How much compute a goal may spend: a share of a rolling window's slots, and budgets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaPolicy {
    /// Share of the window the goal may use, in [0, 1]. 0 pauses the goal.
    pub compute: f64,
    pub window_hours: u32,
    pub slot_minutes: u32,
    /// Explicit slot allowance; when absent it follows from the other three.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_slots: Option<u32>,
    /// Hard budget in tokens over the goal's life, reported by hosts at spend time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
    /// Hard budget in US dollars over the goal's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

impl Default for QuotaPolicy {
    fn default() -> Self {
        Self {
            compute: 1.0,
            window_hours: 24,
            slot_minutes: 1,
            allowed_slots: None,
            budget_tokens: None,
            budget_usd: None,
        }
    }
}

impl QuotaPolicy {
    /// The longest window, in hours (a week).
    pub const MAX_WINDOW_HOURS: u32 = 168;
    /// The most minutes a slot stands for (a day).
    pub const MAX_SLOT_MINUTES: u32 = 1440;
    /// The most slots a window allows, and a spend spends: a week's window at a minute a slot.
    pub const MAX_ALLOWED_SLOTS: u32 = 10_080;
    /// The largest token budget, and token count a spend reports: a trillion.
    pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;
    /// The largest budget in US dollars, and amount a spend reports: a million.
    pub const MAX_BUDGET_USD: f64 = 1_000_000.0;

    /// `allowed_slots`, or `round(window_hours * 60 / slot_minutes * compute)`.
    pub fn effective_allowed_slots(&self) -> u32 {
        self.allowed_slots.unwrap_or_else(|| {
            let slots = f64::from(self.window_hours) * 60.0 / f64::from(self.slot_minutes.max(1))
                * self.compute.clamp(0.0, 1.0);
            slots.round() as u32
        })
    }
}

/// A registered agent: one peer acting through one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub id: AgentId,
    pub agent_type: AgentType,
    pub registered_at: Timestamp,
}

/// When a deferred todo becomes selectable again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeWhen {
    /// Another todo is done.
    TodoDone(TodoId),
    /// A time has passed.
    At(Timestamp),
    /// A gate has been answered.
    GateAnswered(GateId),
}

impl ResumeWhen {
    /// Parses `todo:t3`, `time:2026-11-29T18:00:00Z` or `gate:g1`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let hint = "use todo:<id>, time:<RFC 3339> or gate:<id>, e.g. --resume-when todo:t3";
        let (kind, value) = s.split_once(':').ok_or_else(|| {
            Error::usage(format!("invalid resume condition {}", quote_input(s))).with_hint(hint)
        })?;
        match kind {
            "todo" => Ok(ResumeWhen::TodoDone(value.parse()?)),
            "time" => Ok(ResumeWhen::At(Timestamp::parse_rfc3339(value)?)),
            "gate" => Ok(ResumeWhen::GateAnswered(value.parse()?)),
            _ => Err(Error::usage(format!("invalid resume condition {}", quote_input(s))).with_hint(hint)),
        }
    }
}

impl fmt::Display for ResumeWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeWhen::TodoDone(t) => write!(f, "todo:{t}"),
            ResumeWhen::At(at) => write!(f, "time:{at}"),
            ResumeWhen::GateAnswered(g) => write!(f, "gate:{g}"),
        }
    }
}

/// What a completed todo says about the work after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionContinuation {
    /// Successor todos were created and carry the work on.
    Successor,
    /// Nothing follows from this todo; it counts toward the goal being terminal.
    NoFollowup,
    /// The goal's frontier decides what is next.
    ActiveGoal,
}

/// How a todo was completed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub continuation: CompletionContinuation,
    pub by: String,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A note left on a todo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub by: String,
    pub at: Timestamp,
    pub text: String,
}

/// A unit of work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub id: TodoId,
    pub text: String,
    pub priority: Priority,
    pub role: Role,
    pub class: TodoClass,
    pub status: TodoStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<AgentId>,
    /// The agent this open todo waits for, unclaimed (a successor stays with the agent that
    /// completed its predecessor). Others neither pick nor claim it; any claim clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<AgentId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_when: Option<ResumeWhen>,
    /// Runnable only once this gate is approved (or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_gate: Option<GateId>,
    /// A check the kernel itself runs before it accepts completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
    /// The latest lease; it binds only while `expires_at` is in the future. (Boxed, like
    /// `completion`: most live todos have neither, and a goal holds thousands of them.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Box<Lease>>,
    /// Bumped by every lease change; `--expected-version` compares against it.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub lease_version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessor: Option<TodoId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub successors: Vec<TodoId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded_by: Vec<TodoId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Box<Completion>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Todo {
    /// Who has it: the agent that claimed it, or the one it waits for.
    pub fn holder(&self) -> Option<&AgentId> {
        self.claimed_by.as_ref().or(self.assignee.as_ref())
    }
}

/// The fields of a new todo, as recorded in its event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTodo {
    pub id: TodoId,
    pub text: String,
    pub priority: Priority,
    pub role: Role,
    pub class: TodoClass,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessor: Option<TodoId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_gate: Option<GateId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
    /// Claimed at creation (logs written before `assignee` existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<AgentId>,
    /// Waits for this agent, unclaimed (a successor of its predecessor's holder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<AgentId>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// A time-bounded right to act on a todo. Expired leases are ignored; nothing reaps them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub owner: AgentId,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    /// The key the owner presented; renew, transfer and release must present it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Paths the owner may write; two active leases never overlap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_scope: Vec<String>,
}

impl Lease {
    pub fn is_active(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

/// A todo a handoff carries, with the lease it had when it was handed over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedTodo {
    pub todo: TodoId,
    /// The todo's lease version once the handoff released it: accepting checks that nothing
    /// changed it since.
    pub lease_version: u64,
    /// The sender's lease, when it had one: the receiver gets a lease of the same length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_scope: Vec<String>,
}

/// Work passed from one agent to another host or agent: a typed continuation that outlives
/// the sender's session. While pending, its todos are reserved for the receiver; accepted,
/// they are the receiver's; cancelled, they return to the sender; past `expires_at`, they are
/// open to anyone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub id: HandoffId,
    pub from: AgentId,
    /// The receiving host, as an agent type.
    pub to_host: AgentType,
    /// The receiving agent, when the sender named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_agent: Option<AgentId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub todos: Vec<HandedTodo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The goal's latest evidence when the handoff was made: what was proven so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceId>,
    /// `pending`, `accepted` or `cancelled` as recorded; see [`Handoff::status_at`].
    pub status: HandoffStatus,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_by: Option<AgentId>,
    /// Who closed it (accepted or cancelled) and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Handoff {
    /// The status at `now`: a pending handoff past its time has expired.
    pub fn status_at(&self, now: Timestamp) -> HandoffStatus {
        match self.status {
            HandoffStatus::Pending if now >= self.expires_at => HandoffStatus::Expired,
            s => s,
        }
    }

    pub fn is_pending(&self, now: Timestamp) -> bool {
        self.status_at(now) == HandoffStatus::Pending
    }

    /// Whether `agent` (of `agent_type`) may receive it: the agent named, or, when none was,
    /// any agent of the receiving host other than the sender.
    pub fn is_for(&self, agent: &AgentId, agent_type: &AgentType) -> bool {
        match &self.to_agent {
            Some(to) => to == agent,
            None => *agent_type == self.to_host && agent != &self.from,
        }
    }

    pub fn covers(&self, todo: TodoId) -> bool {
        self.todos.iter().any(|h| h.todo == todo)
    }

    /// `claude-code`, or `agent claude-1 (claude-code)`.
    pub fn receiver(&self) -> String {
        match &self.to_agent {
            Some(a) => format!("{a} ({})", self.to_host.name()),
            None => self.to_host.name().to_owned(),
        }
    }
}

/// A validation command: argv (no shell), run by the kernel in the project directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    pub argv: Vec<String>,
    pub timeout_secs: u64,
}

/// A piece of proof attached to a todo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub id: EvidenceId,
    pub todo: TodoId,
    pub kind: EvidenceKind,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default = "crate::line::lines_author", skip_serializing_if = "crate::line::is_lines_author")]
    pub author: String,
    #[serde(default = "crate::line::lines_time", skip_serializing_if = "crate::line::is_lines_time")]
    pub at: Timestamp,
}

/// Which work a gate holds back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope", content = "ids")]
pub enum GateBlocks {
    /// Every agent on the goal.
    Goal,
    /// One agent.
    Agent(AgentId),
    /// Only these todos; other work continues.
    Todos(Vec<TodoId>),
}

impl GateBlocks {
    /// Parses `goal`, `agent:<id>` or `todos:<id>,<id>…`. The mode is always explicit.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let hint = "use --blocks goal, --blocks agent:<agent-id> or --blocks todos:t1,t2";
        let bad = || Error::usage(format!("invalid blocking mode {}", quote_input(s))).with_hint(hint);
        match s.split_once(':') {
            None if s == "goal" => Ok(GateBlocks::Goal),
            Some(("agent", id)) => Ok(GateBlocks::Agent(AgentId::new(id)?)),
            Some(("todos", ids)) if !ids.is_empty() => {
                let mut out: Vec<TodoId> = Vec::new();
                for id in ids.split(',') {
                    let id: TodoId = id.trim().parse()?;
                    if !out.contains(&id) {
                        out.push(id);
                    }
                }
                Ok(GateBlocks::Todos(out))
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for GateBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateBlocks::Goal => f.write_str("goal"),
            GateBlocks::Agent(a) => write!(f, "agent:{a}"),
            GateBlocks::Todos(ids) => {
                let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
                write!(f, "todos:{}", ids.join(","))
            }
        }
    }
}

/// A concrete question for a person, with what it holds back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub id: GateId,
    pub question: String,
    pub blocks: GateBlocks,
    /// Who or what answers it: a person, or a check loopx makes itself.
    #[serde(default, skip_serializing_if = "GateKind::is_person")]
    pub kind: GateKind,
    pub status: GateStatus,
    pub asked_by: String,
    pub asked_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The latest check of a gate loopx answers itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<GateCheck>,
    /// Telling the person a person's gate is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified: Option<NotifyState>,
}

/// Least time between two checks of one gate, whoever asks.
pub const MIN_CHECK_GAP_MS: i64 = 60_000;

impl Gate {
    /// Whether a person must answer it.
    pub fn is_persons(&self) -> bool {
        self.kind.is_person()
    }

    /// Whether loopx checks it at all: a gate of a kind loopx answers, still open (or a CI
    /// gate loopx rejected, which a new head commit opens again).
    pub fn checkable(&self) -> bool {
        match (&self.kind, self.status) {
            (GateKind::Person, _) => false,
            (_, GateStatus::Open) => true,
            (GateKind::Ci { .. }, GateStatus::Rejected) => self.answered_by.as_deref() == Some("loopx"),
            _ => false,
        }
    }

    /// When it is next due: a timer at its time, the others at their scheduled check (now, if
    /// never checked).
    pub fn due_at(&self) -> Option<Timestamp> {
        if !self.checkable() {
            return None;
        }
        match (&self.kind, &self.check) {
            (GateKind::Timer { until }, _) => Some(*until),
            (_, Some(c)) => Some(c.next_at),
            (_, None) => Some(self.asked_at),
        }
    }

    /// Whether it was checked less than [`MIN_CHECK_GAP_MS`] before `now`.
    pub fn checked_lately(&self, now: Timestamp) -> bool {
        self.check.as_ref().is_some_and(|c| now.unix_millis() - c.at.unix_millis() < MIN_CHECK_GAP_MS)
    }
}

/// A pull request: `owner/repo#N`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PullRef {
    pub owner: String,
    pub repo: String,
    pub number: u64,
}

impl PullRef {
    /// Parses `owner/repo#N`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let bad = || {
            Error::usage(format!("invalid pull request {}", quote_input(s)))
                .with_hint("name it as owner/repo#number, e.g. --pr acme/importer#42")
        };
        let (path, n) = s.split_once('#').ok_or_else(bad)?;
        let (owner, repo) = path.split_once('/').ok_or_else(bad)?;
        let word = |w: &str| {
            !w.is_empty()
                && w.len() <= 100
                && w.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                && w != "."
                && w != ".."
        };
        let number: u64 = n.parse().map_err(|_| bad())?;
        if !word(owner) || !word(repo) || number == 0 {
            return Err(bad());
        }
        Ok(Self { owner: owner.to_owned(), repo: repo.to_owned(), number })
    }
}

impl fmt::Display for PullRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}#{}", self.owner, self.repo, self.number)
    }
}

/// Who or what answers a gate. A person's gate waits for a person; the others are checks loopx
/// makes itself (`loopx gate poll`, and should-run when one is due) and close themselves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateKind {
    #[default]
    Person,
    /// Open until a time.
    Timer { until: Timestamp },
    /// Open until the command (argv, no shell) exits 0; checked every `every_secs`, each run
    /// bounded by `timeout_secs`.
    Command { argv: Vec<String>, every_secs: u64, timeout_secs: u64 },
    /// Open until every required check of the pull request's head commit succeeded (every
    /// check when none is named); rejected when one failed; open again on a new head commit.
    Ci {
        pr: PullRef,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        required: Vec<String>,
        every_secs: u64,
    },
    /// Open until the pull request is merged; rejected when it is closed unmerged.
    PrMerged { pr: PullRef, every_secs: u64 },
}

/// A gate as asked for (`gate ask`'s settings, as typed): the kind's name, and what each kind
/// takes — a time to wait until, a command to check and its pace and timeout, a pull request
/// and the checks it needs.
#[derive(Clone, Copy, Debug)]
pub struct GateAsked<'a> {
    pub kind: &'a str,
    pub until: Option<Timestamp>,
    pub check: Option<&'a str>,
    pub every: Option<&'a str>,
    pub timeout: &'a str,
    pub pr: Option<&'a str>,
    pub required: &'a [String],
}

impl GateKind {
    /// The kind of gate `asked` describes, with its kind's checking pace where none is given
    /// (a command every 10 minutes, CI every 2, a merge every 5); a setting the kind does not
    /// take is refused, naming its flag.
    pub fn asked(asked: &GateAsked<'_>) -> Result<GateKind, Error> {
        let GateAsked { kind, until, check, every, timeout, pr, required } = *asked;
        let secs = |d: &str| crate::time::parse_duration(d).map(|d| d.as_secs());
        let every_or = |default: &str| secs(every.unwrap_or(default));
        let stray = |flag: &str, given: bool| -> Result<(), Error> {
            if given {
                return Err(Error::usage(format!("--{flag} does not apply to a {kind} gate"))
                    .with_hint("see loopx gate ask --help for the flags of each kind"));
            }
            Ok(())
        };
        let pr_of = || {
            pr.ok_or_else(|| {
                Error::usage(format!("a {kind} gate names its pull request"))
                    .with_hint("e.g. --pr acme/importer#42")
            })
            .and_then(PullRef::parse)
        };
        match kind {
            "person" => {
                stray("until", until.is_some())?;
                stray("check", check.is_some())?;
                stray("pr", pr.is_some())?;
                stray("every", every.is_some())?;
                stray("required-checks", !required.is_empty())?;
                Ok(GateKind::Person)
            }
            "timer" => {
                stray("check", check.is_some())?;
                stray("pr", pr.is_some())?;
                let until = until.ok_or_else(|| {
                    Error::usage("a timer gate opens until a time")
                        .with_hint("e.g. --until +2h or --until 2026-12-01T09:00:00Z")
                })?;
                Ok(GateKind::Timer { until })
            }
            "command" => {
                stray("pr", pr.is_some())?;
                stray("until", until.is_some())?;
                let check = check.ok_or_else(|| {
                    Error::usage("a command gate names its check")
                        .with_hint("e.g. --check \"cargo test -p importer\"")
                })?;
                let argv = shell_words::split(check).map_err(|e| {
                    Error::usage(format!("cannot split --check: {e}")).with_hint("quote it as a shell would")
                })?;
                Ok(GateKind::Command { argv, every_secs: every_or("10m")?, timeout_secs: secs(timeout)? })
            }
            "ci" => {
                stray("until", until.is_some())?;
                stray("check", check.is_some())?;
                Ok(GateKind::Ci { pr: pr_of()?, required: required.to_vec(), every_secs: every_or("2m")? })
            }
            "pr-merged" => {
                stray("until", until.is_some())?;
                stray("check", check.is_some())?;
                stray("required-checks", !required.is_empty())?;
                Ok(GateKind::PrMerged { pr: pr_of()?, every_secs: every_or("5m")? })
            }
            other => Err(Error::usage(format!("invalid gate kind {other:?}"))
                .with_hint("one of: person, timer, command, ci, pr-merged")),
        }
    }

    pub fn is_person(&self) -> bool {
        matches!(self, GateKind::Person)
    }

    /// `person`, `timer`, `command`, `ci`, `pr-merged`.
    pub fn word(&self) -> &'static str {
        match self {
            GateKind::Person => "person",
            GateKind::Timer { .. } => "timer",
            GateKind::Command { .. } => "command",
            GateKind::Ci { .. } => "ci",
            GateKind::PrMerged { .. } => "pr-merged",
        }
    }

    /// How often it is checked; a timer needs no check but its time.
    pub fn every_secs(&self) -> Option<u64> {
        match self {
            GateKind::Person | GateKind::Timer { .. } => None,
            GateKind::Command { every_secs, .. }
            | GateKind::Ci { every_secs, .. }
            | GateKind::PrMerged { every_secs, .. } => Some(*every_secs),
        }
    }

    /// What it waits for, in words (the question of a gate nobody asked in words).
    pub fn describe(&self) -> String {
        match self {
            GateKind::Person => "a person's answer".to_owned(),
            GateKind::Timer { until } => format!("the time {until}"),
            GateKind::Command { argv, .. } => format!("`{}` to exit 0", shell_words::join(argv)),
            GateKind::Ci { pr, required, .. } if required.is_empty() => {
                format!("every check of {pr}'s head commit to pass")
            }
            GateKind::Ci { pr, required, .. } => {
                format!("{} to pass on {pr}'s head commit", required.join(", "))
            }
            GateKind::PrMerged { pr, .. } => format!("{pr} to be merged"),
        }
    }
}

/// What loopx saw the last time it checked a gate itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateCheck {
    pub at: Timestamp,
    /// What it saw, in words: check names and conclusions, an exit code, an error.
    pub summary: String,
    /// The pull request's head commit the checks were of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_sha: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When it is checked next.
    pub next_at: Timestamp,
    /// Checks in a row that could not see the world (the provider failed): "unknown".
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unknown: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Telling the person about their gate: the first message and one reminder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminded_at: Option<Timestamp>,
    /// The latest attempt, delivered or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

word_enum!(
    /// The shape of a notify webhook's JSON: loopx's own, Slack's `text`, Feishu/Lark's
    /// `msg_type: text`.
    NotifyFormat, "notify format" { Generic = "generic", Slack = "slack", Feishu = "feishu" }
);

/// How a person is told that a gate needs them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyPolicy {
    /// A URL to POST to, or `env:NAME` for a URL held in that environment variable (where a
    /// webhook's URL is itself a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    pub format: NotifyFormat,
    /// A command (argv, no shell) run with the message as its last argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A reminder this long after the first message, while the gate is still open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remind_after_secs: Option<u64>,
}

/// Changes to a goal's notify policy, as given (`goal set`'s notify settings).
#[derive(Clone, Copy, Debug, Default)]
pub struct NotifyChange<'a> {
    pub webhook: Option<&'a str>,
    pub format: Option<&'a str>,
    pub command: Option<&'a str>,
    pub reminder: Option<&'a str>,
    /// Clear the policy.
    pub clear: bool,
}

impl NotifyPolicy {
    /// The policy `change` asks for on top of `current`; `None` when it clears the policy or
    /// asks for nothing.
    pub fn changed(current: Option<&NotifyPolicy>, change: &NotifyChange<'_>) -> Result<Option<Self>, Error> {
        let NotifyChange { webhook, format, command, reminder, clear } = *change;
        if clear || (webhook.is_none() && command.is_none() && format.is_none() && reminder.is_none()) {
            return Ok(None);
        }
        let mut p = current.cloned().unwrap_or(NotifyPolicy {
            webhook: None,
            format: NotifyFormat::Generic,
            command: None,
            remind_after_secs: None,
        });
        if let Some(w) = webhook {
            p.webhook = Some(w.to_owned());
        }
        if let Some(f) = format {
            p.format = f.parse()?;
        }
        if let Some(c) = command {
            p.command = Some(shell_words::split(c).map_err(|e| {
                Error::usage(format!("cannot split --notify-command: {e}"))
                    .with_hint("quote it as a shell would")
            })?);
        }
        if let Some(r) = reminder {
            p.remind_after_secs = Some(crate::time::parse_duration(r)?.as_secs());
        }
        Ok(Some(p))
    }
}

/// One `refresh-state` writeback: what a turn did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: RunId,
    #[serde(default = "crate::line::lines_agent", skip_serializing_if = "crate::line::is_lines_agent")]
    pub agent: AgentId,
    pub todo: TodoId,
    #[serde(default = "crate::line::lines_turn", skip_serializing_if = "crate::line::leaves_out_turn")]
    pub turn: Option<String>,
    pub classification: String,
    pub delivery_outcome: DeliveryOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action: Option<String>,
    #[serde(default = "crate::line::lines_time", skip_serializing_if = "crate::line::is_lines_time")]
    pub at: Timestamp,
    /// The spend that accounted this writeback, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_by: Option<SpendId>,
}

/// Compute accounted after a writeback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub id: SpendId,
    #[serde(default = "crate::line::lines_agent", skip_serializing_if = "crate::line::is_lines_agent")]
    pub agent: AgentId,
    pub todo: TodoId,
    pub run: RunId,
    #[serde(default = "crate::line::lines_turn", skip_serializing_if = "crate::line::leaves_out_turn")]
    pub turn: Option<String>,
    pub slots: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default = "crate::line::lines_time", skip_serializing_if = "crate::line::is_lines_time")]
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub voided: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notify_change_lands_on_the_current_policy() {
        assert_eq!(NotifyPolicy::changed(None, &NotifyChange::default()).unwrap(), None);
        let first =
            NotifyChange { webhook: Some("env:HOOK"), reminder: Some("2h"), ..NotifyChange::default() };
        let p = NotifyPolicy::changed(None, &first).unwrap().unwrap();
        assert_eq!(
            (p.webhook.as_deref(), p.format, p.remind_after_secs),
            (Some("env:HOOK"), NotifyFormat::Generic, Some(7200))
        );
        let then = NotifyChange { command: Some("notify-send 'loopx says'"), ..NotifyChange::default() };
        let q = NotifyPolicy::changed(Some(&p), &then).unwrap().unwrap();
        assert_eq!(q.webhook.as_deref(), Some("env:HOOK"), "what is not changed is kept");
        assert_eq!(q.command, Some(vec!["notify-send".to_owned(), "loopx says".to_owned()]));
        let clear = NotifyChange { clear: true, ..then };
        assert_eq!(NotifyPolicy::changed(Some(&q), &clear).unwrap(), None);
        let bad = NotifyChange { command: Some("unclosed 'quote"), ..NotifyChange::default() };
        assert!(NotifyPolicy::changed(None, &bad).is_err());
    }

    #[test]
    fn a_gate_asked_takes_only_its_kinds_settings_and_its_kinds_pace() {
        let asked = GateAsked {
            kind: "command",
            until: None,
            check: Some("cargo test -p 'my crate'"),
            every: None,
            timeout: "5m",
            pr: None,
            required: &[],
        };
        let argv = vec!["cargo".to_owned(), "test".into(), "-p".into(), "my crate".into()];
        assert_eq!(
            GateKind::asked(&asked).unwrap(),
            GateKind::Command { argv, every_secs: 600, timeout_secs: 300 }
        );
        let ci = GateAsked { kind: "ci", check: None, pr: Some("acme/importer#42"), ..asked };
        assert!(matches!(GateKind::asked(&ci).unwrap(), GateKind::Ci { every_secs: 120, .. }));
        let merged = GateAsked { kind: "pr-merged", ..ci };
        assert!(matches!(GateKind::asked(&merged).unwrap(), GateKind::PrMerged { every_secs: 300, .. }));
        assert_eq!(
            GateKind::asked(&GateAsked { kind: "person", check: None, ..asked }).unwrap(),
            GateKind::Person
        );
        for (bad, says) in [
            (GateAsked { kind: "person", ..asked }, "--check does not apply to a person gate"),
            (GateAsked { kind: "timer", check: None, ..asked }, "a timer gate opens until a time"),
            (GateAsked { kind: "ci", check: None, ..asked }, "a ci gate names its pull request"),
            (GateAsked { kind: "nightly", ..asked }, "invalid gate kind"),
        ] {
            assert!(GateKind::asked(&bad).unwrap_err().message.contains(says), "{says}");
        }
    }

    #[test]
    fn blocking_modes_are_explicit() {
        assert_eq!(GateBlocks::parse("goal").unwrap(), GateBlocks::Goal);
        assert_eq!(GateBlocks::parse("agent:b").unwrap(), GateBlocks::Agent(AgentId::new("b").unwrap()));
        let t = GateBlocks::parse("todos:t1,t3,t1").unwrap();
        assert_eq!(t.to_string(), "todos:t1,t3");
        for bad in ["", "everyone", "agent:", "todos:", "todos:x", "agent:Bad Id"] {
            assert!(GateBlocks::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn word_enums_parse_and_print() {
        assert_eq!("p1".parse::<Priority>().unwrap(), Priority::P1);
        assert_eq!(Priority::P1.to_string(), "P1");
        assert!("P5".parse::<Priority>().unwrap_err().hint.unwrap().contains("P0, P1"));
        assert_eq!("soft_claim".parse::<HandoffMode>().unwrap(), HandoffMode::SoftClaim);
    }

    #[test]
    fn text_limits() {
        assert!(check_text("todo text", "fix the flaky test").is_ok());
        assert!(check_text("todo text", "   ").is_err());
        assert!(check_text("todo text", &"x".repeat(MAX_TEXT_LEN + 1)).is_err());
        assert!(check_text("todo text", "bell\u{7}").is_err());
    }

    #[test]
    fn resume_conditions() {
        assert_eq!(ResumeWhen::parse("todo:t3").unwrap(), ResumeWhen::TodoDone("t3".parse().unwrap()));
        assert!(ResumeWhen::parse("later").is_err());
        assert!(ResumeWhen::parse("time:soon").is_err());
    }

    #[test]
    fn allowed_slots_follow_compute() {
        let mut q = QuotaPolicy::default();
        assert_eq!(q.effective_allowed_slots(), 1440);
        q.compute = 0.5;
        assert_eq!(q.effective_allowed_slots(), 720);
        q.allowed_slots = Some(3);
        assert_eq!(q.effective_allowed_slots(), 3);
    }
}
