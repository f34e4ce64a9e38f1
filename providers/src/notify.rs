//! Telling a person that a gate needs them, or that a goal's work is finished: a POST to a
//! webhook (loopx's JSON, Slack's `text`, or Feishu/Lark's `msg_type: text`), and/or a local
//! command given the message as its last argument, the notice as JSON on stdin and
//! `LOOPX_GOAL_ID`, `LOOPX_GATE_ID` (for a gate) and `LOOPX_PROJECT` in its environment, so a
//! script can act on it. A webhook's address is a secret (Slack's and Feishu's carry their
//! token in the path): it is kept in an environment variable (`env:NAME`) or in the person's own
//! configuration (`config:NAME`), read only here, when a notice is sent, and never written
//! anywhere; no error names it.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;

use loopx_core::model::{NotifyFormat, NotifyPolicy};
use loopx_core::traits::{Notification, Notifier};
use loopx_core::{Error, Result};

/// How a notifier reads an environment variable (the CLI passes `std::env::var`).
pub type Env = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Sends notices by the goal's policy.
pub struct Notify {
    /// Made on first use, like the GitHub provider's.
    client: std::sync::OnceLock<reqwest::Client>,
    env: Env,
    /// How a webhook named in the person's configuration is read (none: not at all).
    config: Option<Env>,
    deadline: Duration,
}

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notify").field("deadline", &self.deadline).finish()
    }
}

impl Notify {
    pub fn new(env: Env, deadline: Duration) -> Result<Self> {
        Ok(Self { client: std::sync::OnceLock::new(), env, config: None, deadline })
    }

    /// Reads `config:NAME` webhooks with `config` (the CLI reads the person's configuration).
    pub fn with_config(mut self, config: Env) -> Self {
        self.config = Some(config);
        self
    }

    fn client(&self) -> Result<&reqwest::Client> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let c = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::internal(format!("cannot start an HTTP client: {e}")))?;
        Ok(self.client.get_or_init(|| c))
    }

    fn url(&self, webhook: &str) -> Result<String> {
        if let Some(name) = webhook.strip_prefix("config:") {
            return self.config.as_ref().and_then(|c| c(name)).filter(|v| !v.trim().is_empty()).ok_or_else(
                || {
                    Error::usage(format!("the webhook {name} is not in this machine's loopx configuration"))
                        .with_hint(format!(
                            "loopx goal set --notify-webhook <the URL> here keeps it as {name}"
                        ))
                },
            );
        }
        match webhook.strip_prefix("env:") {
            Some(name) => (self.env)(name).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                Error::usage(format!("the webhook's variable {name} is not set"))
                    .with_hint(format!("export {name}=<the webhook URL> where the agents run"))
            }),
            None => Ok(webhook.to_owned()),
        }
    }

    async fn post(&self, webhook: &str, format: NotifyFormat, n: &Notification, text: &str) -> Result<()> {
        let url = self.url(webhook)?;
        let body = match format {
            NotifyFormat::Generic => generic(n, text),
            NotifyFormat::Slack => json!({"text": text}),
            NotifyFormat::Feishu => json!({"msg_type": "text", "content": {"text": text}}),
        };
        let resp =
            self.client()?.post(&url).json(&body).timeout(self.deadline).send().await.map_err(|e| {
                let why = if e.is_timeout() { "no answer in time" } else { "it could not be reached" };
                Error::busy(format!("the webhook was not told: {why}"))
            })?;
        if !resp.status().is_success() {
            return Err(Error::busy(format!("the webhook answered {}", resp.status().as_u16())));
        }
        Ok(())
    }

    fn run(&self, argv: &[String], n: &Notification, text: &str) -> Result<()> {
        let (program, args) =
            argv.split_first().ok_or_else(|| Error::usage("the notify command is empty"))?;
        let mut command = std::process::Command::new(program);
        command.args(args).arg(text).env("LOOPX_GOAL_ID", n.goal.as_str()).env("LOOPX_PROJECT", &n.project);
        match n.gate {
            Some(g) => command.env("LOOPX_GATE_ID", g.to_string()),
            // Not the person's environment's: this notice is about no gate.
            None => command.env_remove("LOOPX_GATE_ID"),
        };
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| Error::busy(format!("the notify command `{program}` did not start: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its stdin closes the pipe; that is its business.
            let _ = std::io::Write::write_all(&mut stdin, gate_json(n, text).as_bytes());
        }
        let until = Instant::now() + self.deadline;
        loop {
            match child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => {
                    return Err(Error::busy(format!("the notify command `{program}` failed ({s})")));
                }
                Ok(None) if Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::busy(format!(
                        "the notify command `{program}` did not finish in time"
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Error::busy(format!("the notify command `{program}`: {e}"))),
            }
        }
    }
}

/// loopx's own JSON for a notice: a generic webhook's body. `kind` is `gate` (a gate asks,
/// `gate` names it) or `finished` (the goal's work is finished and waits to be confirmed).
fn generic(n: &Notification, text: &str) -> serde_json::Value {
    json!({
        "source": "loopx", "kind": if n.gate.is_some() { "gate" } else { "finished" },
        "goal": n.goal, "gate": n.gate, "question": n.question,
        "answer_with": n.answer_with, "reminder": n.reminder, "text": text,
    })
}

/// What a notify command reads on stdin: the generic body, and the project.
fn gate_json(n: &Notification, text: &str) -> String {
    let mut v = generic(n, text);
    v["project"] = json!(n.project.display().to_string());
    format!("{v}\n")
}

/// The message: the question, and the command that answers it.
pub fn message(n: &Notification) -> String {
    let what = if n.reminder { "still needs you" } else { "needs you" };
    match n.gate {
        Some(g) => {
            format!("loopx: goal {} {what}. {g} asks: {}\nAnswer with: {}", n.goal, n.question, n.answer_with)
        }
        None => format!(
            "loopx: goal {}'s work is finished. {}\nConfirm with: {}",
            n.goal, n.question, n.answer_with
        ),
    }
}

#[async_trait]
impl Notifier for Notify {
    async fn notify(&self, policy: &NotifyPolicy, n: &Notification) -> Result<String> {
        let text = message(n);
        let mut used = Vec::new();
        let mut failed = Vec::new();
        if let Some(w) = &policy.webhook {
            match self.post(w, policy.format, n, &text).await {
                Ok(()) => used.push("webhook"),
                Err(e) => failed.push(e.message),
            }
        }
        if let Some(c) = &policy.command {
            match self.run(c, n, &text) {
                Ok(()) => used.push("command"),
                Err(e) => failed.push(e.message),
            }
        }
        if failed.is_empty() { Ok(used.join(",")) } else { Err(Error::busy(failed.join("; "))) }
    }
}
