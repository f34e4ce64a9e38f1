//! cursor-manual: binds Cursor to the kernel by hand. Cursor has no goal or automation that
//! loopx could bind, so loopx supplies the protocol, the gate and the state, and the person
//! drives: the `loopx` rule (`.cursor/rules/loopx.mdc`, always applied) and skill carry the
//! per-turn protocol, the `loopx` MCP server in `.cursor/mcp.json` acts as the one agent named at
//! install (Cursor's MCP servers see nothing of the chat calling them); with `--stop-driver`,
//! a `stop` hook answers `followup_message` with the next instruction while loopx says run
//! (bounded by `loop_limit` and loopx's own cap) and a `beforeSubmitPrompt` hook handles
//! `/loopx`; with `--harden`, a `beforeShellExecution` gate.
//!
//! Only declarations: the protocol facts are `loopx-host-cursor`'s; the kernel's installer
//! applies the spec, its hook driver answers the hooks.

use handlebars::Handlebars;
use serde::Serialize;
use serde_json::json;

use loopx_core::agent::{Cadence, HostType, RuntimeProfile};
use loopx_core::decision::{DecisionKind, ShouldRunAnswer};
use loopx_core::host::{
    AdapterCapabilities, Entry, Feature, Format, HookPoint, HostAdapter, HostPath, HostProtocol, InstallEnv,
    InstallOptions, InstallScope, InstallSpec, MARKER, ManagedFile, unsupported_features,
};
use loopx_core::untrusted::{flatten, quoted};
use loopx_core::{AgentId, AgentType, Error, Result};
use loopx_host_cursor::{self as cu, HookEvent};

/// The Cursor adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct CursorManual;

/// The agent Cursor's chats act as when the install names none.
pub const DEFAULT_AGENT: &str = "cursor-1";
/// Follow-ups Cursor submits in a row (`loop_limit`); loopx's own cap is the same.
pub const LOOP_LIMIT: u32 = 10;

#[derive(Serialize)]
struct ProtocolContext<'a> {
    loopx: &'a str,
    agent: &'a str,
    stop_driver: bool,
    loop_limit: u32,
}

#[derive(Serialize)]
struct FileContext<'a> {
    marker: &'a str,
    protocol: &'a str,
}

