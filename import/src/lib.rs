//! `loopx import`: bringing another tool's goals into loopx with nothing lost.
//!
//! Today one source: LoopX (Python) 0.4.x ([`py`]). A goal is replayed through the real kernel
//! over an in-memory store — each of its facts a typed command (create the goal, register its
//! agents, add its todos, claim, complete with evidence, ask and answer gates, spend) at the
//! time the source recorded it — and the resulting log is handed to the project's store whole
//! ([`Store::import_goal`]): one goal is one transaction, all or nothing. The log's second event
//! marks the goal as imported (`imported`, with a digest of what was read), so importing the
//! same source again changes nothing. What the kernel cannot take, or loopx has no place for,
//! is listed in the report with the file and line it came from, never dropped silently. The
//! source is only read.

pub mod py;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use loopx_core::agent::HostCatalog;
use loopx_core::kernel::{
    AddTodo, AnswerGate, AskGate, BindThread, CommandContext, CompleteTodo, CreateGoal, Kernel, NewEvidence,
    QuotaChange, RefreshState, RegisterAgent, SetGoal, SpendSlot, SupersedeTodo, UpdateTodo,
};
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateKind, GateStatus, Priority, ResumeWhen, Role, TodoClass,
    TodoStatus,
};
use loopx_core::{AgentId, AgentType, Clock, Error, GateId, GoalId, ManualClock, Result, Timestamp, TodoId};
use loopx_kernel::project::ProjectGoal;
use loopx_kernel::store::Store;
use loopx_kernel::{FileStore, MemKernel, MemStore, Reporter, Silent, StoreOptions};
use serde::Serialize;

/// What `loopx import` did, or would do.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What was read (the registry file).
    pub source: String,
    pub dry_run: bool,
    pub goals: Vec<GoalReport>,
}

/// One source goal's import.
#[derive(Debug, Serialize)]
pub struct GoalReport {
    /// The goal's id in the source.
    pub source_goal: String,
    /// The loopx goal it became (or would become).
    pub goal_id: String,
    pub outcome: Outcome,
    pub agents: usize,
    pub todos: usize,
    pub gates: usize,
    pub open_gates: usize,
    pub evidence: usize,
    pub spends: usize,
    /// Events in the goal's new log.
    pub events: u64,
    /// Each source todo's id and the loopx todo it became.
    pub todo_ids: BTreeMap<String, String>,
    /// What was not imported, where it is, and why.
    pub not_imported: Vec<NotImported>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Imported,
    /// `--dry-run`: nothing was written.
    WouldImport,
    /// The same source was imported before: nothing changed.
    Unchanged,
}

/// Something the source holds that loopx did not take.
#[derive(Clone, Debug, Serialize)]
pub struct NotImported {
    pub file: String,
    pub line: usize,
    pub what: String,
    pub why: String,
}

/// How to import.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    pub dry_run: bool,
    /// Import a goal whose id is taken under a new one (`<id>-py`, `<id>-py-2`, …).
    pub rename: bool,
    /// The host types the source's host surfaces are read as (a name or an alias); a surface
    /// the catalog does not know is kept as it is named when it is a well-formed type.
    pub hosts: Option<&'a HostCatalog>,
}

/// Imports the LoopX (Python) project in `dir` into a project at `target` that has no state
/// yet: whole or not at all, the import is tried in memory first, so a source that will be
/// refused is refused before `.loopx/` is made (and on a dry run nothing is made at all).
pub async fn import_loopx_py_new(
    target: &Path,
    dir: &Path,
    options: Options<'_>,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    store_options: StoreOptions,
) -> Result<Report> {
    let trial = MemStore::new(target, clock.clone(), reporter.clone());
    let tried = import_loopx_py(&trial, dir, Options { dry_run: true, ..options }).await?;
    if options.dry_run {
        return Ok(tried);
    }
    let (store, _) = FileStore::init(target, clock, reporter, store_options)?;
    import_loopx_py(&store, dir, options).await
}

