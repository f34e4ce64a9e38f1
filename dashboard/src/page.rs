//! The pages: maud templates (compiled in, every interpolation HTML-escaped) and the two forms
//! a person may send. Styles and the one script are files of this crate, served from
//! `/assets/`; the page itself holds no script.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use loopx_report::{svg, text};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;

use loopx_core::kernel::{AddTodo, AnswerGate, CommandContext, CompleteTodo, Kernel, NewEvidence};
use loopx_core::model::{EvidenceKind, GateStatus, Priority, Role, TodoClass};
use loopx_core::{AgentId, Error, GateId, GoalId, Result, TodoId};

use crate::App;
use crate::view::{self, Activity, GoalPage, InboxPage};

const CSS: &str = include_str!("../assets/app.css");
const JS: &str = include_str!("../assets/app.js");

pub(crate) async fn css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}

pub(crate) async fn js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], JS)
}

/// `path` with the dashboard's token in its query: every link and form of the pages carries
/// it (the guard asks for it on every request, and it is never a cookie).
fn at(path: &str, token: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}token={token}")
}

/// A kernel error as a page: the message, the hint, a way back.
fn error_page(e: &Error, back: &str, token: &str) -> Response {
    let status = match e.kind {
        loopx_core::ErrorKind::NotFound => StatusCode::NOT_FOUND,
        loopx_core::ErrorKind::Usage => StatusCode::BAD_REQUEST,
        loopx_core::ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
        loopx_core::ErrorKind::Refused | loopx_core::ErrorKind::Conflict => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = layout(
        "loopx: refused",
        html! {
            section.card.refusal {
                h2 { "Not done" }
                p { (e.message) }
                @if let Some(h) = &e.hint { p.hint { (h) } }
                p { a href=(at(back, token)) { "Back" } }
            }
        },
        token,
    );
    (status, body).into_response()
}

fn layout(title: &str, main: Markup, token: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href=(at("/", token)) { "loopx" }
                    span.motto { "keep the loop moving, keep the judgment human" }
                    span #live .live title="updates as the state changes" { "live" }
                }
                main #main { (main) }
            }
        }
    }
}

/// A time as a person reads it: `2026-11-30 19:35 UTC`.
fn when(at: loopx_core::Timestamp) -> String {
    let s = at.to_string();
    match (s.get(..10), s.get(11..16)) {
        (Some(day), Some(hm)) => format!("{day} {hm} UTC"),
        _ => s,
    }
}

/// The project whose key is `key`, among the dashboard's projects.
fn project_of(app: &Arc<App>, key: &str) -> Result<PathBuf> {
    app.projects()?.into_iter().find(|r| crate::project_key(r) == key).ok_or_else(|| {
        Error::not_found(format!("no project {key} on this dashboard"))
            .with_hint("go back to the inbox; the project may have left the index")
    })
}

fn goal_href(key: &str, goal: &GoalId) -> String {
    format!("/p/{key}/{goal}")
}

pub(crate) async fn inbox(State(app): State<Arc<App>>) -> Response {
    match view::inbox(&app).await {
        Ok(p) => layout("loopx: inbox", inbox_body(&p, &app.token), &app.token).into_response(),
        Err(e) => error_page(&e, "/", &app.token),
    }
}

