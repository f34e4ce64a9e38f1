//! Host adapters: the host-neutral vocabulary every adapter speaks, and the [`HostAdapter`]
//! trait each one implements.
//!
//! An adapter binds one host product (Claude Code, Codex, Cursor) to the kernel. It is mostly
//! declarations: which files to install (an [`InstallSpec`]: whole text files with a managed
//! marker, or our entries in the host's JSON or TOML), how the host's hook stdin reads as a
//! [`HostEvent`], and how a [`HookReply`] is written back in the host's protocol. The kernel
//! owns everything else: applying install specs (with a manifest, so uninstall gives the user's
//! bytes back), and the hook driver (session → agent binding, arming, the stop cap, fail-open
//! and fail-closed answers, the tool gate's policy).

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{AgentType, HostType};
use crate::decision::ShouldRunAnswer;
use crate::error::{Error, Result};
use crate::ids::{AgentId, GoalId};

/// The marker every whole file loopx installs carries. A file of the same name without it
/// belongs to the user and is never written over.
pub const MARKER: &str = "loopx:managed v1";

/// Where an adapter installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallScope {
    /// Files in the project (the default).
    Project,
    /// Files in the user's home; explicit only.
    User,
}

impl InstallScope {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallScope::Project => "project",
            InstallScope::User => "user",
        }
    }
}

/// The directory a managed path is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Base {
    /// The project root (the directory holding `.loopx/`).
    Project,
    /// The user's home directory.
    Home,
    /// The host's own configuration directory (Codex: `$CODEX_HOME`, by default `~/.codex`),
    /// as the adapter resolves it.
    HostHome,
}

/// The directories managed paths are relative to, resolved for one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    pub project: PathBuf,
    pub home: PathBuf,
    /// The host's configuration directory, when the adapter has one.
    pub host_home: Option<PathBuf>,
}

impl Roots {
    /// The absolute path of `p`. A path under a host home the adapter did not resolve falls
    /// back to the home directory (never the working directory).
    pub fn abs(&self, p: &HostPath) -> PathBuf {
        let base = match p.base {
            Base::Project => &self.project,
            Base::Home => &self.home,
            Base::HostHome => self.host_home.as_ref().unwrap_or(&self.home),
        };
        p.rel.split('/').filter(|c| !c.is_empty()).fold(base.clone(), |acc, c| acc.join(c))
    }
}

/// What an adapter may look at while it plans an install: where things are, and the current
/// text of a file (so entries that name a file's path or position can be computed). Reading
/// through `read` is the adapter's only access to the disk.
#[derive(Clone, Copy)]
pub struct InstallEnv<'a> {
    pub roots: &'a Roots,
    pub read: &'a dyn Fn(&HostPath) -> Option<String>,
}

impl fmt::Debug for InstallEnv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstallEnv").field("roots", self.roots).finish_non_exhaustive()
    }
}

/// A path an adapter manages: relative to the project or the home directory, so a moved
/// project still uninstalls cleanly. Always `/`-separated, never absolute, never `..`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawHostPath")]
pub struct HostPath {
    pub base: Base,
    pub rel: String,
}

#[derive(Deserialize)]
struct RawHostPath {
    base: Base,
    rel: String,
}

impl TryFrom<RawHostPath> for HostPath {
    type Error = Error;
    fn try_from(r: RawHostPath) -> Result<Self> {
        if r.rel.is_empty() {
            return Ok(HostPath::root(r.base));
        }
        HostPath::new(r.base, &r.rel)
    }
}

impl HostPath {
    /// Validates `rel`: non-empty, relative, `/`-separated, with no `.` or `..` component.
    pub fn new(base: Base, rel: &str) -> Result<Self> {
        let bad = rel.is_empty()
            || rel.starts_with('/')
            || rel.contains('\\')
            || rel.contains(':')
            || rel.split('/').any(|c| c.is_empty() || c == "." || c == "..");
        if bad {
            return Err(Error::internal(format!("managed path {rel:?} is not a plain relative path")));
        }
        Ok(Self { base, rel: rel.to_owned() })
    }
    /// The base directory itself (a host home an install had to create).
    pub fn root(base: Base) -> Self {
        Self { base, rel: String::new() }
    }
    pub fn project(rel: &str) -> Result<Self> {
        Self::new(Base::Project, rel)
    }
    pub fn home(rel: &str) -> Result<Self> {
        Self::new(Base::Home, rel)
    }
    pub fn host_home(rel: &str) -> Result<Self> {
        Self::new(Base::HostHome, rel)
    }
    /// The path under `scope`'s base: the project for project scope, home for user scope.
    pub fn in_scope(scope: InstallScope, rel: &str) -> Result<Self> {
        match scope {
            InstallScope::Project => Self::project(rel),
            InstallScope::User => Self::home(rel),
        }
    }
    /// The parent directories, nearest last (`a/b/c.json` → `a`, `a/b`).
    pub fn ancestors(&self) -> Vec<HostPath> {
        let parts: Vec<&str> = self.rel.split('/').collect();
        (1..parts.len()).map(|n| HostPath { base: self.base, rel: parts[..n].join("/") }).collect()
    }
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base {
            Base::Project => f.write_str(&self.rel),
            Base::Home => write!(f, "~/{}", self.rel),
            Base::HostHome => write!(f, "<host home>/{}", self.rel),
        }
    }
}

