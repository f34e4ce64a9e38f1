//! The live todos as a table.
//!
//! A goal that runs for months keeps thousands of open todos, and a command needs few of them
//! whole: `should-run` ranks them all but reports one. So each row keeps what selection ranks
//! (status, priority, role, class, holder, resume condition, gate: its [`KeyRef`]) decoded, and
//! a row read from a store finds its todo's JSON only when the todo is first used. A commit
//! copies the key lines of the todos it did not change and encodes only the others.
//!
//! In the stored form ([`crate::codec`]) a key line per todo in id order follows the state's
//! head: tab-separated fields ending with the hash and length of the todo's JSON. The state
//! root hashes that form, so it covers every todo through its hash without reading the todos;
//! a todo's JSON is checked against its hash when read. Where the JSON lives is the store's
//! matter: after the key lines in a database's row, in a body file of its own in the file
//! store.

use std::borrow::Cow;
use std::fmt;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};

use loopx_core::model::{Priority, ResumeWhen, Role, Todo, TodoClass, TodoStatus};
use loopx_core::{AgentId, Error, GateId, Result, Timestamp, TodoId};

/// What a decision needs of a goal's todos when its best todo is among a few: kept in the
/// state's form right after its head, so a decision reads and checks that part alone. It
/// holds the key lines, in id order, of the [`GLANCE_FREE`] best todos an agent could pick
/// that nobody holds (by priority, then creation), every one an agent holds or waits for (up
/// to [`GLANCE_HELD`]) and every open todo of a person's (up to [`GLANCE_USER`]), with how
/// many of each the goal has: a glance vouches for a pick only when it holds everything that
/// could rank before it ([`crate::decide::decide_at_a_glance`]); the state's stored form keeps it
/// ([`crate::codec`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Glance {
    /// Todos an agent could pick that nobody holds.
    pub free: usize,
    /// Todos an agent could pick that an agent holds (claimed or waiting for it).
    pub held: usize,
    /// Open todos of a person's.
    pub user: usize,
}

/// How many of the best free todos a glance holds.
pub const GLANCE_FREE: usize = 16;
/// How many held todos a glance holds at most (with more, it vouches for nothing).
pub const GLANCE_HELD: usize = 16;
/// How many open todos of a person's a glance holds at most.
pub const GLANCE_USER: usize = 16;

/// The length of a todo's hash in its key line.
const HASH_LEN: usize = 16;

/// The hash of a todo's JSON: 96 bits of BLAKE3, base64url.
fn body_hash(body: &[u8]) -> [u8; HASH_LEN] {
    let mut text = String::with_capacity(HASH_LEN);
    crate::base64::base64_96(blake3::hash(body).as_bytes(), &mut text);
    let mut out = [0; HASH_LEN];
    out.copy_from_slice(text.as_bytes());
    out
}

/// What selection reads of a todo, borrowed from a decoded todo or a stored row's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRef<'a> {
    pub id: TodoId,
    pub status: TodoStatus,
    pub priority: Priority,
    pub role: Role,
    pub class: TodoClass,
    pub claimed_by: Option<&'a AgentId>,
    pub assignee: Option<&'a AgentId>,
    pub resume_when: Option<&'a ResumeWhen>,
    pub after_gate: Option<GateId>,
}

impl<'a> KeyRef<'a> {
    /// Who has it: the agent that claimed it, or the one it waits for.
    pub fn holder(&self) -> Option<&'a AgentId> {
        self.claimed_by.or(self.assignee)
    }

    /// Agent work an agent could pick up, whoever holds it: an open (or deferred with a resume
    /// condition) `advance` or `monitor` agent todo.
    pub(crate) fn is_agent_work(&self) -> bool {
        self.role == Role::Agent
            && self.class != TodoClass::Blocker
            && (self.status == TodoStatus::Open
                || (self.status == TodoStatus::Deferred && self.resume_when.is_some()))
    }
}

impl<'a> From<&'a Todo> for KeyRef<'a> {
    fn from(t: &'a Todo) -> Self {
        KeyRef {
            id: t.id,
            status: t.status,
            priority: t.priority,
            role: t.role,
            class: t.class,
            claimed_by: t.claimed_by.as_ref(),
            assignee: t.assignee.as_ref(),
            resume_when: t.resume_when.as_ref(),
            after_gate: t.after_gate,
        }
    }
}

/// The file a goal's stored todos are in (the file store's `todos-N.dat`): their JSON, one
/// after the other, each on its own line. Only appended to; a commit that finds it more than
/// half dead writes the live todos to a new one. A reader keeps the file it opened, so a todo
/// it decodes later is the one its snapshot named.
#[derive(Debug)]
pub struct BodyFile {
    /// The event whose commit began the file (its name's N).
    pub(crate) generation: u64,
    pub path: PathBuf,
    file: Mutex<Window>,
    /// Bytes read todo by todo so far; past an eighth of the file, the rest of what is asked
    /// for comes from one read of the whole file (a listing decodes every todo; a decision one,
    /// GOAL.md a few dozen).
    read: AtomicU64,
    len: u64,
    whole: OnceLock<Vec<u8>>,
}

/// The body file, open, and the last stretch of it read: from the second todo read on, todos
/// that follow each other in the file are read together (GOAL.md lists the first few dozen open
/// ones, most often written one after the other), a read of [`WINDOW`] bytes for many of a few
/// hundred; a decision, which reads one todo, reads only it.
#[derive(Debug)]
struct Window {
    file: File,
    at: u64,
    bytes: Vec<u8>,
    /// Whether a todo was read before (the next read reads ahead).
    again: bool,
}

/// How much of the body file one read of a todo reads ahead.
const WINDOW: usize = 16 * 1024;

impl Window {
    /// `len` bytes from `at`: from the stretch last read when they are in it, else from a new
    /// stretch read there, of up to [`WINDOW`] bytes but not past `end` (what the file held when
    /// it was opened: what follows may still be being written).
    fn read(&mut self, at: u64, len: usize, end: u64) -> std::io::Result<Vec<u8>> {
        let inside = |w: &Self| {
            let from = usize::try_from(at.checked_sub(w.at)?).ok()?;
            w.bytes.get(from..from.checked_add(len)?).map(<[u8]>::to_vec)
        };
        if let Some(bytes) = inside(self) {
            return Ok(bytes);
        }
        let ahead = usize::try_from(end.saturating_sub(at)).unwrap_or(usize::MAX).min(WINDOW);
        if !std::mem::replace(&mut self.again, true) || ahead < len {
            let mut buf = vec![0; len];
            read_at(&mut self.file, at, &mut buf)?;
            return Ok(buf);
        }
        self.bytes.resize(ahead, 0);
        if let Err(e) = read_at(&mut self.file, at, &mut self.bytes) {
            self.bytes.clear();
            return Err(e);
        }
        self.at = at;
        Ok(self.bytes[..len].to_vec())
    }
}

impl BodyFile {
    pub fn open(path: &Path, generation: u64) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(BodyFile {
            generation,
            path: path.to_owned(),
            file: Mutex::new(Window { file, at: 0, bytes: Vec::new(), again: false }),
            read: AtomicU64::new(0),
            len,
            whole: OnceLock::new(),
        })
    }

    fn read(&self, at: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        let short = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        let slice = |whole: &'_ [u8]| -> std::io::Result<usize> {
            let at = usize::try_from(at).map_err(|_| short())?;
            whole.get(at..at.saturating_add(len)).map(|_| at).ok_or_else(short)
        };
        if let Some(whole) = self.whole.get() {
            let at = slice(whole)?;
            return Ok(Cow::Borrowed(&whole[at..at + len]));
        }
        let mut window = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.read.fetch_add(len as u64, Ordering::Relaxed) >= self.len / 8 {
            let mut all = Vec::new();
            window.file.seek(SeekFrom::Start(0))?;
            window.file.read_to_end(&mut all)?;
            let whole = self.whole.get_or_init(|| all);
            let at = slice(whole)?;
            return Ok(Cow::Borrowed(&whole[at..at + len]));
        }
        window.read(at, len, self.len).map(Cow::Owned)
    }
}