fn inbox_body(p: &InboxPage, token: &str) -> Markup {
    html! {
        section.card {
            h1 { "Needs you" }
            @if p.inbox.needs.is_empty() {
                p.quiet { "Nothing needs you. The agents have what they need." }
            }
            ul.needs {
                @for n in &p.inbox.needs {
                    @let key = crate::project_key(&n.project);
                    li.need data-kind=(n.kind) {
                        div.where {
                            span.badge.(n.kind) { (n.kind.replace('_', " ")) }
                            a href=(at(&goal_href(&key, &n.goal), token)) { (n.project.display()) " · " (n.goal) }
                        }
                        p.text {
                            @if let Some(id) = &n.id { span.id { (id) } " " }
                            (n.text)
                        }
                        @if n.kind == "gate" {
                            @if let Some(id) = &n.id {
                                (answer_form(&key, &n.goal, id, "/", token, true))
                            }
                        } @else if n.kind == "finished" {
                            (decision_form(&COMPLETE, &key, &n.goal, "/", token, true))
                        } @else if n.kind == "user_todo" && n.id.is_some() {
                            @if let Some(id) = &n.id {
                                (done_form(&key, &n.goal, id, "/", token))
                            }
                        } @else {
                            code.command { (n.command) }
                        }
                    }
                }
            }
            @for u in &p.inbox.unreadable {
                p.unreadable { "Cannot read " (u.path.display()) ": " (u.error) }
            }
        }
        section.card {
            h2 { "Projects" }
            @if p.projects.is_empty() {
                p.quiet { "No projects yet. Add one with " code { "loopx projects add DIR" } "." }
            }
            @for pr in &p.projects {
                div.project {
                    h3 { (pr.root.display()) }
                    @match &pr.goals {
                        Ok(goals) => {
                            ul.goals {
                                @for g in goals {
                                    li {
                                        a href=(at(&goal_href(&pr.key, &g.id), token)) { (g.id) }
                                        " · " (g.objective)
                                        span.counts { (g.open) " open · " (g.done) " done"
                                            @if g.needs > 0 { " · " strong { (g.needs) " need you" } } }
                                    }
                                }
                            }
                        }
                        Err(e) => { p.unreadable { "Cannot read it: " (e) } }
                    }
                }
            }
        }
    }
}

/// Approve or reject a person's gate, with a note.
/// Approve or reject a person's gate, with a note; with `passphrase`, a field for the person
/// key's passphrase (a goal in strict mode takes only signed answers; the inbox cannot tell).
fn answer_form(key: &str, goal: &GoalId, gate: &str, back: &str, token: &str, passphrase: bool) -> Markup {
    html! {
        form.answer method="post" action=(at(&format!("/p/{key}/{goal}/gate/{gate}"), token)) {
            input type="hidden" name="token" value=(token);
            input type="hidden" name="back" value=(back);
            input type="text" name="note" placeholder="a note (optional)" aria-label="note";
            @if passphrase {
                input type="password" name="passphrase" autocomplete="off"
                    placeholder="person key passphrase (strict mode)" aria-label="person key passphrase";
            }
            button.approve type="submit" name="decision" value="approve" { "Approve" }
            button.reject type="submit" name="decision" value="reject" { "Reject" }
        }
    }
}

/// A person's decision on the goal (`verb`: `complete`, `stop`) with a note; with
/// `passphrase`, as [`answer_form`]. `button` is its class and its words.
struct Decision<'a> {
    verb: &'a str,
    placeholder: &'a str,
    button: (&'a str, &'a str),
}

/// Confirm a goal whose work is finished is met.
const COMPLETE: Decision<'static> = Decision {
    verb: "complete",
    placeholder: "what was met (optional)",
    button: ("approve", "Complete goal"),
};
/// Stop the goal now: a running driven turn ends at once.
const STOP_NOW: Decision<'static> =
    Decision { verb: "stop", placeholder: "why (optional)", button: ("reject", "Stop now") };

fn decision_form(
    d: &Decision<'_>,
    key: &str,
    goal: &GoalId,
    back: &str,
    token: &str,
    passphrase: bool,
) -> Markup {
    html! {
        form.answer method="post" action=(at(&format!("/p/{key}/{goal}/{}", d.verb), token)) {
            input type="hidden" name="token" value=(token);
            input type="hidden" name="back" value=(back);
            input type="text" name="note" placeholder=(d.placeholder) aria-label="note";
            @if passphrase {
                input type="password" name="passphrase" autocomplete="off"
                    placeholder="person key passphrase (strict mode)" aria-label="person key passphrase";
            }
            button class=(d.button.0) type="submit" { (d.button.1) }
        }
    }
}