/// An optional part of an install, asked for on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// A stop hook that keeps an armed session working while loopx says run (fails open).
    StopDriver,
    /// A tool gate that denies mutating tools while loopx says not to run (fails closed).
    Harden,
    /// loopx's state in the host's status line.
    Statusline,
    /// The host's hooks calling loopx (where hooks are optional).
    Hooks,
    /// Marking loopx's hooks trusted in the host's config: a trust decision made on the
    /// user's behalf, so only on request and said plainly.
    TrustHooks,
    /// loopx's MCP server in the host's config (where it is optional).
    Mcp,
}

impl Feature {
    pub const ALL: [Feature; 6] = [
        Feature::StopDriver,
        Feature::Harden,
        Feature::Statusline,
        Feature::Hooks,
        Feature::TrustHooks,
        Feature::Mcp,
    ];
    /// Its name in `loopx host install --with NAME` (`stop-driver`).
    pub fn name(self) -> &'static str {
        match self {
            Feature::StopDriver => "stop-driver",
            Feature::Harden => "harden",
            Feature::Statusline => "statusline",
            Feature::Hooks => "hooks",
            Feature::TrustHooks => "trust-hooks",
            Feature::Mcp => "mcp",
        }
    }

    /// The feature `--with NAME` asks for, if `adapter` declares it; otherwise a usage error
    /// listing the ones it does.
    pub fn parse_for(name: &str, adapter: &dyn HostAdapter) -> Result<Feature> {
        let declared = adapter.capabilities().features;
        let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
        let choices = || declared.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
        match Feature::ALL.into_iter().find(|f| f.name() == wanted) {
            Some(f) if declared.contains(&f) => Ok(f),
            Some(f) => Err(Error::usage(format!("{} has no {} to install", adapter.host(), f.name()))
                .with_hint(format!("{} installs with: {}", adapter.host(), choices()))),
            None => Err(Error::usage(format!("no install feature {}", crate::ids::quote_input(name)))
                .with_hint(format!("{} installs with: {}", adapter.host(), choices()))),
        }
    }

    /// The older flag that asks for it (`--stop-driver`), kept as an alias of `--with NAME`.
    pub fn flag(self) -> &'static str {
        match self {
            Feature::StopDriver => "--stop-driver",
            Feature::Harden => "--harden",
            Feature::Statusline => "--statusline",
            Feature::Hooks => "--with-hooks",
            Feature::TrustHooks => "--trust-hooks",
            Feature::Mcp => "--with-mcp",
        }
    }
}

/// What to install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallOptions {
    pub scope: InstallScope,
    pub features: BTreeSet<Feature>,
    /// How installed hooks and templates call loopx (`loopx`, or an absolute path).
    pub loopx: String,
    /// The goal named in templates that name one.
    pub goal: GoalId,
    /// The agent every session of the host acts as, for a host whose sessions loopx cannot
    /// bind one by one (see [`AdapterCapabilities::install_agent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
}

/// A project-scope install with no optional part, calling `loopx` on `PATH`, for goal `main`.
impl Default for InstallOptions {
    fn default() -> Self {
        InstallOptions {
            scope: InstallScope::Project,
            features: BTreeSet::new(),
            loopx: "loopx".to_owned(),
            goal: GoalId::main(),
            agent: None,
        }
    }
}

impl InstallOptions {
    pub fn has(&self, f: Feature) -> bool {
        self.features.contains(&f)
    }
}

/// One entry of ours in a host's structured file, at a key path from the document root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub at: Vec<String>,
    #[serde(flatten)]
    pub op: EntryOp,
}

/// How an entry sits in its container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", content = "value", rename_all = "snake_case")]
pub enum EntryOp {
    /// The key at `at` is ours and holds this value. A key the user holds with another value
    /// is refused, never replaced.
    Set(Value),
    /// This value is one element of the array at `at`; the element is ours.
    Push(Value),
    /// The array at `at` contains this value; it is ours only if loopx added it.
    Ensure(Value),
}

impl Entry {
    pub fn set(at: &[&str], value: Value) -> Self {
        Self { at: at.iter().map(|s| (*s).to_owned()).collect(), op: EntryOp::Set(value) }
    }
    pub fn push(at: &[&str], value: Value) -> Self {
        Self { at: at.iter().map(|s| (*s).to_owned()).collect(), op: EntryOp::Push(value) }
    }
    pub fn ensure(at: &[&str], value: Value) -> Self {
        Self { at: at.iter().map(|s| (*s).to_owned()).collect(), op: EntryOp::Ensure(value) }
    }
}

