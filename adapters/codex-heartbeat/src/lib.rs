//! codex-heartbeat: binds Codex to the kernel. The explicit-only `$loopx` skill (SKILL.md and
//! `agents/openai.yaml`); with `--with-hooks`, SessionStart, UserPromptSubmit (`$loopx <task>`
//! joins) and Stop hooks in `hooks.json`; with `--trust-hooks`, their trust entries in the
//! user's `config.toml`; with `--with-mcp`, `[mcp_servers.loopx]`. Plus the prompts the person
//! pastes: the Codex App heartbeat automation's body and the CLI/IDE `/goal`.
//!
//! Only declarations: the protocol facts are `loopx-host-codex`'s; the kernel's installer applies
//! the spec, its hook driver answers the hooks.

use std::path::Path;

use handlebars::Handlebars;
use serde::Serialize;
use serde_json::{Value, json};

use loopx_core::agent::{Cadence, HostType, RuntimeProfile};
use loopx_core::decision::{DecisionKind, ShouldRunAnswer};
use loopx_core::host::{
    AdapterCapabilities, Entry, Feature, Format, HookPoint, HostAdapter, HostPath, HostPrompt, HostProtocol,
    InstallEnv, InstallOptions, InstallScope, InstallSpec, MARKER, ManagedFile, PromptRequest,
    unsupported_features,
};
use loopx_core::untrusted::{flatten, quoted};
use loopx_core::{AgentId, AgentType, Error, GoalId, Result};
use loopx_host_codex::{self as cx, HookEvent};

/// The Codex adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct CodexHeartbeat;

/// Seconds Codex gives each of loopx's hooks.
const HOOK_TIMEOUT: u64 = 30;
/// The automation body's budget; Codex takes more, but a heartbeat body should be read at a glance.
pub const MAX_HEARTBEAT_CHARS: usize = 3500;

#[derive(Serialize)]
struct SkillContext<'a> {
    marker: &'a str,
    loopx: &'a str,
    mcp: bool,
}

#[derive(Serialize)]
struct MarkerContext<'a> {
    marker: &'a str,
}

#[derive(Serialize)]
struct PromptContext<'a> {
    loopx: &'a str,
    goal: &'a str,
    agent: &'a str,
    project: &'a str,
    objective: &'a str,
}

fn render(template: &str, ctx: &impl Serialize) -> Result<String> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.render_template(template, ctx).map_err(|e| Error::internal(format!("template: {e}")))
}

/// The `$loopx` skill.
pub fn render_skill(opts: &InstallOptions) -> Result<String> {
    let ctx =
        SkillContext { marker: MARKER, loopx: &shell_words::quote(&opts.loopx), mcp: opts.has(Feature::Mcp) };
    render(include_str!("../../../templates/codex-heartbeat/SKILL.md.hbs"), &ctx)
}

/// `agents/openai.yaml`: the skill is explicit only.
pub fn render_skill_policy() -> Result<String> {
    render(
        include_str!("../../../templates/codex-heartbeat/openai.yaml.hbs"),
        &MarkerContext { marker: MARKER },
    )
}

/// The Codex App heartbeat automation: its name, first RRULE and task body.
pub fn heartbeat_prompt(loopx: &str, goal: &GoalId, agent: &AgentId, project: &Path) -> Result<HostPrompt> {
    let ctx = PromptContext {
        loopx: &shell_words::quote(loopx),
        goal: goal.as_str(),
        agent: agent.as_str(),
        project: &flatten(&project.display().to_string(), 300),
        objective: "",
    };
    let body = render(include_str!("../../../templates/codex-heartbeat/heartbeat.md.hbs"), &ctx)?;
    budget(&body, MAX_HEARTBEAT_CHARS)?;
    Ok(HostPrompt {
        name: format!("loopx {goal} · {agent}"),
        rrule: Some("FREQ=MINUTELY;INTERVAL=3".to_owned()),
        chars: body.chars().count(),
        body,
        max_chars: MAX_HEARTBEAT_CHARS,
    })
}

