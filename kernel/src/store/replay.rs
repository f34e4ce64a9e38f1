//! Replaying and verifying a log: the state it folds into, checked against the root its last
//! line records; a new goal's first line.

use std::path::Path;

use loopx_core::event::Event;
use loopx_core::{Error, GoalId, Result};

use crate::codec;
use crate::log::{self, EventLine, GENESIS, Scan};
use crate::state::{ArchiveHead, ArchivedTodo, GoalState};

use super::archive::archive_text;

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
pub(crate) fn legacy_json(state: &GoalState) -> Result<Vec<u8>> {
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
