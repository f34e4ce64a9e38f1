//! Codex as `loopx drive` runs it (checked against 0.169.0): `codex exec` runs one turn and
//! reads its prompt from standard input when none is on its command line (or it is `-`);
//! `--json` prints one event a line (given twice it is an error), among them
//! `thread.started {thread_id}` and `turn.completed {usage}` with `input_tokens` (of which
//! `cached_input_tokens`) and `output_tokens`; `codex exec [options] resume <id> -` continues
//! a thread. There is no `--full-auto`: `--sandbox workspace-write` lets the agent write.

use serde_json::Value;

use loopx_core::drive::TurnUsage;
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result};

/// `loopx drive --host codex`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CodexDriver;

impl HostDriver for CodexDriver {
    fn agent_type(&self) -> AgentType {
        crate::CLI
    }

    fn turn_argv(&self, argv: &[String], resume: Option<&str>, prompt_on_stdin: bool) -> Result<Vec<String>> {
        let Some(exec) = argv.iter().position(|a| a == "exec") else {
            return Err(Error::usage("Codex runs a turn unattended with `codex exec`")
                .with_hint("e.g. loopx drive --host codex -- codex exec --sandbox workspace-write -"));
        };
        let mut out = argv.to_vec();
        if !argv.iter().any(|a| a == "--json") {
            out.insert(exec + 1, "--json".to_owned());
        }
        if let Some(id) = resume {
            if argv.iter().any(|a| a == "resume" || a == "--last") {
                return Err(Error::usage("the command already resumes a session; --resume-session picks it")
                    .with_hint("leave `resume` out of the command"));
            }
            // `resume <id>` takes the place of the prompt: before a trailing `-`, or last.
            let at = if out.last().is_some_and(|a| a == "-") { out.len() - 1 } else { out.len() };
            out.splice(at..at, ["resume".to_owned(), id.to_owned()]);
            if prompt_on_stdin && out.last().is_none_or(|a| a != "-") {
                out.push("-".to_owned());
            }
        }
        Ok(out)
    }

    fn read_line(&self, line: &str, usage: &mut TurnUsage) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        match v.get("type").and_then(Value::as_str) {
            Some("thread.started") => {
                if let Some(id) = v.get("thread_id").and_then(Value::as_str) {
                    usage.session = Some(id.to_owned());
                }
            }
            Some("turn.completed") => {
                if let Some(u) = v.get("usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                    usage.add_tokens(n("input_tokens") + n("output_tokens"));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn a_turn_asks_for_events_once_and_resumes_by_id() {
        let d = CodexDriver;
        assert_eq!(
            d.turn_argv(&argv("codex exec --sandbox workspace-write -"), None, true).unwrap(),
            argv("codex exec --json --sandbox workspace-write -")
        );
        assert_eq!(
            d.turn_argv(&argv("codex exec --json -"), Some("th-1"), true).unwrap(),
            argv("codex exec --json resume th-1 -")
        );
        assert_eq!(
            d.turn_argv(&argv("codex exec --skip-git-repo-check"), Some("th-1"), true).unwrap(),
            argv("codex exec --json --skip-git-repo-check resume th-1 -")
        );
        assert_eq!(
            d.turn_argv(&argv("codex exec"), Some("th-1"), false).unwrap(),
            argv("codex exec --json resume th-1")
        );
        assert!(d.turn_argv(&argv("codex --sandbox workspace-write"), None, true).is_err());
    }

    #[test]
    fn events_give_the_thread_and_tokens() {
        let mut u = TurnUsage::default();
        let d = CodexDriver;
        d.read_line(r#"{"type":"thread.started","thread_id":"th-9"}"#, &mut u);
        d.read_line(r#"{"type":"item.completed","item":{}}"#, &mut u);
        d.read_line(r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":80,"output_tokens":9}}"#, &mut u);
        assert_eq!(u, TurnUsage { session: Some("th-9".to_owned()), tokens: Some(109), usd: None });
    }
}
