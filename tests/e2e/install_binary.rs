//! Installed hooks, plugins and servers name the loopx binary they were installed with, by its
//! absolute path: a host started outside the person's shell (an IDE from a desktop, a service)
//! may have no `loopx` on `PATH`, or another one. When that binary cannot answer, Claude Code's
//! tool gate blocks the call (exit 2) and its other hooks let the session go on; `host doctor`
//! names the missing or different binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use loopx_tests::{Run, Sandbox, loopx_bin};

/// A second name for the binary under test, in a directory with a space in its name, so an
/// install run through it names a binary the test can take away.
fn another_loopx(s: &Sandbox) -> PathBuf {
    let dir = s.root.parent().unwrap().join("my tools");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("loopx");
    place(&bin);
    bin.canonicalize().unwrap()
}

fn place(bin: &Path) {
    if std::fs::hard_link(loopx_bin(), bin).is_err() {
        std::fs::copy(loopx_bin(), bin).unwrap();
    }
}

fn run_as(s: &Sandbox, bin: &Path, args: &[&str]) -> Run {
    Run::from(s.environment(Command::new(bin)).args(args).output().unwrap())
}

fn json(s: &Sandbox, rel: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(s.root.join(rel)).unwrap()).unwrap()
}

/// Runs an installed hook command as its host does (`sh -c`), with a `PATH` that holds no
/// loopx, `stdin` on its standard input.
fn hook(s: &Sandbox, command: &str, stdin: &serde_json::Value) -> Run {
    use std::io::Write;
    let mut child = s
        .environment(Command::new("sh"))
        .env("PATH", "/usr/bin:/bin")
        .args(["-c", command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.to_string().as_bytes()).unwrap();
    Run::from(child.wait_with_output().unwrap())
}

fn event(s: &Sandbox, name: &str) -> serde_json::Value {
    serde_json::json!({
        "session_id": "s-1",
        "transcript_path": s.root.join("t.jsonl"),
        "cwd": s.root,
        "hook_event_name": name,
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "stop_hook_active": false,
    })
}

#[test]
fn hooks_name_the_binary_they_were_installed_with_and_the_tool_gate_fails_closed_without_it() {
    let s = Sandbox::new();
    s.init();
    let bin = another_loopx(&s);
    let shown = bin.display().to_string();
    let quoted = shell_words::quote(&shown).into_owned();
    assert!(quoted.starts_with('\''), "the path needs quoting: {quoted}");
    for host in ["claude-code", "gemini", "opencode"] {
        let r = run_as(&s, &bin, &["host", "install", host, "--with", "stop-driver", "--with", "harden"]);
        assert_eq!(r.code, 0, "{host}: {}", r.stderr);
    }

    // Claude Code: every hook and the MCP server name the binary; the gate ends with exit 2.
    let settings = json(&s, ".claude/settings.json");
    let command =
        |event: &str| settings["hooks"][event][0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    let gate = command("PreToolUse");
    let stop = command("Stop");
    assert_eq!(gate, format!("{quoted} hook claude-code pre-tool-use || exit 2"));
    assert_eq!(stop, format!("{quoted} hook claude-code stop"));
    assert_eq!(command("SessionStart"), format!("{quoted} hook claude-code session-start"));
    assert_eq!(json(&s, ".mcp.json")["mcpServers"]["loopx"]["command"], shown);
    let slash = std::fs::read_to_string(s.root.join(".claude/commands/loopx.md")).unwrap();
    assert!(slash.contains(&format!("!`{quoted} status")), "{slash}");
    // Gemini CLI: its hooks and server too.
    let gemini = json(&s, ".gemini/settings.json");
    for event in ["BeforeAgent", "AfterAgent", "BeforeTool"] {
        let c = gemini["hooks"][event][0]["hooks"][0]["command"].as_str().unwrap();
        assert!(c.starts_with(&format!("{quoted} hook gemini ")), "{event}: {c}");
    }
    assert_eq!(gemini["mcpServers"]["loopx"]["command"], shown);
    // OpenCode: the plugin spawns it by path.
    let plugin = std::fs::read_to_string(s.root.join(".opencode/plugins/loopx.js")).unwrap();
    assert!(
        plugin.contains(&format!("const LOOPX = {};", serde_json::to_string(&shown).unwrap())),
        "{plugin}"
    );
    assert!(!plugin.contains("\"loopx\", \"hook\""), "{plugin}");

    // With no loopx on PATH, the hooks still reach it.
    let r = hook(&s, &gate, &event(&s, "PreToolUse"));
    assert_eq!(r.code, 0, "the gate answers through the installed path: {}", r.stderr);
    let r = hook(&s, &stop, &event(&s, "Stop"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doctor = s.run(&["host", "doctor", "claude-code"]);
    assert!(
        doctor.stdout.contains(&format!("loopx binary: hooks call {shown}, not this loopx")),
        "{}",
        doctor.stdout
    );

    // The binary is gone: the gate blocks, Stop lets the session go on, doctor names it.
    std::fs::remove_file(&bin).unwrap();
    let r = hook(&s, &gate, &event(&s, "PreToolUse"));
    assert_eq!(r.code, 2, "the tool gate fails closed: {}", r.stderr);
    let r = hook(&s, &stop, &event(&s, "Stop"));
    assert_ne!(r.code, 2, "Stop never blocks: {}", r.stderr);
    assert_ne!(r.code, 0);
    let before = s.tree();
    for host in ["claude-code", "gemini", "opencode"] {
        let d = s.fails(1, &["host", "doctor", host]);
        assert!(
            d.stdout.contains(&format!("FAIL loopx binary: hooks call {shown}, which is missing")),
            "{host}: {}",
            d.stdout
        );
        assert!(d.stdout.contains(&format!("repair with: loopx host install {host}")), "{}", d.stdout);
    }
    assert_eq!(s.tree(), before, "host doctor writes nothing");

    // Installed again with this loopx: the hooks name it, and doctor is content.
    s.ok(&["host", "install", "claude-code", "--with", "stop-driver", "--with", "harden"]);
    let d = s.run(&["host", "doctor", "claude-code", "--json"]).json();
    let check = d["checks"].as_array().unwrap().iter().find(|c| c["name"] == "loopx binary").unwrap().clone();
    assert_eq!(check["ok"], true, "{d}");
    let this = loopx_bin().canonicalize().unwrap().display().to_string();
    assert_eq!(check["detail"], format!("hooks call {this}"));
}
