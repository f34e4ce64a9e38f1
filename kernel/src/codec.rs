//! A state's stored form: a marker line with the number of todos, the state's head (the state
//! without its todos) as one JSON line, the glance (the few todos a decision may need, see
//! [`Glance`]), then the todos' key lines ([`crate::table`]). The state root hashes that form
//! ([`encode_keys`]) in two parts, what a glance reads and the key lines, so a decision can check
//! the part it reads without reading the rest ([`state_root`]); the todos' JSON
//! follows where the store keeps it ([`Bodies`]). Older forms are still read: the table form
//! without a glance (`loopx-state 3`), and before it one JSON document.

use std::sync::Arc;

use serde::ser::{self, Serialize, SerializeStruct, Serializer};
use sha2::{Digest, Sha256};

use loopx_core::{Error, Result, TodoId};

use crate::state::GoalState;
use crate::table::{Bodies, Glance, TodoTable};

/// How the first line of a state in the table form begins: the number of todos follows, and
/// then how many bytes the head and the glance after the marker line take.
const MARKER: &[u8] = b"loopx-state 4 ";

/// The table form before the glance: the marker with the number of todos, the head, the key
/// lines. Still read, and encoded to check a root an older loopx recorded.
const MARKER_3: &[u8] = b"loopx-state 3 ";

/// The glance's first line begins so; the counts and the number of its key lines follow.
const GLANCE: &[u8] = b"glance ";

/// What a state's root hashes: the marker line (the number of todos, and the length of the
/// head and glance that follow it), the state's head as one JSON line, the glance, and a key
/// line per todo (with its JSON's hash and length).
pub fn encode_keys(state: &GoalState, hint: usize) -> Result<Vec<u8>> {
    let mut keys = Vec::with_capacity(hint);
    let starts = state.todos.encode_keys_into(&mut keys)?;
    let mut glance = encode_head(state)?;
    let (rows, counts) = state.todos.glance();
    glance.extend_from_slice(GLANCE);
    glance.extend_from_slice(
        format!("{} {} {} {}\n", counts.free, counts.held, counts.user, rows.len()).as_bytes(),
    );
    for i in rows {
        let at = starts[i] as usize;
        let end = starts.get(i + 1).map_or(keys.len(), |e| *e as usize);
        glance.extend_from_slice(&keys[at..end]);
    }
    let marker = format!("{} {}\n", state.todos.len(), glance.len());
    let mut out = Vec::with_capacity(MARKER.len() + marker.len() + glance.len() + keys.len());
    out.extend_from_slice(MARKER);
    out.extend_from_slice(marker.as_bytes());
    out.extend_from_slice(&glance);
    out.extend_from_slice(&keys);
    Ok(out)
}

/// The form an older loopx hashed (`loopx-state 3`: no glance), to check a root it recorded.
pub fn encode_keys_3(state: &GoalState) -> Result<Vec<u8>> {
    let mut out = MARKER_3.to_vec();
    out.extend_from_slice(format!("{}\n", state.todos.len()).as_bytes());
    out.extend_from_slice(&encode_head(state)?);
    state.todos.encode_keys_into(&mut out)?;
    Ok(out)
}

/// The state's head as one JSON line.
fn encode_head(state: &GoalState) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(4096);
    state
        .serialize(HeadOnly(&mut serde_json::Serializer::new(&mut out)))
        .map_err(|e| Error::internal(format!("cannot encode the state: {e}")))?;
    out.push(b'\n');
    Ok(out)
}

/// A state's canonical bytes, whole: [`encode_keys`], then each todo's JSON on a line of its
/// own. What a database keeps, and what two states are compared by.
pub fn encode_state(state: &GoalState) -> Result<Vec<u8>> {
    let mut out = encode_keys(state, 0)?;
    state.todos.append_bodies(&mut out)?;
    Ok(out)
}

/// Whether `bytes` are a state in the table form (rather than the older JSON).
pub fn is_table_form(bytes: &[u8]) -> bool {
    bytes.starts_with(MARKER) || bytes.starts_with(MARKER_3)
}

