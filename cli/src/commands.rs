//! From parsed arguments to kernel calls and rendered results.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopx_core::decision::QuotaView;
use loopx_core::kernel::*;
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateAsked, GateBlocks, GateKind, GateStatus, HandoffMode, NotifyChange,
    NotifyPolicy, Priority, ResumeWhen, Role, RuntimeProfile, TodoClass, TodoStatus, Validation,
};
use loopx_core::{AgentId, AgentType, Error, GateId, GoalId, IdempotencyKey, Result, SpendId, TodoId, exit};
use loopx_hostkit::next;
use loopx_kernel::{DynKernel, FileStore, InitOutcome, Reporter, find_root};

use crate::Env;
use crate::args::*;
use crate::output::{Rendered, Style};
use crate::text;

pub(crate) fn goal_arg(cli: &Cli) -> Result<Option<GoalId>> {
    Ok(cli.goal_id.as_deref().map(GoalId::new).transpose()?)
}

fn context(cli: &Cli, acting: &Acting) -> Result<CommandContext> {
    let named = acting.agent_id.as_deref().map(AgentId::new).transpose()?;
    let agent = loopx_hostkit::identity::Driven::acting(cli.driven.as_ref(), named, false)?;
    Ok(CommandContext {
        goal: goal_arg(cli)?,
        agent,
        key: acting.turn_instance_id.as_deref().map(IdempotencyKey::new).transpose()?,
        session: cli.session.clone(),
        signer: None,
    })
}

/// [`context`] for the commands that bind a turn (should-run, refresh-state, spend-slot): in a
/// turn of `loopx drive`, the driver's turn unless one is named.
fn turn_context(cli: &Cli, acting: &Acting) -> Result<CommandContext> {
    let mut ctx = context(cli, acting)?;
    if ctx.key.is_none() {
        ctx.key = cli.driven.as_ref().and_then(|d| d.turn.clone());
    }
    Ok(ctx)
}

/// `-` reads the text from stdin, for text that does not fit on a command line.
fn text_arg(s: &str) -> Result<String> {
    if s != "-" {
        return Ok(s.to_owned());
    }
    // Never more than the limit and one byte: a huge stdin is refused, not held in memory.
    let limit = loopx_core::model::MAX_TEXT_LEN as u64 + 2;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin().lock(), limit), &mut buf).map_err(
        |e| {
            Error::usage(format!("cannot read the text from stdin: {e}"))
                .with_hint("pass the text as the argument instead of -")
        },
    )?;
    if buf.len() as u64 >= limit {
        return Err(Error::usage(format!(
            "the text on stdin is longer than the limit of {} bytes",
            loopx_core::model::MAX_TEXT_LEN
        ))
        .with_hint("keep it short; put detail in a file and reference it"));
    }
    let text = String::from_utf8(buf)
        .map_err(|_| Error::usage("the text on stdin is not UTF-8").with_hint("pass UTF-8 text"))?;
    Ok(text.trim_end_matches('\n').to_owned())
}

fn todo_id(s: &str) -> Result<TodoId> {
    Ok(s.parse()?)
}

pub(crate) fn project_root(cli: &Cli, env: &Env) -> Result<PathBuf> {
    if let Some(p) = &cli.project {
        return Ok(if p.is_absolute() { p.clone() } else { env.cwd.join(p) });
    }
    find_root(&env.cwd).ok_or_else(|| {
        Error::not_found(format!(
            "not inside a loopx project (no .loopx/ in {} or any parent directory)",
            env.cwd.display()
        ))
        .with_hint("start one here with: loopx init --goal-id main --objective \"…\" (or pass --project DIR)")
    })
}

fn open(cli: &Cli, env: &Env, reporter: Arc<dyn Reporter>) -> Result<DynKernel> {
    open_at(&project_root(cli, env)?, env, reporter)
}

/// The kernel over the store of the project at `root` (its `.loopx/`, or the database its
/// `project.json` names).
pub(crate) fn open_at(root: &Path, env: &Env, reporter: Arc<dyn Reporter>) -> Result<DynKernel> {
    let store = crate::store::opener()(root, env.clock.clone(), reporter, &env.options)?;
    Ok(DynKernel::over(store).with_gates(env.gates.clone()).with_hosts(crate::registry::catalog()))
}

fn evidence(kind: &str, summary: String) -> Result<NewEvidence> {
    Ok(NewEvidence {
        kind: kind.parse::<EvidenceKind>()?,
        summary,
        command: None,
        exit_code: None,
        link: None,
    })
}

