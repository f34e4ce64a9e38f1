//! Gates that close themselves: each kind of gate loopx checks is a [`Capability`] that turns a
//! provider's observation into a typed proposal (approve, reject, open again, keep waiting).
//! The kernel records every check through the ordinary rules (`rules::gate_checked`); an
//! observation that could not be made is "unknown, will retry", never an answer.
//!
//! Execution path: the gate's request → a [`Provider`] (the clock, the process runner, GitHub)
//! → an [`Observation`] → the gate's capability → a [`TransitionProposal`] → the kernel.

use std::sync::Arc;

use loopx_core::model::{EvidenceKind, Gate, GateKind, GateStatus, NotifyPolicy, NotifyState};
use loopx_core::traits::{
    Capability, CheckResult, EvidenceDraft, Notifier, Observation, ObservationRequest, Provider, Rejection,
    Subject, TransitionProposal,
};
use loopx_core::{GateId, Result, Timestamp};

use crate::state::GoalState;

/// The providers gate checks and notices may use, and how much `should-run` checks by itself.
#[derive(Clone, Default)]
pub struct GateRuntime {
    /// The pull-request provider (GitHub); without it, CI and merge gates are not checked.
    pub pulls: Option<Arc<dyn Provider>>,
    /// The process runner (validation commands, command gates); without it, a todo with a
    /// validation command cannot be completed and command gates are not checked.
    pub processes: Option<Arc<dyn Provider>>,
    /// Tells a person a gate needs them; without it, nobody is told.
    pub notifier: Option<Arc<dyn Notifier>>,
    /// `should-run` checks due gates itself (command gates included) before it decides.
    /// Without it (in hooks, which must answer fast), it only closes timers that are due.
    pub poll_on_should_run: bool,
    /// This machine's record of the commands its person lets loopx run (`commands.json`, see
    /// [`crate::approvals`]): validation commands, command gates and the notify command run
    /// only as it allows. Without it (tests, simulations), every command the log names runs.
    pub commands: Option<std::path::PathBuf>,
    /// This process runs where an agent's own tools run: its shell inside its host session or
    /// its driven turn. Only there does an agent's own unapproved command run; never in a
    /// driver, an MCP server, a hook or a person's shell, which run outside the agent's sandbox.
    pub agent_tools: bool,
}

impl std::fmt::Debug for GateRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateRuntime")
            .field("pulls", &self.pulls.as_ref().map(|p| p.name()))
            .field("processes", &self.processes.as_ref().map(|p| p.name()))
            .field("notifier", &self.notifier.is_some())
            .field("poll_on_should_run", &self.poll_on_should_run)
            .field("agent_tools", &self.agent_tools)
            .finish()
    }
}

/// The gates due at `now` that `runtime` can check (`timers_only`: the clock's alone).
pub fn due(state: &GoalState, now: Timestamp, runtime: &GateRuntime, timers_only: bool) -> Vec<GateId> {
    state
        .gates
        .iter()
        .filter(|g| g.due_at().is_some_and(|t| t <= now) && !g.checked_lately(now))
        .filter(|g| match &g.kind {
            GateKind::Timer { .. } => true,
            GateKind::Command { .. } => !timers_only && runtime.processes.is_some(),
            GateKind::Ci { .. } | GateKind::PrMerged { .. } => !timers_only && runtime.pulls.is_some(),
            GateKind::Person => false,
        })
        .map(|g| g.id)
        .collect()
}

/// What to ask the world for a gate of `kind`; `None` for the clock (a timer) and a person.
pub fn request(kind: &GateKind, root: &std::path::Path) -> Option<ObservationRequest> {
    match kind {
        GateKind::Person | GateKind::Timer { .. } => None,
        GateKind::Command { argv, timeout_secs, .. } => Some(ObservationRequest::RunCommand {
            argv: argv.clone(),
            cwd: root.to_path_buf(),
            timeout_ms: timeout_secs.saturating_mul(1000),
        }),
        GateKind::Ci { pr, .. } | GateKind::PrMerged { pr, .. } => Some(ObservationRequest::PullRequest {
            owner: pr.owner.clone(),
            repo: pr.repo.clone(),
            number: pr.number,
        }),
    }
}

