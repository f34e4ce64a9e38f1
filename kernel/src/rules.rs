//! The rules: given the current state, who is acting and what they ask, which event (if any)
//! to commit. Pure: no I/O, time comes in as `now`. A refusal changes nothing.

use loopx_core::event::Event;
use loopx_core::kernel::{
    AcceptHandoff, AddEvidence, AddTodo, AnswerGate, AskGate, BindThread, CancelHandoff, CommandContext,
    CompleteTodo, LeaseOp, LeaseRequest, NewEvidence, OfferHandoff, QuotaChange, RefreshState, RegisterAgent,
    SchedulerReport, SetGoal, SpendSlot, SupersedeTodo, UpdateTodo, VoidSlot,
};
use loopx_core::model::{
    Brakes, CompletionContinuation, Evidence, GateBlocks, GateCheck, GateKind, GateStatus, GoalStatus,
    HandedTodo, Handoff, HandoffMode, HandoffStatus, NewTodo, NotifyPolicy, QuotaPolicy, ResumeWhen, Role,
    RunRecord, Spend, Todo, TodoStatus, check_ref, check_text,
};
use loopx_core::traits::{EvidenceDraft, TransitionProposal};
use loopx_core::{AgentId, AgentType, Error, EvidenceId, GateId, HandoffId, Result, Timestamp, TodoId};

use loopx_core::next::NextStep;

pub use crate::actor::Actor;
use crate::state::GoalState;

/// Longest a validation command may run.
pub const MAX_VALIDATION_SECS: u64 = 6 * 3600;
/// Most todos one goal may hold; past this, close or supersede old ones.
pub const MAX_TODOS: usize = 100_000;
/// Longest link or argv element in evidence, in bytes.
const MAX_REF_LEN: usize = 2000;

/// Whose work a command touches: an agent's (identity required once two agents are
/// registered), a person's (registration, user todos, questions), or the goal's governance
/// (objective, quota and budgets, pause, stop and resume, voiding spends, answering gates),
/// which only a person may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Person,
    /// Only an agent's: without an agent context, the only registered agent is implied.
    Agent,
    /// An agent's work a person may also do (adding, updating, completing an agent's todo,
    /// adding evidence): inside an agent's session or turn it is that agent's; elsewhere,
    /// without `--agent-id`, it is the person's.
    Shared,
    /// Person-only, with the words for what it decides (`changing the goal's quota`).
    Governance(&'static str),
    /// An agent registering itself: the named agent acts before it is registered.
    Joining,
}

fn is_user(a: &AgentId) -> bool {
    a.as_str() == "user"
}

/// The agent a command inside a host session acts as: the one named, or the session's bound
/// agent. Refuses a person's identity and another agent's.
pub fn session_agent(state: &GoalState, ctx: &CommandContext) -> Result<Option<AgentId>> {
    let Some(session) = &ctx.session else { return Ok(ctx.agent.clone()) };
    let host = &session.host;
    let bound = state.threads.get(&crate::state::thread_key(host, &session.thread));
    match (&ctx.agent, bound) {
        (Some(a), _) if is_user(a) => Err(Error::identity(format!(
            "this command runs inside a {host} session, an agent's tool environment: it cannot act as a person"
        ))
        .with_hint("leave out --agent-id to act as this session's agent; a person runs person commands in their own terminal")),
        (Some(a), Some(b)) if a != b => {
            Err(Error::identity(format!("this {host} session acts as agent {b}; it cannot act as {a}"))
                .with_hint(format!("leave out --agent-id, or pass --agent-id {b}")))
        }
        (Some(a), _) => Ok(Some(a.clone())),
        (None, Some(b)) => Ok(Some(b.clone())),
        // Never another agent's identity by default: the only registered agent may be a peer.
        (None, None) => Err(Error::identity(format!(
            "this command runs inside a {host} session that has not joined goal {}: loopx cannot tell which agent is acting",
            state.goal.id
        ))
        .with_hint("join the goal from the session first, or pass --agent-id")),
    }
}

/// Resolves the acting identity. `--agent-id user` names a person explicitly. Without an
/// agent id (no agent context), a person acts, except in the agent-only lane, where the only
/// registered agent is implied and two or more make the id required. Inside a host session the session's agent
/// acts, and governance is refused; a registered agent never governs.
pub fn resolve_actor(state: &GoalState, ctx: &CommandContext, lane: Lane) -> Result<Actor> {
    if let (Some(session), Lane::Governance(what)) = (&ctx.session, lane) {
        return Err(Error::refused(format!(
            "{what} is a person's decision, and this command runs inside a {} session, an agent's tool environment",
            session.host
        ))
        .with_hint("ask the person to run it in their own terminal"));
    }
    let requested = session_agent(state, ctx)?;
    match requested {
        Some(a) if is_user(&a) => Ok(Actor::User),
        Some(a) if lane == Lane::Joining => Ok(Actor::Agent(a)),
        Some(a) if state.agent(&a).is_some() => match lane {
            Lane::Governance(what) => Err(Error::refused(format!(
                "{what} is a person's decision; agent {a} cannot make it"
            ))
            .with_hint("ask the person to run it (a person leaves out --agent-id)")),
            _ => Ok(Actor::Agent(a)),
        },
        Some(a) => Err(Error::identity(format!(
            "agent {a} is not registered on goal {}",
            state.goal.id
        ))
        .with_hint(format!(
            "register it first: loopx agent register --agent-id {a} --agent-type <type> (see loopx agent types)"
        ))),
        // No agent context (no session, no driven turn, no --agent-id): a person at their
        // terminal, unless only an agent could make the command.
        None if lane != Lane::Agent => Ok(Actor::User),
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
                .with_hint(format!(
                    "pass the acting agent, e.g. --agent-id {}, or --agent-id user if a person is acting",
                    ids[0]
                )))
            }
        },
    }
}

/// The lane of a command on `todo`.
pub fn lane_of(todo: &Todo) -> Lane {
    match todo.role {
        Role::Agent => Lane::Shared,
        Role::User => Lane::Person,
    }
}

pub(crate) fn find_todo(state: &GoalState, id: TodoId) -> Result<&Todo> {
    state.todo(id).ok_or_else(|| {
        if state.is_archived(id) {
            return Error::refused(format!(
                "todo {id} is closed and archived on goal {}: it can no longer change",
                state.goal.id
            ))
            .with_hint(format!("read it with: loopx todo show --todo-id {id}"));
        }
        Error::not_found(format!("todo {id} not found on goal {}", state.goal.id))
            .with_hint("see the goal's todos")
            .with_next(&state.goal.id, None, NextStep::ListTodos)
    })
}

fn not_held_by_other(
    state: &GoalState,
    todo: &Todo,
    actor: &Actor,
    doing: &str,
    now: Timestamp,
) -> Result<()> {
    not_reserved(state, todo, actor, doing, now)?;
    let how = if todo.claimed_by.is_some() { "claimed by" } else { "waiting for" };
    match (todo.holder(), actor) {
        (Some(owner), Actor::Agent(me)) if owner != me => {
            Err(Error::conflict(format!("todo {} is {how} {owner}; {me} cannot {doing} it", todo.id))
                .with_hint(format!("pick another todo, or ask {owner} to release {}", todo.id))
                .with_next(&state.goal.id, Some(me), NextStep::ShouldRun))
        }
        _ => Ok(()),
    }
}

/// A todo a pending handoff reserves is the receiver's to take over, and nobody's to work
/// before that (a person may still act on it).
fn not_reserved(state: &GoalState, todo: &Todo, actor: &Actor, doing: &str, now: Timestamp) -> Result<()> {
    let (Actor::Agent(me), Some(h)) = (actor, state.handoff_holding(todo.id, now)) else { return Ok(()) };
    let for_me = state.agent(me).is_some_and(|a| h.is_for(me, &a.agent_type));
    if for_me {
        return Err(Error::refused(format!(
            "todo {} is handed to you in {}; take the handoff over before you {doing} it",
            todo.id, h.id
        ))
        .with_hint("take it over")
        .with_next(&state.goal.id, Some(me), NextStep::Resume { host: h.to_host.name().to_owned() }));
    }
    Err(Error::conflict(format!(
        "todo {} is handed off to {} ({}, pending until {}); {me} cannot {doing} it",
        todo.id,
        h.receiver(),
        h.id,
        h.expires_at
    ))
    .with_hint(format!(
        "pick other work; {} or a person can cancel it: loopx handoff cancel --handoff-id {}",
        h.from, h.id
    ))
    .with_next(&state.goal.id, Some(me), NextStep::ShouldRun))
}

fn not_closed(state: &GoalState, todo: &Todo, doing: &str) -> Result<()> {
    if todo.status.is_closed() {
        return Err(Error::refused(format!("todo {} is {}; cannot {doing} it", todo.id, todo.status))
            .with_hint("add a new todo instead")
            .with_next(&state.goal.id, None, NextStep::AddTodo));
    }
    Ok(())
}

