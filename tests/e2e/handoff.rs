//! Handoff across hosts through the binary: the packet, reservation, acceptance (by `resume`
//! and by a claim), cancel, expiry, hard leases, idempotency, refusals that change nothing,
//! kill -9 during accept, history filters, and the second host never breaking the first lane.

use std::process::Stdio;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use loopx_tests::{Sandbox, events};

/// A goal with a Codex CLI agent holding t1 and t2, and t3 open.
fn started() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    for text in ["write the writer", "wire the button", "write the docs"] {
        s.ok(&["todo", "add", "--text", text]);
    }
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "codex-1"]);
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "codex-1",
        "--evidence",
        "cargo test writer: 9 passed",
    ]);
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "codex-1"]);
    s
}

fn decision(s: &Sandbox, agent: &str) -> Value {
    s.json(&["quota", "should-run", "--agent-id", agent])
}

fn todo(s: &Sandbox, id: &str) -> Value {
    s.json(&["todo", "show", "--todo-id", id])["todo"].clone()
}

fn offer(s: &Sandbox, extra: &[&str]) -> Value {
    let mut args = vec!["handoff", "--agent-id", "codex-1", "--to-host", "claude-code"];
    args.extend_from_slice(extra);
    s.json(&args)
}

#[test]
fn a_handoff_to_a_host_with_no_agent_yet_carries_everything_and_registers_the_receiver() {
    let s = started();
    let h = offer(&s, &["--note", "the button renders; wire onClick"]);
    assert_eq!(h["handoff"]["id"], "h1");
    assert_eq!(h["handoff"]["status"], "pending");
    assert_eq!(h["handoff"]["todos"][0]["todo"], "t2", "every open todo the sender holds");
    assert_eq!(h["handoff"]["evidence"], serde_json::json!(["e1"]), "the proof so far");
    assert!(todo(&s, "t2").get("claimed_by").is_none(), "the sender's claim is released for the receiver");

    // The sender's lane waits for the receiver; a status shows the handoff.
    let d = decision(&s, "codex-1");
    assert_eq!(d["decision"], "handoff");
    assert_eq!(d["should_run"], false);
    assert_eq!(
        d["continuation"],
        serde_json::json!({"action": "handoff", "handoff": "h1", "to_host": "claude-code"})
    );
    assert_eq!(d["scheduler"]["action"], "stop_until_resume");
    assert_eq!(s.json(&["status"])["handoffs"][0]["id"], "h1");
    assert!(s.ok(&["status"]).stdout.contains("handoff:     h1 pending: codex-1 → claude-code (t2)"));
    let goal_md = std::fs::read_to_string(s.state_dir().join("goals/main/GOAL.md")).unwrap();
    assert!(goal_md.contains("## Handoffs waiting") && goal_md.contains("loopx resume --host claude-code"));

    // No claude-code agent exists yet: resume says which one takes it.
    let r = s.fails(1, &["resume", "--host", "claude-code"]);
    assert!(r.stderr.contains("no claude-code agent is registered"), "{}", r.stderr);
    assert!(r.stderr.contains("--agent-id"), "{}", r.stderr);

    let r = s.json(&["resume", "--host", "claude-code", "--agent-id", "claude-1"]);
    assert_eq!(r["changed"], true);
    assert_eq!(r["registered"], true, "registered additively");
    let p = &r["packet"];
    assert_eq!(p["handoff"]["status"], "accepted");
    assert_eq!(p["handoff"]["accepted_by"], "claude-1");
    assert_eq!(p["objective"], "ship the feature");
    assert_eq!(p["done"][0]["todo"], "t1");
    assert_eq!(p["done"][0]["evidence"][0]["summary"], "cargo test writer: 9 passed");
    assert_eq!(p["left"][0]["id"], "t2", "the handed-over todo first");
    assert_eq!(p["left"][1]["id"], "t3");
    assert_eq!(r["next_todo"]["id"], "t2");
    assert_eq!(todo(&s, "t2")["claimed_by"], "claude-1");
    let agents = s.json(&["agent", "list"]);
    let ids: Vec<&str> =
        agents["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["codex-1", "claude-1"], "the first agent stays registered");
    assert_eq!(s.json(&["agent", "list"])["agents"][1]["agent_type"], "claude-code");

    // Both lanes run: the receiver continues t2, the sender picks t3 again.
    let d = decision(&s, "claude-1");
    assert_eq!((d["decision"].as_str(), d["selected_todo"]["id"].as_str()), (Some("run"), Some("t2")));
    assert_eq!(d["selected_todo"]["claim_required"], false);
    let d = decision(&s, "codex-1");
    assert_eq!((d["decision"].as_str(), d["selected_todo"]["id"].as_str()), (Some("run"), Some("t3")));

    // Taking it over again changes nothing and shows the same packet.
    let again = s.json(&["resume", "--host", "claude-code", "--agent-id", "claude-1", "--handoff-id", "h1"]);
    assert_eq!(again["changed"], false);
    assert_eq!(again["packet"]["handoff"]["id"], "h1");

    // History tells it in one line each, and filters by agent and todo.
    let text = s.ok(&["history", "--todo", "t2"]).stdout;
    assert!(
        text.contains("codex-1 handed t2 off to claude-code (h1): the button renders; wire onClick"),
        "{text}"
    );
    assert!(text.contains("claude-1 took over t2 from codex-1 (h1)"), "{text}");
    assert!(!text.contains("t1 completed"), "only t2's events: {text}");
    let mine = s.json(&["history", "--agent", "claude-1", "--limit", "100"]);
    let kinds: Vec<&str> =
        mine["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["handoff_accepted"], "the receiver appears once it takes over");
    assert_eq!(mine["matched"], 1);
    let sender = s.json(&["history", "--agent", "codex-1", "--limit", "100"]);
    assert!(sender["matched"].as_u64().unwrap() >= 5);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn the_receiver_selects_the_handed_todo_first_and_its_claim_takes_the_handoff_over() {
    let s = started();
    s.ok(&["agent", "register", "--agent-id", "claude-1", "--agent-type", "claude-code"]);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "urgent own work", "--priority", "P0"]);
    s.ok(&["todo", "claim", "--todo-id", "t4", "--agent-id", "claude-1"]);
    offer(&s, &["--to-agent", "claude-1", "--todo-id", "t2"]);
    // Its own claim on a P0 todo notwithstanding, the handed-over todo comes first.
    let d = decision(&s, "claude-1");
    assert_eq!(d["selected_todo"]["id"], "t2", "{d}");
    assert_eq!(d["selected_todo"]["claim_required"], true);
    assert!(d["next_commands"][0].as_str().unwrap().contains("todo claim"), "{d}");
    // A third agent may not take it, and waits for it rather than replanning.
    s.ok(&["agent", "register", "--agent-id", "cursor-1", "--agent-type", "cursor"]);
    s.ok(&["todo", "claim", "--todo-id", "t3", "--agent-id", "cursor-1"]);
    let r = s.fails(1, &["todo", "claim", "--todo-id", "t2", "--agent-id", "cursor-1"]);
    assert!(r.stderr.contains("handed off to claude-1 (claude-code) (h1"), "{}", r.stderr);
    s.ok(&["todo", "complete", "--todo-id", "t3", "--agent-id", "cursor-1", "--evidence", "docs written"]);
    let d = decision(&s, "cursor-1");
    assert_eq!(d["decision"], "wait", "{d}");
    assert!(d["reason"].as_str().unwrap().contains("handed off"), "{d}");
    // The receiver acts on it only once it has taken it over.
    let r = s.fails(1, &["todo", "complete", "--todo-id", "t2", "--agent-id", "claude-1", "--evidence", "x"]);
    assert!(r.stderr.contains("take the handoff over"), "{}", r.stderr);
    assert!(r.stderr.contains("loopx resume"), "{}", r.stderr);
    // Its claim is the takeover: one event, the handoff accepted.
    let before = events(&s.events_path("main")).len();
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "claude-1"]);
    let evs = events(&s.events_path("main"));
    assert_eq!(evs.len(), before + 1);
    assert_eq!(evs.last().unwrap()["kind"], "handoff_accepted");
    assert_eq!(todo(&s, "t2")["claimed_by"], "claude-1");
    assert_eq!(todo(&s, "t4")["claimed_by"], "claude-1", "its own claims stay");
    assert_eq!(s.json(&["handoff", "list", "--all"])["handoffs"][0]["status"], "accepted");
}

