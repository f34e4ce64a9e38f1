//! `loopx drive` in the kernel: the rules of a driver's lease and of a driven turn's end, and
//! the prompt a driven turn starts from. Pure: state, actor and request in, at most one event
//! (or the prompt's text) out.

use loopx_core::decision::{DecisionKind, ShouldRunAnswer};
use loopx_core::drive::{
    BrakeGate, DriverLease, DriverOp, DriverRequest, EndTurn, HostLimit, MAX_LIMIT_KIND_LEN,
    MAX_LIMIT_MESSAGE_LEN, MAX_MACHINE_LEN, MAX_SESSION_LEN, MAX_TAIL_LEN, TodoTurns, TurnBrake, TurnEnd,
    TurnExit, TurnView, tail_of,
};
use loopx_core::event::Event;
use loopx_core::model::{GateBlocks, GateStatus, GoalStatus, Spend, TodoStatus};
use loopx_core::untrusted::{flatten, flatten_bytes, quoted_bytes};
use loopx_core::{AgentId, Error, IdempotencyKey, Result, Timestamp};

use crate::actor::Actor;
use crate::state::GoalState;

/// Shortest and longest driver lease.
pub const MIN_LEASE_SECS: u64 = 10;
pub const MAX_LEASE_SECS: u64 = 24 * 3600;

fn driving_agent(actor: &Actor) -> Result<&AgentId> {
    actor.agent().ok_or_else(|| {
        Error::identity("loopx drive runs as a registered agent, not as a person")
            .with_hint("pass --agent-id <agent> (see loopx agent list)")
    })
}

fn check_lease_ttl(ttl_secs: u64) -> Result<()> {
    if (MIN_LEASE_SECS..=MAX_LEASE_SECS).contains(&ttl_secs) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "--lease must be between {MIN_LEASE_SECS} s and {} h, not {ttl_secs} s",
        MAX_LEASE_SECS / 3600
    ))
    .with_hint("e.g. loopx drive --lease 10m"))
}

fn lease_at(ttl_secs: u64, now: Timestamp) -> Timestamp {
    now.saturating_add(std::time::Duration::from_secs(ttl_secs))
}

/// Who holds `d`, for a refusal.
pub fn holder(d: &DriverLease) -> String {
    let turn = d.turn.as_ref().map(|t| format!(", running turn {t}")).unwrap_or_default();
    format!("pid {} on {} since {}{turn}; its lease runs to {}", d.pid, d.machine, d.since, d.expires_at)
}