pub async fn dispatch(cli: &Cli, env: &Env, reporter: Arc<dyn Reporter>, style: Style) -> Result<Rendered> {
    match &cli.command {
        Command::Init(a) => init(cli, env, reporter, a, style).await,
        Command::Host(h) => {
            let root = match &cli.project {
                Some(p) => env.cwd.join(p),
                None => find_root(&env.cwd).unwrap_or_else(|| env.cwd.clone()),
            };
            let home = std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| {
                Error::usage("HOME is not set; loopx needs it to find the host's user files")
                    .with_hint("set HOME to your home directory")
            })?;
            crate::host::run(h, &root, &home, &env.options, goal_arg(cli)?)
        }
        Command::Agent(AgentCommand::Types) => {
            let catalog = crate::registry::catalog();
            let types = catalog.types();
            Rendered::new(&serde_json::json!({ "agent_types": types }), text::agent_types(types))
        }
        Command::Agent(AgentCommand::Onboard { agent_type }) => {
            let t: AgentType = crate::registry::catalog().resolve(agent_type)?;
            let (host, steps) = crate::registry::onboarding(&t).ok_or_else(|| {
                Error::usage(format!("loopx has no host adapter for agent type {t} yet"))
                    .with_hint("see loopx host list")
            })?;
            let text: String = steps.iter().enumerate().map(|(i, s)| format!("{}. {s}\n", i + 1)).collect();
            Rendered::new(&serde_json::json!({"agent_type": t, "host": host, "steps": steps}), text)
        }
        Command::Commands(c) => crate::approve::run(cli, env, reporter, c).await,
        Command::Store(s) => crate::store::run(
            s,
            &project_root(cli, env)?,
            env,
            reporter,
            cli.session.as_ref().map(|s| s.host.as_str()),
        ),
        Command::Projects(p) => crate::projects::run(p, env),
        Command::Status(StatusArgs { all: true }) => crate::projects::status_all(env, reporter, style).await,
        Command::Join(a) => join(cli, env, reporter, a).await,
        Command::Resume(a) if cli.session.is_some() => resume_in_session(cli, env, reporter, a).await,
        Command::Demo(a) => crate::demo::run(a.keep).await,
        Command::Import(ImportCommand::LoopxPy(a)) => import_py(cli, env, reporter, a).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "loopx",
                &mut script,
            );
            let script = String::from_utf8(script).map_err(|e| Error::internal(e.to_string()))?;
            Rendered::new(&serde_json::json!({"shell": shell.to_string(), "script": script}), script)
        }
        cmd => {
            let k = open(cli, env, reporter)?;
            run(cli, &k, cmd, style).await
        }
    }
}

/// The hook driver's environment for a command run inside a host session.
fn session_env(
    cli: &Cli,
    env: &Env,
    adapter: &dyn loopx_core::host::HostAdapter,
    reporter: Arc<dyn Reporter>,
) -> loopx_hostkit::hook::HookEnv {
    loopx_hostkit::hook::HookEnv {
        cwd: env.cwd.clone(),
        project_dir: cli.project.as_ref().map(|p| env.cwd.join(p)),
        stop_cap: adapter.default_stop_cap(),
        loopx: String::new(),
        agent: None,
        options: env.options.clone(),
        reporter,
        open: crate::store::opener(),
        hosts: crate::registry::catalog(),
        clock: env.clock.clone(),
        process: None,
    }
}

/// `loopx resume` inside a host session: the session joins as its own agent and takes over.
async fn resume_in_session(
    cli: &Cli,
    env: &Env,
    reporter: Arc<dyn Reporter>,
    a: &ResumeArgs,
) -> Result<Rendered> {
    let session = cli.session.clone().ok_or_else(|| Error::internal("no session"))?;
    let adapter = crate::registry::session_host(&session)?;
    let host: AgentType = crate::registry::catalog().resolve(&a.host)?;
    let named = a.acting.agent_id.as_deref().map(AgentId::new).transpose()?;
    let handoff = a.handoff_id.as_deref().map(str::parse).transpose()?;
    let hook_env = session_env(cli, env, adapter, reporter);
    let r =
        loopx_hostkit::hook::resume(adapter, &session, &host, named.as_ref(), &env.cwd, handoff, &hook_env)
            .await?;
    Rendered::new(&r, text::resume(&r))
}

/// `loopx join`: only inside a host's tool environment, where the session is known.
async fn join(cli: &Cli, env: &Env, reporter: Arc<dyn Reporter>, a: &JoinArgs) -> Result<Rendered> {
    let session = cli.session.clone().ok_or_else(|| {
        Error::usage(
            "loopx join is run by an agent from its host's shell tool, where the host names the session",
        )
        .with_hint("a person joins an agent with: loopx agent register --agent-id <id> --agent-type <type>")
    })?;
    let adapter = crate::registry::session_host(&session)?;
    let hook_env = session_env(cli, env, adapter, reporter.clone());
    let args = a.task.join(" ");
    let text = loopx_hostkit::hook::join(adapter, &session, &env.cwd, args.trim(), &hook_env).await?;
    Rendered::new(
        &serde_json::json!({"host": session.host, "session": session.thread, "context": text}),
        format!("{text}\n"),
    )
}

