//! A goal started in the real Codex and finished in the real Claude Code (or Gemini CLI), each against its
//! scripted model API on 127.0.0.1: Codex starts the goal with `$loopx`, completes a todo with
//! evidence and hands the next one off; Claude Code's next session is told of the handoff in
//! its SessionStart context before anything else, takes it over from its Bash tool, and works
//! the rest to the end under the Stop driver.

use serde_json::json;

use loopx_tests::{Sandbox, loopx_bin};

use crate::real_claude::{self as cc, step, text, tool_use};
use crate::real_codex::{self as cx, mcp, say, shell};
use crate::real_gemini as gm;

/// Codex: `$loopx` starts the goal; the model plans, finishes t1, takes t2 and hands it off to
/// `host` with a note. Returns Codex's agent.
fn codex_hands_t2_to(s: &Sandbox, host: &str) -> String {
    let loopx = loopx_bin().display().to_string();
    let l = |rest: &str| format!("{loopx} {rest}");
    let codex_script = vec![
        shell(1, &l("todo add --text 'wire the export button' --priority P1")),
        shell(2, &l("todo add --text 'document the export' --priority P2")),
        mcp(3, "claim_task", json!({"todo_id": "t1", "turn_id": "turn-1"})),
        mcp(
            4,
            "complete_task",
            json!({"todo_id": "t1", "turn_id": "turn-1", "evidence": "cargo test csv_writer: 14 passed"}),
        ),
        shell(5, &l("todo claim --todo-id t2")),
        shell(
            6,
            &l(&format!(
                "handoff --to-host {host} --note 'the button renders; wire its onClick to the writer'"
            )),
        ),
        say("Handed the button on."),
    ];
    let codex_api = cx::FakeApi::start(codex_script);
    cx::setup(s, &codex_api);
    let out = cx::run_codex(s, "$loopx write the CSV writer", &[]);
    assert!(out.status.success(), "codex failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Handed the button on."));
    let codex_agent =
        s.json(&["todo", "show", "--todo-id", "t1"])["todo"]["claimed_by"].as_str().unwrap().to_owned();
    assert!(codex_agent.starts_with("codex-"), "{codex_agent}");
    let pending = s.json(&["handoff", "list"]);
    assert_eq!(pending["handoffs"][0]["from"], codex_agent.as_str(), "{pending}");
    assert_eq!(pending["handoffs"][0]["todos"][0]["todo"], "t2");
    let d = s.json(&["quota", "should-run", "--agent-id", &codex_agent]);
    assert_eq!(d["decision"], "handoff", "Codex's lane waits for the receiver: {d}");
    assert!(!cx::kinds(s).contains(&"stop_blocked".to_owned()), "the Stop hook let Codex end at the handoff");
    codex_agent
}