/// A driver's lease on the acting agent: start, renew or stop.
pub fn lease(state: &GoalState, actor: &Actor, req: &DriverRequest, now: Timestamp) -> Result<Option<Event>> {
    let agent = driving_agent(actor)?;
    IdempotencyKey::new(&req.id)
        .map_err(|_| Error::usage(format!("invalid driver lease id {:?}", flatten(&req.id, 40))))?;
    let held = state.drivers.get(agent);
    let mine = held.filter(|d| d.id == req.id);
    match &req.op {
        DriverOp::Start { host, machine, pid, ttl_secs, replaces } => {
            check_lease_ttl(*ttl_secs)?;
            if host.is_empty()
                || host.len() > 64
                || !host.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            {
                return Err(Error::usage(format!("invalid host name {:?}", flatten(host, 40))));
            }
            if machine.trim().is_empty()
                || machine.len() > MAX_MACHINE_LEN
                || machine.chars().any(char::is_control)
            {
                return Err(Error::usage(format!("invalid machine name {:?}", flatten(machine, 40))));
            }
            if let Some(d) = held
                && d.is_active(now)
                && replaces.as_deref() != Some(d.id.as_str())
                && d.id != req.id
            {
                return Err(Error::conflict(format!("agent {agent} is already driven: {}", holder(d))).with_hint(
                    format!(
                        "one driver runs an agent at a time: stop that one (Ctrl-C in its terminal, or kill {}), or drive another agent with --agent-id",
                        d.pid
                    ),
                ));
            }
            if mine.is_some() {
                return Ok(None);
            }
            // A turn the driver before left unended stays on the lease until this driver ends
            // it: should this one die first too, the next still finds it and spends its
            // writeback.
            let left = held.filter(|d| d.turn.as_ref().is_some_and(|t| state.turn_end(agent, t).is_none()));
            let lease = DriverLease {
                agent: agent.clone(),
                id: req.id.clone(),
                host: host.clone(),
                machine: machine.clone(),
                pid: *pid,
                since: now,
                expires_at: lease_at(*ttl_secs, now),
                turn: left.and_then(|d| d.turn.clone()),
                todo: left.and_then(|d| d.todo),
                turns: 0,
                limited: None,
            };
            Ok(Some(Event::DriverStarted { lease, replaced: held.map(|d| d.id.clone()) }))
        }
        DriverOp::Renew { ttl_secs, turn, todo } => {
            check_lease_ttl(*ttl_secs)?;
            let d = mine.ok_or_else(|| lost(agent, held))?;
            if let Some(t) = turn {
                IdempotencyKey::new(t)?;
            }
            let expires_at = lease_at(*ttl_secs, now);
            if d.turn == *turn && d.todo == *todo && d.expires_at >= expires_at {
                return Ok(None);
            }
            Ok(Some(Event::DriverRenewed {
                agent: agent.clone(),
                id: req.id.clone(),
                expires_at,
                turn: turn.clone(),
                todo: *todo,
            }))
        }
        DriverOp::Stop { reason } => {
            loopx_core::model::check_text("reason", reason)?;
            Ok(mine.map(|_| Event::DriverStopped {
                agent: agent.clone(),
                id: req.id.clone(),
                reason: reason.clone(),
            }))
        }
    }
}

fn lost(agent: &AgentId, held: Option<&DriverLease>) -> Error {
    let who =
        held.map_or_else(|| "nobody holds it now".to_owned(), |d| format!("it is held by {}", holder(d)));
    Error::conflict(format!("this driver no longer holds agent {agent}'s lease: {who}"))
        .with_hint("another driver took the agent over; this one stops")
}

/// The end of a driven turn: the writeback found, spent once if it was not (and the goal may
/// spend), and how the command ended. Ending an ended turn changes nothing.
pub fn end_turn(state: &GoalState, actor: &Actor, req: &EndTurn, now: Timestamp) -> Result<Option<Event>> {
    let agent = driving_agent(actor)?;
    IdempotencyKey::new(&req.turn)?;
    if state.turn_end(agent, &req.turn).is_some() {
        return Ok(None);
    }
    if let Some(s) = &req.usage.session
        && (s.len() > MAX_SESSION_LEN || s.chars().any(char::is_control))
    {
        return Err(Error::usage("a host session id is at most 200 printable characters"));
    }
    if req.usage.usd.is_some_and(|u| !u.is_finite() || u < 0.0) {
        return Err(Error::usage("a turn's cost must be a non-negative amount"));
    }
    if let Some(l) = &req.usage.limit {
        check_limit(l)?;
    }
    let todo = state.turn_todo(agent, &req.turn)?;
    let run =
        state.runs.iter().rev().find(|r| &r.agent == agent && r.turn.as_deref() == Some(req.turn.as_str()));
    let paused = state.goal.status == GoalStatus::Stopped || crate::quota::is_paused(state);
    let (spend, spent_by, note) = match run {
        Some(r) if r.spent_by.is_some() => (None, r.spent_by, None),
        Some(_) if paused => (
            None,
            None,
            Some("the goal was paused when the turn ended: nothing is spent while it is".to_owned()),
        ),
        Some(r) => {
            let spend = Spend {
                id: state.next_spend_id(),
                agent: agent.clone(),
                todo: r.todo,
                run: r.id,
                turn: Some(req.turn.clone()),
                slots: 1,
                tokens: None,
                usd: None,
                at: now,
                voided: false,
            };
            let id = spend.id;
            (Some(spend), Some(id), None)
        }
        None => (None, None, None),
    };
    let tail = req.tail.as_deref().filter(|_| run.is_none()).map(|t| tail_of(t, MAX_TAIL_LEN).to_owned());
    let end = TurnEnd {
        agent: agent.clone(),
        turn: req.turn.clone(),
        todo: todo.or(run.map(|r| r.todo)),
        exit: req.exit,
        exit_code: req.exit_code,
        signal: req.signal,
        started_at: req.started_at,
        ended_at: now,
        run: run.map(|r| r.id),
        spent_by,
        usage: req.usage.clone(),
        tail,
        note,
    };
    let brake = brake(state, &end, now).map(Box::new);
    Ok(Some(Event::TurnEnded { end, spend, brake }))
}

