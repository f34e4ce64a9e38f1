//! The report's one pass over the log: each line moves a clock through the window, counting
//! the time since the line before into what the goal was doing then, and then changes what it
//! is doing. What it keeps between lines is what is open — gates, one turn an agent, pending
//! handoffs — plus the counts, the days and the pictures' bounded series.

use std::collections::{BTreeMap, BTreeSet};

use loopx_core::decision::{DecisionKind, RunState};
use loopx_core::event::Event;
use loopx_core::model::GateStatus;
use loopx_core::{GoalId, Timestamp};
use loopx_kernel::log::EventLine;

use crate::grid::{Arrow, Lane, Outcome, Picture};
use crate::{
    AgentTurns, Day, GateWait, Gates, People, REPORT_SCHEMA, Report, TimeSplit, Trajectory, TurnCounts,
    WaitStats, Window, Work,
};

/// The author loopx gives the evidence of its own validation runs.
const KERNEL_AUTHOR: &str = "loopx";
/// The actor of a person's commands.
const PERSON: &str = "user";

/// A turn in progress: from its decision to its writeback or end.
#[derive(Debug)]
struct OpenTurn {
    turn: String,
    start: i64,
    /// When a host's turn wrote back: it works no more, but a spend may still follow.
    ended: Option<i64>,
    outcome: Outcome,
    /// Counted in the window (its decision fell in it).
    counted: bool,
    /// The spend that accounted it, while its outcome is spent.
    spend: Option<String>,
}

/// A finished turn a spend accounted: a void of that spend makes it written back, not spent.
#[derive(Debug)]
struct SpentTurn {
    lane: usize,
    counted: bool,
    /// Where it was drawn (start and end), if it was.
    drawn: Option<(i64, i64)>,
    end: i64,
}

/// How long a spend can still be voided: the goal keeps a week of spends; a day's margin.
const VOIDABLE_MS: i64 = 8 * 24 * 3600 * 1000;

#[derive(Debug)]
struct OpenGate {
    index: Option<usize>,
    person: bool,
    since: i64,
}

/// The fold. Feed it every line in order with [`Fold::line`], then [`Fold::finish`].
#[derive(Debug)]
pub struct Fold {
    goal: GoalId,
    window: Window,
    title: Option<String>,
    objective: String,
    /// Where the clock stands (ms): time up to here is accounted.
    clock: Option<i64>,
    first: Option<i64>,
    last: Option<i64>,
    events: u64,
    time: TimeSplit,
    stopped: bool,
    compute_zero: bool,
    paused_since: Option<i64>,
    gates: BTreeMap<String, OpenGate>,
    gate_list: Vec<GateWait>,
    out_of_quota: BTreeMap<String, bool>,
    /// Agents whose latest driven turn ended on their host's own limit, until they run again,
    /// with when it ended.
    host_limited: BTreeMap<String, i64>,
    turns: BTreeMap<String, OpenTurn>,
    /// Finished turns by the spend that accounted them.
    spent: BTreeMap<String, SpentTurn>,
    /// Agents a `loopx drive` runs (their turns end at `turn_ended`).
    driven: BTreeSet<String>,
    agents: Vec<AgentTurns>,
    lane_of: BTreeMap<String, usize>,
    handoffs: BTreeMap<String, (usize, i64)>,
    people: People,
    responses: Vec<u64>,
    work: Work,
    /// Per day since 1970 (UTC).
    days: BTreeMap<i64, Day>,
    picture: Option<Picture>,
}

impl Fold {
    pub fn new(goal: GoalId, window: Window) -> Self {
        Self {
            goal,
            window,
            title: None,
            objective: String::new(),
            clock: None,
            first: None,
            last: None,
            events: 0,
            time: TimeSplit::default(),
            stopped: false,
            compute_zero: false,
            paused_since: None,
            gates: BTreeMap::new(),
            gate_list: Vec::new(),
            out_of_quota: BTreeMap::new(),
            host_limited: BTreeMap::new(),
            turns: BTreeMap::new(),
            spent: BTreeMap::new(),
            driven: BTreeSet::new(),
            agents: Vec::new(),
            lane_of: BTreeMap::new(),
            handoffs: BTreeMap::new(),
            people: People::default(),
            responses: Vec::new(),
            work: Work::default(),
            days: BTreeMap::new(),
            picture: None,
        }
    }