/// Imports the LoopX (Python) project in `dir` into `target`.
pub async fn import_loopx_py(target: &dyn Store, dir: &Path, options: Options<'_>) -> Result<Report> {
    let project = py::read_project(dir)?;
    let existing = target.project()?;
    // Decide every goal's id first: a conflict refuses the whole import before anything is
    // written.
    let mut plans = Vec::new();
    let mut conflicts = Vec::new();
    for g in &project.goals {
        let Ok(id) = GoalId::new(&g.id) else {
            conflicts.push(format!("{} cannot be a loopx goal id", g.id));
            continue;
        };
        if !existing.has_goal(&id) {
            plans.push((g, id, false));
            continue;
        }
        let same = target.read(&id)?.imported.as_ref().is_some_and(|m| m.digest == g.digest);
        if same {
            plans.push((g, id, true));
        } else if options.rename {
            // The first of <id>-py, <id>-py-2, … that is free, or that this source made before
            // (then it is unchanged).
            let mut chosen = None;
            for n in 1..1000 {
                let Ok(c) = GoalId::new(&if n == 1 { format!("{id}-py") } else { format!("{id}-py-{n}") })
                else {
                    break;
                };
                if plans.iter().any(|(_, p, _)| *p == c) {
                    continue;
                }
                if !existing.has_goal(&c) {
                    chosen = Some((c, false));
                    break;
                }
                if target.read(&c)?.imported.as_ref().is_some_and(|m| m.digest == g.digest) {
                    chosen = Some((c, true));
                    break;
                }
            }
            let (free, same) = chosen.ok_or_else(|| Error::conflict(format!("no free id for goal {id}")))?;
            plans.push((g, free, same));
        } else {
            conflicts.push(format!("goal {id} exists already"));
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::conflict(format!("nothing was imported: {}", conflicts.join("; ")))
            .with_hint("pass --rename to import such a goal under a new id (<id>-py)"));
    }
    let mut report =
        Report { source: project.registry.display().to_string(), dry_run: options.dry_run, goals: vec![] };
    for (g, id, unchanged) in plans {
        if unchanged {
            let state = target.read(&id)?;
            report.goals.push(GoalReport {
                source_goal: g.id.clone(),
                goal_id: id.to_string(),
                outcome: Outcome::Unchanged,
                agents: state.agents.len(),
                todos: state.counts().total,
                gates: state.gates.len(),
                open_gates: state.open_gates().count(),
                evidence: usize::try_from(state.evidence_total).unwrap_or(usize::MAX),
                spends: usize::try_from(state.spends_total).unwrap_or(usize::MAX),
                events: state.seq,
                todo_ids: BTreeMap::new(),
                not_imported: vec![],
            });
            continue;
        }
        let (built, lines) = build(dir, g, &id, options.hosts).await?;
        let mut r = built;
        if !options.dry_run {
            target.import_goal(&id, &lines)?;
            let created_at = target.read(&id)?.goal.created_at;
            target.update_project(&mut |p| {
                if !p.has_goal(&id) {
                    p.goals.push(ProjectGoal { id: id.clone(), title: None, created_at });
                }
                if p.default_goal.is_none() {
                    p.default_goal = Some(id.clone());
                }
                Ok(true)
            })?;
            r.outcome = Outcome::Imported;
        }
        report.goals.push(r);
    }
    Ok(report)
}

/// One step of a goal's replay, at a time.
#[derive(Debug)]
enum Step {
    Claim(usize),
    Block(usize),
    Defer(usize),
    Close(usize),
    AskGate(usize),
    AnswerGate(usize),
    Spend(usize),
}

