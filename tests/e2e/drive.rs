//! `loopx drive` through the binary, with a scripted agent CLI (`tests/fixtures/drive/agent.sh`)
//! that reads its prompt and the `LOOPX_*` variables and works each turn through plain loopx
//! commands: a goal driven to its end, a failed turn, a hanging turn killed with its
//! grandchildren, a gate the driver sleeps on (using no CPU) until a person answers, a quota
//! that frees a slot on a test clock, kill -9 at random points, two drivers sharing a goal,
//! one driver per agent, Ctrl-C, and the identity of the commands a turn runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use loopx_tests::{Sandbox, events, loopx_bin};

pub(crate) fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/drive/agent.sh")
}

/// `PATH` with this build's loopx first, as a person who installed it would have.
pub(crate) fn path_with_loopx() -> String {
    let bin = loopx_bin().parent().expect("the binary's directory").display().to_string();
    format!("{bin}:{}", std::env::var("PATH").unwrap_or_default())
}

/// A command for the binary in the sandbox, with loopx on `PATH` for the agent's shell.
pub(crate) fn loopx(sb: &Sandbox) -> Command {
    let mut c = sb.command();
    c.env("PATH", path_with_loopx());
    c
}

/// A project with a goal and these todos, in order.
pub(crate) fn goal(todos: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    sb.init();
    for t in todos {
        sb.ok(&["todo", "add", "--text", t]);
    }
    sb
}

/// Events as they arrive, each with the moment it came, and the signal of a new one.
type Events = Arc<(Mutex<Vec<(Instant, Value)>>, Condvar)>;

