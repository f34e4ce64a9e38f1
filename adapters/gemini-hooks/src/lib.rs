//! gemini-hooks: binds Gemini CLI to the kernel with the `/loopx` custom command, hooks in
//! `settings.json` (BeforeAgent always; the AfterAgent loop driver and the BeforeTool gate on
//! request), the `loopx` MCP server, and the per-turn protocol as a context file Gemini loads
//! (`context.fileName`).
//!
//! Only declarations: what to install (rendered from `templates/gemini-hooks/`), and the Gemini
//! CLI protocol facts from `loopx-host-gemini`. The kernel's installer applies the spec; the
//! kernel's hook driver answers the hooks.

use handlebars::Handlebars;
use serde::Serialize;
use serde_json::json;

use loopx_core::agent::{Cadence, HostType, RuntimeProfile};
use loopx_core::host::{
    AdapterCapabilities, Entry, Feature, Format, HookPoint, HostAdapter, HostPath, HostProtocol, InstallEnv,
    InstallOptions, InstallScope, InstallSpec, MARKER, ManagedFile, unsupported_features,
};
use loopx_core::{AgentType, Error, Result};
use loopx_host_gemini::{self as gm, HookEvent};

/// The Gemini CLI adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeminiHooks;

/// The protocol's file, under `.gemini/`.
const PROTOCOL_FILE: &str = "loopx.md";

#[derive(Serialize)]
struct Context<'a> {
    marker: &'a str,
    loopx: &'a str,
    goal: &'a str,
    stop_driver: bool,
}

fn render(template: &str, opts: &InstallOptions) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    let ctx = Context {
        marker: MARKER,
        loopx: &shell_words::quote(&opts.loopx),
        goal: opts.goal.as_str(),
        stop_driver: opts.has(Feature::StopDriver),
    };
    hb.render_template(template, &ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// `/loopx`: the custom command, whose prompt the BeforeAgent hook reads.
pub fn render_command(opts: &InstallOptions) -> Result<String> {
    render(include_str!("../../../templates/gemini-hooks/loopx.toml.hbs"), opts)
}

/// The per-turn protocol, loaded as context.
pub fn render_protocol(opts: &InstallOptions) -> Result<String> {
    render(include_str!("../../../templates/gemini-hooks/loopx.md.hbs"), opts)
}

fn hook(opts: &InstallOptions, event: HookEvent) -> Entry {
    let command = format!("{} hook {} {}", shell_words::quote(&opts.loopx), gm::HOST, gm::HOOKS.cli(event));
    let mut group = json!({"hooks": [{"type": "command", "name": "loopx", "command": command, "timeout": gm::HOOK_TIMEOUT_MS}]});
    if event == HookEvent::BeforeTool {
        // Every tool, MCP tools included: the driver lets read-only ones through.
        group["matcher"] = json!(".*");
    }
    Entry::push(&["hooks", gm::HOOKS.native(event)], group)
}

impl HostAdapter for GeminiHooks {
    fn protocol(&self) -> &dyn HostProtocol {
        &gm::Gemini
    }
    fn name(&self) -> &'static str {
        "gemini-hooks"
    }
    fn capabilities(&self) -> AdapterCapabilities {
        AdapterCapabilities {
            hook_points: vec![HookPoint::PromptSubmit, HookPoint::ToolGate, HookPoint::Stop],
            features: vec![Feature::StopDriver, Feature::Harden],
            scopes: vec![InstallScope::Project, InstallScope::User],
            mcp: true,
            scheduler_rrule: false,
            max_prompt_chars: None,
            install_agent: false,
        }
    }
    fn host_types(&self) -> Vec<HostType> {
        vec![HostType {
            name: gm::AGENT_TYPE,
            aliases: vec!["gemini-cli"],
            description: "Gemini CLI",
            // The AfterAgent driver continues at once while loopx says run; a person's prompt
            // or `loopx drive` starts the next session.
            cadence: Cadence {
                profile: RuntimeProfile::from_static("gemini_hooks"),
                base_minutes: Some(3),
                unchanged_poll_limit: Some(3),
                rrule: false,
            },
        }]
    }
    fn agent_prefix(&self) -> &'static str {
        "gemini"
    }
    fn entry_command(&self) -> Option<&'static str> {
        Some("/loopx")
    }
    fn install_hint(&self) -> &'static str {
        "npm install -g @google/gemini-cli"
    }
    fn after_install(&self) -> &'static str {
        "in Gemini CLI, /loopx <task> joins the goal; with --with stop-driver the session keeps turning"
    }
    fn keep_turning(&self) -> &'static str {
        "loopx continues the session after each reply while it says run (--with stop-driver)."
    }

    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        (*agent_type == gm::AGENT_TYPE).then(|| {
            vec![
                "loopx host install gemini --with stop-driver   # --dry-run first; add --with harden for the tool gate".to_owned(),
                "in Gemini CLI, /loopx <task> joins the goal as this session's own agent".to_owned(),
                "the AfterAgent hook keeps the session turning while loopx says run; /loopx off disarms".to_owned(),
                "unattended: loopx drive --host gemini -- gemini --approval-mode yolo".to_owned(),
            ]
        })
    }

    fn install_plan(&self, opts: &InstallOptions, _env: &InstallEnv<'_>) -> Result<InstallSpec> {
        unsupported_features(self, opts)?;
        let at = |rel: &str| HostPath::in_scope(opts.scope, rel);
        let (protocol_path, protocol_name) = gm::context_file(opts.scope, PROTOCOL_FILE);
        let mut settings = vec![hook(opts, HookEvent::BeforeAgent)];
        if opts.has(Feature::StopDriver) {
            settings.push(hook(opts, HookEvent::AfterAgent));
        }
        if opts.has(Feature::Harden) {
            settings.push(hook(opts, HookEvent::BeforeTool));
        }
        // Gemini asks before each call of an untrusted server's tool; loopx's govern themselves.
        let server = json!({"command": opts.loopx, "args": ["mcp"], "trust": true});
        settings.push(Entry::set(&["mcpServers", "loopx"], server));
        // Naming a context file replaces the default one: keep it.
        settings.push(Entry::ensure(&["context", "fileName"], json!(gm::DEFAULT_CONTEXT_FILE)));
        settings.push(Entry::ensure(&["context", "fileName"], json!(protocol_name)));
        Ok(InstallSpec {
            files: vec![
                ManagedFile::Text { path: at(&gm::command("loopx"))?, content: render_command(opts)? },
                ManagedFile::Text { path: at(&protocol_path)?, content: render_protocol(opts)? },
                ManagedFile::Entries { path: at(gm::SETTINGS)?, format: Format::Jsonc, entries: settings },
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_with_the_marker() {
        let opts = InstallOptions {
            features: [Feature::StopDriver].into_iter().collect(),
            ..InstallOptions::default()
        };
        let c = render_command(&opts).unwrap();
        assert!(c.starts_with(&format!("# {MARKER}")) && c.contains(r#"prompt = "/loopx {{args}}""#), "{c}");
        let p = render_protocol(&opts).unwrap();
        assert!(
            p.contains("goal=main") && p.contains("mcp_loopx_should_run") && p.contains("next\ninstruction"),
            "{p}"
        );
    }
}