async fn init(
    cli: &Cli,
    env: &Env,
    reporter: Arc<dyn Reporter>,
    a: &InitArgs,
    style: Style,
) -> Result<Rendered> {
    let root = match &cli.project {
        Some(p) if p.is_absolute() => p.clone(),
        Some(p) => env.cwd.join(p),
        None => env.cwd.clone(),
    };
    let goal = goal_arg(cli)?;
    loopx_machine::init::check_place(&root, a.nested)?;
    // Validate everything before anything is written.
    if let Some(o) = &a.objective {
        loopx_core::model::check_text("objective", o)?;
    }
    if let Some(t) = &a.title {
        loopx_core::model::check_text("title", t)?;
    }
    let mut reached = None;
    let outcome = match &a.store {
        Some(url) => {
            let store = loopx_machine::stores::store_ref(url, &a.store_project)?;
            // The database is reached before anything is written here; the person named it,
            // so it is trusted for this project (never from inside an agent's session).
            let db = crate::store::reach(url, &store, &root, env, reporter.clone())?;
            let outcome = loopx_kernel::store::init_pointer(&root, &store)?;
            if cli.session.is_none() {
                crate::store::trust()?.set(&root, &store, false, env.clock.now())?;
            }
            reached = Some(db);
            outcome
        }
        // A project whose state is in a database already: `init` only opens it.
        None if crate::store::named_store(&root).is_some() => InitOutcome { created_project: false },
        None => FileStore::init(&root, env.clock.clone(), reporter.clone(), env.options.clone())?.1,
    };
    // The store just reached is kept (with the password the URL gave, which is not written).
    let k = match reached {
        Some(db) => {
            DynKernel::over(Box::new(db)).with_gates(env.gates.clone()).with_hosts(crate::registry::catalog())
        }
        None => open_at(&root, env, reporter.clone())?,
    };
    let wanted = match (&goal, &a.objective) {
        (Some(g), _) => Some(g.clone()),
        (None, Some(_)) => Some(GoalId::new("main")?),
        (None, None) => None,
    };
    let mut report = InitReport {
        project_root: root.display().to_string(),
        created_project: outcome.created_project,
        created_goal: false,
        goal: None,
        next: Vec::new(),
        notes: a
            .store
            .as_deref()
            .filter(|url| loopx_machine::stores::has_password(url))
            .map(|_| {
                "the password in --store was used to connect and is not kept: later commands read it from LOOPX_STORE_URL, PGPASSWORD or ~/.pgpass".to_owned()
            })
            .into_iter()
            .collect(),
    };
    if let Some(id) = wanted {
        let started =
            loopx_machine::init::goal(&k, id, a.objective.as_deref(), a.title.as_deref(), false).await?;
        if started.other_objective {
            let id = &started.goal.goal.id;
            reporter.warn(&format!(
                "goal {id} exists with another objective; kept it (change it with: loopx goal set --goal-id {id} --objective \"…\")"
            ));
        }
        report.created_goal = started.created;
        report.goal = Some(started.goal);
    } else if let Ok(detail) = k.show_goal(None).await {
        // A project that exists already (another machine's, in a shared store): its default goal.
        report.goal = Some(GoalBody { goal: detail.goal, is_default: detail.is_default });
    }
    report.next = match &report.goal {
        None => vec!["loopx goal create --goal-id main --objective \"…\"".to_owned()],
        Some(g) => vec![
            crate::registry::name_types(&format!(
                "loopx agent register --goal-id {} --agent-id <agent> --agent-type <type>",
                g.goal.id
            )),
            format!("loopx todo add --goal-id {} --text \"…\"", g.goal.id),
            "loopx status".to_owned(),
        ],
    };
    // Offered, never asked: a new project joins `status --all` only if its person wants it.
    if outcome.created_project && !crate::projects::is_indexed(&root) {
        report.next.push("loopx projects add".to_owned());
    }
    Rendered::new(&report, text::init(&report, style))
}

/// `loopx import loopx-py`: into the loopx project at the source (or `--project`), made when
/// there is none (only once the source has been read whole).
async fn import_py(cli: &Cli, env: &Env, reporter: Arc<dyn Reporter>, a: &ImportPyArgs) -> Result<Rendered> {
    let abs = |p: &PathBuf| if p.is_absolute() { p.clone() } else { env.cwd.join(p) };
    let source = a.dir.as_ref().map_or_else(|| env.cwd.clone(), abs);
    let target = cli.project.as_ref().map_or_else(|| source.clone(), abs);
    let hosts = crate::registry::catalog();
    let options = loopx_import::Options { dry_run: a.dry_run, rename: a.rename, hosts: Some(&hosts) };
    let report = if loopx_kernel::Layout::new(&target).project_file().exists() {
        let k = open_at(&target, env, reporter)?;
        loopx_import::import_loopx_py(k.store(), &source, options).await?
    } else {
        let (clock, store_options) = (env.clock.clone(), env.options.clone());
        loopx_import::import_loopx_py_new(&target, &source, options, clock, reporter, store_options).await?
    };
    Rendered::new(&report, text::import(&report))
}