/// The capability that reads an observation for a gate of `kind`.
pub fn capability(kind: &GateKind) -> Box<dyn Capability> {
    match kind {
        GateKind::Person => Box::new(PersonOnly),
        GateKind::Timer { until } => Box::new(TimerPassed { until: *until }),
        GateKind::Command { .. } => Box::new(CommandPassed),
        GateKind::Ci { required, .. } => Box::new(ChecksGreen { required: required.clone() }),
        GateKind::PrMerged { .. } => Box::new(PullMerged),
    }
}

/// A person's gate: no observation answers it.
struct PersonOnly;

impl Capability for PersonOnly {
    fn name(&self) -> &'static str {
        "person"
    }
    fn validate(&self, _: Subject, _: &Observation) -> Result<TransitionProposal, Rejection> {
        Err(Rejection { reason: "a person answers this gate".to_owned() })
    }
}

fn gate_of(subject: Subject) -> Result<GateId, Rejection> {
    match subject {
        Subject::Gate(g) => Ok(g),
        Subject::Todo(t) => Err(Rejection { reason: format!("{t} is a todo, not a gate") }),
    }
}

fn answer(
    gate: GateId,
    status: GateStatus,
    summary: String,
    sha: Option<&str>,
    url: Option<&str>,
) -> TransitionProposal {
    TransitionProposal::AnswerGate {
        gate,
        status,
        summary,
        head_sha: sha.map(str::to_owned),
        url: url.map(str::to_owned),
    }
}

fn wait(reason: String, sha: Option<&str>, url: Option<&str>) -> TransitionProposal {
    TransitionProposal::KeepWaiting { reason, head_sha: sha.map(str::to_owned), url: url.map(str::to_owned) }
}

/// Open until a time.
#[derive(Debug)]
pub(crate) struct TimerPassed {
    pub until: Timestamp,
}

impl Capability for TimerPassed {
    fn name(&self) -> &'static str {
        "timer"
    }
    fn validate(&self, subject: Subject, o: &Observation) -> Result<TransitionProposal, Rejection> {
        let gate = gate_of(subject)?;
        match o {
            Observation::TimeObserved { now } if *now >= self.until => {
                Ok(answer(gate, GateStatus::Approved, format!("{} has passed", self.until), None, None))
            }
            Observation::TimeObserved { .. } => Ok(wait(format!("until {}", self.until), None, None)),
            _ => Err(Rejection { reason: "a timer reads the time".to_owned() }),
        }
    }
}

/// Every required check of the pull request's head commit succeeded (every check, when none is
/// named); a failed one rejects.
#[derive(Debug)]
pub(crate) struct ChecksGreen {
    pub required: Vec<String>,
}

fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// The latest result of each check, by name: a re-run replaces the earlier one.
fn latest(checks: &[CheckResult]) -> Vec<&CheckResult> {
    let mut out: Vec<&CheckResult> = Vec::new();
    for c in checks {
        match out.iter_mut().find(|x| x.name == c.name) {
            // A completed result wins over a queued one of the same name; otherwise the later.
            Some(x) if x.status == "completed" && c.status != "completed" => {}
            Some(x) => *x = c,
            None => out.push(c),
        }
    }
    out
}