/// The visible `/goal <body>` for the Codex CLI or IDE.
pub fn goal_prompt(loopx: &str, goal: &GoalId, agent: &AgentId, objective: &str) -> Result<HostPrompt> {
    let objective = quoted(objective, 300);
    let ctx = PromptContext {
        loopx: &shell_words::quote(loopx),
        goal: goal.as_str(),
        agent: agent.as_str(),
        project: "",
        objective: &objective,
    };
    let body =
        render(include_str!("../../../templates/codex-heartbeat/goal.md.hbs"), &ctx)?.trim_end().to_owned();
    budget(&body, cx::MAX_GOAL_CHARS)?;
    Ok(HostPrompt {
        name: format!("loopx {goal} · {agent}"),
        rrule: None,
        chars: body.chars().count(),
        body,
        max_chars: cx::MAX_GOAL_CHARS,
    })
}

fn budget(body: &str, max: usize) -> Result<()> {
    let n = body.chars().count();
    if n > max {
        return Err(Error::internal(format!("the prompt is {n} characters, more than the host's {max}")));
    }
    Ok(())
}

/// Where the files go for a scope.
struct Paths {
    skill_dir: HostPath,
    hooks: HostPath,
    mcp_config: HostPath,
}

fn paths(scope: InstallScope) -> Result<Paths> {
    Ok(match scope {
        InstallScope::User => Paths {
            skill_dir: HostPath::host_home("skills/loopx")?,
            hooks: HostPath::host_home("hooks.json")?,
            mcp_config: HostPath::host_home("config.toml")?,
        },
        InstallScope::Project => Paths {
            skill_dir: HostPath::project(".agents/skills/loopx")?,
            hooks: HostPath::project(".codex/hooks.json")?,
            mcp_config: HostPath::project(".codex/config.toml")?,
        },
    })
}

fn join(dir: &HostPath, rel: &str) -> Result<HostPath> {
    HostPath::new(dir.base, &format!("{}/{rel}", dir.rel))
}

/// Our hook group for `event`.
fn hook_group(opts: &InstallOptions, event: HookEvent) -> (String, Value) {
    let command = format!("{} hook {} {}", shell_words::quote(&opts.loopx), cx::HOST, cx::HOOKS.cli(event));
    let group = json!({"hooks": [cx::handler(&command, HOOK_TIMEOUT)]});
    (command, group)
}

/// Where our group for `event` will sit in `hooks.json`: where it already is, or at the end.
fn group_index(current: Option<&str>, event: HookEvent, group: &Value) -> usize {
    let doc: Value = current.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null);
    match doc["hooks"][cx::HOOKS.native(event)].as_array() {
        Some(groups) => groups.iter().position(|g| g == group).unwrap_or(groups.len()),
        None => 0,
    }
}

