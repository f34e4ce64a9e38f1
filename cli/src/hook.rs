//! `loopx hook claude-code <event>`: answers a Claude Code hook in Claude Code's protocol.
//! The kernel decides; this module only translates. Every hook but `PreToolUse` fails open
//! (a broken loopx never traps a session); `PreToolUse` fails closed for mutating tools.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopx_core::decision::DecisionKind;
use loopx_core::kernel::{AddTodo, BindThread, CommandContext, CreateGoal, Kernel, RegisterAgent};
use loopx_core::model::{Priority, Role, TodoClass};
use loopx_core::traits::HostAnswer;
use loopx_core::{AgentId, AgentType, Error, GoalId, Result};
use loopx_host_claude_code::{self as cc, HookEvent, HookInput, ToolEffect};
use loopx_kernel::{FileKernel, Reporter, StoreOptions, SystemClock, find_root};

/// How many times the Stop driver keeps one session going, unless `LOOPX_STOP_CAP` says.
pub const DEFAULT_STOP_CAP: u32 = 25;

/// What the hook runs with.
#[derive(Debug)]
pub struct HookEnv {
    pub cwd: PathBuf,
    /// `CLAUDE_PROJECT_DIR`, when Claude Code set it.
    pub project_dir: Option<PathBuf>,
    pub stop_cap: u32,
    pub options: StoreOptions,
    pub reporter: Arc<dyn Reporter>,
}

/// Answers one hook invocation. Never fails: errors become the event's safe answer, with the
/// reason on stderr.
pub async fn answer(host: &str, event: &str, stdin: &[u8], env: &HookEnv) -> HostAnswer {
    let event = match (host, event.parse::<HookEvent>()) {
        (cc::HOST, Ok(e)) => e,
        (cc::HOST, Err(e)) => return failed(None, &e),
        (other, _) => {
            return failed(
                None,
                &Error::usage(format!("loopx has no hooks for host {other:?}"))
                    .with_hint("use: loopx hook claude-code <event>"),
            );
        }
    };
    let input = match cc::parse_input(stdin) {
        Ok(i) => i,
        Err(e) => return failed(Some(event), &e),
    };
    // Read-only tools are never gated, whatever the state of loopx.
    if event == HookEvent::PreToolUse
        && cc::tool_effect(input.tool_name.as_deref().unwrap_or(""), input.tool_input.as_ref())
            == ToolEffect::ReadOnly
    {
        return cc::pass();
    }
    match run(event, &input, env).await {
        Ok(a) => a,
        Err(e) => failed(Some(event), &e),
    }
}

/// The safe answer to a failure: let the host go on, except that the tool gate denies.
fn failed(event: Option<HookEvent>, e: &Error) -> HostAnswer {
    let mut stderr = format!("loopx: {}", e.message);
    if let Some(h) = &e.hint {
        stderr.push_str(&format!("\nhint: {h}"));
    }
    match event {
        Some(HookEvent::PreToolUse) => HostAnswer {
            stderr,
            ..cc::pre_tool_deny(&format!(
                "loopx could not check this tool call ({}); a mutating tool is refused until it can",
                e.message
            ))
        },
        // Exit 1: a non-blocking error in Claude Code's protocol. Never 2 (that blocks).
        _ => HostAnswer { stdout: String::new(), stderr, exit_code: 1 },
    }
}

fn project(input: &HookInput, env: &HookEnv) -> Option<PathBuf> {
    let start = input.dir().or_else(|| env.project_dir.clone()).unwrap_or_else(|| env.cwd.clone());
    find_root(&start)
}

fn open(root: &Path, env: &HookEnv) -> Result<FileKernel> {
    FileKernel::open(root, Arc::new(SystemClock), env.reporter.clone(), env.options.clone())
}

fn session(input: &HookInput) -> BindThread {
    BindThread { host: cc::HOST.to_owned(), thread: input.session_id.clone() }
}