async fn run(cli: &Cli, k: &DynKernel, cmd: &Command, style: Style) -> Result<Rendered> {
    let goal = goal_arg(cli)?;
    let g = goal.as_ref();
    match cmd {
        Command::Init(_)
        | Command::Drive(_)
        | Command::Join(_)
        | Command::Demo(_)
        | Command::Import(_)
        | Command::Completions { .. }
        | Command::Agent(AgentCommand::Types | AgentCommand::Onboard { .. })
        | Command::Mcp(_)
        | Command::Serve(_)
        | Command::Hook(_)
        | Command::Host(_)
        | Command::Store(_)
        | Command::Commands(_)
        | Command::Projects(_) => Err(Error::internal("dispatched twice")),
        Command::Person(p) => crate::person::run(cli, k, p).await,
        Command::HeartbeatPrompt(a) => {
            let (adapter, surface) = crate::registry::surface(&a.host)?;
            let agent = AgentId::new(&a.agent_id)?;
            let this =
                std::env::current_exe().map_or_else(|_| "loopx".to_owned(), |p| p.display().to_string());
            let p =
                loopx_hostkit::hook::heartbeat_prompt(k, adapter, surface, agent, g, &a.host, &this).await?;
            // The text to paste alone on stdout (`| pbcopy` copies just it); what to name and
            // schedule it with, and its length, for the person on stderr.
            if !cli.json {
                eprintln!("name:  {}", p.name);
                if let Some(r) = &p.rrule {
                    eprintln!("rrule: {r}");
                }
                eprintln!("body ({} of {} characters) on stdout", p.chars, p.max_chars);
            }
            let text = format!("{}\n", p.body);
            Rendered::new(&p, text)
        }
        Command::Goal(GoalCommand::Create { objective, title, default }) => {
            let id = goal.clone().ok_or_else(|| {
                Error::usage("goal create needs --goal-id")
                    .with_hint("loopx goal create --goal-id my-goal --objective \"…\"")
            })?;
            let r = k
                .create_goal(CreateGoal {
                    id,
                    objective: objective.clone(),
                    title: title.clone(),
                    make_default: *default,
                })
                .await?;
            Rendered::new(&r, text::goal_receipt("created", &r, style))
        }
        Command::Goal(GoalCommand::List) => {
            let l = k.list_goals().await?;
            Rendered::new(&l, text::goal_list(&l, style))
        }
        Command::Goal(GoalCommand::Show) => {
            let d = k.show_goal(g).await?;
            Rendered::new(&d, text::goal_detail(&d, style))
        }
        Command::Goal(GoalCommand::Set {
            objective,
            title,
            default,
            handoff_mode,
            write_scope,
            clear_write_scope,
            quota,
            notify,
            brakes,
            acting,
        }) => {
            let quota = QuotaChange {
                compute: quota.compute,
                window_hours: quota.window_hours,
                slot_minutes: quota.slot_minutes,
                allowed_slots: quota.allowed_slots,
                budget_tokens: quota.budget_tokens,
                budget_usd: quota.budget_usd,
            };
            if objective.is_none()
                && title.is_none()
                && !default
                && quota.is_empty()
                && handoff_mode.is_none()
                && write_scope.is_empty()
                && !clear_write_scope
                && notify.is_empty()
                && brakes.is_empty()
            {
                return Err(Error::usage("nothing to set").with_hint(
                    "pass --objective, --title, --default, --write-scope, a quota flag such as --compute 0.5, --notify-webhook, or a brake such as --host-wait 6h",
                ));
            }
            let brakes = brakes.brakes()?;
            let handoff_mode = handoff_mode.as_deref().map(str::parse::<HandoffMode>).transpose()?;
            let before = k.show_goal(g).await?;
            // A webhook's URL is kept in the person's configuration, never in `.loopx/`: the
            // goal names it. Kept first (and given back if the goal refuses the change).
            let kept = match notify.notify_webhook.as_deref() {
                Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
                    let root =
                        k.store().root().canonicalize().unwrap_or_else(|_| k.store().root().to_path_buf());
                    let digest = loopx_machine::trusted::key(&root, "webhook", before.goal.id.as_str());
                    let name = format!("{}.{}", before.goal.id, &digest[..8]);
                    let file = crate::projects::config_file("webhooks.json")?;
                    let old = loopx_machine::webhooks::set(&file, &name, Some(url))?;
                    Some((file, name, old))
                }
                _ => None,
            };
            let change = NotifyChange {
                webhook: notify.notify_webhook.as_deref(),
                format: notify.notify_format.as_deref(),
                command: notify.notify_command.as_deref(),
                reminder: notify.notify_reminder.as_deref(),
                clear: notify.clear_notify,
            };
            let mut notify_req = NotifyPolicy::changed(before.goal.notify.as_ref(), &change)?;
            if let (Some(p), Some((_, name, _))) = (notify_req.as_mut(), &kept) {
                p.webhook = Some(format!("config:{name}"));
            }
            // A new URL under the goal's same entry changes nothing in the goal: the log records
            // that the person changed where notices go, without the URL.
            let webhook_changed =
                kept.as_ref().is_some_and(|(_, _, old)| old.as_deref() != notify.notify_webhook.as_deref());
            let req = SetGoal {
                objective: objective.clone(),
                title: title.clone(),
                make_default: *default,
                quota,
                handoff_mode,
                write_scope: (*clear_write_scope || !write_scope.is_empty()).then(|| write_scope.clone()),
                notify: notify_req,
                clear_notify: notify.clear_notify,
                brakes,
                webhook_changed,
            };
            let r = match async {
                k.set_goal(&crate::person::signed(cli, k, context(cli, acting)?).await?, req).await
            }
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    if let Some((file, name, old)) = &kept {
                        let _ = loopx_machine::webhooks::set(file, name, old.as_deref());
                    }
                    return Err(e);
                }
            };
            let webhook_changed = r.changed && webhook_changed;
            Rendered::new(&r, text::goal_changes(&before.goal, before.is_default, &r, webhook_changed, style))
        }
        Command::Goal(GoalCommand::Stop { reason, now, acting }) => {
            let ctx = crate::person::signed(cli, k, context(cli, acting)?).await?;
            let r = k.stop_goal(&ctx, reason.clone(), *now).await?;
            Rendered::new(&r, text::goal_receipt("stopped", &r, style))
        }
        Command::Goal(GoalCommand::Resume { acting }) => {
            let ctx = crate::person::signed(cli, k, context(cli, acting)?).await?;
            let r = k.resume_goal(&ctx).await?;
            Rendered::new(&r, text::goal_receipt("resumed", &r, style))
        }
        Command::Goal(GoalCommand::Complete { note, acting }) => {
            let ctx = crate::person::signed(cli, k, context(cli, acting)?).await?;
            let r = k.complete_goal(&ctx, note.clone()).await?;
            Rendered::new(&r, text::goal_receipt("completed", &r, style))
        }
        Command::Agent(AgentCommand::Register { agent_id, agent_type, require_new }) => {
            let req = RegisterAgent {
                id: AgentId::new_registrable(agent_id)?,
                agent_type: crate::registry::catalog().resolve(agent_type)?,
                require_new: *require_new,
            };
            let ctx = CommandContext { goal, session: cli.session.clone(), ..CommandContext::default() };
            let r = k.register_agent(&ctx, req).await?;
            Rendered::new(&r, text::agent_receipt(&r, style))
        }
        Command::Agent(AgentCommand::BindThread { agent_id, host, thread }) => {
            let ctx = CommandContext {
                goal,
                agent: Some(AgentId::new(agent_id)?),
                key: None,
                session: cli.session.clone(),
                signer: None,
            };
            let r = k.bind_thread(&ctx, BindThread { host: host.clone(), thread: thread.clone() }).await?;
            let text = format!(
                "{} session {} acts as {}{}\n",
                r.body.host,
                r.body.thread,
                agent_id,
                if r.changed { "" } else { " (unchanged)" }
            );
            Rendered::new(&r, text)
        }
        Command::Agent(AgentCommand::UnbindThread { agent_id, host, thread }) => {
            let ctx =
                CommandContext { goal, agent: None, key: None, session: cli.session.clone(), signer: None };
            let agent = AgentId::new(agent_id)?;
            let r = k
                .unbind_thread(&ctx, agent, BindThread { host: host.clone(), thread: thread.clone() })
                .await?;
            let text = if r.changed {
                format!("{} session {} no longer acts as {agent_id}\n", r.body.host, r.body.thread)
            } else {
                format!("{} session {} is not bound (unchanged)\n", r.body.host, r.body.thread)
            };
            Rendered::new(&r, text)
        }
        Command::Agent(AgentCommand::List) => {
            let l = k.list_agents(g).await?;
            Rendered::new(&l, text::agent_list(&l))
        }
        Command::Todo(t) => todo(cli, k, t, style).await,
        Command::Evidence(EvidenceCommand::Add {
            todo_id: id,
            kind,
            summary,
            command,
            exit_code,
            link,
            acting,
        }) => {
            let argv = command
                .as_deref()
                .map(|c| {
                    shell_words::split(c).map_err(|e| {
                        Error::usage(format!("cannot split --command: {e}"))
                            .with_hint("quote it as a shell would, e.g. --command 'cargo test -p parser'")
                    })
                })
                .transpose()?;
            let mut ev = evidence(kind, summary.clone())?;
            ev.command = argv;
            ev.exit_code = *exit_code;
            ev.link.clone_from(link);
            let r = k
                .add_evidence(&context(cli, acting)?, AddEvidence { todo: todo_id(id)?, evidence: ev })
                .await?;
            Rendered::new(&r, text::evidence_receipt(&r, style))
        }
        Command::Evidence(EvidenceCommand::List { todo_id: id }) => {
            let t = id.as_deref().map(todo_id).transpose()?;
            let l = k.list_evidence(g, t).await?;
            Rendered::new(&l, text::evidence_list(&l))
        }
        Command::Gate(g) => gate(cli, k, g, style).await,
        Command::Lease(l) => lease(cli, k, l).await,
        Command::Quota(q) => quota(cli, k, q, style).await,
        Command::RefreshState(a) => {
            let req = RefreshState {
                todo: todo_id(&a.todo_id)?,
                classification: a.classification.clone(),
                delivery_outcome: a.delivery_outcome.parse::<DeliveryOutcome>()?,
                next_action: a.next_action.clone(),
            };
            let r = k.refresh_state(&turn_context(cli, &a.acting)?, req).await?;
            Rendered::new(&r, text::run_receipt(&r))
        }
        Command::Status(_) => {
            let s = k.status(g).await?;
            Rendered::new(&s, text::status(&s, style))
        }
        Command::History(HistoryArgs { limit, agent, todo, turn }) => {
            let filter = HistoryFilter {
                limit: *limit,
                agent: agent.as_deref().map(AgentId::new).transpose()?,
                todo: todo.as_deref().map(todo_id).transpose()?,
                turn: turn.as_deref().map(IdempotencyKey::new).transpose()?.map(|k| k.as_str().to_owned()),
            };
            let h = k.history(g, &filter).await?;
            Rendered::new(&h, text::history(&h, style))
        }
        Command::Report(a) => crate::report::run(k, g, a, cli.json),
        Command::Handoff(a) => handoff(cli, k, a).await,
        Command::Resume(a) => {
            let req = AcceptHandoff {
                host: crate::registry::catalog().resolve(&a.host)?,
                handoff: a.handoff_id.as_deref().map(str::parse).transpose()?,
            };
            let r = k.accept_handoff(&context(cli, &a.acting)?, req).await?;
            Rendered::new(&r, text::resume(&r))
        }
        Command::Doctor(DoctorArgs { repair }) => {
            let d = if *repair { k.repair(g).await? } else { k.doctor(g).await? };
            let code = if d.healthy { exit::SUCCESS } else { exit::INTEGRITY };
            Ok(Rendered::new(&d, text::doctor(&d, style))?.with_exit(code))
        }
    }
}

