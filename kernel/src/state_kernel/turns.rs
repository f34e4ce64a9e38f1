//! Driven turns: should-run's decision, the driver's lease, and what `loopx drive` asks of a goal.

use loopx_core::decision::{ShouldRunAnswer, TurnRef};
use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::model::{GoalStatus, RuntimeProfile};
use loopx_core::{AgentId, Error, GoalId, Result};

use crate::decide;
use crate::rules::{self, Lane};
use crate::state::decision_key;
use crate::store::Store;

use super::StateKernel;
use super::mutate::Nothing;

/// A step of [`StateKernel::transact_polling_first`]: the transaction, its time, whether it may
/// still poll; the agent to poll for when gates or notices are due.
type PolledStep<'a> =
    dyn FnMut(&mut crate::store::Txn<'_>, loopx_core::Timestamp, bool) -> Result<Option<String>> + Send + 'a;

/// Who gates and notices are polled for: the deciding agent, or the person.
pub(super) fn runner_name(agent: Option<AgentId>) -> String {
    agent.map_or_else(|| "user".to_owned(), |a| a.to_string())
}

impl<S: Store> StateKernel<S> {
    /// should-run's turn, under the lock: a replay returns the decision recorded for the turn;
    /// a new turn's decision is recorded.
    fn decide_turn(
        &self,
        txn: &mut crate::store::Txn<'_>,
        ctx: &CommandContext,
        turn: &str,
        pacing: decide::Pacing<'_>,
        now: loopx_core::Timestamp,
        out: &mut Option<ShouldRunAnswer>,
    ) -> Result<()> {
        let turn = turn.to_owned();
        let (agent, d) = decide::decide(txn.state(), rules::session_agent(txn.state(), ctx)?.as_ref(), now)?;
        let Some(agent) = agent else {
            // Paused, and nobody named: there is no turn to record.
            *out = Some(decide::answer(txn.state(), None, &d, pacing, now, None));
            return Ok(());
        };
        if let Some(recorded) =
            txn.state().decisions.get(&decision_key(&agent, &turn)).map(|d| d.read()).transpose()?
        {
            let r = recorded.record;
            let d = decide::Decision {
                decision: r.decision(),
                state: r.state,
                reason: format!("the decision recorded for turn {turn} at event {}", recorded.seq),
                selected: r.todo(),
                claim_required: matches!(
                    r.continuation,
                    loopx_core::continuation::Continuation::Run { claim_required: true, .. }
                ),
                continuation: r.continuation,
            };
            let t = TurnRef { id: turn.clone(), recorded_seq: recorded.seq, replayed: true };
            *out = Some(decide::answer(txn.state(), Some(&agent), &d, pacing, now, Some(t)));
            return Ok(());
        }
        let record = loopx_core::decision::DecisionRecord {
            agent: agent.clone(),
            turn: turn.clone(),
            state: d.state,
            continuation: d.continuation.clone(),
        };
        let receipt =
            txn.commit(agent.as_str(), Event::DecisionRecorded { record }, None, false, |_| Ok(Nothing {}))?;
        let t = TurnRef { id: turn.clone(), recorded_seq: receipt.seq, replayed: false };
        *out = Some(decide::answer(txn.state(), Some(&agent), &d, pacing, now, Some(t)));
        Ok(())
    }

    /// Runs `f` in a transaction on `goal` with the time it runs at. Gates and notices due are
    /// handled first, outside the lock, once: `f`, while it may poll, returns the agent that
    /// decides when some are due (committing nothing); they are polled for that agent, and `f`
    /// runs again at the new time, no longer asked to poll.
    pub(super) async fn transact_polling_first(&self, goal: &GoalId, f: &mut PolledStep<'_>) -> Result<()> {
        let (mut now, mut may_poll) = (self.now(), true);
        loop {
            let mut due = None;
            self.store.transact(goal, &mut |txn| {
                due = f(txn, now, may_poll)?;
                Ok(())
            })?;
            match due {
                Some(runner) if may_poll => self.poll_before_deciding(goal, &runner).await,
                _ => return Ok(()),
            }
            (may_poll, now) = (false, self.now());
        }
    }

    /// Polls due gates and notices before a decision (the checks run for `runner`, the agent
    /// asking); a failure is said, never fatal.
    async fn poll_before_deciding(&self, goal: &GoalId, runner: &str) {
        if let Err(e) = self.poll(goal, None, !self.gates.poll_on_should_run, runner).await {
            self.store.reporter().warn(&format!("could not check the gates that are due: {}", e.message));
        }
    }

    /// The prompt a driven turn starts from ([`crate::drive::turn_prompt`]), for the decision
    /// `answer` recorded for it.
    pub fn turn_prompt(
        &self,
        goal: Option<&GoalId>,
        answer: &ShouldRunAnswer,
        p: &crate::drive::PromptFor<'_>,
    ) -> Result<String> {
        Ok(crate::drive::turn_prompt(self.read(goal)?.as_ref(), answer, p))
    }

    /// The driver lease `agent` has on `goal`, active or not.
    pub fn driver_lease(
        &self,
        goal: &GoalId,
        agent: &loopx_core::AgentId,
    ) -> Result<Option<loopx_core::drive::DriverLease>> {
        Ok(self.store.read(goal)?.drivers.get(agent).cloned())
    }

    /// The brakes a person set on `goal` for `loopx drive`.
    pub fn brakes(&self, goal: &GoalId) -> Result<loopx_core::model::Brakes> {
        Ok(self.store.read(goal)?.goal.brakes.clone())
    }

    /// Whether a person stopped `goal` with `--now`: a running driven turn ends at once.
    pub fn stopped_now(&self, goal: &GoalId) -> Result<bool> {
        let state = self.store.read(goal)?;
        Ok(state.goal.status == GoalStatus::Stopped && state.goal.stop_now)
    }

    /// A new output log for `turn` of `goal`, in this project's `.loopx/`.
    pub fn turn_log(
        &self,
        goal: &GoalId,
        turn: &str,
        limits: crate::turn_log::Limits,
    ) -> Result<crate::turn_log::TurnLog> {
        crate::turn_log::TurnLog::create(self.store.root(), goal, turn, limits)
    }

    pub(super) async fn should_run_impl(
        &self,
        ctx: &CommandContext,
        profile: Option<RuntimeProfile>,
    ) -> Result<ShouldRunAnswer> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let forced = profile.map(|p| self.hosts.cadence_named(p.as_str())).transpose()?;
        let pacing = self.pacing(forced.as_ref());
        let mut now = self.now();
        let Some(turn) = &ctx.key else {
            // Most decisions are a pick among a goal's best few todos: a glance at them, when
            // it vouches for one, answers without reading the rest.
            if let Some((s, glance)) = self.store.glance(&goal)?
                && !self.poll_needed(&s, now)
                && let Ok(agent) = rules::session_agent(&s, ctx)
                && let Some((agent, d)) = decide::decide_at_a_glance(&s, glance, agent.as_ref(), now)
            {
                return Ok(decide::answer(&s, agent.as_ref(), &d, pacing, now, None));
            }
            let mut s = self.store.read(&goal)?;
            if self.poll_needed(&s, now) {
                // A question that will be refused changes nothing: refuse it before checking.
                let (agent, _) = decide::decide(&s, rules::session_agent(&s, ctx)?.as_ref(), now)?;
                self.poll_before_deciding(&goal, agent.as_ref().map_or("user", |a| a.as_str())).await;
                (s, now) = (self.store.read(&goal)?, self.now());
            }
            let (agent, d) = decide::decide(&s, rules::session_agent(&s, ctx)?.as_ref(), now)?;
            return Ok(decide::answer(&s, agent.as_ref(), &d, pacing, now, None));
        };
        let turn = turn.as_str().to_owned();
        let mut out = None;
        self.transact_polling_first(&goal, &mut |txn, now, may_poll| {
            if may_poll && self.poll_needed(txn.state(), now) {
                let (agent, _) =
                    decide::decide(txn.state(), rules::session_agent(txn.state(), ctx)?.as_ref(), now)?;
                return Ok(Some(runner_name(agent)));
            }
            self.decide_turn(txn, ctx, &turn, pacing, now, &mut out).map(|()| None)
        })
        .await?;
        out.ok_or_else(|| Error::internal("should-run returned no answer"))
    }

    pub(super) async fn drive_lease_impl(
        &self,
        ctx: &CommandContext,
        req: loopx_core::drive::DriverRequest,
    ) -> Result<Receipt<loopx_core::drive::DriverBody>> {
        let now = self.now();
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let agent =
            rules::resolve_actor(self.store.read(&goal)?.as_ref(), ctx, Lane::Agent)?.agent().cloned();
        self.mutate(
            &CommandContext { key: None, ..ctx.clone() },
            "drive.lease",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| crate::drive::lease(s, a, &req, now),
            |s| {
                let lease = agent.as_ref().and_then(|a| s.drivers.get(a)).filter(|d| d.id == req.id).cloned();
                Ok(loopx_core::drive::DriverBody { lease })
            },
        )
    }

    pub(super) async fn end_turn_impl(
        &self,
        ctx: &CommandContext,
        req: loopx_core::drive::EndTurn,
    ) -> Result<Receipt<loopx_core::drive::TurnEndBody>> {
        let now = self.now();
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let agent = rules::resolve_actor(self.store.read(&goal)?.as_ref(), ctx, Lane::Agent)?;
        let turn = req.turn.clone();
        self.mutate(
            &CommandContext { key: None, ..ctx.clone() },
            "turn.end",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| crate::drive::end_turn(s, a, &req, now),
            |s| {
                let end = agent.agent().and_then(|a| s.turn_end(a, &turn)).cloned();
                end.map(|end| loopx_core::drive::TurnEndBody { end })
                    .ok_or_else(|| Error::internal("the turn's end is not kept"))
            },
        )
    }

    pub(super) async fn turn_impl(
        &self,
        goal: Option<&GoalId>,
        agent: &loopx_core::AgentId,
        turn: &str,
    ) -> Result<loopx_core::drive::TurnView> {
        crate::drive::turn_view(self.read(goal)?.as_ref(), agent, turn)
    }
}
