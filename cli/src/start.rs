//! The process's start: what happens before `loopx` reads its arguments.
//!
//! A Rust `main` is reached through the standard library's runtime set-up, which on Linux asks
//! the C library for the main thread's stack bounds (glibc finds them by reading and parsing
//! `/proc/self/maps`) and maps an alternate signal stack, so that a stack overflow can be named
//! before the process dies. Every hook is a fresh process, and that set-up was about a tenth of
//! a millisecond of each one (BENCHMARKS.md, "A process's own start"). So on Unix `loopx`
//! starts as a C program does (`#![no_main]` in `main.rs`, the C library calling [`main`])
//! and keeps, here, the two promises of that set-up it relies on:
//!
//! - the three standard streams are open, so a state file opened later is never descriptor 0,
//!   1 or 2, where a message meant for the terminal would land in it;
//! - a write to a closed pipe is an error the command handles (`SIGPIPE` ignored), not a
//!   signal that ends the process wherever it is.
//!
//! A stack overflow still ends the process (`SIGSEGV`), unnamed. The arguments are taken from
//! what the C library hands [`main`] (the standard library collects them only in its own
//! set-up on some C libraries, musl's among them).

use std::ffi::OsString;
use std::sync::OnceLock;

static ARGS: OnceLock<Vec<OsString>> = OnceLock::new();

/// The process's arguments, the program's name first.
pub fn args() -> &'static [OsString] {
    ARGS.get_or_init(|| std::env::args_os().collect())
}

/// Makes sure descriptors 0, 1 and 2 are open: each closed one gets `/dev/null`. Opening it
/// takes the lowest free descriptor, so the first open above 2 says all three were open.
#[cfg(all(unix, not(test)))]
fn open_standard_streams() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    while let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        if null.as_raw_fd() > 2 {
            break;
        }
        let _ = null.into_raw_fd(); // it stays open as the stream it filled
    }
}

/// The process's entry on Unix, called by the C library as a C program's `main` is: the
/// start-up above, then `run` with the arguments, its exit code the process's. A panic that
/// unwinds out of `run` (a debug build's) exits 101, as it would from a Rust `main`.
#[cfg(all(unix, not(test)))]
pub fn enter(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char, run: fn() -> i32) -> ! {
    open_standard_streams();
    ignore_sigpipe();
    let _ = ARGS.set(collect_args(argc, argv));
    let code = std::panic::catch_unwind(run).unwrap_or(101);
    // `exit` flushes what is buffered for stdout, as returning from a Rust `main` does.
    std::process::exit(code)
}

#[cfg(all(unix, not(test)))]
#[allow(unsafe_code)]
fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to "ignore" installs no handler and touches no
    // memory of this process; nothing runs concurrently this early.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The arguments as the C library passed them: `argc` pointers to NUL-terminated strings.
#[cfg(unix)]
#[allow(unsafe_code)]
fn collect_args(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let count = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() {
        return Vec::new();
    }
    (0..count)
        .map_while(|i| {
            // SAFETY: the C library hands `main` an array of `argc` pointers, each to a
            // NUL-terminated string that lives as long as the process (a null one ends it).
            let arg = unsafe { *argv.add(i) };
            (!arg.is_null()).then(|| {
                // SAFETY: as above, `arg` points to a NUL-terminated string.
                let bytes = unsafe { std::ffi::CStr::from_ptr(arg) }.to_bytes();
                std::ffi::OsStr::from_bytes(bytes).to_owned()
            })
        })
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use std::ffi::{CString, c_char};
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    #[test]
    fn arguments_are_read_as_the_c_library_hands_them() {
        let given: Vec<CString> = [&b"loopx"[..], b"todo", b"--text", b"caf\xe9 \"quoted\"", b""]
            .iter()
            .map(|b| CString::new(*b).unwrap())
            .collect();
        let mut argv: Vec<*const c_char> = given.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let args = collect_args(5, argv.as_ptr());
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(bytes, [&b"loopx"[..], b"todo", b"--text", b"caf\xe9 \"quoted\"", b""]);
        // Fewer than argc pointers before a null one: the null one ends them.
        assert_eq!(collect_args(3, [argv[0], std::ptr::null()].as_ptr()).len(), 1);
        assert!(collect_args(0, argv.as_ptr()).is_empty());
        assert!(collect_args(-1, argv.as_ptr()).is_empty());
        assert!(collect_args(2, std::ptr::null()).is_empty());
    }
}
