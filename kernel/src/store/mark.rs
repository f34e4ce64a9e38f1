//! [`FileMark`]: what tells one version of a state file from another.

use std::fs;
use std::path::Path;
use std::time::UNIX_EPOCH;

use loopx_core::{Error, Result};

/// What tells one version of a state file (a goal's log, `project.json`) from another: its
/// length and modification time (what a snapshot records of its log), and on Unix which file
/// it is and when its inode last changed. A commit appends to the log; `project.json` is
/// replaced whole; a cut, a rewrite or a hand edit moves the change time, which no one can set
/// back (a hand edit may restore the length and the modification time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileMark {
    pub(super) len: u64,
    pub(super) mtime_ns: u64,
    file: (u64, u64, i64, i64),
}

impl FileMark {
    pub(super) fn of(path: &Path) -> Result<Self> {
        fs::metadata(path).map(|m| Self::from(&m)).map_err(|e| Error::io("read", path, &e))
    }
}

impl From<&fs::Metadata> for FileMark {
    fn from(meta: &fs::Metadata) -> Self {
        #[cfg(unix)]
        let file = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let file = (0, 0, 0, 0);
        Self { len: meta.len(), mtime_ns: mtime_ns(meta), file }
    }
}

pub(super) fn mtime_ns(meta: &fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

pub(super) fn log_stat(path: &Path) -> Result<(u64, u64)> {
    let meta = fs::metadata(path).map_err(|e| Error::io("read", path, &e))?;
    Ok((meta.len(), mtime_ns(&meta)))
}
