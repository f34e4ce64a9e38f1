//! Typed next steps, rendered: as command lines for the CLI (`next_commands`), as tool calls
//! for the MCP server (`next_tools`). The kernel says what comes next; only this module says
//! how it is spelled. Also an error's words for a person or an agent: its hint and ways out,
//! the agent types where the kernel said `<type>`.

use serde_json::{Map, Value, json};

use loopx_core::agent::HostCatalog;
use loopx_core::decision::ShouldRunAnswer;
use loopx_core::next::{NextStep, StepContext};
use loopx_core::{Error, Result};

/// The context a should-run answer gives its steps.
pub fn context(a: &ShouldRunAnswer) -> StepContext<'_> {
    StepContext {
        goal: Some(&a.goal_id),
        agent: a.agent_id.as_ref(),
        turn: a.turn.as_ref().map(|t| t.id.as_str()),
    }
}

/// An error's next steps as command lines.
pub fn error_commands(e: &Error) -> Vec<String> {
    e.next.as_ref().map(|n| n.steps.iter().map(|s| command(s, &n.context())).collect()).unwrap_or_default()
}

/// An error's next steps as tool calls (or commands, where there is no tool).
pub fn error_tool_calls(e: &Error) -> Vec<Value> {
    e.next
        .as_ref()
        .map(|n| n.steps.iter().filter_map(|s| tool_call(s, &n.context())).collect())
        .unwrap_or_default()
}

/// The hint and the ways out, one per line, for a person (`how` renders each step).
pub fn hint_lines(hint: Option<&str>, steps: &[String]) -> Vec<String> {
    match (hint, steps) {
        (None, []) => vec![],
        (Some(h), []) => vec![h.to_owned()],
        (Some(h), [one]) => vec![format!("{h}: {one}")],
        (None, steps) => steps.to_vec(),
        (Some(h), steps) => {
            std::iter::once(format!("{h}:")).chain(steps.iter().map(|s| format!("  {s}"))).collect()
        }
    }
}

/// The step as a command line, word by word ([`command`] quotes and joins them).
pub fn argv(step: &NextStep, c: &StepContext<'_>) -> Vec<String> {
    let mut v: Vec<String> = vec!["loopx".into()];
    let mut words = |w: &[&str]| v.extend(w.iter().map(|s| (*s).to_owned()));
    let goal: Vec<&str> = c.goal.map(|g| vec!["--goal-id", g.as_str()]).unwrap_or_default();
    let agent: Vec<&str> = c.agent.map(|a| vec!["--agent-id", a.as_str()]).unwrap_or_default();
    let turn: Vec<&str> = c.turn.map(|t| vec!["--turn-instance-id", t]).unwrap_or_default();
    let todo_s;
    match step {
        NextStep::ShouldRun => {
            words(&["quota", "should-run"]);
            words(&goal);
            words(&agent);
        }
        NextStep::Claim { todo } => {
            todo_s = todo.to_string();
            words(&["todo", "claim"]);
            words(&goal);
            words(&["--todo-id", &todo_s]);
            words(&agent);
            words(&turn);
        }
        NextStep::AcquireLease { todo, ttl } => {
            todo_s = todo.to_string();
            words(&["lease", "acquire"]);
            words(&goal);
            words(&["--todo-id", &todo_s]);
            words(&agent);
            words(&["--ttl", ttl]);
        }
        NextStep::Complete { todo } => {
            todo_s = todo.to_string();
            words(&["todo", "complete"]);
            words(&goal);
            words(&["--todo-id", &todo_s]);
            words(&agent);
            words(&turn);
            words(&["--evidence", "…"]);
        }
        NextStep::RefreshState { todo } => {
            todo_s = todo.to_string();
            words(&["refresh-state"]);
            words(&goal);
            words(&agent);
            words(&["--todo-id", &todo_s]);
            words(&turn);
            words(&["--classification", "implement", "--delivery-outcome", "outcome_progress"]);
        }
        NextStep::SpendSlot { todo } => {
            todo_s = todo.to_string();
            words(&["quota", "spend-slot"]);
            words(&goal);
            words(&agent);
            words(&["--todo-id", &todo_s]);
            words(&turn);
        }
        NextStep::AddTodo => {
            words(&["todo", "add"]);
            words(&goal);
            words(&agent);
            words(&["--text", "…"]);
        }
        NextStep::ListTodos => {
            words(&["todo", "list"]);
            words(&goal);
            words(&["--all"]);
        }
        NextStep::ListGates => {
            words(&["gate", "list"]);
            words(&goal);
        }
        NextStep::ResumeGoal => {
            words(&["goal", "resume"]);
            words(&goal);
        }
        NextStep::RestoreCompute => {
            words(&["goal", "set"]);
            words(&goal);
            words(&["--compute", "1"]);
        }
        NextStep::Status => {
            words(&["status"]);
            words(&goal);
        }
        NextStep::SchedulerAck { cadence_minutes, rrule } => {
            todo_s = cadence_minutes.to_string();
            words(&["quota", "scheduler-ack"]);
            words(&goal);
            words(&agent);
            words(&["--cadence-minutes", &todo_s]);
            if let Some(r) = rrule {
                words(&["--rrule", r]);
            }
        }
        NextStep::SchedulerFail => {
            words(&["quota", "scheduler-fail"]);
            words(&goal);
            words(&agent);
            words(&["--error", "…"]);
        }
        NextStep::Resume { host } => {
            words(&["resume"]);
            words(&goal);
            words(&["--host", host]);
            words(&agent);
        }
    }
    v
}

