//! `loopx mcp` over its real stdio: the handshake, the tool list, every tool, bad calls.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde_json::{Value, json};

use loopx_tests::{Sandbox, events};

pub(crate) struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Session {
    pub(crate) fn start(s: &Sandbox, args: &[&str]) -> Self {
        let mut child = s
            .command()
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut me = Self { child, stdin, stdout, next_id: 0 };
        let init = me.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}));
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(init["result"]["serverInfo"]["name"], "loopx");
        me.send_raw(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        me
    }

    fn send_raw(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        let reply = self.read();
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    /// Calls a tool; returns (is_error, parsed JSON or the error text).
    pub(crate) fn call(&mut self, name: &str, args: Value) -> (bool, Value) {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}));
        let result = &r["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
        let is_error = result["isError"].as_bool().unwrap();
        let body = if is_error { Value::String(text) } else { serde_json::from_str(&text).unwrap() };
        (is_error, body)
    }

    pub(crate) fn ok(&mut self, name: &str, args: Value) -> Value {
        let (err, body) = self.call(name, args.clone());
        assert!(!err, "{name} {args}: {body}");
        body
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn project() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "cc", "--agent-type", "claude-code"]);
    s.ok(&["agent", "register", "--agent-id", "cx", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "add", "--agent-id", "cc", "--text", "write the parser", "--priority", "P1"]);
    s.ok(&["todo", "add", "--agent-id", "cc", "--text", "write the docs", "--priority", "P2"]);
    s
}

#[test]
fn the_handshake_and_the_tool_list() {
    let s = project();
    let mut m = Session::start(&s, &[]);
    let list = m.request("tools/list", json!({}));
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["should_run", "status", "claim_task", "update_task", "complete_task", "ask_user", "handoff"]
    );
    for t in list["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        // Every tool takes the agent's own id; only should_run's schema lists it, where the
        // session's agent is named (the others' schemas do not forbid it).
        let agent = t["inputSchema"]["properties"].get("agent_id").is_some();
        assert_eq!(agent, t["name"] == "should_run", "{t}");
        assert!(t["inputSchema"].get("additionalProperties").is_none(), "{t}");
    }
    // Every byte sits in each agent's context: 4,019 bytes once, 1,988 since only the
    // arguments whose values are not plain from their name say what they take (as the list of
    // those values), evidence is added by update_task, and the agent is named once.
    let compact = serde_json::to_string(&list["result"]["tools"]).unwrap().len();
    assert!(compact <= 2_000, "small schemas: {compact} bytes");
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    // An unknown protocol revision gets the newest we speak.
    let mut other = Session::start(&s, &[]);
    let r = other.request("initialize", json!({"protocolVersion": "1999-01-01"}));
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
}

