//! The rules: given the current state, who is acting and what they ask, which event (if any)
//! to commit. Pure: no I/O, time comes in as `now`. A refusal changes nothing.

use loopx_core::event::Event;
use loopx_core::kernel::{
    AddEvidence, AddTodo, CompleteTodo, NewEvidence, RegisterAgent, SetGoal, SupersedeTodo, UpdateTodo,
};
use loopx_core::model::{
    CompletionContinuation, Evidence, GoalStatus, NewTodo, ResumeWhen, Role, Todo, TodoStatus, check_text,
};
use loopx_core::{AgentId, Error, Result, Timestamp, TodoId};

use crate::state::GoalState;

/// Most todos one goal may hold; past this, close or supersede old ones.
pub const MAX_TODOS: usize = 100_000;
/// Longest link or argv element in evidence, in bytes.
const MAX_REF_LEN: usize = 2000;

/// Who a command acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A person.
    User,
    /// A registered agent.
    Agent(AgentId),
}

impl Actor {
    pub fn name(&self) -> &str {
        match self {
            Actor::User => "user",
            Actor::Agent(a) => a.as_str(),
        }
    }
    fn agent(&self) -> Option<&AgentId> {
        match self {
            Actor::User => None,
            Actor::Agent(a) => Some(a),
        }
    }
}

/// Whose work a command touches: an agent's (identity required once two agents are
/// registered) or a person's (goal settings, registration, user todos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Person,
    Agent,
}

/// Resolves the acting identity. `--agent-id user` names a person explicitly. Without an
/// agent id, a person acts — except in the agent lane, where the only registered agent is
/// implied and two or more make the id required.
pub fn resolve_actor(state: &GoalState, requested: Option<&AgentId>, lane: Lane) -> Result<Actor> {
    match requested {
        Some(a) if a.as_str() == "user" => Ok(Actor::User),
        Some(a) if state.agent(a).is_some() => Ok(Actor::Agent(a.clone())),
        Some(a) => Err(Error::identity(format!(
            "agent {a} is not registered on goal {}",
            state.goal.id
        ))
        .with_hint(format!(
            "register it first: loopx agent register --agent-id {a} --agent-type <type> (see loopx agent types)"
        ))),
        None if lane == Lane::Person => Ok(Actor::User),
        None => match state.agents.as_slice() {
            [] => Ok(Actor::User),
            [only] => Ok(Actor::Agent(only.id.clone())),
            many => {
                let ids: Vec<&str> = many.iter().map(|a| a.id.as_str()).collect();
                Err(Error::identity(format!(
                    "{} agents are registered on goal {} ({}); say which one is acting",
                    many.len(),
                    state.goal.id,
                    ids.join(", ")
                ))
                .with_hint(format!("pass --agent-id, e.g. --agent-id {}", ids[0])))
            }
        },
    }
}

/// The lane of a command on `todo`.
pub fn lane_of(todo: &Todo) -> Lane {
    match todo.role {
        Role::Agent => Lane::Agent,
        Role::User => Lane::Person,
    }
}

pub fn find_todo(state: &GoalState, id: TodoId) -> Result<&Todo> {
    state.todo(id).ok_or_else(|| {
        Error::not_found(format!("todo {id} not found on goal {}", state.goal.id))
            .with_hint("list todos with: loopx todo list --all")
    })
}

fn not_held_by_other(todo: &Todo, actor: &Actor, doing: &str) -> Result<()> {
    match (&todo.claimed_by, actor) {
        (Some(owner), Actor::Agent(me)) if owner != me => {
            Err(Error::conflict(format!("todo {} is claimed by {owner}; {me} cannot {doing} it", todo.id))
                .with_hint(format!(
                    "pick another todo (loopx todo list --status open), or ask {owner} to release {}",
                    todo.id
                )))
        }
        _ => Ok(()),
    }
}

fn not_closed(todo: &Todo, doing: &str) -> Result<()> {
    if todo.status.is_closed() {
        return Err(Error::refused(format!("todo {} is {}; cannot {doing} it", todo.id, todo.status))
            .with_hint("add a new todo instead: loopx todo add --text \"…\""));
    }
    Ok(())
}

fn room_for(state: &GoalState, n: usize) -> Result<()> {
    if state.todos.len() + n > MAX_TODOS {
        return Err(Error::refused(format!("goal {} holds the maximum of {MAX_TODOS} todos", state.goal.id)));
    }
    Ok(())
}