    fn window_start(&self) -> i64 {
        self.window.since.map_or(self.first.unwrap_or(0), Timestamp::unix_millis)
    }

    fn in_window(&self, t: i64) -> bool {
        t >= self.window_start() && self.window.until.is_none_or(|u| t <= u.unix_millis())
    }

    fn picture(&mut self) -> &mut Picture {
        let from = self.window_start();
        self.picture.get_or_insert_with(|| Picture::new(from))
    }

    /// Counts the time from the clock to `t` into what the goal was doing.
    fn advance(&mut self, t: i64) {
        let from = self.window_start();
        let start = self.clock.unwrap_or(t).max(from);
        self.clock = Some(self.clock.map_or(t, |c| c.max(t)));
        if t <= start {
            return;
        }
        let ms = u64::try_from(t - start).unwrap_or(0);
        let slot = if self.turns.values().any(|o| o.ended.is_none()) {
            &mut self.time.working_ms
        } else if self.stopped || self.compute_zero {
            &mut self.time.paused_ms
        } else if self.gates.values().any(|g| g.person) {
            &mut self.time.person_ms
        } else if !self.gates.is_empty() {
            &mut self.time.checks_ms
        } else if self.out_of_quota.values().any(|&o| o) {
            &mut self.time.quota_ms
        } else if !self.host_limited.is_empty() {
            &mut self.time.host_quota_ms
        } else {
            &mut self.time.idle_ms
        };
        *slot += ms;
        self.time.elapsed_ms += ms;
    }

    fn day(&mut self, t: i64) -> &mut Day {
        let day = t.div_euclid(86_400_000);
        self.days.entry(day).or_insert_with(|| {
            let date = Timestamp::from_unix_millis(day * 86_400_000).to_string()[..10].to_owned();
            Day { date, ..Day::default() }
        })
    }

    fn lane(&mut self, agent: &str, host: Option<&str>) -> usize {
        if let Some(&i) = self.lane_of.get(agent) {
            if let Some(h) = host
                && self.agents[i].host.is_empty()
            {
                self.agents[i].host = h.to_owned();
                self.picture().lanes[i].host = h.to_owned();
            }
            return i;
        }
        let i = self.agents.len();
        let host = host.unwrap_or_default().to_owned();
        self.agents.push(AgentTurns {
            agent: agent.to_owned(),
            host: host.clone(),
            counts: TurnCounts::default(),
        });
        self.picture().lanes.push(Lane { agent: agent.to_owned(), host });
        self.lane_of.insert(agent.to_owned(), i);
        i
    }

    /// One committed line, in order.
    pub fn line(&mut self, line: &EventLine) {
        let at = line.at.unix_millis();
        if self.first.is_none() {
            self.first = Some(at);
        }
        self.last = Some(at);
        self.picture();
        self.advance(at);
        let counted = self.in_window(at);
        if counted {
            self.events += 1;
        }
        match &line.event {
            Event::TurnSettled { steps } => {
                for step in steps {
                    self.event(&line.actor, at, counted, step);
                }
            }
            event => self.event(&line.actor, at, counted, event),
        }
    }

    fn intervention(&mut self, actor: &str, at: i64, counted: bool) -> bool {
        let yes = counted && actor == PERSON;
        if yes {
            self.people.interventions += 1;
            self.day(at).interventions += 1;
        }
        yes
    }

    fn goal_change(&mut self, actor: &str, at: i64, counted: bool) {
        if self.intervention(actor, at, counted) {
            self.people.goal_changes += 1;
        }
    }

    fn added(&mut self, at: i64, counted: bool, n: u64) {
        if counted {
            self.work.todos_added += n;
            self.day(at).todos_added += n;
        }
        for _ in 0..n {
            self.picture().burn(at, 0);
        }
    }