/// Reads `buf.len()` bytes of `file` from `at`: one call where the system reads at an offset
/// (GOAL.md reads a few dozen todos a commit).
fn read_at(file: &mut File, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    if crate::fs::read_at_most(file, at, buf)? < buf.len() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Where a stored row's JSON is.
#[derive(Clone, Debug)]
enum Source {
    /// In the canonical bytes the state was read from (a database's row).
    Inline(Arc<Vec<u8>>),
    /// In the file store's body file.
    File(Arc<BodyFile>),
}

/// What a table's stored rows were read from: the bytes holding their key lines, where their
/// JSON is, and what their keys share.
#[derive(Debug)]
struct Origin {
    keys: Arc<Vec<u8>>,
    src: Source,
    /// Where each row's JSON is in `src`, by the row's place among the stored rows.
    offsets: Vec<u64>,
    /// The agents the key lines name (a row keeps an index: a goal has few agents and many
    /// todos).
    agents: Vec<AgentId>,
    /// What the few rows that wait on something wait on (a row keeps an index).
    waits: Vec<Waits>,
}

/// A stored row's resume condition and the gate it waits for, when it has either: few todos
/// do, so a row keeps an index to them instead of room for them.
#[derive(Clone, Debug)]
struct Waits {
    resume_when: Option<ResumeWhen>,
    after_gate: Option<GateId>,
}

/// A row as stored: its key, with agents and what it waits on as indexes (from 1; 0 for none)
/// into the origin's, where its key line begins in the origin's keys (the line ends with the
/// hash and length of its JSON), and its place among the stored rows (its JSON is at that place
/// of the origin's offsets; rows whose places follow each other have their key lines next to
/// each other). Kept small and free of allocations: a command reads one for every open todo.
#[derive(Clone)]
struct Stored {
    id: TodoId,
    waits: u32,
    line: u32,
    place: u32,
    /// The length of its JSON (the key line's last field).
    len: u32,
    status: TodoStatus,
    priority: Priority,
    role: Role,
    class: TodoClass,
    claimed_by: u32,
    assignee: u32,
    todo: OnceLock<Box<Todo>>,
}

impl Stored {
    fn key<'a>(&'a self, o: &'a Origin) -> KeyRef<'a> {
        let agent = |i: u32| o.agents.get((i as usize).wrapping_sub(1));
        let waits = o.waits.get((self.waits as usize).wrapping_sub(1));
        KeyRef {
            id: self.id,
            status: self.status,
            priority: self.priority,
            role: self.role,
            class: self.class,
            claimed_by: agent(self.claimed_by),
            assignee: agent(self.assignee),
            resume_when: waits.and_then(|w| w.resume_when.as_ref()),
            after_gate: waits.and_then(|w| w.after_gate),
        }
    }

    /// Its key line, newline included.
    fn line<'a>(&self, o: &'a Origin) -> &'a [u8] {
        line_at(&o.keys, self.line)
    }

    /// Where its JSON is in the origin's source.
    fn at(&self, o: &Origin) -> u64 {
        o.offsets.get(self.place as usize).copied().unwrap_or(u64::MAX)
    }

    /// The JSON as stored, checked against its hash.
    fn body<'a>(&self, o: &'a Origin) -> std::result::Result<Cow<'a, [u8]>, String> {
        let (hash, len) = (self.hash(o), self.len as usize);
        let at = self.at(o);
        let bytes = match &o.src {
            Source::Inline(b) => {
                let at = usize::try_from(at).unwrap_or(usize::MAX);
                Cow::Borrowed(b.get(at..at.saturating_add(len)).ok_or("past the end")?)
            }
            Source::File(f) => f.read(at, len).map_err(|e| format!("{}: {e}", f.path.display()))?,
        };
        if body_hash(&bytes) != hash {
            return Err(match &o.src {
                Source::File(f) => {
                    format!("{} does not hold todo {} as the snapshot records", f.path.display(), self.id)
                }
                Source::Inline(_) => format!("todo {} does not hash to what its key records", self.id),
            });
        }
        Ok(bytes)
    }

    /// The hash of its JSON.
    fn hash(&self, o: &Origin) -> [u8; HASH_LEN] {
        let line = self.line(o);
        let mut hash = [0; HASH_LEN];
        // The hash ends at the tab before the length, which ends the line.
        let end = line.len().saturating_sub(digits(self.len) + 2);
        if let Some(h) = line.get(end.saturating_sub(HASH_LEN)..end) {
            hash.copy_from_slice(h);
        }
        hash
    }

    fn decode(&self, o: &Origin) -> std::result::Result<Todo, String> {
        let todo: Todo =
            serde_json::from_slice(&self.body(o)?).map_err(|e| format!("todo {}: {e}", self.id))?;
        if KeyRef::from(&todo) != self.key(o) {
            return Err(format!("todo {}: its record disagrees with its key", self.id));
        }
        Ok(todo)
    }

    fn todo(&self, o: &Origin) -> &Todo {
        self.todo.get_or_init(|| match self.decode(o) {
            Ok(t) => Box::new(t),
            // The state root vouched for the key line and its hash, and the store for the file
            // (its size and time): only a file changed under loopx, or a fault in loopx itself,
            // gets here, and nothing it holds is used.
            Err(e) => {
                panic!("loopx: the goal's stored todos cannot be trusted: {e}; run `loopx doctor --repair`")
            }
        })
    }
}

#[derive(Clone)]
enum Row {
    Stored(Stored),
    Owned(Box<Todo>),
}

// A goal reads a row for every open todo: 56 bytes each, where a resume condition and a gate
// kept in every row made 80.
const _: () = assert!(std::mem::size_of::<Row>() <= 56);

/// The line of `bytes` that begins at `at`, newline included.
fn line_at(bytes: &[u8], at: u32) -> &[u8] {
    let rest = bytes.get(at as usize..).unwrap_or_default();
    let end = crate::newline::find(rest).map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// The number of decimal digits of `n`.
fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The live todos, in id order.
#[derive(Clone, Default)]
pub struct TodoTable {
    rows: Vec<Row>,
    /// What the stored rows were read from (empty when none are).
    origin: Arc<Origin>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            keys: Arc::default(),
            src: Source::Inline(Arc::default()),
            offsets: vec![],
            agents: vec![],
            waits: vec![],
        }
    }
}

impl TodoTable {
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn key_of<'a>(&'a self, row: &'a Row) -> KeyRef<'a> {
        match row {
            Row::Stored(s) => s.key(&self.origin),
            Row::Owned(t) => KeyRef::from(&**t),
        }
    }

    fn todo_of<'a>(&'a self, row: &'a Row) -> &'a Todo {
        match row {
            Row::Stored(s) => s.todo(&self.origin),
            Row::Owned(t) => t,
        }
    }

    fn id_of(row: &Row) -> TodoId {
        match row {
            Row::Stored(s) => s.id,
            Row::Owned(t) => t.id,
        }
    }

    fn index(&self, id: TodoId) -> Option<usize> {
        self.rows.binary_search_by_key(&id, Self::id_of).ok()
    }

