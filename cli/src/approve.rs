//! `loopx command list` and `loopx command approve`: the commands loopx runs for a goal, who
//! wrote each, and a person's approval of one, kept on this machine.

use std::sync::Arc;

use serde_json::json;

use loopx_core::{Error, Result};
use loopx_kernel::Reporter;
use loopx_kernel::approvals::GoalCommand;

use crate::Env;
use crate::args::{ApproveArgs, Cli, CommandsCommand};
use crate::output::Rendered;

pub async fn run(
    cli: &Cli,
    env: &Env,
    reporter: Arc<dyn Reporter>,
    cmd: &CommandsCommand,
) -> Result<Rendered> {
    let k = crate::commands::open_at(&crate::commands::project_root(cli, env)?, env, reporter)?;
    let goal = cli.goal_id.as_deref().map(loopx_core::GoalId::new).transpose()?;
    let commands = k.commands(goal.as_ref())?;
    match cmd {
        CommandsCommand::List => {
            let text = if commands.is_empty() {
                "the goal names no command loopx runs\n".to_owned()
            } else {
                commands.iter().map(|c| format!("{}\n", line(c))).collect()
            };
            Rendered::new(&json!({ "commands": commands }), text)
        }
        CommandsCommand::Approve(a) => {
            let at = target(a)?;
            // `--notify` names the notify command and the webhook the goal posts to.
            let named: Vec<&GoalCommand> = commands
                .iter()
                .filter(|c| c.at == at || (at == "notify" && c.at == "notify webhook"))
                .collect();
            let Some(c) = named.first() else {
                return Err(Error::not_found(format!("{at} names no command loopx runs"))
                    .with_hint("see the goal's commands with: loopx command list"));
            };
            let mut text = String::new();
            let mut changed = false;
            for c in &named {
                let new = k.approve_command(&c.argv)?;
                changed |= new;
                text.push_str(&if new {
                    format!("approved for this project on this machine: {}\n  {}\n", c.at, c.quoted)
                } else {
                    format!("{} runs here already: {}\n", c.at, c.quoted)
                });
            }
            Rendered::new(&json!({"at": c.at, "argv": c.argv, "quoted": c.quoted, "changed": changed}), text)
        }
    }
}

/// What `--todo-id`, `--gate-id` or `--notify` names, as [`GoalCommand::at`] says it.
fn target(a: &ApproveArgs) -> Result<String> {
    Ok(match (&a.todo_id, &a.gate_id) {
        (Some(t), _) => format!("todo {}", t.parse::<loopx_core::TodoId>()?),
        (_, Some(g)) => format!("gate {}", g.parse::<loopx_core::GateId>()?),
        _ => "notify".to_owned(),
    })
}

/// One command: where, who wrote it, whether it runs here, and its argv quoted exactly.
fn line(c: &GoalCommand) -> String {
    let here = match &c.here {
        Some(r) if r.approved_at.is_some() => "runs here".to_owned(),
        Some(r) => format!("runs only for agent {} until approved", r.by),
        None => "runs for nobody until approved (it came with the project)".to_owned(),
    };
    let who = if c.author == "user" { "a person".to_owned() } else { format!("agent {}", c.author) };
    format!("{}: by {who}, {here}\n  {}", c.at, loopx_core::untrusted::printable(&c.quoted))
}
