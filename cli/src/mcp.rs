//! `loopx mcp`: a stdio MCP server (JSON-RPC 2.0, one message per line) exposing the tick to
//! any host: `should_run`, `status`, `claim_task`, `update_task`, `complete_task`, `ask_user`,
//! `add_evidence`. Tool answers are the same small JSON documents the CLI prints with
//! `--json`. stdout carries only protocol messages; notes go to stderr.
//!
//! Errors never end the server: a refused tool call is a result with `isError: true` (and the
//! message and hint), a malformed message is a JSON-RPC error.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use loopx_core::kernel::*;
use loopx_core::model::{DeliveryOutcome, EvidenceKind, GateBlocks, TodoStatus};
use loopx_core::{AgentId, Error, GoalId, IdempotencyKey, Result, TodoId};
use loopx_kernel::{FileKernel, Reporter, StoreOptions, SystemClock, find_root};

/// Protocol revisions this server speaks, newest first.
const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the server was started with.
#[derive(Debug)]
pub struct Server {
    pub start_dir: PathBuf,
    pub project: Option<PathBuf>,
    pub goal: Option<GoalId>,
    /// When set, every call acts as this agent, and a call naming another is refused.
    pub agent: Option<AgentId>,
    pub options: StoreOptions,
    pub reporter: Arc<dyn Reporter>,
}

/// Reads requests from `input` and answers on `output` until the input ends.
pub async fn serve(server: &Server, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if let Some(reply) = server.handle_line(&line).await {
            writeln!(output, "{reply}")?;
            output.flush()?;
        }
    }
    Ok(())
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required, "additionalProperties": false},
    })
}

/// The tool list: small schemas, since an agent's context is precious.
fn tools() -> Vec<Value> {
    let s = |d: &str| json!({"type": "string", "description": d});
    let agent = s("your registered agent id");
    let todo = s("todo id, e.g. t3");
    let turn = s("this turn's id; repeats of a call with it change nothing");
    vec![
        tool(
            "should_run",
            "Should you run now, and on what? Call first every turn.",
            json!({"agent_id": agent, "turn_id": turn}),
            &[],
        ),
        tool(
            "status",
            "The objective, what needs the user, what is next, and the proof so far.",
            json!({}),
            &[],
        ),
        tool(
            "claim_task",
            "Claim a todo (or, without todo_id, your next one). Exactly one claimer wins.",
            json!({"agent_id": agent, "todo_id": todo, "turn_id": turn}),
            &[],
        ),
        tool(
            "update_task",
            "Add a note to a todo, or mark it blocked, deferred or open again.",
            json!({"agent_id": agent, "todo_id": todo, "note": s("what happened"), "status": s("open, blocked or deferred")}),
            &["todo_id"],
        ),
        tool(
            "complete_task",
            "Finish a turn: complete the todo with evidence, write the turn back, account compute. One idempotent call.",
            json!({
                "agent_id": agent, "todo_id": todo, "turn_id": turn,
                "evidence": s("what proves it is done (a test that passed, a command's result)"),
                "evidence_kind": s("test, command, link, note or artifact (default test)"),
                "no_follow_up": {"type": "boolean", "description": "nothing follows from this todo (needs a note)"},
                "note": s("why, when there is no evidence"),
                "next_todo": s("the successor todo to create"),
                "delivery_outcome": s("surface_only, outcome_gap, outcome_progress (default) or goal_outcome"),
                "tokens": {"type": "integer", "minimum": 0},
            }),
            &["todo_id", "turn_id"],
        ),
        tool(
            "ask_user",
            "Ask a person a question. blocks: goal, agent:<id> or todos:<ids>.",
            json!({"question": s("one concrete question"), "blocks": s("what waits for the answer")}),
            &["question", "blocks"],
        ),
        tool(
            "add_evidence",
            "Record proof of progress on a todo.",
            json!({"agent_id": agent, "todo_id": todo, "kind": s("test, command, link, note or artifact"), "summary": s("what it shows")}),
            &["todo_id", "kind", "summary"],
        ),
    ]
}

/// Arguments of one call, with typed accessors that refuse bad values.
struct Args<'a>(&'a Map<String, Value>);

impl Args<'_> {
    fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Error::usage(format!("{key} must be a string"))),
        }
    }
    fn need(&self, key: &str) -> Result<&str> {
        self.str(key)?.ok_or_else(|| Error::usage(format!("{key} is required")))
    }
    fn todo(&self) -> Result<TodoId> {
        self.need("todo_id")?.parse()
    }
    fn flag(&self, key: &str) -> Result<bool> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Error::usage(format!("{key} must be true or false"))),
        }
    }
    fn count(&self, key: &str) -> Result<Option<u64>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                v.as_u64().map(Some).ok_or_else(|| Error::usage(format!("{key} must be a whole number")))
            }
        }
    }
}

