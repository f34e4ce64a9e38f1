//! The command line, as clap sees it. Values that name ids, priorities and kinds are taken as
//! strings here and validated by core, so every bad value gets the same error with a hint.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use loopx_core::model::{Brakes, QuotaPolicy};
use loopx_hostkit::identity::Driven;

/// The most turns `loopx drive --max-turns` runs.
pub const MAX_TURNS: u64 = 1_000_000;

/// The parser of a number a person types: anything outside `lo..=hi` is refused, naming the
/// range (clap names the flag), a number too large for its type as much as one too large for
/// loopx, so a 309-digit budget is an error and not a budget.
fn within<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy + Send + Sync + 'static,
{
    move |s: &str| match s.trim().parse::<T>() {
        Ok(n) if lo <= n && n <= hi => Ok(n),
        _ => Err(format!("must be between {lo} and {hi}")),
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "loopx",
    version,
    about = "A local-first control plane for long-running coding agents",
    long_about = "loopx keeps what must survive a turn boundary (objective, todos, claims, evidence, \
                  run history) in .loopx/ and answers, every turn, \"should this agent run now, and on what?\".\n\n\
                  Keep the loop moving. Keep the judgment human.",
    after_help = "Exit codes: 0 ok · 1 refused by a rule · 2 usage error · 3 busy (retry) · 4 state integrity error · 70 internal error",
    propagate_version = true
)]
pub struct Cli {
    /// The project directory (holding .loopx/); default: the nearest one above the working directory
    #[arg(long, global = true, env = "LOOPX_PROJECT", value_name = "DIR", help_heading = "Global options")]
    pub project: Option<PathBuf>,
    /// The goal to act on; default: the project's default goal (in a turn of `loopx drive`, the driver's)
    #[arg(long, global = true, env = "LOOPX_GOAL_ID", value_name = "GOAL", help_heading = "Global options")]
    pub goal_id: Option<String>,
    /// Print one JSON document on stdout
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// Colour in text output (NO_COLOR set and not empty turns it off, CLICOLOR_FORCE on)
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = ColorChoice::Auto,
        value_name = "WHEN",
        help_heading = "Global options"
    )]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
    /// The host session whose tool environment this runs in (from the environment, not argv).
    #[arg(skip)]
    pub session: Option<loopx_core::kernel::BindThread>,
    /// The turn of `loopx drive` this runs in, if it does (from the environment, not argv).
    #[arg(skip)]
    pub driven: Option<Driven>,
    /// The process above that made this command an agent's, as a refusal names it.
    #[arg(skip)]
    pub told_by: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

