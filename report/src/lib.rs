//! `loopx report`: what a goal's time went to, read from its log.
//!
//! The log records every decision, turn, gate, answer, handoff, spend and piece of evidence, so
//! a goal's trajectory can be told exactly: how much of its wall time agents were working, how
//! much it waited on a person, on CI or a timer, was paused or out of quota, or sat idle; each
//! agent's turns and their outcomes; how often a person stepped in; how much of the work that
//! was done has proof. [`build`] streams the log once through [`fold::Fold`] (memory bounded
//! whatever the log's length: the pictures' series are kept on a grid of at most
//! [`grid::COLUMNS`] columns), [`text`] writes the report for a terminal and as Markdown, and
//! [`svg`] draws the timeline and the burn-up.
//!
//! The JSON form is [`Report`], versioned by [`REPORT_SCHEMA`]; fields are added, never
//! renamed or removed, within a version.

pub mod fold;
pub mod grid;
pub mod output;
pub mod svg;
pub mod text;

use serde::{Deserialize, Serialize};

use loopx_core::{GoalId, Result, Timestamp};
use loopx_kernel::Store;

pub use fold::Fold;

/// The version of [`Report`]'s JSON.
pub const REPORT_SCHEMA: u32 = 1;

/// The part of a goal's life a report covers: from `since` (or its first event) to `until`
/// (or its last event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}

/// A report and the data of its pictures.
#[derive(Clone, Debug)]
pub struct Trajectory {
    pub report: Report,
    pub picture: grid::Picture,
}

/// Reads goal `id`'s log once, from its first line to `window.until` (lines after it are not
/// read), and tells its trajectory over `window`. Lines before `since` are folded for the
/// state they leave (gates open, the goal paused) but not counted.
pub fn build(store: &dyn Store, id: &GoalId, window: Window) -> Result<Trajectory> {
    let mut fold = Fold::new(id.clone(), window);
    store.each_line(id, &mut |line| {
        if window.until.is_some_and(|u| line.at > u) {
            return Ok(false);
        }
        fold.line(&line);
        Ok(true)
    })?;
    Ok(fold.finish())
}

/// A goal's trajectory in figures (`loopx report --json`). Durations are in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub goal: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub objective: String,
    /// The window reported: from the first event (or `--since`) to the last (or `--until`).
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    /// Events in the window.
    pub events: u64,
    pub time: TimeSplit,
    /// One row an agent, in the order they first appeared.
    pub agents: Vec<AgentTurns>,
    /// The rows added up.
    pub turns: TurnCounts,
    pub gates: Gates,
    pub people: People,
    pub work: Work,
    /// Per UTC day of the window, the days something happened.
    pub days: Vec<Day>,
}

/// Where the window's wall time went. Each moment counts once, in the first of these that
/// holds: an agent's turn ran (working), the goal was stopped or its compute set to 0
/// (paused), a person's gate was open (person), a gate on CI, a command or a timer was open
/// (checks), the last decision said the quota or budget was spent (quota), a driven turn had
/// ended on its host's own quota or rate limit and the agent had not run again (host quota),
/// else idle. The seven add up to `elapsed_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeSplit {
    pub elapsed_ms: u64,
    pub working_ms: u64,
    pub paused_ms: u64,
    pub person_ms: u64,
    pub checks_ms: u64,
    pub quota_ms: u64,
    /// Waiting on a host's own quota or rate limit.
    #[serde(default)]
    pub host_quota_ms: u64,
    pub idle_ms: u64,
    /// Turn time added up over agents (more than `working_ms` when agents worked at once).
    pub agent_ms: u64,
}

/// What one agent's turns came to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentTurns {
    pub agent: String,
    /// Its agent type (the host it runs in), as registered.
    pub host: String,
    #[serde(flatten)]
    pub counts: TurnCounts,
}