#[test]
fn refusals_change_nothing() {
    let s = started();
    let before = s.tree();
    // A todo the sender does not hold.
    let r = s.fails(1, &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--todo-id", "t3"]);
    assert!(r.stderr.contains("does not hold todo t3"), "{}", r.stderr);
    // A closed todo, an unknown one, a bad host, a bad ttl, an ambiguous host, itself.
    s.fails(1, &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--todo-id", "t1"]);
    s.fails(1, &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--todo-id", "t9"]);
    s.fails(2, &["handoff", "--agent-id", "codex-1", "--to-host", "claude-codex"]);
    s.fails(2, &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--ttl", "9d"]);
    let r = s.fails(2, &["handoff", "--agent-id", "codex-1", "--to-host", "codex"]);
    assert!(r.stderr.contains("codex-cli"), "ambiguous input lists the candidates: {}", r.stderr);
    s.fails(2, &["handoff", "--agent-id", "codex-1", "--to-host", "codex-cli", "--to-agent", "codex-1"]);
    s.fails(2, &["handoff", "--agent-id", "codex-1"]);
    // A person has no todos to hand off.
    s.fails(1, &["handoff", "--agent-id", "user", "--to-host", "claude-code"]);
    // A named receiver of another host.
    s.ok(&["agent", "register", "--agent-id", "cursor-1", "--agent-type", "cursor"]);
    let before_cursor = s.tree();
    let r = s.fails(
        2,
        &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--to-agent", "cursor-1"],
    );
    assert!(r.stderr.contains("acts through cursor"), "{}", r.stderr);
    assert_eq!(s.tree(), before_cursor);
    drop(before);

    // A second handoff of the same todo while one is pending.
    offer(&s, &["--todo-id", "t2"]);
    let pending = s.tree();
    let r = s.fails(1, &["handoff", "--agent-id", "codex-1", "--to-host", "cursor", "--todo-id", "t2"]);
    assert!(r.stderr.contains("already handed off to claude-code (h1"), "{}", r.stderr);
    // Resume, cancel and takeover refusals.
    s.fails(2, &["resume", "--host", "claude-code", "--agent-id", "cursor-1"]);
    s.fails(1, &["resume", "--host", "cursor", "--agent-id", "cursor-1", "--handoff-id", "h1"]);
    s.fails(1, &["handoff", "cancel", "--handoff-id", "h1", "--agent-id", "cursor-1"]);
    s.fails(1, &["handoff", "cancel", "--handoff-id", "h7"]);
    s.fails(2, &["handoff", "cancel", "--handoff-id", "x1"]);
    s.fails(2, &["resume", "--host", "nowhere"]);
    assert_eq!(s.tree(), pending, "every refusal left every byte as it was");
}

#[test]
fn cancel_returns_the_todos_to_the_sender_and_expiry_frees_them() {
    let s = started();
    offer(&s, &["--note", "over to you"]);
    let c = s.json(&[
        "handoff",
        "cancel",
        "--handoff-id",
        "h1",
        "--agent-id",
        "codex-1",
        "--reason",
        "staying on it",
    ]);
    assert_eq!(c["handoff"]["status"], "cancelled");
    assert_eq!(c["handoff"]["reason"], "staying on it");
    assert_eq!(todo(&s, "t2")["claimed_by"], "codex-1");
    assert_eq!(decision(&s, "codex-1")["selected_todo"]["id"], "t2");
    let again = s.json(&["handoff", "cancel", "--handoff-id", "h1", "--agent-id", "codex-1"]);
    assert_eq!(again["changed"], false, "cancelling twice is a no-op");
    s.fails(1, &["resume", "--host", "claude-code", "--agent-id", "claude-1", "--handoff-id", "h1"]);
    assert!(s.ok(&["history"]).stdout.contains("h1 cancelled: staying on it"));

    // A person may cancel too.
    offer(&s, &[]);
    s.ok(&["handoff", "cancel", "--handoff-id", "h2"]);

    // Expiry: nothing is stranded.
    offer(&s, &["--ttl", "1s"]);
    s.advance(Duration::from_millis(1100));
    assert!(s.json(&["status"]).get("handoffs").is_none(), "an expired handoff is not pending");
    let all = s.json(&["handoff", "list", "--all"]);
    assert_eq!(all["handoffs"][2]["status"], "expired");
    assert!(s.ok(&["handoff", "list"]).stdout.contains("no handoffs waiting"));
    assert!(todo(&s, "t2").get("claimed_by").is_none(), "back to an open todo");
    let d = decision(&s, "codex-1");
    assert_eq!(d["decision"], "run", "the sender's lane is free again: {d}");
    let r = s.fails(1, &["resume", "--host", "claude-code", "--agent-id", "claude-1", "--handoff-id", "h3"]);
    assert!(r.stderr.contains("expired"), "{}", r.stderr);
    let r = s.json(&["resume", "--host", "claude-code", "--agent-id", "claude-1"]);
    assert_eq!((r["changed"].as_bool(), r.get("packet")), (Some(false), None), "nothing waits");
    s.fails(1, &["handoff", "cancel", "--handoff-id", "h3"]);
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "codex-1"]);
}

#[test]
fn in_hard_lease_mode_the_lease_moves_with_the_handoff_version_checked() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["goal", "set", "--handoff-mode", "hard_lease"]);
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    s.ok(&["todo", "add", "--text", "wire the button"]);
    s.ok(&[
        "lease",
        "acquire",
        "--todo-id",
        "t1",
        "--agent-id",
        "codex-1",
        "--ttl",
        "30m",
        "--write-scope",
        "web/**",
    ]);
    let before = s.json(&["lease", "show", "--todo-id", "t1"]);
    offer(&s, &[]);
    let during = s.json(&["lease", "show", "--todo-id", "t1"]);
    assert_eq!(during["active"], false, "the sender's lease is released");
    assert_eq!(during["version"], before["version"].as_u64().unwrap() + 1);
    s.json(&["resume", "--host", "claude-code", "--agent-id", "claude-1"]);
    let after = s.json(&["lease", "show", "--todo-id", "t1"]);
    assert_eq!(after["lease"]["owner"], "claude-1");
    assert_eq!(after["active"], true);
    assert_eq!(after["lease"]["write_scope"], serde_json::json!(["web/**"]));
    assert_eq!(after["version"], during["version"].as_u64().unwrap() + 1);
    // The receiver works under it without acquiring one.
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "claude-1",
        "--evidence",
        "npm test: 3 passed",
    ]);

    // While it is pending nobody else leases it.
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "write the docs"]);
    s.ok(&["lease", "acquire", "--todo-id", "t2", "--agent-id", "codex-1", "--ttl", "30m"]);
    offer(&s, &["--to-agent", "claude-1"]);
    s.ok(&["agent", "register", "--agent-id", "cursor-1", "--agent-type", "cursor"]);
    let r = s.fails(1, &["lease", "acquire", "--todo-id", "t2", "--agent-id", "cursor-1", "--ttl", "5m"]);
    assert!(r.stderr.contains("handed off to claude-1"), "{}", r.stderr);
    // The receiver's claim takes it over, lease and all.
    s.ok(&["todo", "claim", "--todo-id", "t2", "--agent-id", "claude-1"]);
    assert_eq!(s.json(&["lease", "show", "--todo-id", "t2"])["lease"]["owner"], "claude-1");
}