/// Replays source goal `g` as goal `id` in memory; returns the report and the log.
async fn build(
    dir: &Path,
    g: &py::Goal,
    id: &GoalId,
    hosts: Option<&HostCatalog>,
) -> Result<(GoalReport, Vec<String>)> {
    // The import sets the clock to each source record's time.
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(0)));
    let mem = MemStore::new(dir, clock.clone(), Arc::new(Silent));
    let k = MemKernel::over(mem.clone());
    let mut r = GoalReport {
        source_goal: g.id.clone(),
        goal_id: id.to_string(),
        outcome: Outcome::WouldImport,
        agents: 0,
        todos: 0,
        gates: 0,
        open_gates: 0,
        evidence: 0,
        spends: 0,
        events: 0,
        todo_ids: BTreeMap::new(),
        not_imported: vec![],
    };
    let state_file = g.state_file.display().to_string();
    let skip = |r: &mut GoalReport, file: &str, line: usize, what: &str, why: String| {
        r.not_imported.push(NotImported { file: file.to_owned(), line, what: what.to_owned(), why });
    };
    // Every time the source records, to start the goal at the first.
    let times: Vec<Timestamp> = g
        .todos
        .iter()
        .flat_map(|t| [t.time("updated_at"), t.time("completed_at")])
        .flatten()
        .chain(g.runs.iter().map(|r| r.at))
        .chain(g.updated_at)
        .collect();
    let start = times.iter().min().copied().unwrap_or_else(|| loopx_kernel::SystemClock.now());
    let end = times.iter().max().copied().unwrap_or(start);
    let set = |t: Timestamp| clock.set(t);
    set(start);
    // A person's commands say so: with several agents registered, no agent is assumed.
    let person = AgentId::new("user")?;
    let user = CommandContext {
        goal: Some(id.clone()),
        agent: Some(person),
        key: None,
        session: None,
        signer: None,
    };
    let objective =
        if g.objective.trim().is_empty() { format!("goal {} (LoopX)", g.id) } else { g.objective.clone() };
    k.create_goal(CreateGoal { id: id.clone(), objective, title: None, make_default: true }).await?;
    mem.transact(id, &mut |txn| {
        let event = loopx_core::event::Event::Imported {
            source: format!("LoopX (Python) goal {} in {}", g.id, state_file),
            digest: g.digest.clone(),
        };
        txn.commit("user", event, None, false, |_| Ok(())).map(|_| ())
    })?;
    if let Some(q) = g.quota {
        let change = QuotaChange {
            compute: Some(q.compute),
            window_hours: Some(q.window_hours.round().max(1.0) as u32),
            slot_minutes: q.slot_minutes.map(|m| m.round().max(1.0) as u32),
            ..QuotaChange::default()
        };
        if let Err(e) = k.set_goal(&user, SetGoal { quota: change, ..SetGoal::default() }).await {
            skip(&mut r, "registry.json", 1, "the quota policy", e.message);
        }
    }
    // Agents, typed by the host surface a thread of theirs is bound on.
    let mut agents: BTreeMap<String, AgentId> = BTreeMap::new();
    for a in &g.agents {
        let Ok(aid) = AgentId::new(a) else {
            skip(&mut r, "registry.json", 1, &format!("agent {a}"), "not a valid loopx agent id".into());
            continue;
        };
        let host = g.bindings.iter().find(|b| &b.2 == a).map(|b| b.1.as_str());
        let agent_type = host
            .and_then(|h| {
                let known = hosts.and_then(|c| c.resolve(h).ok());
                known.or_else(|| AgentType::new(&h.replace('_', "-")).ok())
            })
            .unwrap_or_else(AgentType::other);
        match k.register_agent(&user, RegisterAgent { id: aid.clone(), agent_type, require_new: true }).await
        {
            Ok(_) => {
                r.agents += 1;
                agents.insert(a.clone(), aid);
            }
            Err(e) => skip(&mut r, "registry.json", 1, &format!("agent {a}"), e.message),
        }
    }
    for (thread, host, a) in &g.bindings {
        let Some(aid) = agents.get(a) else { continue };
        let ctx = CommandContext { agent: Some(aid.clone()), ..user.clone() };
        let req = BindThread { host: host.clone(), thread: thread.clone() };
        if let Err(e) = k.bind_thread(&ctx, req).await {
            skip(&mut r, "registry.json", 1, &format!("thread {thread} of {a}"), e.message);
        }
    }
    for (file, line, what) in &g.extras {
        skip(
            &mut r,
            &file.display().to_string(),
            *line,
            what,
            "loopx has no place for it; it stays in the source".into(),
        );
    }
    // Todos in file order (agent, person, then archived work); person gates become gates.
    let mut ids: BTreeMap<&str, TodoId> = BTreeMap::new();
    let mut steps: Vec<(Timestamp, Step)> = Vec::new();
    for (i, t) in g.todos.iter().enumerate() {
        let at = |k: &str| t.time(k).unwrap_or(start);
        if t.class() == "user_gate" {
            if t.status() == "done" {
                steps.push((at("completed_at"), Step::AskGate(i)));
                steps.push((at("completed_at"), Step::AnswerGate(i)));
            } else {
                steps.push((end, Step::AskGate(i)));
            }
            continue;
        }
        let role = if t.section == py::Section::User || t.class() == "user_action" {
            Role::User
        } else {
            Role::Agent
        };
        let class = match t.class() {
            "blocker" => TodoClass::Blocker,
            "continuous_monitor" => TodoClass::Monitor,
            _ => TodoClass::Advance,
        };
        // Without a `[Pn]` prefix LoopX sorts a todo last of all; loopx's default is P2.
        let priority =
            t.priority.and_then(|d| format!("P{d}").parse::<Priority>().ok()).unwrap_or(Priority::P2);
        let req = AddTodo {
            text: t.text.clone(),
            priority,
            role,
            class,
            scopes: vec![],
            after_gate: None,
            validation: None,
        };
        let added = match k.add_todo(&user, req).await {
            Ok(rc) => rc.body.todo.id,
            Err(e) => {
                skip(&mut r, &state_file, t.line, &format!("todo {:?}", t.text), e.message);
                continue;
            }
        };
        r.todos += 1;
        if let Some(py_id) = t.id() {
            ids.insert(py_id, added);
            r.todo_ids.insert(py_id.to_owned(), added.to_string());
            let note = format!("imported from LoopX (Python) {py_id}");
            if let Err(e) = k.update_todo(&user, note_only(added, note)).await {
                skip(
                    &mut r,
                    &state_file,
                    t.line,
                    &format!("todo_id={py_id} as a note on {added}"),
                    e.message,
                );
            }
        }
        if t.get("claimed_by").is_some() && t.status() != "done" {
            steps.push((at("updated_at"), Step::Claim(i)));
        }
        match t.status() {
            "blocked" => steps.push((at("updated_at"), Step::Block(i))),
            "deferred" => steps.push((at("updated_at"), Step::Defer(i))),
            "done" => steps.push((at("completed_at"), Step::Close(i))),
            _ => {}
        }
        let unmapped = unmapped_fields(t);
        if !unmapped.is_empty() {
            let what = format!("todo {:?}: {}", t.text, unmapped.join(" "));
            skip(
                &mut r,
                &state_file,
                t.line,
                &what,
                "loopx has no such fields; they stay in the source".into(),
            );
        }
    }
    for (i, run) in g.runs.iter().enumerate() {
        if run.spend.is_some() {
            steps.push((run.at, Step::Spend(i)));
        } else {
            skip(
                &mut r,
                &run.file.display().to_string(),
                run.line,
                &format!("run {:?} at {}", run.classification, run.at),
                "a run without a todo (loopx records a run per todo)".into(),
            );
        }
    }
    steps.sort_by_key(|(t, _)| *t);
    let mut gates: BTreeMap<usize, GateId> = BTreeMap::new();
    for (at, step) in steps {
        set(at);
        let (line, what, result) = match step {
            Step::Claim(i) | Step::Block(i) | Step::Defer(i) | Step::Close(i) => {
                let t = &g.todos[i];
                let Some(todo) = t.id().and_then(|p| ids.get(p)).copied() else { continue };
                let claimer = t.get("claimed_by").and_then(|a| agents.get(a)).cloned();
                let as_claimer = claimer.clone().map(|a| CommandContext { agent: Some(a), ..user.clone() });
                let result = match step {
                    Step::Claim(_) => match &as_claimer {
                        Some(ctx) => k.claim_todo(ctx, todo).await.map(|_| ()),
                        None => Err(Error::refused(format!(
                            "claimed by an unknown agent {:?}",
                            t.get("claimed_by")
                        ))),
                    },
                    Step::Block(_) => {
                        let mut u = note_only(
                            todo,
                            t.get("reason").unwrap_or("blocked in LoopX (Python)").to_owned(),
                        );
                        u.status = Some(TodoStatus::Blocked);
                        k.update_todo(&user, u).await.map(|_| ())
                    }
                    Step::Defer(_) => {
                        let resume = t.get("resume_when").unwrap_or_default();
                        match resume.strip_prefix("todo_done:").and_then(|p| ids.get(p)) {
                            Some(after) => {
                                let mut u = note_only(todo, "deferred in LoopX (Python)".into());
                                u.status = Some(TodoStatus::Deferred);
                                u.resume_when = Some(ResumeWhen::TodoDone(*after));
                                k.update_todo(&user, u).await.map(|_| ())
                            }
                            None => Err(Error::refused(format!(
                                "deferred until {resume:?}, which loopx cannot wait for; left open"
                            ))),
                        }
                    }
                    _ => close(&k, &user, as_claimer.as_ref(), t, todo, &ids, &mut r).await,
                };
                (t.line, format!("todo {:?} ({})", t.text, t.status()), result)
            }
            Step::AskGate(i) => {
                let t = &g.todos[i];
                let blocks = if t.get("global_gate") == Some("true") {
                    Some(GateBlocks::Goal)
                } else if let Some(a) = t.get("blocks_agent").or(t.get("bound_agent")) {
                    agents.get(a).cloned().map(GateBlocks::Agent)
                } else if let Some(target) = t.get("unblocks_todo_id").and_then(|p| ids.get(p)) {
                    Some(GateBlocks::Todos(vec![*target]))
                } else {
                    Some(GateBlocks::Goal)
                };
                let result = match blocks {
                    None => Err(Error::refused("it blocks an agent that was not imported")),
                    Some(blocks) => {
                        let req = AskGate { question: t.text.clone(), blocks, kind: GateKind::Person };
                        k.ask_gate(&user, req).await.map(|rc| {
                            gates.insert(i, rc.body.gate.id);
                            r.gates += 1;
                            if t.status() != "done" {
                                r.open_gates += 1;
                            }
                        })
                    }
                };
                (t.line, format!("gate {:?}", t.text), result)
            }
            Step::AnswerGate(i) => {
                let t = &g.todos[i];
                let Some(gate) = gates.get(&i).copied() else { continue };
                let status = match t.get("decision_outcome") {
                    Some("reject") => GateStatus::Rejected,
                    Some("cancel") => GateStatus::Cancelled,
                    _ => GateStatus::Approved,
                };
                let req = AnswerGate { gate, status, note: t.get("evidence").map(str::to_owned) };
                let result = k.answer_gate(&user, req).await.map(|_| ());
                (t.line, format!("the answer to gate {:?}", t.text), result)
            }
            Step::Spend(i) => {
                let run = &g.runs[i];
                let Some((py_todo, slots, _)) = &run.spend else { continue };
                let result = spend(&k, &user, run, ids.get(py_todo.as_str()).copied(), *slots, &agents).await;
                if result.is_ok() {
                    r.spends += 1;
                }
                let what = format!("spend of {slots} slot(s) on {py_todo} at {}", run.at);
                let file = run.file.display().to_string();
                if let Err(e) = result {
                    skip(&mut r, &file, run.line, &what, e.message);
                }
                continue;
            }
        };
        if let Err(e) = result {
            skip(&mut r, &state_file, line, &what, e.message);
        }
    }
    if !matches!(g.status.as_str(), "active" | "") {
        set(end);
        let reason = format!("{} in LoopX (Python)", g.status);
        if let Err(e) = k.stop_goal(&user, Some(reason), false).await {
            skip(&mut r, &state_file, 1, &format!("goal status {:?}", g.status), e.message);
        }
    }
    let state = mem.read(id)?;
    r.events = state.seq;
    Ok((r, mem.log_lines(id)?))
}

