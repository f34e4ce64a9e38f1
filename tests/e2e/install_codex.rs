//! `loopx host install|uninstall|doctor codex`: the user's `config.toml` (comments, odd
//! spacing, other tables) unchanged outside our table, a user skill named `loopx` left alone,
//! trust entries only on request, and a doctor that says which hooks Codex will skip.

use loopx_tests::{Run, Sandbox};

const USER_CONFIG: &str = "# my Codex settings\nmodel   =   \"gpt-5.5\"     # the big one\n\n[profiles.fast]\nmodel = \"gpt-5.5-mini\"\n\n[mcp_servers.docs]   # the docs server\ncommand = \"docs-mcp\"\nargs = [ \"--port\",   \"7\" ]\n";

fn codex(s: &Sandbox, args: &[&str]) -> Run {
    let home = s.home.join(".codex");
    s.run_with(args, b"", &[("CODEX_HOME", home.to_str().unwrap())])
}

fn read(s: &Sandbox, rel: &str) -> String {
    std::fs::read_to_string(s.home.join(".codex").join(rel)).unwrap()
}

#[test]
fn the_users_config_toml_is_kept_byte_for_byte_outside_our_table() {
    let s = Sandbox::new();
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    std::fs::write(s.home.join(".codex/config.toml"), USER_CONFIG).unwrap();
    let r = codex(&s, &["host", "install", "codex", "--scope", "user", "--with-mcp"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let after = read(&s, "config.toml");
    assert!(after.starts_with(USER_CONFIG), "the user's bytes come first and unchanged:\n{after}");
    let ours = &after[USER_CONFIG.len()..];
    assert!(ours.contains("[mcp_servers.loopx]") && ours.contains("args = [\"mcp\"]"), "{ours}");
    assert!(read(&s, "skills/loopx/SKILL.md").contains("loopx:managed v1"));
    assert!(read(&s, "skills/loopx/agents/openai.yaml").contains("allow_implicit_invocation: false"));
    assert_eq!(codex(&s, &["host", "install", "codex", "--scope", "user", "--with-mcp"]).code, 0);
    assert_eq!(read(&s, "config.toml"), after, "re-install changes nothing");
    assert_eq!(codex(&s, &["host", "uninstall", "codex", "--scope", "user"]).code, 0);
    assert_eq!(read(&s, "config.toml"), USER_CONFIG);
    assert!(!s.home.join(".codex/skills").exists(), "the directories it made are gone");
}

#[test]
fn a_users_own_loopx_skill_is_left_alone_and_broken_toml_refused() {
    let s = Sandbox::new();
    let skill = s.home.join(".codex/skills/loopx/SKILL.md");
    std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
    std::fs::write(&skill, "---\nname: loopx\ndescription: mine\n---\nmy own skill\n").unwrap();
    let r = codex(&s, &["host", "install", "codex", "--scope", "user", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("\"skipped\""), "{}", r.stdout);
    assert_eq!(
        std::fs::read_to_string(&skill).unwrap(),
        "---\nname: loopx\ndescription: mine\n---\nmy own skill\n"
    );
    std::fs::write(s.home.join(".codex/config.toml"), "model = = \"x\"\n").unwrap();
    let before = std::fs::read(s.home.join(".codex/config.toml")).unwrap();
    let r = codex(&s, &["host", "install", "codex", "--scope", "user", "--with-mcp"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("config.toml is not valid TOML"), "{}", r.stderr);
    assert_eq!(std::fs::read(s.home.join(".codex/config.toml")).unwrap(), before);
}

#[test]
fn harden_installs_the_tool_gate_and_doctor_checks_its_trust() {
    let s = Sandbox::new();
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    std::fs::write(s.home.join(".codex/config.toml"), USER_CONFIG).unwrap();
    assert_eq!(codex(&s, &["host", "install", "codex", "--scope", "user", "--harden"]).code, 0);
    let hooks = read(&s, "hooks.json");
    assert!(hooks.contains("\"PreToolUse\"") && hooks.contains("hook codex pre-tool-use"), "{hooks}");
    assert!(!hooks.contains("hook codex stop"), "the loop's hooks come with --with-hooks: {hooks}");
    let d = codex(&s, &["host", "doctor", "codex", "--scope", "user"]);
    assert!(d.stdout.contains("FAIL Codex trusts the pre_tool_use hook: untrusted"), "{}", d.stdout);
    assert!(
        d.stdout.contains("--with harden --with trust-hooks"),
        "the fix keeps the install's flags: {}",
        d.stdout
    );
    let r = codex(&s, &["host", "install", "codex", "--scope", "user", "--harden", "--trust-hooks"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("trusted: your codex config now marks loopx's hooks as trusted")
            && r.stdout.contains("`loopx host uninstall codex --scope user` takes that back"),
        "the trust decision made for the person is said: {}",
        r.stdout
    );
    assert_eq!(read(&s, "config.toml").matches("trusted_hash = \"sha256:").count(), 1);
    let d = codex(&s, &["host", "doctor", "codex", "--scope", "user"]);
    assert!(d.stdout.contains("ok   Codex trusts the pre_tool_use hook: trusted"), "{}", d.stdout);
    // Without --scope, in a project, doctor finds the user's install.
    s.init();
    let d = codex(&s, &["host", "doctor", "codex"]);
    assert_eq!(d.code, 0, "{}", d.stdout);
    assert!(
        d.stdout.contains("ok   install manifest: installed for the user with --with harden"),
        "{}",
        d.stdout
    );
    assert_eq!(codex(&s, &["host", "uninstall", "codex", "--scope", "user"]).code, 0);
    assert_eq!(read(&s, "config.toml"), USER_CONFIG);
}

#[test]
fn trust_is_written_only_on_request_and_doctor_names_what_codex_will_skip() {
    let s = Sandbox::new();
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    std::fs::write(s.home.join(".codex/config.toml"), USER_CONFIG).unwrap();
    assert_eq!(
        codex(&s, &["host", "install", "codex", "--scope", "user", "--trust-hooks"]).code,
        2,
        "trust needs the hooks"
    );
    assert_eq!(codex(&s, &["host", "install", "codex", "--scope", "user", "--with-hooks"]).code, 0);
    assert_eq!(read(&s, "config.toml"), USER_CONFIG, "no trust decision without --trust-hooks");
    let hooks = read(&s, "hooks.json");
    assert!(hooks.contains("hook codex stop") && hooks.contains("hook codex user-prompt-submit"), "{hooks}");
    let d = codex(&s, &["host", "doctor", "codex", "--scope", "user"]);
    assert_eq!(d.code, 1);
    assert!(
        d.stdout.contains("FAIL Codex trusts the stop hook: untrusted")
            && d.stdout.contains("--with trust-hooks"),
        "{}",
        d.stdout
    );
    let r = codex(
        &s,
        &["host", "install", "codex", "--scope", "user", "--with-hooks", "--trust-hooks", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let config = read(&s, "config.toml");
    assert!(config.starts_with(USER_CONFIG));
    assert_eq!(config.matches("trusted_hash = \"sha256:").count(), 3, "{config}");
    let d = codex(&s, &["host", "doctor", "codex", "--scope", "user"]);
    assert!(d.stdout.contains("ok   Codex trusts the stop hook: trusted"), "{}", d.stdout);
    // The hooks name loopx by its absolute path: a login shell's PATH does not matter.
    let exe = loopx_tests::loopx_bin().canonicalize().unwrap();
    assert!(read(&s, "hooks.json").contains(&format!("{} hook codex stop", exe.display())));
    assert_eq!(codex(&s, &["host", "uninstall", "codex", "--scope", "user"]).code, 0);
    assert_eq!(read(&s, "config.toml"), USER_CONFIG);
    assert!(!s.home.join(".codex/hooks.json").exists());
}

#[test]
fn the_heartbeat_and_goal_prompts_render_within_their_budgets() {
    let s = Sandbox::new();
    s.ok(&["init", "--goal-id", "main", "--objective", "ship the importer"]);
    s.ok(&["agent", "register", "--agent-id", "codex-app-1", "--agent-type", "codex-app"]);
    let exe = loopx_tests::loopx_bin().canonicalize().unwrap().display().to_string();
    let root = s.root.canonicalize().unwrap().display().to_string();
    for (surface, max) in [("codex-app", 3500), ("codex-cli", 4000)] {
        let p = s.json(&["heartbeat-prompt", "--host", surface, "--agent-id", "codex-app-1"]);
        assert_eq!(p["max_chars"], max);
        assert!(p["chars"].as_u64().unwrap() <= max, "{p}");
        let body = p["body"].as_str().unwrap().replace(&exe, "<loopx>").replace(&root, "<project>");
        insta::assert_snapshot!(format!("prompt_{surface}"), body);
    }
    let app = s.json(&["heartbeat-prompt", "--host", "codex-app", "--agent-id", "codex-app-1"]);
    assert_eq!(app["rrule"], "FREQ=MINUTELY;INTERVAL=3");
    // As text, the body alone on stdout, ready to paste; the rest for the person on stderr.
    for (surface, json) in [
        ("codex-cli", &s.json(&["heartbeat-prompt", "--host", "codex-cli", "--agent-id", "codex-app-1"])),
        ("codex-app", &app),
    ] {
        let r = s.ok(&["heartbeat-prompt", "--host", surface, "--agent-id", "codex-app-1"]);
        assert_eq!(r.stdout, format!("{}\n", json["body"].as_str().unwrap()), "{surface}");
        assert!(r.stderr.contains("name:") && r.stderr.contains("characters) on stdout"), "{}", r.stderr);
    }
    let cli = s.ok(&["heartbeat-prompt", "--host", "codex-cli", "--agent-id", "codex-app-1"]).stdout;
    assert!(cli.starts_with("/goal "), "{cli}");
    assert!(
        s.ok(&["heartbeat-prompt", "--host", "codex-app", "--agent-id", "codex-app-1"])
            .stderr
            .contains("rrule: FREQ=MINUTELY;INTERVAL=3")
    );
    assert_eq!(s.run(&["heartbeat-prompt", "--host", "codex-app", "--agent-id", "ghost"]).code, 1);
    let steps = s.json(&["agent", "onboard", "--agent-type", "codex-app"]);
    assert_eq!(steps["host"], "codex");
    assert!(steps["steps"].to_string().contains("heartbeat-prompt --host codex-app"), "{steps}");
}

/// Without an install manifest, uninstall takes out only what is exactly what loopx writes: a
/// `[mcp_servers.loopx]` table naming the user's own binary stays byte for byte (and the
/// command says so), in Codex's TOML as in Claude Code's JSON, and a file carrying loopx's
/// marker that is not loopx's text stays too; loopx's own table goes.
#[test]
fn uninstall_without_a_manifest_leaves_the_users_own_loopx_entries() {
    let s = Sandbox::new();
    let mine = "# mine\n[mcp_servers.loopx]\ncommand = \"/opt/my-loopx/bin/loopx-fork\"\nargs = [\"mcp\"]\n";
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    std::fs::write(s.home.join(".codex/config.toml"), mine).unwrap();
    let claude = s.root.join(".claude/commands/loopx.md");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    std::fs::write(&claude, "<!-- loopx:managed v1 -->\nmy own edits of an old /loopx\n").unwrap();
    std::fs::write(
        s.root.join(".mcp.json"),
        "{\"mcpServers\": {\"loopx\": {\"command\": \"/opt/my-loopx/bin/loopx-fork\", \"args\": [\"mcp\"]}}}\n",
    )
    .unwrap();
    let (home, project) = (tree(&s.home), s.tree());
    let r = codex(&s, &["host", "uninstall", "codex", "--scope", "user"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read(&s, "config.toml"), mine, "the user's table was taken");
    assert!(r.stdout.contains("mcp_servers.loopx is not what loopx writes; left as it is"), "{}", r.stdout);
    assert!(!r.stdout.contains("removed"), "{}", r.stdout);
    let r = s.run(&["host", "uninstall", "claude-code"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(".claude/commands/loopx.md carries loopx's marker but is not what this loopx writes"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("mcpServers.loopx is not what loopx writes"), "{}", r.stdout);
    assert_eq!(tree(&s.home), home);
    assert_eq!(s.tree(), project);

    // What loopx itself writes goes, the user's other bytes stay.
    let s = Sandbox::new();
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    std::fs::write(s.home.join(".codex/config.toml"), USER_CONFIG).unwrap();
    assert_eq!(codex(&s, &["host", "install", "codex", "--scope", "user", "--with-mcp"]).code, 0);
    std::fs::remove_file(s.home.join(".loopx/installs/codex-heartbeat.json")).unwrap();
    let r = codex(&s, &["host", "uninstall", "codex", "--scope", "user"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("removed only what is exactly what loopx writes"), "{}", r.stdout);
    assert_eq!(read(&s, "config.toml"), USER_CONFIG);
}

/// Every file under `dir` with its bytes.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}
