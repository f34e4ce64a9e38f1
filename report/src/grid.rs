//! The pictures' data, bounded whatever the log's length.
//!
//! Every series lives on one [`Grid`]: [`COLUMNS`] columns of equal width from the window's
//! start. The width starts at a second and doubles (each pair of columns merged) whenever an
//! event falls past the last column, so a series never holds more than [`COLUMNS`] cells, and
//! the report need not know the log's length before reading it. Next to the columns, the
//! exact items (each turn's bar, each gate's span, each answer) are kept while there are at
//! most [`EXACT`] of a kind; past that, the picture draws that kind from its columns
//! (`downsampled`).

use serde::Serialize;

/// Columns of every series.
pub const COLUMNS: usize = 1024;
/// Most items of one kind drawn one by one.
pub const EXACT: usize = 2000;

/// What a turn came to, as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Spent = 0,
    WroteBack = 1,
    Failed = 2,
    Interrupted = 3,
    /// The host's own quota or rate limit ended it.
    Limited = 4,
}

impl Outcome {
    pub const ALL: [Outcome; 5] =
        [Outcome::Spent, Outcome::WroteBack, Outcome::Failed, Outcome::Interrupted, Outcome::Limited];

    /// The CSS class of its bars: `spent`, `wrote-back`, `failed`, `interrupted`, `limited`.
    pub fn class(self) -> &'static str {
        match self {
            Outcome::Spent => "spent",
            Outcome::WroteBack => "wrote-back",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
            Outcome::Limited => "limited",
        }
    }
}

/// A span of time in milliseconds since 1970 (one still open at the window's end ends there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Span {
    pub start: i64,
    pub end: i64,
    pub label: String,
}

/// A turn's bar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bar {
    pub lane: usize,
    pub start: i64,
    pub end: i64,
    pub outcome: Outcome,
}

/// A handoff: offered from one lane, taken in another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Arrow {
    pub from_lane: usize,
    pub to_lane: usize,
    pub offered: i64,
    pub accepted: i64,
    pub label: String,
}

/// An agent's lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lane {
    pub agent: String,
    pub host: String,
}

/// Items kept one by one up to [`EXACT`], then only counted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Capped<T> {
    pub items: Vec<T>,
    /// More than [`EXACT`] were seen: draw this kind from the columns.
    pub downsampled: bool,
}

impl<T> Default for Capped<T> {
    fn default() -> Self {
        Self { items: Vec::new(), downsampled: false }
    }
}

impl<T> Capped<T> {
    pub fn push(&mut self, item: T) {
        if self.downsampled {
            return;
        }
        if self.items.len() == EXACT {
            self.items = Vec::new();
            self.downsampled = true;
        } else {
            self.items.push(item);
        }
    }
}

/// The time axis the series share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grid {
    /// The first column's start, ms since 1970.
    pub origin: i64,
    /// A column's width in ms.
    pub width: i64,
}

impl Grid {
    /// The column `t` falls in, if within the grid.
    fn column(&self, t: i64) -> usize {
        usize::try_from((t - self.origin).max(0) / self.width).unwrap_or(0)
    }
}

/// Everything the timeline and the burn-up draw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Picture {
    pub from: i64,
    pub to: i64,
    pub grid: Grid,
    pub lanes: Vec<Lane>,
    pub bars: Capped<Bar>,
    /// Per lane, per column: ms of turns by outcome.
    pub busy: Vec<Vec<[f32; 5]>>,
    pub person: Capped<Span>,
    pub person_cols: Vec<f32>,
    pub answers: Capped<i64>,
    pub answer_cols: Vec<u32>,
    pub checks: Capped<Span>,
    pub check_cols: Vec<f32>,
    pub pauses: Capped<Span>,
    pub pause_cols: Vec<f32>,
    /// An agent waiting on its host's own quota or rate limit.
    pub host_waits: Capped<Span>,
    pub host_wait_cols: Vec<f32>,
    pub handoffs: Capped<Arrow>,
    /// Per column: todos added, done, done with proof (validated or with evidence).
    pub burn: Vec<[u32; 3]>,
    /// Todos added and done before the window (the burn-up's starting level).
    pub burn_base: [u64; 3],
}

impl Picture {
    pub fn new(origin: i64) -> Self {
        Self {
            from: origin,
            to: origin,
            grid: Grid { origin, width: 1000 },
            lanes: Vec::new(),
            bars: Capped::default(),
            busy: Vec::new(),
            person: Capped::default(),
            person_cols: Vec::new(),
            answers: Capped::default(),
            answer_cols: Vec::new(),
            checks: Capped::default(),
            check_cols: Vec::new(),
            pauses: Capped::default(),
            pause_cols: Vec::new(),
            host_waits: Capped::default(),
            host_wait_cols: Vec::new(),
            handoffs: Capped::default(),
            burn: Vec::new(),
            burn_base: [0; 3],
        }
    }

