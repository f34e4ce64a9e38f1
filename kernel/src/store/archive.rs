//! `archive.jsonl`: the closed todos a goal's live state no longer holds.

use std::fs;
use std::path::Path;

use loopx_core::event::Event;
use loopx_core::{Error, GoalId, Result};

use crate::fs as kfs;
use crate::log::{self, EventLine, GENESIS};
use crate::state::{ArchiveHead, ArchivedTodo, GoalState};

use super::file::FileStore;
use super::replay::root_of;

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

pub(super) fn archive_len(path: &Path) -> Result<u64> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io("read", path, &e)),
    }
}

impl FileStore {
    /// Appends `lines` to the archive, which must end where `before` says (a longer file
    /// holds lines of a commit that never finished: they are cut first).
    pub(super) fn append_archive(&self, id: &GoalId, before: &ArchiveHead, lines: &[String]) -> Result<()> {
        let path = self.layout.archive(id);
        if archive_len(&path)? > before.bytes {
            kfs::truncate_durable(&path, before.bytes)?;
        }
        let mut file = kfs::open_append(&path)?;
        kfs::append_view(&mut file, &path, archive_text(lines).as_bytes())
    }

    /// Writes the whole archive, as replaying the log made it.
    pub(super) fn write_archive(&self, id: &GoalId, lines: &[String]) -> Result<()> {
        let path = self.layout.archive(id);
        if lines.is_empty() && archive_len(&path)? == 0 {
            return Ok(());
        }
        kfs::atomic_write_with(&path, archive_text(lines).as_bytes(), kfs::Sync::View, &|| {})
    }

    /// Records that this loopx took over a goal written before the archive: one
    /// `store_upgraded` event, whose state root is the new encoding's.
    pub(super) fn record_upgrade(
        &self,
        id: &GoalId,
        mut state: GoalState,
        head: String,
    ) -> Result<(GoalState, String)> {
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
