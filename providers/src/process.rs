//! The process runner: runs a validation command or a command gate's check (argv, never a
//! shell) in a process group of its own and reports how it exited and a digest of its output
//! (raw readback; the kernel's capability reads it). Also what the host platform needs of
//! processes: finding and killing what a command left behind, and this process's ancestors.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use loopx_core::traits::{Observation, ObservationRequest, Provider};
use loopx_core::{Error, Result};

/// Runs commands: argv, never a shell; output is digested, not kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessProvider;

/// Output kept for the digest and the failure message, per stream.
const OUTPUT_CAP: usize = 1 << 20;

/// How long the readers may take to finish once the command and its group are gone. A process
/// that left the group and holds the pipe open is not waited for.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

fn drain(mut r: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            if out.len() < OUTPUT_CAP {
                out.extend_from_slice(&buf[..n.min(OUTPUT_CAP - out.len())]);
            }
        }
        let _ = tx.send(out);
    });
    rx
}

/// The variable every command loopx runs carries, with a value of its own: what the command
/// started keeps it, even in a session or process group of its own (`setsid`), and is found
/// by it when the command ends ([`kill_marked`]).
pub const RUN_MARK: &str = "LOOPX_RUN";

/// A fresh value for [`RUN_MARK`].
pub fn run_mark() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}.{n}.{nanos}", std::process::id())
}

