//! `loopx mcp`: a stdio MCP server (JSON-RPC 2.0, one message per line) exposing the tick to
//! any host: `should_run`, `status`, `claim_task`, `update_task`, `complete_task`, `ask_user`,
//! `add_evidence`. Tool answers are the same small JSON documents the CLI prints with
//! `--json`. The output it is handed (the CLI's stdout) carries only protocol messages; notes
//! go to the reporter (the CLI's stderr).
//!
//! The command line hands it what it knows and this crate may not: the store opener, the host
//! catalog and the adapters (whose MCP clients name their sessions).
//!
//! Errors never end the server: a refused tool call is a result with `isError: true` (and the
//! message and hint), a malformed message is a JSON-RPC error.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use loopx_core::agent::HostCatalog;
use loopx_core::host::{HostAdapter, McpClient};
use loopx_core::kernel::*;
use loopx_core::model::{DeliveryOutcome, EvidenceKind, GateBlocks, TodoStatus};
use loopx_core::{AgentId, Error, GoalId, IdempotencyKey, Result};
use loopx_kernel::{DynKernel, Reporter, StoreOpener, StoreOptions, find_root};

use crate::next;

/// Protocol revisions this server speaks, newest first.
const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the server was started with.
pub struct Server {
    pub start_dir: PathBuf,
    pub project: Option<PathBuf>,
    pub goal: Option<GoalId>,
    /// When set, every call acts as this agent, and a call naming another is refused.
    pub agent: Option<AgentId>,
    /// The agent the session's latest `should_run` (or its first call naming one) named: the
    /// calls that name none act as it, and a call other than `should_run` naming another is
    /// refused.
    pub named: std::sync::Mutex<Option<AgentId>>,
    /// The host session that started the server, if a host marked its environment: calls
    /// without an agent act as the agent bound to it.
    pub session: Option<BindThread>,
    pub options: StoreOptions,
    /// The providers gates are checked with, and the notifier.
    pub gates: loopx_kernel::gates::GateRuntime,
    pub clock: Arc<dyn loopx_core::Clock>,
    pub reporter: Arc<dyn Reporter>,
    /// Opens a project's store (the command line's opener knows every kind).
    pub open: StoreOpener,
    /// The host types the kernel paces agents by, and a handoff's host is resolved in.
    pub hosts: Arc<HostCatalog>,
    /// Every registered adapter: the one whose MCP client says hello is the calling host.
    pub adapters: &'static [&'static dyn HostAdapter],
    /// The host whose MCP client said hello (`clientInfo.name`), when it names the calling
    /// session on each call (`params._meta`) instead of in the server's environment.
    pub client: std::sync::OnceLock<(&'static str, McpClient)>,
    /// The kernel the last call used, kept for the next.
    pub kernel: KernelCache,
    /// The turn of `loopx drive` the server was started in, if it was: the turn of every call
    /// that binds one (a call naming another is refused).
    pub turn: Option<IdempotencyKey>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("start_dir", &self.start_dir)
            .field("project", &self.project)
            .field("goal", &self.goal)
            .field("agent", &self.agent)
            .field("session", &self.session)
            .field("turn", &self.turn)
            .finish_non_exhaustive()
    }
}

/// The kernel over the project the calls act on, opened once: a database store keeps its
/// connection across calls instead of opening one per call (and reconnects when it is lost).
#[derive(Default)]
pub struct KernelCache(std::sync::Mutex<Option<(PathBuf, Arc<DynKernel>)>>);

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelCache")
    }
}

/// Longest message line read; a longer one is answered with an error and skipped.
pub const MAX_LINE: usize = 4 << 20;

