//! loopx-kernel: the state, the rules, the decisions and the stores. It keeps `.loopx/` (the
//! per-goal hash-chained event log, the snapshot, the GOAL.md projection and the locks);
//! another store (PostgreSQL's, in `loopx-pgstore`) writes a goal's state only through its
//! [`Store`] trait and [`store::Txn`]. It implements the
//! [`loopx_core::kernel::Kernel`] command surface over any [`Store`] ([`StateKernel`]): the
//! file store ([`FileKernel`]) and the in-memory one ([`MemKernel`]). Its [`fs`] module is
//! how every crate writes a file durably.

pub mod actor;
pub mod approvals;
mod base64;
pub mod codec;
pub mod decide;
pub mod doctor;
pub mod drive;
pub mod feed;
pub mod fs;
pub mod gates;
pub mod lock;
pub mod log;
pub(crate) mod mem_store;
pub mod newline;
pub mod person;
pub(crate) mod prefault;
pub mod project;
pub mod quota;
pub mod render;
pub mod rules;
pub mod scope;
pub mod state;
pub(crate) mod state_kernel;
pub mod store;
pub mod table;
pub mod turn_log;
pub mod witness;

use std::fmt;

pub use mem_store::MemStore;
pub use project::{Layout, find_root};
pub use state_kernel::{Board, DynKernel, FileKernel, MemKernel, StateKernel};
pub use store::{FileStore, InitOutcome, Opened, Store, StoreOpener, StoreOptions, open_file_store};

/// Where the kernel tells people what happened on the side: recoveries, lock waits. The CLI
/// prints these on stderr; a library caller may collect them.
pub trait Reporter: Send + Sync + fmt::Debug {
    /// Something was recovered or is worth knowing; the command still succeeded.
    fn warn(&self, message: &str);
    /// The command is waiting for a lock held by `holder`.
    fn waiting_for_lock(&self, what: &str, holder: &str);
    /// A lock was released after being waited for and held this long (for timing reports).
    fn lock_released(&self, what: &str, waited: std::time::Duration, held: std::time::Duration) {
        let _ = (what, waited, held);
    }
}

/// A reporter that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Reporter for Silent {
    fn warn(&self, _: &str) {}
    fn waiting_for_lock(&self, _: &str, _: &str) {}
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl loopx_core::Clock for SystemClock {
    fn now(&self) -> loopx_core::Timestamp {
        loopx_core::Timestamp::from_system_time(std::time::SystemTime::now())
    }
}

/// The wall clock moved by some milliseconds, the way a test travels through time (the CLI
/// takes it in debug builds only): by a fixed amount, or by what a file holds, read at every
/// look, so a test moves a running process by writing the file.
#[derive(Debug, Clone)]
pub enum SkewedClock {
    By(i64),
    File(std::path::PathBuf),
}

impl loopx_core::Clock for SkewedClock {
    fn now(&self) -> loopx_core::Timestamp {
        let ms = match self {
            Self::By(ms) => *ms,
            Self::File(path) => {
                std::fs::read_to_string(path).ok().and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(0)
            }
        };
        let now = SystemClock.now().unix_millis();
        loopx_core::Timestamp::from_unix_millis(now.saturating_add(ms))
    }
}
