//! The hook driver: one host-neutral answer to every host's hooks. An adapter decodes the
//! host's stdin into a [`HostEvent`] and encodes the [`HookReply`]; everything between is
//! here, the same for every host:
//!
//! - a session is bound to its own agent (`<prefix>-<session>`) by the host's entry command
//!   (`/loopx`), which also creates the goal when there is none and arms the loop;
//! - `SessionStart` tells the model, before anything else, of a handoff waiting for this host;
//!   then the objective, what waits on a person, and its next todo;
//! - the entry command (and `loopx resume` inside a session) takes such a handoff over;
//! - `Stop` keeps an armed session working only while should-run says run, up to its own
//!   per-session cap, and **fails open**: any error lets the session stop;
//! - the tool gate never gates read-only tools or read-only shell commands; in every session
//!   it denies a person's governance commands (however the shell reaches loopx) and writes to
//!   `.loopx/`; for an armed session it also denies mutating tools while should-run says no,
//!   destructive shell commands, and edits outside the goal's or the claimed todos' write
//!   scope; it **fails closed**;
//! - the status line is one line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopx_core::agent::HostCatalog;
use loopx_core::decision::DecisionKind;
use loopx_core::host::{HookPoint, HookReply, HostAdapter, HostAnswer, HostEvent, HostEventKind, ToolEffect};
use loopx_core::kernel::{
    AcceptHandoff, AddTodo, BindThread, CommandContext, HandoffPacket, Kernel, Receipt, RegisterAgent,
    ResumeBody, SessionView, StatusView,
};
use loopx_core::model::{GoalStatus, Priority};
use loopx_core::untrusted::{flatten, quoted};
use loopx_core::{AgentId, AgentType, Clock, Error, GoalId, HandoffId, Result};

use loopx_kernel::project::STATE_DIR;
use loopx_kernel::scope::WriteScope;
use loopx_kernel::{DynKernel, FileStore, Reporter, StoreOpener, StoreOptions, find_root};

use crate::shell::{check_shell, is_destructive};

/// What a hook runs with (the CLI reads it from the environment).
pub struct HookEnv {
    pub cwd: PathBuf,
    /// The project directory the host names in its environment, if it does.
    pub project_dir: Option<PathBuf>,
    pub stop_cap: u32,
    /// How the host's shell reaches this loopx binary (its absolute path).
    pub loopx: String,
    /// The agent every session acts as, for a host installed with one (`--agent-id` on the
    /// hook's command line): its sessions are not bound one by one.
    pub agent: Option<AgentId>,
    pub options: StoreOptions,
    pub reporter: Arc<dyn Reporter>,
    /// Opens a project's store (the command line's opener knows every kind).
    pub open: StoreOpener,
    /// The host types the kernel paces agents by.
    pub hosts: Arc<HostCatalog>,
    /// The wall clock the kernel reads: the command line's (which a debug build's tests move).
    pub clock: Arc<dyn Clock>,
    /// The host's agent process the hook runs under (`<pid>.<start>`), for a host whose tools
    /// know their session only by that process: the session's agent is bound to it too.
    pub process: Option<String>,
}

impl std::fmt::Debug for HookEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookEnv").field("cwd", &self.cwd).field("agent", &self.agent).finish_non_exhaustive()
    }
}

/// Answers one hook invocation in the adapter's host protocol. Never fails: an error becomes
/// the point's safe answer, with the reason on stderr.
pub async fn answer(adapter: &dyn HostAdapter, event: &str, stdin: &[u8], env: &HookEnv) -> HostAnswer {
    let point = match adapter.protocol().hook_point(event) {
        Ok(p) => p,
        Err(e) => return failed(adapter, None, &e),
    };
    let ev = match adapter.protocol().decode(point, stdin) {
        Ok(ev) => ev,
        Err(e) => return failed(adapter, Some(point), &e),
    };
    // Read-only tools are never gated, whatever the state of loopx.
    if matches!(ev.kind, HostEventKind::ToolCall { effect: ToolEffect::ReadOnly, .. }) {
        return adapter.protocol().encode(point, &HookReply::Pass);
    }
    match run(adapter, point, &ev, env).await {
        Ok(Said { reply, note }) => {
            let mut a = adapter.protocol().encode(point, &reply);
            if let Some(n) = note {
                a.stderr = n;
            }
            a
        }
        Err(e) => failed(adapter, Some(point), &e),
    }
}