/// Turns and what became of them. A turn runs from its `run` decision to its writeback (a
/// host's turn) or its end (a `loopx drive` turn); outcomes are one each: `spent` (its
/// writeback accounted), `wrote_back` (not spent), `interrupted` (a person stopped it, or its
/// driver died, without a writeback), `limited` (its host's own quota or rate limit ended it),
/// `failed` (no writeback otherwise).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnCounts {
    pub turns: u64,
    /// Of them, run by `loopx drive`.
    pub driven: u64,
    pub spent: u64,
    pub wrote_back: u64,
    pub failed: u64,
    pub interrupted: u64,
    #[serde(default)]
    pub limited: u64,
    /// Completions the kernel's own validation run refused.
    pub validation_failures: u64,
    pub working_ms: u64,
    /// Tokens and cost as hosts reported them; absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
}

impl TurnCounts {
    fn add(&mut self, o: &TurnCounts) {
        self.turns += o.turns;
        self.driven += o.driven;
        self.spent += o.spent;
        self.wrote_back += o.wrote_back;
        self.failed += o.failed;
        self.interrupted += o.interrupted;
        self.limited += o.limited;
        self.validation_failures += o.validation_failures;
        self.working_ms += o.working_ms;
        self.tokens = sum_opt(self.tokens, o.tokens);
        self.usd = sum_opt(self.usd, o.usd);
    }
}

fn sum_opt<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Waits on gates: a person's, and those loopx answers itself (CI, pull requests, commands,
/// timers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gates {
    pub person: WaitStats,
    pub checks: WaitStats,
    /// Every gate asked in the window, in order: how long each was open.
    pub list: Vec<GateWait>,
}

/// How long gates of one kind were open, each from its question to its answer (or to the
/// window's end, while still open).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitStats {
    pub asked: u64,
    pub answered: u64,
    pub median_ms: u64,
    pub longest_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_gate: Option<String>,
    pub total_ms: u64,
}

/// One gate's wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateWait {
    pub gate: String,
    /// `person`, `timer`, `command`, `ci`, `pr-merged`.
    pub kind: String,
    pub asked_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<Timestamp>,
    /// `open` while unanswered, else the answer.
    pub status: String,
    pub wait_ms: u64,
}

/// A person stepping in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct People {
    /// Gate answers, goal changes (objective, quota, stop, resume, completion, a void), todos added and
    /// todos superseded, by a person.
    pub interventions: u64,
    pub gate_answers: u64,
    pub goal_changes: u64,
    pub todos_added: u64,
    pub todos_superseded: u64,
    /// Interventions per day of the window (a window shorter than a day counts as one).
    pub per_day: f64,
    /// Interventions per 100 turns (absent without turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_100_turns: Option<f64>,
    /// How long a person's gate waited for its answer (answered ones).
    pub response_median_ms: u64,
    pub response_longest_ms: u64,
}

/// The work done, and how well it is proven.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Work {
    pub todos_added: u64,
    pub done: u64,
    /// Of `done`: completed on the kernel's own passing run of its validation command.
    pub done_validated: u64,
    /// Completed with evidence given (no validation run).
    pub done_with_evidence: u64,
    pub done_without_evidence: u64,
    pub done_per_day: f64,
    pub superseded: u64,
    /// `replan` decisions: the agent found nothing runnable and nothing finished.
    pub replans: u64,
    pub handoffs_offered: u64,
    pub handoffs_accepted: u64,
    pub handoffs_cancelled: u64,
    /// Accepted handoffs whose receiver runs in another host than the sender.
    pub host_switches: u64,
    /// Questions `loopx drive`'s brakes asked a person: turns without progress, a todo's or the
    /// goal's turn cap.
    #[serde(default)]
    pub brake_questions: u64,
}

/// One UTC day.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Day {
    /// `2026-11-29`.
    pub date: String,
    pub turns: u64,
    pub todos_added: u64,
    pub done: u64,
    pub interventions: u64,
}
