//! Handing work from one agent to another, and the packet the receiving side is shown.

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::{Error, GoalId, Result};

use crate::decide;
use crate::rules::{self, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::person;

/// A handoff with its status as of `now` (a pending one past its time reads as expired).
fn as_of(h: &loopx_core::model::Handoff, now: loopx_core::Timestamp) -> loopx_core::model::Handoff {
    loopx_core::model::Handoff { status: h.status_at(now), ..h.clone() }
}

fn handoff_body(
    s: &GoalState,
    id: Option<loopx_core::HandoffId>,
    now: loopx_core::Timestamp,
) -> Result<HandoffBody> {
    let h = id.and_then(|id| s.handoff(id)).ok_or_else(|| Error::internal("no handoff"))?;
    Ok(HandoffBody { handoff: as_of(h, now) })
}

/// Done todos shown in a handoff packet.
const PACKET_DONE: usize = 10;

/// Open todos shown in a handoff packet.
const PACKET_LEFT: usize = 20;

/// What the receiving side of `h` is shown first.
fn packet(s: &GoalState, h: &loopx_core::model::Handoff, now: loopx_core::Timestamp) -> HandoffPacket {
    use loopx_core::model::{Role, TodoStatus};
    let mut done: Vec<&loopx_core::model::Todo> =
        s.todos.matching(|t| t.status == TodoStatus::Done).collect();
    done.sort_by_key(|t| t.completion.as_ref().map(|c| c.at));
    let skip = done.len().saturating_sub(PACKET_DONE);
    let done = done[skip..]
        .iter()
        .map(|t| DoneItem {
            todo: t.id,
            text: t.text.clone(),
            evidence: t.evidence.iter().rev().take(3).rev().filter_map(|e| s.evidence(*e)).cloned().collect(),
        })
        .collect();
    let mut left: Vec<_> =
        s.todos.keys().filter(|t| t.role == Role::Agent && !t.status.is_closed()).collect();
    left.sort_by_key(|t| (!h.covers(t.id), t.priority, t.id));
    left.truncate(PACKET_LEFT);
    let left: Vec<&loopx_core::model::Todo> = left.iter().filter_map(|k| s.todo(k.id)).collect();
    HandoffPacket {
        handoff: as_of(h, now),
        objective: s.goal.objective.clone(),
        done,
        left: left.into_iter().map(TodoSummary::from).collect(),
        gates: s.open_gates().map(|g| decide::open_question(g, 100_000)).collect(),
    }
}

impl<S: Store> StateKernel<S> {
    pub(super) async fn handoff_impl(
        &self,
        ctx: &CommandContext,
        req: OfferHandoff,
    ) -> Result<Receipt<HandoffBody>> {
        let now = self.now();
        self.mutate(
            ctx,
            "handoff.offer",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| rules::offer_handoff(s, a, &req, now).map(Some),
            // The new handoff is the last one.
            move |s| handoff_body(s, s.handoffs.last().map(|h| h.id), now),
        )
    }

    pub(super) async fn accept_handoff_impl(
        &self,
        ctx: &CommandContext,
        req: AcceptHandoff,
    ) -> Result<Receipt<ResumeBody>> {
        let now = self.now();
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let before = self.store.read(&goal)?;
        // A command that names nobody takes it as the receiver the handoff implies.
        let ctx = &match (&ctx.agent, &ctx.session) {
            (None, None) => {
                CommandContext { agent: Some(rules::receiver(&before, &req, now)?), ..ctx.clone() }
            }
            _ => ctx.clone(),
        };
        let receiver = rules::session_agent(&before, ctx)?;
        // A receiver that is not registered yet acts before it is: taking over registers it.
        let lane = |s: &GoalState| {
            Ok(if receiver.as_ref().is_some_and(|a| s.agent(a).is_none()) {
                Lane::Joining
            } else {
                Lane::Agent
            })
        };
        let taken = std::cell::Cell::new(None);
        self.mutate_if_needed(
            Some(before),
            ctx,
            "handoff.accept",
            &req,
            lane,
            |s, a| {
                let e = rules::accept_handoff(s, a, &req, now)?;
                if let Some(Event::HandoffAccepted { handoff, registered, .. }) = &e {
                    taken.set(Some((*handoff, registered.is_some())));
                }
                Ok(e)
            },
            |s| {
                let agent = receiver.clone().ok_or_else(|| Error::internal("no receiver"))?;
                // On a replay or a no-op, the handoff this agent took last.
                let id = taken.get().map(|(h, _)| h).or_else(|| {
                    s.handoffs.iter().rev().find(|h| h.accepted_by.as_ref() == Some(&agent)).map(|h| h.id)
                });
                Ok(ResumeBody {
                    registered: taken.get().is_some_and(|(_, r)| r),
                    next_todo: s.next_for(Some(&agent), now),
                    packet: id.and_then(|id| s.handoff(id)).map(|h| packet(s, h, now)),
                    agent,
                })
            },
        )
    }

    pub(super) async fn cancel_handoff_impl(
        &self,
        ctx: &CommandContext,
        req: CancelHandoff,
    ) -> Result<Receipt<HandoffBody>> {
        let now = self.now();
        let id = req.handoff;
        self.mutate(
            ctx,
            "handoff.cancel",
            &req,
            person,
            |s, a| rules::cancel_handoff(s, a, &req, now),
            move |s| handoff_body(s, Some(id), now),
        )
    }

    pub(super) async fn list_handoffs_impl(&self, goal: Option<&GoalId>, all: bool) -> Result<HandoffList> {
        let s = self.read(goal)?;
        let now = self.now();
        let handoffs =
            s.handoffs.iter().filter(|h| all || h.is_pending(now)).map(|h| as_of(h, now)).collect();
        Ok(HandoffList { goal_id: s.goal.id.clone(), handoffs })
    }

    pub(super) async fn handoff_packet_impl(
        &self,
        goal: Option<&GoalId>,
        host: loopx_core::AgentType,
        agent: Option<&loopx_core::AgentId>,
    ) -> Result<Option<HandoffPacket>> {
        let s = self.read(goal)?;
        let now = self.now();
        let found = s.handoffs.iter().find(|h| {
            h.is_pending(now)
                && match agent {
                    Some(a) => h.is_for(a, s.agent(a).map_or(&host, |x| &x.agent_type)),
                    None => h.to_host == host,
                }
        });
        Ok(found.map(|h| packet(&s, h, now)))
    }
}