impl Capability for ChecksGreen {
    fn name(&self) -> &'static str {
        "ci-green"
    }
    fn validate(&self, subject: Subject, o: &Observation) -> Result<TransitionProposal, Rejection> {
        let gate = gate_of(subject)?;
        let Observation::PullRequestObserved { state, merged, head_sha, url, checks } = o else {
            return Err(Rejection { reason: "CI gates read a pull request".to_owned() });
        };
        let (sha, url) = (Some(head_sha.as_str()), Some(url.as_str()));
        if state == "closed" && !merged {
            return Ok(answer(
                gate,
                GateStatus::Rejected,
                "the pull request was closed without merging".to_owned(),
                sha,
                url,
            ));
        }
        let latest = latest(checks);
        let named: Vec<(&str, Option<&CheckResult>)> = if self.required.is_empty() {
            latest.iter().map(|c| (c.name.as_str(), Some(*c))).collect()
        } else {
            self.required
                .iter()
                .map(|r| (r.as_str(), latest.iter().copied().find(|c| c.name == *r)))
                .collect()
        };
        let failed: Vec<String> = named
            .iter()
            .filter_map(|(n, c)| {
                c.filter(|c| c.failed())
                    .map(|c| format!("{n} ({})", c.conclusion.as_deref().unwrap_or("failed")))
            })
            .collect();
        if !failed.is_empty() {
            let summary = format!("required check failed on {}: {}", short(head_sha), failed.join(", "));
            return Ok(answer(gate, GateStatus::Rejected, summary, sha, url));
        }
        if named.is_empty() {
            return Ok(wait(format!("no checks reported yet on {}", short(head_sha)), sha, url));
        }
        let pending: Vec<&str> =
            named.iter().filter(|(_, c)| !c.is_some_and(CheckResult::passed)).map(|(n, _)| *n).collect();
        if pending.is_empty() {
            let names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
            return Ok(answer(
                gate,
                GateStatus::Approved,
                format!("{} passed on {}", names.join(", "), short(head_sha)),
                sha,
                url,
            ));
        }
        Ok(wait(format!("waiting for {} on {}", pending.join(", "), short(head_sha)), sha, url))
    }
}

/// The pull request was merged; closed unmerged rejects.
#[derive(Debug)]
pub(crate) struct PullMerged;

impl Capability for PullMerged {
    fn name(&self) -> &'static str {
        "pr-merged"
    }
    fn validate(&self, subject: Subject, o: &Observation) -> Result<TransitionProposal, Rejection> {
        let gate = gate_of(subject)?;
        let Observation::PullRequestObserved { state, merged, head_sha, url, .. } = o else {
            return Err(Rejection { reason: "merge gates read a pull request".to_owned() });
        };
        let (sha, url) = (Some(head_sha.as_str()), Some(url.as_str()));
        Ok(match (*merged, state.as_str()) {
            (true, _) => {
                answer(gate, GateStatus::Approved, format!("merged at {}", short(head_sha)), sha, url)
            }
            (false, "closed") => {
                answer(gate, GateStatus::Rejected, "closed without merging".to_owned(), sha, url)
            }
            _ => wait("open, not merged yet".to_owned(), sha, url),
        })
    }
}

/// Least time between two notice attempts for one gate, doubling with each failure (to an hour).
fn notice_backoff_ms(failures: u32) -> i64 {
    (60_000_i64 << failures.min(6)).min(3_600_000)
}

/// Whether the person should be told about `g` now: the first notice, or the reminder. `None`
/// when nothing is due.
pub(crate) fn notice_due(g: &Gate, policy: &NotifyPolicy, now: Timestamp) -> Option<bool> {
    if !g.is_persons() || g.status != GateStatus::Open {
        return None;
    }
    notify_due(g.notified.clone().unwrap_or_default(), policy, now)
}

/// Whether a notice recorded as `n` is due now: the first, or the reminder the policy asks
/// for. `None` when nothing is due.
fn notify_due(n: NotifyState, policy: &NotifyPolicy, now: Timestamp) -> Option<bool> {
    // After a failure, wait before trying again (longer after each); an attempt in flight (a
    // claim with no outcome yet) is left to its process for a minute.
    let in_flight = n.tried_at.is_some_and(|t| Some(t) != n.sent_at && Some(t) != n.reminded_at);
    let rested = n.tried_at.is_none_or(|t| {
        let waited = now.unix_millis() - t.unix_millis();
        (n.failures == 0 && !in_flight) || waited >= notice_backoff_ms(n.failures)
    });
    match (n.sent_at, policy.remind_after_secs, n.reminded_at) {
        (None, _, _) => rested.then_some(false),
        (Some(sent), Some(after), None) => {
            let at = sent
                .unix_millis()
                .saturating_add(i64::try_from(after.saturating_mul(1000)).unwrap_or(i64::MAX));
            (rested && now.unix_millis() >= at).then_some(true)
        }
        _ => None,
    }
}

