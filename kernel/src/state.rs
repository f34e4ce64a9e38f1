//! Derived state: what the event log says, folded. Pure; no I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use loopx_core::decision::DecisionRecord;
use loopx_core::drive::{DriverLease, TodoTurns, TurnEnd};
use loopx_core::event::Event;
use loopx_core::kernel::{TodoCounts, TodoSummary};
use loopx_core::model::{
    Agent, Completion, CompletionContinuation, Evidence, Gate, GateBlocks, GateStatus, Goal, GoalStatus,
    Handoff, HandoffMode, HandoffStatus, Lease, NewTodo, Note, NotifyState, QuotaPolicy, ResumeWhen,
    RunRecord, Spend, Todo, TodoStatus,
};
use loopx_core::{AgentId, EvidenceId, GateId, GoalId, HandoffId, RunId, SpendId, Timestamp, TodoId};

/// Keyed receipts kept for replays; older keys fall out (a replay is a retry, not an archive).
pub const RECEIPTS_KEPT: usize = 512;
/// Recorded turn decisions kept for replays and turn binding.
pub const DECISIONS_KEPT: usize = 512;
/// Run records kept in state (the log keeps them all; `loopx history` shows them).
pub const RUNS_KEPT: usize = 256;
/// Spends older than this (before the latest event) leave the state: no window is longer.
pub const SPEND_HORIZON_MS: i64 = 7 * 24 * 3600 * 1000;
/// Closed todos kept in the live state, the most recently closed; older ones move to the goal's
/// archive (`archive.jsonl`) with their evidence, so a mutation's cost follows the open work.
pub const CLOSED_KEPT: usize = 64;
/// Ended driven turns kept in state (a late writeback of one is refused; the log keeps them
/// all).
pub const TURN_ENDS_KEPT: usize = 64;

use crate::log::EventLine;
use crate::table::{KeyRef, TodoTable};

/// What is kept for an idempotency key: the event that committed it and, for commands whose
/// replay must be byte for byte (a spend), the receipt itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReceipt {
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<RawJson>,
}

/// Where a goal was imported from ([`Event::Imported`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportMark {
    pub source: String,
    pub digest: String,
}

/// The state of one goal after `seq` events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalState {
    pub seq: u64,
    pub last_event_at: Timestamp,
    pub goal: Goal,
    pub agents: Vec<Agent>,
    /// The live todos (every one not closed, and the [`CLOSED_KEPT`] most recently closed),
    /// in id order; the others are in the archive.
    pub todos: TodoTable,
    /// The live todos' evidence, in id order.
    pub evidence: Vec<Evidence>,
    pub receipts: BTreeMap<String, StoredReceipt>,
    /// Receipt keys, oldest first, for eviction.
    #[serde(default)]
    pub receipt_order: VecDeque<String>,
    #[serde(default)]
    pub gates: Vec<Gate>,
    /// Recent run records (`refresh-state`), oldest first.
    #[serde(default)]
    pub runs: VecDeque<RunRecord>,
    #[serde(default)]
    pub runs_total: u64,
    /// Spends within the horizon, oldest first.
    #[serde(default)]
    pub spends: VecDeque<Spend>,
    #[serde(default)]
    pub spends_total: u64,
    #[serde(default)]
    pub tokens_used: u64,
    #[serde(default)]
    pub usd_used: f64,
    /// Recorded decisions by `agent:turn`, with the event that recorded each.
    #[serde(default)]
    pub decisions: BTreeMap<String, RecordedDecision>,
    #[serde(default)]
    pub decision_order: VecDeque<String>,
    #[serde(default)]
    pub(crate) schedulers: BTreeMap<AgentId, SchedulerState>,
    /// Host sessions bound to agents, by `host:thread`.
    #[serde(default)]
    pub threads: BTreeMap<String, AgentId>,
    /// Agents whose host loop is armed.
    #[serde(default)]
    pub armed: Vec<AgentId>,
    /// Stop-hook continuations per host session (`thread` → count).
    #[serde(default)]
    pub stop_blocks: BTreeMap<String, u32>,
    /// The latest event that changed the work (not a poll or a scheduler report).
    #[serde(default)]
    pub(crate) work_seq: u64,
    /// Every handoff, `handoffs[n - 1]` being `hn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handoffs: Vec<Handoff>,
    /// Where `loopx import` brought the goal from, and the digest of what it read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<ImportMark>,
    // The fields below were added with the archive. Each is left out of the JSON while it
    // holds its default, so a state without archived todos encodes as it did before them.
    /// Todos ever added (the live ones and the archived).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub todos_total: u64,
    /// Evidence ever recorded.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub evidence_total: u64,
    /// The live closed todos, in the order they closed: the first leaves for the archive next.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(crate) closed_order: VecDeque<TodoId>,
    /// What the archive holds, and the hash of its last line.
    #[serde(default, skip_serializing_if = "ArchiveHead::is_empty")]
    pub archive: ArchiveHead,
    /// Archive lines made by the last event applied, for the store to append. Not state.
    #[serde(skip)]
    pub archived_now: Vec<String>,
    // The fields below came with `loopx drive`; like the archive's, each is left out while it
    // holds its default.
    /// The drivers' leases, by agent (an expired one stays until replaced or stopped).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drivers: BTreeMap<AgentId, DriverLease>,
    /// The latest ended driven turns, oldest first.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub turn_ends: VecDeque<TurnEnd>,
    /// What the brakes count of each open todo's driven turns.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) todo_turns: BTreeMap<TodoId, TodoTurns>,
    /// Driven turns ever ended, and of them those that did not write back.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub turns_ended_total: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub turns_failed_total: u64,
    /// Telling the person the goal's work is finished (left out until first told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_notice: Option<FinishNotice>,
    // The fields below came with showing a session the questions asked while it works.
    /// When each armed agent's loop was armed: a question asked before, its entry showed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) armed_at: BTreeMap<AgentId, Timestamp>,
    /// The person's questions a stop hook showed each host session (`thread`), each once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub told: BTreeMap<String, BTreeSet<GateId>>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// The notice that the goal's work is finished, for the goal as it was then: `todos` ever
/// added. Work added and finished again is a new notice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishNotice {
    pub todos: u64,
    #[serde(flatten)]
    pub notified: NotifyState,
}

