//! The event log: one JSON object per line, each naming the hash of the line before it.
//!
//! ```text
//! {"seq":1,"at":"…","actor":"user","kind":"goal_created","data":{…},"prev":"000…"}
//! ```
//!
//! A line is committed once its write (with its newline) has returned and been synced. A final
//! line without its newline was never committed: it is "torn" and is cut off on the next open.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use loopx_core::Timestamp;
use loopx_core::event::Event;
use loopx_core::line::{Line, Scope};

/// The `prev` of the first line.
pub const GENESIS: &str = "00000000000000000000000000000000";

/// One line of `events.jsonl`. The records its event carries leave out what the line says
/// already: their time, agent or turn when it is the line's ([`loopx_core::line`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(remote = "Self")]
pub struct EventLine {
    pub seq: u64,
    pub at: Timestamp,
    /// An agent id, `user` or `loopx`.
    pub actor: String,
    #[serde(flatten)]
    pub event: Event,
    /// The idempotency key, scoped by command and actor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The receipt returned to the caller, kept when the command carried a key so a replay
    /// returns it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<serde_json::Value>,
    /// The state root: the hash of the goal's state after this line ([`state_root`]). A
    /// snapshot is trusted only when its state hashes to the last line's root. Absent on lines
    /// written by an older loopx, and on all but the last line of a bulk append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Hash of the previous line.
    pub prev: String,
    /// In strict mode, a person's decision signed by the person's key (hex; see
    /// [`crate::person::message`] for what is signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// A line as read: the event's `kind` and `data` kept as they are written, for
/// [`EventLine`]'s decoding.
#[derive(Deserialize)]
struct WireLine<'a> {
    seq: u64,
    at: Timestamp,
    actor: String,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    data: &'a serde_json::value::RawValue,
    #[serde(default)]
    turn: Option<String>,
    #[serde(default)]
    receipt: Option<serde_json::Value>,
    #[serde(default)]
    root: Option<String>,
    prev: String,
    #[serde(default)]
    signature: Option<String>,
}

/// The event's two fields handed to [`Event`]'s own decoding, as the map it is written as:
/// one pass over the line, where a flattened field would buffer the whole line first.
struct Adjacent<'a> {
    kind: Option<&'a str>,
    data: Option<&'a serde_json::value::RawValue>,
}

impl<'de> serde::de::MapAccess<'de> for Adjacent<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        use serde::de::IntoDeserializer;
        let key = match (self.kind, self.data) {
            (Some(_), _) => "kind",
            (None, Some(_)) => "data",
            (None, None) => return Ok(None),
        };
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        use serde::de::IntoDeserializer;
        if let Some(kind) = self.kind.take() {
            return seed.deserialize(kind.into_deserializer());
        }
        match self.data.take() {
            Some(data) => seed.deserialize(data),
            None => Err(serde::de::Error::custom("an event's data was read twice")),
        }
    }
}

impl Serialize for EventLine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let _line = Scope::enter(Line { at: self.at, actor: self.actor.clone(), key: self.turn.clone() });
        EventLine::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for EventLine {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let w = WireLine::deserialize(d)?;
        let adjacent = Adjacent { kind: Some(&w.kind), data: Some(w.data) };
        // The line's own fields are moved into its scope and back, not copied.
        let scope = Scope::enter(Line { at: w.at, actor: w.actor, key: w.turn });
        let event = Event::deserialize(serde::de::value::MapAccessDeserializer::new(adjacent));
        let line = scope.leave().ok_or_else(|| D::Error::custom("a line's scope was left twice"))?;
        let event = event.map_err(D::Error::custom)?;
        Ok(EventLine {
            seq: w.seq,
            at: line.at,
            actor: line.actor,
            event,
            turn: line.key,
            receipt: w.receipt,
            root: w.root,
            prev: w.prev,
            signature: w.signature,
        })
    }
}

impl EventLine {
    /// The line as `loopx history` lists it.
    pub fn history_entry(&self) -> loopx_core::kernel::HistoryEntry {
        loopx_core::kernel::HistoryEntry {
            seq: self.seq,
            at: self.at,
            actor: self.actor.clone(),
            kind: self.event.kind().to_owned(),
            summary: self.event.summary(),
            turn: self.turn.clone(),
        }
    }
}

