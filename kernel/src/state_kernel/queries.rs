//! What a goal shows: its status, its history, its board, and its checkup.

use std::sync::Arc;

use loopx_core::kernel::*;
use loopx_core::model::GoalStatus;
use loopx_core::{AgentId, GoalId, Result};

use crate::decide;
use crate::quota;
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::keyed_by;
use super::slots::quota_status_view;

/// What `status` shows of goal state `s` at `now`.
fn status_view(s: &GoalState, now: loopx_core::Timestamp) -> StatusView {
    let asked = s.open_gates().filter(|g| g.is_persons()).map(|g| UserItem {
        gate: Some(g.id),
        todo: None,
        text: g.question.clone(),
        priority: None,
        blocks: Some(g.blocks.to_string()),
    });
    let to_do =
        s.todos.matching(|t| t.role == loopx_core::model::Role::User && !t.status.is_closed()).map(|t| {
            UserItem {
                gate: None,
                todo: Some(t.id),
                text: t.text.clone(),
                priority: Some(t.priority),
                blocks: None,
            }
        });
    let needs_user = asked.chain(to_do).collect();
    let in_progress = s
        .todos
        .matching(|t| !t.status.is_closed() && t.claimed_by.is_some())
        .filter_map(|t| {
            t.claimed_by.as_ref().map(|a| ClaimView { todo: t.id, agent: a.clone(), text: t.text.clone() })
        })
        .collect();
    let gates = s.open_gates().map(|g| decide::open_question(g, 100_000)).collect();
    // An open gate on the whole goal (or on one agent) holds its work: nothing is next there,
    // as should-run says.
    let held = |agent: Option<&AgentId>| s.holding_gate(agent).is_some();
    // A done goal starts no agent: no agent has a next todo there.
    let ids: Vec<&AgentId> =
        if s.goal.status == GoalStatus::Done { Vec::new() } else { s.agents.iter().map(|a| &a.id).collect() };
    let next_by_agent = ids
        .iter()
        .zip(s.picks(&ids, now))
        .map(|(a, pick)| AgentNext {
            agent: (*a).clone(),
            todo: if held(Some(a)) { None } else { pick.map(TodoSummary::from) },
        })
        .collect();
    StatusView {
        goal_id: s.goal.id.clone(),
        objective: s.goal.objective.clone(),
        goal_status: s.goal.status,
        stop_reason: s.goal.stop_reason.clone(),
        work_finished: s.work_finished(),
        gates,
        needs_user,
        next_todo: if held(None) { None } else { s.next_for(None, now) },
        next_by_agent,
        quota: quota::view(s, now),
        runs: s.runs_total,
        in_progress,
        counts: s.counts(),
        agents: s.agents.iter().map(|a| a.id.clone()).collect(),
        evidence: usize::try_from(s.evidence_total).unwrap_or(usize::MAX),
        latest_evidence: s.latest_evidence().cloned(),
        events: s.seq,
        last_event_at: Some(s.last_event_at),
        handoffs: s.handoffs.iter().filter(|h| h.is_pending(now)).cloned().collect(),
        drivers: s.drivers.values().filter(|d| d.is_active(now)).cloned().collect(),
    }
}

/// A goal as a dashboard shows it, from one read: its live state (every todo that is not
/// closed and the most recently closed, the gates, the agents, the live evidence) with its
/// status and quota. Older closed work stays in the archive ([`Store::archive`]).
#[derive(Clone, Debug)]
pub struct Board {
    pub state: Arc<GoalState>,
    pub status: StatusView,
    pub quota: QuotaStatus,
}

impl<S: Store> StateKernel<S> {
    /// [`Board`] of `goal` (the default goal when `None`).
    pub fn board(&self, goal: Option<&GoalId>) -> Result<Board> {
        let state = self.read(goal)?;
        let now = self.now();
        Ok(Board { status: status_view(&state, now), quota: quota_status_view(&state, now), state })
    }

    pub(super) async fn status_impl(&self, goal: Option<&GoalId>) -> Result<StatusView> {
        Ok(status_view(self.read(goal)?.as_ref(), self.now()))
    }

    pub(super) async fn history_impl(
        &self,
        goal: Option<&GoalId>,
        filter: &HistoryFilter,
    ) -> Result<HistoryView> {
        let id = self.resolve_goal(goal)?;
        let scan = self.store.scan(&id)?;
        let total = scan.lines.len() as u64;
        let matching: Vec<_> = scan
            .lines
            .iter()
            .filter(|l| {
                filter.agent.as_ref().is_none_or(|a| l.actor == a.as_str() || l.event.agents().contains(&a))
                    && filter.todo.is_none_or(|t| l.event.todos().contains(&t))
                    && filter.turn.as_deref().is_none_or(|t| {
                        l.event.turn() == Some(t) || l.turn.as_deref().is_some_and(|k| keyed_by(k, t))
                    })
            })
            .collect();
        let matched = matching.len() as u64;
        let skip = matching.len().saturating_sub(filter.limit);
        let events = matching[skip..].iter().map(|l| l.history_entry()).collect();
        let turn_log = filter
            .turn
            .as_deref()
            .map(|t| crate::turn_log::path(self.store.root(), &id, t))
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string());
        Ok(HistoryView { goal_id: id, turn_log, total, matched, events })
    }

    pub(super) async fn doctor_impl(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        self.store.doctor(goal)
    }

    pub(super) async fn repair_impl(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        // A named goal must exist; an unreadable project.json is what repair is for.
        if let Some(g) = goal {
            self.store.repair_project()?;
            self.resolve_goal(Some(g))?;
        }
        self.store.repair(goal)
    }
}
