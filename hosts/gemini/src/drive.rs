//! Gemini CLI as `loopx drive` runs it (checked against 0.61.0): without `-p` and with its
//! standard input not a terminal, `gemini` runs one headless turn on the prompt read from
//! standard input; `-p` takes the prompt as its value (a bare `-p` is an error);
//! `-o stream-json` prints one event a line, among them `init {session_id}` first and
//! `result {status, stats: {total_tokens, input_tokens, output_tokens, …}}` last (`-o json`
//! prints one indented object at the end, which loopx does not read line by line);
//! `--resume <id>` continues a session.

use serde_json::Value;

use loopx_core::drive::{HostLimit, TurnUsage};
use loopx_core::host::HostDriver;
use loopx_core::{AgentType, Error, Result};

/// `loopx drive --host gemini`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeminiDriver;

fn is_flag(a: &str, names: &[&str]) -> bool {
    names.iter().any(|n| a == *n || a.starts_with(&format!("{n}=")))
}

impl HostDriver for GeminiDriver {
    fn agent_type(&self) -> AgentType {
        crate::AGENT_TYPE
    }

    fn turn_argv(&self, argv: &[String], resume: Option<&str>, prompt_on_stdin: bool) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::with_capacity(argv.len() + 4);
        let mut words = argv.iter();
        for a in words.by_ref() {
            if a == "-p" || a == "--prompt" {
                // The prompt is loopx's: a `-p` with no text of its own goes, another is refused.
                continue;
            }
            if is_flag(a, &["-p", "--prompt"]) || a.starts_with("-p") && a.len() > 2 && !a.starts_with("--") {
                return Err(Error::usage("the command gives Gemini CLI a prompt; loopx gives each turn's")
                    .with_hint(
                        "leave the prompt out: loopx drive --host gemini -- gemini -p --approval-mode yolo",
                    ));
            }
            if is_flag(a, &["--resume", "-r"]) && resume.is_some() {
                return Err(Error::usage("the command already resumes a session; --resume-session picks it")
                    .with_hint("leave --resume out of the command"));
            }
            out.push(a.clone());
        }
        let format = argv.iter().position(|a| is_flag(a, &["-o", "--output-format"]));
        match format.map(|i| {
            argv[i].split_once('=').map_or_else(|| argv.get(i + 1).map(String::as_str), |(_, v)| Some(v))
        }) {
            None => out.extend(["-o".to_owned(), "stream-json".to_owned()]),
            Some(Some("stream-json")) => {}
            Some(other) => {
                return Err(Error::usage(format!(
                    "loopx reads Gemini CLI's stream-json output, not {}",
                    other.unwrap_or("nothing")
                ))
                .with_hint("leave -o out of the command (loopx adds -o stream-json)"));
            }
        }
        if let Some(id) = resume {
            out.extend(["--resume".to_owned(), id.to_owned()]);
        }
        if !prompt_on_stdin {
            // The driver puts the prompt last: the value of `-p`.
            out.push("-p".to_owned());
        }
        Ok(out)
    }

    fn read_line(&self, line: &str, usage: &mut TurnUsage) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        match v.get("type").and_then(Value::as_str) {
            Some("init") => {
                if let Some(id) = v.get("session_id").and_then(Value::as_str) {
                    usage.session = Some(id.to_owned());
                }
            }
            Some("result") => {
                if let Some(n) = v.pointer("/stats/total_tokens").and_then(Value::as_u64) {
                    usage.add_tokens(n);
                }
                if v.get("status").and_then(Value::as_str) == Some("error")
                    && let Some(message) = v.pointer("/error/message").and_then(Value::as_str)
                {
                    usage.limit = limit_of(message);
                }
            }
            _ => {}
        }
    }
}