/// The brakes after a driven turn on a todo: whether it made progress, the todo's count, and
/// the question for a person when the turns in a row without progress, the todo's turn cap or
/// the goal's hourly cap is reached. A turn a host's limit or a person ended is not the
/// agent's doing, and a replan turn has no todo: neither is counted.
fn brake(state: &GoalState, end: &TurnEnd, now: Timestamp) -> Option<TurnBrake> {
    let todo = end.todo?;
    if end.limited().is_some() || matches!(end.exit, TurnExit::Interrupted | TurnExit::Lost) {
        return None;
    }
    let closed = state.todo(todo)?.status.is_closed();
    let before = state.todo_turns.get(&todo).cloned().unwrap_or_default();
    let (progress, last) = if closed { (true, None) } else { progress_of(state, end, &before) };
    // What the turn ended on is kept either way: the same writeback next time is no progress.
    let mut count = TodoTurns {
        turns: before.turns.saturating_add(1),
        stalled: if progress { 0 } else { before.stalled.saturating_add(1) },
        last,
    };
    let brakes = &state.goal.brakes;
    let recent: Vec<&str> = state
        .turn_ends
        .iter()
        .rev()
        .filter(|e| e.todo == Some(todo))
        .take(count.stalled.saturating_sub(1).min(4) as usize)
        .map(|e| e.turn.as_str())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .chain(std::iter::once(end.turn.as_str()))
        .collect();
    let see = format!("see loopx history --turn {}", recent.join(", --turn "));
    let question = if !closed && brakes.stall_turns().is_some_and(|n| count.stalled >= n) {
        let last = count.last.as_deref().map(|l| format!("; last: {}", flatten(l, 300))).unwrap_or_default();
        Some((
            format!(
                "{todo}: {} driven {} without progress{last} ({see}). Approve to let the agent try again, or change the todo.",
                count.stalled,
                if count.stalled == 1 { "turn" } else { "turns" },
            ),
            GateBlocks::Todos(vec![todo]),
        ))
    } else if !closed && brakes.todo_turn_cap().is_some_and(|n| count.turns >= n) {
        Some((
            format!(
                "{todo}: reached its cap of {} driven {} ({see}). Approve to give it as many again, or change the todo.",
                count.turns,
                if count.turns == 1 { "turn" } else { "turns" }
            ),
            GateBlocks::Todos(vec![todo]),
        ))
    } else {
        let hour_ago = Timestamp::from_unix_millis(now.unix_millis() - 3_600_000);
        let in_hour = 1 + state.turn_ends.iter().filter(|e| e.ended_at > hour_ago).count() as u32;
        let asked = state.open_gates().any(|g| g.asked_by == "loopx" && g.blocks == GateBlocks::Goal);
        brakes.hourly_turn_cap().filter(|n| in_hour >= *n && !asked).map(|n| {
            (
                format!(
                    "the goal ran {in_hour} driven turns in the last hour, its cap of {n}. Approve to go on, or change the goal's brakes (loopx goal set --hourly-turn-cap)."
                ),
                GateBlocks::Goal,
            )
        })
    };
    let gate = question.map(|(question, blocks)| {
        // Asked: the todo's count starts again, so an approval gives it as many turns again.
        if blocks != GateBlocks::Goal {
            count = TodoTurns::default();
        }
        BrakeGate { id: state.next_gate_id(), question: flatten(&question, 1000), blocks }
    });
    Some(TurnBrake { todo, progress, count: (!closed).then_some(count), gate })
}

