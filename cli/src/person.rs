//! Strict mode on the command line: `loopx person init`, and the person's key unsealed for a
//! person's decision on a goal that takes only signed ones. The passphrase is read from the
//! terminal (`/dev/tty`), never from stdin, an argument or the environment: an agent's pipe
//! cannot supply it.

use std::sync::Arc;

use serde_json::json;

use loopx_core::kernel::{CommandContext, Kernel, SignerRef};
use loopx_core::{Error, Result};
use loopx_kernel::DynKernel;
use loopx_kernel::person::PersonKey;
use loopx_machine::person::{self, KeyFile};

use crate::args::{Cli, PersonCommand};
use crate::output::Rendered;

/// Where this machine's person keeps their key.
fn key_path() -> Result<std::path::PathBuf> {
    crate::projects::config_file("person.json")
}

fn short(key: &str) -> &str {
    loopx_core::event::key_short(key)
}

/// Asks on the terminal, without echo.
fn ask(prompt: &str) -> Result<String> {
    rpassword::prompt_password(prompt).map_err(|e| {
        Error::refused(format!(
            "the person key's passphrase is asked on a terminal, and there is none here ({e})"
        ))
        .with_hint(
            "run it in your own terminal (strict mode takes no passphrase from a pipe); nothing was changed",
        )
    })
}

fn unlock(file: &KeyFile) -> Result<PersonKey> {
    person::unlock(file, &ask(&format!("passphrase for person key {}: ", short(&file.public_key)))?)
}

/// `ctx` with the person's key to sign with, when the goal is in strict mode and a person acts
/// from their own terminal; otherwise `ctx` as it is (the kernel refuses what needs a key).
pub async fn signed(cli: &Cli, k: &DynKernel, ctx: CommandContext) -> Result<CommandContext> {
    if cli.session.is_some() || ctx.agent.as_ref().is_some_and(|a| a.as_str() != "user") {
        return Ok(ctx);
    }
    let Some(key) = k.person_key(ctx.goal.as_ref())? else { return Ok(ctx) };
    let file = person::for_goal(&key_path()?, &key)?;
    let signer = SignerRef(Arc::new(unlock(&file)?));
    Ok(CommandContext { signer: Some(signer), ..ctx })
}

pub async fn run(cli: &Cli, k: &DynKernel, cmd: &PersonCommand) -> Result<Rendered> {
    let path = key_path()?;
    match cmd {
        PersonCommand::Show => {
            let file = person::read(&path)?;
            let goal = k.show_goal(crate::commands::goal_arg(cli)?.as_ref()).await?.goal;
            let mine = file.as_ref().map(|f| f.public_key.clone());
            let text = format!(
                "person key here: {}\ngoal {}: {}\n",
                mine.as_deref().map_or_else(|| format!("none ({})", path.display()), |k| short(k).to_owned()),
                goal.id,
                goal.person_key.as_deref().map_or_else(
                    || "takes a person's decisions unsigned".to_owned(),
                    |k| format!("strict mode, key {}", short(k))
                )
            );
            Rendered::new(
                &json!({"key_file": path, "public_key": mine, "goal_id": goal.id, "goal_person_key": goal.person_key}),
                text,
            )
        }
        PersonCommand::Init => {
            let (key, made) = match person::read(&path)? {
                Some(file) => (unlock(&file)?, false),
                None => {
                    let pass = ask("a passphrase for your new person key: ")?;
                    if ask("the same passphrase again: ")? != pass {
                        return Err(Error::usage("the two passphrases differ; nothing was made")
                            .with_hint("run loopx person init again"));
                    }
                    let (file, key) = person::create(&pass)?;
                    person::write(&path, &file)?;
                    (key, true)
                }
            };
            let public = loopx_core::kernel::Signer::public_key(&key);
            let ctx = CommandContext {
                goal: crate::commands::goal_arg(cli)?,
                signer: Some(SignerRef(Arc::new(key))),
                ..CommandContext::default()
            };
            let r = k.set_person_key(&ctx, public.clone()).await?;
            let mut text = String::new();
            if made {
                text.push_str(&format!(
                    "made person key {} in {} (its secret sealed with your passphrase; keep a backup)\n",
                    short(&public),
                    path.display()
                ));
            }
            text.push_str(&if r.changed {
                format!(
                    "goal {} is in strict mode: it takes a person's decision only signed by key {}\n",
                    r.goal_id,
                    short(&public)
                )
            } else {
                format!("goal {} is in strict mode under key {} already\n", r.goal_id, short(&public))
            });
            Rendered::new(&json!({"key_file": path, "public_key": public, "made": made, "receipt": r}), text)
        }
    }
}