    fn event(&mut self, actor: &str, at: i64, counted: bool, event: &Event) {
        match event {
            Event::GoalCreated { objective, title } => {
                self.objective = objective.clone();
                self.title = title.clone();
            }
            Event::GoalUpdated { objective, title, quota, .. } => {
                if let Some(o) = objective {
                    self.objective = o.clone();
                }
                if let Some(t) = title {
                    self.title = Some(t.clone());
                }
                if let Some(q) = quota {
                    self.set_paused(at, self.stopped, q.compute <= 0.0);
                }
                self.goal_change(actor, at, counted);
            }
            Event::GoalStopped { .. } => {
                self.set_paused(at, true, self.compute_zero);
                self.goal_change(actor, at, counted);
            }
            Event::GoalResumed {} => {
                self.set_paused(at, false, self.compute_zero);
                self.goal_change(actor, at, counted);
            }
            Event::GoalCompleted { .. } => self.goal_change(actor, at, counted),
            Event::AgentRegistered { agent, agent_type } => {
                self.lane(agent.as_str(), Some(agent_type.name()));
            }
            Event::TodoAdded { .. } => {
                self.added(at, counted, 1);
                if self.intervention(actor, at, counted) {
                    self.people.todos_added += 1;
                }
            }
            Event::TodoCompleted { evidence, successor, .. } => {
                self.completed(at, counted, evidence);
                if successor.is_some() {
                    self.added(at, counted, 1);
                }
            }
            Event::TodoSuperseded { new, .. } => {
                if counted {
                    self.work.superseded += 1;
                }
                self.added(at, counted, new.len() as u64);
                if self.intervention(actor, at, counted) {
                    self.people.todos_superseded += 1;
                }
            }
            Event::EvidenceAdded { evidence }
                if counted && evidence.author == KERNEL_AUTHOR && evidence.exit_code != Some(0) =>
            {
                let lane = self.lane(actor, None);
                self.agents[lane].counts.validation_failures += 1;
            }
            Event::GateAsked { gate, kind, .. } => {
                let person = kind.is_person();
                let index = counted.then(|| {
                    self.gate_list.push(GateWait {
                        gate: gate.to_string(),
                        kind: kind.word().to_owned(),
                        asked_at: Timestamp::from_unix_millis(at),
                        closed_at: None,
                        status: GateStatus::Open.as_str().to_owned(),
                        wait_ms: 0,
                    });
                    self.gate_list.len() - 1
                });
                self.gates.insert(gate.to_string(), OpenGate { index, person, since: at });
            }
            Event::GateChecked { gate, verdict: Some(status), .. } if *status != GateStatus::Open => {
                self.close_gate(&gate.to_string(), at, *status, false);
            }
            Event::GateAnswered { gate, status, .. } => {
                let by_person = self.intervention(actor, at, counted);
                if by_person {
                    self.people.gate_answers += 1;
                }
                self.close_gate(&gate.to_string(), at, *status, by_person);
            }
            Event::DecisionRecorded { record } => {
                let agent = record.agent.as_str();
                let spent = matches!(record.state, RunState::Throttled | RunState::BudgetExhausted);
                self.out_of_quota.insert(agent.to_owned(), spent);
                if matches!(record.decision(), DecisionKind::Run | DecisionKind::Replan) {
                    self.host_wait_over(agent, at);
                }
                // A host's turn ends, at the latest, when its agent asks again.
                if !self.driven.contains(agent) || record.decision() == DecisionKind::Run {
                    self.finish_turn(agent, at, None);
                }
                match record.decision() {
                    DecisionKind::Run => {
                        let lane = self.lane(agent, None);
                        if counted {
                            self.count_turn(lane, at);
                        }
                        let turn = OpenTurn {
                            turn: record.turn.clone(),
                            start: at,
                            ended: None,
                            outcome: Outcome::Failed,
                            counted,
                            spend: None,
                        };
                        self.turns.insert(agent.to_owned(), turn);
                    }
                    DecisionKind::Replan if counted => self.work.replans += 1,
                    _ => {}
                }
            }
            Event::RunRecorded { run } => {
                let agent = run.agent.as_str();
                if self.driven.contains(agent) {
                    if let Some(open) = self.turns.get_mut(agent) {
                        open.outcome = Outcome::WroteBack;
                    }
                    return;
                }
                let same =
                    |o: &OpenTurn| run.turn.as_deref().is_none_or(|t| t == o.turn) && o.ended.is_none();
                if !self.turns.get(agent).is_some_and(same) {
                    // A writeback with no decision before it (an imported run, a manual one):
                    // a turn as recorded, of no known length.
                    self.finish_turn(agent, at, None);
                    let lane = self.lane(agent, None);
                    if counted {
                        self.count_turn(lane, at);
                    }
                    let turn = OpenTurn {
                        turn: String::new(),
                        start: at,
                        ended: None,
                        outcome: Outcome::Failed,
                        counted,
                        spend: None,
                    };
                    self.turns.insert(agent.to_owned(), turn);
                }
                if let Some(open) = self.turns.get_mut(agent) {
                    open.ended = Some(at);
                    open.outcome = Outcome::WroteBack;
                }
            }
            Event::SlotSpent { spend } => {
                let agent = spend.agent.as_str();
                self.usage(agent, counted, spend.tokens, spend.usd);
                if !self.driven.contains(agent)
                    && let Some(open) = self.turns.get_mut(agent)
                    && open.outcome == Outcome::WroteBack
                {
                    open.outcome = Outcome::Spent;
                    open.spend = Some(spend.id.to_string());
                }
            }
            Event::SlotVoided { spend, .. } => {
                self.goal_change(actor, at, counted);
                self.voided(&spend.to_string());
            }
            Event::HandoffOffered { handoff } => {
                let lane = self.lane(handoff.from.as_str(), None);
                self.handoffs.insert(handoff.id.to_string(), (lane, at));
                if counted {
                    self.work.handoffs_offered += 1;
                }
            }
            Event::HandoffAccepted { handoff, from, agent, registered, .. } => {
                let to = self.lane(agent.as_str(), registered.as_ref().map(|t| t.name()));
                let sender = self.lane(from.as_str(), None);
                let offered = self.handoffs.remove(&handoff.to_string()).map_or(at, |(_, t)| t);
                if counted {
                    self.work.handoffs_accepted += 1;
                    if self.agents[sender].host != self.agents[to].host {
                        self.work.host_switches += 1;
                    }
                }
                let label = handoff.to_string();
                self.picture().handoffs.push(Arrow {
                    from_lane: sender,
                    to_lane: to,
                    offered,
                    accepted: at,
                    label,
                });
            }
            Event::HandoffCancelled { handoff, .. } => {
                self.handoffs.remove(&handoff.to_string());
                if counted {
                    self.work.handoffs_cancelled += 1;
                }
            }
            Event::DriverStarted { lease, .. } => {
                self.lane(lease.agent.as_str(), Some(&lease.host));
                self.driven.insert(lease.agent.to_string());
            }
            Event::DriverStopped { agent, .. } => {
                self.driven.remove(agent.as_str());
                self.host_wait_over(agent.as_str(), at);
            }
            Event::TurnEnded { end, spend, brake } => {
                let agent = end.agent.as_str();
                if counted && brake.as_ref().is_some_and(|b| b.gate.is_some()) {
                    self.work.brake_questions += 1;
                }
                if end.limited().is_some() {
                    self.host_limited.entry(agent.to_owned()).or_insert(at);
                }
                let outcome = match (end.run, end.spent_by, end.exit) {
                    (Some(_), Some(_), _) => Outcome::Spent,
                    (Some(_), None, _) => Outcome::WroteBack,
                    (None, _, _) if end.limited().is_some() => Outcome::Limited,
                    (
                        None,
                        _,
                        loopx_core::drive::TurnExit::Interrupted | loopx_core::drive::TurnExit::Lost,
                    ) => Outcome::Interrupted,
                    (None, _, _) => Outcome::Failed,
                };
                let open = self.turns.get(agent).is_some_and(|o| o.turn == end.turn);
                if !open {
                    // Its decision is not in the log (or not in the window): the turn as the
                    // driver measured it.
                    self.finish_turn(agent, at, None);
                    let start = end.started_at.unix_millis();
                    let lane = self.lane(agent, None);
                    let counted = self.in_window(start);
                    if counted {
                        self.count_turn(lane, start);
                    }
                    let turn = OpenTurn {
                        turn: end.turn.clone(),
                        start,
                        ended: None,
                        outcome,
                        counted,
                        spend: None,
                    };
                    self.turns.insert(agent.to_owned(), turn);
                }
                let lane = self.lane(agent, None);
                if let Some(open) = self.turns.get_mut(agent) {
                    open.spend = end.spent_by.map(|s| s.to_string());
                    if open.counted {
                        self.agents[lane].counts.driven += 1;
                    }
                }
                self.finish_turn(agent, at, Some(outcome));
                self.usage(agent, counted, end.usage.tokens, end.usage.usd);
                if let Some(s) = spend {
                    self.usage(agent, counted, s.tokens, s.usd);
                }
            }
            _ => {}
        }
    }

