//! Text output for people. Short, one fact a line; the JSON carries the detail.

use std::fmt::Write;

use loopx_core::agent::HostType;
use loopx_core::decision::{QuotaView, ShouldRunAnswer};
use loopx_core::kernel::*;
use loopx_core::model::{Evidence, GateStatus, GoalStatus, Todo, TodoStatus};
use loopx_hostkit::next;

use crate::output::Style;

fn suffix(changed: bool, replayed: bool) -> &'static str {
    match (changed, replayed) {
        (_, true) => " (replayed: already applied)",
        (false, _) => " (unchanged)",
        _ => "",
    }
}

/// Free text on one line of output: never a second line, never an escape sequence.
fn one(s: &str) -> String {
    loopx_core::untrusted::flatten(s, 100_000)
}

/// The status, coloured, padded to `width` columns. The padding goes outside the colour codes,
/// which take bytes but no columns: `{:<10}` on a painted word would count them.
fn status_cell(s: TodoStatus, style: Style, width: usize) -> String {
    let word = s.as_str();
    let painted = match s {
        TodoStatus::Open => style.green(word),
        TodoStatus::Done | TodoStatus::Superseded => style.dim(word),
        TodoStatus::Blocked | TodoStatus::Deferred => style.yellow(word),
    };
    format!("{painted}{}", " ".repeat(width.saturating_sub(word.chars().count())))
}

/// Free text of an item: its first line, then each further line indented by `indent` columns,
/// so a multi-line text never breaks a table. Every line is flattened (no escape sequences).
fn lines(s: &str, indent: usize) -> (String, String) {
    let mut it = s.lines().map(one).filter(|l| !l.is_empty());
    let first = it.next().unwrap_or_default();
    let pad = " ".repeat(indent);
    let rest = it.map(|l| format!("\n{pad}{l}")).collect();
    (first, rest)
}

/// Columns before a todo's text in a todo line.
const TODO_TEXT_COLUMN: usize = 20;

fn todo_line(t: &TodoSummary, style: Style) -> String {
    let (first, rest) = lines(&t.text, TODO_TEXT_COLUMN);
    // An open todo someone holds reads `claimed`.
    let status = match (&t.claimed_by, t.status) {
        (Some(_), TodoStatus::Open) => format!("{}   ", style.green("claimed")),
        _ => status_cell(t.status, style, 10),
    };
    let mut line = format!("{:<5} {} {status} {first}", t.id.to_string(), t.priority);
    if t.role == loopx_core::model::Role::User {
        line.push_str(&style.yellow("  [user]"));
    }
    let who = match (&t.claimed_by, &t.assignee) {
        (Some(a), _) if t.status.is_closed() => Some(format!("by {a}")),
        (Some(a), _) => Some(format!("by {a}")),
        (None, Some(a)) => Some(format!("for {a}, unclaimed")),
        (None, None) => None,
    };
    if let Some(w) = who {
        let _ = write!(line, "  {}", style.dim(&format!("— {w}")));
    }
    line.push_str(&rest);
    line
}

/// `1,440`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