/// The state root the last committed line of a log of `len` bytes records, read from its end.
/// `None` for an empty log, a last line without one, or one that does not parse (the full scan
/// will say why).
pub(crate) fn last_root(path: &std::path::Path, len: u64) -> std::io::Result<Option<String>> {
    /// Only the root is read: the rest of the line (its event, a receipt) is skipped.
    #[derive(Deserialize)]
    struct Root {
        #[serde(default)]
        root: Option<String>,
    }
    let root = |line: &[u8]| serde_json::from_slice::<Root>(line).ok().and_then(|l| l.root);
    use std::io::{Read, Seek, SeekFrom};
    if len == 0 {
        return Ok(None);
    }
    let mut f = std::fs::File::open(path)?;
    let mut tail: Vec<u8> = Vec::new();
    let mut pos = len;
    let mut chunk = 8192u64;
    loop {
        let start = pos.saturating_sub(chunk);
        let mut buf = vec![0u8; usize::try_from(pos - start).unwrap_or(0)];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut buf)?;
        buf.extend_from_slice(&tail);
        tail = buf;
        pos = start;
        // The line's own newline ends the tail; the one before it (or the file's start) begins it.
        let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
        if let Some(nl) = crate::newline::rfind(body) {
            return Ok(root(&body[nl + 1..]));
        }
        if pos == 0 {
            return Ok(root(body));
        }
        chunk = chunk.saturating_mul(2);
    }
}

/// The chain hash of one line (without its newline): the first 128 bits of SHA-256, in hex.
pub fn line_hash(line: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(line);
    let mut out = String::with_capacity(32);
    for b in &digest[..16] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// Why a log does not check out, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainBreak {
    /// 1-based line number.
    pub line: u64,
    pub offset: u64,
    pub reason: String,
}

/// What a full scan of the log found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Committed lines, in order.
    pub lines: Vec<EventLine>,
    /// Hash of each committed line (`hashes[i]` is the hash of `lines[i]`).
    pub hashes: Vec<String>,
    /// Bytes of committed lines.
    pub valid_len: u64,
    /// Bytes after the last newline: an uncommitted (torn) final line.
    pub torn_bytes: u64,
}

impl Scan {
    pub fn head(&self) -> &str {
        self.hashes.last().map_or(GENESIS, String::as_str)
    }
}

/// Checks a log one line at a time, as it is read: each line must parse, carry the next
/// sequence number and chain to the line before. [`scan`] uses it on a whole log; a report
/// streams a long log through it without holding the log.
#[derive(Debug)]
pub struct Follow {
    head: String,
    lines: u64,
    offset: u64,
}

impl Default for Follow {
    fn default() -> Self {
        Self { head: GENESIS.to_owned(), lines: 0, offset: 0 }
    }
}

impl Follow {
    /// The next committed line (without its newline), checked; its hash is the new head.
    pub fn line(&mut self, raw: &[u8]) -> Result<EventLine, ChainBreak> {
        self.hashed_line(raw, line_hash(raw))
    }

    /// [`Follow::line`] for a line whose hash ([`line_hash`]) is already known.
    pub(crate) fn hashed_line(&mut self, raw: &[u8], hash: String) -> Result<EventLine, ChainBreak> {
        let parsed = serde_json::from_slice(raw);
        self.check(raw.len(), parsed, hash)
    }

    /// [`Follow::hashed_line`] for a line already known to be UTF-8 (it decodes faster).
    pub(crate) fn hashed_text(&mut self, raw: &str, hash: String) -> Result<EventLine, ChainBreak> {
        let parsed = serde_json::from_str(raw);
        self.check(raw.len(), parsed, hash)
    }

    fn check(
        &mut self,
        len: usize,
        parsed: serde_json::Result<EventLine>,
        hash: String,
    ) -> Result<EventLine, ChainBreak> {
        let number = self.lines + 1;
        let fail = |reason: String| ChainBreak { line: number, offset: self.offset, reason };
        let line = match parsed {
            Ok(l) => l,
            Err(e) => return Err(fail(format!("not a valid event: {e}"))),
        };
        if line.seq != number {
            return Err(fail(format!("sequence number {} where {number} was expected", line.seq)));
        }
        if line.prev != self.head {
            return Err(fail("does not chain to the line before it (the log was edited)".to_owned()));
        }
        self.head = hash;
        self.lines = number;
        self.offset += len as u64 + 1;
        Ok(line)
    }

    /// The hash of the last line checked.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// Lines checked so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

/// Parses and verifies a whole log. Stops at the first line that is unparseable, out of
/// sequence or does not chain to the line before; never guesses past it.
pub fn scan(bytes: &[u8]) -> Result<Scan, (Scan, ChainBreak)> {
    let mut scan = Scan::default();
    let mut follow = Follow::default();
    let mut offset = 0usize;
    while offset < bytes.len() {
        let Some(nl) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            scan.torn_bytes = (bytes.len() - offset) as u64;
            break;
        };
        match follow.line(&bytes[offset..offset + nl]) {
            Ok(line) => scan.lines.push(line),
            Err(b) => return Err((scan, b)),
        }
        scan.hashes.push(follow.head().to_owned());
        offset += nl + 1;
        scan.valid_len = offset as u64;
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, prev: &str) -> String {
        let l = EventLine {
            seq,
            at: Timestamp::from_unix_millis(0),
            actor: "user".into(),
            event: Event::GoalResumed {},
            turn: None,
            receipt: None,
            root: None,
            prev: prev.into(),
            signature: None,
        };
        serde_json::to_string(&l).unwrap()
    }

