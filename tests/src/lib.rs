#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed expectation is a failed test
//! Helpers for the end-to-end suite: a sandbox with a fake `HOME` and a cleared environment,
//! the real `loopx` binary, tree snapshots and JSON normalisation.

pub mod layering;
pub mod pg;
pub mod web;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

/// The `loopx` binary, built so the suite never runs a stale one: `LOOPX_BIN` when set (`cargo
/// xtask ci` builds it once and sets it), else built by the first test process of a nextest run
/// (the others wait on a lock and find the run's stamp), else once per test process.
pub fn loopx_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("LOOPX_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/e2e-… → target/<profile>/loopx
        let dir = exe.parent().and_then(Path::parent).expect("target directory");
        let bin = dir.join(format!("loopx{}", std::env::consts::EXE_SUFFIX));
        let Some(run) = std::env::var_os("NEXTEST_RUN_ID") else {
            build_loopx();
            return bin;
        };
        let lock = std::fs::File::create(dir.join("loopx-bin.lock")).expect("the build lock");
        // Held until `lock` drops, once the binary is there.
        lock.lock().expect("lock the build");
        let stamp = dir.join("loopx-bin.run");
        if std::fs::read(&stamp).ok().as_deref() != Some(run.as_encoded_bytes()) {
            build_loopx();
            std::fs::write(&stamp, run.as_encoded_bytes()).expect("the build stamp");
        }
        bin
    })
}

fn build_loopx() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--package", "loopx-cli", "--bin", "loopx"])
        .status()
        .expect("run cargo build for the loopx binary");
    assert!(status.success(), "cargo build of the loopx binary failed");
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    /// The stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        })
    }
}

/// In a debug build, where loopx stops looking up the process tree for an agent above it. Set
/// to this test process, loopx sees only the processes a test started: the suite passes the
/// same from a terminal, in CI and inside an agent host's shell.
pub const ANCESTRY_ROOT: &str = "LOOPX_TEST_ANCESTRY_ROOT";

/// The value of [`ANCESTRY_ROOT`]: this process.
pub fn ancestry_root() -> String {
    std::process::id().to_string()
}

/// `c` with every variable that says "an agent runs this" taken out of the environment it
/// inherits: each host's session marks and the driver's `LOOPX_AGENT_ID` and `LOOPX_TURN_ID`.
/// For a command a test runs with the machine's environment (`cargo`, the bench), whose loopx
/// processes would read those marks from their parent: the test passes the same inside an agent
/// host's shell as from a terminal.
pub fn without_agent_marks(c: &mut Command) -> &mut Command {
    for adapter in loopx_cli::registry::adapters() {
        if let Some(env) = adapter.protocol().tool_env() {
            c.env_remove(env.marker);
            if let Some(session) = env.session {
                c.env_remove(session);
            }
        }
    }
    c.env_remove("LOOPX_AGENT_ID").env_remove("LOOPX_TURN_ID")
}

