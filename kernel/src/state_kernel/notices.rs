//! Polling the gates that are due, and telling people and hosts what they should hear.

use std::sync::Arc;

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::model::{Gate, GateKind};
use loopx_core::traits::{Notification, Observation, ObservationRequest, Subject, TransitionProposal};
use loopx_core::{Error, GateId, GoalId, Result, Timestamp};

use crate::gates::{capability, channels, due, finish_notice_due, notices_due, request};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;

impl<S: Store> StateKernel<S> {
    /// Checks the due gates (or `only`), records what it saw, and sends the notices due.
    pub(crate) async fn poll(
        &self,
        goal: &GoalId,
        only: Option<GateId>,
        timers_only: bool,
        runner: &str,
    ) -> Result<GatePoll> {
        let s = self.store().read(goal)?;
        let now = self.store().clock().now();
        let runtime = &self.gates;
        let mut skipped = None;
        let ids = match only {
            Some(id) => {
                let g = crate::rules::find_gate(&s, id)?;
                if g.is_persons() {
                    return Err(Error::usage(format!("gate {id} is a person's: loopx does not check it"))
                        .with_hint(format!("a person answers it: loopx gate answer {id} --approve")));
                }
                if !g.checkable() {
                    skipped = Some(format!("gate {id} is {}: nothing to check", g.status));
                    vec![]
                } else if g.checked_lately(now) {
                    skipped = Some(format!("gate {id} was checked less than a minute ago"));
                    vec![]
                } else if matches!(g.kind, GateKind::Ci { .. } | GateKind::PrMerged { .. })
                    && runtime.pulls.is_none()
                {
                    skipped = Some("no pull-request provider here".to_owned());
                    vec![]
                } else if matches!(g.kind, GateKind::Command { .. }) && runtime.processes.is_none() {
                    skipped = Some("no process runner here".to_owned());
                    vec![]
                } else {
                    vec![id]
                }
            }
            None => due(&s, now, runtime, timers_only),
        };
        let mut checked = Vec::new();
        let mut withheld = Vec::new();
        for id in ids {
            let Some(g) = s.gate(id).cloned() else { continue };
            if let GateKind::Command { argv, .. } = &g.kind
                && let Some(why) = self.withheld(argv, &g.asked_by, runner)?
            {
                withheld.push(format!(
                    "gate {id}'s check `{}` is not run for {runner}: {why} (loopx command approve --gate-id {id})",
                    loopx_core::untrusted::shell_exact(argv)
                ));
                continue;
            }
            let (proposal, unknown) = self.observe(&g, now).await;
            let now = self.store().clock().now();
            self.store().transact(goal, &mut |txn| {
                // Someone else checked or answered it meanwhile: theirs stands.
                let current = txn.state().gate(id);
                if current.map(|c| (&c.check, c.status)) != Some((&g.check, g.status)) {
                    return Ok(());
                }
                if let Some(e) =
                    crate::rules::gate_checked(txn.state(), id, &proposal, unknown.as_deref(), now)?
                {
                    txn.commit("loopx", e, None, false, |_| Ok(()))?;
                }
                Ok(())
            })?;
            checked.push(id);
        }
        let notified = self.send_notices(goal).await?;
        let s = self.store().read(goal)?;
        if !withheld.is_empty() {
            skipped = Some(skipped.into_iter().chain(withheld).collect::<Vec<_>>().join("; "));
        }
        Ok(GatePoll {
            goal_id: goal.clone(),
            checked: checked.iter().filter_map(|id| s.gate(*id).cloned()).collect(),
            notified,
            skipped,
        })
    }

