//! Claude Code as `loopx drive` runs it (checked against 2.1.197): `claude -p` reads its
//! prompt from standard input when none is on its command line; `--output-format json` prints
//! one result object at the end, `stream-json` a line per message ending with the same object;
//! the result carries `session_id`, `usage` (summed over the API calls of that process; a
//! resumed run keeps the session id and counts only its own calls) and `total_cost_usd`;
//! `--resume <id>` continues a session.
//!
//! At a subscription's usage limit `claude -p` exits 1 at once: `stream-json --verbose` prints
//! a `rate_limit_event` whose `rate_limit_info` has `status: "rejected"`, the limit's kind
//! (`rateLimitType`: `five_hour`, `seven_day`, …) and its reset (`resetsAt`, Unix seconds);
//! the `result` then has `is_error: true` and `api_error_status: 429` (its `subtype` still
//! says `success`), and its text alone (`resets 5:35am (UTC)`, no date) is all `json` gives.
//! A plain 429 or a 529 is retried inside for about three minutes, then ends the same way
//! without the event. So a turn asks for `stream-json --verbose` unless the command chose.

use serde_json::Value;

use loopx_core::drive::{HostLimit, TurnUsage};
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result, Timestamp};

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
            out.extend(["--output-format".to_owned(), "stream-json".to_owned()]);
            if !has_flag(argv, &["--verbose"]) {
                out.push("--verbose".to_owned());
            }
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
        match v.get("type").and_then(Value::as_str) {
            Some("rate_limit_event") => return read_limit_event(&v, usage),
            Some("result") => {}
            _ => return,
        }
        if v.get("is_error").and_then(Value::as_bool) == Some(true) {
            let status = v.get("api_error_status").and_then(Value::as_u64);
            let text = v.get("result").and_then(Value::as_str);
            match (status, &mut usage.limit) {
                // The event named the limit; the result's words go with it.
                (_, Some(l)) if l.message.is_none() => l.message = HostLimit::new("", text).message,
                (_, Some(_)) => {}
                (Some(429), None) => usage.limit = Some(HostLimit::new(kind_of_text(text), text)),
                (Some(529), None) => usage.limit = Some(HostLimit::new("overloaded", text)),
                _ => {}
            }
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

/// A `rate_limit_event`: `rejected` with a kind is the subscription's limit, with its reset.
fn read_limit_event(v: &Value, usage: &mut TurnUsage) {
    let Some(info) = v.get("rate_limit_info") else { return };
    if info.get("status").and_then(Value::as_str) != Some("rejected") {
        return;
    }
    let Some(kind) = info.get("rateLimitType").and_then(Value::as_str).filter(|k| valid_kind(k)) else {
        return;
    };
    let mut limit = HostLimit::new(kind, None);
    limit.resets_at = info
        .get("resetsAt")
        .and_then(Value::as_i64)
        .filter(|s| *s > 0 && *s < 1 << 40)
        .map(|s| Timestamp::from_unix_millis(s * 1000));
    usage.limit = Some(limit);
}

/// A limit's kind as the host names it: a short word of lowercase letters, digits and `_`.
fn valid_kind(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= loopx_core::drive::MAX_LIMIT_KIND_LEN
        && k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The kind a 429's text names when no event did (`json` output): `You've hit your session
/// limit` is the five-hour window, `weekly limit` the seven-day one.
fn kind_of_text(text: Option<&str>) -> &'static str {
    match text {
        Some(t) if t.contains("session limit") => "five_hour",
        Some(t) if t.contains("weekly limit") => "seven_day",
        Some(t) if t.contains("usage limit") => "usage_limit",
        _ => "rate_limit",
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
            argv("claude -p --permission-mode acceptEdits --output-format stream-json --verbose")
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
        assert_eq!(
            u,
            TurnUsage { session: Some("s-1".to_owned()), tokens: Some(122), usd: Some(0.25), limit: None }
        );
    }

    #[test]
    fn a_usage_limit_is_read_with_its_kind_and_reset() {
        let d = ClaudeDriver;
        let mut u = TurnUsage::default();
        // Allowed: not a limit.
        d.read_line(r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1796621745,"rateLimitType":"five_hour"}}"#, &mut u);
        assert_eq!(u.limit, None);
        d.read_line(r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796621745,"rateLimitType":"five_hour","isUsingOverage":false},"session_id":"s-2"}"#, &mut u);
        d.read_line(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"You've hit your session limit · resets 5:35am (UTC)","session_id":"s-2","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#, &mut u);
        let l = u.limit.clone().unwrap();
        assert_eq!(l.kind, "five_hour");
        assert_eq!(l.resets_at, Some(Timestamp::from_unix_millis(1_796_621_745_000)));
        assert_eq!(l.message.as_deref(), Some("You've hit your session limit · resets 5:35am (UTC)"));
        assert_eq!(u.session.as_deref(), Some("s-2"));

        // `json` output: the text alone names it, with no reset.
        let mut u = TurnUsage::default();
        d.read_line(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"You've hit your weekly limit · resets Dec 9, 11:14am (UTC)"}"#, &mut u);
        let l = u.limit.unwrap();
        assert_eq!((l.kind.as_str(), l.resets_at), ("seven_day", None));
        // Overloaded after the host's own retries; a plain rejection without a kind; an error
        // that is no limit.
        let mut u = TurnUsage::default();
        d.read_line(r#"{"type":"result","is_error":true,"api_error_status":529,"result":"API Error: 529 Overloaded"}"#, &mut u);
        assert_eq!(u.limit.unwrap().kind, "overloaded");
        let mut u = TurnUsage::default();
        d.read_line(
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","isUsingOverage":false}}"#,
            &mut u,
        );
        d.read_line(
            r#"{"type":"result","is_error":true,"api_error_status":400,"result":"bad request"}"#,
            &mut u,
        );
        assert_eq!(u.limit, None);
        d.read_line(r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"Five Hours!","resetsAt":1}}"#, &mut u);
        assert_eq!(u.limit, None, "a kind that is not a host's word is not taken");
    }
}