    fn completed(&mut self, at: i64, counted: bool, evidence: &[loopx_core::model::Evidence]) {
        let validated = evidence.iter().any(|e| e.author == KERNEL_AUTHOR && e.exit_code == Some(0));
        let proven = validated || !evidence.is_empty();
        if counted {
            self.work.done += 1;
            self.day(at).done += 1;
            match (validated, proven) {
                (true, _) => self.work.done_validated += 1,
                (false, true) => self.work.done_with_evidence += 1,
                (false, false) => self.work.done_without_evidence += 1,
            }
        }
        self.picture().burn(at, 1);
        if proven {
            self.picture().burn(at, 2);
        }
    }

    fn usage(&mut self, agent: &str, counted: bool, tokens: Option<u64>, usd: Option<f64>) {
        if !counted || (tokens.is_none() && usd.is_none()) {
            return;
        }
        let lane = self.lane(agent, None);
        let c = &mut self.agents[lane].counts;
        c.tokens = crate::sum_opt(c.tokens, tokens);
        c.usd = crate::sum_opt(c.usd, usd);
    }

    fn count_turn(&mut self, lane: usize, at: i64) {
        self.agents[lane].counts.turns += 1;
        self.day(at).turns += 1;
    }

    /// Ends `agent`'s open turn at `at` (a driven turn's end, or the next decision of a host's
    /// turn that never wrote back), drawing and counting it.
    fn finish_turn(&mut self, agent: &str, at: i64, outcome: Option<Outcome>) {
        let Some(open) = self.turns.remove(agent) else { return };
        let outcome = outcome.unwrap_or(open.outcome);
        let end = open.ended.unwrap_or(at);
        let lane = self.lane(agent, None);
        let from = self.window_start();
        let worked = u64::try_from(end - open.start.max(from)).unwrap_or(0);
        let c = &mut self.agents[lane].counts;
        c.working_ms += worked;
        self.time.agent_ms += worked;
        if open.counted {
            match outcome {
                Outcome::Spent => c.spent += 1,
                Outcome::WroteBack => c.wrote_back += 1,
                Outcome::Failed => c.failed += 1,
                Outcome::Interrupted => c.interrupted += 1,
                Outcome::Limited => c.limited += 1,
            }
        }
        if end > from {
            self.picture().turn(lane, open.start, end, outcome);
        }
        if let (Outcome::Spent, Some(spend)) = (outcome, open.spend) {
            // Only a spend the goal still keeps (a week's) can be voided: forget older turns.
            if self.spent.len() >= 4096 {
                self.spent.retain(|_, t| t.end >= at - VOIDABLE_MS);
            }
            let drawn = (end > from).then_some((open.start, end));
            self.spent.insert(spend, SpentTurn { lane, counted: open.counted, drawn, end });
        }
    }

