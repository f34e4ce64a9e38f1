//! OpenCode as `loopx drive` runs it (checked against 1.18.33): `opencode run` runs one turn on
//! the prompt it reads from standard input (words on its command line are taken apart, and one
//! starting with `--` as a flag of its own, so loopx always passes the prompt on stdin);
//! `--format json` prints one event a line, each with the session's `sessionID`, and
//! `step_finish` events carry the step's `part.tokens.total` and `part.cost`; `--session <id>`
//! continues a session.

use serde_json::Value;

use loopx_core::drive::{HostLimit, TurnUsage};
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result, Timestamp};

/// `loopx drive --host opencode`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenCodeDriver;

fn is_flag(a: &str, names: &[&str]) -> bool {
    names.iter().any(|n| a == *n || a.starts_with(&format!("{n}=")))
}

impl HostDriver for OpenCodeDriver {
    fn agent_type(&self) -> AgentType {
        crate::AGENT_TYPE
    }

    fn turn_argv(&self, argv: &[String], resume: Option<&str>, prompt_on_stdin: bool) -> Result<Vec<String>> {
        let Some(run) = argv.iter().position(|a| a == "run") else {
            return Err(Error::usage("OpenCode runs a turn unattended with `opencode run`")
                .with_hint("e.g. loopx drive --host opencode -- opencode run"));
        };
        if !prompt_on_stdin {
            return Err(Error::usage(
                "OpenCode takes a prompt on its command line apart: loopx gives it on stdin",
            )
            .with_hint("leave out --prompt-arg"));
        }
        let mut out = argv.to_vec();
        match argv.iter().position(|a| is_flag(a, &["--format"])) {
            None => {
                out.splice(run + 1..run + 1, ["--format".to_owned(), "json".to_owned()]);
            }
            Some(i) => {
                let value = argv[i].split_once('=').map(|(_, v)| v).or(argv.get(i + 1).map(String::as_str));
                if value != Some("json") {
                    return Err(Error::usage("loopx reads OpenCode's JSON events (--format json)")
                        .with_hint("leave --format out of the command (loopx adds --format json)"));
                }
            }
        }
        if let Some(id) = resume {
            if argv.iter().any(|a| is_flag(a, &["--session", "-s", "--continue", "-c", "--fork"])) {
                return Err(Error::usage("the command already names a session; --resume-session picks it")
                    .with_hint("leave --session, --continue and --fork out of the command"));
            }
            out.extend(["--session".to_owned(), id.to_owned()]);
        }
        Ok(out)
    }

    fn read_line(&self, line: &str, usage: &mut TurnUsage) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        if let Some(id) = v.get("sessionID").and_then(Value::as_str) {
            usage.session = Some(id.to_owned());
        }
        match v.get("type").and_then(Value::as_str) {
            Some("error") => return usage.limit = v.pointer("/error/data").and_then(limit_of),
            Some("step_finish") => {}
            _ => return,
        }
        if let Some(n) = v.pointer("/part/tokens/total").and_then(Value::as_u64) {
            usage.add_tokens(n);
        }
        if let Some(c) = v.pointer("/part/cost").and_then(Value::as_f64).filter(|c| c.is_finite() && *c > 0.0)
        {
            usage.usd = Some(usage.usd.unwrap_or(0.0) + c);
        }
    }
}