fn render(template: &str, ctx: &impl Serialize) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.render_template(template, ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// The agent an install acts as.
pub fn agent(opts: &InstallOptions) -> Result<AgentId> {
    opts.agent.clone().map_or_else(|| Ok(AgentId::new(DEFAULT_AGENT)?), Ok)
}

fn protocol(opts: &InstallOptions) -> Result<String> {
    let agent = agent(opts)?;
    let ctx = ProtocolContext {
        loopx: &shell_words::quote(&opts.loopx),
        agent: agent.as_str(),
        stop_driver: opts.has(Feature::StopDriver),
        loop_limit: LOOP_LIMIT,
    };
    render(include_str!("../../../templates/cursor-manual/protocol.md.hbs"), &ctx)
}

/// `.cursor/rules/loopx.mdc`: front matter Cursor reads (`alwaysApply` a boolean), then the
/// protocol.
pub fn render_rule(opts: &InstallOptions) -> Result<String> {
    let protocol = protocol(opts)?;
    render(
        include_str!("../../../templates/cursor-manual/loopx.mdc.hbs"),
        &FileContext { marker: MARKER, protocol: &protocol },
    )
}

/// `.cursor/skills/loopx/SKILL.md`.
pub fn render_skill(opts: &InstallOptions) -> Result<String> {
    let protocol = protocol(opts)?;
    render(
        include_str!("../../../templates/cursor-manual/SKILL.md.hbs"),
        &FileContext { marker: MARKER, protocol: &protocol },
    )
}

fn hook_command(opts: &InstallOptions, event: HookEvent) -> Result<String> {
    Ok(format!(
        "{} hook {} {} --agent-id {}",
        shell_words::quote(&opts.loopx),
        cu::HOST,
        cu::HOOKS.cli(event),
        agent(opts)?
    ))
}

impl HostAdapter for CursorManual {
    fn protocol(&self) -> &dyn HostProtocol {
        &cu::Cursor
    }
    fn name(&self) -> &'static str {
        "cursor-manual"
    }
    fn capabilities(&self) -> AdapterCapabilities {
        AdapterCapabilities {
            hook_points: vec![HookPoint::PromptSubmit, HookPoint::ToolGate, HookPoint::Stop],
            features: vec![Feature::StopDriver, Feature::Harden],
            scopes: vec![InstallScope::Project, InstallScope::User],
            mcp: true,
            scheduler_rrule: false,
            max_prompt_chars: None,
            install_agent: true,
        }
    }
    fn host_types(&self) -> Vec<HostType> {
        vec![HostType {
            name: cu::AGENT_TYPE,
            aliases: vec![],
            description: "Cursor agent, wired by hand",
            // A person starts each turn: never polled.
            cadence: Cadence {
                profile: RuntimeProfile::from_static("cursor_manual"),
                base_minutes: None,
                unchanged_poll_limit: None,
                rrule: false,
            },
        }]
    }
    fn agent_prefix(&self) -> &'static str {
        "cursor"
    }
    fn entry_command(&self) -> Option<&'static str> {
        Some("/loopx")
    }
    fn default_stop_cap(&self) -> u32 {
        LOOP_LIMIT
    }
    fn remaining_steps(&self, opts: &InstallOptions) -> Vec<String> {
        let agent = agent(opts).map_or_else(|_| DEFAULT_AGENT.to_owned(), |a| a.to_string());
        let mut steps = vec![
            "In Cursor, open Settings → MCP and turn the loopx server on: Cursor does not enable a new server by itself.".to_owned(),
        ];
        if opts.has(Feature::StopDriver) {
            steps.push(format!(
                "Start a chat in this project with /loopx <task>: loopx adds the task, registers agent {agent} (cursor) if it is new, and arms the loop."
            ));
            steps.push(format!(
                "After each reply Cursor sends loopx's next instruction as your next message while loopx says run, at most {LOOP_LIMIT} times a chat; /loopx off stops it."
            ));
        } else {
            steps.push(format!(
                "Register the agent your chats act as, once: loopx agent register --agent-id {agent} --agent-type cursor"
            ));
            steps.push(
                "Start a chat in this project and ask for a turn (the loopx rule tells the model the protocol); Cursor does not loop by itself, so ask again for each turn, or install with --stop-driver.".to_owned(),
            );
        }
        if opts.has(Feature::Harden) {
            steps.push("Shell commands that change things wait while loopx says not to run; reading is never blocked.".to_owned());
        }
        if opts.scope == InstallScope::User {
            steps.push("Cursor reads rules only from a project's .cursor/rules: the skill carries the protocol at user scope.".to_owned());
        }
        steps
    }
    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        if *agent_type != cu::AGENT_TYPE {
            return None;
        }
        let opts = InstallOptions {
            scope: InstallScope::Project,
            features: [Feature::StopDriver, Feature::Harden].into_iter().collect(),
            loopx: "loopx".to_owned(),
            goal: loopx_core::GoalId::new("main").ok()?,
            agent: None,
        };
        let install =
            "loopx host install cursor --with stop-driver --with harden   # --dry-run first to see the plan";
        Some(std::iter::once(install.to_owned()).chain(self.remaining_steps(&opts)).collect())
    }
    fn install_hint(&self) -> &'static str {
        "install Cursor (cursor.com/downloads); the cursor-agent command comes with it"
    }
    fn after_install(&self) -> &'static str {
        "run loopx host doctor cursor: it lists the steps left to you in Cursor"
    }
    fn keep_turning(&self) -> &'static str {
        "Cursor does not loop by itself: while loopx says run, its stop hook sends the next instruction as your next message."
    }

    fn install_plan(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Result<InstallSpec> {
        let _ = env;
        unsupported_features(self, opts)?;
        let at = |rel: &str| HostPath::in_scope(opts.scope, &format!("{}/{rel}", cu::DIR));
        let mut files = Vec::new();
        if opts.scope == InstallScope::Project {
            files.push(ManagedFile::Text { path: at("rules/loopx.mdc")?, content: render_rule(opts)? });
        }
        files.push(ManagedFile::Text { path: at("skills/loopx/SKILL.md")?, content: render_skill(opts)? });
        let server = json!({"command": opts.loopx, "args": ["mcp", "--agent-id", agent(opts)?.as_str()]});
        files.push(ManagedFile::Entries {
            path: at("mcp.json")?,
            format: Format::Json,
            entries: vec![Entry::set(&["mcpServers", "loopx"], server)],
        });
        let mut hooks = Vec::new();
        if opts.has(Feature::StopDriver) {
            let stop = cu::hook_entry(&hook_command(opts, HookEvent::Stop)?, Some(LOOP_LIMIT));
            let prompt = cu::hook_entry(&hook_command(opts, HookEvent::BeforeSubmitPrompt)?, None);
            hooks.push(Entry::push(&["hooks", cu::HOOKS.native(HookEvent::Stop)], stop));
            hooks.push(Entry::push(&["hooks", cu::HOOKS.native(HookEvent::BeforeSubmitPrompt)], prompt));
        }
        if opts.has(Feature::Harden) {
            let gate = cu::hook_entry(&hook_command(opts, HookEvent::BeforeShellExecution)?, None);
            hooks.push(Entry::push(&["hooks", cu::HOOKS.native(HookEvent::BeforeShellExecution)], gate));
        }
        if !hooks.is_empty() {
            hooks.insert(0, Entry::set(&["version"], json!(1)));
            files.push(ManagedFile::Entries {
                path: at("hooks.json")?,
                format: Format::Json,
                entries: hooks,
            });
        }
        Ok(InstallSpec { files })
    }

    /// The next user message: Cursor submits it as the person's, so it says who speaks.
    fn continuation_text(&self, answer: &ShouldRunAnswer, loopx: &str) -> String {
        let _ = loopx;
        let who = answer.agent_id.as_ref().map_or_else(|| "loopx".to_owned(), |a| format!("loopx (for {a})"));
        match (&answer.decision, &answer.selected_todo) {
            (DecisionKind::Run, Some(t)) => format!(
                "{who}: next turn — {} ({}): {}. Follow the loopx rule: should_run with a new turn_id, claim, one verified slice, complete_task with evidence.",
                t.id,
                t.priority,
                quoted(&t.text, 400)
            ),
            _ => format!("{who}: {}. Follow the loopx rule for this turn.", flatten(&answer.reason, 600)),
        }
    }
}
