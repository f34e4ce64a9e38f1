//! Loading a goal's state under its lock: the snapshot when it is current, else the log,
//! recovering from a crash (a torn line, a stale or missing view); and a glance at a goal.

use std::fs;
use std::sync::Arc;

use loopx_core::{Error, GoalId, Result};

use crate::codec;
use crate::fs as kfs;
use crate::log;
use crate::state::GoalState;
use crate::table;

use super::archive::archive_len;
use super::file::FileStore;
use super::kept::{Kept, Source, keep_in};
use super::mark::{FileMark, log_stat};
use super::replay::{chain_error, check_root, replay, root_matches};
use super::snapshot::{
    BodiesRef, Loaded, SNAPSHOT_SCHEMA_VERSION, Snapshot, SnapshotHeader, older_snapshot, split_snapshot,
    unhex,
};

/// What a transaction starts from: the state, its log's head, GOAL.md's digest as the
/// snapshot recorded it, and the snapshot, when it was current.
pub(super) struct Locked {
    pub(super) state: GoalState,
    pub(super) head: String,
    pub(super) views: Option<String>,
    pub(super) source: Option<Source>,
}

impl FileStore {
    /// Reads the snapshot and checks it against the log: its size and time, and its state's
    /// hash against the state root of the log's last line.
    /// Loads the snapshot of goal `id`, checked against the log; the state kept by the last
    /// transaction when the snapshot is still its own, taken out of the store for a new one
    /// (`take`) or copied.
    pub(super) fn load_snapshot(&self, id: &GoalId, take: bool) -> Result<Loaded> {
        let Some(bytes) = kfs::read_optional(&self.layout.snapshot(id))? else {
            return Ok(Loaded::Stale);
        };
        let bytes = Arc::new(bytes);
        let Some((file, from, to)) = split_snapshot(&bytes) else {
            return Ok(Loaded::Stale);
        };
        let events = self.layout.events(id);
        let mark = FileMark::of(&events)?;
        let (len, mtime) = (mark.len, mark.mtime_ns);
        let current = file.schema_version == SNAPSHOT_SCHEMA_VERSION
            && &file.goal_id == id
            && file.log_len == len
            && file.log_mtime_ns == mtime;
        if !current {
            return Ok(Loaded::Stale);
        }
        let body_file = match self.open_bodies(id, file.bodies.as_ref()) {
            Ok(f) => f,
            Err(loaded) => return Ok(loaded),
        };
        let root = log::last_root(&events, len).map_err(|e| Error::io("read", &events, &e))?;
        let kept = self.kept_state(id, &bytes, root.as_deref(), body_file.clone(), take, mark);
        let (state, source) = match kept {
            Some(kept) => kept,
            None => {
                let Ok((state, hashed)) = codec::decode(&bytes, from, to, table::Bodies::File(body_file))
                else {
                    return Ok(Loaded::Stale);
                };
                // The root is checked before anything of the state is used.
                let tampered = || {
                    Ok(Loaded::Tampered(
                        "snapshot.json does not hash to the state the event log records".into(),
                    ))
                };
                let source = match root {
                    Some(r) if codec::is_legacy_root(&r) || r.starts_with('b') => {
                        // A log whose last line an older loopx wrote has a root of an older
                        // kind, over the state as it encoded it; its next commit writes one of
                        // the new kind.
                        if !root_matches(&r, &state)? {
                            return tampered();
                        }
                        None
                    }
                    Some(r) if r != codec::state_root(&bytes[from..hashed]) => return tampered(),
                    Some(r) => Some(Source { bytes: vec![Arc::clone(&bytes)], root: r }),
                    None => None,
                };
                (Arc::new(state), source)
            }
        };
        // An archive shorter than the state says lost lines (rebuilt from the log); a longer
        // one holds lines of a commit that never finished, which the next append cuts.
        if archive_len(&self.layout.archive(id))? < state.archive.bytes {
            return Ok(Loaded::Stale);
        }
        // A read keeps what it decoded for the next load (sharing it costs nothing); a
        // transaction keeps its state when it ends.
        let source = match source {
            Some(source) if !take => {
                let k = Kept { source, state: Arc::clone(&state), log: Some(mark), unbased: false };
                keep_in(&mut self.kept(), id, k);
                None
            }
            source => source,
        };
        Ok(Loaded::Current(
            Box::new(Snapshot {
                schema_version: file.schema_version,
                goal_id: file.goal_id,
                seq: file.seq,
                head: file.head,
                log_len: file.log_len,
                log_mtime_ns: file.log_mtime_ns,
                goal_md_digest: file.goal_md_digest,
                state,
            }),
            source,
        ))
    }

