//! The open host catalog: each adapter declares its host types (names, aliases, cadence); an
//! agent's type is an open name, so a log naming a host this loopx has no adapter for is kept,
//! shown and paced generically, never refused.

use std::sync::Arc;

use loopx_core::AgentId;
use loopx_core::AgentType;
use loopx_core::kernel::{BindThread, CommandContext, Kernel, RegisterAgent};
use loopx_kernel::{FileKernel, Silent, StoreOptions, SystemClock};
use loopx_tests::Sandbox;

#[test]
fn every_adapters_host_types_are_listed_with_their_aliases() {
    let s = Sandbox::new();
    let types = s.json(&["agent", "types"]);
    let names: Vec<&str> =
        types["agent_types"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "claude-code",
            "codex-app",
            "codex-cli",
            "codex-ide",
            "cursor",
            "gemini",
            "opencode",
            "manual",
            "other"
        ]
    );
    assert_eq!(types["agent_types"][0]["aliases"], serde_json::json!(["cc", "claude"]));
    s.init();
    s.ok(&["agent", "register", "--agent-id", "a", "--agent-type", "CC"]);
    assert_eq!(s.json(&["agent", "list"])["agents"][0]["agent_type"], "claude-code");
    let err = s.fails(2, &["agent", "register", "--agent-id", "b", "--agent-type", "codex"]).stderr;
    assert!(err.contains("ambiguous") && err.contains("codex-app, codex-cli, codex-ide"), "{err}");
    // A profile is a host's cadence, as its adapter declares it.
    let beat = s.json(&["quota", "should-run", "--agent-id", "a", "--runtime-profile", "codex_heartbeat"]);
    assert_eq!(beat["scheduler"]["profile"], "codex_heartbeat");
    assert_eq!(beat["scheduler"]["rrule"], "FREQ=MINUTELY;INTERVAL=3");
    let own = s.json(&["quota", "should-run", "--agent-id", "a"]);
    assert_eq!(
        (&own["scheduler"]["profile"], &own["scheduler"]["unchanged_poll_limit"]),
        (&"claude_loop".into(), &3.into())
    );
    let err = s.fails(2, &["quota", "should-run", "--agent-id", "a", "--runtime-profile", "hourly"]).stderr;
    assert!(err.contains("claude_loop") && err.contains("generic"), "{err}");
}

#[test]
fn a_host_this_loopx_does_not_know_is_kept_shown_and_paced_generically() {
    let s = Sandbox::new();
    s.init();
    // Another loopx, with an adapter this one lacks, registered the agent and bound a session.
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let k = FileKernel::open(&s.root, Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
            .unwrap();
        let user = CommandContext { agent: Some(AgentId::new("user").unwrap()), ..CommandContext::default() };
        let g1 = AgentId::new("g1").unwrap();
        let req = RegisterAgent {
            id: g1.clone(),
            agent_type: AgentType::new("aider-chat").unwrap(),
            require_new: true,
        };
        k.register_agent(&user, req).await.unwrap();
        let me = CommandContext { agent: Some(g1.clone()), ..CommandContext::default() };
        let session = BindThread { host: "aider".to_owned(), thread: "s-1".to_owned() };
        k.bind_thread(&me, session).await.unwrap();
    });
    let agents = s.json(&["agent", "list"]);
    assert_eq!(agents["agents"][0]["agent_type"], "aider-chat", "{agents}");
    assert!(s.ok(&["agent", "list"]).stdout.contains("aider-chat"));
    let answer = s.json(&["quota", "should-run", "--agent-id", "g1"]);
    assert_eq!(answer["scheduler"]["profile"], "generic", "{answer}");
    // The goal goes on; the log verifies with the unknown name in it.
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "more"]);
    assert_eq!(s.json(&["doctor"])["healthy"], true);
    assert!(
        loopx_tests::events(&s.events_path("main")).iter().any(|e| e["data"]["agent_type"] == "aider-chat")
    );
    // This loopx cannot register a new agent of a type it has no adapter for.
    let err = s.fails(2, &["agent", "register", "--agent-id", "g2", "--agent-type", "aider-chat"]).stderr;
    assert!(err.contains("unknown agent type"), "{err}");
}

#[test]
fn install_takes_any_feature_the_adapter_declares_with_the_old_flags_as_aliases() {
    let s = Sandbox::new();
    s.init();
    let plan = |args: &[&str]| {
        let mut v = s.json(&[&["host", "install"][..], args, &["--dry-run"]].concat());
        v.as_object_mut().unwrap().remove("recovered");
        v
    };
    assert_eq!(
        plan(&["claude-code", "--with", "stop-driver", "--with", "harden"]),
        plan(&["claude-code", "--stop-driver", "--harden"])
    );
    assert_eq!(
        plan(&["codex", "--with", "hooks", "--with", "mcp"]),
        plan(&["codex", "--with-hooks", "--with-mcp"])
    );
    // Checked against what the adapter declares, before anything is planned.
    let err = s.fails(2, &["host", "install", "cursor", "--with", "statusline"]).stderr;
    assert!(
        err.contains("cursor has no statusline to install") && err.contains("stop-driver, harden"),
        "{err}"
    );
    let err = s.fails(2, &["host", "install", "codex", "--with", "wings"]).stderr;
    assert!(err.contains("no install feature \"wings\"") && err.contains("hooks"), "{err}");
    assert!(!s.root.join(".cursor").exists() && !s.root.join(".codex").exists());
}

/// Every command that takes a host names every host there is an adapter for in its `--help`,
/// and `drive --help` every host loopx can drive: the lists come from the registry, so a host
/// added there is named with no other change.
#[test]
fn help_names_every_host_from_the_registry() {
    let s = Sandbox::new();
    let adapters = loopx_cli::registry::adapters();
    for cmd in [&["host", "install"][..], &["host", "uninstall"], &["host", "doctor"], &["host", "detect"]] {
        let help = s.ok(&[cmd, &["--help"][..]].concat()).stdout;
        for a in adapters {
            assert!(help.contains(a.host()), "{cmd:?} --help does not name {}:\n{help}", a.host());
        }
    }
    let help = s.ok(&["drive", "--help"]).stdout;
    let line: String = help.split("--host <HOST>").nth(1).unwrap().split("\n      --").next().unwrap().into();
    for a in adapters {
        assert_eq!(
            line.contains(a.host()),
            a.protocol().driver().is_some(),
            "drive --host and {}:\n{line}",
            a.host()
        );
    }
}