/// A reply, and a note for the person's terminal.
struct Said {
    reply: HookReply,
    note: Option<String>,
}

impl From<HookReply> for Said {
    fn from(reply: HookReply) -> Self {
        Self { reply, note: None }
    }
}

/// The safe answer for a hook that failed before it could run (a usage error, a bad
/// environment value), for `event` if it names one of the adapter's hook points.
pub fn refuse(adapter: &dyn HostAdapter, event: Option<&str>, e: &Error) -> HostAnswer {
    failed(adapter, event.and_then(|ev| adapter.protocol().hook_point(ev).ok()), e)
}

/// The safe answer to a failure: the host goes on, except that the tool gate denies.
fn failed(adapter: &dyn HostAdapter, point: Option<HookPoint>, e: &Error) -> HostAnswer {
    let mut note = format!("loopx: {}", e.message);
    if let Some(h) = &e.hint {
        note.push_str(&format!("\nhint: {h}"));
    }
    match point {
        Some(HookPoint::ToolGate) => {
            let reason = format!(
                "loopx could not check this tool call ({}); a mutating tool is refused until it can",
                e.message
            );
            HostAnswer {
                stderr: note,
                ..adapter.protocol().encode(HookPoint::ToolGate, &HookReply::Deny(reason))
            }
        }
        _ => adapter.protocol().fail_open(point, &note),
    }
}

fn start_dir(ev: &HostEvent, env: &HookEnv) -> PathBuf {
    ev.cwd.clone().or_else(|| env.project_dir.clone()).unwrap_or_else(|| env.cwd.clone())
}

fn open(root: &Path, env: &HookEnv) -> Result<DynKernel> {
    let store = (env.open)(root, env.clock.clone(), env.reporter.clone(), &env.options)?;
    Ok(DynKernel::over(store).with_hosts(env.hosts.clone()))
}

fn thread(adapter: &dyn HostAdapter, ev: &HostEvent) -> BindThread {
    BindThread { host: adapter.host().to_owned(), thread: ev.session.clone() }
}

async fn run(adapter: &dyn HostAdapter, point: HookPoint, ev: &HostEvent, env: &HookEnv) -> Result<Said> {
    if let (HostEventKind::PromptSubmitted { prompt }, Some(cmd)) = (&ev.kind, adapter.entry_command())
        && let Some(rest) = prompt.trim_start().strip_prefix(cmd)
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        return entry(adapter, rest.trim(), ev, env).await.map(Said::from);
    }
    let Some(root) = find_root(&start_dir(ev, env)) else {
        return Ok(match point {
            HookPoint::StatusLine => HookReply::Status("loopx: no project here".to_owned()),
            _ => HookReply::Pass,
        }
        .into());
    };
    let k = open(&root, env)?;
    if point == HookPoint::Stop {
        return stop(adapter, &k, ev, env).await;
    }
    let s = session_of(&k, &thread(adapter, ev), env).await?;
    let ctx = CommandContext { agent: s.agent.clone(), ..CommandContext::default() };
    if let (HookPoint::SessionStart | HookPoint::PromptSubmit, Some(agent)) = (point, &s.agent) {
        bind_process(adapter, &k, agent, env).await?;
    }
    let armed = s.agent.clone().filter(|_| s.armed);
    // A host with no session-start hook of ours hears it with a prompt, until its loop is armed.
    let starts_at_prompt = point == HookPoint::PromptSubmit
        && !s.armed
        && !adapter.protocol().hook_events().iter().any(|e| e.point == HookPoint::SessionStart);
    match (point, &ev.kind) {
        (HookPoint::SessionStart, _) => {
            Ok(HookReply::Context(start_text(adapter, &k, &s, env).await?).into())
        }
        (HookPoint::PromptSubmit, _) if starts_at_prompt => {
            Ok(HookReply::Context(start_text(adapter, &k, &s, env).await?).into())
        }
        (HookPoint::ToolGate, HostEventKind::ToolCall { effect, .. }) => {
            let cwd = ev.cwd.as_deref().unwrap_or(&root);
            if let Some(deny) = never_an_agents(&root, cwd, effect) {
                return Ok(deny.into());
            }
            let Some(agent) = armed else { return Ok(HookReply::Pass.into()) };
            tool_gate(&k, &root, &agent, effect, cwd, &ctx).await.map(Said::from)
        }
        (HookPoint::StatusLine, _) => {
            let st = k.status(None).await?;
            let mark = if st.goal_status == GoalStatus::Done {
                "✓"
            } else if st.goal_status != GoalStatus::Active {
                "⏸"
            } else if !st.gates.is_empty() || st.work_finished {
                "⚠"
            } else {
                "▶"
            };
            let next = st
                .next_todo
                .as_ref()
                .map(|t| format!(" · next {} {}", t.id, flatten(&t.text, 80)))
                .unwrap_or_default();
            Ok(HookReply::Status(format!(
                "loopx {} {mark} {} open · {} done{next}",
                st.goal_id, st.counts.open, st.counts.done
            ))
            .into())
        }
        _ => Ok(HookReply::Pass.into()),
    }
}

