//! The goals' states a file store keeps between commands of one process, and when it may take
//! one without reading the snapshot again.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use loopx_core::GoalId;

use crate::codec;
use crate::state::GoalState;
use crate::table;

use super::file::FileStore;
use super::load::Locked;
use super::mark::FileMark;
use super::snapshot::SnapshotHeader;
use super::txn::{Txn, Written};

/// A goal's state as a read decoded it or a transaction left it, kept for the next command of
/// the same process (a long-lived one: the MCP server, `loopx drive`; or one hook's answer,
/// which asks several questions). A read whose log still bears the mark it bore when the state
/// was read takes the state as it is: nothing was committed, cut or edited since. Otherwise a
/// load whose snapshot is still the very bytes the state came from, and whose log still
/// records their root, takes it instead of decoding those bytes again; every other check of a
/// load is made as before.
pub(super) struct Kept {
    pub(super) source: Source,
    /// Shared with the reads that took it since.
    pub(super) state: Arc<GoalState>,
    /// The log's mark when a read found this state current or a transaction left it (none
    /// when the log could not be looked at then: the next load checks the snapshot).
    pub(super) log: Option<FileMark>,
    /// Set when a commit wrote the snapshot (its pieces: the header line, the state's hashed
    /// bytes, the offsets line): the state's stored rows still read from the snapshot before,
    /// and are re-based on this one when a transaction next takes the state (a read takes it
    /// as it is).
    pub(super) unbased: bool,
}

impl Kept {
    /// The state, its stored rows reading from the snapshot it was kept with (`file` is that
    /// snapshot's body file); `None` if they cannot (a fault: the state is then decoded).
    fn based(mut self, file: Option<Arc<table::BodyFile>>) -> Option<(Arc<GoalState>, Source)> {
        if self.unbased {
            let [_, keys, offsets] = self.source.bytes.as_slice() else { return None };
            let (at, n) = codec::key_lines(keys)?;
            let state = Arc::make_mut(&mut self.state);
            let todos = std::mem::take(&mut state.todos);
            state.todos = todos.rebase(keys, at, n, file, offsets).ok()?;
        }
        Some((self.state, self.source))
    }
}

/// How many goals' states a file store keeps at once: a command over many goals (`status
/// --all`, the inbox) holds no more than this many states besides the one it uses.
pub(super) const KEPT_GOALS: usize = 8;

/// Keeps `k` as goal `id`'s state in `kept`, making room first by forgetting another goal's.
pub(super) fn keep_in(kept: &mut HashMap<GoalId, Kept>, id: &GoalId, k: Kept) {
    if kept.len() >= KEPT_GOALS
        && !kept.contains_key(id)
        && let Some(other) = kept.keys().next().cloned()
    {
        kept.remove(&other);
    }
    kept.insert(id.clone(), k);
}

/// The parts of a snapshot [`FileStore::write_projections_json`] wrote that a state kept after
/// its commit is compared by.
pub(super) struct Wrote {
    pub(super) id: GoalId,
    pub(super) seq: u64,
    pub(super) header: Vec<u8>,
    pub(super) offsets: Vec<u8>,
}

/// The snapshot a state was read from or written as: its bytes, in the pieces they were read
/// or written as, and their state root.
pub(super) struct Source {
    pub(super) bytes: Vec<Arc<Vec<u8>>>,
    pub(super) root: String,
}

impl Source {
    /// Whether `bytes` are this snapshot.
    fn is(&self, bytes: &[u8]) -> bool {
        let mut rest = bytes;
        for piece in &self.bytes {
            match rest.strip_prefix(piece.as_slice()) {
                Some(r) => rest = r,
                None => return false,
            }
        }
        rest.is_empty()
    }
}