    /// A person voided `spend`: the turn it accounted gave its slot back, so it reads as written
    /// back, not spent (as the quota counts it).
    fn voided(&mut self, spend: &str) {
        if let Some(open) = self.turns.values_mut().find(|o| o.spend.as_deref() == Some(spend)) {
            open.outcome = Outcome::WroteBack;
            open.spend = None;
            return;
        }
        let Some(t) = self.spent.remove(spend) else { return };
        if t.counted {
            let c = &mut self.agents[t.lane].counts;
            c.spent -= 1;
            c.wrote_back += 1;
        }
        if let Some((start, end)) = t.drawn {
            self.picture().restate(t.lane, start, end, Outcome::Spent, Outcome::WroteBack);
        }
    }

    /// `agent` runs again (or its driver stopped): its wait on its host's quota, if any, is
    /// drawn.
    fn host_wait_over(&mut self, agent: &str, at: i64) {
        if let Some(since) = self.host_limited.remove(agent)
            && at > self.window_start()
        {
            self.picture().host_wait(since, at, format!("{agent} waiting on its host's quota"));
        }
    }

    fn set_paused(&mut self, at: i64, stopped: bool, compute_zero: bool) {
        let was = self.stopped || self.compute_zero;
        (self.stopped, self.compute_zero) = (stopped, compute_zero);
        match (was, stopped || compute_zero) {
            (false, true) => self.paused_since = Some(at),
            (true, false) => {
                if let Some(since) = self.paused_since.take()
                    && at > self.window_start()
                {
                    self.picture().pause(since, at);
                }
            }
            _ => {}
        }
    }