    /// Where the todo with `id` is among the table's rows (in id order).
    pub fn position(&self, id: TodoId) -> Option<usize> {
        self.index(id)
    }

    /// The todo with `id`, decoded.
    pub fn get(&self, id: TodoId) -> Option<&Todo> {
        self.index(id).map(|i| self.todo_of(&self.rows[i]))
    }

    /// The todo with the highest id (the last added, while it is live).
    pub fn last(&self) -> Option<&Todo> {
        self.rows.last().map(|r| self.todo_of(r))
    }

    /// What selection reads of the todo with `id`, without decoding it.
    pub fn key(&self, id: TodoId) -> Option<KeyRef<'_>> {
        self.index(id).map(|i| self.key_of(&self.rows[i]))
    }

    /// The todo with `id`, to change: from here on it is encoded anew when committed.
    pub fn get_mut(&mut self, id: TodoId) -> Option<&mut Todo> {
        let i = self.index(id)?;
        if let Row::Stored(s) = &self.rows[i] {
            let todo = s.todo(&self.origin).clone();
            self.rows[i] = Row::Owned(Box::new(todo));
        }
        match &mut self.rows[i] {
            Row::Owned(t) => Some(t),
            Row::Stored(_) => None,
        }
    }

    /// Adds a todo; ids are added in increasing order, so the table stays in id order.
    pub fn push(&mut self, todo: Todo) {
        match self.rows.last().map(Self::id_of) {
            Some(last) if last >= todo.id => {
                let at = self.rows.partition_point(|r| Self::id_of(r) < todo.id);
                self.rows.insert(at, Row::Owned(Box::new(todo)));
            }
            _ => self.rows.push(Row::Owned(Box::new(todo))),
        }
    }

    /// Takes the todo with `id` out of the table.
    pub fn remove(&mut self, id: TodoId) -> Option<Todo> {
        let i = self.index(id)?;
        Some(match self.rows.remove(i) {
            Row::Stored(s) => s.todo(&self.origin).clone(),
            Row::Owned(t) => *t,
        })
    }

    /// Every todo, decoded, in id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Todo> + ExactSizeIterator {
        self.rows.iter().map(|r| self.todo_of(r))
    }

    /// Every todo's key, in id order, decoding nothing.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = KeyRef<'_>> + ExactSizeIterator {
        self.rows.iter().map(|r| self.key_of(r))
    }

    /// The todos whose key passes `keep`, decoded, in id order: only those are decoded.
    pub fn matching<'a>(
        &'a self,
        mut keep: impl FnMut(KeyRef<'a>) -> bool + 'a,
    ) -> impl DoubleEndedIterator<Item = &'a Todo> + 'a {
        self.rows.iter().filter(move |r| keep(self.key_of(r))).map(|r| self.todo_of(r))
    }

    /// The body file the stored rows read from, if any.
    pub fn body_file(&self) -> Option<&Arc<BodyFile>> {
        match &self.origin.src {
            Source::File(f) if self.rows.iter().any(|r| matches!(r, Row::Stored(_))) => Some(f),
            _ => None,
        }
    }

    /// Where each todo's JSON goes in a body file of generation `generation`: the offset of one
    /// already there, or the bytes to write.
    pub(crate) fn places(&self, generation: Option<u64>) -> Result<Vec<Place<'_>>> {
        let o = &*self.origin;
        let same = matches!(&o.src, Source::File(f) if Some(f.generation) == generation);
        self.rows
            .iter()
            .map(|row| match row {
                Row::Stored(s) if same => Ok(Place::At(s.at(o), s.len as usize)),
                Row::Stored(s) => s.body(o).map(Place::Write).map_err(Error::integrity),
                Row::Owned(t) => encode_todo(t).map(|b| Place::Write(Cow::Owned(b))),
            })
            .collect()
    }

    /// Reads and checks every stored todo, keeping what it decodes: for `doctor`, and for a
    /// store that checks a state whole before use.
    pub fn check(&self) -> std::result::Result<(), String> {
        for row in &self.rows {
            if let Row::Stored(s) = row
                && s.todo.get().is_none()
            {
                let _ = s.todo.set(Box::new(s.decode(&self.origin)?));
            }
        }
        Ok(())
    }

    /// Appends the key lines: stored rows' as they were read, the others' made anew. Returns
    /// where each row's line begins in `out`.
    pub(crate) fn encode_keys_into(&self, out: &mut Vec<u8>) -> Result<Vec<u32>> {
        let mut starts = Vec::with_capacity(self.rows.len());
        // Stored rows next to each other in the origin are copied as one run of lines.
        let mut run: Option<(&Stored, &Stored)> = None;
        let flush = |run: &mut Option<(&Stored, &Stored)>, out: &mut Vec<u8>| {
            if let Some((first, last)) = run.take() {
                let end = last.line as usize + last.line(&self.origin).len();
                out.extend_from_slice(&self.origin.keys[first.line as usize..end]);
            }
        };
        let position = |out: &Vec<u8>| {
            u32::try_from(out.len()).map_err(|_| Error::internal("a state larger than 4 GiB"))
        };
        for row in &self.rows {
            match row {
                Row::Stored(s) => match &mut run {
                    Some((first, last)) if last.place + 1 == s.place => {
                        *last = s;
                        // Where the line will be once the run is copied.
                        let at = position(out)? + (s.line - first.line);
                        starts.push(at);
                    }
                    _ => {
                        flush(&mut run, out);
                        run = Some((s, s));
                        starts.push(position(out)?);
                    }
                },
                Row::Owned(t) => {
                    flush(&mut run, out);
                    starts.push(position(out)?);
                    let body = encode_todo(t)?;
                    key_line(KeyRef::from(&**t), &body_hash(&body), body.len(), out);
                }
            }
        }
        flush(&mut run, out);
        Ok(starts)
    }

    /// The rows a glance holds ([`Glance`]), by place in id order, and how many
    /// of each kind the table has.
    pub(crate) fn glance(&self) -> (Vec<usize>, Glance) {
        let mut counts = Glance::default();
        // The best free rows so far, by (priority, place): rows come in id order, so a row
        // ranks before one already kept only by a higher priority.
        let mut free: Vec<(Priority, usize)> = Vec::with_capacity(GLANCE_FREE + 1);
        let mut held = Vec::new();
        let mut user = Vec::new();
        for (i, row) in self.rows.iter().enumerate() {
            let k = self.key_of(row);
            if k.is_agent_work() {
                if k.holder().is_some() {
                    counts.held += 1;
                    if held.len() < GLANCE_HELD {
                        held.push(i);
                    }
                } else {
                    counts.free += 1;
                    if free.len() < GLANCE_FREE || free.last().is_some_and(|(p, _)| k.priority < *p) {
                        let at = free.partition_point(|(p, _)| *p <= k.priority);
                        free.insert(at, (k.priority, i));
                        free.truncate(GLANCE_FREE);
                    }
                }
            } else if k.role == Role::User && !k.status.is_closed() {
                counts.user += 1;
                if user.len() < GLANCE_USER {
                    user.push(i);
                }
            }
        }
        let mut rows: Vec<usize> = free.into_iter().map(|(_, i)| i).chain(held).chain(user).collect();
        rows.sort_unstable();
        (rows, counts)
    }

    /// Reads `n` key lines from `keys[at..to]` into rows; returns them, what they share (the
    /// agents they name, what they wait on), and where the lines end.
    fn decode_keys(
        keys: &[u8],
        mut at: usize,
        to: usize,
        n: usize,
    ) -> std::result::Result<(Vec<Row>, Shared, usize), String> {
        if to > u32::MAX as usize {
            return Err("a state larger than 4 GiB".to_owned());
        }
        let mut rows = Vec::with_capacity(n);
        crate::prefault::spare(&mut rows);
        let mut shared = Shared::default();
        let mut last = None;
        let bytes = &keys[..to];
        for place in 0..n {
            let (row, end) = match quick_key_line(bytes, at, place as u32, &mut shared) {
                Some(read) => read,
                None => {
                    let mut line = Line { bytes, at };
                    let row = parse_key_line(&mut line, place as u32, &mut shared).map_err(|what| {
                        let rest = &keys[at..to];
                        let text = String::from_utf8_lossy(
                            &rest[..crate::newline::find(rest).unwrap_or(rest.len())],
                        );
                        format!("a key line with a bad {what}: {text:?}")
                    })?;
                    (row, line.at)
                }
            };
            if last.is_some_and(|last| last >= row.id) {
                return Err(format!("todo {} is out of order", row.id));
            }
            last = Some(row.id);
            rows.push(Row::Stored(row));
            at = end;
        }
        Ok((rows, shared, at))
    }
}

