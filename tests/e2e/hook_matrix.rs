//! A broken loopx never traps a session: every hook event under every way things go wrong
//! (bad environment values, usage errors, no project, a corrupted log, a held lock, a full
//! disk) answers in the host's protocol, never with the exit code that blocks (2), and the
//! tool gate denies whenever loopx cannot check.

use std::process::{Child, Stdio};

use serde_json::{Value, json};

use loopx_adapter_claude_code_slash::ClaudeCodeSlash;
use loopx_core::host::{HookPoint, HostAdapter, HostAnswer};
use loopx_tests::{Run, Sandbox};

const EVENTS: [&str; 5] = ["session-start", "user-prompt-submit", "pre-tool-use", "stop", "statusline"];

fn stdin(s: &Sandbox, event: &str) -> String {
    let mut v = json!({"session_id": "matrix-1", "transcript_path": "/dev/null", "cwd": s.root});
    let extra = match event {
        "user-prompt-submit" => json!({"hook_event_name": "UserPromptSubmit", "prompt": "please go on"}),
        "pre-tool-use" => {
            json!({"hook_event_name": "PreToolUse", "tool_name": "Write", "tool_input": {"file_path": s.root.join("src/a.rs"), "content": "x"}})
        }
        "stop" => json!({"hook_event_name": "Stop", "stop_hook_active": true}),
        "session-start" => json!({"hook_event_name": "SessionStart", "source": "startup"}),
        _ => json!({}),
    };
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    v.to_string()
}

fn denied(r: &Run) -> bool {
    serde_json::from_str::<Value>(&r.stdout)
        .is_ok_and(|v| v["hookSpecificOutput"]["permissionDecision"] == "deny")
}

/// A project with an armed session and a todo: every hook has something to do.
fn armed() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    let join = json!({"session_id": "matrix-1", "cwd": s.root, "hook_event_name": "UserPromptSubmit", "prompt": "/loopx write the parser"});
    assert_eq!(
        s.run_with(&["hook", "claude-code", "user-prompt-submit"], join.to_string().as_bytes(), &[]).code,
        0
    );
    s
}

/// Checks one answer: valid in Claude Code's protocol, never blocking; `must_deny`: the tool
/// gate refused because loopx could not check.
fn check(case: &str, event: &str, r: &Run, must_deny: bool) {
    assert_ne!(
        r.code, 2,
        "{case} / {event}: exit 2 blocks the session\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let answer = HostAnswer { stdout: r.stdout.clone(), stderr: r.stderr.clone(), exit_code: r.code };
    let point = ClaudeCodeSlash.protocol().hook_point(event).ok();
    if let Err(e) = ClaudeCodeSlash.protocol().check_answer(point, &answer) {
        panic!("{case} / {event}: {}\n{r:?}", e.message);
    }
    if must_deny && point == Some(HookPoint::ToolGate) {
        assert!(denied(r), "{case} / {event}: the tool gate fails closed\n{r:?}");
    }
    if must_deny && point != Some(HookPoint::ToolGate) {
        assert!(
            r.stdout.is_empty() || point == Some(HookPoint::StatusLine),
            "{case} / {event}: fails open\n{r:?}"
        );
    }
}

#[test]
fn bad_environment_values() {
    let s = armed();
    for (k, v) in
        [("LOOPX_LOCK_TIMEOUT_MS", "5s"), ("LOOPX_LOCK_TIMEOUT_MS", "-1"), ("LOOPX_STOP_CAP", "many")]
    {
        for event in EVENTS {
            let r = s.run_with(&["hook", "claude-code", event], stdin(&s, event).as_bytes(), &[(k, v)]);
            check(&format!("{k}={v}"), event, &r, k == "LOOPX_LOCK_TIMEOUT_MS");
        }
    }
}

#[test]
fn usage_errors() {
    let s = armed();
    for event in EVENTS {
        for args in [
            vec!["hook", "claude-code", event, "--bogus"],
            vec!["hook", "claude-code", event, "extra"],
            vec!["--color", "sometimes", "hook", "claude-code", event],
        ] {
            let r = s.run_with(&args, stdin(&s, event).as_bytes(), &[]);
            check(&format!("{args:?}"), event, &r, true);
        }
    }
    for args in [
        vec!["hook"],
        vec!["hook", "claude-code"],
        vec!["hook", "nohost", "stop"],
        vec!["hook", "claude-code", "teleport"],
    ] {
        let r = s.run_with(&args, b"{}", &[]);
        assert_ne!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stdout.is_empty() && !r.stderr.is_empty(), "{args:?}: {r:?}");
    }
}

#[test]
fn no_project_a_corrupted_log_and_a_full_disk() {
    let none = Sandbox::new();
    for event in EVENTS {
        let r = none.run_with(&["hook", "claude-code", event], stdin(&none, event).as_bytes(), &[]);
        check("no project", event, &r, false);
        assert_eq!(r.code, 0, "no project: nothing to say ({event})");
    }
    let s = armed();
    for event in EVENTS {
        let r = s.run_with(
            &["hook", "claude-code", event],
            stdin(&s, event).as_bytes(),
            &[("LOOPX_FAULT", "disk-full")],
        );
        check("full disk", event, &r, false);
    }
    let log = s.events_path("main");
    let text = std::fs::read_to_string(&log).unwrap().replacen("write the parser", "write the pArser", 1);
    std::fs::write(&log, text).unwrap();
    for event in EVENTS {
        let r = s.run_with(&["hook", "claude-code", event], stdin(&s, event).as_bytes(), &[]);
        check("corrupted log", event, &r, true);
    }
}

#[test]
fn a_held_lock() {
    let s = armed();
    let mut holder: Child = s
        .command()
        .env("LOOPX_FAULT", "hang-after-lock")
        .args(["todo", "add", "--text", "holding the lock"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the holder has the lock: a mutation then reports it busy.
    let mut busy = false;
    for _ in 0..200 {
        if s.run_with(&["todo", "add", "--text", "probe"], b"", &[("LOOPX_LOCK_TIMEOUT_MS", "50")]).code == 3
        {
            busy = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(busy, "the holder took the lock");
    for event in EVENTS {
        let r = s.run_with(
            &["hook", "claude-code", event],
            stdin(&s, event).as_bytes(),
            &[("LOOPX_LOCK_TIMEOUT_MS", "100")],
        );
        check("held lock", event, &r, false);
    }
    let _ = holder.kill();
    let _ = holder.wait();
}
