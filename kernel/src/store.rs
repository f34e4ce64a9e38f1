//! The file store: `.loopx/` on disk, and the commit protocol.
//!
//! One mutation: take the goal lock → load the snapshot (replaying the log when the snapshot
//! is not current) → validate → append one event line and fsync → write the snapshot
//! atomically → re-render GOAL.md → release. A crash at any step leaves a state equal to a
//! committed prefix of the log; the next command notices and recovers.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use loopx_core::event::Event;
use loopx_core::kernel::{DoctorReport, Receipt};
use loopx_core::{Clock, Error, GoalId, Result};

use crate::Reporter;
use crate::codec;
use crate::fs as kfs;
use crate::lock::{self, LockGuard};
use crate::log::{self, EventLine, GENESIS, Scan};
use crate::project::{Layout, ProjectFile, STORE_SCHEMA_VERSION, StoreRef};
use crate::render;
use crate::state::{ArchiveHead, ArchivedTodo, GoalState, StoredReceipt};
use crate::table;

/// The version of `snapshot.json`. Version 4 holds the live state in the table form with its
/// glance ([`crate::table::Glance`]), and names the hash of its key lines and where the glance's
/// todos are, so that a decision reads the head and the glance alone; version 3 held the table
/// form without a glance (a record per todo, decoded when used: [`crate::table`]); version 2 held it as one JSON document, and
/// version 1 held the whole state, archive included. An older snapshot is rebuilt from the log
/// on first use; going from version 1 also writes the archive and records the upgrade as an
/// event.
pub const SNAPSHOT_SCHEMA_VERSION: u32 = 4;

/// How long a command waits for a goal lock before it fails with "busy".
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Verifies a log given as lines: its chain, and that it replays to the state its last line
/// records. Returns the scan, the state and the archive lines it makes.
pub fn verify_lines(id: &GoalId, lines: &[String]) -> Result<(Scan, GoalState, Vec<String>)> {
    let text = archive_text(lines);
    let name = Path::new("imported log");
    let scan = log::scan(text.as_bytes()).map_err(|(_, b)| chain_error(name, &b))?;
    let (state, archive) = replay(id, &scan)?;
    if check_root(id, &scan, &state, &archive)? {
        return Err(Error::refused(format!(
            "goal {id}: its log was written by an older loopx; open it once with this one first"
        )));
    }
    Ok((scan, state, archive))
}

/// The error for a store whose record of its last commit (event `committed`) is ahead of its
/// log (which ends at event `logged`): committed events were removed.
pub fn events_missing(id: &GoalId, committed: u64, logged: u64) -> Error {
    Error::integrity(format!(
        "goal {id}: its last commit was event {committed} but its log ends at event {logged}: committed events are missing from the log"
    ))
    .with_hint("run `loopx doctor` to see what is wrong; nothing was changed")
}

/// Splits a log's bytes into its lines.
pub fn lines_of(bytes: &[u8]) -> Result<Vec<String>> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| String::from_utf8(l.to_vec()).map_err(|_| Error::integrity("an event line is not UTF-8")))
        .collect()
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

/// Opens the store of the project at a directory: the command line's opener knows every kind
/// of store; [`open_file_store`] knows the file store only.
pub type StoreOpener = Arc<
    dyn Fn(&Path, Arc<dyn Clock>, Arc<dyn Reporter>, &StoreOptions) -> Result<Box<dyn Store>> + Send + Sync,
>;

/// The opener of file stores (a project whose state is elsewhere is refused, naming it).
pub fn open_file_store(
    root: &Path,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: &StoreOptions,
) -> Result<Box<dyn Store>> {
    Ok(Box::new(FileStore::open(root, clock, reporter, options.clone())?))
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
    pub keys_hash: Option<[u8; 32]>,
    /// The archive before the event (the todos it archived are `state.archived_now`).
    pub archive_before: &'a ArchiveHead,
    /// What the store's views were when the transaction loaded them (the file store: GOAL.md's
    /// digest, to notice a hand edit).
    pub views: Option<&'a str>,
}

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

/// The first line of `snapshot.json`: what the state after it was derived from. The state
/// follows as the exact bytes its root hashes ([`codec::encode_keys`]), then a line of offsets:
/// where each todo's JSON is in the body file the header names.
#[derive(Debug, Serialize, Deserialize)]
struct SnapshotHeader {
    schema_version: u32,
    goal_id: GoalId,
    seq: u64,
    head: String,
    log_len: u64,
    log_mtime_ns: u64,
    goal_md_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bodies: Option<BodiesRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    glance: Option<GlanceRef>,
}

/// What [`FileStore::write_bodies`] wrote: the body file, the offsets line, whether the file is
/// new, and the offsets of the rows it was asked for.
struct BodiesWritten {
    file: Option<BodiesRef>,
    offsets: Vec<u8>,
    fresh: bool,
    wanted: Vec<u64>,
}

/// What a glance at the state needs besides the glance itself: the BLAKE3 hash of the key
/// lines after it (hex), with which the glance's own hash makes the state root, and where in
/// the body file each of its todos is.
#[derive(Debug, Serialize, Deserialize)]
struct GlanceRef {
    keys: String,
    at: Vec<u64>,
}

/// The body file a snapshot's todos are in, with its size and time when the snapshot was
/// written: one that differs was changed since (by a crash or by hand), and the state is
/// rebuilt from the log.
#[derive(Debug, Serialize, Deserialize)]
struct BodiesRef {
    generation: u64,
    len: u64,
    mtime_ns: u64,
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 32 bytes `text` spells in lowercase hex ([`hex`]), if it spells them.
fn unhex(text: &str) -> Option<[u8; 32]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Appends `n` in decimal, without an allocation (a snapshot lists an offset per live todo).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The version of a `snapshot.json` an older loopx wrote, if it is one (version 1 was one JSON
/// document; later ones begin with a header line).
pub fn older_snapshot(bytes: &[u8]) -> Option<u32> {
    let first = bytes.split(|c| *c == b'\n').next()?;
    let v: serde_json::Value = serde_json::from_slice(first).ok()?;
    v["schema_version"].as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n < SNAPSHOT_SCHEMA_VERSION)
}

/// Splits `snapshot.json` into its header and where its state's bytes begin and end.
fn split_snapshot(bytes: &[u8]) -> Option<(SnapshotHeader, usize, usize)> {
    let nl = crate::newline::find(bytes)?;
    let header = serde_json::from_slice(&bytes[..nl]).ok()?;
    Some((header, nl + 1, bytes.len()))
}

/// What loading a snapshot found.
enum Loaded {
    /// It matches the log exactly: trusted. With the snapshot's bytes and root, for a
    /// transaction to keep its state by (not for a state whose root is of the older kind).
    Current(Box<Snapshot>, Option<Source>),
    /// It describes an older log, or cannot be read: rebuilt from the log.
    Stale,
    /// Its state does not hash to the root the log's last line records, or the body file
    /// changed after it was written (what changed, named): edited by hand.
    Tampered(String),
}

/// `snapshot.json`: the state at event `seq`, and the log it was derived from.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub schema_version: u32,
    pub goal_id: GoalId,
    pub seq: u64,
    /// Hash of line `seq`.
    pub head: String,
    /// Size and modification time of `events.jsonl` when this snapshot was written. A log
    /// that differs was changed by a crash (recovered) or by hand (verified before use).
    pub log_len: u64,
    pub log_mtime_ns: u64,
    /// SHA-256 prefix of the GOAL.md rendered with this snapshot.
    pub goal_md_digest: String,
    pub state: Arc<GoalState>,
}

impl Snapshot {
    /// Reads a `snapshot.json` (a header line, then the state) of goal `id`, its todos in the
    /// body file it names; `None` if it is not one this loopx wrote (damaged, or from an older
    /// loopx) or its body file is gone. The todos are not checked ([`table::TodoTable::check`]).
    pub fn decode(bytes: &Arc<Vec<u8>>, layout: &Layout, id: &GoalId) -> Option<Snapshot> {
        let (h, from, to) = split_snapshot(bytes)?;
        if h.schema_version != SNAPSHOT_SCHEMA_VERSION {
            return None;
        }
        let file = match &h.bodies {
            Some(b) => {
                Some(Arc::new(table::BodyFile::open(&layout.bodies(id, b.generation), b.generation).ok()?))
            }
            None => None,
        };
        let (state, _) = codec::decode(bytes, from, to, table::Bodies::File(file)).ok()?;
        Some(Snapshot {
            schema_version: h.schema_version,
            goal_id: h.goal_id,
            seq: h.seq,
            head: h.head,
            log_len: h.log_len,
            log_mtime_ns: h.log_mtime_ns,
            goal_md_digest: h.goal_md_digest,
            state: Arc::new(state),
        })
    }
}