/// The gates whose person should be told now, and whether it is the reminder.
pub fn notices_due(state: &GoalState, now: Timestamp, runtime: &GateRuntime) -> Vec<(GateId, bool)> {
    let (Some(policy), Some(_)) = (&state.goal.notify, &runtime.notifier) else { return Vec::new() };
    state.gates.iter().filter_map(|g| notice_due(g, policy, now).map(|r| (g.id, r))).collect()
}

/// Whether the person should be told now that the goal's work is finished: once for each time
/// it finishes (work added and finished again is told again), never as a reminder.
pub fn finish_notice_due(state: &GoalState, now: Timestamp, runtime: &GateRuntime) -> bool {
    let (Some(policy), Some(_)) = (&state.goal.notify, &runtime.notifier) else { return false };
    if !state.work_finished() {
        return false;
    }
    let n = state.finish_notice.as_ref().filter(|f| f.todos == state.todos_total);
    notify_due(n.map(|f| f.notified.clone()).unwrap_or_default(), policy, now) == Some(false)
}

/// The channels a policy uses, as the notice records them.
pub fn channels(policy: &NotifyPolicy) -> String {
    let mut c = Vec::new();
    if policy.webhook.is_some() {
        c.push("webhook");
    }
    if policy.command.is_some() {
        c.push("command");
    }
    c.join(",")
}

/// "The validation command exited 0": the only observation that completes a todo that has one.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CommandPassed;

/// The evidence a command observation gives, passing or not.
pub(crate) fn command_evidence(observation: &Observation) -> Option<EvidenceDraft> {
    let Observation::CommandExited { argv, exit_code, output_digest, duration_ms } = observation else {
        return None;
    };
    Some(EvidenceDraft {
        kind: EvidenceKind::Command,
        summary: match exit_code {
            Some(0) => format!("validation `{}` passed in {duration_ms} ms", shell_words::join(argv)),
            Some(c) => format!("validation `{}` failed with exit code {c}", shell_words::join(argv)),
            None => format!("validation `{}` was killed after {duration_ms} ms", shell_words::join(argv)),
        },
        command: Some(argv.clone()),
        exit_code: *exit_code,
        output_digest: Some(output_digest.clone()),
    })
}

