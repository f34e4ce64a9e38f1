//! `loopx drive`, loopx's own outer loop, as the kernel records it: the lease that keeps one
//! driver per agent, and the end of each turn it runs (how the agent command ended, whether
//! the turn wrote back, what it spent, what the host reported it used).

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, RunId, SpendId, TodoId};
use crate::time::Timestamp;

/// Longest output tail a turn's end keeps, in bytes.
pub const MAX_TAIL_LEN: usize = 2048;
/// Longest host session id a turn's end keeps.
pub const MAX_SESSION_LEN: usize = 200;
/// Longest machine name a driver lease keeps.
pub const MAX_MACHINE_LEN: usize = 255;

/// The lease one running `loopx drive` holds on its agent: while it is active, no second
/// driver runs that agent. The driver renews it; one killed loses it at `expires_at` (or at
/// once, to a driver on the same machine that finds its process gone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverLease {
    pub agent: AgentId,
    /// Names this driver's lease: renewals, turns and the stop present it.
    pub id: String,
    /// The host adapter that shapes the agent command (`claude-code`, `codex`), or `other`.
    pub host: String,
    /// The machine it runs on, and its process id there.
    pub machine: String,
    pub pid: u32,
    pub since: Timestamp,
    pub expires_at: Timestamp,
    /// The turn whose agent command runs now, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo: Option<TodoId>,
    /// Turns this driver has ended.
    #[serde(default)]
    pub turns: u64,
    /// The host's own limit its last turn ended on, until its next turn starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited: Option<HostLimit>,
}

impl DriverLease {
    pub fn is_active(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

/// How a driven turn's agent command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnExit {
    /// It exited by itself (`exit_code`), or a signal it did not get from loopx ended it.
    Exited,
    /// loopx killed its process group at `--turn-timeout`.
    TimedOut,
    /// A person stopped it (Ctrl-C twice, a termination signal to the driver, or
    /// `goal stop --now`).
    Interrupted,
    /// The driver died while it ran; a restarted driver ended the turn.
    Lost,
    /// It could not be started (no such program, not executable).
    NotStarted,
}

impl TurnExit {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnExit::Exited => "exited",
            TurnExit::TimedOut => "timed_out",
            TurnExit::Interrupted => "interrupted",
            TurnExit::Lost => "lost",
            TurnExit::NotStarted => "not_started",
        }
    }
}

/// Longest name of a host's limit kind, and of its message, a turn's end keeps.
pub const MAX_LIMIT_KIND_LEN: usize = 64;
pub const MAX_LIMIT_MESSAGE_LEN: usize = 300;

/// A host's own quota or rate limit that ended a turn, as the host reported it: not a failure
/// of the agent, and nothing to spend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLimit {
    /// The host's own name for the limit (`five_hour`, `usage_limit_exceeded`,
    /// `daily_quota`, `rate_limit`).
    pub kind: String,
    /// When the host said the limit resets, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<Timestamp>,
    /// A reset the host gave relative to when it printed it, in seconds: the driver, which
    /// knows that moment, turns it into [`HostLimit::resets_at`]. Never recorded.
    #[serde(default, skip_serializing)]
    pub retry_after_secs: Option<u64>,
    /// The host's words, cut to [`MAX_LIMIT_MESSAGE_LEN`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl HostLimit {
    /// A limit of `kind` with the host's `message`, its reset not (yet) known.
    pub fn new(kind: &str, message: Option<&str>) -> Self {
        let message = message.map(|m| {
            let one: String = m.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut end = one.len().min(MAX_LIMIT_MESSAGE_LEN);
            while !one.is_char_boundary(end) {
                end -= 1;
            }
            one[..end].to_owned()
        });
        Self { kind: kind.to_owned(), resets_at: None, retry_after_secs: None, message }
    }

    /// `claude-code out of quota (five_hour) until 2026-12-07T14:05:00Z`, for people.
    pub fn describe(&self, host: &str) -> String {
        match self.resets_at {
            Some(t) => format!("{host} out of quota ({}) until {t}", self.kind),
            None => format!("{host} out of quota ({}), reset time not given", self.kind),
        }
    }
}

/// What the host reported a turn used (from its own output).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnUsage {
    /// The host's session (thread) id, to resume it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// The host's own quota or rate limit ended the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<HostLimit>,
}

impl TurnUsage {
    /// Adds `tokens` to what is counted so far.
    pub fn add_tokens(&mut self, tokens: u64) {
        self.tokens = Some(self.tokens.unwrap_or(0).saturating_add(tokens));
    }
}

