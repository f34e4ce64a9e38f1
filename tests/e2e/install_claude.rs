//! `loopx host install|uninstall claude-code`: before/after trees, re-install unchanged,
//! uninstall gives the user's bytes back, user files are never clobbered, bad JSON is refused.

use loopx_tests::Sandbox;

fn write(s: &Sandbox, rel: &str, text: &str) {
    let p = s.root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn ops(v: &serde_json::Value) -> Vec<(String, String)> {
    v["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["op"].as_str().unwrap().to_owned(), a["path"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn install_reinstall_uninstall_round_trips_the_tree() {
    let s = Sandbox::new();
    write(&s, "src/main.rs", "fn main() {}\n");
    let before = s.tree();
    let dry =
        s.json(&["host", "install", "claude-code", "--dry-run", "--stop-driver", "--harden", "--statusline"]);
    assert_eq!(s.tree(), before, "--dry-run writes nothing");
    let installed = s.json(&["host", "install", "claude-code", "--stop-driver", "--harden", "--statusline"]);
    assert_eq!(ops(&dry), ops(&installed));
    let after = s.tree();
    for f in [
        ".claude/commands/loopx.md",
        ".claude/loop.md",
        ".claude/settings.json",
        ".mcp.json",
        ".claude/loopx-owned.json",
    ] {
        assert!(after.contains_key(f), "{f} installed");
    }
    let settings: serde_json::Value = serde_json::from_slice(&after[".claude/settings.json"]).unwrap();
    for (event, cmd) in [
        ("SessionStart", "session-start"),
        ("UserPromptSubmit", "user-prompt-submit"),
        ("Stop", "stop"),
        ("PreToolUse", "pre-tool-use"),
    ] {
        assert_eq!(
            settings["hooks"][event][0]["hooks"][0]["command"],
            format!("loopx hook claude-code {cmd}"),
            "{event}"
        );
    }
    assert_eq!(settings["statusLine"]["command"], "loopx hook claude-code statusline");
    assert_eq!(settings["permissions"]["allow"], serde_json::json!(["mcp__loopx"]));
    let mcp: serde_json::Value = serde_json::from_slice(&after[".mcp.json"]).unwrap();
    assert_eq!(mcp["mcpServers"]["loopx"], serde_json::json!({"command": "loopx", "args": ["mcp"]}));
    // Again: all unchanged, nothing rewritten.
    let again = s.json(&["host", "install", "claude-code", "--stop-driver", "--harden", "--statusline"]);
    assert!(ops(&again).iter().all(|(op, _)| op == "unchanged"), "{again}");
    assert_eq!(s.tree(), after);
    let gone = s.json(&["host", "uninstall", "claude-code"]);
    assert!(ops(&gone).iter().any(|(op, _)| op == "remove"));
    assert_eq!(s.tree(), before, "uninstall restores the tree byte for byte");
}

#[test]
fn the_users_settings_and_files_are_kept() {
    let s = Sandbox::new();
    let settings = "{\n    \"model\": \"opus\",\n    \"hooks\": {\"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"say done\"}]}]},\n    \"permissions\": {\"allow\": [\"Bash(ls:*)\"]}\n}\n";
    write(&s, ".claude/settings.json", settings);
    write(&s, ".claude/commands/loopx.md", "my own /loopx command\n");
    write(&s, ".mcp.json", "{\"mcpServers\": {\"docs\": {\"command\": \"docs-mcp\"}}}\n");
    let before = s.tree();
    let r = s.json(&["host", "install", "claude-code", "--stop-driver"]);
    assert!(ops(&r).contains(&("skipped".to_owned(), ".claude/commands/loopx.md".to_owned())), "{r}");
    let tree = s.tree();
    assert_eq!(tree[".claude/commands/loopx.md"], b"my own /loopx command\n");
    let v: serde_json::Value = serde_json::from_slice(&tree[".claude/settings.json"]).unwrap();
    assert_eq!(v["model"], "opus");
    assert_eq!(v["hooks"]["Stop"][0]["hooks"][0]["command"], "say done");
    assert_eq!(v["hooks"]["Stop"][1]["hooks"][0]["command"], "loopx hook claude-code stop");
    assert_eq!(v["permissions"]["allow"], serde_json::json!(["Bash(ls:*)", "mcp__loopx"]));
    let m: serde_json::Value = serde_json::from_slice(&tree[".mcp.json"]).unwrap();
    assert_eq!(m["mcpServers"]["docs"]["command"], "docs-mcp");
    s.ok(&["host", "uninstall", "claude-code"]);
    assert_eq!(s.tree(), before, "the user's bytes come back exactly");
}

#[test]
fn edits_made_after_install_survive_uninstall() {
    let s = Sandbox::new();
    s.ok(&["host", "install", "claude-code"]);
    let p = s.root.join(".claude/settings.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["theme"] = "dark".into();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    s.ok(&["host", "uninstall", "claude-code"]);
    let left: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    assert_eq!(left, serde_json::json!({"theme": "dark"}), "only loopx's entries were taken out");
    assert!(!s.root.join(".mcp.json").exists());
}

#[test]
fn unparseable_host_json_is_refused_and_nothing_is_written() {
    let s = Sandbox::new();
    write(&s, ".claude/settings.json", "{ \"model\": \"opus\", ");
    let before = s.tree();
    let r = s.fails(1, &["host", "install", "claude-code"]);
    assert!(r.stderr.contains("settings.json is not valid JSON"), "{}", r.stderr);
    assert_eq!(s.tree(), before);
    s.fails(2, &["host", "install", "vscode"]);
    let r = s.run(&["host", "install", "claude-code", "--scope", "galaxy"]);
    assert_eq!(r.code, 2);
}

#[test]
fn user_scope_writes_under_home_only() {
    let s = Sandbox::new();
    s.ok(&["host", "install", "claude-code", "--scope", "user"]);
    assert!(s.home.join(".claude/commands/loopx.md").exists());
    assert!(s.home.join(".claude/settings.json").exists());
    assert!(!s.root.join(".claude").exists(), "nothing in the project");
    s.ok(&["host", "uninstall", "claude-code", "--scope", "user"]);
    assert!(!s.home.join(".claude/settings.json").exists());
}