/// What rows read from key lines point into: the agents the lines name, each kept once, and
/// what the rows that wait on something wait on.
#[derive(Default)]
struct Shared {
    agents: Vec<AgentId>,
    waits: Vec<Waits>,
}

impl Shared {
    /// The index (from 1) of the agent named `name`; 0 for none; `None` for a bad name.
    #[inline]
    fn index(&mut self, name: &[u8]) -> Option<u32> {
        if name.is_empty() {
            return Some(0);
        }
        self.named(name)
    }

    fn named(&mut self, name: &[u8]) -> Option<u32> {
        let i = match self.agents.iter().position(|a| a.as_str().as_bytes() == name) {
            Some(i) => i,
            None => {
                self.agents.push(AgentId::new(std::str::from_utf8(name).ok()?).ok()?);
                self.agents.len() - 1
            }
        };
        u32::try_from(i + 1).ok()
    }

    /// The origin of rows read from `keys`, their JSON in `src` at `offsets`.
    fn origin(self, keys: &Arc<Vec<u8>>, src: Source, offsets: Vec<u64>) -> Arc<Origin> {
        Arc::new(Origin { keys: Arc::clone(keys), src, offsets, agents: self.agents, waits: self.waits })
    }

    /// The index (from 1) of what a row waits on; 0 for nothing.
    fn waits(&mut self, resume_when: Option<ResumeWhen>, after_gate: Option<GateId>) -> Option<u32> {
        if resume_when.is_none() && after_gate.is_none() {
            return Some(0);
        }
        self.waits.push(Waits { resume_when, after_gate });
        u32::try_from(self.waits.len()).ok()
    }
}

/// Where a todo's JSON goes in a body file.
#[derive(Debug)]
pub(crate) enum Place<'a> {
    /// Already there: offset and length.
    At(u64, usize),
    /// To be written.
    Write(Cow<'a, [u8]>),
}

fn encode_todo(t: &Todo) -> Result<Vec<u8>> {
    serde_json::to_vec(t).map_err(|e| Error::internal(format!("cannot encode todo {}: {e}", t.id)))
}

impl<'a> IntoIterator for &'a TodoTable {
    type Item = &'a Todo;
    type IntoIter = Box<dyn DoubleEndedIterator<Item = &'a Todo> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl PartialEq for TodoTable {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for TodoTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// In JSON (the older form, and a state read or written whole) the table is a list of todos.
impl Serialize for TodoTable {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for TodoTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let todos = Vec::<Todo>::deserialize(d)?;
        let mut table = TodoTable::default();
        for t in todos {
            table.push(t);
        }
        Ok(table)
    }
}

/// Where a state's todos are, for [`crate::codec::decode`].
#[derive(Debug)]
pub enum Bodies {
    /// After the key lines, a line each ([`crate::codec::encode_state`]).
    Inline,
    /// In `file`, at the offsets listed on the line after the key lines.
    File(Option<Arc<BodyFile>>),
}

impl TodoTable {
    /// Appends each todo's JSON, a line each, to the key lines in `out`.
    pub fn append_bodies(&self, out: &mut Vec<u8>) -> Result<()> {
        for place in self.places(None)? {
            if let Place::Write(body) = place {
                out.extend_from_slice(&body);
                out.push(b'\n');
            }
        }
        Ok(())
    }

    /// The key lines of `n` todos from `src[at..to]`, with their JSON where `bodies` says.
    /// Returns the table and where the key lines end. Todos are decoded when first used.
    pub fn decode(
        src: &Arc<Vec<u8>>,
        at: usize,
        to: usize,
        n: usize,
        bodies: Bodies,
    ) -> std::result::Result<(Self, usize), String> {
        let src_of = match &bodies {
            Bodies::Inline => Source::Inline(Arc::clone(src)),
            Bodies::File(Some(f)) => Source::File(Arc::clone(f)),
            Bodies::File(None) if n == 0 => Source::Inline(Arc::clone(src)),
            Bodies::File(None) => return Err("no body file".to_owned()),
        };
        let (rows, shared, keys_end) = TodoTable::decode_keys(src, at, to, n)?;
        let offsets = match bodies {
            Bodies::Inline => {
                // Each todo's JSON and its newline, one after the other.
                let mut end = keys_end as u64;
                let mut offsets = Vec::with_capacity(n);
                crate::prefault::spare(&mut offsets);
                for row in &rows {
                    let Row::Stored(s) = row else { continue };
                    offsets.push(end);
                    end += u64::from(s.len) + 1;
                    // Each todo's JSON ends its line.
                    let nl = usize::try_from(end - 1).ok().and_then(|i| src.get(i).filter(|_| i < to));
                    if nl != Some(&b'\n') {
                        return Err(format!("todo {}: its JSON does not end its line", s.id));
                    }
                }
                if end != to as u64 {
                    return Err("the todos' lengths do not add up".to_owned());
                }
                offsets
            }
            Bodies::File(_) => offsets_line(&src[keys_end..to], n)?,
        };
        Ok((TodoTable { rows, origin: shared.origin(src, src_of, offsets) }, keys_end))
    }

    /// The key lines of `n` todos from `src[at..to]`, their JSON in `file` at `offsets` (one
    /// for each): a glance's todos. Returns the table and where the key lines end.
    pub(crate) fn decode_at(
        src: &Arc<Vec<u8>>,
        at: usize,
        to: usize,
        n: usize,
        file: Option<Arc<BodyFile>>,
        offsets: Vec<u64>,
    ) -> std::result::Result<(Self, usize), String> {
        let src_of = match file {
            Some(f) => Source::File(f),
            None if n == 0 => Source::Inline(Arc::clone(src)),
            None => return Err("no body file".to_owned()),
        };
        if offsets.len() != n {
            return Err("the offsets do not match the todos".to_owned());
        }
        let (rows, shared, keys_end) = TodoTable::decode_keys(src, at, to, n)?;
        Ok((TodoTable { rows, origin: shared.origin(src, src_of, offsets) }, keys_end))
    }