/// Records a notice attempt (`attempt`) or its outcome in `n`.
fn record_notice(n: &mut NotifyState, at: Timestamp, reminder: bool, attempt: bool, error: Option<&String>) {
    n.tried_at = Some(at);
    match error {
        _ if attempt => {}
        Some(e) => {
            n.failures = n.failures.saturating_add(1);
            n.last_error = Some(e.clone());
        }
        None if reminder => {
            n.reminded_at = Some(at);
            n.last_error = None;
        }
        None => {
            n.sent_at = Some(at);
            n.last_error = None;
        }
    }
}

/// The archive of a goal: closed todos that left the live state, each with its evidence, one
/// JSON line each, hash-chained like the log. The live state holds this head, so the state root
/// covers the archive and a line edited by hand no longer matches it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveHead {
    /// Archived todos.
    pub todos: u64,
    /// Of them, done (the others were superseded).
    pub done: u64,
    /// Evidence records archived with them.
    pub evidence: u64,
    /// Length of `archive.jsonl` in bytes.
    pub bytes: u64,
    /// Hash of its last line (the genesis hash while empty).
    pub hash: String,
    /// The archived todos that were superseded rather than done (a todo waiting for one never
    /// resumes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<TodoId>,
    /// Some archived todo was completed with no follow-up (the goal may be finished).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_followup: bool,
    /// The latest evidence that left with its todo (the goal's latest, if no live todo has
    /// newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evidence: Option<Evidence>,
}

impl ArchiveHead {
    pub fn is_empty(&self) -> bool {
        self.todos == 0
    }
}

/// One line of `archive.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArchivedTodo {
    /// Hash of the line before (the genesis hash for the first).
    pub prev: String,
    pub todo: Todo,
    pub evidence: Vec<Evidence>,
}

/// JSON kept as its text: copied, not encoded again, when the state is written, and not
/// decoded when the state is read. For what a state keeps hundreds of and reads back rarely
/// (recorded decisions, stored receipts); what a snapshot holds is checked by its root before
/// its state is used, so it is decoded only where it is used.
#[derive(Clone, Debug)]
pub struct RawJson(Box<serde_json::value::RawValue>);

impl RawJson {
    pub fn of<T: Serialize>(value: &T) -> std::result::Result<Self, String> {
        serde_json::value::to_raw_value(value).map(Self).map_err(|e| format!("cannot encode: {e}"))
    }

    pub fn get(&self) -> &str {
        self.0.get()
    }

    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawJson {}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Box::<serde_json::value::RawValue>::deserialize(d).map(Self)
    }
}

/// A turn's decision and the event that recorded it ([`Recorded`], kept as its JSON: a goal
/// keeps up to [`DECISIONS_KEPT`] and reads one back only when its turn comes again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RecordedDecision(RawJson);

/// [`RecordedDecision`] decoded.
#[derive(Debug, Serialize, Deserialize)]
pub struct Recorded {
    pub seq: u64,
    pub record: DecisionRecord,
}

impl RecordedDecision {
    pub fn new(seq: u64, record: DecisionRecord) -> std::result::Result<Self, String> {
        RawJson::of(&Recorded { seq, record }).map(Self)
    }

    /// The event that recorded it and the decision. Its JSON is the one loopx wrote (checked by
    /// the state's root when it was read): only a fault in loopx fails here.
    pub fn read(&self) -> loopx_core::Result<Recorded> {
        self.0
            .decode()
            .map_err(|e| loopx_core::Error::internal(format!("a recorded decision does not read back: {e}")))
    }
}

/// What loopx knows of one agent's host scheduler.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SchedulerState {
    /// `work_seq` at the agent's latest recorded poll.
    pub(crate) last_work_seq: u64,
    /// Recorded polls in a row that found the work unchanged.
    pub unchanged_polls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) applied_cadence: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) applied_rrule: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The key of a host session binding.
pub(crate) fn thread_key(host: &str, thread: &str) -> String {
    format!("{host}:{thread}")
}

/// The key of a recorded turn decision.
pub(crate) fn decision_key(agent: &AgentId, turn: &str) -> String {
    format!("{agent}:{turn}")
}

impl GoalState {
    /// The state after the first event, which must create the goal.
    pub fn genesis(id: &GoalId, first: &EventLine) -> Result<Self, String> {
        let Event::GoalCreated { objective, title } = &first.event else {
            return Err(format!("the first event is {}, not goal_created", first.event.kind()));
        };
        let mut state = GoalState {
            seq: first.seq,
            last_event_at: first.at,
            goal: Goal {
                id: id.clone(),
                objective: objective.clone(),
                title: title.clone(),
                status: GoalStatus::Active,
                stop_reason: None,
                stop_now: false,
                write_scope: Vec::new(),
                handoff_mode: HandoffMode::SoftClaim,
                quota: QuotaPolicy::default(),
                brakes: Default::default(),
                notify: None,
                person_key: None,
                created_at: first.at,
                updated_at: first.at,
            },
            agents: Vec::new(),
            todos: TodoTable::default(),
            evidence: Vec::new(),
            receipts: BTreeMap::new(),
            receipt_order: VecDeque::new(),
            gates: Vec::new(),
            runs: VecDeque::new(),
            runs_total: 0,
            spends: VecDeque::new(),
            spends_total: 0,
            tokens_used: 0,
            usd_used: 0.0,
            decisions: BTreeMap::new(),
            decision_order: VecDeque::new(),
            schedulers: BTreeMap::new(),
            threads: BTreeMap::new(),
            armed: Vec::new(),
            stop_blocks: BTreeMap::new(),
            work_seq: first.seq,
            handoffs: Vec::new(),
            imported: None,
            todos_total: 0,
            evidence_total: 0,
            closed_order: VecDeque::new(),
            archive: ArchiveHead::default(),
            archived_now: Vec::new(),
            drivers: BTreeMap::new(),
            turn_ends: VecDeque::new(),
            todo_turns: BTreeMap::new(),
            turns_ended_total: 0,
            turns_failed_total: 0,
            finish_notice: None,
            armed_at: BTreeMap::new(),
            told: BTreeMap::new(),
        };
        state.keep_receipt(first)?;
        Ok(state)
    }

    /// A live todo.
    pub fn todo(&self, id: TodoId) -> Option<&Todo> {
        self.todos.get(id)
    }