#[test]
fn a_handoff_under_a_turn_id_is_made_once() {
    let s = started();
    let args = [
        "handoff",
        "--agent-id",
        "codex-1",
        "--to-host",
        "claude-code",
        "--turn-instance-id",
        "turn-7",
        "--json",
    ];
    let first = s.ok(&args).json();
    let n = events(&s.events_path("main")).len();
    let second = s.ok(&args).json();
    assert_eq!(first, second);
    assert_eq!(events(&s.events_path("main")).len(), n, "the replay appended nothing");
}

/// A take-over repeated under its turn id is that turn's receipt again, though nothing waits any
/// more: a keyed command is answered from what it stored, never decided afresh as a no-op.
#[test]
fn a_take_over_under_a_turn_id_is_replayed_not_redone() {
    let s = started();
    offer(&s, &[]);
    let args = [
        "resume",
        "--host",
        "claude-code",
        "--agent-id",
        "claude-1",
        "--turn-instance-id",
        "turn-9",
        "--json",
    ];
    let first = s.ok(&args).json();
    assert_eq!(first["changed"], true, "{first}");
    let n = events(&s.events_path("main")).len();
    let again = s.ok(&args).json();
    // The receipt again, its body read from the goal as it is (not kept verbatim for a take-over).
    for field in ["seq", "changed", "agent", "packet", "next_todo"] {
        assert_eq!(again[field], first[field], "{field}: a replay is the first receipt, not a no-op's");
    }
    assert_eq!(events(&s.events_path("main")).len(), n, "the replay appended nothing");
}