/// A goal's state, locked for one mutation.
#[derive(Debug)]
pub struct Txn<'a> {
    store: &'a dyn Store,
    id: GoalId,
    /// Changed only by a commit: a store may keep the state a transaction ends with as the
    /// state of the snapshot it loaded.
    state: GoalState,
    head: String,
    views: Option<String>,
    /// The size the state's encoding had last time, to size its buffer.
    size_hint: usize,
    /// Set once the state starts changing for a commit; `appended` once the store holds it.
    committed: bool,
    appended: bool,
    /// Signs a person's decision, in strict mode.
    signer: Option<loopx_core::kernel::SignerRef>,
    /// The person key this machine saw the goal hold, when the log no longer holds one.
    seen_key: Option<String>,
    /// What its commit wrote of the state.
    written: Option<Written>,
}

/// A committed state's hashed bytes ([`codec::encode_keys`]) and their root.
#[derive(Debug)]
struct Written {
    keys: Vec<u8>,
    root: String,
}

impl<'a> Txn<'a> {
    /// A transaction on goal `id`, whose log ends at `head` with `state`; `views` is handed
    /// back to the store with the commit.
    pub fn new(
        store: &'a dyn Store,
        id: GoalId,
        state: GoalState,
        head: String,
        views: Option<String>,
    ) -> Self {
        Txn {
            store,
            id,
            state,
            head,
            views,
            size_hint: 0,
            committed: false,
            appended: false,
            signer: None,
            seen_key: None,
            written: None,
        }
    }

    /// The person key this machine saw the goal hold ([`crate::witness`]): a goal once in
    /// strict mode stays in it here, whatever its log says now.
    pub fn strict_as_seen(&mut self, key: Option<String>) {
        self.seen_key = key;
    }

    /// The person's key, to sign a decision of theirs with (strict mode).
    pub fn sign_with(&mut self, signer: Option<loopx_core::kernel::SignerRef>) {
        self.signer = signer;
    }

    /// The signature a person's decision needs in strict mode (the goal holds a person key, or
    /// the event sets the first one, signed by itself), made and checked here with the line's
    /// own place in the log; `None` where none is needed.
    fn person_signature(&self, line: &EventLine) -> Result<Option<String>> {
        if line.actor != "user" || !line.event.is_persons_decision() {
            return Ok(None);
        }
        let key = match (self.state.goal.person_key.as_ref().or(self.seen_key.as_ref()), &line.event) {
            (Some(k), _) => k.clone(),
            (None, Event::PersonKeySet { public_key }) => public_key.clone(),
            (None, _) => return Ok(None),
        };
        let Some(signer) = &self.signer else {
            return Err(Error::refused(format!(
                "goal {} is in strict mode: a person's decision is taken only signed by the person's key ({})",
                self.id,
                loopx_core::event::key_short(&key)
            ))
            .with_hint(
                "run it in your own terminal, where loopx asks for your key's passphrase (the dashboard asks on its page)",
            ));
        };
        let message = crate::person::message(&self.id, line.seq, &line.prev, &line.event)?;
        let signature = signer.0.sign(&message);
        if !crate::person::verify(&key, &message, &signature) {
            return Err(Error::refused(format!(
                "this decision is signed by key {}, not by goal {}'s person key {}",
                loopx_core::event::key_short(&signer.0.public_key()),
                self.id,
                loopx_core::event::key_short(&key)
            ))
            .with_hint("sign with the key loopx person init recorded for this goal"));
        }
        Ok(Some(signature))
    }

    /// Sizes the state's encoding buffer for `bytes` (the last encoding's size): a large state
    /// is then encoded once, without the buffer doubling (and holding both halves) as it grows.
    pub fn with_size_hint(mut self, bytes: usize) -> Self {
        self.size_hint = bytes;
        self
    }

    /// The state the transaction began from.
    pub fn state(&self) -> &GoalState {
        &self.state
    }