    fn todo_mut(&mut self, id: TodoId) -> Result<&mut Todo, String> {
        if self.is_archived(id) {
            return Err(format!("event changes todo {id}, which is archived"));
        }
        self.todos.get_mut(id).ok_or_else(|| format!("event names unknown todo {id}"))
    }

    /// Whether `id` was added and has since left the live state for the archive.
    pub fn is_archived(&self, id: TodoId) -> bool {
        id.number() >= 1 && id.number() <= self.todos_total && self.todos.key(id).is_none()
    }

    /// The goal's latest evidence, live or archived.
    pub fn latest_evidence(&self) -> Option<&Evidence> {
        self.evidence.last().into_iter().chain(self.archive.last_evidence.as_ref()).max_by_key(|e| e.id)
    }

    /// Live evidence.
    pub fn evidence(&self, id: EvidenceId) -> Option<&Evidence> {
        self.evidence.binary_search_by_key(&id, |e| e.id).ok().map(|i| &self.evidence[i])
    }

    pub fn agent(&self, id: &AgentId) -> Option<&Agent> {
        self.agents.iter().find(|a| &a.id == id)
    }

    pub fn next_todo_id(&self, offset: u64) -> TodoId {
        TodoId::from_number(self.todos_total + 1 + offset)
    }

    pub fn next_evidence_id(&self) -> EvidenceId {
        EvidenceId::from_number(self.evidence_total + 1)
    }

    /// Folds one event in. Fails only on an event that contradicts the state, which a log
    /// written by loopx never contains.
    pub fn apply(&mut self, line: &EventLine) -> Result<(), String> {
        if line.seq != self.seq + 1 {
            return Err(format!("event {} applied after event {}", line.seq, self.seq));
        }
        self.archived_now.clear();
        self.apply_event(&line.event, line.at, line.actor.as_str(), line.seq)?;
        self.archive_overflow()?;
        if line.event.changes_work() {
            self.work_seq = line.seq;
        }
        self.seq = line.seq;
        self.last_event_at = line.at;
        self.keep_receipt(line)?;
        Ok(())
    }

    /// Folds in `event` as the next line would, for a command that decides several steps of
    /// one commit in turn (a settlement).
    pub fn apply_step(&mut self, event: &Event, at: Timestamp, actor: &str) -> Result<(), String> {
        self.apply_event(event, at, actor, self.seq + 1)
    }