/// The loop driver at a turn's end: an armed session under its cap goes on while should-run
/// says run (one transaction: the session, the decision and the continuation it records).
async fn stop(adapter: &dyn HostAdapter, k: &DynKernel, ev: &HostEvent, env: &HookEnv) -> Result<Said> {
    let t = k.stop_turn(env.agent.as_ref(), thread(adapter, ev), env.stop_cap).await?;
    let s = &t.session;
    Ok(match t.continued {
        Some(d) => HookReply::Continue(adapter.continuation_text(&d, &env.loopx)).into(),
        // Asked while it worked, a person's question would end the session unseen: shown once.
        None if !t.told.is_empty() => HookReply::Continue(waits_text(&t.told)).into(),
        None if s.agent.is_some() && s.armed && s.stop_blocks >= env.stop_cap => Said {
            reply: HookReply::Pass,
            note: Some(format!(
                "loopx: this session reached its cap of {} continuations; stopping",
                env.stop_cap
            )),
        },
        None => HookReply::Pass.into(),
    })
}

/// What a session whose work a person's new question stopped is told, once.
fn waits_text(questions: &[loopx_core::decision::OpenQuestion]) -> String {
    let mut out = String::from("loopx: a person must answer before this work goes on.\n");
    questions.iter().for_each(|g| out.push_str(&gate_line(g)));
    out.push_str(
        "Tell the user what waits on them, then end your turn: do no more work on the goal until they answer.\n",
    );
    out
}

/// What a session is told when it starts: a handoff waiting for this host first, then the
/// objective, what waits on a person, its next todo.
async fn start_text(
    adapter: &dyn HostAdapter,
    k: &DynKernel,
    s: &SessionView,
    env: &HookEnv,
) -> Result<String> {
    let st = k.status(None).await?;
    let mut text = String::new();
    // The packet costs a second read; only a pending handoff to this host needs it.
    if st.handoffs.iter().any(|h| h.to_host == adapter.agent_type())
        && let Some(p) = k.handoff_packet(None, adapter.agent_type(), s.agent.as_ref()).await?
    {
        text = waiting_text(adapter, &p, &env.loopx);
    }
    text.push_str(&context_text(adapter, &st, s.agent.as_ref()));
    Ok(text)
}

/// What no agent may do in any session: run a person's governance command, or write loopx's
/// state behind its back. `None` when the call is none of that.
fn never_an_agents(root: &Path, cwd: &Path, effect: &ToolEffect) -> Option<HookReply> {
    match effect {
        ToolEffect::Shell(c) => {
            let v = check_shell(c, root, cwd);
            if let Some(g) = v.governs {
                return Some(HookReply::Deny(format!(
                    "loopx: `{g}` is a person's decision, not an agent's; ask the user (loopx gate ask --question \"…\" --blocks goal)"
                )));
            }
            v.writes_state.map(|p| {
                HookReply::Deny(format!("loopx: this command would change {p}, which is loopx's state; it changes only through loopx commands"))
            })
        }
        ToolEffect::Edits(paths) => {
            let state = WriteScope::new(&[format!("{STATE_DIR}/**")]).ok()?;
            paths.iter().find(|p| state.allows(root, cwd, p)).map(|p| {
                HookReply::Deny(format!(
                    "loopx: {p} is loopx's state; it changes only through loopx commands"
                ))
            })
        }
        _ => None,
    }
}