#[test]
fn kill_minus_nine_during_accept_leaves_it_accepted_or_pending_never_half() {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    let (mut accepted, mut pending) = (0, 0);
    let mut seed = 0x5eed_u64;
    // At least 30 kills, and more (with a widening window) until some landed before and some
    // after the commit.
    let mut i = 0u64;
    while i < 30 || ((accepted < 3 || pending < 3) && i < 200) {
        i += 1;
        s.ok(&["todo", "add", "--agent-id", "user", "--text", &format!("slice {i}")]);
        let t = format!("t{i}");
        let receiver = format!("claude-{i}");
        s.ok(&["todo", "claim", "--todo-id", &t, "--agent-id", "codex-1"]);
        s.ok(&["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--to-agent", &receiver]);
        let mut child = s
            .command()
            .args(["resume", "--host", "claude-code"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        thread::sleep(Duration::from_micros(seed % (4000 + 400 * i)));
        let _ = child.kill();
        let _ = child.wait();
        let h = &s.json(&["handoff", "list", "--all"])["handoffs"][usize::try_from(i - 1).unwrap()];
        let registered = s.json(&["agent", "list"])["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == receiver.as_str());
        let holder = todo(&s, &t)["claimed_by"].clone();
        match h["status"].as_str().unwrap() {
            "accepted" => {
                accepted += 1;
                assert!(registered && holder == receiver.as_str(), "accepted whole: {h} {holder}");
            }
            "pending" => {
                pending += 1;
                assert!(!registered && holder.is_null(), "pending whole: {h} {holder}");
                s.ok(&["handoff", "cancel", "--handoff-id", h["id"].as_str().unwrap()]);
            }
            other => panic!("handoff {other}"),
        }
    }
    assert!(
        accepted >= 3 && pending >= 3,
        "kills landed before and after the commit: {accepted} accepted, {pending} pending"
    );
    assert_eq!(s.json(&["doctor"])["healthy"], true);
}

#[test]
fn a_second_host_arming_the_goal_never_breaks_the_first_lane() {
    let s = Sandbox::new();
    // A Codex session starts the goal from its shell tool.
    let codex = [("CODEX_THREAD_ID", "019a-codex-thread")];
    let r = s.run_with(&["join", "write the CSV writer"], b"", &codex);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = s.run_with(&["todo", "add", "--text", "wire the button"], b"", &codex);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Claude Code arms the same goal with /loopx.
    let prompt = serde_json::json!({
        "session_id": "5f1c-claude-session",
        "hook_event_name": "UserPromptSubmit",
        "cwd": s.root,
        "prompt": "/loopx write the docs",
    });
    let r = s.run_with(&["hook", "claude-code", "user-prompt-submit"], prompt.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let agents = s.json(&["agent", "list"]);
    let ids: Vec<&str> =
        agents["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in ids {
        let d = decision(&s, id);
        assert_eq!(d["should_run"], true, "{id} still runs: {d}");
    }
    // The Codex session still acts as its own agent.
    let r = s.run_with(&["quota", "should-run", "--json"], b"", &codex);
    assert_eq!(r.json()["agent_id"], "codex-019acodexthr");
}

#[test]
fn the_receiving_sessions_start_shows_the_handoff_first_and_resume_there_joins_and_takes_it() {
    let s = started();
    offer(&s, &["--note", "wire onClick to the writer"]);
    let start = serde_json::json!({
        "session_id": "77aa-claude",
        "hook_event_name": "SessionStart",
        "cwd": s.root,
        "source": "startup",
    });
    let r = s.run_with(&["hook", "claude-code", "session-start"], start.to_string().as_bytes(), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    let ctx = out["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(ctx.starts_with("Handoff h1 from agent codex-1 to claude-code (t2)"), "{ctx}");
    assert!(ctx.contains("wire onClick to the writer"), "{ctx}");
    assert!(ctx.contains("cargo test writer: 9 passed"), "the proof so far: {ctx}");
    assert!(ctx.contains("resume --host claude-code"), "{ctx}");
    // A Codex session is not told: the handoff is for Claude Code.
    let cx = serde_json::json!({
        "session_id": "019a", "transcript_path": null, "cwd": s.root, "hook_event_name": "SessionStart",
        "model": "gpt-5.5", "permission_mode": "default", "source": "startup",
    });
    let r = s.run_with(&["hook", "codex", "session-start"], cx.to_string().as_bytes(), &[]);
    assert!(!r.stdout.contains("Handoff h1"), "{}", r.stdout);
    // One for Codex is, first, with how to take it over there.
    s.ok(&["todo", "claim", "--todo-id", "t3", "--agent-id", "codex-1"]);
    s.ok(&[
        "handoff",
        "--agent-id",
        "codex-1",
        "--to-host",
        "codex-cli",
        "--todo-id",
        "t3",
        "--note",
        "docs next",
    ]);
    let r = s.run_with(&["hook", "codex", "session-start"], cx.to_string().as_bytes(), &[]);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    let ctx = out["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(ctx.starts_with("Handoff h2 from agent codex-1 to codex-cli (t3)"), "{ctx}");
    assert!(ctx.contains("$loopx, or run `"), "{ctx}");

    // The Claude session's shell runs resume: it joins as its own agent and takes over.
    let env = [("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "77aa-claude")];
    let r = s.run_with(&["resume", "--host", "claude-code", "--json"], b"", &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let body = r.json();
    assert_eq!(body["agent"], "claude-77aaclaude");
    assert_eq!(body["packet"]["handoff"]["status"], "accepted");
    let r = s.run_with(&["resume", "--host", "codex-cli"], b"", &env);
    assert_eq!(r.code, 2, "a Claude session is not a Codex one: {}", r.stderr);
    // Naming the session's own agent is fine (the README tells agents to name themselves);
    // naming another is refused, and changes nothing.
    let r = s.run_with(&["resume", "--host", "claude-code", "--agent-id", "claude-77aaclaude"], b"", &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let log = std::fs::read(s.events_path("main")).unwrap();
    let r = s.run_with(&["resume", "--host", "claude-code", "--agent-id", "codex-1"], b"", &env);
    assert!(
        r.code != 0 && r.stderr.contains("as its own agent claude-77aaclaude, not codex-1"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read(s.events_path("main")).unwrap(), log, "a refused resume writes nothing");
    let r = s.run_with(&["quota", "should-run", "--json"], b"", &env);
    assert_eq!(r.json()["selected_todo"]["id"], "t2");
}