fn to_value(v: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

impl Server {
    fn kernel(&self) -> Result<FileKernel> {
        let root = match &self.project {
            Some(p) => p.clone(),
            None => find_root(&self.start_dir).ok_or_else(|| {
                Error::not_found(format!("no loopx project at or above {}", self.start_dir.display()))
                    .with_hint("create one with: loopx init --goal-id main --objective \"…\"")
            })?,
        };
        FileKernel::open(&root, Arc::new(SystemClock), self.reporter.clone(), self.options.clone())
    }

    /// The acting agent: the server's own when it was started with one (a call naming
    /// another is refused), otherwise the call's `agent_id`.
    fn agent(&self, args: &Args<'_>) -> Result<Option<AgentId>> {
        let named = args.str("agent_id")?.map(AgentId::new).transpose()?;
        match (&self.agent, named) {
            (Some(mine), Some(other)) if *mine != other => {
                Err(Error::identity(format!("this server acts as agent {mine}; it cannot act as {other}"))
                    .with_hint(format!(
                        "call with agent_id {mine}, or start another server with --agent-id {other}"
                    )))
            }
            (Some(mine), _) => Ok(Some(mine.clone())),
            (None, named) => Ok(named),
        }
    }

    fn context(&self, args: &Args<'_>) -> Result<CommandContext> {
        Ok(CommandContext {
            goal: self.goal.clone(),
            agent: self.agent(args)?,
            key: args.str("turn_id")?.map(IdempotencyKey::new).transpose()?,
        })
    }

    async fn call(&self, name: &str, args: &Map<String, Value>) -> Result<Value> {
        let a = Args(args);
        let k = self.kernel()?;
        match name {
            "should_run" => to_value(&k.should_run(&self.context(&a)?, None).await?),
            "status" => to_value(&k.status(self.goal.as_ref()).await?),
            "claim_task" => {
                let ctx = self.context(&a)?;
                match a.str("todo_id")? {
                    Some(t) => to_value(&k.claim_todo(&ctx, t.parse()?).await?),
                    None => to_value(&k.claim_next(&ctx).await?),
                }
            }
            "update_task" => {
                let req = UpdateTodo {
                    todo: a.todo()?,
                    text: None,
                    priority: None,
                    status: a.str("status")?.map(str::parse::<TodoStatus>).transpose()?,
                    resume_when: None,
                    clear_claim: false,
                    note: a.str("note")?.map(str::to_owned),
                    evidence: None,
                    claimed_by: None,
                    takeover_reason: None,
                };
                to_value(&k.update_todo(&self.context(&a)?, req).await?)
            }
            "complete_task" => self.complete(&k, &a).await,
            "ask_user" => {
                let req = AskGate {
                    question: a.need("question")?.to_owned(),
                    blocks: GateBlocks::parse(a.need("blocks")?)?,
                };
                to_value(&k.ask_gate(&self.context(&a)?, req).await?)
            }
            "add_evidence" => {
                let req = AddEvidence {
                    todo: a.todo()?,
                    evidence: NewEvidence {
                        kind: a.need("kind")?.parse::<EvidenceKind>()?,
                        summary: a.need("summary")?.to_owned(),
                        command: None,
                        exit_code: None,
                        link: None,
                    },
                };
                to_value(&k.add_evidence(&self.context(&a)?, req).await?)
            }
            other => Err(Error::usage(format!("no tool named {other:?}")).with_hint("see tools/list")),
        }
    }

    /// Completion, writeback and spend as one settlement. Each step is keyed by the turn, so a
    /// repeated call (a retry after a lost answer) changes nothing and answers the same.
    async fn complete(&self, k: &FileKernel, a: &Args<'_>) -> Result<Value> {
        let ctx = self.context(a)?;
        if ctx.key.is_none() {
            return Err(Error::usage("turn_id is required: it makes the settlement safe to repeat"));
        }
        let todo = a.todo()?;
        let kind = a.str("evidence_kind")?.unwrap_or("test").parse::<EvidenceKind>()?;
        let outcome = a.str("delivery_outcome")?.unwrap_or("outcome_progress").parse::<DeliveryOutcome>()?;
        let complete = CompleteTodo {
            todo,
            evidence: a.str("evidence")?.map(|s| NewEvidence {
                kind,
                summary: s.to_owned(),
                command: None,
                exit_code: None,
                link: None,
            }),
            no_follow_up: a.flag("no_follow_up")?,
            note: a.str("note")?.map(str::to_owned),
            next_todo: a.str("next_todo")?.map(str::to_owned),
        };
        let completed = k.complete_todo(&ctx, complete).await?;
        let refresh = RefreshState {
            todo,
            classification: "implement".to_owned(),
            delivery_outcome: outcome,
            next_action: None,
        };
        let run = k.refresh_state(&ctx, refresh).await?;
        let spend = SpendSlot { todo, slots: 1, tokens: a.count("tokens")?, usd: None, dry_run: false };
        let spent = k.spend_slot(&ctx, spend).await?;
        Ok(json!({
            "todo": to_value(&completed.body.todo)?,
            "successor": completed.body.successor.as_ref().map(|t| t.id),
            "run": run.body.run.id,
            "spend": spent.body.spend.id,
        }))
    }

    /// Answers one line, or nothing for a notification.
    pub async fn handle_line(&self, line: &str) -> Option<Value> {
        let msg: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => return Some(rpc_error(Value::Null, -32700, &format!("parse error: {e}"))),
        };
        let id = msg.get("id").cloned();
        let Some(method) = msg.get("method").and_then(Value::as_str) else {
            return id.map(|id| rpc_error(id, -32600, "invalid request: no method"));
        };
        let id = id?; // a notification: never answered
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => {
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
                match self.call(name, args).await {
                    Ok(v) => json!({"content": [{"type": "text", "text": v.to_string()}], "isError": false}),
                    Err(e) => {
                        let mut text = format!("error: {}", e.message);
                        if let Some(h) = &e.hint {
                            text.push_str(&format!("\nhint: {h}"));
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