/// Mark a person's own todo done, with a note as its evidence.
fn done_form(key: &str, goal: &GoalId, todo: &str, back: &str, token: &str) -> Markup {
    html! {
        form.answer method="post" action=(at(&format!("/p/{key}/{goal}/todo/{todo}/done"), token)) {
            input type="hidden" name="token" value=(token);
            input type="hidden" name="back" value=(back);
            input type="text" name="note" required placeholder="what shows it is done" aria-label="evidence";
            button.approve type="submit" { "Done" }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    #[serde(default)]
    page: Option<usize>,
}

pub(crate) async fn goal(
    State(app): State<Arc<App>>,
    UrlPath((key, goal)): UrlPath<(String, String)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let found = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        view::goal(&app, &root, &goal, q.page.unwrap_or(0)).await
    }
    .await;
    match found {
        Ok(p) => layout(&format!("loopx: {}", p.status.goal_id), goal_body(&p, &app.token), &app.token)
            .into_response(),
        Err(e) => error_page(&e, "/", &app.token),
    }
}

fn goal_body(p: &GoalPage, token: &str) -> Markup {
    let s = &p.status;
    let here = goal_href(&p.key, &s.goal_id);
    let q = &p.quota.quota;
    html! {
        section.card.objective {
            div.where { a href=(at("/", token)) { "Inbox" } " › " (p.root.display()) " · " (s.goal_id) }
            h1 { (s.objective) }
            p.meta {
                span.badge.(s.goal_status.as_str()) { (s.goal_status) }
                " " (s.events) " events"
                @if let Some(at) = s.last_event_at { " · last at " (when(at)) }
                " · " (s.runs) " runs · " (s.evidence) " evidence"
            }
            @if s.work_finished {
                div.finished {
                    p.warn { "The work is finished: every todo is closed and nothing follows. Is the objective met? Complete the goal, or add work below." }
                    (decision_form(&COMPLETE, &p.key, &s.goal_id, &here, token, p.strict))
                }
            }
        }
        div.grid {
            section.card {
                h2 { "Questions" }
                @let open: Vec<_> = p.gates.iter().filter(|g| g.status == GateStatus::Open).collect();
                @if open.is_empty() { p.quiet { "No open questions." } }
                @for g in &open {
                    div.question {
                        p { span.id { (g.id) } " " span.badge { (g.kind.word()) } " " (g.question) }
                        p.meta { "blocks " (g.blocks) " · asked by " (g.asked_by) " at " (when(g.asked_at)) }
                        @if g.is_persons() {
                            (answer_form(&p.key, &s.goal_id, &g.id.to_string(), &here, token, p.strict))
                        } @else if let Some(c) = &g.check {
                            p.meta { "checked " (when(c.at)) ": " (c.summary) }
                        }
                    }
                }
                @let answered: Vec<_> = p.gates.iter().filter(|g| g.status != GateStatus::Open).rev().take(5).collect();
                @if !answered.is_empty() {
                    h3 { "Answered" }
                    ul.answered {
                        @for g in answered {
                            li { span.id { (g.id) } " " span.badge.(g.status.as_str()) { (g.status) } " " (g.question)
                                @if let Some(n) = &g.note { " — " em { (n) } } }
                        }
                    }
                }
            }
            section.card {
                h2 { "Quota" }
                (gauge(q.used_slots, q.allowed_slots))
                p.meta { (q.used_slots) " of " (q.allowed_slots) " slots used in " (q.window_hours) " h · compute " (q.compute)
                    @if let Some(at) = q.next_slot_at { " · next slot at " (when(at)) } }
                p.meta { "tokens " (q.tokens_used) @if let Some(b) = q.budget_tokens { " of " (b) }
                    " · USD " (format!("{:.2}", q.usd_used)) @if let Some(b) = q.budget_usd { " of " (format!("{b:.2}")) } }
                @if p.quota.paused { p.warn { "Paused: compute is 0." } }
                @if p.quota.budget_exhausted { p.warn { "The budget is spent." } }
                h2.next { "Agents" }
                @if p.agents.is_empty() { p.quiet { "No agent registered." } }
                ul.agents {
                    @for (a, last) in &p.agents {
                        li { strong { (a.id) } " · " (a.agent_type) " · "
                            @match last { Some(at) => { "last act " (when(*at)) }, None => { "not yet" } } }
                    }
                }
                @if !s.drivers.is_empty() {
                    h2.next { "Driven" }
                    ul.agents.drivers {
                        @for d in &s.drivers {
                            li { strong { (d.agent) } " · loopx drive (" (d.host) ") · pid " (d.pid) " on " (d.machine)
                                " · since " (when(d.since))
                                @if let Some(t) = &d.turn {
                                    " · turn " a href=(at(&format!("{here}/turn/{t}"), token)) { (t) }
                                    @if let Some(todo) = d.todo { " on " (todo) }
                                } @else if let Some(l) = &d.limited {
                                    " · " span.limited { (l.describe(&d.host)) }
                                } }
                        }
                    }
                    @if s.goal_status == loopx_core::model::GoalStatus::Active {
                        (decision_form(&STOP_NOW, &p.key, &s.goal_id, &here, token, p.strict))
                    }
                }
            }
        }
        section.card {
            h2 { "Add a todo" }
            form.add method="post" action=(at(&format!("{here}/todo"), token)) {
                input type="hidden" name="token" value=(token);
                input type="text" name="text" required placeholder="what needs doing" aria-label="todo text";
                select name="priority" aria-label="priority" {
                    @for pr in Priority::ALL { option value=(pr.as_str()) selected[*pr == Priority::P2] { (pr) } }
                }
                select name="role" aria-label="who does it" {
                    option value="agent" { "for the agents" }
                    option value="user" { "for me" }
                }
                button type="submit" { "Add" }
            }
        }
        section.card {
            h2 { "Todos" }
            div.kanban {
                @for (lane, cards, total) in &p.lanes {
                    div.lane data-lane=(lane.title()) {
                        h3 { (lane.title()) " " span.count { (total) } }
                        @for c in cards {
                            div.todo.(c.status.as_str()) {
                                p { span.id { (c.id) } " " span.badge { (c.priority) } @if c.role == "user" { " " span.badge.user { "you" } } }
                                p.text { (c.text) }
                                @if let Some(w) = &c.who { p.meta { "by " (w) } }
                                @if let Some(g) = &c.gate { p.meta { "held by " (g) } }
                            }
                        }
                    }
                }
            }
            @if p.pages > 1 {
                nav.pages {
                    @if p.page > 0 { a href=(at(&format!("{here}?page={}", p.page - 1), token)) { "← newer" } " " }
                    "page " (p.page + 1) " of " (p.pages)
                    @if p.page + 1 < p.pages { " " a href=(at(&format!("{here}?page={}", p.page + 1), token)) { "older →" } }
                }
            }
        }
        (report_section(p, &here, token))
        div.grid {
            section.card {
                h2 { "Life of the goal" }
                (chart("Slots spent per day", &p.activity, |d| d.slots))
                (chart("Todos closed per day", &p.activity, |d| d.closed))
            }
            section.card {
                h2 { "Evidence" }
                @if p.evidence.is_empty() { p.quiet { "No evidence yet." } }
                ol.timeline {
                    @for e in &p.evidence {
                        li { span.meta { (when(e.at)) } " " span.id { (e.todo) } " " span.badge { (e.kind) } " " (e.summary)
                            span.meta { " — " (e.author) } }
                    }
                }
            }
        }
        @if !p.turns.is_empty() {
            section.card {
                h2 { "Driven turns" }
                table.runs.turns {
                    thead { tr { th { "turn" } th { "agent" } th { "todo" } th { "ended" } th { "" } } }
                    tbody {
                        @for t in &p.turns {
                            tr.(if t.failed() { "failed" } else { "ok" }) {
                                td { a href=(at(&format!("{here}/turn/{}", t.turn), token)) { (t.turn) } }
                                td { (t.agent) }
                                td { @if let Some(todo) = t.todo { (todo) } @else { "replan" } }
                                td { (when(t.ended_at)) }
                                td { (t.describe())
                                    @if let Some(n) = t.usage.tokens { " · " (n) " tokens" } }
                            }
                        }
                    }
                }
            }
        }
        section.card {
            h2 { "Run history" }
            @if p.activity.runs.is_empty() { p.quiet { "No tick yet." } }
            table.runs {
                thead { tr { th { "#" } th { "at" } th { "who" } th { "what" } th { "" } } }
                tbody {
                    @for r in &p.activity.runs {
                        tr { td { (r.seq) } td { (when(r.at)) } td { (r.actor) } td { (r.kind.replace('_', " ")) } td { (r.summary) } }
                    }
                }
            }
        }
    }
}

/// The latest bytes of a turn's output log shown on its page.
const TURN_LOG_SHOWN: u64 = 256 * 1024;

/// A driven turn: its events and the end of its output log (kept on the machine that ran it).
pub(crate) async fn turn(
    State(app): State<Arc<App>>,
    UrlPath((key, goal, turn)): UrlPath<(String, String, String)>,
) -> Response {
    let found = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let turn = loopx_core::IdempotencyKey::new(&turn)?;
        let k = app.kernel(&root)?;
        let filter = loopx_core::kernel::HistoryFilter {
            limit: 200,
            turn: Some(turn.as_str().to_owned()),
            ..Default::default()
        };
        let history = k.history(Some(&goal), &filter).await?;
        let log = loopx_kernel::turn_log::read(&root, &goal, turn.as_str(), TURN_LOG_SHOWN)?;
        Ok::<_, Error>((goal, turn, history, log))
    }
    .await;
    match found {
        Ok((goal, turn, history, log)) => {
            let back = goal_href(&key, &goal);
            let body = html! {
                section.card {
                    div.where { a href=(at("/", &app.token)) { "Inbox" } " › " a href=(at(&back, &app.token)) { (goal) } " › turn " (turn) }
                    h1 { "Turn " (turn) }
                    table.runs {
                        thead { tr { th { "#" } th { "at" } th { "who" } th { "what" } } }
                        tbody {
                            @for e in &history.events {
                                tr { td { (e.seq) } td { (when(e.at)) } td { (e.actor) } td { (e.summary) } }
                            }
                        }
                    }
                }
                section.card {
                    h2 { "Output" }
                    @match &log {
                        Some(text) => { pre.log { (text) } }
                        None => { p.quiet { "No output log for this turn on this machine." } }
                    }
                }
            };
            layout(&format!("loopx: turn {turn}"), body, &app.token).into_response()
        }
        Err(e) => error_page(&e, "/", &app.token),
    }
}

