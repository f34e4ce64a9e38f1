//! The pictures, as SVG written on the server: no script, no library, no style sheet (colours
//! are attributes, so a page's content security policy lets them through).
//!
//! The timeline has a lane per agent (its turns as bars coloured by outcome), the person's lane
//! (a question open as a span, its answer as a mark), the lane of gates loopx answers itself
//! (CI, pull requests, commands, timers), handoffs as arrows from the sender's lane to the
//! receiver's, and pauses shaded across every lane. The burn-up draws todos added, done and
//! done with proof over time. A kind with more than [`crate::grid::EXACT`] items is drawn from its
//! columns instead (each column's share of time as opacity), so a long goal's picture stays
//! small.

use std::fmt::Write as _;

use crate::grid::{Capped, Outcome, Picture, Span};
use crate::text::duration;

pub const WIDTH: i64 = 960;
const LEFT: i64 = 150;
const PLOT: i64 = WIDTH - LEFT - 40;
const ROW: i64 = 22;
const TOP: i64 = 30;

fn colour(o: Outcome) -> &'static str {
    match o {
        Outcome::Spent => "#2f855a",
        Outcome::WroteBack => "#3182ce",
        Outcome::Failed => "#c53030",
        Outcome::Interrupted => "#dd6b20",
        Outcome::Limited => "#805ad5",
    }
}
const PERSON: &str = "#d69e2e";
const CHECKS: &str = "#805ad5";
const PAUSE: &str = "#a0aec0";
const HOST_WAIT: &str = "#d6bcfa";

/// Text for SVG: `&`, `<`, `>` and `"` escaped.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

struct Scale {
    from: i64,
    span: i64,
}

impl Scale {
    fn new(p: &Picture) -> Self {
        Self { from: p.from, span: (p.to - p.from).max(1) }
    }
    /// x of time `t`, in tenths of a pixel kept as one decimal.
    fn x(&self, t: i64) -> f64 {
        let x = LEFT as f64 + (t - self.from).clamp(0, self.span) as f64 * PLOT as f64 / self.span as f64;
        (x * 10.0).round() / 10.0
    }
    fn w(&self, start: i64, end: i64) -> f64 {
        ((self.x(end) - self.x(start)) * 10.0).round().max(10.0) / 10.0
    }
}

/// A step that gives at most eight ticks.
fn tick_step(span: i64) -> i64 {
    const STEPS: [i64; 14] = [
        60_000,
        300_000,
        900_000,
        1_800_000,
        3_600_000,
        7_200_000,
        21_600_000,
        43_200_000,
        86_400_000,
        172_800_000,
        604_800_000,
        1_209_600_000,
        2_592_000_000,
        7_776_000_000,
    ];
    STEPS.iter().copied().find(|s| span / s <= 8).unwrap_or(31_536_000_000)
}

fn axis(out: &mut String, s: &Scale, y: i64) {
    let _ = write!(
        out,
        r##"<g class="axis"><line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#718096"/>"##,
        LEFT + PLOT
    );
    let step = tick_step(s.span);
    let mut t = 0;
    while t <= s.span {
        let x = s.x(s.from + t);
        let label =
            if t == 0 { "start".to_owned() } else { format!("+{}", duration(u64::try_from(t).unwrap_or(0))) };
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{y}" x2="{x}" y2="{}" stroke="#718096"/><text x="{x}" y="{}" font-size="10" text-anchor="middle" fill="#4a5568">{label}</text>"##,
            y + 4,
            y + 15
        );
        t += step;
    }
    out.push_str("</g>");
}

fn legend(out: &mut String, items: &[(&str, &str)]) {
    out.push_str(r#"<g class="legend">"#);
    let mut x = LEFT;
    for (label, fill) in items {
        let _ = write!(
            out,
            r##"<rect x="{x}" y="8" width="10" height="10" fill="{fill}"/><text x="{}" y="17" font-size="11" fill="#2d3748">{label}</text>"##,
            x + 14
        );
        x += 20 + 7 * label.len() as i64;
    }
    out.push_str("</g>");
}

fn lane_label(out: &mut String, y: i64, name: &str, sub: &str) {
    let _ = write!(
        out,
        r##"<text x="6" y="{}" font-size="12" fill="#1a202c">{}<tspan font-size="10" fill="#718096"> {}</tspan></text>"##,
        y + 15,
        escape(name),
        escape(sub)
    );
}

/// Where a kind of item is drawn: its class, the band's top and height, its colour.
#[derive(Clone, Copy)]
struct Band<'a> {
    kind: &'a str,
    y: i64,
    h: i64,
    fill: &'a str,
}

/// Spans one by one, or their columns when there were too many.
fn spans(out: &mut String, s: &Scale, p: &Picture, band: Band<'_>, items: &Capped<Span>, cols: &[f32]) {
    let Band { kind, y, h, fill } = band;
    if items.downsampled {
        density(out, s, p, band, cols.iter().map(|&ms| (ms, fill)));
        return;
    }
    for span in &items.items {
        let _ = write!(
            out,
            r#"<rect class="{kind}" x="{}" y="{y}" width="{}" height="{h}" fill="{fill}"><title>{} open {}</title></rect>"#,
            s.x(span.start),
            s.w(span.start, span.end),
            escape(&span.label),
            duration(u64::try_from(span.end - span.start).unwrap_or(0))
        );
    }
}