/// A done goal (a person confirmed its objective is met) changes only through `goal resume`:
/// what it `cannot` do (take new todos, be stopped, …) is refused, saying so, never dropped
/// silently.
pub(crate) fn not_done(state: &GoalState, cannot: &str) -> Result<()> {
    if state.goal.status != GoalStatus::Done {
        return Ok(());
    }
    Err(Error::refused(format!(
        "goal {} is done: a person confirmed its objective is met, so it cannot {cannot}",
        state.goal.id
    ))
    .with_hint(format!(
        "a done goal changes only through loopx goal resume: a person resumes it first (loopx --goal-id {} goal resume)",
        state.goal.id
    ))
    .with_next(&state.goal.id, None, NextStep::ResumeGoal))
}

/// Whether the goal takes `n` new todos: it is not done, and has room for them.
fn room_for(state: &GoalState, n: usize) -> Result<()> {
    if n > 0 {
        not_done(state, "take new todos")?;
    }
    if state.todos.len() + n > MAX_TODOS {
        return Err(Error::refused(format!("goal {} holds the maximum of {MAX_TODOS} live todos", state.goal.id))
            .with_hint("start a new goal for the next stretch of work: loopx goal create --goal-id next --objective \"…\""));
    }
    Ok(())
}

fn check_scopes(scopes: &[String]) -> Result<()> {
    for s in scopes {
        check_ref("scope", s, MAX_REF_LEN)
            .map_err(|e| e.with_hint("a scope is a path glob such as src/** or docs/*.md"))?;
    }
    crate::scope::WriteScope::new(scopes).map(|_| ())
}

pub(crate) fn check_note(note: Option<&String>) -> Result<()> {
    note.map_or(Ok(()), |n| check_text("note", n))
}

/// Validates evidence as given and makes the record.
pub fn make_evidence(
    state: &GoalState,
    actor: &Actor,
    todo: TodoId,
    e: &NewEvidence,
    now: Timestamp,
    offset: u64,
) -> Result<Evidence> {
    check_text("evidence summary", &e.summary)?;
    if let Some(link) = &e.link {
        check_ref("evidence link", link, MAX_REF_LEN).map_err(|e| e.with_hint("give a URL or a path"))?;
    }
    if let Some(argv) = &e.command
        && (argv.is_empty() || argv.iter().any(|a| check_ref("word", a, MAX_REF_LEN).is_err()))
    {
        return Err(Error::usage("invalid evidence command")
            .with_hint("give the command that was run, e.g. --command \"cargo test\""));
    }
    Ok(Evidence {
        id: EvidenceId::from_number(state.next_evidence_id().number() + offset),
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
    let quota = new_quota(state, &req.quota)?.filter(|q| *q != state.goal.quota);
    let objective = req.objective.clone().filter(|o| *o != state.goal.objective);
    let title = req.title.clone().filter(|t| Some(t) != state.goal.title.as_ref());
    let handoff_mode = req.handoff_mode.filter(|m| *m != state.goal.handoff_mode);
    if let Some(w) = &req.write_scope {
        check_scopes(w)?;
    }
    let write_scope = req.write_scope.clone().filter(|w| *w != state.goal.write_scope);
    if let Some(n) = &req.notify {
        check_notify(n)?;
    }
    let notify = req.notify.clone().filter(|n| Some(n) != state.goal.notify.as_ref());
    let clear_notify = req.clear_notify && state.goal.notify.is_some();
    check_brakes(&req.brakes)?;
    let brakes = Some(state.goal.brakes.merged(&req.brakes)).filter(|b| *b != state.goal.brakes);
    if objective.is_none()
        && title.is_none()
        && quota.is_none()
        && handoff_mode.is_none()
        && write_scope.is_none()
        && notify.is_none()
        && !clear_notify
        && brakes.is_none()
        && !req.webhook_changed
    {
        return Ok(None);
    }
    not_done(state, "take new settings")?;
    Ok(Some(Event::GoalUpdated {
        objective,
        title,
        quota,
        handoff_mode,
        write_scope,
        notify,
        clear_notify,
        brakes,
        webhook_changed: req.webhook_changed,
    }))
}

/// The brakes' settings within their bounds.
fn check_brakes(b: &Brakes) -> Result<()> {
    let turns = [("--stall-turns", b.stall_turns), ("--todo-turn-cap", b.todo_turn_cap)];
    for (flag, n) in turns {
        if n.is_some_and(|n| n > Brakes::MAX_TURN_SETTING) {
            return Err(Error::usage(format!("{flag} is at most {}", Brakes::MAX_TURN_SETTING))
                .with_hint(format!("e.g. {flag} 5; 0 turns it off")));
        }
    }
    if b.hourly_turn_cap.is_some_and(|n| n > Brakes::MAX_HOURLY_CAP) {
        return Err(Error::usage(format!("--hourly-turn-cap is at most {}", Brakes::MAX_HOURLY_CAP))
            .with_hint("e.g. --hourly-turn-cap 20; 0 turns it off"));
    }
    if b.host_wait_secs.is_some_and(|s| s > Brakes::MAX_HOST_WAIT_SECS) {
        return Err(
            Error::usage("--host-wait is at most 30 days").with_hint("e.g. --host-wait 12h; 0 never waits")
        );
    }
    Ok(())
}

/// A webhook is `http(s)://host/…` without credentials in it, or `env:NAME`; a command is a
/// non-empty argv; at least one of them.
fn check_notify(n: &NotifyPolicy) -> Result<()> {
    if n.webhook.is_none() && n.command.is_none() {
        return Err(Error::usage("say how to notify: a webhook, a command, or both").with_hint(
            "e.g. --notify-webhook https://hooks.example.com/loopx or --notify-command \"notify-send loopx\"",
        ));
    }
    if let Some(w) = &n.webhook {
        check_webhook(w)?;
    }
    if let Some(c) = &n.command
        && (c.is_empty() || c.iter().any(|a| check_ref("word", a, MAX_REF_LEN).is_err()))
    {
        return Err(
            Error::usage("invalid notify command").with_hint("e.g. --notify-command \"notify-send loopx\"")
        );
    }
    if n.remind_after_secs.is_some_and(|s| s == 0 || s > 30 * 86_400) {
        return Err(Error::usage("--notify-reminder must be between 1 s and 30 days (after the notice)")
            .with_hint("e.g. --notify-reminder 4h"));
    }
    Ok(())
}

/// A webhook the goal may name: `env:NAME` (the URL is read from that variable when it is
/// used) or `config:NAME` (from the person's own configuration). Never the URL itself: a
/// webhook's address is often its secret (Slack's and Feishu's tokens are in the path), and
/// `.loopx/` is often committed.
pub fn check_webhook(w: &str) -> Result<()> {
    check_ref("webhook", w, MAX_REF_LEN)?;
    let named = |prefix: &str, extra: &[u8]| {
        w.strip_prefix(prefix).map(|name| {
            !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || extra.contains(&b))
        })
    };
    match (named("env:", b""), named("config:", b".-")) {
        (Some(true), _) | (_, Some(true)) => Ok(()),
        (Some(false), _) => Err(Error::usage(format!("invalid variable name in {}", loopx_core::ids::quote_input(w)))
            .with_hint("e.g. env:LOOPX_WEBHOOK_URL")),
        (_, Some(false)) => Err(Error::usage(format!("invalid webhook name in {}", loopx_core::ids::quote_input(w)))
            .with_hint("a name of letters, digits, '.', '_' or '-', e.g. config:team-alerts")),
        _ => Err(Error::usage("a goal names its webhook (env:NAME or config:NAME), never its URL, which is often its secret")
            .with_hint("loopx goal set --notify-webhook https://… keeps the URL in your own configuration; or keep it in a variable and pass env:NAME")),
    }
}

/// Stops the goal; `now` also ends a running driven turn. A stopped goal stops again only to
/// be made `now`.
pub fn stop_goal(state: &GoalState, reason: Option<&String>, now: bool) -> Result<Option<Event>> {
    check_note(reason)?;
    // Stopping a done goal would drop the person's completion without a word.
    not_done(state, "be stopped (that would drop its completion)")?;
    let stopped = state.goal.status == GoalStatus::Stopped;
    // Stopped already: again only to make a plain stop `now`.
    let again = stopped && (state.goal.stop_now || !now);
    Ok((!again).then(|| Event::GoalStopped {
        reason: reason.cloned().or_else(|| stopped.then(|| state.goal.stop_reason.clone()).flatten()),
        now,
    }))
}

pub fn resume_goal(state: &GoalState) -> Option<Event> {
    (state.goal.status != GoalStatus::Active).then_some(Event::GoalResumed {})
}

/// A person confirms the goal is met. Nothing may be left open: an open todo is finished or
/// superseded first, an open gate answered (or the goal stopped instead).
pub fn complete_goal(state: &GoalState, note: Option<&String>) -> Result<Option<Event>> {
    check_note(note)?;
    if state.goal.status == GoalStatus::Done {
        return Ok(None);
    }
    let open: Vec<String> =
        state.todos.keys().filter(|t| !t.status.is_closed()).map(|t| t.id.to_string()).collect();
    if let Some(first) = open.first() {
        let shown = if open.len() > 5 { format!("{}, …", open[..5].join(", ")) } else { open.join(", ") };
        return Err(Error::refused(format!(
            "goal {} still has {} open {} ({shown}); it is not finished",
            state.goal.id,
            open.len(),
            if open.len() == 1 { "todo" } else { "todos" }
        ))
        .with_hint(format!(
            "complete or supersede them first (loopx todo show --todo-id {first}), or stop the goal instead: loopx goal stop"
        )));
    }
    if let Some(g) = state.open_gates().next() {
        return Err(Error::refused(format!(
            "gate {} is still open on goal {}: {}",
            g.id,
            state.goal.id,
            loopx_core::ids::quote_input(&g.question)
        ))
        .with_hint(format!(
            "answer it first: loopx gate answer {} --approve (or --reject, --cancel)",
            g.id
        )));
    }
    Ok(Some(Event::GoalCompleted { note: note.cloned() }))
}

pub fn register_agent(state: &GoalState, req: &RegisterAgent) -> Result<Option<Event>> {
    if AgentId::RESERVED.contains(&req.id.as_str()) {
        return Err(Error::usage(format!("agent id {:?} is reserved", req.id.as_str()))
            .with_hint("choose another --agent-id, e.g. --agent-id agent-2"));
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
        None => {
            Ok(Some(Event::AgentRegistered { agent: req.id.clone(), agent_type: req.agent_type.clone() }))
        }
    }
}

// ---- todos ---------------------------------------------------------------------------------

pub fn add_todo(state: &GoalState, req: &AddTodo) -> Result<Event> {
    check_text("todo text", &req.text)?;
    check_scopes(&req.scopes)?;
    room_for(state, 1)?;
    if let Some(g) = req.after_gate {
        find_gate(state, g)?;
    }
    if let Some(v) = &req.validation {
        if v.argv.is_empty() || v.argv.iter().any(|a| check_ref("word", a, MAX_REF_LEN).is_err()) {
            return Err(Error::usage("invalid validation command")
                .with_hint("give the check to run, e.g. --validation-command \"cargo test -p parser\""));
        }
        if v.timeout_secs == 0 || v.timeout_secs > MAX_VALIDATION_SECS {
            return Err(Error::usage(format!(
                "--validation-timeout must be between 1 s and {} h",
                MAX_VALIDATION_SECS / 3600
            ))
            .with_hint("e.g. --validation-timeout 10m"));
        }
    }
    Ok(Event::TodoAdded {
        todo: NewTodo {
            id: state.next_todo_id(0),
            text: req.text.clone(),
            priority: req.priority,
            role: req.role,
            class: req.class,
            scopes: req.scopes.clone(),
            predecessor: None,
            after_gate: req.after_gate,
            validation: req.validation.clone(),
            claimed_by: None,
            assignee: None,
        },
    })
}

pub fn claim(state: &GoalState, actor: &Actor, id: TodoId, now: Timestamp) -> Result<Option<Event>> {
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
    // The receiver's claim of a handed-over todo takes the whole handoff over.
    if let Some(h) = state.handoff_holding(id, now)
        && state.agent(me).is_some_and(|a| h.is_for(me, &a.agent_type))
    {
        return accept_event(state, h, me, None);
    }
    not_held_by_other(state, todo, actor, "claim", now)?;
    if state.goal.handoff_mode == HandoffMode::HardLease {
        return Err(Error::refused(format!(
            "goal {} is in hard_lease mode: claims come with a lease",
            state.goal.id
        ))
        .with_hint("take a lease on it instead")
        .with_next(
            &state.goal.id,
            Some(me),
            NextStep::AcquireLease { todo: id, ttl: "45m".to_owned() },
        ));
    }
    if todo.status != TodoStatus::Open {
        return Err(Error::refused(format!("todo {id} is {}; only open todos can be claimed", todo.status))
            .with_hint(format!("reopen it first: loopx todo update --todo-id {id} --status open")));
    }
    Ok(Some(Event::TodoClaimed { todo: id, agent: me.clone() }))
}

pub fn release(state: &GoalState, actor: &Actor, id: TodoId, now: Timestamp) -> Result<Option<Event>> {
    let todo = find_todo(state, id)?;
    if todo.claimed_by.is_none() {
        return Ok(None);
    }
    not_held_by_other(state, todo, actor, "release", now)?;
    lease_presented(state, todo, actor, now, "releasing")?;
    Ok(Some(Event::TodoReleased { todo: id }))
}

pub fn update(state: &GoalState, actor: &Actor, req: &UpdateTodo, now: Timestamp) -> Result<Option<Event>> {
    let todo = find_todo(state, req.todo)?;
    if req.claimed_by.is_some() || req.takeover_reason.is_some() {
        return takeover(state, actor, req, now);
    }
    if let Some(t) = &req.text {
        check_text("todo text", t)?;
    }
    check_note(req.note.as_ref())?;
    if matches!(req.status, Some(TodoStatus::Done | TodoStatus::Superseded)) {
        return Err(Error::usage(format!(
            "todo update cannot mark a todo {}",
            req.status.map_or("", |s| s.as_str())
        ))
        .with_hint("complete it with evidence (or supersede it)")
        .with_next(&state.goal.id, actor.agent(), NextStep::Complete { todo: req.todo }));
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
    not_closed(state, todo, "update")?;
    not_held_by_other(state, todo, actor, "update", now)?;
    if req.clear_claim {
        lease_presented(state, todo, actor, now, "clearing the claim of")?;
    }
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
        req.evidence.as_ref().map(|e| make_evidence(state, actor, req.todo, e, now, 0)).transpose()?;
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
            Err(Error::usage(format!("todo {todo} cannot wait for itself"))
                .with_hint("wait for another todo (--resume-when todo:<id>), a time or a gate"))
        }
        // An archived todo is closed: waiting for it is allowed (and over at once if it is done).
        ResumeWhen::TodoDone(other) if state.is_archived(*other) => Ok(()),
        ResumeWhen::TodoDone(other) => find_todo(state, *other).map(|_| ()),
        ResumeWhen::At(_) => Ok(()),
        // An answered gate is allowed too: the wait is over at once.
        ResumeWhen::GateAnswered(g) if state.gate(*g).is_some() => Ok(()),
        ResumeWhen::GateAnswered(g) => {
            Err(Error::not_found(format!("gate {g} not found on goal {}", state.goal.id))
                .with_hint("see the goal's gates")
                .with_next(&state.goal.id, None, NextStep::ListGates))
        }
    }
}

