//! The live todos as a table.
//!
//! A goal that runs for months keeps thousands of open todos, and a command needs few of them
//! whole: `should-run` ranks them all but reports one. So each row keeps what selection ranks
//! (status, priority, role, class, holder, resume condition, gate: its [`KeyRef`]) decoded, and
//! a row read from a store finds its todo's JSON only when the todo is first used. A commit
//! copies the key lines of the todos it did not change and encodes only the others.
//!
//! The stored form ([`encode_keys`]) is a marker line, the state without its todos as one JSON
//! line, and a key line per todo in id order: tab-separated fields ending with the hash and
//! length of the todo's JSON. The state root hashes that form, so it covers every todo through
//! its hash without reading the todos; a todo's JSON is checked against its hash when read.
//! Where the JSON lives is the store's matter: after the key lines in a database's row
//! ([`encode_state`]), in a body file of its own in the file store.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use loopx_core::model::{Priority, ResumeWhen, Role, Todo, TodoClass, TodoStatus};
use loopx_core::{AgentId, Error, GateId, Result, Timestamp, TodoId};

use crate::state::GoalState;

/// How the first line of a state in the table form begins (the number of todos follows); a
/// state without it is the older JSON form.
const MARKER: &[u8] = b"loopx-state 3 ";
/// The length of a todo's hash in its key line.
const HASH_LEN: usize = 16;