/// Whether a turn on an open todo changed something that counts, and what it ended on if not:
/// evidence on the todo that is not a failed check is progress; so is a writeback unlike the
/// turn before's. A failed check, the same writeback again, or no writeback is not.
fn progress_of(state: &GoalState, end: &TurnEnd, before: &TodoTurns) -> (bool, Option<String>) {
    let Some(todo) = end.todo else { return (true, None) };
    let new: Vec<_> = state.evidence.iter().filter(|e| e.todo == todo && e.at >= end.started_at).collect();
    if new.iter().any(|e| e.exit_code.is_none_or(|c| c == 0)) {
        return (true, None);
    }
    if let Some(failed) = new.last() {
        let cmd = failed.command.as_ref().map(shell_words::join).unwrap_or_else(|| failed.summary.clone());
        return (false, Some(format!("`{}` exited {}", flatten(&cmd, 200), failed.exit_code.unwrap_or(-1))));
    }
    let Some(run) = end.run.and_then(|r| state.runs.iter().find(|x| x.id == r)) else {
        let tail = end.tail.as_deref().and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()));
        let how = end.describe();
        return (false, Some(tail.map_or(how.clone(), |t| format!("{how}: {}", flatten(t, 200)))));
    };
    let note = state.todo(todo).and_then(|t| t.notes.last()).map(|n| n.text.as_str()).unwrap_or("");
    let writeback = format!(
        "wrote back {} / {}{}{}",
        run.classification,
        run.delivery_outcome,
        run.next_action.as_deref().map(|a| format!(", next: {a}")).unwrap_or_default(),
        if note.is_empty() { String::new() } else { format!(", note: {}", flatten(note, 200)) }
    );
    (before.last.as_deref() != Some(writeback.as_str()), Some(writeback))
}

/// A host's limit as a turn's end may record it: a short kind of the host's own, a message of
/// one printable line within its length.
fn check_limit(l: &HostLimit) -> Result<()> {
    let kind_ok = !l.kind.is_empty()
        && l.kind.len() <= MAX_LIMIT_KIND_LEN
        && l.kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !kind_ok {
        return Err(Error::usage(format!("invalid host limit kind {:?}", flatten(&l.kind, 40))));
    }
    if l.message.as_ref().is_some_and(|m| m.len() > MAX_LIMIT_MESSAGE_LEN || m.chars().any(char::is_control))
    {
        return Err(Error::usage(format!(
            "a host limit's message is one line of at most {MAX_LIMIT_MESSAGE_LEN} bytes"
        )));
    }
    Ok(())
}

/// Refuses a writeback for a driven turn that has ended (a command the turn left running,
/// writing back after the driver gave up on it), unless it repeats the turn's own writeback.
pub(crate) fn check_turn_open(
    state: &GoalState,
    agent: &AgentId,
    turn: Option<&str>,
    todo: loopx_core::TodoId,
) -> Result<()> {
    let Some(end) = turn.and_then(|t| state.turn_end(agent, t)) else { return Ok(()) };
    let same = end.run.and_then(|r| state.runs.iter().find(|x| x.id == r)).is_some_and(|r| r.todo == todo);
    if same {
        return Ok(());
    }
    Err(Error::refused(format!(
        "turn {} of {agent} has ended ({}): it takes no writeback now",
        end.turn,
        end.describe()
    ))
    .with_hint("loopx drive gives the next turn a new id; work it there"))
}

