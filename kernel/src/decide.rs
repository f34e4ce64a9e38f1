//! The decision table (ARCHITECTURE.md, "A `should-run` decision"): a pure function of the goal's
//! state and the clock.
//! Rows are evaluated top to bottom; the first that matches decides.
//!
//! | # | situation | decision | state |
//! |---|---|---|---|
//! | 1 | goal stopped or compute 0 | stop (paused) | paused |
//! | 2 | no identity (2+ agents and no id, or an unregistered id) | identity error | — |
//! | 3 | budget exhausted | stop (budget) | budget_exhausted |
//! | 4 | every todo closed, one with no follow-up, no open gate | stop (terminal) | terminal |
//! | 4b | the agent handed its work off and the handoff is pending | handoff | waiting |
//! | 5 | a gate blocks the agent, or holds all its runnable work | ask_user | operator_gate |
//! | 5b | a gate holds some todos, other work is runnable | (run below, gate in the user channel) | operator_gate |
//! | 6 | allowed slots spent | wait until a slot frees | throttled |
//! | 7 | the agent's work waits on a time, a todo, a person, or a peer holding or receiving it | wait | waiting |
//! | 8 | a selectable todo | run | eligible |
//! | 9 | nothing runnable, not terminal | replan | eligible |
//!
//! Row 5b does not bypass quota: with a scoped gate open, the agent's remaining work still goes
//! through rows 6–8, and the gate's question rides along in the user channel.

use loopx_core::agent::{Cadence, HostCatalog};
use loopx_core::continuation::{Continuation, StopCause};
use loopx_core::decision::{
    DecisionKind, OpenQuestion, RunState, SchedulerAction, SchedulerHint, SelectedTodo, ShouldRunAnswer,
    TurnRef, UserChannel,
};
use loopx_core::model::{GateBlocks, GateStatus, GoalStatus, HandoffMode, HandoffStatus, ResumeWhen, Role};
use loopx_core::next::NextStep;
use loopx_core::untrusted::quoted;
use loopx_core::{AgentId, Error, GateId, Result, Timestamp, TodoId};

use crate::quota;
use crate::state::GoalState;
use crate::table::Glance;

/// The decision for one agent at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub decision: DecisionKind,
    pub state: RunState,
    pub reason: String,
    pub continuation: Continuation,
    pub selected: Option<TodoId>,
    pub claim_required: bool,
}

impl Decision {
    pub fn should_run(&self) -> bool {
        matches!(self.decision, DecisionKind::Run | DecisionKind::Replan)
    }

    fn stop(cause: StopCause, state: RunState, reason: String) -> Self {
        Self {
            decision: DecisionKind::Stop,
            state,
            reason,
            continuation: Continuation::Stop { cause },
            selected: None,
            claim_required: false,
        }
    }

    fn wait(state: RunState, reason: String, until: Option<Timestamp>, on: Option<String>) -> Self {
        Self {
            decision: DecisionKind::Wait,
            state,
            reason,
            continuation: Continuation::Wait { until, on },
            selected: None,
            claim_required: false,
        }
    }
}

/// Row 2: who is asking. One registered agent is implied; otherwise the id is required.
pub(crate) fn resolve_agent(state: &GoalState, requested: Option<&AgentId>) -> Result<AgentId> {
    let register_hint =
        "register it: loopx agent register --agent-id <agent> --agent-type <type> (see loopx agent types)";
    match requested {
        Some(a) if state.agent(a).is_some() => Ok(a.clone()),
        Some(a) => Err(Error::identity(format!("agent {a} is not registered on goal {}", state.goal.id))
            .with_hint(format!("register it: loopx agent register --agent-id {a} --agent-type <type>"))),
        None => match state.agents.as_slice() {
            [only] => Ok(only.id.clone()),
            [] => Err(Error::identity(format!("no agent is registered on goal {}", state.goal.id))
                .with_hint(register_hint)),
            many => {
                let ids: Vec<&str> = many.iter().map(|a| a.id.as_str()).collect();
                Err(Error::identity(format!(
                    "{} agents are registered on goal {} ({}); say which one is asking",
                    many.len(),
                    state.goal.id,
                    ids.join(", ")
                ))
                .with_hint(format!("pass --agent-id, e.g. --agent-id {}", ids[0])))
            }
        },
    }
}