    fn apply_event(&mut self, event: &Event, at: Timestamp, actor: &str, seq: u64) -> Result<(), String> {
        match event {
            Event::TurnSettled { steps } => {
                for step in steps {
                    if !step.settles_a_turn() {
                        return Err(format!("a turn settlement holds a {} event", step.kind()));
                    }
                    self.apply_event(step, at, actor, seq)?;
                }
            }
            Event::GoalCreated { .. } => return Err("a second goal_created event".to_owned()),
            Event::GoalUpdated {
                objective,
                title,
                quota,
                handoff_mode,
                write_scope,
                notify,
                clear_notify,
                brakes,
                webhook_changed: _,
            } => {
                if *clear_notify {
                    self.goal.notify = None;
                }
                if let Some(b) = brakes {
                    self.goal.brakes = b.clone();
                }
                if let Some(n) = notify {
                    self.goal.notify = Some(n.clone());
                }
                if let Some(w) = write_scope {
                    self.goal.write_scope.clone_from(w);
                }
                if let Some(m) = handoff_mode {
                    self.goal.handoff_mode = *m;
                }
                if let Some(q) = quota {
                    self.goal.quota = q.clone();
                }
                if let Some(o) = objective {
                    self.goal.objective.clone_from(o);
                }
                if let Some(t) = title {
                    self.goal.title = Some(t.clone());
                }
                self.goal.updated_at = at;
            }
            Event::GoalStopped { reason, now } => {
                self.goal.status = GoalStatus::Stopped;
                self.goal.stop_reason.clone_from(reason);
                self.goal.stop_now = *now;
                self.goal.updated_at = at;
            }
            Event::StoreUpgraded { .. } => {}
            Event::Imported { source, digest } => {
                self.imported = Some(ImportMark { source: source.clone(), digest: digest.clone() });
            }
            Event::GoalResumed {} => {
                self.goal.status = GoalStatus::Active;
                self.goal.stop_reason = None;
                self.goal.stop_now = false;
                self.goal.updated_at = at;
            }
            Event::GoalCompleted { .. } => {
                self.goal.status = GoalStatus::Done;
                self.goal.stop_reason = None;
                self.goal.stop_now = false;
                self.goal.updated_at = at;
            }
            Event::PersonKeySet { public_key } => {
                self.goal.person_key = Some(public_key.clone());
                self.goal.updated_at = at;
            }
            Event::AgentRegistered { agent, agent_type } => {
                if self.agent(agent).is_some() {
                    return Err(format!("agent {agent} registered twice"));
                }
                self.agents.push(Agent {
                    id: agent.clone(),
                    agent_type: agent_type.clone(),
                    registered_at: at,
                });
            }
            Event::TodoAdded { todo } => self.add_todo(todo, actor, at)?,
            Event::TodoClaimed { todo, agent } => {
                let t = self.todo_mut(*todo)?;
                t.claimed_by = Some(agent.clone());
                t.assignee = None;
                t.updated_at = at;
            }
            Event::TodoReleased { todo } => {
                let t = self.todo_mut(*todo)?;
                t.claimed_by = None;
                t.assignee = None;
                t.updated_at = at;
            }
            Event::TodoUpdated { todo, text, priority, status, resume_when, clear_claim, note, evidence } => {
                if let Some(e) = evidence {
                    self.add_evidence(e.clone())?;
                }
                let t = self.todo_mut(*todo)?;
                if let Some(x) = text {
                    t.text.clone_from(x);
                }
                if let Some(p) = priority {
                    t.priority = *p;
                }
                if let Some(s) = status {
                    t.status = *s;
                    if *s != TodoStatus::Deferred {
                        t.resume_when = None;
                    }
                }
                if let Some(r) = resume_when {
                    t.resume_when = Some(r.clone());
                }
                if *clear_claim {
                    t.claimed_by = None;
                    t.assignee = None;
                }
                if let Some(n) = note {
                    t.notes.push(Note { by: actor.to_owned(), at, text: n.clone() });
                }
                t.updated_at = at;
            }
            Event::TodoCompleted { todo, continuation, note, evidence, successor } => {
                for e in evidence {
                    self.add_evidence(e.clone())?;
                }
                if let Some(s) = successor {
                    self.add_todo(s, actor, at)?;
                }
                self.closed_order.push_back(*todo);
                self.todo_turns.remove(todo);
                let t = self.todo_mut(*todo)?;
                t.status = TodoStatus::Done;
                t.resume_when = None;
                if let Some(s) = successor {
                    t.successors.push(s.id);
                }
                t.completion = Some(Box::new(Completion {
                    continuation: *continuation,
                    by: actor.to_owned(),
                    at,
                    note: note.clone(),
                }));
                t.updated_at = at;
            }
            Event::NothingFollows { todo, note } => {
                let t = self.todo_mut(*todo)?;
                let c =
                    t.completion.as_mut().ok_or_else(|| format!("{todo} said to end the work, not done"))?;
                c.continuation = CompletionContinuation::NoFollowup;
                if let Some(n) = note {
                    t.notes.push(Note { by: actor.to_owned(), at, text: n.clone() });
                }
                t.updated_at = at;
            }
            Event::TodoSuperseded { todo, by, new, note } => {
                for n in new {
                    self.add_todo(n, actor, at)?;
                }
                self.closed_order.push_back(*todo);
                self.todo_turns.remove(todo);
                let t = self.todo_mut(*todo)?;
                t.status = TodoStatus::Superseded;
                t.claimed_by = None;
                t.assignee = None;
                t.resume_when = None;
                t.superseded_by.clone_from(by);
                if let Some(n) = note {
                    t.notes.push(Note { by: actor.to_owned(), at, text: n.clone() });
                }
                t.updated_at = at;
            }
            Event::EvidenceAdded { evidence } => self.add_evidence(evidence.clone())?,
            Event::LeaseAcquired { todo, owner, expires_at, key, write_scope } => {
                let t = self.todo_mut(*todo)?;
                t.lease = Some(Box::new(Lease {
                    owner: owner.clone(),
                    acquired_at: at,
                    expires_at: *expires_at,
                    key: key.clone(),
                    write_scope: write_scope.clone(),
                }));
                t.claimed_by = Some(owner.clone());
                t.assignee = None;
                t.lease_version += 1;
                t.updated_at = at;
            }
            Event::LeaseRenewed { todo, expires_at } => {
                let t = self.todo_mut(*todo)?;
                let lease = t.lease.as_mut().ok_or_else(|| format!("renewal of {todo} without a lease"))?;
                lease.expires_at = *expires_at;
                t.lease_version += 1;
                t.updated_at = at;
            }
            Event::LeaseTransferred { todo, to } => {
                let t = self.todo_mut(*todo)?;
                let lease = t.lease.as_mut().ok_or_else(|| format!("transfer of {todo} without a lease"))?;
                lease.owner = to.clone();
                lease.key = None;
                t.claimed_by = Some(to.clone());
                t.assignee = None;
                t.lease_version += 1;
                t.updated_at = at;
            }
            Event::LeaseReleased { todo } => {
                let t = self.todo_mut(*todo)?;
                t.lease = None;
                t.lease_version += 1;
                t.updated_at = at;
            }
            Event::TodoTakenOver { todo, to, reason, .. } => {
                let t = self.todo_mut(*todo)?;
                if t.lease.take().is_some() {
                    t.lease_version += 1;
                }
                t.claimed_by = Some(to.clone());
                t.assignee = None;
                t.notes.push(Note {
                    by: actor.to_owned(),
                    at,
                    text: format!("taken over by {to}: {reason}"),
                });
                t.updated_at = at;
            }
            Event::GateAsked { gate, question, blocks, kind } => {
                if *gate != self.next_gate_id() {
                    return Err(format!("gate {gate} asked where {} was next", self.next_gate_id()));
                }
                self.gates.push(Gate {
                    id: *gate,
                    question: question.clone(),
                    blocks: blocks.clone(),
                    kind: kind.clone(),
                    status: GateStatus::Open,
                    asked_by: actor.to_owned(),
                    asked_at: at,
                    answered_by: None,
                    answered_at: None,
                    note: None,
                    check: None,
                    notified: None,
                });
            }
            Event::GateChecked { gate, check, verdict } => {
                let g = self.gate_mut(*gate)?;
                g.check = Some(check.clone());
                match verdict {
                    Some(GateStatus::Open) => {
                        g.status = GateStatus::Open;
                        g.answered_by = None;
                        g.answered_at = None;
                        g.note = None;
                    }
                    Some(s) => {
                        g.status = *s;
                        g.answered_by = Some(actor.to_owned());
                        g.answered_at = Some(at);
                        g.note = Some(check.summary.clone());
                    }
                    None => {}
                }
            }
            Event::GateNotified { gate, reminder, attempt, error, .. } => {
                let n = self.gate_mut(*gate)?.notified.get_or_insert_with(Default::default);
                record_notice(n, at, *reminder, *attempt, error.as_ref());
            }
            Event::FinishNotified { todos, attempt, error, .. } => {
                let n = self.finish_notice.get_or_insert_with(Default::default);
                if n.todos != *todos {
                    *n = FinishNotice { todos: *todos, notified: NotifyState::default() };
                }
                record_notice(&mut n.notified, at, false, *attempt, error.as_ref());
            }
            Event::GateAnswered { gate, status, note } => {
                let g = self.gate_mut(*gate)?;
                g.status = *status;
                g.answered_by = Some(actor.to_owned());
                g.answered_at = Some(at);
                g.note.clone_from(note);
            }
            Event::DecisionRecorded { record } => {
                let key = decision_key(&record.agent, &record.turn);
                let recorded = RecordedDecision::new(seq, record.clone())?;
                if self.decisions.insert(key.clone(), recorded).is_none() {
                    self.decision_order.push_back(key);
                }
                while self.decision_order.len() > DECISIONS_KEPT {
                    if let Some(old) = self.decision_order.pop_front() {
                        self.decisions.remove(&old);
                    }
                }
                let work_seq = self.work_seq;
                let sched = self.schedulers.entry(record.agent.clone()).or_default();
                if sched.last_work_seq == work_seq {
                    sched.unchanged_polls = sched.unchanged_polls.saturating_add(1);
                } else {
                    sched.unchanged_polls = 0;
                    sched.last_work_seq = work_seq;
                }
            }
            Event::RunRecorded { run } => {
                if run.id != self.next_run_id() {
                    return Err(format!("run {} recorded where {} was next", run.id, self.next_run_id()));
                }
                self.runs.push_back(run.clone());
                self.runs_total += 1;
                while self.runs.len() > RUNS_KEPT {
                    self.runs.pop_front();
                }
            }
            Event::SlotSpent { spend } => {
                if spend.id != self.next_spend_id() {
                    return Err(format!(
                        "spend {} recorded where {} was next",
                        spend.id,
                        self.next_spend_id()
                    ));
                }
                if let Some(run) = self.runs.iter_mut().find(|r| r.id == spend.run) {
                    run.spent_by = Some(spend.id);
                }
                self.tokens_used = self.tokens_used.saturating_add(spend.tokens.unwrap_or(0));
                self.usd_used += spend.usd.unwrap_or(0.0);
                self.spends.push_back(spend.clone());
                self.spends_total += 1;
                let horizon = at.unix_millis().saturating_sub(SPEND_HORIZON_MS);
                while self.spends.front().is_some_and(|s| s.at.unix_millis() < horizon) {
                    self.spends.pop_front();
                }
            }
            Event::SlotVoided { spend, .. } => {
                let s = self
                    .spends
                    .iter_mut()
                    .find(|s| s.id == *spend)
                    .ok_or_else(|| format!("event voids unknown spend {spend}"))?;
                if !s.voided {
                    s.voided = true;
                    self.tokens_used = self.tokens_used.saturating_sub(s.tokens.unwrap_or(0));
                    self.usd_used = (self.usd_used - s.usd.unwrap_or(0.0)).max(0.0);
                }
            }
            Event::SchedulerAcked { agent, cadence_minutes, rrule } => {
                let sched = self.schedulers.entry(agent.clone()).or_default();
                sched.applied_cadence = *cadence_minutes;
                sched.applied_rrule.clone_from(rrule);
                sched.failures = 0;
                sched.last_error = None;
            }
            Event::ThreadBound { agent, host, thread } => {
                if loopx_core::kernel::is_process_host(host) {
                    // An agent has one process per host: the session's newer one replaces it.
                    let prefix = format!("{host}:");
                    self.threads.retain(|k, a| a != agent || !k.starts_with(&prefix));
                }
                self.threads.insert(thread_key(host, thread), agent.clone());
            }
            Event::ThreadUnbound { host, thread, .. } => {
                self.threads.remove(&thread_key(host, thread));
                self.stop_blocks.remove(thread);
                self.told.remove(thread);
            }
            Event::LoopArmed { agent, armed } => {
                self.armed.retain(|a| a != agent);
                self.armed_at.remove(agent);
                if *armed {
                    self.armed.push(agent.clone());
                    self.armed_at.insert(agent.clone(), at);
                }
            }
            Event::StopBlocked { thread, told, .. } => {
                *self.stop_blocks.entry(thread.clone()).or_default() += 1;
                if !told.is_empty() {
                    self.told.entry(thread.clone()).or_default().extend(told.iter().cloned());
                }
            }
            Event::SchedulerFailed { agent, error } => {
                let sched = self.schedulers.entry(agent.clone()).or_default();
                sched.failures = sched.failures.saturating_add(1);
                sched.last_error = Some(error.clone());
            }
            Event::HandoffOffered { handoff } => {
                if handoff.id != self.next_handoff_id() {
                    return Err(format!(
                        "handoff {} offered where {} was next",
                        handoff.id,
                        self.next_handoff_id()
                    ));
                }
                for h in &handoff.todos {
                    let t = self.todo_mut(h.todo)?;
                    t.claimed_by = None;
                    t.assignee = None;
                    if t.lease.take().is_some() {
                        t.lease_version += 1;
                    }
                    t.updated_at = at;
                }
                self.handoffs.push(handoff.clone());
            }
            Event::HandoffAccepted { handoff, agent, registered, .. } => {
                if let Some(agent_type) = registered {
                    if self.agent(agent).is_some() {
                        return Err(format!("agent {agent} registered twice"));
                    }
                    self.agents.push(Agent {
                        id: agent.clone(),
                        agent_type: agent_type.clone(),
                        registered_at: at,
                    });
                }
                let h = self.handoff_mut(*handoff)?;
                h.status = HandoffStatus::Accepted;
                h.accepted_by = Some(agent.clone());
                h.closed_by = Some(actor.to_owned());
                h.closed_at = Some(at);
                let handed = h.todos.clone();
                for h in handed {
                    let t = self.todo_mut(h.todo)?;
                    if t.status.is_closed() {
                        continue;
                    }
                    t.claimed_by = Some(agent.clone());
                    t.assignee = None;
                    if let Some(secs) = h.lease_secs {
                        t.lease = Some(Box::new(Lease {
                            owner: agent.clone(),
                            acquired_at: at,
                            expires_at: at.saturating_add(std::time::Duration::from_secs(secs)),
                            key: None,
                            write_scope: h.write_scope.clone(),
                        }));
                        t.lease_version += 1;
                    }
                    t.updated_at = at;
                }
            }
            Event::HandoffCancelled { handoff, reason } => {
                let h = self.handoff_mut(*handoff)?;
                h.status = HandoffStatus::Cancelled;
                h.closed_by = Some(actor.to_owned());
                h.closed_at = Some(at);
                h.reason.clone_from(reason);
                let (from, handed) = (h.from.clone(), h.todos.clone());
                for h in handed {
                    let t = self.todo_mut(h.todo)?;
                    if !t.status.is_closed() && t.claimed_by.is_none() {
                        t.claimed_by = Some(from.clone());
                        t.assignee = None;
                        t.updated_at = at;
                    }
                }
            }
            Event::DriverStarted { lease, .. } => {
                self.drivers.insert(lease.agent.clone(), lease.clone());
            }
            Event::DriverRenewed { agent, id, expires_at, turn, todo } => {
                let d = self.driver_mut(agent, id)?;
                d.expires_at = *expires_at;
                if turn.is_some() {
                    d.limited = None;
                }
                d.turn.clone_from(turn);
                d.todo = *todo;
            }
            Event::DriverStopped { agent, id, .. } => {
                self.driver_mut(agent, id)?;
                self.drivers.remove(agent);
            }
            Event::TurnEnded { end, spend, brake } => {
                if let Some(spend) = spend {
                    self.apply_event(&Event::SlotSpent { spend: spend.clone() }, at, actor, seq)?;
                }
                if let Some(b) = brake {
                    match &b.count {
                        Some(c) => {
                            self.todo_turns.insert(b.todo, c.clone());
                        }
                        None => {
                            self.todo_turns.remove(&b.todo);
                        }
                    }
                    if let Some(g) = &b.gate {
                        let asked = Event::GateAsked {
                            gate: g.id,
                            question: g.question.clone(),
                            blocks: g.blocks.clone(),
                            kind: loopx_core::model::GateKind::Person,
                        };
                        self.apply_event(&asked, at, "loopx", seq)?;
                    }
                }
                self.tokens_used = self.tokens_used.saturating_add(end.usage.tokens.unwrap_or(0));
                self.usd_used += end.usage.usd.unwrap_or(0.0);
                if let Some(d) = self.drivers.get_mut(&end.agent)
                    && d.turn.as_deref() == Some(end.turn.as_str())
                {
                    d.turn = None;
                    d.todo = None;
                    d.turns += 1;
                    d.limited = end.usage.limit.clone();
                }
                self.turns_ended_total += 1;
                if end.failed() {
                    self.turns_failed_total += 1;
                }
                self.turn_ends.push_back(end.clone());
                while self.turn_ends.len() > TURN_ENDS_KEPT {
                    self.turn_ends.pop_front();
                }
            }
        }
        Ok(())
    }

