//! A host's own quota or rate limit, with the real hosts: each pinned host driven by `loopx
//! drive` against its scripted model on 127.0.0.1, which answers the first turn with that
//! host's limit response (Claude Code: a subscription's five-hour limit with its reset; Codex:
//! `usage_limit_reached` with `x-codex-primary-reset-at`; Gemini CLI: a daily quota; OpenCode:
//! 429s with `retry-after`), then normally. The turn is recorded as limited with the host's
//! kind and reset, not spent and not failed; the driver sleeps (next to no CPU) until the
//! reset, which the test clock moves past, and the goal finishes.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use loopx_core::Timestamp;

use crate::drive::{Driving, cpu_ticks, goal, log, of, spends};
use crate::drive::{completed_by, finished, kinds, test_clock};
use crate::fake_model::epoch_now;
use crate::real_drive::{
    claude_api, claude_drive, codex_api, codex_command, codex_drive, codex_env, gemini_api, gemini_drive,
    opencode_api, opencode_drive,
};

/// Drives `c` (a drive of a goal whose one todo is `[last]`) through one limited turn and one
/// that finishes the goal; checks the limited turn (its `kind`, and its reset when `resets` is
/// the epoch second the host was told); returns the drive's events.
fn limited_then_finished(
    s: &loopx_tests::Sandbox,
    mut c: Command,
    kind: &str,
    resets: Option<u64>,
) -> Vec<Value> {
    let (clock, clock_env) = test_clock(s);
    c.env("LOOPX_TEST_CLOCK_FILE", clock_env);
    let d = Driving::spawn(c);
    let (_, limited) =
        d.wait_for("the host's limit", Duration::from_secs(180), |e| e["event"] == "host_limited");
    assert_eq!(limited["limit"]["kind"], kind, "{limited}");
    if let Some(epoch) = resets {
        let at = Timestamp::from_unix_millis(i64::try_from(epoch).unwrap() * 1000);
        assert_eq!(limited["limit"]["resets_at"], at.to_string(), "the host's own reset: {limited}");
    }
    let (_, sleep) = d.wait_for("the sleep", Duration::from_secs(60), |e| e["event"] == "sleeping");
    assert!(sleep["reason"].as_str().unwrap().contains("out of quota"), "{sleep}");
    let before = cpu_ticks(d.pid());
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(2) {
        std::thread::park_timeout(Duration::from_secs(2) - quiet.elapsed());
    }
    let used = cpu_ticks(d.pid()) - before;
    assert!(used <= 2, "the waiting driver used {used} ticks of CPU in 2 s");
    // The reset passes: the test clock moves past the driver's wake.
    let until = Timestamp::parse_rfc3339(limited["until"].as_str().unwrap()).unwrap();
    let now = i64::try_from(epoch_now()).unwrap() * 1000;
    std::fs::write(&clock, (until.unix_millis() - now + 2_000).max(0).to_string()).unwrap();
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(finished(&ev), (2, 1, 0));
    let ended = of(&ev, "turn_ended");
    let first = &ended[0]["end"];
    assert!(first["run"].is_null() && first["spent_by"].is_null(), "{first}");
    assert_eq!(first["limit"]["kind"], kind, "{first}");
    assert!(ended[1]["end"]["spent_by"].is_string(), "{ev:#?}");
    assert_eq!(spends(&log(s)).len(), 1, "one spend: the turn that wrote back");
    ev
}

#[test]
fn real_claude_code_at_its_usage_limit_waits_for_the_reset() {
    let s = goal(&["ship it [last]"]);
    crate::real_claude::trust_workspace(&s);
    let api = claude_api();
    let reset = epoch_now() + 30;
    api.refusals.push(
        1,
        "429 Too Many Requests",
        &[
            ("anthropic-ratelimit-unified-status", "rejected".to_owned()),
            ("anthropic-ratelimit-unified-reset", reset.to_string()),
            ("anthropic-ratelimit-unified-representative-claim", "five_hour".to_owned()),
        ],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}"#,
    );
    // A subscription's limit is read only when signed in with one (a token, not an API key).
    let mut c = claude_drive(&s, &api, &[]);
    c.env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-not-a-token");
    let ev = limited_then_finished(&s, c, "five_hour", Some(reset));
    let message = of(&ev, "turn_ended")[0]["end"]["limit"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("session limit"), "{message}");
    assert_eq!(api.refusals.left(), 0);
}

#[test]
fn real_codex_at_its_usage_limit_waits_for_the_reset_its_session_log_gives() {
    let s = goal(&["ship it [last]"]);
    let api = codex_api();
    let reset = epoch_now() + 30;
    let body = json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "plan_type": "plus", "resets_at": reset}});
    api.refusals.push(
        1,
        "429 Too Many Requests",
        &[
            ("x-codex-primary-used-percent", "100".to_owned()),
            ("x-codex-primary-window-minutes", "300".to_owned()),
            ("x-codex-primary-reset-at", reset.to_string()),
        ],
        &body.to_string(),
    );
    let ev = limited_then_finished(&s, codex_drive(&s, &api, &[]), "usage_limit_exceeded", Some(reset));
    let message = of(&ev, "turn_ended")[0]["end"]["limit"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("hit your usage limit"), "{message}");
}