async fn handoff(cli: &Cli, k: &DynKernel, a: &HandoffArgs) -> Result<Rendered> {
    match &a.command {
        Some(HandoffCommand::Cancel { handoff_id, reason, acting }) => {
            let req = CancelHandoff { handoff: handoff_id.parse()?, reason: reason.clone() };
            let r = k.cancel_handoff(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::handoff(&r.body.handoff, r.changed))
        }
        Some(HandoffCommand::List { all }) => {
            let l = k.list_handoffs(goal_arg(cli)?.as_ref(), *all).await?;
            Rendered::new(&l, text::handoff_list(&l))
        }
        None => {
            let o = &a.offer;
            let to_host = o.to_host.as_deref().ok_or_else(|| {
                Error::usage("say which host receives it")
                    .with_hint("e.g. --to-host claude-code (see loopx agent types)")
            })?;
            let req = OfferHandoff {
                to_host: crate::registry::catalog().resolve(to_host)?,
                to_agent: o.to_agent.as_deref().map(AgentId::new).transpose()?,
                todos: o.todos.iter().map(|t| todo_id(t)).collect::<Result<_>>()?,
                note: o.note.clone(),
                ttl_secs: loopx_core::time::parse_duration(&o.ttl)?.as_secs(),
            };
            let r = k.handoff(&context(cli, &o.acting)?, req).await?;
            Rendered::new(&r, text::handoff(&r.body.handoff, r.changed))
        }
    }
}