/// A running `loopx drive --json`: its events as they arrive, each with the moment it came.
pub(crate) struct Driving {
    child: Child,
    events: Events,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Driving {
    /// `loopx drive --json <args> -- <the scripted agent>`.
    fn start(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut c = loopx(sb);
        c.args(["drive", "--json"]).args(args).arg("--").arg(agent_script());
        for (k, v) in env {
            c.env(k, v);
        }
        Self::spawn(c)
    }

    /// Runs `c`, a `loopx drive --json` command.
    pub(crate) fn spawn(mut c: Command) -> Self {
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start loopx drive");
        let out = child.stdout.take().expect("stdout");
        let events: Events = Arc::default();
        let sink = events.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: Value =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                sink.0.lock().unwrap().push((Instant::now(), v));
                sink.1.notify_all();
            }
        });
        Driving { child, events, reader: Some(reader) }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (on the reader's signal, not by polling) for an event `pred` accepts, at most
    /// `within`; returns it with the moment it came.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> (Instant, Value) {
        let deadline = Instant::now() + within;
        let (lock, cv) = &*self.events;
        let mut seen = lock.lock().unwrap();
        loop {
            if let Some(e) = seen.iter().find(|(_, v)| pred(v)) {
                return e.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {what} within {within:?}; events so far: {:#?}", *seen);
            seen = cv.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// Waits for the driver to exit; its code and every event.
    pub(crate) fn finish(mut self) -> (i32, Vec<Value>, String) {
        let status = self.child.wait().expect("wait for loopx drive");
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        let events = self.events.0.lock().unwrap().iter().map(|(_, v)| v.clone()).collect();
        (status.code().unwrap_or(-1), events, stderr)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.pid().to_string()]).status().unwrap();
        assert!(ok.success());
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Runs a drive to its end.
fn drive(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> (i32, Vec<Value>, String) {
    Driving::start(sb, args, env).finish()
}

/// A test clock for a drive: the file whose milliseconds move the driver's clock (made at 0),
/// and its path as the driver's `LOOPX_TEST_CLOCK_FILE`.
pub(crate) fn test_clock(sb: &Sandbox) -> (PathBuf, String) {
    let clock = sb.root.parent().unwrap().join("clock-skew-ms");
    std::fs::write(&clock, "0").unwrap();
    let env = clock.display().to_string();
    (clock, env)
}

/// The drive's exit event, checked to say the goal's work is finished, and its turns, spent
/// and failed counts.
pub(crate) fn finished(ev: &[Value]) -> (u64, u64, u64) {
    let exit = of(ev, "exited")[0];
    assert!(exit["reason"].as_str().unwrap().contains("finished"), "{exit}");
    let n = |k: &str| exit[k].as_u64().unwrap();
    (n("turns"), n("spent"), n("failed"))
}

/// Each todo completed, in order, with the agent that completed it.
pub(crate) fn completed_by(log: &[Value]) -> Vec<(String, String)> {
    kinds(log, "todo_completed")
        .iter()
        .map(|e| (e["data"]["todo"].as_str().unwrap().to_owned(), e["actor"].as_str().unwrap().to_owned()))
        .collect()
}

pub(crate) fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// The goal's log, line by line.
pub(crate) fn log(sb: &Sandbox) -> Vec<Value> {
    events(&sb.events_path("main"))
}

pub(crate) fn kinds<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter().filter(|e| e["kind"] == kind).collect()
}

/// Every spend in the log: spent by `quota spend-slot`, by a settlement or by a turn's end.
pub(crate) fn spends(log: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for e in log {
        match e["kind"].as_str() {
            Some("slot_spent") => out.push(e["data"]["spend"].clone()),
            Some("turn_ended") if !e["data"]["spend"].is_null() => out.push(e["data"]["spend"].clone()),
            Some("turn_settled") => out.extend(
                e["data"]["steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|s| s["kind"] == "slot_spent")
                    .map(|s| s["data"]["spend"].clone()),
            ),
            _ => {}
        }
    }
    out
}

/// How often each todo was completed.
fn completions(log: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in kinds(log, "todo_completed") {
        *out.entry(e["data"]["todo"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    out
}

#[test]
fn a_goal_is_driven_to_its_end_one_spend_per_turn() {
    let sb =
        goal(&["write the reader", "parse the header", "quote fields", "handle dates", "ship it [last]"]);
    let (code, ev, stderr) = drive(&sb, &["--agent-id", "bot", "--host", "other"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let ended = of(&ev, "turn_ended");
    assert_eq!(ended.len(), 5);
    for e in &ended {
        assert!(e["end"]["run"].is_string() && e["end"]["spent_by"].is_string(), "{e}");
    }
    assert_eq!(finished(&ev), (5, 5, 0));

    let log = log(&sb);
    assert_eq!(completions(&log).values().copied().collect::<Vec<_>>(), [1, 1, 1, 1, 1]);
    assert_eq!(spends(&log).len(), 5);
    // The driver's lease is given up; the agent was registered as `other`.
    let status = sb.json(&["status"]);
    assert!(status.get("drivers").is_none(), "{status}");
    let agents = sb.json(&["agent", "list"]);
    assert_eq!(agents["agents"][0]["agent_type"], "other");
    // Each turn's output is kept, and history shows the turn with its log.
    let turn = ended[0]["end"]["turn"].as_str().unwrap();
    let h = sb.json(&["history", "--turn", turn]);
    let kinds: Vec<&str> =
        h["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["decision_recorded", "todo_claimed", "driver_renewed", "run_recorded", "turn_ended"],
        "{h}"
    );
    let out = std::fs::read_to_string(h["turn_log"].as_str().unwrap()).unwrap();
    assert!(out.contains("did t1"), "{out}");
    sb.ok(&["doctor"]);
}

#[test]
fn a_failed_turn_is_recorded_not_spent_and_its_todo_picked_again() {
    let sb = goal(&["flaky [fail-once]", "ship it [last]"]);
    let (code, ev, stderr) = drive(&sb, &["--agent-id", "bot"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let ended = of(&ev, "turn_ended");
    let first = &ended[0]["end"];
    assert_eq!((first["exit"].as_str(), first["exit_code"].as_i64()), (Some("exited"), Some(1)));
    assert!(first["run"].is_null() && first["spent_by"].is_null(), "{first}");
    assert!(first["tail"].as_str().unwrap().contains("scripted failure"), "{first}");
    // The same todo, again, and done.
    assert_eq!(ended[1]["end"]["todo"], first["todo"]);
    assert!(ended[1]["end"]["spent_by"].is_string());
    let log = log(&sb);
    assert_eq!(spends(&log).len(), 2, "spends: the two turns that wrote back");
    let failed = kinds(&log, "turn_ended").into_iter().filter(|e| e["data"]["end"]["run"].is_null()).count();
    assert_eq!(failed, 1);
    let h = sb.ok(&["history", "--turn", first["turn"].as_str().unwrap()]);
    assert!(h.stdout.contains("exit 1, no writeback") && h.stdout.contains("output: "), "{}", h.stdout);
}

fn alive(pid: &str) -> bool {
    // A zombie is gone for our purpose: it runs nothing and waits to be reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

/// Waits, watching `/proc`, until `pid` is gone (at most `within`).
fn gone_within(pid: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::yield_now();
    }
    !alive(pid)
}

#[test]
fn a_hanging_turn_is_killed_at_its_timeout_grandchildren_too() {
    let sb = goal(&["stuck [hang]"]);
    let (code, ev, stderr) = drive(&sb, &["--agent-id", "bot", "--turn-timeout", "2s", "--once"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let end = &of(&ev, "turn_ended")[0]["end"];
    assert_eq!(end["exit"], "timed_out", "{end}");
    assert!(end["run"].is_null());
    let grandchild = std::fs::read_to_string(sb.root.join(".agent-state/grandchild-t1")).unwrap();
    assert!(
        gone_within(grandchild.trim(), Duration::from_secs(10)),
        "the grandchild {grandchild} still runs"
    );
}

/// Waits for the agent to write `path` (a pid and a newline), and returns the pid.
fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "the agent never wrote {}", path.display());
        std::thread::yield_now();
    }
}

#[test]
fn what_a_turn_leaves_running_dies_with_it_even_out_of_its_group() {
    let sb = goal(&["start a daemon [escape] [last]"]);
    let (code, _, stderr) = drive(&sb, &["--agent-id", "bot"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let escaped = wait_file(&sb.root.join(".agent-state/escaped-t1"));
    assert!(gone_within(&escaped, Duration::from_secs(10)), "the setsid process {escaped} outlived its turn");
}

#[test]
fn a_turn_that_sheds_its_identity_is_still_the_agents() {
    let sb = goal(&["answer for the person [approve] [last]", "ship"]);
    sb.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "todos:t2"]);
    let before = log(&sb).len();
    let (code, _, stderr) = drive(&sb, &["--agent-id", "bot", "--until", "idle"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let tried = std::fs::read_to_string(sb.root.join(".agent-state/approve-t1")).unwrap();
    assert_eq!(tried.trim(), "1", "the driver above the command makes it the agent's: refused");
    assert_eq!(sb.json(&["gate", "list"])["gates"][0]["status"], "open");
    assert!(log(&sb)[before..].iter().all(|e| e["kind"] != "gate_answered"));
}

/// The CPU time (user and system, in clock ticks) process `pid` has used.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    // After the command's name: state is field 3, utime 14, stime 15 (1-based, whole line).
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn the_driver_sleeps_on_a_gate_without_cpu_and_goes_on_once_answered() {
    let sb = goal(&["risky step [ask]", "ship it [last]"]);
    let notified = sb.root.parent().unwrap().join("notified");
    let notify = format!("touch {}", notified.display());
    sb.ok(&["goal", "set", "--notify-command", &notify]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    let (_, sleep) = d.wait_for("a sleep on the question", Duration::from_secs(60), |e| {
        e["event"] == "sleeping" && e["decision"] == "ask_user"
    });
    // When its own timer would wake it (the lease's, minutes away), if ever.
    let until = sleep["until"].as_str().map(|u| loopx_core::Timestamp::parse_rfc3339(u).unwrap());
    // The person was told before the driver went to sleep.
    assert!(notified.exists(), "the goal's notifier was not run");
    // Asleep: a few seconds cost (next to) no CPU.
    let before = cpu_ticks(d.pid());
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(3) {
        std::thread::park_timeout(Duration::from_secs(3) - quiet.elapsed());
    }
    let used = cpu_ticks(d.pid()) - before;
    assert!(used <= 2, "the sleeping driver used {used} ticks of CPU in 3 s");
    // A person answers from another shell; the driver goes on at once (its only timer is the
    // lease's, minutes away).
    sb.ok(&["gate", "answer", "g1", "--approve", "--note", "go on"]);
    let (_, next) =
        d.wait_for("the next turn", Duration::from_secs(30), |e| e["event"] == "turn_started" && e["n"] == 2);
    // The answer woke it, not its timer.
    assert!(
        until.is_none_or(|u| loopx_core::Timestamp::from_system_time(std::time::SystemTime::now()) < u),
        "{sleep}"
    );
    assert_eq!(next["todo"], "t1", "the todo whose question was answered");
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(of(&ev, "exited")[0]["spent"], 3);
}

#[test]
fn an_exhausted_quota_sleeps_until_the_window_frees_a_slot() {
    let sb = goal(&["one", "two [last]"]);
    sb.ok(&["goal", "set", "--allowed-slots", "1", "--window-hours", "1"]);
    let (clock, clock_env) = test_clock(&sb);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[("LOOPX_TEST_CLOCK_FILE", &clock_env)]);
    let (_, sleep) = d.wait_for("a throttled sleep", Duration::from_secs(60), |e| e["event"] == "sleeping");
    assert_eq!(sleep["decision"], "wait", "{sleep}");
    let until = loopx_core::Timestamp::parse_rfc3339(sleep["until"].as_str().unwrap()).unwrap();
    let spent_at =
        loopx_core::Timestamp::parse_rfc3339(spends(&log(&sb))[0]["at"].as_str().unwrap()).unwrap();
    assert_eq!(
        until.unix_millis() - spent_at.unix_millis(),
        3_600_000,
        "the slot frees an hour after the spend"
    );
    // An hour passes on the test clock: the driver wakes and works the second todo.
    std::fs::write(&clock, "3600500").unwrap();
    d.wait_for("the second turn", Duration::from_secs(30), |e| {
        e["event"] == "turn_started" && e["todo"] == "t2"
    });
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(of(&ev, "exited")[0]["spent"], 2);
}

#[test]
fn kill_9_at_random_points_never_spends_twice_nor_loses_a_writeback() {
    let todos: Vec<String> =
        (1..=150).map(|n| if n == 150 { format!("todo {n} [last]") } else { format!("todo {n}") }).collect();
    let refs: Vec<&str> = todos.iter().map(String::as_str).collect();
    let sb = goal(&refs);
    // A fixed seed: a failure names it and replays.
    let mut seed: u64 =
        std::env::var("LOOPX_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_d71e);
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    let mut kills = 0;
    while kills < 32 {
        let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
        // Let it get somewhere: its start, and then a random while (0–60 ms: a few turns).
        d.wait_for("the driver's start", Duration::from_secs(30), |e| {
            e["event"] == "started" || e["event"] == "exited"
        });
        let pause = Duration::from_millis(next() % 60);
        let t = Instant::now();
        while t.elapsed() < pause {
            std::thread::yield_now();
        }
        d.signal("KILL");
        let (code, _, _) = d.finish();
        if code == 0 {
            break; // it finished before the kill
        }
        kills += 1;
    }
    assert!(kills >= 30, "only {kills} kills before the goal finished");
    let (code, _, stderr) = drive(&sb, &["--agent-id", "bot"], &[]);
    assert_eq!(code, 0, "{stderr}");

    let log = log(&sb);
    let done = completions(&log);
    assert_eq!(done.len(), 150, "every todo done");
    assert!(done.values().all(|n| *n == 1), "each once: {done:?}");
    // Spends = the turns that wrote back, each spent once.
    let spent = spends(&log);
    let mut spent_turns: Vec<&str> = spent.iter().map(|s| s["turn"].as_str().unwrap()).collect();
    spent_turns.sort_unstable();
    let before = spent_turns.len();
    spent_turns.dedup();
    assert_eq!(before, spent_turns.len(), "a turn spent twice");
    let mut wrote_back: Vec<&str> =
        kinds(&log, "run_recorded").iter().map(|e| e["data"]["run"]["turn"].as_str().unwrap()).collect();
    wrote_back.sort_unstable();
    wrote_back.dedup();
    assert_eq!(spent_turns, wrote_back, "every writeback spent, nothing else");
    sb.ok(&["doctor"]);
}

#[test]
fn two_drivers_share_a_goal_and_never_work_the_same_todo() {
    let todos: Vec<String> = (1..=12)
        .map(|n| if n == 12 { format!("todo {n} [slow] [last]") } else { format!("todo {n} [slow]") })
        .collect();
    let refs: Vec<&str> = todos.iter().map(String::as_str).collect();
    let sb = goal(&refs);
    let a = Driving::start(&sb, &["--agent-id", "bot-a"], &[]);
    let b = Driving::start(&sb, &["--agent-id", "bot-b"], &[]);
    let (ca, ea, sa) = a.finish();
    let (cb, eb, sbe) = b.finish();
    assert_eq!((ca, cb), (0, 0), "{sa}\n{sbe}");
    let log = log(&sb);
    assert!(completions(&log).values().all(|n| *n == 1));
    assert_eq!(completions(&log).len(), 12);
    // Each todo was claimed by one agent, and only that agent's turns worked it.
    let mut claimed: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for e in kinds(&log, "todo_claimed") {
        claimed
            .entry(e["data"]["todo"].as_str().unwrap().to_owned())
            .or_default()
            .push(e["data"]["agent"].as_str().unwrap().to_owned());
    }
    assert!(claimed.values().all(|who| who.len() == 1), "{claimed:?}");
    for e in kinds(&log, "turn_ended") {
        let end = &e["data"]["end"];
        if let Some(t) = end["todo"].as_str() {
            assert_eq!(claimed[t], [end["agent"].as_str().unwrap()], "{end}");
        }
    }
    let worked =
        |ev: &[Value]| of(ev, "turn_ended").iter().filter(|e| e["end"]["spent_by"].is_string()).count();
    assert_eq!(worked(&ea) + worked(&eb), 12);
    assert!(worked(&ea) > 0 && worked(&eb) > 0, "both drivers worked");
}

#[test]
fn one_driver_per_agent_shown_in_status_until_it_stops() {
    let sb = goal(&["wait here [ask]", "ship it [last]"]);
    let first = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    first.wait_for("a sleep", Duration::from_secs(60), |e| e["event"] == "sleeping");
    let status = sb.json(&["status"]);
    let driver = &status["drivers"][0];
    assert_eq!((driver["agent"].as_str(), driver["host"].as_str()), (Some("bot"), Some("other")));
    assert_eq!(driver["pid"], first.pid());
    let text = sb.ok(&["status"]).stdout;
    assert!(text.contains(&format!("driven:      bot by loopx drive (pid {}", first.pid())), "{text}");

    let mut second = loopx(&sb);
    let out = second.args(["drive", "--agent-id", "bot", "--"]).arg(agent_script()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already driven") && err.contains(&format!("pid {}", first.pid())), "{err}");

    // A termination signal stops it (and frees the agent).
    first.signal("TERM");
    let (code, ev, _) = first.finish();
    assert_eq!(code, 143);
    assert_eq!(of(&ev, "exited")[0]["reason"], "stopped by a person");
    assert!(sb.json(&["status"]).get("drivers").is_none());
    sb.ok(&["gate", "answer", "g1", "--approve"]);
    let (code, _, stderr) = drive(&sb, &["--agent-id", "bot"], &[]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn ctrl_c_once_finishes_the_turn_twice_stops_it() {
    let sb = goal(&["careful [slow]", "ship it [last]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    d.wait_for("the turn", Duration::from_secs(30), |e| e["event"] == "turn_started");
    d.signal("INT");
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 130, "{stderr}");
    let ended = of(&ev, "turn_ended");
    assert_eq!(ended.len(), 1, "the running turn finished, and no other started");
    assert!(ended[0]["end"]["spent_by"].is_string());
    assert_eq!(of(&ev, "finishing").len(), 1);

    let sb = goal(&["stuck [hang]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    let grandchild = wait_file(&sb.root.join(".agent-state/grandchild-t1"));
    d.signal("INT");
    d.wait_for("the first press", Duration::from_secs(30), |e| e["event"] == "finishing");
    d.signal("INT");
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 130, "{stderr}");
    assert_eq!(of(&ev, "turn_ended")[0]["end"]["exit"], "interrupted");
    assert!(gone_within(&grandchild, Duration::from_secs(10)));
}

/// Ctrl-C in what was to be the drive's last turn (`--once`, the last of `--max-turns`) lets
/// the turn finish and still exits 130, as a press does in any other turn.
#[test]
fn ctrl_c_in_the_last_turn_still_exits_130() {
    for last in [&["--once"][..], &["--max-turns", "1"]] {
        let sb = goal(&["careful [slow]", "next"]);
        let args: Vec<&str> = ["--agent-id", "bot"].iter().chain(last).copied().collect();
        let d = Driving::start(&sb, &args, &[]);
        d.wait_for("the turn", Duration::from_secs(30), |e| e["event"] == "turn_started");
        d.signal("INT");
        let (code, ev, stderr) = d.finish();
        assert_eq!(code, 130, "{last:?}: {stderr}");
        let ended = of(&ev, "turn_ended");
        assert_eq!(ended.len(), 1, "{last:?}");
        assert!(ended[0]["end"]["spent_by"].is_string(), "the turn finished: {}", ended[0]);
        let exited = of(&ev, "exited")[0];
        assert_eq!(exited["code"], 130, "{exited}");
        assert!(exited["reason"].as_str().unwrap().starts_with("stopped by a person"), "{exited}");
    }
}

#[test]
fn goal_stop_now_ends_the_running_turn_and_no_turn_starts_after_it() {
    let sb = goal(&["stuck [hang]", "next"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    let grandchild = wait_file(&sb.root.join(".agent-state/grandchild-t1"));
    // From another shell, as the person: the turn, which would hang for ever, is ended.
    sb.ok(&["goal", "stop", "--now", "--reason", "enough for today"]);
    let (_, ended) = d.wait_for("the turn's end", Duration::from_secs(30), |e| e["event"] == "turn_ended");
    assert_eq!(ended["end"]["exit"], "interrupted", "{ended}");
    assert!(ended["end"]["run"].is_null(), "{ended}");
    assert!(
        gone_within(&grandchild, Duration::from_secs(10)),
        "the grandchild {grandchild} outlived the stop"
    );
    // The driver sleeps on the stopped goal: no turn after the stop.
    d.wait_for("the driver's sleep", Duration::from_secs(30), |e| e["event"] == "sleeping");
    d.signal("TERM");
    let (_, ev, _) = d.finish();
    assert_eq!(of(&ev, "turn_started").len(), 1, "{ev:#?}");
    let stopped = kinds(&log(&sb), "goal_stopped")[0].clone();
    assert_eq!(stopped["data"]["now"], true, "{stopped}");
    let h = sb.ok(&["history"]);
    assert!(
        h.stdout.contains("goal stopped now (a running turn is ended): enough for today"),
        "{}",
        h.stdout
    );
    // A plain stop lets the running turn finish; a stopped goal stopped again changes nothing.
    sb.ok(&["goal", "resume"]);
    sb.ok(&["goal", "stop"]);
    let n = log(&sb).len();
    sb.ok(&["goal", "stop"]);
    assert_eq!(log(&sb).len(), n, "stopping a stopped goal again is a no-op");
    sb.ok(&["goal", "stop", "--now"]);
    assert_eq!(log(&sb).len(), n + 1, "a plain stop made now is recorded");
}

#[test]
fn the_dashboards_stop_button_ends_the_running_turn_now() {
    let sb = goal(&["stuck [hang]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    let grandchild = wait_file(&sb.root.join(".agent-state/grandchild-t1"));
    let served = loopx_tests::web::Served::start(&sb, &sb.root, &[]);
    let key = crate::dashboard::key_of(&served.get("/").body, "main");
    let page = served.get(&format!("/p/{key}/main")).body;
    assert!(page.contains("Stop now"), "{page}");
    let r = served.post(&format!("/p/{key}/main/stop"), "token=x&note=from+the+dashboard");
    assert_ne!(r.status, 200, "a wrong token changes nothing: {}", r.body);
    assert_eq!(sb.json(&["status"])["goal_status"], "active");
    let r = served
        .post(&format!("/p/{key}/main/stop"), &format!("token={}&note=from+the+dashboard", served.token));
    assert!(r.status < 400, "{} {}", r.status, r.body);
    let (_, ended) = d.wait_for("the turn's end", Duration::from_secs(30), |e| e["event"] == "turn_ended");
    assert_eq!(ended["end"]["exit"], "interrupted", "{ended}");
    assert!(gone_within(&grandchild, Duration::from_secs(10)));
    let status = sb.json(&["status"]);
    assert_eq!(
        (status["goal_status"].as_str(), status["stop_reason"].as_str()),
        (Some("stopped"), Some("from the dashboard"))
    );
    drop(served);
    d.signal("TERM");
    d.finish();
}

#[test]
fn a_plain_goal_stop_lets_the_running_turn_finish() {
    let sb = goal(&["careful [slow]", "ship it [last]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    d.wait_for("the turn", Duration::from_secs(30), |e| e["event"] == "turn_started");
    sb.ok(&["goal", "stop"]);
    let (_, ended) = d.wait_for("the turn's end", Duration::from_secs(30), |e| e["event"] == "turn_ended");
    assert_eq!(ended["end"]["exit"], "exited", "{ended}");
    assert!(ended["end"]["run"].is_string(), "the turn wrote back: {ended}");
    d.wait_for("the driver's sleep", Duration::from_secs(30), |e| e["event"] == "sleeping");
    d.signal("TERM");
    let (_, ev, _) = d.finish();
    assert_eq!(of(&ev, "turn_started").len(), 1, "no turn after the stop: {ev:#?}");
}

#[test]
fn a_replan_turn_says_nothing_follows_and_the_goals_work_is_finished() {
    // The agent completes both todos without --no-follow-up: the kernel then asks for a
    // replan, and the agent runs the commands the replan prompt gives for "nothing is left".
    let sb = goal(&["write the reader", "parse the header"]);
    let (code, ev, stderr) =
        drive(&sb, &["--agent-id", "bot", "--host", "other"], &[("AGENT_REPLAN", "finish")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().contains("the goal's work is finished"));
    assert_eq!(finished(&ev), (3, 3, 0));
    let log = log(&sb);
    let said = kinds(&log, "nothing_follows");
    assert_eq!(said.len(), 1, "{log:#?}");
    assert_eq!(said[0]["data"]["todo"], "t2");
    assert_eq!(said[0]["data"]["note"], "why nothing is left");
    assert_eq!(completions(&log).values().copied().collect::<Vec<_>>(), [1, 1], "nothing done twice");
    // The person is asked to confirm.
    let status = sb.json(&["status"]);
    assert_eq!(status["work_finished"], true, "{status}");
    // Said again, it changes nothing; a todo still to be followed cannot be said to end it.
    let n = log.len();
    sb.ok(&["todo", "complete", "--todo-id", "t2", "--agent-id", "bot", "--no-follow-up"]);
    assert_eq!(self::log(&sb).len(), n);
}

#[test]
fn a_todo_failing_the_same_way_three_times_asks_the_person_and_other_work_goes_on() {
    let sb = Sandbox::new();
    sb.init();
    sb.ok(&["todo", "add", "--text", "build it [retry] [last]", "--validation-command", "test -f built"]);
    sb.ok(&["todo", "add", "--text", "write the docs"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    d.wait_for("the person's question", Duration::from_secs(60), |e| {
        e["event"] == "sleeping" && e["decision"] == "ask_user"
    });
    // Three turns on t1 ended without progress; the third asked the person; t2 went on.
    let log = log(&sb);
    let ends: Vec<&Value> = kinds(&log, "turn_ended");
    let on = |t: &str| ends.iter().filter(|e| e["data"]["end"]["todo"] == t).count();
    assert_eq!((on("t1"), on("t2")), (3, 1), "{ends:#?}");
    let braked: Vec<&&Value> = ends.iter().filter(|e| e["data"]["brake"]["gate"].is_object()).collect();
    assert_eq!(braked.len(), 1, "{ends:#?}");
    let gate = &braked[0]["data"]["brake"]["gate"];
    let question = gate["question"].as_str().unwrap();
    assert!(
        question.starts_with("t1: 3 driven turns without progress; last: `test -f built` exited 1"),
        "{question}"
    );
    assert!(question.contains("loopx history --turn d"), "the turns are named: {question}");
    assert_eq!(gate["blocks"], serde_json::json!({"scope": "todos", "ids": ["t1"]}));
    let gates = sb.json(&["gate", "list"]);
    assert_eq!(gates["gates"][0]["asked_by"], "loopx", "{gates}");
    // The person fixes what the check needs and answers: t1 is worked again and passes.
    std::fs::write(sb.root.join("built"), "").unwrap();
    sb.ok(&["gate", "answer", "g1", "--approve", "--note", "try again, it builds now"]);
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().contains("finished"), "{ev:#?}");
    assert_eq!(sb.json(&["status"])["counts"]["done"], 2);
    // Nothing was spent twice: one spend per turn that wrote back.
    assert_eq!(spends(&self::log(&sb)).len(), 5);
    assert_eq!(sb.json(&["report"])["work"]["brake_questions"], 1);
}

#[test]
fn a_todo_that_goes_round_without_end_is_stopped_by_its_turn_cap() {
    let sb = goal(&["polish forever [loop]"]);
    sb.ok(&["goal", "set", "--todo-turn-cap", "4"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    d.wait_for("the person's question", Duration::from_secs(60), |e| {
        e["event"] == "sleeping" && e["decision"] == "ask_user"
    });
    d.signal("TERM");
    let (_, ev, _) = d.finish();
    assert_eq!(of(&ev, "turn_ended").len(), 4, "each turn noted something new, so only the cap stopped it");
    let gates = sb.json(&["gate", "list"]);
    let q = gates["gates"][0]["question"].as_str().unwrap();
    assert!(q.starts_with("t1: reached its cap of 4 driven turns"), "{q}");
    let goal = sb.json(&["goal", "show"]);
    assert_eq!(goal["goal"]["brakes"]["todo_turn_cap"], 4, "{goal}");
    // The brakes are a person's settings, bounded.
    let r = sb.run(&["goal", "set", "--hourly-turn-cap", "61"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = sb.run(&["goal", "set", "--failover", "maybe"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn a_hosts_limit_is_waited_out_not_failed_nor_spent() {
    let sb = goal(&["build it [limited] [last]"]);
    let told = sb.root.parent().unwrap().join("told");
    let notify = format!("sh -c 'echo \"$1\" >> {}' notify", told.display());
    sb.ok(&["goal", "set", "--notify-command", &notify]);
    let (clock, clock_env) = test_clock(&sb);
    let d = Driving::start(
        &sb,
        &["--agent-id", "bot", "--limit-pattern", "RATE LIMITED, retry in (?<secs>[0-9]+)s"],
        &[("LOOPX_TEST_CLOCK_FILE", &clock_env)],
    );
    let (_, limited) =
        d.wait_for("the host's limit", Duration::from_secs(60), |e| e["event"] == "host_limited");
    let (_, sleep) = d.wait_for("the sleep", Duration::from_secs(60), |e| e["event"] == "sleeping");
    // The turn is limited: not failed, not spent, its claim kept, the reset an hour on.
    let (_, ended) = d.wait_for("the limited turn", Duration::from_secs(60), |e| e["event"] == "turn_ended");
    let end = &ended["end"];
    assert!(end["run"].is_null() && end["spent_by"].is_null(), "{end}");
    assert_eq!(end["limit"]["kind"], "declared", "{end}");
    let ended = loopx_core::Timestamp::parse_rfc3339(end["ended_at"].as_str().unwrap()).unwrap();
    let resets = loopx_core::Timestamp::parse_rfc3339(end["limit"]["resets_at"].as_str().unwrap()).unwrap();
    let ahead = resets.unix_millis() - ended.unix_millis();
    assert!((3_599_000..=3_601_000).contains(&ahead), "the reset is an hour on: {ahead} ms");
    let until = loopx_core::Timestamp::parse_rfc3339(sleep["until"].as_str().unwrap()).unwrap();
    assert_eq!(limited["until"], sleep["until"]);
    let jitter = until.unix_millis() - resets.unix_millis();
    assert!((5_000..=30_000).contains(&jitter), "a few seconds after the reset: {jitter} ms");
    assert!(sleep["reason"].as_str().unwrap().starts_with("other out of quota (declared) until"), "{sleep}");
    let status = sb.json(&["todo", "show", "--todo-id", "t1"]);
    assert_eq!(status["todo"]["claimed_by"], "bot", "the claim is kept: {status}");
    let text = sb.ok(&["status"]).stdout;
    assert!(text.contains("out of quota (declared) until"), "{text}");
    // The person was told, once.
    let said = std::fs::read_to_string(&told).unwrap();
    assert_eq!(said.matches("other out of quota (declared) until").count(), 1, "{said}");
    let served = loopx_tests::web::Served::start(&sb, &sb.root, &[]);
    let key = crate::dashboard::key_of(&served.get("/").body, "main");
    let page = served.get(&format!("/p/{key}/main")).body;
    assert!(page.contains("other out of quota (declared) until"), "the dashboard says so: {page}");
    drop(served);
    // Asleep: no CPU to speak of.
    let before = cpu_ticks(d.pid());
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(2) {
        std::thread::park_timeout(Duration::from_secs(2) - quiet.elapsed());
    }
    let used = cpu_ticks(d.pid()) - before;
    assert!(used <= 2, "the waiting driver used {used} ticks of CPU in 2 s");
    // The reset passes on the test clock: the host is asked again, and the goal finishes.
    std::fs::write(&clock, (3_600_000 + 60_000).to_string()).unwrap();
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(finished(&ev), (2, 1, 0));
    assert_eq!(spends(&log(&sb)).len(), 1, "one spend: the turn that wrote back");
    let h = sb.ok(&["history"]).stdout;
    assert!(h.contains("the host's limit (declared) until"), "{h}");
    // The report counts the limited turn and the hour waited on the host, apart from loopx's
    // own quota.
    let r = sb.json(&["report"]);
    assert_eq!(r["turns"]["limited"], 1, "{}", r["turns"]);
    assert_eq!(r["turns"]["failed"], 0);
    let host_wait = r["time"]["host_quota_ms"].as_u64().unwrap();
    assert!(host_wait >= 3_600_000, "an hour and more on the host's quota: {}", r["time"]);
    assert_eq!(r["time"]["quota_ms"], 0);
    let text = sb.ok(&["report"]).stdout;
    assert!(
        text.contains("waiting on a host's quota 1h") && text.contains("1 turn its host's limit ended"),
        "{text}"
    );
    let svg = sb.root.parent().unwrap().join("trajectory.svg");
    sb.ok(&["report", "--svg", svg.to_str().unwrap()]);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains(r#"class="host-wait""#) && drawn.contains("host quota"),
        "the wait is drawn: {drawn}"
    );
    assert!(drawn.contains(r#"class="turn limited""#), "and the limited turn: {drawn}");
}

#[test]
fn a_limited_host_hands_the_work_to_the_fallback_and_takes_it_back_after_its_reset() {
    let sb = goal(&["first [limited]", "second", "third [last]"]);
    let (clock, clock_env) = test_clock(&sb);
    let fallback = format!("other={}", agent_script().display());
    let failover_args = [
        "--agent-id",
        "bot",
        "--limit-pattern",
        "RATE LIMITED, retry in (?<secs>[0-9]+)s",
        "--fallback",
        &fallback,
        "--fallback-agent-id",
        "spare",
    ];
    let d = Driving::start(&sb, &failover_args, &[("LOOPX_TEST_CLOCK_FILE", &clock_env)]);
    let (_, over) = d.wait_for("the failover", Duration::from_secs(60), |e| e["event"] == "failover");
    assert_eq!(
        (over["from_agent"].as_str(), over["to_agent"].as_str()),
        (Some("bot"), Some("spare")),
        "{over}"
    );
    assert_eq!(over["handoff"], "h1", "{over}");
    // The first host's reset passes while the fallback works the handed todo.
    std::fs::write(&clock, (3_600_000 + 60_000).to_string()).unwrap();
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(finished(&ev), (4, 3, 0));
    // t1 went to the fallback with the packet; t2 and t3 came back to the first host's agent.
    let log = log(&sb);
    let by = completed_by(&log);
    assert_eq!(
        by,
        [("t1".into(), "spare".into()), ("t2".into(), "bot".into()), ("t3".into(), "bot".into())],
        "{by:?}"
    );
    let offered = kinds(&log, "handoff_offered")[0].clone();
    let note = offered["data"]["handoff"]["note"].as_str().unwrap();
    assert!(
        note.starts_with("other out of quota (declared) until") && note.contains("spare takes over"),
        "{note}"
    );
    assert_eq!(kinds(&log, "handoff_accepted").len(), 1);
    assert_eq!(completions(&log).values().copied().collect::<Vec<_>>(), [1, 1, 1], "nothing done twice");
    assert_eq!(spends(&log).len(), 3, "one spend per turn that wrote back");
    assert_eq!(of(&ev, "started").len(), 3, "bot, spare, then bot again");
    // Forbidden per goal: the first host waits instead.
    let sb = goal(&["first [limited] [last]"]);
    sb.ok(&["goal", "set", "--failover", "off", "--host-wait", "off"]);
    let (code, ev, _) = drive(&sb, &failover_args, &[]);
    assert_eq!(code, 3);
    assert!(of(&ev, "failover").is_empty(), "{ev:#?}");
    let r = sb.run(&["drive", "--fallback", "codex", "--", "true"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--fallback is HOST=COMMAND"), "{}", r.stderr);
    // The same agent for both hosts is refused.
    let sb = goal(&["one"]);
    sb.ok(&["agent", "register", "--agent-id", "bot", "--agent-type", "other"]);
    let r = sb.run(&["drive", "--agent-id", "bot", "--fallback", &fallback, "--", "true"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("the fallback drives agent bot"), "{}", r.stderr);
}

#[test]
fn a_goal_that_waits_on_no_host_ends_the_drive_at_a_limit() {
    let sb = goal(&["build it [limited] [last]"]);
    sb.ok(&["goal", "set", "--host-wait", "off"]);
    let (code, ev, stderr) =
        drive(&sb, &["--agent-id", "bot", "--limit-pattern", "RATE LIMITED, retry in (?<secs>[0-9]+)s"], &[]);
    assert_eq!(code, 3, "safe to retry later: {stderr}");
    let exit = of(&ev, "exited")[0];
    assert!(exit["reason"].as_str().unwrap().contains("waits on no host's limit"), "{exit}");
    assert_eq!(exit["failed"], 0);
    // A reset past the longest wait ends it too, saying how to raise it.
    let sb = goal(&["build it [limited] [last]"]);
    sb.ok(&["goal", "set", "--host-wait", "30m"]);
    let (code, ev, _) =
        drive(&sb, &["--agent-id", "bot", "--limit-pattern", "RATE LIMITED, retry in (?<secs>[0-9]+)s"], &[]);
    assert_eq!(code, 3);
    let reason = of(&ev, "exited")[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("longer than the goal's longest wait on a host (30m)"), "{reason}");
    let r = sb.run(&["drive", "--limit-pattern", "(unclosed", "--", "true"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("invalid --limit-pattern"), "{}", r.stderr);
}

#[test]
fn a_restart_after_kill_9_ends_the_turn_in_flight_and_its_processes() {
    let sb = goal(&["stuck [hang]", "ship it [last]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    let grandchild = wait_file(&sb.root.join(".agent-state/grandchild-t1"));
    d.signal("KILL");
    d.finish();
    assert!(alive(&grandchild), "kill -9 of the driver leaves its turn running");

    // The turn still hangs: the next driver kills what it left and ends it, then goes on (the
    // agent hangs again on t1, so it is stopped at once).
    let d = Driving::start(
        &sb,
        &["--agent-id", "bot", "--until", "idle", "--turn-timeout", "1s", "--max-turns", "1"],
        &[],
    );
    let (_, recovered) = d.wait_for("the recovery", Duration::from_secs(30), |e| e["event"] == "recovered");
    assert_eq!(recovered["end"]["exit"], "lost");
    assert!(recovered["killed"].as_u64().unwrap() >= 2, "{recovered}");
    assert!(gone_within(&grandchild, Duration::from_secs(10)));
    let (code, _, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_budget_spent_by_what_the_host_reports_ends_the_drive() {
    let sb = goal(&["one", "two", "three", "four"]);
    // The scripted `claude` reports 1,500 tokens and $0.01 a turn, as Claude Code's JSON does.
    sb.ok(&["goal", "set", "--budget-tokens", "3000"]);
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/drive/bin/claude");
    let mut c = loopx(&sb);
    c.args(["drive", "--json", "--host", "claude-code", "--"]).arg(fake).args(["-p"]);
    let (code, ev, stderr) = Driving::spawn(c).finish();
    assert_eq!(code, 0, "{stderr}");
    let ended = of(&ev, "turn_ended");
    assert_eq!(ended.len(), 2, "{ev:?}");
    for e in &ended {
        assert_eq!((e["end"]["tokens"].as_u64(), e["end"]["usd"].as_f64()), (Some(1500), Some(0.01)), "{e}");
        assert_eq!(e["end"]["session"], "readme-session");
    }
    let reason = of(&ev, "exited")[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("budget"), "{reason}");
    let q = sb.json(&["quota", "status"]);
    assert_eq!(q["quota"]["tokens_used"], 3000);
    assert_eq!(q["budget_exhausted"], true);
}

#[test]
fn until_idle_once_and_max_turns_end_the_drive() {
    let sb = goal(&["one", "two", "three"]);
    let (code, ev, _) = drive(&sb, &["--agent-id", "bot", "--once"], &[]);
    assert_eq!((code, of(&ev, "turn_ended").len()), (0, 1));
    let (code, ev, _) = drive(&sb, &["--agent-id", "bot", "--max-turns", "1"], &[]);
    assert_eq!((code, of(&ev, "turn_ended").len()), (0, 1));
    assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().contains("--max-turns"));
    sb.ok(&["gate", "ask", "--question", "hold on?", "--blocks", "goal"]);
    let (code, ev, _) = drive(&sb, &["--agent-id", "bot", "--until", "idle"], &[]);
    assert_eq!((code, of(&ev, "turn_ended").len()), (0, 0));
    assert!(of(&ev, "exited")[0]["reason"].as_str().unwrap().starts_with("idle (ask_user)"), "{ev:?}");
}

/// Runs `loopx <args>` as a command of a driven turn would: with the driver's variables.
fn in_turn(sb: &Sandbox, args: &[&str], turn: &str) -> loopx_tests::Run {
    sb.run_with(
        args,
        b"",
        &[
            ("LOOPX_AGENT_ID", "bot"),
            ("LOOPX_GOAL_ID", "main"),
            ("LOOPX_TURN_ID", turn),
            ("LOOPX_TODO_ID", "t1"),
        ],
    )
}

#[test]
fn commands_in_a_driven_turn_act_as_its_agent_on_its_turn() {
    let sb = goal(&["write the reader"]);
    sb.ok(&["agent", "register", "--agent-id", "bot", "--agent-type", "other"]);
    sb.ok(&["agent", "register", "--agent-id", "peer", "--agent-type", "other"]);
    // The turn's decision, as the driver records it.
    sb.ok(&["quota", "should-run", "--agent-id", "bot", "--turn-instance-id", "d1-1"]);
    let r = in_turn(&sb, &["todo", "claim"], "d1-1");
    assert_eq!(r.code, 0, "{}", r.stderr);
    // No --agent-id, no --todo-id, no --turn-instance-id: the driver's.
    let r = in_turn(
        &sb,
        &["refresh-state", "--classification", "implement", "--delivery-outcome", "outcome_progress"],
        "d1-1",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let run = kinds(&log(&sb), "run_recorded")[0]["data"]["run"].clone();
    assert_eq!(
        (run["agent"].as_str(), run["turn"].as_str(), run["todo"].as_str()),
        (Some("bot"), Some("d1-1"), Some("t1"))
    );
    // Never another agent, never a person, never governance.
    let r = in_turn(&sb, &["todo", "claim", "--agent-id", "peer"], "d1-1");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("as agent bot; it cannot act as peer"), "{}", r.stderr);
    for governing in [
        vec!["goal", "set", "--compute", "1"],
        vec!["gate", "answer", "g1", "--approve"],
        vec!["goal", "stop"],
    ] {
        let r = in_turn(&sb, &governing, "d1-1");
        assert_ne!(r.code, 0, "{governing:?} ran inside a driven turn");
    }
    let r = in_turn(&sb, &["todo", "add", "--agent-id", "user", "--text", "x"], "d1-1");
    assert_eq!(r.code, 1, "{}", r.stderr);
    // A driver inside a driven turn is refused; so is a malformed variable.
    let r = in_turn(&sb, &["drive", "--", "true"], "d1-1");
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("driving agents") && r.stderr.contains("a person's decision"), "{}", r.stderr);
    let r = sb.run_with(&["status"], b"", &[("LOOPX_AGENT_ID", "../x")]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("LOOPX_AGENT_ID"), "{}", r.stderr);
}

#[test]
fn the_mcp_server_of_a_driven_turn_settles_that_turn() {
    let sb = goal(&["write the reader"]);
    sb.ok(&["agent", "register", "--agent-id", "bot", "--agent-type", "other"]);
    sb.ok(&["quota", "should-run", "--agent-id", "bot", "--turn-instance-id", "d1-1"]);
    let calls = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"claim_task","arguments":{"todo_id":"t1"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"complete_task","arguments":{"todo_id":"t1","turn_id":"other-turn","evidence":"tests pass"}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"complete_task","arguments":{"todo_id":"t1","evidence":"tests pass"}}}"#,
    ];
    let input = calls.join("\n") + "\n";
    let r = sb.run_with(&["mcp"], input.as_bytes(), &[("LOOPX_AGENT_ID", "bot"), ("LOOPX_TURN_ID", "d1-1")]);
    let replies: Vec<Value> = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(replies[2]["result"]["isError"], true, "another turn is refused: {}", replies[2]);
    assert_eq!(replies[3]["result"]["isError"], false, "{}", replies[3]);
    let spent = spends(&log(&sb));
    assert_eq!(
        (spent.len(), spent[0]["turn"].as_str(), spent[0]["agent"].as_str()),
        (1, Some("d1-1"), Some("bot"))
    );
}

#[test]
fn bad_drive_input_is_refused_before_anything_runs() {
    let sb = goal(&["one"]);
    let before = sb.tree();
    for (args, code, says) in [
        (vec!["drive", "--host", "nope", "--", "x"], 2, "no adapter"),
        (vec!["drive", "--host", "cursor", "--", "x"], 2, "cannot run cursor"),
        (vec!["drive", "--host", "claude-code", "--", "claude"], 2, "print mode"),
        (vec!["drive", "--host", "codex", "--", "codex", "--sandbox", "workspace-write"], 2, "codex exec"),
        (vec!["drive", "--turn-timeout", "soon", "--", "x"], 2, "--turn-timeout"),
        (vec!["drive", "--agent-id", "Bad Id", "--", "x"], 2, "invalid agent"),
        (vec!["drive"], 2, "COMMAND"),
    ] {
        let r = sb.run(&args);
        assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
    assert_eq!(sb.tree(), before, "a refused drive changes nothing");
}

#[test]
fn the_dashboard_shows_the_driver_its_turns_and_their_output() {
    let sb = goal(&["flaky [fail-once]", "wait here [ask]", "ship it [last]"]);
    let d = Driving::start(&sb, &["--agent-id", "bot"], &[]);
    d.wait_for("a sleep on the question", Duration::from_secs(60), |e| e["event"] == "sleeping");
    let served = loopx_tests::web::Served::start(&sb, &sb.root, &[]);
    let inbox = served.get("/").body;
    let key = crate::dashboard::key_of(&inbox, "main");
    let page = served.get(&format!("/p/{key}/main"));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Driven") && page.body.contains(&format!("pid {}", d.pid())), "{}", page.body);
    assert!(
        page.body.contains("Driven turns") && page.body.contains("exit 1, no writeback"),
        "{}",
        page.body
    );
    let failed = of(
        &d.events.0.lock().unwrap().iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
        "turn_ended",
    )[0]["end"]["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let turn = served.get(&format!("/p/{key}/main/turn/{failed}"));
    assert_eq!(turn.status, 200);
    assert!(turn.body.contains("the build broke (scripted failure)"), "{}", turn.body);
    assert!(turn.body.contains("no writeback"), "{}", turn.body);
    // A turn id that is not one is refused, not looked up.
    assert_ne!(served.get(&format!("/p/{key}/main/turn/..%2F..%2Fetc")).status, 200);
    drop(served);
    d.signal("TERM");
    assert_eq!(d.finish().0, 143);
}

/// A host's hooks installed where `loopx drive` runs that host: the session is the driver's
/// agent's, told so, and never joined as a session agent of its own.
#[test]
fn a_hook_in_a_driven_turn_speaks_to_the_drivers_agent() {
    let s = goal(&["write a.txt"]);
    s.ok(&["agent", "register", "--agent-id", "bot", "--agent-type", "gemini"]);
    let stdin = serde_json::json!({"session_id": "s-1", "cwd": s.root, "hook_event_name": "BeforeAgent",
        "prompt": "This turn: t1"})
    .to_string();
    let hook =
        |env: &[(&str, &str)]| s.run_with(&["hook", "gemini", "before-agent"], stdin.as_bytes(), env).stdout;
    let driven = hook(&[("LOOPX_AGENT_ID", "bot"), ("LOOPX_TURN_ID", "t-1")]);
    assert!(driven.contains("You are agent bot. Your next todo: t1"), "{driven}");
    let stranger = hook(&[]);
    assert!(stranger.contains("This session has no loopx agent yet"), "{stranger}");
    let agents = s.json(&["agent", "list"]);
    assert_eq!(agents["agents"].as_array().unwrap().len(), 1, "{agents}");
}

#[test]
fn a_driven_command_has_no_terminal_of_the_persons() {
    // The person's terminal (a pseudo-terminal); the turn tries to open it and says where it is.
    let sb = goal(&["one"]);
    let seen = sb.root.parent().unwrap().join("seen");
    let probe = format!(
        "if (: </dev/tty) 2>/dev/null; then echo terminal; else echo none; fi > {0}; ps -o sid= -p $$ >> {0}; ps -o sid= -p $PPID >> {0}",
        seen.display()
    );
    let r = sb.on_terminal(&["drive", "--once", "--agent-id", "bot", "--", "sh", "-c", &probe], "");
    let seen = std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    let lines: Vec<&str> = seen.lines().map(str::trim).collect();
    assert_eq!(lines[0], "none", "the turn reached the person's terminal: {seen}");
    assert_ne!(lines[1], lines[2], "the turn runs in the driver's session: {seen}");
}

/// The turn prompt's 4,000 bytes are bytes: a goal written in CJK and emoji, with the agent's
/// own notes and validation command on its todo, still gives a prompt within them, cut between
/// characters, and what the agent wrote gives way first: the person's objective is shown at its
/// own cap.
#[test]
fn the_turn_prompt_stays_within_its_bytes_in_any_script() {
    let sb = Sandbox::new();
    let objective = "目標を達成する".repeat(190); // 3,990 bytes
    sb.ok(&["init", "--goal-id", "main", "--objective", &objective]);
    sb.ok(&["agent", "register", "--agent-id", "bot", "--agent-type", "other"]);
    let crabs = "🦀".repeat(1000);
    let check = format!("echo {}", "🦀".repeat(500));
    sb.ok(&["todo", "add", "--agent-id", "bot", "--text", &crabs, "--validation-command", &check]);
    for n in 0..3 {
        let note = format!("{n}{}", "🦀".repeat(999));
        sb.ok(&["todo", "update", "--todo-id", "t1", "--agent-id", "bot", "--note", &note]);
    }
    let prompt = sb.root.parent().unwrap().join("prompt.txt");
    let keep = format!("cat > '{}'", prompt.display());
    let mut c = loopx(&sb);
    c.args(["drive", "--json", "--agent-id", "bot", "--once", "--", "sh", "-c", &keep]);
    let (_, ev, stderr) = Driving::spawn(c).finish();
    assert_eq!(of(&ev, "turn_ended").len(), 1, "{stderr}");
    let prompt = std::fs::read_to_string(&prompt).unwrap();
    assert!(prompt.len() <= 4000, "{} bytes:\n{prompt}", prompt.len());
    let shown = prompt.lines().find(|l| l.starts_with("Objective: ")).unwrap();
    assert!(shown.len() > "Objective: ".len() + 590, "{shown}");
    assert!(shown.starts_with(&format!("Objective: \"{}", &objective[..588])), "{shown}");
    assert!(prompt.contains("This turn: t1 (P2): \"🦀") && prompt.contains("refresh-state"), "{prompt}");
}