impl Capability for CommandPassed {
    fn name(&self) -> &'static str {
        "validation-command"
    }

    fn validate(
        &self,
        subject: Subject,
        observation: &Observation,
    ) -> std::result::Result<TransitionProposal, Rejection> {
        let evidence = command_evidence(observation)
            .ok_or_else(|| Rejection { reason: "not a command observation".to_owned() })?;
        let passed = matches!(observation, Observation::CommandExited { exit_code: Some(0), .. });
        match (subject, passed) {
            (Subject::Todo(todo), true) => Ok(TransitionProposal::CompleteTodo { todo, evidence }),
            (Subject::Todo(_), false) => Err(Rejection { reason: evidence.summary }),
            // A gate's check: it passed, or it waits for the next check.
            (Subject::Gate(gate), true) => Ok(TransitionProposal::AnswerGate {
                gate,
                status: loopx_core::model::GateStatus::Approved,
                summary: evidence.summary.replacen("validation", "check", 1),
                head_sha: None,
                url: None,
            }),
            (Subject::Gate(_), false) => Ok(TransitionProposal::KeepWaiting {
                reason: evidence.summary.replacen("validation", "check", 1),
                head_sha: None,
                url: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(state: &str, merged: bool, sha: &str, checks: &[(&str, &str, Option<&str>)]) -> Observation {
        Observation::PullRequestObserved {
            state: state.into(),
            merged,
            head_sha: sha.into(),
            url: "https://github.com/a/b/pull/1".into(),
            checks: checks
                .iter()
                .map(|(n, s, c)| CheckResult {
                    name: (*n).into(),
                    status: (*s).into(),
                    conclusion: c.map(Into::into),
                })
                .collect(),
        }
    }

    fn verdict(p: &TransitionProposal) -> Option<GateStatus> {
        match p {
            TransitionProposal::AnswerGate { status, .. } => Some(*status),
            _ => None,
        }
    }

    #[test]
    fn ci_green_reads_the_required_checks_of_the_head_commit() {
        let g = Subject::Gate(GateId::from_number(1));
        let ci = ChecksGreen { required: vec!["build".into(), "test".into()] };
        let v = |o: &Observation| verdict(&ci.validate(g, o).unwrap());
        let done = |c: &'static str| ("build", "completed", Some(c));
        assert_eq!(
            v(&pr("open", false, "abc1234def", &[done("success"), ("test", "in_progress", None)])),
            None
        );
        assert_eq!(v(&pr("open", false, "abc1234def", &[done("success")])), None, "test not reported yet");
        assert_eq!(
            v(&pr(
                "open",
                false,
                "abc1234def",
                &[
                    done("success"),
                    ("test", "completed", Some("success")),
                    ("lint", "completed", Some("failure"))
                ]
            )),
            Some(GateStatus::Approved),
            "an unrequired failure does not matter"
        );
        let failed = ci
            .validate(
                g,
                &pr("open", false, "abc1234def", &[done("failure"), ("test", "completed", Some("success"))]),
            )
            .unwrap();
        assert_eq!(verdict(&failed), Some(GateStatus::Rejected));
        assert!(
            matches!(&failed, TransitionProposal::AnswerGate { summary, .. } if summary.contains("build (failure)"))
        );
        // A re-run replaces the failure.
        assert_eq!(
            v(&pr(
                "open",
                false,
                "abc1234def",
                &[done("failure"), done("success"), ("test", "completed", Some("success"))]
            )),
            Some(GateStatus::Approved)
        );
        let all = ChecksGreen { required: vec![] };
        assert_eq!(verdict(&all.validate(g, &pr("open", false, "s", &[])).unwrap()), None, "no checks yet");
        assert_eq!(
            verdict(&all.validate(g, &pr("closed", false, "s", &[])).unwrap()),
            Some(GateStatus::Rejected)
        );
        assert!(all.validate(g, &Observation::TimeObserved { now: Timestamp::from_unix_millis(0) }).is_err());
        assert!(
            all.validate(Subject::Todo(loopx_core::TodoId::from_number(1)), &pr("open", false, "s", &[]))
                .is_err()
        );
    }

    #[test]
    fn merged_and_timer() {
        let g = Subject::Gate(GateId::from_number(1));
        assert_eq!(
            verdict(&PullMerged.validate(g, &pr("closed", true, "s", &[])).unwrap()),
            Some(GateStatus::Approved)
        );
        assert_eq!(
            verdict(&PullMerged.validate(g, &pr("closed", false, "s", &[])).unwrap()),
            Some(GateStatus::Rejected)
        );
        assert_eq!(verdict(&PullMerged.validate(g, &pr("open", false, "s", &[])).unwrap()), None);
        let t = TimerPassed { until: Timestamp::from_unix_millis(1000) };
        let at = |ms| Observation::TimeObserved { now: Timestamp::from_unix_millis(ms) };
        assert_eq!(verdict(&t.validate(g, &at(999)).unwrap()), None);
        assert_eq!(verdict(&t.validate(g, &at(1000)).unwrap()), Some(GateStatus::Approved));
    }

    /// Every kind of gate has its own capability, named as the log and the docs name it, and
    /// asks the world for what it reads: nothing for a person or a timer.
    #[test]
    fn each_kind_reads_its_own_observation() {
        let pr = loopx_core::model::PullRef { owner: "o".into(), repo: "r".into(), number: 7 };
        let command = GateKind::Command { argv: vec!["make".into()], every_secs: 60, timeout_secs: 90 };
        let kinds = [
            (GateKind::Person, "person"),
            (GateKind::Timer { until: Timestamp::from_unix_millis(0) }, "timer"),
            (command.clone(), "validation-command"),
            (GateKind::Ci { pr: pr.clone(), required: vec![], every_secs: 600 }, "ci-green"),
            (GateKind::PrMerged { pr: pr.clone(), every_secs: 600 }, "pr-merged"),
        ];
        for (kind, name) in &kinds {
            assert_eq!(capability(kind).name(), *name);
        }
        let root = std::path::Path::new("/p");
        assert_eq!(request(&GateKind::Person, root), None);
        assert_eq!(request(&kinds[1].0, root), None);
        assert_eq!(
            request(&command, root),
            Some(ObservationRequest::RunCommand {
                argv: vec!["make".into()],
                cwd: root.into(),
                timeout_ms: 90_000
            })
        );
        let pull = Some(ObservationRequest::PullRequest { owner: "o".into(), repo: "r".into(), number: 7 });
        assert_eq!(request(&kinds[3].0, root), pull);
        assert_eq!(request(&kinds[4].0, root), pull);
    }

    /// A commit is named by its first seven characters; a completed run of a check stands
    /// against a queued re-run of it, and otherwise the later run does.
    #[test]
    fn a_check_reads_its_latest_completed_run() {
        assert_eq!(short("abc1234def"), "abc1234");
        assert_eq!(short("abc"), "abc");
        let run = |status: &str, conclusion: Option<&str>| CheckResult {
            name: "test".into(),
            status: status.into(),
            conclusion: conclusion.map(Into::into),
        };
        let (failed, queued, passed) =
            (run("completed", Some("failure")), run("queued", None), run("completed", Some("success")));
        let runs = [failed.clone(), queued.clone()];
        assert_eq!(latest(&runs), [&failed]);
        let runs = [queued.clone(), failed.clone()];
        assert_eq!(latest(&runs), [&failed]);
        let runs = [failed, queued, passed.clone()];
        assert_eq!(latest(&runs), [&passed]);
    }

    /// A failed notice waits a minute, then twice as long after each failure, up to an hour.
    #[test]
    fn a_failed_notice_backs_off_to_an_hour() {
        let waits: Vec<i64> = [0, 1, 2, 5, 6, 7, 40].into_iter().map(notice_backoff_ms).collect();
        assert_eq!(waits, [60_000, 120_000, 240_000, 1_920_000, 3_600_000, 3_600_000, 3_600_000]);
    }

    /// When the person is told: the first notice at once; after a failure, once the back-off
    /// has passed; an attempt with no outcome yet left to its process for a minute; the
    /// reminder once its delay has passed, once.
    #[test]
    fn a_notice_is_due_first_at_once_then_after_back_off_and_the_reminder_once() {
        let at = |s: i64| Some(Timestamp::from_unix_millis(s * 1000));
        let now = Timestamp::from_unix_millis(1_000_000_000);
        let ago = |s: i64| at(1_000_000 - s);
        let remind = |secs| NotifyPolicy {
            webhook: None,
            format: loopx_core::model::NotifyFormat::Generic,
            command: Some(vec!["notify-send".into()]),
            remind_after_secs: secs,
        };
        let quiet = remind(None);
        let state = |sent, reminded, tried, failures| NotifyState {
            sent_at: sent,
            reminded_at: reminded,
            tried_at: tried,
            failures,
            last_error: None,
        };
        let cases = [
            (state(None, None, None, 0), quiet.clone(), Some(false), "never told"),
            (state(None, None, ago(119), 1), quiet.clone(), None, "failed 119 s ago"),
            (state(None, None, ago(120), 1), quiet.clone(), Some(false), "failed 120 s ago"),
            (state(None, None, ago(59), 0), quiet.clone(), None, "in flight for 59 s"),
            (state(None, None, ago(60), 0), quiet.clone(), Some(false), "in flight for a minute"),
            (state(ago(10), None, ago(10), 0), quiet.clone(), None, "told, no reminder asked"),
            (state(ago(10), None, ago(10), 0), remind(Some(11)), None, "reminder not yet due"),
            (state(ago(10), None, ago(10), 0), remind(Some(10)), Some(true), "reminder due"),
            (state(ago(10), None, ago(5), 1), remind(Some(1)), None, "reminder failed 5 s ago"),
            (state(ago(200), None, ago(120), 1), remind(Some(1)), Some(true), "reminder failed 120 s ago"),
            (state(ago(10), ago(5), ago(5), 0), remind(Some(1)), None, "reminded"),
        ];
        for (n, policy, due, what) in cases {
            assert_eq!(notify_due(n, &policy, now), due, "{what}");
        }
    }

    /// Only an open person's gate is told about.
    #[test]
    fn only_an_open_persons_gate_is_told_about() {
        let gate = |kind, status| Gate {
            id: GateId::from_number(1),
            question: "ship it?".into(),
            blocks: loopx_core::model::GateBlocks::Goal,
            kind,
            status,
            asked_by: "a".into(),
            asked_at: Timestamp::from_unix_millis(0),
            answered_by: None,
            answered_at: None,
            note: None,
            check: None,
            notified: None,
        };
        let policy = NotifyPolicy {
            webhook: None,
            format: loopx_core::model::NotifyFormat::Generic,
            command: Some(vec!["notify-send".into()]),
            remind_after_secs: None,
        };
        let now = Timestamp::from_unix_millis(1_000);
        let timer = GateKind::Timer { until: now };
        assert_eq!(notice_due(&gate(GateKind::Person, GateStatus::Open), &policy, now), Some(false));
        assert_eq!(notice_due(&gate(GateKind::Person, GateStatus::Approved), &policy, now), None);
        assert_eq!(notice_due(&gate(timer.clone(), GateStatus::Open), &policy, now), None);
        assert_eq!(notice_due(&gate(timer, GateStatus::Rejected), &policy, now), None);
    }

    /// A command's exit is the evidence: a todo completes on 0 and is refused otherwise; a
    /// gate is approved on 0 and otherwise waits for its next check.
    #[test]
    fn a_command_completes_a_todo_or_a_gate_only_when_it_exits_0() {
        let exit = |code| Observation::CommandExited {
            argv: vec!["make".into(), "test it".into()],
            exit_code: code,
            output_digest: "d1".into(),
            duration_ms: 12,
        };
        let todo = Subject::Todo(loopx_core::TodoId::from_number(3));
        let gate = Subject::Gate(GateId::from_number(2));
        let summary = |code| command_evidence(&exit(code)).unwrap().summary;
        assert_eq!(summary(Some(0)), "validation `make 'test it'` passed in 12 ms");
        assert_eq!(summary(Some(2)), "validation `make 'test it'` failed with exit code 2");
        assert_eq!(summary(None), "validation `make 'test it'` was killed after 12 ms");
        let e = command_evidence(&exit(Some(2))).unwrap();
        assert_eq!(
            (e.kind, e.exit_code, e.output_digest.as_deref()),
            (EvidenceKind::Command, Some(2), Some("d1"))
        );
        assert_eq!(e.command, Some(vec!["make".to_owned(), "test it".to_owned()]));
        assert_eq!(
            command_evidence(&Observation::TimeObserved { now: Timestamp::from_unix_millis(0) }),
            None
        );

        let c = CommandPassed;
        assert!(matches!(c.validate(todo, &exit(Some(0))), Ok(TransitionProposal::CompleteTodo { .. })));
        assert_eq!(c.validate(todo, &exit(Some(1))).unwrap_err().reason, summary(Some(1)));
        assert_eq!(verdict(&c.validate(gate, &exit(Some(0))).unwrap()), Some(GateStatus::Approved));
        match c.validate(gate, &exit(None)).unwrap() {
            TransitionProposal::KeepWaiting { reason, .. } => {
                assert_eq!(reason, "check `make 'test it'` was killed after 12 ms");
            }
            other => panic!("{other:?}"),
        }
    }

    /// The channels a notice went out on, as its record names them.
    #[test]
    fn a_notice_names_its_channels() {
        let policy = |webhook: Option<&str>, command: bool| NotifyPolicy {
            webhook: webhook.map(str::to_owned),
            format: loopx_core::model::NotifyFormat::Generic,
            command: command.then(|| vec!["notify-send".to_owned()]),
            remind_after_secs: None,
        };
        assert_eq!(channels(&policy(Some("env:HOOK"), true)), "webhook,command");
        assert_eq!(channels(&policy(Some("env:HOOK"), false)), "webhook");
        assert_eq!(channels(&policy(None, true)), "command");
        assert_eq!(channels(&policy(None, false)), "");
    }
}