    /// The stored receipt for `key`, if a command with that key was committed before.
    pub fn replay<T: DeserializeOwned>(
        &self,
        key: &str,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Option<Receipt<T>>> {
        stored_receipt(&self.state, key, body)
    }

    /// Commits `event` by `actor`: append, fsync, snapshot, GOAL.md. `body` describes the
    /// result from the new state. With a key, the key is kept so a replay appends nothing; with
    /// `verbatim`, the receipt itself is kept too, so a replay returns it byte for byte
    /// (otherwise a replay describes the current state).
    pub fn commit<T: Serialize>(
        &mut self,
        actor: &str,
        event: Event,
        key: Option<String>,
        verbatim: bool,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        if self.committed {
            return Err(Error::internal("a transaction committed twice"));
        }
        // The time the event's records give, when it is not before the last line's nor after
        // now: those records then leave it out of the line.
        let now = self.store.clock().now();
        let at = event.own_time().filter(|t| *t >= self.state.last_event_at && *t <= now);
        let mut line = EventLine {
            seq: self.state.seq + 1,
            at: at.unwrap_or(now),
            actor: actor.to_owned(),
            event,
            turn: key,
            receipt: None,
            root: None,
            prev: self.head.clone(),
            signature: None,
        };
        line.signature = self.person_signature(&line)?;
        let archive_before = &self.state.archive.clone();
        // Applied in place (a copy of a large state costs as much as encoding it): from here
        // on, a failure leaves the transaction spent, and nothing was written.
        self.committed = true;
        let next = &mut self.state;
        next.apply(&line).map_err(|e| Error::internal(format!("cannot apply own event: {e}")))?;
        let receipt = Receipt {
            goal_id: self.id.clone(),
            seq: line.seq,
            changed: true,
            body: body(next)?,
            replayed: false,
        };
        if line.turn.is_some() {
            if verbatim {
                let value = serde_json::to_value(&receipt)
                    .map_err(|e| Error::internal(format!("cannot encode receipt: {e}")))?;
                line.receipt = Some(value);
            }
            next.keep_receipt(&line).map_err(Error::internal)?;
        }
        let state_keys = codec::encode_keys(next, self.size_hint)?;
        let (root, keys_hash) = codec::state_root_parts(&state_keys);
        line.root = Some(root);
        let text =
            serde_json::to_string(&line).map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
        let hash = log::line_hash(text.as_bytes());
        let views = self.views.take();
        self.store.append(
            &self.id,
            &Commit {
                line: &text,
                hash: &hash,
                state: &self.state,
                state_keys: &state_keys,
                keys_hash,
                archive_before,
                views: views.as_deref(),
            },
        )?;
        self.head = hash;
        self.appended = true;
        self.written = line.root.map(|root| Written { keys: state_keys, root });
        Ok(receipt)
    }

    /// What committing `event` would return, without writing anything (for `--dry-run`).
    pub fn preview<T>(
        &self,
        actor: &str,
        event: Event,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        let line = EventLine {
            seq: self.state.seq + 1,
            at: self.store.clock().now(),
            actor: actor.to_owned(),
            event,
            turn: None,
            receipt: None,
            root: None,
            prev: self.head.clone(),
            signature: None,
        };
        let mut next = self.state.clone();
        next.apply(&line).map_err(|e| Error::internal(format!("cannot apply own event: {e}")))?;
        Ok(Receipt {
            goal_id: self.id.clone(),
            seq: self.state.seq,
            changed: false,
            body: body(&next)?,
            replayed: false,
        })
    }

    /// The log head before this transaction's commit (or after it).
    pub fn seq(&self) -> u64 {
        self.state.seq
    }

    /// The state and head the transaction ends with, for a store that keeps its state between
    /// transactions: the loaded ones when nothing was committed, the new ones after a commit,
    /// `None` when a commit failed part way (the state was changed in place, the log was not).
    pub fn finish(self) -> Option<(GoalState, String)> {
        (!self.committed || self.appended).then_some((self.state, self.head))
    }

    /// [`Txn::finish`]'s state, with what its commit wrote of it (`None` without a commit).
    fn finish_written(self) -> Option<(GoalState, Option<Written>)> {
        (!self.committed || self.appended).then_some((self.state, self.written))
    }
}

/// The embedded default store: files under `.loopx/`.
pub struct FileStore {
    layout: Layout,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: StoreOptions,
    /// Each goal's state as this store last read it or its last transaction left it.
    kept: Mutex<HashMap<GoalId, Kept>>,
    /// What the last snapshot this store wrote holds besides the state's hashed bytes.
    wrote: Mutex<Option<Wrote>>,
    /// `project.json` as this store last read it, by the file's mark then: read again only
    /// when it has changed (every command reads it, some several times).
    project: Mutex<Option<(FileMark, ProjectFile)>>,
    /// The goals this store has glanced at ([`Store::glance`]): a process that asks about a
    /// goal again lives long enough to keep its whole state, which it then reads (and keeps).
    glanced: Mutex<std::collections::HashSet<GoalId>>,
}

/// A goal's state as a read decoded it or a transaction left it, kept for the next command of
/// the same process (a long-lived one: the MCP server, `loopx drive`; or one hook's answer,
/// which asks several questions). A read whose log still bears the mark it bore when the state
/// was read takes the state as it is: nothing was committed, cut or edited since. Otherwise a
/// load whose snapshot is still the very bytes the state came from, and whose log still
/// records their root, takes it instead of decoding those bytes again; every other check of a
/// load is made as before.
struct Kept {
    source: Source,
    /// Shared with the reads that took it since.
    state: Arc<GoalState>,
    /// The log's mark when a read found this state current or a transaction left it (none
    /// when the log could not be looked at then: the next load checks the snapshot).
    log: Option<FileMark>,
    /// Set when a commit wrote the snapshot (its pieces: the header line, the state's hashed
    /// bytes, the offsets line): the state's stored rows still read from the snapshot before,
    /// and are re-based on this one when a transaction next takes the state (a read takes it
    /// as it is).
    unbased: bool,
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
const KEPT_GOALS: usize = 8;

/// Keeps `k` as goal `id`'s state in `kept`, making room first by forgetting another goal's.
fn keep_in(kept: &mut HashMap<GoalId, Kept>, id: &GoalId, k: Kept) {
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
struct Wrote {
    id: GoalId,
    seq: u64,
    header: Vec<u8>,
    offsets: Vec<u8>,
}

/// The snapshot a state was read from or written as: its bytes, in the pieces they were read
/// or written as, and their state root.
struct Source {
    bytes: Vec<Arc<Vec<u8>>>,
    root: String,
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

/// What a transaction starts from: the state, its log's head, GOAL.md's digest as the
/// snapshot recorded it, and the snapshot, when it was current.
struct Locked {
    state: GoalState,
    head: String,
    views: Option<String>,
    source: Option<Source>,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore").field("root", &self.layout.root()).finish_non_exhaustive()
    }
}

/// The payload a store unwinds with at an `unwind-<point>` fault: the process "died" there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedCrash {
    pub point: String,
}

/// What `init` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOutcome {
    pub created_project: bool,
}

/// What a project keeps its state in, as its `.loopx/project.json` says: this directory's files,
/// or another store (which only the command line opens).
#[derive(Debug)]
pub enum Opened {
    Files(Box<FileStore>),
    Elsewhere(StoreRef),
}

impl FileStore {
    /// Opens the project at `root`, which must hold `.loopx/project.json` and keep its state in
    /// `.loopx/`.
    pub fn open(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Self> {
        match Self::open_or_elsewhere(root, clock, reporter, options)? {
            Opened::Files(store) => Ok(*store),
            Opened::Elsewhere(s) => Err(kept_elsewhere(root, &s)),
        }
    }

    /// Opens the project at `root` if it keeps its state in `.loopx/`, or says which store it
    /// keeps it in, reading `project.json` once either way.
    pub fn open_or_elsewhere(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Opened> {
        let layout = Layout::new(root);
        kfs::check_state_file(&layout.state_dir())?;
        kfs::check_state_file(&layout.project_file())?;
        if !layout.project_file().is_file() {
            return Err(Error::not_found(format!(
                "{} is not a loopx project (no .loopx/project.json)",
                root.display()
            ))
            .with_hint("create one with: loopx init --goal-id main --objective \"…\""));
        }
        let project = match read_project_marked(&layout) {
            Ok((ProjectFile { store: Some(s), .. }, _)) => return Ok(Opened::Elsewhere(s)),
            Ok((p, mark)) => Some((mark, p)),
            // A damaged project.json is the file store's to report, and `doctor --repair`'s to
            // mend.
            Err(_) => None,
        };
        Ok(Opened::Files(Box::new(Self::new(layout, clock, reporter, options, project))))
    }

    /// A store on `layout` that has read `project` (with its file's mark) already, if anything.
    fn new(
        layout: Layout,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
        project: Option<(FileMark, ProjectFile)>,
    ) -> Self {
        Self {
            layout,
            clock,
            reporter,
            options,
            kept: Mutex::default(),
            wrote: Mutex::default(),
            project: Mutex::new(project),
            glanced: Mutex::default(),
        }
    }

    /// Creates `.loopx/` (with its `.gitignore` and `project.json`) at `root`, or reuses the
    /// one that is there. Never overwrites existing state.
    pub fn init(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<(Self, InitOutcome)> {
        let layout = Layout::new(root);
        if !root.is_dir() {
            return Err(Error::not_found(format!("{} is not a directory", root.display()))
                .with_hint("pass the project's directory with --project DIR"));
        }
        let store = Self::new(layout, clock, reporter, options, None);
        let created_project = !store.layout.project_file().exists();
        if !created_project {
            // Refuse to build on an unreadable project.json, or on one that points elsewhere.
            if let Some(s) = store.project()?.store {
                return Err(kept_elsewhere(root, &s));
            }
        }
        create_state_dir(&store.layout)?;
        if created_project {
            let _guard = store.lock_project()?;
            if !store.layout.project_file().exists() {
                store.write_project(&ProjectFile::new())?;
            }
        }
        Ok((store, InitOutcome { created_project }))
    }

    /// Test-only fault injection at a named commit step: `LOOPX_FAULT=<point>` aborts the
    /// process there; `LOOPX_FAULT=hang-<point>` sleeps there (holding the lock) for a minute;
    /// `unwind-<point>` unwinds from there with an [`InjectedCrash`] (the simulation's kill -9:
    /// no code after the point runs but destructors — the lock's release, as the operating
    /// system releases a dead process's lock — and the caller hears nothing).
    fn fault_point(&self, point: &str) {
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

    fn lock_project(&self) -> Result<LockGuard> {
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

    fn write_project(&self, p: &ProjectFile) -> Result<()> {
        write_project_file(&self.layout, p)
    }

    /// Every path a command on goal `id` touches, checked to be a regular file or directory
    /// inside `.loopx/`, never a link out of it.
    pub fn state_paths(&self, id: Option<&GoalId>) -> Vec<std::path::PathBuf> {
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

    fn goal_exists_check(&self, id: &GoalId) -> Result<()> {
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

    /// Reads the snapshot and checks it against the log: its size and time, and its state's
    /// hash against the state root of the log's last line.
    /// Loads the snapshot of goal `id`, checked against the log; the state kept by the last
    /// transaction when the snapshot is still its own, taken out of the store for a new one
    /// (`take`) or copied.
    fn load_snapshot(&self, id: &GoalId, take: bool) -> Result<Loaded> {
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
    fn glance_at(&self, id: &GoalId) -> Result<Option<(GoalState, table::Glance)>> {
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

    /// The state kept for goal `id` (see [`Kept`]), if `bytes` are the snapshot it was kept
    /// with and `root` the root the log records for it, its stored rows reading from `file`:
    /// taken out for a transaction (`take`, with the snapshot to keep it by again), or copied
    /// and kept again under the log's `mark`.
    fn kept_state(
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
    fn unchanged(&self, id: &GoalId) -> Option<Arc<GoalState>> {
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
    fn take_unchanged(&self, id: &GoalId) -> Option<Locked> {
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

    fn kept(&self) -> MutexGuard<'_, HashMap<GoalId, Kept>> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the state transaction `txn` on goal `id` ends with, if it can be kept: loaded from
    /// `source` and unchanged, or committed (and its snapshot written); marked with the log as
    /// the transaction leaves it, so that a read finds it without reading the snapshot again
    /// until another commit. Called under the goal's lock.
    fn keep(&self, id: &GoalId, txn: Txn<'_>, source: Option<Source>) {
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

    /// Under the goal lock: the current state, recovering from a crash if needed; a state kept
    /// by the last transaction is taken out of the store for this one (`take`) or copied.
    fn load_locked(&self, id: &GoalId, take: bool) -> Result<Locked> {
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

    /// Writes GOAL.md, then snapshot.json, for `state`, whose last line hashes to `head`.
    /// GOAL.md goes first: the snapshot's rename is the last step, so after any crash before
    /// it the snapshot is stale, and recovery rewrites both.
    fn write_projections(
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
    fn write_projections_json(
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

/// A new goal's first line, by the person who created it, with the state it makes.
pub fn genesis(id: &GoalId, first: Event, at: loopx_core::Timestamp) -> Result<(GoalState, String)> {
    let line = EventLine {
        seq: 1,
        at,
        actor: "user".to_owned(),
        event: first,
        turn: None,
        receipt: None,
        root: None,
        prev: GENESIS.to_owned(),
        signature: None,
    };
    let state = GoalState::genesis(id, &line).map_err(Error::internal)?;
    let line = EventLine { root: Some(root_of(&state)?), ..line };
    let text =
        serde_json::to_string(&line).map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
    Ok((state, text))
}

/// A state's canonical bytes, todos and all ([`codec::encode_state`]).
pub fn encode_state(state: &GoalState) -> Result<Vec<u8>> {
    codec::encode_state(state)
}

/// A state's root ([`codec::state_root`] of [`codec::encode_keys`]).
pub fn root_of(state: &GoalState) -> Result<String> {
    Ok(codec::state_root(&codec::encode_keys(state, 0)?))
}

/// A state as one JSON document, the form roots hashed before the table form.
pub fn legacy_json(state: &GoalState) -> Result<Vec<u8>> {
    serde_json::to_vec(state).map_err(|e| Error::internal(format!("cannot encode the state: {e}")))
}

/// Whether `root`, from a log line, is the root of `state`: in the form its kind names (an
/// older loopx's JSON, the table form without a glance, or with one).
pub fn root_matches(root: &str, state: &GoalState) -> Result<bool> {
    if codec::is_legacy_root(root) {
        return Ok(root == codec::legacy_state_root(&legacy_json(state)?));
    }
    if root.starts_with('b') {
        return Ok(root == codec::state_root(&codec::encode_keys_3(state)?));
    }
    Ok(root == root_of(state)?)
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

/// Committed lines of a log read as a stream, in a batch: the bytes (as text when they are
/// UTF-8, checked once for the batch), where each line is in them, and each line's hash.
struct Batch {
    bytes: Result<String, Vec<u8>>,
    lines: Vec<(std::ops::Range<usize>, String)>,
}

/// Reads the log at `path` from `read`, a line at a time, into `f` (see
/// [`Store::each_line`]): a second thread reads and hashes while this one decodes, a few
/// batches of about a MiB between them, so a long log streams at the speed of its decoding.
pub fn stream_log(
    path: &Path,
    mut read: impl std::io::Read + Send,
    f: &mut dyn FnMut(EventLine) -> Result<bool>,
) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Batch>>(4);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut carry: Vec<u8> = Vec::new();
            loop {
                let mut bytes = std::mem::take(&mut carry);
                let start = bytes.len();
                bytes.resize(start + CHUNK, 0);
                let n = match read.read(&mut bytes[start..]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                        bytes.truncate(start);
                        carry = bytes;
                        continue;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                bytes.truncate(start + n);
                if n == 0 {
                    return; // what is left has no newline: a torn final line, never committed
                }
                // Complete lines go now; the rest waits for the next read.
                let Some(end) = crate::newline::rfind(&bytes).map(|i| i + 1) else {
                    carry = bytes;
                    continue;
                };
                carry = bytes[end..].to_vec();
                bytes.truncate(end);
                let mut lines = Vec::new();
                let mut at = 0;
                for nl in crate::newline::all(&bytes) {
                    lines.push((at..nl, log::line_hash(&bytes[at..nl])));
                    at = nl + 1;
                }
                let bytes = String::from_utf8(bytes).map_err(std::string::FromUtf8Error::into_bytes);
                if tx.send(Ok(Batch { bytes, lines })).is_err() {
                    return; // the reader stopped
                }
            }
        });
        let mut follow = log::Follow::default();
        for batch in rx {
            let batch = batch.map_err(|e| Error::io("read", path, &e))?;
            for (range, hash) in batch.lines {
                let line = match &batch.bytes {
                    Ok(text) => follow.hashed_text(&text[range], hash),
                    Err(bytes) => follow.hashed_line(&bytes[range], hash),
                };
                let line = line.map_err(|b| chain_error(path, &b))?;
                if !f(line)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    })
}

/// Reads `.loopx/project.json`, refusing one that is damaged or of another version.
pub fn read_project(layout: &Layout) -> Result<ProjectFile> {
    read_project_marked(layout).map(|(p, _)| p)
}

/// [`read_project`], with the mark of the very file read.
fn read_project_marked(layout: &Layout) -> Result<(ProjectFile, FileMark)> {
    let path = layout.project_file();
    let read = || -> std::io::Result<(Vec<u8>, FileMark)> {
        let file = fs::File::open(&path)?;
        let meta = file.metadata()?;
        Ok((kfs::read_whole(&file, meta.len())?, FileMark::from(&meta)))
    };
    let (bytes, mark) = read().map_err(|e| Error::io("read", &path, &e))?;
    let p: ProjectFile = serde_json::from_slice(&bytes)
        .map_err(|e| Error::integrity(format!("{} is not valid: {e}", path.display())))?;
    if p.schema_version != STORE_SCHEMA_VERSION {
        return Err(Error::integrity(format!(
            "{} has schema_version {}; this loopx reads version {STORE_SCHEMA_VERSION}",
            path.display(),
            p.schema_version
        ))
        .with_hint("use the loopx version that wrote this project"));
    }
    Ok((p, mark))
}

/// Creates `.loopx/` at `root` pointing at `store`, for a project whose state is kept there
/// (or reuses the one that already points there). A project that keeps its state in `.loopx/`
/// or in another store is refused: `loopx store migrate` moves state, `init` never does.
pub fn init_pointer(root: &Path, store: &StoreRef) -> Result<InitOutcome> {
    let layout = Layout::new(root);
    if !root.is_dir() {
        return Err(Error::not_found(format!("{} is not a directory", root.display()))
            .with_hint("pass the project's directory with --project DIR"));
    }
    if layout.project_file().exists() {
        let p = read_project(&layout)?;
        return match &p.store {
            Some(s) if s == store => Ok(InitOutcome { created_project: false }),
            Some(s) => Err(Error::refused(format!(
                "{} already keeps its state in {} at {} (project {})",
                root.display(),
                s.kind,
                s.url,
                s.project
            ))),
            None => Err(Error::refused(format!("{} already keeps its state in .loopx/", root.display()))
                .with_hint(format!("move it there with: loopx store migrate --to {}", store.url))),
        };
    }
    create_state_dir(&layout)?;
    let p = ProjectFile { store: Some(store.clone()), ..ProjectFile::new() };
    write_project_file(&layout, &p)?;
    Ok(InitOutcome { created_project: true })
}

/// Creates `.loopx/` with the `.gitignore` that keeps it out of the repository.
fn create_state_dir(layout: &Layout) -> Result<()> {
    kfs::create_dir_all(&layout.state_dir())?;
    if !layout.gitignore().exists() {
        kfs::atomic_write(&layout.gitignore(), b"# loopx state is local; see loopx doctor\n*\n")?;
    }
    Ok(())
}

/// Writes `.loopx/project.json` atomically.
pub(crate) fn write_project_file(layout: &Layout, p: &ProjectFile) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(p)
        .map_err(|e| Error::internal(format!("cannot encode project.json: {e}")))?;
    bytes.push(b'\n');
    kfs::atomic_write(&layout.project_file(), &bytes)
}

/// The refusal to keep a project's state in `.loopx/` when its `project.json` names store `s`.
fn kept_elsewhere(root: &Path, s: &StoreRef) -> Error {
    Error::refused(format!(
        "{} keeps its state in {} at {} (project {}), not in .loopx/",
        root.display(),
        s.kind,
        s.url,
        s.project
    ))
    .with_hint("use the loopx command line, which opens that store (loopx status)")
}

/// `doctor --repair`: what can be mended without losing committed data is mended, and what
/// does not check out is moved aside into dated files. Nothing is deleted.
impl FileStore {
    fn stamp(&self) -> String {
        self.clock.now().to_string().chars().filter(char::is_ascii_alphanumeric).collect()
    }

    /// Moves `bytes` (the tail of `from`) into a dated sibling file; returns its name.
    fn set_aside(&self, from: &Path, bytes: &[u8]) -> Result<String> {
        let name = format!(
            "{}.rejected-{}",
            from.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
            self.stamp()
        );
        let to = from.with_file_name(&name);
        kfs::atomic_write(&to, bytes)?;
        Ok(name)
    }

    /// Rebuilds `project.json` from the goal directories when it is unreadable, and lists goal
    /// directories that hold a valid log but are missing from it.
    pub fn repair_project(&self) -> Result<Vec<String>> {
        let _guard = self.lock_project()?;
        let mut actions = Vec::new();
        let path = self.layout.project_file();
        let mut project = match self.project() {
            Ok(p) => p,
            Err(e) if e.kind == loopx_core::ErrorKind::Integrity => {
                let bytes = fs::read(&path).map_err(|e| Error::io("read", &path, &e))?;
                let aside = self.set_aside(&path, &bytes)?;
                actions.push(format!(
                    "project.json was unreadable; moved it to {aside} and rebuilt it from goals/"
                ));
                ProjectFile::new()
            }
            Err(e) => return Err(e),
        };
        let mut found: Vec<(loopx_core::Timestamp, GoalId, Option<String>)> = Vec::new();
        if let Ok(entries) = fs::read_dir(self.layout.goals_dir()) {
            for entry in entries.flatten() {
                let Some(id) = entry.file_name().to_str().and_then(|n| GoalId::new(n).ok()) else { continue };
                if project.has_goal(&id) {
                    continue;
                }
                let Ok(bytes) = fs::read(self.layout.events(&id)) else { continue };
                let scan = match log::scan(&bytes) {
                    Ok(s) => s,
                    Err((s, _)) => s,
                };
                if let Some(first) = scan.lines.first()
                    && let Ok(state) = GoalState::genesis(&id, first)
                {
                    found.push((state.goal.created_at, id, state.goal.title));
                }
            }
        }
        found.sort();
        for (created_at, id, title) in found {
            actions.push(format!("listed goal {id} in project.json (its directory was not listed)"));
            project.add_goal(&id, title, created_at, false);
        }
        if !actions.is_empty() {
            self.write_project(&project)?;
        }
        Ok(actions)
    }

    /// Keeps the valid prefix of a goal's log, moves the rest aside, and rebuilds its
    /// snapshot and GOAL.md.
    pub fn repair_goal(&self, id: &GoalId) -> Result<Vec<String>> {
        self.goal_exists_check(id)?;
        let _guard = self.lock_goal(id)?;
        let mut actions = Vec::new();
        let events = self.layout.events(id);
        let bytes = fs::read(&events).map_err(|e| Error::io("read", &events, &e))?;
        let (scan, cut_at, why) = match log::scan(&bytes) {
            Ok(scan) if scan.torn_bytes > 0 => {
                let at = scan.valid_len;
                (scan, Some(at), "an incomplete final line".to_owned())
            }
            Ok(scan) => (scan, None, String::new()),
            Err((scan, b)) => (scan, Some(b.offset), format!("line {}: {}", b.line, b.reason)),
        };
        if let Some(at) = cut_at {
            let at_usize = usize::try_from(at).unwrap_or(bytes.len());
            let aside = self.set_aside(&events, &bytes[at_usize..])?;
            kfs::truncate_durable(&events, at)?;
            actions.push(format!(
                "goal {id}: kept {} valid event(s); moved {} byte(s) from {why} to {aside}",
                scan.lines.len(),
                bytes.len() - at_usize
            ));
        }
        if scan.lines.is_empty() {
            actions
                .push(format!("goal {id}: no valid event is left; recreate the goal with loopx goal create"));
            return Ok(actions);
        }
        let (state, archive) = replay(id, &scan)?;
        self.write_archive(id, &archive)?;
        let snap_path = self.layout.snapshot(id);
        if let Some(old) = kfs::read_optional(&snap_path)? {
            let matches = Snapshot::decode(&Arc::new(old.clone()), &self.layout, id).is_some_and(|s| {
                s.state.todos.check().is_ok()
                    && s.seq == state.seq
                    && serde_json::to_value(&*s.state).ok() == serde_json::to_value(&state).ok()
            });
            if !matches {
                let aside = self.set_aside(&snap_path, &old)?;
                actions.push(format!("goal {id}: the snapshot did not match the log; moved it to {aside}"));
            }
        }
        self.write_projections(id, &state, scan.head(), None)?;
        Ok(actions)
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

/// The lines of `archive.jsonl` up to `head` (lines after it belong to no committed state),
/// each checked to follow the one before, the last one to hash to `head`.
pub fn read_archive(path: &Path, bytes: &[u8], head: &ArchiveHead) -> Result<Vec<ArchivedTodo>> {
    let damaged = |what: String| {
        Error::integrity(format!("{}: {what}", path.display()))
            .with_hint("run `loopx doctor --repair` to rebuild it from the event log")
    };
    let len = usize::try_from(head.bytes).unwrap_or(usize::MAX);
    let Some(bytes) = bytes.get(..len) else {
        return Err(damaged(format!("holds {} bytes; the goal's state records {len}", bytes.len())));
    };
    let mut out = Vec::new();
    let mut prev = GENESIS.to_owned();
    for (i, line) in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).enumerate() {
        let a: ArchivedTodo = serde_json::from_slice(line)
            .map_err(|e| damaged(format!("line {} is not an archived todo: {e}", i + 1)))?;
        if a.prev != prev {
            return Err(damaged(format!(
                "line {} does not follow the line before it (edited by hand?)",
                i + 1
            )));
        }
        prev = log::line_hash(line);
        out.push(a);
    }
    if prev != head.hash || out.len() as u64 != head.todos {
        return Err(damaged("does not end where the goal's state says it does (edited by hand?)".to_owned()));
    }
    Ok(out)
}

/// Archive lines as the file holds them, each ended by a newline.
pub fn archive_text(lines: &[String]) -> String {
    let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    text
}

fn archive_len(path: &Path) -> Result<u64> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io("read", path, &e)),
    }
}

impl FileStore {
    /// Appends `lines` to the archive, which must end where `before` says (a longer file
    /// holds lines of a commit that never finished: they are cut first).
    fn append_archive(&self, id: &GoalId, before: &ArchiveHead, lines: &[String]) -> Result<()> {
        let path = self.layout.archive(id);
        if archive_len(&path)? > before.bytes {
            kfs::truncate_durable(&path, before.bytes)?;
        }
        let mut file = kfs::open_append(&path)?;
        kfs::append_view(&mut file, &path, archive_text(lines).as_bytes())
    }

    /// Writes the whole archive, as replaying the log made it.
    fn write_archive(&self, id: &GoalId, lines: &[String]) -> Result<()> {
        let path = self.layout.archive(id);
        if lines.is_empty() && archive_len(&path)? == 0 {
            return Ok(());
        }
        kfs::atomic_write_with(&path, archive_text(lines).as_bytes(), kfs::Sync::View, &|| {})
    }

    /// Records that this loopx took over a goal written before the archive: one
    /// `store_upgraded` event, whose state root is the new encoding's.
    fn record_upgrade(&self, id: &GoalId, mut state: GoalState, head: String) -> Result<(GoalState, String)> {
        let line = EventLine {
            seq: state.seq + 1,
            at: self.clock.now(),
            actor: "loopx".to_owned(),
            event: Event::StoreUpgraded { archived: state.archive.todos },
            turn: None,
            receipt: None,
            root: None,
            prev: head,
            signature: None,
        };
        state.apply(&line).map_err(Error::internal)?;
        let line = EventLine { root: Some(root_of(&state)?), ..line };
        let text =
            serde_json::to_string(&line).map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
        let events = self.layout.events(id);
        let mut file = kfs::open_append(&events)?;
        kfs::append_durable(&mut file, &events, format!("{text}\n").as_bytes())?;
        self.reporter.warn(&format!(
            "goal {id}: upgraded its store: {} closed todo(s) moved to archive.jsonl; the live state keeps the open work",
            state.archive.todos
        ));
        Ok((state, log::line_hash(text.as_bytes())))
    }
}

/// The receipt stored under `key` (`scope:actor:turn#fingerprint`). The same turn used for a
/// different request (another fingerprint) is refused rather than silently replayed.
pub fn stored_receipt<T: DeserializeOwned>(
    state: &GoalState,
    key: &str,
    body: impl FnOnce(&GoalState) -> Result<T>,
) -> Result<Option<Receipt<T>>> {
    match state.receipts.get(key) {
        Some(StoredReceipt { receipt: Some(receipt), .. }) => {
            let mut r: Receipt<T> = receipt.decode().map_err(|e| {
                Error::integrity(format!("the stored receipt for {key:?} does not decode: {e}"))
            })?;
            r.replayed = true;
            return Ok(Some(r));
        }
        Some(StoredReceipt { seq, receipt: None }) => {
            let body = body(state)?;
            return Ok(Some(Receipt {
                goal_id: state.goal.id.clone(),
                seq: *seq,
                changed: true,
                body,
                replayed: true,
            }));
        }
        None => {}
    }
    let base = key.split_once('#').map_or(key, |(b, _)| b);
    let prefix = format!("{base}#");
    if state.receipts.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix)) {
        let turn = base.rsplit(':').next().unwrap_or(base);
        return Err(Error::refused(format!("turn {turn} was already used for a different request"))
            .with_hint("a replay must repeat the same command; use a new --turn-instance-id for new work"));
    }
    Ok(None)
}

/// Checks a replayed state against the state root of the log's last line: a log whose lines
/// do not fold into the state it records disagrees with itself.
///
/// A log written before the archive records roots of the whole state in its old encoding; its
/// last root is checked against that encoding, and `Ok(true)` says the store needs upgrading.
pub fn check_root(id: &GoalId, scan: &Scan, state: &GoalState, archive: &[String]) -> Result<bool> {
    let Some(root) = scan.lines.last().and_then(|l| l.root.as_ref()) else {
        return Ok(!scan.lines.iter().any(|l| matches!(l.event, Event::StoreUpgraded { .. })));
    };
    if root_matches(root, state)? {
        return Ok(false);
    }
    let upgraded = scan.lines.iter().any(|l| matches!(l.event, Event::StoreUpgraded { .. }));
    if upgraded
        || !codec::is_legacy_root(root)
        || *root != codec::legacy_state_root(&legacy_json(&whole_state(state, archive)?)?)
    {
        return Err(Error::integrity(format!(
            "goal {id}: replaying events.jsonl does not give the state its last event records (event {})",
            state.seq
        ))
        .with_hint("run `loopx doctor` to see what is wrong; nothing was changed"));
    }
    Ok(true)
}

/// `state` as loopx encoded it before the archive: every todo and all evidence inline, in id
/// order, and none of the archive's bookkeeping.
fn whole_state(state: &GoalState, archive: &[String]) -> Result<GoalState> {
    let mut whole = state.clone();
    for line in archive {
        let a: ArchivedTodo =
            serde_json::from_str(line).map_err(|e| Error::internal(format!("an archive line: {e}")))?;
        let mut todo = a.todo;
        // Evidence recorded after the todo left stayed live; the old encoding lists it.
        todo.evidence.extend(state.evidence.iter().filter(|e| e.todo == todo.id).map(|e| e.id));
        whole.todos.push(todo);
        whole.evidence.extend(a.evidence);
    }
    whole.evidence.sort_by_key(|e| e.id);
    whole.todos_total = 0;
    whole.evidence_total = 0;
    whole.closed_order.clear();
    whole.archive = ArchiveHead::default();
    Ok(whole)
}

/// Folds a verified scan into state, with the archive lines it made, in order.
pub fn replay(id: &GoalId, scan: &Scan) -> Result<(GoalState, Vec<String>)> {
    let mut lines = scan.lines.iter();
    let first =
        lines.next().ok_or_else(|| Error::integrity(format!("goal {id}: events.jsonl holds no events")))?;
    let mut state =
        GoalState::genesis(id, first).map_err(|e| Error::integrity(format!("goal {id}, event 1: {e}")))?;
    let mut archive = Vec::new();
    for line in lines {
        state.apply(line).map_err(|e| Error::integrity(format!("goal {id}, event {}: {e}", line.seq)))?;
        archive.append(&mut state.archived_now);
    }
    Ok((state, archive))
}

pub fn chain_error(path: &Path, b: &log::ChainBreak) -> Error {
    Error::integrity(format!("{} line {}: {}", path.display(), b.line, b.reason))
        .with_hint("run `loopx doctor` to see what is wrong; nothing was changed")
}

/// What tells one version of a state file (a goal's log, `project.json`) from another: its
/// length and modification time (what a snapshot records of its log), and on Unix which file
/// it is and when its inode last changed. A commit appends to the log; `project.json` is
/// replaced whole; a cut, a rewrite or a hand edit moves the change time, which no one can set
/// back (a hand edit may restore the length and the modification time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileMark {
    len: u64,
    mtime_ns: u64,
    file: (u64, u64, i64, i64),
}

impl FileMark {
    fn of(path: &Path) -> Result<Self> {
        fs::metadata(path).map(|m| Self::from(&m)).map_err(|e| Error::io("read", path, &e))
    }
}

impl From<&fs::Metadata> for FileMark {
    fn from(meta: &fs::Metadata) -> Self {
        #[cfg(unix)]
        let file = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let file = (0, 0, 0, 0);
        Self { len: meta.len(), mtime_ns: mtime_ns(meta), file }
    }
}

fn mtime_ns(meta: &fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn log_stat(path: &Path) -> Result<(u64, u64)> {
    let meta = fs::metadata(path).map_err(|e| Error::io("read", path, &e))?;
    Ok((meta.len(), mtime_ns(&meta)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` chained lines of a log, the way the kernel writes them.
    fn log_of(n: u64) -> (Vec<EventLine>, Vec<u8>) {
        let (mut lines, mut bytes, mut prev) = (Vec::new(), Vec::new(), GENESIS.to_owned());
        for seq in 1..=n {
            let line = EventLine {
                seq,
                at: loopx_core::Timestamp::from_unix_millis(i64::try_from(seq).unwrap() * 1000),
                actor: "user".to_owned(),
                event: Event::GoalResumed {},
                turn: None,
                receipt: None,
                root: None,
                prev: prev.clone(),
                signature: None,
            };
            let text = serde_json::to_string(&line).unwrap();
            prev = log::line_hash(text.as_bytes());
            bytes.extend_from_slice(text.as_bytes());
            bytes.push(b'\n');
            lines.push(line);
        }
        (lines, bytes)
    }

    fn streamed(bytes: &[u8]) -> Result<Vec<EventLine>> {
        let mut out = Vec::new();
        stream_log(Path::new("events.jsonl"), bytes, &mut |l| {
            out.push(l);
            Ok(true)
        })?;
        Ok(out)
    }

    /// A store read across many goals keeps no more than `KEPT_GOALS` of their states, the
    /// last one read among them; what it keeps is what a new store reads.
    #[test]
    fn a_store_keeps_a_bounded_number_of_goals_states() {
        let dir = tempfile::tempdir().unwrap();
        let store = init_at(dir.path());
        let ids: Vec<GoalId> = (0..KEPT_GOALS + 3).map(|i| GoalId::new(&format!("g{i}")).unwrap()).collect();
        for id in &ids {
            let first = Event::GoalCreated { objective: format!("goal {id}"), title: None };
            store.create_goal(id, first, false).unwrap();
        }
        for id in &ids {
            assert_eq!(store.read(id).unwrap().goal.id, *id);
            assert!(store.kept().len() <= KEPT_GOALS, "{} states kept", store.kept().len());
            assert!(store.kept().contains_key(id), "the goal just read is kept");
        }
        let last = ids.last().unwrap();
        assert_eq!(*store.read(last).unwrap(), *open_at(dir.path()).read(last).unwrap());
    }

    /// A project whose `project.json` names another store opens as that store's name (read
    /// once), and the file store refuses it, naming it; one that keeps its state here opens as
    /// the file store.
    #[test]
    fn a_project_kept_elsewhere_is_named_not_opened() {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        let open = |root: &Path| {
            FileStore::open_or_elsewhere(root, clock.clone(), reporter.clone(), StoreOptions::default())
        };
        let here = tempfile::tempdir().unwrap();
        init_at(here.path());
        assert!(matches!(open(here.path()), Ok(Opened::Files(_))));

        let there = tempfile::tempdir().unwrap();
        let named = StoreRef {
            kind: "postgres".into(),
            url: "postgres://loopx@127.0.0.1:5432/loopx".into(),
            project: "shared".into(),
        };
        init_pointer(there.path(), &named).unwrap();
        match open(there.path()) {
            Ok(Opened::Elsewhere(s)) => assert_eq!(s, named),
            other => panic!("not named: {other:?}"),
        }
        let e = FileStore::open(there.path(), clock.clone(), reporter.clone(), StoreOptions::default())
            .unwrap_err();
        assert!(
            e.message.contains(
                "keeps its state in postgres at postgres://loopx@127.0.0.1:5432/loopx (project shared)"
            ),
            "{}",
            e.message
        );
        let e = FileStore::init(there.path(), clock.clone(), reporter.clone(), StoreOptions::default())
            .unwrap_err();
        assert!(e.message.contains("not in .loopx/"), "{}", e.message);

        let none = tempfile::tempdir().unwrap();
        let e = open(none.path()).unwrap_err();
        assert!(e.message.contains("is not a loopx project"), "{}", e.message);
    }

    fn init_at(root: &Path) -> FileStore {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        FileStore::init(root, clock, reporter, StoreOptions::default()).unwrap().0
    }

    fn open_at(root: &Path) -> FileStore {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        FileStore::open(root, clock, reporter, StoreOptions::default()).unwrap()
    }

    /// A project with goal `main` in a temporary directory, and a second store on it (as
    /// another process would open it).
    fn two_stores() -> (tempfile::TempDir, FileStore, FileStore, GoalId) {
        let dir = tempfile::tempdir().unwrap();
        let a = init_at(dir.path());
        let id = GoalId::new("main").unwrap();
        a.create_goal(&id, Event::GoalCreated { objective: "o".into(), title: None }, true).unwrap();
        let b = open_at(dir.path());
        (dir, a, b, id)
    }

    fn add_todo(store: &FileStore, id: &GoalId, text: &str) {
        use loopx_core::kernel::AddTodo;
        use loopx_core::model::{Priority, Role, TodoClass};
        let req = AddTodo {
            text: text.into(),
            priority: Priority::P1,
            role: Role::Agent,
            class: TodoClass::Advance,
            scopes: vec![],
            after_gate: None,
            validation: None,
        };
        store
            .transact(id, &mut |txn| {
                let event = crate::rules::add_todo(txn.state(), &req)?;
                txn.commit("user", event, None, false, |_| Ok(())).map(|_| ())
            })
            .unwrap();
    }

    /// Writes `bytes` over `path` in place and sets its modification time back to `meta`'s, as
    /// a careful hand edit might; again until the inode's change time has moved on (its clock
    /// ticks coarsely), which nothing sets back.
    #[cfg(unix)]
    fn edit_in_place(path: &Path, bytes: &str, meta: &fs::Metadata) {
        use std::os::unix::fs::MetadataExt;
        let changed = |m: fs::Metadata| (m.ctime(), m.ctime_nsec());
        let before = changed(fs::metadata(path).unwrap());
        loop {
            fs::write(path, bytes).unwrap();
            fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(meta.modified().unwrap())
                .unwrap();
            if changed(fs::metadata(path).unwrap()) != before {
                return;
            }
        }
    }

    /// A glance at a goal of 20 todos: the snapshot read as far as its glance (the 16 best
    /// todos) and checked against the log, the same head and todos as a read, and a decision
    /// taken from it; after another store's commit, the new state.
    #[test]
    fn a_glance_reads_the_snapshot_as_far_as_its_glance() {
        let (_dir, a, b, id) = two_stores();
        for i in 0..20 {
            add_todo(&a, &id, &format!("todo {i}"));
        }
        let (g, counts) = b.glance(&id).unwrap().expect("a glance at a current snapshot");
        assert_eq!((counts.free, counts.held, counts.user), (20, 0, 0));
        let whole = open_at(a.root()).read(&id).unwrap();
        assert_eq!((g.seq, &g.goal, &g.agents), (whole.seq, &whole.goal, &whole.agents));
        let held: Vec<_> = g.todos.iter().cloned().collect();
        assert_eq!(held, whole.todos.iter().take(table::GLANCE_FREE).cloned().collect::<Vec<_>>());
        add_todo(&a, &id, "one more");
        let (g, counts) = open_at(a.root()).glance(&id).unwrap().unwrap();
        assert_eq!((g.seq, counts.free), (whole.seq + 1, 21));
        // A store that glanced once, or holds the state it read, takes it whole instead.
        assert!(b.glance(&id).unwrap().is_none());
        let c = open_at(a.root());
        c.read(&id).unwrap();
        assert!(c.glance(&id).unwrap().is_none());
    }

    /// A glance is taken only from a snapshot a whole load would trust: its glance edited, the
    /// key lines' hash it records changed, an older snapshot, or a log that moved, and there is
    /// none (the whole load then finds out what). A key line beyond the glance is neither read
    /// nor hashed: the glance stands, and the next whole load finds the edit.
    #[cfg(unix)]
    #[test]
    fn a_glance_is_taken_only_from_a_snapshot_a_load_would_trust() {
        let (dir, a, _, id) = two_stores();
        for i in 0..20 {
            add_todo(&a, &id, &format!("todo {i}"));
        }
        let path = a.layout.snapshot(&id);
        let meta = fs::metadata(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let glance = |edit: &dyn Fn(&str) -> String| {
            edit_in_place(&path, &edit(&text), &meta);
            let taken = open_at(dir.path()).glance(&id).unwrap().is_some();
            edit_in_place(&path, &text, &meta);
            taken
        };
        assert!(glance(&|t| t.to_owned()));
        assert!(!glance(&|t| t.replacen("t5\topen\tP1", "t5\topen\tP0", 1)), "its glance edited");
        let keys = text.split("\"keys\":\"").nth(1).unwrap()[..64].to_owned();
        assert!(!glance(&|t| t.replacen(&keys, &"0".repeat(64), 1)), "the key lines' hash changed");
        assert!(!glance(&|t| t.replacen("\"schema_version\":4", "\"schema_version\":3", 1)), "older");
        // The 20th todo's key line is the last, past the glance.
        let last = "t20\topen\tP1";
        assert!(text.matches(last).count() == 1, "t20 is outside the glance");
        assert!(glance(&|t| t.replacen(last, "t20\topen\tP0", 1)));
        edit_in_place(&path, &text.replacen(last, "t20\topen\tP0", 1), &meta);
        assert!(matches!(open_at(dir.path()).load_snapshot(&id, false).unwrap(), Loaded::Tampered(_)));
        edit_in_place(&path, &text, &meta);
        let events = a.layout.events(&id);
        fs::OpenOptions::new()
            .append(true)
            .open(&events)
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap();
        assert!(open_at(dir.path()).glance(&id).unwrap().is_none(), "the log moved");
    }

    /// A second read of a goal whose log has not changed takes the state the first read
    /// found, without reading the snapshot again; a commit by another store (another process)
    /// is seen by the next read.
    #[test]
    fn a_read_takes_the_state_it_found_until_the_log_changes() {
        let (dir, a, b, id) = two_stores();
        let first = a.read(&id).unwrap();
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        fs::write(&snapshot, b"not a snapshot").unwrap();
        let again = a.read(&id).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the state the first read found");
        assert_eq!(fs::read(&snapshot).unwrap(), b"not a snapshot", "the snapshot was not read");
        add_todo(&b, &id, "added elsewhere");
        let after = a.read(&id).unwrap();
        assert_eq!(after.seq, first.seq + 1, "the other store's commit is read");
        assert_eq!(*after, *b.read(&id).unwrap());
    }

    /// What a store warned of.
    #[derive(Debug, Default)]
    struct Heard(std::sync::Mutex<Vec<String>>);

    impl crate::Reporter for Heard {
        fn warn(&self, message: &str) {
            self.0.lock().unwrap().push(message.to_owned());
        }
        fn waiting_for_lock(&self, _: &str, _: &str) {}
    }

    /// A transaction after a read, the log as the read found it, takes the state the read
    /// found without reading the snapshot again (under the goal's lock no one commits); after
    /// another store's commit it reads the snapshot, and commits after that commit.
    #[test]
    fn a_transaction_after_a_read_takes_its_state_until_the_log_changes() {
        let (dir, _, b, id) = two_stores();
        let heard = Arc::new(Heard::default());
        let a =
            FileStore::open(dir.path(), Arc::new(crate::SystemClock), heard.clone(), StoreOptions::default())
                .unwrap();
        let seq = a.read(&id).unwrap().seq;
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        fs::write(&snapshot, b"not a snapshot").unwrap();
        add_todo(&a, &id, "first");
        assert_eq!(*heard.0.lock().unwrap(), Vec::<String>::new(), "the snapshot was not read");
        let after = open_at(dir.path()).read(&id).unwrap();
        assert_eq!(after.seq, seq + 1);
        assert_eq!(*after, *a.read(&id).unwrap());

        let c = open_at(dir.path());
        c.read(&id).unwrap();
        add_todo(&b, &id, "added elsewhere");
        add_todo(&c, &id, "second");
        let texts: Vec<String> = c.read(&id).unwrap().todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "added elsewhere", "second"], "the other store's commit is read");
        assert_eq!(*c.read(&id).unwrap(), *open_at(dir.path()).read(&id).unwrap());
        assert!(c.scan(&id).is_ok(), "the log's chain holds");
    }

    /// A commit appends the todos it changed to the body file its state's other todos are in,
    /// by this store or another: the goal keeps one body file, which only grows, and every
    /// store reads the same todos from it.
    #[test]
    fn commits_append_to_the_body_file_the_todos_are_in() {
        let (dir, a, b, id) = two_stores();
        let goal = dir.path().join(".loopx/goals/main");
        let bodies = || -> Vec<(String, u64)> {
            let mut v: Vec<(String, u64)> = fs::read_dir(&goal)
                .unwrap()
                .flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
                .filter(|(n, _)| n.starts_with("todos-"))
                .collect();
            v.sort();
            v
        };
        add_todo(&a, &id, "first");
        let [(name, first)] = &bodies()[..] else { panic!("one body file: {:?}", bodies()) };
        let (name, first) = (name.clone(), *first);
        add_todo(&a, &id, "second");
        add_todo(&b, &id, "third");
        let [(after, len)] = &bodies()[..] else { panic!("one body file: {:?}", bodies()) };
        assert_eq!(after, &name, "the same file");
        assert!(*len > first, "grown: {first} then {len}");
        let texts: Vec<String> =
            open_at(dir.path()).read(&id).unwrap().todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "second", "third"]);
    }

    /// A read after this store's own commit takes the state the commit left without reading
    /// the snapshot again; another store's commit after it is seen by the next read.
    #[test]
    fn a_read_after_its_own_commit_reads_nothing_else() {
        let (dir, a, b, id) = two_stores();
        add_todo(&a, &id, "first");
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        let written = fs::read(&snapshot).unwrap();
        fs::write(&snapshot, b"not a snapshot").unwrap();
        let after = a.read(&id).unwrap();
        assert_eq!(fs::read(&snapshot).unwrap(), b"not a snapshot", "the snapshot was not read");
        assert_eq!(after.todos.iter().map(|t| t.text.clone()).collect::<Vec<_>>(), ["first"]);
        fs::write(&snapshot, &written).unwrap();
        add_todo(&b, &id, "added elsewhere");
        let seen = a.read(&id).unwrap();
        assert_eq!(seen.seq, after.seq + 1, "the other store's commit is read");
        assert_eq!(*seen, *b.read(&id).unwrap());
    }

    /// A read after a commit takes the state the commit left, its unchanged rows still reading
    /// from the snapshot before, and finds what a new store decodes, even when the log's mark
    /// has moved since (its inode changed, not its bytes) and the snapshot is checked; the next
    /// transaction re-bases it and commits from it as from any other.
    #[cfg(unix)]
    #[test]
    fn a_read_after_a_commit_takes_its_state_and_a_transaction_rebases_it() {
        use std::os::unix::fs::MetadataExt;
        let (dir, a, b, id) = two_stores();
        add_todo(&a, &id, "first");
        add_todo(&a, &id, "second");
        let c = open_at(dir.path());
        c.read(&id).unwrap();
        add_todo(&c, &id, "third");
        let events = dir.path().join(".loopx/goals/main/events.jsonl");
        let changed = |m: fs::Metadata| (m.ctime(), m.ctime_nsec());
        let before = changed(fs::metadata(&events).unwrap());
        while changed(fs::metadata(&events).unwrap()) == before {
            let mode = fs::metadata(&events).unwrap().permissions();
            fs::set_permissions(&events, mode).unwrap();
        }
        let after = c.read(&id).unwrap();
        {
            let kept = c.kept();
            let k = &kept[&id];
            assert!(k.unbased, "a read leaves the rows where the commit left them");
            assert!(Arc::ptr_eq(&k.state, &after), "the state the commit left");
        }
        assert_eq!(*after, *b.read(&id).unwrap(), "what a new store decodes");
        let texts: Vec<String> = after.todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "second", "third"]);
        add_todo(&c, &id, "fourth");
        assert_eq!(*c.read(&id).unwrap(), *open_at(dir.path()).read(&id).unwrap());
        assert_eq!(c.read(&id).unwrap().todos.iter().count(), 4);
    }

    /// An edit of the log that keeps its length and sets its modification time back still
    /// changes its mark (the inode's change time): the next read checks the log again.
    #[cfg(unix)]
    #[test]
    fn a_hand_edit_that_keeps_the_logs_length_and_time_is_read_again() {
        let (dir, a, _b, id) = two_stores();
        add_todo(&a, &id, "first");
        a.read(&id).unwrap();
        let kept = a.read(&id).unwrap();
        let events = dir.path().join(".loopx/goals/main/events.jsonl");
        let (bytes, meta) = (fs::read(&events).unwrap(), fs::metadata(&events).unwrap());
        let text = String::from_utf8(bytes).unwrap().replacen("\"o\"", "\"x\"", 1);
        assert_eq!(text.len(), usize::try_from(meta.len()).unwrap());
        edit_in_place(&events, &text, &meta);
        assert_eq!(fs::metadata(&events).unwrap().len(), meta.len());
        assert_eq!(fs::metadata(&events).unwrap().modified().unwrap(), meta.modified().unwrap());
        fs::remove_file(dir.path().join(".loopx/goals/main/snapshot.json")).unwrap();
        let e = a.read(&id).map(|s| Arc::ptr_eq(&s, &kept)).unwrap_err();
        assert_eq!(e.kind, loopx_core::ErrorKind::Integrity, "{e:?}");
    }

    /// `project.json` is read again once it changes: replaced whole, edited in place with its
    /// length and time kept, or broken.
    #[cfg(unix)]
    #[test]
    fn project_json_is_read_again_when_it_changes() {
        let (dir, a, b, _) = two_stores();
        let path = dir.path().join(".loopx/project.json");
        assert_eq!(a.project().unwrap().goals.len(), 1);
        let other = GoalId::new("other").unwrap();
        b.create_goal(&other, Event::GoalCreated { objective: "o".into(), title: None }, false).unwrap();
        assert_eq!(a.project().unwrap().goals.len(), 2, "replaced by another store");
        let (text, meta) = (fs::read_to_string(&path).unwrap(), fs::metadata(&path).unwrap());
        let edited = text.replacen("\"other\"", "\"otter\"", 1);
        assert_ne!(edited, text);
        edit_in_place(&path, &edited, &meta);
        assert!(a.project().unwrap().has_goal(&GoalId::new("otter").unwrap()), "edited in place");
        fs::write(&path, b"{").unwrap();
        assert_eq!(a.project().unwrap_err().kind, loopx_core::ErrorKind::Integrity);
    }

    #[test]
    fn a_streamed_log_is_its_lines_across_many_reads_and_a_torn_tail_is_left_out() {
        // Enough lines for several reads of a MiB, a line cut by each read's end.
        let (lines, mut bytes) = log_of(20_000);
        assert!(bytes.len() > 2 << 20);
        bytes.extend_from_slice(b"{\"seq\":20001,\"at\":");
        assert_eq!(streamed(&bytes).unwrap(), lines);
        // A reader that stops early.
        let mut seen = 0;
        stream_log(Path::new("events.jsonl"), &bytes[..], &mut |_| {
            seen += 1;
            Ok(seen < 3)
        })
        .unwrap();
        assert_eq!(seen, 3);
    }

    #[test]
    fn a_bad_line_in_a_stream_is_named_whether_or_not_it_is_text() {
        let (_, bytes) = log_of(5);
        let third = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
        for bad in [&b"{\"seq\":3,\"at\":\"x\"}"[..], &b"{\"seq\":3,\xff\xfe}"[..]] {
            let mut edited = bytes[..third].to_vec();
            edited.extend_from_slice(bad);
            edited.push(b'\n');
            let e = streamed(&edited).unwrap_err();
            assert_eq!(e.kind, loopx_core::ErrorKind::Integrity, "{e:?}");
            assert!(e.message.contains("line 3"), "{}", e.message);
        }
        // A line of another log: it does not chain.
        let mut edited = bytes.clone();
        edited.extend_from_slice(&log_of(1).1);
        assert!(streamed(&edited).unwrap_err().message.contains("line 6"));
    }
}