/// Completes a todo. `validated` is the kernel's own passing run of the todo's validation
/// command (never something a caller supplies); a todo with a validation command needs it.
pub fn complete(
    state: &GoalState,
    actor: &Actor,
    req: &CompleteTodo,
    validated: Option<&EvidenceDraft>,
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
        return nothing_follows(state, todo, req);
    }
    not_closed(state, todo, "complete")?;
    not_held_by_other(state, todo, actor, "complete", now)?;
    if todo.role == Role::Agent {
        lease_presented(state, todo, actor, now, "completing")?;
    }
    if todo.role == Role::User && actor != &Actor::User {
        return Err(Error::refused(format!("todo {} is a user todo; only a person completes it", req.todo))
            .with_hint(format!(
                "a person runs: loopx todo complete --todo-id {} --agent-id user",
                req.todo
            )));
    }
    let mut evidence = Vec::new();
    match (&todo.validation, validated) {
        (Some(v), None) => {
            return Err(Error::refused(format!(
                "todo {} completes only when loopx has run its validation `{}` and it passed",
                req.todo,
                loopx_core::untrusted::shell_exact(&v.argv)
            )));
        }
        (_, Some(draft)) => evidence.push(evidence_from_draft(state, "loopx", req.todo, draft, now, 0)),
        (None, None) => {}
    }
    if let Some(e) = &req.evidence {
        evidence.push(make_evidence(state, actor, req.todo, e, now, evidence.len() as u64)?);
    }
    let has_proof = !evidence.is_empty() || !todo.evidence.is_empty();
    if todo.role == Role::Agent && !has_proof && !(req.no_follow_up && req.note.is_some()) {
        return Err(Error::refused(format!("todo {} needs evidence to be completed", req.todo)).with_hint(format!(
            "pass --evidence \"what proves it\" (e.g. the test that passed), or --no-follow-up --note \"why nothing is needed\": loopx todo complete --todo-id {} --evidence \"…\"",
            req.todo
        )));
    }
    if req.next_todo.is_some() {
        room_for(state, 1)?;
    }
    // A successor waits for the agent that held its predecessor: selected next by them, and
    // open until they claim it.
    let successor = req.next_todo.as_ref().map(|text| NewTodo {
        assignee: todo.claimed_by.clone(),
        ..follow_up(todo, state.next_todo_id(0), text)
    });
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