    fn close_gate(&mut self, gate: &str, at: i64, status: GateStatus, by_person: bool) {
        if status == GateStatus::Open {
            return;
        }
        let Some(open) = self.gates.remove(gate) else { return };
        let wait = u64::try_from(at - open.since).unwrap_or(0);
        if let Some(i) = open.index {
            let w = &mut self.gate_list[i];
            w.closed_at = Some(Timestamp::from_unix_millis(at));
            w.status = status.as_str().to_owned();
            w.wait_ms = wait;
            if by_person && open.person {
                self.responses.push(wait);
            }
        }
        self.draw_gate(gate, &open, at);
        if open.person {
            self.picture().answer(at);
        }
    }

    fn draw_gate(&mut self, gate: &str, open: &OpenGate, end: i64) {
        if end <= self.window_start() {
            return;
        }
        if open.person {
            self.picture().person_wait(open.since, end, gate.to_owned());
        } else {
            self.picture().check_wait(open.since, end, gate.to_owned());
        }
    }

    /// The report: the clock brought to the window's end, what is still open closed there.
    pub fn finish(mut self) -> Trajectory {
        let end = match (self.window.until, self.last) {
            (Some(u), _) => u.unix_millis(),
            (None, Some(l)) => l,
            (None, None) => 0,
        };
        self.picture();
        self.advance(end);
        let open: Vec<String> = self.turns.keys().cloned().collect();
        for agent in open {
            self.finish_turn(&agent, end, None);
        }
        let gates = std::mem::take(&mut self.gates);
        for (gate, open) in &gates {
            if let Some(i) = open.index {
                self.gate_list[i].wait_ms = u64::try_from(end - open.since).unwrap_or(0);
            }
            self.draw_gate(gate, open, end);
        }
        if let Some(since) = self.paused_since.take() {
            self.picture().pause(since, end);
        }
        for agent in self.host_limited.keys().cloned().collect::<Vec<_>>() {
            self.host_wait_over(&agent, end);
        }
        let from = self.window_start();
        let mut picture = self.picture.take().unwrap_or_else(|| Picture::new(from));
        picture.to = end.max(picture.from);
        picture.reach(picture.to);

        let mut turns = TurnCounts::default();
        for a in &self.agents {
            turns.add(&a.counts);
        }
        let days_long = (self.time.elapsed_ms as f64 / 86_400_000.0).max(1.0);
        self.people.per_day = round2(self.people.interventions as f64 / days_long);
        self.people.per_100_turns =
            (turns.turns > 0).then(|| round2(self.people.interventions as f64 * 100.0 / turns.turns as f64));
        self.responses.sort_unstable();
        self.people.response_median_ms = median(&self.responses);
        self.people.response_longest_ms = self.responses.last().copied().unwrap_or(0);
        self.work.done_per_day = round2(self.work.done as f64 / days_long);
        let gates = Gates {
            person: wait_stats(self.gate_list.iter().filter(|g| g.kind == "person")),
            checks: wait_stats(self.gate_list.iter().filter(|g| g.kind != "person")),
            list: self.gate_list,
        };
        let report = Report {
            schema_version: REPORT_SCHEMA,
            goal: self.goal.to_string(),
            title: self.title,
            objective: self.objective,
            from: self.first.map(|_| Timestamp::from_unix_millis(from)),
            to: self.last.map(|_| Timestamp::from_unix_millis(end)),
            events: self.events,
            time: self.time,
            agents: self.agents,
            turns,
            gates,
            people: self.people,
            work: self.work,
            days: self.days.into_values().collect(),
        };
        Trajectory { report, picture }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The lower median of sorted values.
fn median(sorted: &[u64]) -> u64 {
    if sorted.is_empty() { 0 } else { sorted[(sorted.len() - 1) / 2] }
}

fn wait_stats<'a>(gates: impl Iterator<Item = &'a GateWait>) -> WaitStats {
    let mut stats = WaitStats::default();
    let mut waits = Vec::new();
    for g in gates {
        stats.asked += 1;
        if g.closed_at.is_some() {
            stats.answered += 1;
        }
        stats.total_ms += g.wait_ms;
        if g.wait_ms > stats.longest_ms || stats.longest_gate.is_none() {
            stats.longest_ms = g.wait_ms;
            stats.longest_gate = Some(g.gate.clone());
        }
        waits.push(g.wait_ms);
    }
    waits.sort_unstable();
    stats.median_ms = median(&waits);
    stats
}
