//! Hearing of commits: a [`ChangeFeed`] wakes whoever waits for a goal to change (the
//! dashboard's live pages, a sleeping `loopx drive`) instead of polling. The file store's feed
//! is the file system's notice of writes; a database store brings its own (PostgreSQL's
//! `LISTEN`).

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::{EventKind, RecursiveMode, Watcher};

use loopx_core::{Error, GoalId, Result};

use crate::project::Layout;

/// Hears of the commits to a project (or one goal of it).
pub trait ChangeFeed: Send {
    /// Waits up to `timeout`; whether a commit was heard of.
    fn wait(&mut self, timeout: Duration) -> Result<bool>;
}

/// The change feed of a file-store project: the file system's notices of writes under
/// `.loopx/` (creations, changes and removals; reads are not changes, nor are writes to the
/// turns' output logs).
pub struct FileFeed {
    _watcher: notify::RecommendedWatcher,
    rx: mpsc::Receiver<notify::Result<notify::Event>>,
    /// Only changes to files of this name count (a goal's `events.jsonl`), when set.
    only: Option<&'static str>,
}

impl std::fmt::Debug for FileFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileFeed")
    }
}

impl FileFeed {
    /// Watches the state directory of the project at `root`.
    pub fn new(root: &Path) -> Result<Self> {
        Self::watch(&Layout::new(root).state_dir(), RecursiveMode::Recursive, None)
    }

    /// Watches one goal's log: a commit to that goal, and nothing else, is a change.
    pub fn goal(root: &Path, goal: &GoalId) -> Result<Self> {
        Self::watch(&Layout::new(root).goal_dir(goal), RecursiveMode::NonRecursive, Some("events.jsonl"))
    }

    /// Watches one file (any change to it counts).
    pub fn file(path: &Path) -> Result<Self> {
        Self::watch(path, RecursiveMode::NonRecursive, None)
    }

    fn watch(dir: &Path, mode: RecursiveMode, only: Option<&'static str>) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(tx)
            .map_err(|e| Error::internal(format!("cannot watch {}: {e}", dir.display())))?;
        watcher
            .watch(dir, mode)
            .map_err(|e| Error::internal(format!("cannot watch {}: {e}", dir.display())))?;
        Ok(Self { _watcher: watcher, rx, only })
    }

    fn counts(&self, e: &notify::Event) -> bool {
        matches!(e.kind, EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_))
            && e.paths.iter().any(|p| {
                let in_turns = p.parent().and_then(Path::file_name).is_some_and(|n| n == "turns");
                let named = self.only.is_none_or(|name| p.file_name().is_some_and(|n| n == name));
                !in_turns && named
            })
    }
}

impl ChangeFeed for FileFeed {
    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Ok(e)) if self.counts(&e) => {
                    // One wake for a burst: a commit writes several files, one after another.
                    while self.rx.recv_timeout(Duration::from_millis(25)).is_ok() {}
                    return Ok(true);
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(false),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::internal("the file watcher stopped"));
                }
            }
        }
    }
}