/// The step as a command line a person or an agent can paste.
pub fn command(step: &NextStep, c: &StepContext<'_>) -> String {
    shell_words::join(argv(step, c))
}

/// The step as an MCP tool call (`{"tool": …, "arguments": …}`), or as a command where loopx's
/// MCP server has no tool for it. `None` for steps `complete_task` already covers.
pub fn tool_call(step: &NextStep, c: &StepContext<'_>) -> Option<Value> {
    let mut args = Map::new();
    if let Some(t) = c.turn {
        args.insert("turn_id".to_owned(), json!(t));
    }
    let call = |name: &str, args: Map<String, Value>| Some(json!({"tool": name, "arguments": args}));
    match step {
        NextStep::ShouldRun => call("should_run", args),
        NextStep::Claim { todo } => {
            args.insert("todo_id".to_owned(), json!(todo));
            call("claim_task", args)
        }
        NextStep::Complete { todo } => {
            args.insert("todo_id".to_owned(), json!(todo));
            args.insert("evidence".to_owned(), json!("…"));
            call("complete_task", args)
        }
        NextStep::RefreshState { .. } | NextStep::SpendSlot { .. } => None,
        NextStep::ListTodos | NextStep::ListGates | NextStep::Status => call("status", Map::new()),
        other => Some(json!({"command": command(other, c)})),
    }
}

fn encode(a: &ShouldRunAnswer) -> Result<Map<String, Value>> {
    match serde_json::to_value(a) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::internal("a should-run answer is not an object")),
        Err(e) => Err(Error::internal(format!("cannot encode the answer: {e}"))),
    }
}

/// Puts `with` where `key` was (keys keep their order).
fn replace_key(m: Map<String, Value>, key: &str, new_key: &str, with: Value) -> Map<String, Value> {
    let mut with = Some(with);
    m.into_iter()
        .map(
            |(k, v)| if k == key { (new_key.to_owned(), with.take().unwrap_or(Value::Null)) } else { (k, v) },
        )
        .collect()
}

/// The answer as `loopx quota should-run --json` prints it: steps as command lines.
pub fn should_run_json(a: &ShouldRunAnswer) -> Result<Value> {
    let c = context(a);
    let commands: Vec<String> = a.next.iter().map(|s| command(s, &c)).collect();
    let mut m = replace_key(encode(a)?, "next", "next_commands", json!(commands));
    if let Some(Value::Object(h)) = m.get_mut("scheduler") {
        let mut h2 = std::mem::take(h);
        if let Some(s) = &a.scheduler.ack {
            h2 = replace_key(h2, "ack", "ack_command", json!(command(s, &c)));
        }
        if let Some(s) = &a.scheduler.fail {
            h2 = replace_key(h2, "fail", "fail_command", json!(command(s, &c)));
        }
        *h = h2;
    }
    Ok(Value::Object(m))
}

/// The answer as the MCP server's `should_run` gives it: steps as tool calls.
pub fn should_run_mcp(a: &ShouldRunAnswer) -> Result<Value> {
    let c = context(a);
    let tools: Vec<Value> = a.next.iter().filter_map(|s| tool_call(s, &c)).collect();
    let mut m = replace_key(encode(a)?, "next", "next_tools", json!(tools));
    if let Some(Value::Object(h)) = m.get_mut("scheduler") {
        h.shift_remove("ack");
        h.shift_remove("fail");
    }
    Ok(Value::Object(m))
}

/// `text` with the placeholder `<type>` (the kernel's words, which name no host) replaced by the
/// agent types `hosts` knows: `<claude-code|codex-app|…|other>`.
pub fn name_types(hosts: &HostCatalog, text: &str) -> String {
    if !text.contains("<type>") {
        return text.to_owned();
    }
    let names: Vec<&str> = hosts.types().iter().map(|t| t.name.as_str()).collect();
    text.replace("<type>", &format!("<{}>", names.join("|")))
}

/// An error whose message and hint name the agent types where they said `<type>`.
pub fn with_type_names(hosts: &HostCatalog, e: &Error) -> Error {
    let mut e = e.clone();
    e.message = name_types(hosts, &e.message);
    e.hint = e.hint.as_deref().map(|h| name_types(hosts, h));
    e
}