/// A bar for used of allowed, drawn in SVG (no inline styles: the policy forbids them).
fn gauge(used: u32, allowed: u32) -> Markup {
    let frac = if allowed == 0 { 1.0 } else { f64::from(used.min(allowed)) / f64::from(allowed) };
    let w = format!("{:.1}", frac * 300.0);
    html! {
        svg.gauge width="300" height="14" viewBox="0 0 300 14" role="img" aria-label=(format!("{used} of {allowed} slots")) {
            rect.track x="0" y="0" width="300" height="14" rx="3" {}
            rect.fill x="0" y="0" width=(w) height="14" rx="3" {}
        }
    }
}

/// The share of the goal's time each way it went, as one bar, and its figures.
fn time_split(r: &loopx_report::Report) -> Markup {
    let t = &r.time;
    let parts = [
        ("working", "agents working", t.working_ms),
        ("person", "waiting on a person", t.person_ms),
        ("checks", "on CI or a timer", t.checks_ms),
        ("paused", "paused", t.paused_ms),
        ("quota", "out of quota", t.quota_ms),
        ("idle", "idle", t.idle_ms),
    ];
    let whole = t.elapsed_ms.max(1) as f64;
    let mut x = 0.0;
    let bars: Vec<(&str, &str, u64, f64, f64)> = parts
        .iter()
        .map(|&(class, label, ms)| {
            let w = 600.0 * ms as f64 / whole;
            x += w;
            (class, label, ms, x - w, w)
        })
        .collect();
    html! {
        svg.split width="600" height="16" viewBox="0 0 600 16" role="img" aria-label="where the time went" {
            @for (class, label, ms, x, w) in &bars {
                rect class=(class) x=(format!("{x:.1}")) y="0" width=(format!("{w:.1}")) height="16" {
                    title { (label) ": " (text::duration(*ms)) }
                }
            }
        }
        ul.split {
            @for (class, label, ms) in parts {
                li { span class=(format!("swatch {class}")) {} (label) " " strong { (text::duration(ms)) } }
            }
        }
    }
}

