//! The report for people: one screen of text (`loopx report`), or Markdown to paste into a
//! pull request or a post (`--markdown`).

use std::fmt::Write as _;

use crate::{AgentTurns, Report, TurnCounts, WaitStats};

/// Agent rows the text form shows; the rest are added up in one line, so the report fits a
/// screen however many agents worked.
pub const TEXT_AGENTS: usize = 6;

/// `1 answer`, `2 answers`.
fn n(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// `42s`, `17m`, `3h 05m`, `2d 04h`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {:02}h", s / 86_400, s / 3600 % 24),
    }
}

fn share(part: u64, whole: u64) -> String {
    format!("{}%", (part * 100 + whole / 2).checked_div(whole).unwrap_or(0))
}

fn minute(t: Option<loopx_core::Timestamp>) -> String {
    t.map_or_else(|| "—".to_owned(), |t| t.to_string()[..16].replace('T', " "))
}

fn tokens(n: Option<u64>) -> String {
    match n {
        None => "—".to_owned(),
        Some(n) if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        Some(n) if n >= 1_000 => format!("{:.1}k", n as f64 / 1e3),
        Some(n) => n.to_string(),
    }
}

fn usd(x: Option<f64>) -> String {
    match x {
        None => "—".to_owned(),
        Some(x) if x >= 1e7 => format!("${:.0}M", (x / 1e6).floor()),
        Some(x) if x >= 1e6 => format!("${:.1}M", x / 1e6),
        Some(x) if x >= 1e5 => format!("${:.0}k", (x / 1e3).floor()),
        Some(x) if x >= 1e4 => format!("${:.1}k", x / 1e3),
        Some(x) if x >= 100.0 => format!("${x:.0}"),
        Some(x) => format!("${x:.2}"),
    }
}

/// A count in a column five wide: `99999`, then `153k`, `1.2M` (up to a billion).
fn count(n: u64) -> String {
    match n {
        0..100_000 => n.to_string(),
        100_000..1_000_000 => format!("{}k", n / 1000),
        1_000_000..10_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{}M", n / 1_000_000),
    }
}

fn waits(w: &WaitStats) -> String {
    if w.asked == 0 {
        return "none".to_owned();
    }
    let longest = w.longest_gate.as_deref().map(|g| format!(" ({g})")).unwrap_or_default();
    format!(
        "{} asked, {} answered; median {}, longest {}{longest}",
        w.asked,
        w.answered,
        duration(w.median_ms),
        duration(w.longest_ms)
    )
}

/// The rows shown, the rest added up under `others`.
fn shown(agents: &[AgentTurns], limit: usize) -> (Vec<&AgentTurns>, Option<(usize, TurnCounts)>) {
    if agents.len() <= limit {
        return (agents.iter().collect(), None);
    }
    let mut rest = TurnCounts::default();
    for a in &agents[limit - 1..] {
        rest.add(&a.counts);
    }
    (agents[..limit - 1].iter().collect(), Some((agents.len() - limit + 1, rest)))
}

fn turn_row(out: &mut String, name: &str, host: &str, c: &TurnCounts) {
    let _ = writeln!(
        out,
        "        {name:<10.10} {host:<11.11} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6}",
        count(c.turns),
        count(c.spent),
        count(c.wrote_back),
        count(c.failed),
        count(c.interrupted),
        count(c.validation_failures),
        tokens(c.tokens),
        usd(c.usd)
    );
}

