//! What a `loopx` process can rely on from its first instruction, whoever started it: its
//! standard streams open (a closed one is never a state file), a closed pipe an error it
//! handles rather than a signal, its arguments as they were given.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use loopx_tests::{Sandbox, loopx_bin};

/// `loopx <args>` started with descriptors 0, 1 and 2 closed, as a careless parent may.
fn with_streams_closed(s: &Sandbox, args: &[&str]) -> Command {
    let mut c = s.environment(Command::new("sh"));
    c.arg("-c").arg(r#"exec "$0" "$@" <&- >&- 2>&-"#).arg(loopx_bin()).args(args);
    c
}

#[test]
fn closed_standard_streams_are_opened_on_dev_null_before_anything_else() {
    let s = Sandbox::new();
    s.init();
    // A server lives long enough to be looked at from outside: once it listens, its first
    // three descriptors are /dev/null, not its socket or a state file it opened.
    let mut server = with_streams_closed(&s, &["serve", "--port", "0"]).spawn().unwrap();
    let fds = format!("/proc/{}/fd", server.id());
    let listening =
        || {
            std::fs::read_dir(&fds).into_iter().flatten().flatten().any(|e| {
                std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
        };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !listening() {
        assert!(server.try_wait().unwrap().is_none(), "the server ended before it listened");
        assert!(std::time::Instant::now() < deadline, "the server did not listen within 20 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let streams: Vec<_> = (0..3).map(|n| std::fs::read_link(format!("{fds}/{n}")).ok()).collect();
    server.kill().unwrap();
    server.wait().unwrap();
    let null = Some(std::path::PathBuf::from("/dev/null"));
    assert_eq!(streams, [null.clone(), null.clone(), null]);
}

#[test]
fn a_command_with_no_streams_open_still_does_its_work() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "codex-cli"]);
    let add = ["todo", "add", "--agent-id", "a", "--text", "written with no streams open"];
    assert!(with_streams_closed(&s, &add).status().unwrap().success());
    let decide = ["quota", "should-run", "--agent-id", "a"];
    assert!(with_streams_closed(&s, &decide).status().unwrap().success());
    // What the two commands printed went nowhere: the state is healthy and holds the todo.
    let doctor = s.json(&["doctor"]);
    assert_eq!(doctor["healthy"], true, "{doctor}");
    let todos = s.json(&["todo", "list"]);
    assert_eq!(todos["todos"][0]["text"], "written with no streams open", "{todos}");
}

#[test]
fn a_closed_pipe_is_an_error_the_command_handles_not_a_signal() {
    let s = Sandbox::new();
    s.init();
    for args in [&["--version"][..], &["status"], &["status", "--json"], &["history"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = s.command().args(args).stdin(Stdio::null()).stdout(writer).output().unwrap();
        assert_eq!(out.status.signal(), None, "loopx {args:?} was ended by a signal: {:?}", out.status);
        assert_eq!(out.status.code(), Some(0), "loopx {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn arguments_reach_the_command_as_given() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "codex-cli"]);
    let text = "spaces,  quotes \" ' and ünïcödé — as typed";
    s.ok(&["todo", "add", "--agent-id", "a", "--text", text]);
    assert_eq!(s.json(&["todo", "list"])["todos"][0]["text"], text);
    // Bytes that are not UTF-8 are refused as a usage error, and nothing is written.
    let before = s.tree();
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let out = s.command().args(["todo", "add", "--agent-id", "a", "--text"]).arg(latin1).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("UTF-8"), "{out:?}");
    assert_eq!(s.tree(), before);
}

/// Where GCC ships its unwinder as a static archive, loopx has it linked in and loads no
/// `libgcc_s.so.1` at start (`cli/build.rs`): the library's name is nowhere in the binary, so
/// the dynamic loader is never asked for it. A compiler without the archive leaves the shared
/// unwinder in, and there is nothing to check.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn loopx_loads_no_shared_unwinder_where_gcc_ships_the_static_one() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let Ok(out) = Command::new(cc).arg("-print-file-name=libgcc_eh.a").output() else { return };
    let archive = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !(archive.is_absolute() && archive.is_file()) {
        eprintln!("no libgcc_eh.a here: loopx keeps the shared unwinder");
        return;
    }
    let binary = std::fs::read(loopx_bin()).unwrap();
    let needed = b"libgcc_s.so.1";
    assert!(
        !binary.windows(needed.len()).any(|w| w == needed),
        "{} still names libgcc_s.so.1: the static unwinder was not linked in",
        loopx_bin().display()
    );
}

/// With the unwinder linked in, a debug build's unwinding still works: a fault that unwinds
/// from inside a commit (`LOOPX_FAULT=unwind-after-lock`, compiled only into debug builds)
/// passes every frame back to the process's start, which exits 101 as a Rust `main` would; an
/// unwinder that could not walk the frames would abort the process instead. Nothing was
/// committed, and the goal's lock is free for the next command.
#[test]
fn an_unwinding_fault_reaches_the_start_and_exits_101() {
    let s = Sandbox::new();
    s.init();
    let before = s.tree();
    let run = s.run_with(
        &["todo", "add", "--agent-id", "user", "--text", "never added"],
        b"",
        &[("LOOPX_FAULT", "unwind-after-lock"), ("LOOPX_LOCK_TIMEOUT_MS", "50")],
    );
    assert_eq!(run.code, 101, "{run:?}");
    assert_eq!(s.tree(), before);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "added"]);
    assert_eq!(s.json(&["todo", "list"])["todos"][0]["text"], "added");
}