impl HostAdapter for CodexHeartbeat {
    fn protocol(&self) -> &dyn HostProtocol {
        &cx::Codex
    }
    fn name(&self) -> &'static str {
        "codex-heartbeat"
    }
    fn capabilities(&self) -> AdapterCapabilities {
        AdapterCapabilities {
            hook_points: vec![
                HookPoint::SessionStart,
                HookPoint::PromptSubmit,
                HookPoint::Stop,
                HookPoint::ToolGate,
            ],
            features: vec![Feature::Hooks, Feature::Harden, Feature::TrustHooks, Feature::Mcp],
            scopes: vec![InstallScope::Project, InstallScope::User],
            mcp: true,
            scheduler_rrule: true,
            max_prompt_chars: Some(cx::MAX_GOAL_CHARS),
            install_agent: false,
        }
    }
    fn host_types(&self) -> Vec<HostType> {
        let goal = Cadence {
            profile: RuntimeProfile::from_static("codex_goal"),
            base_minutes: Some(3),
            unchanged_poll_limit: Some(3),
            rrule: false,
        };
        vec![
            HostType {
                name: cx::APP,
                aliases: vec![],
                description: "Codex App, driven by a heartbeat automation",
                // The heartbeat's schedule is an RRULE the hint moves; it never gives up.
                cadence: Cadence {
                    profile: RuntimeProfile::from_static("codex_heartbeat"),
                    base_minutes: Some(3),
                    unchanged_poll_limit: None,
                    rrule: true,
                },
            },
            HostType {
                name: cx::CLI,
                aliases: vec![],
                description: "Codex CLI, driven by /goal",
                cadence: goal.clone(),
            },
            HostType {
                name: cx::IDE,
                aliases: vec![],
                description: "Codex in an IDE extension",
                cadence: goal,
            },
        ]
    }
    /// Sessions register as Codex CLI agents (the App's heartbeat agents are registered by hand).
    fn agent_type(&self) -> AgentType {
        cx::CLI
    }
    fn agent_prefix(&self) -> &'static str {
        "codex"
    }
    fn entry_command(&self) -> Option<&'static str> {
        Some("$loopx")
    }
    fn default_stop_cap(&self) -> u32 {
        8
    }
    fn doctor_checks(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Vec<(String, bool, String)> {
        let mut checks = Vec::new();
        let user_config = HostPath::host_home("config.toml").ok();
        let config = user_config.as_ref().and_then(|p| (env.read)(p)).unwrap_or_default();
        if opts.has(Feature::Hooks) || opts.has(Feature::Harden) {
            let fix = format!(
                "loopx host install codex{}{} --with trust-hooks",
                if opts.has(Feature::Hooks) { " --with hooks" } else { "" },
                if opts.has(Feature::Harden) { " --with harden" } else { "" }
            );
            let trusted = InstallOptions {
                features: opts.features.iter().copied().chain([Feature::TrustHooks]).collect(),
                ..opts.clone()
            };
            let Ok(spec) = self.install_plan(&trusted, env) else { return checks };
            let wanted =
                spec.files.iter().filter(|f| Some(f.path()) == user_config.as_ref()).flat_map(|f| match f {
                    ManagedFile::Entries { entries, .. } => entries.clone(),
                    ManagedFile::Text { .. } => vec![],
                });
            for e in wanted.filter(|e| e.at.len() == 3 && e.at[1] == "state") {
                let key = &e.at[2];
                let hash = match &e.op {
                    loopx_core::host::EntryOp::Set(v) => v["trusted_hash"].as_str().unwrap_or("").to_owned(),
                    _ => continue,
                };
                let ok = config.contains(key.as_str()) && config.contains(&hash);
                let event = key.rsplitn(3, ':').nth(2).unwrap_or(key).rsplit(':').next().unwrap_or("");
                checks.push((
                    format!("Codex trusts the {event} hook"),
                    ok,
                    if ok {
                        "trusted".to_owned()
                    } else {
                        format!("untrusted: Codex skips it silently; fix with: {fix} (or trust it in Codex's /hooks)")
                    },
                ));
            }
        }
        if opts.scope == InstallScope::Project
            && (opts.has(Feature::Hooks) || opts.has(Feature::Harden) || opts.has(Feature::Mcp))
        {
            let header = format!("[projects.{}]", json!(env.roots.project.display().to_string()));
            let ok = config
                .lines()
                .skip_while(|l| l.trim() != header)
                .skip(1)
                .take_while(|l| !l.trim_start().starts_with('['))
                .any(|l| l.replace(' ', "") == "trust_level=\"trusted\"");
            checks.push((
                "Codex trusts this project".to_owned(),
                ok,
                if ok { "trusted".to_owned() } else {
                    format!("Codex ignores .codex/ here until you trust the project: add {header} with trust_level = \"trusted\" to your config.toml (or answer Codex's trust prompt)")
                },
            ));
        }
        checks
    }
    fn prompt_surfaces(&self) -> &'static [&'static str] {
        &["app", "cli"]
    }
    fn prompt(&self, surface: &str, req: &PromptRequest) -> Result<HostPrompt> {
        match surface {
            "app" => heartbeat_prompt(&req.loopx, &req.goal, &req.agent, &req.project),
            "cli" | "ide" => goal_prompt(&req.loopx, &req.goal, &req.agent, &req.objective),
            other => {
                Err(Error::usage(format!("Codex has no surface {other:?}"))
                    .with_hint("codex-app or codex-cli"))
            }
        }
    }
    fn onboarding(&self, agent_type: &AgentType) -> Option<Vec<String>> {
        let install = "loopx host install codex --with hooks --with trust-hooks --with mcp   # --dry-run first to see the plan; trust-hooks is a trust decision made for you";
        match agent_type {
            t if *t == cx::CLI || *t == cx::IDE => Some(vec![
                install.to_owned(),
                "in Codex, type $loopx <task>: the skill is explicit-only, so Codex never loads it by itself".to_owned(),
                "the Stop hook keeps the session turning while loopx says run (at most 8 times in a row, LOOPX_STOP_CAP)".to_owned(),
                "for a goal Codex keeps visible: loopx heartbeat-prompt --host codex-cli --agent-id <your agent>, and paste the /goal line".to_owned(),
            ]),
            t if *t == cx::APP => Some(vec![
                install.to_owned(),
                "loopx agent register --agent-id <id> --agent-type codex-app".to_owned(),
                "loopx heartbeat-prompt --host codex-app --agent-id <id>".to_owned(),
                "in the Codex App, create a heartbeat automation with that name, schedule (RRULE) and body; each wake runs one tick and moves the schedule as loopx says".to_owned(),
            ]),
            _ => None,
        }
    }
    fn install_hint(&self) -> &'static str {
        "npm install -g @openai/codex"
    }
    fn after_install(&self) -> &'static str {
        "in Codex, type $loopx <task> to join the goal (see loopx agent onboard --agent-type codex-cli)"
    }
    fn keep_turning(&self) -> &'static str {
        "The Stop hook keeps turning while loopx says run."
    }

    fn install_plan(&self, opts: &InstallOptions, env: &InstallEnv<'_>) -> Result<InstallSpec> {
        unsupported_features(self, opts)?;
        if opts.has(Feature::TrustHooks) && !opts.has(Feature::Hooks) && !opts.has(Feature::Harden) {
            return Err(Error::usage("trust-hooks trusts the hooks that hooks and harden install")
                .with_hint("loopx host install codex --with hooks --with harden --with trust-hooks"));
        }
        let p = paths(opts.scope)?;
        let mut files = vec![
            ManagedFile::Text { path: join(&p.skill_dir, "SKILL.md")?, content: render_skill(opts)? },
            ManagedFile::Text {
                path: join(&p.skill_dir, "agents/openai.yaml")?,
                content: render_skill_policy()?,
            },
        ];
        let mut config = Vec::new();
        // The loop's hooks come with --with-hooks, the tool gate with --harden.
        let events: Vec<HookEvent> = HookEvent::ALL
            .into_iter()
            .filter(|e| {
                if *e == HookEvent::PreToolUse { opts.has(Feature::Harden) } else { opts.has(Feature::Hooks) }
            })
            .collect();
        if !events.is_empty() {
            let current = (env.read)(&p.hooks);
            let source = env.roots.abs(&p.hooks);
            let mut groups = Vec::new();
            for event in events {
                let (command, group) = hook_group(opts, event);
                if opts.has(Feature::TrustHooks) {
                    let key =
                        cx::trust_key(&source, event, group_index(current.as_deref(), event, &group), 0);
                    let hash = cx::trust_hash(event, &command, HOOK_TIMEOUT, None);
                    config.push(Entry::set(&["hooks", "state", &key], json!({"trusted_hash": hash})));
                }
                groups.push(Entry::push(&["hooks", cx::HOOKS.native(event)], group));
            }
            files.push(ManagedFile::Entries { path: p.hooks.clone(), format: Format::Json, entries: groups });
        }
        if opts.has(Feature::Mcp) {
            let server = json!({"command": opts.loopx, "args": ["mcp"]});
            let entries = vec![Entry::set(&["mcp_servers", "loopx"], server)];
            files.push(ManagedFile::Entries { path: p.mcp_config.clone(), format: Format::Toml, entries });
        }
        if !config.is_empty() {
            // Trust lives in the user's own config, whatever the scope of the hooks.
            let user_config = HostPath::host_home("config.toml")?;
            match files.iter_mut().find(|f| f.path() == &user_config) {
                Some(ManagedFile::Entries { entries, .. }) => entries.extend(config),
                _ => files.push(ManagedFile::Entries {
                    path: user_config,
                    format: Format::Toml,
                    entries: config,
                }),
            }
        }
        Ok(InstallSpec { files })
    }

    /// Through the shell tool: the MCP server is optional, the CLI is always there.
    fn continuation_text(&self, answer: &ShouldRunAnswer, loopx: &str) -> String {
        let who = answer.agent_id.as_ref().map_or_else(|| "loopx".to_owned(), |a| format!("loopx ({a})"));
        let tick = format!(
            "run `{} quota should-run --turn-instance-id <a new turn id> --json` and follow its next_commands",
            shell_words::quote(loopx)
        );
        match (&answer.decision, &answer.selected_todo) {
            (DecisionKind::Run, Some(t)) => format!(
                "{who}: continue with {} ({}): {}. For this turn {tick}: claim, one bounded verified slice, complete with evidence, refresh-state, spend-slot.",
                t.id,
                t.priority,
                quoted(&t.text, 400)
            ),
            _ => format!("{who}: {}. {tick}.", flatten(&answer.reason, 600)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(features: &[Feature]) -> InstallOptions {
        InstallOptions {
            scope: InstallScope::Project,
            features: features.iter().copied().collect(),
            loopx: "/opt/loopx/bin/loopx".into(),
            goal: GoalId::new("main").unwrap(),
            agent: None,
        }
    }

    #[test]
    fn the_skill_is_explicit_only_and_names_the_binary() {
        let skill = render_skill(&opts(&[Feature::Mcp])).unwrap();
        assert!(skill.starts_with("---\nname: loopx\ndescription: "), "{skill}");
        assert!(skill.contains(MARKER) && skill.contains("`/opt/loopx/bin/loopx join"), "{skill}");
        assert!(skill.contains("mcp__loopx"));
        assert!(!render_skill(&opts(&[])).unwrap().contains("mcp__loopx"));
        let policy = render_skill_policy().unwrap();
        assert!(policy.contains("allow_implicit_invocation: false") && policy.contains(MARKER));
    }

    #[test]
    fn prompts_fit_their_budgets() {
        let g = GoalId::new("main").unwrap();
        let a = AgentId::new("codex-1").unwrap();
        let h = heartbeat_prompt("/usr/local/bin/loopx", &g, &a, Path::new("/home/u/p")).unwrap();
        assert_eq!(h.rrule.as_deref(), Some("FREQ=MINUTELY;INTERVAL=3"));
        assert!(CodexHeartbeat.onboarding(&cx::APP).is_some());
        assert!(h.chars <= MAX_HEARTBEAT_CHARS && h.body.contains("--agent-id codex-1"), "{}", h.body);
        let long = "x".repeat(4000);
        let goal = goal_prompt("/usr/local/bin/loopx", &g, &a, &long).unwrap();
        assert!(goal.body.starts_with("/goal ") && goal.chars <= cx::MAX_GOAL_CHARS, "{}", goal.chars);
        assert!(goal.body.contains("blocked") && goal.body.contains("terminal"));
    }
}
