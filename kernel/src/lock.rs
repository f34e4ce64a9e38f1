//! Per-goal (and per-project) advisory locks with a bounded wait.
//!
//! Locks are std `File::lock`/`try_lock`: they die with their holder, so a crashed process never
//! leaves a lock behind. The holder writes who it is into the lock file, so a waiter can say
//! whom it waits for.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use loopx_core::{Error, Result};

use crate::Reporter;

/// How long to wait quietly before telling the user we are waiting.
const QUIET_WAIT: Duration = Duration::from_millis(200);

/// A held lock; released on drop, which reports how long it was waited for and held.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    path: PathBuf,
    what: String,
    waited: Duration,
    taken: Instant,
    reporter: Arc<dyn Reporter>,
}

impl LockGuard {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.file.unlock();
        self.reporter.lock_released(&self.what, self.waited, self.taken.elapsed());
    }
}

/// Takes the lock at `path`, waiting at most `timeout`. `what` names the thing locked for
/// messages ("goal main"); `holder` describes this process for other waiters.
///
/// Uncontended, this is one `try_lock`. Contended, a helper thread blocks in `lock()` (so the
/// operating system wakes us the moment the holder lets go, instead of a polling loop
/// guessing) while this thread waits on it with a deadline. If the deadline passes first, the
/// helper releases the lock as soon as it gets it.
pub fn acquire(
    path: &Path,
    what: &str,
    holder: &str,
    since: loopx_core::Timestamp,
    timeout: Duration,
    reporter: Arc<dyn Reporter>,
) -> Result<LockGuard> {
    let start = Instant::now();
    crate::fs::check_state_file(path)?;
    crate::fs::refuse_links(path)?;
    let mut file =
        crate::fs::no_follow(OpenOptions::new().read(true).write(true).create(true).truncate(false))
            .open(path)
            .map_err(|e| Error::io("open lock file", path, &e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::Error(e)) => return Err(Error::io("lock", path, &e)),
        Err(TryLockError::WouldBlock) => wait_for(&mut file, path, what, timeout, reporter.as_ref())?,
    }
    // Record who holds it. Best effort: a waiter only uses this for its message.
    let stamp = format!("pid {} ({holder}) since {since}", std::process::id());
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(stamp.as_bytes());
    let waited = start.elapsed();
    Ok(LockGuard {
        file,
        path: path.to_path_buf(),
        what: what.to_owned(),
        waited,
        taken: Instant::now(),
        reporter,
    })
}

fn wait_for(
    file: &mut File,
    path: &Path,
    what: &str,
    timeout: Duration,
    reporter: &dyn Reporter,
) -> Result<()> {
    let start = Instant::now();
    // A second handle on the same open file: a lock taken through it is this file's lock.
    let blocker = file.try_clone().map_err(|e| Error::io("open lock file", path, &e))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let got = blocker.lock();
        let ok = got.is_ok();
        if tx.send(got).is_err() && ok {
            let _ = blocker.unlock(); // the waiter gave up: let the next one in
        }
    });
    let mut told = false;
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        let slice = if told { left } else { left.min(QUIET_WAIT.saturating_sub(start.elapsed())) };
        match rx.recv_timeout(slice) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => return Err(Error::io("lock", path, &e)),
            Err(RecvTimeoutError::Disconnected) => return Err(Error::internal("the lock helper vanished")),
            Err(RecvTimeoutError::Timeout) if start.elapsed() >= timeout => {
                return Err(Error::busy(format!(
                    "{what} is busy: its lock has been held for over {} ms by {}",
                    timeout.as_millis(),
                    read_holder(file)
                ))
                .with_hint(
                    "retry the command; if this repeats, check that the holder is not hung (LOOPX_LOCK_TIMEOUT_MS sets the wait)",
                ));
            }
            Err(RecvTimeoutError::Timeout) => {
                if !told {
                    reporter.waiting_for_lock(what, &read_holder(file));
                    told = true;
                }
            }
        }
    }
}

fn read_holder(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.rewind();
    let _ = Read::by_ref(file).take(256).read_to_string(&mut s);
    if s.trim().is_empty() { "another process".to_owned() } else { s.trim().to_owned() }
}
