//! The agent command of a turn as a child process: in a process group of its own (so a
//! terminal's Ctrl-C reaches the driver, not the agent, and the whole group can be killed,
//! grandchildren included), its output read as it comes.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Which of the child's streams a piece of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A running agent command.
#[derive(Debug)]
pub struct Running {
    child: Child,
    /// Its process group (its own pid).
    pub pgid: Option<u32>,
}

/// A child's output, in pieces, until both its streams close.
pub type Output = mpsc::Receiver<(Stream, Vec<u8>)>;

/// How long a child has between the polite signal and the kill.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Starts `argv` in `cwd` with `env` added to the inherited environment and `remove` taken
/// out of it, in a new session (and process group) with no controlling terminal; writes `stdin` to it and closes it (an empty stdin when
/// `None`).
pub fn spawn(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    remove: &[&str],
    stdin: Option<Vec<u8>>,
) -> std::io::Result<(Running, Output)> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the agent command is empty"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        // What a shell started there would say (OpenCode runs its tools in `$PWD`).
        .env("PWD", cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    for k in remove {
        cmd.env_remove(k);
    }
    // A session of its own, with no controlling terminal (so also a process group of its own,
    // which `signal_group` ends): a driven command can neither take the person's terminal's
    // foreground nor push input into their shell (`TIOCSTI`).
    #[cfg(unix)]
    #[allow(unsafe_code)] // `pre_exec`: between fork and exec only `setsid`, async-signal-safe
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id();
    if let (Some(bytes), Some(mut w)) = (stdin, child.stdin.take()) {
        // A child that never reads its stdin must not hold the driver up.
        tokio::spawn(async move {
            let _ = w.write_all(&bytes).await;
            let _ = w.shutdown().await;
        });
    }
    let (tx, output) = mpsc::channel(64);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(pump(out, Stream::Stdout, tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(pump(err, Stream::Stderr, tx));
    }
    Ok((Running { child, pgid }, output))
}

async fn pump(mut r: impl AsyncRead + Unpin, stream: Stream, tx: mpsc::Sender<(Stream, Vec<u8>)>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send((stream, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

impl Running {
    /// Waits for the command itself to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Whether it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Signals its whole process group: `kill` for SIGKILL, else SIGTERM.
    pub fn signal_group(&self, kill: bool) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, kill);
        }
    }

    /// Ends the group: SIGTERM, then SIGKILL after [`KILL_GRACE`] if the command is still
    /// there, and SIGKILL for whatever it left behind in its group.
    pub async fn kill(&mut self) -> Option<ExitStatus> {
        self.signal_group(false);
        let status = match tokio::time::timeout(KILL_GRACE, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                self.signal_group(true);
                let _ = self.child.start_kill();
                self.child.wait().await.ok()
            }
        };
        self.signal_group(true);
        status
    }
}

/// Sends SIGTERM (or SIGKILL) to process group `pgid`.
pub fn signal_group(pgid: u32, kill: bool) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(pgid).ok().and_then(rustix::process::Pid::from_raw) {
        let sig = if kill { rustix::process::Signal::KILL } else { rustix::process::Signal::TERM };
        let _ = rustix::process::kill_process_group(pid, sig);
    }
    #[cfg(not(unix))]
    let _ = (pgid, kill);
}

/// The exit code and the signal of a finished child.
pub fn exit_of(status: &ExitStatus) -> (Option<i32>, Option<i32>) {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        (status.code(), status.signal())
    }
    #[cfg(not(unix))]
    (status.code(), None)
}

/// Whether process `pid` on this machine is a running `loopx drive` (a process that exists
/// and has `drive` among its arguments). Where processes cannot be looked at, any process
/// that answers a signal check counts.
pub fn is_driver(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
        return cmdline.split(|b| *b == 0).any(|a| a == b"drive");
    }
    #[cfg(unix)]
    {
        i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
    }
    #[cfg(not(unix))]
    true
}

/// Kills the process groups of the processes that still run `turn` of `agent` (what a turn
/// left running, in its group or out of it, or an agent command a driver killed with -9 left
/// behind), found by the variables the driver gave them. Returns how many processes were
/// found. Linux only; elsewhere none are found.
pub fn kill_leftovers(agent: &str, turn: &str) -> usize {
    loopx_providers::process::kill_marked(&[
        format!("LOOPX_AGENT_ID={agent}"),
        format!("LOOPX_TURN_ID={turn}"),
    ])
}
