//! loopx-hostkit: the machinery the host platform runs itself. Today that is `loopx drive`
//! ([`drive`]): loopx's own outer loop, which runs any agent CLI as a child, one turn at a
//! time, asking the kernel before each turn and settling each one through it.
//!
//! It asks the kernel through its command surface and writes nothing itself: the turn's
//! output log is the kernel's to write ([`loopx_kernel::turn_log`]). It never reads the
//! process environment or prints: the command line hands it what it needs and shows what it
//! reports.

pub mod child;
pub mod drive;