/// A done todo completed again: unchanged, unless `--no-follow-up` says now that nothing
/// follows it (a replan turn that finds nothing left), which ends the goal's work once nothing
/// else is open.
fn nothing_follows(state: &GoalState, todo: &Todo, req: &CompleteTodo) -> Result<Option<Event>> {
    let continuation = todo.completion.as_ref().map(|c| c.continuation);
    if !req.no_follow_up || continuation == Some(CompletionContinuation::NoFollowup) {
        return Ok(None);
    }
    if let Some(open) =
        todo.successors.iter().find(|s| state.todo(**s).is_some_and(|t| !t.status.is_closed()))
    {
        return Err(Error::refused(format!("{} has a successor, {open}, that is still open", todo.id))
            .with_hint(format!("work {open}, or complete it with --no-follow-up when nothing follows it")));
    }
    Ok(Some(Event::NothingFollows { todo: req.todo, note: req.note.clone() }))
}

/// Evidence from a capability's draft, authored by `author`.
pub fn evidence_from_draft(
    state: &GoalState,
    author: &str,
    todo: TodoId,
    d: &EvidenceDraft,
    now: Timestamp,
    offset: u64,
) -> Evidence {
    Evidence {
        id: EvidenceId::from_number(state.next_evidence_id().number() + offset),
        todo,
        kind: d.kind,
        summary: d.summary.clone(),
        command: d.command.clone(),
        exit_code: d.exit_code,
        output_digest: d.output_digest.clone(),
        link: None,
        author: author.to_owned(),
        at: now,
    }
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
        after_gate: None,
        validation: None,
        claimed_by: None,
        assignee: None,
    }
}

pub fn supersede(state: &GoalState, actor: &Actor, req: &SupersedeTodo, now: Timestamp) -> Result<Event> {
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
            return Err(Error::usage(format!("todo {b} cannot supersede itself"))
                .with_hint("name the todos that replace it with --by, or new ones with --text"));
        }
        find_todo(state, *b)?;
    }
    not_closed(state, todo, "supersede")?;
    not_held_by_other(state, todo, actor, "supersede", now)?;
    lease_presented(state, todo, actor, now, "superseding")?;
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
    not_done(state, "take new evidence")?;
    Ok(Event::EvidenceAdded { evidence: make_evidence(state, actor, req.todo, &req.evidence, now, 0)? })
}

// ---- gates ---------------------------------------------------------------------------------

pub(crate) fn find_gate(state: &GoalState, id: GateId) -> Result<&loopx_core::model::Gate> {
    state.gate(id).ok_or_else(|| {
        Error::not_found(format!("gate {id} not found on goal {}", state.goal.id))
            .with_hint("list gates with: loopx gate list --all")
    })
}

pub fn ask_gate(state: &GoalState, req: &AskGate, now: Timestamp) -> Result<Event> {
    check_text("question", &req.question)?;
    not_done(state, "take new questions (gates)")?;
    check_gate_kind(&req.kind, now)?;
    match &req.blocks {
        GateBlocks::Goal => {}
        GateBlocks::Agent(a) => {
            if state.agent(a).is_none() {
                return Err(Error::not_found(format!(
                    "agent {a} is not registered on goal {}",
                    state.goal.id
                ))
                .with_hint("a gate can block a registered agent only; see loopx agent list"));
            }
        }
        GateBlocks::Todos(ids) => {
            for id in ids {
                not_closed(state, find_todo(state, *id)?, "gate")?;
            }
        }
    }
    Ok(Event::GateAsked {
        gate: state.next_gate_id(),
        question: req.question.clone(),
        blocks: req.blocks.clone(),
        kind: req.kind.clone(),
    })
}

/// Longest a check command may run, and the longest between two checks.
pub const MAX_CHECK_SECS: u64 = 6 * 3600;
pub const MAX_EVERY_SECS: u64 = 24 * 3600;

fn check_gate_kind(kind: &GateKind, now: Timestamp) -> Result<()> {
    let _ = now;
    match kind {
        GateKind::Person | GateKind::Timer { .. } => Ok(()),
        GateKind::Command { argv, every_secs, timeout_secs } => {
            if argv.is_empty() || argv.iter().any(|a| check_ref("word", a, MAX_REF_LEN).is_err()) {
                return Err(Error::usage("invalid check command")
                    .with_hint("give the check to run, e.g. --check \"cargo test -p importer\""));
            }
            if *timeout_secs == 0 || *timeout_secs > MAX_CHECK_SECS {
                return Err(Error::usage(format!(
                    "--timeout (a check's) must be between 1 s and {} h",
                    MAX_CHECK_SECS / 3600
                ))
                .with_hint("e.g. --timeout 5m"));
            }
            check_every(*every_secs)
        }
        GateKind::Ci { required, every_secs, .. } => {
            for r in required {
                check_ref("check name", r, MAX_REF_LEN)?;
            }
            check_every(*every_secs)
        }
        GateKind::PrMerged { every_secs, .. } => check_every(*every_secs),
    }
}

fn check_every(every_secs: u64) -> Result<()> {
    if !(60..=MAX_EVERY_SECS).contains(&every_secs) {
        return Err(Error::usage("--every must be between 1 min and 24 h").with_hint("e.g. --every 10m"));
    }
    Ok(())
}

/// loopx's own answer to a gate it checks: the proposal of the gate's capability (or, when the
/// world could not be seen, "unknown"), recorded with what was seen. `None` when the gate is no
/// longer one to check (a person answered it meanwhile).
pub fn gate_checked(
    state: &GoalState,
    gate: GateId,
    proposal: &TransitionProposal,
    unknown: Option<&str>,
    now: Timestamp,
) -> Result<Option<Event>> {
    let g = find_gate(state, gate)?;
    let Some(every) = g.kind.every_secs().or(matches!(g.kind, GateKind::Timer { .. }).then_some(60)) else {
        return Ok(None);
    };
    if !g.checkable() {
        return Ok(None);
    }
    let prior_unknown = g.check.as_ref().map_or(0, |c| c.unknown);
    let next_at = |secs: u64| now.saturating_add(std::time::Duration::from_secs(secs));
    let (summary, head_sha, url, verdict, unknown_count) = match (unknown, proposal) {
        (Some(why), _) => {
            // Unknown is never an answer: look again soon, backing off to the gate's period.
            let n = prior_unknown.saturating_add(1);
            let summary = format!("unknown, will retry: {why}");
            let retry = (60 * u64::from(n)).min(every);
            return Ok(Some(Event::GateChecked {
                gate,
                check: GateCheck {
                    at: now,
                    summary,
                    head_sha: g.check.as_ref().and_then(|c| c.head_sha.clone()),
                    url: g.check.as_ref().and_then(|c| c.url.clone()),
                    next_at: next_at(retry),
                    unknown: n,
                },
                verdict: None,
            }));
        }
        (None, TransitionProposal::AnswerGate { status, summary, head_sha, url, .. }) => {
            (summary.clone(), head_sha.clone(), url.clone(), Some(*status), 0)
        }
        (None, TransitionProposal::KeepWaiting { reason, head_sha, url }) => {
            (reason.clone(), head_sha.clone(), url.clone(), None, 0)
        }
        (None, other) => return Err(Error::internal(format!("a gate's capability proposed {other:?}"))),
    };
    // A rejected CI gate is looked at again only for a new head commit.
    let verdict = match (g.status, verdict) {
        (GateStatus::Rejected, _) => {
            let old = g.check.as_ref().and_then(|c| c.head_sha.as_ref());
            if head_sha.is_some() && head_sha.as_ref() != old { Some(GateStatus::Open) } else { None }
        }
        (_, v) => v,
    };
    Ok(Some(Event::GateChecked {
        gate,
        check: GateCheck { at: now, summary, head_sha, url, next_at: next_at(every), unknown: unknown_count },
        verdict,
    }))
}

/// Gates are answered by people: an agent never decides its own gate.
pub fn answer_gate(state: &GoalState, actor: &Actor, req: &AnswerGate) -> Result<Event> {
    check_note(req.note.as_ref())?;
    if let Actor::Agent(a) = actor {
        return Err(Error::refused(format!("agent {a} cannot answer a gate; gates are answered by people"))
            .with_hint(format!("a person runs: loopx gate answer {} --approve", req.gate)));
    }
    let gate = find_gate(state, req.gate)?;
    if gate.status != GateStatus::Open {
        let by = gate.answered_by.as_deref().unwrap_or("someone");
        return Err(Error::refused(format!("gate {} was already {} by {by}", gate.id, gate.status))
            .with_hint("ask a new question with: loopx gate ask --question \"…\" --blocks …"));
    }
    if req.status == GateStatus::Open {
        return Err(Error::usage("an answer is --approve, --reject or --cancel")
            .with_hint(format!("e.g. loopx gate answer {} --approve", req.gate)));
    }
    Ok(Event::GateAnswered { gate: req.gate, status: req.status, note: req.note.clone() })
}

// ---- quota ---------------------------------------------------------------------------------

/// Longest quota window, in hours (a week).
pub const MAX_WINDOW_HOURS: u32 = QuotaPolicy::MAX_WINDOW_HOURS;