    /// This table as decoding what a commit of it just wrote gives: its rows reading from
    /// `keys` (`n` key lines from `at` to the end, as [`crate::codec::encode_keys`] wrote
    /// them) and from the body file `file` at the offsets of `offsets` (its line, newline
    /// included), keeping every todo already decoded. Fails, changing nothing it was given but
    /// itself, when the key lines are not this table's.
    pub fn rebase(
        self,
        keys: &Arc<Vec<u8>>,
        at: usize,
        n: usize,
        file: Option<Arc<BodyFile>>,
        offsets: &[u8],
    ) -> std::result::Result<TodoTable, String> {
        let src = match file {
            Some(f) => Source::File(f),
            None if n == 0 => Source::Inline(Arc::clone(keys)),
            None => return Err("no body file".to_owned()),
        };
        let (mut rows, shared, keys_end) = TodoTable::decode_keys(keys, at, keys.len(), n)?;
        if keys_end != keys.len() || rows.len() != self.rows.len() {
            return Err("the key lines are not the table's".to_owned());
        }
        let offsets = offsets_line(offsets, n)?;
        let origin = shared.origin(keys, src, offsets);
        for (new, old) in rows.iter().zip(&self.rows) {
            if let Row::Stored(s) = new
                && s.key(&origin) != self.key_of(old)
            {
                return Err(format!("todo {}: its key line is not the table's", s.id));
            }
        }
        for (new, old) in rows.iter_mut().zip(self.rows) {
            let decoded = match old {
                Row::Owned(t) => Some(t),
                Row::Stored(s) => s.todo.into_inner(),
            };
            if let (Row::Stored(s), Some(t)) = (new, decoded) {
                let _ = s.todo.set(t);
            }
        }
        Ok(TodoTable { rows, origin })
    }
}

/// A key line: id, status, priority, role, class, claimed by, assignee, resume condition, gate
/// waited for (each empty when none), and the hash and length of the todo's JSON.
fn key_line(k: KeyRef<'_>, hash: &[u8; HASH_LEN], body_len: usize, out: &mut Vec<u8>) {
    fn name(a: Option<&AgentId>) -> &str {
        a.map_or("", AgentId::as_str)
    }
    let mut line = String::with_capacity(80);
    let _ = write!(
        line,
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t",
        k.id,
        k.status,
        k.priority,
        k.role,
        k.class,
        name(k.claimed_by),
        name(k.assignee)
    );
    match k.resume_when {
        None => {}
        Some(ResumeWhen::TodoDone(t)) => {
            let _ = write!(line, "todo:{t}");
        }
        Some(ResumeWhen::At(at)) => {
            let _ = write!(line, "at:{}", at.unix_millis());
        }
        Some(ResumeWhen::GateAnswered(g)) => {
            let _ = write!(line, "gate:{g}");
        }
    }
    line.push('\t');
    if let Some(g) = k.after_gate {
        let _ = write!(line, "{g}");
    }
    line.push('\t');
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(hash);
    out.extend_from_slice(format!("\t{body_len}\n").as_bytes());
}

/// A key line being read, field by field: a goal reads one for every open todo, so each byte
/// is looked at once.
struct Line<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Line<'a> {
    /// The next field and the tab (or, for the last, the newline) that ends it.
    fn field(&mut self, end: u8) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let len = rest.iter().position(|b| *b == b'\t' || *b == b'\n')?;
        (rest[len] == end).then(|| {
            self.at += len + 1;
            &rest[..len]
        })
    }

    /// The next field when it is `len` bytes long (a hash): skipped, not scanned.
    fn fixed(&mut self, len: usize, end: u8) -> Option<&'a [u8]> {
        let field = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        (self.bytes.get(self.at + len) == Some(&end) && !field.iter().any(|b| matches!(b, b'\t' | b'\n')))
            .then(|| {
                self.at += len + 1;
                field
            })
    }

    /// The next field, one of the words `all` are written as.
    fn word<T: Copy>(&mut self, all: &[T], name: impl Fn(T) -> &'static str) -> Option<T> {
        let rest = self.bytes.get(self.at..)?;
        all.iter()
            .copied()
            .find(|w| {
                let w = name(*w).as_bytes();
                rest.starts_with(w) && rest.get(w.len()) == Some(&b'\t')
            })
            .inspect(|w| self.at += name(*w).len() + 1)
    }
}

/// Reads the key line at `line`, the `place`th stored; on a bad one, says which field is bad.
fn parse_key_line(
    line: &mut Line<'_>,
    place: u32,
    shared: &mut Shared,
) -> std::result::Result<Stored, &'static str> {
    let start = line.at as u32;
    let id = line.field(b'\t').and_then(|f| parse_u64(f.strip_prefix(b"t")?)).ok_or("id")?;
    let status = line.word(TodoStatus::ALL, TodoStatus::as_str).ok_or("status")?;
    let priority = line.word(Priority::ALL, Priority::as_str).ok_or("priority")?;
    let role = line.word(Role::ALL, Role::as_str).ok_or("role")?;
    let class = line.word(TodoClass::ALL, TodoClass::as_str).ok_or("class")?;
    let claimed_by = line.field(b'\t').and_then(|f| shared.index(f)).ok_or("claimer")?;
    let assignee = line.field(b'\t').and_then(|f| shared.index(f)).ok_or("assignee")?;
    let resume = line.field(b'\t').ok_or("resume condition")?;
    let resume_when = if resume.is_empty() {
        None
    } else if let Some(t) = resume.strip_prefix(b"todo:t") {
        Some(ResumeWhen::TodoDone(TodoId::from_number(parse_u64(t).ok_or("resume condition")?)))
    } else if let Some(ms) = resume.strip_prefix(b"at:") {
        let ms = std::str::from_utf8(ms).ok().and_then(|ms| ms.parse().ok()).ok_or("resume condition")?;
        Some(ResumeWhen::At(Timestamp::from_unix_millis(ms)))
    } else if let Some(g) = resume.strip_prefix(b"gate:g") {
        Some(ResumeWhen::GateAnswered(GateId::from_number(parse_u64(g).ok_or("resume condition")?)))
    } else {
        return Err("resume condition");
    };
    let gate = line.field(b'\t').ok_or("gate")?;
    let after_gate = match gate.strip_prefix(b"g") {
        None if gate.is_empty() => None,
        Some(g) => Some(GateId::from_number(parse_u64(g).ok_or("gate")?)),
        None => return Err("gate"),
    };
    let waits = shared.waits(resume_when, after_gate).ok_or("gate")?;
    line.fixed(HASH_LEN, b'\t').ok_or("hash")?;
    let len = line.field(b'\n').and_then(parse_u64).and_then(|n| u32::try_from(n).ok()).ok_or("length")?;
    Ok(Stored {
        id: TodoId::from_number(id),
        waits,
        line: start,
        place,
        len,
        status,
        priority,
        role,
        class,
        claimed_by,
        assignee,
        todo: OnceLock::new(),
    })
}