async fn run(event: HookEvent, input: &HookInput, env: &HookEnv) -> Result<HostAnswer> {
    if event == HookEvent::UserPromptSubmit
        && let Some(rest) =
            input.prompt.as_deref().map(str::trim_start).and_then(|p| p.strip_prefix("/loopx"))
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        return slash_loopx(rest.trim(), input, env).await;
    }
    let Some(root) = project(input, env) else {
        return Ok(match event {
            HookEvent::StatusLine => cc::status_line("loopx: no project here"),
            _ => cc::pass(),
        });
    };
    let k = open(&root, env)?;
    let s = k.session(None, &session(input)).await?;
    let ctx = CommandContext { goal: None, agent: s.agent.clone(), key: None };
    match event {
        HookEvent::SessionStart => {
            Ok(cc::additional_context(event, &context_text(&k, s.agent.as_ref()).await?))
        }
        HookEvent::UserPromptSubmit => Ok(cc::pass()),
        HookEvent::Stop => {
            let Some(agent) = s.agent.clone().filter(|_| s.armed) else { return Ok(cc::pass()) };
            if s.stop_blocks >= env.stop_cap {
                return Ok(HostAnswer {
                    stderr: format!(
                        "loopx: this session reached its cap of {} continuations; stopping",
                        env.stop_cap
                    ),
                    ..cc::pass()
                });
            }
            let d = k.should_run(&ctx, None).await?;
            if !d.should_run {
                return Ok(cc::pass());
            }
            k.record_stop_block(&ctx, session(input)).await?;
            let what = match &d.selected_todo {
                Some(t) => format!(
                    "continue with {} ({}): {}. {}Do one bounded, verified slice, then call mcp__loopx__complete_task (todo_id {}, a new turn_id, evidence).",
                    t.id,
                    t.priority,
                    t.text,
                    if t.claim_required {
                        format!("Claim it first (mcp__loopx__claim_task, todo_id {}). ", t.id)
                    } else {
                        String::new()
                    },
                    t.id
                ),
                None => format!(
                    "{}. Add the next todos (loopx todo add --agent-id {agent} --text \"…\") or close the goal's last todo with --no-follow-up.",
                    d.reason
                ),
            };
            Ok(cc::stop_block(&format!("loopx ({agent}): {what}")))
        }
        HookEvent::PreToolUse => {
            let effect = cc::tool_effect(input.tool_name.as_deref().unwrap_or(""), input.tool_input.as_ref());
            let Some(_agent) = s.agent.clone().filter(|_| s.armed) else { return Ok(cc::pass()) };
            if effect == ToolEffect::ReadOnly {
                return Ok(cc::pass());
            }
            let d = k.should_run(&ctx, None).await?;
            if !d.should_run {
                return Ok(cc::pre_tool_deny(
                    &format!(
                        "loopx says {:?}: {}. Mutating tools wait until it says run.",
                        d.decision, d.reason
                    )
                    .replace("Run", "run"),
                ));
            }
            match effect {
                ToolEffect::Shell(c) if cc::is_destructive(&c) => Ok(cc::pre_tool_deny(&format!(
                    "loopx: `{c}` is destructive; ask the user first (loopx gate ask --question \"…\" --blocks goal)"
                ))),
                ToolEffect::Edits(paths) => {
                    let scope = k.show_goal(None).await?.goal.write_scope;
                    match paths.iter().find(|p| !in_scope(&root, p, &scope)) {
                        Some(p) => Ok(cc::pre_tool_deny(&format!(
                            "loopx: {p} is outside the goal's write scope ({})",
                            scope.join(", ")
                        ))),
                        None => Ok(cc::pass()),
                    }
                }
                _ => Ok(cc::pass()),
            }
        }
        HookEvent::StatusLine => {
            let st = k.status(None).await?;
            let mark = if st.goal_status != loopx_core::model::GoalStatus::Active {
                "⏸"
            } else if !st.gates.is_empty() {
                "⚠"
            } else {
                "▶"
            };
            let next =
                st.next_todo.as_ref().map(|t| format!(" · next {} {}", t.id, t.text)).unwrap_or_default();
            Ok(cc::status_line(&format!(
                "loopx {} {mark} {} open · {} done{next}",
                st.goal_id, st.counts.open, st.counts.done
            )))
        }
    }
}

/// Whether `path` lies inside the goal's write scope (an empty scope allows everything).
fn in_scope(root: &Path, path: &str, scope: &[String]) -> bool {
    if scope.is_empty() {
        return true;
    }
    let p = Path::new(path);
    let rel = p.strip_prefix(root).unwrap_or(p).to_string_lossy().into_owned();
    scope.iter().any(|glob| {
        let prefix = glob.split(['*', '?', '[']).next().unwrap_or("");
        rel.starts_with(prefix)
    })
}

