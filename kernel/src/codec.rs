//! A state's stored form: a marker line with the number of todos, the state's head (the state
//! without its todos) as one JSON line, then the todos' key lines ([`crate::table`]). The
//! state root hashes that form ([`encode_keys`]); the todos' JSON follows where the store
//! keeps it ([`Bodies`]). A state without the marker is the older form: one JSON document.

use std::sync::Arc;

use serde::ser::{self, Serialize, SerializeStruct, Serializer};

use loopx_core::{Error, Result};

use crate::state::GoalState;
use crate::table::{Bodies, TodoTable};

/// How the first line of a state in the table form begins (the number of todos follows); a
/// state without it is the older JSON form.
const MARKER: &[u8] = b"loopx-state 3 ";

/// What a state's root hashes: the marker line with the number of todos, the state's head as
/// one JSON line, and a key line per todo (with its JSON's hash and length).
pub fn encode_keys(state: &GoalState, hint: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(hint + hint / 16);
    out.extend_from_slice(MARKER);
    out.extend_from_slice(format!("{}\n", state.todos.len()).as_bytes());
    state
        .serialize(HeadOnly(&mut serde_json::Serializer::new(&mut out)))
        .map_err(|e| Error::internal(format!("cannot encode the state: {e}")))?;
    out.push(b'\n');
    state.todos.encode_keys_into(&mut out)?;
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
    bytes.starts_with(MARKER)
}

/// A state in the table form's first two lines: the number of todos, where the head's JSON
/// is, and where the key lines begin (offsets into `bytes`).
fn frame(bytes: &[u8]) -> std::result::Result<(usize, std::ops::Range<usize>, usize), String> {
    let rest = bytes.strip_prefix(MARKER).ok_or("not the table form")?;
    let nl = crate::newline::find(rest).ok_or("a line without its end")?;
    let n = std::str::from_utf8(&rest[..nl]).ok().and_then(|n| n.parse().ok()).ok_or("a bad todo count")?;
    let head = MARKER.len() + nl + 1;
    let len = crate::newline::find(&bytes[head..]).ok_or("a line without its end")?;
    Ok((n, head..head + len, head + len + 1))
}

/// Where the key lines of a state in the table form begin, and how many todos it has: what
/// [`decode`] reads before them, without decoding the head.
pub fn key_lines(bytes: &[u8]) -> Option<(usize, usize)> {
    frame(bytes).ok().map(|(n, _, at)| (at, n))
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
    let (n, head, at) = frame(bytes)?;
    let mut state: GoalState =
        serde_json::from_slice(&bytes[head]).map_err(|e| format!("the state's head: {e}"))?;
    if !state.todos.is_empty() {
        return Err("the state's head lists todos".to_owned());
    }
    let at = from + at;
    let (todos, keys_end) = TodoTable::decode(src, at, to, n, bodies)?;
    state.todos = todos;
    Ok((state, keys_end))
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