async fn todo(cli: &Cli, k: &DynKernel, cmd: &TodoCommand, style: Style) -> Result<Rendered> {
    let goal = goal_arg(cli)?;
    match cmd {
        TodoCommand::Add {
            text: t,
            priority,
            role,
            class,
            scopes,
            after_gate,
            validation_command,
            validation_timeout,
            acting,
        } => {
            let role = role.parse::<Role>()?;
            if class == "user_gate" {
                // The prior art's spelling of a goal-wide question for a person.
                if role != Role::User {
                    return Err(Error::usage("--task-class user_gate needs --role user")
                        .with_hint("or ask directly: loopx gate ask --question \"…\" --blocks goal"));
                }
                let req =
                    AskGate { question: text_arg(t)?, blocks: GateBlocks::Goal, kind: GateKind::Person };
                let r = k.ask_gate(&context(cli, acting)?, req).await?;
                return Rendered::new(&r, text::gate_receipt("asked", &r, style));
            }
            let validation = validation_command
                .as_deref()
                .map(|c| {
                    let argv = shell_words::split(c).map_err(|e| {
                        Error::usage(format!("cannot split --validation-command: {e}")).with_hint(
                            "quote it as a shell would, e.g. --validation-command 'cargo test -p parser'",
                        )
                    })?;
                    let timeout = loopx_core::time::parse_duration(validation_timeout)?;
                    Ok::<_, Error>(Validation { argv, timeout_secs: timeout.as_secs() })
                })
                .transpose()?;
            let req = AddTodo {
                text: text_arg(t)?,
                priority: priority.parse::<Priority>()?,
                role,
                class: class.parse::<TodoClass>()?,
                scopes: scopes.clone(),
                after_gate: after_gate.as_deref().map(str::parse::<GateId>).transpose()?,
                validation,
            };
            let r = k.add_todo(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::todo_receipt("added", &r, style))
        }
        TodoCommand::List { statuses, all, role, claimed_by } => {
            // `claimed` is how an open todo someone holds reads: open, and held.
            let is_claimed = |s: &String| s.trim().eq_ignore_ascii_case("claimed");
            let claimed_only = statuses.iter().any(is_claimed)
                && !statuses.iter().any(|s| s.parse::<TodoStatus>().is_ok_and(|s| s == TodoStatus::Open));
            let mut wanted: Vec<TodoStatus> = statuses
                .iter()
                .map(|s| if is_claimed(s) { Ok(TodoStatus::Open) } else { s.parse::<TodoStatus>() })
                .collect::<Result<_>>()?;
            wanted.dedup();
            let filter = TodoFilter {
                statuses: wanted,
                all: *all,
                role: role.as_deref().map(str::parse::<Role>).transpose()?,
                claimed_by: claimed_by.as_deref().map(AgentId::new).transpose()?,
            };
            let mut l = k.list_todos(goal.as_ref(), &filter).await?;
            if claimed_only {
                l.todos.retain(|t| t.status != TodoStatus::Open || t.claimed_by.is_some());
            }
            Rendered::new(&l, text::todo_list(&l, style))
        }
        TodoCommand::Show { todo_id: id } => {
            let d = k.show_todo(goal.as_ref(), todo_id(id)?).await?;
            Rendered::new(&d, text::todo_detail(&d, style))
        }
        TodoCommand::ClaimNext { acting } => {
            let r = k.claim_next(&context(cli, acting)?).await?;
            Rendered::new(&r, text::todo_receipt("claimed", &r, style))
        }
        TodoCommand::Claim { todo_id: id, acting } => {
            let r = k.claim_todo(&context(cli, acting)?, todo_id(id)?).await?;
            Rendered::new(&r, text::todo_receipt("claimed", &r, style))
        }
        TodoCommand::Release { todo_id: id, acting } => {
            let r = k.release_todo(&context(cli, acting)?, todo_id(id)?).await?;
            Rendered::new(&r, text::todo_receipt("released", &r, style))
        }
        TodoCommand::Update(a) => {
            let req = UpdateTodo {
                todo: todo_id(&a.todo_id)?,
                text: a.text.clone(),
                priority: a.priority.as_deref().map(str::parse::<Priority>).transpose()?,
                status: a.status.as_deref().map(str::parse::<TodoStatus>).transpose()?,
                resume_when: a.resume_when.as_deref().map(ResumeWhen::parse).transpose()?,
                clear_claim: a.clear_claim,
                note: a.note.clone(),
                evidence: a.evidence.clone().map(|s| evidence(&a.evidence_kind, s)).transpose()?,
                claimed_by: a.claimed_by.as_deref().map(AgentId::new).transpose()?,
                takeover_reason: a.takeover_reason.clone(),
            };
            let r = k.update_todo(&context(cli, &a.acting)?, req).await?;
            Rendered::new(&r, text::todo_receipt("updated", &r, style))
        }
        TodoCommand::Complete(a) => {
            let req = CompleteTodo {
                todo: todo_id(&a.todo_id)?,
                evidence: a.evidence.clone().map(|s| evidence(&a.evidence_kind, s)).transpose()?,
                no_follow_up: a.no_follow_up,
                note: a.note.clone(),
                next_todo: a.next_todo.clone(),
            };
            let r = k.complete_todo(&context(cli, &a.acting)?, req).await?;
            Rendered::new(&r, text::complete_receipt(&r, style))
        }
        TodoCommand::Supersede { todo_id: id, by, text: texts, note, acting } => {
            let req = SupersedeTodo {
                todo: todo_id(id)?,
                by: by.iter().map(|b| todo_id(b)).collect::<Result<_>>()?,
                new_texts: texts.clone(),
                note: note.clone(),
            };
            let r = k.supersede_todo(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::supersede_receipt(&r, style))
        }
    }
}