/// The gate for an armed session's agent: read-only shell commands always pass; anything else
/// waits while should-run says not to run; destructive commands and edits outside the write
/// scope are refused.
async fn tool_gate(
    k: &DynKernel,
    root: &Path,
    agent: &AgentId,
    effect: &ToolEffect,
    cwd: &Path,
    ctx: &CommandContext,
) -> Result<HookReply> {
    if let ToolEffect::Shell(c) = effect
        && check_shell(c, root, cwd).read_only
    {
        return Ok(HookReply::Pass);
    }
    let d = k.should_run(ctx, None).await?;
    if !d.should_run {
        return Ok(HookReply::Deny(format!(
            "loopx says {}: {}. Mutating tools wait until it says run; reading is fine.",
            d.decision.as_str(),
            d.reason
        )));
    }
    match effect {
        ToolEffect::Shell(c) if is_destructive(c) => Ok(HookReply::Deny(format!(
            "loopx: `{c}` is destructive; ask the user first (loopx gate ask --question \"…\" --blocks goal)"
        ))),
        ToolEffect::Edits(paths) => {
            Ok(k.check_edits(None, agent, cwd, paths).await?.map_or(HookReply::Pass, HookReply::Deny))
        }
        _ => Ok(HookReply::Pass),
    }
}

/// The packet of a handoff: who handed what, the note, what was done with its proof, what is
/// left, what waits on a person. Every piece of text in it is quoted: agents wrote it.
pub fn packet_text(p: &HandoffPacket) -> String {
    let h = &p.handoff;
    let mut out = format!("Handoff {} from agent {} to {}", h.id, h.from, h.receiver());
    if !h.todos.is_empty() {
        let ids: Vec<String> = h.todos.iter().map(|t| t.todo.to_string()).collect();
        out.push_str(&format!(" ({})", ids.join(", ")));
    }
    out.push_str(&format!(". Goal: {}\n", quoted(&p.objective, 600)));
    if let Some(n) = &h.note {
        out.push_str(&format!("Note from {}: {}\n", h.from, quoted(n, 1000)));
    }
    for d in &p.done {
        let proof: Vec<String> =
            d.evidence.iter().map(|e| format!("{} {}", e.id, quoted(&e.summary, 200))).collect();
        let proof =
            if proof.is_empty() { String::new() } else { format!(" — proof: {}", proof.join("; ")) };
        out.push_str(&format!("Done: {} {}{proof}\n", d.todo, quoted(&d.text, 200)));
    }
    for t in &p.left {
        let mark = if h.covers(t.id) { " (handed over)" } else { "" };
        out.push_str(&format!("Left: {} ({}) {}{mark}\n", t.id, t.priority, quoted(&t.text, 300)));
    }
    for g in &p.gates {
        out.push_str(&gate_line(g));
    }
    out
}

fn gate_line(g: &loopx_core::decision::OpenQuestion) -> String {
    format!("Waiting on the user: {} {} (blocks {})\n", g.gate, quoted(&g.question, 300), g.blocks)
}

/// A handoff waiting for this host, and how to take it over.
fn waiting_text(adapter: &dyn HostAdapter, p: &HandoffPacket, loopx: &str) -> String {
    let how = match adapter.entry_command() {
        // Its tools cannot name a session that has not joined: only the entry takes it over.
        Some(cmd) if adapter.protocol().sessions_by_process() => format!("{cmd} (the user types it)"),
        Some(cmd) => format!("{cmd}, or run `{loopx} resume --host {}`", adapter.agent_type().name()),
        None => format!("run `{loopx} resume --host {}`", adapter.agent_type().name()),
    };
    format!("{}A handoff waits for this host; take it over first: {how}.\n", packet_text(p))
}

