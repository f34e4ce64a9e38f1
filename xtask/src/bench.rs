//! `cargo xtask bench`: fresh-process timings of the `loopx` binary, the way hosts call it.
//!
//! Fixtures are built in a temporary directory: goals are created with the real binary, and
//! large goals are filled through the kernel's `bulk_append` from events the kernel's own rules
//! produce (one fsync for the batch), so a 100,000-event goal takes seconds, not minutes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use loopx_core::GoalId;
use loopx_core::kernel::{AddTodo, CompleteTodo, NewEvidence};
use loopx_core::model::{EvidenceKind, Priority, Role, TodoClass};
use loopx_kernel::rules::{self, Actor};
use loopx_kernel::{FileStore, Silent, StoreOptions, SystemClock};

/// What to run.
#[derive(Debug, Default)]
pub struct Options {
    pub quick: bool,
    pub json: Option<PathBuf>,
    /// Use this binary instead of building the release one (for the bench's own test).
    pub bin: Option<PathBuf>,
    /// Only `loopx drive`'s own measurements (`--drive`).
    pub drive_only: bool,
    /// Only the hook answers (`--hooks`).
    pub hooks_only: bool,
    /// Only `loopx report` on long goals (`--report`).
    pub report_only: bool,
    /// Only start-up against `should-run` on a long goal (`--startup`).
    pub startup_only: bool,
    /// Other binaries timed in the same rounds (`--against`): their `--version` and
    /// `should-run` with `--startup`, their hook answers with `--hooks`.
    pub against: Vec<PathBuf>,
}

/// Timings of one measurement, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Stat {
    pub name: String,
    pub runs: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// Peak resident memory over the runs, in KiB (Linux; an upper bound: it includes the
    /// few MiB of the launching process's image, which the kernel counts at exec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rss_kib: Option<u64>,
}

/// One line of the throughput table.
#[derive(Debug, Serialize)]
pub struct Throughput {
    /// `file` or `postgres`.
    pub store: &'static str,
    /// `commands` (a fresh `loopx` process a mutation, as hooks run it) or `mcp` (one
    /// long-lived `loopx mcp` server a process, as a host runs it, each call a mutation).
    pub client: &'static str,
    pub processes: usize,
    pub mutations: usize,
    pub per_second: f64,
    pub lock_wait_p50_ms: f64,
    pub lock_wait_p99_ms: f64,
    pub lock_hold_p50_ms: f64,
    pub lock_hold_p99_ms: f64,
    pub busy_retries: usize,
}

/// The whole report (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub commit: String,
    pub cores: usize,
    pub quick: bool,
    pub timings: Vec<Stat>,
    pub throughput: Vec<Throughput>,
    pub sizes: BTreeMap<String, u64>,
    pub claim_race: ClaimRace,
    /// The claim race on the PostgreSQL store: eight projects ("machines") on one database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_race_postgres: Option<ClaimRace>,
    /// Why the PostgreSQL rows are missing, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_skipped: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ClaimRace {
    pub trials: usize,
    pub processes: Vec<usize>,
    pub trials_per_second: f64,
    pub double_winners: usize,
    pub no_winner: usize,
}

/// The decision every bench goal is asked for.
const SHOULD_RUN: &[&str] = &["quota", "should-run", "--agent-id", "a", "--json"];
/// Where each bench project keeps its goal.
const GOAL_DIR: &str = ".loopx/goals/main";

struct Bench {
    bin: PathBuf,
    dir: tempfile::TempDir,
    projects: usize,
}

/// The bench's own home: what loopx keeps in the user's configuration (the projects index, the
/// stores trusted) goes there, never into the home of whoever runs the bench.
static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// What the bench's loopx processes keep of the environment it runs in: where programs are,
/// where temporary files go, and (debug builds, the tests) where loopx stops looking up the
/// process tree. Nothing else: a session's or a driven turn's marks, a `LOOPX_*` setting or a
/// locale would change what is measured.
const KEPT_VARS: &[&str] = &["PATH", "TMPDIR", "LOOPX_TEST_ANCESTRY_ROOT"];

/// A command for the binary, with the bench's home and nothing else of the environment but
/// [`KEPT_VARS`].
fn loopx_command(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear().envs(KEPT_VARS.iter().filter_map(|k| Some((k, std::env::var_os(k)?))));
    if let Some(home) = HOME.get() {
        cmd.env("HOME", home);
    }
    cmd
}