    fn driver_mut(&mut self, agent: &AgentId, id: &str) -> Result<&mut DriverLease, String> {
        match self.drivers.get_mut(agent) {
            Some(d) if d.id == id => Ok(d),
            _ => Err(format!("event names driver lease {id} of {agent}, which is not held")),
        }
    }

    /// How the turn `turn` of `agent` ended, if it did (and is still kept).
    pub fn turn_end(&self, agent: &AgentId, turn: &str) -> Option<&TurnEnd> {
        self.turn_ends.iter().rev().find(|e| &e.agent == agent && e.turn == turn)
    }

    pub fn handoff(&self, id: HandoffId) -> Option<&Handoff> {
        usize::try_from(id.number()).ok().and_then(|n| self.handoffs.get(n.checked_sub(1)?))
    }

    fn handoff_mut(&mut self, id: HandoffId) -> Result<&mut Handoff, String> {
        usize::try_from(id.number())
            .ok()
            .and_then(|n| self.handoffs.get_mut(n.checked_sub(1)?))
            .ok_or_else(|| format!("event names unknown handoff {id}"))
    }

    pub(crate) fn next_handoff_id(&self) -> HandoffId {
        HandoffId::from_number(self.handoffs.len() as u64 + 1)
    }

    /// The pending handoff that reserves `todo`, if any.
    pub(crate) fn handoff_holding(&self, todo: TodoId, now: Timestamp) -> Option<&Handoff> {
        self.handoffs.iter().rev().find(|h| h.is_pending(now) && h.covers(todo))
    }