impl FileStore {
    /// The state kept for goal `id` (see [`Kept`]), if `bytes` are the snapshot it was kept
    /// with and `root` the root the log records for it, its stored rows reading from `file`:
    /// taken out for a transaction (`take`, with the snapshot to keep it by again), or copied
    /// and kept again under the log's `mark`.
    pub(super) fn kept_state(
        &self,
        id: &GoalId,
        bytes: &[u8],
        root: Option<&str>,
        file: Option<Arc<table::BodyFile>>,
        take: bool,
        mark: FileMark,
    ) -> Option<(Arc<GoalState>, Option<Source>)> {
        let mut kept = self.kept();
        let k = kept.remove(id)?;
        if !k.source.is(bytes) || root != Some(k.source.root.as_str()) {
            return None;
        }
        // A read takes a committed state as its commit left it: its unchanged rows read from
        // the snapshot before, whose bytes it holds, and from a body file a commit only appends
        // to (or unlinks, for a new one); only a transaction, whose commit writes from the rows,
        // re-bases them. A hook that commits and then reads (a todo added, then the decision)
        // does not parse the key lines it just wrote.
        if k.unbased && !take {
            let state = Arc::clone(&k.state);
            keep_in(&mut kept, id, Kept { log: Some(mark), ..k });
            return Some((state, None));
        }
        let (state, source) = k.based(file)?;
        if take {
            return Some((state, Some(source)));
        }
        keep_in(&mut kept, id, Kept { source, state: Arc::clone(&state), log: Some(mark), unbased: false });
        Some((state, None))
    }

    /// The state this store's last read of goal `id` found, if the log still bears the mark
    /// it bore then (one `stat`): with nothing committed, cut or edited since, the snapshot
    /// need not be read and checked again.
    pub(super) fn unchanged(&self, id: &GoalId) -> Option<Arc<GoalState>> {
        let (state, mark) = {
            let kept = self.kept();
            let k = kept.get(id)?;
            (Arc::clone(&k.state), k.log?)
        };
        (FileMark::of(&self.layout.events(id)).ok()? == mark).then_some(state)
    }

    /// Under the goal's lock, for a transaction: the state this process last found current,
    /// taken out, if the log still bears the mark it bore then. The mark is what a read trusts
    /// (see [`Self::unchanged`]), and under the lock no one commits, so the snapshot need not
    /// be read and checked again: a hook that reads its goal and then adds a todo reads the
    /// snapshot once. A state a commit left (its rows not yet re-based on the snapshot it
    /// wrote), or a goal whose GOAL.md is missing, takes the full load.
    pub(super) fn take_unchanged(&self, id: &GoalId) -> Option<Locked> {
        let mut kept = self.kept();
        let k = kept.get(id)?;
        if k.unbased || k.log? != FileMark::of(&self.layout.events(id)).ok()? {
            return None;
        }
        let first = k.source.bytes.first()?;
        let header: SnapshotHeader = serde_json::from_slice(&first[..crate::newline::find(first)?]).ok()?;
        if !self.layout.goal_md(id).exists() {
            return None;
        }
        let k = kept.remove(id)?;
        Some(Locked {
            state: Arc::unwrap_or_clone(k.state),
            head: header.head,
            views: Some(header.goal_md_digest),
            source: Some(k.source),
        })
    }

    pub(super) fn kept(&self) -> MutexGuard<'_, HashMap<GoalId, Kept>> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the state transaction `txn` on goal `id` ends with, if it can be kept: loaded from
    /// `source` and unchanged, or committed (and its snapshot written); marked with the log as
    /// the transaction leaves it, so that a read finds it without reading the snapshot again
    /// until another commit. Called under the goal's lock.
    pub(super) fn keep(&self, id: &GoalId, txn: Txn<'_>, source: Option<Source>) {
        let wrote = self.wrote.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let kept = match txn.finish_written() {
            Some((state, None)) => {
                source.map(|source| Kept { source, state: Arc::new(state), log: None, unbased: false })
            }
            Some((mut state, Some(Written { keys, root }))) => {
                wrote.filter(|w| w.id == *id && w.seq == state.seq).map(|w| {
                    state.archived_now.clear();
                    let bytes = vec![Arc::new(w.header), Arc::new(keys), Arc::new(w.offsets)];
                    Kept { source: Source { bytes, root }, state: Arc::new(state), log: None, unbased: true }
                })
            }
            None => None,
        };
        if let Some(mut k) = kept {
            // Under the goal's lock, the log is as this transaction left it.
            k.log = FileMark::of(&self.layout.events(id)).ok();
            keep_in(&mut self.kept(), id, k);
        }
    }
}
