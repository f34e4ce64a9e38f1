//! The embedded default store: [`FileStore`], files under `.loopx/`, and its [`Store`]
//! methods.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopx_core::event::Event;
use loopx_core::{Clock, Error, GoalId, Result};

use crate::Reporter;
use crate::codec;
use crate::fs as kfs;
use crate::lock::{self, LockGuard};
use crate::log::{self, EventLine, Scan};
use crate::project::{Layout, ProjectFile};
use crate::state::{ArchiveHead, ArchivedTodo, GoalState};
use crate::table;

use super::archive::{archive_text, read_archive};
use super::kept::{Kept, Wrote};
use super::load::Locked;
use super::mark::FileMark;
use super::open::{read_project_marked, write_project_file};
use super::options::{InjectedCrash, StoreOptions};
use super::replay::{chain_error, genesis, lines_of, verify_lines};
use super::snapshot::Loaded;
use super::stream::stream_log;
use super::traits::{Commit, Store};
use super::txn::Txn;

/// The embedded default store: files under `.loopx/`.
pub struct FileStore {
    pub(super) layout: Layout,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) reporter: Arc<dyn Reporter>,
    pub(super) options: StoreOptions,
    /// Each goal's state as this store last read it or its last transaction left it.
    pub(super) kept: Mutex<HashMap<GoalId, Kept>>,
    /// What the last snapshot this store wrote holds besides the state's hashed bytes.
    pub(super) wrote: Mutex<Option<Wrote>>,
    /// `project.json` as this store last read it, by the file's mark then: read again only
    /// when it has changed (every command reads it, some several times).
    pub(super) project: Mutex<Option<(FileMark, ProjectFile)>>,
    /// The goals this store has glanced at ([`Store::glance`]): a process that asks about a
    /// goal again lives long enough to keep its whole state, which it then reads (and keeps).
    pub(super) glanced: Mutex<std::collections::HashSet<GoalId>>,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore").field("root", &self.layout.root()).finish_non_exhaustive()
    }
}