/// What a session is told when it starts: the objective, what waits on a person, its next todo.
fn context_text(adapter: &dyn HostAdapter, st: &StatusView, agent: Option<&AgentId>) -> String {
    let mut out =
        format!("loopx governs this project. Goal {}: {}\n", st.goal_id, quoted(&st.objective, 1000));
    for g in &st.gates {
        out.push_str(&gate_line(g));
    }
    match agent {
        Some(a) => {
            let next = st.next_by_agent.iter().find(|n| &n.agent == a).and_then(|n| n.todo.as_ref());
            match next {
                Some(t) => out.push_str(&format!(
                    "You are agent {a}. Your next todo: {} ({}) {}\n",
                    t.id,
                    t.priority,
                    quoted(&t.text, 400)
                )),
                None => out.push_str(&format!("You are agent {a}. Nothing is free for you right now.\n")),
            }
            out.push_str(&format!(
                "Each turn: {}, then claim, one bounded verified slice, {} with evidence.\n",
                adapter.protocol().tool_name("should_run"),
                adapter.protocol().tool_name("complete_task")
            ));
        }
        None => match adapter.entry_command() {
            Some(cmd) => {
                out.push_str(&format!("This session has no loopx agent yet: {cmd} <task> joins the goal.\n"))
            }
            None => out.push_str("This session has no loopx agent yet.\n"),
        },
    }
    out
}

/// `loopx join [task | status | off]`, run by the agent inside a host session's tool
/// environment (a host whose entry is a skill rather than a hook): what the entry command does.
/// Returns the context the session is told.
pub async fn join(
    adapter: &dyn HostAdapter,
    session: &BindThread,
    cwd: &Path,
    args: &str,
    env: &HookEnv,
) -> Result<String> {
    if session.is_process() {
        return Err(not_joined(adapter));
    }
    let ev = HostEvent {
        session: session.thread.clone(),
        cwd: Some(cwd.to_path_buf()),
        kind: HostEventKind::PromptSubmitted { prompt: String::new() },
    };
    match entry(adapter, args, &ev, env).await? {
        HookReply::Context(text) => Ok(text),
        _ => Ok(String::new()),
    }
}

/// The host's entry command (`/loopx [task | status | off]`): joins the goal as this session's
/// own agent, adds the task, arms the loop. Creates the project and goal when there is none.
async fn entry(adapter: &dyn HostAdapter, args: &str, ev: &HostEvent, env: &HookEnv) -> Result<HookReply> {
    let start = start_dir(ev, env);
    let cmd = adapter.entry_command().unwrap_or("loopx");
    let found = find_root(&start);
    // Reporting or disarming never creates a project.
    if found.is_none() && (args == "status" || args == "off") {
        return Ok(HookReply::Context(format!(
            "loopx: there is no loopx project here ({}); {cmd} <the task> starts one.",
            start.display()
        )));
    }
    let root = match found {
        Some(root) => root,
        None => {
            FileStore::init(&start, env.clock.clone(), env.reporter.clone(), env.options.clone())?;
            start
        }
    };
    let k = open(&root, env)?;
    if k.list_goals().await?.goals.is_empty() {
        if args.is_empty() || args == "off" || args == "status" {
            return Ok(HookReply::Context(format!(
                "loopx: there is no goal yet. Tell the user to run {cmd} <the task>, which creates it."
            )));
        }
        loopx_machine::init::goal(&k, GoalId::new("main")?, Some(args), None, true).await?;
    }
    let session = thread(adapter, ev);
    let agent = join_session(adapter, &k, &session, env.agent.as_ref()).await?;
    bind_process(adapter, &k, &agent, env).await?;
    let ctx = CommandContext { agent: Some(agent.clone()), ..CommandContext::default() };
    // A handoff waiting for this session's agent is taken over first, and told first.
    let taken = match args {
        "off" | "status" => String::new(),
        _ => take_over(adapter, &k, &ctx, None)
            .await?
            .body
            .packet
            .map(|p| format!("{}You took handoff {} over. ", packet_text(&p), p.handoff.id))
            .unwrap_or_default(),
    };
    let note = match args {
        "off" => {
            k.set_armed(&ctx, false).await?;
            format!("loopx: {agent}'s loop is disarmed; the goal's state is untouched.")
        }
        "status" => context_text(adapter, &k.status(None).await?, Some(&agent)),
        task => {
            let mut added = String::new();
            if !task.is_empty() {
                let req = AddTodo::agent(task, Priority::P1);
                let t = k.add_todo(&ctx, req).await?;
                added = format!(" Added {} (P1): {}.", t.body.todo.id, quoted(task, 400));
            }
            let armed = k.set_armed(&ctx, true).await?;
            // The objective, which the model may hear of nowhere else (a host with no
            // session-start hook of ours).
            let objective = quoted(&k.status(None).await?.objective, 1000);
            format!(
                "loopx: this session is agent {agent} on goal {}: {objective}; loop armed.{added} {} Each turn starts with {}.",
                armed.body.goal_id,
                adapter.keep_turning(),
                adapter.protocol().tool_name("should_run")
            )
        }
    };
    let d = k.should_run(&ctx, None).await.ok().filter(|d| d.decision != DecisionKind::Stop);
    let next = match d {
        Some(d) if d.should_run => {
            d.selected_todo.map(|t| format!(" Next: {} {}.", t.id, quoted(&t.text, 400))).unwrap_or_default()
        }
        // Not now: why, and what waits on a person (the session may hear of it nowhere else).
        Some(d) => {
            let mut why =
                format!(" loopx says {} for now: {}.\n", d.decision.as_str(), flatten(&d.reason, 400));
            d.user_channel.questions.iter().for_each(|g| why.push_str(&gate_line(g)));
            why
        }
        None => String::new(),
    };
    Ok(HookReply::Context(format!("{taken}{note}{next}")))
}