/// A temporary project directory and a fake home, with nothing of the real user's.
#[derive(Debug)]
pub struct Sandbox {
    _dir: TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    /// Milliseconds the clock of every loopx this sandbox runs is moved by (debug builds): a
    /// fixture written at one time is read as it was then, not as its leases and handoffs age
    /// with the calendar; a test crosses an expiry by moving it ([`Sandbox::advance`]).
    clock_skew_ms: AtomicI64,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("loopx-test-").tempdir().expect("tempdir");
        let root = dir.path().join("project");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).expect("project dir");
        std::fs::create_dir_all(&home).expect("home dir");
        Self { _dir: dir, root, home, clock_skew_ms: AtomicI64::new(0) }
    }

    /// Moves the clock of every loopx this sandbox runs from now on `by` later (debug builds):
    /// a lease, a handoff or a reminder comes due without the test sleeping for it.
    pub fn advance(&self, by: Duration) {
        self.clock_skew_ms
            .fetch_add(i64::try_from(by.as_millis()).expect("a test's duration"), Ordering::Relaxed);
    }

    /// A command for the binary: cleared environment, fake `HOME`, working directory = project.
    pub fn command(&self) -> Command {
        self.environment(Command::new(loopx_bin()))
    }

    /// `c` with the sandbox's environment and nothing of the machine's but `PATH`.
    pub fn environment(&self, c: Command) -> Command {
        sandboxed(c, &self.home, &self.root, self.clock_skew_ms.load(Ordering::Relaxed))
    }

    /// Runs loopx here as the person, from any thread (a fake model's, between two turns).
    pub fn person(&self) -> impl Fn(&[&str]) -> Run + Send + Sync + 'static {
        let (home, root) = (self.home.clone(), self.root.clone());
        let skew = self.clock_skew_ms.load(Ordering::Relaxed);
        move |args| {
            let mut c = sandboxed(Command::new(loopx_bin()), &home, &root, skew);
            Run::from(c.args(args).output().expect("run loopx"))
        }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command().args(args).output().expect("run loopx"))
    }

    /// `loopx <args>` on a terminal of its own (a pseudo-terminal, through `script`), with
    /// `typed` typed into it: how a test answers a prompt that reads the terminal, never stdin
    /// (the person key's passphrase). The run's output is the terminal's: prompts, echoed
    /// input and both streams, in order.
    pub fn on_terminal(&self, args: &[&str], typed: &str) -> Run {
        use std::io::Write;
        let line = std::iter::once(loopx_bin().display().to_string())
            .chain(args.iter().map(|a| (*a).to_owned()))
            .collect::<Vec<_>>();
        let mut child = self
            .environment(Command::new("script"))
            .args(["-qec", &shell_words::join(&line), "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run script (util-linux) for a terminal");
        child.stdin.take().expect("stdin").write_all(typed.as_bytes()).expect("type");
        Run::from(child.wait_with_output().expect("wait for script"))
    }

    /// `sh -c <line>` run by a stand-in for a host's agent process: a program called `host`
    /// (`claude`, `codex`) that runs its arguments as its child and waits, as a host runs its
    /// shell tool. Its environment is the sandbox's, with loopx on `PATH`: loopx can know the
    /// host only by who started the line.
    pub fn under_host(&self, host: &str, line: &str) -> Run {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.root.parent().expect("the sandbox").join("hosts");
        std::fs::create_dir_all(&dir).expect("hosts dir");
        let program = dir.join(host);
        std::fs::write(&program, "#!/bin/sh\n\"$@\"\n").expect("write the stand-in host");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let bin = loopx_bin().parent().expect("the binary's directory").to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let out =
            self.environment(Command::new(&program)).env("PATH", path).args(["sh", "-c", line]).output();
        Run::from(out.expect("run the stand-in host"))
    }

    pub fn run_in(&self, dir: &Path, args: &[&str]) -> Run {
        Run::from(self.command().current_dir(dir).args(args).output().expect("run loopx"))
    }

    /// Runs and asserts success.
    pub fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "loopx {args:?} failed:\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
        r
    }

    /// Runs in `dir` and asserts success.
    pub fn ok_in(&self, dir: &Path, args: &[&str]) -> Run {
        let r = self.run_in(dir, args);
        assert_eq!(r.code, 0, "loopx {args:?} in {}:\n{}\n{}", dir.display(), r.stdout, r.stderr);
        r
    }

    /// Runs with `--json`, asserts success, returns the document.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        self.ok(&a).json()
    }

    /// Runs and asserts the exit code; returns the run.
    pub fn fails(&self, code: i32, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(
            r.code, code,
            "loopx {args:?}: expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            r.stdout, r.stderr
        );
        r
    }

    /// Runs `loopx <args>` with `stdin` and extra environment variables.
    pub fn run_with(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
        use std::io::Write;
        let mut cmd = self.command();
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("run loopx");
        let mut input = child.stdin.take().expect("stdin");
        let bytes = stdin.to_vec();
        let writer = std::thread::spawn(move || input.write_all(&bytes));
        let out = child.wait_with_output().expect("wait for loopx");
        let _ = writer.join();
        Run::from(out)
    }

    /// `loopx init --goal-id main --objective …`.
    pub fn init(&self) {
        self.ok(&["init", "--goal-id", "main", "--objective", "ship the feature"]);
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join(".loopx")
    }

    pub fn events_path(&self, goal: &str) -> PathBuf {
        self.state_dir().join("goals").join(goal).join("events.jsonl")
    }

    /// What a person does to accept a log cut back on purpose (or by `doctor --repair`): removes
    /// this machine's record of each goal's head, as the refusal says.
    pub fn forget_heads(&self) {
        let dir = self.home.join(".config/loopx/heads");
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                std::fs::remove_file(p).unwrap();
            }
        }
    }

    /// Every file under the project with its bytes. Lock files are left out: they hold only
    /// the stamp of the last process that took the lock, which is not state.
    pub fn tree(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out);
        out
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if p.file_name().is_some_and(|n| n != "lock") {
            let rel = p.strip_prefix(base).expect("under base").to_string_lossy().replace('\\', "/");
            out.insert(rel, std::fs::read(&p).expect("read file"));
        }
    }
}