/// The format of a host file loopx keeps entries in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Json,
    /// JSON with comments (`//`, `/* */`) and trailing commas, as the host reads it: edited by
    /// its bytes only, so the user's comments and layout stay.
    Jsonc,
    Toml,
}

/// One file an adapter manages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ManagedFile {
    /// A whole text file of ours (Markdown, or YAML front matter); `content` carries
    /// [`MARKER`]. A file of that name without the marker is the user's and is skipped.
    Text { path: HostPath, content: String },
    /// Our entries in a host's JSON or TOML file; the user's entries are never touched.
    Entries { path: HostPath, format: Format, entries: Vec<Entry> },
}

impl ManagedFile {
    pub fn path(&self) -> &HostPath {
        match self {
            ManagedFile::Text { path, .. } | ManagedFile::Entries { path, .. } => path,
        }
    }
}

/// What an adapter wants installed for some options. Declarative: the kernel compares it with
/// the files on disk and its manifest, and works out the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallSpec {
    pub files: Vec<ManagedFile>,
}

/// What happens to one file in a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    Create,
    Update,
    Remove,
    Unchanged,
    /// Left alone, with the reason (for example: the user owns a file of that name).
    Skipped,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            FileOp::Create => "create",
            FileOp::Update => "update",
            FileOp::Remove => "remove",
            FileOp::Unchanged => "unchanged",
            FileOp::Skipped => "skipped",
        }
    }
}

/// One line of a plan, as `--dry-run` and `--json` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedFile {
    pub op: FileOp,
    pub path: HostPath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The moments a host lets loopx speak, host-neutral.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookPoint {
    /// A session starts or resumes: loopx may add context.
    SessionStart,
    /// The person submitted a prompt: loopx handles its entry command, or passes.
    PromptSubmit,
    /// A tool is about to run: loopx may deny it. Fails closed.
    ToolGate,
    /// The model is about to stop: loopx may give it its next instruction. Fails open.
    Stop,
    /// The host asks for a status line.
    StatusLine,
}

impl HookPoint {
    pub const ALL: [HookPoint; 5] = [
        HookPoint::SessionStart,
        HookPoint::PromptSubmit,
        HookPoint::ToolGate,
        HookPoint::Stop,
        HookPoint::StatusLine,
    ];
}

/// What a tool call would do, as far as a gate cares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", content = "detail", rename_all = "snake_case")]
pub enum ToolEffect {
    /// Reads only. Never gated.
    ReadOnly,
    /// Writes these paths (as the host gave them: absolute, or relative to the session's cwd).
    Edits(Vec<String>),
    /// Runs a shell command.
    Shell(String),
    /// Anything else that may change the world (an MCP tool of another server, a notebook).
    Other,
}

/// A tool call's input, which must be a JSON object: a gate that cannot read what a tool will
/// do denies it (`Err`), never lets it through.
pub fn tool_input<'a>(tool: &str, input: Option<&'a Value>) -> Result<&'a serde_json::Map<String, Value>> {
    input.and_then(Value::as_object).ok_or_else(|| {
        Error::usage(format!("the {tool:?} tool call's tool_input is not a JSON object"))
            .with_hint("a host sends tool_input as an object of the tool's arguments")
    })
}

/// The string `key` of a tool call's input (see [`tool_input`]); missing or not a string is an
/// error.
pub fn tool_input_str(tool: &str, input: Option<&Value>, key: &str) -> Result<String> {
    tool_input(tool, input)?.get(key).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| {
        Error::usage(format!("the {tool:?} tool call's tool_input has no string {key:?}"))
            .with_hint("a host sends the tool's arguments as they are documented")
    })
}

/// What happened in the host, host-neutral.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEventKind {
    SessionStart,
    PromptSubmitted { prompt: String },
    ToolCall { tool: String, effect: ToolEffect },
    Stop,
    StatusLine,
}

/// A hook invocation, decoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEvent {
    /// The host's session (thread) id; empty when the host gave none.
    pub session: String,
    /// The directory the session works in, when the host says.
    pub cwd: Option<PathBuf>,
    #[serde(flatten)]
    pub kind: HostEventKind,
}

/// What loopx answers a hook, host-neutral; the adapter writes it in the host's protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", content = "text", rename_all = "snake_case")]
pub enum HookReply {
    /// Nothing to say: the host goes on as it would have.
    Pass,
    /// Context for the model (session start, prompt submit).
    Context(String),
    /// Keep working, with this as the next instruction (stop).
    Continue(String),
    /// Refuse the tool call, telling the model why (tool gate).
    Deny(String),
    /// One line for the status line.
    Status(String),
}

/// The host-protocol answer to print: stdout, stderr and an exit code. The default is no
/// answer at all (nothing printed, exit 0): the event goes on as it would have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAnswer {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

impl HostAnswer {
    /// `stdout` printed, exit 0.
    pub fn print(stdout: impl Into<String>) -> Self {
        HostAnswer { stdout: stdout.into(), ..HostAnswer::default() }
    }