/// A todo's metadata fields the import has no place for, as `key=value`.
fn unmapped_fields(t: &py::Todo) -> Vec<String> {
    // What the import carries over (some only in one status: a reason of a blocked todo, the
    // successors and note of a closed one, the resume condition of a deferred one).
    let done = t.status() == "done";
    let mapped = |k: &str| match k {
        "todo_id" | "status" | "task_class" | "claimed_by" | "evidence" | "completed_at" | "updated_at" => {
            true
        }
        "reason" => t.status() == "blocked" || done,
        "note" | "successor_todo_ids" | "superseded_by" | "completion_continuation" => done,
        "resume_when" => t.get(k).is_some_and(|v| v.starts_with("todo_done:")),
        "decision_scope" | "blocks_agent" | "global_gate" | "unblocks_todo_id" | "bound_agent"
        | "goal_bound" | "decision_outcome" => t.class() == "user_gate",
        _ => false,
    };
    t.meta.iter().filter(|(k, v)| !v.is_empty() && !mapped(k)).map(|(k, v)| format!("{k}={v}")).collect()
}

fn note_only(todo: TodoId, note: String) -> UpdateTodo {
    UpdateTodo { note: Some(note), ..UpdateTodo::of(todo) }
}

/// Closes a done todo: superseded by its replacements, or completed by its claimer (claiming
/// it first) with its evidence, or with a note saying it had none.
async fn close(
    k: &MemKernel,
    user: &CommandContext,
    as_claimer: Option<&CommandContext>,
    t: &py::Todo,
    todo: TodoId,
    ids: &BTreeMap<&str, TodoId>,
    r: &mut GoalReport,
) -> Result<()> {
    if t.get("note") == Some("superseded") || t.get("superseded_by").is_some() {
        let by: Vec<TodoId> = t.list("superseded_by").iter().filter_map(|p| ids.get(p)).copied().collect();
        let note = t.get("reason").map(|s| s.to_owned());
        return k.supersede_todo(user, SupersedeTodo { todo, by, new_texts: vec![], note }).await.map(|_| ());
    }
    let ctx = match as_claimer {
        Some(ctx) if t.section != py::Section::User => {
            k.claim_todo(ctx, todo).await?;
            ctx
        }
        _ => user,
    };
    let evidence = t.get("evidence").map(|e| NewEvidence {
        kind: EvidenceKind::Note,
        summary: e.to_owned(),
        command: None,
        exit_code: None,
        link: None,
    });
    let has = evidence.is_some();
    let mut note = match (t.get("note"), has) {
        (Some(n), _) => Some(n.to_owned()),
        (None, false) => Some("completed in LoopX (Python) with no evidence recorded".to_owned()),
        (None, true) => None,
    };
    let next: Vec<String> =
        t.list("successor_todo_ids").iter().filter_map(|p| ids.get(p)).map(ToString::to_string).collect();
    if !next.is_empty() {
        let followed = format!("followed by {}", next.join(", "));
        note = Some(note.map_or(followed.clone(), |n| format!("{n}; {followed}")));
    }
    let req = CompleteTodo { todo, evidence, no_follow_up: true, note, next_todo: None };
    k.complete_todo(ctx, req).await?;
    if has {
        r.evidence += 1;
    }
    Ok(())
}

/// A spend: its writeback (loopx spends only after one), then the slots.
async fn spend(
    k: &MemKernel,
    user: &CommandContext,
    run: &py::Run,
    todo: Option<TodoId>,
    slots: u32,
    agents: &BTreeMap<String, AgentId>,
) -> Result<()> {
    let todo = todo.ok_or_else(|| Error::refused("its todo was not imported"))?;
    let agent = run
        .agent
        .as_ref()
        .and_then(|a| agents.get(a))
        .ok_or_else(|| Error::refused("its agent was not imported"))?;
    let ctx = CommandContext { agent: Some(agent.clone()), ..user.clone() };
    let writeback = RefreshState {
        todo,
        classification: run.classification.clone(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        next_action: run.next_action.clone(),
    };
    k.refresh_state(&ctx, writeback).await?;
    k.spend_slot(&ctx, SpendSlot { todo, slots, tokens: None, usd: None, dry_run: false }).await.map(|_| ())
}