/// Where the part of a state's form in the table form that a glance reads ends (the marker
/// line, the head and the glance), when the form has a glance: the state root hashes that part
/// and the key lines after it apart ([`state_root`]).
pub fn glance_end(bytes: &[u8]) -> Option<usize> {
    glance_len(bytes).filter(|end| *end <= bytes.len())
}

/// Where a glance ends, as the marker line at the start of `bytes` says (which may be all that
/// `bytes` holds of it yet).
pub(crate) fn glance_len(bytes: &[u8]) -> Option<usize> {
    let rest = bytes.strip_prefix(MARKER)?;
    let nl = crate::newline::find(rest)?;
    let (_, len) = std::str::from_utf8(&rest[..nl]).ok()?.split_once(' ')?;
    (MARKER.len() + nl + 1).checked_add(len.parse().ok()?)
}

/// A state in the table form, framed: its number of todos, where its head's JSON is, where
/// its glance's first line is (none in the older form), and where its key lines begin
/// (offsets into the bytes framed).
struct Frame {
    n: usize,
    head: std::ops::Range<usize>,
    glance: Option<usize>,
    keys: usize,
}

fn frame(bytes: &[u8]) -> std::result::Result<Frame, String> {
    let (rest, glance) = match bytes.strip_prefix(MARKER) {
        Some(rest) => (rest, true),
        None => (bytes.strip_prefix(MARKER_3).ok_or("not the table form")?, false),
    };
    let nl = crate::newline::find(rest).ok_or("a line without its end")?;
    let line = std::str::from_utf8(&rest[..nl]).map_err(|_| "a bad todo count")?;
    let (n, end) = if glance {
        let end = glance_end(bytes).ok_or("a bad glance length")?;
        (line.split_once(' ').map_or("", |(n, _)| n), Some(end))
    } else {
        (line, None)
    };
    let n = n.parse().map_err(|_| "a bad todo count")?;
    let head = MARKER.len() + nl + 1;
    let len = crate::newline::find(&bytes[head..]).ok_or("a line without its end")?;
    let after = head + len + 1;
    Ok(match end {
        Some(end) if end >= after => Frame { n, head: head..head + len, glance: Some(after), keys: end },
        Some(_) => return Err("a bad glance length".to_owned()),
        None => Frame { n, head: head..head + len, glance: None, keys: after },
    })
}

/// Where the key lines of a state in the table form begin, and how many todos it has: what
/// [`decode`] reads before them, without decoding the head.
pub fn key_lines(bytes: &[u8]) -> Option<(usize, usize)> {
    frame(bytes).ok().map(|f| (f.keys, f.n))
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
    let f = frame(bytes)?;
    let mut state = decode_head(&bytes[f.head])?;
    let (todos, keys_end) = TodoTable::decode(src, from + f.keys, to, f.n, bodies)?;
    state.todos = todos;
    Ok((state, keys_end))
}

fn decode_head(bytes: &[u8]) -> std::result::Result<GoalState, String> {
    let state: GoalState = serde_json::from_slice(bytes).map_err(|e| format!("the state's head: {e}"))?;
    if !state.todos.is_empty() {
        return Err("the state's head lists todos".to_owned());
    }
    Ok(state)
}