    /// A warning that blocks nothing: exit 1 with the message on stderr, what most hosts take
    /// as a failed hook to show, short of the exit code 2 that blocks.
    pub fn warning(message: &str) -> Self {
        HostAnswer { stdout: String::new(), stderr: message.to_owned(), exit_code: 1 }
    }
}

/// What a hook printed, for a host's answer oracle: `Ok(None)` when stdout is empty (nothing
/// to read, whatever the exit code the host does not block on), else the JSON on stdout. An
/// error says how the host would misread the answer: an exit code it `blocks` on, stdout beside
/// a non-zero exit (which hosts ignore), or stdout that is not JSON.
pub fn printed_json(a: &HostAnswer, blocks: fn(i32) -> bool) -> std::result::Result<Option<Value>, String> {
    if blocks(a.exit_code) {
        return Err(format!("exit code {} blocks", a.exit_code));
    }
    if a.stdout.is_empty() {
        return Ok(None);
    }
    if a.exit_code != 0 {
        return Err("stdout is ignored on a non-zero exit".to_owned());
    }
    serde_json::from_str(&a.stdout).map(Some).map_err(|e| format!("stdout is not JSON ({e})"))
}

/// A gate hook's tool call: the tool it names (a gate cannot pass what it cannot name: no name
/// is a usage error) and what `effect` reads the call as doing.
pub fn tool_call(
    event: &str,
    tool: Option<&str>,
    input: Option<&serde_json::Value>,
    effect: fn(&str, Option<&serde_json::Value>) -> Result<ToolEffect>,
) -> Result<HostEventKind> {
    let tool = tool.filter(|t| !t.is_empty()).ok_or_else(|| {
        Error::usage(format!("a {event} hook input names no tool_name")).with_hint(HOOK_STDIN_HINT)
    })?;
    Ok(HostEventKind::ToolCall { effect: effect(tool, input)?, tool: tool.to_owned() })
}

/// Whether a host is installed on this machine, and which version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    pub path: Option<PathBuf>,
    pub version: Option<String>,
}

/// What an adapter can do: data, not guesses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterCapabilities {
    /// The hook points the host calls loopx at.
    pub hook_points: Vec<HookPoint>,
    /// The optional parts `install` accepts.
    pub features: Vec<Feature>,
    /// Scopes it installs into.
    pub scopes: Vec<InstallScope>,
    /// The host talks to loopx's MCP server.
    pub mcp: bool,
    /// The host's scheduler takes an RRULE.
    pub scheduler_rrule: bool,
    /// Longest prompt body the host accepts, if it has a limit.
    pub max_prompt_chars: Option<usize>,
    /// The host's sessions cannot be told apart where loopx needs it (its MCP server or shell
    /// sees no session): they act as one agent, named at install (`--agent-id`).
    pub install_agent: bool,
}

/// How a host marks the environment of the commands its agent runs (its shell tool, the MCP
/// servers it starts): a variable set there, and the variable naming the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolEnv {
    pub marker: &'static str,
    pub session: Option<&'static str>,
}

/// How the host's agent process is recognised in a process tree: a loopx command with it among
/// its ancestors is that agent's, whatever its own environment says (an agent can `unset` a
/// variable; it cannot change who started it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentProcess {
    /// Program names: the process's name or its `argv[0]`'s last component (`claude`).
    pub programs: &'static [&'static str],
    /// npm packages whose script a `node` (or `bun`) process runs as the host
    /// (`@anthropic-ai/claude-code`), found in the script's path.
    pub packages: &'static [&'static str],
}

impl AgentProcess {
    /// Whether a process with this name (`/proc/PID/comm`) and argv is the host's agent.
    pub fn matches(&self, name: &str, argv: &[String]) -> bool {
        let last = |w: &str| w.rsplit('/').next().unwrap_or(w).to_owned();
        let program = argv.first().map(|a| last(a)).unwrap_or_default();
        if self.programs.iter().any(|p| *p == name || *p == program) {
            return true;
        }
        // The script is the runtime's first word that is not an option of its own
        // (`node --max-old-space-size=… /usr/bin/gemini`): the package's, or a link named for
        // the program (npm's `.bin/gemini`).
        matches!(program.as_str(), "node" | "nodejs" | "bun")
            && argv.iter().skip(1).find(|w| !w.starts_with('-')).is_some_and(|script| {
                self.programs.contains(&last(script).as_str())
                    || self
                        .packages
                        .iter()
                        .any(|p| script.contains(&format!("/{p}/")) || script.starts_with(&format!("{p}/")))
            })
    }
}

/// A file a host writes into its own configuration directory by itself, always with the same
/// content (OpenCode's `.gitignore`): an uninstall that removes a directory loopx created removes
/// such a file there too, if it is unchanged; a changed one keeps the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFile {
    pub name: &'static str,
    pub content: &'static str,
}

