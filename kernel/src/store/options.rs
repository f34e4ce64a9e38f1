//! What a store is opened with: its options, and the faults a test may inject into a commit.

use std::time::Duration;

/// How long a command waits for a goal lock before it fails with "busy".
pub(crate) const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Options fixed when a store is opened.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub lock_timeout: Duration,
    /// Describes this process to other waiters ("loopx todo add").
    pub holder: String,
    /// Test-only fault injection: abort the process at this named commit step
    /// (`after-lock`, `after-append`, `after-archive`, `before-goal-md`, `after-bodies`,
    /// `before-bodies-rename`, `before-snapshot-rename`; see [`FAULT_POINTS`]), or hang or
    /// unwind there (`hang-<point>`, `unwind-<point>`, `unwind-torn-append` after writing half
    /// the line); or fail: `disk-full` (the append), `fail-projections` (the views),
    /// `busy-lock` (the goal's lock, as if another process held it). The CLI sets it only in
    /// debug builds.
    pub fault: Option<String>,
    /// Where this machine keeps its witness of each goal's head ([`crate::witness`]): outside
    /// the project, so that cutting the log back is seen. `None` keeps no witness.
    pub witness: Option<std::path::PathBuf>,
}

/// The named steps of a commit where a fault can be injected, in the order a commit passes them.
pub const FAULT_POINTS: [&str; 7] = [
    "after-lock",
    "after-append",
    "after-archive",
    "before-goal-md",
    "after-bodies",
    "before-bodies-rename",
    "before-snapshot-rename",
];

impl Default for StoreOptions {
    fn default() -> Self {
        Self { lock_timeout: DEFAULT_LOCK_TIMEOUT, holder: "loopx".to_owned(), fault: None, witness: None }
    }
}

/// The payload a store unwinds with at an `unwind-<point>` fault: the process "died" there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedCrash {
    pub point: String,
}
