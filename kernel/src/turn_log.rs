//! The output of driven turns: one capped file per turn in `.loopx/goals/<goal>/turns/`, the
//! oldest removed once the folder passes its size. It lives in the project directory of the
//! machine the driver runs on, whatever store the goal uses: it is what a person reads when a
//! turn went wrong, not state (no hash covers it, no command trusts it).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use loopx_core::{GoalId, Result};

use crate::fs::{check_state_file, create_dir_all, no_follow};
use crate::project::Layout;

/// What one turn's log and a goal's logs together may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one turn's file keeps; what comes after is counted, not written.
    pub(crate) per_turn: u64,
    /// Bytes the goal's turn logs keep in all; the oldest files go first.
    pub(crate) per_goal: u64,
    /// Bytes of the output's end kept in memory (for a failed turn's record).
    pub tail: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { per_turn: 2 << 20, per_goal: 64 << 20, tail: loopx_core::drive::MAX_TAIL_LEN }
    }
}

/// The folder of `goal`'s turn logs under the project at `root`.
pub fn dir(root: &Path, goal: &GoalId) -> PathBuf {
    Layout::new(root).goal_dir(goal).join("turns")
}

/// The log file of `turn` (a turn id is a safe file name but for `:`, which becomes `_`).
pub fn path(root: &Path, goal: &GoalId, turn: &str) -> PathBuf {
    dir(root, goal).join(format!("{}.log", turn.replace(':', "_")))
}

/// The last `max` bytes of `turn`'s log, as text, if this machine kept one.
pub fn read(root: &Path, goal: &GoalId, turn: &str, max: u64) -> Result<Option<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let path = path(root, goal, turn);
    check_state_file(&path)?;
    let mut file = match no_follow(OpenOptions::new().read(true)).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(loopx_core::Error::io("open", &path, &e)),
    };
    let len = file.metadata().map_err(|e| loopx_core::Error::io("read", &path, &e))?.len();
    let from = len.saturating_sub(max);
    file.seek(SeekFrom::Start(from)).map_err(|e| loopx_core::Error::io("read", &path, &e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| loopx_core::Error::io("read", &path, &e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// One turn's output on its way to its file.
#[derive(Debug)]
pub struct TurnLog {
    path: PathBuf,
    /// `None` once writing failed or when no file could be made: the tail is still kept.
    file: Option<File>,
    written: u64,
    dropped: u64,
    limits: Limits,
    tail: Vec<u8>,
}

impl TurnLog {
    /// Creates the log of `turn`, after removing the oldest logs beyond the goal's limit. A
    /// file that is a link, or a folder that cannot be made, is an error; the caller may go on
    /// with [`TurnLog::in_memory`].
    pub fn create(root: &Path, goal: &GoalId, turn: &str, limits: Limits) -> Result<Self> {
        let dir = dir(root, goal);
        check_state_file(&dir)?;
        create_dir_all(&dir)?;
        prune(&dir, limits.per_goal.saturating_sub(limits.per_turn));
        let path = path(root, goal, turn);
        check_state_file(&path)?;
        let file = no_follow(OpenOptions::new().create(true).truncate(true).write(true))
            .open(&path)
            .map_err(|e| loopx_core::Error::io("create", &path, &e))?;
        Ok(Self { path, file: Some(file), written: 0, dropped: 0, limits, tail: Vec::new() })
    }

    /// A log that only keeps the tail (its file could not be made).
    pub fn in_memory(limits: Limits) -> Self {
        Self { path: PathBuf::new(), file: None, written: 0, dropped: 0, limits, tail: Vec::new() }
    }

    /// The file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|_| self.path.as_path())
    }

    /// Adds output. Never fails: a write that fails stops the file, not the turn.
    pub fn write(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > self.limits.tail * 2 {
            let cut = self.tail.len() - self.limits.tail;
            self.tail.drain(..cut);
        }
        let room = self.limits.per_turn.saturating_sub(self.written);
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len());
        self.dropped += (bytes.len() - take) as u64;
        if let Some(f) = &mut self.file
            && take > 0
        {
            if f.write_all(&bytes[..take]).is_err() {
                self.file = None;
            }
            self.written += take as u64;
        }
    }

    /// Closes the file, saying how much was left out.
    pub fn finish(&mut self) {
        if self.dropped > 0
            && let Some(f) = &mut self.file
        {
            let _ = writeln!(f, "\n[loopx: {} more bytes of output were not kept]", self.dropped);
        }
        self.file = None;
    }

    /// The output's last bytes, as text.
    pub fn tail(&self) -> String {
        let from = self.tail.len().saturating_sub(self.limits.tail);
        String::from_utf8_lossy(&self.tail[from..]).into_owned()
    }
}

/// Removes the oldest `*.log` files in `dir` until the rest hold at most `keep` bytes.
fn prune(dir: &Path, keep: u64) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut logs: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| {
            let m = e.metadata().ok().filter(fs::Metadata::is_file)?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = logs.iter().map(|l| l.1).sum();
    logs.sort();
    for (_, len, path) in logs {
        if total <= keep {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn goal() -> GoalId {
        GoalId::new("main").unwrap()
    }

    #[test]
    fn a_log_keeps_its_cap_and_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits { per_turn: 10, per_goal: 1000, tail: 4 };
        let mut log = TurnLog::create(dir.path(), &goal(), "d1-1", limits).unwrap();
        log.write(b"0123456789abcdef");
        log.write(b"xyz");
        assert_eq!(log.tail(), "fxyz");
        let path = log.path().unwrap().to_path_buf();
        log.finish();
        let text = fs::read_to_string(path).unwrap();
        assert!(text.starts_with("0123456789\n[loopx: 9 more bytes"), "{text}");
    }

    #[test]
    fn the_oldest_logs_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits { per_turn: 100, per_goal: 250, tail: 4 };
        for n in 1..=4 {
            let mut log = TurnLog::create(dir.path(), &goal(), &format!("t-{n}"), limits).unwrap();
            log.write(&[b'x'; 100]);
            log.finish();
            // Distinct modification times, oldest first.
            let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000 * n);
            File::options()
                .write(true)
                .open(path(dir.path(), &goal(), &format!("t-{n}")))
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        let mut left: Vec<String> = fs::read_dir(super::dir(dir.path(), &goal()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["t-3.log", "t-4.log"]);
    }

    #[test]
    fn a_linked_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"keep").unwrap();
        create_dir_all(&super::dir(dir.path(), &goal())).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, path(dir.path(), &goal(), "t-1")).unwrap();
        #[cfg(unix)]
        assert!(TurnLog::create(dir.path(), &goal(), "t-1", Limits::default()).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }
}
