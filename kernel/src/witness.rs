//! This machine's witness of each goal's head: the last event it saw committed (its sequence
//! number and hash), and the person key it saw the goal hold, kept outside the project (in the
//! person's own loopx directory), in small files per project and goal (the head's and the
//! key's: a person who accepts a cut-back log removes the first and keeps the second).
//!
//! The log's hash chain shows an edit in the middle, but not a cut at the end: without the
//! witness, removing the last lines of `events.jsonl` (and rebuilding the snapshot) would
//! re-open a gate the person rejected, or take a goal out of strict mode. With it, every
//! command refuses a log that is behind what this machine has seen, and a goal this machine has
//! seen hold a person key takes a person's decision only signed by it.
//!
//! The witness is written after each commit is durable, under the goal's lock; losing an update
//! (a crash before it) leaves it behind, never ahead. An unreadable witness counts as none.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use loopx_core::{Error, GoalId, Result};

/// What this machine saw of one goal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The last committed event's sequence number and line hash.
    pub seq: u64,
    pub head: String,
}

/// The witness file of one goal of one project.
#[derive(Clone, Debug)]
pub struct Witness {
    file: PathBuf,
}

impl Witness {
    /// The witness of goal `id` of the project at `root`, kept in `dir`.
    pub fn of(dir: &Path, root: &Path, id: &GoalId) -> Self {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let mut key = root.as_os_str().as_encoded_bytes().to_vec();
        key.push(0);
        key.extend_from_slice(id.as_str().as_bytes());
        let name = blake3::hash(&key).to_hex();
        Witness { file: dir.join(format!("{}-{}.json", id.as_str(), &name[..24])) }
    }

    pub fn path(&self) -> &Path {
        &self.file
    }

    /// What this machine saw, if it saw anything (an unreadable file counts as nothing).
    pub fn seen(&self) -> Option<Seen> {
        let bytes = std::fs::read(&self.file).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The person key this machine saw the goal hold, if it saw one: kept once seen, even if a
    /// later log no longer holds it.
    pub(crate) fn seen_key(&self) -> Option<String> {
        let key = std::fs::read_to_string(self.key_file()).ok()?;
        Some(key.trim().to_owned()).filter(|k| !k.is_empty())
    }

    fn key_file(&self) -> PathBuf {
        self.file.with_extension("key")
    }

    /// Refuses a log that ends at `seq` with `head` when this machine saw goal `id` further on
    /// (or a different event at the same place).
    pub fn check(&self, id: &GoalId, seq: u64, head: &str) -> Result<()> {
        let Some(seen) = self.seen() else { return Ok(()) };
        let hint = || {
            format!(
                "restore the missing events (from a backup or version control) and run the command again; if a person cut the log back on purpose, they remove this machine's record of it: rm {}",
                self.file.display()
            )
        };
        if seen.seq > seq {
            let missing = seen.seq - seq;
            return Err(Error::integrity(format!(
                "goal {id}'s event log ends at event {seq}, but this machine saw it reach event {}: {missing} committed event{} missing from the end of events.jsonl (cut back?)",
                seen.seq,
                if missing == 1 { " is" } else { "s are" }
            ))
            .with_hint(hint()));
        }
        if seen.seq == seq && seen.head != head {
            return Err(Error::integrity(format!(
                "goal {id}'s event {seq} is not the one this machine saw committed: the end of events.jsonl was rewritten"
            ))
            .with_hint(hint()));
        }
        Ok(())
    }

    /// Whether a lock-free read that found the log at `seq` with `head` should look again
    /// under the lock (it may have raced a commit, or the log may be behind).
    pub fn disagrees(&self, seq: u64, head: &str) -> bool {
        self.seen().is_some_and(|s| s.seq > seq || (s.seq == seq && s.head != head))
    }

    /// Records that the goal's log now ends at `seq` with `head`, holding `person_key`; a key
    /// seen before is kept when the log holds none (a goal created again under the same id
    /// starts its head over, and keeps the key).
    pub fn record(&self, seq: u64, head: &str, person_key: Option<&str>) -> std::io::Result<()> {
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if let Some(key) = person_key
            && self.seen_key().as_deref() != Some(key)
        {
            write_whole(&self.key_file(), key.as_bytes())?;
        }
        let bytes =
            serde_json::to_vec(&Seen { seq, head: head.to_owned() }).map_err(std::io::Error::other)?;
        write_whole(&self.file, &bytes)
    }
}

/// Writes `file` whole and renames it into place: a reader sees the old bytes or the new.
fn write_whole(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_behind_or_rewritten_is_refused_and_a_key_seen_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let id = GoalId::new("main").unwrap();
        let w = Witness::of(dir.path(), dir.path(), &id);
        assert!(w.check(&id, 1, "a").is_ok(), "nothing seen: anything goes");
        w.record(5, "e", Some("key")).unwrap();
        let e = w.check(&id, 3, "c").unwrap_err();
        assert_eq!(e.kind, loopx_core::ErrorKind::Integrity);
        assert!(e.message.contains("2 committed events are missing"), "{}", e.message);
        assert!(w.check(&id, 5, "x").is_err(), "the same place, another event");
        assert!(w.check(&id, 5, "e").is_ok());
        assert!(w.check(&id, 7, "g").is_ok(), "ahead (another machine's commits) is fine");
        assert!(w.disagrees(4, "d") && !w.disagrees(6, "f"));
        w.record(6, "f", None).unwrap();
        assert_eq!(w.seen_key().as_deref(), Some("key"));
        std::fs::remove_file(w.path()).unwrap();
        assert_eq!((w.seen(), w.seen_key().as_deref()), (None, Some("key")), "accepting a cut keeps the key");
        std::fs::write(w.path(), b"{torn").unwrap();
        assert_eq!(w.seen(), None);
        let other = Witness::of(dir.path(), &dir.path().join("elsewhere"), &id);
        assert_ne!(other.path(), w.path(), "one record per project and goal");
    }
}