/// The quota or rate limit an error result's message names, if it names one. Gemini CLI
/// (0.61) ends at once on a daily quota (no reset given) and on a suggested delay over five
/// minutes (`Suggested retry after 400s.`, or the API's own `Please retry in 400s.`); it
/// sleeps out a shorter one itself, and then ends with the same words. Every 429 it gives up
/// on says `Please wait and try again later` (with an API key) or `Possible quota
/// limitations` (signed in).
fn limit_of(message: &str) -> Option<HostLimit> {
    let after = |marker: &str| -> Option<u64> {
        let rest = &message[message.find(marker)? + marker.len()..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let secs: f64 = digits.parse().ok()?;
        let unit = &rest[digits.len()..];
        let secs = if unit.starts_with("ms") { secs / 1000.0 } else { secs };
        (secs.is_finite() && secs >= 0.0).then(|| secs.ceil() as u64)
    };
    let mut limit = if message.contains("exhausted your daily quota") {
        HostLimit::new("daily_quota", Some(message))
    } else if let Some(secs) = after("Suggested retry after ").or_else(|| after("Please retry in ")) {
        let mut l = HostLimit::new("rate_limit", Some(message));
        l.retry_after_secs = Some(secs);
        l
    } else if message.contains("Please wait and try again later")
        || message.contains("Possible quota limitations")
    {
        HostLimit::new("quota", Some(message))
    } else {
        return None;
    };
    limit.message = limit.message.map(|m| m.trim_start_matches("[API Error: ").to_owned());
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
    fn a_turn_reads_its_prompt_from_stdin_and_streams_json() {
        let d = GeminiDriver;
        assert_eq!(
            d.turn_argv(&argv("gemini -p --approval-mode yolo"), None, true).unwrap(),
            argv("gemini --approval-mode yolo -o stream-json")
        );
        assert_eq!(
            d.turn_argv(&argv("gemini --approval-mode yolo -o stream-json"), Some("s-1"), false).unwrap(),
            argv("gemini --approval-mode yolo -o stream-json --resume s-1 -p")
        );
        for bad in ["gemini -o json", "gemini --prompt=hi", "gemini -phi", "gemini --output-format=text"] {
            assert!(d.turn_argv(&argv(bad), None, true).is_err(), "{bad}");
        }
        assert!(d.turn_argv(&argv("gemini --resume latest"), Some("s-1"), true).is_err());
    }

    #[test]
    fn the_stream_gives_session_and_tokens() {
        let mut u = TurnUsage::default();
        let d = GeminiDriver;
        d.read_line(
            r#"{"type":"init","timestamp":"t","session_id":"s-1","model":"gemini-2.5-flash"}"#,
            &mut u,
        );
        d.read_line("not json", &mut u);
        d.read_line(r#"{"type":"message","role":"assistant","content":"ok"}"#, &mut u);
        d.read_line(
            r#"{"type":"result","status":"success","stats":{"total_tokens":30,"input_tokens":20,"output_tokens":10}}"#,
            &mut u,
        );
        assert_eq!(
            u,
            TurnUsage { session: Some("s-1".to_owned()), tokens: Some(30), usd: None, limit: None }
        );
    }

    #[test]
    fn a_quota_error_is_read_as_the_hosts_limit() {
        let d = GeminiDriver;
        let read = |line: &str| {
            let mut u = TurnUsage::default();
            d.read_line(line, &mut u);
            u.limit
        };
        let daily = read(r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: You have exhausted your daily quota on this model.]\nPlease wait and try again later."},"stats":{"total_tokens":0}}"#).unwrap();
        assert_eq!(
            (daily.kind.as_str(), daily.retry_after_secs, daily.resets_at),
            ("daily_quota", None, None)
        );
        assert_eq!(
            daily.message.as_deref(),
            Some("You have exhausted your daily quota on this model.] Please wait and try again later.")
        );
        let later = read(r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: Resource has been exhausted (e.g. check quota).\nSuggested retry after 400s.]\nPlease wait and try again later."}}"#).unwrap();
        assert_eq!((later.kind.as_str(), later.retry_after_secs), ("rate_limit", Some(400)));
        let api = read(r#"{"type":"result","status":"error","error":{"message":"[API Error: You exceeded your current quota. Please retry in 41.2s.]"}}"#).unwrap();
        assert_eq!(api.retry_after_secs, Some(42));
        assert_eq!(
            read(r#"{"type":"result","status":"error","error":{"message":"[API Error: Internal error]"}}"#),
            None
        );
        assert_eq!(read(r#"{"type":"result","status":"success","stats":{"total_tokens":5}}"#), None);
    }
}