/// What a prompt for a host surface is rendered for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptRequest {
    /// How the host's shell reaches loopx.
    pub loopx: String,
    pub goal: GoalId,
    pub agent: crate::ids::AgentId,
    pub project: PathBuf,
    pub objective: String,
}

/// Text a person pastes into a host: an automation's body, a `/goal` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostPrompt {
    /// A name for what it creates (an automation).
    pub name: String,
    /// The starting schedule, for a host whose scheduler takes an RRULE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rrule: Option<String>,
    pub body: String,
    pub chars: usize,
    pub max_chars: usize,
}

/// How a host's MCP client says which session a tool call comes from: its `clientInfo.name`
/// at `initialize`, and the key of `params._meta` on each call that holds the session id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpClient {
    pub name: &'static str,
    pub session_meta: &'static str,
}

/// Longest hook stdin accepted (a transcript excerpt can be large, but not this large).
pub const MAX_HOOK_STDIN: usize = 4 << 20;

/// What to do about hook input loopx cannot read.
pub const HOOK_STDIN_HINT: &str =
    "loopx hook reads the JSON the host writes to a hook's stdin; installed hooks pass it on as they get it";

/// Reads a hook's stdin as every host writes it: one JSON object, at most [`MAX_HOOK_STDIN`]
/// bytes, a leading UTF-8 byte-order mark dropped, into the host's own input type `T`
/// (fields it does not name are ignored). Empty, oversized, non-object or wrong-typed input is
/// a usage error, which the hook driver answers in the point's fail-open or fail-closed way.
pub fn parse_hook_stdin<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.len() > MAX_HOOK_STDIN {
        return Err(Error::usage(format!("hook input is {} bytes, more than {MAX_HOOK_STDIN}", bytes.len()))
            .with_hint(HOOK_STDIN_HINT));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::usage(format!("hook input is not JSON: {e}")).with_hint(HOOK_STDIN_HINT))?;
    if !v.is_object() {
        return Err(Error::usage("hook input is not a JSON object").with_hint(HOOK_STDIN_HINT));
    }
    serde_json::from_value(v).map_err(|e| {
        Error::usage(format!("hook input has a field of the wrong type: {e}")).with_hint(HOOK_STDIN_HINT)
    })
}

/// One sample of a hook's stdin, for the conformance suite: the event name on loopx's
/// command line, the stdin bytes, and the event it must decode to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSample {
    pub event: &'static str,
    pub stdin: String,
    pub expected: HostEvent,
}

/// How `loopx drive` runs one host's agent CLI for a turn: facts about its command line and
/// its output. The driver gives the turn's prompt on standard input, or as the last argument.
pub trait HostDriver: Send + Sync {
    /// The agent type a driven agent of this host registers as.
    fn agent_type(&self) -> AgentType;
    /// The command line of one turn: `argv` as the person gave it, with what loopx needs added
    /// (an output it can read, and the session `resume` continued, if any). `prompt_on_stdin`
    /// says where the prompt goes. Refuses an argv this host cannot run a turn with
    /// unattended, saying how to write it.
    fn turn_argv(&self, argv: &[String], resume: Option<&str>, prompt_on_stdin: bool) -> Result<Vec<String>>;
    /// Reads one line of the turn's standard output into `usage`: the session id, the tokens
    /// and the cost the host reports, and its own quota or rate limit when the line says the
    /// turn ended on one (`usage.limit`, with the reset when the line gives it).
    fn read_line(&self, line: &str, usage: &mut crate::drive::TurnUsage);
    /// After the turn's command ended: what only the host's own files tell of the turn (the
    /// reset of a limit that its output gives as text alone). `host_home` is the host's
    /// configuration directory on this machine. Reads, never writes. Default: nothing.
    fn after_turn(&self, host_home: Option<&std::path::Path>, usage: &mut crate::drive::TurnUsage) {
        let _ = (host_home, usage);
    }
}

