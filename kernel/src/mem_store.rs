//! The in-memory store: each goal's hash-chained log, its state and its archive kept in the
//! process, behind the same commit protocol as the file store (the state root recorded on
//! every line, a replay checked against it). For tests and simulations, where a file system
//! costs time and proves nothing: nothing outlives the process.
//!
//! Clones share the data, like two processes opening one project. Writers of a goal take its
//! lock, in order, for as long as their transaction runs; a reader takes none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use loopx_core::event::Event;
use loopx_core::kernel::{DoctorCheck, DoctorGoal, DoctorReport};
use loopx_core::{Clock, Error, GoalId, Result};

use crate::Reporter;
use crate::doctor::verify_log;
use crate::log::{self, EventLine, Scan};
use crate::project::ProjectFile;
use crate::state::{ArchiveHead, ArchivedTodo, GoalState};
use crate::store::{
    Commit, Doctor, Store, Txn, archive_text, chain_error, check_root, encode_state, events_missing, genesis,
    lines_of, read_archive, replay, verify_lines,
};

/// The embedded store's stand-in, in memory.
#[derive(Clone)]
pub struct MemStore {
    root: PathBuf,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    project: Mutex<ProjectFile>,
    goals: Mutex<BTreeMap<GoalId, Arc<MemGoal>>>,
}

#[derive(Default)]
struct MemGoal {
    /// Held by a transaction from its load to its end: one writer at a time.
    writer: Mutex<()>,
    data: Mutex<GoalData>,
}

#[derive(Default)]
struct GoalData {
    /// The log's bytes, one JSON line per event, as `events.jsonl` holds them.
    log: Vec<u8>,
    /// The state after the log's last line, and that line's hash; `None` once the log was
    /// changed behind the store's back (it is then replayed and checked, as the file store
    /// replays a log whose size or time changed).
    current: Option<(Arc<GoalState>, String)>,
    /// Archive lines, in order.
    archive: Vec<String>,
    /// The last event this store committed (kept apart from the log, as the file store's
    /// snapshot records it): a log that ends before it lost committed events.
    committed: u64,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore").field("root", &self.root).finish_non_exhaustive()
    }
}

/// A poisoned lock means a thread panicked mid-commit: the store cannot vouch for its data.
fn locked<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock().map_err(|_| Error::internal("a thread panicked while it held the in-memory store"))
}

impl MemStore {
    /// An empty project whose work happens in `root` (command gates run there).
    pub fn new(root: &Path, clock: Arc<dyn Clock>, reporter: Arc<dyn Reporter>) -> Self {
        Self { root: root.to_path_buf(), clock, reporter, inner: Arc::default() }
    }

    fn goal(&self, id: &GoalId) -> Result<Arc<MemGoal>> {
        locked(&self.inner.goals)?.get(id).cloned().ok_or_else(|| {
            Error::not_found(format!("goal {id} not found in this project"))
                .with_hint("see the goals with: loopx goal list")
        })
    }

    /// Changes goal `id`'s log bytes as a hand edit or a torn write would; the next command
    /// sees it as the file store sees a changed `events.jsonl`. For the store conformance
    /// suite.
    pub fn edit_log(&self, id: &GoalId, edit: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        let goal = self.goal(id)?;
        let mut data = locked(&goal.data)?;
        edit(&mut data.log);
        data.current = None;
        Ok(())
    }

    /// Goal `id`'s log bytes from byte `offset` on: what was appended since a reader last
    /// looked (the simulation's checker reads each line once).
    pub fn log_from(&self, id: &GoalId, offset: usize) -> Result<Vec<u8>> {
        let goal = self.goal(id)?;
        let data = locked(&goal.data)?;
        Ok(data.log.get(offset..).unwrap_or_default().to_vec())
    }