/// The end of one driven turn, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    pub agent: AgentId,
    pub turn: String,
    /// The todo the turn was decided for (none for a replan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo: Option<TodoId>,
    pub exit: TurnExit,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub started_at: Timestamp,
    pub ended_at: Timestamp,
    /// The turn's writeback; none: the turn failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    /// The spend that accounts the writeback (this end's, or one the agent made itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_by: Option<SpendId>,
    #[serde(default, flatten)]
    pub usage: TurnUsage,
    /// The end of the command's output, for a turn that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
    /// Why a writeback was not spent (the goal paused meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TurnEnd {
    /// A turn that did not write back, and was not stopped by its host's limit.
    pub fn failed(&self) -> bool {
        self.run.is_none() && self.usage.limit.is_none()
    }

    /// A turn its host's own quota or rate limit ended.
    pub fn limited(&self) -> Option<&HostLimit> {
        self.usage.limit.as_ref()
    }

    /// One line for people: `exit 1, no writeback`.
    pub fn describe(&self) -> String {
        let how = match (self.exit, self.exit_code, self.signal) {
            (TurnExit::Exited, Some(c), _) => format!("exit {c}"),
            (TurnExit::Exited, None, Some(s)) => format!("killed by signal {s}"),
            (e, _, _) => e.as_str().replace('_', " "),
        };
        if let (None, Some(l)) = (&self.run, &self.usage.limit) {
            let until = l.resets_at.map(|t| format!(" until {t}")).unwrap_or_default();
            return format!("{how}, the host's limit ({}){until}", l.kind);
        }
        match (&self.run, &self.spent_by) {
            (None, _) => format!("{how}, no writeback"),
            (Some(r), Some(s)) => format!("{how}, wrote back {r}, spent {s}"),
            (Some(r), None) => format!("{how}, wrote back {r}, not spent"),
        }
    }
}

/// What `loopx drive`'s brakes count of one todo's driven turns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoTurns {
    /// Driven turns on the todo since the brakes last asked the person about it.
    pub turns: u32,
    /// Of those, the latest in a row that changed nothing that counts.
    pub stalled: u32,
    /// What the latest turn ended on when it added no evidence (a failed check, a writeback,
    /// an exit): the same again is no progress, and the person's question names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

/// What a driven turn's end does to the brakes: the todo's count after it, and the question
/// the brakes open for a person when a limit is reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnBrake {
    pub todo: TodoId,
    /// Whether the turn changed something that counts: a todo closed, evidence that is not a
    /// failed check, or a writeback unlike the last.
    pub progress: bool,
    /// The todo's count after the turn (none once the todo closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<TodoTurns>,
    /// The gate opened for the person, when a brake is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<BrakeGate>,
}

/// A question the brakes ask a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrakeGate {
    pub id: crate::ids::GateId,
    pub question: String,
    pub blocks: crate::model::GateBlocks,
}

/// What a driver asks of its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum DriverOp {
    /// Take the lease: refused while another driver's is active, unless `replaces` names it
    /// (the caller found that driver's process gone).
    Start { host: String, machine: String, pid: u32, ttl_secs: u64, replaces: Option<String> },
    /// Extend it, and say which turn runs now (`turn` none: between turns).
    Renew { ttl_secs: u64, turn: Option<String>, todo: Option<TodoId> },
    /// Give it up.
    Stop { reason: String },
}

/// `Kernel::drive_lease`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DriverRequest {
    /// The lease's id: chosen by the driver at start, presented after.
    pub id: String,
    pub op: DriverOp,
}

/// The agent's driver lease after the call (none once stopped).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<DriverLease>,
}

/// `Kernel::end_turn`: how the agent command of a driven turn ended. The kernel finds the
/// writeback and spends it once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndTurn {
    pub turn: String,
    pub exit: TurnExit,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at: Timestamp,
    pub usage: TurnUsage,
    pub tail: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnEndBody {
    pub end: TurnEnd,
}

/// A driven turn as it stands: its decision, writeback, spend and end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnView {
    pub agent: AgentId,
    pub turn: String,
    /// The todo its decision named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo: Option<TodoId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_by: Option<SpendId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<TurnEnd>,
}

/// Cuts `s` to its last `max` bytes (on a character boundary).
pub fn tail_of(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_end_on_a_char_boundary() {
        assert_eq!(tail_of("abc", 10), "abc");
        assert_eq!(tail_of("abcdef", 3), "def");
        assert_eq!(tail_of("aéé", 3), "é");
    }

    #[test]
    fn a_turn_end_reads_as_a_line() {
        let end = TurnEnd {
            agent: AgentId::new("bot").unwrap(),
            turn: "d1-1".to_owned(),
            todo: None,
            exit: TurnExit::Exited,
            exit_code: Some(1),
            signal: None,
            started_at: Timestamp::from_unix_millis(0),
            ended_at: Timestamp::from_unix_millis(1),
            run: None,
            spent_by: None,
            usage: TurnUsage::default(),
            tail: None,
            note: None,
        };
        assert!(end.failed());
        assert_eq!(end.describe(), "exit 1, no writeback");
        let timed = TurnEnd { exit: TurnExit::TimedOut, exit_code: None, ..end };
        assert_eq!(timed.describe(), "timed out, no writeback");
    }
}
