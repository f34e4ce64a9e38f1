//! The simulation's checker: its own fold of the log, each line checked against the state
//! before it.

use std::collections::{BTreeMap, HashSet};

use loopx_core::event::Event;
use loopx_core::model::{EvidenceKind, GateBlocks, GateStatus, GoalStatus, Spend};
use loopx_core::{AgentId, GoalId, Timestamp, TodoId};

use loopx_kernel::log::{self, EventLine};
use loopx_kernel::quota;
use loopx_kernel::state::GoalState;

/// The checker's own fold of the log, and what it has seen.
pub(super) struct Checker {
    pub goal: GoalId,
    pub shadow: Option<GoalState>,
    /// The state root the last line records.
    pub root: Option<String>,
    pub head: String,
    /// Bytes of the log read so far (whole lines).
    pub offset: usize,
    pub seen: Seen,
}

/// What the checker has seen of turns and checks so far.
#[derive(Default)]
pub(super) struct Seen {
    /// Turns that spent, by agent.
    spent_turns: HashSet<(String, String)>,
    /// Turns the quota let start a run: decided `run` on a todo inside the allowance.
    started: HashSet<(String, String)>,
    /// Checks the kernel ran for a completion that did not pass.
    pub failed_checks: u64,
}

pub(super) type Check = std::result::Result<(), (&'static str, String)>;

fn fail(invariant: &'static str, detail: String) -> Check {
    Err((invariant, detail))
}

fn is_agent(actor: &str, agents: &[AgentId]) -> bool {
    agents.iter().any(|a| a.as_str() == actor)
}

impl Checker {
    pub fn new(goal: GoalId) -> Self {
        Checker {
            goal,
            shadow: None,
            root: None,
            head: log::GENESIS.to_owned(),
            offset: 0,
            seen: Seen::default(),
        }
    }

    /// Checks one line against the state before it, then folds it in.
    pub fn line(
        &mut self,
        line: &EventLine,
        raw: &[u8],
        agents: &[AgentId],
        acked: &BTreeMap<u64, String>,
    ) -> Check {
        if line.prev != self.head {
            return fail(
                "hash chain",
                format!("line {} names {} before it, not {}", line.seq, line.prev, self.head),
            );
        }
        self.head = log::line_hash(raw);
        if let Some(actor) = acked.get(&line.seq)
            && *actor != line.actor
        {
            return fail(
                "acknowledged mutations kept",
                format!("line {} is by {}, acknowledged to {actor}", line.seq, line.actor),
            );
        }
        let Some(pre) = self.shadow.as_mut() else {
            let state = GoalState::genesis(&self.goal, line).map_err(|e| ("replay", e))?;
            self.shadow = Some(state);
            return Ok(());
        };
        let agent = is_agent(&line.actor, agents);
        match &line.event {
            Event::TurnSettled { steps } => {
                let mut scratch = pre.clone();
                for step in steps {
                    step_check(&scratch, step, line, agent, &mut self.seen)?;
                    scratch.apply_step(step, line.at, &line.actor).map_err(|e| ("replay", e))?;
                }
            }
            e => step_check(pre, e, line, agent, &mut self.seen)?,
        }
        pre.apply(line).map_err(|e| ("replay", e))?;
        self.root = line.root.clone();
        Ok(())
    }
}

/// The gate holding todo `t` back in `s`, if an open one does.
fn gated(s: &GoalState, t: TodoId, agent: Option<&AgentId>) -> Option<String> {
    s.gates
        .iter()
        .filter(|g| g.status == GateStatus::Open)
        .find(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Todos(ids) => ids.contains(&t),
            GateBlocks::Agent(a) => agent == Some(a),
        })
        .map(|g| g.id.to_string())
}

