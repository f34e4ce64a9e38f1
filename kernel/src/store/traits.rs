//! The [`Store`] a goal's state is kept in (with its [`Doctor`]), and the [`Commit`] a
//! transaction hands it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use loopx_core::event::Event;
use loopx_core::kernel::DoctorReport;
use loopx_core::{Clock, GoalId, Result};

use crate::Reporter;
use crate::log::{EventLine, Scan};
use crate::project::ProjectFile;
use crate::state::{ArchiveHead, ArchivedTodo, GoalState};
use crate::table;

use super::txn::Txn;

/// A store's own checkup: what it verifies and mends. Each store implements it beside its
/// doctor (the file store's in [`crate::doctor`]).
pub trait Doctor {
    /// Verifies what the fast path trusts, changing nothing.
    fn doctor(&self, only: Option<&GoalId>) -> Result<DoctorReport>;
    /// Mends the project's goal list, returning what it did.
    fn repair_project(&self) -> Result<Vec<String>>;
    /// Mends what can be mended without losing committed data, then reports as `doctor` does.
    fn repair(&self, only: Option<&GoalId>) -> Result<DoctorReport>;
}

/// Where committed state is kept. The file store is the embedded default; a shared database
/// store plugs in behind the same methods.
pub trait Store: Doctor + Send + Sync + fmt::Debug {
    /// The project's goal list. Refuses an unreadable `project.json` with an integrity error.
    fn project(&self) -> Result<ProjectFile>;
    /// Changes `project.json` under the project lock; `f` returns whether it changed anything.
    fn update_project(&self, f: &mut dyn FnMut(&mut ProjectFile) -> Result<bool>) -> Result<ProjectFile>;
    /// Creates a goal's log with its first event and lists it in the project.
    fn create_goal(&self, id: &GoalId, first: Event, make_default: bool) -> Result<GoalState>;
    /// The current state of a goal. Takes no lock when the snapshot is current.
    fn read(&self, id: &GoalId) -> Result<Arc<GoalState>>;
    /// A glance at a goal: its state with the glance's todos alone, and the glance's counts
    /// ([`codec::decode_glance`]), when the store can read that part of the state by itself,
    /// checked against the log, and it is current. `None` sends the caller to [`Store::read`].
    fn glance(&self, _id: &GoalId) -> Result<Option<(GoalState, table::Glance)>> {
        Ok(None)
    }
    /// Runs `f` under the goal lock with the current state; `f` commits at most one event.
    fn transact(&self, id: &GoalId, f: &mut dyn FnMut(&mut Txn<'_>) -> Result<()>) -> Result<()>;
    /// Every committed line, verified. For history and doctor; costs O(log).
    fn scan(&self, id: &GoalId) -> Result<Scan>;
    /// The archived todos `head` describes (as read with the state), verified against it.
    /// Costs O(archive); only lists and lookups of closed work need it.
    fn archive(&self, id: &GoalId, head: &ArchiveHead) -> Result<Vec<ArchivedTodo>>;
    /// Makes one commit durable, for [`Txn::commit`], under the goal's lock. An error means
    /// nothing was committed; once the event is durable, the store's own views failing is a
    /// warning (they are rebuilt from the log), never an error.
    fn append(&self, id: &GoalId, commit: &Commit<'_>) -> Result<()>;
    /// The project's directory: where the goal's work happens (command gates run there).
    fn root(&self) -> &Path;
    fn clock(&self) -> &dyn Clock;
    fn reporter(&self) -> &dyn Reporter;
    /// The goal's log, line by line as committed (the bytes its hash chain covers), verified.
    fn log_lines(&self, id: &GoalId) -> Result<Vec<String>>;
    /// Hands every committed line of the goal's log to `f` in order, each checked as
    /// [`log::Follow`] checks it, without holding the log in memory; `f` returns `false` to
    /// stop reading. A torn final line is left out. For reports over long histories: O(log)
    /// time, memory of one line (or one batch of rows).
    fn each_line(&self, id: &GoalId, f: &mut dyn FnMut(EventLine) -> Result<bool>) -> Result<()>;
    /// Creates goal `id` from another store's log (`lines`, as [`Store::log_lines`] gives
    /// them), after verifying its chain and that it replays to the state it records; refuses a
    /// goal that exists. The project's goal list is the caller's (`update_project`).
    fn import_goal(&self, id: &GoalId, lines: &[String]) -> Result<GoalState>;
    /// The person key this machine saw goal `id` hold ([`crate::witness`]), whatever its log
    /// holds now: a goal seen in strict mode takes a person's decision only signed by it.
    fn seen_person_key(&self, _id: &GoalId) -> Option<String> {
        None
    }
}

impl Doctor for Box<dyn Store> {
    fn doctor(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        (**self).doctor(only)
    }
    fn repair_project(&self) -> Result<Vec<String>> {
        (**self).repair_project()
    }
    fn repair(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        (**self).repair(only)
    }
}

/// A store chosen when the project is opened (the command line's: the file store or a
/// database), as one type.
impl Store for Box<dyn Store> {
    fn project(&self) -> Result<ProjectFile> {
        (**self).project()
    }
    fn update_project(&self, f: &mut dyn FnMut(&mut ProjectFile) -> Result<bool>) -> Result<ProjectFile> {
        (**self).update_project(f)
    }
    fn create_goal(&self, id: &GoalId, first: Event, make_default: bool) -> Result<GoalState> {
        (**self).create_goal(id, first, make_default)
    }
    fn read(&self, id: &GoalId) -> Result<Arc<GoalState>> {
        (**self).read(id)
    }
    fn glance(&self, id: &GoalId) -> Result<Option<(GoalState, table::Glance)>> {
        (**self).glance(id)
    }
    fn seen_person_key(&self, id: &GoalId) -> Option<String> {
        (**self).seen_person_key(id)
    }
    fn transact(&self, id: &GoalId, f: &mut dyn FnMut(&mut Txn<'_>) -> Result<()>) -> Result<()> {
        (**self).transact(id, f)
    }
    fn scan(&self, id: &GoalId) -> Result<Scan> {
        (**self).scan(id)
    }
    fn archive(&self, id: &GoalId, head: &ArchiveHead) -> Result<Vec<ArchivedTodo>> {
        (**self).archive(id, head)
    }
    fn append(&self, id: &GoalId, commit: &Commit<'_>) -> Result<()> {
        (**self).append(id, commit)
    }
    fn root(&self) -> &Path {
        (**self).root()
    }
    fn clock(&self) -> &dyn Clock {
        (**self).clock()
    }
    fn reporter(&self) -> &dyn Reporter {
        (**self).reporter()
    }
    fn log_lines(&self, id: &GoalId) -> Result<Vec<String>> {
        (**self).log_lines(id)
    }
    fn each_line(&self, id: &GoalId, f: &mut dyn FnMut(EventLine) -> Result<bool>) -> Result<()> {
        (**self).each_line(id, f)
    }
    fn import_goal(&self, id: &GoalId, lines: &[String]) -> Result<GoalState> {
        (**self).import_goal(id, lines)
    }
}

/// One commit, as [`Txn::commit`] hands it to [`Store::append`].
#[derive(Debug)]
pub struct Commit<'a> {
    /// The event line's JSON (without its newline); it records `state`'s root.
    pub line: &'a str,
    /// The line's hash: the log's new head.
    pub hash: &'a str,
    /// The state after the event.
    pub state: &'a GoalState,
    /// `state`'s canonical encoding, whose root the line records.
    /// The state's hashed form ([`codec::encode_keys`]).
    pub state_keys: &'a [u8],
    /// The hash of its key lines ([`codec::state_root_parts`]), when it has a glance.
    pub(crate) keys_hash: Option<[u8; 32]>,
    /// The archive before the event (the todos it archived are `state.archived_now`).
    pub archive_before: &'a ArchiveHead,
    /// What the store's views were when the transaction loaded them (the file store: GOAL.md's
    /// digest, to notice a hand edit).
    pub views: Option<&'a str>,
}
