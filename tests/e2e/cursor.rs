//! Cursor, wired by hand: the installed rule's front matter is Cursor's schema, the hooks answer
//! every decision in Cursor's protocol, the MCP server acts as the installed agent and never
//! another, and a scripted manual session (a driver playing Cursor and the person) reaches the
//! goal's end with its evidence. No Cursor binary runs here: the formats are the documented ones.

use serde_json::{Value, json};
use yaml_rust2::{Yaml, YamlLoader};

use loopx_tests::{Run, Sandbox, events};

use crate::mcp::Session;

fn installed(flags: &[&str]) -> Sandbox {
    let s = Sandbox::new();
    s.init();
    let mut args = vec!["host", "install", "cursor"];
    args.extend_from_slice(flags);
    s.ok(&args);
    s
}

/// Runs a Cursor hook as `.cursor/hooks.json` would, with the documented stdin.
fn hook(s: &Sandbox, event: &str, extra: Value) -> (Run, Value) {
    let name = match event {
        "stop" => "stop",
        "before-shell-execution" => "beforeShellExecution",
        _ => "beforeSubmitPrompt",
    };
    let mut input = json!({"conversation_id": "c0ffee-chat", "generation_id": "g1", "hook_event_name": name,
                           "workspace_roots": [s.root]});
    if let (Some(o), Some(e)) = (input.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    let r =
        s.run_with(&["hook", "cursor", event, "--agent-id", "cursor-1"], input.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 0, "Cursor reads answers on exit 0: {}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", r.stdout));
    (r, v)
}

fn stop(s: &Sandbox, loop_count: u32) -> Value {
    hook(s, "stop", json!({"status": "completed", "loop_count": loop_count})).1
}

fn prompt(s: &Sandbox, text: &str) -> Value {
    hook(s, "before-submit-prompt", json!({"prompt": text, "attachments": []})).1
}

fn shell(s: &Sandbox, command: &str) -> Value {
    hook(s, "before-shell-execution", json!({"command": command, "cwd": s.root})).1
}

#[test]
fn the_rule_front_matter_is_cursors_schema() {
    let s = installed(&[]);
    let rule = std::fs::read_to_string(s.root.join(".cursor/rules/loopx.mdc")).unwrap();
    let front = rule.strip_prefix("---\n").and_then(|r| r.split_once("\n---\n")).map(|(f, _)| f).unwrap();
    let docs = YamlLoader::load_from_str(front).unwrap();
    let Yaml::Hash(h) = &docs[0] else { panic!("front matter is not a mapping: {front}") };
    let keys: Vec<&str> = h.keys().filter_map(Yaml::as_str).collect();
    assert_eq!(keys, ["description", "globs", "alwaysApply"]);
    let get = |k: &str| h.get(&Yaml::String(k.to_owned())).unwrap();
    assert!(get("description").as_str().is_some_and(|d| d.contains("loopx")), "{front}");
    assert_eq!(get("alwaysApply"), &Yaml::Boolean(true), "a boolean, never the string \"true\"");
    assert_eq!(get("globs"), &Yaml::Null);
    assert!(rule.contains("loopx:managed v1") && rule.contains("`should_run`"));
    // The project's rule and skill, the MCP server bound to the agent, no hooks unasked.
    assert!(s.root.join(".cursor/skills/loopx/SKILL.md").is_file());
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(s.root.join(".cursor/mcp.json")).unwrap()).unwrap();
    assert_eq!(mcp["mcpServers"]["loopx"]["args"], json!(["mcp", "--agent-id", "cursor-1"]));
    assert!(!s.root.join(".cursor/hooks.json").exists());
    // Another agent id is the install's to name; hosts that bind sessions refuse one.
    let s2 = Sandbox::new();
    s2.init();
    s2.ok(&["host", "install", "cursor", "--agent-id", "cursor-review"]);
    assert!(std::fs::read_to_string(s2.root.join(".cursor/mcp.json")).unwrap().contains("cursor-review"));
    let r = s2.fails(2, &["host", "install", "claude-code", "--agent-id", "cursor-review"]);
    assert!(r.stderr.contains("join as their own agents"), "{}", r.stderr);
    // The doctor and the onboarding say what is left to the person, in order.
    let d = s.json(&["host", "doctor", "cursor"]);
    assert_eq!(d["ok"], true, "{d}");
    assert!(d["steps"][0].as_str().unwrap().contains("Settings → MCP"), "{d}");
    assert!(
        s.ok(&["host", "doctor", "cursor"])
            .stdout
            .contains("then, in cursor:\n  1. In Cursor, open Settings")
    );
    let o = s.json(&["agent", "onboard", "--agent-type", "cursor"]);
    assert_eq!(o["host"], "cursor");
    assert!(o["steps"][0].as_str().unwrap().starts_with("loopx host install cursor"), "{o}");
}

