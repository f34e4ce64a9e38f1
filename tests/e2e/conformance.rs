//! The adapter conformance suite (`loopx-kernel`'s `testkit`) over every adapter: one row per
//! adapter in [`ADAPTERS`], never a copy of another adapter's tests.

use std::panic::{AssertUnwindSafe, catch_unwind};

use loopx_adapter_claude_code_slash::ClaudeCodeSlash;
use loopx_adapter_codex_heartbeat::CodexHeartbeat;
use loopx_adapter_cursor_manual::CursorManual;
use loopx_adapter_gemini_hooks::GeminiHooks;
use loopx_adapter_opencode_plugin::OpenCodePlugin;
use loopx_core::host::{
    AdapterCapabilities, Detection, HookPoint, HookReply, HookSample, HostAdapter, HostAnswer, HostEvent,
    InstallEnv, InstallOptions, InstallSpec,
};
use loopx_core::{AgentType, Result};
use loopx_testkit::adapter::check_adapter;
use loopx_tests::Sandbox;

/// The table: every adapter the binary registers.
const ADAPTERS: &[&dyn HostAdapter] =
    &[&ClaudeCodeSlash, &CodexHeartbeat, &CursorManual, &GeminiHooks, &OpenCodePlugin];

#[test]
fn every_adapter_passes_the_conformance_suite() {
    for a in ADAPTERS {
        let c = check_adapter(*a);
        for (path, content) in &c.installed {
            insta::assert_snapshot!(format!("{}__{}", a.name(), path.replace(['/', '.'], "_")), content);
        }
    }
}

#[test]
fn the_table_holds_every_registered_adapter() {
    let s = Sandbox::new();
    let listed: Vec<String> = s.json(&["host", "list"])["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["adapter"].as_str().unwrap().to_owned())
        .collect();
    let table: Vec<String> = ADAPTERS.iter().map(|a| a.name().to_owned()).collect();
    assert_eq!(listed, table, "add the new adapter to ADAPTERS in tests/e2e/conformance.rs");
}

/// Claude Code's adapter with one defect, to show the suite catches it.
#[derive(Debug)]
struct Broken {
    defect: &'static str,
}

impl HostAdapter for Broken {
    fn host(&self) -> &'static str {
        ClaudeCodeSlash.host()
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
    fn project_dir_env(&self) -> Option<&'static str> {
        None
    }
    fn tool_env(&self) -> Option<loopx_core::host::ToolEnv> {
        None
    }
    fn detect(&self) -> Detection {
        Detection { path: None, version: None }
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
    fn hook_events(&self) -> Vec<loopx_core::host::HookEventName> {
        ClaudeCodeSlash.hook_events()
    }
    fn decode(&self, point: HookPoint, stdin: &[u8]) -> Result<HostEvent> {
        if self.defect == "lenient" && stdin.is_empty() {
            return ClaudeCodeSlash.decode(point, b"{}");
        }
        ClaudeCodeSlash.decode(point, stdin)
    }
    fn encode(&self, point: HookPoint, reply: &HookReply) -> HostAnswer {
        ClaudeCodeSlash.encode(point, reply)
    }
    fn fail_open(&self, message: &str) -> HostAnswer {
        let a = ClaudeCodeSlash.fail_open(message);
        if self.defect == "blocks" { HostAnswer { exit_code: 2, ..a } } else { a }
    }
    fn tool_name(&self, tool: &str) -> String {
        ClaudeCodeSlash.tool_name(tool)
    }
    fn samples(&self) -> Vec<HookSample> {
        ClaudeCodeSlash.samples()
    }
    fn check_answer(&self, point: Option<HookPoint>, answer: &HostAnswer) -> Result<()> {
        ClaudeCodeSlash.check_answer(point, answer)
    }
}

#[test]
fn the_suite_fails_a_broken_adapter() {
    for defect in ["marker", "lenient", "blocks"] {
        let failed = catch_unwind(AssertUnwindSafe(|| check_adapter(&Broken { defect }))).is_err();
        assert!(failed, "the conformance suite passed an adapter whose defect is {defect:?}");
    }
}