/// Kills (with their process groups) the processes of this user whose environment holds every
/// one of `vars` (`NAME=value`), found in `/proc`; returns how many. What a command started and
/// moved out of its process group is found this way. Linux only; elsewhere none are found.
pub fn kill_marked(vars: &[String]) -> usize {
    if !cfg!(target_os = "linux") || vars.is_empty() {
        return 0;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let me = std::process::id();
    // Every marked process is found before any is killed: killing one's group first would
    // take the others with it, and they would not be counted.
    let found: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let Ok(env) = proc_file(&format!("/proc/{pid}/environ")) else { return false };
            let have: Vec<&[u8]> = env.split(|b| *b == 0).collect();
            vars.iter().all(|v| have.contains(&v.as_bytes()))
        })
        .collect();
    #[cfg(unix)]
    for pid in &found {
        if let Some(p) = i32::try_from(*pid).ok().and_then(rustix::process::Pid::from_raw) {
            if let Ok(group) = rustix::process::getpgid(Some(p)) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    // A signal is delivered on the way: until each is gone (or a zombie nobody reaped yet),
    // it may still hold a lock or be half-way through a write a caller goes on to look at.
    let deadline = Instant::now() + KILL_WAIT;
    while !found.iter().all(|pid| ended(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    found.len()
}

/// How long [`kill_marked`] waits for what it killed to end.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// A file of `/proc`, whole. Its size reads as 0, so `std::fs::read` would ask for it, read it
/// 32 bytes at first and then once more to find its end. A `/proc` file gives all it has up to
/// the size asked for in one call, so a read that leaves room is the last: one read into a page
/// is usually all of it, into a buffer nothing has to clear first (a walk of the process tree
/// reads three files an ancestor, on every command).
fn proc_file(path: &str) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(4096);
    #[cfg(unix)]
    loop {
        let room = buf.capacity() - buf.len();
        match rustix::io::read(&file, rustix::buffer::spare_capacity(&mut buf)) {
            Ok(n) if n < room => break,
            Ok(_) => buf.reserve(buf.capacity()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    #[cfg(not(unix))]
    (&file).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Whether process `pid` has ended: gone, or a zombie (dead, not yet reaped by its parent).
pub fn ended(pid: u32) -> bool {
    match proc_file(&format!("/proc/{pid}/stat")).map(|s| String::from_utf8_lossy(&s).into_owned()) {
        Err(_) => true,
        // The state is the first field after the name, which may hold spaces and parentheses.
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// A process above this one: what it runs as, and the environment it was started with (which
/// `unset` in a shell does not change: the shell keeps its variables elsewhere).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ancestor {
    pub pid: u32,
    /// Its name (`/proc/PID/comm`, as its `stat` holds it): the program's, or a script's own for
    /// an interpreted one.
    pub name: String,
    pub argv: Vec<String>,
    /// Its environment as `/proc/PID/environ` holds it: `NAME=value`, each ended by a NUL;
    /// empty when it cannot be read (another user's process). Read its variables with [`Self::vars`].
    pub environ: Vec<u8>,
    /// When it started, in clock ticks after boot: with the pid, names this process for its
    /// whole life (a pid is reused; a pid and its start time are not).
    pub start: u64,
    /// The walk could not read or understand this process (it ended as the walk reached it,
    /// `/proc` hides it, its record does not parse, or the walk came back to a process it had
    /// passed): what it is, and what is above it, is unknown. Always the last of a walk.
    pub unknown: bool,
}

impl Ancestor {
    /// Its environment's variables, read once for many lookups.
    pub fn vars(&self) -> Vars<'_> {
        Vars(
            self.environ
                .split(|c| *c == 0)
                .filter_map(|kv| {
                    let eq = kv.iter().position(|c| *c == b'=')?;
                    Some((std::str::from_utf8(&kv[..eq]).ok()?, std::str::from_utf8(&kv[eq + 1..]).ok()?))
                })
                .collect(),
        )
    }

    /// The process's name for its whole life: `<pid>.<start>`.
    pub fn key(&self) -> String {
        format!("{}.{}", self.pid, self.start)
    }
}

/// An ancestor's variables, name and value, in the order it holds them: those that are UTF-8.
#[derive(Debug)]
pub struct Vars<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Vars<'a> {
    /// The value of variable `name`, if set and not empty; the first, if set twice.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| *v).filter(|v| !v.is_empty())
    }
}

/// This process's ancestors, nearest first, up to (not including) `stop` or the first process
/// (pid 1), however many there are. Each is read as the walk reaches it: a caller that stops at
/// the one it looks for reads none above it. A process the walk cannot read ends it, as an
/// [`Ancestor::unknown`] one: a walk cut short is never taken for a clean one. Linux only;
/// elsewhere none are found.
pub fn ancestors(stop: Option<u32>) -> impl Iterator<Item = Ancestor> {
    walk(stop, true)
}

/// [`ancestors`] without their environments (cheaper: what they run and when they started).
pub fn ancestor_programs(stop: Option<u32>) -> impl Iterator<Item = Ancestor> {
    walk(stop, false)
}

fn walk(stop: Option<u32>, with_env: bool) -> impl Iterator<Item = Ancestor> {
    let unknown = |pid: u32| Ancestor { pid, unknown: true, ..Ancestor::default() };
    // This process's own record: its parent is where the walk starts (0 when it cannot be read,
    // which is reported as an unknown ancestor rather than as none).
    let mut pid =
        if cfg!(target_os = "linux") { Some(stat_of("self").map_or(0, |s| s.parent)) } else { None };
    // Pids passed, so that a walk that comes back to one (pids reused as it goes) ends.
    let mut seen = std::collections::HashSet::new();
    std::iter::from_fn(move || {
        let p = pid.take().filter(|p| *p != 1 && Some(*p) != stop)?;
        if p == 0 || !seen.insert(p) {
            return Some(unknown(p));
        }
        let Some(Stat { parent, start, name }) = stat_of(&p.to_string()) else { return Some(unknown(p)) };
        let read = |what: &str| proc_file(&format!("/proc/{p}/{what}")).unwrap_or_default();
        let environ = if with_env { read("environ") } else { Vec::new() };
        let argv = read("cmdline")
            .split(|c| *c == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        // A process whose parent is 0 is the first of its namespace: nothing above it.
        pid = Some(parent).filter(|p| *p != 0);
        Some(Ancestor { pid: p, name, argv, environ, start, unknown: false })
    })
}

/// What a process's `stat` says of it.
struct Stat {
    parent: u32,
    /// In clock ticks after boot.
    start: u64,
    /// Its name, as `/proc/PID/comm` holds it.
    name: String,
}

/// `/proc/<pid>/stat`: the name in parentheses (which may hold spaces, parentheses and bytes that
/// are not UTF-8: it is what lies between the first `(` and the last `)`), then the fields after
/// the state: the parent (the 4th) and the start time (the 22nd).
fn stat_of(pid: &str) -> Option<Stat> {
    let stat = proc_file(&format!("/proc/{pid}/stat")).ok()?;
    let open = stat.iter().position(|c| *c == b'(')?;
    let close = stat.iter().rposition(|c| *c == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut rest = rest.split_whitespace();
    Some(Stat {
        parent: rest.nth(1)?.parse().ok()?,
        // The 22nd field, 18 after the parent.
        start: rest.nth(17)?.parse().ok()?,
        name: String::from_utf8_lossy(stat.get(open + 1..close)?).into_owned(),
    })
}

/// Kills every process of the command's group: what it left running in the background dies
/// with it, whether it finished or ran out of time.
fn kill_group(child: &std::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = child;
}

impl ProcessProvider {
    /// Runs `argv` in `cwd` in a process group of its own, and kills the whole group when the
    /// command ends or after `timeout`, whichever comes first. Never waits on output longer
    /// than a short grace after that.
    pub fn run(&self, argv: &[String], cwd: &std::path::Path, timeout: Duration) -> Result<Observation> {
        let (program, args) = argv.split_first().ok_or_else(|| {
            Error::usage("the validation command is empty")
                .with_hint("give the check to run, e.g. --validation-command \"cargo test\"")
        })?;
        let start = Instant::now();
        let mark = run_mark();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .env(RUN_MARK, &mark)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| {
            Error::refused(format!("cannot run the validation command `{}`: {e}", shell_words::join(argv)))
                .with_hint("check that the program exists and is on PATH")
        })?;
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() >= timeout => {
                    kill_group(&child);
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    kill_group(&child);
                    return Err(Error::internal(format!("cannot wait for the validation command: {e}")));
                }
            }
        };
        kill_group(&child);
        // What left the group (`setsid`, a double fork) carries the mark.
        kill_marked(&[format!("{RUN_MARK}={mark}")]);
        let duration = start.elapsed();
        let deadline = Instant::now() + DRAIN_GRACE;
        let mut hasher = Sha256::new();
        for rx in [out, err].into_iter().flatten() {
            let left = deadline.saturating_duration_since(Instant::now());
            hasher.update(rx.recv_timeout(left).unwrap_or_default());
        }
        let digest = hasher.finalize();
        Ok(Observation::CommandExited {
            argv: argv.to_vec(),
            exit_code: status.and_then(|s| s.code()),
            output_digest: format!(
                "sha256:{}",
                digest.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

#[async_trait]
impl Provider for ProcessProvider {
    fn name(&self) -> &'static str {
        "process"
    }

    async fn observe(&self, request: &ObservationRequest) -> Result<Observation> {
        match request {
            ObservationRequest::RunCommand { argv, cwd, timeout_ms } => {
                self.run(argv, cwd, Duration::from_millis(*timeout_ms))
            }
            other => Err(Error::usage(format!("the process provider cannot serve {other:?}"))),
        }
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    /// A variable is read from the environment as `/proc` holds it: by its whole name, the first
    /// if set twice, and not at all when empty or not UTF-8.
    #[test]
    fn an_ancestors_variable_is_read_by_its_whole_name() {
        let a = Ancestor {
            environ: b"LOOPX_AGENT_ID=a1\0LOOPX_AGENT=x\0EMPTY=\0TWICE=1\0TWICE=2\0BAD=\xff\0NOEQ\0E=a=b\0"
                .to_vec(),
            ..Ancestor::default()
        };
        let vars =
            ["LOOPX_AGENT_ID", "LOOPX_AGENT", "LOOPX", "EMPTY", "TWICE", "BAD", "NOEQ", "E", "MISSING"];
        assert_eq!(
            vars.map(|v| a.vars().get(v)),
            [Some("a1"), Some("x"), None, None, Some("1"), None, None, Some("a=b"), None]
        );
    }

    /// A `/proc` file is read whole, however long: one larger than the first read's page too.
    #[test]
    fn a_proc_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 1, 4095, 4096, 4097, 20_000] {
            let path = dir.path().join(format!("f{len}"));
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(proc_file(path.to_str().unwrap()).unwrap(), bytes, "{len} bytes");
        }
        let me = std::fs::read("/proc/self/environ").unwrap();
        assert_eq!(proc_file("/proc/self/environ").unwrap(), me);
    }

    #[test]
    fn a_killed_process_has_ended_before_it_is_reaped() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!ended(child.id()));
        child.kill().unwrap();
        let t = Instant::now();
        while !ended(child.id()) && t.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert!(ended(child.id()), "a zombie has ended");
        child.wait().unwrap();
        assert!(ended(child.id()));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn an_ancestor_is_named_by_its_pid_and_start_time() {
        let parent = ancestors(None).next().expect("a test has a parent");
        assert_eq!(parent.pid, std::os::unix::process::parent_id());
        assert!(parent.start > 0, "{parent:?}");
        // It started after boot (in ticks of 1/100 s, as Linux counts them for `stat`).
        let uptime = std::fs::read_to_string("/proc/uptime").unwrap();
        let uptime: f64 = uptime.split_whitespace().next().unwrap().parse().unwrap();
        assert!((parent.start as f64) < (uptime + 1.0) * 100.0, "{parent:?} after {uptime} s");
        // Its environment is read as it started with it; a walk of programs reads none.
        let environ = std::fs::read(format!("/proc/{}/environ", parent.pid)).unwrap();
        assert_eq!(parent.environ, environ);
        assert!(ancestor_programs(None).all(|a| a.environ.is_empty()));
        // The same process, looked at again, has the same name; this one started after it.
        assert_eq!(ancestors(None).next().unwrap().key(), parent.key());
        assert!(stat_of("self").unwrap().start >= parent.start);
        // Its name is the one `/proc/PID/comm` holds, read from `stat` past any parentheses.
        let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(parent.name, comm(parent.pid).trim_end());
        std::fs::write("/proc/self/comm", "a (b) c").unwrap();
        assert_eq!(stat_of("self").unwrap().name, "a (b) c");
        // A name that is not UTF-8 is still read, and so is what follows it.
        std::fs::write("/proc/self/comm", b"lx\xff)(").unwrap();
        let me = stat_of("self").unwrap();
        assert_eq!((me.name.as_str(), me.parent), ("lx\u{fffd})(", parent.pid));
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// Whether a process whose command line contains `pattern` runs (from `/proc`).
    fn alive(pattern: &str) -> bool {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(pattern))
        })
    }

    #[test]
    fn a_grandchild_holding_the_pipe_never_stretches_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let start = Instant::now();
        let o = ProcessProvider
            .run(&sh("sleep 30.25 & exec sleep 1000"), dir.path(), Duration::from_secs(1))
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
        let Observation::CommandExited { exit_code, duration_ms, .. } = o else { panic!() };
        assert_eq!(exit_code, None, "killed at the deadline");
        assert!((1000..10_000).contains(&duration_ms), "{duration_ms}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive("sleep 30.25"), "the background child dies with its group");
    }

    #[test]
    fn what_leaves_the_group_is_killed_too() {
        let dir = tempfile::tempdir().unwrap();
        let o = ProcessProvider
            .run(
                &sh("setsid sleep 614.25 >/dev/null 2>&1 & sleep 0.2; exit 0"),
                dir.path(),
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(matches!(o, Observation::CommandExited { exit_code: Some(0), .. }));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive("sleep 614.25"), "a process in a session of its own outlived the validation");
        let o = ProcessProvider
            .run(
                &sh("setsid sleep 615.25 >/dev/null 2>&1 & exec sleep 1000"),
                dir.path(),
                Duration::from_secs(1),
            )
            .unwrap();
        assert!(matches!(o, Observation::CommandExited { exit_code: None, .. }));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive("sleep 615.25"), "a process in a session of its own outlived the timeout");
    }

    #[test]
    fn what_a_passing_command_leaves_behind_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let o = ProcessProvider
            .run(&sh("sleep 613.25 >/dev/null 2>&1 & exit 0"), dir.path(), Duration::from_secs(30))
            .unwrap();
        assert!(matches!(o, Observation::CommandExited { exit_code: Some(0), .. }));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive("sleep 613.25"), "no orphan outlives the validation");
    }
}