#[test]
fn the_hooks_answer_every_decision_in_cursors_protocol() {
    let s = installed(&["--stop-driver", "--harden"]);
    let mut transcript = String::new();
    let mut note = |what: &str, v: &Value| transcript.push_str(&format!("{what}: {v}\n"));

    note("stop, before /loopx (not armed)", &stop(&s, 0));
    note("prompt /loopx write the reader", &prompt(&s, "/loopx write the reader"));
    note("stop, run", &stop(&s, 0));
    note("shell, read-only", &shell(&s, "ls -la src"));
    note("shell, a person's decision", &shell(&s, "loopx gate answer g1 --approve"));
    note("shell, loopx's state", &shell(&s, "rm .loopx/goals/main/events.jsonl"));
    note("shell, destructive", &shell(&s, "git push --force origin main"));
    note("shell, mutating while run", &shell(&s, "cargo test -p reader"));
    s.ok(&["gate", "ask", "--question", "May the reader drop rows?", "--blocks", "goal"]);
    note("stop, ask_user", &stop(&s, 1));
    note("shell, mutating while ask_user", &shell(&s, "cargo build"));
    s.ok(&["gate", "answer", "g1", "--approve"]);
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "codex-1"]);
    note("stop, wait (a peer holds the work)", &stop(&s, 1));
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "codex-1",
        "--evidence",
        "reader tests pass",
    ]);
    note("stop, replan", &stop(&s, 1));
    s.ok(&["todo", "add", "--agent-id", "cursor-1", "--text", "handle quoted fields"]);
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "cursor-1"]);
    s.ok(&["handoff", "--agent-id", "cursor-1", "--to-host", "claude-code", "--note", "over to you"]);
    note("stop, handoff", &stop(&s, 1));
    s.ok(&["handoff", "cancel", "--handoff-id", "h1"]);
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t2",
        "--agent-id",
        "cursor-1",
        "--no-follow-up",
        "--note",
        "done",
        "--evidence",
        "quoted fields parse",
    ]);
    note("stop, terminal", &stop(&s, 1));
    s.ok(&["todo", "add", "--agent-id", "cursor-1", "--text", "one more"]);
    note("prompt /loopx off", &prompt(&s, "/loopx off"));
    note("stop, disarmed", &stop(&s, 1));
    note("prompt, any other text", &prompt(&s, "what does this function do?"));
    insta::assert_snapshot!("cursor_hook_answers", transcript);

    // loopx's own cap, besides Cursor's loop_limit: 10 continuations a chat (3 were above:
    // two to work on, one to show the question), then it lets go.
    prompt(&s, "/loopx");
    let continued = (0..12).filter(|n| stop(&s, *n).get("followup_message").is_some()).count();
    assert_eq!(continued, 7);
    // Broken input: the stop hook lets Cursor stop, the gate denies.
    let r = s.run_with(&["hook", "cursor", "stop", "--agent-id", "cursor-1"], b"not json", &[]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "{}"), "{}", r.stderr);
    let r = s.run_with(&["hook", "cursor", "before-shell-execution", "--agent-id", "cursor-1"], b"{", &[]);
    assert!(r.stdout.contains(r#""permission":"deny""#), "{}", r.stdout);
}

#[test]
fn the_mcp_server_acts_as_the_installed_agent_never_the_only_one_registered() {
    let s = installed(&[]);
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "add", "--text", "write the reader"]);
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(s.root.join(".cursor/mcp.json")).unwrap()).unwrap();
    let args: Vec<String> = mcp["mcpServers"]["loopx"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "mcp");
    let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let mut m = Session::start(&s, &rest);
    let (err, body) = m.call("should_run", json!({}));
    assert!(err, "the only registered agent is codex-1, and the Cursor server is not it: {body}");
    assert!(body.as_str().unwrap().contains("agent cursor-1 is not registered"), "{body}");
    let (err, body) = m.call("should_run", json!({"agent_id": "codex-1"}));
    assert!(err && body.as_str().unwrap().contains("acts as agent cursor-1"), "{body}");
}