/// Reads one line of at most [`MAX_LINE`] bytes: `Ok(None)` at the end of the input,
/// `Err(n)` for a line of `n` bytes that was too long (and was read past, not kept).
fn read_line(input: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<Result<(), usize>>> {
    buf.clear();
    let mut total = 0usize;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if total == 0 {
                None
            } else if total > MAX_LINE {
                Some(Err(total))
            } else {
                Some(Ok(()))
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if total + take <= MAX_LINE + 1 {
            buf.extend_from_slice(&chunk[..take]);
        }
        total += take;
        input.consume(take);
        if done {
            return Ok(Some(if total > MAX_LINE + 1 { Err(total) } else { Ok(()) }));
        }
    }
}

/// Reads requests from `input` and answers on `output` until the input ends. A line that is
/// too long, not UTF-8 or not JSON gets a JSON-RPC error; the server keeps serving.
pub async fn serve(server: &Server, mut input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(read) = read_line(&mut input, &mut buf)? {
        let reply = match read {
            Err(n) => Some(rpc_error(
                Value::Null,
                -32600,
                &format!("message of {n} bytes is longer than {MAX_LINE}"),
            )),
            Ok(()) => match std::str::from_utf8(&buf) {
                Err(e) => Some(rpc_error(Value::Null, -32700, &format!("parse error: not UTF-8 ({e})"))),
                Ok(line) if line.trim().is_empty() => None,
                Ok(line) => server.handle_text(line).await,
            },
        };
        if let Some(reply) = reply {
            writeln!(output, "{reply}")?;
            output.flush()?;
        }
    }
    Ok(())
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The arguments of each tool: derived structs, so a misspelt or unknown argument is refused,
/// and the schemas are generated from the same structs. Every tool takes the acting agent's
/// own `agent_id` (a model guesses arguments by name, and one that worked on `should_run` must
/// work on the next call), refusing another's; only `should_run`'s schema lists it, as the
/// place the session's agent is named, so the list stays small (a schema does not forbid a
/// key it does not list). Field notes are `//`, not `///`: a doc
/// comment becomes a description in the schema, and every byte of `tools/list` sits in each
/// agent's context, so only arguments whose values are not plain from their name are
/// described, as the values' list.
mod tool_args {
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ShouldRun {
        // your registered agent id: the server's other calls act as it from then on
        pub agent_id: Option<String>,
        // this turn's id; repeats of a call with it change nothing
        pub turn_id: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Status {
        #[schemars(skip)]
        pub agent_id: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ClaimTask {
        #[schemars(skip)]
        pub agent_id: Option<String>,
        // todo id, e.g. t3 (without it: your next todo)
        pub todo_id: Option<String>,
        pub turn_id: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct UpdateTask {
        #[schemars(skip)]
        pub agent_id: Option<String>,
        pub todo_id: String,
        pub note: Option<String>,
        /// open|blocked|deferred
        pub status: Option<String>,
        // proof of progress, recorded as evidence
        pub evidence: Option<String>,
        /// test|command|link|note|artifact
        pub evidence_kind: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct CompleteTask {
        #[schemars(skip)]
        pub agent_id: Option<String>,
        pub todo_id: String,
        // this turn's id (required, but under loopx drive)
        pub turn_id: Option<String>,
        // what proves it done
        pub evidence: Option<String>,
        /// test|command|link|note|artifact
        pub evidence_kind: Option<String>,
        // nothing follows from this todo (needs a note)
        #[serde(default)]
        pub no_follow_up: bool,
        // why, when there is no evidence
        pub note: Option<String>,
        // the successor todo to create
        pub next_todo: Option<String>,
        /// outcome_progress|outcome_gap|surface_only|goal_outcome
        pub delivery_outcome: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct AskUser {
        #[schemars(skip)]
        pub agent_id: Option<String>,
        pub question: String,
        /// goal|agent:<id>|todos:<ids>
        pub blocks: String,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Handoff {
        #[schemars(skip)]
        pub agent_id: Option<String>,
        /// claude-code|codex-cli|gemini|…
        pub to_host: String,
        pub to_agent: Option<String>,
        // default: all you hold
        #[serde(default)]
        pub todo_ids: Vec<String>,
        // where you stopped, what next
        pub note: Option<String>,
        pub turn_id: Option<String>,
    }
}

use tool_args as ta;

/// A tool's input schema, generated from its argument struct, without the keys a client never
/// needs (`$schema`, `title`): an agent's context is precious.
fn input_schema<T: schemars::JsonSchema>() -> Value {
    let mut v = schemars::schema_for!(T).to_value();
    if let Some(m) = v.as_object_mut() {
        // The server refuses an unknown argument whether or not the schema says so.
        for k in ["$schema", "title", "additionalProperties"] {
            m.shift_remove(k);
        }
        let props = m.entry("properties").or_insert_with(|| json!({}));
        // An optional argument is one not `required`; `["string", "null"]` says it twice.
        for p in props.as_object_mut().into_iter().flat_map(|p| p.values_mut()) {
            if let Some(p) = p.as_object_mut() {
                // What the server checks anyway (`u64`'s minimum, a flag's `false`).
                for k in ["format", "default", "minimum"] {
                    p.shift_remove(k);
                }
                let single = p.get("type").and_then(Value::as_array).and_then(|t| {
                    let rest: Vec<&Value> = t.iter().filter(|x| *x != "null").collect();
                    (rest.len() == 1).then(|| rest[0].clone())
                });
                if let Some(t) = single {
                    p.insert("type".to_owned(), t);
                }
            }
        }
        // A tool without arguments says so by having no properties at all.
        if m.get("properties").and_then(Value::as_object).is_some_and(Map::is_empty) {
            m.shift_remove("properties");
        }
    }
    v
}

fn tool<T: schemars::JsonSchema>(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": input_schema::<T>()})
}

/// The tool list: small schemas, since an agent's context is precious (`turn_id` makes a
/// repeated call change nothing, said once, in `should_run`'s description).
fn tools() -> Vec<Value> {
    vec![
        tool::<ta::ShouldRun>("should_run", "Call first each turn. turn_id makes repeats harmless."),
        tool::<ta::Status>("status", "What needs the user, what is next, proof."),
        tool::<ta::ClaimTask>("claim_task", "Claim a todo (none given: your next)."),
        tool::<ta::UpdateTask>("update_task", "Note, evidence or status of a todo."),
        tool::<ta::CompleteTask>("complete_task", "End the turn: complete the todo, write back, spend."),
        tool::<ta::AskUser>("ask_user", "Ask the person a question."),
        tool::<ta::Handoff>("handoff", "Hand your todos to another host or agent."),
    ]
}

/// Decodes a call's arguments into the tool's struct; anything else is a usage error that
/// names the tool and what is wrong.
fn parse<T: serde::de::DeserializeOwned>(tool: &str, args: &Map<String, Value>) -> Result<T> {
    serde_json::from_value(Value::Object(args.clone())).map_err(|e| {
        Error::usage(format!("invalid arguments for {tool}: {e}")).with_hint("see tools/list for the schema")
    })
}

fn opt_id<T, E: Into<Error>>(
    s: Option<&str>,
    f: impl Fn(&str) -> std::result::Result<T, E>,
) -> Result<Option<T>> {
    s.map(f).transpose().map_err(Into::into)
}

fn to_value(v: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

impl Server {
    fn kernel(&self) -> Result<Arc<DynKernel>> {
        let root = match &self.project {
            Some(p) => p.clone(),
            None => find_root(&self.start_dir).ok_or_else(|| {
                Error::not_found(format!("no loopx project at or above {}", self.start_dir.display()))
                    .with_hint("create one with: loopx init --goal-id main --objective \"…\"")
            })?,
        };
        let mut cache = self.kernel.0.lock().map_err(|_| Error::internal("the kernel cache is poisoned"))?;
        if let Some((at, kernel)) = cache.as_ref()
            && *at == root
        {
            return Ok(kernel.clone());
        }
        let store = (self.open)(&root, self.clock.clone(), self.reporter.clone(), &self.options)?;
        let kernel =
            Arc::new(DynKernel::over(store).with_gates(self.gates.clone()).with_hosts(self.hosts.clone()));
        *cache = Some((root, kernel.clone()));
        Ok(kernel)
    }

    /// The host whose MCP client calls itself `name` at `initialize`, and how it names sessions.
    fn mcp_client(&self, name: &str) -> Option<(&'static str, McpClient)> {
        self.adapters
            .iter()
            .find_map(|a| a.protocol().mcp_client().filter(|c| c.name == name).map(|c| (a.host(), c)))
    }

    /// The acting agent: the server's own when it was started with one (a call naming
    /// another is refused), otherwise the call's `agent_id`.
    fn agent(&self, named: Option<&str>) -> Result<Option<AgentId>> {
        self.agent_as(named, true)
    }

    /// [`Server::agent`] for a call that may name the session's agent (`should_run`,
    /// `renames`) or only the one it already is: a tool naming another than the agent the
    /// session's `should_run` named is refused, as `--agent-id` naming another agent is inside
    /// a session.
    fn agent_as(&self, named: Option<&str>, renames: bool) -> Result<Option<AgentId>> {
        let named = opt_id(named, AgentId::new)?;
        let session = self.named.lock().ok().and_then(|n| n.clone());
        if let (None, false, Some(is), Some(other)) = (&self.agent, renames, &session, &named)
            && is != other
        {
            return Err(Error::identity(format!(
                "this session acts as agent {is} (its should_run named it); it cannot act as {other}"
            ))
            .with_hint(format!("leave out agent_id, or pass agent_id {is}")));
        }
        match (&self.agent, named) {
            (Some(mine), Some(other)) if *mine != other => {
                Err(Error::identity(format!("this server acts as agent {mine}; it cannot act as {other}"))
                    .with_hint(format!(
                        "call with agent_id {mine}, or start another server with --agent-id {other}"
                    )))
            }
            (Some(mine), _) => Ok(Some(mine.clone())),
            (None, Some(named)) => Ok(Some(named)),
            (None, None) => Ok(session),
        }
    }

    /// The session a call comes from: the one its client names in `_meta`, else the one the
    /// server was started in.
    fn call_session(&self, params: &Value) -> Option<BindThread> {
        let named = self.client.get().and_then(|(host, c)| {
            let thread = params.get("_meta")?.get(c.session_meta)?.as_str()?;
            Some(BindThread { host: (*host).to_owned(), thread: thread.to_owned() })
        });
        named.or_else(|| self.session.clone())
    }

    /// The turn a call binds: the one it names, or the driver's; never another than the
    /// driver's.
    fn turn<'a>(&'a self, named: Option<&'a str>) -> Result<Option<&'a str>> {
        match (&self.turn, named) {
            (Some(mine), Some(other)) if mine.as_str() != other => Err(Error::identity(format!(
                "this server runs in turn {mine} of loopx drive; it cannot act in turn {other}"
            ))
            .with_hint(format!("leave out turn_id, or pass turn_id {mine}"))),
            (Some(mine), None) => Ok(Some(mine.as_str())),
            (_, named) => Ok(named),
        }
    }

    fn context(
        &self,
        session: &Option<BindThread>,
        agent: Option<&str>,
        turn: Option<&str>,
    ) -> Result<CommandContext> {
        Ok(CommandContext {
            goal: self.goal.clone(),
            agent: self.agent_as(agent, false)?,
            key: opt_id(turn, IdempotencyKey::new)?,
            session: session.clone(),
            signer: None,
        })
    }

    async fn call(
        &self,
        name: &str,
        args: &Map<String, Value>,
        session: &Option<BindThread>,
    ) -> Result<Value> {
        match name {
            "should_run" => {
                let a: ta::ShouldRun = parse(name, args)?;
                let mut ctx = self.context(session, None, self.turn(a.turn_id.as_deref())?)?;
                if a.agent_id.is_some() {
                    ctx.agent = self.agent(a.agent_id.as_deref())?;
                }
                let answer = self.kernel()?.should_run(&ctx, None).await?;
                // The agent it named is who this session is: the other tools act as it.
                if a.agent_id.is_some() {
                    *self
                        .named
                        .lock()
                        .map_err(|_| Error::internal("the server's agent lock is poisoned"))? =
                        ctx.agent.clone();
                }
                next::should_run_mcp(&answer)
            }
            "status" => {
                let a: ta::Status = parse(name, args)?;
                // Status acts as no one, but an agent naming itself is checked like any call.
                self.context(session, a.agent_id.as_deref(), None)?;
                to_value(&self.kernel()?.status(self.goal.as_ref()).await?)
            }
            "claim_task" => {
                let a: ta::ClaimTask = parse(name, args)?;
                let ctx = self.context(session, a.agent_id.as_deref(), self.turn(a.turn_id.as_deref())?)?;
                let k = self.kernel()?;
                match a.todo_id {
                    Some(t) => to_value(&k.claim_todo(&ctx, t.parse()?).await?),
                    None => to_value(&k.claim_next(&ctx).await?),
                }
            }
            "update_task" => {
                let a: ta::UpdateTask = parse(name, args)?;
                let evidence = match (a.evidence, a.evidence_kind) {
                    (Some(summary), kind) => Some(NewEvidence {
                        kind: opt_id(kind.as_deref(), str::parse::<EvidenceKind>)?
                            .unwrap_or(EvidenceKind::Test),
                        summary,
                        command: None,
                        exit_code: None,
                        link: None,
                    }),
                    (None, Some(_)) => {
                        return Err(Error::usage("evidence_kind without evidence")
                            .with_hint("say what proves the progress in evidence"));
                    }
                    (None, None) => None,
                };
                let req = UpdateTodo {
                    todo: a.todo_id.parse()?,
                    text: None,
                    priority: None,
                    status: opt_id(a.status.as_deref(), str::parse::<TodoStatus>)?,
                    resume_when: None,
                    clear_claim: false,
                    note: a.note,
                    evidence,
                    claimed_by: None,
                    takeover_reason: None,
                };
                let ctx = self.context(session, a.agent_id.as_deref(), None)?;
                to_value(&self.kernel()?.update_todo(&ctx, req).await?)
            }
            "complete_task" => self.complete(parse(name, args)?, session).await,
            "ask_user" => {
                let a: ta::AskUser = parse(name, args)?;
                let ctx = self.context(session, a.agent_id.as_deref(), None)?;
                let req = AskGate {
                    question: a.question,
                    blocks: GateBlocks::parse(&a.blocks)?,
                    kind: loopx_core::model::GateKind::Person,
                };
                to_value(&self.kernel()?.ask_gate(&ctx, req).await?)
            }
            "handoff" => {
                let a: ta::Handoff = parse(name, args)?;
                let req = OfferHandoff {
                    to_host: self.hosts.resolve(&a.to_host)?,
                    to_agent: opt_id(a.to_agent.as_deref(), AgentId::new)?,
                    todos: a.todo_ids.iter().map(|t| t.parse()).collect::<std::result::Result<_, _>>()?,
                    note: a.note,
                    ttl_secs: DEFAULT_HANDOFF_TTL_SECS,
                };
                let ctx = self.context(session, a.agent_id.as_deref(), a.turn_id.as_deref())?;
                to_value(&self.kernel()?.handoff(&ctx, req).await?)
            }
            other => Err(Error::usage(format!("no tool named {other:?}")).with_hint("see tools/list")),
        }
    }

    /// Completion, writeback and spend as one settlement: one kernel command, one commit, keyed
    /// by the turn, so a repeated call (a retry after a lost answer) changes nothing and gets
    /// the same answer.
    async fn complete(&self, a: ta::CompleteTask, session: &Option<BindThread>) -> Result<Value> {
        let turn = self.turn(a.turn_id.as_deref())?.ok_or_else(|| {
            Error::usage("complete_task needs this turn's id: it makes the call safe to repeat")
                .with_hint("pass turn_id (the id you used with should_run)")
        })?;
        let ctx = self.context(session, a.agent_id.as_deref(), Some(turn))?;
        let kind = a.evidence_kind.as_deref().unwrap_or("test").parse::<EvidenceKind>()?;
        let outcome =
            a.delivery_outcome.as_deref().unwrap_or("outcome_progress").parse::<DeliveryOutcome>()?;
        let req = SettleTurn {
            complete: CompleteTodo {
                todo: a.todo_id.parse()?,
                evidence: a.evidence.map(|summary| NewEvidence {
                    kind,
                    summary,
                    command: None,
                    exit_code: None,
                    link: None,
                }),
                no_follow_up: a.no_follow_up,
                note: a.note,
                next_todo: a.next_todo,
            },
            classification: "implement".to_owned(),
            delivery_outcome: outcome,
            slots: 1,
            // A model does not know its tokens: its host reports them (`loopx drive`, hooks).
            tokens: None,
            usd: None,
        };
        let r = self.kernel()?.settle_turn(&ctx, req).await?;
        let b = &r.body;
        Ok(json!({
            "todo": to_value(&b.todo)?,
            "successor": b.successor,
            "run": b.run,
            "spend": b.spend,
            "seq": r.seq,
        }))
    }

    /// Answers one line: a message, or a JSON-RPC batch (an array of them, answered with an
    /// array of the replies); nothing when only notifications came.
    pub async fn handle_text(&self, line: &str) -> Option<Value> {
        let msg: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => return Some(rpc_error(Value::Null, -32700, &format!("parse error: {e}"))),
        };
        match msg {
            Value::Array(batch) if batch.is_empty() => {
                Some(rpc_error(Value::Null, -32600, "invalid request: an empty batch"))
            }
            Value::Array(batch) => {
                let mut replies = Vec::new();
                for m in batch {
                    replies.extend(self.handle(m).await);
                }
                (!replies.is_empty()).then_some(Value::Array(replies))
            }
            m => self.handle(m).await,
        }
    }

    /// Answers one message, or nothing for a notification.
    async fn handle(&self, msg: Value) -> Option<Value> {
        if !msg.is_object() {
            return Some(rpc_error(Value::Null, -32600, "invalid request: not an object"));
        }
        let id = msg.get("id").cloned();
        let Some(method) = msg.get("method").and_then(Value::as_str) else {
            return id.map(|id| rpc_error(id, -32600, "invalid request: no method"));
        };
        let id = id?; // a notification: never answered
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => {
                let client = params.get("clientInfo").and_then(|c| c.get("name")).and_then(Value::as_str);
                if let Some(found) = client.and_then(|name| self.mcp_client(name)) {
                    let _ = self.client.set(found);
                }
                let asked = params.get("protocolVersion").and_then(Value::as_str);
                let version = asked.filter(|v| PROTOCOL_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSIONS[0]);
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "loopx", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "loopx governs this project's goal. Each turn: should_run, then (if it says run) claim_task, do one bounded, verified slice, then complete_task with evidence.",
                })
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": tools()}),
            "tools/call" => {
                let Some(name) = params.get("name").and_then(Value::as_str) else {
                    return Some(rpc_error(id, -32602, "tools/call needs a tool name"));
                };
                let empty = Map::new();
                let args = match params.get("arguments") {
                    None | Some(Value::Null) => &empty,
                    Some(Value::Object(m)) => m,
                    Some(_) => return Some(rpc_error(id, -32602, "arguments must be an object")),
                };
                match self.call(name, args, &self.call_session(&params)).await {
                    Ok(v) => {
                        // The first call naming its agent names the session's, whichever tool.
                        if let (None, Some(a)) = (&self.agent, args.get("agent_id").and_then(Value::as_str))
                            && let (Ok(mut named), Ok(a)) = (self.named.lock(), AgentId::new(a))
                            && named.is_none()
                        {
                            *named = Some(a);
                        }
                        json!({"content": [{"type": "text", "text": v.to_string()}], "isError": false})
                    }
                    Err(e) => {
                        let e = next::with_type_names(&self.hosts, &e);
                        let mut text = format!("error: {}", e.message);
                        let calls: Vec<String> =
                            next::error_tool_calls(&e).iter().map(Value::to_string).collect();
                        for line in next::hint_lines(e.hint.as_deref(), &calls) {
                            text.push_str(&format!("\nhint: {line}"));
                        }
                        json!({"content": [{"type": "text", "text": text}], "isError": true})
                    }
                }
            }
            other => return Some(rpc_error(id, -32601, &format!("method not found: {other}"))),
        };
        Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}