#[test]
fn a_goal_started_in_codex_is_finished_in_claude_code_with_nothing_lost() {
    let claude = cc::claude_bin();
    let s = Sandbox::new();
    let codex_agent = codex_hands_t2_to(&s, "claude-code");

    // Claude Code: a new session; the handoff is its first context. It takes it over from its
    // Bash tool and works the rest through the MCP tools and the Stop driver.
    s.ok(&["host", "install", "claude-code", "--stop-driver"]);
    cc::trust_workspace(&s);
    let resume =
        json!({"command": "loopx resume --host claude-code", "description": "take the handoff over"});
    let claude_script = vec![
        step(tool_use(1, "Bash", resume), "tool_use"),
        step(tool_use(2, "mcp__loopx__should_run", json!({"turn_id": "turn-1"})), "tool_use"),
        step(
            tool_use(
                3,
                "mcp__loopx__complete_task",
                json!({"todo_id": "t2", "turn_id": "turn-1", "evidence": "npm test -- export-button: 3 passed"}),
            ),
            "tool_use",
        ),
        step(text("t2 is done."), "end_turn"),
        // The Stop driver sends it on to t3.
        step(
            tool_use(4, "mcp__loopx__claim_task", json!({"todo_id": "t3", "turn_id": "turn-2"})),
            "tool_use",
        ),
        step(
            tool_use(
                5,
                "mcp__loopx__complete_task",
                json!({"todo_id": "t3", "turn_id": "turn-2", "evidence": "docs/export.md reviewed", "no_follow_up": true, "note": "the export is documented"}),
            ),
            "tool_use",
        ),
        step(text("Everything is done."), "end_turn"),
    ];
    let claude_api = cc::FakeApi::start(claude_script);
    let out = cc::run_claude(&claude, &s, &claude_api, "Carry on with this project's goal.");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Everything is done."), "{stdout}");
    let seen = serde_json::to_string(&*claude_api.requests.lock().unwrap()).unwrap();
    let first =
        seen.find("Handoff h1 from agent codex-").expect("the SessionStart context carried the handoff");
    assert!(
        seen.contains("the button renders; wire its onClick to the writer"),
        "the note reached the model"
    );
    assert!(seen.contains("cargo test csv_writer: 14 passed"), "Codex's evidence reached the model");
    assert!(first < seen.find("loopx governs this project").unwrap(), "the handoff is told first");
    assert!(seen.contains("You took handoff h1 over") || seen.contains("h1 accepted"), "resume answered");
    assert!(seen.contains("continue with t3"), "the Stop driver's instruction reached the model");

    // The final state: every todo done with its evidence, both agents registered, the handoff
    // accepted, one spend per turn, and the history tells the story in order.
    let list = s.json(&["todo", "list", "--all"]);
    let todos = list["todos"].as_array().unwrap();
    assert_eq!(todos.len(), 3, "{list}");
    let claude_agent = todos[1]["claimed_by"].as_str().unwrap().to_owned();
    assert!(claude_agent.starts_with("claude-"), "{list}");
    let owners: Vec<&str> = todos.iter().map(|t| t["claimed_by"].as_str().unwrap()).collect();
    assert_eq!(owners, [codex_agent.as_str(), claude_agent.as_str(), claude_agent.as_str()]);
    for t in todos {
        assert_eq!(t["status"], "done", "{t}");
        let shown = s.json(&["todo", "show", "--todo-id", t["id"].as_str().unwrap()]);
        assert!(!shown["evidence"].as_array().unwrap().is_empty(), "{shown}");
    }
    let agents = s.json(&["agent", "list"]);
    let ids: Vec<&str> =
        agents["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [codex_agent.as_str(), claude_agent.as_str()]);
    let h = s.json(&["handoff", "list", "--all"]);
    assert_eq!(
        (h["handoffs"][0]["status"].as_str(), h["handoffs"][0]["accepted_by"].as_str()),
        (Some("accepted"), Some(claude_agent.as_str()))
    );
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 3, "one spend per turn");
    for a in [&codex_agent, &claude_agent] {
        assert_eq!(s.json(&["quota", "should-run", "--agent-id", a])["state"], "terminal", "{a}");
    }
    let story = s.ok(&["history", "--limit", "200"]).stdout;
    let mut at = 0;
    for line in [
        "t1 completed",
        &format!("t2 claimed by {codex_agent}"),
        &format!("{codex_agent} handed t2 off to claude-code (h1): the button renders"),
        &format!("{claude_agent} took over t2 from {codex_agent} (h1)"),
        "t2 completed",
        "t3 completed",
    ] {
        let found = story[at..].find(line).unwrap_or_else(|| panic!("{line:?} after byte {at} in\n{story}"));
        at += found + line.len();
    }
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

/// Codex hands a todo to Gemini CLI: `/loopx` in a new Gemini session takes the handoff over,
/// and the packet is the first thing the model reads; the AfterAgent driver works the rest.
#[test]
fn a_todo_handed_from_codex_to_gemini_is_taken_over_with_the_packet_first() {
    let s = Sandbox::new();
    let codex_agent = codex_hands_t2_to(&s, "gemini");
    gm::setup(&s, &["--with", "stop-driver"]);
    let script = vec![
        gm::call("mcp_loopx_should_run", json!({"turn_id": "turn-1"})),
        gm::call(
            "mcp_loopx_complete_task",
            json!({"todo_id": "t2", "turn_id": "turn-1", "evidence": "npm test -- export-button: 3 passed"}),
        ),
        gm::say("t2 is done."),
        gm::call("mcp_loopx_claim_task", json!({"todo_id": "t3", "turn_id": "turn-2"})),
        gm::call(
            "mcp_loopx_complete_task",
            json!({"todo_id": "t3", "turn_id": "turn-2", "evidence": "docs/export.md reviewed", "no_follow_up": true, "note": "the export is documented"}),
        ),
        gm::say("Everything is done."),
    ];
    let api = gm::fake_api(script);
    let out = gm::run_gemini(&s, &api, &["-p", "/loopx"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "gemini failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Everything is done."), "{stdout}");
    let seen = api.all();
    let packet = seen.find("Handoff h1 from agent codex-").expect("the /loopx context carried the packet");
    assert!(packet < seen.find("this session is agent gemini-").unwrap(), "the packet is told first");
    assert!(
        seen.contains("the button renders; wire its onClick to the writer"),
        "the note reached the model"
    );
    assert!(seen.contains("cargo test csv_writer: 14 passed"), "Codex's evidence reached the model");
    assert!(seen.contains("continue with t3"), "the AfterAgent driver's instruction reached the model");

    let list = s.json(&["todo", "list", "--all"]);
    let todos = list["todos"].as_array().unwrap();
    let gemini_agent = todos[1]["claimed_by"].as_str().unwrap().to_owned();
    assert!(gemini_agent.starts_with("gemini-"), "{list}");
    let owners: Vec<&str> = todos.iter().map(|t| t["claimed_by"].as_str().unwrap()).collect();
    assert_eq!(owners, [codex_agent.as_str(), gemini_agent.as_str(), gemini_agent.as_str()]);
    assert!(todos.iter().all(|t| t["status"] == "done"), "{list}");
    let h = s.json(&["handoff", "list", "--all"]);
    assert_eq!(
        (h["handoffs"][0]["status"].as_str(), h["handoffs"][0]["accepted_by"].as_str()),
        (Some("accepted"), Some(gemini_agent.as_str()))
    );
    assert_eq!(s.json(&["quota", "status"])["quota"]["used_slots"], 3, "one spend per turn");
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}
