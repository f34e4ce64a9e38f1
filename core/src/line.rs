//! What a log line says once for the records in it. A line of the event log already says when
//! it was written, by whom, and under which turn's key (`scope:actor:turn#fingerprint`). A
//! record its event carries (a spend, a run, a piece of evidence, a decision, a claim) leaves
//! out a time, an agent or a turn that is the line's own, and a reader takes it from the line:
//! a tick's five lines are about an eighth shorter.
//!
//! Only the log's own encoding and decoding of a line sets the line ([`Scope`]); everywhere
//! else (a snapshot, a command's JSON, a receipt) there is no line and every field is written.
//! (Read there, a record without one would get a stand-in: the earliest time, `user`, no
//! author; but such text is written whole, and a snapshot is read only once it hashes to the
//! log's root.) Leaving a field out is exact: a record's field
//! is left out only when the line gives back the same value, so a state replayed from the log
//! is the state that was committed. A turn a record has none of is written `null` where the
//! line's key names one, so it does not read as the key's.

use std::cell::RefCell;

use crate::ids::AgentId;
use crate::time::Timestamp;

/// The line a record is written in or read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub at: Timestamp,
    /// An agent id, `user` or `loopx`.
    pub actor: String,
    /// The line's replay key, `scope:actor:turn#fingerprint`.
    pub key: Option<String>,
}

thread_local! {
    static LINE: RefCell<Option<Line>> = const { RefCell::new(None) };
}

/// While alive, records are written and read as part of `line`; dropped or left, what was
/// before comes back (also when encoding panics).
#[derive(Debug)]
pub struct Scope {
    before: Option<Option<Line>>,
}

impl Scope {
    pub fn enter(line: Line) -> Self {
        Scope { before: Some(LINE.with(|l| l.replace(Some(line)))) }
    }

    /// Leaves the scope and gives its line back (the decoder moves the line's own fields in and
    /// out instead of copying them).
    pub fn leave(mut self) -> Option<Line> {
        self.restore()
    }

    fn restore(&mut self) -> Option<Line> {
        let before = self.before.take()?;
        LINE.with(|l| l.replace(before))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.restore();
    }
}

fn with<R>(f: impl FnOnce(Option<&Line>) -> R) -> R {
    LINE.with(|l| f(l.borrow().as_ref()))
}

/// The turn a line's key names: `scope:actor:turn#fingerprint`.
fn key_turn(line: &Line) -> Option<&str> {
    let rest = line.key.as_deref()?.split_once(':')?.1;
    let rest = rest.strip_prefix(line.actor.as_str())?.strip_prefix(':')?;
    rest.rsplit_once('#').map(|(turn, _)| turn)
}

/// Whether a record's time is the line's (serde's `skip_serializing_if`).
pub fn is_lines_time(at: &Timestamp) -> bool {
    with(|l| l.is_some_and(|l| l.at == *at))
}

/// A record's time left out: the line's (serde's `default`).
pub fn lines_time() -> Timestamp {
    with(|l| l.map_or(Timestamp::MIN, |l| l.at))
}

/// Whether a record's agent is the line's actor.
pub fn is_lines_agent(agent: &AgentId) -> bool {
    is_lines_author(agent.as_str())
}

/// Whether a record's author is the line's actor.
pub fn is_lines_author(author: &str) -> bool {
    with(|l| l.is_some_and(|l| l.actor == author))
}

/// A record's agent left out: the line's actor. Only ever left out when it was one, so it
/// parses; outside a line nothing is left out, and `user` stands in.
pub fn lines_agent() -> AgentId {
    let actor = with(|l| l.and_then(|l| AgentId::new(&l.actor).ok()));
    actor.unwrap_or_else(AgentId::user)
}

/// A record's author left out: the line's actor.
pub fn lines_author() -> String {
    with(|l| l.map(|l| l.actor.clone())).unwrap_or_default()
}

/// Whether a record's turn reads back from the line when left out: it is the turn the line's
/// key names, or it has none and the line's key names none.
pub fn leaves_out_turn(turn: &Option<String>) -> bool {
    with(|l| l.and_then(key_turn) == turn.as_deref())
}

/// A record's turn left out: the one the line's key names.
pub fn lines_turn() -> Option<String> {
    with(|l| l.and_then(key_turn).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: Option<&str>) -> Line {
        Line { at: Timestamp::from_unix_millis(5), actor: "claude-1".into(), key: key.map(str::to_owned) }
    }

    #[test]
    fn a_keys_turn_is_what_sits_between_its_actor_and_its_fingerprint() {
        let turn = |key| key_turn(&line(Some(key))).map(str::to_owned);
        assert_eq!(turn("quota.spend:claude-1:t-9#4f4af1af").as_deref(), Some("t-9"));
        assert_eq!(turn("turn.settle:claude-1:a:b#c#0011aabb").as_deref(), Some("a:b#c"));
        assert_eq!(turn("quota.spend:codex-1:t-9#4f4af1af"), None, "another actor's key");
        assert_eq!(turn("quota.spend:claude-1x:t-9#4f4af1af"), None);
        assert_eq!(turn("no-fingerprint:claude-1:t-9"), None);
        assert_eq!(key_turn(&line(None)), None);
    }

    #[test]
    fn outside_a_line_every_field_is_written_and_reads_as_before() {
        assert!(!is_lines_time(&Timestamp::MIN));
        assert!(!is_lines_agent(&AgentId::user()));
        assert!(leaves_out_turn(&None));
        assert!(!leaves_out_turn(&Some("t".into())));
        assert_eq!(lines_turn(), None);
    }

    #[test]
    fn a_scope_gives_its_line_back_and_restores_the_one_before() {
        let outer = Scope::enter(line(Some("s:claude-1:outer#00000000")));
        {
            let inner = Scope::enter(line(Some("s:claude-1:inner#00000000")));
            assert_eq!(lines_turn().as_deref(), Some("inner"));
            assert_eq!(inner.leave().and_then(|l| l.key).as_deref(), Some("s:claude-1:inner#00000000"));
        }
        assert_eq!(lines_turn().as_deref(), Some("outer"));
        assert!(is_lines_time(&Timestamp::from_unix_millis(5)));
        assert!(!is_lines_time(&Timestamp::from_unix_millis(6)));
        assert_eq!(lines_agent(), AgentId::new("claude-1").unwrap());
        assert!(leaves_out_turn(&Some("outer".into())));
        assert!(!leaves_out_turn(&None), "no turn where the key names one is written as null");
        drop(outer);
        assert_eq!(lines_turn(), None);
    }
}