    /// Observes the world for `g` and reads it with the gate's capability: the proposal, or
    /// why nothing could be seen ("unknown").
    async fn observe(&self, g: &Gate, now: Timestamp) -> (TransitionProposal, Option<String>) {
        let unknown = |why: String| {
            (TransitionProposal::KeepWaiting { reason: why.clone(), head_sha: None, url: None }, Some(why))
        };
        let observation = match (&g.kind, request(&g.kind, self.store().root())) {
            (GateKind::Timer { .. }, _) => Ok(Observation::TimeObserved { now }),
            (_, Some(req @ ObservationRequest::RunCommand { .. })) => match &self.gates.processes {
                Some(p) => p.observe(&req).await,
                None => Err(Error::usage("no process runner here")),
            },
            (_, Some(req)) => match &self.gates.pulls {
                Some(p) => p.observe(&req).await,
                None => Err(Error::usage("no pull-request provider here")),
            },
            (_, None) => Err(Error::internal("nothing to observe for this gate")),
        };
        match observation {
            Err(e) => unknown(e.message),
            Ok(o) => match capability(&g.kind).validate(Subject::Gate(g.id), &o) {
                Ok(p) => (p, None),
                Err(r) => unknown(r.reason),
            },
        }
    }

    /// A completion that finished the goal's work tells the person at once (should-run would
    /// on its next poll); a failure is recorded and warned of, never fails the completion.
    pub(super) async fn tell_if_finished(&self, goal: &GoalId) {
        if self.gates.notifier.is_none() {
            return;
        }
        let due = self.store.read(goal).is_ok_and(|s| finish_notice_due(&s, self.now(), &self.gates));
        if due && let Err(e) = self.send_notices(goal).await {
            self.store
                .reporter()
                .warn(&format!("could not tell the person goal {goal}'s work is finished: {}", e.message));
        }
    }

    /// Tells the person about each of their gates a notice is due for, and that the goal's work
    /// is finished when that is due: the attempt is recorded first (so no two processes send
    /// it), then the outcome. A failure is recorded and tried again later; it never fails the
    /// command.
    pub(crate) async fn send_notices(&self, goal: &GoalId) -> Result<Vec<NoticeResult>> {
        let Some(notifier) = self.gates.notifier.clone() else { return Ok(Vec::new()) };
        let s = self.store().read(goal)?;
        let Some(mut policy) = s.goal.notify.clone() else { return Ok(Vec::new()) };
        // The notify command is a person's; one this machine's person never wrote or approved
        // (it came with the project) is left out until they do. So is the webhook it posts to
        // (a variable or a URL of this machine's).
        let mut left_out = false;
        if let Some(argv) = &policy.command
            && let Some(why) = self.withheld(argv, "user", "user")?
        {
            self.store().reporter().warn(&format!(
                "the notify command `{}` is not run: {why} (loopx command approve --notify)",
                loopx_core::untrusted::shell_exact(argv)
            ));
            (policy.command, left_out) = (None, true);
        }
        if let Some(webhook) = &policy.webhook
            && let Some(why) = self.withheld(&crate::approvals::webhook(webhook), "user", "user")?
        {
            self.store().reporter().warn(&format!(
                "the notify webhook `{webhook}` is not used: {why} (loopx command approve --notify)"
            ));
            (policy.webhook, left_out) = (None, true);
        }
        if left_out && policy.command.is_none() && policy.webhook.is_none() {
            return Ok(Vec::new());
        }
        let now = self.store().clock().now();
        let channel = channels(&policy);
        let mut out = Vec::new();
        for (id, reminder) in notices_due(&s, now, &self.gates) {
            let Some(g) = s.gate(id).cloned() else { continue };
            let mut claimed = false;
            self.store().transact(goal, &mut |txn| {
                let current = txn.state().gate(id);
                if current.map(|c| &c.notified) != Some(&g.notified) {
                    return Ok(());
                }
                let e = Event::GateNotified {
                    gate: id,
                    channel: channel.clone(),
                    reminder,
                    attempt: true,
                    error: None,
                };
                txn.commit("loopx", e, None, false, |_| Ok(()))?;
                claimed = true;
                Ok(())
            })?;
            if !claimed {
                continue;
            }
            let n = Notification {
                goal: goal.clone(),
                gate: Some(id),
                question: g.question.clone(),
                answer_with: format!(
                    "loopx --goal-id {goal} gate answer {id} --approve (or --reject, --cancel)"
                ),
                reminder,
                project: self.store().root().to_path_buf(),
            };
            let result = notifier.notify(&policy, &n).await;
            let error = result.as_ref().err().map(|e| e.message.clone());
            let used = result.unwrap_or_else(|_| channel.clone());
            let e = Event::GateNotified {
                gate: id,
                channel: used.clone(),
                reminder,
                attempt: false,
                error: error.clone(),
            };
            self.store().transact(goal, &mut |txn| {
                txn.commit("loopx", e.clone(), None, false, |_| Ok(())).map(|_| ())
            })?;
            out.push(NoticeResult { gate: Some(id), reminder, channel: Some(used), error });
        }
        if finish_notice_due(&s, now, &self.gates) {
            out.extend(self.send_finish_notice(goal, &s, &policy, &notifier).await?);
        }
        Ok(out)
    }