#[test]
fn every_tool_works_and_completion_is_one_idempotent_settlement() {
    let s = project();
    let mut m = Session::start(&s, &[]);
    let d = m.ok("should_run", json!({"agent_id": "cc", "turn_id": "mcp-1"}));
    assert_eq!((d["decision"].as_str(), d["selected_todo"]["id"].as_str()), (Some("run"), Some("t1")));
    // Next steps come as this server's tool calls, not as command lines.
    assert_eq!(
        d["next_tools"],
        json!([{"tool": "claim_task", "arguments": {"turn_id": "mcp-1", "todo_id": "t1"}},
               {"tool": "complete_task", "arguments": {"turn_id": "mcp-1", "todo_id": "t1", "evidence": "…"}}])
    );
    // should_run named cc: the session's other calls act as cc.
    let c = m.ok("claim_task", json!({"todo_id": "t1", "turn_id": "mcp-1"}));
    assert_eq!(c["todo"]["claimed_by"], "cc");
    // Another session names cx.
    let mut other = Session::start(&s, &[]);
    other.ok("should_run", json!({"agent_id": "cx"}));
    let next = other.ok("claim_task", json!({}));
    assert_eq!(
        (&next["todo"]["id"], &next["todo"]["claimed_by"]),
        (&"t2".into(), &"cx".into()),
        "claim-next"
    );
    let u = m.ok("update_task", json!({"todo_id": "t1", "note": "lexer done"}));
    assert_eq!(u["todo"]["notes"][0]["text"], "lexer done");
    let e = m
        .ok("update_task", json!({"todo_id": "t1", "evidence": "lexer tests pass", "evidence_kind": "test"}));
    assert_eq!(e["todo"]["evidence"][0], "e1", "{e}");
    let (err, text) = m.call("update_task", json!({"todo_id": "t1", "evidence_kind": "test"}));
    assert!(err && text.as_str().unwrap().contains("evidence_kind without evidence"), "{text}");
    let args = json!({"todo_id": "t1", "turn_id": "mcp-1", "evidence": "parser tests pass", "next_todo": "fuzz the parser"});
    let first = events(&s.events_path("main")).len();
    let done = m.ok("complete_task", args.clone());
    assert_eq!((done["todo"]["status"].as_str(), done["successor"].as_str()), (Some("done"), Some("t3")));
    assert_eq!((done["run"].as_str(), done["spend"].as_str()), (Some("r1"), Some("s1")));
    // One settlement is one kernel command and one commit: completion, writeback and spend
    // land together or not at all.
    let log = events(&s.events_path("main"));
    assert_eq!(log.len(), first + 1, "one event for the whole settlement");
    let kinds: Vec<&str> = log.last().unwrap()["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["todo_completed", "run_recorded", "slot_spent"]);
    // A repeat (a retry after a lost answer) answers the same and spends nothing more.
    let before = events(&s.events_path("main")).len();
    assert_eq!(m.ok("complete_task", args), done);
    assert_eq!(events(&s.events_path("main")).len(), before);
    // A refusal's way out comes as this server's tool call, not as a command line.
    m.ok("claim_task", json!({"todo_id": "t1"}));
    let (err, text) = other.call("claim_task", json!({"todo_id": "t1"}));
    let text = text.as_str().unwrap();
    assert!(
        err && text.contains("hint: pick another todo, or ask cc to release t1: {\"tool\":\"should_run\""),
        "{text}"
    );
    let q = s.json(&["quota", "status"]);
    assert_eq!(
        (q["quota"]["used_slots"].as_u64(), q["quota"]["tokens_used"].as_u64()),
        (Some(1), Some(0)),
        "a model does not know its tokens; its host reports them"
    );
    let g = m.ok("ask_user", json!({"question": "Ship on Friday?", "blocks": "todos:t3"}));
    assert_eq!(g["gate"]["id"], "g1");
    let st = m.ok("status", json!({}));
    assert_eq!(st["gates"][0]["gate"], "g1");
}

#[test]
fn bad_calls_are_errors_and_the_server_keeps_going() {
    let s = project();
    let mut m = Session::start(&s, &[]);
    let (err, text) = m.call("no_such_tool", json!({}));
    assert!(err && text.as_str().unwrap().contains("no tool named"), "{text}");
    let (err, text) = m.call("should_run", json!({}));
    assert!(err && text.as_str().unwrap().contains("2 agents are registered"), "{text}");
    let (err, text) = m.call("claim_task", json!({"todo_id": "t1"}));
    assert!(err && text.as_str().unwrap().contains("2 agents are registered"), "no agent named yet: {text}");
    let (err, text) = m.call("should_run", json!({"agent_id": "nobody"}));
    assert!(err && text.as_str().unwrap().contains("not registered"), "{text}");
    m.ok("should_run", json!({"agent_id": "cc"}));
    let (err, text) = m.call("claim_task", json!({"todo_id": "seven"}));
    assert!(err && text.as_str().unwrap().contains("invalid todo"), "{text}");
    let (err, text) = m.call("complete_task", json!({"todo_id": "t1"}));
    assert!(err && text.as_str().unwrap().contains("complete_task needs this turn's id"), "{text}");
    let (err, text) = m.call("update_task", json!({"todo_id": 7}));
    assert!(err && text.as_str().unwrap().contains("invalid type: integer `7`, expected a string"), "{text}");
    // A misspelt or unknown argument is refused, and nothing is claimed.
    let before = events(&s.events_path("main")).len();
    for bad in [json!({"todoo_id": "t1"}), json!({"todo_id": "t1", "priority": "P0"})] {
        let (err, text) = m.call("claim_task", bad.clone());
        assert!(err && text.as_str().unwrap().contains("unknown field"), "{bad}: {text}");
    }
    assert_eq!(events(&s.events_path("main")).len(), before);
    m.send_raw("{not json");
    assert_eq!(m.read()["error"]["code"], -32700);
    let r = m.request("resources/list", json!({}));
    assert_eq!(r["error"]["code"], -32601);
    let r = m.request("tools/call", json!({"arguments": {}}));
    assert_eq!(r["error"]["code"], -32602);
    // Still serving.
    assert_eq!(m.ok("status", json!({}))["goal_id"], "main");
}

#[test]
fn a_server_bound_to_an_agent_refuses_another_identity() {
    let s = project();
    let mut m = Session::start(&s, &["--agent-id", "cx"]);
    let (err, text) = m.call("should_run", json!({"agent_id": "cc"}));
    assert!(err && text.as_str().unwrap().contains("acts as agent cx"), "{text}");
    let c = m.ok("claim_task", json!({"todo_id": "t1"}));
    assert_eq!(c["todo"]["claimed_by"], "cx");
}

#[test]
fn invalid_utf8_overlong_lines_and_batches_get_answers_and_the_server_goes_on() {
    let s = project();
    let mut input: Vec<u8> = Vec::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    input.extend(format!("{init}\n").as_bytes());
    input.extend(b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"ping\xff\xfe\"}\n");
    let long =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"pad\":\"{}\"}}\n", "x".repeat(5 << 20));
    input.extend(long.as_bytes());
    let batch = json!([{"jsonrpc": "2.0", "id": 4, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "status", "arguments": {}}}]);
    input.extend(format!("{batch}\n[]\n").as_bytes());
    input.extend(format!("{}\n", json!({"jsonrpc": "2.0", "id": 6, "method": "ping"})).as_bytes());
    let r = s.run_with(&["mcp"], &input, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let replies: Vec<Value> = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(replies.len(), 6, "{replies:?}");
    assert_eq!(replies[1]["error"]["code"], -32700, "not UTF-8: {}", replies[1]);
    assert!(replies[2]["error"]["message"].as_str().unwrap().contains("longer than"), "{}", replies[2]);
    let b = replies[3].as_array().expect("a batch gets an array");
    assert_eq!(
        b.iter().map(|x| x["id"].clone()).collect::<Vec<_>>(),
        [json!(4), json!(5)],
        "notifications get no reply"
    );
    assert_eq!(replies[4]["error"]["code"], -32600, "an empty batch is invalid");
    assert_eq!(replies[5]["id"], 6, "still serving");
}