// Every subcommand enum is `#[command(defer = true)]`: a subcommand's arguments (and its own
// subcommands) are built only when it is the one invoked, so a process does not build the whole
// command tree to run one command (`--version` ran 1.5 M instructions with it built).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Create .loopx/ here (or reuse it) and, with --goal-id/--objective, a first goal
    #[command(visible_alias = "connect")]
    Init(InitArgs),
    /// Create, list, show and change goals
    #[command(subcommand)]
    Goal(GoalCommand),
    /// Register and list the agents working a goal
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Add, claim, update and complete todos
    #[command(subcommand)]
    Todo(TodoCommand),
    /// Record and list the proof of progress
    #[command(subcommand)]
    Evidence(EvidenceCommand),
    /// Time-bounded rights to act on a todo: acquire, renew, transfer, release, show
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// The objective, what needs you, what is next, and what proves progress
    Status(StatusArgs),
    /// The projects `status --all` looks into: add, remove, list (kept in your configuration directory)
    #[command(subcommand)]
    Projects(ProjectsCommand),
    /// Questions for a person and waits loopx checks itself (time, command, CI): ask, poll, list, answer
    #[command(subcommand)]
    Gate(GateCommand),
    /// Should this agent run now, and on what? Spend, void and quota status
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// Write back what a turn did (the writeback a spend needs)
    RefreshState(RefreshArgs),
    /// The goal's latest events
    History(HistoryArgs),
    /// What the goal's time went to: agents working, waiting on a person or CI, paused, idle; turns, interventions, proof; with a timeline and a burn-up
    Report(ReportArgs),
    /// Verify the event log, the archive, the snapshot and GOAL.md (and, with --repair, mend what can be)
    Doctor(DoctorArgs),
    /// Serve the tick to a host over stdio (Model Context Protocol)
    Mcp(McpArgs),
    /// A local web dashboard: what needs you across projects, each goal's todos, questions, quota and proof; answer from the page
    Serve(ServeArgs),
    /// Answer a host's hook in the host's own protocol (installed hooks call this)
    Hook(HookArgs),
    /// Install, remove and check loopx's wiring into a host (see loopx host list)
    #[command(subcommand)]
    Host(HostCommand),
    /// Where the project keeps its state, and moving it (to a shared PostgreSQL database, or back)
    #[command(subcommand)]
    Store(StoreCommand),
    /// Strict mode: your person key, which signs your decisions on a goal (init, show)
    #[command(subcommand)]
    Person(PersonCommand),
    /// The commands loopx runs for the goal (validations, command gates, the notify command): who wrote each, and approving one
    #[command(name = "command", subcommand)]
    Commands(CommandsCommand),
    /// Join the goal as this host session's own agent (run by the agent, from its shell tool)
    Join(JoinArgs),
    /// The prompt to paste into a host surface: a Codex App heartbeat, a Codex CLI /goal
    HeartbeatPrompt(PromptArgs),
    /// Hand your todos to another host or agent (or cancel or list handoffs)
    Handoff(HandoffArgs),
    /// Take over the handoff waiting for a host: what was done, what is left, then the work
    Resume(ResumeArgs),
    /// Run an agent CLI turn after turn, each decided by loopx, with no host window open
    #[command(after_help = "Examples:\n  \
        loopx drive --host claude-code -- claude -p --permission-mode acceptEdits\n  \
        loopx drive --host codex -- codex exec --sandbox workspace-write -\n  \
        loopx drive --agent-id bot --host other --until idle -- ./my-agent.sh\n\n\
        Each turn's agent command runs in the project directory, in a process group of its own, with \
        LOOPX_AGENT_ID, LOOPX_GOAL_ID, LOOPX_TURN_ID, LOOPX_TODO_ID and LOOPX_PROJECT set: the loopx \
        commands it runs act as that agent on that turn. With --json, one JSON object a line (an \
        event: started, turn_started, turn_ended, sleeping, backoff, finishing, note, exited) on \
        stdout. Exit codes: 0 finished, idle, handed off, \
        budget spent or a limit reached · 1 refused (another driver runs the agent, the command \
        failed --max-failures turns in a row) · 130 Ctrl-C · 143 terminated")]
    Drive(DriveArgs),
    /// Run a scripted goal with two agents on two hosts, a person, a gate and a handoff
    Demo(DemoArgs),
    /// Bring goals over from another tool's state (LoopX, the Python tool), nothing lost
    #[command(subcommand)]
    Import(ImportCommand),
    /// Print the shell completion script: `source <(loopx completions bash)`
    Completions {
        /// bash, zsh, fish, powershell or elvish
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct HandoffArgs {
    #[command(subcommand)]
    pub command: Option<HandoffCommand>,
    #[command(flatten)]
    pub offer: OfferArgs,
}

#[derive(Debug, Args)]
pub struct OfferArgs {
    /// The receiving host, as an agent type: claude-code, codex-cli, codex-app, cursor, …
    #[arg(long, value_name = "HOST", required = true)]
    pub to_host: Option<String>,
    /// One agent of that host (registered or not); default: whichever takes it first
    #[arg(long, value_name = "AGENT")]
    pub to_agent: Option<String>,
    /// A todo to hand over (repeatable); default: every open todo you hold
    #[arg(long = "todo-id", value_name = "ID")]
    pub todos: Vec<String>,
    /// What the receiver should know: where you stopped, what to try next
    #[arg(long)]
    pub note: Option<String>,
    /// How long it waits to be taken over before its todos are open again
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub ttl: String,
    #[command(flatten)]
    pub acting: Acting,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum HandoffCommand {
    /// Withdraw a pending handoff (its sender or a person); the todos go back to the sender
    Cancel {
        /// The handoff to withdraw (h1, …)
        #[arg(long, value_name = "ID")]
        handoff_id: String,
        /// Why, for the history
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Pending handoffs (every one with --all)
    List {
        /// Accepted, cancelled and expired handoffs too
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The receiving host, as an agent type (claude-code, codex-cli, …)
    #[arg(long, value_name = "HOST")]
    pub host: String,
    /// This handoff; default: the oldest waiting for the receiver
    #[arg(long, value_name = "ID")]
    pub handoff_id: Option<String>,
    #[command(flatten)]
    pub acting: Acting,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ImportCommand {
    /// A LoopX (Python, 0.4.x) project: its goals, agents, todos, gates, evidence, quota and spends
    #[command(name = "loopx-py")]
    LoopxPy(ImportPyArgs),
}

#[derive(Debug, Args)]
pub struct ImportPyArgs {
    /// The directory holding the Python project's .loopx/registry.json (default: here); the
    /// goals go to the loopx project there (or --project), made if there is none
    pub dir: Option<PathBuf>,
    /// Print what would be imported and what would not, and change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Import a goal whose id is taken by another loopx goal as <id>-py instead of refusing
    #[arg(long)]
    pub rename: bool,
}

#[derive(Debug, Args)]
pub struct DriveArgs {
    /// The agent to drive (registered if new); default: the goal's only agent of the host's type, or a new one
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
    #[arg(long, value_name = "HOST", help = crate::registry::drive_hosts_help())]
    pub host: Option<String>,
    /// Give the turn's prompt as the command's last argument instead of on its stdin
    #[arg(long)]
    pub prompt_arg: bool,
    /// Kill the turn's whole process group after this long
    #[arg(long, default_value = "30m", value_name = "DURATION")]
    pub turn_timeout: String,
    /// Stop after this many turns (1 to 1000000)
    #[arg(long, value_name = "N", value_parser = within(1u64, MAX_TURNS))]
    pub max_turns: Option<u64>,
    /// `idle`: exit when there is nothing to run instead of sleeping until there is
    #[arg(long, value_enum, value_name = "WHEN")]
    pub until: Option<DriveUntil>,
    /// One turn (or one decision that is not a turn), then exit
    #[arg(long)]
    pub once: bool,
    /// Continue the host's session from turn to turn (fresh after --session-turns, or a failed turn)
    #[arg(long)]
    pub resume_session: bool,
    /// Turns one session may continue for, with --resume-session
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = within(1u32, 1000))]
    pub session_turns: u32,
    /// Stop after this many failed turns in a row
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = within(1u32, 1000))]
    pub max_failures: u32,
    /// A line of the command's output (stdout or stderr) that says its own quota or rate
    /// limit ended the turn (a regular expression; a group named `secs` gives the seconds
    /// until it resets, one named `epoch` the Unix time): the turn is recorded as limited and
    /// the driver waits, not failed
    #[arg(long, value_name = "REGEX")]
    pub limit_pattern: Option<String>,
    /// Another host to hand the work to while this one is limited, as HOST=COMMAND (e.g.
    /// 'codex=codex exec --sandbox workspace-write -'); the work comes back at the first todo
    /// boundary after the reset
    #[arg(long, value_name = "HOST=COMMAND")]
    pub fallback: Option<String>,
    /// The agent the fallback host drives (default: the goal's only agent of its type, or a
    /// new one)
    #[arg(long, value_name = "AGENT", requires = "fallback")]
    pub fallback_agent_id: Option<String>,
    /// Keep the work on the fallback host after the first one's reset
    #[arg(long, requires = "fallback")]
    pub stay: bool,
    /// How long the driver's lease on its agent lasts unrenewed (a driver killed with -9 on
    /// another machine frees the agent after this long)
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    pub lease: String,
    /// The agent command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DriveUntil {
    Idle,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the demo's project (and print where it is) instead of removing it
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The task to add (or `status`, or `off` to disarm the session's loop)
    pub task: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The surface: codex-app (a heartbeat automation) or codex-cli (a /goal line)
    #[arg(long)]
    pub host: String,
    /// The agent the prompt works as
    #[arg(long, value_name = "AGENT")]
    pub agent_id: String,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The first goal's objective (needed to create a goal)
    #[arg(long)]
    pub objective: Option<String>,
    /// A short title for the goal
    #[arg(long)]
    pub title: Option<String>,
    /// Start a second project inside the one this directory belongs to
    #[arg(long)]
    pub nested: bool,
    /// Keep the project's state in this PostgreSQL database (postgres://user@host:port/db),
    /// shared with every project that points there; the password is never written, it comes
    /// from the URL in LOOPX_STORE_URL, PGPASSWORD or ~/.pgpass
    #[arg(long, env = "LOOPX_STORE_URL", value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,
    /// The project's name inside the database (projects with the same name share their goals)
    #[arg(long, value_name = "NAME", default_value = "default", requires = "store")]
    pub store_project: String,
}

/// Who acts, and whether the call is a replayable turn.
#[derive(Debug, Args, Default)]
pub struct Acting {
    /// The acting agent (required once two agents are registered; `user` for a person)
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
    /// Apply this mutation at most once; a replay returns the first receipt
    #[arg(long, visible_alias = "idempotency-key", value_name = "ID")]
    pub turn_instance_id: Option<String>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing would only obscure clap's derive
pub enum GoalCommand {
    /// Create a goal (--goal-id names it)
    Create {
        /// What the goal is for, in a sentence
        #[arg(long)]
        objective: String,
        /// A short name
        #[arg(long)]
        title: Option<String>,
        /// Make it the project's default goal
        #[arg(long)]
        default: bool,
    },
    /// List the project's goals
    List,
    /// Show one goal
    Show,
    /// Change the objective or title, or make the goal the default
    Set {
        /// What the goal is for, in a sentence
        #[arg(long)]
        objective: Option<String>,
        /// A short name
        #[arg(long)]
        title: Option<String>,
        /// Make it the project's default goal
        #[arg(long)]
        default: bool,
        /// soft_claim, or hard_lease: completion and claim changes need the active lease
        #[arg(long, value_name = "MODE")]
        handoff_mode: Option<String>,
        /// A path glob agents may edit (repeatable; replaces the goal's scope): src/**, *.md
        #[arg(long = "write-scope", value_name = "GLOB")]
        write_scope: Vec<String>,
        /// Let agents edit anywhere again
        #[arg(long, conflicts_with = "write_scope")]
        clear_write_scope: bool,
        #[command(flatten)]
        quota: QuotaArgs,
        #[command(flatten)]
        notify: NotifyArgs,
        #[command(flatten)]
        brakes: BrakesArgs,
        #[command(flatten)]
        acting: Acting,
    },
    /// Stop the goal for every agent
    Stop {
        /// Why, for the history and for the agents
        #[arg(long)]
        reason: Option<String>,
        /// End a running `loopx drive` turn at once (its whole process group), instead of
        /// letting it finish
        #[arg(long)]
        now: bool,
        #[command(flatten)]
        acting: Acting,
    },
    /// Resume a stopped goal, or reopen a completed one
    Resume {
        #[command(flatten)]
        acting: Acting,
    },
    /// Confirm the goal's objective is met: its status becomes done and agents stop
    Complete {
        /// What was met, for the history
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum AgentCommand {
    /// Register an agent on the goal (additive: never removes another)
    Register {
        /// The agent's id (letters, digits, - and _)
        #[arg(long, value_name = "AGENT")]
        agent_id: String,
        /// One of `loopx agent types` (aliases accepted)
        #[arg(long, value_name = "TYPE")]
        agent_type: String,
        /// Refuse if the id is already registered
        #[arg(long)]
        require_new: bool,
    },
    /// List the goal's agents
    List,
    /// List the agent types loopx knows
    Types,
    /// The steps that activate loopx for an agent type (claude-code, codex-cli, codex-app, …)
    Onboard {
        /// The kind of agent: claude-code, codex, cursor, …
        #[arg(long, value_name = "TYPE")]
        agent_type: String,
    },
    /// Bind a host session (thread) to an agent: one agent per session
    BindThread {
        /// The agent the thread acts as
        #[arg(long, value_name = "AGENT")]
        agent_id: String,
        /// The host, e.g. claude-code
        #[arg(long)]
        host: String,
        /// The host's session or thread id
        #[arg(long, value_name = "ID")]
        thread: String,
    },
    /// Unbind a host session from its agent (a person, or the agent itself)
    UnbindThread {
        /// The agent the session is bound to
        #[arg(long, value_name = "AGENT")]
        agent_id: String,
        /// The host, e.g. claude-code
        #[arg(long)]
        host: String,
        /// The host's session or thread id
        #[arg(long, value_name = "ID")]
        thread: String,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum TodoCommand {
    /// Add a todo
    Add {
        /// What to do; `-` reads it from stdin
        #[arg(long)]
        text: String,
        /// P0 (most urgent) to P4
        #[arg(long, default_value = "P2")]
        priority: String,
        /// agent, or user for work only a person does
        #[arg(long, default_value = "agent")]
        role: String,
        /// advance, monitor or blocker (`--task-class user_gate` with `--role user` asks a goal-wide gate)
        #[arg(long, visible_alias = "task-class", default_value = "advance")]
        class: String,
        /// Runnable only once this gate is approved
        #[arg(long, value_name = "GATE")]
        after_gate: Option<String>,
        /// A check loopx runs itself before accepting completion (argv, no shell)
        #[arg(long, value_name = "COMMAND")]
        validation_command: Option<String>,
        /// How long the validation command may run
        #[arg(long, default_value = "10m", value_name = "DURATION")]
        validation_timeout: String,
        /// A path glob the todo needs to write (repeatable)
        #[arg(long = "scope", value_name = "GLOB")]
        scopes: Vec<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// List todos (open, blocked and deferred unless --status or --all)
    List {
        /// Only this status (repeatable): open, claimed (open and held), blocked, deferred, done, superseded
        #[arg(long = "status", value_name = "STATUS")]
        statuses: Vec<String>,
        /// Every todo, closed ones too
        #[arg(long)]
        all: bool,
        /// Only todos for this role
        #[arg(long)]
        role: Option<String>,
        /// Only todos this agent holds
        #[arg(long, value_name = "AGENT")]
        claimed_by: Option<String>,
    },
    /// Show one todo with its notes and evidence
    Show {
        /// The todo (t1, …)
        #[arg(long, value_name = "ID")]
        todo_id: String,
    },
    /// Select the agent's next todo and claim it, in one step
    ClaimNext {
        #[command(flatten)]
        acting: Acting,
    },
    /// Claim an open todo for an agent (exactly one claimer wins)
    Claim {
        /// The todo (t1, …)
        #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
        todo_id: String,
        #[command(flatten)]
        acting: Acting,
    },
    /// Change a todo, or add a note or evidence to it
    Update(UpdateArgs),
    /// Complete a todo with evidence, or with --no-follow-up --note
    Complete(CompleteArgs),
    /// Close a todo in favour of replacements
    Supersede {
        /// The todo to supersede (t1, …)
        #[arg(long, value_name = "ID")]
        todo_id: String,
        /// An existing replacement todo (repeatable)
        #[arg(long, value_name = "ID")]
        by: Vec<String>,
        /// Create a replacement todo with this text (repeatable)
        #[arg(long)]
        text: Vec<String>,
        /// Why, for the history
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Give up a claim
    Release {
        /// The todo (t1, …)
        #[arg(long, value_name = "ID")]
        todo_id: String,
        #[command(flatten)]
        acting: Acting,
    },
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The todo (t1, …)
    #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
    pub todo_id: String,
    /// New text
    #[arg(long)]
    pub text: Option<String>,
    /// New priority: P0 (most urgent) to P4
    #[arg(long)]
    pub priority: Option<String>,
    /// open, blocked or deferred (done only through `todo complete`)
    #[arg(long)]
    pub status: Option<String>,
    /// For deferred todos: todo:<id>, time:<RFC 3339> or gate:<id>
    #[arg(long, value_name = "WHEN")]
    pub resume_when: Option<String>,
    /// Drop the todo's claim
    #[arg(long)]
    pub clear_claim: bool,
    /// A note for the history
    #[arg(long)]
    pub note: Option<String>,
    /// Attach evidence with this summary
    #[arg(long, value_name = "SUMMARY")]
    pub evidence: Option<String>,
    /// The kind of --evidence
    #[arg(long, default_value = "note", value_name = "KIND")]
    pub evidence_kind: String,
    /// Hand the claim to this agent (with --takeover-reason): by the owner, or once the owner's lease expired
    #[arg(long, value_name = "AGENT", requires = "takeover_reason")]
    pub claimed_by: Option<String>,
    /// Why the claim changes hands (recorded)
    #[arg(long, requires = "claimed_by")]
    pub takeover_reason: Option<String>,
    #[command(flatten)]
    pub acting: Acting,
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The todo (t1, …)
    #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
    pub todo_id: String,
    /// What proves the todo is done
    #[arg(long, value_name = "SUMMARY")]
    pub evidence: Option<String>,
    /// The kind of --evidence: command, test, link, note, artifact
    #[arg(long, default_value = "note", value_name = "KIND")]
    pub evidence_kind: String,
    /// Nothing follows from this todo (with --note or evidence)
    #[arg(long)]
    pub no_follow_up: bool,
    /// A note for the history
    #[arg(long)]
    pub note: Option<String>,
    /// Create this successor todo and link it
    #[arg(long, value_name = "TEXT")]
    pub next_todo: Option<String>,
    #[command(flatten)]
    pub acting: Acting,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum EvidenceCommand {
    /// Attach evidence to a todo
    Add {
        /// The todo the evidence is for (t1, …)
        #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
        todo_id: String,
        /// command, test, link, note or artifact
        #[arg(long)]
        kind: String,
        /// What it shows, in a line
        #[arg(long)]
        summary: String,
        /// The command that was run (split like a shell would, never run)
        #[arg(long)]
        command: Option<String>,
        /// The exit code of the command the evidence is from
        #[arg(long, allow_negative_numbers = true, value_parser = within(i32::MIN, i32::MAX))]
        exit_code: Option<i32>,
        /// Where to see it: a URL or a path
        #[arg(long)]
        link: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// List evidence, for one todo or all
    List {
        /// Only evidence for this todo
        #[arg(long, value_name = "ID")]
        todo_id: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Report from this time: RFC 3339 (2026-11-29T18:00:00Z) or a duration ago (7d, 12h)
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Report up to this time (RFC 3339 or a duration ago); later events are not read
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Print the report as Markdown, to paste into a pull request or a post (not with --json)
    #[arg(long)]
    pub markdown: bool,
    /// Also write the timeline and the burn-up as one SVG picture to FILE, a regular file or a
    /// new one (`-`: print it on stdout instead of the report)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write the picture as PNG to FILE (`-`: on stdout); needs rsvg-convert, or Chromium, on PATH
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// How many of the latest (matching) events to show (1 to 10000)
    #[arg(long, default_value_t = 20, value_parser = within(1usize, 10_000))]
    pub limit: usize,
    /// Only what this agent did, or what names it
    #[arg(long = "agent", value_name = "AGENT")]
    pub agent: Option<String>,
    /// Only what happened to this todo
    #[arg(long = "todo", value_name = "ID")]
    pub todo: Option<String>,
    /// Only what happened in this turn (with the path of its output log, for a driven turn)
    #[arg(long = "turn", value_name = "TURN")]
    pub turn: Option<String>,
}

/// How the person is told that a gate needs them.
#[derive(Debug, Args, Default)]
pub struct NotifyArgs {
    /// POST each new gate for a person (and a reminder) here: an http(s) URL, or env:NAME
    #[arg(long, value_name = "URL")]
    pub notify_webhook: Option<String>,
    /// The webhook's JSON: generic, slack or feishu
    #[arg(long, value_name = "FORMAT")]
    pub notify_format: Option<String>,
    /// Also run this (argv, no shell) with the message as its last argument, e.g. notify-send loopx
    #[arg(long, value_name = "COMMAND")]
    pub notify_command: Option<String>,
    /// Remind once if the gate is still open this long after the notice
    #[arg(long, value_name = "DURATION")]
    pub notify_reminder: Option<String>,
    /// Tell nobody any more
    #[arg(long, conflicts_with_all = ["notify_webhook", "notify_command"])]
    pub clear_notify: bool,
}

impl NotifyArgs {
    pub fn is_empty(&self) -> bool {
        self.notify_webhook.is_none()
            && self.notify_format.is_none()
            && self.notify_command.is_none()
            && self.notify_reminder.is_none()
            && !self.clear_notify
    }
}

/// How `loopx drive` brakes an unattended loop.
#[derive(Debug, Args, Default)]
pub struct BrakesArgs {
    /// Ask the person about a todo after this many driven turns in a row that changed nothing
    /// that counts (default 3; 0: never)
    #[arg(long, value_name = "N", value_parser = within(0u32, Brakes::MAX_TURN_SETTING))]
    pub stall_turns: Option<u32>,
    /// Ask the person after this many driven turns on one todo (0: no cap)
    #[arg(long, value_name = "N", value_parser = within(0u32, Brakes::MAX_TURN_SETTING))]
    pub todo_turn_cap: Option<u32>,
    /// Ask the person after this many driven turns of the goal in an hour (0: no cap; at most 60)
    #[arg(long, value_name = "N", value_parser = within(0u32, Brakes::MAX_HOURLY_CAP))]
    pub hourly_turn_cap: Option<u32>,
    /// The longest a driver waits on a host's quota or rate limit (default 12h; 0 or off: it
    /// never waits)
    #[arg(long, value_name = "DURATION")]
    pub host_wait: Option<String>,
    /// Whether a driver may hand the work to its next host while one is limited: on or off
    #[arg(long, value_name = "on|off")]
    pub failover: Option<String>,
}

impl BrakesArgs {
    pub fn is_empty(&self) -> bool {
        self.stall_turns.is_none()
            && self.todo_turn_cap.is_none()
            && self.hourly_turn_cap.is_none()
            && self.host_wait.is_none()
            && self.failover.is_none()
    }

    /// The settings given, read.
    pub fn brakes(&self) -> loopx_core::Result<loopx_core::model::Brakes> {
        let host_wait_secs = match self.host_wait.as_deref() {
            None => None,
            Some("off" | "0") => Some(0),
            Some(d) => Some(loopx_core::time::parse_duration(d)?.as_secs()),
        };
        let failover = match self.failover.as_deref() {
            None => None,
            Some("on") => Some(true),
            Some("off") => Some(false),
            Some(other) => {
                return Err(loopx_core::Error::usage(format!(
                    "--failover is on or off, not {}",
                    loopx_core::ids::quote_input(other)
                ))
                .with_hint("e.g. --failover off"));
            }
        };
        Ok(loopx_core::model::Brakes {
            stall_turns: self.stall_turns,
            todo_turn_cap: self.todo_turn_cap,
            hourly_turn_cap: self.hourly_turn_cap,
            host_wait_secs,
            failover,
        })
    }
}

#[derive(Debug, Args, Default)]
pub struct QuotaArgs {
    /// Share of the window the goal may use, 0 to 1 (0 pauses it for everyone)
    #[arg(long, allow_negative_numbers = true, value_parser = within(0.0, 1.0))]
    pub compute: Option<f64>,
    /// Length of the rolling window, 1 to 168 hours
    #[arg(long, value_parser = within(1u32, QuotaPolicy::MAX_WINDOW_HOURS))]
    pub window_hours: Option<u32>,
    /// Minutes of compute one slot stands for (1 to 1440)
    #[arg(long, value_parser = within(1u32, QuotaPolicy::MAX_SLOT_MINUTES))]
    pub slot_minutes: Option<u32>,
    /// Slots allowed in the window, 0 to 10080 (default: window * 60 / slot minutes * compute)
    #[arg(long, value_parser = within(0u32, QuotaPolicy::MAX_ALLOWED_SLOTS))]
    pub allowed_slots: Option<u32>,
    /// Hard budget in tokens, up to a trillion; exhausted stops the goal
    #[arg(long, allow_negative_numbers = true, value_parser = within(0u64, QuotaPolicy::MAX_BUDGET_TOKENS))]
    pub budget_tokens: Option<u64>,
    /// Hard budget in US dollars, up to a million; exhausted stops the goal
    #[arg(long, allow_negative_numbers = true, value_parser = within(0.0, QuotaPolicy::MAX_BUDGET_USD))]
    pub budget_usd: Option<f64>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum GateCommand {
    /// Ask a person a question, or wait on a check loopx makes itself; --blocks says what it holds back
    Ask {
        /// The question (for a person's gate; the others say what they wait for by default)
        #[arg(long)]
        question: Option<String>,
        /// goal (every agent), agent:<id> (one agent) or todos:<id>,<id> (only those todos)
        #[arg(long, value_name = "MODE")]
        blocks: String,
        /// person (default), timer, command, ci or pr-merged
        #[arg(long, default_value = "person", value_name = "KIND")]
        kind: String,
        /// timer: until this time (RFC 3339, or +2h from now)
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// command: the check (argv, no shell) that must exit 0
        #[arg(long, value_name = "COMMAND")]
        check: Option<String>,
        /// command, ci, pr-merged: how often loopx checks
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
        /// command: how long one check may run
        #[arg(long, default_value = "5m", value_name = "DURATION")]
        timeout: String,
        /// ci, pr-merged: the pull request, owner/repo#N
        #[arg(long, value_name = "PR")]
        pr: Option<String>,
        /// ci: the checks that must pass (comma-separated; default: every check)
        #[arg(long, value_name = "NAMES", value_delimiter = ',')]
        required_checks: Vec<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Check the gates loopx answers itself that are due (or one, now), and tell the person
    /// about theirs
    Poll {
        /// Check this gate now (default: every gate that is due)
        #[arg(long, value_name = "ID")]
        gate_id: Option<String>,
    },
    /// List open gates (all with --all)
    List {
        /// Answered, rejected and cancelled gates too
        #[arg(long)]
        all: bool,
    },
    /// Answer a gate (people only)
    Answer {
        /// The gate, e.g. g1
        gate_id: String,
        /// Approve: the work it holds back may go on
        #[arg(long, group = "answer")]
        approve: bool,
        /// Reject: the work it holds back stays held
        #[arg(long, group = "answer")]
        reject: bool,
        /// Withdraw the question
        #[arg(long, group = "answer")]
        cancel: bool,
        /// A note for the agents
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum QuotaCommand {
    /// The decision for this agent's next turn (run, ask_user, wait, replan, stop)
    ShouldRun {
        /// How the host drives turns: a host's cadence, as `loopx agent types` lists its hosts (claude_loop, codex_heartbeat, codex_goal, cursor_manual, manual, generic)
        #[arg(long, value_name = "PROFILE")]
        runtime_profile: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Account compute for a turn that was written back (refresh-state first)
    SpendSlot {
        /// The todo the compute was spent on (t1, …)
        #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
        todo_id: String,
        /// How many slots
        #[arg(long, default_value_t = 1, value_parser = within(1u32, QuotaPolicy::MAX_ALLOWED_SLOTS))]
        slots: u32,
        /// Tokens the host reports for the turn
        #[arg(long, allow_negative_numbers = true, value_parser = within(0u64, QuotaPolicy::MAX_BUDGET_TOKENS))]
        tokens: Option<u64>,
        /// Money the host reports for the turn, in US dollars
        #[arg(long, allow_negative_numbers = true, value_parser = within(0.0, QuotaPolicy::MAX_BUDGET_USD))]
        usd: Option<f64>,
        /// Check and preview; commit nothing
        #[arg(long, conflicts_with = "execute")]
        dry_run: bool,
        /// Commit (the default; accepted for compatibility)
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        acting: Acting,
    },
    /// Compensate a spend (nothing is deleted)
    VoidSlot {
        /// The spend to void (s1, …)
        #[arg(long, value_name = "ID")]
        spend_id: String,
        /// Why, for the history
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Slots used and allowed, budget, recent spends
    Status,
    /// Record the cadence the host's scheduler applied
    SchedulerAck {
        /// The interval the host now runs at, in minutes (1 to 1440)
        #[arg(long, value_parser = within(1u32, 1440))]
        cadence_minutes: Option<u32>,
        /// The RRULE the host now runs on (Codex App)
        #[arg(long)]
        rrule: Option<String>,
        #[command(flatten)]
        acting: Acting,
    },
    /// Record that the host could not apply the scheduler hint
    SchedulerFail {
        /// What the host said
        #[arg(long)]
        error: String,
        #[command(flatten)]
        acting: Acting,
    },
}

#[derive(Debug, Args)]
pub struct RefreshArgs {
    /// The todo (t1, …)
    #[arg(long, value_name = "ID", env = "LOOPX_TODO_ID")]
    pub todo_id: String,
    /// One word for the kind of work: implement, review, research, fix, …
    #[arg(long)]
    pub classification: String,
    /// surface_only, outcome_gap, outcome_progress or goal_outcome
    #[arg(long)]
    pub delivery_outcome: String,
    /// What the next turn should do
    #[arg(long)]
    pub next_action: Option<String>,
    #[command(flatten)]
    pub acting: Acting,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Keep each log's valid prefix, move the rest aside into a dated file, rebuild snapshots
    /// and GOAL.md; nothing is deleted
    #[arg(long)]
    pub repair: bool,
}

/// Who holds the lease, and the key and version it is presented with.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The todo the lease is on (t1, …)
    #[arg(long, value_name = "ID")]
    pub todo_id: String,
    /// The agent holding the lease (default: the session's agent)
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
    /// The lease key: chosen on acquire, presented on renew, transfer and release
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Compare-and-set: act only if the lease is at this version
    #[arg(long, value_name = "N")]
    pub expected_version: Option<u64>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum LeaseCommand {
    /// Take a lease on a todo (and claim it)
    Acquire {
        #[command(flatten)]
        lease: LeaseArgs,
        /// How long it lasts
        #[arg(long, default_value = "45m", value_name = "DURATION")]
        ttl: String,
        /// A path glob the holder may write (repeatable); active leases never overlap
        #[arg(long = "write-scope", value_name = "GLOB")]
        write_scope: Vec<String>,
    },
    /// Extend your lease
    Renew {
        #[command(flatten)]
        lease: LeaseArgs,
        /// How long the renewed lease lasts (e.g. 45m, 2h)
        #[arg(long, default_value = "45m", value_name = "DURATION")]
        ttl: String,
    },
    /// Hand your lease (and the claim) to another agent
    Transfer {
        #[command(flatten)]
        lease: LeaseArgs,
        /// The agent the lease goes to
        #[arg(long, value_name = "AGENT")]
        to_agent: String,
    },
    /// Give up your lease
    Release {
        #[command(flatten)]
        lease: LeaseArgs,
    },
    /// Show a todo's lease
    Show {
        /// The todo (t1, …)
        #[arg(long, value_name = "ID")]
        todo_id: String,
    },
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Act as this agent in every call (a call naming another agent is refused)
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The port on 127.0.0.1 to listen on (0: any free port); never another address
    #[arg(long, default_value_t = 7450, value_parser = within(0u16, u16::MAX))]
    pub port: u16,
    /// Open the dashboard in the default browser once it listens
    #[arg(long)]
    pub open: bool,
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// The host (see loopx host list)
    pub host: String,
    /// The hook event, in the host's terms (claude-code: session-start, user-prompt-submit,
    /// pre-tool-use, stop, statusline)
    pub event: String,
    /// The agent the host's sessions act as, for a host installed with one (Cursor)
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScopeArg {
    Project,
    User,
}

/// The optional parts of an install; each host takes the ones it has (see loopx host list).
#[derive(Debug, Args)]
pub struct InstallFlags {
    /// An optional part to install, as the host declares it (repeatable; see loopx host list): stop-driver, harden, statusline, hooks, trust-hooks, mcp
    #[arg(long = "with", value_name = "FEATURE")]
    pub with: Vec<String>,
    /// Same as --with stop-driver: keep an armed session working while loopx says run (a stop hook; fails open)
    #[arg(long)]
    pub stop_driver: bool,
    /// Same as --with harden: a tool gate that denies a person's commands to the agent always, and mutating tools while loopx says not to run (fails closed)
    #[arg(long)]
    pub harden: bool,
    /// Same as --with statusline: show loopx's state in the host's status line
    #[arg(long)]
    pub statusline: bool,
    /// Same as --with hooks: the host's hooks calling loopx, where they are optional
    #[arg(long)]
    pub with_hooks: bool,
    /// Same as --with trust-hooks: mark loopx's hooks trusted in the host's config (a trust decision made for you)
    #[arg(long)]
    pub trust_hooks: bool,
    /// Same as --with mcp: loopx's MCP server in the host's config, where it is optional
    #[arg(long)]
    pub with_mcp: bool,
    /// For a host whose sessions cannot be told apart: the agent they all act as
    #[arg(long, value_name = "AGENT")]
    pub agent_id: Option<String>,
}

#[derive(Debug, Args, Default)]
pub struct StatusArgs {
    /// Every goal of every indexed project that needs a person, most urgent first (see loopx projects)
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ProjectsCommand {
    /// Add a project to the index (the one DIR is in; default: this one)
    Add {
        /// A directory in the project
        dir: Option<PathBuf>,
    },
    /// Remove a project from the index (its files are not touched)
    Remove {
        /// The project's directory (default: this one)
        dir: Option<PathBuf>,
    },
    /// The indexed projects, and whether each opens
    List,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum PersonCommand {
    /// Make your person key (or use the one you have) and put the goal in strict mode under it
    #[command(
        after_help = "The key is Ed25519; its secret half is sealed with a passphrase asked on the terminal         (never from stdin or an argument) and kept in your configuration directory (person.json), never in the         project. The goal records its public half; from then on loopx commits a person's decision on the goal         (goal set, stop, resume, quota void-slot, gate answer) only signed by it: the command asks for the         passphrase, the dashboard asks on its page. An agent that reads every file you can read still cannot         approve. Keep a backup of the key file: without it, the goal takes no decision of yours."
    )]
    Init,
    /// Your person key here, and whether the goal is in strict mode
    Show,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum CommandsCommand {
    /// Every command the goal names, its argv quoted exactly, who wrote it, and whether this machine runs it
    List,
    /// Approve one command (exactly as it is now) for this project on this machine: a person's decision
    #[command(
        after_help = "A command a person writes on this machine runs for anyone; one an agent writes runs only         in that agent's own context (its completion, its should-run); one that came with the project (a cloned         .loopx/) runs for nobody. Approving it lets loopx run it for everyone, in this project, on this machine.         A changed command is another command: it needs approving again."
    )]
    Approve(ApproveArgs),
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ApproveArgs {
    /// The validation command of this todo
    #[arg(long, value_name = "ID")]
    pub todo_id: Option<String>,
    /// The check of this command gate
    #[arg(long, value_name = "ID")]
    pub gate_id: Option<String>,
    /// The goal's notify command
    #[arg(long)]
    pub notify: bool,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum StoreCommand {
    /// Where the project's state is kept, and its goals
    Show,
    /// Copy every goal into another store, verify it there, and point the project at it
    Migrate {
        /// postgres://user@host:port/database, or `file` for this project's .loopx/
        #[arg(long, value_name = "URL|file")]
        to: String,
        /// The project's name inside the database (projects with the same name share their goals)
        #[arg(long, value_name = "NAME", default_value = "default")]
        store_project: String,
        /// Say what would be copied; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Trust the database this project's project.json names, on this machine (loopx connects to
    /// a database only once its person trusted it for the project)
    Trust {
        /// No longer trust it
        #[arg(long)]
        revoke: bool,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum HostCommand {
    /// The hosts loopx can wire into, and whether each is installed here
    List,
    /// Whether a host is on this machine, and its version
    Detect {
        #[arg(help = crate::registry::hosts_help())]
        host: String,
    },
    /// Install the host's commands, hooks and MCP server (a plan; --dry-run shows it)
    Install {
        #[arg(help = crate::registry::hosts_help())]
        host: String,
        /// project (this project's files) or user (your home's)
        #[arg(long, value_enum, default_value_t = ScopeArg::Project)]
        scope: ScopeArg,
        #[command(flatten)]
        options: InstallFlags,
        /// Print the plan; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove exactly what loopx installed, giving the user's bytes back
    Uninstall {
        #[arg(help = crate::registry::hosts_help())]
        host: String,
        /// project or user, as installed
        #[arg(long, value_enum, default_value_t = ScopeArg::Project)]
        scope: ScopeArg,
        /// Print the plan; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Check the host's wiring
    Doctor {
        #[arg(help = crate::registry::hosts_help())]
        host: String,
        /// project or user, as installed (default: where loopx is installed, the project first)
        #[arg(long, value_enum)]
        scope: Option<ScopeArg>,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command and every flag says what it is for in `--help` (and so in the man pages).
    #[test]
    fn every_command_and_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && cmd.get_name() != "help" {
                missing.push(path.clone());
            }
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                    missing.push(format!("{path} --{}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "without help text:\n{}", missing.join("\n"));
    }

    /// Every next step the kernel can name renders (`loopx_hostkit::next`) as a command line
    /// this very definition parses, quoted where it needs quoting.
    #[test]
    fn every_step_renders_a_command_that_parses() {
        use clap::Parser;
        use loopx_core::next::{NextStep, StepContext};
        use loopx_core::{AgentId, GoalId};
        use loopx_hostkit::next::{argv, command, tool_call};

        let goal = GoalId::new("main").unwrap();
        let agent = AgentId::new("claude-1").unwrap();
        let contexts = [
            StepContext { goal: Some(&goal), agent: Some(&agent), turn: Some("turn 8") },
            StepContext { goal: None, agent: None, turn: None },
        ];
        for c in &contexts {
            for step in NextStep::examples() {
                let line = command(&step, c);
                let words = shell_words::split(&line).unwrap();
                assert_eq!(words, argv(&step, c), "{line} quotes what needs quoting");
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{step:?} renders {line:?}, which loopx does not parse:\n{e}");
                }
                assert!(
                    tool_call(&step, c).is_some()
                        || matches!(step, NextStep::RefreshState { .. } | NextStep::SpendSlot { .. })
                );
            }
        }
    }
}