/// What a host is and how it speaks, written once in its host crate (`loopx-host-<name>`): its
/// name and programs, how its processes are told apart, its hook events, reading a hook's stdin
/// and writing the answer, the oracle for its answers, and how `loopx drive` runs it. Facts
/// only: the host crate reads and parses; it runs nothing (finding the host on this machine is
/// the host platform's, `loopx_hostkit::detect`).
///
/// Every method is pure and cheap; the hook methods run on every hook invocation, so they must
/// not touch the disk or the network.
pub trait HostProtocol: Send + Sync + fmt::Debug {
    /// The host's name in `loopx host …` and `loopx hook <host> …` (`claude-code`).
    fn host(&self) -> &'static str;
    /// The commands a person starts the host with, looked for on `PATH` in this order.
    fn binaries(&self) -> &'static [&'static str];
    /// The environment variable a host sets to the project directory in hooks, if any.
    fn project_dir_env(&self) -> Option<&'static str> {
        None
    }
    /// How the host marks its agent's tool environment, if it does. A loopx command run there
    /// is that session's agent's, never a person's.
    fn tool_env(&self) -> Option<ToolEnv> {
        None
    }
    /// How the host's agent process looks in a process tree, if loopx can tell it: every
    /// command it starts, however deep, is an agent's.
    fn agent_process(&self) -> Option<AgentProcess> {
        None
    }
    /// Whether the host's hooks name the session but its tools (its shell, its MCP servers) do
    /// not, while both run under the same [`HostProtocol::agent_process`]: a hook then binds
    /// the session's agent to that process as well (`BindThread::process`), and a command
    /// under the process acts as that agent.
    fn sessions_by_process(&self) -> bool {
        false
    }
    /// How the host's MCP client names the calling session, when its servers cannot see the
    /// session in their environment.
    fn mcp_client(&self) -> Option<McpClient> {
        None
    }
    /// The host's configuration directory on this machine (`get` reads an environment
    /// variable), for [`Base::HostHome`] paths.
    fn host_home(&self, home: &std::path::Path, get: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        let _ = (home, get);
        None
    }
    /// The files the host writes by itself into a configuration directory loopx's install
    /// created (see [`HostFile`]).
    fn host_files(&self) -> &'static [HostFile] {
        &[]
    }

    /// The host's hook events, each with the hook point it is (its host crate's
    /// [`HookTable`]).
    fn hook_events(&self) -> Vec<HookEventName>;
    /// The hook point a `loopx hook <host> <event>` name stands for (the host's own name for
    /// the event is taken too). Unknown names are a usage error.
    fn hook_point(&self, event: &str) -> Result<HookPoint> {
        let events = self.hook_events();
        events.iter().find(|e| e.cli == event || e.native == event).map(|e| e.point).ok_or_else(|| {
            let names: Vec<&str> = events.iter().map(|e| e.cli).collect();
            Error::usage(format!("unknown {} hook event {event:?}", self.host()))
                .with_hint(format!("one of: {}", names.join(", ")))
        })
    }
    /// Parses a hook's stdin. Tolerates unknown fields; empty, oversized, non-object or
    /// wrong-typed input is an error the driver answers in the point's safe way.
    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent>;
    /// Writes `reply` in the host's protocol for `point`. A reply the point cannot carry (or a
    /// point the host has no event for) is no answer at all: the event goes on as it would have.
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer;
    /// Reports a failure of loopx itself at `point` (`None`: a hook loopx could not even name)
    /// without blocking the host (never an exit code the host treats as blocking). Default: a
    /// [`HostAnswer::warning`], exit 1 with the message on stderr.
    fn fail_open(&self, point: Option<HookPoint>, message: &str) -> HostAnswer {
        let _ = point;
        HostAnswer::warning(message)
    }
    /// How the model sees one of loopx's MCP tools (`mcp__loopx__should_run`).
    fn tool_name(&self, tool: &str) -> String;
    /// Fixture stdin for every hook point the host calls loopx at.
    fn samples(&self) -> Vec<HookSample>;
    /// Checks an answer against what the host accepts for `point`: the conformance suite's
    /// oracle for [`HostProtocol::encode`] and [`HostProtocol::fail_open`].
    fn check_answer(&self, point: Option<HookPoint>, answer: &HostAnswer) -> Result<()>;
    /// How `loopx drive --host <host>` runs this host's agent CLI, if it can.
    fn driver(&self) -> Option<&dyn HostDriver> {
        None
    }
}