/// Columns drawn as rectangles whose opacity is the share of the column's time.
fn density<'a>(
    out: &mut String,
    s: &Scale,
    p: &Picture,
    band: Band<'_>,
    cols: impl Iterator<Item = (f32, &'a str)>,
) {
    let Band { kind, y, h, .. } = band;
    let g = &p.grid;
    for (c, (ms, fill)) in cols.enumerate() {
        if ms <= 0.0 {
            continue;
        }
        let start = g.origin + g.width * c as i64;
        let opacity = (f64::from(ms) / g.width as f64).clamp(0.15, 1.0);
        let _ = write!(
            out,
            r#"<rect class="{kind} density" x="{}" y="{y}" width="{}" height="{h}" fill="{fill}" fill-opacity="{opacity:.2}"/>"#,
            s.x(start),
            s.w(start, start + g.width)
        );
    }
}

/// The timeline.
pub fn timeline(p: &Picture) -> String {
    let s = Scale::new(p);
    let lanes = p.lanes.len() as i64;
    let person_y = TOP + lanes * ROW;
    let checks_y = person_y + ROW;
    let bottom = checks_y + ROW;
    let height = bottom + 26;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif"><rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    out.push_str(r##"<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#2d3748"/></marker></defs>"##);
    let mut items: Vec<(&str, &str)> = Outcome::ALL.iter().map(|&o| (o.class(), colour(o))).collect();
    items.extend([("person", PERSON), ("CI/timers", CHECKS), ("paused", PAUSE)]);
    if !p.host_waits.items.is_empty() || p.host_waits.downsampled {
        items.push(("host quota", HOST_WAIT));
    }
    legend(&mut out, &items);
    for y in [person_y, checks_y, bottom] {
        let _ =
            write!(out, r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#e2e8f0"/>"##, LEFT + PLOT);
    }
    let band = Band { kind: "pause", y: TOP, h: bottom - TOP, fill: PAUSE };
    spans(&mut out, &s, p, band, &p.pauses, &p.pause_cols);
    let band = Band { kind: "host-wait", y: TOP, h: bottom - TOP, fill: HOST_WAIT };
    spans(&mut out, &s, p, band, &p.host_waits, &p.host_wait_cols);
    for (i, lane) in p.lanes.iter().enumerate() {
        let y = TOP + i as i64 * ROW;
        let _ = write!(out, r#"<g class="lane" data-agent="{}">"#, escape(&lane.agent));
        lane_label(&mut out, y, &lane.agent, &lane.host);
        if p.bars.downsampled {
            let cols = p.busy.get(i).map(Vec::as_slice).unwrap_or_default();
            let dominant = cols.iter().map(|c| {
                let (k, _) = c
                    .iter()
                    .enumerate()
                    .fold((0, 0.0f32), |best, (k, &v)| if v > best.1 { (k, v) } else { best });
                (c.iter().sum::<f32>(), colour(Outcome::ALL[k]))
            });
            density(&mut out, &s, p, Band { kind: "turn", y: y + 3, h: ROW - 6, fill: "" }, dominant);
        } else {
            for b in p.bars.items.iter().filter(|b| b.lane == i) {
                let _ = write!(
                    out,
                    r#"<rect class="turn {}" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} {}, {}</title></rect>"#,
                    b.outcome.class(),
                    s.x(b.start),
                    y + 3,
                    s.w(b.start, b.end),
                    ROW - 6,
                    colour(b.outcome),
                    escape(&lane.agent),
                    duration(u64::try_from(b.end - b.start).unwrap_or(0)),
                    b.outcome.class().replace('-', " ")
                );
            }
        }
        out.push_str("</g>");
    }
    out.push_str(r#"<g class="lane person">"#);
    lane_label(&mut out, person_y, "person", "questions");
    let band = Band { kind: "wait person", y: person_y + 5, h: ROW - 10, fill: PERSON };
    spans(&mut out, &s, p, band, &p.person, &p.person_cols);
    if p.answers.downsampled {
        let g = &p.grid;
        for (c, &n) in p.answer_cols.iter().enumerate() {
            if n > 0 {
                let x = s.x(g.origin + g.width * c as i64 + g.width / 2);
                let _ = write!(
                    out,
                    r##"<circle class="answer density" cx="{x}" cy="{}" r="3" fill="#1a202c"><title>{n} answers</title></circle>"##,
                    person_y + ROW / 2
                );
            }
        }
    } else {
        for &at in &p.answers.items {
            let _ = write!(
                out,
                r##"<circle class="answer" cx="{}" cy="{}" r="3" fill="#1a202c"/>"##,
                s.x(at),
                person_y + ROW / 2
            );
        }
    }
    out.push_str("</g>");
    out.push_str(r#"<g class="lane checks">"#);
    lane_label(&mut out, checks_y, "gates", "CI, timers");
    let band = Band { kind: "wait check", y: checks_y + 5, h: ROW - 10, fill: CHECKS };
    spans(&mut out, &s, p, band, &p.checks, &p.check_cols);
    out.push_str("</g>");
    if !p.handoffs.downsampled {
        for a in &p.handoffs.items {
            let _ = write!(
                out,
                r##"<line class="handoff" x1="{}" y1="{}" x2="{}" y2="{}" stroke="#2d3748" stroke-width="1.5" marker-end="url(#arrow)"><title>{}</title></line>"##,
                s.x(a.offered),
                TOP + a.from_lane as i64 * ROW + ROW / 2,
                s.x(a.accepted),
                TOP + a.to_lane as i64 * ROW + ROW / 2,
                escape(&a.label)
            );
        }
    }
    axis(&mut out, &s, bottom + 2);
    out.push_str("</svg>");
    out
}

/// The burn-up: todos added, done, and done with proof, added up over time.
pub fn burnup(p: &Picture) -> String {
    const H: i64 = 200;
    let s = Scale::new(p);
    let (top, plot_h) = (TOP, H - TOP - 26);
    let total = p.burn_base[0] + p.burn.iter().map(|c| u64::from(c[0])).sum::<u64>();
    let max = total.max(1) as f64;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="burnup" width="{WIDTH}" height="{H}" viewBox="0 0 {WIDTH} {H}" font-family="sans-serif"><rect width="{WIDTH}" height="{H}" fill="white"/>"#
    );
    let lines = [("added", "#a0aec0"), ("done", "#90cdf4"), ("proven", "#2f855a")];
    legend(&mut out, &lines);
    let _ = write!(
        out,
        r##"<text x="6" y="{}" font-size="12" fill="#1a202c">todos</text><text x="{}" y="{}" font-size="10" text-anchor="end" fill="#4a5568">{total}</text>"##,
        top + 10,
        LEFT - 6,
        top + 10
    );
    let y = |n: u64| top + plot_h - (n as f64 * plot_h as f64 / max).round() as i64;
    let g = &p.grid;
    for (k, (class, stroke)) in lines.iter().enumerate() {
        let mut n = p.burn_base[k];
        let mut points = format!("{},{}", s.x(p.from), y(n));
        for (c, cell) in p.burn.iter().enumerate() {
            if cell[k] == 0 {
                continue;
            }
            let x = s.x((g.origin + g.width * (c as i64 + 1)).min(p.to));
            let _ = write!(points, " {x},{}", y(n));
            n += u64::from(cell[k]);
            let _ = write!(points, " {x},{}", y(n));
        }
        let _ = write!(points, " {},{}", s.x(p.to), y(n));
        let _ = write!(
            out,
            r#"<polyline class="{class}" points="{points}" fill="none" stroke="{stroke}" stroke-width="{}"><title>{class}: {n}</title></polyline>"#,
            if k == 1 { 6 } else { 2 }
        );
    }
    axis(&mut out, &s, top + plot_h + 2);
    out.push_str("</svg>");
    out
}

/// A picture and its size in pixels.
#[derive(Clone, Debug)]
pub struct Drawing {
    pub svg: String,
    pub width: i64,
    pub height: i64,
}

/// The height an `<svg>` element declares.
fn height_of(svg: &str) -> i64 {
    svg.split_once(r#"height=""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(h, _)| h.parse::<i64>().ok())
        .unwrap_or(0)
}

/// The timeline above the burn-up, under a title, in one picture (`loopx report --svg`).
pub fn both(p: &Picture, title: &str) -> Drawing {
    let (t, b) = (timeline(p), burnup(p));
    let (ht, hb) = (height_of(&t), height_of(&b));
    let height = 24 + ht + hb;
    let nest = |svg: &str, y: i64| svg.replacen("<svg ", &format!(r#"<svg y="{y}" "#), 1);
    let svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif"><rect width="{WIDTH}" height="{height}" fill="white"/><text x="6" y="17" font-size="14" font-weight="bold" fill="#1a202c">{}</text>{}{}</svg>"##,
        escape(title),
        nest(&t, 24),
        nest(&b, 24 + ht)
    );
    Drawing { svg, width: WIDTH, height }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid;

    #[test]
    fn ticks_stay_few() {
        for span in [1, 59_999, 3_600_000, 86_400_000 * 9, 86_400_000 * 400] {
            assert!(span / tick_step(span) <= 8, "{span}");
        }
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn a_downsampled_lane_is_drawn_from_its_columns() {
        let mut p = Picture::new(0);
        p.lanes.push(grid::Lane { agent: "a".into(), host: "other".into() });
        for i in 0..=grid::EXACT as i64 {
            p.turn(0, i * 1000, i * 1000 + 500, Outcome::Spent);
        }
        p.to = (grid::EXACT as i64 + 1) * 1000;
        let svg = timeline(&p);
        assert!(!svg.contains(r#"class="turn spent""#));
        assert!(svg.contains(r#"class="turn density""#));
    }
}