/// The goal page's part of `loopx report`: where the time went, the burn-up, and a link to the
/// whole report.
fn report_section(p: &GoalPage, here: &str, token: &str) -> Markup {
    let r = &p.activity.trajectory.report;
    html! {
        section.card.report {
            h2 { "What happened" }
            p.meta { (text::duration(r.time.elapsed_ms)) " elapsed · " (r.turns.turns) " turns · "
                (r.people.interventions) " interventions · " (r.work.done) " done ("
                (r.work.done_validated + r.work.done_with_evidence) " with proof) · "
                a href=(at(&format!("{here}/report"), token)) { "the whole report →" } }
            (time_split(r))
            div.picture { (PreEscaped(svg::burnup(&p.activity.trajectory.picture))) }
        }
    }
}

/// Goal `goal` of project `key`, and its activity and report (read once per commit).
async fn report_of(app: &Arc<App>, key: &str, goal: &str) -> Result<(GoalId, Arc<Activity>)> {
    let root = project_of(app, key)?;
    let goal = GoalId::new(goal)?;
    let events = app.kernel(&root)?.status(Some(&goal)).await?.events;
    let activity = app.activity.get(app, &root, &goal, events)?;
    Ok((goal, activity))
}

/// `loopx report` as a page: the figures, the timeline and the burn-up.
pub(crate) async fn report(
    State(app): State<Arc<App>>,
    UrlPath((key, goal)): UrlPath<(String, String)>,
) -> Response {
    let (goal, a) = match report_of(&app, &key, &goal).await {
        Ok(found) => found,
        Err(e) => return error_page(&e, "/", &app.token),
    };
    let token = &app.token;
    let back = goal_href(&key, &goal);
    let r = &a.trajectory.report;
    let body = html! {
        section.card.report {
            div.where { a href=(at("/", token)) { "Inbox" } " › " a href=(at(&back, token)) { (goal) } " › report" }
            h1 { "What happened" }
            p.meta { @if let (Some(f), Some(t)) = (r.from, r.to) { (when(f)) " → " (when(t)) " · " }
                (text::duration(r.time.elapsed_ms)) " elapsed · " (r.events) " events · "
                a href=(at(&format!("{back}/report.svg"), token)) download { "picture (SVG)" } " · "
                a href=(at(&format!("{back}/report.json"), token)) download { "figures (JSON)" } }
            (time_split(r))
            div.picture { (PreEscaped(svg::timeline(&a.trajectory.picture))) }
            div.picture { (PreEscaped(svg::burnup(&a.trajectory.picture))) }
        }
        section.card.report {
            pre.report { (text::text(r)) }
        }
    };
    layout(&format!("loopx: report of {goal}"), body, token).into_response()
}