    /// The state and head, replaying the log (and cutting a torn last line) if it changed.
    fn load<'g>(&self, id: &GoalId, data: &'g mut GoalData) -> Result<&'g (Arc<GoalState>, String)> {
        if data.current.is_none() {
            let scan = log::scan(&data.log).map_err(|(_, b)| chain_error(&log_name(id), &b))?;
            if scan.torn_bytes > 0 {
                data.log.truncate(usize::try_from(scan.valid_len).unwrap_or(usize::MAX));
                self.reporter.warn(&format!(
                    "recovered goal {id}: cut an incomplete final line ({} bytes) from its log; it was never committed",
                    scan.torn_bytes
                ));
            }
            if data.committed > scan.lines.len() as u64 {
                return Err(events_missing(id, data.committed, scan.lines.len() as u64));
            }
            let (state, archive) = replay(id, &scan)?;
            if check_root(id, &scan, &state, &archive)? {
                return Err(Error::integrity(format!("goal {id}: the log was written by an older loopx")));
            }
            data.archive = archive;
            data.current = Some((Arc::new(state), scan.head().to_owned()));
        }
        data.current.as_ref().ok_or_else(|| Error::internal("no state after loading"))
    }

    fn scan_goal(&self, id: &GoalId) -> Result<Scan> {
        let goal = self.goal(id)?;
        let data = locked(&goal.data)?;
        log::scan(&data.log).map_err(|(_, b)| chain_error(&log_name(id), &b))
    }

    fn goal_report(&self, id: &GoalId) -> Result<DoctorGoal> {
        let goal = self.goal(id)?;
        let _writer = locked(&goal.writer)?;
        let data = locked(&goal.data)?;
        let mut checks = Vec::new();
        let (scan, replayed, archive) = match verify_log(id, &data.log, &mut checks) {
            Ok(verified) => verified,
            Err(events) => return Ok(DoctorGoal { goal_id: id.clone(), events, checks }),
        };
        let events = scan.lines.len() as u64;
        if let Some((state, _)) = &data.current {
            let same = encode_state(state)? == encode_state(&replayed)?;
            checks.push(check(
                "state",
                same,
                if same { "matches a full replay" } else { "differs from a replay" },
            ));
        }
        let same = archive == data.archive;
        checks.push(check(
            "archive",
            same,
            if same { "matches a full replay" } else { "differs from a replay" },
        ));
        Ok(DoctorGoal { goal_id: id.clone(), events, checks })
    }
}

fn log_name(id: &GoalId) -> PathBuf {
    PathBuf::from(format!("memory:goals/{id}/events.jsonl"))
}

fn check(name: &str, ok: bool, detail: &str) -> DoctorCheck {
    DoctorCheck { name: name.to_owned(), ok, detail: detail.to_owned(), note: false }
}

impl Doctor for MemStore {
    fn doctor(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        crate::doctor::report(&self.project()?, only, "in memory", |g| self.goal_report(g))
    }

    fn repair_project(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Rebuilds each goal's state and archive from its log (which must verify).
    fn repair(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        let goals = self.project()?.goals_or(only);
        let mut actions = Vec::new();
        for id in &goals {
            let goal = self.goal(id)?;
            let _writer = locked(&goal.writer)?;
            let mut data = locked(&goal.data)?;
            data.current = None;
            self.load(id, &mut data)?;
            actions.push(format!("goal {id}: state and archive rebuilt from its log"));
        }
        Ok(crate::doctor::with_repairs(self.doctor(only)?, actions))
    }
}

impl Store for MemStore {
    fn project(&self) -> Result<ProjectFile> {
        Ok(locked(&self.inner.project)?.clone())
    }

    fn update_project(&self, f: &mut dyn FnMut(&mut ProjectFile) -> Result<bool>) -> Result<ProjectFile> {
        let mut project = locked(&self.inner.project)?;
        let mut next = project.clone();
        if f(&mut next)? {
            *project = next;
        }
        Ok(project.clone())
    }

    fn create_goal(&self, id: &GoalId, first: Event, make_default: bool) -> Result<GoalState> {
        let mut project = locked(&self.inner.project)?;
        if project.has_goal(id) {
            return Err(Error::conflict(format!("goal {id} already exists"))
                .with_hint(format!("see it with: loopx goal show --goal-id {id}")));
        }
        let (state, text) = genesis(id, first, self.clock.now())?;
        let data = GoalData {
            log: format!("{text}\n").into_bytes(),
            current: Some((Arc::new(state.clone()), log::line_hash(text.as_bytes()))),
            archive: Vec::new(),
            committed: 1,
        };
        locked(&self.inner.goals)?
            .insert(id.clone(), Arc::new(MemGoal { writer: Mutex::new(()), data: Mutex::new(data) }));
        project.add_goal(id, state.goal.title.clone(), state.goal.created_at, make_default);
        Ok(state)
    }