/// The key line at `bytes[at..]` when it is a plain one — no resume condition, no gate, every
/// field as [`parse_key_line`] accepts it — with where the next line begins; `None` for any
/// other, which [`parse_key_line`] then reads (and says what is wrong with). A goal reads a key
/// line for every open todo, nearly all of them plain: this looks at each byte once, and at a
/// word's first letter before the rest of it.
#[inline]
fn quick_key_line(bytes: &[u8], at: usize, place: u32, shared: &mut Shared) -> Option<(Stored, usize)> {
    let rest = bytes.get(at..)?;
    let mut i = 0;
    // The id: `t` and up to 19 digits, no leading zero.
    if rest.first() != Some(&b't') {
        return None;
    }
    i += 1;
    let id = quick_number(rest, &mut i, 19, b'\t')?;
    let status = quick_word(rest, &mut i, TodoStatus::ALL, TodoStatus::as_str)?;
    let priority = quick_word(rest, &mut i, Priority::ALL, Priority::as_str)?;
    let role = quick_word(rest, &mut i, Role::ALL, Role::as_str)?;
    let class = quick_word(rest, &mut i, TodoClass::ALL, TodoClass::as_str)?;
    let claimed_by = quick_name(rest, &mut i, shared)?;
    let assignee = quick_name(rest, &mut i, shared)?;
    // No resume condition and no gate: two empty fields.
    if rest.get(i..i + 2)? != b"\t\t" {
        return None;
    }
    i += 2;
    // The hash: sixteen bytes, neither a tab nor a newline among them, then a tab.
    let hash = rest.get(i..i + HASH_LEN)?;
    if hash.iter().fold(false, |bad, b| bad | (*b == b'\t') | (*b == b'\n'))
        || rest.get(i + HASH_LEN) != Some(&b'\t')
    {
        return None;
    }
    i += HASH_LEN + 1;
    let len = u32::try_from(quick_number(rest, &mut i, 10, b'\n')?).ok()?;
    let row = Stored {
        id: TodoId::from_number(id),
        waits: 0,
        line: u32::try_from(at).ok()?,
        place,
        len,
        status,
        priority,
        role,
        class,
        claimed_by,
        assignee,
        todo: OnceLock::new(),
    };
    Some((row, at + i))
}

/// A decimal number of at most `max` digits, no leading zero, ended by `end` (taken too).
#[inline]
fn quick_number(rest: &[u8], i: &mut usize, max: usize, end: u8) -> Option<u64> {
    debug_assert!(max <= 19);
    let start = *i;
    let mut n = 0u64;
    loop {
        let b = *rest.get(*i)?;
        *i += 1;
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            let digits = *i - 1 - start;
            let leading_zero = digits > 1 && rest[start] == b'0';
            return (b == end && digits > 0 && !leading_zero).then_some(n);
        }
        if *i - start > max {
            return None;
        }
        // Nineteen digits always fit in a u64.
        n = n * 10 + u64::from(d);
    }
}

/// One of the words `all` are written as, and its tab; the first letter is compared first.
#[inline]
fn quick_word<T: Copy>(rest: &[u8], i: &mut usize, all: &[T], name: impl Fn(T) -> &'static str) -> Option<T> {
    let first = *rest.get(*i)?;
    let w = all.iter().copied().find(|w| {
        let word = name(*w).as_bytes();
        word[0] == first
            && rest.get(*i..*i + word.len()) == Some(word)
            && rest.get(*i + word.len()) == Some(&b'\t')
    })?;
    *i += name(w).len() + 1;
    Some(w)
}

/// An agent's field and its tab: 0 for none, else the agent's index in `shared`.
#[inline]
fn quick_name(rest: &[u8], i: &mut usize, shared: &mut Shared) -> Option<u32> {
    if rest.get(*i) == Some(&b'\t') {
        *i += 1;
        return Some(0);
    }
    let field = rest.get(*i..)?;
    let len = field.iter().position(|b| *b == b'\t' || *b == b'\n')?;
    if field[len] != b'\t' {
        return None;
    }
    *i += len + 1;
    shared.named(&field[..len])
}

/// The offsets of `n` todos in a body file, from their line (`bytes`, its newline ending it;
/// no line for none).
fn offsets_line(bytes: &[u8], n: usize) -> std::result::Result<Vec<u64>, String> {
    if n == 0 {
        return if bytes.is_empty() { Ok(vec![]) } else { Err("bytes after the offsets".to_owned()) };
    }
    let nl = crate::newline::find(bytes).ok_or("a line without its end")?;
    if nl + 1 != bytes.len() {
        return Err("bytes after the offsets".to_owned());
    }
    let offsets = parse_offsets(&bytes[..nl], n).ok_or("a bad offset")?;
    if offsets.len() != n {
        return Err("the offsets do not match the todos".to_owned());
    }
    Ok(offsets)
}

/// A line of `n` offsets, separated by single spaces, each written as [`parse_u64`] reads.
fn parse_offsets(line: &[u8], n: usize) -> Option<Vec<u64>> {
    let mut offsets = Vec::with_capacity(n);
    crate::prefault::spare(&mut offsets);
    let mut at = 0;
    loop {
        let (number, end) = quick_offset(line, at).or_else(|| {
            let end = line[at..].iter().position(|b| *b == b' ').map_or(line.len(), |len| at + len);
            Some((parse_u64(&line[at..end])?, end))
        })?;
        offsets.push(number);
        if end == line.len() {
            return Some(offsets);
        }
        at = end + 1;
    }
}