/// Replaces values that change from run to run (times) so JSON can be snapshot-tested.
pub fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::String(s) if looks_like_time(s) => Value::String("[time]".to_owned()),
        other => other.clone(),
    }
}

fn looks_like_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && s.ends_with('Z')
}

/// A sandbox holding a copy of the `.loopx/` of fixture `name` (`tests/fixtures/NAME/loopx`,
/// written by an earlier loopx), and the directory of what that loopx printed for it.
pub fn fixture_project(name: &str) -> (Sandbox, PathBuf) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    let s = Sandbox::new();
    copy_dir(&fixture.join("loopx"), &s.state_dir());
    // Its loopx runs a minute after the fixture's last event: what it reads as before is what
    // that release read then, whatever today's date.
    let last = last_event_at(&s.state_dir().join("goals"));
    let now = loopx_core::Timestamp::from_system_time(std::time::SystemTime::now());
    s.clock_skew_ms.store(last.unix_millis() + 60_000 - now.unix_millis(), Ordering::Relaxed);
    (s, fixture.join("expected"))
}

/// The latest `at` of the event logs under `goals`.
fn last_event_at(goals: &Path) -> loopx_core::Timestamp {
    std::fs::read_dir(goals)
        .expect("read a fixture's goals")
        .flatten()
        .flat_map(|g| events(&g.path().join("events.jsonl")))
        .map(|e| {
            loopx_core::Timestamp::parse_rfc3339(e["at"].as_str().expect("an event's at")).expect("RFC 3339")
        })
        .max()
        .expect("a fixture with events")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for e in std::fs::read_dir(from).expect("read a fixture directory").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy a fixture file");
        }
    }
}

/// The JSON file `name` in a fixture's `expected` directory.
pub fn expected(dir: &Path, name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(name)).expect("read an expected file"))
        .expect("expected JSON")
}

/// Reads the event log lines as JSON, each as it reads ([`event`]).
pub fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).expect("read events").lines().map(event).collect()
}

/// A log line as it reads: its records with the time, agent and turn they leave out when the
/// line gives them (see `loopx_core::line`) filled back in.
pub fn event(line: &str) -> Value {
    let mut raw: Value = serde_json::from_str(line).expect("event line is JSON");
    let read: loopx_kernel::log::EventLine = serde_json::from_str(line).expect("event line decodes");
    let whole = serde_json::to_value(&read.event).expect("event encodes");
    raw["data"] = whole["data"].clone();
    raw
}

/// A sandbox whose project directory is a copy of the LoopX (Python) fixture project
/// (`tests/fixtures/loopx-py/project`, made by the real LoopX 0.4.9: `make.sh`, which this
/// runs first when the fixture is missing), and the directory of what LoopX reported for it.
pub fn loopx_py_fixture() -> (Sandbox, PathBuf) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("loopx-py");
    if !fixture.join("project").is_dir() {
        let made = Command::new("bash").arg(fixture.join("make.sh")).status().expect("run make.sh");
        assert!(made.success(), "making the LoopX (Python) fixture failed");
    }
    let s = Sandbox::new();
    copy_dir(&fixture.join("project"), &s.root);
    (s, fixture.join("expected"))
}

/// `c` with a sandbox's environment (`home`, `root`, its clock's skew) and nothing of the
/// machine's but `PATH`.
fn sandboxed(mut c: Command, home: &Path, root: &Path, skew: i64) -> Command {
    c.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env(ANCESTRY_ROOT, ancestry_root())
        .current_dir(root);
    if skew != 0 {
        c.env("LOOPX_TEST_CLOCK_SKEW_MS", skew.to_string());
    }
    c
}