async fn gate(cli: &Cli, k: &DynKernel, cmd: &GateCommand, style: Style) -> Result<Rendered> {
    match cmd {
        GateCommand::Ask {
            question,
            blocks,
            kind,
            until,
            check,
            every,
            timeout,
            pr,
            required_checks,
            acting,
        } => {
            let kind = GateKind::asked(&GateAsked {
                kind,
                until: until.as_deref().map(|u| loopx_core::time::parse_when(u, k.now())).transpose()?,
                check: check.as_deref(),
                every: every.as_deref(),
                timeout,
                pr: pr.as_deref(),
                required: required_checks,
            })?;
            let question = match question {
                Some(q) => q.clone(),
                None if !kind.is_person() => format!("waiting for {}", kind.describe()),
                None => {
                    return Err(Error::usage("a person's gate asks a question")
                        .with_hint("pass --question \"…\" (or --kind timer|command|ci|pr-merged for a check loopx makes)"));
                }
            };
            let req = AskGate { question, blocks: GateBlocks::parse(blocks)?, kind };
            let r = k.ask_gate(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::gate_receipt("asked", &r, style))
        }
        GateCommand::Poll { gate_id } => {
            let only = gate_id.as_deref().map(str::parse).transpose()?;
            let ctx = CommandContext {
                goal: goal_arg(cli)?,
                session: cli.session.clone(),
                ..CommandContext::default()
            };
            let p = k.poll_gates(&ctx, only).await?;
            Rendered::new(&p, text::gate_poll(&p))
        }
        GateCommand::List { all } => {
            let l = k.list_gates(goal_arg(cli)?.as_ref(), *all).await?;
            Rendered::new(&l, text::gate_list(&l))
        }
        GateCommand::Answer { gate_id, approve, reject, cancel, note, acting } => {
            let status = match (approve, reject, cancel) {
                (true, _, _) => GateStatus::Approved,
                (_, true, _) => GateStatus::Rejected,
                (_, _, true) => GateStatus::Cancelled,
                _ => {
                    return Err(Error::usage("say the answer: --approve, --reject or --cancel")
                        .with_hint(format!("loopx gate answer {gate_id} --approve")));
                }
            };
            let req = AnswerGate { gate: gate_id.parse()?, status, note: note.clone() };
            let ctx = crate::person::signed(cli, k, context(cli, acting)?).await?;
            let r = k.answer_gate(&ctx, req).await?;
            Rendered::new(&r, text::gate_receipt(status.as_str(), &r, style))
        }
    }
}

