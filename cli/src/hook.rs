//! `loopx hook <host> <event>`: reads the hook's stdin and the host's environment, has the
//! kernel's hook driver answer through the host's adapter, and prints the answer. Names no
//! host: the adapter comes from the registry.

use std::path::PathBuf;
use std::sync::Arc;

use loopx_core::host::{HookPoint, HostAnswer};
use loopx_hostkit::hook::{self, HookEnv};
use loopx_kernel::{Reporter, StoreOptions};

use crate::registry;

/// Longest hook stdin read: one byte past what the reader takes, so an oversized input is
/// refused as such.
pub const MAX_STDIN: u64 = loopx_core::host::MAX_HOOK_STDIN as u64;

/// Answers one hook. An unknown host is a non-blocking error (exit 1), never a block.
pub async fn answer(
    host: &str,
    event: &str,
    stdin: &[u8],
    cwd: PathBuf,
    agent: Option<loopx_core::AgentId>,
    options: StoreOptions,
    reporter: Arc<dyn Reporter>,
) -> HostAnswer {
    let adapter = match registry::find(host) {
        Ok(a) => a,
        Err(e) => {
            let hint = e.hint.map(|h| format!("\nhint: {h}")).unwrap_or_default();
            return HostAnswer {
                stdout: String::new(),
                stderr: format!("loopx: {}{hint}", e.message),
                exit_code: 1,
            };
        }
    };
    let env = HookEnv {
        cwd,
        project_dir: adapter.protocol().project_dir_env().and_then(std::env::var_os).map(PathBuf::from),
        stop_cap: std::env::var("LOOPX_STOP_CAP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| adapter.default_stop_cap()),
        loopx: std::env::current_exe().map_or_else(|_| "loopx".to_owned(), |p| p.display().to_string()),
        agent,
        options,
        reporter,
        open: crate::store::opener(),
        hosts: crate::registry::catalog(),
        clock: crate::clock(),
        // Only a hook that binds a session looks up the process (it walks the process tree).
        process: adapter
            .protocol()
            .hook_point(event)
            .is_ok_and(|p| matches!(p, HookPoint::SessionStart | HookPoint::PromptSubmit))
            .then(|| crate::identity_walk().agent_process_key(adapter))
            .flatten(),
    };
    hook::answer(adapter, event, stdin, &env).await
}
