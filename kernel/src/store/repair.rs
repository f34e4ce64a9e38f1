//! `doctor --repair` for the file store.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use loopx_core::{Error, GoalId, Result};

use crate::fs as kfs;
use crate::log;
use crate::project::ProjectFile;
use crate::state::GoalState;

use super::file::FileStore;
use super::replay::replay;
use super::snapshot::Snapshot;
use super::traits::Store;

/// `doctor --repair`: what can be mended without losing committed data is mended, and what
/// does not check out is moved aside into dated files. Nothing is deleted.
impl FileStore {
    fn stamp(&self) -> String {
        self.clock.now().to_string().chars().filter(char::is_ascii_alphanumeric).collect()
    }

    /// Moves `bytes` (the tail of `from`) into a dated sibling file; returns its name.
    fn set_aside(&self, from: &Path, bytes: &[u8]) -> Result<String> {
        let name = format!(
            "{}.rejected-{}",
            from.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
            self.stamp()
        );
        let to = from.with_file_name(&name);
        kfs::atomic_write(&to, bytes)?;
        Ok(name)
    }

    /// Rebuilds `project.json` from the goal directories when it is unreadable, and lists goal
    /// directories that hold a valid log but are missing from it.
    pub fn repair_project(&self) -> Result<Vec<String>> {
        let _guard = self.lock_project()?;
        let mut actions = Vec::new();
        let path = self.layout.project_file();
        let mut project = match self.project() {
            Ok(p) => p,
            Err(e) if e.kind == loopx_core::ErrorKind::Integrity => {
                let bytes = fs::read(&path).map_err(|e| Error::io("read", &path, &e))?;
                let aside = self.set_aside(&path, &bytes)?;
                actions.push(format!(
                    "project.json was unreadable; moved it to {aside} and rebuilt it from goals/"
                ));
                ProjectFile::new()
            }
            Err(e) => return Err(e),
        };
        let mut found: Vec<(loopx_core::Timestamp, GoalId, Option<String>)> = Vec::new();
        if let Ok(entries) = fs::read_dir(self.layout.goals_dir()) {
            for entry in entries.flatten() {
                let Some(id) = entry.file_name().to_str().and_then(|n| GoalId::new(n).ok()) else { continue };
                if project.has_goal(&id) {
                    continue;
                }
                let Ok(bytes) = fs::read(self.layout.events(&id)) else { continue };
                let scan = match log::scan(&bytes) {
                    Ok(s) => s,
                    Err((s, _)) => s,
                };
                if let Some(first) = scan.lines.first()
                    && let Ok(state) = GoalState::genesis(&id, first)
                {
                    found.push((state.goal.created_at, id, state.goal.title));
                }
            }
        }
        found.sort();
        for (created_at, id, title) in found {
            actions.push(format!("listed goal {id} in project.json (its directory was not listed)"));
            project.add_goal(&id, title, created_at, false);
        }
        if !actions.is_empty() {
            self.write_project(&project)?;
        }
        Ok(actions)
    }

    /// Keeps the valid prefix of a goal's log, moves the rest aside, and rebuilds its
    /// snapshot and GOAL.md.
    pub(crate) fn repair_goal(&self, id: &GoalId) -> Result<Vec<String>> {
        self.goal_exists_check(id)?;
        let _guard = self.lock_goal(id)?;
        let mut actions = Vec::new();
        let events = self.layout.events(id);
        let bytes = fs::read(&events).map_err(|e| Error::io("read", &events, &e))?;
        let (scan, cut_at, why) = match log::scan(&bytes) {
            Ok(scan) if scan.torn_bytes > 0 => {
                let at = scan.valid_len;
                (scan, Some(at), "an incomplete final line".to_owned())
            }
            Ok(scan) => (scan, None, String::new()),
            Err((scan, b)) => (scan, Some(b.offset), format!("line {}: {}", b.line, b.reason)),
        };
        if let Some(at) = cut_at {
            let at_usize = usize::try_from(at).unwrap_or(bytes.len());
            let aside = self.set_aside(&events, &bytes[at_usize..])?;
            kfs::truncate_durable(&events, at)?;
            actions.push(format!(
                "goal {id}: kept {} valid event(s); moved {} byte(s) from {why} to {aside}",
                scan.lines.len(),
                bytes.len() - at_usize
            ));
        }
        if scan.lines.is_empty() {
            actions
                .push(format!("goal {id}: no valid event is left; recreate the goal with loopx goal create"));
            return Ok(actions);
        }
        let (state, archive) = replay(id, &scan)?;
        self.write_archive(id, &archive)?;
        let snap_path = self.layout.snapshot(id);
        if let Some(old) = kfs::read_optional(&snap_path)? {
            let matches = Snapshot::decode(&Arc::new(old.clone()), &self.layout, id).is_some_and(|s| {
                s.state.todos.check().is_ok()
                    && s.seq == state.seq
                    && serde_json::to_value(&*s.state).ok() == serde_json::to_value(&state).ok()
            });
            if !matches {
                let aside = self.set_aside(&snap_path, &old)?;
                actions.push(format!("goal {id}: the snapshot did not match the log; moved it to {aside}"));
            }
        }
        self.write_projections(id, &state, scan.head(), None)?;
        Ok(actions)
    }
}