/// The hash of a todo's JSON: 96 bits of BLAKE3, base64url.
fn body_hash(body: &[u8]) -> [u8; HASH_LEN] {
    let mut text = String::with_capacity(HASH_LEN);
    crate::log::base64_96(blake3::hash(body).as_bytes(), &mut text);
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

/// A stored row's key, owned.
#[derive(Clone, Debug)]
struct TodoKey {
    id: TodoId,
    status: TodoStatus,
    priority: Priority,
    role: Role,
    class: TodoClass,
    claimed_by: Option<AgentId>,
    assignee: Option<AgentId>,
    resume_when: Option<ResumeWhen>,
    after_gate: Option<GateId>,
}

impl TodoKey {
    fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            id: self.id,
            status: self.status,
            priority: self.priority,
            role: self.role,
            class: self.class,
            claimed_by: self.claimed_by.as_ref(),
            assignee: self.assignee.as_ref(),
            resume_when: self.resume_when.as_ref(),
            after_gate: self.after_gate,
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
    pub generation: u64,
    pub path: PathBuf,
    file: Mutex<File>,
    /// Bytes read todo by todo so far; past an eighth of the file, the rest of what is asked
    /// for comes from one read of the whole file (a listing decodes every todo; a decision one,
    /// GOAL.md a few dozen).
    read: AtomicU64,
    len: u64,
    whole: OnceLock<Vec<u8>>,
}

impl BodyFile {
    pub fn open(path: &Path, generation: u64) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(BodyFile {
            generation,
            path: path.to_owned(),
            file: Mutex::new(file),
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
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.read.fetch_add(len as u64, Ordering::Relaxed) >= self.len / 8 {
            let mut all = Vec::new();
            file.seek(SeekFrom::Start(0))?;
            file.read_to_end(&mut all)?;
            let whole = self.whole.get_or_init(|| all);
            let at = slice(whole)?;
            return Ok(Cow::Borrowed(&whole[at..at + len]));
        }
        file.seek(SeekFrom::Start(at))?;
        let mut buf = vec![0; len];
        file.read_exact(&mut buf)?;
        Ok(Cow::Owned(buf))
    }
}

/// Where a stored row's JSON is.
#[derive(Clone, Debug)]
enum Source {
    /// In the canonical bytes the state was read from (a database's row).
    Inline(Arc<Vec<u8>>),
    /// In the file store's body file.
    File(Arc<BodyFile>),
}

/// What a table's stored rows were read from: the bytes holding their key lines, and where
/// their JSON is.
#[derive(Debug)]
struct Origin {
    keys: Arc<Vec<u8>>,
    src: Source,
}

/// A row as stored: its key, its key line's bytes (`line` in the origin's keys; the line ends
/// with the hash and length of its JSON), and where its JSON is (at `at` in the origin's
/// source). Kept small: a command reads one for every open todo.
#[derive(Clone)]
struct Stored {
    key: TodoKey,
    origin: Arc<Origin>,
    line: (u32, u32),
    at: u64,
    todo: OnceLock<Box<Todo>>,
}

impl Stored {
    /// The JSON as stored, checked against its hash.
    fn body(&self) -> std::result::Result<Cow<'_, [u8]>, String> {
        let (hash, len) = self.hash_len();
        let bytes = match &self.origin.src {
            Source::Inline(b) => {
                let at = usize::try_from(self.at).unwrap_or(usize::MAX);
                Cow::Borrowed(b.get(at..at.saturating_add(len)).ok_or("past the end")?)
            }
            Source::File(f) => f.read(self.at, len).map_err(|e| format!("{}: {e}", f.path.display()))?,
        };
        if body_hash(&bytes) != hash {
            return Err(match &self.origin.src {
                Source::File(f) => {
                    format!("{} does not hold todo {} as the snapshot records", f.path.display(), self.key.id)
                }
                Source::Inline(_) => format!("todo {} does not hash to what its key records", self.key.id),
            });
        }
        Ok(bytes)
    }

    /// The hash and length of its JSON: the key line's last two fields (checked when read).
    fn hash_len(&self) -> ([u8; HASH_LEN], usize) {
        let line = &self.origin.keys[self.line.0 as usize..self.line.1 as usize - 1];
        let tab = line.iter().rposition(|b| *b == b'\t').unwrap_or(0);
        let len = std::str::from_utf8(&line[tab + 1..]).ok().and_then(|n| n.parse().ok()).unwrap_or(0);
        let mut hash = [0; HASH_LEN];
        if let Some(h) = line.get(tab.saturating_sub(HASH_LEN)..tab) {
            hash.copy_from_slice(h);
        }
        (hash, len)
    }

    fn decode(&self) -> std::result::Result<Todo, String> {
        let todo: Todo =
            serde_json::from_slice(&self.body()?).map_err(|e| format!("todo {}: {e}", self.key.id))?;
        if KeyRef::from(&todo) != self.key.as_ref() {
            return Err(format!("todo {}: its record disagrees with its key", self.key.id));
        }
        Ok(todo)
    }

    fn todo(&self) -> &Todo {
        self.todo.get_or_init(|| match self.decode() {
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

impl Row {
    fn key(&self) -> KeyRef<'_> {
        match self {
            Row::Stored(s) => s.key.as_ref(),
            Row::Owned(t) => KeyRef::from(&**t),
        }
    }
    fn todo(&self) -> &Todo {
        match self {
            Row::Stored(s) => s.todo(),
            Row::Owned(t) => t,
        }
    }
    fn into_todo(self) -> Todo {
        match self {
            Row::Stored(s) => s.todo().clone(),
            Row::Owned(t) => *t,
        }
    }
}

/// The live todos, in id order.
#[derive(Clone, Default)]
pub struct TodoTable {
    rows: Vec<Row>,
}

impl TodoTable {
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn index(&self, id: TodoId) -> Option<usize> {
        self.rows.binary_search_by_key(&id, |r| r.key().id).ok()
    }

    /// The todo with `id`, decoded.
    pub fn get(&self, id: TodoId) -> Option<&Todo> {
        self.index(id).map(|i| self.rows[i].todo())
    }

    /// The todo with the highest id (the last added, while it is live).
    pub fn last(&self) -> Option<&Todo> {
        self.rows.last().map(Row::todo)
    }

    /// What selection reads of the todo with `id`, without decoding it.
    pub fn key(&self, id: TodoId) -> Option<KeyRef<'_>> {
        self.index(id).map(|i| self.rows[i].key())
    }

    /// The todo with `id`, to change: from here on it is encoded anew when committed.
    pub fn get_mut(&mut self, id: TodoId) -> Option<&mut Todo> {
        let i = self.index(id)?;
        let row = &mut self.rows[i];
        if let Row::Stored(s) = row {
            let todo = s.todo().clone();
            *row = Row::Owned(Box::new(todo));
        }
        match row {
            Row::Owned(t) => Some(t),
            Row::Stored(_) => None,
        }
    }

    /// Adds a todo; ids are added in increasing order, so the table stays in id order.
    pub fn push(&mut self, todo: Todo) {
        match self.rows.last().map(|r| r.key().id) {
            Some(last) if last >= todo.id => {
                let at = self.rows.partition_point(|r| r.key().id < todo.id);
                self.rows.insert(at, Row::Owned(Box::new(todo)));
            }
            _ => self.rows.push(Row::Owned(Box::new(todo))),
        }
    }

    /// Takes the todo with `id` out of the table.
    pub fn remove(&mut self, id: TodoId) -> Option<Todo> {
        let i = self.index(id)?;
        Some(self.rows.remove(i).into_todo())
    }

    /// Every todo, decoded, in id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Todo> + ExactSizeIterator {
        self.rows.iter().map(Row::todo)
    }

    /// Every todo's key, in id order, decoding nothing.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = KeyRef<'_>> + ExactSizeIterator {
        self.rows.iter().map(Row::key)
    }

    /// The todos whose key passes `keep`, decoded, in id order: only those are decoded.
    pub fn matching<'a>(
        &'a self,
        mut keep: impl FnMut(KeyRef<'a>) -> bool + 'a,
    ) -> impl DoubleEndedIterator<Item = &'a Todo> + 'a {
        self.rows.iter().filter(move |r| keep(r.key())).map(Row::todo)
    }

    /// The body file the stored rows read from, if any.
    pub fn body_file(&self) -> Option<&Arc<BodyFile>> {
        self.rows.iter().find_map(|r| match r {
            Row::Stored(s) => match &s.origin.src {
                Source::File(f) => Some(f),
                Source::Inline(_) => None,
            },
            Row::Owned(_) => None,
        })
    }

    /// Where each todo's JSON goes in a body file of generation `generation`: the offset of one
    /// already there, or the bytes to write.
    pub fn places(&self, generation: Option<u64>) -> Result<Vec<Place<'_>>> {
        self.rows
            .iter()
            .map(|row| match row {
                Row::Stored(s)
                    if matches!(&s.origin.src, Source::File(f) if Some(f.generation) == generation) =>
                {
                    Ok(Place::At(s.at, s.hash_len().1))
                }
                Row::Stored(s) => s.body().map(Place::Write).map_err(Error::integrity),
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
                let _ = s.todo.set(Box::new(s.decode()?));
            }
        }
        Ok(())
    }

    /// Appends the key lines: stored rows' as they were read, the others' made anew.
    fn encode_keys_into(&self, out: &mut Vec<u8>) -> Result<()> {
        for row in &self.rows {
            match row {
                Row::Stored(s) => out.extend_from_slice(&s.origin.keys[s.line.0 as usize..s.line.1 as usize]),
                Row::Owned(t) => {
                    let body = encode_todo(t)?;
                    key_line(KeyRef::from(&**t), &body_hash(&body), body.len(), out);
                }
            }
        }
        Ok(())
    }

    /// Reads `n` key lines from `origin.keys[at..to]` into rows whose JSON is placed later
    /// (`at` 0); returns the table and where the lines end.
    fn decode_keys(
        origin: &Arc<Origin>,
        mut at: usize,
        to: usize,
        n: usize,
    ) -> std::result::Result<(Self, usize), String> {
        let src = &origin.keys;
        if to > u32::MAX as usize {
            return Err("a state larger than 4 GiB".to_owned());
        }
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            let nl = src[at..to].iter().position(|b| *b == b'\n').ok_or("a key line without its end")?;
            let key = parse_key_line(&src[at..at + nl])?;
            if rows.last().is_some_and(|r: &Row| r.key().id >= key.id) {
                return Err(format!("todo {} is out of order", key.id));
            }
            let line = (at as u32, (at + nl + 1) as u32);
            let origin = Arc::clone(origin);
            rows.push(Row::Stored(Stored { key, origin, line, at: 0, todo: OnceLock::new() }));
            at += nl + 1;
        }
        Ok((TodoTable { rows }, at))
    }

    /// Places the stored rows' JSON: each gets the next of `offsets`.
    fn place(&mut self, offsets: &mut dyn Iterator<Item = Option<u64>>) -> std::result::Result<(), String> {
        for row in &mut self.rows {
            if let Row::Stored(s) = row {
                s.at = offsets.next().flatten().ok_or("a missing or bad offset")?;
            }
        }
        match offsets.next() {
            None => Ok(()),
            Some(_) => Err("more offsets than todos".to_owned()),
        }
    }
}