/// The report's picture or figures as a download: `report.svg`, `report.json`.
pub(crate) async fn report_file(
    State(app): State<Arc<App>>,
    UrlPath((key, goal, file)): UrlPath<(String, String, String)>,
) -> Response {
    let (goal, a) = match report_of(&app, &key, &goal).await {
        Ok(found) => found,
        Err(e) => return error_page(&e, "/", &app.token),
    };
    let t = &a.trajectory;
    let (kind, body) = match file.as_str() {
        "report.svg" => {
            let title = format!("goal {goal} — {}", t.report.title.as_deref().unwrap_or(&t.report.objective));
            ("image/svg+xml", svg::both(&t.picture, title.lines().next().unwrap_or_default()).svg)
        }
        "report.json" => match serde_json::to_string_pretty(&t.report) {
            Ok(j) => ("application/json", j),
            Err(e) => return error_page(&Error::internal(e.to_string()), "/", &app.token),
        },
        _ => return error_page(&Error::not_found(format!("no file {file} here")), "/", &app.token),
    };
    let disposition = format!("attachment; filename=\"{goal}-{file}\"");
    ([(header::CONTENT_TYPE, kind.to_owned()), (header::CONTENT_DISPOSITION, disposition)], body)
        .into_response()
}

/// Bars, one a day, of `value` over the goal's days with activity.
fn chart(title: &str, a: &Activity, value: impl Fn(&view::Day) -> u64) -> Markup {
    let days = &a.days[a.days.len().saturating_sub(60)..];
    let most = days.iter().map(&value).max().unwrap_or(0).max(1);
    let (w, h) = (360.0_f64, 80.0_f64);
    let bar = if days.is_empty() { w } else { w / days.len() as f64 };
    html! {
        figure.chart {
            figcaption { (title) }
            @if days.is_empty() { p.quiet { "Nothing yet." } } @else {
                svg width="360" height="96" viewBox="0 0 360 96" role="img" aria-label=(title) {
                    @for (i, d) in days.iter().enumerate() {
                        @let v = value(d);
                        @let bh = h * v as f64 / most as f64;
                        rect.bar x=(format!("{:.1}", i as f64 * bar)) y=(format!("{:.1}", h - bh)) width=(format!("{:.1}", (bar - 1.0).max(1.0))) height=(format!("{bh:.1}")) {
                            title { (d.date) ": " (v) }
                        }
                    }
                    text x="0" y="94" { (days[0].date) }
                    text x="360" y="94" text-anchor="end" { (days[days.len() - 1].date) }
                }
            }
        }
    }
}