#[test]
fn an_agent_hands_off_through_the_tool_and_status_shows_it_waiting() {
    let s = project();
    let mut m = Session::start(&s, &["--agent-id", "cx"]);
    m.ok("claim_task", json!({"todo_id": "t2"}));
    let h =
        m.ok("handoff", json!({"to_host": "claude-code", "note": "docs half written", "turn_id": "turn-3"}));
    assert_eq!(h["handoff"]["todos"][0]["todo"], "t2", "{h}");
    let again =
        m.ok("handoff", json!({"to_host": "claude-code", "note": "docs half written", "turn_id": "turn-3"}));
    assert_eq!(again["handoff"]["id"], "h1", "a repeat under the turn id makes no second handoff");
    let st = m.ok("status", json!({}));
    assert_eq!(st["handoffs"][0]["id"], "h1");
    assert_eq!(st["handoffs"][0]["note"], "docs half written");
    let d = m.ok("should_run", json!({}));
    assert_eq!(d["decision"], "handoff", "{d}");
    // Bad arguments are refused with the reason, and change nothing.
    let (err, body) = m.call("handoff", json!({"to_host": "codex"}));
    assert!(err && body.as_str().unwrap().contains("codex-cli"), "{body}");
    let (err, body) = m.call("handoff", json!({"to_host": "claude-code", "todo_ids": ["t1"], "ttl": "1h"}));
    assert!(err && body.as_str().unwrap().contains("unknown field"), "{body}");
    // The receiving side's claim takes it over.
    let mut cc = Session::start(&s, &["--agent-id", "cc"]);
    let d = cc.ok("should_run", json!({}));
    assert_eq!(d["selected_todo"]["id"], "t2", "{d}");
    assert_eq!(d["next_tools"][0]["tool"], "claim_task", "{d}");
    cc.ok("claim_task", json!({"todo_id": "t2"}));
    assert!(cc.ok("status", json!({})).get("handoffs").is_none());
}