    /// Widens the grid until `t` falls within it.
    pub fn reach(&mut self, t: i64) {
        while t >= self.grid.origin + self.grid.width * COLUMNS as i64 {
            self.grid.width *= 2;
            for lane in &mut self.busy {
                halve(lane, |a, b| std::array::from_fn(|i| a[i] + b[i]));
            }
            halve(&mut self.person_cols, |a, b| a + b);
            halve(&mut self.answer_cols, |a, b| a + b);
            halve(&mut self.check_cols, |a, b| a + b);
            halve(&mut self.pause_cols, |a, b| a + b);
            halve(&mut self.host_wait_cols, |a, b| a + b);
            halve(&mut self.burn, |a, b| std::array::from_fn(|i| a[i] + b[i]));
        }
    }

    /// Hands each column `start..end` overlaps, and the ms of it that fall there, to `add`.
    fn spread(grid: &Grid, start: i64, end: i64, mut add: impl FnMut(usize, f32)) {
        let start = start.max(grid.origin);
        if end <= start {
            return;
        }
        for c in grid.column(start)..=grid.column(end - 1) {
            let lo = grid.origin + grid.width * c as i64;
            add(c, (end.min(lo + grid.width) - start.max(lo)) as f32);
        }
    }

    /// Adds `start..end` to a series.
    fn spread_into(grid: &Grid, cols: &mut Vec<f32>, start: i64, end: i64) {
        Self::spread(grid, start, end, |c, ms| {
            grow(cols, c + 1);
            cols[c] += ms;
        });
    }

    /// A turn of lane `lane`.
    pub fn turn(&mut self, lane: usize, start: i64, end: i64, outcome: Outcome) {
        self.reach(end);
        grow(&mut self.busy, lane + 1);
        let cols = &mut self.busy[lane];
        Self::spread(&self.grid, start, end, |c, ms| {
            grow(cols, c + 1);
            cols[c][outcome as usize] += ms;
        });
        self.bars.push(Bar { lane, start: start.max(self.from), end, outcome });
    }

    /// A turn drawn as [`Picture::turn`] ended otherwise after all (its spend was voided).
    pub fn restate(&mut self, lane: usize, start: i64, end: i64, was: Outcome, outcome: Outcome) {
        let cols = &mut self.busy[lane];
        Self::spread(&self.grid, start, end, |c, ms| {
            cols[c][was as usize] -= ms;
            cols[c][outcome as usize] += ms;
        });
        let start = start.max(self.from);
        if let Some(b) =
            self.bars.items.iter_mut().rev().find(|b| (b.lane, b.start, b.end) == (lane, start, end))
        {
            b.outcome = outcome;
        }
    }

    pub fn person_wait(&mut self, start: i64, end: i64, label: String) {
        self.reach(end);
        Self::spread_into(&self.grid, &mut self.person_cols, start, end);
        self.person.push(Span { start: start.max(self.from), end, label });
    }

    pub fn answer(&mut self, at: i64) {
        self.reach(at);
        let c = self.grid.column(at);
        grow(&mut self.answer_cols, c + 1);
        self.answer_cols[c] += 1;
        self.answers.push(at);
    }

    pub fn check_wait(&mut self, start: i64, end: i64, label: String) {
        self.reach(end);
        Self::spread_into(&self.grid, &mut self.check_cols, start, end);
        self.checks.push(Span { start: start.max(self.from), end, label });
    }

    pub fn pause(&mut self, start: i64, end: i64) {
        self.reach(end);
        Self::spread_into(&self.grid, &mut self.pause_cols, start, end);
        self.pauses.push(Span { start: start.max(self.from), end, label: String::new() });
    }

    pub fn host_wait(&mut self, start: i64, end: i64, label: String) {
        self.reach(end);
        Self::spread_into(&self.grid, &mut self.host_wait_cols, start, end);
        self.host_waits.push(Span { start: start.max(self.from), end, label });
    }

    /// A burn-up count (0 added, 1 done, 2 done with proof) at `at`.
    pub fn burn(&mut self, at: i64, which: usize) {
        if at < self.from {
            self.burn_base[which] += 1;
            return;
        }
        self.reach(at);
        let c = self.grid.column(at);
        grow(&mut self.burn, c + 1);
        self.burn[c][which] += 1;
    }
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

/// Merges each pair of cells into one.
fn halve<T: Copy>(v: &mut Vec<T>, add: impl Fn(T, T) -> T) {
    let merged: Vec<T> = v.chunks(2).map(|p| if p.len() == 2 { add(p[0], p[1]) } else { p[0] }).collect();
    *v = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_doubles_and_keeps_every_millisecond() {
        let mut p = Picture::new(0);
        p.person_wait(0, 500, "g1".into());
        p.person_wait(1_500_000, 4_000_000, "g2".into());
        assert!(p.grid.width >= 4_000_000 / COLUMNS as i64);
        assert!(p.person_cols.len() <= COLUMNS);
        let total: f32 = p.person_cols.iter().sum();
        assert_eq!(total, 500.0 + 2_500_000.0);
    }

    #[test]
    fn past_the_cap_a_kind_is_drawn_from_its_columns() {
        let mut p = Picture::new(0);
        for i in 0..=EXACT as i64 {
            p.answer(i * 10);
        }
        assert!(p.answers.downsampled);
        assert!(p.answers.items.is_empty());
        assert_eq!(p.answer_cols.iter().sum::<u32>(), EXACT as u32 + 1);
    }
}
