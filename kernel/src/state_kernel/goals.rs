//! The goal and agent commands.

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::{Error, GoalId, Result};

use crate::rules::{self, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::governs;

impl<S: Store> StateKernel<S> {
    /// The key a person's decision on `goal` is signed with, if the goal is in strict mode: the
    /// one its log holds, or else the one this machine saw it hold.
    pub fn person_key(&self, goal: Option<&GoalId>) -> Result<Option<String>> {
        let state = self.read(goal)?;
        Ok(state.goal.person_key.clone().or_else(|| self.store.seen_person_key(&state.goal.id)))
    }

    fn goal_body(&self, state: &GoalState) -> Result<GoalBody> {
        let project = self.store.project()?;
        Ok(GoalBody {
            goal: state.goal.clone(),
            is_default: project.default_goal.as_ref() == Some(&state.goal.id),
        })
    }

    pub(super) async fn create_goal_impl(&self, req: CreateGoal) -> Result<Receipt<GoalBody>> {
        loopx_core::model::check_text("objective", &req.objective)?;
        if let Some(t) = &req.title {
            loopx_core::model::check_text("title", t)?;
        }
        let first = Event::GoalCreated { objective: req.objective.clone(), title: req.title.clone() };
        let state = self.store.create_goal(&req.id, first, req.make_default)?;
        Ok(Receipt {
            goal_id: req.id,
            seq: state.seq,
            changed: true,
            body: self.goal_body(&state)?,
            replayed: false,
        })
    }

    pub(super) async fn list_goals_impl(&self) -> Result<GoalList> {
        let p = self.store.project()?;
        let goals = p
            .goals
            .iter()
            .map(|g| GoalListEntry {
                id: g.id.clone(),
                title: g.title.clone(),
                created_at: g.created_at,
                is_default: p.default_goal.as_ref() == Some(&g.id),
            })
            .collect();
        Ok(GoalList { default_goal: p.default_goal.clone(), goals })
    }

    pub(super) async fn show_goal_impl(&self, goal: Option<&GoalId>) -> Result<GoalDetail> {
        let state = self.read(goal)?;
        let body = self.goal_body(&state)?;
        Ok(GoalDetail {
            goal: body.goal,
            is_default: body.is_default,
            agents: state.agents.clone(),
            counts: state.counts(),
            events: state.seq,
        })
    }

    pub(super) async fn set_goal_impl(
        &self,
        ctx: &CommandContext,
        req: SetGoal,
    ) -> Result<Receipt<GoalBody>> {
        let mut receipt = self.mutate(
            ctx,
            "goal.set",
            &req,
            governs("changing the goal (objective, quota, budgets, scope)"),
            |s, _| rules::set_goal(s, &req),
            |s| self.goal_body(s),
        )?;
        if let (Some(command), false) =
            (receipt.body.goal.notify.as_ref().and_then(|n| n.command.as_ref()), receipt.replayed)
        {
            self.wrote_command(command, "user");
        }
        if let (Some(webhook), false) =
            (receipt.body.goal.notify.as_ref().and_then(|n| n.webhook.as_deref()), receipt.replayed)
        {
            self.wrote_command(&crate::approvals::webhook(webhook), "user");
        }
        if req.make_default {
            let id = receipt.goal_id.clone();
            let mut changed = false;
            self.store.update_project(&mut |p| {
                changed = p.default_goal.as_ref() != Some(&id);
                p.default_goal = Some(id.clone());
                Ok(changed)
            })?;
            receipt.changed |= changed;
            receipt.body.is_default = true;
        }
        Ok(receipt)
    }

    pub(super) async fn stop_goal_impl(
        &self,
        ctx: &CommandContext,
        reason: Option<String>,
        now: bool,
    ) -> Result<Receipt<GoalBody>> {
        // A plain stop keeps the request it always had, so its idempotency keys still match.
        let request =
            if now { serde_json::json!({"reason": reason, "now": true}) } else { serde_json::json!(reason) };
        self.mutate(
            ctx,
            "goal.stop",
            &request,
            governs("stopping the goal"),
            |s, _| rules::stop_goal(s, reason.as_ref(), now),
            |s| self.goal_body(s),
        )
    }

    pub(super) async fn resume_goal_impl(&self, ctx: &CommandContext) -> Result<Receipt<GoalBody>> {
        self.mutate(
            ctx,
            "goal.resume",
            &(),
            governs("resuming the goal"),
            |s, _| Ok(rules::resume_goal(s)),
            |s| self.goal_body(s),
        )
    }

    pub(super) async fn complete_goal_impl(
        &self,
        ctx: &CommandContext,
        note: Option<String>,
    ) -> Result<Receipt<GoalBody>> {
        self.mutate(
            ctx,
            "goal.complete",
            &note,
            governs("completing the goal"),
            |s, _| rules::complete_goal(s, note.as_ref()),
            |s| self.goal_body(s),
        )
    }

    pub(super) async fn set_person_key_impl(
        &self,
        ctx: &CommandContext,
        public_key: String,
    ) -> Result<Receipt<GoalBody>> {
        if !crate::person::is_public_key(&public_key) {
            return Err(Error::usage("not an Ed25519 public key in hex")
                .with_hint("loopx person init makes a key and records it"));
        }
        self.mutate(
            ctx,
            "person.key",
            &public_key,
            governs("putting the goal in strict mode"),
            |s, _| {
                Ok((s.goal.person_key.as_ref() != Some(&public_key))
                    .then(|| Event::PersonKeySet { public_key: public_key.clone() }))
            },
            |s| self.goal_body(s),
        )
    }

    pub(super) async fn register_agent_impl(
        &self,
        ctx: &CommandContext,
        req: RegisterAgent,
    ) -> Result<Receipt<AgentBody>> {
        let id = req.id.clone();
        // An agent that names itself (a host session joining, or a command inside a session)
        // registers itself and is the actor; otherwise a person registers it.
        let joining = ctx.agent.as_ref() == Some(&id) || ctx.session.is_some();
        let ctx = &CommandContext { agent: joining.then(|| id.clone()), ..ctx.clone() };
        self.mutate_if_needed(
            None,
            ctx,
            "agent.register",
            &req,
            |_| Ok(if joining { Lane::Joining } else { Lane::Person }),
            |s, _| rules::register_agent(s, &req),
            move |s| {
                let agent =
                    s.agent(&id).cloned().ok_or_else(|| Error::internal("registered agent missing"))?;
                Ok(AgentBody { agent, agents: s.agents.iter().map(|a| a.id.clone()).collect() })
            },
        )
    }

    pub(super) async fn list_agents_impl(&self, goal: Option<&GoalId>) -> Result<AgentList> {
        let state = self.read(goal)?;
        Ok(AgentList { goal_id: state.goal.id.clone(), agents: state.agents.clone() })
    }
}
