//! [`StateKernel`]: the [`Kernel`] command surface over any [`Store`]; [`FileKernel`] is it
//! over the embedded file store.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use loopx_core::agent::{Cadence, HostCatalog};
use loopx_core::decision::{OpenQuestion, ShouldRunAnswer, TurnRef};
use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::model::RuntimeProfile;
use loopx_core::model::{Gate, GateBlocks, GateKind, GoalStatus};
use loopx_core::traits::{Capability, EvidenceDraft, Subject, TransitionProposal};
use loopx_core::traits::{Notification, Observation, ObservationRequest};
use loopx_core::{AgentId, Clock, Error, GateId, GoalId, Result, Timestamp, TodoId};

use crate::Reporter;
use crate::decide;
use crate::gates::{
    CommandPassed, capability, channels, command_evidence, due, finish_notice_due, notices_due, request,
};
use crate::quota;
use crate::rules::{self, Actor, Lane};
use crate::scope::WriteScope;
use crate::state::{GoalState, decision_key};
use crate::store::{FileStore, InitOutcome, Store, StoreOptions};

/// The kernel over a store: the rules, the decision table and the gates, with the store
/// keeping what they commit.
#[derive(Debug)]
pub struct StateKernel<S: Store> {
    store: S,
    /// What gate checks and notices may use (none: timers only, nobody told).
    pub(crate) gates: crate::gates::GateRuntime,
    /// The host types this loopx knows, and how each is paced (none: every agent generically).
    hosts: Arc<HostCatalog>,
}

/// The kernel over the embedded file store.
pub type FileKernel = StateKernel<FileStore>;

/// The kernel over the store a project names (the command line's).
pub type DynKernel = StateKernel<Box<dyn Store>>;

/// The kernel over the in-memory store (tests and simulations).
pub type MemKernel = StateKernel<crate::MemStore>;

