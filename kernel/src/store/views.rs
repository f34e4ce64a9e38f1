//! Writing a goal's views after a commit: GOAL.md, then the body file and `snapshot.json`.

use std::fs;

use loopx_core::{Error, GoalId, Result};

use crate::codec;
use crate::fs as kfs;
use crate::log;
use crate::render;
use crate::state::GoalState;
use crate::table;

use super::file::FileStore;
use super::kept::Wrote;
use super::mark::log_stat;
use super::snapshot::{BodiesRef, GlanceRef, SNAPSHOT_SCHEMA_VERSION, SnapshotHeader, hex, push_decimal};

/// What [`FileStore::write_bodies`] wrote: the body file, the offsets line, whether the file is
/// new, and the offsets of the rows it was asked for.
struct BodiesWritten {
    file: Option<BodiesRef>,
    offsets: Vec<u8>,
    fresh: bool,
    wanted: Vec<u64>,
}

impl FileStore {
    /// Writes GOAL.md, then snapshot.json, for `state`, whose last line hashes to `head`.
    /// GOAL.md goes first: the snapshot's rename is the last step, so after any crash before
    /// it the snapshot is stale, and recovery rewrites both.
    pub(super) fn write_projections(
        &self,
        id: &GoalId,
        state: &GoalState,
        head: &str,
        prior_md: Option<&str>,
    ) -> Result<()> {
        self.write_projections_json(id, state, &codec::encode_keys(state, 0)?, None, head, prior_md)
    }

    /// [`FileStore::write_projections`] with the state already encoded (the bytes its root
    /// was computed from, which the snapshot holds as they are).
    pub(super) fn write_projections_json(
        &self,
        id: &GoalId,
        state: &GoalState,
        state_keys: &[u8],
        keys_hash: Option<[u8; 32]>,
        head: &str,
        prior_md: Option<&str>,
    ) -> Result<()> {
        self.fault_point("before-goal-md");
        if self.options.fault.as_deref() == Some("fail-projections") {
            return Err(Error::io(
                "write",
                &self.layout.goal_md(id),
                &std::io::Error::other("injected failure"),
            ));
        }
        let md = render::goal_md(state);
        let md_path = self.layout.goal_md(id);
        // Read once: to tell a hand edit, and to leave the file alone when it already reads so.
        let existing = match prior_md {
            Some(_) => kfs::read_optional(&md_path)?,
            None => fs::read(&md_path).ok(),
        };
        if let (Some(prior), Some(existing)) = (prior_md, &existing)
            && log::line_hash(existing) != prior
        {
            self.reporter.warn(&format!(
                "{} was edited by hand and has been regenerated; change goal state only through loopx commands",
                md_path.display()
            ));
        }
        kfs::write_view_if_changed(&md_path, md.as_bytes(), existing.as_deref())?;
        let glanced: Vec<usize> =
            codec::glance_ids(state_keys).into_iter().filter_map(|t| state.todos.position(t)).collect();
        let BodiesWritten { file: bodies, offsets, fresh, wanted: at } =
            self.write_bodies(id, state, &glanced)?;
        self.fault_point("after-bodies");
        let glance = codec::glance_end(state_keys).map(|end| GlanceRef {
            keys: hex(&keys_hash.unwrap_or_else(|| *blake3::hash(&state_keys[end..]).as_bytes())),
            at,
        });
        let (log_len, log_mtime_ns) = log_stat(&self.layout.events(id))?;
        let header = SnapshotHeader {
            schema_version: SNAPSHOT_SCHEMA_VERSION,
            goal_id: id.clone(),
            seq: state.seq,
            head: head.to_owned(),
            log_len,
            log_mtime_ns,
            goal_md_digest: log::line_hash(md.as_bytes()),
            bodies,
            glance,
        };
        let mut header = serde_json::to_vec(&header)
            .map_err(|e| Error::internal(format!("cannot encode snapshot: {e}")))?;
        header.push(b'\n');
        kfs::swap_in_view(&self.layout.snapshot(id), &[&header, state_keys, &offsets], &|| {
            self.fault_point("before-snapshot-rename")
        })?;
        // A new body file is named by the snapshot now: the older ones are no one's.
        if fresh {
            self.remove_bodies_but(id, state.seq);
        }
        *self.wrote.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Wrote { id: id.clone(), seq: state.seq, header, offsets });
        Ok(())
    }

    /// Puts the live todos' JSON in a body file: appended to the current one, or, when that
    /// is more than half dead or there is none, all of them in a new one named for this commit.
    /// Returns the file, the offsets line, whether the file is new, and the offsets of the
    /// rows at the places `wanted` names (in order).
    fn write_bodies(&self, id: &GoalId, state: &GoalState, wanted: &[usize]) -> Result<BodiesWritten> {
        if state.todos.is_empty() {
            return Ok(BodiesWritten { file: None, offsets: Vec::new(), fresh: false, wanted: Vec::new() });
        }
        let current = state.todos.body_file().cloned();
        let current_len = current.as_ref().and_then(|f| fs::metadata(&f.path).ok()).map(|m| m.len());
        let places = state.todos.places(current.as_ref().map(|f| f.generation))?;
        let live: u64 = places
            .iter()
            .map(|p| match p {
                table::Place::At(_, len) => *len as u64 + 1,
                table::Place::Write(b) => b.len() as u64 + 1,
            })
            .sum();
        let (generation, mut at, places, fresh) = match (&current, current_len) {
            (Some(f), Some(len)) if len <= 2 * live + (1 << 20) => (f.generation, len, places, false),
            // All of them, read from the old file (and checked) where they are stored.
            _ => (state.seq, 0, state.todos.places(None)?, true),
        };
        let mut offsets = Vec::with_capacity(places.len() * 8);
        let mut out = Vec::new();
        let mut picked = Vec::with_capacity(wanted.len());
        for (i, place) in places.iter().enumerate() {
            let off = match place {
                table::Place::At(off, _) => *off,
                table::Place::Write(b) => {
                    out.extend_from_slice(b);
                    out.push(b'\n');
                    at += b.len() as u64 + 1;
                    at - b.len() as u64 - 1
                }
            };
            if wanted.get(picked.len()) == Some(&i) {
                picked.push(off);
            }
            if !offsets.is_empty() {
                offsets.push(b' ');
            }
            push_decimal(&mut offsets, off);
        }
        offsets.push(b'\n');
        let path = self.layout.bodies(id, generation);
        if fresh {
            kfs::atomic_write_with(&path, &out, kfs::Sync::View, &|| {
                self.fault_point("before-bodies-rename")
            })?;
        } else if !out.is_empty() {
            let mut file = kfs::open_append(&path)?;
            std::io::Write::write_all(&mut file, &out).map_err(|e| Error::io("append to", &path, &e))?;
        }
        let (len, mtime_ns) = log_stat(&path)?;
        Ok(BodiesWritten {
            file: Some(BodiesRef { generation, len, mtime_ns }),
            offsets,
            fresh,
            wanted: picked,
        })
    }

    /// Removes the goal's body files other than generation `keep` (best effort: one left
    /// behind is removed by the next new one).
    fn remove_bodies_but(&self, id: &GoalId, keep: u64) {
        let Ok(entries) = fs::read_dir(self.layout.goal_dir(id)) else { return };
        let keep = self.layout.bodies(id, keep);
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("todos-") && name.ends_with(".dat") && e.path() != keep {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}