#[test]
fn real_gemini_at_its_daily_quota_backs_off_and_asks_again() {
    let s = goal(&["ship it [last]"]);
    let api = gemini_api();
    let body = json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "250"}]}]}});
    api.refusals.push(1, "429 Too Many Requests", &[], &body.to_string());
    let ev = limited_then_finished(&s, gemini_drive(&s, &api, &[]), "daily_quota", None);
    // No reset given: a back-off of a minute from the limited turn's end.
    let limited = of(&ev, "host_limited")[0];
    assert!(limited["limit"]["resets_at"].is_null(), "{limited}");
    let end =
        Timestamp::parse_rfc3339(of(&ev, "turn_ended")[0]["end"]["ended_at"].as_str().unwrap()).unwrap();
    let until = Timestamp::parse_rfc3339(limited["until"].as_str().unwrap()).unwrap();
    assert_eq!(until.unix_millis() - end.unix_millis(), 60_000, "{limited}");
}

#[test]
fn real_opencode_after_its_retries_waits_for_the_providers_retry_after() {
    let s = goal(&["ship it [last]"]);
    let api = opencode_api();
    let body = json!({"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}});
    // OpenCode tries five times more by itself before it gives up.
    api.refusals.push(6, "429 Too Many Requests", &[("retry-after", "1".to_owned())], &body.to_string());
    let ev = limited_then_finished(&s, opencode_drive(&s, &api, &[]), "rate_limit_exceeded", None);
    let limited = of(&ev, "host_limited")[0];
    let end =
        Timestamp::parse_rfc3339(of(&ev, "turn_ended")[0]["end"]["ended_at"].as_str().unwrap()).unwrap();
    let resets = Timestamp::parse_rfc3339(limited["limit"]["resets_at"].as_str().unwrap()).unwrap();
    let ahead = resets.unix_millis() - end.unix_millis();
    assert!((0..=2_000).contains(&ahead), "the provider's retry-after, a second on: {ahead} ms");
    assert_eq!(api.refusals.left(), 0);
}

#[test]
fn real_claude_code_limited_hands_the_work_to_codex_and_takes_it_back_after_its_reset() {
    let s = goal(&["write a.txt", "ship it [last]"]);
    crate::real_claude::trust_workspace(&s);
    let (claude, codex) = (claude_api(), codex_api());
    let reset = epoch_now() + 30;
    claude.refusals.push(
        1,
        "429 Too Many Requests",
        &[
            ("anthropic-ratelimit-unified-reset", reset.to_string()),
            ("anthropic-ratelimit-unified-representative-claim", "five_hour".to_owned()),
        ],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}"#,
    );
    let fallback = format!("codex={}", codex_command());
    let mut c = claude_drive(&s, &claude, &["--agent-id", "claude-1", "--fallback", &fallback]);
    c.env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-not-a-token").envs(codex_env(&s, &codex));
    let (clock, clock_env) = test_clock(&s);
    c.env("LOOPX_TEST_CLOCK_FILE", clock_env);
    let d = Driving::spawn(c);
    let (_, over) = d.wait_for("the failover", Duration::from_secs(180), |e| e["event"] == "failover");
    assert_eq!(
        (over["to_host"].as_str(), over["to_agent"].as_str()),
        (Some("codex"), Some("codex-1")),
        "{over}"
    );
    // Claude Code's reset passes while Codex works the handed todo.
    std::fs::write(&clock, "120000").unwrap();
    let (code, ev, stderr) = d.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(finished(&ev), (3, 2, 0));
    let log = log(&s);
    let by = completed_by(&log);
    assert_eq!(by, [("t1".into(), "codex-1".into()), ("t2".into(), "claude-1".into())], "{by:?}");
    assert_eq!(spends(&log).len(), 2, "one spend per written-back turn");
    // Codex saw the packet: the handoff's note reached its prompt through the todo it took.
    let note = kinds(&log, "handoff_offered")[0]["data"]["handoff"]["note"].as_str().unwrap().to_owned();
    assert!(note.contains("claude-code out of quota (five_hour)"), "{note}");
    assert!(codex.all().contains("This turn: t1"), "Codex worked t1");
    // History and the report show both hosts.
    let report = s.json(&["report"]);
    let hosts: Vec<&str> =
        report["agents"].as_array().unwrap().iter().map(|a| a["host"].as_str().unwrap()).collect();
    assert!(hosts.contains(&"claude-code") && hosts.contains(&"codex-cli"), "{hosts:?}");
    assert_eq!(report["turns"]["limited"], 1);
    assert_eq!(report["work"]["host_switches"], 1);
}