/// Row 4, for `me`: every todo closed, one with no follow-up, and no open gate that blocks
/// `me` (a gate scoped to another agent is that agent's matter).
fn is_terminal(state: &GoalState, me: &AgentId) -> bool {
    state.all_work_closed()
        && !state.open_gates().any(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Agent(a) => a == me,
            GateBlocks::Todos(_) => false,
        })
}

fn question_ids(gates: &[GateId]) -> String {
    gates.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Runs the table for `requested` (or the implied agent). Returns the agent (absent only
/// when row 1 answers before identity is checked) and the decision.
pub fn decide(
    state: &GoalState,
    requested: Option<&AgentId>,
    now: Timestamp,
) -> Result<(Option<AgentId>, Decision)> {
    // Row 1: done, or paused, for everyone, whoever asks.
    if state.goal.status == GoalStatus::Done {
        let agent = requested.and_then(|a| state.agent(a).map(|x| x.id.clone()));
        let reason = "the goal is done: a person confirmed its objective is met".to_owned();
        return Ok((agent, Decision::stop(StopCause::Done, RunState::Done, reason)));
    }
    if state.goal.status == GoalStatus::Stopped || quota::is_paused(state) {
        let reason = match (&state.goal.status, &state.goal.stop_reason) {
            (GoalStatus::Stopped, Some(r)) => format!("the goal is stopped: {}", quoted(r, 200)),
            (GoalStatus::Stopped, None) => "the goal is stopped".to_owned(),
            _ => "compute is 0: the goal is paused for every agent".to_owned(),
        };
        let agent = requested.and_then(|a| state.agent(a).map(|x| x.id.clone()));
        return Ok((agent, Decision::stop(StopCause::Paused, RunState::Paused, reason)));
    }
    // Row 2.
    let me = resolve_agent(state, requested)?;
    Ok((Some(me.clone()), decide_for(state, &me, now)))
}

/// The decision for `requested` taken from a glance at the goal ([`Glance`]: `state` holds the
/// glance's todos alone, `glance` says how many the goal has), when the glance vouches for it;
/// `None` sends the caller to the whole state. It vouches for a run of a todo it holds: every
/// todo that could rank before that one is in it (the best free todos, and every held one),
/// and so is every todo the rest of the answer counts (a person's open ones). A decision that
/// reads beyond the todos it ranks is never taken from it: when a gate may hold todos back
/// (every todo is looked at for it), a handoff is pending or was taken over (handed todos rank
/// first, whichever they are), or a todo in it waits for another (looked up by id).
pub fn decide_at_a_glance(
    state: &GoalState,
    glance: Glance,
    requested: Option<&AgentId>,
    now: Timestamp,
) -> Option<(Option<AgentId>, Decision)> {
    let handed = state
        .handoffs
        .iter()
        .any(|h| matches!(h.status_at(now), HandoffStatus::Pending | HandoffStatus::Accepted));
    if state.gates_may_hold() || handed {
        return None;
    }
    let (mut held, mut user) = (0, 0);
    for k in state.todos.keys() {
        if matches!(k.resume_when, Some(ResumeWhen::TodoDone(_))) {
            return None;
        }
        held += usize::from(k.is_agent_work() && k.holder().is_some());
        user += usize::from(k.role == Role::User && !k.status.is_closed());
    }
    if held != glance.held || user != glance.user {
        return None;
    }
    let (agent, d) = decide(state, requested, now).ok()?;
    (d.decision == DecisionKind::Run && d.selected.is_some()).then_some((agent, d))
}

fn decide_for(state: &GoalState, me: &AgentId, now: Timestamp) -> Decision {
    // Row 3.
    if quota::budget_exhausted(state) {
        let q = &state.goal.quota;
        let reason = match (q.budget_tokens, q.budget_usd) {
            (Some(b), _) if state.tokens_used >= b => {
                format!("the token budget is spent ({} of {b})", state.tokens_used)
            }
            (_, Some(b)) => format!("the money budget is spent (${:.2} of ${b:.2})", state.usd_used),
            _ => "the budget is spent".to_owned(),
        };
        return Decision::stop(StopCause::BudgetExhausted, RunState::BudgetExhausted, reason);
    }
    // Row 4.
    if is_terminal(state, me) {
        return Decision::stop(
            StopCause::Terminal,
            RunState::Terminal,
            "every todo is closed and nothing follows".to_owned(),
        );
    }
    // Row 4b: the agent handed its work off; its lane waits for the receiver.
    if let Some(h) = state.handoff_sent_by(me, now) {
        return Decision {
            decision: DecisionKind::Handoff,
            state: RunState::Waiting,
            reason: format!(
                "you handed off to {} ({}); it waits to be taken over until {}",
                h.receiver(),
                h.id,
                h.expires_at
            ),
            continuation: Continuation::Handoff {
                handoff: h.id,
                to_host: h.to_host.name().to_owned(),
                to_agent: h.to_agent.clone(),
            },
            selected: None,
            claim_required: false,
        };
    }
    // Row 5: a gate on the whole goal, or on this agent.
    let blocking: Vec<GateId> = state
        .open_gates()
        .filter(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Agent(a) => a == me,
            GateBlocks::Todos(_) => false,
        })
        .map(|g| g.id)
        .collect();
    if !blocking.is_empty() {
        return gated(state, blocking);
    }
    // The best pick (only it is decoded).
    let pick = state.pick(Some(me), now);
    // Held back by gates: no todo is when no gate is open or rejected (a pass over every todo
    // saved).
    let held: Vec<GateId> = if !state.gates_may_hold() {
        Vec::new()
    } else {
        let mut ids: Vec<GateId> = state
            .todos
            .keys()
            .filter(|t| state.candidate(*t, Some(me)) && !state.is_waiting(*t, now))
            .filter_map(|t| state.gate_holding(t))
            // Open gates, and rejected ones loopx still checks (a new head commit opens them).
            .filter(|g| state.gate(*g).is_some_and(|g| g.status == GateStatus::Open || g.checkable()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    if pick.is_none() && !held.is_empty() {
        return gated(state, held);
    }
    let gated_elsewhere = !held.is_empty(); // row 5b: carried into rows 6–8
    // Row 6.
    if quota::is_throttled(state, now) {
        let q = &state.goal.quota;
        let next = quota::next_slot_at(state, now);
        let reason = match next {
            Some(t) => format!(
                "all {} slots of the {} h window are spent; the next frees at {t}",
                q.effective_allowed_slots(),
                q.window_hours
            ),
            None => format!("the quota allows {} slots; none are left", q.effective_allowed_slots()),
        };
        return Decision::wait(RunState::Throttled, reason, next, Some("quota".to_owned()));
    }
    // Row 7: this agent's work all waits on something.
    if pick.is_none() {
        let waiting: Vec<_> =
            state.todos.matching(|t| state.candidate(t, Some(me)) && state.is_waiting(t, now)).collect();
        if let Some(first) = waiting.iter().min_by_key(|t| (t.priority, t.id)) {
            let until = waiting
                .iter()
                .filter_map(|t| match t.resume_when {
                    Some(ResumeWhen::At(at)) => Some(at),
                    _ => None,
                })
                .min();
            let cond = first.resume_when.as_ref().map(ToString::to_string).unwrap_or_default();
            let reason = format!("{} waits until {cond}", first.id);
            return Decision::wait(RunState::Waiting, reason, until, Some(cond));
        }
        // Work handed to another host or agent waits for it, until the handoff expires.
        let handed =
            state.todos.keys().filter(|t| t.role == Role::Agent && !t.status.is_closed()).find_map(|t| {
                state
                    .handoff_holding(t.id, now)
                    .filter(|_| !state.handoff_allows(t.id, Some(me), now))
                    .map(|h| (t, h))
            });
        if let Some((t, h)) = handed {
            let reason = format!("{} is handed off to {} ({}); wait for it", t.id, h.receiver(), h.id);
            return Decision::wait(
                RunState::Waiting,
                reason,
                Some(h.expires_at),
                Some(format!("handoff {}", h.id)),
            );
        }
        // Peers wait for peers: the agent work left is held by other agents. Look again when
        // the first of their leases runs out; never invent work or close theirs.
        let held: Vec<_> = state
            .todos
            .matching(|t| {
                t.role == Role::Agent && !t.status.is_closed() && t.holder().is_some_and(|c| c != me)
            })
            .collect();
        if let Some(first) = held.iter().min_by_key(|t| (t.priority, t.id)) {
            let owner = first.holder().map_or("", |a| a.as_str());
            let until = held
                .iter()
                .filter_map(|t| t.lease.as_ref().filter(|l| l.is_active(now)))
                .map(|l| l.expires_at)
                .min();
            let reason = format!(
                "the agent work left is held by other agents ({} by {owner}{}); wait for them",
                first.id,
                if held.len() > 1 { format!(", and {} more", held.len() - 1) } else { String::new() }
            );
            return Decision::wait(
                RunState::Waiting,
                reason,
                until,
                Some(format!("{} claimed by {owner}", first.id)),
            );
        }
        let user_todo = state.todos.matching(|t| t.role == Role::User && !t.status.is_closed()).next();
        let agent_work_left = state.todos.keys().any(|t| t.role == Role::Agent && !t.status.is_closed());
        if let (Some(u), false) = (user_todo, agent_work_left) {
            let reason = format!("only a person's work is left: {} {}", u.id, quoted(&u.text, 200));
            return Decision::wait(RunState::Waiting, reason, None, Some(format!("user todo {}", u.id)));
        }
    }
    // Row 8.
    if let Some(t) = pick {
        let mine = t.claimed_by.as_ref() == Some(me);
        let mut reason = if mine {
            format!("continue {}, which you hold", t.id)
        } else if t.assignee.as_ref() == Some(me) {
            match t.predecessor {
                Some(p) => format!("{} follows {p}, which you completed; claim it", t.id),
                None => format!("{} waits for you; claim it", t.id),
            }
        } else {
            format!("{} is the next open todo ({})", t.id, t.priority)
        };
        if gated_elsewhere {
            reason.push_str(&format!("; {} waits for a person", question_ids(&held)));
        }
        return Decision {
            decision: DecisionKind::Run,
            state: if gated_elsewhere { RunState::OperatorGate } else { RunState::Eligible },
            reason,
            continuation: Continuation::Run { todo: t.id, claim_required: !mine },
            selected: Some(t.id),
            claim_required: !mine,
        };
    }
    // Row 9.
    let reason = "nothing is runnable and the goal is not finished: add the next todos, \
                  or complete the last one with --no-follow-up"
        .to_owned();
    Decision {
        decision: DecisionKind::Replan,
        state: RunState::Eligible,
        reason: reason.clone(),
        continuation: Continuation::Replan { reason },
        selected: None,
        claim_required: false,
    }
}

/// Rows 5 and 5b's answer when gates hold the agent's work: ask the user when a person must
/// answer one, otherwise wait for the checks loopx makes itself (until the next is due).
fn gated(state: &GoalState, gates: Vec<GateId>) -> Decision {
    let persons: Vec<GateId> =
        gates.iter().copied().filter(|g| state.gate(*g).is_some_and(|g| g.is_persons())).collect();
    if !persons.is_empty() {
        return ask_user(state, persons);
    }
    let typed: Vec<&loopx_core::model::Gate> = gates.iter().filter_map(|g| state.gate(*g)).collect();
    let until = typed.iter().filter_map(|g| g.due_at()).min();
    let reason = match typed.first() {
        Some(g) => {
            let seen = g
                .check
                .as_ref()
                .map(|c| format!("; last check: {}", quoted(&c.summary, 240)))
                .unwrap_or_default();
            let next = until.map(|t| format!("; next check at {t}")).unwrap_or_default();
            format!("{} waits for {}{seen}{next}", g.id, g.kind.describe())
        }
        None => "waiting for a gate".to_owned(),
    };
    let on = typed.first().map(|g| format!("gate {} ({})", g.id, g.kind.word()));
    Decision::wait(RunState::Waiting, reason, until, on)
}

fn ask_user(state: &GoalState, gates: Vec<GateId>) -> Decision {
    let first = gates.first().and_then(|g| state.gate(*g));
    let reason = match first {
        Some(g) => format!("waiting for a person to answer {}: {}", g.id, quoted(&g.question, 240)),
        None => "waiting for a person".to_owned(),
    };
    Decision {
        decision: DecisionKind::AskUser,
        state: RunState::OperatorGate,
        reason,
        continuation: Continuation::AskUser { gates, fallback: None },
        selected: None,
        claim_required: false,
    }
}

/// A gate as a question: a person's, or a check loopx makes itself with what it last saw.
pub fn open_question(g: &loopx_core::model::Gate, max: usize) -> OpenQuestion {
    OpenQuestion {
        gate: g.id,
        question: short(&g.question, max),
        blocks: g.blocks.to_string(),
        kind: (!g.is_persons()).then(|| g.kind.word().to_owned()),
        last_check: g.check.as_ref().map(|c| short(&c.summary, max)),
        next_check_at: g.due_at().filter(|_| !g.is_persons()),
    }
}

/// The backoff ladder for unchanged polls: 3 → 6 → 10 minutes.
pub(crate) fn backoff_minutes(unchanged_polls: u32) -> u32 {
    match unchanged_polls {
        0 => 3,
        1 => 6,
        _ => 10,
    }
}

fn minutes_until(now: Timestamp, at: Timestamp) -> u32 {
    let ms = at.unix_millis().saturating_sub(now.unix_millis()).max(0).unsigned_abs();
    u32::try_from(ms.div_ceil(60_000)).unwrap_or(u32::MAX).max(1)
}

/// Recorded polls in a row that found the work unchanged, as of now.
pub fn unchanged_polls(state: &GoalState, agent: &AgentId) -> u32 {
    state.schedulers.get(agent).filter(|s| s.last_work_seq == state.work_seq).map_or(0, |s| s.unchanged_polls)
}

/// The scheduler hint for a host paced by `cadence`. Cadence changes never spend.
pub(crate) fn scheduler_hint(
    state: &GoalState,
    agent: Option<&AgentId>,
    d: &Decision,
    cadence: &Cadence,
    now: Timestamp,
) -> SchedulerHint {
    let (base, limit) = (cadence.base_minutes, cadence.unchanged_poll_limit);
    let unchanged = agent.map_or(0, |a| unchanged_polls(state, a));
    let ladder = base.map(|_| backoff_minutes(unchanged));
    let (mut action, mut minutes, mut wait_until, mut reason) = match (&d.decision, &d.continuation) {
        (DecisionKind::Run, _) if d.state == RunState::OperatorGate => {
            (SchedulerAction::RunNow, base, None, "fallback_work")
        }
        (DecisionKind::Run, _) => (SchedulerAction::RunNow, base, None, "eligible"),
        (DecisionKind::Replan, _) => (SchedulerAction::RunNow, base, None, "replan"),
        (DecisionKind::AskUser, _) => (SchedulerAction::WaitForUser, ladder, None, "operator_gate"),
        (DecisionKind::Wait, Continuation::Wait { until: Some(at), .. }) => {
            let code = if d.state == RunState::Throttled { "throttled" } else { "waiting" };
            (SchedulerAction::WaitUntil, base.map(|_| minutes_until(now, *at)), Some(*at), code)
        }
        (DecisionKind::Wait, _) if d.state == RunState::Throttled => {
            (SchedulerAction::StopUntilResume, None, None, "throttled")
        }
        (DecisionKind::Wait, _) => (SchedulerAction::Backoff, ladder, None, "waiting"),
        (DecisionKind::Handoff, _) => (SchedulerAction::StopUntilResume, None, None, "handoff"),
        (DecisionKind::Stop, Continuation::Stop { cause }) => (
            SchedulerAction::StopUntilResume,
            None,
            None,
            match cause {
                StopCause::Paused => "paused",
                StopCause::Terminal => "terminal",
                StopCause::Throttled => "throttled",
                StopCause::BudgetExhausted => "budget_exhausted",
                StopCause::Done => "done",
            },
        ),
        (DecisionKind::Stop, _) => (SchedulerAction::StopUntilResume, None, None, "stopped"),
    };
    if let Some(limit) = limit
        && matches!(action, SchedulerAction::Backoff | SchedulerAction::WaitForUser)
        && unchanged >= limit
    {
        (action, minutes, wait_until, reason) =
            (SchedulerAction::StopUntilResume, None, None, "unchanged_poll_limit");
    }
    let rrule = cadence.rrule.then(|| minutes.map(|c| format!("FREQ=MINUTELY;INTERVAL={c}"))).flatten();
    let (ack, fail) = match (agent, minutes) {
        (Some(_), Some(c)) => (
            Some(NextStep::SchedulerAck { cadence_minutes: c, rrule: rrule.clone() }),
            Some(NextStep::SchedulerFail),
        ),
        _ => (None, None),
    };
    SchedulerHint {
        profile: cadence.profile.clone(),
        action,
        cadence_minutes: minutes,
        reason_code: reason.to_owned(),
        unchanged_polls: unchanged,
        unchanged_poll_limit: limit,
        wait_until,
        rrule,
        ack,
        fail,
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// How the answer paces the asking agent: `forced` (a profile the caller named), else as the
/// catalog paces the agent's host type.
#[derive(Clone, Copy, Debug)]
pub struct Pacing<'a> {
    pub hosts: &'a HostCatalog,
    pub forced: Option<&'a Cadence>,
}

/// The whole answer: decision, user channel, quota, scheduler hint and next commands.
pub fn answer(
    state: &GoalState,
    agent: Option<&AgentId>,
    d: &Decision,
    pacing: Pacing<'_>,
    now: Timestamp,
    turn: Option<TurnRef>,
) -> ShouldRunAnswer {
    let cadence = match (pacing.forced, agent.and_then(|a| state.agent(a))) {
        (Some(c), _) => c.clone(),
        (None, Some(a)) => pacing.hosts.cadence(&a.agent_type),
        (None, None) => Cadence::generic(),
    };
    let quota = quota::view(state, now);
    let questions: Vec<OpenQuestion> = state.open_gates().take(5).map(|g| open_question(g, 240)).collect();
    let user_todos = state.todos.keys().filter(|t| t.role == Role::User && !t.status.is_closed()).count();
    let notify = questions.iter().any(|q| q.kind.is_none())
        || d.decision == DecisionKind::AskUser
        || (d.decision == DecisionKind::Wait && d.state == RunState::Waiting && user_todos > 0);
    let selected_todo = d.selected.and_then(|id| state.todo(id)).map(|t| SelectedTodo {
        id: t.id,
        text: short(&t.text, 400),
        priority: t.priority,
        claim_required: d.claim_required,
        validation: t.validation.as_ref().map(|v| shell_words::join(&v.argv)),
    });
    let scheduler = scheduler_hint(state, agent, d, &cadence, now);
    let next = next_steps(state, agent, d, now);
    ShouldRunAnswer {
        goal_id: state.goal.id.clone(),
        agent_id: agent.cloned(),
        decision: d.decision,
        should_run: d.should_run(),
        reason: d.reason.clone(),
        state: d.state,
        continuation: d.continuation.clone(),
        selected_todo,
        user_channel: UserChannel { notify, questions, user_todos },
        quota,
        scheduler,
        next,
        turn,
    }
}

fn next_steps(state: &GoalState, agent: Option<&AgentId>, d: &Decision, now: Timestamp) -> Vec<NextStep> {
    // Paused: a stopped goal is resumed; one with compute 0 gets compute back.
    let unpause = if state.goal.status == GoalStatus::Stopped {
        NextStep::ResumeGoal
    } else {
        NextStep::RestoreCompute
    };
    if d.state == RunState::Done {
        return vec![NextStep::Status];
    }
    if agent.is_none() {
        return vec![unpause];
    }
    match (d.decision, d.selected) {
        (DecisionKind::Run, Some(todo)) => {
            let mut v = Vec::new();
            // A handed-over todo is claimed, which takes the handoff (and its leases) over.
            let handed = state.handoff_holding(todo, now).is_some();
            if d.claim_required && !handed && state.goal.handoff_mode == HandoffMode::HardLease {
                v.push(NextStep::AcquireLease { todo, ttl: "45m".to_owned() });
            } else if d.claim_required {
                v.push(NextStep::Claim { todo });
            }
            v.extend([
                NextStep::Complete { todo },
                NextStep::RefreshState { todo },
                NextStep::SpendSlot { todo },
            ]);
            v
        }
        (DecisionKind::Replan, _) => vec![NextStep::AddTodo, NextStep::ListTodos],
        (DecisionKind::AskUser, _) => vec![NextStep::ListGates, NextStep::ShouldRun],
        (DecisionKind::Stop, _) if d.state == RunState::Paused => vec![unpause],
        (DecisionKind::Stop, _) => vec![NextStep::Status],
        _ => vec![NextStep::ShouldRun],
    }
}