/// The text form: at most 24 lines of at most 80 columns.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let t = &r.time;
    let name = r.title.as_deref().unwrap_or(&r.objective);
    let _ = writeln!(out, "goal {} — {}", r.goal, clip(name, 72usize.saturating_sub(r.goal.len()).max(8)));
    let _ = writeln!(
        out,
        "{} → {} · {} elapsed · {} events",
        minute(r.from),
        minute(r.to),
        duration(t.elapsed_ms),
        r.events
    );
    let _ = writeln!(out);
    let part = |label: &str, ms: u64| format!("{label} {} ({})", duration(ms), share(ms, t.elapsed_ms));
    let _ = writeln!(
        out,
        "time    {} · {}",
        part("agents working", t.working_ms),
        part("waiting on a person", t.person_ms)
    );
    let _ = writeln!(out, "        {} · {}", part("on CI/timers", t.checks_ms), part("paused", t.paused_ms));
    let _ = writeln!(out, "        {} · {}", part("out of quota", t.quota_ms), part("idle", t.idle_ms));
    if t.host_quota_ms > 0 || r.turns.limited > 0 {
        let _ = writeln!(
            out,
            "        {} · {} its host's limit ended",
            part("waiting on a host's quota", t.host_quota_ms),
            n(r.turns.limited, "turn", "turns")
        );
    }
    let _ = writeln!(out, "        agent time {} over {} turns", duration(t.agent_ms), r.turns.turns);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "turns   {:<10} {:<11} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6}",
        "agent", "host", "turns", "spent", "wrote", "fail", "intr", "valid", "tokens", "cost"
    );
    let (rows, rest) = shown(&r.agents, TEXT_AGENTS);
    for a in rows {
        turn_row(&mut out, &a.agent, &a.host, &a.counts);
    }
    if let Some((n, rest)) = rest {
        turn_row(&mut out, &format!("{n} more"), "", &rest);
    }
    let _ = writeln!(out);
    let p = &r.people;
    let per_turns = p.per_100_turns.map(|x| format!(", {x} per 100 turns")).unwrap_or_default();
    let _ = writeln!(
        out,
        "people  {}: {}, {}, {} added, {} superseded",
        n(p.interventions, "intervention", "interventions"),
        n(p.gate_answers, "answer", "answers"),
        n(p.goal_changes, "goal change", "goal changes"),
        p.todos_added,
        p.todos_superseded
    );
    let _ = writeln!(
        out,
        "        {} a day{per_turns}; answers median {}, longest {}",
        p.per_day,
        duration(p.response_median_ms),
        duration(p.response_longest_ms)
    );
    let _ = writeln!(out, "gates   person: {}", waits(&r.gates.person));
    let _ = writeln!(out, "        CI/timers: {}", waits(&r.gates.checks));
    let w = &r.work;
    let _ = writeln!(out, "work    {} added, {} done ({} a day)", w.todos_added, w.done, w.done_per_day);
    let _ = writeln!(
        out,
        "        proof: {} validated by loopx, {} with evidence, {} without",
        w.done_validated, w.done_with_evidence, w.done_without_evidence
    );
    let _ =
        writeln!(out, "        drift: {} superseded, {}", w.superseded, n(w.replans, "replan", "replans"));
    if w.brake_questions > 0 {
        let _ = writeln!(
            out,
            "        brakes: {} to the person (turns without progress, or a turn cap)",
            n(w.brake_questions, "question", "questions")
        );
    }
    let _ = writeln!(
        out,
        "        handoffs: {} offered, {} taken, {} cancelled, {}",
        w.handoffs_offered,
        w.handoffs_accepted,
        w.handoffs_cancelled,
        n(w.host_switches, "host switch", "host switches")
    );
    out
}

