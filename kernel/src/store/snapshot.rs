//! `snapshot.json`: its format (a header line, the state's hashed bytes, a line of offsets)
//! and its reading.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use loopx_core::GoalId;

use crate::codec;
use crate::project::Layout;
use crate::state::GoalState;
use crate::table;

use super::kept::Source;

/// The version of `snapshot.json`. Version 4 holds the live state in the table form with its
/// glance ([`crate::table::Glance`]), and names the hash of its key lines and where the glance's
/// todos are, so that a decision reads the head and the glance alone; version 3 held the table
/// form without a glance (a record per todo, decoded when used: [`crate::table`]); version 2 held it as one JSON document, and
/// version 1 held the whole state, archive included. An older snapshot is rebuilt from the log
/// on first use; going from version 1 also writes the archive and records the upgrade as an
/// event.
pub(crate) const SNAPSHOT_SCHEMA_VERSION: u32 = 4;

/// The first line of `snapshot.json`: what the state after it was derived from. The state
/// follows as the exact bytes its root hashes ([`codec::encode_keys`]), then a line of offsets:
/// where each todo's JSON is in the body file the header names.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SnapshotHeader {
    pub(super) schema_version: u32,
    pub(super) goal_id: GoalId,
    pub(super) seq: u64,
    pub(super) head: String,
    pub(super) log_len: u64,
    pub(super) log_mtime_ns: u64,
    pub(super) goal_md_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) bodies: Option<BodiesRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) glance: Option<GlanceRef>,
}

/// What a glance at the state needs besides the glance itself: the BLAKE3 hash of the key
/// lines after it (hex), with which the glance's own hash makes the state root, and where in
/// the body file each of its todos is.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct GlanceRef {
    pub(super) keys: String,
    pub(super) at: Vec<u64>,
}

/// The body file a snapshot's todos are in, with its size and time when the snapshot was
/// written: one that differs was changed since (by a crash or by hand), and the state is
/// rebuilt from the log.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct BodiesRef {
    pub(super) generation: u64,
    pub(super) len: u64,
    pub(super) mtime_ns: u64,
}

/// `bytes` in lowercase hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 32 bytes `text` spells in lowercase hex ([`hex`]), if it spells them.
pub(super) fn unhex(text: &str) -> Option<[u8; 32]> {
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
pub(super) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
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
pub(crate) fn older_snapshot(bytes: &[u8]) -> Option<u32> {
    let first = bytes.split(|c| *c == b'\n').next()?;
    let v: serde_json::Value = serde_json::from_slice(first).ok()?;
    v["schema_version"].as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n < SNAPSHOT_SCHEMA_VERSION)
}

/// Splits `snapshot.json` into its header and where its state's bytes begin and end.
pub(super) fn split_snapshot(bytes: &[u8]) -> Option<(SnapshotHeader, usize, usize)> {
    let nl = crate::newline::find(bytes)?;
    let header = serde_json::from_slice(&bytes[..nl]).ok()?;
    Some((header, nl + 1, bytes.len()))
}

/// What loading a snapshot found.
pub(super) enum Loaded {
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
    pub(crate) goal_md_digest: String,
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