fn check_scopes(scopes: &[String]) -> Result<()> {
    for s in scopes {
        if s.trim().is_empty() || s.len() > MAX_REF_LEN || s.chars().any(char::is_control) {
            return Err(Error::usage(format!("invalid scope {}", loopx_core::ids::quote_input(s)))
                .with_hint("a scope is a path glob such as src/** or docs/*.md"));
        }
    }
    Ok(())
}

pub fn check_note(note: Option<&String>) -> Result<()> {
    note.map_or(Ok(()), |n| check_text("note", n))
}

/// Validates evidence as given and makes the record.
pub fn make_evidence(
    state: &GoalState,
    actor: &Actor,
    todo: TodoId,
    e: &NewEvidence,
    now: Timestamp,
) -> Result<Evidence> {
    check_text("evidence summary", &e.summary)?;
    if let Some(link) = &e.link
        && (link.trim().is_empty() || link.len() > MAX_REF_LEN || link.chars().any(char::is_control))
    {
        return Err(Error::usage("invalid evidence link").with_hint("give a URL or a path"));
    }
    if let Some(argv) = &e.command
        && (argv.is_empty() || argv.iter().any(|a| a.len() > MAX_REF_LEN))
    {
        return Err(Error::usage("invalid evidence command")
            .with_hint("give the command that was run, e.g. --command \"cargo test\""));
    }
    Ok(Evidence {
        id: state.next_evidence_id(),
        todo,
        kind: e.kind,
        summary: e.summary.clone(),
        command: e.command.clone(),
        exit_code: e.exit_code,
        output_digest: None,
        link: e.link.clone(),
        author: actor.name().to_owned(),
        at: now,
    })
}

// ---- goal ----------------------------------------------------------------------------------

pub fn set_goal(state: &GoalState, req: &SetGoal) -> Result<Option<Event>> {
    if let Some(o) = &req.objective {
        check_text("objective", o)?;
    }
    if let Some(t) = &req.title {
        check_text("title", t)?;
    }
    let objective = req.objective.clone().filter(|o| *o != state.goal.objective);
    let title = req.title.clone().filter(|t| Some(t) != state.goal.title.as_ref());
    if objective.is_none() && title.is_none() {
        return Ok(None);
    }
    Ok(Some(Event::GoalUpdated { objective, title }))
}

pub fn stop_goal(state: &GoalState, reason: Option<&String>) -> Result<Option<Event>> {
    check_note(reason)?;
    Ok((state.goal.status != GoalStatus::Stopped).then(|| Event::GoalStopped { reason: reason.cloned() }))
}

pub fn resume_goal(state: &GoalState) -> Option<Event> {
    (state.goal.status == GoalStatus::Stopped).then_some(Event::GoalResumed {})
}

pub fn register_agent(state: &GoalState, req: &RegisterAgent) -> Result<Option<Event>> {
    if AgentId::RESERVED.contains(&req.id.as_str()) {
        return Err(Error::usage(format!("agent id {:?} is reserved", req.id.as_str()))
            .with_hint("choose another --agent-id, e.g. --agent-id claude-1"));
    }
    match state.agent(&req.id) {
        Some(_) if req.require_new => {
            Err(Error::conflict(format!("agent {} is already registered on goal {}", req.id, state.goal.id))
                .with_hint("choose a new --agent-id, or drop --require-new to reuse it"))
        }
        Some(a) if a.agent_type != req.agent_type => Err(Error::refused(format!(
            "agent {} is registered as {}, not {}",
            req.id, a.agent_type, req.agent_type
        ))
        .with_hint(format!("register the {} agent under another --agent-id", req.agent_type))),
        Some(_) => Ok(None),
        None => Ok(Some(Event::AgentRegistered { agent: req.id.clone(), agent_type: req.agent_type })),
    }
}

// ---- todos ---------------------------------------------------------------------------------

pub fn add_todo(state: &GoalState, req: &AddTodo) -> Result<Event> {
    check_text("todo text", &req.text)?;
    check_scopes(&req.scopes)?;
    room_for(state, 1)?;
    Ok(Event::TodoAdded {
        todo: NewTodo {
            id: state.next_todo_id(0),
            text: req.text.clone(),
            priority: req.priority,
            role: req.role,
            class: req.class,
            scopes: req.scopes.clone(),
            predecessor: None,
        },
    })
}