/// A person's answer to a gate. No field names an agent: the page acts as the person only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    token: String,
    decision: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    back: String,
    /// The person key's passphrase, for a goal in strict mode.
    #[serde(default)]
    passphrase: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTodo {
    token: String,
    text: String,
    priority: String,
    role: String,
}

/// The person, on goal `goal`.
fn person(goal: GoalId) -> Result<CommandContext> {
    Ok(CommandContext {
        goal: Some(goal),
        agent: Some(AgentId::new("user")?),
        key: None,
        session: None,
        signer: None,
    })
}

/// The person's context for a decision on `goal`: signed with their key (opened with
/// `passphrase`) when the goal is in strict mode.
async fn deciding(
    app: &App,
    k: &loopx_kernel::DynKernel,
    goal: &GoalId,
    passphrase: &str,
) -> Result<CommandContext> {
    let mut ctx = person(goal.clone())?;
    if let Some(key) = k.show_goal(Some(goal)).await?.goal.person_key {
        ctx.signer = Some(crate::signer(&app.cfg, &key, passphrase)?);
    }
    Ok(ctx)
}

/// A write needs the page's token in its form.
fn refuse_write(app: &App, token: &str) -> Option<Response> {
    (!crate::guard::same(token, &app.token)).then(|| {
        let e = Error::refused("the form does not carry this dashboard's token")
            .with_hint("reload the page and send the form from it");
        error_page(&e, "/", &app.token)
    })
}

/// A person's write: refused without the page's token (`done` is then never run); otherwise
/// done, and the browser sent on to the page it names.
async fn write(app: &App, token: &str, done: impl std::future::Future<Output = Result<String>>) -> Response {
    if let Some(r) = refuse_write(app, token) {
        return r;
    }
    match done.await {
        Ok(to) => Redirect::to(&at(&to, &app.token)).into_response(),
        Err(e) => error_page(&e, "/", &app.token),
    }
}

/// Where to go after a write: the page the form was on, when it is one of ours.
fn back_to(back: &str, fallback: String) -> String {
    if back == "/" || back.starts_with("/p/") && !back.contains("//") { back.to_owned() } else { fallback }
}

pub(crate) async fn answer_gate(
    State(app): State<Arc<App>>,
    UrlPath((key, goal, gate)): UrlPath<(String, String, String)>,
    Form(f): Form<Answer>,
) -> Response {
    let done = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let status = match f.decision.as_str() {
            "approve" => GateStatus::Approved,
            "reject" => GateStatus::Rejected,
            other => {
                return Err(
                    Error::usage(format!("unknown decision {other:?}")).with_hint("approve or reject")
                );
            }
        };
        let note = Some(f.note.trim().to_owned()).filter(|n| !n.is_empty());
        let req = AnswerGate { gate: gate.parse::<GateId>()?, status, note };
        let k = app.kernel(&root)?;
        k.answer_gate(&deciding(&app, &k, &goal, &f.passphrase).await?, req).await?;
        Ok(back_to(&f.back, goal_href(&key, &goal)))
    };
    write(&app, &f.token, done).await
}