    /// Whether `agent` may take `todo` as far as handoffs go: no pending handoff reserves it,
    /// or one reserves it for `agent`.
    pub(crate) fn handoff_allows(&self, todo: TodoId, agent: Option<&AgentId>, now: Timestamp) -> bool {
        self.handoff_holding(todo, now)
            .is_none_or(|h| agent.and_then(|a| self.agent(a)).is_some_and(|a| h.is_for(&a.id, &a.agent_type)))
    }

    /// The pending handoff `agent` sent, if any: while it waits, the agent's lane waits too.
    pub(crate) fn handoff_sent_by(&self, agent: &AgentId, now: Timestamp) -> Option<&Handoff> {
        self.handoffs.iter().find(|h| &h.from == agent && h.is_pending(now))
    }

    /// Todos handed to `agent`: by a pending handoff it may take, or one it took.
    fn handed_to(&self, agent: &AgentId, now: Timestamp) -> Vec<TodoId> {
        let Some(me) = self.agent(agent) else { return Vec::new() };
        self.handoffs
            .iter()
            .filter(|h| match h.status_at(now) {
                HandoffStatus::Pending => h.is_for(&me.id, &me.agent_type),
                HandoffStatus::Accepted => h.accepted_by.as_ref() == Some(agent),
                _ => false,
            })
            .flat_map(|h| h.todos.iter().map(|t| t.todo))
            .filter(|t| self.todo(*t).is_some_and(|t| !t.status.is_closed()))
            .collect()
    }

    /// Keeps the key (and receipt) a keyed line carries, evicting the oldest past [`RECEIPTS_KEPT`].
    pub fn keep_receipt(&mut self, line: &EventLine) -> std::result::Result<(), String> {
        if let Some(key) = &line.turn {
            let receipt = line.receipt.as_ref().map(RawJson::of).transpose()?;
            let stored = StoredReceipt { seq: line.seq, receipt };
            if self.receipts.insert(key.clone(), stored).is_none() {
                self.receipt_order.push_back(key.clone());
            }
            while self.receipt_order.len() > RECEIPTS_KEPT {
                if let Some(old) = self.receipt_order.pop_front() {
                    self.receipts.remove(&old);
                }
            }
        }
        Ok(())
    }

    pub fn gate(&self, id: GateId) -> Option<&Gate> {
        usize::try_from(id.number()).ok().and_then(|n| self.gates.get(n.checked_sub(1)?))
    }

    fn gate_mut(&mut self, id: GateId) -> Result<&mut Gate, String> {
        usize::try_from(id.number())
            .ok()
            .and_then(|n| self.gates.get_mut(n.checked_sub(1)?))
            .ok_or_else(|| format!("event names unknown gate {id}"))
    }

    pub(crate) fn next_gate_id(&self) -> GateId {
        GateId::from_number(self.gates.len() as u64 + 1)
    }

    pub fn next_run_id(&self) -> RunId {
        RunId::from_number(self.runs_total + 1)
    }

    pub fn next_spend_id(&self) -> SpendId {
        SpendId::from_number(self.spends_total + 1)
    }

    /// The open gate that holds an agent's work (one on the whole goal, or on that agent),
    /// if any: nothing is next for it while it is open.
    pub(crate) fn holding_gate(&self, agent: Option<&AgentId>) -> Option<&Gate> {
        self.open_gates().find(|g| match &g.blocks {
            GateBlocks::Goal => true,
            GateBlocks::Agent(a) => Some(a) == agent,
            GateBlocks::Todos(_) => false,
        })
    }