/// Reads a state's head and its glance from `src[from..]` (as far as the glance ends: what a
/// decision reads of a snapshot): a state whose todos are the glance's only, their JSON in
/// `file` at `offsets` (one for each of the glance's key lines), and the glance's counts.
/// `None` for a form without a glance. Only a decision the glance vouches for may be taken from
/// such a state ([`crate::decide::decide_at_a_glance`]).
pub fn decode_glance(
    src: &Arc<Vec<u8>>,
    from: usize,
    file: Option<Arc<crate::table::BodyFile>>,
    offsets: Vec<u64>,
) -> std::result::Result<Option<(GoalState, Glance)>, String> {
    let bytes = &src[from..];
    if !bytes.starts_with(MARKER) {
        return Ok(None);
    }
    let f = frame(bytes)?;
    let at = f.glance.ok_or("no glance")?;
    let nl = crate::newline::find(&bytes[at..]).ok_or("a line without its end")?;
    let line = bytes[at..at + nl].strip_prefix(GLANCE).ok_or("a bad glance")?;
    let numbers: Vec<usize> = std::str::from_utf8(line)
        .map_err(|_| "a bad glance")?
        .split(' ')
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| "a bad glance")?;
    let &[free, held, user, rows] = numbers.as_slice() else { return Err("a bad glance".to_owned()) };
    if offsets.len() != rows {
        return Err("the glance's offsets do not match its todos".to_owned());
    }
    let mut state = decode_head(&bytes[f.head])?;
    let keys_at = from + at + nl + 1;
    let (todos, end) = TodoTable::decode_at(src, keys_at, from + f.keys, rows, file, offsets)?;
    if end != from + f.keys {
        return Err("the glance's key lines do not end it".to_owned());
    }
    state.todos = todos;
    Ok(Some((state, Glance { free, held, user })))
}

/// The todos a state's glance holds, by id: where the store finds their JSON for the header.
pub fn glance_ids(bytes: &[u8]) -> Vec<TodoId> {
    let Ok(f) = frame(bytes) else { return Vec::new() };
    let Some(at) = f.glance else { return Vec::new() };
    let block = &bytes[at..f.keys];
    block
        .split(|b| *b == b'\n')
        .skip(1)
        .filter_map(|line| line.split(|b| *b == b'\t').next())
        .filter_map(|id| std::str::from_utf8(id).ok()?.parse().ok())
        .collect()
}

/// The state's field its head leaves empty.
const TODOS: &str = "todos";

/// Encodes a state as its head: every field as it is, but its todos as an empty list (they
/// follow as key lines). Only the top-level struct is touched; everything else is passed on.
struct HeadOnly<S>(S);

/// An empty list, in the todos' place.
struct NoTodos;

impl Serialize for NoTodos {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(std::iter::empty::<()>())
    }
}

struct HeadFields<T>(T);

impl<T: SerializeStruct> SerializeStruct for HeadFields<T> {
    type Ok = T::Ok;
    type Error = T::Error;

    fn serialize_field<V: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> std::result::Result<(), T::Error> {
        if key == TODOS { self.0.serialize_field(key, &NoTodos) } else { self.0.serialize_field(key, value) }
    }

    fn skip_field(&mut self, key: &'static str) -> std::result::Result<(), T::Error> {
        self.0.skip_field(key)
    }

    fn end(self) -> std::result::Result<T::Ok, T::Error> {
        self.0.end()
    }
}

/// A state is a struct: any other shape reaching the head encoder is a bug.
fn not_a_state<E: ser::Error>() -> E {
    E::custom("the state's head is encoded from a state only")
}

macro_rules! not_a_state {
    ($($name:ident($($arg:ty),*) -> $out:ty;)*) => {
        $(fn $name(self, $(_: $arg),*) -> std::result::Result<$out, S::Error> { Err(not_a_state()) })*
    };
}

