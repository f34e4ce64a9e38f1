//! Error kinds and exit codes.
//!
//! Every failure the kernel reports is an [`Error`]: a kind (which decides the exit code), a
//! lowercase message without a trailing period, and an optional hint naming the next command to
//! run. The CLI prints the message as `error: …` and the hint as `hint: …`.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::ids::{AgentId, GoalId, InvalidId};
use crate::next::{Next, NextStep};

/// Process exit codes, in one place. Documented in the README.
pub mod exit {
    /// Success, including a decision of "skip" or a no-op.
    pub const SUCCESS: i32 = 0;
    /// Refused by a rule: conflict, not registered, not found, gate, validation failed.
    pub const REFUSED: i32 = 1;
    /// Usage error: a malformed id, flag or value. Nothing was changed.
    pub const USAGE: i32 = 2;
    /// Busy: the goal lock was held for longer than the bounded wait. Safe to retry.
    pub const BUSY: i32 = 3;
    /// State integrity error: the event log or snapshot does not check out. See `loopx doctor`.
    pub const INTEGRITY: i32 = 4;
    /// Internal error: a bug in loopx, or an I/O failure it cannot recover from.
    pub const INTERNAL: i32 = 70;
    /// `loopx drive` stopped by Ctrl-C (128 + SIGINT).
    pub const INTERRUPTED: i32 = 130;
    /// `loopx drive` stopped by a termination signal (128 + SIGTERM).
    pub const TERMINATED: i32 = 143;
}

/// What went wrong, coarsely; decides the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Malformed input: ids, flags, values.
    Usage,
    /// A project, goal, agent, todo or evidence that does not exist.
    NotFound,
    /// Another agent holds what was asked for (a claim, a lease).
    Conflict,
    /// The caller's identity is missing or not registered.
    Identity,
    /// The command is valid but the state forbids it.
    Refused,
    /// The goal lock could not be taken within the bounded wait.
    Busy,
    /// The state on disk fails its integrity checks.
    Integrity,
    /// An I/O failure (permissions, disk full, …).
    Io,
    /// A bug.
    Internal,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Usage => exit::USAGE,
            ErrorKind::NotFound | ErrorKind::Conflict | ErrorKind::Identity | ErrorKind::Refused => {
                exit::REFUSED
            }
            ErrorKind::Busy => exit::BUSY,
            ErrorKind::Integrity => exit::INTEGRITY,
            ErrorKind::Io | ErrorKind::Internal => exit::INTERNAL,
        }
    }
}

/// A typed error with a message for people, an optional hint in words, and optionally the
/// typed next steps out of it (each front end renders them: commands, or tool calls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip)]
    pub next: Option<Box<Next>>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), hint: None, next: None }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }
    pub fn identity(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Identity, message)
    }
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Refused, message)
    }
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Busy, message)
    }
    pub fn integrity(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Integrity, message).with_hint("run `loopx doctor` for details")
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// An I/O error, naming the path it happened on.
    pub fn io(action: &str, path: &Path, err: &std::io::Error) -> Self {
        let hint = match err.kind() {
            std::io::ErrorKind::PermissionDenied => format!(
                "loopx runs as the user who owns the project: check who owns {} and its permissions",
                path.display()
            ),
            std::io::ErrorKind::NotFound => "check that the path exists (or pass --project DIR)".to_owned(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                "free some disk space and run the command again".to_owned()
            }
            _ => "check the path, the disk and the permissions, then run the command again".to_owned(),
        };
        Self::new(ErrorKind::Io, format!("cannot {action} {}: {err}", path.display())).with_hint(hint)
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// The typed step out of this error, taken by `agent` on `goal`.
    pub fn with_next(mut self, goal: &GoalId, agent: Option<&AgentId>, step: NextStep) -> Self {
        let next = self.next.get_or_insert_with(|| {
            Box::new(Next { goal: Some(goal.clone()), agent: agent.cloned(), turn: None, steps: vec![] })
        });
        next.steps.push(step);
        self
    }
    /// The turn the error's next steps belong to.
    pub fn in_turn(mut self, turn: Option<&str>) -> Self {
        if let Some(n) = &mut self.next {
            n.turn = turn.map(str::to_owned);
        }
        self
    }
    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }
}

impl From<InvalidId> for Error {
    fn from(e: InvalidId) -> Self {
        let usage = Error::usage(e.message);
        if e.hint.is_empty() { usage } else { usage.with_hint(e.hint) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
