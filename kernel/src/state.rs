//! Derived state: what the event log says, folded. Pure; no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use loopx_core::event::Event;
use loopx_core::kernel::{TodoCounts, TodoSummary};
use loopx_core::model::{
    Agent, Completion, Evidence, Goal, GoalStatus, HandoffMode, NewTodo, Note, QuotaPolicy, ResumeWhen, Role,
    Todo, TodoClass, TodoStatus,
};
use loopx_core::{AgentId, EvidenceId, GoalId, Timestamp, TodoId};

use crate::log::EventLine;

/// A stored receipt for an idempotency key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredReceipt {
    pub seq: u64,
    pub receipt: serde_json::Value,
}

/// The state of one goal after `seq` events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalState {
    pub seq: u64,
    pub last_event_at: Timestamp,
    pub goal: Goal,
    pub agents: Vec<Agent>,
    /// `todos[n - 1]` is todo `tn`.
    pub todos: Vec<Todo>,
    /// `evidence[n - 1]` is evidence `en`.
    pub evidence: Vec<Evidence>,
    pub receipts: BTreeMap<String, StoredReceipt>,
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
                write_scope: Vec::new(),
                handoff_mode: HandoffMode::SoftClaim,
                quota: QuotaPolicy::default(),
                created_at: first.at,
                updated_at: first.at,
            },
            agents: Vec::new(),
            todos: Vec::new(),
            evidence: Vec::new(),
            receipts: BTreeMap::new(),
        };
        state.keep_receipt(first);
        Ok(state)
    }

    pub fn todo(&self, id: TodoId) -> Option<&Todo> {
        usize::try_from(id.number()).ok().and_then(|n| self.todos.get(n.checked_sub(1)?))
    }

    fn todo_mut(&mut self, id: TodoId) -> Result<&mut Todo, String> {
        usize::try_from(id.number())
            .ok()
            .and_then(|n| self.todos.get_mut(n.checked_sub(1)?))
            .ok_or_else(|| format!("event names unknown todo {id}"))
    }

    pub fn evidence(&self, id: EvidenceId) -> Option<&Evidence> {
        usize::try_from(id.number()).ok().and_then(|n| self.evidence.get(n.checked_sub(1)?))
    }

    pub fn agent(&self, id: &AgentId) -> Option<&Agent> {
        self.agents.iter().find(|a| &a.id == id)
    }

    pub fn next_todo_id(&self, offset: u64) -> TodoId {
        TodoId::from_number(self.todos.len() as u64 + 1 + offset)
    }

    pub fn next_evidence_id(&self) -> EvidenceId {
        EvidenceId::from_number(self.evidence.len() as u64 + 1)
    }

    /// Folds one event in. Fails only on an event that contradicts the state, which a log
    /// written by loopx never contains.
    pub fn apply(&mut self, line: &EventLine) -> Result<(), String> {
        if line.seq != self.seq + 1 {
            return Err(format!("event {} applied after event {}", line.seq, self.seq));
        }
        let at = line.at;
        let actor = line.actor.as_str();
        match &line.event {
            Event::GoalCreated { .. } => return Err("a second goal_created event".to_owned()),
            Event::GoalUpdated { objective, title } => {
                if let Some(o) = objective {
                    self.goal.objective.clone_from(o);
                }
                if let Some(t) = title {
                    self.goal.title = Some(t.clone());
                }
                self.goal.updated_at = at;
            }
            Event::GoalStopped { reason } => {
                self.goal.status = GoalStatus::Stopped;
                self.goal.stop_reason.clone_from(reason);
                self.goal.updated_at = at;
            }
            Event::GoalResumed {} => {
                self.goal.status = GoalStatus::Active;
                self.goal.stop_reason = None;
                self.goal.updated_at = at;
            }
            Event::AgentRegistered { agent, agent_type } => {
                if self.agent(agent).is_some() {
                    return Err(format!("agent {agent} registered twice"));
                }
                self.agents.push(Agent { id: agent.clone(), agent_type: *agent_type, registered_at: at });
            }
            Event::TodoAdded { todo } => self.add_todo(todo, actor, at)?,
            Event::TodoClaimed { todo, agent } => {
                let t = self.todo_mut(*todo)?;
                t.claimed_by = Some(agent.clone());
                t.updated_at = at;
            }
            Event::TodoReleased { todo } => {
                let t = self.todo_mut(*todo)?;
                t.claimed_by = None;
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
                }
                if let Some(n) = note {
                    t.notes.push(Note { by: actor.to_owned(), at, text: n.clone() });
                }
                t.updated_at = at;
            }
            Event::TodoCompleted { todo, continuation, note, evidence, successor } => {
                if let Some(e) = evidence {
                    self.add_evidence(e.clone())?;
                }
                if let Some(s) = successor {
                    self.add_todo(s, actor, at)?;
                }
                let t = self.todo_mut(*todo)?;
                t.status = TodoStatus::Done;
                t.resume_when = None;
                if let Some(s) = successor {
                    t.successors.push(s.id);
                }
                t.completion = Some(Completion {
                    continuation: *continuation,
                    by: actor.to_owned(),
                    at,
                    note: note.clone(),
                });
                t.updated_at = at;
            }
            Event::TodoSuperseded { todo, by, new, note } => {
                for n in new {
                    self.add_todo(n, actor, at)?;
                }
                let t = self.todo_mut(*todo)?;
                t.status = TodoStatus::Superseded;
                t.claimed_by = None;
                t.resume_when = None;
                t.superseded_by.clone_from(by);
                if let Some(n) = note {
                    t.notes.push(Note { by: actor.to_owned(), at, text: n.clone() });
                }
                t.updated_at = at;
            }
            Event::EvidenceAdded { evidence } => self.add_evidence(evidence.clone())?,
        }
        self.seq = line.seq;
        self.last_event_at = at;
        self.keep_receipt(line);
        Ok(())
    }

    fn keep_receipt(&mut self, line: &EventLine) {
        if let (Some(key), Some(receipt)) = (&line.turn, &line.receipt) {
            self.receipts.insert(key.clone(), StoredReceipt { seq: line.seq, receipt: receipt.clone() });
        }
    }

    fn add_todo(&mut self, new: &NewTodo, actor: &str, at: Timestamp) -> Result<(), String> {
        if new.id != self.next_todo_id(0) {
            return Err(format!("todo {} added where {} was next", new.id, self.next_todo_id(0)));
        }
        self.todos.push(Todo {
            id: new.id,
            text: new.text.clone(),
            priority: new.priority,
            role: new.role,
            class: new.class,
            status: TodoStatus::Open,
            claimed_by: None,
            scopes: new.scopes.clone(),
            resume_when: None,
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
        self.todo_mut(e.todo)?.evidence.push(e.id);
        self.evidence.push(e);
        Ok(())
    }

    // ---- queries ---------------------------------------------------------------------------

    pub fn counts(&self) -> TodoCounts {
        let mut c = TodoCounts { total: self.todos.len(), ..TodoCounts::default() };
        for t in &self.todos {
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
    pub fn is_waiting(&self, todo: &Todo, now: Timestamp) -> bool {
        match &todo.resume_when {
            None => false,
            Some(ResumeWhen::At(t)) => now < *t,
            Some(ResumeWhen::TodoDone(other)) => {
                self.todo(*other).is_none_or(|o| o.status != TodoStatus::Done)
            }
            // Gates arrive with the tick; until one is answered the todo waits.
            Some(ResumeWhen::GateAnswered(_)) => true,
        }
    }

    /// The todos an agent may pick, best first: open (or deferred and due) `advance` agent
    /// todos that nobody else holds, ordered by (held by `agent` first, priority, creation).
    pub fn selectable<'a>(
        &'a self,
        agent: Option<&'a AgentId>,
        now: Timestamp,
    ) -> impl Iterator<Item = &'a Todo> + 'a {
        let mut picks: Vec<&Todo> = self
            .todos
            .iter()
            .filter(move |t| {
                t.role == Role::Agent
                    && t.class == TodoClass::Advance
                    && (t.status == TodoStatus::Open
                        || (t.status == TodoStatus::Deferred && t.resume_when.is_some()))
                    && !self.is_waiting(t, now)
                    && t.claimed_by.as_ref().is_none_or(|c| Some(c) == agent)
            })
            .collect();
        picks.sort_by_key(|t| (t.claimed_by.is_none(), t.priority, t.id));
        picks.into_iter()
    }

    pub fn next_for(&self, agent: Option<&AgentId>, now: Timestamp) -> Option<TodoSummary> {
        self.selectable(agent, now).next().map(TodoSummary::from)
    }
}
