//! The quota's slots: spending, settling and voiding them, and what the quota shows.

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::{Error, GoalId, Result};

use crate::quota;
use crate::rules::{self, Actor, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::{governs, same_turn};

/// What `quota status` shows of goal state `s` at `now`.
pub(super) fn quota_status_view(s: &GoalState, now: loopx_core::Timestamp) -> QuotaStatus {
    let skip = s.spends.len().saturating_sub(10);
    QuotaStatus {
        goal_id: s.goal.id.clone(),
        quota: quota::view(s, now),
        paused: quota::is_paused(s) || s.goal.status == loopx_core::model::GoalStatus::Stopped,
        throttled: quota::is_throttled(s, now),
        budget_exhausted: quota::budget_exhausted(s),
        recent_spends: s.spends.iter().skip(skip).cloned().collect(),
    }
}

impl<S: Store> StateKernel<S> {
    pub(super) async fn refresh_state_impl(
        &self,
        ctx: &CommandContext,
        req: RefreshState,
    ) -> Result<Receipt<RunBody>> {
        let now = self.now();
        let turn = ctx.key.as_ref().map(|k| k.as_str().to_owned());
        self.mutate(
            ctx,
            "refresh-state",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| rules::refresh_state(s, a, turn.as_deref(), &req, now),
            |s| {
                // The run this turn wrote back (on a replay, not necessarily the latest).
                let run = s
                    .runs
                    .iter()
                    .rev()
                    .find(|r| same_turn(r.turn.as_deref(), &r.agent, turn.as_deref(), ctx));
                run.cloned().map(|run| RunBody { run }).ok_or_else(|| Error::internal("no run"))
            },
        )
    }

    pub(super) async fn spend_slot_impl(
        &self,
        ctx: &CommandContext,
        req: SpendSlot,
    ) -> Result<Receipt<SpendBody>> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let now = self.now();
        let turn = ctx.key.as_ref().map(|k| k.as_str().to_owned());
        // Built only from the spend record, so a replay of the turn gives the same bytes.
        let body = |dry_run: bool| {
            let turn = turn.clone();
            move |s: &GoalState| {
                let spend = s
                    .spends
                    .iter()
                    .rev()
                    .find(|x| same_turn(x.turn.as_deref(), &x.agent, turn.as_deref(), ctx));
                let spend = spend.cloned().ok_or_else(|| Error::internal("no spend"))?;
                Ok(SpendBody { spend, dry_run, quota: Some(quota::view(s, now)) })
            }
        };
        if !req.dry_run {
            return self.mutate(
                ctx,
                "quota.spend",
                &req,
                |_| Ok(Lane::Agent),
                |s, a| rules::spend_slot(s, a, turn.as_deref(), &req, now).map(Some),
                body(false),
            );
        }
        let mut out = None;
        self.store.transact(&goal, &mut |txn| {
            let actor = rules::resolve_actor(txn.state(), ctx, Lane::Agent)?;
            let event = rules::spend_slot(txn.state(), &actor, turn.as_deref(), &req, now)?;
            out = Some(txn.preview(actor.name(), event, body(true))?);
            Ok(())
        })?;
        out.ok_or_else(|| Error::internal("spend-slot returned no receipt"))
    }

    pub(super) async fn settle_turn_impl(
        &self,
        ctx: &CommandContext,
        req: SettleTurn,
    ) -> Result<Receipt<SettleBody>> {
        let Some(turn) = ctx.key.as_ref().map(|k| k.as_str().to_owned()) else {
            return Err(Error::usage("a settlement needs a turn id: it makes the call safe to repeat")
                .with_hint("pass this turn's id (turn_id, or --turn-instance-id)"));
        };
        let id = req.complete.todo;
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let state = self.store.read(&goal)?;
        let no_body = |_: &GoalState| Err(Error::internal("a settlement keeps its receipt"));
        if let Some(r) = self.stored_receipt(&state, ctx, "turn.settle", &req, Lane::Agent, no_body)? {
            return Ok(r);
        }
        let validated = self.run_validation(&state, ctx, &req.complete).await?;
        let now = self.now();
        let refresh = RefreshState {
            todo: id,
            classification: req.classification.clone(),
            delivery_outcome: req.delivery_outcome,
            next_action: None,
        };
        let spend =
            SpendSlot { todo: id, slots: req.slots, tokens: req.tokens, usd: req.usd, dry_run: false };
        let evidence_before = std::cell::Cell::new(0);
        let receipt = self.mutate(
            ctx,
            "turn.settle",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| {
                let mut next = s.clone();
                let mut steps = Vec::new();
                evidence_before.set(s.evidence_total);
                let step = |next: &mut GoalState, steps: &mut Vec<Event>, e: Event| {
                    next.apply_step(&e, now, a.name()).map_err(Error::internal)?;
                    steps.push(e);
                    Ok::<_, Error>(())
                };
                if let Some(e) = rules::complete(&next, a, &req.complete, validated.as_ref(), now)? {
                    step(&mut next, &mut steps, e)?;
                }
                if let Some(e) = rules::refresh_state(&next, a, Some(&turn), &refresh, now)? {
                    step(&mut next, &mut steps, e)?;
                }
                let e = rules::spend_slot(&next, a, Some(&turn), &spend, now)?;
                step(&mut next, &mut steps, e)?;
                Ok(Some(Event::TurnSettled { steps }))
            },
            |s| {
                let todo = rules::find_todo(s, id)?.clone();
                let mine =
                    |t: Option<&str>, agent: &loopx_core::AgentId| same_turn(t, agent, Some(&turn), ctx);
                let run = s.runs.iter().rev().find(|r| mine(r.turn.as_deref(), &r.agent));
                let spent = s.spends.iter().rev().find(|x| mine(x.turn.as_deref(), &x.agent));
                let (Some(run), Some(spent)) = (run, spent) else {
                    return Err(Error::internal("a settlement without its run or spend"));
                };
                Ok(SettleBody {
                    successor: todo.successors.last().copied(),
                    evidence: s
                        .evidence
                        .iter()
                        .filter(|e| e.id.number() > evidence_before.get())
                        .map(|e| e.id)
                        .collect(),
                    run: run.id,
                    spend: spent.id,
                    todo,
                })
            },
        )?;
        self.tell_if_finished(&goal).await;
        Ok(receipt)
    }

    pub(super) async fn void_slot_impl(
        &self,
        ctx: &CommandContext,
        req: VoidSlot,
    ) -> Result<Receipt<SpendBody>> {
        let id = req.spend;
        let now = self.now();
        self.mutate(
            ctx,
            "quota.void",
            &req,
            governs("voiding a spend"),
            |s, _| rules::void_slot(s, &req),
            move |s| {
                let spend = s
                    .spends
                    .iter()
                    .find(|x| x.id == id)
                    .cloned()
                    .ok_or_else(|| Error::internal("no spend"))?;
                Ok(SpendBody { spend, dry_run: false, quota: Some(quota::view(s, now)) })
            },
        )
    }

    pub(super) async fn quota_status_impl(&self, goal: Option<&GoalId>) -> Result<QuotaStatus> {
        Ok(quota_status_view(self.read(goal)?.as_ref(), self.now()))
    }

    pub(super) async fn scheduler_report_impl(
        &self,
        ctx: &CommandContext,
        req: SchedulerReport,
    ) -> Result<Receipt<SchedulerBody>> {
        self.mutate(
            ctx,
            "quota.scheduler",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| rules::scheduler_report(s, a, &req).map(Some),
            |s| {
                let agent = rules::resolve_actor(s, ctx, Lane::Agent)?;
                let agent_id = match agent {
                    Actor::Agent(a) => a,
                    Actor::User => return Err(Error::internal("scheduler report without an agent")),
                };
                Ok(SchedulerBody {
                    agent_id,
                    cadence_minutes: req.cadence_minutes,
                    rrule: req.rrule.clone(),
                    error: req.error.clone(),
                })
            },
        )
    }
}