/// Where a todo's JSON goes in a body file.
#[derive(Debug)]
pub enum Place<'a> {
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

thread_local! {
    /// Set while the head of the table form is encoded: the todos follow it as records.
    static HEAD_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// In JSON (the older form, and a state read or written whole) the table is a list of todos.
impl Serialize for TodoTable {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if HEAD_ONLY.get() {
            return s.serialize_seq(Some(0))?.end();
        }
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

/// What a state's root hashes: the marker line with the number of todos, the state without
/// its todos as one JSON line, and a key line per todo (with its JSON's hash and length).
pub fn encode_keys(state: &GoalState, hint: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(hint + hint / 16);
    out.extend_from_slice(MARKER);
    out.extend_from_slice(format!("{}\n", state.todos.len()).as_bytes());
    HEAD_ONLY.set(true);
    let head = serde_json::to_writer(&mut out, state);
    HEAD_ONLY.set(false);
    head.map_err(|e| Error::internal(format!("cannot encode the state: {e}")))?;
    out.push(b'\n');
    state.todos.encode_keys_into(&mut out)?;
    Ok(out)
}

/// A state's canonical bytes, whole: [`encode_keys`], then each todo's JSON on a line of its
/// own. What a database keeps, and what two states are compared by.
pub fn encode_state(state: &GoalState) -> Result<Vec<u8>> {
    let mut out = encode_keys(state, 0)?;
    append_bodies(state, &mut out)?;
    Ok(out)
}

/// Appends each todo's JSON, a line each, to the key lines in `out`.
pub fn append_bodies(state: &GoalState, out: &mut Vec<u8>) -> Result<()> {
    for place in state.todos.places(None)? {
        if let Place::Write(body) = place {
            out.extend_from_slice(&body);
            out.push(b'\n');
        }
    }
    Ok(())
}

/// Whether `bytes` are a state in the table form (rather than the older JSON).
pub fn is_table_form(bytes: &[u8]) -> bool {
    bytes.starts_with(MARKER)
}

/// Where a state's todos are, for [`decode`].
#[derive(Debug)]
pub enum Bodies {
    /// After the key lines, a line each ([`encode_state`]).
    Inline,
    /// In `file`, at the offsets listed on the line after the key lines.
    File(Option<Arc<BodyFile>>),
}

/// Reads a state from `src[from..to]`, in the table form or the older JSON, with its todos
/// where `bodies` says. Returns the state and where its hashed part ends (see
/// [`encode_keys`]). Stored todos are decoded when first used.
pub fn decode(
    src: &Arc<Vec<u8>>,
    from: usize,
    to: usize,
    bodies: Bodies,
) -> std::result::Result<(GoalState, usize), String> {
    let bytes = &src[from..to];
    if !is_table_form(bytes) {
        return serde_json::from_slice(bytes).map(|s| (s, to)).map_err(|e| e.to_string());
    }
    let mut at = from + MARKER.len();
    let line = |at: &mut usize| -> std::result::Result<(usize, usize), String> {
        let nl = src[*at..to].iter().position(|b| *b == b'\n').ok_or("a line without its end")?;
        let span = (*at, *at + nl);
        *at += nl + 1;
        Ok(span)
    };
    let (a, b) = line(&mut at)?;
    let n: usize =
        std::str::from_utf8(&src[a..b]).ok().and_then(|n| n.parse().ok()).ok_or("a bad todo count")?;
    let (a, b) = line(&mut at)?;
    let mut state: GoalState =
        serde_json::from_slice(&src[a..b]).map_err(|e| format!("the state's head: {e}"))?;
    if !state.todos.is_empty() {
        return Err("the state's head lists todos".to_owned());
    }
    let origin = Arc::new(Origin {
        keys: Arc::clone(src),
        src: match &bodies {
            Bodies::Inline => Source::Inline(Arc::clone(src)),
            Bodies::File(Some(f)) => Source::File(Arc::clone(f)),
            Bodies::File(None) if n == 0 => Source::Inline(Arc::clone(src)),
            Bodies::File(None) => return Err("no body file".to_owned()),
        },
    });
    let (mut table, keys_end) = TodoTable::decode_keys(&origin, at, to, n)?;
    match bodies {
        Bodies::Inline => {
            // Each todo's JSON and its newline, one after the other.
            let mut end = keys_end as u64;
            let mut offsets = Vec::with_capacity(n);
            for row in &table.rows {
                if let Row::Stored(s) = row {
                    offsets.push(Some(end));
                    end += s.hash_len().1 as u64 + 1;
                    // Each todo's JSON ends its line.
                    let nl = usize::try_from(end - 1).ok().and_then(|i| src.get(i).filter(|_| i < to));
                    if nl != Some(&b'\n') {
                        return Err(format!("todo {}: its JSON does not end its line", s.key.id));
                    }
                }
            }
            table.place(&mut offsets.into_iter())?;
            if end != to as u64 {
                return Err("the todos' lengths do not add up".to_owned());
            }
        }
        Bodies::File(_) => {
            let mut end = keys_end;
            let (a, b) = if n == 0 { (end, end) } else { line(&mut end)? };
            if end != to {
                return Err("bytes after the offsets".to_owned());
            }
            if n > 0 {
                let mut offsets =
                    src[a..b].split(|c| *c == b' ').map(|o| std::str::from_utf8(o).ok()?.parse::<u64>().ok());
                table.place(&mut offsets)?;
            }
        }
    }
    state.todos = table;
    Ok((state, keys_end))
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

fn parse_key_line(line: &[u8]) -> std::result::Result<TodoKey, String> {
    let text = || String::from_utf8_lossy(line).into_owned();
    let bad = |what: &str| format!("a key line with a bad {what}: {:?}", text());
    let line = std::str::from_utf8(line).map_err(|_| bad("encoding"))?;
    // Split by hand: a goal reads one of these lines for every open todo.
    let mut rest = Some(line);
    let mut next = |what: &str| -> std::result::Result<&str, String> {
        let r = rest.ok_or_else(|| bad(what))?;
        match r.as_bytes().iter().position(|b| *b == b'\t') {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                Ok(&r[..i])
            }
            None => {
                rest = None;
                Ok(r)
            }
        }
    };
    let id: TodoId = next("id")?.parse().map_err(|_| bad("id"))?;
    let status = word(TodoStatus::ALL, next("status")?, TodoStatus::as_str).ok_or_else(|| bad("status"))?;
    let priority = word(Priority::ALL, next("priority")?, Priority::as_str).ok_or_else(|| bad("priority"))?;
    let role = word(Role::ALL, next("role")?, Role::as_str).ok_or_else(|| bad("role"))?;
    let class = word(TodoClass::ALL, next("class")?, TodoClass::as_str).ok_or_else(|| bad("class"))?;
    let agent = |s: &str| -> std::result::Result<Option<AgentId>, String> {
        if s.is_empty() { Ok(None) } else { AgentId::new(s).map(Some).map_err(|_| bad("agent")) }
    };
    let claimed_by = agent(next("claimer")?)?;
    let assignee = agent(next("assignee")?)?;
    let resume = next("resume condition")?;
    let resume_when = match resume.split_once(':') {
        None if resume.is_empty() => None,
        Some(("todo", t)) => Some(ResumeWhen::TodoDone(t.parse().map_err(|_| bad("resume condition"))?)),
        Some(("at", ms)) => Some(ResumeWhen::At(Timestamp::from_unix_millis(
            ms.parse().map_err(|_| bad("resume condition"))?,
        ))),
        Some(("gate", g)) => Some(ResumeWhen::GateAnswered(g.parse().map_err(|_| bad("resume condition"))?)),
        _ => return Err(bad("resume condition")),
    };
    let gate = next("gate")?;
    let after_gate = if gate.is_empty() { None } else { Some(gate.parse().map_err(|_| bad("gate"))?) };
    if next("hash")?.len() != HASH_LEN {
        return Err(bad("hash"));
    }
    next("length")?.parse::<u32>().map_err(|_| bad("length"))?;
    if rest.is_some() {
        return Err(bad("field count"));
    }
    Ok(TodoKey { id, status, priority, role, class, claimed_by, assignee, resume_when, after_gate })
}

fn word<T: Copy>(all: &[T], s: &str, name: fn(T) -> &'static str) -> Option<T> {
    all.iter().copied().find(|w| name(*w) == s)
}