    /// Whether a gate could hold a todo back ([`GoalState::gate_holding`]): only an open or a
    /// rejected one does, and most of the time a goal has none.
    pub(crate) fn gates_may_hold(&self) -> bool {
        self.gates.iter().any(|g| matches!(g.status, GateStatus::Open | GateStatus::Rejected))
    }

    pub fn open_gates(&self) -> impl Iterator<Item = &Gate> {
        self.gates.iter().filter(|g| g.status == GateStatus::Open)
    }

    /// Every todo is closed, and one completed with nothing to follow (the work half of the
    /// decision table's row 4).
    pub(crate) fn all_work_closed(&self) -> bool {
        !self.todos.is_empty()
            && self.todos.keys().all(|t| t.status.is_closed())
            && (self.archive.no_followup
                || self.todos.iter().any(|t| {
                    t.completion
                        .as_ref()
                        .is_some_and(|c| c.continuation == CompletionContinuation::NoFollowup)
                }))
    }

    /// The goal is active and its work is finished: every todo closed, nothing follows, no gate
    /// open. Whether the objective is met is a person's call: they complete the goal or add
    /// work.
    pub fn work_finished(&self) -> bool {
        self.goal.status == GoalStatus::Active && self.all_work_closed() && self.open_gates().next().is_none()
    }

    /// The gate holding `todo` back, if any: an open gate scoped to it, or the gate it waits
    /// for (`after_gate`) while that gate is open or was rejected.
    pub(crate) fn gate_holding(&self, todo: KeyRef<'_>) -> Option<GateId> {
        if let Some(g) = todo.after_gate.and_then(|g| self.gate(g))
            && matches!(g.status, GateStatus::Open | GateStatus::Rejected)
        {
            return Some(g.id);
        }
        self.gates
            .iter()
            .filter(|g| matches!(g.status, GateStatus::Open | GateStatus::Rejected))
            .find(|g| matches!(&g.blocks, GateBlocks::Todos(ids) if ids.contains(&todo.id)))
            .map(|g| g.id)
    }

    fn add_todo(&mut self, new: &NewTodo, actor: &str, at: Timestamp) -> Result<(), String> {
        if new.id != self.next_todo_id(0) {
            return Err(format!("todo {} added where {} was next", new.id, self.next_todo_id(0)));
        }
        self.todos_total += 1;
        self.todos.push(Todo {
            id: new.id,
            text: new.text.clone(),
            priority: new.priority,
            role: new.role,
            class: new.class,
            status: TodoStatus::Open,
            claimed_by: new.claimed_by.clone(),
            assignee: new.assignee.clone(),
            scopes: new.scopes.clone(),
            resume_when: None,
            after_gate: new.after_gate,
            validation: new.validation.clone(),
            lease: None,
            lease_version: 0,
            predecessor: new.predecessor,
            successors: Vec::new(),
            superseded_by: Vec::new(),
            completion: None,
            evidence: Vec::new(),
            notes: Vec::new(),
            created_by: actor.to_owned(),
            created_at: at,
            updated_at: at,
        });
        Ok(())
    }

    fn add_evidence(&mut self, e: Evidence) -> Result<(), String> {
        if e.id != self.next_evidence_id() {
            return Err(format!("evidence {} added where {} was next", e.id, self.next_evidence_id()));
        }
        // Evidence for a todo already archived (a log from before the archive may hold it)
        // stays live: archived lines never change.
        if !self.is_archived(e.todo) {
            self.todo_mut(e.todo)?.evidence.push(e.id);
        }
        self.evidence_total += 1;
        self.evidence.push(e);
        Ok(())
    }

    /// Moves the closed todos beyond the [`CLOSED_KEPT`] most recent into the archive, with
    /// their evidence: the lines go to `archived_now` and the head moves on.
    fn archive_overflow(&mut self) -> Result<(), String> {
        while self.closed_order.len() > CLOSED_KEPT {
            let Some(id) = self.closed_order.pop_front() else { break };
            if !self.todos.key(id).is_some_and(|k| k.status.is_closed()) {
                continue;
            }
            let Some(todo) = self.todos.remove(id) else { continue };
            let mut evidence = Vec::new();
            for e in &todo.evidence {
                if let Ok(j) = self.evidence.binary_search_by_key(e, |x| x.id) {
                    evidence.push(self.evidence.remove(j));
                }
            }
            let head = &mut self.archive;
            if head.hash.is_empty() {
                head.hash = crate::log::GENESIS.to_owned();
            }
            head.todos += 1;
            head.evidence += evidence.len() as u64;
            if let Some(e) = evidence.iter().max_by_key(|e| e.id)
                && head.last_evidence.as_ref().is_none_or(|l| l.id < e.id)
            {
                head.last_evidence = Some(e.clone());
            }
            if todo.status == TodoStatus::Done {
                head.done += 1;
                head.no_followup |= todo
                    .completion
                    .as_ref()
                    .is_some_and(|c| c.continuation == loopx_core::model::CompletionContinuation::NoFollowup);
            } else {
                head.superseded.push(todo.id);
            }
            let line = ArchivedTodo { prev: head.hash.clone(), todo, evidence };
            let text =
                serde_json::to_string(&line).map_err(|e| format!("cannot encode an archive line: {e}"))?;
            head.hash = crate::log::line_hash(text.as_bytes());
            head.bytes += text.len() as u64 + 1;
            self.archived_now.push(text);
        }
        Ok(())
    }

    // ---- queries ---------------------------------------------------------------------------

    pub fn counts(&self) -> TodoCounts {
        let a = &self.archive;
        let mut c = TodoCounts {
            total: usize::try_from(self.todos_total).unwrap_or(usize::MAX),
            done: usize::try_from(a.done).unwrap_or(usize::MAX),
            superseded: a.superseded.len(),
            ..TodoCounts::default()
        };
        for t in self.todos.keys() {
            match t.status {
                TodoStatus::Open => c.open += 1,
                TodoStatus::Blocked => c.blocked += 1,
                TodoStatus::Deferred => c.deferred += 1,
                TodoStatus::Done => c.done += 1,
                TodoStatus::Superseded => c.superseded += 1,
            }
        }
        c
    }