/// The quota a spend receipt shows: the one its command left, or (for a replayed receipt,
/// which does not keep it) the quota now.
async fn spent_quota(cli: &Cli, k: &DynKernel, r: &Receipt<SpendBody>) -> Result<QuotaView> {
    match &r.body.quota {
        Some(q) => Ok(q.clone()),
        None => Ok(k.quota_status(goal_arg(cli)?.as_ref()).await?.quota),
    }
}

async fn quota(cli: &Cli, k: &DynKernel, cmd: &QuotaCommand, style: Style) -> Result<Rendered> {
    match cmd {
        QuotaCommand::ShouldRun { runtime_profile, acting } => {
            let profile = runtime_profile
                .as_deref()
                .map(|p| RuntimeProfile::new(&p.trim().to_ascii_lowercase()))
                .transpose()?;
            let a = k.should_run(&turn_context(cli, acting)?, profile).await?;
            Rendered::new(&next::should_run_json(&a)?, text::should_run(&a, style))
        }
        QuotaCommand::SpendSlot { todo_id: id, slots, tokens, usd, dry_run, execute: _, acting } => {
            let req = SpendSlot {
                todo: todo_id(id)?,
                slots: *slots,
                tokens: *tokens,
                usd: *usd,
                dry_run: *dry_run,
            };
            let r = k.spend_slot(&turn_context(cli, acting)?, req).await?;
            let q = spent_quota(cli, k, &r).await?;
            Rendered::new(&r, text::spend_receipt(&r, &q))
        }
        QuotaCommand::VoidSlot { spend_id, reason, acting } => {
            let req = VoidSlot { spend: spend_id.parse::<SpendId>()?, reason: reason.clone() };
            let ctx = crate::person::signed(cli, k, context(cli, acting)?).await?;
            let r = k.void_slot(&ctx, req).await?;
            let q = spent_quota(cli, k, &r).await?;
            Rendered::new(&r, text::spend_receipt(&r, &q))
        }
        QuotaCommand::Status => {
            let q = k.quota_status(goal_arg(cli)?.as_ref()).await?;
            Rendered::new(&q, text::quota_status(&q, style))
        }
        QuotaCommand::SchedulerAck { cadence_minutes, rrule, acting } => {
            let req =
                SchedulerReport { cadence_minutes: *cadence_minutes, rrule: rrule.clone(), error: None };
            let r = k.scheduler_report(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::scheduler_receipt(&r))
        }
        QuotaCommand::SchedulerFail { error, acting } => {
            let req = SchedulerReport { cadence_minutes: None, rrule: None, error: Some(error.clone()) };
            let r = k.scheduler_report(&context(cli, acting)?, req).await?;
            Rendered::new(&r, text::scheduler_receipt(&r))
        }
    }
}

async fn lease(cli: &Cli, k: &DynKernel, cmd: &LeaseCommand) -> Result<Rendered> {
    let (args, op) = match cmd {
        LeaseCommand::Show { todo_id: id } => {
            let b = k.show_lease(goal_arg(cli)?.as_ref(), todo_id(id)?).await?;
            return Rendered::new(&b, text::lease(&b, None));
        }
        LeaseCommand::Acquire { lease, ttl, write_scope } => (
            lease,
            LeaseOp::Acquire {
                ttl_secs: loopx_core::time::parse_duration(ttl)?.as_secs(),
                write_scope: write_scope.clone(),
            },
        ),
        LeaseCommand::Renew { lease, ttl } => {
            (lease, LeaseOp::Renew { ttl_secs: loopx_core::time::parse_duration(ttl)?.as_secs() })
        }
        LeaseCommand::Transfer { lease, to_agent } => {
            (lease, LeaseOp::Transfer { to: AgentId::new(to_agent)? })
        }
        LeaseCommand::Release { lease } => (lease, LeaseOp::Release),
    };
    let key = args.idempotency_key.as_deref().map(IdempotencyKey::new).transpose()?;
    let req = LeaseRequest {
        todo: todo_id(&args.todo_id)?,
        op,
        key: key.map(|k| k.as_str().to_owned()),
        expected_version: args.expected_version,
    };
    let ctx = CommandContext {
        goal: goal_arg(cli)?,
        agent: args.agent_id.as_deref().map(AgentId::new).transpose()?,
        key: None,
        session: cli.session.clone(),
        signer: None,
    };
    let r = k.lease(&ctx, req).await?;
    Rendered::new(&r, text::lease(&r.body, Some((r.changed, r.replayed))))
}
