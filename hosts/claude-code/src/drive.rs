//! Claude Code as `loopx drive` runs it (checked against 2.1.197): `claude -p` reads its
//! prompt from standard input when none is on its command line; `--output-format json` prints
//! one result object at the end, `stream-json` a line per message ending with the same object;
//! the result carries `session_id`, `usage` (summed over the API calls of that process; a
//! resumed run keeps the session id and counts only its own calls) and `total_cost_usd`;
//! `--resume <id>` continues a session.

use serde_json::Value;

use loopx_core::drive::TurnUsage;
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result};

/// `loopx drive --host claude-code`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaudeDriver;

fn has_flag(argv: &[String], names: &[&str]) -> bool {
    argv.iter().skip(1).any(|a| names.iter().any(|n| a == n || a.starts_with(&format!("{n}="))))
}

impl HostDriver for ClaudeDriver {
    fn agent_type(&self) -> AgentType {
        crate::AGENT_TYPE
    }

    fn turn_argv(
        &self,
        argv: &[String],
        resume: Option<&str>,
        _prompt_on_stdin: bool,
    ) -> Result<Vec<String>> {
        if !has_flag(argv, &["-p", "--print"]) {
            return Err(Error::usage("Claude Code runs a turn unattended only in print mode (-p)")
                .with_hint(
                    "e.g. loopx drive --host claude-code -- claude -p --permission-mode acceptEdits",
                ));
        }
        let mut out = argv.to_vec();
        if !has_flag(argv, &["--output-format"]) {
            out.extend(["--output-format".to_owned(), "json".to_owned()]);
        }
        if let Some(id) = resume {
            if has_flag(argv, &["--resume", "-r", "--continue", "-c", "--session-id"]) {
                return Err(Error::usage("the command already names a session; --resume-session picks it")
                    .with_hint("leave --resume, --continue and --session-id out of the command"));
            }
            out.extend(["--resume".to_owned(), id.to_owned()]);
        }
        Ok(out)
    }

    fn read_line(&self, line: &str, usage: &mut TurnUsage) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        if let Some(id) = v.get("session_id").and_then(Value::as_str) {
            usage.session = Some(id.to_owned());
        }
        if v.get("type").and_then(Value::as_str) != Some("result") {
            return;
        }
        if let Some(u) = v.get("usage") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            usage.add_tokens(
                n("input_tokens")
                    + n("output_tokens")
                    + n("cache_creation_input_tokens")
                    + n("cache_read_input_tokens"),
            );
        }
        if let Some(c) =
            v.get("total_cost_usd").and_then(Value::as_f64).filter(|c| c.is_finite() && *c >= 0.0)
        {
            usage.usd = Some(usage.usd.unwrap_or(0.0) + c);
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
    fn a_turn_asks_for_json_and_resumes_by_id() {
        let d = ClaudeDriver;
        assert_eq!(
            d.turn_argv(&argv("claude -p --permission-mode acceptEdits"), None, true).unwrap(),
            argv("claude -p --permission-mode acceptEdits --output-format json")
        );
        assert_eq!(
            d.turn_argv(&argv("claude -p --output-format stream-json --verbose"), Some("abc"), true).unwrap(),
            argv("claude -p --output-format stream-json --verbose --resume abc")
        );
        assert!(d.turn_argv(&argv("claude --permission-mode acceptEdits"), None, true).is_err());
        assert!(d.turn_argv(&argv("claude -p --continue"), Some("abc"), true).is_err());
    }

    #[test]
    fn the_result_gives_session_tokens_and_cost() {
        let mut u = TurnUsage::default();
        let d = ClaudeDriver;
        d.read_line(r#"{"type":"system","subtype":"init","session_id":"s-1"}"#, &mut u);
        d.read_line("not json", &mut u);
        d.read_line(
            r#"{"type":"result","subtype":"success","session_id":"s-1","total_cost_usd":0.25,"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":7}}"#,
            &mut u,
        );
        assert_eq!(u, TurnUsage { session: Some("s-1".to_owned()), tokens: Some(122), usd: Some(0.25) });
    }
}