/// The pending handoff reserving todo `t` for a receiver other than `agent`, if one does.
fn reserved_for_another(s: &GoalState, t: TodoId, agent: &AgentId, at: Timestamp) -> Option<String> {
    let kind = s.agent(agent).map(|a| a.agent_type.clone());
    s.handoffs
        .iter()
        .filter(|h| h.is_pending(at) && h.covers(t))
        .find(|h| !kind.clone().is_some_and(|k| h.is_for(agent, &k)))
        .map(|h| format!("{} (for {})", h.id, h.receiver()))
}

fn step_check(pre: &GoalState, event: &Event, line: &EventLine, agent: bool, seen: &mut Seen) -> Check {
    let seq = line.seq;
    match event {
        Event::TodoClaimed { todo, agent: by } => {
            if let Some(t) = pre.todo(*todo)
                && let Some(holder) = &t.claimed_by
                && holder != by
            {
                return fail(
                    "one holder per todo",
                    format!("line {seq}: {by} claimed {todo}, held by {holder}"),
                );
            }
            if let Some(g) = gated(pre, *todo, Some(by)) {
                return fail(
                    "gated work is never taken",
                    format!("line {seq}: {by} claimed {todo} while {g} is open"),
                );
            }
            if let Some(h) = reserved_for_another(pre, *todo, by, line.at) {
                return fail(
                    "handed-off work goes to its receiver",
                    format!("line {seq}: {by} claimed {todo}, reserved by handoff {h}"),
                );
            }
        }
        Event::TodoTakenOver { todo, from, to, .. } if agent && line.actor != from.as_str() => {
            let lease = pre.todo(*todo).and_then(|t| t.lease.clone());
            let expired = lease.as_ref().is_some_and(|l| l.owner == *from && !l.is_active(line.at));
            if !expired || line.actor != to.as_str() {
                return fail(
                    "an active lease is never overridden",
                    format!("line {seq}: {} took {todo} from {from} for {to}; lease {lease:?}", line.actor),
                );
            }
        }
        Event::LeaseAcquired { todo, owner, .. } => {
            let Some(t) = pre.todo(*todo) else { return Ok(()) };
            if let Some(l) = &t.lease
                && l.is_active(line.at)
                && l.owner != *owner
            {
                return fail(
                    "one active lease per todo",
                    format!(
                        "line {seq}: {owner} leased {todo}, leased by {} until {}",
                        l.owner, l.expires_at
                    ),
                );
            }
            if let Some(holder) = t.holder()
                && holder != owner
            {
                return fail(
                    "one holder per todo",
                    format!("line {seq}: {owner} leased {todo}, held by {holder}"),
                );
            }
        }
        Event::HandoffAccepted { handoff, agent: by, todos, .. } => {
            let Some(h) = pre.handoffs.iter().find(|h| h.id == *handoff) else {
                return fail("replay", format!("line {seq}: no handoff {handoff}"));
            };
            let kind = pre.agent(by).map(|a| a.agent_type.clone());
            if !h.is_pending(line.at) || !kind.is_some_and(|k| h.is_for(by, &k)) {
                return fail(
                    "a handoff is taken by its receiver while it waits",
                    format!(
                        "line {seq}: {by} took {handoff} ({:?}, for {})",
                        h.status_at(line.at),
                        h.receiver()
                    ),
                );
            }
            for t in todos {
                if let Some(holder) = pre.todo(*t).and_then(|t| t.claimed_by.clone())
                    && holder != *by
                {
                    return fail(
                        "one holder per todo",
                        format!("line {seq}: {by} took {t} over in {handoff}, held by {holder}"),
                    );
                }
            }
        }
        Event::DecisionRecorded { record } => {
            if record.todo().is_some() {
                let q = quota::view(pre, line.at);
                if quota::is_paused(pre) || quota::budget_exhausted(pre) || q.used_slots >= q.allowed_slots {
                    let why = format!(
                        "line {seq}: a run for {} with {} of {} slots used, compute {}, budget spent: {}",
                        record.agent,
                        q.used_slots,
                        q.allowed_slots,
                        q.compute,
                        quota::budget_exhausted(pre)
                    );
                    return fail("runs start only inside the quota", why);
                }
                seen.started.insert((record.agent.to_string(), record.turn.clone()));
            }
            if let Some(t) = record.todo()
                && let Some(g) = gated(pre, t, Some(&record.agent))
            {
                return fail(
                    "gated work is never selected",
                    format!("line {seq}: run on {t} while {g} is open"),
                );
            }
        }
        Event::SlotSpent { spend } => spend_check(pre, spend, line, seen)?,
        Event::TodoCompleted { todo, evidence, .. } if agent => {
            // A todo with a check is done only on the kernel's own run of it, passing.
            if let Some(v) = pre.todo(*todo).and_then(|t| t.validation.clone()) {
                let ran = evidence.iter().any(|e| {
                    e.kind == EvidenceKind::Command
                        && e.author == "loopx"
                        && e.exit_code == Some(0)
                        && e.command.as_ref() == Some(&v.argv)
                });
                if !ran {
                    return fail(
                        "a checked todo completes only on its check passing",
                        format!(
                            "line {seq}: {todo} completed by {} without a passing run of {:?}",
                            line.actor, v.argv
                        ),
                    );
                }
            }
            let had = pre.todo(*todo).is_some_and(|t| !t.evidence.is_empty());
            if evidence.is_empty() && !had {
                return fail(
                    "agent completions carry evidence",
                    format!("line {seq}: {todo} completed by {} without evidence", line.actor),
                );
            }
        }
        Event::EvidenceAdded { evidence } if evidence.author == "loopx" && evidence.exit_code != Some(0) => {
            seen.failed_checks += 1;
        }
        Event::GateAnswered { .. } if agent => {
            return fail(
                "only a person answers a gate",
                format!("line {seq}: answered by agent {}", line.actor),
            );
        }
        Event::GoalUpdated { .. }
        | Event::GoalStopped { .. }
        | Event::GoalResumed {}
        | Event::GoalCompleted { .. }
        | Event::SlotVoided { .. }
            if agent =>
        {
            return fail(
                "agents never govern",
                format!("line {seq}: {} by agent {}", event.kind(), line.actor),
            );
        }
        _ => {}
    }
    Ok(())
}

