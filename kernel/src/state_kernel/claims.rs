//! What an agent holds: its claims and leases on todos, and the scope its edits must stay in.

use std::path::Path;

use loopx_core::kernel::*;
use loopx_core::{AgentId, Error, GoalId, Result, TodoId};

use crate::rules::{self, Lane};
use crate::scope::WriteScope;
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;
use super::mutate::replay_key;
use super::todos::todo_body;

fn lease_body(s: &GoalState, id: TodoId, now: loopx_core::Timestamp) -> Result<LeaseBody> {
    let t = rules::find_todo(s, id)?;
    Ok(LeaseBody {
        todo: id,
        claimed_by: t.claimed_by.clone(),
        lease: t.lease.as_deref().cloned(),
        active: t.lease.as_ref().is_some_and(|l| l.is_active(now)),
        version: t.lease_version,
    })
}

impl<S: Store> StateKernel<S> {
    pub(super) async fn claim_todo_impl(
        &self,
        ctx: &CommandContext,
        todo: TodoId,
    ) -> Result<Receipt<TodoBody>> {
        self.mutate(
            ctx,
            "todo.claim",
            &todo,
            |_| Ok(Lane::Agent),
            |s, a| rules::claim(s, a, todo, self.now()),
            todo_body(todo),
        )
    }

    pub(super) async fn release_todo_impl(
        &self,
        ctx: &CommandContext,
        todo: TodoId,
    ) -> Result<Receipt<TodoBody>> {
        self.mutate(
            ctx,
            "todo.release",
            &todo,
            |_| Ok(Lane::Agent),
            |s, a| rules::release(s, a, todo, self.now()),
            todo_body(todo),
        )
    }

    pub(super) async fn lease_impl(
        &self,
        ctx: &CommandContext,
        req: LeaseRequest,
    ) -> Result<Receipt<LeaseBody>> {
        let id = req.todo;
        self.mutate(
            ctx,
            "lease",
            &req,
            |_| Ok(Lane::Agent),
            |s, a| rules::lease(s, a, &req, self.now()),
            move |s| lease_body(s, id, self.now()),
        )
    }

    pub(super) async fn show_lease_impl(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<LeaseBody> {
        lease_body(self.read(goal)?.as_ref(), todo, self.now())
    }

    pub(super) async fn claim_next_impl(&self, ctx: &CommandContext) -> Result<Receipt<TodoBody>> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let now = self.now();
        let mut out = None;
        self.store.transact(&goal, &mut |txn| {
            let actor = rules::resolve_actor(txn.state(), ctx, Lane::Agent)?;
            // A replay returns the todo the first call picked, even if it is no longer next.
            let key = ctx.key.as_ref().map(|k| replay_key("todo.claim-next", &actor, k.as_str(), &()));
            if let Some(k) = &key
                && let Some(r) = txn.replay(k, |_| Err(Error::internal("claim-next keeps its receipt")))?
            {
                out = Some(r);
                return Ok(());
            }
            let (id, event) = rules::claim_next(txn.state(), &actor, now)?;
            out = Some(match event {
                Some(e) => txn.commit(actor.name(), e, key, true, todo_body(id))?,
                None => Receipt {
                    goal_id: goal.clone(),
                    seq: txn.seq(),
                    changed: false,
                    body: todo_body(id)(txn.state())?,
                    replayed: false,
                },
            });
            Ok(())
        })?;
        out.ok_or_else(|| Error::internal("claim-next returned no receipt"))
    }

    pub(super) async fn check_edits_impl(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        cwd: &Path,
        paths: &[String],
    ) -> Result<Option<String>> {
        let state = self.read(goal)?;
        let root = self.store.root();
        let goal_scope = WriteScope::new(&state.goal.write_scope)?;
        let mine: Vec<_> = state
            .todos
            .matching(|t| t.claimed_by == Some(agent) && !t.status.is_closed())
            .filter(|t| !t.scopes.is_empty())
            .collect();
        let todo_globs: Vec<String> = mine.iter().flat_map(|t| t.scopes.iter().cloned()).collect();
        let todo_scope = WriteScope::new(&todo_globs)?;
        for p in paths {
            if !goal_scope.allows(root, cwd, p) {
                return Ok(Some(format!(
                    "loopx: {p} is outside the goal's write scope ({})",
                    goal_scope.globs().join(", ")
                )));
            }
            if !todo_scope.allows(root, cwd, p) {
                let ids: Vec<String> = mine.iter().map(|t| t.id.to_string()).collect();
                return Ok(Some(format!(
                    "loopx: {p} is outside the scope of {} ({})",
                    ids.join(", "),
                    todo_globs.join(", ")
                )));
            }
        }
        Ok(None)
    }
}