impl FileKernel {
    /// Opens the project at `root` (the directory holding `.loopx/`).
    pub fn open(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Self> {
        Ok(Self::over(FileStore::open(root, clock, reporter, options)?))
    }

    /// Creates or reuses `.loopx/` at `root`.
    pub fn init(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<(Self, InitOutcome)> {
        let (store, outcome) = FileStore::init(root, clock, reporter, options)?;
        Ok((Self::over(store), outcome))
    }
}

impl<S: Store> StateKernel<S> {
    /// The kernel over `store`.
    pub fn over(store: S) -> Self {
        Self { store, gates: Default::default(), hosts: Arc::default() }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// The providers gate checks and notices use, and whether should-run checks gates itself.
    pub fn with_gates(mut self, gates: crate::gates::GateRuntime) -> Self {
        self.gates = gates;
        self
    }

    /// The host catalog should-run paces agents by (their adapters' cadences).
    pub fn with_hosts(mut self, hosts: Arc<HostCatalog>) -> Self {
        self.hosts = hosts;
        self
    }

    /// How should-run paces: `forced` if the caller named a profile, else as the catalog paces
    /// the agent's host.
    fn pacing<'a>(&'a self, forced: Option<&'a Cadence>) -> decide::Pacing<'a> {
        decide::Pacing { hosts: &self.hosts, forced }
    }

    /// This machine's record of the project's commands, when the runtime keeps one.
    fn approvals(&self) -> Option<crate::approvals::Approvals> {
        self.gates.commands.as_ref().map(|f| crate::approvals::Approvals::new(f.clone(), self.store.root()))
    }

    /// Why `argv`, written by `author`, may not run for `runner` now, if it may not.
    pub(crate) fn withheld(&self, argv: &[String], author: &str, runner: &str) -> Result<Option<String>> {
        match self.approvals() {
            None => Ok(None),
            Some(a) => Ok(a.may_run(argv, author, runner, self.gates.agent_tools)?.map(|w| w.why)),
        }
    }

    /// The commands the goal names that loopx may run: open todos' validations, open command
    /// gates' checks, the notify command; each with its author and this machine's record.
    pub fn commands(&self, goal: Option<&GoalId>) -> Result<Vec<crate::approvals::GoalCommand>> {
        use loopx_core::model::GateKind;
        let s = self.read(goal)?;
        let mut found: Vec<(String, Vec<String>, String)> = Vec::new();
        for t in s.todos.iter().filter(|t| !t.status.is_closed()) {
            if let Some(v) = &t.validation {
                found.push((format!("todo {}", t.id), v.argv.clone(), t.created_by.clone()));
            }
        }
        for g in s.gates.iter().filter(|g| g.status == loopx_core::model::GateStatus::Open) {
            if let GateKind::Command { argv, .. } = &g.kind {
                found.push((format!("gate {}", g.id), argv.clone(), g.asked_by.clone()));
            }
        }
        if let Some(argv) = s.goal.notify.as_ref().and_then(|n| n.command.clone()) {
            found.push(("notify".to_owned(), argv, "user".to_owned()));
        }
        if let Some(webhook) = s.goal.notify.as_ref().and_then(|n| n.webhook.as_deref()) {
            found.push(("notify webhook".to_owned(), crate::approvals::webhook(webhook), "user".to_owned()));
        }
        let approvals = self.approvals();
        found
            .into_iter()
            .map(|(at, argv, author)| {
                let here = approvals.as_ref().map(|a| a.lookup(&argv)).transpose()?.flatten();
                Ok(crate::approvals::GoalCommand {
                    at,
                    quoted: loopx_core::untrusted::shell_exact(&argv),
                    argv,
                    author,
                    here,
                })
            })
            .collect()
    }

    /// Records that this machine's person approves `argv` for the project; whether it was
    /// not approved before. Refused where the runtime keeps no record.
    pub fn approve_command(&self, argv: &[String]) -> Result<bool> {
        let a = self.approvals().ok_or_else(|| Error::internal("no record of commands is kept here"))?;
        a.approve(argv, self.now())
    }

    /// Notes that `by` wrote `argv` on this machine. The command is committed already: a
    /// record that cannot be written only withholds it until a person approves it, and is said.
    fn wrote_command(&self, argv: &[String], by: &str) {
        if let Some(a) = self.approvals()
            && let Err(e) = a.written(argv, by, self.now())
        {
            self.store.reporter().warn(&format!(
                "could not record the command `{}` as written here ({}); it runs once a person approves it",
                loopx_core::untrusted::shell_exact(argv),
                e.message
            ));
        }
    }

    /// The goal a command addresses: the one named, or the project's default.
    pub fn resolve_goal(&self, goal: Option<&GoalId>) -> Result<GoalId> {
        let project = self.store.project()?;
        match goal {
            Some(g) if project.has_goal(g) => Ok(g.clone()),
            Some(g) => Err(Error::not_found(format!("goal {g} not found in this project")).with_hint(format!(
                "create it with: loopx goal create --goal-id {g} --objective \"…\" (or see loopx goal list)"
            ))),
            None => project.default_goal.ok_or_else(|| {
                Error::not_found("this project has no goal yet")
                    .with_hint("create one with: loopx goal create --goal-id main --objective \"…\"")
            }),
        }
    }

    pub(crate) fn read(&self, goal: Option<&GoalId>) -> Result<Arc<GoalState>> {
        self.store.read(&self.resolve_goal(goal)?)
    }

    /// One mutation: resolve the actor, return a stored receipt for a replayed key, otherwise
    /// decide and commit at most one event.
    fn mutate<T: Serialize + DeserializeOwned>(
        &self,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: impl Fn(&GoalState) -> Result<Lane>,
        decide: impl Fn(&GoalState, &Actor) -> Result<Option<Event>>,
        body: impl Fn(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let mut out = None;
        self.store.transact(&goal, &mut |txn| {
            let actor = rules::resolve_actor(txn.state(), ctx, lane(txn.state())?)?;
            let key = ctx.key.as_ref().map(|k| replay_key(scope, &actor, k.as_str(), request));
            if let Some(k) = &key
                && let Some(r) = txn.replay::<T>(k, &body)?
            {
                out = Some(r);
                return Ok(());
            }
            let receipt = match decide(txn.state(), &actor)? {
                Some(event) => {
                    txn.sign_with(ctx.signer.clone());
                    txn.commit(actor.name(), event, key, replay_verbatim(scope), &body)?
                }
                None => Receipt {
                    goal_id: goal.clone(),
                    seq: txn.seq(),
                    changed: false,
                    body: body(txn.state())?,
                    replayed: false,
                },
            };
            out = Some(receipt);
            Ok(())
        })?;
        out.ok_or_else(|| Error::internal("transaction returned no receipt"))
    }

    /// [`Self::mutate`] for a command that most often finds its work done (a loop armed again,
    /// an agent registered or a session bound again, a take-over with no handoff waiting): when
    /// it changes nothing in the state `read` (or, `None`, one read now), the no-op receipt
    /// comes from that state without taking the goal's lock, as if the command had run just
    /// then. Anything else (a change, a refusal, a key to replay) goes through the lock and is
    /// decided again there.
    #[allow(clippy::too_many_arguments)]
    fn mutate_if_needed<T: Serialize + DeserializeOwned>(
        &self,
        read: Option<Arc<GoalState>>,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: impl Fn(&GoalState) -> Result<Lane>,
        decide: impl Fn(&GoalState, &Actor) -> Result<Option<Event>>,
        body: impl Fn(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        if ctx.key.is_none() {
            let s = match read {
                Some(s) => s,
                None => self.read(ctx.goal.as_ref())?,
            };
            let unchanged = lane(&s)
                .and_then(|l| rules::resolve_actor(&s, ctx, l))
                .is_ok_and(|actor| matches!(decide(&s, &actor), Ok(None)));
            if unchanged {
                let goal_id = s.goal.id.clone();
                return Ok(Receipt { goal_id, seq: s.seq, changed: false, body: body(&s)?, replayed: false });
            }
        }
        self.mutate(ctx, scope, request, lane, decide, body)
    }

    /// The receipt stored for this context's key, if the command was committed before.
    fn stored_receipt<T: DeserializeOwned>(
        &self,
        state: &GoalState,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: Lane,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Option<Receipt<T>>> {
        let Some(key) = &ctx.key else { return Ok(None) };
        let actor = rules::resolve_actor(state, ctx, lane)?;
        crate::store::stored_receipt(state, &replay_key(scope, &actor, key.as_str(), request), body)
    }

    /// A todo with a validation command completes only on the kernel's own passing run. The
    /// run happens outside the lock (it may take minutes); the commit re-checks the state. A
    /// failing run is recorded as evidence and refuses the completion.
    async fn run_validation(
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
    async fn transact_polling_first(&self, goal: &GoalId, f: &mut PolledStep<'_>) -> Result<()> {
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

    /// Asks the gate (without telling anyone).
    fn ask_gate_only(&self, ctx: &CommandContext, req: AskGate) -> Result<Receipt<GateBody>> {
        self.mutate(
            ctx,
            "gate.ask",
            &req,
            person,
            |s, _| rules::ask_gate(s, &req, self.now()).map(Some),
            |s| {
                s.gates
                    .last()
                    .cloned()
                    .map(|gate| GateBody { gate })
                    .ok_or_else(|| Error::internal("no gate"))
            },
        )
    }

    /// The key a person's decision on `goal` is signed with, if the goal is in strict mode: the
    /// one its log holds, or else the one this machine saw it hold.
    pub fn person_key(&self, goal: Option<&GoalId>) -> Result<Option<String>> {
        let state = self.read(goal)?;
        Ok(state.goal.person_key.clone().or_else(|| self.store.seen_person_key(&state.goal.id)))
    }

    /// What time it is for this kernel: its store's clock.
    pub fn now(&self) -> loopx_core::Timestamp {
        self.store.clock().now()
    }

    fn goal_body(&self, state: &GoalState) -> Result<GoalBody> {
        let project = self.store.project()?;
        Ok(GoalBody {
            goal: state.goal.clone(),
            is_default: project.default_goal.as_ref() == Some(&state.goal.id),
        })
    }
}

/// Whether a replay of `scope` returns the stored receipt byte for byte. Commands that create
/// something (and a spend, whose replay must be exact) keep their receipt; the others keep
/// only the key and answer a replay with the present state of what they changed.
fn replay_verbatim(scope: &str) -> bool {
    matches!(scope, "todo.add" | "evidence.add" | "gate.ask" | "turn.settle")
}

/// Whether a record written with `turn` by `agent` belongs to the turn in `ctx` (the latest
/// record when there is no turn: a first commit).
fn same_turn(
    turn: Option<&str>,
    agent: &loopx_core::AgentId,
    wanted: Option<&str>,
    ctx: &CommandContext,
) -> bool {
    wanted.is_none_or(|w| turn == Some(w) && ctx.agent.as_ref().is_none_or(|a| a == agent))
}

/// Whether a stored key (`scope:actor:key#fingerprint`) was made with the turn id `turn`.
fn keyed_by(stored: &str, turn: &str) -> bool {
    stored.split_once('#').is_some_and(|(head, _)| head.splitn(3, ':').nth(2) == Some(turn))
}

/// The key a replayable command is stored under: `scope:actor:key#fingerprint`, where the
/// fingerprint is a digest of the request. The same key with another request is refused.
fn replay_key(scope: &str, actor: &Actor, key: &str, request: &impl Serialize) -> String {
    // serde_json writes a struct's fields in declaration order: the same request always gives
    // the same bytes, whatever `Debug` prints.
    let bytes = serde_json::to_vec(request).unwrap_or_default();
    let fp = crate::log::line_hash(&bytes);
    format!("{scope}:{}:{key}#{}", actor.name(), &fp[..8])
}

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

/// A step of [`StateKernel::transact_polling_first`]: the transaction, its time, whether it may
/// still poll; the agent to poll for when gates or notices are due.
type PolledStep<'a> =
    dyn FnMut(&mut crate::store::Txn<'_>, loopx_core::Timestamp, bool) -> Result<Option<String>> + Send + 'a;

/// Who gates and notices are polled for: the deciding agent, or the person.
fn runner_name(agent: Option<AgentId>) -> String {
    agent.map_or_else(|| "user".to_owned(), |a| a.to_string())
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

fn todo_body(id: TodoId) -> impl Fn(&GoalState) -> Result<TodoBody> {
    move |s| Ok(TodoBody { todo: rules::find_todo(s, id)?.clone() })
}

fn todo_lane(id: TodoId) -> impl Fn(&GoalState) -> Result<Lane> {
    move |s| rules::find_todo(s, id).map(rules::lane_of)
}

fn person(_: &GoalState) -> Result<Lane> {
    Ok(Lane::Person)
}

/// The lane of a person-only decision, with its words.
fn governs(what: &'static str) -> impl Fn(&GoalState) -> Result<Lane> {
    move |_| Ok(Lane::Governance(what))
}

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

/// What `quota status` shows of goal state `s` at `now`.
fn quota_status_view(s: &GoalState, now: loopx_core::Timestamp) -> QuotaStatus {
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

    /// [`Board`] of `goal` (the default goal when `None`).
    pub fn board(&self, goal: Option<&GoalId>) -> Result<Board> {
        let state = self.read(goal)?;
        let now = self.now();
        Ok(Board { status: status_view(&state, now), quota: quota_status_view(&state, now), state })
    }
}

#[async_trait]
impl<S: Store> Kernel for StateKernel<S> {
    async fn create_goal(&self, req: CreateGoal) -> Result<Receipt<GoalBody>> {
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

    async fn list_goals(&self) -> Result<GoalList> {
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

    async fn show_goal(&self, goal: Option<&GoalId>) -> Result<GoalDetail> {
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

    async fn set_goal(&self, ctx: &CommandContext, req: SetGoal) -> Result<Receipt<GoalBody>> {
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

    async fn stop_goal(
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

    async fn resume_goal(&self, ctx: &CommandContext) -> Result<Receipt<GoalBody>> {
        self.mutate(
            ctx,
            "goal.resume",
            &(),
            governs("resuming the goal"),
            |s, _| Ok(rules::resume_goal(s)),
            |s| self.goal_body(s),
        )
    }

    async fn complete_goal(&self, ctx: &CommandContext, note: Option<String>) -> Result<Receipt<GoalBody>> {
        self.mutate(
            ctx,
            "goal.complete",
            &note,
            governs("completing the goal"),
            |s, _| rules::complete_goal(s, note.as_ref()),
            |s| self.goal_body(s),
        )
    }

    async fn set_person_key(&self, ctx: &CommandContext, public_key: String) -> Result<Receipt<GoalBody>> {
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

    async fn register_agent(&self, ctx: &CommandContext, req: RegisterAgent) -> Result<Receipt<AgentBody>> {
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

    async fn list_agents(&self, goal: Option<&GoalId>) -> Result<AgentList> {
        let state = self.read(goal)?;
        Ok(AgentList { goal_id: state.goal.id.clone(), agents: state.agents.clone() })
    }

    async fn add_todo(&self, ctx: &CommandContext, req: AddTodo) -> Result<Receipt<TodoBody>> {
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

    async fn list_todos(&self, goal: Option<&GoalId>, filter: &TodoFilter) -> Result<TodoList> {
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

    async fn show_todo(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<TodoDetail> {
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

    async fn claim_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>> {
        self.mutate(
            ctx,
            "todo.claim",
            &todo,
            |_| Ok(Lane::Agent),
            |s, a| rules::claim(s, a, todo, self.now()),
            todo_body(todo),
        )
    }

    async fn update_todo(&self, ctx: &CommandContext, req: UpdateTodo) -> Result<Receipt<TodoBody>> {
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

    async fn complete_todo(&self, ctx: &CommandContext, req: CompleteTodo) -> Result<Receipt<CompleteBody>> {
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

    async fn supersede_todo(
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

    async fn release_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>> {
        self.mutate(
            ctx,
            "todo.release",
            &todo,
            |_| Ok(Lane::Agent),
            |s, a| rules::release(s, a, todo, self.now()),
            todo_body(todo),
        )
    }

    async fn add_evidence(&self, ctx: &CommandContext, req: AddEvidence) -> Result<Receipt<EvidenceBody>> {
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

    async fn list_evidence(&self, goal: Option<&GoalId>, todo: Option<TodoId>) -> Result<EvidenceList> {
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

    async fn status(&self, goal: Option<&GoalId>) -> Result<StatusView> {
        Ok(status_view(self.read(goal)?.as_ref(), self.now()))
    }

    async fn history(&self, goal: Option<&GoalId>, filter: &HistoryFilter) -> Result<HistoryView> {
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

    async fn handoff(&self, ctx: &CommandContext, req: OfferHandoff) -> Result<Receipt<HandoffBody>> {
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

    async fn accept_handoff(&self, ctx: &CommandContext, req: AcceptHandoff) -> Result<Receipt<ResumeBody>> {
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

    async fn cancel_handoff(&self, ctx: &CommandContext, req: CancelHandoff) -> Result<Receipt<HandoffBody>> {
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

    async fn list_handoffs(&self, goal: Option<&GoalId>, all: bool) -> Result<HandoffList> {
        let s = self.read(goal)?;
        let now = self.now();
        let handoffs =
            s.handoffs.iter().filter(|h| all || h.is_pending(now)).map(|h| as_of(h, now)).collect();
        Ok(HandoffList { goal_id: s.goal.id.clone(), handoffs })
    }

    async fn handoff_packet(
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

    async fn drive_lease(
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

    async fn end_turn(
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

    async fn turn(
        &self,
        goal: Option<&GoalId>,
        agent: &loopx_core::AgentId,
        turn: &str,
    ) -> Result<loopx_core::drive::TurnView> {
        crate::drive::turn_view(self.read(goal)?.as_ref(), agent, turn)
    }

    async fn poll_gates(&self, ctx: &CommandContext, only: Option<loopx_core::GateId>) -> Result<GatePoll> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        // Whoever cannot be named (a session that has not joined) runs only approved commands.
        let runner = rules::resolve_actor(self.store.read(&goal)?.as_ref(), ctx, Lane::Person)
            .map_or_else(|_| "an unnamed agent".to_owned(), |a| a.name().to_owned());
        self.poll(&goal, only, false, &runner).await
    }

    async fn doctor(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        self.store.doctor(goal)
    }

    async fn repair(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        // A named goal must exist; an unreadable project.json is what repair is for.
        if let Some(g) = goal {
            self.store.repair_project()?;
            self.resolve_goal(Some(g))?;
        }
        self.store.repair(goal)
    }

    async fn should_run(
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

    async fn ask_gate(&self, ctx: &CommandContext, req: AskGate) -> Result<Receipt<GateBody>> {
        let receipt = self.ask_gate_only(ctx, req)?;
        if let (loopx_core::model::GateKind::Command { argv, .. }, false) =
            (&receipt.body.gate.kind, receipt.replayed)
        {
            self.wrote_command(argv, &receipt.body.gate.asked_by);
        }
        // The person is told at once (a failure is recorded, never fails the question).
        if receipt.body.gate.is_persons() && !receipt.replayed {
            let goal = receipt.goal_id.clone();
            if let Err(e) = self.send_notices(&goal).await {
                self.store.reporter().warn(&format!(
                    "could not notify the person about {}: {}",
                    receipt.body.gate.id, e.message
                ));
            }
        }
        Ok(receipt)
    }
    async fn answer_gate(&self, ctx: &CommandContext, req: AnswerGate) -> Result<Receipt<GateBody>> {
        let id = req.gate;
        self.mutate(
            ctx,
            "gate.answer",
            &req,
            governs("answering a gate"),
            |s, a| rules::answer_gate(s, a, &req).map(Some),
            move |s| Ok(GateBody { gate: rules::find_gate(s, id)?.clone() }),
        )
    }

    async fn list_gates(&self, goal: Option<&GoalId>, all: bool) -> Result<GateList> {
        let s = self.read(goal)?;
        let gates = s
            .gates
            .iter()
            .filter(|g| all || g.status == loopx_core::model::GateStatus::Open)
            .cloned()
            .collect();
        Ok(GateList { goal_id: s.goal.id.clone(), gates })
    }

    async fn refresh_state(&self, ctx: &CommandContext, req: RefreshState) -> Result<Receipt<RunBody>> {
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

    async fn spend_slot(&self, ctx: &CommandContext, req: SpendSlot) -> Result<Receipt<SpendBody>> {
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

    async fn settle_turn(&self, ctx: &CommandContext, req: SettleTurn) -> Result<Receipt<SettleBody>> {
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

    async fn void_slot(&self, ctx: &CommandContext, req: VoidSlot) -> Result<Receipt<SpendBody>> {
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

    async fn quota_status(&self, goal: Option<&GoalId>) -> Result<QuotaStatus> {
        Ok(quota_status_view(self.read(goal)?.as_ref(), self.now()))
    }

    async fn scheduler_report(
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

    async fn lease(&self, ctx: &CommandContext, req: LeaseRequest) -> Result<Receipt<LeaseBody>> {
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

    async fn show_lease(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<LeaseBody> {
        lease_body(self.read(goal)?.as_ref(), todo, self.now())
    }

    async fn claim_next(&self, ctx: &CommandContext) -> Result<Receipt<TodoBody>> {
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

    async fn bind_thread(&self, ctx: &CommandContext, req: BindThread) -> Result<Receipt<SessionView>> {
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

    async fn unbind_thread(
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

    async fn set_armed(&self, ctx: &CommandContext, armed: bool) -> Result<Receipt<SessionView>> {
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

    async fn stop_turn(&self, agent: Option<&AgentId>, req: BindThread, cap: u32) -> Result<StopTurn> {
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

    async fn session(&self, goal: Option<&GoalId>, req: &BindThread) -> Result<SessionView> {
        session_view(req.clone())(self.read(goal)?.as_ref())
    }

    async fn agent_session(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        req: &BindThread,
    ) -> Result<SessionView> {
        Ok(agent_session_view(self.read(goal)?.as_ref(), agent, req))
    }

    async fn check_edits(
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

/// A receipt body with nothing in it.
#[derive(Debug, serde::Serialize)]
struct Nothing {}

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
    async fn tell_if_finished(&self, goal: &GoalId) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_come_from_the_requests_json_not_its_debug_output() {
        let a = Actor::Agent(loopx_core::AgentId::new("cc").unwrap());
        let key = replay_key("todo.claim", &a, "turn-1", &TodoId::from_number(1));
        assert_eq!(key, format!("todo.claim:cc:turn-1#{}", &crate::log::line_hash(b"\"t1\"")[..8]));
        let req = RefreshState {
            todo: TodoId::from_number(2),
            classification: "implement".into(),
            delivery_outcome: loopx_core::model::DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        let json = br#"{"todo":"t2","classification":"implement","delivery_outcome":"outcome_progress","next_action":null}"#;
        assert_eq!(
            replay_key("refresh-state", &a, "k", &req),
            format!("refresh-state:cc:k#{}", &crate::log::line_hash(json)[..8])
        );
    }
}
