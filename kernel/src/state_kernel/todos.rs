//! The todo and evidence commands, and a completion's validation run.

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::traits::{Capability, EvidenceDraft, ObservationRequest, Subject, TransitionProposal};
use loopx_core::{Error, GoalId, Result, TodoId};

use crate::gates::{CommandPassed, command_evidence};
use crate::rules::{self, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;

/// The completed todo, its successor, and the evidence the completion added (`added` items;
/// every piece of the todo's evidence when that is unknown, as on a replay).
fn complete_body(id: TodoId, added: Option<usize>) -> impl Fn(&GoalState) -> Result<CompleteBody> {
    move |s| {
        let todo = rules::find_todo(s, id)?.clone();
        let successor = todo.successors.last().and_then(|n| s.todo(*n)).cloned();
        let skip = added.map_or(0, |n| todo.evidence.len().saturating_sub(n));
        let evidence = todo.evidence[skip..].iter().filter_map(|e| s.evidence(*e)).cloned().collect();
        Ok(CompleteBody { todo, evidence, successor })
    }
}

pub(super) fn todo_body(id: TodoId) -> impl Fn(&GoalState) -> Result<TodoBody> {
    move |s| Ok(TodoBody { todo: rules::find_todo(s, id)?.clone() })
}

fn todo_lane(id: TodoId) -> impl Fn(&GoalState) -> Result<Lane> {
    move |s| rules::find_todo(s, id).map(rules::lane_of)
}

impl<S: Store> StateKernel<S> {
    /// A todo with a validation command completes only on the kernel's own passing run. The
    /// run happens outside the lock (it may take minutes); the commit re-checks the state. A
    /// failing run is recorded as evidence and refuses the completion.
    pub(super) async fn run_validation(
        &self,
        state: &GoalState,
        ctx: &CommandContext,
        req: &CompleteTodo,
    ) -> Result<Option<EvidenceDraft>> {
        let id = req.todo;
        let validated = match rules::find_todo(state, id)?.validation.clone() {
            Some(v) if !rules::find_todo(state, id)?.status.is_closed() => {
                let actor = rules::resolve_actor(state, ctx, todo_lane(id)(state)?)?;
                let placeholder = EvidenceDraft {
                    kind: loopx_core::model::EvidenceKind::Command,
                    summary: "pending".to_owned(),
                    command: None,
                    exit_code: None,
                    output_digest: None,
                };
                // Every other rule first, so a refused completion never runs the command.
                rules::complete(state, &actor, req, Some(&placeholder), self.now())?;
                let author = rules::find_todo(state, id)?.created_by.clone();
                if let Some(why) = self.withheld(&v.argv, &author, actor.name())? {
                    return Err(Error::refused(format!(
                        "loopx does not run the validation command of {id} (`{}`) for {}: {why}",
                        loopx_core::untrusted::shell_exact(&v.argv),
                        actor.name()
                    ))
                    .with_hint(format!(
                        "a person who trusts it approves it: loopx command approve --todo-id {id} (loopx command list shows every command)"
                    )));
                }
                let runner = self.gates.processes.as_ref().ok_or_else(|| {
                    Error::refused(format!(
                        "{id} has a validation command and no process runner is here to run it"
                    ))
                    .with_hint("complete it with the loopx command line, which runs it")
                })?;
                let request = ObservationRequest::RunCommand {
                    argv: v.argv.clone(),
                    cwd: self.store.root().to_path_buf(),
                    timeout_ms: v.timeout_secs.saturating_mul(1000),
                };
                let observation = runner.observe(&request).await?;
                match CommandPassed.validate(Subject::Todo(id), &observation) {
                    Ok(TransitionProposal::CompleteTodo { evidence, .. }) => Some(evidence),
                    Ok(_) => return Err(Error::internal("unexpected validation proposal")),
                    Err(rejection) => {
                        let draft = command_evidence(&observation)
                            .ok_or_else(|| Error::internal("validation gave no evidence"))?;
                        let now = self.now();
                        let recorded = self.mutate(
                            &CommandContext { key: None, ..ctx.clone() },
                            "todo.validate",
                            &id,
                            todo_lane(id),
                            |s, _| {
                                let evidence = rules::evidence_from_draft(s, "loopx", id, &draft, now, 0);
                                Ok(Some(Event::EvidenceAdded { evidence }))
                            },
                            |s| s.evidence.last().cloned().ok_or_else(|| Error::internal("no evidence")),
                        )?;
                        return Err(Error::refused(format!(
                            "{}; completion of {id} refused (recorded as {})",
                            rejection.reason, recorded.body.id
                        ))
                        .with_hint("fix what fails, then complete it again")
                        .with_next(
                            &state.goal.id,
                            actor.agent(),
                            loopx_core::next::NextStep::Complete { todo: id },
                        ));
                    }
                }
            }
            _ => None,
        };
        Ok(validated)
    }

    pub(super) async fn add_todo_impl(
        &self,
        ctx: &CommandContext,
        req: AddTodo,
    ) -> Result<Receipt<TodoBody>> {
        let lane = match req.role {
            loopx_core::model::Role::Agent => Lane::Shared,
            loopx_core::model::Role::User => Lane::Person,
        };
        let receipt = self.mutate(
            ctx,
            "todo.add",
            &req,
            |_| Ok(lane),
            |s, _| rules::add_todo(s, &req).map(Some),
            // The new todo is the last one.
            |s| {
                s.todos
                    .last()
                    .cloned()
                    .map(|todo| TodoBody { todo })
                    .ok_or_else(|| Error::internal("no todo"))
            },
        )?;
        if let (Some(v), false) = (&receipt.body.todo.validation, receipt.replayed) {
            self.wrote_command(&v.argv, &receipt.body.todo.created_by);
        }
        Ok(receipt)
    }

    pub(super) async fn list_todos_impl(
        &self,
        goal: Option<&GoalId>,
        filter: &TodoFilter,
    ) -> Result<TodoList> {
        let state = self.read(goal)?;
        // Closed work beyond the most recent is in the archive, read only when asked for.
        let wants_closed = filter.all || filter.statuses.iter().any(|s| s.is_closed());
        let archived =
            if wants_closed { self.store.archive(&state.goal.id, &state.archive)? } else { Vec::new() };
        let mut all: Vec<&loopx_core::model::Todo> =
            state.todos.iter().chain(archived.iter().map(|a| &a.todo)).collect();
        if !archived.is_empty() {
            all.sort_by_key(|t| t.id);
        }
        let todos = all
            .into_iter()
            .filter(|t| {
                let status_ok = if filter.all {
                    true
                } else if filter.statuses.is_empty() {
                    !t.status.is_closed()
                } else {
                    filter.statuses.contains(&t.status)
                };
                status_ok
                    && filter.role.is_none_or(|r| t.role == r)
                    && filter.claimed_by.as_ref().is_none_or(|a| t.claimed_by.as_ref() == Some(a))
            })
            .map(TodoSummary::from)
            .collect();
        let total = usize::try_from(state.todos_total).unwrap_or(usize::MAX);
        Ok(TodoList { goal_id: state.goal.id.clone(), todos, total })
    }

    pub(super) async fn show_todo_impl(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<TodoDetail> {
        let state = self.read(goal)?;
        if state.is_archived(todo) {
            let archived = self.store.archive(&state.goal.id, &state.archive)?;
            let a = archived
                .into_iter()
                .find(|a| a.todo.id == todo)
                .ok_or_else(|| Error::integrity(format!("todo {todo} is missing from the goal's archive")))?;
            let (mut t, mut evidence) = (a.todo, a.evidence);
            // Evidence recorded after it was archived (by a loopx before the archive).
            for e in state.evidence.iter().filter(|e| e.todo == todo) {
                t.evidence.push(e.id);
                evidence.push(e.clone());
            }
            return Ok(TodoDetail { goal_id: state.goal.id.clone(), todo: t, evidence });
        }
        let t = rules::find_todo(&state, todo)?.clone();
        let evidence = t.evidence.iter().filter_map(|e| state.evidence(*e).cloned()).collect();
        Ok(TodoDetail { goal_id: state.goal.id.clone(), todo: t, evidence })
    }

    pub(super) async fn update_todo_impl(
        &self,
        ctx: &CommandContext,
        req: UpdateTodo,
    ) -> Result<Receipt<TodoBody>> {
        let now = self.now();
        self.mutate(
            ctx,
            "todo.update",
            &req,
            todo_lane(req.todo),
            |s, a| rules::update(s, a, &req, now),
            todo_body(req.todo),
        )
    }

    pub(super) async fn complete_todo_impl(
        &self,
        ctx: &CommandContext,
        req: CompleteTodo,
    ) -> Result<Receipt<CompleteBody>> {
        let id = req.todo;
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        // Most todos have no validation command: they complete in one transaction. One that has
        // is checked outside the lock (the command may run for minutes), then completed in a
        // second transaction that checks everything again.
        let now = self.now();
        let (needs_check, decided) = (std::cell::Cell::new(false), std::cell::Cell::new(false));
        let added = usize::from(req.evidence.is_some());
        let direct = self.mutate(
            ctx,
            "todo.complete",
            &req,
            todo_lane(id),
            |s, a| {
                decided.set(true);
                if rules::find_todo(s, id).is_ok_and(|t| t.validation.is_some() && !t.status.is_closed()) {
                    needs_check.set(true);
                    return Ok(None);
                }
                rules::complete(s, a, &req, None, now)
            },
            // A replay (nothing decided) describes all of the todo's evidence, as before.
            |s| complete_body(id, decided.get().then_some(added))(s),
        )?;
        if !needs_check.get() {
            self.tell_if_finished(&goal).await;
            return Ok(direct);
        }
        let state = self.store.read(&goal)?;
        let validated = self.run_validation(&state, ctx, &req).await?;
        drop(state);
        let now = self.now();
        let added = usize::from(validated.is_some()) + usize::from(req.evidence.is_some());
        let receipt = self.mutate(
            ctx,
            "todo.complete",
            &req,
            todo_lane(id),
            |s, a| rules::complete(s, a, &req, validated.as_ref(), now),
            complete_body(id, Some(added)),
        )?;
        self.tell_if_finished(&goal).await;
        Ok(receipt)
    }

    pub(super) async fn supersede_todo_impl(
        &self,
        ctx: &CommandContext,
        req: SupersedeTodo,
    ) -> Result<Receipt<SupersedeBody>> {
        let id = req.todo;
        self.mutate(
            ctx,
            "todo.supersede",
            &req,
            todo_lane(id),
            |s, a| rules::supersede(s, a, &req, self.now()).map(Some),
            move |s| {
                let todo = rules::find_todo(s, id)?.clone();
                let replacements = todo.superseded_by.iter().filter_map(|n| s.todo(*n)).cloned().collect();
                Ok(SupersedeBody { todo, replacements })
            },
        )
    }

    pub(super) async fn add_evidence_impl(
        &self,
        ctx: &CommandContext,
        req: AddEvidence,
    ) -> Result<Receipt<EvidenceBody>> {
        let now = self.now();
        self.mutate(
            ctx,
            "evidence.add",
            &req,
            todo_lane(req.todo),
            |s, a| rules::add_evidence(s, a, &req, now).map(Some),
            |s| {
                s.evidence
                    .last()
                    .cloned()
                    .map(|evidence| EvidenceBody { evidence })
                    .ok_or_else(|| Error::internal("no evidence"))
            },
        )
    }

    pub(super) async fn list_evidence_impl(
        &self,
        goal: Option<&GoalId>,
        todo: Option<TodoId>,
    ) -> Result<EvidenceList> {
        let state = self.read(goal)?;
        let archived = match todo {
            Some(t) if !state.is_archived(t) => {
                rules::find_todo(&state, t)?;
                Vec::new()
            }
            _ => self.store.archive(&state.goal.id, &state.archive)?,
        };
        let mut evidence: Vec<_> = archived
            .into_iter()
            .flat_map(|a| a.evidence)
            .chain(state.evidence.iter().cloned())
            .filter(|e| todo.is_none_or(|t| e.todo == t))
            .collect();
        evidence.sort_by_key(|e| e.id);
        Ok(EvidenceList { goal_id: state.goal.id.clone(), evidence })
    }
}