pub fn claim(state: &GoalState, actor: &Actor, id: TodoId) -> Result<Option<Event>> {
    let todo = find_todo(state, id)?;
    let Some(me) = actor.agent() else {
        return Err(Error::identity(format!("todo {id} must be claimed by an agent")).with_hint(format!(
            "pass the claiming agent: loopx todo claim --todo-id {id} --agent-id <agent>"
        )));
    };
    if todo.role == Role::User {
        return Err(Error::refused(format!("todo {id} is a user todo; agents never claim it")).with_hint(
            format!("a person completes it: loopx todo complete --todo-id {id} --agent-id user"),
        ));
    }
    if todo.claimed_by.as_ref() == Some(me) {
        return Ok(None);
    }
    not_held_by_other(todo, actor, "claim")?;
    if todo.status != TodoStatus::Open {
        return Err(Error::refused(format!("todo {id} is {}; only open todos can be claimed", todo.status))
            .with_hint(format!("reopen it first: loopx todo update --todo-id {id} --status open")));
    }
    Ok(Some(Event::TodoClaimed { todo: id, agent: me.clone() }))
}

pub fn release(state: &GoalState, actor: &Actor, id: TodoId) -> Result<Option<Event>> {
    let todo = find_todo(state, id)?;
    if todo.claimed_by.is_none() {
        return Ok(None);
    }
    not_held_by_other(todo, actor, "release")?;
    Ok(Some(Event::TodoReleased { todo: id }))
}

pub fn update(state: &GoalState, actor: &Actor, req: &UpdateTodo, now: Timestamp) -> Result<Option<Event>> {
    let todo = find_todo(state, req.todo)?;
    if let Some(t) = &req.text {
        check_text("todo text", t)?;
    }
    check_note(req.note.as_ref())?;
    if matches!(req.status, Some(TodoStatus::Done | TodoStatus::Superseded)) {
        return Err(Error::usage(format!(
            "todo update cannot mark a todo {}",
            req.status.map_or("", |s| s.as_str())
        ))
        .with_hint(format!(
            "complete it with evidence: loopx todo complete --todo-id {} --evidence \"…\" (or supersede it)",
            req.todo
        )));
    }
    let nothing = req.text.is_none()
        && req.priority.is_none()
        && req.status.is_none()
        && req.resume_when.is_none()
        && !req.clear_claim
        && req.note.is_none()
        && req.evidence.is_none();
    if nothing {
        return Err(Error::usage("nothing to update").with_hint(
            "pass one of --text, --priority, --status, --resume-when, --clear-claim, --note, --evidence",
        ));
    }
    not_closed(todo, "update")?;
    not_held_by_other(todo, actor, "update")?;
    let final_status = req.status.unwrap_or(todo.status);
    if let Some(r) = &req.resume_when {
        if final_status != TodoStatus::Deferred {
            return Err(Error::usage("--resume-when applies to deferred todos").with_hint(format!(
                "loopx todo update --todo-id {} --status deferred --resume-when {r}",
                req.todo
            )));
        }
        check_resume(state, req.todo, r)?;
    }
    let evidence =
        req.evidence.as_ref().map(|e| make_evidence(state, actor, req.todo, e, now)).transpose()?;
    let text = req.text.clone().filter(|t| *t != todo.text);
    let priority = req.priority.filter(|p| *p != todo.priority);
    let status = req.status.filter(|s| *s != todo.status);
    let resume_when = req.resume_when.clone().filter(|r| Some(r) != todo.resume_when.as_ref());
    let clear_claim = req.clear_claim && todo.claimed_by.is_some();
    let unchanged = text.is_none()
        && priority.is_none()
        && status.is_none()
        && resume_when.is_none()
        && !clear_claim
        && req.note.is_none()
        && evidence.is_none();
    if unchanged {
        return Ok(None);
    }
    Ok(Some(Event::TodoUpdated {
        todo: req.todo,
        text,
        priority,
        status,
        resume_when,
        clear_claim,
        note: req.note.clone(),
        evidence,
    }))
}

fn check_resume(state: &GoalState, todo: TodoId, r: &ResumeWhen) -> Result<()> {
    match r {
        ResumeWhen::TodoDone(other) if *other == todo => {
            Err(Error::usage(format!("todo {todo} cannot wait for itself")))
        }
        ResumeWhen::TodoDone(other) => find_todo(state, *other).map(|_| ()),
        ResumeWhen::At(_) => Ok(()),
        ResumeWhen::GateAnswered(g) => {
            Err(Error::not_found(format!("gate {g} not found on goal {}", state.goal.id))
                .with_hint("list gates with: loopx gate list"))
        }
    }
}