/// Runs one fresh process; returns its wall time, exit code, stdout and peak RSS.
fn run_once(
    bin: &Path,
    cwd: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(Duration, i32, String, String, Option<u64>)> {
    run_with_input(bin, cwd, args, env, None)
}

/// [`run_once`] with stdin read from `input` (a hook's JSON).
fn run_with_input(
    bin: &Path,
    cwd: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: Option<&Path>,
) -> Result<(Duration, i32, String, String, Option<u64>)> {
    let stdin = match input {
        Some(p) => Stdio::from(std::fs::File::open(p)?),
        None => Stdio::null(),
    };
    let start = Instant::now();
    let mut cmd = loopx_command(bin);
    cmd.args(args).current_dir(cwd).stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", bin.display()))?;
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let (code, rss) = wait_with_rusage(child.id())?;
    let elapsed = start.elapsed();
    Ok((elapsed, code, out.join().unwrap_or_default(), err.join().unwrap_or_default(), rss))
}

/// Reaps `pid` with `wait4`, returning its exit code (-1 for a signal) and peak RSS in KiB.
#[allow(unsafe_code)]
fn wait_with_rusage(pid: u32) -> Result<(i32, Option<u64>)> {
    let pid = libc::pid_t::try_from(pid)?;
    let mut status: libc::c_int = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `status` and `usage` point to writable memory of the types wait4 fills; the
    // child is ours and has not been reaped (std's `Child` is never waited on).
    let got = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
    if got != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    // SAFETY: wait4 returned the pid, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    Ok((code, u64::try_from(usage.ru_maxrss).ok()))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn stat(name: &str, mut ms: Vec<f64>, rss: Option<u64>) -> Stat {
    ms.sort_by(f64::total_cmp);
    Stat {
        name: name.to_owned(),
        runs: ms.len(),
        min_ms: ms.first().copied().unwrap_or(0.0),
        p50_ms: pct(&ms, 0.5),
        p95_ms: pct(&ms, 0.95),
        max_ms: ms.last().copied().unwrap_or(0.0),
        max_rss_kib: rss,
    }
}

impl Bench {
    fn ok(&self, cwd: &Path, args: &[&str]) -> Result<String> {
        let (_, code, out, err, _) = run_once(&self.bin, cwd, args, &[])?;
        if code != 0 {
            bail!("loopx {args:?} failed ({code}): {err}");
        }
        Ok(out)
    }

    /// A fresh project with goal `main` and agent `a`.
    fn project(&mut self, name: &str) -> Result<PathBuf> {
        self.project_in(name, None)
    }

    /// [`Bench::project`], kept in project `ns` of the database at `url` when given.
    fn project_in(&mut self, name: &str, db: Option<(&str, &str)>) -> Result<PathBuf> {
        let root = self.machine(name, db)?;
        self.ok(&root, &["init", "--goal-id", "main", "--objective", "benchmark"])?;
        self.ok(&root, &["agent", "register", "--agent-id", "a", "--agent-type", "codex-app"])?;
        Ok(root)
    }

    /// A project directory, pointed at project `ns` of the database at `url` when given.
    fn machine(&mut self, name: &str, db: Option<(&str, &str)>) -> Result<PathBuf> {
        self.projects += 1;
        let root = self.dir.path().join(format!("{}-{name}", self.projects));
        std::fs::create_dir_all(&root)?;
        if let Some((url, ns)) = db {
            self.ok(&root, &["init", "--store", url, "--store-project", ns])?;
        }
        Ok(root)
    }

    /// Measures `args` as fresh processes: `warmup` unrecorded runs, then `runs`.
    fn measure(&self, name: &str, cwd: &Path, args: &[&str], warmup: usize, runs: usize) -> Result<Stat> {
        self.measure_input(name, cwd, args, None, warmup, runs)
    }

    /// [`Bench::measure`] with stdin from a file (a hook's input, as the host sends it).
    fn measure_input(
        &self,
        name: &str,
        cwd: &Path,
        args: &[&str],
        input: Option<&Path>,
        warmup: usize,
        runs: usize,
    ) -> Result<Stat> {
        for _ in 0..warmup {
            run_with_input(&self.bin, cwd, args, &[], input)?;
        }
        let mut ms = Vec::with_capacity(runs);
        let mut rss = None;
        for _ in 0..runs {
            let (t, code, _, err, r) = run_with_input(&self.bin, cwd, args, &[], input)?;
            if code != 0 {
                bail!("{name}: loopx {args:?} failed ({code}): {err}");
            }
            ms.push(t.as_secs_f64() * 1e3);
            rss = rss.max(r);
        }
        Ok(stat(name, ms, rss))
    }
}

fn store(root: &Path) -> Result<FileStore> {
    Ok(FileStore::open(root, Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())?)
}

/// Every string in `v` equal to a key of `swap`, replaced by its value.
fn swap_strings(v: &mut serde_json::Value, swap: &[(String, String)]) {
    match v {
        serde_json::Value::String(s) => {
            if let Some((_, to)) = swap.iter().find(|(from, _)| from == s) {
                *s = to.clone();
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| swap_strings(x, swap)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| swap_strings(x, swap)),
        _ => {}
    }
}

/// Every host's hook answers, from its adapter's own samples (what the host writes to each
/// hook's stdin), on a goal with 1,000 todos: each sample's directory and session become this
/// project and a session of the bench's, joined and armed first through the host's entry
/// command where it has one. Each host starts on a goal of its own: the prompts and stops of
/// the hosts measured before it would otherwise have grown the goal it is measured on (a host's
/// prompt adds a todo each time it answers). Each answer is checked against the host's
/// protocol. Each binary of `against` answers the same samples in the same rounds, run by run
/// after the bench's own, so a machine whose speed wanders in a sitting moves both alike.
fn hooks(b: &mut Bench, against: &[PathBuf], warm: usize, runs: usize) -> Result<Vec<Stat>> {
    use loopx_core::host::{HostAnswer, HostEventKind};

    // The stop driver commits a continuation each time: give it a cap it never reaches.
    let env = [("LOOPX_STOP_CAP", "100000")];
    let bins: Vec<PathBuf> = std::iter::once(&b.bin).chain(against).cloned().collect();
    let mut out = Vec::new();
    for a in loopx_cli::registry::adapters() {
        let host = a.host();
        let root = b.project(&format!("hooks-{host}"))?;
        fixture("todos", &root, 1_000)?;
        let samples = a.protocol().samples();
        let input = |i: usize, s: &loopx_core::host::HookSample, prompt: Option<&str>| -> Result<PathBuf> {
            let mut swap = vec![(s.expected.session.clone(), format!("bench-{host}"))];
            if let Some(cwd) = &s.expected.cwd {
                swap.push((cwd.display().to_string(), root.display().to_string()));
            }
            if let (Some(p), HostEventKind::PromptSubmitted { prompt: was }) = (prompt, &s.expected.kind) {
                swap.push((was.clone(), p.to_owned()));
            }
            let mut v: serde_json::Value = serde_json::from_str(&s.stdin)?;
            swap_strings(&mut v, &swap);
            let path = root.join(format!("{host}-{i}-{}.json", s.event));
            std::fs::write(&path, v.to_string())?;
            Ok(path)
        };
        let join = samples.iter().find(|s| matches!(s.expected.kind, HostEventKind::PromptSubmitted { .. }));
        if let (Some(cmd), Some(s)) = (a.entry_command(), join) {
            let args = ["hook", host, s.event];
            let (_, code, _, err, _) =
                run_with_input(&b.bin, &root, &args, &env, Some(&input(0, s, Some(cmd))?))?;
            if code != 0 {
                bail!("joining from {host}: {err}");
            }
        }
        for (i, s) in samples.iter().enumerate() {
            let file = input(i, s, None)?;
            let args = ["hook", host, s.event];
            let point = a.protocol().hook_point(s.event)?;
            let same_event = samples.iter().filter(|x| x.event == s.event).count() > 1;
            let name = if same_event {
                format!("hook {host} {} #{}, 1000 todos", s.event, i + 1)
            } else {
                format!("hook {host} {}, 1000 todos", s.event)
            };
            for _ in 0..warm {
                for bin in &bins {
                    run_with_input(bin, &root, &args, &env, Some(&file))?;
                }
            }
            let mut ms = vec![Vec::with_capacity(runs); bins.len()];
            let mut rss = vec![None; bins.len()];
            for _ in 0..runs {
                for (j, bin) in bins.iter().enumerate() {
                    let (t, exit_code, stdout, stderr, r) =
                        run_with_input(bin, &root, &args, &env, Some(&file))?;
                    a.protocol()
                        .check_answer(Some(point), &HostAnswer { stdout, stderr: stderr.clone(), exit_code })
                        .map_err(|e| {
                            anyhow::anyhow!(
                                "{name} ({}): not an answer {host} takes: {} ({stderr})",
                                bin.display(),
                                e.message
                            )
                        })?;
                    ms[j].push(t.as_secs_f64() * 1e3);
                    rss[j] = rss[j].max(r);
                }
            }
            for (j, (ms, rss)) in ms.into_iter().zip(rss).enumerate() {
                let name = if j == 0 { name.clone() } else { format!("{name}: {}", bins[j].display()) };
                out.push(stat(&name, ms, rss));
            }
        }
    }
    Ok(out)
}

/// Builds a fixture in a child process (`xtask bench-fixture …`), so this process stays
/// small: on Linux a child's peak RSS includes the image of the process that launched it.
fn fixture(kind: &str, root: &Path, n: u64) -> Result<()> {
    let status = Command::new(std::env::current_exe()?)
        .arg("bench-fixture")
        .arg(kind)
        .arg(root)
        .arg(n.to_string())
        .status()?;
    if !status.success() {
        bail!("building the {kind} fixture failed");
    }
    Ok(())
}

/// Cycles of `testkit::story` played through the kernel for the report's fixtures, one in
/// [`STORY_WHOLE_EVERY`] whole (a question, a timer, a pause, a handoff), the others turns only.
const STORY_CYCLES: u64 = 1_000;
const STORY_WHOLE_EVERY: usize = 1_000;

/// `loopx report` on goals of the story's shape, 100,000 and 1,000,000 events long.
fn reports(b: &Bench, quick: bool) -> Result<(Vec<Stat>, BTreeMap<String, u64>)> {
    let lengths: &[u64] = if quick { &[2_000] } else { &[100_000, 1_000_000] };
    let (mut timings, mut sizes) = (Vec::new(), BTreeMap::new());
    for &n in lengths {
        eprintln!("xtask: loopx report on {n} events");
        let root = b.dir.path().join(format!("report{n}"));
        std::fs::create_dir_all(&root)?;
        fixture("story", &root, n)?;
        let log = root.join(".loopx/goals/shaped/events.jsonl");
        sizes.insert(format!("report: log bytes, {n}-event goal"), std::fs::metadata(&log)?.len());
        let runs = if n >= 1_000_000 { 5 } else { 10 };
        timings.push(b.measure(&format!("report, {n} events"), &root, &["report", "--json"], 1, runs)?);
        let svg = root.join("picture.svg");
        let args = ["report", "--svg", svg.to_str().unwrap_or_default()];
        timings.push(b.measure(&format!("report with its picture, {n} events"), &root, &args, 0, runs)?);
        sizes.insert(format!("report: picture bytes, {n}-event goal"), std::fs::metadata(&svg)?.len());
    }
    Ok((timings, sizes))
}

/// A goal of the story's shape `n` events long: [`STORY_CYCLES`] cycles played through the real
/// kernel, then — a commit through the kernel costs milliseconds, and a million of them an
/// hour — their lines after the goal's set-up repeated, each copy later by the cycles' length,
/// numbered on and chained to the line before as the kernel chains them, until the log has `n`
/// lines. The copies repeat their ids, so only a reader of the log (the report) takes them: a
/// command that replays the goal refuses it.
fn story_fixture(root: &Path, n: u64) -> Result<()> {
    use loopx_kernel::log::{EventLine, GENESIS, line_hash};
    use std::io::Write;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // A quiet cycle is 13 events.
    let cycles = usize::try_from(STORY_CYCLES.min(n / 13 + 1))?;
    let shape = loopx_testkit::story::Shape { cycles, whole_every: STORY_WHOLE_EVERY };
    rt.block_on(loopx_testkit::story::into_project_at_once(root, shape))?;
    let path = root.join(".loopx/goals/shaped/events.jsonl");
    let text = std::fs::read_to_string(&path)?;
    let lines: Vec<EventLine> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let setup = lines.iter().position(|l| l.event.kind() == "todo_added").unwrap_or(0);
    let block = &lines[setup..];
    let (first, last) = (block[0].at.unix_millis(), lines[lines.len() - 1].at.unix_millis());
    let span = last - first + i64::try_from(loopx_testkit::story::IDLE_MINUTES * 60_000)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut prev = GENESIS.to_owned();
    let mut seq = 0u64;
    for (copy, line) in
        lines[..setup].iter().map(|l| (0, l)).chain((0..).flat_map(|c| block.iter().map(move |l| (c, l))))
    {
        if seq == n {
            break;
        }
        seq += 1;
        let mut l = line.clone();
        l.seq = seq;
        l.at = loopx_core::Timestamp::from_unix_millis(l.at.unix_millis() + span * copy);
        l.prev = prev;
        l.root = None;
        let encoded = serde_json::to_string(&l)?;
        prev = line_hash(encoded.as_bytes());
        out.write_all(encoded.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// `xtask bench-fixture todos|closed|history|story DIR N`.
pub fn build_fixture(args: &[String]) -> Result<()> {
    let [kind, dir, n] = args else { bail!("usage: xtask bench-fixture todos|closed|history|story DIR N") };
    let (root, n) = (Path::new(dir), n.parse::<u64>()?);
    match kind.as_str() {
        "story" => story_fixture(root, n),
        "todos" => add_todos(root, usize::try_from(n)?),
        "closed" => close_todos(root, usize::try_from(n)?),
        "history" => grow_history(root, n),
        other => bail!("unknown fixture {other:?}"),
    }
}

/// Adds `n` todos to goal `main` in one batch.
fn add_todos(root: &Path, n: usize) -> Result<()> {
    let goal = GoalId::new("main")?;
    let mut left = n;
    store(root)?.bulk_append(&goal, "user", &mut |state| {
        if left == 0 {
            return Ok(None);
        }
        left -= 1;
        rules::add_todo(state, &bench_todo(n - left, left % 4)).map(Some)
    })?;
    Ok(())
}

/// Bench todo number `k`, of priority P`p`.
fn bench_todo(k: usize, p: usize) -> AddTodo {
    AddTodo {
        text: format!("todo number {k} with a realistic line of descriptive text"),
        priority: [Priority::P0, Priority::P1, Priority::P2, Priority::P3][p % 4],
        role: Role::Agent,
        class: TodoClass::Advance,
        scopes: vec![],
        after_gate: None,
        validation: None,
    }
}

/// Adds `n` todos to goal `main` and completes nine in ten of them as agent `a` (claimed, then
/// completed with one piece of evidence), in the order a long-running goal would: a goal whose
/// history is mostly closed work.
fn close_todos(root: &Path, n: usize) -> Result<()> {
    let goal = GoalId::new("main")?;
    let agent = Actor::Agent(loopx_core::AgentId::new("a")?);
    let at = loopx_core::Timestamp::from_unix_millis(0);
    // Per todo: add it; then, for nine in ten, claim it and complete it.
    let (mut made, mut step) = (0usize, 0u8);
    store(root)?.bulk_append(&goal, "a", &mut |state| {
        let last = state.next_todo_id(0).number().saturating_sub(1);
        let last = loopx_core::TodoId::from_number(last);
        match step {
            0 if made == n => Ok(None),
            0 => {
                made += 1;
                step = if made % 10 == 0 { 0 } else { 1 };
                rules::add_todo(state, &bench_todo(made, made)).map(Some)
            }
            1 => {
                step = 2;
                rules::claim(state, &agent, last, at)
            }
            _ => {
                step = 0;
                let req = CompleteTodo {
                    todo: last,
                    evidence: Some(NewEvidence {
                        kind: EvidenceKind::Test,
                        summary: format!("tests pass for {last}"),
                        command: None,
                        exit_code: Some(0),
                        link: None,
                    }),
                    no_follow_up: false,
                    note: None,
                    next_todo: None,
                };
                rules::complete(state, &agent, &req, None, at)
            }
        }
    })?;
    Ok(())
}

/// Grows goal `main` to `n` events with claim/release pairs on its todos.
fn grow_history(root: &Path, n: u64) -> Result<()> {
    let goal = GoalId::new("main")?;
    let agent = Actor::Agent(loopx_core::AgentId::new("a")?);
    store(root)?.bulk_append(&goal, "a", &mut |state| {
        if state.seq >= n {
            return Ok(None);
        }
        let nth = usize::try_from(state.seq).unwrap_or(0) % state.todos.len();
        let t = state
            .todos
            .keys()
            .nth(nth)
            .map(|k| k.id)
            .ok_or_else(|| loopx_core::Error::internal("no todo"))?;
        let event = match state.todo(t).and_then(|t| t.claimed_by.clone()) {
            Some(_) => rules::release(state, &agent, t, loopx_core::Timestamp::from_unix_millis(0))?,
            None => rules::claim(state, &agent, t, loopx_core::Timestamp::from_unix_millis(0))?,
        };
        event.map(Some).ok_or_else(|| loopx_core::Error::internal("a claim or release changed nothing"))
    })?;
    Ok(())
}

fn json_field(out: &str, pointer: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(out)?;
    v.pointer(pointer)
        .and_then(|x| x.as_str())
        .map(str::to_owned)
        .with_context(|| format!("no {pointer} in {out}"))
}

/// The last `n` bytes of the file at `path` (its first line may be cut).
fn log_tail(path: &Path, n: u64) -> Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(n)))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// What a mutation writes: the log's and the archive's growth, and the views it rewrites
/// (snapshot.json and GOAL.md, whole).
/// (A project kept in a database writes no file: 0.)
fn written(root: &Path, before: (u64, u64)) -> Result<u64> {
    let dir = root.join(GOAL_DIR);
    let (log, archive) = appended(root)?;
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    Ok(log - before.0 + archive - before.1 + size("snapshot.json") + size("GOAL.md"))
}

/// The sizes of the log and the archive.
fn appended(root: &Path) -> Result<(u64, u64)> {
    let dir = root.join(GOAL_DIR);
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    Ok((size("events.jsonl"), size("archive.jsonl")))
}

/// The five-command tick, `runs` times, each command timed; with the mean bytes written per
/// mutation.
fn ticks(b: &Bench, root: &Path, label: &str, runs: usize) -> Result<(Vec<Stat>, u64)> {
    let names = ["should-run", "claim", "complete", "refresh-state", "spend-slot", "whole tick"];
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut rss = None;
    let mut bytes: Vec<u64> = Vec::new();
    for i in 0..runs {
        let slug: String = label.chars().filter(char::is_ascii_alphanumeric).collect();
        let turn = format!("bench-{slug}-{i}");
        let start = Instant::now();
        let mut timed = |k: usize, args: Vec<&str>| -> Result<String> {
            let before = appended(root)?;
            let (t, code, out, err, r) = run_once(&b.bin, root, &args, &[])?;
            if code != 0 {
                bail!("tick {i}: loopx {args:?} failed: {err}");
            }
            ms[k].push(t.as_secs_f64() * 1e3);
            rss = rss.max(r);
            bytes.push(written(root, before)?);
            Ok(out)
        };
        let out =
            timed(0, vec!["quota", "should-run", "--agent-id", "a", "--turn-instance-id", &turn, "--json"])?;
        let todo = json_field(&out, "/selected_todo/id")?;
        let t = ["--todo-id", todo.as_str(), "--agent-id", "a", "--turn-instance-id", turn.as_str()];
        timed(1, [&["todo", "claim"][..], &t].concat())?;
        timed(2, [&["todo", "complete"][..], &t, &["--evidence", "bench"]].concat())?;
        timed(
            3,
            [
                &["refresh-state"][..],
                &t,
                &["--classification", "bench", "--delivery-outcome", "outcome_progress"],
            ]
            .concat(),
        )?;
        timed(4, [&["quota", "spend-slot"][..], &t].concat())?;
        ms[5].push(start.elapsed().as_secs_f64() * 1e3);
    }
    let per = bytes.iter().sum::<u64>() / (bytes.len() as u64).max(1);
    Ok((names.iter().zip(ms).map(|(n, v)| stat(&format!("tick {label}: {n}"), v, rss)).collect(), per))
}

/// One HTTP/1.1 GET on a fresh connection, as a browser's first request for a page: the
/// status and the body.
fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(conn, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    conn.read_to_string(&mut raw)?;
    let status = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, raw.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default()))
}

/// `loopx serve` on goals of 10,000 todos: the goal page (its first page of todos) and the
/// inbox, each a whole HTTP request on a fresh connection, the first load (nothing cached)
/// apart from the rest.
fn dashboard(b: &mut Bench, n: usize, warm: usize, runs: usize) -> Result<Vec<Stat>> {
    use std::io::BufRead;
    let mut out = Vec::new();
    for (kind, label) in [("closed", format!("{n} todos (90 % closed)")), ("todos", format!("{n} todos"))] {
        let root = b.project(&format!("dash-{kind}"))?;
        fixture(kind, &root, n as u64)?;
        let mut child = loopx_command(&b.bin)
            .args(["serve", "--port", "0", "--json"])
            .current_dir(&root)
            .env("HOME", b.dir.path())
            .env_remove("XDG_CONFIG_HOME")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let port = u16::try_from(v["port"].as_u64().context("no port")?)?;
        let token = v["url"].as_str().and_then(|u| u.split("token=").nth(1)).context("no token")?;
        // The token rides in every request's query, as the page's own links carry it.
        let home = format!("/?token={token}");
        let measured = (|| -> Result<Vec<Stat>> {
            let start = Instant::now();
            let (code, inbox) = http_get(port, &home)?;
            let inbox_first = start.elapsed().as_secs_f64() * 1e3;
            let href =
                inbox.split("href=\"").find(|h| h.starts_with("/p/")).and_then(|h| h.split('"').next());
            let page = href.context("no goal on the inbox")?.to_owned();
            if code != 200 {
                bail!("the inbox answered {code}");
            }
            let time = |path: &str| -> Result<f64> {
                let start = Instant::now();
                let (code, body) = http_get(port, path)?;
                if code != 200 || !body.contains("kanban") && path != home {
                    bail!("{path} answered {code}");
                }
                Ok(start.elapsed().as_secs_f64() * 1e3)
            };
            let first = time(&page)?;
            for _ in 0..warm {
                time(&page)?;
            }
            let goal: Vec<f64> = (0..runs).map(|_| time(&page)).collect::<Result<_>>()?;
            let inbox: Vec<f64> = (0..runs).map(|_| time(&home)).collect::<Result<_>>()?;
            Ok(vec![
                stat(&format!("dashboard goal page, {label}: first load"), vec![first], None),
                stat(&format!("dashboard goal page, {label}"), goal, None),
                stat(&format!("dashboard inbox, {label}: first load"), vec![inbox_first], None),
                stat(&format!("dashboard inbox, {label}"), inbox, None),
            ])
        })();
        let _ = child.kill();
        let _ = child.wait();
        out.extend(measured?);
    }
    Ok(out)
}

/// Waits for every worker; the first failure, or a panic, is the result.
fn join(handles: Vec<std::thread::ScopedJoinHandle<'_, Result<()>>>) -> Result<()> {
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
    }
    Ok(())
}