impl FileStore {
    /// Test-only fault injection at a named commit step: `LOOPX_FAULT=<point>` aborts the
    /// process there; `LOOPX_FAULT=hang-<point>` sleeps there (holding the lock) for a minute;
    /// `unwind-<point>` unwinds from there with an [`InjectedCrash`] (the simulation's kill -9:
    /// no code after the point runs but destructors — the lock's release, as the operating
    /// system releases a dead process's lock — and the caller hears nothing).
    pub(super) fn fault_point(&self, point: &str) {
        match self.options.fault.as_deref() {
            Some(f) if f == point => std::process::abort(),
            Some(f) if f.strip_prefix("hang-") == Some(point) => std::thread::sleep(Duration::from_secs(60)),
            Some(f) if f.strip_prefix("unwind-") == Some(point) => {
                std::panic::resume_unwind(Box::new(InjectedCrash { point: point.to_owned() }))
            }
            _ => {}
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn lock_project(&self) -> Result<LockGuard> {
        lock::acquire(
            &self.layout.project_lock(),
            "the project",
            &self.options.holder,
            self.clock.now(),
            self.options.lock_timeout,
            self.reporter.clone(),
        )
    }

    pub(crate) fn lock_goal(&self, id: &GoalId) -> Result<LockGuard> {
        if self.options.fault.as_deref() == Some("busy-lock") {
            // Another process holds the goal's lock past the wait: refused as `acquire` would.
            return Err(Error::busy(format!(
                "goal {id} is busy: its lock has been held for over {} ms by another process (injected)",
                self.options.lock_timeout.as_millis()
            )));
        }
        lock::acquire(
            &self.layout.goal_lock(id),
            &format!("goal {id}"),
            &self.options.holder,
            self.clock.now(),
            self.options.lock_timeout,
            self.reporter.clone(),
        )
    }

    pub(super) fn write_project(&self, p: &ProjectFile) -> Result<()> {
        write_project_file(&self.layout, p)
    }

    /// Every path a command on goal `id` touches, checked to be a regular file or directory
    /// inside `.loopx/`, never a link out of it.
    pub(crate) fn state_paths(&self, id: Option<&GoalId>) -> Vec<std::path::PathBuf> {
        let l = &self.layout;
        let mut v = vec![l.state_dir(), l.project_file(), l.project_lock(), l.goals_dir()];
        if let Some(id) = id {
            v.extend([
                l.goal_dir(id),
                l.events(id),
                l.snapshot(id),
                l.goal_md(id),
                l.goal_lock(id),
                l.archive(id),
            ]);
        }
        v
    }

    pub(super) fn goal_exists_check(&self, id: &GoalId) -> Result<()> {
        let events = self.layout.events(id);
        let mut found = false;
        for p in self.state_paths(Some(id)) {
            let m = kfs::check_state_file(&p)?;
            found |= p == events && m.is_some_and(|m| m.is_file());
        }
        if found {
            return Ok(());
        }
        Err(Error::integrity(format!(
            "goal {id} is listed in project.json but its event log {} is missing",
            events.display()
        )))
    }

    /// This machine's witness of goal `id`'s head, where one is kept.
    pub fn witness(&self, id: &GoalId) -> Option<crate::witness::Witness> {
        self.options.witness.as_deref().map(|dir| crate::witness::Witness::of(dir, self.layout.root(), id))
    }

    /// Records a commit in the witness; one that cannot be written is said, never fails the
    /// commit (the witness is then behind, which only weakens what it guards).
    fn witnessed(&self, id: &GoalId, seq: u64, head: &str, person_key: Option<&str>) {
        if let Some(w) = self.witness(id)
            && let Err(e) = w.record(seq, head, person_key)
        {
            self.reporter.warn(&format!(
                "goal {id}: this machine's record of its head ({}) could not be written: {e}",
                w.path().display()
            ));
        }
    }
}

impl FileStore {
    /// Appends many events in one locked pass with one fsync, for fixtures and imports.
    /// `make` is called with the current state and returns the next event (already validated
    /// by the rules) or `None` to stop; each event is applied before the next is asked for, and
    /// one that contradicts the state aborts the batch before anything is written.
    pub fn bulk_append(
        &self,
        id: &GoalId,
        actor: &str,
        make: &mut dyn FnMut(&GoalState) -> Result<Option<Event>>,
    ) -> Result<u64> {
        self.goal_exists_check(id)?;
        let _guard = self.lock_goal(id)?;
        let Locked { mut state, mut head, .. } = self.load_locked(id, true)?;
        let archive_before = state.archive.clone();
        let mut lines = Vec::new();
        let mut archived = Vec::new();
        while let Some(event) = make(&state)? {
            let line = EventLine {
                seq: state.seq + 1,
                at: self.clock.now(),
                actor: actor.to_owned(),
                event,
                turn: None,
                receipt: None,
                root: None,
                prev: String::new(),
                signature: None,
            };
            state
                .apply(&line)
                .map_err(|e| Error::refused(format!("event {} does not apply: {e}", line.seq)))?;
            archived.append(&mut state.archived_now);
            lines.push(line);
        }
        // Only the last line's root is ever checked; hashing every intermediate state would
        // cost the whole state per event.
        let state_keys = codec::encode_keys(&state, 0)?;
        if let Some(last) = lines.last_mut() {
            last.root = Some(codec::state_root(&state_keys));
        }
        let mut text = String::new();
        let n = lines.len() as u64;
        for mut line in lines {
            line.prev = head;
            let encoded = serde_json::to_string(&line)
                .map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
            head = log::line_hash(encoded.as_bytes());
            text.push_str(&encoded);
            text.push('\n');
        }
        let events = self.layout.events(id);
        let mut file = kfs::open_append(&events)?;
        kfs::append_durable(&mut file, &events, text.as_bytes())?;
        if !archived.is_empty() {
            self.append_archive(id, &archive_before, &archived)?;
        }
        self.write_projections_json(id, &state, &state_keys, None, &head, None)?;
        Ok(n)
    }
}

impl Store for FileStore {
    fn project(&self) -> Result<ProjectFile> {
        let path = self.layout.project_file();
        let mut kept = self.project.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some((mark, p)), Ok(now)) = (kept.as_ref(), FileMark::of(&path))
            && *mark == now
        {
            return Ok(p.clone());
        }
        let (p, mark) = read_project_marked(&self.layout)?;
        *kept = Some((mark, p.clone()));
        Ok(p)
    }

    fn update_project(&self, f: &mut dyn FnMut(&mut ProjectFile) -> Result<bool>) -> Result<ProjectFile> {
        let _guard = self.lock_project()?;
        let mut p = self.project()?;
        if f(&mut p)? {
            self.write_project(&p)?;
        }
        Ok(p)
    }

    fn create_goal(&self, id: &GoalId, first: Event, make_default: bool) -> Result<GoalState> {
        let _project = self.lock_project()?;
        let mut project = self.project()?;
        if project.has_goal(id) {
            return Err(Error::conflict(format!("goal {id} already exists"))
                .with_hint(format!("see it with: loopx goal show --goal-id {id}")));
        }
        let events = self.layout.events(id);
        if fs::metadata(&events).is_ok_and(|m| m.len() > 0) {
            return Err(Error::integrity(format!(
                "{} holds events but project.json does not list goal {id}",
                events.display()
            )));
        }
        kfs::create_dir_all(&self.layout.goal_dir(id))?;
        let state = {
            let _goal = self.lock_goal(id)?;
            let (state, text) = genesis(id, first, self.clock.now())?;
            let mut file = kfs::open_append(&events)?;
            kfs::append_durable(&mut file, &events, format!("{text}\n").as_bytes())?;
            kfs::sync_dir(&self.layout.goal_dir(id))?;
            let head = log::line_hash(text.as_bytes());
            self.write_projections(id, &state, &head, None)?;
            self.witnessed(id, state.seq, &head, state.goal.person_key.as_deref());
            state
        };
        project.add_goal(id, state.goal.title.clone(), state.goal.created_at, make_default);
        self.write_project(&project)?;
        Ok(state)
    }

    fn glance(&self, id: &GoalId) -> Result<Option<(GoalState, table::Glance)>> {
        self.glance_at(id)
    }

    fn seen_person_key(&self, id: &GoalId) -> Option<String> {
        self.witness(id).and_then(|w| w.seen_key())
    }

    fn read(&self, id: &GoalId) -> Result<Arc<GoalState>> {
        if let Some(state) = self.unchanged(id) {
            return Ok(state);
        }
        if let Loaded::Current(s, _) = self.load_snapshot(id, false)?
            && self.layout.goal_md(id).exists()
            && !self.witness(id).is_some_and(|w| w.disagrees(s.seq, &s.head))
        {
            return Ok(s.state);
        }
        self.goal_exists_check(id)?;
        // Not current: a writer is mid-commit, a crash interrupted one, or the log was
        // changed by hand. Take the lock and let the mutation path recover or refuse.
        let _guard = self.lock_goal(id)?;
        self.load_locked(id, false).map(|l| Arc::new(l.state))
    }

    fn transact(&self, id: &GoalId, f: &mut dyn FnMut(&mut Txn<'_>) -> Result<()>) -> Result<()> {
        let _dirs = kfs::RealDirs::begin();
        self.goal_exists_check(id)?;
        let _guard = self.lock_goal(id)?;
        self.wrote.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let Locked { state, head, views, source } = self.load_locked(id, true)?;
        let hint = fs::metadata(self.layout.snapshot(id)).map_or(0, |m| m.len());
        let mut txn =
            Txn::new(self, id.clone(), state, head, views).with_size_hint(usize::try_from(hint).unwrap_or(0));
        txn.strict_as_seen(self.seen_person_key(id));
        let result = f(&mut txn);
        self.keep(id, txn, source);
        result
    }

    fn scan(&self, id: &GoalId) -> Result<Scan> {
        self.goal_exists_check(id)?;
        let events = self.layout.events(id);
        let bytes = fs::read(&events).map_err(|e| Error::io("read", &events, &e))?;
        log::scan(&bytes).map_err(|(_, b)| chain_error(&events, &b))
    }

    fn each_line(&self, id: &GoalId, f: &mut dyn FnMut(EventLine) -> Result<bool>) -> Result<()> {
        self.goal_exists_check(id)?;
        let events = self.layout.events(id);
        let file = fs::File::open(&events).map_err(|e| Error::io("read", &events, &e))?;
        stream_log(&events, file, f)
    }

    fn archive(&self, id: &GoalId, head: &ArchiveHead) -> Result<Vec<ArchivedTodo>> {
        if head.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.layout.archive(id);
        let bytes = kfs::read_optional(&path)?.unwrap_or_default();
        read_archive(&path, &bytes, head)
    }

    /// Append and fsync the line; then the archive, then GOAL.md and the snapshot.
    fn append(&self, id: &GoalId, c: &Commit<'_>) -> Result<()> {
        let events = self.layout.events(id);
        let mut file = kfs::open_append(&events)?;
        self.fault_point("after-lock");
        if self.options.fault.as_deref() == Some("disk-full") {
            let full = std::io::Error::from_raw_os_error(28); // ENOSPC
            return Err(Error::io("append to", &events, &full));
        }
        let mut text = String::with_capacity(c.line.len() + 1);
        text.push_str(c.line);
        text.push('\n');
        if self.options.fault.as_deref() == Some("unwind-torn-append") {
            // The power went out halfway through the write.
            kfs::append_durable(&mut file, &events, &text.as_bytes()[..text.len() / 2])?;
        }
        self.fault_point("torn-append");
        kfs::append_durable(&mut file, &events, text.as_bytes())?;
        self.fault_point("after-append");
        // The event is durable; the archive follows it (a crash before the snapshot is
        // written leaves a stale snapshot, and recovery rebuilds the archive from the log).
        let archived = c.state.archived_now.is_empty()
            || match self.append_archive(id, c.archive_before, &c.state.archived_now) {
                Ok(()) => true,
                Err(e) => {
                    self.reporter.warn(&format!(
                        "the change is committed, but the archive could not be written ({}); the next command rebuilds it",
                        e.message
                    ));
                    let _ = fs::remove_file(self.layout.snapshot(id));
                    false
                }
            };
        self.fault_point("after-archive");
        // The event is committed: whatever happens to the views now, the command succeeded.
        // A view that could not be written is stale, and the next command rebuilds it.
        if let Err(e) = self.write_projections_json(id, c.state, c.state_keys, c.keys_hash, c.hash, c.views) {
            self.reporter.warn(&format!(
                "the change is committed, but the goal's views could not be written ({}); the next command rebuilds them",
                e.message
            ));
        }
        self.witnessed(id, c.state.seq, c.hash, c.state.goal.person_key.as_deref());
        if !archived {
            // Nothing of this commit is kept: the next read checks the archive and rebuilds it.
            self.wrote.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        }
        Ok(())
    }

    fn root(&self) -> &Path {
        self.layout.root()
    }

    fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    fn reporter(&self) -> &dyn Reporter {
        self.reporter.as_ref()
    }

    fn log_lines(&self, id: &GoalId) -> Result<Vec<String>> {
        self.goal_exists_check(id)?;
        let _guard = self.lock_goal(id)?;
        let events = self.layout.events(id);
        let bytes = fs::read(&events).map_err(|e| Error::io("read", &events, &e))?;
        let scan = log::scan(&bytes).map_err(|(_, b)| chain_error(&events, &b))?;
        let valid = usize::try_from(scan.valid_len).unwrap_or(usize::MAX);
        lines_of(&bytes[..valid.min(bytes.len())])
    }

    /// Writes the log, then the views a replay of it makes.
    fn import_goal(&self, id: &GoalId, lines: &[String]) -> Result<GoalState> {
        let (scan, state, archive) = verify_lines(id, lines)?;
        let events = self.layout.events(id);
        if events.exists() {
            return Err(Error::conflict(format!("goal {id} already exists in {}", events.display())));
        }
        kfs::create_dir_all(&self.layout.goal_dir(id))?;
        let _guard = self.lock_goal(id)?;
        let mut file = kfs::open_append(&events)?;
        kfs::append_durable(&mut file, &events, archive_text(lines).as_bytes())?;
        kfs::sync_dir(&self.layout.goal_dir(id))?;
        self.write_archive(id, &archive)?;
        self.write_projections(id, &state, scan.head(), None)?;
        self.witnessed(id, state.seq, scan.head(), state.goal.person_key.as_deref());
        Ok(state)
    }
}
