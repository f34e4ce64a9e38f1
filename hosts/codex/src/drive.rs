//! Codex as `loopx drive` runs it (checked against 0.169.0): `codex exec` runs one turn and
//! reads its prompt from standard input when none is on its command line (or it is `-`);
//! `--json` prints one event a line (given twice it is an error), among them
//! `thread.started {thread_id}` and `turn.completed {usage}` with `input_tokens` (of which
//! `cached_input_tokens`) and `output_tokens`; `codex exec [options] resume <id> -` continues
//! a thread. There is no `--full-auto`: `--sandbox workspace-write` lets the agent write.
//!
//! At a usage limit (or `insufficient_quota`) `codex exec` exits 1 at once after `error` and
//! `turn.failed` events whose message gives the reset as local time only ("You’ve hit your
//! usage limit. … try again at 2:09 AM."); the reset as a number is in the thread's session
//! log, `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<thread>.jsonl` (its date is local): the
//! last `token_count` event's `rate_limits.primary.resets_at` (Unix seconds), while
//! `task_complete`'s `error.codex_error_info` says `usage_limit_exceeded`. A 429 with
//! `retry-after` is slept out inside, up to five times, then fails as `exceeded retry limit`.

use serde_json::Value;

use std::path::{Path, PathBuf};

use loopx_core::drive::{HostLimit, TurnUsage};
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result, Timestamp};

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
            Some("turn.failed") => {
                let message = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
                let kind = if message.contains("hit your usage limit") {
                    "usage_limit_exceeded"
                } else if message.starts_with("Quota exceeded") {
                    "insufficient_quota"
                } else if message.contains("last status: 429") {
                    "rate_limit"
                } else {
                    return;
                };
                usage.limit = Some(HostLimit::new(kind, Some(message)));
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

    fn after_turn(&self, host_home: Option<&Path>, usage: &mut TurnUsage) {
        let (Some(home), Some(thread)) = (host_home, usage.session.as_deref()) else { return };
        let Some(limit) = usage.limit.as_mut().filter(|l| l.kind == "usage_limit_exceeded") else {
            return;
        };
        if let Some(at) = session_log(&home.join("sessions"), thread).and_then(|p| reset_in_log(&p)) {
            limit.resets_at = Some(at);
        }
    }
}

/// The session log of `thread`: `sessions/<year>/<month>/<day>/rollout-…-<thread>.jsonl`,
/// looked for in the latest days (its date is the host's local one, so it is not derived).
fn session_log(sessions: &Path, thread: &str) -> Option<PathBuf> {
    if thread.is_empty() || !thread.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return None;
    }
    let suffix = format!("-{thread}.jsonl");
    let newest_first = |dir: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        v.sort();
        v.reverse();
        v
    };
    for year in newest_first(sessions).iter().take(2) {
        for month in newest_first(year).iter().take(2) {
            for day in newest_first(month).iter().take(3) {
                let found = newest_first(day).into_iter().find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
                });
                if found.is_some() {
                    return found;
                }
            }
        }
    }
    None
}

/// The reset of the limit a session log records: its last `token_count` event's spent window
/// (the secondary when that one is spent, else the primary) and its `resets_at`. Reads the
/// log's last 256 KiB.
fn reset_in_log(path: &Path) -> Option<Timestamp> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 256 * 1024;
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    f.take(TAIL).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines().rev().find_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        if v.pointer("/payload/type").and_then(Value::as_str) != Some("token_count") {
            return None;
        }
        let limits = v.pointer("/payload/rate_limits")?;
        let window = |w: &str| {
            let w = limits.get(w)?;
            let spent = w.get("used_percent").and_then(Value::as_f64).is_some_and(|p| p >= 100.0);
            let at = w.get("resets_at").and_then(Value::as_i64).filter(|s| *s > 0 && *s < 1 << 40)?;
            Some((spent, Timestamp::from_unix_millis(at * 1000)))
        };
        match (window("primary"), window("secondary")) {
            (_, Some((true, at))) | (Some((_, at)), _) | (None, Some((_, at))) => Some(at),
            (None, None) => None,
        }
    })
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
        assert_eq!(
            u,
            TurnUsage { session: Some("th-9".to_owned()), tokens: Some(109), usd: None, limit: None }
        );
    }

    #[test]
    fn a_usage_limit_is_read_and_its_reset_found_in_the_session_log() {
        let d = CodexDriver;
        let mut u = TurnUsage::default();
        d.read_line(r#"{"type":"thread.started","thread_id":"01a24e9e-1e7c"}"#, &mut u);
        d.read_line(r#"{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}"#, &mut u);
        assert_eq!(u.limit, None, "a retry notice does not end the turn");
        d.read_line(r#"{"type":"turn.failed","error":{"message":"You’ve hit your usage limit. Try again at 5:35 AM."}}"#, &mut u);
        assert_eq!(u.limit.as_ref().unwrap().kind, "usage_limit_exceeded");

        let home = std::env::temp_dir().join(format!("loopx-codex-log-{}", std::process::id()));
        let day = home.join("sessions/2026/12/07");
        std::fs::create_dir_all(&day).unwrap();
        let log = [
            r#"{"timestamp":"2026-12-07T03:48:35Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":{"primary":{"used_percent":100.0,"window_minutes":300,"resets_at":1796621745},"secondary":{"used_percent":40.0,"window_minutes":10080,"resets_at":1796880945}}}}"#,
            r#"{"timestamp":"2026-12-07T03:48:35Z","type":"event_msg","payload":{"type":"task_complete","error":{"codex_error_info":"usage_limit_exceeded"}}}"#,
        ];
        std::fs::write(day.join("rollout-2026-12-07T03-48-35-01a24e9e-1e7c.jsonl"), log.join("\n")).unwrap();
        std::fs::write(day.join("rollout-2026-12-07T03-40-00-other.jsonl"), "{}").unwrap();
        d.after_turn(Some(&home), &mut u);
        assert_eq!(u.limit.as_ref().unwrap().resets_at, Some(Timestamp::from_unix_millis(1_796_621_745_000)));
        // No log for the thread, or no home: the reset stays unknown.
        let mut other = TurnUsage { session: Some("nope".to_owned()), ..u.clone() };
        other.limit.as_mut().unwrap().resets_at = None;
        d.after_turn(Some(&home), &mut other);
        d.after_turn(None, &mut other);
        assert_eq!(other.limit.unwrap().resets_at, None);
        std::fs::remove_dir_all(&home).unwrap();

        let mut q = TurnUsage::default();
        d.read_line(r#"{"type":"turn.failed","error":{"message":"Quota exceeded. Check your plan and billing details."}}"#, &mut q);
        assert_eq!(q.limit.unwrap().kind, "insufficient_quota");
        let mut f = TurnUsage::default();
        d.read_line(r#"{"type":"turn.failed","error":{"message":"the model refused"}}"#, &mut f);
        assert_eq!(f.limit, None);
    }
}