pub fn init(r: &InitReport, style: Style) -> String {
    let mut out = String::new();
    let what = if r.created_project { "created" } else { "reusing" };
    let _ = writeln!(out, "{what} {}/.loopx", r.project_root);
    if let Some(g) = &r.goal {
        let verb = if r.created_goal { "created goal" } else { "goal" };
        let _ = writeln!(out, "{verb} {}: {}", style.bold(g.goal.id.as_str()), one(&g.goal.objective));
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(out, "next:");
    for n in &r.next {
        let _ = writeln!(out, "  {n}");
    }
    out
}

pub fn goal_receipt(verb: &str, r: &Receipt<GoalBody>, style: Style) -> String {
    let g = &r.body.goal;
    let mut out = format!("goal {} {verb}{}\n", style.bold(g.id.as_str()), suffix(r.changed, r.replayed));
    let _ = writeln!(out, "objective: {}", one(&g.objective));
    let _ = writeln!(out, "status: {}{}", g.status, if r.body.is_default { " (default goal)" } else { "" });
    out
}

/// `goal set`: each setting that changed, old → new.
pub fn goal_changes(
    before: &loopx_core::model::Goal,
    was_default: bool,
    r: &Receipt<GoalBody>,
    webhook_changed: bool,
    style: Style,
) -> String {
    let after = &r.body.goal;
    if !r.changed {
        return format!(
            "goal {}: nothing changed, every value was already set\n",
            style.bold(after.id.as_str())
        );
    }
    let mut out =
        format!("goal {} updated{}\n", style.bold(after.id.as_str()), suffix(r.changed, r.replayed));
    let mut change = |what: &str, old: String, new: String| {
        if old != new {
            let _ = writeln!(out, "{what}: {old} → {new}");
        }
    };
    change("objective", one(&before.objective), one(&after.objective));
    let title = |g: &loopx_core::model::Goal| g.title.as_deref().map_or("none".to_owned(), one);
    change("title", title(before), title(after));
    let (q0, q1) = (&before.quota, &after.quota);
    change("compute", q0.compute.to_string(), q1.compute.to_string());
    change("window", format!("{} h", q0.window_hours), format!("{} h", q1.window_hours));
    change("slot length", format!("{} min", q0.slot_minutes), format!("{} min", q1.slot_minutes));
    change(
        "slots per window",
        thousands(q0.effective_allowed_slots().into()),
        thousands(q1.effective_allowed_slots().into()),
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
    change("token budget", opt(q0.budget_tokens.map(thousands)), opt(q1.budget_tokens.map(thousands)));
    change(
        "money budget",
        opt(q0.budget_usd.map(|b| format!("${b:.2}"))),
        opt(q1.budget_usd.map(|b| format!("${b:.2}"))),
    );
    change("handoff mode", before.handoff_mode.to_string(), after.handoff_mode.to_string());
    let scope = |g: &loopx_core::model::Goal| {
        if g.write_scope.is_empty() { "anywhere".to_owned() } else { g.write_scope.join(" ") }
    };
    change("write scope", scope(before), scope(after));
    change("brakes", brakes(&before.brakes), brakes(&after.brakes));
    if webhook_changed {
        let _ = writeln!(
            out,
            "notices: the webhook posts to a new URL (kept in your configuration, not in .loopx/)"
        );
    }
    if r.body.is_default && !was_default {
        let _ = writeln!(out, "default goal: no → yes");
    }
    out
}

pub fn goal_list(l: &GoalList, style: Style) -> String {
    if l.goals.is_empty() {
        return "no goals yet; create one with: loopx goal create --goal-id main --objective \"…\"\n"
            .to_owned();
    }
    let mut out = String::new();
    for g in &l.goals {
        let mark = if g.is_default { "*" } else { " " };
        let title = g.title.as_deref().map(|t| format!("  {}", one(t))).unwrap_or_default();
        let _ = writeln!(out, "{mark} {}{}", style.bold(g.id.as_str()), title);
    }
    out
}

pub fn goal_detail(d: &GoalDetail, style: Style) -> String {
    let g = &d.goal;
    let mut out =
        format!("goal {}{}\n", style.bold(g.id.as_str()), if d.is_default { " (default)" } else { "" });
    if let Some(t) = &g.title {
        let _ = writeln!(out, "title: {}", one(t));
    }
    let _ = writeln!(out, "objective: {}", one(&g.objective));
    let status = match &g.stop_reason {
        Some(r) => format!("{} ({})", g.status, one(r)),
        None => g.status.to_string(),
    };
    let _ = writeln!(out, "status: {status}");
    let agents: Vec<String> = d.agents.iter().map(|a| format!("{} ({})", a.id, a.agent_type)).collect();
    let _ =
        writeln!(out, "agents: {}", if agents.is_empty() { "none".to_owned() } else { agents.join(", ") });
    let _ = writeln!(out, "todos: {}", counts(&d.counts));
    let _ = writeln!(out, "brakes: {}", brakes(&g.brakes));
    let _ = writeln!(out, "events: {}", d.events);
    out
}

/// The brakes of `loopx drive`, as a person set them or by default.
fn brakes(b: &loopx_core::model::Brakes) -> String {
    let stall = b.stall_turns().map_or("never".to_owned(), |n| format!("after {n} turns"));
    let cap = |c: Option<u32>| c.map_or("none".to_owned(), |n| n.to_string());
    let wait = match b.host_wait_secs() {
        0 => "none".to_owned(),
        s => loopx_core::time::format_duration(std::time::Duration::from_secs(s)),
    };
    format!(
        "ask when stalled {stall} · todo turn cap {} · hourly turn cap {} · host wait {wait} · failover {}",
        cap(b.todo_turn_cap()),
        cap(b.hourly_turn_cap()),
        if b.failover() { "on" } else { "off" }
    )
}

fn counts(c: &TodoCounts) -> String {
    format!(
        "{} open · {} blocked · {} deferred · {} done · {} superseded ({} total)",
        c.open, c.blocked, c.deferred, c.done, c.superseded, c.total
    )
}

pub fn agent_types(types: &[HostType]) -> String {
    let mut out = String::new();
    for t in types {
        let aliases = if t.aliases.is_empty() {
            String::new()
        } else {
            format!(" (aliases: {})", t.aliases.join(", "))
        };
        let _ = writeln!(out, "{:<12} {}{aliases}", t.name, t.description);
    }
    out
}

pub fn agent_receipt(r: &Receipt<AgentBody>, style: Style) -> String {
    let a = &r.body.agent;
    let verb = if r.changed { "registered" } else { "already registered" };
    let ids: Vec<&str> = r.body.agents.iter().map(|a| a.as_str()).collect();
    format!(
        "agent {} ({}) {verb} on goal {}\nagents now: {}\n",
        style.bold(a.id.as_str()),
        a.agent_type,
        r.goal_id,
        ids.join(", ")
    )
}

pub fn agent_list(l: &AgentList) -> String {
    if l.agents.is_empty() {
        return crate::registry::name_types(&format!(
            "no agents on goal {}; register one with: loopx agent register --agent-id <agent> --agent-type <type>\n",
            l.goal_id
        ));
    }
    let mut out = String::new();
    for a in &l.agents {
        let _ = writeln!(out, "{:<20} {:<12} since {}", a.id.as_str(), a.agent_type.name(), a.registered_at);
    }
    out
}

pub fn todo_receipt(verb: &str, r: &Receipt<TodoBody>, style: Style) -> String {
    let t = &r.body.todo;
    format!("{} {verb}{}\n{}\n", t.id, suffix(r.changed, r.replayed), todo_line(&TodoSummary::from(t), style))
}

pub fn complete_receipt(r: &Receipt<CompleteBody>, style: Style) -> String {
    let t = &r.body.todo;
    let mut out = format!("{} completed{}\n", t.id, suffix(r.changed, r.replayed));
    for e in &r.body.evidence {
        let _ = writeln!(out, "evidence {}: {}", e.id, one(&e.summary));
    }
    if let Some(s) = &r.body.successor {
        let _ = writeln!(out, "next: {}", todo_line(&TodoSummary::from(s), style));
    }
    out
}

pub fn supersede_receipt(r: &Receipt<SupersedeBody>, style: Style) -> String {
    let mut out = format!("{} superseded{}\n", r.body.todo.id, suffix(r.changed, r.replayed));
    for t in &r.body.replacements {
        let _ = writeln!(out, "by {}", todo_line(&TodoSummary::from(t), style));
    }
    out
}

pub fn todo_list(l: &TodoList, style: Style) -> String {
    if l.todos.is_empty() {
        return format!(
            "no todos to show on goal {} ({} in all); add one with: loopx todo add --text \"…\"\n",
            l.goal_id, l.total
        );
    }
    let mut out = String::new();
    for t in &l.todos {
        let _ = writeln!(out, "{}", todo_line(t, style));
    }
    out
}

fn evidence_line(e: &Evidence) -> String {
    let mut line = format!("{} {} on {} by {}: {}", e.id, e.kind, e.todo, e.author, one(&e.summary));
    if let Some(c) = &e.command {
        let _ = write!(line, " [$ {}]", one(&c.join(" ")));
    }
    if let Some(x) = e.exit_code {
        let _ = write!(line, " (exit {x})");
    }
    if let Some(l) = &e.link {
        let _ = write!(line, " <{l}>");
    }
    line
}

pub fn todo_detail(d: &TodoDetail, style: Style) -> String {
    let t: &Todo = &d.todo;
    let mut out = format!("{}\n", todo_line(&TodoSummary::from(t), style));
    let _ = writeln!(
        out,
        "class: {} · role: {} · created by {} at {}",
        t.class, t.role, t.created_by, t.created_at
    );
    if !t.scopes.is_empty() {
        let _ = writeln!(out, "scopes: {}", t.scopes.join(", "));
    }
    if let Some(v) = &t.validation {
        let _ = writeln!(
            out,
            "validation: {} (loopx runs it, up to {} s, and completes the todo only if it exits 0)",
            one(&loopx_core::untrusted::shell_exact(&v.argv)),
            v.timeout_secs
        );
    }
    if let Some(g) = &t.after_gate {
        let _ = writeln!(out, "after gate: {g} (runnable once it is approved)");
    }
    if let Some(l) = &t.lease {
        let scope = if l.write_scope.is_empty() {
            String::new()
        } else {
            format!(", writes {}", l.write_scope.join(" "))
        };
        let _ =
            writeln!(out, "lease: {} until {} (version {}{scope})", l.owner, l.expires_at, t.lease_version);
    }
    if let Some(r) = &t.resume_when {
        let _ = writeln!(out, "resumes when: {r}");
    }
    if let Some(p) = &t.predecessor {
        let _ = writeln!(out, "follows: {p}");
    }
    let ids = |v: &[loopx_core::TodoId]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if !t.successors.is_empty() {
        let _ = writeln!(out, "successors: {}", ids(&t.successors));
    }
    if !t.superseded_by.is_empty() {
        let _ = writeln!(out, "superseded by: {}", ids(&t.superseded_by));
    }
    if let Some(c) = &t.completion {
        let note = c.note.as_deref().map(|n| format!(": {}", one(n))).unwrap_or_default();
        let cont = match c.continuation {
            loopx_core::model::CompletionContinuation::Successor => "a successor follows",
            loopx_core::model::CompletionContinuation::NoFollowup => "nothing follows",
            loopx_core::model::CompletionContinuation::ActiveGoal => "the goal decides what follows",
        };
        let _ = writeln!(out, "completed by {} at {} ({cont}){note}", c.by, c.at);
    }
    for n in &t.notes {
        let _ = writeln!(out, "note by {} at {}: {}", n.by, n.at, one(&n.text));
    }
    for e in &d.evidence {
        let _ = writeln!(out, "{}", evidence_line(e));
    }
    out
}

pub fn evidence_receipt(r: &Receipt<EvidenceBody>, _style: Style) -> String {
    format!("recorded {}{}\n", evidence_line(&r.body.evidence), suffix(r.changed, r.replayed))
}

pub fn evidence_list(l: &EvidenceList) -> String {
    if l.evidence.is_empty() {
        return "no evidence yet; record some with: loopx evidence add --todo-id <id> --kind test --summary \"…\"\n".to_owned();
    }
    l.evidence.iter().map(|e| evidence_line(e) + "\n").collect()
}

pub fn status(s: &StatusView, style: Style) -> String {
    let mut out = String::new();
    let state = match s.goal_status {
        GoalStatus::Active => style.green("active"),
        GoalStatus::Stopped => style.yellow("stopped"),
        GoalStatus::Done => style.dim("done"),
    };
    let finished = if s.work_finished { " · its work is finished" } else { "" };
    let _ = writeln!(out, "goal {} — {state}{finished}", style.bold(s.goal_id.as_str()));
    let _ = writeln!(out, "objective:   {}", one(&s.objective));
    if s.goal_status == GoalStatus::Stopped {
        let why = s.stop_reason.as_deref().map(|r| format!("\"{}\"; ", one(r))).unwrap_or_default();
        let _ =
            writeln!(out, "stopped:     {why}agents start no turn until a person runs: loopx goal resume");
    }
    const COLUMN: usize = 13;
    let confirm = s.work_finished.then(|| {
        format!(
            "{} every todo is closed: is the objective met? loopx goal complete — or add work: loopx todo add --text \"…\"",
            style.yellow("finished")
        )
    });
    let needs: Vec<String> = confirm
        .into_iter()
        .chain(s.needs_user.iter().map(|u| {
            let id = u.gate.map(|g| g.to_string()).or(u.todo.map(|t| t.to_string())).unwrap_or_default();
            let (first, rest) = lines(&u.text, COLUMN + id.len() + 1);
            match (&u.blocks, u.priority) {
                (Some(b), _) => format!("{} {first} (blocks {b}){rest}", style.yellow(&id)),
                (None, Some(p)) => format!("{} {p} {first}{rest}", style.yellow(&id)),
                (None, None) => format!("{} {first}{rest}", style.yellow(&id)),
            }
        }))
        .collect();
    if needs.is_empty() {
        let _ = writeln!(out, "needs you:   nothing");
    }
    for (i, n) in needs.iter().enumerate() {
        let _ = writeln!(out, "{} {n}", if i == 0 { "needs you:  " } else { "            " });
    }
    // While the goal is not active the kernel starts no agent: said where the todos are named.
    let paused = if s.goal_status == GoalStatus::Stopped { " (once the goal resumes)" } else { "" };
    if s.goal_status == GoalStatus::Done {
        let _ = writeln!(
            out,
            "next:        nothing: the goal is done; to add work, resume it: loopx goal resume"
        );
    } else if s.next_by_agent.is_empty() {
        match &s.next_todo {
            Some(t) => {
                let _ = writeln!(out, "next:        {} {} {}{paused}", t.id, t.priority, one(&t.text));
            }
            None if s.counts.open > 0 => {
                let _ =
                    writeln!(out, "next:        nothing free to pick up: every open todo is held or waits");
            }
            None => {
                let _ =
                    writeln!(out, "next:        nothing open; add work with: loopx todo add --text \"…\"");
            }
        }
    }
    for g in s.gates.iter().filter(|g| g.kind.is_some()) {
        let _ = writeln!(out, "waits on:    {}", check_line(g));
    }
    for n in &s.next_by_agent {
        // A gate on the whole goal, or on this agent, holds its work (as should-run says).
        let holder = s.gates.iter().find(|g| g.blocks == "goal" || g.blocks == format!("agent:{}", n.agent));
        let idle =
            holder.map_or("nothing to pick up".to_owned(), |g| format!("held until {} closes", g.gate));
        let what =
            n.todo.as_ref().map_or(idle, |t| format!("{} {} {}{paused}", t.id, t.priority, one(&t.text)));
        let _ = writeln!(out, "next for {}: {what}", n.agent);
    }
    for c in &s.in_progress {
        let _ = writeln!(out, "in progress: {} {} — {}", c.todo, one(&c.text), c.agent);
    }
    for d in &s.drivers {
        let turn = match (&d.turn, d.todo, &d.limited) {
            (Some(t), Some(todo), _) => format!(", running turn {t} on {todo}"),
            (Some(t), None, _) => format!(", running turn {t}"),
            (None, _, Some(l)) => format!("; {}", l.describe(&d.host)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "driven:      {} by loopx drive (pid {} on {}, {}, since {}{turn})",
            d.agent, d.pid, d.machine, d.host, d.since
        );
    }
    for h in &s.handoffs {
        let _ = writeln!(out, "handoff:     {}", handoff_line(h));
    }
    let _ = writeln!(out, "todos:       {}", counts(&s.counts));
    match &s.latest_evidence {
        Some(e) => {
            let _ = writeln!(
                out,
                "evidence:    {} in all; latest {} on {}: {}",
                s.evidence,
                e.id,
                e.todo,
                one(&e.summary)
            );
        }
        None => {
            let _ = writeln!(out, "evidence:    none yet");
        }
    }
    let _ =
        writeln!(out, "quota:       {} · {} written back", gauge(&s.quota), plural(s.runs, "turn", "turns"));
    let agents: Vec<&str> = s.agents.iter().map(|a| a.as_str()).collect();
    let _ = writeln!(
        out,
        "agents:      {}",
        if agents.is_empty() { "none registered".to_owned() } else { agents.join(", ") }
    );
    out
}

/// `0 of 1,440 one-minute slots used in the last 24 h`, with what holds it back.
pub fn gauge(q: &QuotaView) -> String {
    let slot = match q.slot_minutes {
        1 => "one-minute".to_owned(),
        m => format!("{m}-minute"),
    };
    let mut line = format!(
        "{} of {} {slot} slots used in the last {} h",
        thousands(q.used_slots.into()),
        thousands(q.allowed_slots.into()),
        q.window_hours
    );
    if q.compute <= 0.0 {
        line.push_str(" (paused: compute is 0)");
    } else if q.compute < 1.0 {
        let _ = write!(line, " (compute {})", q.compute);
    }
    if let Some(t) = q.next_slot_at {
        let _ = write!(line, "; the next frees at {t}");
    }
    if let Some(b) = q.budget_tokens {
        let _ = write!(line, "; {} of {} tokens", thousands(q.tokens_used), thousands(b));
    }
    if let Some(b) = q.budget_usd {
        let _ = write!(line, "; ${:.2} of ${b:.2}", q.usd_used);
    }
    line
}

pub fn should_run(a: &ShouldRunAnswer, style: Style) -> String {
    let mut out = String::new();
    let word = a.decision.as_str();
    let head = if a.should_run { style.green(word) } else { style.yellow(word) };
    let what = a
        .selected_todo
        .as_ref()
        .map(|t| format!(" {} ({}): {}", t.id, t.priority, one(&t.text)))
        .unwrap_or_default();
    let _ = writeln!(out, "{head}{what}");
    let _ = writeln!(out, "reason:    {}", one(&a.reason));
    if let Some(t) = &a.selected_todo
        && t.claim_required
    {
        let _ = writeln!(out, "claim it first: it is not yet yours");
    }
    for q in &a.user_channel.questions {
        let _ = writeln!(out, "question:  {} {} ({})", q.gate, one(&q.question), q.blocks);
    }
    let _ = writeln!(out, "quota:     {}", gauge(&a.quota));
    let h = &a.scheduler;
    let action = h.action.as_str();
    let cadence = h.cadence_minutes.map(|c| format!(" every {c} min")).unwrap_or_default();
    let _ = writeln!(out, "scheduler: {action}{cadence} ({})", h.reason_code);
    if let Some(t) = &a.turn {
        let replay = if t.replayed { ", replayed" } else { "" };
        let _ = writeln!(out, "turn:      {} (event {}{replay})", t.id, t.recorded_seq);
    }
    let _ = writeln!(out, "next:");
    let c = next::context(a);
    for step in &a.next {
        let _ = writeln!(out, "  {}", next::command(step, &c));
    }
    out
}

pub fn gate_receipt(verb: &str, r: &Receipt<GateBody>, style: Style) -> String {
    let g = &r.body.gate;
    format!(
        "gate {} {verb}{}\n{} (blocks {})\n",
        style.bold(&g.id.to_string()),
        suffix(r.changed, r.replayed),
        one(&g.question),
        g.blocks
    )
}

/// A gate loopx checks itself: what it waits for, what it saw last, when it looks again.
fn check_line(q: &loopx_core::decision::OpenQuestion) -> String {
    let mut line =
        format!("{} {} ({}): {}", q.gate, q.kind.as_deref().unwrap_or("person"), q.blocks, one(&q.question));
    if let Some(c) = &q.last_check {
        let _ = write!(line, " — last check: {}", one(c));
    }
    if let Some(t) = q.next_check_at {
        let _ = write!(line, " — next at {t}");
    }
    line
}

/// `loopx gate poll`.
pub fn gate_poll(p: &GatePoll) -> String {
    let mut out = String::new();
    if let Some(s) = &p.skipped {
        let _ = writeln!(out, "not checked: {s}");
    }
    for g in &p.checked {
        let seen = g.check.as_ref().map(|c| one(&c.summary)).unwrap_or_default();
        let next = g
            .check
            .as_ref()
            .filter(|_| g.status == GateStatus::Open)
            .map(|c| format!("; next check at {}", c.next_at))
            .unwrap_or_default();
        let _ = writeln!(out, "{} {} {}: {seen}{next}", g.id, g.kind.word(), g.status);
    }
    for n in &p.notified {
        let what = if n.reminder { "reminder" } else { "notice" };
        let about = n.gate.map_or_else(|| "the work is finished".to_owned(), |g| g.to_string());
        match &n.error {
            Some(e) => {
                let _ =
                    writeln!(out, "{about}: the {what} to the person failed: {} (tried again later)", one(e));
            }
            None => {
                let _ = writeln!(out, "{about}: {what} sent ({})", n.channel.as_deref().unwrap_or(""));
            }
        }
    }
    if out.is_empty() {
        out.push_str("nothing was due\n");
    }
    out
}

pub fn gate_list(l: &GateList) -> String {
    if l.gates.is_empty() {
        return "no open gates\n".to_owned();
    }
    let mut out = String::new();
    for g in &l.gates {
        let (first, rest) = lines(&g.question, 40);
        let _ = writeln!(
            out,
            "{:<4} {:<9} {:<9} {:<14} {first}{rest}",
            g.id.to_string(),
            g.status.as_str(),
            g.kind.word(),
            g.blocks.to_string()
        );
        if let Some(c) = &g.check {
            let next = if g.status == GateStatus::Open {
                format!("; next check at {}", c.next_at)
            } else {
                String::new()
            };
            let _ = writeln!(out, "{:40}last check {}: {}{next}", "", c.at, one(&c.summary));
        }
    }
    out
}

pub fn run_receipt(r: &Receipt<RunBody>) -> String {
    let run = &r.body.run;
    format!(
        "{} recorded{}: {} on {} ({}, {})\nnext: loopx quota spend-slot --agent-id {} --todo-id {}{}\n",
        run.id,
        suffix(r.changed, r.replayed),
        run.agent,
        run.todo,
        run.classification,
        run.delivery_outcome,
        run.agent,
        run.todo,
        run.turn.as_ref().map(|t| format!(" --turn-instance-id {t}")).unwrap_or_default()
    )
}

pub fn spend_receipt(r: &Receipt<SpendBody>, quota: &QuotaView) -> String {
    let s = &r.body.spend;
    let what = if r.body.dry_run {
        "would spend"
    } else if s.voided {
        "voided"
    } else {
        "spent"
    };
    format!(
        "{} {what} {} slot(s) for {} on {}{}\nquota: {}\n",
        s.id,
        s.slots,
        s.agent,
        s.todo,
        suffix(r.changed || r.body.dry_run, r.replayed),
        gauge(quota)
    )
}

pub fn quota_status(q: &QuotaStatus, _style: Style) -> String {
    let mut out = format!("goal {}: {}\n", q.goal_id, gauge(&q.quota));
    let flags: Vec<&str> =
        [(q.paused, "paused"), (q.throttled, "throttled"), (q.budget_exhausted, "budget exhausted")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, w)| *w)
            .collect();
    if !flags.is_empty() {
        let _ = writeln!(out, "state: {}", flags.join(", "));
    }
    for s in &q.recent_spends {
        let void = if s.voided { " (voided)" } else { "" };
        let _ = writeln!(out, "{} {} {} slot(s) by {} on {}{void}", s.id, s.at, s.slots, s.agent, s.todo);
    }
    out
}

pub fn scheduler_receipt(r: &Receipt<SchedulerBody>) -> String {
    match &r.body.error {
        Some(e) => format!("recorded for {}: the scheduler could not apply the hint: {e}\n", r.body.agent_id),
        None => format!(
            "recorded for {}: cadence {}{}\n",
            r.body.agent_id,
            r.body.cadence_minutes.map_or("unchanged".to_owned(), |c| format!("{c} min")),
            r.body.rrule.as_ref().map(|x| format!(" ({x})")).unwrap_or_default()
        ),
    }
}

pub fn history(h: &HistoryView, style: Style) -> String {
    let mut out = String::new();
    if (h.events.len() as u64) < h.matched {
        let _ = writeln!(
            out,
            "{}",
            style.dim(&format!("… {} earlier events (--limit)", h.matched - h.events.len() as u64))
        );
    }
    for e in &h.events {
        let _ = writeln!(
            out,
            "{:>5} {} {:<12} {}",
            e.seq,
            style.dim(&e.at.to_string()),
            e.actor,
            one(&e.summary)
        );
    }
    if let Some(log) = &h.turn_log {
        let _ = writeln!(out, "output: {log}");
    }
    out
}

/// `h1 pending: codex-1 → claude-code (t2, t3) until …: note`.
fn handoff_line(h: &loopx_core::model::Handoff) -> String {
    let todos: Vec<String> = h.todos.iter().map(|t| t.todo.to_string()).collect();
    let what = if todos.is_empty() { "the goal".to_owned() } else { todos.join(", ") };
    let when = match h.status {
        loopx_core::model::HandoffStatus::Pending => format!(" until {}", h.expires_at),
        loopx_core::model::HandoffStatus::Accepted => {
            format!(" by {}", h.accepted_by.as_ref().map_or("", |a| a.as_str()))
        }
        _ => String::new(),
    };
    let note = h.note.as_deref().map(|n| format!(": {}", one(n))).unwrap_or_default();
    format!("{} {}: {} → {} ({what}){when}{note}", h.id, h.status, h.from, h.receiver())
}

pub fn handoff(h: &loopx_core::model::Handoff, changed: bool) -> String {
    let mut out = format!("{}{}\n", handoff_line(h), suffix(changed, false));
    if h.status == loopx_core::model::HandoffStatus::Pending {
        let _ = writeln!(out, "the receiver takes it over with: loopx resume --host {}", h.to_host.name());
    }
    out
}

pub fn handoff_list(l: &HandoffList) -> String {
    if l.handoffs.is_empty() {
        return "no handoffs waiting\n".to_owned();
    }
    l.handoffs.iter().map(|h| format!("{}\n", handoff_line(h))).collect()
}

/// The packet of a handoff, for the person or agent taking it over.
pub fn packet(p: &HandoffPacket) -> String {
    let mut out = format!("{}\n", handoff_line(&p.handoff));
    let _ = writeln!(out, "objective: {}", one(&p.objective));
    for d in &p.done {
        let _ = writeln!(out, "done:      {} {}", d.todo, one(&d.text));
        for e in &d.evidence {
            let _ = writeln!(out, "             {}", evidence_line(e));
        }
    }
    for t in &p.left {
        let mark = if p.handoff.covers(t.id) { "  (handed over)" } else { "" };
        let _ = writeln!(out, "left:      {} {} {}{mark}", t.id, t.priority, one(&t.text));
    }
    for g in &p.gates {
        let _ = writeln!(out, "needs you: {} {} ({})", g.gate, one(&g.question), g.blocks);
    }
    out
}

pub fn resume(r: &Receipt<ResumeBody>) -> String {
    let b = &r.body;
    let mut out = match &b.packet {
        Some(p) => packet(p),
        None => "no handoff waits for this agent\n".to_owned(),
    };
    if b.registered {
        let _ = writeln!(out, "registered agent {}", b.agent);
    }
    match &b.next_todo {
        Some(t) => {
            let _ = writeln!(out, "next for {}: {} {} {}", b.agent, t.id, t.priority, one(&t.text));
        }
        None => {
            let _ = writeln!(out, "next for {}: nothing to pick up", b.agent);
        }
    }
    out
}

pub fn doctor(d: &DoctorReport, style: Style) -> String {
    let mut out = String::new();
    let mark = |c: &loopx_core::kernel::DoctorCheck| match (c.ok, c.note) {
        (true, false) => style.green("ok  "),
        (true, true) => style.yellow("note"),
        (false, _) => style.red("FAIL"),
    };
    for c in &d.project {
        let _ = writeln!(out, "{} {}: {}", mark(c), c.name, c.detail);
    }
    for g in &d.goals {
        let _ = writeln!(out, "goal {}", style.bold(g.goal_id.as_str()));
        for c in &g.checks {
            let _ = writeln!(out, "  {} {}: {}", mark(c), c.name, c.detail);
        }
    }
    let _ = writeln!(out, "{}", if d.healthy { "healthy" } else { "problems found; see above" });
    out
}

pub fn lease(b: &LeaseBody, receipt: Option<(bool, bool)>) -> String {
    let tail = receipt.map(|(c, r)| suffix(c, r)).unwrap_or_default();
    match &b.lease {
        None => format!("{}: no lease (version {}){tail}\n", b.todo, b.version),
        Some(l) => {
            let state = if b.active { "active" } else { "expired" };
            let scope = if l.write_scope.is_empty() {
                String::new()
            } else {
                format!(", writes {}", l.write_scope.join(" "))
            };
            format!(
                "{}: leased by {} until {} ({state}, version {}{scope}){tail}\n",
                b.todo, l.owner, l.expires_at, b.version
            )
        }
    }
}

/// `loopx import`: per goal, what came over and what did not (with where it is).
pub fn import(r: &loopx_import::Report) -> String {
    use loopx_import::Outcome;
    let mut out =
        format!("from {}{}\n", one(&r.source), if r.dry_run { " (dry run: nothing written)" } else { "" });
    for g in &r.goals {
        let verb = match g.outcome {
            Outcome::Imported => "imported as",
            Outcome::WouldImport => "would be imported as",
            Outcome::Unchanged => "unchanged: imported before as",
        };
        out.push_str(&format!(
            "goal {} {verb} {}: {} agent(s), {} todo(s), {} gate(s) ({} open), {} evidence, {} spend(s), {} event(s)\n",
            one(&g.source_goal), g.goal_id, g.agents, g.todos, g.gates, g.open_gates, g.evidence, g.spends, g.events
        ));
        // What the source holds is not loopx's own text: each piece is one printable line.
        if !g.not_imported.is_empty() {
            out.push_str(&format!("  not imported ({}):\n", g.not_imported.len()));
            for n in &g.not_imported {
                out.push_str(&format!("  {}:{}: {} — {}\n", one(&n.file), n.line, one(&n.what), one(&n.why)));
            }
        }
    }
    if r.goals.iter().all(|g| g.outcome == Outcome::Unchanged) && !r.goals.is_empty() {
        out.push_str("nothing changed: every goal was imported from this same source before\n");
    }
    out
}