    fn chain(n: u64) -> String {
        let mut out = String::new();
        let mut prev = GENESIS.to_owned();
        for seq in 1..=n {
            let l = line(seq, &prev);
            prev = line_hash(l.as_bytes());
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// Every log ever written carries these hashes, so their encoding is fixed: the values
    /// below were computed apart from loopx (Python's `hashlib`).
    #[test]
    fn line_hashes_are_encoded_as_logs_carry_them() {
        assert_eq!(line_hash(b"{}"), "44136fa355b3678a1146ad16f7e8649e");
        assert_eq!(line_hash(b"loopx"), "7d02df10356e018382ca7cd167ad1f94");
    }

    /// A log followed line by line names its head (the last line's hash, or the genesis before
    /// any) and how many lines it checked; a break names the line and the byte it begins at.
    #[test]
    fn a_follow_names_its_head_its_count_and_where_a_break_begins() {
        assert_eq!(scan(b"").unwrap().head(), GENESIS);
        let log = chain(3);
        let lines: Vec<&str> = log.lines().collect();
        let mut follow = Follow::default();
        assert_eq!((follow.head(), follow.lines()), (GENESIS, 0));
        for l in &lines[..2] {
            follow.line(l.as_bytes()).unwrap();
        }
        assert_eq!((follow.head(), follow.lines()), (line_hash(lines[1].as_bytes()).as_str(), 2));
        assert_eq!(scan(log.as_bytes()).unwrap().head(), line_hash(lines[2].as_bytes()));

        let broken = log.replacen("\"seq\":3", "\"seq\":4", 1);
        let (partial, b) = scan(broken.as_bytes()).unwrap_err();
        assert_eq!((b.line, b.offset), (3, (lines[0].len() + 1 + lines[1].len() + 1) as u64));
        assert_eq!(partial.head(), line_hash(lines[1].as_bytes()));
    }

    #[test]
    fn a_valid_chain_scans() {
        let log = chain(3);
        let s = scan(log.as_bytes()).unwrap();
        assert_eq!(s.lines.len(), 3);
        assert_eq!(s.valid_len, log.len() as u64);
        assert_eq!(s.torn_bytes, 0);
    }

    #[test]
    fn a_torn_tail_is_reported_not_parsed() {
        let mut log = chain(2);
        log.push_str("{\"seq\":3,\"at\"");
        let s = scan(log.as_bytes()).unwrap();
        assert_eq!(s.lines.len(), 2);
        assert_eq!(s.torn_bytes, 13);
    }

    #[test]
    fn an_edit_breaks_the_chain_at_the_next_line() {
        let log = chain(3).replacen("goal_resumed", "goal_resumeX", 1);
        let (_, err) = scan(log.as_bytes()).unwrap_err();
        assert_eq!(err.line, 1);
        let log = chain(3);
        let second = log.find("\"seq\":2").unwrap();
        let mut bytes = log.into_bytes();
        bytes[second + 30] ^= 1;
        let (partial, err) = scan(&bytes).unwrap_err();
        assert!(err.line == 2 || err.line == 3, "{err:?}");
        assert!(partial.lines.len() < 3);
    }

    /// A tick's lines as an older loopx wrote them, every record whole; the times, agents and
    /// turns are the lines' own.
    const WHOLE: [&str; 5] = [
        r#"{"seq":6,"at":"2026-12-06T14:33:27.281Z","actor":"a","kind":"decision_recorded","data":{"record":{"agent":"a","turn":"t-9","state":"eligible","continuation":{"action":"run","todo":"t1","claim_required":true}}},"root":"c1QbN0OYB6tiM5if5","prev":"2800cabff1960bd4b7687d2cdb4a0c98"}"#,
        r#"{"seq":7,"at":"2026-12-06T14:33:27.386Z","actor":"a","kind":"todo_claimed","data":{"todo":"t1","agent":"a"},"turn":"todo.claim:a:t-9#6e140517","root":"cBsVH4_1sl_bw8NBU","prev":"06fec6e086aace41120814692f6bb6f9"}"#,
        r#"{"seq":8,"at":"2026-12-06T14:33:27.391Z","actor":"a","kind":"todo_completed","data":{"todo":"t1","continuation":"active_goal","evidence":[{"id":"e1","todo":"t1","kind":"note","summary":"bench","author":"a","at":"2026-12-06T14:33:27.391Z"}]},"turn":"todo.complete:a:t-9#6a59c6cf","root":"cvNuI0-yBPPk4Yo_U","prev":"4a84fb996f4a64190f8bf4116b586e98"}"#,
        r#"{"seq":9,"at":"2026-12-06T14:33:27.394Z","actor":"a","kind":"run_recorded","data":{"run":{"id":"r1","agent":"a","todo":"t1","turn":"t-9","classification":"bench","delivery_outcome":"outcome_progress","at":"2026-12-06T14:33:27.394Z"}},"turn":"refresh-state:a:t-9#f98f75c8","root":"cSVmPoXoJ9T6dxqeu","prev":"9c80741031803b7bd85219ea87021e7b"}"#,
        r#"{"seq":10,"at":"2026-12-06T14:33:27.399Z","actor":"a","kind":"slot_spent","data":{"spend":{"id":"s1","agent":"a","todo":"t1","run":"r1","turn":"t-9","slots":1,"at":"2026-12-06T14:33:27.399Z"}},"turn":"quota.spend:a:t-9#4f4af1af","root":"cPITf8JHW6qcmvIwq","prev":"3d40e5141dd6abae28918d4b5cdb5cd9"}"#,
    ];

    #[test]
    fn records_leave_out_what_their_line_says_and_read_it_back() {
        let mut whole = 0;
        let mut short = 0;
        for text in WHOLE {
            let read: EventLine = serde_json::from_str(text).unwrap();
            let written = serde_json::to_string(&read).unwrap();
            let data = written.split_once(r#""data":"#).unwrap().1.split_once(r#","root""#).unwrap().0;
            for said in [r#""at""#, r#""agent""#, r#""author""#, r#""turn":"t-9""#] {
                // A decision's line has no key to give its turn back.
                let keyed = read.turn.is_some() || !said.starts_with(r#""turn""#);
                assert_eq!(data.contains(said), !keyed, "{said} in {written}");
            }
            assert_eq!(serde_json::from_str::<EventLine>(&written).unwrap(), read, "{written}");
            (whole, short) = (whole + text.len() + 1, short + written.len() + 1);
        }
        // A tenth shorter with a turn id of three characters; more with longer ids and names.
        assert!(short * 10 <= whole * 9, "{short} of {whole} bytes");
    }

    #[test]
    fn a_record_keeps_what_its_line_does_not_say() {
        // loopx spends for agent `a`, at another time than the line's, for no turn while the
        // line's key names one (no command makes such a record: a record's turn is its
        // command's key).
        let text = r#"{"seq":10,"at":"2026-12-06T14:33:27.500Z","actor":"loopx","kind":"slot_spent","data":{"spend":{"id":"s1","agent":"a","todo":"t1","run":"r1","turn":null,"slots":1,"at":"2026-12-06T14:33:27.399Z"}},"turn":"drive.end:loopx:t-9#4f4af1af","prev":"3d40e5141dd6abae28918d4b5cdb5cd9"}"#;
        let read: EventLine = serde_json::from_str(text).unwrap();
        let Event::SlotSpent { spend } = &read.event else { panic!("{read:?}") };
        assert_eq!(spend.turn, None);
        let written = serde_json::to_string(&read).unwrap();
        for kept in [r#""agent":"a""#, r#""at":"2026-12-06T14:33:27.399Z""#, r#""turn":null"#] {
            assert!(written.contains(kept), "{kept} missing from {written}");
        }
        assert_eq!(serde_json::from_str::<EventLine>(&written).unwrap(), read);
        // Outside a line (a command's JSON, a snapshot), a record is written whole.
        let alone = serde_json::to_string(spend).unwrap();
        assert!(alone.contains(r#""agent":"a""#) && alone.contains(r#""at":"#), "{alone}");
        let Event::SlotSpent { spend } = serde_json::from_str::<EventLine>(WHOLE[4]).unwrap().event else {
            panic!()
        };
        let alone = serde_json::to_string(&spend).unwrap();
        assert!(alone.contains(r#""turn":"t-9""#) && alone.contains(r#""agent":"a""#), "{alone}");
    }

    #[test]
    fn the_wire_shape_is_stable() {
        let l = line(1, GENESIS);
        assert_eq!(
            l,
            r#"{"seq":1,"at":"1970-01-01T00:00:00.000Z","actor":"user","kind":"goal_resumed","data":{},"prev":"00000000000000000000000000000000"}"#
        );
    }
}