fn clip(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut out: String = line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Markdown's table cells: no pipes or line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The Markdown form.
pub fn markdown(r: &Report) -> String {
    let mut out = String::new();
    let t = &r.time;
    let name = r.title.as_deref().unwrap_or(&r.objective);
    let _ = writeln!(out, "## Goal `{}`: {}\n", r.goal, cell(&clip(name, 200)));
    let _ = writeln!(
        out,
        "{} → {} UTC, **{}** elapsed, {} events.\n",
        minute(r.from),
        minute(r.to),
        duration(t.elapsed_ms),
        r.events
    );
    let _ = writeln!(out, "### Where the time went\n");
    let _ = writeln!(out, "| | time | share |\n|---|---:|---:|");
    for (label, ms) in [
        ("agents working", t.working_ms),
        ("waiting on a person", t.person_ms),
        ("waiting on CI or a timer", t.checks_ms),
        ("paused", t.paused_ms),
        ("out of quota", t.quota_ms),
        ("waiting on a host's quota", t.host_quota_ms),
        ("idle", t.idle_ms),
    ] {
        if ms == 0 && label == "waiting on a host's quota" {
            continue;
        }
        let _ = writeln!(out, "| {label} | {} | {} |", duration(ms), share(ms, t.elapsed_ms));
    }
    if r.turns.limited > 0 || r.work.brake_questions > 0 {
        let _ = writeln!(
            out,
            "\n{} ended on their host's quota; the brakes asked the person {}.",
            n(r.turns.limited, "turn", "turns"),
            n(r.work.brake_questions, "question", "questions")
        );
    }
    let _ = writeln!(out, "\nAgent time added up: {} over {} turns.\n", duration(t.agent_ms), r.turns.turns);
    let _ = writeln!(out, "### Turns\n");
    let _ = writeln!(
        out,
        "| agent | host | turns | spent | wrote back | failed | interrupted | validation failures | tokens | cost |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let row = |out: &mut String, a: &str, h: &str, c: &TurnCounts| {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(a),
            cell(h),
            c.turns,
            c.spent,
            c.wrote_back,
            c.failed,
            c.interrupted,
            c.validation_failures,
            tokens(c.tokens),
            usd(c.usd)
        );
    };
    for a in &r.agents {
        row(&mut out, &a.agent, &a.host, &a.counts);
    }
    row(&mut out, "**all**", "", &r.turns);
    let p = &r.people;
    let _ = writeln!(out, "\n### People\n");
    let _ = writeln!(
        out,
        "- {}: {}, {}, {} todos added, {} superseded",
        n(p.interventions, "intervention", "interventions"),
        n(p.gate_answers, "gate answer", "gate answers"),
        n(p.goal_changes, "goal change", "goal changes"),
        p.todos_added,
        p.todos_superseded
    );
    let per_turns = p.per_100_turns.map(|x| format!(", {x} per 100 turns")).unwrap_or_default();
    let _ = writeln!(out, "- {} per day{per_turns}", p.per_day);
    let _ = writeln!(
        out,
        "- a person's gate answered in median {}, longest {}",
        duration(p.response_median_ms),
        duration(p.response_longest_ms)
    );
    let _ = writeln!(out, "\n### Gates\n");
    let _ = writeln!(out, "- person: {}", waits(&r.gates.person));
    let _ = writeln!(out, "- CI, commands and timers: {}", waits(&r.gates.checks));
    let mut longest: Vec<_> = r.gates.list.iter().collect();
    longest.sort_by(|a, b| b.wait_ms.cmp(&a.wait_ms).then_with(|| a.gate.cmp(&b.gate)));
    if !longest.is_empty() {
        let _ = writeln!(out, "\n| gate | kind | asked | waited | answer |\n|---|---|---|---:|---|");
        for g in longest.iter().take(10) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                g.gate,
                g.kind,
                minute(Some(g.asked_at)),
                duration(g.wait_ms),
                g.status
            );
        }
    }
    let w = &r.work;
    let _ = writeln!(out, "\n### Work\n");
    let _ = writeln!(out, "- {} todos added, {} done ({} per day)", w.todos_added, w.done, w.done_per_day);
    let _ = writeln!(
        out,
        "- done with loopx's own validation run: {}; with evidence: {}; with none: {}",
        w.done_validated, w.done_with_evidence, w.done_without_evidence
    );
    let _ = writeln!(out, "- drift: {} superseded, {}", w.superseded, n(w.replans, "replan", "replans"));
    let _ = writeln!(
        out,
        "- handoffs: {} offered, {} taken, {} cancelled; {}",
        w.handoffs_offered,
        w.handoffs_accepted,
        w.handoffs_cancelled,
        n(w.host_switches, "host switch", "host switches")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(999), "0s");
        assert_eq!(duration(59_000), "59s");
        assert_eq!(duration(60_000), "1m");
        assert_eq!(duration(3_600_000 + 5 * 60_000), "1h 05m");
        assert_eq!(duration(2 * 86_400_000 + 4 * 3_600_000), "2d 04h");
    }

    #[test]
    fn counts_and_costs_keep_to_their_columns() {
        assert_eq!(count(99_999), "99999");
        assert_eq!(count(153_709), "153k");
        assert_eq!(count(2_450_000), "2.5M");
        assert_eq!(usd(Some(38_427.25)), "$38.4k");
        assert_eq!(usd(Some(9_999.5)), "$10000");
        assert_eq!(usd(Some(12.345)), "$12.35");
        for n in [0, 99_999, 100_000, 999_999, 1_000_000, 999_999_999] {
            assert!(count(n).len() <= 5, "{n}");
        }
        for x in [0.0, 99.99, 100.0, 9_999.4, 10_000.0, 999_999.0, 1e6, 9.9e8] {
            assert!(usd(Some(x)).len() <= 6, "{x}");
        }
    }
}