/// The offset at `line[at..]` when it has one to seven digits and a space follows it, read
/// from eight bytes at once: the number and where its space is. `None` for any other, which
/// [`parse_u64`] then reads.
#[inline]
fn quick_offset(line: &[u8], at: usize) -> Option<(u64, usize)> {
    let word: [u8; 8] = line.get(at..at.checked_add(8)?)?.try_into().ok()?;
    // Digits become the bytes 0 to 9; every other byte is larger.
    let x = u64::from_le_bytes(word) ^ 0x3030_3030_3030_3030;
    // The high bit of each byte that is not a digit (no carry crosses a byte: 0x7f + 0x76 < 0x100).
    let other = (((x & 0x7f7f_7f7f_7f7f_7f7f) + 0x7676_7676_7676_7676) | x) & 0x8080_8080_8080_8080;
    let digits = (other.trailing_zeros() / 8) as usize;
    if digits == 0 || digits == 8 || word[digits] != b' ' || (digits > 1 && word[0] == b'0') {
        return None;
    }
    // The digits, most significant first, moved up to the top bytes (zeros before them), then
    // joined in pairs, fours and eights.
    let mut v = x << (8 * (8 - digits));
    v = (v.wrapping_mul(10).wrapping_add(v >> 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v.wrapping_mul(100).wrapping_add(v >> 16)) & 0x0000_ffff_0000_ffff;
    v = (v.wrapping_mul(10_000).wrapping_add(v >> 32)) & 0xffff_ffff;
    Some((v, at + digits))
}

/// A decimal number as ids and lengths are written: digits only, no leading zero, and no
/// larger than `u64` holds.
fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| match d {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(d - b'0')),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body file reads what is asked of it wherever it is: the first todo alone, the next
    /// ones from a stretch read ahead (not past what the file held when opened), a todo past
    /// that stretch or past that end by itself, and past the file's end not at all.
    #[test]
    fn a_body_file_reads_each_todo_as_the_file_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("todos-1.dat");
        let held: Vec<u8> = (0..3 * WINDOW + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &held).unwrap();
        let file = BodyFile::open(&path, 1).unwrap();
        // Written after the file was opened: read, but never read ahead into.
        let mut more = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut more, &[7; 300]).unwrap();
        let mut all = held.clone();
        all.extend_from_slice(&[7; 300]);
        let window = || {
            let w = file.file.lock().unwrap();
            (w.at, w.bytes.len())
        };
        let read = |at: usize, len: usize| {
            let got = file.read(at as u64, len).unwrap().into_owned();
            assert_eq!(got, all[at..at + len], "{len} bytes at {at}");
        };
        read(10, 20);
        assert_eq!(window(), (0, 0), "the first todo is read alone");
        read(100, 50);
        assert_eq!(window(), (100, WINDOW), "the next reads ahead");
        read(100 + WINDOW - 30, 30);
        read(200, 10);
        assert_eq!(window(), (100, WINDOW), "what the stretch holds comes from it");
        read(100 + WINDOW - 10, 20);
        assert_eq!(window(), (100 + WINDOW as u64 - 10, WINDOW), "what it does not, from a new one");
        read(3 * WINDOW + 50, 40);
        assert_eq!(window(), (3 * WINDOW as u64 + 50, 50), "up to the end the file had when opened");
        read(3 * WINDOW + 90, 110);
        assert_eq!(window(), (3 * WINDOW as u64 + 50, 50), "past it, the todo alone");
        assert!(file.read(all.len() as u64 - 10, 20).is_err(), "past the file's end");
        // Past an eighth of the file read todo by todo, the rest comes from the whole of it.
        let again = BodyFile::open(&path, 1).unwrap();
        let eighth = all.len().div_ceil(8);
        assert_eq!(*again.read(0, eighth).unwrap(), all[..eighth]);
        assert!(again.whole.get().is_none(), "an eighth read todo by todo");
        assert_eq!(*again.read(eighth as u64 + 5, 30).unwrap(), all[eighth + 5..eighth + 35]);
        assert!(again.whole.get().is_some(), "then the whole file");
    }

    /// A small deterministic generator for the tests below.
    struct Dice(u64);

    impl Dice {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % n as u64) as usize
        }

        fn pick<'a>(&mut self, all: &[&'a str]) -> &'a str {
            all[self.below(all.len())]
        }
    }

    /// A row's fields, to compare two readings of a line.
    fn fields(s: &Stored) -> impl PartialEq + fmt::Debug {
        (
            s.id,
            s.waits,
            s.line,
            s.place,
            s.len,
            s.status,
            s.priority,
            s.role,
            s.class,
            s.claimed_by,
            s.assignee,
        )
    }

    /// Whatever the quick reader accepts, the careful one reads the same: the same row, the
    /// same end, the same agents named. Lines of every kind: plain ones, ones with near-miss
    /// words, numbers and names, and plain ones with a byte changed or cut short.
    #[test]
    fn a_key_line_read_quickly_is_read_as_carefully() {
        let mut dice = Dice(7);
        let (mut quick, mut careful) = (0, 0);
        for round in 0..60_000 {
            let field = |dice: &mut Dice, plain: &[&str], odd: &[&str]| -> String {
                if dice.below(20) == 0 { dice.pick(odd) } else { dice.pick(plain) }.to_owned()
            };
            let id = field(
                &mut dice,
                &["t1", "t20", "t9999999", "t18446744073709551615"],
                &["t0", "t01", "t", "1", "t1x", "t99999999999999999999", "t18446744073709551616", "T1"],
            );
            let status = field(
                &mut dice,
                &["open", "blocked", "deferred", "done", "superseded"],
                &["ope", "opens", "Open", "", "don", "closed"],
            );
            let priority = field(&mut dice, &["P0", "P1", "P2", "P3", "P4"], &["P5", "P", "P10", "p1", ""]);
            let role = field(&mut dice, &["agent", "user"], &["agents", "use", "", "Agent"]);
            let class = field(&mut dice, &["advance", "monitor", "blocker"], &["advanced", "mon", "", "a"]);
            let claimed = field(&mut dice, &["", "", "claude-1", "codex-2"], &["Claude", "a b", "-x", "é"]);
            let assignee = field(&mut dice, &["", "", "claude-1"], &["X", "1a"]);
            let resume = field(
                &mut dice,
                &["", "", "", "todo:t3", "at:1700000000000", "gate:g2"],
                &["todo:t", "at:x", "gate:2", "soon"],
            );
            let gate = field(&mut dice, &["", "", "", "g4"], &["g", "4", "g01"]);
            let hash = field(
                &mut dice,
                &["NE4ljnOJy9ji9Kxs", "t_Kz1vZWLSGOnRH7"],
                &["NE4ljnOJy9ji9Kx", "NE4ljnOJy9ji9Kxsx", "NE4ljnOJ\ty9ji9Kx", ""],
            );
            let len = field(
                &mut dice,
                &["240", "1", "4294967295"],
                &["0", "01", "4294967296", "", "12a", "123456789012345678901234"],
            );
            let mut line = [id, status, priority, role, class, claimed, assignee, resume, gate, hash, len]
                .join("\t")
                .into_bytes();
            line.push(b'\n');
            match dice.below(6) {
                0 => {
                    let at = dice.below(line.len());
                    line[at] = *b"\t\n0a -_\xff:".get(dice.below(9)).unwrap();
                }
                1 => line.truncate(dice.below(line.len())),
                _ => {}
            }
            // A line after it, and something before it, as in a snapshot.
            let mut bytes = b"prefix\n".to_vec();
            let at = bytes.len();
            bytes.extend_from_slice(&line);
            bytes.extend_from_slice(b"t5\topen\n");
            let to = if round % 2 == 0 { bytes.len() } else { at + line.len() };
            let bytes = &bytes[..to];
            let (mut a, mut b) = (Shared::default(), Shared::default());
            let fast = quick_key_line(bytes, at, 3, &mut a);
            let mut reading = Line { bytes, at };
            let slow = parse_key_line(&mut reading, 3, &mut b);
            match (fast, slow) {
                (Some((row, end)), Ok(want)) => {
                    assert_eq!(fields(&row), fields(&want), "{:?}", String::from_utf8_lossy(&line));
                    assert_eq!(end, reading.at);
                    assert_eq!(a.agents, b.agents);
                    quick += 1;
                }
                (Some(_), Err(what)) => {
                    panic!("read quickly, refused carefully ({what}): {:?}", String::from_utf8_lossy(&line))
                }
                (None, Ok(_)) => careful += 1,
                (None, Err(_)) => {}
            }
        }
        // Both kinds of line were met: most plain lines are read quickly, the others carefully.
        assert!(quick > 5_000 && careful > 5_000, "{quick} read quickly, {careful} only carefully");
    }

    /// A key line whose hash is not followed by its tab is refused by both readers, whatever
    /// follows: the hash is taken at its fixed width, so the tab after it is all that tells
    /// where the length begins.
    #[test]
    fn a_hash_not_followed_by_its_tab_is_refused() {
        for line in [
            &b"t1\topen\tP1\tagent\tadvance\t\t\t\t\tNE4ljnOJy9ji9Kxs240\n"[..],
            b"t1\topen\tP1\tagent\tadvance\t\t\t\t\tNE4ljnOJy9ji9Kxsx\t240\n",
            b"t1\topen\tP1\tagent\tadvance\t\t\t\t\tNE4ljnOJy9ji9K\t\t240\n",
        ] {
            let text = String::from_utf8_lossy(line);
            assert!(quick_key_line(line, 0, 0, &mut Shared::default()).is_none(), "{text:?}");
            let mut reading = Line { bytes: line, at: 0 };
            assert_eq!(
                parse_key_line(&mut reading, 0, &mut Shared::default()).err(),
                Some("hash"),
                "{text:?}"
            );
        }
        let good = b"t1\topen\tP1\tagent\tadvance\t\t\t\t\tNE4ljnOJy9ji9Kxs\t240\n";
        let mut reading = Line { bytes: good, at: 0 };
        assert_eq!(parse_key_line(&mut reading, 0, &mut Shared::default()).map(|s| s.len), Ok(240));
    }

    /// The careful reader names the field it refuses, in lines the quick one leaves to it.
    #[test]
    fn a_bad_field_is_named() {
        let line = |resume: &str, gate: &str| {
            format!("t1\topen\tP1\tagent\tadvance\t\t\t{resume}\t{gate}\tNE4ljnOJy9ji9Kxs\t240\n")
        };
        for (bytes, field) in [
            (line("", "4"), "gate"),
            (line("", "g"), "gate"),
            (line("", "gx"), "gate"),
            (line("soon", ""), "resume condition"),
            (line("todo:t", ""), "resume condition"),
            (line("at:x", ""), "resume condition"),
            (line("gate:2", ""), "resume condition"),
            ("t1\topen\tP9\tagent\tadvance\t\t\t\t\tNE4ljnOJy9ji9Kxs\t240\n".to_owned(), "priority"),
        ] {
            let mut reading = Line { bytes: bytes.as_bytes(), at: 0 };
            assert_eq!(
                parse_key_line(&mut reading, 0, &mut Shared::default()).err(),
                Some(field),
                "{bytes:?}"
            );
        }
        for (bytes, resume, gate) in [
            (line("todo:t3", "g4"), Some(ResumeWhen::TodoDone(TodoId::from_number(3))), Some(4)),
            (line("gate:g2", ""), Some(ResumeWhen::GateAnswered(GateId::from_number(2))), None),
            (line("", ""), None, None),
        ] {
            let mut shared = Shared::default();
            let row = parse_key_line(&mut Line { bytes: bytes.as_bytes(), at: 0 }, 0, &mut shared).unwrap();
            let origin = shared.origin(&Arc::default(), Source::Inline(Arc::default()), vec![]);
            let key = row.key(&origin);
            assert_eq!(key.resume_when, resume.as_ref(), "{bytes:?}");
            assert_eq!(key.after_gate, gate.map(GateId::from_number), "{bytes:?}");
        }
    }

    /// A table re-based on what a commit of it wrote reads from there (every row stored, at
    /// the new body file), holds what it held, and copies its key lines as written; key lines
    /// that are not the table's are refused.
    #[test]
    fn a_table_rebased_on_its_written_form_reads_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let todo = |n: u64, text: &str| -> Todo {
            serde_json::from_str(&format!(
                r#"{{"id":"t{n}","text":"{text}","priority":"P1","role":"agent","class":"advance","status":"open","created_by":"user","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z"}}"#
            ))
            .unwrap()
        };
        // The table as a commit writes it: its key lines, the offsets line, and a new body file.
        let write = |table: &TodoTable, generation: u64| {
            let mut keys = Vec::new();
            table.encode_keys_into(&mut keys).unwrap();
            let (mut body, mut offsets) = (Vec::new(), Vec::new());
            for place in table.places(None).unwrap() {
                let Place::Write(json) = place else { panic!("a new body file holds every todo") };
                if !offsets.is_empty() {
                    offsets.push(b' ');
                }
                offsets.extend_from_slice(body.len().to_string().as_bytes());
                body.extend_from_slice(&json);
                body.push(b'\n');
            }
            offsets.push(b'\n');
            let path = dir.path().join(format!("todos-{generation}.dat"));
            std::fs::write(&path, &body).unwrap();
            (Arc::new(keys), offsets, Arc::new(BodyFile::open(&path, generation).unwrap()))
        };
        let mut first = TodoTable::default();
        for n in 1..=3 {
            first.push(todo(n, "first"));
        }
        let (first_keys, first_offsets, first_file) = write(&first, 1);
        let src = Arc::new([first_keys.as_slice(), &first_offsets].concat());
        assert!(TodoTable::decode(&src, 0, src.len(), 3, Bodies::File(None)).is_err(), "no body file");
        let (mut table, _) =
            TodoTable::decode(&src, 0, src.len(), 3, Bodies::File(Some(Arc::clone(&first_file)))).unwrap();
        table.get_mut(TodoId::from_number(2)).unwrap().text = "changed".into();
        table.push(todo(4, "added"));
        let expected: Vec<Todo> = table.iter().cloned().collect();
        let (keys, offsets, file) = write(&table, 2);
        let mut other = table.clone();
        other.get_mut(TodoId::from_number(1)).unwrap().priority = Priority::P0;
        assert!(
            other.rebase(&keys, 0, 4, Some(Arc::clone(&file)), &offsets).is_err(),
            "another table's keys"
        );
        assert!(
            table.clone().rebase(&first_keys, 0, 3, Some(first_file), &first_offsets).is_err(),
            "the keys of its first rows alone"
        );
        assert!(table.clone().rebase(&keys, 0, 4, None, &offsets).is_err(), "no body file");
        assert!(format!("{table:?}").contains("\"added\""), "its todos, listed");
        let rebased = table.rebase(&keys, 0, 4, Some(file), &offsets).unwrap();
        let places = rebased.places(Some(2)).unwrap();
        assert!(
            places.iter().all(|p| matches!(p, Place::At(..))),
            "every row reads from the new file: {places:?}"
        );
        assert_eq!(rebased.iter().cloned().collect::<Vec<_>>(), expected);
        let mut again = Vec::new();
        rebased.encode_keys_into(&mut again).unwrap();
        assert_eq!(again, *keys);
    }

    /// The eight-byte reader reads every offset of one to seven digits followed by a space
    /// itself (the reason a long offsets line reads quickly) and leaves every other to the
    /// careful reader.
    #[test]
    fn short_offsets_are_read_eight_bytes_at_a_time() {
        for n in [0u64, 7, 42, 999, 1000, 65_536, 1_234_567, 9_999_999] {
            let line = format!("{n} 12345678");
            assert_eq!(quick_offset(line.as_bytes(), 0), Some((n, n.to_string().len())), "{line}");
            let line = format!("9 {n} 12345678");
            assert_eq!(quick_offset(line.as_bytes(), 2), Some((n, 2 + n.to_string().len())), "{line}");
        }
        for line in ["12345678 1", "01 234567", "1x 234567", "1234567", " 1 234567", "1/ 234567", "1: 234567"]
        {
            assert_eq!(quick_offset(line.as_bytes(), 0), None, "{line}");
        }
    }

    /// Offsets read as a byte-at-a-time reader does: single spaces between, no leading zero
    /// but for 0, nothing past `u64`.
    #[test]
    fn offsets_read_as_their_definition_says() {
        fn plainly(line: &[u8]) -> Option<Vec<u64>> {
            let mut offsets = Vec::new();
            let (mut number, mut digits) = (0u64, 0);
            for b in line.iter().chain([&b' ']) {
                match b {
                    b' ' if digits > 0 => {
                        offsets.push(number);
                        (number, digits) = (0, 0);
                    }
                    b'0'..=b'9' if !(digits == 1 && number == 0) => {
                        number = number.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                        digits += 1;
                    }
                    _ => return None,
                }
            }
            Some(offsets)
        }
        let fixed: [&[u8]; 12] = [
            b"0 242 484",
            b"7",
            b"0",
            b"01",
            b"1  2",
            b" 1",
            b"1 ",
            b"",
            b"18446744073709551615",
            b"18446744073709551616",
            b"1a",
            b"10 0 3",
        ];
        // Bytes next to the digits' (`/`, `:`) and past ASCII, which the eight-byte reader must
        // tell from digits too (0xba and 0xff differ from a digit's bits only in the high bit
        // and above nine).
        let pieces: [&[u8]; 12] =
            [b"0", b"1", b"9", b" ", b"x", b"99999999999", b"/", b":", b"\xb9", b"\xba", b"\xff", b"1234567"];
        let mut seed: u64 = 5;
        let sprayed = (0..20_000).map(|_| {
            let mut line = Vec::new();
            for _ in 0..(seed >> 61) + 1 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                line.extend_from_slice(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            line
        });
        for line in fixed.iter().map(|l| l.to_vec()).chain(sprayed) {
            assert_eq!(parse_offsets(&line, 4), plainly(&line), "{:?}", String::from_utf8_lossy(&line));
        }
    }
}
