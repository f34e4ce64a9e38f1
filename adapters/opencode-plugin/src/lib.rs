//! opencode-plugin: binds OpenCode to the kernel with the `/loopx` command, a plugin that hands
//! OpenCode's events to `loopx hook opencode …` (the message hook always; the loop driver and
//! the tool gate on request), the `loopx` MCP server in `opencode.json`, and the per-turn
//! protocol as instructions OpenCode loads.
//!
//! Only declarations: what to install (rendered from `templates/opencode-plugin/`), and the
//! OpenCode protocol facts from `loopx-host-opencode`. The kernel's installer applies the spec;
//! the kernel's hook driver answers the hooks the plugin hands on.

use handlebars::Handlebars;
use serde::Serialize;
use serde_json::json;

use loopx_core::agent::{Cadence, HostType, RuntimeProfile};
use loopx_core::host::{
    AdapterCapabilities, Entry, Feature, Format, HookPoint, HostAdapter, HostPath, HostProtocol, InstallEnv,
    InstallOptions, InstallScope, InstallSpec, MARKER, ManagedFile, unsupported_features,
};
use loopx_core::{AgentType, Error, Result};
use loopx_host_opencode::{self as oc, Paths};

/// The OpenCode adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenCodePlugin;

#[derive(Serialize)]
struct Context<'a> {
    marker: &'a str,
    loopx: &'a str,
    /// `loopx` as a JavaScript string literal.
    loopx_js: String,
    goal: &'a str,
    stop_driver: bool,
    harden: bool,
}

fn render(template: &str, opts: &InstallOptions) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    let ctx = Context {
        marker: MARKER,
        loopx: &shell_words::quote(&opts.loopx),
        loopx_js: serde_json::to_string(&opts.loopx).map_err(|e| Error::internal(e.to_string()))?,
        goal: opts.goal.as_str(),
        stop_driver: opts.has(Feature::StopDriver),
        harden: opts.has(Feature::Harden),
    };
    hb.render_template(template, &ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// `/loopx`: the command, whose text the plugin's message hook reads.
pub fn render_command(opts: &InstallOptions) -> Result<String> {
    render(include_str!("../../../templates/opencode-plugin/loopx.md.hbs"), opts)
}

/// The plugin.
pub fn render_plugin(opts: &InstallOptions) -> Result<String> {
    render(include_str!("../../../templates/opencode-plugin/loopx.js.hbs"), opts)
}

/// The per-turn protocol, loaded as instructions.
pub fn render_protocol(opts: &InstallOptions) -> Result<String> {
    render(include_str!("../../../templates/opencode-plugin/protocol.md.hbs"), opts)
}

impl HostAdapter for OpenCodePlugin {
    fn protocol(&self) -> &dyn HostProtocol {
        &oc::OpenCode
    }
    fn name(&self) -> &'static str {
        "opencode-plugin"
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
            name: oc::AGENT_TYPE,
            aliases: vec!["oc"],
            description: "OpenCode (TUI, serve or run)",
            // The plugin's loop driver continues at once while loopx says run; a person's
            // prompt or `loopx drive` starts the next session.
            cadence: Cadence {
                profile: RuntimeProfile::from_static("opencode_plugin"),
                base_minutes: Some(3),
                unchanged_poll_limit: Some(3),
                rrule: false,
            },
        }]
    }
    fn agent_prefix(&self) -> &'static str {
        "opencode"
    }
    fn entry_command(&self) -> Option<&'static str> {
        Some("/loopx")
    }
    fn install_hint(&self) -> &'static str {
        "npm install -g opencode-ai"
    }
    fn after_install(&self) -> &'static str {
        "in OpenCode, /loopx <task> joins the goal; with --with stop-driver the session keeps turning"
    }
    fn keep_turning(&self) -> &'static str {
        "loopx continues the session after each reply while it says run (--with stop-driver)."
    }
    fn remaining_steps(&self, _opts: &InstallOptions) -> Vec<String> {
        vec![
            "start OpenCode once while online: seeing a plugin, it installs @opencode-ai/plugin into each of its config directories (once); offline, set npm_config_offline=true, or every start waits about 75 s for the network".to_owned(),
            "in OpenCode, /loopx <task> joins the goal as this session's own agent".to_owned(),
        ]
    }

    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        (*agent_type == oc::AGENT_TYPE).then(|| {
            vec![
                "loopx host install opencode --with stop-driver   # --dry-run first; add --with harden for the tool gate".to_owned(),
                "in OpenCode, /loopx <task> joins the goal as this session's own agent".to_owned(),
                "the plugin keeps the session turning while loopx says run; /loopx off disarms".to_owned(),
                "unattended: loopx drive --host opencode -- opencode run".to_owned(),
            ]
        })
    }

    fn install_plan(&self, opts: &InstallOptions, _env: &InstallEnv<'_>) -> Result<InstallSpec> {
        unsupported_features(self, opts)?;
        let paths = Paths::new(opts.scope);
        let at = |rel: &str| HostPath::in_scope(opts.scope, rel);
        let command = [opts.loopx.as_str(), "mcp"];
        let config = vec![
            Entry::set(&["mcp", "loopx"], json!({"type": "local", "command": command, "enabled": true})),
            Entry::ensure(&["instructions"], json!(paths.instruction(opts.scope, "loopx.md"))),
        ];
        Ok(InstallSpec {
            files: vec![
                ManagedFile::Text {
                    path: at(&paths.file("command/loopx.md"))?,
                    content: render_command(opts)?,
                },
                ManagedFile::Text {
                    path: at(&paths.file("plugins/loopx.js"))?,
                    content: render_plugin(opts)?,
                },
                ManagedFile::Text { path: at(&paths.file("loopx.md"))?, content: render_protocol(opts)? },
                ManagedFile::Entries { path: at(paths.config)?, format: Format::Json, entries: config },
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_with_the_marker_and_loopx_quoted_for_javascript() {
        let opts = InstallOptions {
            loopx: r#"/opt/my "tools"/loopx"#.to_owned(),
            features: [Feature::Harden].into_iter().collect(),
            ..InstallOptions::default()
        };
        let p = render_plugin(&opts).unwrap();
        assert!(p.starts_with(&format!("// {MARKER}")), "{p}");
        assert!(p.contains(r#"const LOOPX = "/opt/my \"tools\"/loopx";"#), "{p}");
        assert!(p.contains("const TOOL_GATE = true;") && p.contains("const LOOP_DRIVER = false;"), "{p}");
        let c = render_command(&opts).unwrap();
        assert!(c.contains(MARKER) && c.ends_with("/loopx $ARGUMENTS\n"), "{c}");
        assert!(render_protocol(&opts).unwrap().contains("`loopx_should_run`"));
    }
}
