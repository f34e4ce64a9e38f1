//! Per-goal (and per-project) advisory locks with a bounded wait.
//!
//! Locks are std `File::lock`/`try_lock`: they die with their holder, so a crashed process never
//! leaves a lock behind. The holder writes who it is into the lock file, so a waiter can say
//! whom it waits for.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use loopx_core::{Error, Result};

use crate::Reporter;

/// How long to wait quietly before telling the user we are waiting.
const QUIET_WAIT: Duration = Duration::from_millis(200);

/// A held lock; released on drop.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    path: PathBuf,
}

impl LockGuard {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Takes the lock at `path`, waiting at most `timeout`. `what` names the thing locked for
/// messages ("goal main"); `holder` describes this process for other waiters.
pub fn acquire(
    path: &Path,
    what: &str,
    holder: &str,
    since: loopx_core::Timestamp,
    timeout: Duration,
    reporter: &dyn Reporter,
) -> Result<LockGuard> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io("open lock file", path, &e))?;
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(Error::busy(format!(
                        "{what} is busy: its lock has been held for over {} ms by {}",
                        timeout.as_millis(),
                        read_holder(&mut file)
                    ))
                    .with_hint("retry the command; if this repeats, check that the holder is not hung (LOOPX_LOCK_TIMEOUT_MS sets the wait)"));
                }
                if !told && waited >= QUIET_WAIT {
                    reporter.waiting_for_lock(what, &read_holder(&mut file));
                    told = true;
                }
                std::thread::sleep(pause.min(timeout.saturating_sub(waited)));
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(TryLockError::Error(e)) => return Err(Error::io("lock", path, &e)),
        }
    }
    // Record who holds it. Best effort: a waiter only uses this for its message.
    let stamp = format!("pid {} ({holder}) since {since}", std::process::id());
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(stamp.as_bytes());
    Ok(LockGuard { file, path: path.to_path_buf() })
}

fn read_holder(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.rewind();
    let _ = Read::by_ref(file).take(256).read_to_string(&mut s);
    if s.trim().is_empty() { "another process".to_owned() } else { s.trim().to_owned() }
}