#[test]
fn a_command_the_server_runs_for_an_agent_is_that_agents() {
    let s = project();
    s.ok(&["gate", "ask", "--question", "Ship it?", "--blocks", "todos:t2"]);
    let bin = loopx_tests::loopx_bin().display().to_string();
    // The person's check, as an agent would subvert it: it tries to answer the gate as a person.
    let check = format!("sh -c 'env -i {bin} gate answer g1 --approve'");
    s.ok(&[
        "todo",
        "add",
        "--agent-id",
        "user",
        "--text",
        "ship it",
        "--priority",
        "P0",
        "--validation-command",
        &check,
    ]);
    let mut m = Session::start(&s, &["--agent-id", "cc"]);
    m.ok("claim_task", json!({"todo_id": "t3"}));
    let (err, text) =
        m.call("complete_task", json!({"todo_id": "t3", "turn_id": "mcp-1", "evidence": "done"}));
    assert!(err, "the check failed, so the todo is not done: {text}");
    assert_eq!(s.json(&["gate", "list"])["gates"][0]["status"], "open");
    assert!(events(&s.events_path("main")).iter().all(|e| e["kind"] != "gate_answered"));
}

/// Every tool takes the acting agent's own `agent_id`, as `should_run` does (a model that
/// passed it there passes it on the next call), and refuses another's: the one the session's
/// `should_run` named, or the one the server was started for; the refusal changes nothing. The
/// tool list stays within 2,000 bytes.
#[test]
fn every_tool_takes_the_agents_own_id_and_refuses_anothers() {
    let s = project();
    let mut m = Session::start(&s, &[]);
    m.ok("should_run", json!({"agent_id": "cc", "turn_id": "turn-1"}));
    let c = m.ok("claim_task", json!({"agent_id": "cc", "todo_id": "t1", "turn_id": "turn-1"}));
    assert_eq!(c["todo"]["claimed_by"], "cc");
    m.ok("update_task", json!({"agent_id": "cc", "todo_id": "t1", "note": "halfway"}));
    m.ok("status", json!({"agent_id": "cc"}));
    m.ok("ask_user", json!({"agent_id": "cc", "question": "which format?", "blocks": "todos:t2"}));
    let done = json!({"agent_id": "cc", "todo_id": "t1", "turn_id": "turn-1", "evidence": "tests pass"});
    m.ok("complete_task", done);
    let before = s.tree();
    let calls = [
        ("status", json!({"agent_id": "cx"})),
        ("claim_task", json!({"agent_id": "cx", "todo_id": "t2"})),
        ("update_task", json!({"agent_id": "cx", "todo_id": "t2", "note": "mine now"})),
        ("complete_task", json!({"agent_id": "cx", "todo_id": "t2", "turn_id": "turn-2", "evidence": "x"})),
        ("ask_user", json!({"agent_id": "cx", "question": "may I?", "blocks": "goal"})),
        ("handoff", json!({"agent_id": "cx", "to_host": "codex-cli"})),
    ];
    for (tool, args) in &calls {
        let (err, text) = m.call(tool, args.clone());
        let text = text.as_str().unwrap_or_default().to_owned();
        assert!(
            err && text.contains("acts as agent cc") && text.contains("cannot act as cx"),
            "{tool}: {text}"
        );
        assert!(text.contains("agent_id cc"), "{tool}: {text}");
    }
    assert_eq!(s.tree(), before, "a refused call changes nothing");
    // A server started for an agent refuses another's the same way, on every tool.
    let mut bound = Session::start(&s, &["--agent-id", "cx"]);
    for (tool, args) in &calls {
        let mut args = args.clone();
        args["agent_id"] = json!("cc");
        let (err, text) = bound.call(tool, args);
        assert!(err && text.as_str().unwrap().contains("acts as agent cx"), "{tool}: {text}");
    }
    assert_eq!(s.tree(), before);
    let list = m.request("tools/list", json!({}));
    let compact = serde_json::to_string(&list["result"]["tools"]).unwrap().len();
    assert!(compact <= 2_000, "{compact} bytes");
}