/// `total` todo adds from `procs` processes at once on the project at `root`.
fn throughput(b: &Bench, root: &Path, store: &'static str, procs: usize, total: usize) -> Result<Throughput> {
    let root = root.to_path_buf();
    let per = total / procs;
    let waits = Arc::new(Mutex::new((Vec::new(), Vec::new(), 0usize)));
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let mut handles = Vec::new();
        for w in 0..procs {
            let (root, waits, bin) = (root.clone(), waits.clone(), b.bin.clone());
            handles.push(scope.spawn(move || -> Result<()> {
                for i in 0..per {
                    loop {
                        let text = format!("w{w} m{i}");
                        let (_, code, _, err, _) = run_once(
                            &bin,
                            &root,
                            &["todo", "add", "--text", &text],
                            &[("LOOPX_TIMINGS", "1")],
                        )?;
                        let mut g = waits.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                        if code == 3 {
                            g.2 += 1;
                            continue;
                        }
                        if code != 0 {
                            bail!("todo add failed: {err}");
                        }
                        if let Some(line) = err.lines().find(|l| l.starts_with("timing: lock on goal")) {
                            let nums: Vec<f64> =
                                line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                            if let [wait, hold] = nums[..] {
                                g.0.push(wait);
                                g.1.push(hold);
                            }
                        }
                        break;
                    }
                }
                Ok(())
            }));
        }
        join(handles)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut g = waits.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    g.0.sort_by(f64::total_cmp);
    g.1.sort_by(f64::total_cmp);
    Ok(Throughput {
        store,
        client: "commands",
        processes: procs,
        mutations: per * procs,
        per_second: (per * procs) as f64 / elapsed,
        lock_wait_p50_ms: pct(&g.0, 0.5),
        lock_wait_p99_ms: pct(&g.0, 0.99),
        lock_hold_p50_ms: pct(&g.1, 0.5),
        lock_hold_p99_ms: pct(&g.1, 0.99),
        busy_retries: g.2,
    })
}