/// What a session is told when it starts: the objective, what waits on a person, its next todo.
async fn context_text(k: &FileKernel, agent: Option<&AgentId>) -> Result<String> {
    let st = k.status(None).await?;
    let mut out = format!("loopx governs this project. Goal {}: {}\n", st.goal_id, st.objective);
    for g in &st.gates {
        out.push_str(&format!("Waiting on the user: {} {} (blocks {})\n", g.gate, g.question, g.blocks));
    }
    match agent {
        Some(a) => {
            let next = st.next_by_agent.iter().find(|n| &n.agent == a).and_then(|n| n.todo.as_ref());
            match next {
                Some(t) => out.push_str(&format!(
                    "You are agent {a}. Your next todo: {} ({}) {}\n",
                    t.id, t.priority, t.text
                )),
                None => out.push_str(&format!("You are agent {a}. Nothing is free for you right now.\n")),
            }
            out.push_str("Each turn: mcp__loopx__should_run, then claim, one bounded verified slice, mcp__loopx__complete_task with evidence.\n");
        }
        None => out.push_str("This session has no loopx agent yet: /loopx <task> joins the goal.\n"),
    }
    Ok(out)
}

/// `/loopx [task | status | off]`, seen by the UserPromptSubmit hook (which knows the
/// session id): joins the goal as this session's own agent, adds the task, arms the loop.
async fn slash_loopx(args: &str, input: &HookInput, env: &HookEnv) -> Result<HostAnswer> {
    let start = input.dir().or_else(|| env.project_dir.clone()).unwrap_or_else(|| env.cwd.clone());
    let root = find_root(&start).unwrap_or(start);
    let (k, _) = FileKernel::init(&root, Arc::new(SystemClock), env.reporter.clone(), env.options.clone())?;
    if k.list_goals().await?.goals.is_empty() {
        if args.is_empty() || args == "off" || args == "status" {
            return Ok(cc::additional_context(
                HookEvent::UserPromptSubmit,
                "loopx: there is no goal yet. Tell the user to run /loopx <the task>, which creates it.",
            ));
        }
        k.create_goal(CreateGoal {
            id: GoalId::new("main")?,
            objective: args.to_owned(),
            title: None,
            make_default: true,
        })
        .await?;
    }
    let thread = session(input);
    let mut s = k.session(None, &thread).await?;
    let agent = match s.agent.clone() {
        Some(a) => a,
        None => {
            let id = agent_id_for(&input.session_id)?;
            let reg = RegisterAgent { id: id.clone(), agent_type: AgentType::ClaudeCode, require_new: false };
            k.register_agent(&CommandContext::default(), reg).await?;
            let ctx = CommandContext { agent: Some(id.clone()), ..CommandContext::default() };
            k.bind_thread(&ctx, thread.clone()).await?;
            id
        }
    };
    let ctx = CommandContext { agent: Some(agent.clone()), ..CommandContext::default() };
    let note = match args {
        "off" => {
            k.set_armed(&ctx, false).await?;
            format!("loopx: {agent}'s loop is disarmed; the goal's state is untouched.")
        }
        "status" => context_text(&k, Some(&agent)).await?,
        task => {
            let mut added = String::new();
            if !task.is_empty() {
                let req = AddTodo {
                    text: task.to_owned(),
                    priority: Priority::P1,
                    role: Role::Agent,
                    class: TodoClass::Advance,
                    scopes: vec![],
                    after_gate: None,
                    validation: None,
                };
                let t = k.add_todo(&ctx, req).await?;
                added = format!(" Added {} (P1): {task}.", t.body.todo.id);
            }
            k.set_armed(&ctx, true).await?;
            s = k.session(None, &thread).await?;
            format!(
                "loopx: this session is agent {agent} on goal {}, loop armed.{added} Run /loop to keep turning; each turn starts with mcp__loopx__should_run.",
                s.goal_id
            )
        }
    };
    let d = k.should_run(&ctx, None).await.ok().filter(|d| d.decision != DecisionKind::Stop);
    let next =
        d.and_then(|d| d.selected_todo).map(|t| format!(" Next: {} {}.", t.id, t.text)).unwrap_or_default();
    Ok(cc::additional_context(HookEvent::UserPromptSubmit, &format!("{note}{next}")))
}

/// `claude-` and the session id's first letters and digits: one agent per session.
fn agent_id_for(session: &str) -> Result<AgentId> {
    let tail: String =
        session.chars().filter(char::is_ascii_alphanumeric).take(12).collect::<String>().to_ascii_lowercase();
    if tail.is_empty() {
        return Err(Error::usage("the hook input has no session_id"));
    }
    AgentId::new(&format!("claude-{tail}"))
}