/// The quota policy after `change`, validated; `None` when nothing is asked.
fn new_quota(state: &GoalState, change: &QuotaChange) -> Result<Option<QuotaPolicy>> {
    if change.is_empty() {
        return Ok(None);
    }
    let mut q: QuotaPolicy = state.goal.quota.clone();
    if let Some(c) = change.compute {
        if !(0.0..=1.0).contains(&c) {
            return Err(Error::usage(format!("--compute must be between 0 and 1, not {c}"))
                .with_hint("0 pauses the goal, 1 allows every slot, e.g. --compute 0.5"));
        }
        q.compute = c;
    }
    if let Some(h) = change.window_hours {
        if h == 0 || h > MAX_WINDOW_HOURS {
            return Err(Error::usage(format!(
                "--window-hours must be between 1 and {MAX_WINDOW_HOURS}, not {h}"
            ))
            .with_hint("e.g. --window-hours 24"));
        }
        q.window_hours = h;
    }
    if let Some(m) = change.slot_minutes {
        if m == 0 || m > QuotaPolicy::MAX_SLOT_MINUTES {
            return Err(Error::usage(format!(
                "--slot-minutes must be between 1 and {}, not {m}",
                QuotaPolicy::MAX_SLOT_MINUTES
            ))
            .with_hint("e.g. --slot-minutes 1"));
        }
        q.slot_minutes = m;
    }
    if let Some(n) = change.allowed_slots {
        if n > QuotaPolicy::MAX_ALLOWED_SLOTS {
            return Err(Error::usage(format!(
                "--allowed-slots must be between 0 and {}, not {n}",
                QuotaPolicy::MAX_ALLOWED_SLOTS
            ))
            .with_hint("e.g. --allowed-slots 40"));
        }
        q.allowed_slots = Some(n);
    }
    if let Some(t) = change.budget_tokens {
        if t > QuotaPolicy::MAX_BUDGET_TOKENS {
            return Err(Error::usage(format!(
                "--budget-tokens must be between 0 and {}, not {t}",
                QuotaPolicy::MAX_BUDGET_TOKENS
            ))
            .with_hint("e.g. --budget-tokens 2000000"));
        }
        q.budget_tokens = Some(t);
    }
    if let Some(usd) = change.budget_usd {
        check_usd("--budget-usd", usd).map_err(|e| e.with_hint("e.g. --budget-usd 25"))?;
        q.budget_usd = Some(usd);
    }
    Ok(Some(q))
}

/// An amount of US dollars a person or a host gives (`flag`): 0 to a million, never the
/// amount itself in the message (it may be hundreds of digits long).
fn check_usd(flag: &str, usd: f64) -> Result<()> {
    if usd.is_finite() && (0.0..=QuotaPolicy::MAX_BUDGET_USD).contains(&usd) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "{flag} must be an amount between 0 and {} US dollars",
        QuotaPolicy::MAX_BUDGET_USD
    )))
}

fn explicit_agent<'a>(actor: &'a Actor, what: &str) -> Result<&'a AgentId> {
    actor.agent().ok_or_else(|| {
        Error::identity(format!("{what} needs the registered agent that did the turn"))
            .with_hint("pass --agent-id <agent> (see loopx agent list)")
    })
}

/// Checks a classification word such as `implement`, `review`, `research`.
fn check_classification(c: &str) -> Result<()> {
    let ok = !c.is_empty()
        && c.len() <= 32
        && c.as_bytes()[0].is_ascii_lowercase()
        && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::usage(format!("invalid classification {}", loopx_core::ids::quote_input(c)))
            .with_hint("use one lowercase word such as implement, review, research, fix"))
    }
}

fn check_turn_binding(state: &GoalState, agent: &AgentId, turn: Option<&str>, todo: TodoId) -> Result<()> {
    if let Some(turn) = turn
        && let Some(bound) = state.turn_todo(agent, turn)?
        && bound != todo
    {
        return Err(Error::refused(format!("turn {turn} of {agent} was decided for {bound}, not {todo}"))
            .with_hint(format!("use --todo-id {bound}, or start a new turn"))
            .with_next(&state.goal.id, Some(agent), NextStep::ShouldRun));
    }
    Ok(())
}

pub fn refresh_state(
    state: &GoalState,
    actor: &Actor,
    turn: Option<&str>,
    req: &RefreshState,
    now: Timestamp,
) -> Result<Option<Event>> {
    let agent = explicit_agent(actor, "refresh-state")?;
    find_todo(state, req.todo)?;
    check_classification(&req.classification)?;
    if let Some(n) = &req.next_action {
        check_text("next action", n)?;
    }
    check_turn_binding(state, agent, turn, req.todo)?;
    crate::drive::check_turn_open(state, agent, turn, req.todo)?;
    // A turn that spent is closed: its writeback stands, and writing it back again (a host
    // delivering the turn's end once more, by other commands) must not open a second one to
    // spend on; nor may the turn go on to other work.
    if let Some(t) = turn
        && let Some(spent) = state
            .runs
            .iter()
            .find(|r| &r.agent == agent && r.turn.as_deref() == Some(t) && r.spent_by.is_some())
    {
        if spent.todo == req.todo {
            return Ok(None);
        }
        return Err(Error::refused(format!(
            "turn {t} of {agent} already wrote back {} and spent on it; it cannot write back {}",
            spent.todo, req.todo
        ))
        .with_hint("each turn spends once; a new turn gets a new --turn-instance-id")
        .in_turn(Some(t)));
    }
    Ok(Some(Event::RunRecorded {
        run: RunRecord {
            id: state.next_run_id(),
            agent: agent.clone(),
            todo: req.todo,
            turn: turn.map(str::to_owned),
            classification: req.classification.clone(),
            delivery_outcome: req.delivery_outcome,
            next_action: req.next_action.clone(),
            at: now,
            spent_by: None,
        },
    }))
}

pub fn spend_slot(
    state: &GoalState,
    actor: &Actor,
    turn: Option<&str>,
    req: &SpendSlot,
    now: Timestamp,
) -> Result<Event> {
    let agent = explicit_agent(actor, "quota spend-slot")?;
    find_todo(state, req.todo)?;
    if req.slots == 0 || req.slots > QuotaPolicy::MAX_ALLOWED_SLOTS {
        return Err(Error::usage(format!(
            "--slots must be between 1 and {}, not {}",
            QuotaPolicy::MAX_ALLOWED_SLOTS,
            req.slots
        ))
        .with_hint("e.g. --slots 1"));
    }
    if let Some(t) = req.tokens
        && t > QuotaPolicy::MAX_BUDGET_TOKENS
    {
        return Err(Error::usage(format!(
            "--tokens must be between 0 and {}, not {t}",
            QuotaPolicy::MAX_BUDGET_TOKENS
        ))
        .with_hint("e.g. --tokens 12000"));
    }
    if let Some(usd) = req.usd {
        check_usd("--usd", usd).map_err(|e| e.with_hint("e.g. --usd 0.42"))?;
    }
    if state.goal.status == GoalStatus::Stopped || crate::quota::is_paused(state) {
        return Err(Error::refused(format!(
            "goal {} is paused; nothing is spent while it is",
            state.goal.id
        ))
        .with_hint("a person resumes it first")
        .with_next(
            &state.goal.id,
            None,
            if state.goal.status == GoalStatus::Stopped {
                NextStep::ResumeGoal
            } else {
                NextStep::RestoreCompute
            },
        ));
    }
    check_turn_binding(state, agent, turn, req.todo)?;
    let refresh = |e: Error, t: Option<&str>| {
        e.with_hint("write the turn back first")
            .with_next(&state.goal.id, Some(agent), NextStep::RefreshState { todo: req.todo })
            .in_turn(t)
    };
    let run = match turn {
        Some(t) => {
            let run = state.runs.iter().rev().find(|r| &r.agent == agent && r.turn.as_deref() == Some(t));
            let run = run.ok_or_else(|| {
                refresh(Error::refused(format!("turn {t} of {agent} has no writeback to account")), Some(t))
            })?;
            if run.todo != req.todo {
                return Err(Error::refused(format!("turn {t} wrote back {}, not {}", run.todo, req.todo))
                    .with_hint(format!("spend for --todo-id {}", run.todo)));
            }
            if let Some(s) = run.spent_by {
                return Err(Error::refused(format!("the writeback of turn {t} is already accounted by {s}"))
                    .with_hint("each turn spends once; a new turn gets a new --turn-instance-id"));
            }
            run
        }
        None => state
            .runs
            .iter()
            .rev()
            .find(|r| &r.agent == agent && r.todo == req.todo && r.spent_by.is_none())
            .ok_or_else(|| {
                refresh(Error::refused(format!("{agent} has no unspent writeback for {}", req.todo)), None)
            })?,
    };
    Ok(Event::SlotSpent {
        spend: Spend {
            id: state.next_spend_id(),
            agent: agent.clone(),
            todo: req.todo,
            run: run.id,
            turn: turn.map(str::to_owned),
            slots: req.slots,
            tokens: req.tokens,
            usd: req.usd,
            at: now,
            voided: false,
        },
    })
}

pub fn void_slot(state: &GoalState, req: &VoidSlot) -> Result<Option<Event>> {
    check_note(req.reason.as_ref())?;
    let spend = state.spends.iter().find(|s| s.id == req.spend).ok_or_else(|| {
        Error::not_found(format!(
            "spend {} not found on goal {} (or older than a week)",
            req.spend, state.goal.id
        ))
        .with_hint("see recent spends with: loopx quota status")
    })?;
    Ok((!spend.voided).then(|| Event::SlotVoided { spend: req.spend, reason: req.reason.clone() }))
}