    fn read(&self, id: &GoalId) -> Result<Arc<GoalState>> {
        let goal = self.goal(id)?;
        let mut data = locked(&goal.data)?;
        self.load(id, &mut data).map(|(state, _)| Arc::clone(state))
    }

    /// The state moves into the transaction and back out of it, uncopied unless a read still
    /// holds it; a reader meanwhile replays the log, as it would after a crash.
    fn transact(&self, id: &GoalId, f: &mut dyn FnMut(&mut Txn<'_>) -> Result<()>) -> Result<()> {
        let goal = self.goal(id)?;
        let _writer = locked(&goal.writer)?;
        let (state, head) = {
            let mut data = locked(&goal.data)?;
            self.load(id, &mut data)?;
            let (state, head) =
                data.current.take().ok_or_else(|| Error::internal("no state after loading"))?;
            (Arc::unwrap_or_clone(state), head)
        };
        let mut txn = Txn::new(self, id.clone(), state, head, None);
        let result = f(&mut txn);
        let mut data = locked(&goal.data)?;
        // The state of the log as it stands, unless a reader has already replayed it.
        if data.current.is_none() {
            data.current = txn.finish().map(|(state, head)| (Arc::new(state), head));
        }
        result
    }

    fn scan(&self, id: &GoalId) -> Result<Scan> {
        self.scan_goal(id)
    }

    fn archive(&self, id: &GoalId, head: &ArchiveHead) -> Result<Vec<ArchivedTodo>> {
        if head.is_empty() {
            return Ok(Vec::new());
        }
        let goal = self.goal(id)?;
        let data = locked(&goal.data)?;
        let text = archive_text(&data.archive);
        read_archive(&PathBuf::from(format!("memory:goals/{id}/archive.jsonl")), text.as_bytes(), head)
    }

    /// Called by [`Txn::commit`] under the writer lock [`MemStore::transact`] holds.
    fn append(&self, id: &GoalId, c: &Commit<'_>) -> Result<()> {
        let goal = self.goal(id)?;
        let mut data = locked(&goal.data)?;
        data.log.extend_from_slice(c.line.as_bytes());
        data.log.push(b'\n');
        data.archive.extend(c.state.archived_now.iter().cloned());
        // The new state comes back when the transaction ends ([`MemStore::transact`]).
        data.current = None;
        data.committed = c.state.seq;
        Ok(())
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    fn reporter(&self) -> &dyn Reporter {
        self.reporter.as_ref()
    }

    fn log_lines(&self, id: &GoalId) -> Result<Vec<String>> {
        let scan_ok = self.scan_goal(id)?;
        let goal = self.goal(id)?;
        let data = locked(&goal.data)?;
        let valid = usize::try_from(scan_ok.valid_len).unwrap_or(usize::MAX);
        lines_of(&data.log[..valid.min(data.log.len())])
    }

    fn each_line(&self, id: &GoalId, f: &mut dyn FnMut(EventLine) -> Result<bool>) -> Result<()> {
        let log = {
            let goal = self.goal(id)?;
            let data = locked(&goal.data)?;
            data.log.clone()
        };
        let mut follow = log::Follow::default();
        for raw in log.split_inclusive(|&b| b == b'\n') {
            let Some(raw) = raw.strip_suffix(b"\n") else { break };
            let line = follow.line(raw).map_err(|b| chain_error(&log_name(id), &b))?;
            if !f(line)? {
                break;
            }
        }
        Ok(())
    }

    fn import_goal(&self, id: &GoalId, lines: &[String]) -> Result<GoalState> {
        let (scan, state, archive) = verify_lines(id, lines)?;
        let mut goals = locked(&self.inner.goals)?;
        if goals.contains_key(id) {
            return Err(Error::conflict(format!("goal {id} already exists")));
        }
        let data = GoalData {
            log: archive_text(lines).into_bytes(),
            current: Some((Arc::new(state.clone()), scan.head().to_owned())),
            archive,
            committed: state.seq,
        };
        goals.insert(id.clone(), Arc::new(MemGoal { writer: Mutex::new(()), data: Mutex::new(data) }));
        Ok(state)
    }
}