/// What loopx knows of a session: its bound agent, or, for a host installed with one agent
/// for every session, that agent (once registered).
async fn session_of(k: &DynKernel, session: &BindThread, env: &HookEnv) -> Result<SessionView> {
    match &env.agent {
        Some(agent) => k.agent_session(None, agent, session).await,
        None => k.session(None, session).await,
    }
}

/// The session's own agent: bound already, or registered (`<prefix>-<session>`) and bound now.
/// A host installed with one agent for every session uses that one, registered on first use.
async fn join_session(
    adapter: &dyn HostAdapter,
    k: &DynKernel,
    session: &BindThread,
    installed: Option<&AgentId>,
) -> Result<AgentId> {
    if let Some(id) = installed {
        let ctx = CommandContext { agent: Some(id.clone()), ..CommandContext::default() };
        let reg = RegisterAgent { id: id.clone(), agent_type: adapter.agent_type(), require_new: false };
        k.register_agent(&ctx, reg).await?;
        return Ok(id.clone());
    }
    if let Some(a) = k.session(None, session).await?.agent {
        return Ok(a);
    }
    if session.is_process() {
        return Err(not_joined(adapter));
    }
    let id = agent_id_for(adapter.agent_prefix(), &session.thread)?;
    // The session joins: its agent registers itself and binds the session to it.
    let ctx = CommandContext { agent: Some(id.clone()), ..CommandContext::default() };
    let reg = RegisterAgent { id: id.clone(), agent_type: adapter.agent_type(), require_new: false };
    k.register_agent(&ctx, reg).await?;
    k.bind_thread(&ctx, session.clone()).await?;
    Ok(id)
}

/// For a host whose tools know their session only by its agent process: binds the session's
/// agent to the process this hook runs under, unless it is bound already, or to another agent
/// (sessions sharing one process: the first keeps it, the others' tools act as nobody).
async fn bind_process(
    adapter: &dyn HostAdapter,
    k: &DynKernel,
    agent: &AgentId,
    env: &HookEnv,
) -> Result<()> {
    let Some(key) = env.process.as_deref().filter(|_| adapter.protocol().sessions_by_process()) else {
        return Ok(());
    };
    let process = BindThread::process(adapter.host(), key);
    if k.session(None, &process).await?.agent.is_some() {
        return Ok(());
    }
    let ctx = CommandContext { agent: Some(agent.clone()), ..CommandContext::default() };
    k.bind_thread(&ctx, process).await?;
    Ok(())
}

/// A command from the tools of a session known only by its process, which has not joined.
fn not_joined(adapter: &dyn HostAdapter) -> Error {
    let how = adapter.entry_command().map_or_else(
        || "join from a hook of the session first".to_owned(),
        |cmd| format!("{cmd} joins the goal (and takes a waiting handoff over)"),
    );
    Error::identity(format!(
        "this {} session has not joined the goal, and its tools cannot name the session",
        adapter.host()
    ))
    .with_hint(how)
}