impl<S: Serializer> Serializer for HeadOnly<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = ser::Impossible<S::Ok, S::Error>;
    type SerializeTuple = ser::Impossible<S::Ok, S::Error>;
    type SerializeTupleStruct = ser::Impossible<S::Ok, S::Error>;
    type SerializeTupleVariant = ser::Impossible<S::Ok, S::Error>;
    type SerializeMap = ser::Impossible<S::Ok, S::Error>;
    type SerializeStruct = HeadFields<S::SerializeStruct>;
    type SerializeStructVariant = ser::Impossible<S::Ok, S::Error>;

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> std::result::Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(HeadFields)
    }

    not_a_state! {
        serialize_bool(bool) -> S::Ok;
        serialize_i8(i8) -> S::Ok;
        serialize_i16(i16) -> S::Ok;
        serialize_i32(i32) -> S::Ok;
        serialize_i64(i64) -> S::Ok;
        serialize_u8(u8) -> S::Ok;
        serialize_u16(u16) -> S::Ok;
        serialize_u32(u32) -> S::Ok;
        serialize_u64(u64) -> S::Ok;
        serialize_f32(f32) -> S::Ok;
        serialize_f64(f64) -> S::Ok;
        serialize_char(char) -> S::Ok;
        serialize_str(&str) -> S::Ok;
        serialize_bytes(&[u8]) -> S::Ok;
        serialize_none() -> S::Ok;
        serialize_unit() -> S::Ok;
        serialize_unit_struct(&'static str) -> S::Ok;
        serialize_unit_variant(&'static str, u32, &'static str) -> S::Ok;
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> std::result::Result<S::Ok, S::Error> {
        Err(not_a_state())
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> std::result::Result<S::Ok, S::Error> {
        Err(not_a_state())
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> std::result::Result<S::Ok, S::Error> {
        Err(not_a_state())
    }
}

// ---- state roots -----------------------------------------------------------------------------

/// The state root of a state's canonical bytes (what the snapshot holds, byte for byte), 17
/// characters, since every line carries one. BLAKE3 because a command hashes the live state it
/// reads. A form with a glance ([`glance_end`]) is hashed in two parts, the
/// glance's part and the key lines after it, and its root is `c` and the first 96 bits of
/// BLAKE3 over the two parts' hashes ([`glance_root`]): a decision that reads the glance alone
/// checks it with the key lines' hash the snapshot records. Any other form's root is `b` and
/// the first 96 bits of BLAKE3 over it. Both in unpadded base64url.
pub fn state_root(state: &[u8]) -> String {
    state_root_parts(state).0
}

/// [`state_root`], and for a form with a glance the hash of its key lines, which a snapshot
/// records for a glance to be checked with.
pub fn state_root_parts(state: &[u8]) -> (String, Option<[u8; 32]>) {
    if let Some(end) = glance_end(state) {
        let (glance, keys) = state.split_at(end);
        let keys = *blake3::hash(keys).as_bytes();
        return (glance_root(blake3::hash(glance).as_bytes(), &keys), Some(keys));
    }
    let mut out = String::with_capacity(17);
    out.push('b');
    crate::base64::base64_96(blake3::hash(state).as_bytes(), &mut out);
    (out, None)
}

/// The root of a form with a glance, from the hashes of its two parts (see [`state_root`]).
pub fn glance_root(glance: &[u8; 32], keys: &[u8; 32]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(glance);
    hasher.update(keys);
    let mut out = String::with_capacity(17);
    out.push('c');
    crate::base64::base64_96(hasher.finalize().as_bytes(), &mut out);
    out
}

/// The root lines written before the table form carry: the first 96 bits of SHA-256 of the
/// state's JSON, 16 characters.
pub(crate) fn legacy_state_root(state_json: &[u8]) -> String {
    let mut out = String::with_capacity(16);
    crate::base64::base64_96(&Sha256::digest(state_json), &mut out);
    out
}

/// Whether a line's root is of the older kind ([`legacy_state_root`]).
pub(crate) fn is_legacy_root(root: &str) -> bool {
    root.len() == 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_roots_are_short_and_differ() {
        let a = state_root(b"{}");
        assert_eq!(a.len(), 17);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{a}");
        assert_ne!(a, state_root(b"{ }"));
        assert!(!is_legacy_root(&a));
        let old = legacy_state_root(b"{}");
        assert!(is_legacy_root(&old), "{old}");
    }

    /// Every log ever written carries these roots, so their encoding is fixed: the values
    /// below were computed apart from loopx (Python's `hashlib`, `blake3` and `base64`).
    #[test]
    fn roots_are_encoded_as_logs_carry_them() {
        assert_eq!(state_root(b"{}"), "bbkbdEN78m1bCmm7F");
        assert_eq!(state_root(b"loopx"), "bbxcGG6LkITd2_Mbf");
        assert_eq!(legacy_state_root(b"{}"), "RBNvo1WzZ4oRRq0W");
        assert_eq!(legacy_state_root(b"loopx"), "fQLfEDVuAYOCynzR");
    }
}