/// A turn of `agent` as it stands.
pub(crate) fn turn_view(state: &GoalState, agent: &AgentId, turn: &str) -> Result<TurnView> {
    let run = state.runs.iter().rev().find(|r| &r.agent == agent && r.turn.as_deref() == Some(turn));
    let end = state.turn_end(agent, turn).cloned();
    Ok(TurnView {
        agent: agent.clone(),
        turn: turn.to_owned(),
        todo: state.turn_todo(agent, turn)?,
        run: run.map(|r| r.id).or(end.as_ref().and_then(|e| e.run)),
        spent_by: run.and_then(|r| r.spent_by).or(end.as_ref().and_then(|e| e.spent_by)),
        end,
    })
}

/// What a driven turn's prompt is made for.
#[derive(Clone, Debug)]
pub struct PromptFor<'a> {
    /// How the agent's shell reaches loopx.
    pub loopx: &'a str,
    pub turn: &'a str,
    /// At most this many bytes.
    pub budget: usize,
}

/// Text pieces added in order while they fit; the first ones always go in.
struct Budgeted {
    out: String,
    budget: usize,
}

impl Budgeted {
    fn must(&mut self, s: &str) {
        self.out.push_str(s);
    }
    /// Adds `s` if it fits, keeping `reserve` bytes for what must still come.
    fn may(&mut self, s: &str, reserve: usize) -> bool {
        if self.out.len() + s.len() + reserve <= self.budget {
            self.out.push_str(s);
            true
        } else {
            false
        }
    }
}

/// The todo completed last among those the live state keeps, if one was.
fn last_done(state: &GoalState) -> Option<loopx_core::TodoId> {
    state
        .closed_order
        .iter()
        .rev()
        .copied()
        .find(|t| state.todo(*t).is_some_and(|t| t.status == TodoStatus::Done))
}

/// Longest of each text the prompt quotes, in bytes.
const OBJECTIVE_BYTES: usize = 600;
const TODO_BYTES: usize = 600;
const REASON_BYTES: usize = 300;
const VALIDATION_BYTES: usize = 200;
const NOTE_BYTES: usize = 200;
const NOTES_SHOWN: usize = 3;

/// The texts of a prompt's first part, each as long as the budget left it.
#[derive(Default)]
struct Head {
    objective: String,
    text: String,
    reason: String,
    validation: Option<String>,
    /// `- <by>: "<note>"` lines, oldest first.
    notes: Vec<String>,
}

/// What a text of the head may grow by, past its shortest form, from what the budget leaves.
struct Room(usize);

impl Room {
    /// `s` quoted: at least `"…"`, more as the room and `cap` allow.
    fn quoted(&mut self, s: &str, cap: usize) -> String {
        let least = quoted_bytes(s, 5).unwrap_or_default().len();
        let q = quoted_bytes(s, cap.min(least + self.0)).unwrap_or_default();
        self.0 -= q.len().saturating_sub(least);
        q
    }
    /// `s` flattened: at least `…`, more as the room and `cap` allow.
    fn flat(&mut self, s: &str, cap: usize) -> String {
        let least = flatten_bytes(s, 3).len();
        let f = flatten_bytes(s, cap.min(least + self.0));
        self.0 -= f.len().saturating_sub(least);
        f
    }
    /// `- by: "note"` whole within the room, or nothing.
    fn note(&mut self, by: &str, s: &str) -> Option<String> {
        let frame = format!("- {by}: \n").len();
        let q = quoted_bytes(s, NOTE_BYTES.min(self.0.checked_sub(frame)?))?;
        self.0 -= frame + q.len();
        Some(format!("- {by}: {q}\n"))
    }
}

/// A text of the optional sections, quoted within its 200 bytes.
fn shown(s: &str) -> String {
    quoted_bytes(s, NOTE_BYTES).unwrap_or_default()
}