    /// Whether a todo's `resume_when` has not yet come true.
    pub fn is_waiting(&self, todo: KeyRef<'_>, now: Timestamp) -> bool {
        match todo.resume_when {
            None => false,
            Some(ResumeWhen::At(t)) => now < *t,
            Some(ResumeWhen::TodoDone(other)) => match self.todos.key(*other) {
                Some(o) => o.status != TodoStatus::Done,
                None => !self.is_archived(*other) || self.archive.superseded.contains(other),
            },
            Some(ResumeWhen::GateAnswered(g)) => self.gate(*g).is_none_or(|g| g.status == GateStatus::Open),
        }
    }

    /// Agent work `agent` could pick up if nothing held it back: open (or deferred with a
    /// resume condition) `advance` or `monitor` agent todos that nobody else holds.
    pub fn candidate(&self, t: KeyRef<'_>, agent: Option<&AgentId>) -> bool {
        t.is_agent_work() && t.holder().is_none_or(|c| Some(c) == agent)
    }

    /// The todo the decision recorded for `agent`'s `turn` bound, if the turn is known and
    /// selected one.
    pub(crate) fn turn_todo(&self, agent: &AgentId, turn: &str) -> loopx_core::Result<Option<TodoId>> {
        match self.decisions.get(&decision_key(agent, turn)) {
            Some(d) => Ok(d.read()?.record.todo()),
            None => Ok(None),
        }
    }

    /// The todo an agent should pick: of the candidates that are due, not held by a gate and
    /// not reserved for another by a handoff, the first by (handed to `agent` first, held by
    /// `agent`, priority, creation). Ranks keys only; decodes the one it picks.
    pub fn pick(&self, agent: Option<&AgentId>, now: Timestamp) -> Option<&Todo> {
        // Most goals have no handoff pending: then no todo needs the check.
        let reserving = self.handoffs.iter().any(|h| h.is_pending(now));
        let handed = agent.map(|a| self.handed_to(a, now)).unwrap_or_default();
        let mut best = None;
        for t in self.todos.keys() {
            if !self.candidate(t, agent) {
                continue;
            }
            let rank = (!handed.contains(&t.id), t.holder().is_none(), t.priority, t.id);
            // What cannot rank first is not looked at further (gates, handoffs, resume times).
            if best.is_some_and(|b| b <= rank)
                || self.is_waiting(t, now)
                || self.gate_holding(t).is_some()
                || (reserving && !self.handoff_allows(t.id, agent, now))
            {
                continue;
            }
            best = Some(rank);
        }
        best.and_then(|(.., id)| self.todo(id))
    }

    /// What [`Self::pick`] gives each of `agents`, in one pass over the todos for all of them
    /// while no handoff is pending (GOAL.md and `status` name every agent's next todo): the best
    /// todo nobody holds is then the same for each, and an agent's own held todos come before
    /// it. An agent a taken handoff handed todos to, or any while one is pending, is picked for
    /// alone.
    pub fn picks(&self, agents: &[&AgentId], now: Timestamp) -> Vec<Option<&Todo>> {
        if self.handoffs.iter().any(|h| h.is_pending(now)) {
            return agents.iter().map(|a| self.pick(Some(a), now)).collect();
        }
        let mut free: Option<(loopx_core::model::Priority, TodoId)> = None;
        let mut held: Vec<Option<(loopx_core::model::Priority, TodoId)>> = vec![None; agents.len()];
        for t in self.todos.keys() {
            if !self.candidate(t, t.holder()) {
                continue;
            }
            let best = match t.holder() {
                None => &mut free,
                Some(h) => match agents.iter().position(|a| *a == h) {
                    Some(i) => &mut held[i],
                    None => continue,
                },
            };
            let rank = (t.priority, t.id);
            // What cannot rank first is not looked at further (gates, resume times).
            if best.is_some_and(|b| b <= rank) || self.is_waiting(t, now) || self.gate_holding(t).is_some() {
                continue;
            }
            *best = Some(rank);
        }
        agents
            .iter()
            .zip(held)
            .map(|(a, held)| {
                if !self.handed_to(a, now).is_empty() {
                    return self.pick(Some(a), now);
                }
                held.or(free).and_then(|(_, id)| self.todo(id))
            })
            .collect()
    }

    pub(crate) fn next_for(&self, agent: Option<&AgentId>, now: Timestamp) -> Option<TodoSummary> {
        self.pick(agent, now).map(TodoSummary::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopx_core::continuation::Continuation;
    use loopx_core::decision::RunState;

    /// What a state keeps as its JSON text encodes as the values did, and reads back to them:
    /// a state root over it is the one an older loopx computed.
    #[test]
    fn kept_json_encodes_as_the_values_did() {
        #[derive(Serialize)]
        struct ReceiptAsValue {
            seq: u64,
            receipt: Option<serde_json::Value>,
        }
        #[derive(Serialize)]
        struct DecisionAsValue<'a> {
            seq: u64,
            record: &'a DecisionRecord,
        }
        let value = serde_json::json!({"goal_id": "main", "seq": 7, "changed": true,
            "body": {"slot": 3, "usd": 0.125, "note": "a \"quoted\" note\n", "ids": ["t1", "t2"]}, "replayed": false});
        let stored = StoredReceipt { seq: 7, receipt: Some(RawJson::of(&value).unwrap()) };
        let text = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            text,
            serde_json::to_string(&ReceiptAsValue { seq: 7, receipt: Some(value.clone()) }).unwrap()
        );
        let back: StoredReceipt = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (
                serde_json::to_string(&back).unwrap(),
                back.receipt.unwrap().decode::<serde_json::Value>().unwrap()
            ),
            (text, value)
        );

        let record = DecisionRecord {
            agent: AgentId::new("a").unwrap(),
            turn: "turn-1".into(),
            state: RunState::Eligible,
            continuation: Continuation::Run { todo: TodoId::from_number(4), claim_required: true },
        };
        let kept = RecordedDecision::new(9, record.clone()).unwrap();
        let text = serde_json::to_string(&kept).unwrap();
        assert_eq!(text, serde_json::to_string(&DecisionAsValue { seq: 9, record: &record }).unwrap());
        let back: RecordedDecision = serde_json::from_str(&text).unwrap();
        let read = back.read().unwrap();
        assert_eq!((back, read.seq, read.record), (kept, 9, record));
    }
}
