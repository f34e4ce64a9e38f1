//! The adapter conformance suite (`loopx-testkit`) over every adapter the binary registers
//! (`loopx_cli::registry`), never a copy of another adapter's tests.

use std::panic::{AssertUnwindSafe, catch_unwind};

use loopx_adapter_claude_code_slash::ClaudeCodeSlash;
use loopx_core::host::{
    AdapterCapabilities, HookPoint, HookReply, HookSample, HostAdapter, HostAnswer, HostEvent, HostProtocol,
    InstallEnv, InstallOptions, InstallSpec,
};
use loopx_core::{AgentType, Result};
use loopx_testkit::adapter::check_adapter;
use loopx_tests::Sandbox;

#[test]
fn every_adapter_passes_the_conformance_suite() {
    for a in loopx_cli::registry::adapters() {
        let c = check_adapter(*a);
        for (path, content) in &c.installed {
            insta::assert_snapshot!(format!("{}__{}", a.name(), path.replace(['/', '.'], "_")), content);
        }
    }
}

#[test]
fn host_list_shows_every_registered_adapter() {
    let s = Sandbox::new();
    let listed: Vec<String> = s.json(&["host", "list"])["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["adapter"].as_str().unwrap().to_owned())
        .collect();
    let registered: Vec<String> =
        loopx_cli::registry::adapters().iter().map(|a| a.name().to_owned()).collect();
    assert_eq!(listed, registered, "`loopx host list` shows every adapter the registry holds");
}

/// Claude Code's adapter with one defect, to show the suite catches it.
#[derive(Debug)]
struct Broken {
    defect: &'static str,
    protocol: BrokenProtocol,
}

/// Claude Code's protocol with the same defect.
#[derive(Debug)]
struct BrokenProtocol {
    defect: &'static str,
}

impl Broken {
    fn new(defect: &'static str) -> Self {
        Broken { defect, protocol: BrokenProtocol { defect } }
    }
}

impl HostProtocol for BrokenProtocol {
    fn host(&self) -> &'static str {
        ClaudeCodeSlash.host()
    }
    fn binaries(&self) -> &'static [&'static str] {
        &[]
    }
    fn hook_events(&self) -> Vec<loopx_core::host::HookEventName> {
        ClaudeCodeSlash.protocol().hook_events()
    }
    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        if self.defect == "lenient" && stdin.is_empty() {
            return ClaudeCodeSlash.protocol().decode(point, b"{}");
        }
        ClaudeCodeSlash.protocol().decode(point, stdin)
    }
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        ClaudeCodeSlash.protocol().encode(point, reply)
    }
    fn fail_open(&self, point: Option<HookPoint>, message: &str) -> HostAnswer {
        let a = ClaudeCodeSlash.protocol().fail_open(point, message);
        if self.defect == "blocks" { HostAnswer { exit_code: 2, ..a } } else { a }
    }
    fn tool_name(&self, tool: &str) -> String {
        ClaudeCodeSlash.protocol().tool_name(tool)
    }
    fn samples(&self) -> Vec<HookSample> {
        ClaudeCodeSlash.protocol().samples()
    }
    fn check_answer(&self, point: Option<HookPoint>, answer: &HostAnswer) -> Result<()> {
        ClaudeCodeSlash.protocol().check_answer(point, answer)
    }
}

impl HostAdapter for Broken {
    fn protocol(&self) -> &dyn HostProtocol {
        &self.protocol
    }
    fn name(&self) -> &'static str {
        "broken"
    }
    fn capabilities(&self) -> AdapterCapabilities {
        ClaudeCodeSlash.capabilities()
    }
    fn host_types(&self) -> Vec<loopx_core::agent::HostType> {
        ClaudeCodeSlash.host_types()
    }
    fn agent_type(&self) -> AgentType {
        ClaudeCodeSlash.agent_type()
    }
    fn agent_prefix(&self) -> &'static str {
        "broken"
    }
    fn entry_command(&self) -> Option<&'static str> {
        ClaudeCodeSlash.entry_command()
    }
    fn install_hint(&self) -> &'static str {
        ""
    }
    fn after_install(&self) -> &'static str {
        ""
    }
    fn keep_turning(&self) -> &'static str {
        ""
    }
    fn install_plan(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Result<InstallSpec> {
        let mut spec = ClaudeCodeSlash.install_plan(opts, env)?;
        if self.defect == "marker" {
            for f in &mut spec.files {
                if let loopx_core::host::ManagedFile::Text { content, .. } = f {
                    *content = content.replace(loopx_core::host::MARKER, "");
                }
            }
        }
        Ok(spec)
    }
}

#[test]
fn the_suite_fails_a_broken_adapter() {
    for defect in ["marker", "lenient", "blocks"] {
        let failed = catch_unwind(AssertUnwindSafe(|| check_adapter(&Broken::new(defect)))).is_err();
        assert!(failed, "the conformance suite passed an adapter whose defect is {defect:?}");
    }
}
