//! Host sessions: binding a thread to an agent, arming its loop, and what a stop shows it.

use loopx_core::decision::OpenQuestion;
use loopx_core::kernel::*;
use loopx_core::model::GateBlocks;
use loopx_core::{AgentId, Error, GoalId, Result};

use crate::decide;
use crate::rules::{self, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::{Nothing, person};
use super::turns::runner_name;

fn session_view(req: BindThread) -> impl Fn(&GoalState) -> Result<SessionView> {
    move |s| {
        let agent = s.threads.get(&crate::state::thread_key(&req.host, &req.thread)).cloned();
        Ok(SessionView {
            goal_id: s.goal.id.clone(),
            armed: agent.as_ref().is_some_and(|a| s.armed.contains(a)),
            stop_blocks: s.stop_blocks.get(&req.thread).copied().unwrap_or(0),
            agent,
            host: req.host.clone(),
            thread: req.thread.clone(),
        })
    }
}

/// A host session's view when every session of the host acts as `agent`.
fn agent_session_view(s: &GoalState, agent: &AgentId, req: &BindThread) -> SessionView {
    SessionView {
        goal_id: s.goal.id.clone(),
        host: req.host.clone(),
        thread: req.thread.clone(),
        agent: s.agent(agent).map(|a| a.id.clone()),
        armed: s.armed.contains(agent),
        stop_blocks: s.stop_blocks.get(&req.thread).copied().unwrap_or(0),
    }
}

/// The person's questions that stop a session's agent (asked of the whole goal or of it) and
/// were asked since its loop was armed — its entry showed those before — and not yet shown
/// to this session at a stop.
fn untold_questions(state: &GoalState, session: &SessionView) -> Vec<OpenQuestion> {
    let Some(agent) = &session.agent else { return Vec::new() };
    let Some(since) = state.armed_at.get(agent) else { return Vec::new() };
    let told = state.told.get(&session.thread);
    state
        .open_gates()
        .filter(|g| g.is_persons() && g.asked_at >= *since)
        .filter(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Agent(a) => a == agent,
            GateBlocks::Todos(_) => false,
        })
        .filter(|g| !told.is_some_and(|t| t.contains(&g.id)))
        .map(|g| decide::open_question(g, 400))
        .collect()
}

impl<S: Store> StateKernel<S> {
    pub(super) async fn bind_thread_impl(
        &self,
        ctx: &CommandContext,
        req: BindThread,
    ) -> Result<Receipt<SessionView>> {
        let view = session_view(req.clone());
        self.mutate_if_needed(
            None,
            ctx,
            "thread.bind",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| rules::bind_thread(s, a, &req),
            view,
        )
    }

    pub(super) async fn unbind_thread_impl(
        &self,
        ctx: &CommandContext,
        agent: loopx_core::AgentId,
        req: BindThread,
    ) -> Result<Receipt<SessionView>> {
        let view = session_view(req.clone());
        self.mutate(
            ctx,
            "thread.unbind",
            &(&agent, &req),
            person,
            |s, a| rules::unbind_thread(s, a, &agent, &req),
            view,
        )
    }

    pub(super) async fn set_armed_impl(
        &self,
        ctx: &CommandContext,
        armed: bool,
    ) -> Result<Receipt<SessionView>> {
        let agent = ctx.agent.clone();
        self.mutate_if_needed(
            None,
            ctx,
            "loop.arm",
            &armed,
            |_| Ok(Lane::Agent),
            |s, a| rules::set_armed(s, a, armed),
            move |s| {
                // The agent's session, if it has one (host and thread empty otherwise).
                let me = agent.clone().or_else(|| s.agents.first().map(|a| a.id.clone()));
                let bound = s.threads.iter().find(|(_, a)| Some(*a) == me.as_ref()).map(|(k, _)| k.clone());
                let (host, thread) = bound.as_deref().and_then(|k| k.split_once(':')).unwrap_or(("", ""));
                let mut v = session_view(BindThread { host: host.to_owned(), thread: thread.to_owned() })(s)?;
                v.agent = me.clone();
                v.armed = me.as_ref().is_some_and(|m| s.armed.contains(m));
                Ok(v)
            },
        )
    }

    pub(super) async fn stop_turn_impl(
        &self,
        agent: Option<&AgentId>,
        req: BindThread,
        cap: u32,
    ) -> Result<StopTurn> {
        let goal = self.resolve_goal(None)?;
        let mut out = None;
        self.transact_polling_first(&goal, &mut |txn, now, may_poll| {
            let session = match agent {
                Some(a) => agent_session_view(txn.state(), a, &req),
                None => session_view(req.clone())(txn.state())?,
            };
            let ctx = CommandContext { agent: session.agent.clone(), ..CommandContext::default() };
            if session.agent.is_none() || !session.armed || session.stop_blocks >= cap {
                out = Some(StopTurn { session, continued: None, told: Vec::new() });
                return Ok(None);
            }
            let (runner, d) =
                decide::decide(txn.state(), rules::session_agent(txn.state(), &ctx)?.as_ref(), now)?;
            if may_poll && self.poll_needed(txn.state(), now) {
                return Ok(Some(runner_name(runner)));
            }
            let answer = decide::answer(txn.state(), runner.as_ref(), &d, self.pacing(None), now, None);
            let told = if answer.should_run { Vec::new() } else { untold_questions(txn.state(), &session) };
            if !answer.should_run && told.is_empty() {
                out = Some(StopTurn { session, continued: None, told });
                return Ok(None);
            }
            let actor = rules::resolve_actor(txn.state(), &ctx, Lane::Agent)?;
            let ids = told.iter().map(|q| q.gate).collect();
            let event = rules::stop_block(txn.state(), &actor, &req, ids)?;
            txn.commit(actor.name(), event, None, false, |_| Ok(Nothing {}))?;
            let continued = answer.should_run.then_some(answer);
            out = Some(StopTurn { session, continued, told });
            Ok(None)
        })
        .await?;
        out.ok_or_else(|| Error::internal("the stop hook's turn returned no answer"))
    }

    pub(super) async fn session_impl(&self, goal: Option<&GoalId>, req: &BindThread) -> Result<SessionView> {
        session_view(req.clone())(self.read(goal)?.as_ref())
    }

    pub(super) async fn agent_session_impl(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        req: &BindThread,
    ) -> Result<SessionView> {
        Ok(agent_session_view(self.read(goal)?.as_ref(), agent, req))
    }
}