/// `total` todo notes (`update_task`) from `procs` long-lived `loopx mcp` servers at once on
/// the project at `root`, each server noting its own todo as agent `w<n>`.
fn throughput_mcp(
    b: &Bench,
    root: &Path,
    store: &'static str,
    procs: usize,
    total: usize,
) -> Result<Throughput> {
    use std::io::{BufRead, Write};
    let per = total / procs;
    let mut servers = Vec::new();
    for w in 0..procs {
        let out = b.ok(
            root,
            &["todo", "add", "--text", &format!("noted by w{w}"), "--agent-id", "user", "--json"],
        )?;
        let todo = json_field(&out, "/todo/id")?;
        b.ok(root, &["agent", "register", "--agent-id", &format!("w{w}"), "--agent-type", "other"])?;
        let (child, mut stdin, mut stdout) = mcp_server(b, root, &format!("w{w}"), Stdio::piped())?;
        let mut line = String::new();
        // A first call opens the store (and its connection) before the clock starts.
        let call = |id: usize, note: &str| {
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "update_task", "arguments": {"todo_id": todo, "note": note}}})
        };
        writeln!(stdin, "{}", call(1, "warm"))?;
        line.clear();
        stdout.read_line(&mut line)?;
        if !line.contains(r#""isError":false"#) {
            bail!("loopx mcp did not take a note: {line}");
        }
        servers.push((child, stdin, stdout, todo));
    }
    let retries = Arc::new(Mutex::new(0usize));
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let mut handles = Vec::new();
        for (w, (_, stdin, stdout, todo)) in servers.iter_mut().enumerate() {
            let retries = retries.clone();
            handles.push(scope.spawn(move || -> Result<()> {
                let mut line = String::new();
                for i in 0..per {
                    let mut id = 10 + 2 * i;
                    loop {
                        let msg = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                            "name": "update_task", "arguments": {"todo_id": *todo, "note": format!("w{w} m{i}")}}});
                        writeln!(stdin, "{msg}")?;
                        line.clear();
                        stdout.read_line(&mut line)?;
                        let answer: serde_json::Value = serde_json::from_str(&line)?;
                        if answer.pointer("/result/isError") == Some(&serde_json::Value::Bool(false)) {
                            break;
                        }
                        let text = answer.pointer("/result/content/0/text").and_then(|t| t.as_str()).unwrap_or("");
                        if !text.contains("try again") && !text.contains("retry the command") {
                            bail!("update_task failed: {line}");
                        }
                        *retries.lock().map_err(|_| anyhow::anyhow!("poisoned"))? += 1;
                        id += 1;
                    }
                }
                Ok(())
            }));
        }
        join(handles)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let (mut waits, mut holds) = (Vec::new(), Vec::new());
    for (child, stdin, _, _) in servers {
        drop(stdin);
        let out = child.wait_with_output()?;
        for l in
            String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.starts_with("timing: lock on goal"))
        {
            let nums: Vec<f64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if let [wait, hold] = nums[..] {
                waits.push(wait);
                holds.push(hold);
            }
        }
    }
    waits.sort_by(f64::total_cmp);
    holds.sort_by(f64::total_cmp);
    let busy_retries = *retries.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    Ok(Throughput {
        store,
        client: "mcp",
        processes: procs,
        mutations: per * procs,
        per_second: (per * procs) as f64 / elapsed,
        lock_wait_p50_ms: pct(&waits, 0.5),
        lock_wait_p99_ms: pct(&waits, 0.99),
        lock_hold_p50_ms: pct(&holds, 0.5),
        lock_hold_p99_ms: pct(&holds, 0.99),
        busy_retries,
    })
}