    /// Tells the person, through the goal's notifier, that a driver waits on its host's own
    /// quota or hands the work to another host (`what`): once a limited stretch, from the
    /// driver's process. Nothing is asked of them; a goal without a notifier is told nothing.
    /// Returns the channels used.
    pub async fn tell_host_limited(&self, goal: &GoalId, what: &str) -> Result<Option<String>> {
        let Some(notifier) = self.gates.notifier.clone() else { return Ok(None) };
        let state = self.store.read(goal)?;
        let Some(policy) = state.goal.notify.clone() else { return Ok(None) };
        let n = Notification {
            goal: goal.clone(),
            gate: None,
            question: format!("{what}. {}", state.goal.objective),
            answer_with: format!(
                "nothing: loopx drive goes on by itself (loopx --goal-id {goal} goal stop --now stops it; loopx --goal-id {goal} goal set --host-wait sets how long it waits)"
            ),
            reminder: false,
            project: self.store().root().to_path_buf(),
        };
        notifier.notify(&policy, &n).await.map(Some)
    }

    /// Tells the person the goal's work is finished and asks them to confirm it, like a gate's
    /// notice: the attempt is recorded first, then the outcome.
    async fn send_finish_notice(
        &self,
        goal: &GoalId,
        s: &GoalState,
        policy: &loopx_core::model::NotifyPolicy,
        notifier: &Arc<dyn loopx_core::traits::Notifier>,
    ) -> Result<Option<NoticeResult>> {
        let channel = channels(policy);
        let todos = s.todos_total;
        let mut claimed = false;
        self.store().transact(goal, &mut |txn| {
            if txn.state().finish_notice != s.finish_notice || !txn.state().work_finished() {
                return Ok(());
            }
            let e = Event::FinishNotified { todos, channel: channel.clone(), attempt: true, error: None };
            txn.commit("loopx", e, None, false, |_| Ok(()))?;
            claimed = true;
            Ok(())
        })?;
        if !claimed {
            return Ok(None);
        }
        let n = Notification {
            goal: goal.clone(),
            gate: None,
            question: format!(
                "every todo is closed ({} done) and nothing follows: is the objective met? {}",
                s.counts().done,
                s.goal.objective
            ),
            answer_with: format!(
                "loopx --goal-id {goal} goal complete (or add work: loopx --goal-id {goal} todo add --text \"…\")"
            ),
            reminder: false,
            project: self.store().root().to_path_buf(),
        };
        let result = notifier.notify(policy, &n).await;
        let error = result.as_ref().err().map(|e| e.message.clone());
        let used = result.unwrap_or_else(|_| channel.clone());
        let e = Event::FinishNotified { todos, channel: used.clone(), attempt: false, error: error.clone() };
        self.store()
            .transact(goal, &mut |txn| txn.commit("loopx", e.clone(), None, false, |_| Ok(())).map(|_| ()))?;
        Ok(Some(NoticeResult { gate: None, reminder: false, channel: Some(used), error }))
    }

    /// Whether should-run must poll first: a gate or a notice is due that this process may
    /// handle.
    pub(crate) fn poll_needed(&self, state: &GoalState, now: Timestamp) -> bool {
        let timers_only = !self.gates.poll_on_should_run;
        !due(state, now, &self.gates, timers_only).is_empty()
            || (!timers_only
                && (!notices_due(state, now, &self.gates).is_empty()
                    || finish_notice_due(state, now, &self.gates)))
    }
}