pub fn scheduler_report(state: &GoalState, actor: &Actor, req: &SchedulerReport) -> Result<Event> {
    let agent = explicit_agent(actor, "a scheduler report")?.clone();
    let _ = state;
    if let Some(c) = req.cadence_minutes
        && (c == 0 || c > 1440)
    {
        return Err(Error::usage(format!("--cadence-minutes must be between 1 and 1440, not {c}"))
            .with_hint("e.g. --cadence-minutes 6"));
    }
    if let Some(r) = &req.rrule {
        let ok = r.starts_with("FREQ=")
            && r.len() <= 200
            && r.bytes().all(|b| {
                b.is_ascii_uppercase() || b.is_ascii_digit() || matches!(b, b'=' | b';' | b',' | b'-')
            });
        if !ok {
            return Err(Error::usage(format!("invalid RRULE {}", loopx_core::ids::quote_input(r)))
                .with_hint("e.g. --rrule 'FREQ=MINUTELY;INTERVAL=3'"));
        }
    }
    match &req.error {
        Some(e) => {
            check_text("error", e)?;
            Ok(Event::SchedulerFailed { agent, error: e.clone() })
        }
        None => Ok(Event::SchedulerAcked {
            agent,
            cadence_minutes: req.cadence_minutes,
            rrule: req.rrule.clone(),
        }),
    }
}

// ---- peers and leases ------------------------------------------------------------------------

/// Longest lease.
pub const MAX_LEASE_SECS: u64 = 7 * 24 * 3600;

/// In `hard_lease` mode, acting on an agent's todo needs the actor's active lease on it.
fn lease_presented(state: &GoalState, todo: &Todo, actor: &Actor, now: Timestamp, doing: &str) -> Result<()> {
    if state.goal.handoff_mode != HandoffMode::HardLease {
        return Ok(());
    }
    match (actor, &todo.lease) {
        (Actor::User, _) => Ok(()),
        (Actor::Agent(me), Some(l)) if &l.owner == me && l.is_active(now) => Ok(()),
        (Actor::Agent(me), _) => Err(Error::refused(format!(
            "goal {} is in hard_lease mode: {doing} {} needs {me}'s active lease on it",
            state.goal.id, todo.id
        ))
        .with_hint("take a lease on it first")
        .with_next(
            &state.goal.id,
            Some(me),
            NextStep::AcquireLease { todo: todo.id, ttl: "45m".to_owned() },
        )),
    }
}

/// An explicit change of claim: by the owner, by a person, or by the new claimer once the
/// owner's lease has expired. Never implicit.
fn takeover(state: &GoalState, actor: &Actor, req: &UpdateTodo, now: Timestamp) -> Result<Option<Event>> {
    let todo = find_todo(state, req.todo)?;
    let (Some(to), Some(reason)) = (&req.claimed_by, &req.takeover_reason) else {
        return Err(Error::usage("--claimed-by and --takeover-reason go together").with_hint(format!(
            "loopx todo update --todo-id {} --claimed-by <agent> --takeover-reason \"why\"",
            req.todo
        )));
    };
    check_text("takeover reason", reason)?;
    let other = req.text.is_some()
        || req.priority.is_some()
        || req.status.is_some()
        || req.resume_when.is_some()
        || req.clear_claim
        || req.note.is_some()
        || req.evidence.is_some();
    if other {
        return Err(Error::usage("a takeover changes only the claim; make other changes in a second update")
            .with_hint(format!(
                "loopx todo update --todo-id {} --claimed-by <agent> --takeover-reason \"…\" first, then the rest",
                req.todo
            )));
    }
    not_closed(state, todo, "take over")?;
    not_reserved(state, todo, actor, "take over", now)?;
    if state.agent(to).is_none() {
        return Err(Error::identity(format!("agent {to} is not registered on goal {}", state.goal.id))
            .with_hint(format!("loopx agent register --agent-id {to} --agent-type <type>")));
    }
    let Some(from) = &todo.claimed_by else {
        return Err(Error::refused(format!("todo {} is not claimed; nothing to take over", todo.id))
            .with_hint("claim it instead")
            .with_next(&state.goal.id, Some(to), NextStep::Claim { todo: todo.id }));
    };
    if from == to {
        return Ok(None);
    }
    let expired = todo.lease.as_ref().is_some_and(|l| &l.owner == from && !l.is_active(now));
    let allowed = match actor {
        Actor::User => true,
        Actor::Agent(me) if me == from => {
            lease_presented(state, todo, actor, now, "handing over")?;
            true
        }
        Actor::Agent(me) => me == to && expired,
    };
    if !allowed {
        let until = todo
            .lease
            .as_ref()
            .filter(|l| l.is_active(now))
            .map(|l| format!(" (its lease runs until {})", l.expires_at))
            .unwrap_or_default();
        return Err(Error::conflict(format!(
            "todo {} is claimed by {from}{until}; only {from} can hand it over, or {to} once {from}'s lease has expired",
            todo.id
        ))
        .with_hint(format!("ask {from} to run: loopx todo update --todo-id {} --claimed-by {to} --takeover-reason \"…\"", todo.id)));
    }
    Ok(Some(Event::TodoTakenOver {
        todo: todo.id,
        from: from.clone(),
        to: to.clone(),
        reason: reason.clone(),
    }))
}

/// Selects the agent's next todo and claims it: `(todo, event)`; no event when the agent
/// already holds its next todo.
pub fn claim_next(state: &GoalState, actor: &Actor, now: Timestamp) -> Result<(TodoId, Option<Event>)> {
    let me = explicit_agent(actor, "claim-next")?;
    let Some(pick) = state.pick(Some(me), now) else {
        return Err(Error::refused(format!("nothing on goal {} is free for {me} to claim", state.goal.id))
            .with_hint("see why")
            .with_next(&state.goal.id, Some(me), NextStep::ShouldRun));
    };
    Ok((pick.id, claim(state, actor, pick.id, now)?))
}

/// The literal part of a glob, up to its first wildcard.
fn glob_prefix(glob: &str) -> &str {
    glob.find(['*', '?', '[', '{']).map_or(glob, |i| &glob[..i])
}

/// Whether two write scopes may name the same path. Conservative: globs whose literal
/// prefixes nest are taken to overlap.
pub fn scopes_overlap(a: &str, b: &str) -> bool {
    let (pa, pb) = (glob_prefix(a), glob_prefix(b));
    let exact = |g: &str| glob_prefix(g).len() == g.len();
    if exact(a) && exact(b) {
        return a == b;
    }
    pa.starts_with(pb) || pb.starts_with(pa)
}