fn spend_check(pre: &GoalState, spend: &Spend, line: &EventLine, seen: &mut Seen) -> Check {
    let seq = line.seq;
    let written_back = pre
        .runs
        .iter()
        .any(|r| r.id == spend.run && r.todo == spend.todo && r.agent == spend.agent && r.spent_by.is_none());
    if !written_back {
        return fail(
            "no spend without its writeback",
            format!("line {seq}: {} spent on {} with no writeback", spend.agent, spend.todo),
        );
    }
    if quota::is_paused(pre) || pre.goal.status == GoalStatus::Stopped {
        return fail(
            "no spend while paused",
            format!(
                "line {seq}: {} spent while the goal was {} at compute {}",
                spend.agent, pre.goal.status, pre.goal.quota.compute
            ),
        );
    }
    // A run the quota let start is accounted even when others filled the window meanwhile;
    // any other turn spends only inside the allowance.
    let q = quota::view(pre, line.at);
    let key = (spend.agent.to_string(), spend.turn.clone().unwrap_or_default());
    if q.used_slots + spend.slots > q.allowed_slots && !seen.started.contains(&key) {
        return fail(
            "slots beyond the allowance only for runs it let start",
            format!(
                "line {seq}: {} spent {} with {} of {} slots used, on turn {:?} no run was decided for",
                spend.agent, spend.slots, q.used_slots, q.allowed_slots, spend.turn
            ),
        );
    }
    if let Some(turn) = &spend.turn
        && !seen.spent_turns.insert((spend.agent.to_string(), turn.clone()))
    {
        return fail("a turn spends once", format!("line {seq}: turn {turn} of {} spent again", spend.agent));
    }
    Ok(())
}
