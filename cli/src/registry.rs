//! Every host adapter this build knows, registered here and nowhere else. A new host is one
//! more line in [`ADAPTERS`]; `loopx host …` and `loopx hook …` find it by its host name.

use loopx_adapter_claude_code_slash::ClaudeCodeSlash;
use loopx_adapter_codex_heartbeat::CodexHeartbeat;
use loopx_adapter_cursor_manual::CursorManual;
use loopx_adapter_gemini_hooks::GeminiHooks;
use loopx_adapter_opencode_plugin::OpenCodePlugin;
use loopx_core::agent::HostCatalog;
use loopx_core::host::HostAdapter;
use loopx_core::{Error, Result};

static ADAPTERS: &[&dyn HostAdapter] =
    &[&ClaudeCodeSlash, &CodexHeartbeat, &CursorManual, &GeminiHooks, &OpenCodePlugin];

/// The host catalog: the host types every registered adapter declares, then the built-in
/// ones (`manual`, `other`).
pub fn catalog() -> std::sync::Arc<HostCatalog> {
    static CATALOG: std::sync::OnceLock<std::sync::Arc<HostCatalog>> = std::sync::OnceLock::new();
    CATALOG
        .get_or_init(|| {
            std::sync::Arc::new(HostCatalog::new(ADAPTERS.iter().flat_map(|a| a.host_types()).collect()))
        })
        .clone()
}

/// `text` with the placeholder `<type>` replaced by the agent types there are (see
/// [`loopx_hostkit::next::name_types`]).
pub fn name_types(text: &str) -> String {
    loopx_hostkit::next::name_types(&catalog(), text)
}

/// An error whose message and hint name the agent types where they said `<type>`.
pub fn with_type_names(e: &Error) -> Error {
    loopx_hostkit::next::with_type_names(&catalog(), e)
}

/// Every registered adapter, in the order `loopx host list` shows them.
pub fn adapters() -> &'static [&'static dyn HostAdapter] {
    ADAPTERS
}

/// `names` as a person reads a list: `a, b or c`.
fn or_list(names: &[&str]) -> String {
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Every host there is an adapter for, for `--help`: `claude-code, codex, … or opencode (see
/// loopx host list)`. From the registry, so a new host is listed with no other change.
pub fn hosts_help() -> String {
    let names: Vec<&str> = ADAPTERS.iter().map(|a| a.host()).collect();
    format!("{} (see loopx host list)", or_list(&names))
}

/// `loopx drive --host`'s help: the hosts whose agent CLI loopx knows how to drive, from the
/// registry.
pub fn drive_hosts_help() -> String {
    let names: Vec<&str> =
        ADAPTERS.iter().filter(|a| a.protocol().driver().is_some()).map(|a| a.host()).collect();
    format!(
        "The agent CLI: {} (loopx shapes its command line and reads its session, tokens and cost), or other (any command, run as given); default: from the agent's type, else other",
        or_list(&names)
    )
}

/// The adapter for `host`, or a usage error listing the hosts there are.
pub fn find(host: &str) -> Result<&'static dyn HostAdapter> {
    ADAPTERS.iter().copied().find(|a| a.host() == host).ok_or_else(|| {
        let names: Vec<&str> = ADAPTERS.iter().map(|a| a.host()).collect();
        Error::usage(format!("loopx has no adapter for host {host:?}"))
            .with_hint(format!("one of: {} (see loopx host list)", names.join(", ")))
    })
}

/// The adapter of a session's host (of the session's process too, see
/// `BindThread::process`).
pub fn session_host(session: &loopx_core::kernel::BindThread) -> Result<&'static dyn HostAdapter> {
    find(session.host.strip_suffix(loopx_core::kernel::PROCESS_HOST_SUFFIX).unwrap_or(&session.host))
}

/// The adapter that serves `agent_type`, and its activation steps.
pub fn onboarding(agent_type: &loopx_core::AgentType) -> Option<(&'static str, Vec<String>)> {
    ADAPTERS.iter().find_map(|a| a.onboarding(agent_type).map(|s| (a.host(), s)))
}

/// `codex-app` → the Codex adapter and its `app` surface.
pub fn surface(name: &str) -> Result<(&'static dyn HostAdapter, &'static str)> {
    let found = ADAPTERS.iter().find_map(|a| {
        let rest = name.strip_prefix(a.host())?.strip_prefix('-')?;
        a.prompt_surfaces().iter().find(|s| **s == rest).map(|s| (*a, *s))
    });
    found.ok_or_else(|| {
        let all: Vec<String> = ADAPTERS
            .iter()
            .flat_map(|a| a.prompt_surfaces().iter().map(move |s| format!("{}-{s}", a.host())))
            .collect();
        Error::usage(format!("no prompt surface {name:?}")).with_hint(format!("one of: {}", all.join(", ")))
    })
}