/// One way of binding a host to the kernel: what to install, and what to tell the person and
/// the model, over the host's one [`HostProtocol`]. Implementations are registered in one place
/// (the CLI's adapter registry) and pass the adapter conformance suite (`loopx-testkit`).
///
/// Every method is pure and cheap.
pub trait HostAdapter: Send + Sync + fmt::Debug {
    /// The host's protocol, from its host crate.
    fn protocol(&self) -> &dyn HostProtocol;
    /// The host's name in `loopx host …` and `loopx hook <host> …` (`claude-code`).
    fn host(&self) -> &'static str {
        self.protocol().host()
    }
    /// The adapter's own name (`claude-code-slash`); names its install manifest.
    fn name(&self) -> &'static str;
    /// What this adapter supports; constant for an adapter.
    fn capabilities(&self) -> AdapterCapabilities;
    /// The host types this adapter serves, as the catalog lists them: each one's name,
    /// aliases, description and cadence. The first is the one its sessions register as.
    fn host_types(&self) -> Vec<HostType>;
    /// The agent type a session of this host registers as.
    fn agent_type(&self) -> AgentType {
        self.host_types().into_iter().next().map_or_else(AgentType::other, |t| t.name)
    }
    /// The prefix of the agent ids the hook driver gives this host's sessions (`claude`).
    fn agent_prefix(&self) -> &'static str;
    /// The prompt that joins the goal from inside the host (`/loopx`), if the host has one.
    fn entry_command(&self) -> Option<&'static str> {
        None
    }
    /// How installed hooks, plugins, skills, templates and rendered prompts call loopx, given
    /// this binary's absolute path: that very path. A host starts its hooks and servers with
    /// its own environment (an IDE started from a desktop, a service, a login shell that resets
    /// `PATH`), where a `loopx` on `PATH` may be missing or another one.
    fn loopx_command(&self, this_binary: &str) -> String {
        this_binary.to_owned()
    }
    /// Checks only the host can make of an install with `opts` (a hook the host will skip as
    /// untrusted, a project the host does not trust), as (name, ok, detail with the fix).
    fn doctor_checks(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Vec<(String, bool, String)> {
        let _ = (opts, env);
        Vec::new()
    }
    /// What the person still does in the host after an install with `opts` (enable a
    /// server, start a chat), in order; `host doctor` prints them as a numbered list.
    fn remaining_steps(&self, opts: &InstallOptions) -> Vec<String> {
        let _ = opts;
        Vec::new()
    }
    /// The surfaces of this host that take a pasted prompt (`app`, `cli`), if any.
    fn prompt_surfaces(&self) -> &'static [&'static str] {
        &[]
    }
    /// The prompt for `surface` (one of [`HostAdapter::prompt_surfaces`]).
    fn prompt(&self, surface: &str, req: &PromptRequest) -> Result<HostPrompt> {
        let _ = req;
        Err(Error::usage(format!("{} has no prompt surface {surface:?}", self.host()))
            .with_hint("see loopx host list for the hosts with a prompt to paste"))
    }
    /// The steps that activate loopx for an agent of `agent_type` through this host, if it
    /// serves that type.
    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        let _ = agent_type;
        None
    }
    /// How many times in a row the stop hook may keep one session going before loopx lets it
    /// stop anyway (`LOOPX_STOP_CAP` overrides it).
    fn default_stop_cap(&self) -> u32 {
        25
    }
    /// How a person installs the host itself.
    fn install_hint(&self) -> &'static str;
    /// One line telling the person what to do in the host after an install.
    fn after_install(&self) -> &'static str;
    /// How this host keeps turning once a session has joined (`Run /loop to keep turning.`).
    fn keep_turning(&self) -> &'static str;

    /// The files and entries to install for `opts`. Pure but for reading through `env`. A
    /// feature the adapter does not support is refused with a usage error naming it.
    fn install_plan(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Result<InstallSpec>;
    /// Everything this adapter may have installed in `scope`, used to clean up when the
    /// install manifest is gone.
    fn uninstall_plan(&self, scope: InstallScope, loopx: &str, env: &InstallEnv<'_>) -> Result<InstallSpec> {
        let caps = self.capabilities();
        let opts = InstallOptions {
            scope,
            features: caps.features.into_iter().collect(),
            loopx: loopx.to_owned(),
            ..InstallOptions::default()
        };
        self.install_plan(&opts, env)
    }

    /// The instruction that continues a session for a `run` or `replan` answer. `loopx` is how
    /// this host's shell reaches the loopx binary answering the hook.
    fn continuation_text(&self, answer: &ShouldRunAnswer, loopx: &str) -> String {
        let _ = loopx;
        crate::prose::continuation(answer, &|t| self.protocol().tool_name(t))
    }
}

/// One hook event of a host, declared: the host's own name for it (in its configuration and
/// on stdin), its name on loopx's command line (`loopx hook <host> <cli>`), and the hook point
/// it is. `E` is the host crate's own event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookBinding<E: 'static> {
    pub event: E,
    pub native: &'static str,
    pub cli: &'static str,
    pub point: HookPoint,
}

/// A host's hook events and the hook point each one is: the one table an event name is read by
/// and a hook point answered through, declared by each host crate.
#[derive(Clone, Copy, Debug)]
pub struct HookTable<E: 'static> {
    /// The host, as people know it (`Claude Code`).
    pub host: &'static str,
    pub events: &'static [HookBinding<E>],
}

/// A hook event's names and point, whatever the host's own event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HookEventName {
    pub native: &'static str,
    pub cli: &'static str,
    pub point: HookPoint,
}