pub fn lease(state: &GoalState, actor: &Actor, req: &LeaseRequest, now: Timestamp) -> Result<Option<Event>> {
    let me = explicit_agent(actor, "a lease")?;
    let todo = find_todo(state, req.todo)?;
    let id = todo.id;
    if todo.role == Role::User {
        return Err(Error::refused(format!("todo {id} is a user todo; agents never lease it")).with_hint(
            format!("a person completes it: loopx todo complete --todo-id {id} --agent-id user"),
        ));
    }
    if let Some(v) = req.expected_version
        && v != todo.lease_version
    {
        return Err(Error::conflict(format!(
            "the lease of {id} is at version {}, not {v}",
            todo.lease_version
        ))
        .with_hint(format!("re-read it: loopx lease show --todo-id {id}")));
    }
    let active = todo.lease.as_ref().filter(|l| l.is_active(now));
    let ttl = |secs: u64| -> Result<Timestamp> {
        if secs == 0 || secs > MAX_LEASE_SECS {
            return Err(Error::usage(format!(
                "--ttl (a lease's) must be between 1 s and {} days",
                MAX_LEASE_SECS / 86_400
            ))
            .with_hint("e.g. --ttl 45m"));
        }
        Ok(now.saturating_add(std::time::Duration::from_secs(secs)))
    };
    let owned = |what: &str| -> Result<&loopx_core::model::Lease> {
        let l = todo.lease.as_ref().ok_or_else(|| {
            Error::refused(format!("todo {id} has no lease to {what}")).with_hint("take one first").with_next(
                &state.goal.id,
                Some(me),
                NextStep::AcquireLease { todo: id, ttl: "45m".to_owned() },
            )
        })?;
        if &l.owner != me || todo.claimed_by.as_ref() != Some(me) {
            return Err(Error::conflict(format!("the lease on {id} belongs to {}, not {me}", l.owner))
                .with_hint(format!("ask {} to transfer it, or wait until it expires", l.owner)));
        }
        if l.key.is_some() && l.key != req.key {
            return Err(Error::refused(format!(
                "the lease on {id} was taken with a key; present it to {what}"
            ))
            .with_hint("pass the same --idempotency-key as on acquire"));
        }
        Ok(l)
    };
    match &req.op {
        LeaseOp::Acquire { ttl_secs, write_scope } => {
            not_closed(state, todo, "lease")?;
            not_reserved(state, todo, actor, "lease", now)?;
            check_scopes(write_scope)?;
            let expires_at = ttl(*ttl_secs)?;
            if let Some(l) = active {
                if &l.owner == me && l.key == req.key {
                    return Ok(None);
                }
                let whose =
                    if &l.owner == me { "you, under another key".to_owned() } else { l.owner.to_string() };
                return Err(Error::conflict(format!(
                    "todo {id} is leased by {whose} until {}",
                    l.expires_at
                ))
                .with_hint(format!("wait for it to expire, or ask {} to transfer it", l.owner)));
            }
            if let Some(c) = todo.holder().filter(|c| *c != me) {
                return Err(Error::conflict(format!("todo {id} is claimed by {c}; a lease never overrides a peer"))
                    .with_hint(format!(
                        "take it over explicitly: loopx todo update --todo-id {id} --agent-id {me} --claimed-by {me} --takeover-reason \"…\" (by {c}, or once {c}'s lease expired)"
                    )));
            }
            for other in state.todos.iter().filter(|t| t.id != id && !t.status.is_closed()) {
                let Some(l) = other.lease.as_ref().filter(|l| l.is_active(now)) else { continue };
                for mine in write_scope {
                    if let Some(theirs) = l.write_scope.iter().find(|s| scopes_overlap(mine, s)) {
                        return Err(Error::conflict(format!(
                            "write scope {mine} overlaps {theirs}, leased by {} on {} until {}",
                            l.owner, other.id, l.expires_at
                        ))
                        .with_hint("narrow --write-scope, or wait for that lease to end"));
                    }
                }
            }
            Ok(Some(Event::LeaseAcquired {
                todo: id,
                owner: me.clone(),
                expires_at,
                key: req.key.clone(),
                write_scope: write_scope.clone(),
            }))
        }
        LeaseOp::Renew { ttl_secs } => {
            not_closed(state, todo, "renew the lease of")?;
            owned("renew")?;
            Ok(Some(Event::LeaseRenewed { todo: id, expires_at: ttl(*ttl_secs)? }))
        }
        LeaseOp::Transfer { to } => {
            not_closed(state, todo, "transfer the lease of")?;
            let l = owned("transfer")?;
            if !l.is_active(now) {
                return Err(Error::refused(format!(
                    "the lease on {id} expired at {}; renew it first",
                    l.expires_at
                ))
                .with_hint(format!("loopx lease renew --todo-id {id} --agent-id {me} --ttl 45m")));
            }
            if state.agent(to).is_none() {
                return Err(Error::identity(format!(
                    "agent {to} is not registered on goal {}",
                    state.goal.id
                ))
                .with_hint(format!(
                    "register it first: loopx agent register --agent-id {to} --agent-type <type>"
                )));
            }
            if to == me {
                return Ok(None);
            }
            Ok(Some(Event::LeaseTransferred { todo: id, to: to.clone() }))
        }
        LeaseOp::Release => {
            if todo.lease.is_none() {
                return Ok(None);
            }
            owned("release")?;
            Ok(Some(Event::LeaseReleased { todo: id }))
        }
    }
}

// ---- host sessions ---------------------------------------------------------------------------

fn check_thread(req: &BindThread) -> Result<()> {
    let ok = |s: &str| !s.is_empty() && s.len() <= 200 && s.bytes().all(|b| b.is_ascii_graphic());
    if !ok(&req.host) || !ok(&req.thread) {
        return Err(Error::usage("a host and a session id are short printable words")
            .with_hint("e.g. --host <host> --thread 5f1c2d3e (the id the host gives its session)"));
    }
    if req.thread.contains(['<', '>']) {
        return Err(Error::usage(format!("session id {:?} looks like a placeholder", req.thread))
            .with_hint("use the id the host gives this session (its session or thread id)"));
    }
    Ok(())
}

pub fn bind_thread(state: &GoalState, actor: &Actor, req: &BindThread) -> Result<Option<Event>> {
    let agent = explicit_agent(actor, "binding a session")?;
    check_thread(req)?;
    let key = crate::state::thread_key(&req.host, &req.thread);
    match state.threads.get(&key) {
        Some(a) if a == agent => return Ok(None),
        Some(a) => {
            return Err(Error::conflict(format!("{} session {} already acts as {a}", req.host, req.thread))
                .with_hint("each session has its own agent; register a new one for this session"));
        }
        None => {}
    }
    let prefix = format!("{}:", req.host);
    // A session's newer process takes the place of its older one (the state drops the older).
    let one_session = !req.is_process();
    if let Some((k, _)) =
        state.threads.iter().find(|(k, a)| one_session && *a == agent && k.starts_with(&prefix))
    {
        return Err(Error::conflict(format!(
            "agent {agent} is already bound to {} session {}; two sessions never share an identity",
            req.host,
            &k[prefix.len()..]
        ))
        .with_hint(format!(
            "a person unbinds it first: loopx agent unbind-thread --agent-id {agent} --host {} --thread {}",
            req.host,
            &k[prefix.len()..]
        )));
    }
    Ok(Some(Event::ThreadBound { agent: agent.clone(), host: req.host.clone(), thread: req.thread.clone() }))
}

/// Unbinds `agent`'s host session: a person, or the agent itself. Unbinding a session that is
/// not bound is a no-op.
pub fn unbind_thread(
    state: &GoalState,
    actor: &Actor,
    agent: &AgentId,
    req: &BindThread,
) -> Result<Option<Event>> {
    check_thread(req)?;
    if let Actor::Agent(me) = actor
        && me != agent
    {
        return Err(Error::refused(format!("only a person or {agent} itself can unbind {agent}'s session"))
            .with_hint("a person runs it in their own terminal"));
    }
    match state.threads.get(&crate::state::thread_key(&req.host, &req.thread)) {
        None => Ok(None),
        Some(a) if a == agent => Ok(Some(Event::ThreadUnbound {
            agent: agent.clone(),
            host: req.host.clone(),
            thread: req.thread.clone(),
        })),
        Some(a) => {
            Err(Error::conflict(format!("{} session {} acts as {a}, not {agent}", req.host, req.thread))
                .with_hint(format!(
                    "loopx agent unbind-thread --agent-id {a} --host {} --thread {}",
                    req.host, req.thread
                )))
        }
    }
}

pub fn set_armed(state: &GoalState, actor: &Actor, armed: bool) -> Result<Option<Event>> {
    let agent = explicit_agent(actor, "arming a loop")?;
    let now = state.armed.contains(agent);
    Ok((now != armed).then(|| Event::LoopArmed { agent: agent.clone(), armed }))
}

pub fn stop_block(state: &GoalState, actor: &Actor, req: &BindThread, told: Vec<GateId>) -> Result<Event> {
    let agent = explicit_agent(actor, "a stop-hook continuation")?;
    check_thread(req)?;
    // A session acts as its bound agent; an unbound one as the agent its host was installed with.
    if let Some(bound) = state.threads.get(&crate::state::thread_key(&req.host, &req.thread))
        && bound != agent
    {
        return Err(Error::identity(format!(
            "{} session {} is bound to {bound}, not {agent}",
            req.host, req.thread
        ))
        .with_hint("the session joins with the host's entry command (/loopx, $loopx or loopx join)"));
    }
    Ok(Event::StopBlocked { agent: agent.clone(), thread: req.thread.clone(), told })
}

// ---- handoffs --------------------------------------------------------------------------------

/// Longest a handoff waits to be taken over.
pub const MAX_HANDOFF_SECS: u64 = 7 * 24 * 3600;
/// Evidence a handoff carries: the goal's latest.
const HANDOFF_EVIDENCE: usize = 10;