/// The provider's quota or rate limit an `error` event reports, if it is one. OpenCode (1.18)
/// retries a 429 or 529 five times by itself (2 to 32 s apart, or the `retry-after`),
/// silently, then prints one `error` event with the provider's status, headers and body and
/// exits 1. The reset is the provider's own: `retry-after-ms`, `retry-after` (seconds), or
/// an `anthropic-ratelimit-*-reset` time.
fn limit_of(data: &Value) -> Option<HostLimit> {
    let status = data.get("statusCode").and_then(Value::as_u64)?;
    if status != 429 && status != 529 {
        return None;
    }
    let body: Option<Value> =
        data.get("responseBody").and_then(Value::as_str).and_then(|b| serde_json::from_str(b).ok());
    let word = |k: &str| {
        body.as_ref().and_then(|b| b.pointer(&format!("/error/{k}"))).and_then(Value::as_str).filter(|w| {
            !w.is_empty() && w.len() <= 64 && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
    };
    let kind = word("code").or_else(|| word("type")).unwrap_or(if status == 529 {
        "overloaded"
    } else {
        "rate_limit"
    });
    let message = data.get("message").and_then(Value::as_str);
    let mut limit = HostLimit::new(kind, message);
    let headers = data.get("responseHeaders");
    let header = |k: &str| headers.and_then(|h| h.get(k)).and_then(Value::as_str).map(str::trim);
    if let Some(ms) =
        header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0)
    {
        limit.retry_after_secs = Some((ms / 1000.0).ceil() as u64);
    } else if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        limit.retry_after_secs = Some(secs);
    }
    if limit.retry_after_secs.is_none() {
        limit.resets_at = ["anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset"]
            .iter()
            .filter_map(|k| header(k).and_then(|v| Timestamp::parse_rfc3339(v).ok()))
            .max();
    }
    Some(limit)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn a_turn_reads_json_events_and_resumes_by_session() {
        let d = OpenCodeDriver;
        assert_eq!(
            d.turn_argv(&argv("opencode run"), None, true).unwrap(),
            argv("opencode run --format json")
        );
        assert_eq!(
            d.turn_argv(&argv("opencode run --format json -m fake/m"), Some("ses_1"), true).unwrap(),
            argv("opencode run --format json -m fake/m --session ses_1")
        );
        for bad in ["opencode", "opencode run --format default", "opencode run --format=text"] {
            assert!(d.turn_argv(&argv(bad), None, true).is_err(), "{bad}");
        }
        assert!(d.turn_argv(&argv("opencode run -c"), Some("ses_1"), true).is_err());
        assert!(d.turn_argv(&argv("opencode run"), None, false).is_err(), "the prompt goes on stdin");
    }

    #[test]
    fn events_give_session_tokens_and_cost() {
        let mut u = TurnUsage::default();
        let d = OpenCodeDriver;
        d.read_line(r#"{"type":"step_start","sessionID":"ses_1","part":{}}"#, &mut u);
        d.read_line("not json", &mut u);
        for _ in 0..2 {
            d.read_line(
                r#"{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop","tokens":{"total":156,"input":149,"output":7},"cost":0.25}}"#,
                &mut u,
            );
        }
        assert_eq!(
            u,
            TurnUsage { session: Some("ses_1".to_owned()), tokens: Some(312), usd: Some(0.5), limit: None }
        );
    }

    #[test]
    fn a_rate_limit_error_is_read_with_the_providers_reset() {
        let d = OpenCodeDriver;
        let read = |line: &str| {
            let mut u = TurnUsage::default();
            d.read_line(line, &mut u);
            u.limit
        };
        let l = read(r#"{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"Rate limit reached","statusCode":429,"isRetryable":true,"responseHeaders":{"retry-after":"30","x-ratelimit-reset-requests":"1s"},"responseBody":"{\"error\":{\"message\":\"slow down\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}"}}}"#).unwrap();
        assert_eq!(
            (l.kind.as_str(), l.retry_after_secs, l.message.as_deref()),
            ("rate_limit_exceeded", Some(30), Some("Rate limit reached"))
        );
        let ms = read(r#"{"type":"error","error":{"name":"APIError","data":{"statusCode":529,"responseHeaders":{"retry-after-ms":"1500"},"responseBody":"not json"}}}"#).unwrap();
        assert_eq!((ms.kind.as_str(), ms.retry_after_secs), ("overloaded", Some(2)));
        let anthropic = read(r#"{"type":"error","error":{"name":"APIError","data":{"statusCode":429,"responseHeaders":{"anthropic-ratelimit-requests-reset":"2026-12-07T14:05:00Z"},"responseBody":"{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}"}}}"#).unwrap();
        assert_eq!(anthropic.kind, "rate_limit_error");
        assert_eq!(anthropic.resets_at, Some(Timestamp::parse_rfc3339("2026-12-07T14:05:00Z").unwrap()));
        assert_eq!(read(r#"{"type":"error","error":{"name":"APIError","data":{"statusCode":500}}}"#), None);
        assert_eq!(
            read(r#"{"type":"error","error":{"name":"UnknownError","data":{"message":"boom"}}}"#),
            None
        );
    }
}