impl<E: Copy + PartialEq + fmt::Debug> HookTable<E> {
    fn binding(&self, e: E) -> &'static HookBinding<E> {
        match self.events.iter().find(|b| b.event == e) {
            Some(b) => b,
            // Each host crate's tests check its table lists every event it has.
            None => unreachable!("{e:?} is missing from {}'s hook table", self.host),
        }
    }

    /// The event named `name`, as loopx's command line spells it or as the host does; anything
    /// else is refused with the names loopx takes.
    pub fn parse(&self, name: &str) -> Result<E> {
        self.events.iter().find(|b| b.cli == name || b.native == name).map(|b| b.event).ok_or_else(|| {
            let names: Vec<&str> = self.events.iter().map(|b| b.cli).collect();
            Error::usage(format!("unknown {} hook event {name:?}", self.host))
                .with_hint(format!("one of: {}", names.join(", ")))
        })
    }

    /// The event that answers `point`, or a usage error if the host has none.
    pub fn for_point(&self, point: HookPoint) -> Result<E> {
        self.events.iter().find(|b| b.point == point).map(|b| b.event).ok_or_else(|| {
            let names: Vec<&str> = self.events.iter().map(|b| b.cli).collect();
            Error::usage(format!("{} has no {point:?} hook loopx answers", self.host)).with_hint(format!(
                "{}'s hooks here: {}",
                self.host,
                names.join(", ")
            ))
        })
    }

    pub fn native(&self, e: E) -> &'static str {
        self.binding(e).native
    }

    pub fn cli(&self, e: E) -> &'static str {
        self.binding(e).cli
    }

    pub fn point(&self, e: E) -> HookPoint {
        self.binding(e).point
    }

    /// Checks the table is whole: a row for each of `all` (the host's every event), one event a
    /// hook point, each read back by either name. What each host crate's tests assert.
    pub fn check(&self, all: &[E]) -> std::result::Result<(), String> {
        if self.events.len() != all.len() {
            return Err(format!("{} rows for {} events", self.events.len(), all.len()));
        }
        for e in all {
            let b = self.events.iter().find(|b| b.event == *e).ok_or(format!("no row for {e:?}"))?;
            let back = (self.parse(b.cli).ok(), self.parse(b.native).ok(), self.for_point(b.point).ok());
            if back != (Some(*e), Some(*e), Some(*e)) {
                return Err(format!("{e:?} is not read back by its names and point: {back:?}"));
            }
        }
        Ok(())
    }

    /// Every event's names and point, for [`HostAdapter::hook_events`].
    pub fn names(&self) -> Vec<HookEventName> {
        self.events.iter().map(|b| HookEventName { native: b.native, cli: b.cli, point: b.point }).collect()
    }
}

/// Refuses what `install` is asked for that `adapter` does not support: an agent for a host
/// whose sessions join as their own, a scope, a feature.
pub fn unsupported_features(adapter: &dyn HostAdapter, opts: &InstallOptions) -> Result<()> {
    let caps = adapter.capabilities();
    if let (Some(a), false) = (&opts.agent, caps.install_agent) {
        return Err(Error::usage(format!(
            "{} sessions join as their own agents; --agent-id {a} does not apply",
            adapter.host()
        ))
        .with_hint(format!("loopx host install {} without --agent-id", adapter.host())));
    }
    if !caps.scopes.contains(&opts.scope) {
        return Err(Error::usage(format!(
            "{} does not install in {} scope",
            adapter.host(),
            opts.scope.as_str()
        ))
        .with_hint(format!(
            "use --scope {}",
            caps.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" or --scope ")
        )));
    }
    if let Some(f) = opts.features.iter().find(|f| !caps.features.contains(f)) {
        return Err(Error::usage(format!("{} has no {} to install", adapter.host(), f.name())).with_hint(
            format!("loopx host install {} without --with {} ({})", adapter.host(), f.name(), f.flag()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Input {
        session_id: String,
    }

    #[test]
    fn hook_stdin_is_one_bounded_json_object() {
        let read = |b: &[u8]| parse_hook_stdin::<Input>(b);
        assert_eq!(read(br#"{"session_id":"s","new_field":[1]}"#).unwrap().session_id, "s");
        assert_eq!(read(b"\xEF\xBB\xBF{\"session_id\":\"s\"}").unwrap().session_id, "s", "a byte-order mark");
        for bad in [&b""[..], b"not json", b"[1]", b"\"s\"", br#"{"session_id": 7}"#, b"\xEF\xBB\xBF"] {
            assert!(read(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let mut big = br#"{"session_id":"s","pad":""#.to_vec();
        big.resize(MAX_HOOK_STDIN, b'x');
        big.extend_from_slice(b"\"}");
        assert!(read(&big).unwrap_err().message.contains("more than"));
    }

    #[test]
    fn host_paths_are_plain_relative_paths() {
        assert!(HostPath::project(".claude/settings.json").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a\\b", "C:x"] {
            assert!(HostPath::project(bad).is_err(), "{bad:?}");
        }
        let p = HostPath::home(".codex/skills/loopx/SKILL.md").unwrap();
        assert_eq!(p.to_string(), "~/.codex/skills/loopx/SKILL.md");
        let up: Vec<String> = p.ancestors().iter().map(|a| a.rel.clone()).collect();
        assert_eq!(up, [".codex", ".codex/skills", ".codex/skills/loopx"]);
        let bad: std::result::Result<HostPath, _> =
            serde_json::from_str(r#"{"base":"project","rel":"../../etc/passwd"}"#);
        assert!(bad.is_err(), "a manifest cannot smuggle a path out");
    }

    #[test]
    fn entries_serialise_compactly() {
        let e = Entry::push(&["hooks", "Stop"], serde_json::json!({"x": 1}));
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"at":["hooks","Stop"],"op":"push","value":{"x":1}}"#
        );
        let back: Entry = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