    /// The body file a snapshot names, opened, when it is as the snapshot found it; else what
    /// that makes of the snapshot.
    fn open_bodies(
        &self,
        id: &GoalId,
        bodies: Option<&BodiesRef>,
    ) -> std::result::Result<Option<Arc<table::BodyFile>>, Loaded> {
        let Some(b) = bodies else { return Ok(None) };
        let path = self.layout.bodies(id, b.generation);
        if kfs::check_state_file(&path).is_err() {
            return Err(Loaded::Stale);
        }
        match log_stat(&path) {
            Ok(stat) if stat == (b.len, b.mtime_ns) => {}
            // The log has not moved since the snapshot (checked before): no commit wrote this
            // file since.
            Ok(_) => {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                return Err(Loaded::Tampered(format!("{name} changed after the snapshot was written")));
            }
            Err(_) => return Err(Loaded::Stale),
        }
        match table::BodyFile::open(&path, b.generation) {
            Ok(f) => Ok(Some(Arc::new(f))),
            Err(_) => Err(Loaded::Stale),
        }
    }

    /// A glance at goal `id` (see [`Store::glance`]): the snapshot read as far as its glance
    /// ends, checked as a load checks it (its header against the log and the body file, the
    /// glance against the log's last root with the key lines' hash the header records), but
    /// for the key lines, which are neither read nor hashed. `None` whenever anything is not
    /// as a current snapshot's: the whole load then finds out what.
    pub(super) fn glance_at(&self, id: &GoalId) -> Result<Option<(GoalState, table::Glance)>> {
        /// Enough for the header, the head and the glance of most goals at one read.
        const FIRST_READ: usize = 16 * 1024;
        let again =
            !self.glanced.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.clone());
        if again || self.kept().contains_key(id) {
            // A state at hand is as cheap to take whole; so is one a second question keeps.
            return Ok(None);
        }
        let path = self.layout.snapshot(id);
        let Ok(file) = fs::File::open(&path) else { return Ok(None) };
        let mut bytes = vec![0; FIRST_READ];
        let n = kfs::read_at_most(&file, 0, &mut bytes).map_err(|e| Error::io("read", &path, &e))?;
        bytes.truncate(n);
        let Some(nl) = crate::newline::find(&bytes) else { return Ok(None) };
        let Ok(header) = serde_json::from_slice::<SnapshotHeader>(&bytes[..nl]) else { return Ok(None) };
        let from = nl + 1;
        let Some(end) = codec::glance_len(&bytes[from..]).and_then(|len| len.checked_add(from)) else {
            return Ok(None);
        };
        if end > bytes.len() {
            let have = bytes.len();
            bytes.resize(end, 0);
            if kfs::read_at_most(&file, have as u64, &mut bytes[have..])
                .map_err(|e| Error::io("read", &path, &e))?
                != end - have
            {
                return Ok(None);
            }
        }
        bytes.truncate(end);
        let events = self.layout.events(id);
        let mark = FileMark::of(&events)?;
        let Some(glance) = header.glance.filter(|_| {
            header.schema_version == SNAPSHOT_SCHEMA_VERSION
                && &header.goal_id == id
                && header.log_len == mark.len
                && header.log_mtime_ns == mark.mtime_ns
        }) else {
            return Ok(None);
        };
        if self.witness(id).is_some_and(|w| w.disagrees(header.seq, &header.head)) {
            return Ok(None);
        }
        let Ok(body_file) = self.open_bodies(id, header.bodies.as_ref()) else { return Ok(None) };
        let Some(keys) = unhex(&glance.keys) else { return Ok(None) };
        let root = log::last_root(&events, mark.len).map_err(|e| Error::io("read", &events, &e))?;
        if root != Some(codec::glance_root(blake3::hash(&bytes[from..]).as_bytes(), &keys)) {
            return Ok(None);
        }
        let bytes = Arc::new(bytes);
        let Ok(Some((state, counts))) = codec::decode_glance(&bytes, from, body_file, glance.at) else {
            return Ok(None);
        };
        // What a read checks besides: an archive not shorter than the state says, and GOAL.md.
        if archive_len(&self.layout.archive(id))? < state.archive.bytes || !self.layout.goal_md(id).exists() {
            return Ok(None);
        }
        Ok(Some((state, counts)))
    }

    /// Under the goal lock: the current state, recovering from a crash if needed; a state kept
    /// by the last transaction is taken out of the store for this one (`take`) or copied.
    pub(super) fn load_locked(&self, id: &GoalId, take: bool) -> Result<Locked> {
        if take && let Some(locked) = self.take_unchanged(id) {
            return Ok(locked);
        }
        let loaded = self.load_snapshot(id, take)?;
        if let Loaded::Current(s, mut source) = loaded {
            if !self.layout.goal_md(id).exists() {
                self.reporter.warn(&format!("recovered goal {id}: GOAL.md was missing; regenerated"));
                self.write_projections(id, &s.state, &s.head, None)?;
                source = None;
            }
            if let Some(w) = self.witness(id) {
                w.check(id, s.seq, &s.head)?;
            }
            let state = Arc::unwrap_or_clone(s.state);
            return Ok(Locked { state, head: s.head, views: Some(s.goal_md_digest), source });
        }
        if let Loaded::Tampered(what) = &loaded {
            self.reporter.warn(&format!("goal {id}: {what} (edited by hand?); rebuilt from the log"));
        }
        self.goal_exists_check(id)?;
        let events = self.layout.events(id);
        // A torn final line is cut before the log is read, found from the log's end a window at
        // a time: however much was appended, it is never read whole.
        let torn = kfs::cut_torn_tail(&events)?;
        let bytes = fs::read(&events).map_err(|e| Error::io("read", &events, &e))?;
        let scan = log::scan(&bytes).map_err(|(_, b)| chain_error(&events, &b))?;
        let torn = torn + scan.torn_bytes;
        if scan.torn_bytes > 0 {
            kfs::truncate_durable(&events, scan.valid_len)?;
        }
        if torn > 0 {
            self.reporter.warn(&format!(
                "recovered goal {id}: cut an incomplete final line ({torn} bytes) from events.jsonl; it was never committed"
            ));
        }
        let old = kfs::read_optional(&self.layout.snapshot(id))?.map(|b| {
            let b = Arc::new(b);
            Snapshot::decode(&b, &self.layout, id).ok_or_else(|| older_snapshot(&b))
        });
        let (state, archive) = replay(id, &scan)?;
        let legacy = check_root(id, &scan, &state, &archive)?;
        match old {
            None => self
                .reporter
                .warn(&format!("recovered goal {id}: snapshot.json was missing; rebuilt from the event log")),
            // A snapshot from before the archive: the upgrade below says what happened.
            Some(Err(_)) if legacy => {}
            Some(Err(Some(v))) => self.reporter.warn(&format!(
                "goal {id}: snapshot.json was written by an older loopx (version {v}); rebuilt from the event log"
            )),
            Some(Err(None)) => self.reporter.warn(&format!(
                "recovered goal {id}: snapshot.json was unreadable; rebuilt from the event log"
            )),
            Some(Ok(snap)) => {
                if snap.seq > state.seq {
                    return Err(Error::integrity(format!(
                        "goal {id}: snapshot.json is at event {} but events.jsonl ends at event {}: committed events are missing from the log",
                        snap.seq, state.seq
                    )));
                }
                let matches = snap.seq == 0
                    || scan.hashes.get(usize::try_from(snap.seq - 1).unwrap_or(usize::MAX))
                        == Some(&snap.head);
                if !matches {
                    return Err(Error::integrity(format!(
                        "goal {id}: snapshot.json does not match event {} of events.jsonl",
                        snap.seq
                    )));
                }
                if snap.seq < state.seq {
                    self.reporter.warn(&format!(
                        "recovered goal {id}: the snapshot was {} event(s) behind the log; rebuilt",
                        state.seq - snap.seq
                    ));
                }
            }
        }
        // A crash mid-write leaves its temporary file; under the lock no one else is writing.
        for tmp in kfs::stale_temp_files(&self.layout.goal_dir(id)) {
            kfs::remove_file(&tmp)?;
            let name = tmp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            self.reporter
                .warn(&format!("recovered goal {id}: removed {name}, left by a write that never finished"));
        }
        if let Some(w) = self.witness(id) {
            w.check(id, state.seq, scan.head())?;
        }
        let mut head = scan.head().to_owned();
        self.write_archive(id, &archive)?;
        let mut state = state;
        if legacy {
            (state, head) = self.record_upgrade(id, state, head)?;
        }
        // The log is the truth and was read whole: a view that cannot be written now (a full
        // disk) is rebuilt by a later command; this one goes on from the log.
        if let Err(e) = self.write_projections(id, &state, &head, None) {
            self.reporter.warn(&format!(
                "goal {id}: the views could not be rewritten ({}); reading from the log",
                e.message
            ));
        }
        Ok(Locked { state, head, views: None, source: None })
    }
}