/// Whether a person wrote it (the person acts as `user`), not an agent.
fn by_person(by: &str) -> bool {
    by == AgentId::user().as_str()
}

/// The prompt for the turn `answer` decided (`run` or `replan`): the objective, the todo and
/// why, the person's latest answers, recent evidence, and what the turn must write back and
/// how. Never longer than `p.budget` bytes (when its fixed words fit): every text is measured
/// in bytes and cut at a character boundary, what agents wrote (their todo's text, its
/// validation command, their notes, oldest first) before what the person wrote (the
/// objective, their todo's text, their notes); then answers and evidence are left out.
pub fn turn_prompt(state: &GoalState, answer: &ShouldRunAnswer, p: &PromptFor<'_>) -> String {
    let agent = answer.agent_id.as_ref().map_or("the agent", |a| a.as_str());
    let lx = p.loopx;
    let selected = match (&answer.decision, &answer.selected_todo) {
        (DecisionKind::Run, Some(t)) => Some(t),
        _ => None,
    };
    let todo = selected.and_then(|t| state.todo(t.id));
    let head = |h: &Head| -> String {
        let mut out = format!(
            "You are agent {agent}, working one turn ({}) of a goal that loopx keeps. Work only through this turn's todo; loopx decides what comes next.\n\nObjective: {}\n\n",
            p.turn, h.objective
        );
        match selected {
            Some(t) => {
                out.push_str(&format!(
                    "This turn: {} ({}): {}\nWhy: {}\n",
                    t.id, t.priority, h.text, h.reason
                ));
                if let Some(v) = &h.validation {
                    out.push_str(&format!("loopx runs `{v}` itself before it accepts the completion.\n"));
                }
                if !h.notes.is_empty() {
                    out.push_str("Notes on it:\n");
                    out.push_str(&h.notes.concat());
                }
            }
            None => out.push_str(&format!("This turn: replan. {}\n", h.reason)),
        }
        out
    };
    let instructions = match selected {
        Some(t) => {
            let claim = if t.claim_required { format!("  {lx} todo claim\n") } else { String::new() };
            format!(
                "\nDo one bounded, verified slice of {id}. Before you stop, write the turn back from your shell (the turn and the todo are already set in your environment):\n{claim}  {lx} todo complete --evidence \"what proves it\" --evidence-kind test    (when it is done; --next-todo \"…\" for what follows, or --no-follow-up --note \"…\")\n  {lx} todo update --note \"where you stopped and what is next\"    (when it is not)\n  {lx} refresh-state --classification implement --delivery-outcome outcome_progress\nA turn without refresh-state counts as failed and its work is picked up again. loopx accounts the compute itself: do not spend. If only a person can decide something, ask with {lx} gate ask --question \"…\" --blocks todos:{id} and stop.\n",
                id = t.id
            )
        }
        None => {
            let mut text = format!(
                "\nLook at the goal ({lx} status, {lx} todo list) and write the next bounded steps as todos ({lx} todo add --text \"…\"), or ask the person what only they can decide ({lx} gate ask --question \"…\" --blocks goal). Then write the turn back on a todo you added:\n  {lx} refresh-state --todo-id <id> --classification replan --delivery-outcome outcome_gap\n"
            );
            // The last todo done is where "nothing follows" is said: the goal's work is then
            // finished, and the person is asked to confirm it.
            if let Some(last) = last_done(state) {
                text.push_str(&format!(
                    "If nothing is left to do, say so on {last}, the last todo done, and write the turn back on it:\n  {lx} todo complete --todo-id {last} --no-follow-up --note \"why nothing is left\"\n  {lx} refresh-state --todo-id {last} --classification replan --delivery-outcome goal_outcome\n"
                ));
            }
            text.push_str("A turn without refresh-state counts as failed. loopx accounts the compute itself: do not spend.\n");
            text
        }
    };
    // The fixed words, with each text at its shortest and no note, are counted first; what
    // is left goes to the texts, the person's before the agents'.
    let objective = &state.goal.objective;
    let validation = selected.and_then(|t| t.validation.as_deref());
    let shortest = Head {
        objective: quoted_bytes(objective, 5).unwrap_or_default(),
        text: selected.map(|t| quoted_bytes(&t.text, 5).unwrap_or_default()).unwrap_or_default(),
        reason: flatten_bytes(&answer.reason, 3),
        validation: validation.map(|v| flatten_bytes(v, 3)),
        notes: Vec::new(),
    };
    let fixed = head(&shortest).len() + "Notes on it:\n".len() + instructions.len();
    let mut room = Room(p.budget.saturating_sub(fixed));
    let mut h = Head { objective: room.quoted(objective, OBJECTIVE_BYTES), ..Head::default() };
    h.reason = room.flat(&answer.reason, REASON_BYTES);
    let person_todo = todo.is_some_and(|t| by_person(&t.created_by));
    if let Some(t) = selected.filter(|_| person_todo) {
        h.text = room.quoted(&t.text, TODO_BYTES);
    }
    // The person's latest notes and the agents' latest, newest first, so an old note is
    // the first left out; agents' notes never push a person's out of the prompt.
    let notes = |person: bool| {
        let all = todo.map_or(&[][..], |t| t.notes.as_slice());
        all.iter().enumerate().rev().filter(move |(_, n)| by_person(&n.by) == person).take(NOTES_SHOWN)
    };
    let mut kept: Vec<(usize, String)> = Vec::new();
    for (n, note) in notes(true) {
        kept.extend(room.note(&note.by, &note.text).map(|l| (n, l)));
    }
    if let Some(t) = selected.filter(|_| !person_todo) {
        h.text = room.quoted(&t.text, TODO_BYTES);
    }
    h.validation = validation.map(|v| room.flat(v, VALIDATION_BYTES));
    for (n, note) in notes(false) {
        kept.extend(room.note(&note.by, &note.text).map(|l| (n, l)));
    }
    kept.sort_by_key(|(n, _)| *n);
    h.notes = kept.into_iter().map(|(_, l)| l).collect();
    let mut b = Budgeted { out: String::with_capacity(p.budget.min(8192)), budget: p.budget };
    b.must(&head(&h));
    // What must come last is reserved before the optional sections go in.
    let reserve = instructions.len();
    let mut answers: Vec<_> = state
        .gates
        .iter()
        .filter(|g| g.status != GateStatus::Open && g.answered_by.as_deref().is_some_and(|a| a == "user"))
        .collect();
    answers.sort_by_key(|g| std::cmp::Reverse(g.answered_at));
    if !answers.is_empty() && b.may("\nThe person's latest answers:\n", reserve) {
        for g in answers.iter().take(3) {
            let note = g.note.as_ref().map(|n| format!(" — {}", shown(n))).unwrap_or_default();
            let line = format!("- {} {}: {}{note}\n", g.id, g.status, shown(&g.question));
            if !b.may(&line, reserve) {
                break;
            }
        }
    }
    let open: Vec<_> = answer.user_channel.questions.iter().take(3).collect();
    if !open.is_empty() && b.may("\nStill waiting on the person (do not work around these):\n", reserve) {
        for q in open {
            if !b.may(&format!("- {} ({}): {}\n", q.gate, q.blocks, shown(&q.question)), reserve) {
                break;
            }
        }
    }
    let recent: Vec<_> = state.evidence.iter().rev().take(5).collect();
    if !recent.is_empty() && b.may("\nRecent evidence:\n", reserve) {
        for e in recent.into_iter().rev() {
            if !b.may(&format!("- {} on {} ({}): {}\n", e.id, e.todo, e.kind, shown(&e.summary)), reserve) {
                break;
            }
        }
    }
    b.must(&instructions);
    b.out
}
