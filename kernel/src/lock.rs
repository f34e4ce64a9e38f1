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
    crate::fs::check_state_path(path)?;
    let mut file =
        crate::fs::no_follow(OpenOptions::new().read(true).write(true).create(true).truncate(false))
            .open(path)
            .map_err(|e| Error::io("open lock file", path, &e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::Error(e)) => return Err(Error::io("lock", path, &e)),
        Err(TryLockError::WouldBlock) => wait_for(&mut file, path, what, timeout, reporter.as_ref())?,
    }
    // Record who holds it. Best effort: a waiter only uses this for its message. Written over
    // the last holder's record at a fixed width, never truncated: on ext4 a truncation to zero
    // costs a journal wait (0.3–0.6 ms) on every transaction.
    let stamp = format!("pid {} ({holder}) since {since}", std::process::id());
    let _ = file.rewind();
    let _ = file.write_all(&stamp_record(&stamp));
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

/// Bytes a lock file's holder record takes: as much as a waiter reads.
const STAMP_LEN: usize = 256;

/// `stamp` as a holder record: cut to fit (at a character's edge) and padded with spaces to
/// [`STAMP_LEN`] bytes, the last a newline, so it covers any record before it.
fn stamp_record(stamp: &str) -> Vec<u8> {
    let mut cut = stamp.len().min(STAMP_LEN - 1);
    while !stamp.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut record = stamp.as_bytes()[..cut].to_vec();
    record.resize(STAMP_LEN - 1, b' ');
    record.push(b'\n');
    record
}

fn read_holder(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.rewind();
    let _ = Read::by_ref(file).take(STAMP_LEN as u64).read_to_string(&mut s);
    if s.trim().is_empty() { "another process".to_owned() } else { s.trim().to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_record_has_one_width_and_reads_back_trimmed() {
        let long = format!("pid 7 ({}) since now", "é".repeat(300));
        // The same at an odd offset: the record's last byte would fall inside a character.
        let odd = format!("pid 10 ({}) since now", "é".repeat(300));
        for stamp in ["pid 1 (loopx status) since 2026-12-02T08:00:00.000Z", long.as_str(), odd.as_str()] {
            let record = stamp_record(stamp);
            assert_eq!((record.len(), record.last()), (STAMP_LEN, Some(&b'\n')));
            let text = std::str::from_utf8(&record).unwrap();
            assert!(stamp.starts_with(text.trim_end()), "{text:?}");
        }
        // A shorter record written over a longer one leaves nothing of it.
        let dir = tempfile::tempdir().unwrap();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("lock"))
            .unwrap();
        for stamp in [long.as_str(), "pid 2 (loopx todo add) since then"] {
            file.rewind().unwrap();
            file.write_all(&stamp_record(stamp)).unwrap();
        }
        assert_eq!(read_holder(&mut file), "pid 2 (loopx todo add) since then");
    }

    /// What a lock tells its reporter; the first wait it hears of is sent on.
    #[derive(Debug)]
    struct Heard {
        told: std::sync::Mutex<Option<mpsc::Sender<String>>>,
        released: std::sync::Mutex<Vec<String>>,
    }

    impl Reporter for Heard {
        fn warn(&self, _: &str) {}
        fn waiting_for_lock(&self, what: &str, holder: &str) {
            if let Some(tx) = self.told.lock().unwrap().take() {
                let _ = tx.send(format!("{what}: {holder}"));
            }
        }
        fn lock_released(&self, what: &str, _: Duration, _: Duration) {
            self.released.lock().unwrap().push(what.to_owned());
        }
    }

    /// A waiter gives up after its wait, naming the holder; a longer one is told whom it waits
    /// for and takes the lock the moment it is let go, and then holds it.
    #[test]
    fn a_waiter_hears_of_the_holder_and_takes_the_lock_once_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".loopx").join("lock");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let (tx, told) = mpsc::channel();
        let heard = Arc::new(Heard { told: std::sync::Mutex::new(Some(tx)), released: Default::default() });
        let since = loopx_core::Timestamp::from_unix_millis(0);
        let take = |holder: &str, ms: u64| {
            acquire(&path, "goal g", holder, since, Duration::from_millis(ms), heard.clone())
        };
        let first = take("first", 1_000).unwrap();
        let busy = take("second", 50).unwrap_err();
        assert_eq!(busy.kind, loopx_core::ErrorKind::Busy);
        let pid = std::process::id();
        let expected =
            format!("goal g is busy: its lock has been held for over 50 ms by pid {pid} (first) since");
        assert!(busy.message.starts_with(&expected), "{}", busy.message);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| take("second", 60_000));
            // Let go only once the waiter has said whom it waits for.
            let heard_of =
                told.recv_timeout(Duration::from_secs(60)).expect("the waiter says whom it waits for");
            assert!(heard_of.starts_with(&format!("goal g: pid {pid} (first) since")), "{heard_of}");
            drop(first);
            let second = waiter.join().unwrap().unwrap();
            assert_eq!(*heard.released.lock().unwrap(), ["goal g"]);
            assert_eq!(
                take("third", 50).unwrap_err().kind,
                loopx_core::ErrorKind::Busy,
                "held after the wait"
            );
            drop(second);
        });
        drop(take("third", 50).unwrap());
        assert_eq!(heard.released.lock().unwrap().len(), 3);
    }
}