/// One race: every claimant (a project directory and an agent) claims `todo` at once; returns
/// how many won.
fn race(bin: &Path, claimants: &[(&Path, String)], todo: &str) -> usize {
    std::thread::scope(|scope| {
        let handles: Vec<_> = claimants
            .iter()
            .map(|(dir, agent)| {
                scope.spawn(move || {
                    run_once(bin, dir, &["todo", "claim", "--todo-id", todo, "--agent-id", agent], &[])
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()?.ok()).filter(|r| r.1 == 0).count()
    })
}

/// Races with more than one winner, and with none.
#[derive(Default)]
struct Tally {
    double: usize,
    none: usize,
}

impl Tally {
    fn add(&mut self, winners: usize) {
        match winners {
            1 => {}
            0 => self.none += 1,
            _ => self.double += 1,
        }
    }
}

fn claim_race(b: &mut Bench, trials: usize) -> Result<ClaimRace> {
    let root = b.project("race")?;
    let counts = [2usize, 8, 32];
    for a in 0..32 {
        b.ok(&root, &["agent", "register", "--agent-id", &format!("p{a}"), "--agent-type", "other"])?;
    }
    fixture("todos", &root, trials as u64)?;
    let mut tally = Tally::default();
    let start = Instant::now();
    for trial in 0..trials {
        let procs = counts[trial % counts.len()];
        let todo = format!("t{}", trial + 1);
        let claimants: Vec<(&Path, String)> =
            (0..procs).map(|p| (root.as_path(), format!("p{}", (p + trial) % 32))).collect();
        tally.add(race(&b.bin, &claimants, &todo));
    }
    Ok(ClaimRace {
        trials,
        processes: counts.to_vec(),
        trials_per_second: trials as f64 / start.elapsed().as_secs_f64(),
        double_winners: tally.double,
        no_winner: tally.none,
    })
}

/// The claim race on the PostgreSQL store: eight "machines" (project directories pointing at
/// one database project), one claimant each, racing for each todo in turn.
fn claim_race_machines(b: &mut Bench, url: &str, trials: usize) -> Result<ClaimRace> {
    let ns = format!("bench-race-{}", std::process::id());
    let dirs = (0..8)
        .map(|i| b.machine(&format!("race-machine{i}"), Some((url, &ns))))
        .collect::<Result<Vec<_>>>()?;
    b.ok(&dirs[0], &["goal", "create", "--goal-id", "main", "--objective", "race"])?;
    for a in 0..8 {
        b.ok(&dirs[0], &["agent", "register", "--agent-id", &format!("p{a}"), "--agent-type", "other"])?;
    }
    for t in 0..trials {
        b.ok(&dirs[t % 8], &["todo", "add", "--agent-id", "user", "--text", &format!("race {t}")])?;
    }
    let mut tally = Tally::default();
    let start = Instant::now();
    for trial in 0..trials {
        let todo = format!("t{}", trial + 1);
        let claimants: Vec<(&Path, String)> =
            dirs.iter().enumerate().map(|(p, dir)| (dir.as_path(), format!("p{p}"))).collect();
        tally.add(race(&b.bin, &claimants, &todo));
    }
    Ok(ClaimRace {
        trials,
        processes: vec![8],
        trials_per_second: trials as f64 / start.elapsed().as_secs_f64(),
        double_winners: tally.double,
        no_winner: tally.none,
    })
}

/// The tick and the throughput on the PostgreSQL store (loopback), and its claim race.
fn postgres(
    b: &mut Bench,
    url: &str,
    quick: bool,
    runs: usize,
    warm: usize,
    timings: &mut Vec<Stat>,
    tput: &mut Vec<Throughput>,
) -> Result<ClaimRace> {
    let ns = |what: &str| format!("bench-{what}-{}", std::process::id());
    eprintln!("xtask: the tick on 10 todos, PostgreSQL");
    let tick_ns = ns("tick");
    let root = b.project_in("pg-tick", Some((url, &tick_ns)))?;
    for i in 0..10 + runs + warm {
        b.ok(&root, &["todo", "add", "--text", &format!("todo number {i}")])?;
    }
    timings.push(b.measure("should-run, 10 todos, PostgreSQL", &root, SHOULD_RUN, warm, runs)?);
    timings.extend(ticks(b, &root, "10 todos, PostgreSQL", runs)?.0);
    eprintln!("xtask: throughput, PostgreSQL");
    let total = if quick { 64 } else { 640 };
    for procs in [1, 8, 32] {
        let tput_ns = ns(&format!("tput{procs}"));
        let root = b.project_in(&format!("pg-tput{procs}"), Some((url, &tput_ns)))?;
        tput.push(throughput(b, &root, "postgres", procs, total)?);
        let root = b.project_in(&format!("pg-mcp{procs}"), Some((url, &ns(&format!("mcp{procs}")))))?;
        tput.push(throughput_mcp(b, &root, "postgres", procs, total)?);
    }
    eprintln!("xtask: claim race across eight machines, PostgreSQL");
    claim_race_machines(b, url, if quick { 9 } else { 1_000 })
}

fn build_release(root: &Path) -> Result<PathBuf> {
    eprintln!("xtask: building the release binary");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--package", "loopx-cli", "--bin", "loopx"])
        .current_dir(root)
        .status()?;
    if !status.success() {
        bail!("release build failed");
    }
    Ok(root.join("target/release/loopx"))
}

/// A line of `loopx drive --json` output.
fn drive_events(out: &str) -> Vec<serde_json::Value> {
    out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// CPU time process `pid` has used, in clock ticks (Linux).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    Ok(fields.get(11).context("no utime")?.parse::<u64>()?
        + fields.get(12).context("no stime")?.parse::<u64>()?)
}

/// `loopx drive`: the driver's own cost per turn (everything but the agent command), with the
/// scripted agent of the tests on goals of each size; and the CPU a driver sleeping on a
/// person's question uses in `sleep`.
fn drive(
    b: &mut Bench,
    workspace: &Path,
    sizes: &[usize],
    turns: usize,
    sleep: Duration,
) -> Result<(Vec<Stat>, BTreeMap<String, u64>)> {
    let agent = workspace.join("tests/fixtures/drive/agent.sh");
    let bin_dir = b.bin.parent().context("the binary's directory")?.to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let path = path.to_string_lossy().into_owned();
    let mut stats = Vec::new();
    let mut sizes_out = BTreeMap::new();
    for &n in sizes {
        let root = b.project(&format!("drive{n}"))?;
        fixture("todos", &root, (n + turns) as u64)?;
        let max = turns.to_string();
        let agent_arg = agent.display().to_string();
        let args =
            ["drive", "--json", "--agent-id", "a", "--host", "other", "--max-turns", &max, "--", &agent_arg];
        let (_, code, out, err, rss) = run_once(&b.bin, &root, &args, &[("PATH", &path)])?;
        if code != 0 {
            bail!("loopx drive failed ({code}): {err}");
        }
        let ended: Vec<serde_json::Value> =
            drive_events(&out).into_iter().filter(|e| e["event"] == "turn_ended").collect();
        if ended.len() != turns || ended.iter().any(|e| e["end"]["spent_by"].is_null()) {
            bail!("loopx drive ran {} turns, not {turns} spent ones: {out}", ended.len());
        }
        let own: Vec<f64> = ended.iter().filter_map(|e| e["overhead_ms"].as_f64()).collect();
        let child: Vec<f64> = ended.iter().filter_map(|e| e["child_ms"].as_f64()).collect();
        stats.push(stat(&format!("drive: the driver's own cost a turn, {n} todos"), own, rss));
        stats.push(stat(&format!("drive: the scripted agent's turn (for scale), {n} todos"), child, None));
    }
    let root = b.project("drive-sleep")?;
    b.ok(&root, &["todo", "add", "--agent-id", "user", "--text", "wait for the person"])?;
    b.ok(&root, &["gate", "ask", "--agent-id", "user", "--question", "go on?", "--blocks", "goal"])?;
    let mut child = loopx_command(&b.bin)
        .args(["drive", "--json", "--agent-id", "a", "--host", "other", "--", "true"])
        .current_dir(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().context("stdout")?));
    let asleep = lines.any(|l| l.is_ok_and(|l| l.contains("\"sleeping\"")));
    if !asleep {
        let _ = child.kill();
        bail!("loopx drive did not go to sleep on the question");
    }
    let before = cpu_ticks(child.id())?;
    std::thread::sleep(sleep);
    let used = cpu_ticks(child.id())? - before;
    let _ = child.kill();
    let _ = child.wait();
    sizes_out
        .insert(format!("drive: CPU ticks (10 ms) used sleeping {} s on a question", sleep.as_secs()), used);
    Ok((stats, sizes_out))
}

/// `xtask bench --drive`: only the driver's measurements.
/// A report of one section alone (`--drive`, `--hooks`): no claim race, no PostgreSQL.
fn section_report(
    workspace: &Path,
    quick: bool,
    timings: Vec<Stat>,
    sizes: BTreeMap<String, u64>,
    only: &str,
) -> Report {
    let report = Report {
        schema_version: 1,
        commit: git_head(workspace),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        quick,
        timings,
        throughput: Vec::new(),
        sizes,
        claim_race: ClaimRace {
            trials: 0,
            processes: Vec::new(),
            trials_per_second: 0.0,
            double_winners: 0,
            no_winner: 0,
        },
        claim_race_postgres: None,
        postgres_skipped: Some(only.to_owned()),
    };
    print!("{}", table(&report));
    report
}

fn drive_only(b: &mut Bench, workspace: &Path, quick: bool) -> Result<Report> {
    let (sizes, turns, sleep) = if quick {
        (vec![10], 10, Duration::from_secs(1))
    } else {
        (vec![10, 1_000, 10_000], 50, Duration::from_secs(60))
    };
    let (timings, sizes) = drive(b, workspace, &sizes, turns, sleep)?;
    Ok(section_report(workspace, quick, timings, sizes, "--drive"))
}

/// `loopx --version` and `should-run` on a goal of 100,000 todos (1,000 with `--quick`), 90 %
/// closed, taken in alternating rounds so that both see the same machine: what a decision costs
/// above starting the process. Each binary of `against` runs both in the same rounds, after
/// loopx's own.
fn startup(b: &mut Bench, against: &[PathBuf], quick: bool) -> Result<Vec<Stat>> {
    let (n, rounds, warm) = if quick { (1_000, 40, 5) } else { (100_000, 400, 20) };
    let label = format!("should-run, {n} todos (90 % closed)");
    eprintln!("xtask: start-up and {label}");
    let root = b.project("startup")?;
    fixture("closed", &root, n as u64)?;
    fixture("todos", &root, 1)?;
    let home = b.dir.path().to_path_buf();
    let bins: Vec<&PathBuf> = std::iter::once(&b.bin).chain(against).collect();
    let mut version = vec![Vec::with_capacity(rounds); bins.len()];
    let mut decide = vec![Vec::with_capacity(rounds); bins.len()];
    for round in 0..warm + rounds {
        for (i, bin) in bins.iter().enumerate() {
            for (args, dir, times) in
                [(&["--version"][..], &home, &mut version[i]), (SHOULD_RUN, &root, &mut decide[i])]
            {
                let (t, code, _, err, _) = run_with_input(bin, dir, args, &[], None)?;
                if code != 0 {
                    bail!("{} {}: failed ({code}): {err}", bin.display(), args.join(" "));
                }
                if round >= warm {
                    times.push(t.as_secs_f64() * 1e3);
                }
            }
        }
    }
    let mut stats = Vec::new();
    for (i, (version, decide)) in version.into_iter().zip(decide).enumerate() {
        let of = if i == 0 { String::new() } else { format!(": {}", bins[i].display()) };
        let version = stat(&format!("start-up: loopx --version{of}"), version, None);
        let decide = stat(&format!("{label}{of}"), decide, None);
        let ratio = decide.p50_ms / version.p50_ms.max(f64::MIN_POSITIVE);
        eprintln!("xtask: {label}{of} p50 is {ratio:.2} × --version's");
        stats.extend([version, decide]);
    }
    stats.extend(mcp_calls(b, &root, n, if quick { 40 } else { 200 })?);
    Ok(stats)
}

/// A `loopx mcp` server for agent `agent` on the project at `root` (with `LOOPX_TIMINGS`, its
/// stderr to `stderr`), past its handshake: the process, its stdin and its stdout.
fn mcp_server(
    b: &Bench,
    root: &Path,
    agent: &str,
    stderr: Stdio,
) -> Result<(std::process::Child, std::process::ChildStdin, std::io::BufReader<std::process::ChildStdout>)> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = loopx_command(&b.bin)
        .args(["mcp", "--agent-id", agent])
        .current_dir(root)
        .env("LOOPX_TIMINGS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
    let hello = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    writeln!(stdin, "{hello}")?;
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    writeln!(stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    Ok((child, stdin, stdout))
}

/// The same decision from a long-lived `loopx mcp` server on the goal at `root` (`n` todos), as
/// a host that keeps it open asks each turn: `should_run` calls, and `update_task` calls (each a
/// commit), `rounds` of each after a first call of each.
fn mcp_calls(b: &Bench, root: &Path, n: usize, rounds: usize) -> Result<Vec<Stat>> {
    use std::io::{BufRead, Write};
    eprintln!("xtask: loopx mcp calls, {n} todos");
    let out = b.ok(root, &["todo", "add", "--text", "noted over mcp", "--agent-id", "user", "--json"])?;
    let todo = json_field(&out, "/todo/id")?;
    let (mut child, mut stdin, mut stdout) = mcp_server(b, root, "a", Stdio::null())?;
    let mut line = String::new();
    let calls = [
        ("should_run", serde_json::json!({})),
        ("update_task", serde_json::json!({"todo_id": todo, "note": "a note from the bench"})),
    ];
    let mut stats = Vec::new();
    for (tool, args) in calls {
        let mut ms = Vec::with_capacity(rounds);
        for i in 0..=rounds {
            let call = serde_json::json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": tool, "arguments": args}});
            let start = Instant::now();
            writeln!(stdin, "{call}")?;
            line.clear();
            stdout.read_line(&mut line)?;
            let t = start.elapsed().as_secs_f64() * 1e3;
            if !line.contains(r#""isError":false"#) {
                bail!("loopx mcp {tool} failed: {line}");
            }
            if i > 0 {
                ms.push(t);
            }
        }
        stats.push(stat(&format!("loopx mcp {tool} call, {n} todos (90 % closed)"), ms, None));
    }
    drop(stdin);
    child.wait()?;
    Ok(stats)
}

/// Runs the benchmarks and prints the table; returns the report.
pub fn run(opts: &Options, workspace: &Path) -> Result<Report> {
    let bin = match &opts.bin {
        Some(b) => b.clone(),
        None => build_release(workspace)?,
    };
    let mut b = Bench { bin, dir: tempfile::Builder::new().prefix("loopx-bench-").tempdir()?, projects: 0 };
    let _ = HOME.set(b.dir.path().join("home"));
    if opts.drive_only || opts.hooks_only || opts.report_only || opts.startup_only {
        let report = if opts.drive_only {
            drive_only(&mut b, workspace, opts.quick)?
        } else if opts.startup_only {
            let timings = startup(&mut b, &opts.against, opts.quick)?;
            section_report(workspace, opts.quick, timings, BTreeMap::new(), "--startup")
        } else if opts.report_only {
            let (timings, sizes) = reports(&b, opts.quick)?;
            section_report(workspace, opts.quick, timings, sizes, "--report")
        } else {
            let (runs, warm) = if opts.quick { (10, 2) } else { (50, 5) };
            let timings = hooks(&mut b, &opts.against, warm, runs)?;
            section_report(workspace, opts.quick, timings, BTreeMap::new(), "--hooks")
        };
        if let Some(path) = &opts.json {
            std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
        }
        return Ok(report);
    }
    let (runs, warm) = if opts.quick { (10, 2) } else { (50, 5) };
    let sizes_todos: &[usize] = if opts.quick { &[10, 1_000] } else { &[10, 1_000, 10_000] };
    // Goals that have run a long time: 90 % of their todos closed.
    let sizes_closed: &[usize] = if opts.quick { &[1_000] } else { &[10_000, 100_000] };
    let sizes_events: &[u64] = if opts.quick { &[100, 10_000] } else { &[100, 10_000, 1_000_000] };
    let mut timings = Vec::new();
    let mut sizes = BTreeMap::new();

    eprintln!("xtask: start-up");
    let home = b.dir.path().to_path_buf();
    timings.push(b.measure("start-up: loopx --version", &home, &["--version"], warm, runs * 2)?);

    let cases = sizes_todos.iter().map(|n| (*n, 0)).chain(sizes_closed.iter().map(|n| (*n, n * 9 / 10)));
    for (n, closed) in cases {
        let label = if closed == 0 { format!("{n} todos") } else { format!("{n} todos (90 % closed)") };
        eprintln!("xtask: the tick on {label}");
        let root = b.project(&format!("todos{n}-{closed}"))?;
        if closed > 0 {
            fixture("closed", &root, n as u64)?;
        }
        fixture("todos", &root, (if closed > 0 { runs + warm } else { n + runs + warm }) as u64)?;
        timings.push(b.measure(&format!("should-run, {label}"), &root, SHOULD_RUN, warm, runs)?);
        let out = b.ok(&root, SHOULD_RUN)?;
        sizes.insert(format!("should-run output bytes, {label}"), out.len() as u64);
        let snap = root.join(GOAL_DIR).join("snapshot.json");
        sizes.insert(format!("snapshot bytes, {label}"), std::fs::metadata(&snap)?.len());
        let (stats, per_mutation) = ticks(&b, &root, &label, runs)?;
        timings.extend(stats);
        sizes.insert(format!("bytes written per mutation, {label}"), per_mutation);
        // Only the log's tail: reading a large log would grow this process, and a child's
        // peak RSS counts the image of the process that launched it.
        let log = log_tail(&root.join(GOAL_DIR).join("events.jsonl"), 1 << 20)?;
        let tick_lines: Vec<&str> =
            log.lines().skip(1).collect::<Vec<_>>().into_iter().rev().take(runs * 5).collect();
        let bytes: usize = tick_lines.iter().map(|l| l.len() + 1).sum();
        sizes.insert(format!("bytes per event in ticks, {label}"), (bytes / tick_lines.len().max(1)) as u64);
    }

    eprintln!("xtask: hook answers");
    timings.extend(hooks(&mut b, &[], warm, runs)?);

    eprintln!("xtask: the demo");
    let demo_runs = if opts.quick { 5 } else { 20 };
    timings.push(b.measure(
        "demo: the whole scripted goal, 11 ticks",
        &home,
        &["demo", "--json"],
        1,
        demo_runs,
    )?);

    for &n in sizes_events {
        eprintln!("xtask: history of {n} events");
        let root = b.project(&format!("events{n}"))?;
        fixture("todos", &root, 50)?;
        fixture("history", &root, n)?;
        b.ok(&root, &["status"])?; // settles the snapshot
        timings.push(b.measure(&format!("status, {n} events"), &root, &["status", "--json"], warm, runs)?);
        timings.push(b.measure(&format!("should-run, {n} events"), &root, SHOULD_RUN, warm, runs)?);
        let log = std::fs::metadata(root.join(GOAL_DIR).join("events.jsonl"))?.len();
        sizes.insert(format!("bytes per event, {n}-event history"), log / n.max(1));
    }

    let (stats, report_sizes) = reports(&b, opts.quick)?;
    timings.extend(stats);
    sizes.extend(report_sizes);

    eprintln!("xtask: the dashboard");
    timings.extend(dashboard(&mut b, if opts.quick { 1_000 } else { 10_000 }, warm, runs)?);

    eprintln!("xtask: loopx drive");
    let (drive_sizes, drive_turns, drive_sleep) = if opts.quick {
        (vec![10], 10, Duration::from_secs(1))
    } else {
        (vec![10, 1_000, 10_000], 50, Duration::from_secs(60))
    };
    let (stats, drive_sizes) = drive(&mut b, workspace, &drive_sizes, drive_turns, drive_sleep)?;
    timings.extend(stats);
    sizes.extend(drive_sizes);

    eprintln!("xtask: throughput");
    let total = if opts.quick { 64 } else { 640 };
    let mut tput = Vec::new();
    for procs in [1, 8, 32] {
        let root = b.project(&format!("tput{procs}"))?;
        tput.push(throughput(&b, &root, "file", procs, total)?);
        let root = b.project(&format!("mcp{procs}"))?;
        tput.push(throughput_mcp(&b, &root, "file", procs, total)?);
    }

    eprintln!("xtask: claim race");
    let race = claim_race(&mut b, if opts.quick { 9 } else { 300 })?;

    // The PostgreSQL store, on a server started here unless LOOPX_TEST_PG_URL names one.
    let (mut race_pg, mut pg_skipped) = (None, None);
    match loopx_tests::pg::for_tests() {
        Ok((Some(url), _server)) => {
            race_pg = Some(postgres(&mut b, &url, opts.quick, runs, warm, &mut timings, &mut tput)?);
        }
        Ok((None, _)) => pg_skipped = Some("LOOPX_SKIP_PG=1".to_owned()),
        Err(e) => {
            eprintln!("xtask: the PostgreSQL rows are skipped: {e}");
            pg_skipped = Some(e);
        }
    }

    let report = Report {
        schema_version: 1,
        commit: git_head(workspace),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        quick: opts.quick,
        timings,
        throughput: tput,
        sizes,
        claim_race: race,
        claim_race_postgres: race_pg,
        postgres_skipped: pg_skipped,
    };
    print!("{}", table(&report));
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    let double = report.claim_race.double_winners
        + report.claim_race_postgres.as_ref().map_or(0, |r| r.double_winners);
    if double > 0 {
        bail!("{double} claim trials had more than one winner");
    }
    Ok(report)
}

fn git_head(root: &Path) -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "unknown".to_owned(), |o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// The report as Markdown tables.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ =
        writeln!(out, "commit {} · {} cores{}\n", r.commit, r.cores, if r.quick { " · --quick" } else { "" });
    let _ = writeln!(out, "| measurement | runs | min ms | p50 ms | p95 ms | max ms | peak RSS KiB |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for s in &r.timings {
        let rss = s.max_rss_kib.map_or("–".to_owned(), |k| k.to_string());
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {rss} |",
            s.name, s.runs, s.min_ms, s.p50_ms, s.p95_ms, s.max_ms
        );
    }
    if !r.throughput.is_empty() {
        let _ = writeln!(
            out,
            "\n| store | clients | processes | mutations | per second | lock wait p50 / p99 ms | lock hold p50 / p99 ms | busy retries |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
    }
    for t in &r.throughput {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {} |",
            t.store,
            t.client,
            t.processes,
            t.mutations,
            t.per_second,
            t.lock_wait_p50_ms,
            t.lock_wait_p99_ms,
            t.lock_hold_p50_ms,
            t.lock_hold_p99_ms,
            t.busy_retries
        );
    }
    let _ = writeln!(out, "\n| size | bytes |\n|---|---:|");
    for (k, v) in &r.sizes {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    let race = |what: &str, c: &ClaimRace| {
        format!(
            "{what}: {} trials over {:?} processes, {:.1} trials/s, double winners {}, no winner {}\n",
            c.trials, c.processes, c.trials_per_second, c.double_winners, c.no_winner
        )
    };
    out.push('\n');
    if r.claim_race.trials > 0 {
        out.push_str(&race("claim race", &r.claim_race));
    }
    if let Some(c) = &r.claim_race_postgres {
        out.push_str(&race("claim race on PostgreSQL, eight machines", c));
    }
    if let Some(why) = &r.postgres_skipped {
        let _ = writeln!(out, "PostgreSQL rows skipped: {why}");
    }
    out
}