/// The sender hands its todos (those named, or every open one it holds) to a host or agent.
pub fn offer_handoff(state: &GoalState, actor: &Actor, req: &OfferHandoff, now: Timestamp) -> Result<Event> {
    let me = explicit_agent(actor, "a handoff")?;
    not_done(state, "take handoffs")?;
    check_note(req.note.as_ref())?;
    if req.ttl_secs == 0 || req.ttl_secs > MAX_HANDOFF_SECS {
        return Err(Error::usage(format!(
            "--ttl (a handoff's) must be between 1 s and {} days",
            MAX_HANDOFF_SECS / 86_400
        ))
        .with_hint("e.g. --ttl 24h"));
    }
    if let Some(to) = &req.to_agent {
        if to == me {
            return Err(Error::usage(format!("{me} cannot hand off to itself"))
                .with_hint("name another agent, or only the host"));
        }
        if let Some(a) = state.agent(to)
            && a.agent_type != req.to_host
        {
            return Err(Error::usage(format!(
                "agent {to} acts through {}, not {}",
                a.agent_type.name(),
                req.to_host.name()
            ))
            .with_hint(format!("pass --to-host {}", a.agent_type.name())));
        }
    }
    let mut ids: Vec<TodoId> = if req.todos.is_empty() {
        state
            .todos
            .keys()
            .filter(|t| !t.status.is_closed() && t.claimed_by == Some(me))
            .map(|t| t.id)
            .collect()
    } else {
        req.todos.clone()
    };
    ids.dedup();
    let mut todos = Vec::new();
    for id in ids {
        let todo = find_todo(state, id)?;
        not_closed(state, todo, "hand off")?;
        if let Some(h) = state.handoff_holding(id, now) {
            return Err(Error::conflict(format!(
                "todo {id} is already handed off to {} ({}, pending until {})",
                h.receiver(),
                h.id,
                h.expires_at
            ))
            .with_hint(format!("cancel that one first: loopx handoff cancel --handoff-id {}", h.id)));
        }
        if todo.claimed_by.as_ref() != Some(me) {
            let holder = todo.claimed_by.as_ref().map_or("nobody".to_owned(), ToString::to_string);
            return Err(Error::refused(format!(
                "{me} does not hold todo {id} (held by {holder}); only the todos you hold can be handed off"
            ))
            .with_hint("claim it first, or leave it out: open todos need no handoff")
            .with_next(&state.goal.id, Some(me), NextStep::Claim { todo: id }));
        }
        lease_presented(state, todo, actor, now, "handing off")?;
        let lease = todo.lease.as_ref().filter(|l| &l.owner == me && l.is_active(now));
        todos.push(HandedTodo {
            todo: id,
            lease_version: todo.lease_version + u64::from(todo.lease.is_some()),
            lease_secs: lease.map(|l| {
                u64::try_from(l.expires_at.unix_millis() - l.acquired_at.unix_millis()).unwrap_or(0) / 1000
            }),
            write_scope: lease.map(|l| l.write_scope.clone()).unwrap_or_default(),
        });
    }
    let skip = state.evidence.len().saturating_sub(HANDOFF_EVIDENCE);
    Ok(Event::HandoffOffered {
        handoff: Handoff {
            id: state.next_handoff_id(),
            from: me.clone(),
            to_host: req.to_host.clone(),
            to_agent: req.to_agent.clone(),
            todos,
            note: req.note.clone(),
            evidence: state.evidence[skip..].iter().map(|e| e.id).collect(),
            status: HandoffStatus::Pending,
            created_at: now,
            expires_at: now.saturating_add(std::time::Duration::from_secs(req.ttl_secs)),
            accepted_by: None,
            closed_by: None,
            closed_at: None,
            reason: None,
        },
    })
}

pub(crate) fn find_handoff(state: &GoalState, id: HandoffId) -> Result<&Handoff> {
    state.handoff(id).ok_or_else(|| {
        Error::not_found(format!("handoff {id} not found on goal {}", state.goal.id))
            .with_hint("list them with: loopx handoff list --all")
    })
}

/// Who takes a handoff over when nobody is named: the agent the sender named, or the only
/// registered agent of the host that may take it.
pub fn receiver(state: &GoalState, req: &AcceptHandoff, now: Timestamp) -> Result<AgentId> {
    let pending: Vec<&Handoff> = state
        .handoffs
        .iter()
        .filter(|h| h.is_pending(now) && h.to_host == req.host)
        .filter(|h| req.handoff.is_none_or(|id| h.id == id))
        .collect();
    if let Some(to) = pending.iter().find_map(|h| h.to_agent.clone()) {
        return Ok(to);
    }
    let from: Vec<&AgentId> = pending.iter().map(|h| &h.from).collect();
    let hosts: Vec<&AgentId> = state
        .agents
        .iter()
        .filter(|a| a.agent_type == req.host && !from.contains(&&a.id))
        .map(|a| &a.id)
        .collect();
    match hosts.as_slice() {
        [only] => Ok((*only).clone()),
        [] => Err(Error::identity(format!(
            "no {} agent is registered on goal {} to take the handoff over",
            req.host.name(),
            state.goal.id
        ))
        .with_hint(format!(
            "name the receiver, which registers it: loopx resume --host {} --agent-id <new-agent>",
            req.host.name()
        ))),
        many => {
            let ids: Vec<&str> = many.iter().map(|a| a.as_str()).collect();
            Err(Error::identity(format!(
                "{} {} agents are registered ({}); say which one takes the handoff over",
                many.len(),
                req.host.name(),
                ids.join(", ")
            ))
            .with_hint(format!("pass --agent-id, e.g. --agent-id {}", ids[0])))
        }
    }
}

/// The receiver takes a handoff over: the one named, or the oldest pending for it. `None`
/// when nothing waits (or it already took this one).
pub fn accept_handoff(
    state: &GoalState,
    actor: &Actor,
    req: &AcceptHandoff,
    now: Timestamp,
) -> Result<Option<Event>> {
    let me = explicit_agent(actor, "taking a handoff over")?;
    let my_type = match state.agent(me) {
        Some(a) if a.agent_type != req.host => {
            return Err(Error::usage(format!(
                "agent {me} acts through {}, not {}",
                a.agent_type.name(),
                req.host.name()
            ))
            .with_hint(format!("pass --host {}, or another --agent-id", a.agent_type.name())));
        }
        Some(a) => a.agent_type.clone(),
        None => req.host.clone(),
    };
    let registered = state.agent(me).is_none().then_some(req.host.clone());
    let h = match req.handoff {
        Some(id) => {
            let h = find_handoff(state, id)?;
            match h.status_at(now) {
                HandoffStatus::Accepted if h.accepted_by.as_ref() == Some(me) => return Ok(None),
                HandoffStatus::Accepted => {
                    let by = h.accepted_by.as_ref().map_or("", |a| a.as_str());
                    return Err(Error::conflict(format!("handoff {id} was taken over by {by}"))
                        .with_hint("see every handoff: loopx handoff list --all"));
                }
                HandoffStatus::Cancelled => {
                    return Err(Error::refused(format!("handoff {id} was cancelled")).with_hint(format!(
                        "its todos went back to {}; see loopx handoff list --all",
                        h.from
                    )));
                }
                HandoffStatus::Expired => {
                    return Err(Error::refused(format!(
                        "handoff {id} expired at {}; its todos are open to anyone again",
                        h.expires_at
                    ))
                    .with_next(&state.goal.id, Some(me), NextStep::ShouldRun));
                }
                HandoffStatus::Pending if !h.is_for(me, &my_type) => {
                    return Err(Error::refused(format!("handoff {id} is for {}, not {me}", h.receiver()))
                        .with_hint(format!(
                            "its receiver takes it over: loopx resume --host {}",
                            h.to_host.name()
                        )));
                }
                HandoffStatus::Pending => h,
            }
        }
        None => match state.handoffs.iter().find(|h| h.is_pending(now) && h.is_for(me, &my_type)) {
            Some(h) => h,
            None => return Ok(None),
        },
    };
    accept_event(state, h, me, registered)
}

/// The event that gives `h`'s open todos to `me`, refusing when one changed since the
/// handoff (its lease version moved, or someone holds it).
fn accept_event(
    state: &GoalState,
    h: &Handoff,
    me: &AgentId,
    registered: Option<AgentType>,
) -> Result<Option<Event>> {
    let mut todos = Vec::new();
    for handed in &h.todos {
        let t = find_todo(state, handed.todo)?;
        if t.status.is_closed() {
            continue;
        }
        if t.lease_version != handed.lease_version || t.claimed_by.is_some() {
            return Err(Error::conflict(format!(
                "todo {} changed since handoff {} (lease version {} → {}{})",
                t.id,
                h.id,
                handed.lease_version,
                t.lease_version,
                t.claimed_by.as_ref().map(|c| format!(", claimed by {c}")).unwrap_or_default()
            ))
            .with_hint(format!(
                "a person cancels it and the sender hands off again: loopx handoff cancel --handoff-id {}",
                h.id
            )));
        }
        todos.push(t.id);
    }
    Ok(Some(Event::HandoffAccepted {
        handoff: h.id,
        from: h.from.clone(),
        agent: me.clone(),
        todos,
        registered,
    }))
}

/// The sender or a person withdraws a pending handoff. Cancelling a cancelled one is a no-op.
pub fn cancel_handoff(
    state: &GoalState,
    actor: &Actor,
    req: &CancelHandoff,
    now: Timestamp,
) -> Result<Option<Event>> {
    check_note(req.reason.as_ref())?;
    let h = find_handoff(state, req.handoff)?;
    if let Actor::Agent(me) = actor
        && me != &h.from
    {
        return Err(Error::refused(format!(
            "handoff {} is {}'s; only its sender or a person can cancel it",
            h.id, h.from
        ))
        .with_hint(format!("ask {} or a person to cancel it", h.from)));
    }
    match h.status_at(now) {
        HandoffStatus::Pending => {
            Ok(Some(Event::HandoffCancelled { handoff: h.id, reason: req.reason.clone() }))
        }
        HandoffStatus::Cancelled => Ok(None),
        HandoffStatus::Accepted => Err(Error::refused(format!(
            "handoff {} was already taken over by {}",
            h.id,
            h.accepted_by.as_ref().map_or("", |a| a.as_str())
        ))
        .with_hint(
            "its todos are the receiver's now; a takeover moves one back: loopx todo update --claimed-by",
        )),
        HandoffStatus::Expired => Err(Error::refused(format!(
            "handoff {} expired at {}; its todos are already open",
            h.id, h.expires_at
        ))
        .with_hint("nothing to cancel; see loopx handoff list --all")),
    }
}