pub fn complete(
    state: &GoalState,
    actor: &Actor,
    req: &CompleteTodo,
    now: Timestamp,
) -> Result<Option<Event>> {
    let todo = find_todo(state, req.todo)?;
    check_note(req.note.as_ref())?;
    if let Some(t) = &req.next_todo {
        check_text("next todo text", t)?;
    }
    if req.next_todo.is_some() && req.no_follow_up {
        return Err(Error::usage("--next-todo and --no-follow-up contradict each other")
            .with_hint("pass one: a successor todo, or no follow-up"));
    }
    if todo.status == TodoStatus::Done {
        return Ok(None);
    }
    not_closed(todo, "complete")?;
    not_held_by_other(todo, actor, "complete")?;
    if todo.role == Role::User && actor != &Actor::User {
        return Err(Error::refused(format!("todo {} is a user todo; only a person completes it", req.todo))
            .with_hint(format!(
                "a person runs: loopx todo complete --todo-id {} --agent-id user",
                req.todo
            )));
    }
    let evidence =
        req.evidence.as_ref().map(|e| make_evidence(state, actor, req.todo, e, now)).transpose()?;
    let has_proof = evidence.is_some() || !todo.evidence.is_empty();
    if todo.role == Role::Agent && !has_proof && !(req.no_follow_up && req.note.is_some()) {
        return Err(Error::refused(format!("todo {} needs evidence to be completed", req.todo)).with_hint(format!(
            "pass --evidence \"what proves it\" (e.g. the test that passed), or --no-follow-up --note \"why nothing is needed\": loopx todo complete --todo-id {} --evidence \"…\"",
            req.todo
        )));
    }
    if req.next_todo.is_some() {
        room_for(state, 1)?;
    }
    let successor = req.next_todo.as_ref().map(|text| follow_up(todo, state.next_todo_id(0), text));
    let continuation = if successor.is_some() {
        CompletionContinuation::Successor
    } else if req.no_follow_up {
        CompletionContinuation::NoFollowup
    } else {
        CompletionContinuation::ActiveGoal
    };
    Ok(Some(Event::TodoCompleted {
        todo: req.todo,
        continuation,
        note: req.note.clone(),
        evidence,
        successor,
    }))
}

/// A new todo that carries on from `from`: same priority, role, class and scopes.
fn follow_up(from: &Todo, id: TodoId, text: &str) -> NewTodo {
    NewTodo {
        id,
        text: text.to_owned(),
        priority: from.priority,
        role: from.role,
        class: from.class,
        scopes: from.scopes.clone(),
        predecessor: Some(from.id),
    }
}

pub fn supersede(state: &GoalState, actor: &Actor, req: &SupersedeTodo) -> Result<Event> {
    let todo = find_todo(state, req.todo)?;
    check_note(req.note.as_ref())?;
    for t in &req.new_texts {
        check_text("replacement todo text", t)?;
    }
    if req.by.is_empty() && req.new_texts.is_empty() {
        return Err(Error::usage("nothing supersedes the todo").with_hint(format!(
            "name replacements: loopx todo supersede --todo-id {} --by t7 or --text \"…\"",
            req.todo
        )));
    }
    for b in &req.by {
        if *b == req.todo {
            return Err(Error::usage(format!("todo {b} cannot supersede itself")));
        }
        find_todo(state, *b)?;
    }
    not_closed(todo, "supersede")?;
    not_held_by_other(todo, actor, "supersede")?;
    room_for(state, req.new_texts.len())?;
    let new: Vec<NewTodo> = req
        .new_texts
        .iter()
        .enumerate()
        .map(|(i, text)| follow_up(todo, state.next_todo_id(i as u64), text))
        .collect();
    let mut by = req.by.clone();
    by.extend(new.iter().map(|n| n.id));
    Ok(Event::TodoSuperseded { todo: req.todo, by, new, note: req.note.clone() })
}

pub fn add_evidence(state: &GoalState, actor: &Actor, req: &AddEvidence, now: Timestamp) -> Result<Event> {
    find_todo(state, req.todo)?;
    Ok(Event::EvidenceAdded { evidence: make_evidence(state, actor, req.todo, &req.evidence, now)? })
}