/// A person's note-carrying form: completing a goal, or marking their own todo done.
#[derive(Debug, Deserialize)]
pub(crate) struct Noted {
    token: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    back: String,
    /// The person key's passphrase, for a goal in strict mode (completing a goal).
    #[serde(default)]
    passphrase: String,
}

/// The person confirms the goal is met (signed in strict mode, as a gate's answer is).
pub(crate) async fn complete_goal(
    State(app): State<Arc<App>>,
    UrlPath((key, goal)): UrlPath<(String, String)>,
    Form(f): Form<Noted>,
) -> Response {
    let done = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let note = Some(f.note.trim().to_owned()).filter(|n| !n.is_empty());
        let k = app.kernel(&root)?;
        k.complete_goal(&deciding(&app, &k, &goal, &f.passphrase).await?, note).await?;
        Ok(back_to(&f.back, goal_href(&key, &goal)))
    };
    write(&app, &f.token, done).await
}

/// The person stops the goal now (signed in strict mode): a running driven turn ends at once,
/// and no turn starts until the goal is resumed.
pub(crate) async fn stop_goal(
    State(app): State<Arc<App>>,
    UrlPath((key, goal)): UrlPath<(String, String)>,
    Form(f): Form<Noted>,
) -> Response {
    let done = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let reason = Some(f.note.trim().to_owned()).filter(|n| !n.is_empty());
        let k = app.kernel(&root)?;
        k.stop_goal(&deciding(&app, &k, &goal, &f.passphrase).await?, reason, true).await?;
        Ok(back_to(&f.back, goal_href(&key, &goal)))
    };
    write(&app, &f.token, done).await
}

/// A person's own todo, done: the note is its evidence. An agent's todo is refused (the agent
/// completes it, with its proof).
pub(crate) async fn complete_todo(
    State(app): State<Arc<App>>,
    UrlPath((key, goal, todo)): UrlPath<(String, String, String)>,
    Form(f): Form<Noted>,
) -> Response {
    let done = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let todo = todo.parse::<TodoId>()?;
        let note = f.note.trim();
        if note.is_empty() {
            return Err(Error::usage("say what shows the todo is done").with_hint("write it in the note"));
        }
        let k = app.kernel(&root)?;
        if k.show_todo(Some(&goal), todo).await?.todo.role != Role::User {
            return Err(Error::refused(format!(
                "{todo} is an agent's todo; its agent completes it with its proof"
            ))
            .with_hint("only your own todos are marked done here"));
        }
        let evidence = NewEvidence {
            kind: EvidenceKind::Note,
            summary: note.to_owned(),
            command: None,
            exit_code: None,
            link: None,
        };
        let req =
            CompleteTodo { todo, evidence: Some(evidence), no_follow_up: false, note: None, next_todo: None };
        k.complete_todo(&person(goal.clone())?, req).await?;
        Ok(back_to(&f.back, goal_href(&key, &goal)))
    };
    write(&app, &f.token, done).await
}

pub(crate) async fn add_todo(
    State(app): State<Arc<App>>,
    UrlPath((key, goal)): UrlPath<(String, String)>,
    Form(f): Form<NewTodo>,
) -> Response {
    let done = async {
        let root = project_of(&app, &key)?;
        let goal = GoalId::new(&goal)?;
        let req = AddTodo {
            text: f.text.trim().to_owned(),
            priority: f.priority.parse::<Priority>()?,
            role: f.role.parse::<Role>()?,
            class: TodoClass::Advance,
            scopes: Vec::new(),
            after_gate: None,
            validation: None,
        };
        app.kernel(&root)?.add_todo(&person(goal.clone())?, req).await?;
        Ok(goal_href(&key, &goal))
    };
    write(&app, &f.token, done).await
}