/// The driver plays Cursor and the person: the person types `/loopx <task>`; the model follows
/// the rule through the MCP tools; after each reply, the stop hook's `followup_message`, if
/// any, is submitted as the next user message, as Cursor does.
#[test]
fn a_scripted_manual_session_reaches_the_goals_end_with_evidence() {
    let s = Sandbox::new();
    s.ok(&["host", "install", "cursor", "--stop-driver"]);
    let mut m = Session::start(&s, &["--agent-id", "cursor-1"]);
    let first = prompt(&s, "/loopx write the CSV reader");
    assert_eq!(first, json!({"continue": true}));
    let mut message = "/loopx write the CSV reader".to_owned();
    let mut turns = 0;
    let mut followups = Vec::new();
    loop {
        turns += 1;
        assert!(turns <= 5, "the session should end: {followups:?}");
        // The model's turn, as the rule says.
        let turn = format!("turn-{turns}");
        let d = m.ok("should_run", json!({"turn_id": turn}));
        if d["should_run"] != true {
            break;
        }
        let todo = d["selected_todo"]["id"].as_str().unwrap().to_owned();
        if d["selected_todo"]["claim_required"] == true {
            m.ok("claim_task", json!({"todo_id": todo, "turn_id": turn}));
        }
        let done = if todo == "t1" {
            json!({"todo_id": todo, "turn_id": turn, "evidence": "cargo test reader: 9 passed", "next_todo": "handle quoted fields"})
        } else {
            json!({"todo_id": todo, "turn_id": turn, "evidence": "cargo test quoting: 4 passed", "no_follow_up": true, "note": "the reader is complete"})
        };
        m.ok("complete_task", done);
        // The reply ends; Cursor runs the stop hook and submits its follow-up, if any.
        let answer = stop(&s, turns - 1);
        match answer["followup_message"].as_str() {
            Some(next) => {
                message = next.to_owned();
                followups.push(message.clone());
            }
            None => {
                assert_eq!(answer, json!({}));
                break;
            }
        }
    }
    assert_eq!(followups.len(), 1, "one follow-up, from t1 to t2: {followups:?}");
    assert!(message.contains("t2") && message.contains("handle quoted fields"), "{message}");
    // The same end a Claude Code or Codex run reaches.
    let list = s.json(&["todo", "list", "--all"]);
    let todos = list["todos"].as_array().unwrap();
    assert_eq!(todos.len(), 2);
    for t in todos {
        assert_eq!((t["status"].as_str(), t["claimed_by"].as_str()), (Some("done"), Some("cursor-1")), "{t}");
    }
    assert_eq!(s.json(&["evidence", "list"])["evidence"].as_array().unwrap().len(), 2);
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 2, "one spend per turn");
    assert_eq!(s.json(&["quota", "should-run", "--agent-id", "cursor-1"])["state"], "terminal");
    let kinds: Vec<String> =
        events(&s.events_path("main")).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "stop_blocked").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "turn_settled").count(), 2, "{kinds:?}");
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "cursor");
}