async fn take_over(
    adapter: &dyn HostAdapter,
    k: &DynKernel,
    ctx: &CommandContext,
    handoff: Option<HandoffId>,
) -> Result<Receipt<ResumeBody>> {
    k.accept_handoff(ctx, AcceptHandoff { host: adapter.agent_type(), handoff }).await
}

/// `loopx resume` inside a host session: joins the goal as the session's own agent, takes the
/// handoff waiting for it over, and arms the loop. `named` (`--agent-id`) may name that agent;
/// another is refused before anything changes.
pub async fn resume(
    adapter: &dyn HostAdapter,
    session: &BindThread,
    host: &AgentType,
    named: Option<&AgentId>,
    cwd: &Path,
    handoff: Option<HandoffId>,
    env: &HookEnv,
) -> Result<Receipt<ResumeBody>> {
    if *host != adapter.agent_type() {
        return Err(Error::usage(format!(
            "this is a {} session; it takes over as a {} agent, not {host}",
            session.host,
            adapter.agent_type()
        ))
        .with_hint(format!("pass --host {}", adapter.agent_type())));
    }
    let start = env.project_dir.clone().unwrap_or_else(|| cwd.to_path_buf());
    let root = find_root(&start).ok_or_else(|| {
        Error::not_found("no loopx project here").with_hint("run it in the project the handoff belongs to")
    })?;
    let k = open(&root, env)?;
    if let Some(n) = named {
        let own = match (&env.agent, k.session(None, session).await?.agent) {
            (Some(installed), _) => installed.clone(),
            (None, Some(bound)) => bound,
            (None, None) if session.is_process() => return Err(not_joined(adapter)),
            (None, None) => agent_id_for(adapter.agent_prefix(), &session.thread)?,
        };
        if *n != own {
            return Err(Error::identity(format!(
                "this {} session takes the handoff over as its own agent {own}, not {n}",
                adapter.host()
            ))
            .with_hint(format!("leave out --agent-id, or pass --agent-id {own}")));
        }
    }
    let agent = join_session(adapter, &k, session, env.agent.as_ref()).await?;
    bind_process(adapter, &k, &agent, env).await?;
    let ctx = CommandContext { agent: Some(agent), ..CommandContext::default() };
    let receipt = take_over(adapter, &k, &ctx, handoff).await?;
    k.set_armed(&ctx, true).await?;
    Ok(receipt)
}

/// `<prefix>-` and the session id's first letters and digits: one agent per session.
fn agent_id_for(prefix: &str, session: &str) -> Result<AgentId> {
    let tail: String =
        session.chars().filter(char::is_ascii_alphanumeric).take(12).collect::<String>().to_ascii_lowercase();
    if tail.is_empty() {
        return Err(Error::usage("the hook input has no session id"));
    }
    Ok(AgentId::new(&format!("{prefix}-{tail}"))?)
}

/// The prompt a host's own schedule sends its agent each time (Codex's heartbeat, a `/loop`):
/// for `agent`, registered on the goal (`host` names the agent type to register it with when
/// it is not), calling loopx as `this` binary the way the host's shell reaches it.
pub async fn heartbeat_prompt(
    k: &DynKernel,
    adapter: &dyn HostAdapter,
    surface: &str,
    agent: AgentId,
    goal: Option<&GoalId>,
    host: &str,
    this: &str,
) -> Result<loopx_core::host::HostPrompt> {
    let detail = k.show_goal(goal).await?;
    if !detail.agents.iter().any(|x| x.id == agent) {
        return Err(Error::identity(format!("agent {agent} is not registered on goal {}", detail.goal.id))
            .with_hint(format!("loopx agent register --agent-id {agent} --agent-type {host}")));
    }
    let req = loopx_core::host::PromptRequest {
        loopx: adapter.loopx_command(this),
        goal: detail.goal.id.clone(),
        agent,
        project: k.store().root().to_path_buf(),
        objective: detail.goal.objective.clone(),
    };
    adapter.prompt(surface, &req)
}
