#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! A glance at a goal (its head and the few todos a decision may need, checked apart from the
//! rest): whatever decision it vouches for is the one the whole state gives, answer and all,
//! over goals made at random; and it vouches for none whenever what decides lies outside it.

use std::path::Path;
use std::sync::Arc;

use loopx_core::agent::{Cadence, HostCatalog};
use loopx_core::kernel::{AddTodo, AnswerGate, AskGate, CompleteTodo, OfferHandoff, UpdateTodo};
use loopx_core::model::{
    GateBlocks, GateKind, GateStatus, Priority, ResumeWhen, Role, TodoClass, TodoStatus,
};
use loopx_core::{AgentId, AgentType, Timestamp};
use loopx_kernel::codec;
use loopx_kernel::decide;
use loopx_kernel::rules::{self, Actor};
use loopx_kernel::state::GoalState;
use loopx_kernel::table::{BodyFile, GLANCE_FREE, GLANCE_HELD, GLANCE_USER, Glance};

use crate::support::{Sim, agent, evidence};

/// The glance a snapshot of `s` holds, read as a decision reads it: the state's form encoded,
/// its glance's todos' JSON in a body file of their own (in `dir`), and the glance decoded
/// from the form's beginning alone.
fn glance(s: &GoalState, dir: &Path) -> (GoalState, Glance) {
    let form = codec::encode_keys(s, 0).unwrap();
    let end = codec::glance_end(&form).unwrap();
    let (mut bodies, mut at) = (Vec::new(), Vec::new());
    for id in codec::glance_ids(&form) {
        at.push(bodies.len() as u64);
        bodies.extend(serde_json::to_vec(s.todos.get(id).unwrap()).unwrap());
        bodies.push(b'\n');
    }
    let path = dir.join(format!("todos-{}.dat", s.seq));
    std::fs::write(&path, &bodies).unwrap();
    let file = Arc::new(BodyFile::open(&path, s.seq).unwrap());
    // Only the glance's part of the form is at hand, as when a snapshot is read that far.
    let src = Arc::new(form[..end].to_vec());
    codec::decode_glance(&src, 0, Some(file), at).unwrap().expect("a form with a glance")
}

fn pacing() -> decide::Pacing<'static> {
    static HOSTS: std::sync::LazyLock<HostCatalog> = std::sync::LazyLock::new(|| HostCatalog::new(vec![]));
    static GENERIC: std::sync::LazyLock<Cadence> = std::sync::LazyLock::new(Cadence::generic);
    decide::Pacing { hosts: &HOSTS, forced: Some(&GENERIC) }
}

/// Whether the glance at `s` vouches for `who`'s decision at `now`; when it does, that the
/// decision and the whole answer are the whole state's.
fn agrees(s: &GoalState, g: &GoalState, counts: Glance, who: Option<&AgentId>, now: Timestamp) -> bool {
    let Some((agent, d)) = decide::decide_at_a_glance(g, counts, who, now) else { return false };
    let (whole_agent, whole) = decide::decide(s, who, now).expect("a decision the glance vouched for");
    assert_eq!((&agent, &d), (&whole_agent, &whole), "the glance's decision for {who:?} at {now}");
    assert_eq!(
        decide::answer(g, agent.as_ref(), &d, pacing(), now, None),
        decide::answer(s, agent.as_ref(), &d, pacing(), now, None),
        "the glance's answer for {who:?} at {now}"
    );
    true
}

/// A small random source (xorshift), so that each run makes the same goals.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// One random step a goal takes: a todo added (agent or person work, of any priority and
/// class), claimed, completed (with or without a successor for its completer), deferred (until a
/// time, another todo or a gate), a gate asked or answered, a handoff offered. Steps the rules
/// refuse are left out.
fn step(sim: &mut Sim, rng: &mut Rng) {
    let ids: Vec<_> = sim.state.todos.keys().map(|k| k.id).collect();
    let pick = |rng: &mut Rng| ids.get(rng.below(ids.len().max(1))).copied();
    let who = ["a", "b"][rng.below(2)];
    let now = sim.now;
    let event = match rng.below(40) {
        0..=17 => {
            let req = AddTodo {
                role: if rng.chance(12) { Role::User } else { Role::Agent },
                class: [TodoClass::Advance, TodoClass::Advance, TodoClass::Monitor, TodoClass::Blocker]
                    [rng.below(4)],
                ..AddTodo::agent(
                    "random work",
                    [Priority::P0, Priority::P1, Priority::P2, Priority::P3][rng.below(4)],
                )
            };
            rules::add_todo(&sim.state, &req).ok()
        }
        18..=23 => {
            pick(rng).and_then(|t| rules::claim(&sim.state, &Actor::Agent(agent(who)), t, now).ok().flatten())
        }
        24..=28 => pick(rng).and_then(|t| {
            let next = rng.chance(40).then(|| "what follows".to_owned());
            let req = CompleteTodo {
                todo: t,
                evidence: Some(evidence()),
                no_follow_up: false,
                note: None,
                next_todo: next,
            };
            rules::complete(&sim.state, &Actor::Agent(agent(who)), &req, None, now).ok().flatten()
        }),
        29..=32 => pick(rng).and_then(|t| {
            let when = match rng.below(4) {
                0 => ResumeWhen::At(Timestamp::from_unix_millis(now.unix_millis() + 60_000)),
                1 => ResumeWhen::At(Timestamp::from_unix_millis(now.unix_millis() - 60_000)),
                2 => ResumeWhen::TodoDone(pick(rng)?),
                _ => ResumeWhen::GateAnswered(sim.state.gates.last()?.id),
            };
            let req = UpdateTodo {
                status: Some(TodoStatus::Deferred),
                resume_when: Some(when),
                ..UpdateTodo::of(t)
            };
            rules::update(&sim.state, &Actor::User, &req, now).ok().flatten()
        }),
        33 => {
            let blocks = match rng.below(3) {
                0 => Some(GateBlocks::Agent(agent(who))),
                1 => pick(rng).map(|t| GateBlocks::Todos(vec![t])),
                _ => Some(GateBlocks::Goal),
            };
            blocks.and_then(|blocks| {
                let req = AskGate { question: "may I?".into(), blocks, kind: GateKind::Person };
                rules::ask_gate(&sim.state, &req, now).ok()
            })
        }
        34..=35 => {
            sim.state.gates.iter().rev().find(|g| g.status == GateStatus::Open).map(|g| g.id).and_then(|g| {
                let status = if rng.chance(90) { GateStatus::Approved } else { GateStatus::Rejected };
                rules::answer_gate(&sim.state, &Actor::User, &AnswerGate { gate: g, status, note: None }).ok()
            })
        }
        36 => pick(rng).and_then(|t| {
            let req = OfferHandoff {
                to_host: AgentType::from_static("codex-app"),
                to_agent: Some(agent(if who == "a" { "b" } else { "a" })),
                todos: vec![t],
                note: None,
                ttl_secs: 600,
            };
            rules::offer_handoff(&sim.state, &Actor::Agent(agent(who)), &req, now).ok()
        }),
        _ => None,
    };
    if let Some(e) = event {
        let actor = if matches!(e, loopx_core::event::Event::TodoAdded { .. }) { "user" } else { who };
        sim.apply(actor, e);
    }
}

/// Over goals made at random, of up to a hundred steps, asked for each agent and for none at
/// three moments: a decision the glance vouches for is the whole state's, answer and all. It
/// vouches for a good share of the runs, so the check is not empty.
#[test]
fn what_a_glance_vouches_for_is_what_the_whole_state_decides() {
    let dir = tempfile::tempdir().unwrap();
    let (mut runs, mut vouched) = (0, 0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for goal in 0..400 {
        let mut sim = Sim::new().agents(&["a", "b"]);
        for _ in 0..rng.below(100) + goal % 7 {
            step(&mut sim, &mut rng);
        }
        let (g, counts) = glance(&sim.state, dir.path());
        for later in [0, 30_000, 120_000] {
            let now = Timestamp::from_unix_millis(sim.now.unix_millis() + later);
            for who in [None, Some(agent("a")), Some(agent("b"))] {
                let run = decide::decide(&sim.state, who.as_ref(), now)
                    .is_ok_and(|(_, d)| d.decision == loopx_core::decision::DecisionKind::Run);
                runs += usize::from(run);
                vouched += usize::from(agrees(&sim.state, &g, counts, who.as_ref(), now));
            }
        }
    }
    // Random goals often hold a gate, a handoff or a todo waiting for another, which the
    // glance leaves to the whole state; it still vouches for 909 of the 1,716 runs.
    assert!(vouched * 5 > runs * 2, "the glance vouched for {vouched} of {runs} runs");
}

/// A goal of `n` open agent todos of one priority, nobody holding any, and agent `a`.
fn goal_of(n: usize) -> Sim {
    let mut sim = Sim::new().agents(&["a"]);
    for _ in 0..n {
        sim.todo("work", Priority::P2);
    }
    sim
}

fn vouches(sim: &Sim, dir: &Path) -> bool {
    let (g, counts) = glance(&sim.state, dir);
    agrees(&sim.state, &g, counts, Some(&agent("a")), sim.now)
}

/// The glance holds the best free todos: when every one of them waits, the next runnable todo
/// is outside it, and the glance vouches for nothing (the whole state picks it).
#[test]
fn a_pick_past_the_glances_best_free_todos_is_left_to_the_whole_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(GLANCE_FREE + 1);
    assert!(vouches(&sim, dir.path()));
    let later = ResumeWhen::At(Timestamp::from_unix_millis(sim.now.unix_millis() + 3_600_000));
    let ids: Vec<_> = sim.state.todos.keys().map(|k| k.id).collect();
    for t in &ids[..GLANCE_FREE] {
        sim.defer(*t, later.clone());
    }
    assert!(!vouches(&sim, dir.path()));
    assert_eq!(sim.decide(Some("a")).selected, Some(ids[GLANCE_FREE]));
}

/// The glance holds the best free todos by priority, then age: an urgent todo added after many
/// others is in it, and is the one picked.
#[test]
fn the_glance_holds_the_best_free_todos_by_priority_then_age() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(2 * GLANCE_FREE);
    let urgent = sim.todo("urgent", Priority::P0);
    sim.todo("urgent too, but later", Priority::P0);
    let form = codec::encode_keys(&sim.state, 0).unwrap();
    let held = codec::glance_ids(&form);
    assert_eq!(held.len(), GLANCE_FREE);
    assert!(held.contains(&urgent));
    assert!(vouches(&sim, dir.path()));
    assert_eq!(sim.decide(Some("a")).selected, Some(urgent));
}

/// The todo `a` gets from the glance's own todos (as if it vouched), and from the whole state.
fn picks(sim: &Sim, dir: &Path) -> (Option<loopx_core::TodoId>, Option<loopx_core::TodoId>) {
    let (g, _) = glance(&sim.state, dir);
    let pick = |s: &GoalState| decide::decide(s, Some(&agent("a")), sim.now).unwrap().1.selected;
    (pick(&g), pick(&sim.state))
}

/// More held todos than a glance holds: the one it leaves out may rank first (an agent's own
/// todos come before free ones, by priority), so it vouches for nothing.
#[test]
fn a_glance_short_of_held_todos_vouches_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(GLANCE_HELD);
    let ids: Vec<_> = sim.state.todos.keys().map(|k| k.id).collect();
    for t in &ids {
        sim.claim("a", *t);
    }
    assert!(vouches(&sim, dir.path()), "{GLANCE_HELD} held todos fit");
    let urgent = sim.todo("urgent", Priority::P0);
    sim.claim("a", urgent);
    assert_eq!(picks(&sim, dir.path()), (Some(ids[0]), Some(urgent)), "the glance alone would miss it");
    assert!(!vouches(&sim, dir.path()));
}

/// More of a person's open todos than a glance holds: the answer counts them, so it vouches for
/// nothing.
#[test]
fn a_glance_short_of_a_persons_todos_vouches_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(1);
    for _ in 0..GLANCE_USER {
        sim.todo_with("a person's", Priority::P2, Role::User, TodoClass::Advance);
    }
    assert!(vouches(&sim, dir.path()), "{GLANCE_USER} of a person's todos fit");
    sim.todo_with("a person's", Priority::P2, Role::User, TodoClass::Advance);
    assert!(!vouches(&sim, dir.path()));
}

/// What the pick reads beyond the todos it ranks is never taken from a glance: a gate that may
/// hold todos back, a pending handoff, a todo in it waiting for another (which the glance may
/// not hold: one it does not hold would read as archived, and done).
#[test]
fn a_glance_vouches_for_nothing_that_reads_beyond_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(3);
    let ids: Vec<_> = sim.state.todos.keys().map(|k| k.id).collect();
    let mut gated = sim.clone();
    gated.gate(GateBlocks::Todos(vec![ids[2]]));
    assert!(!vouches(&gated, dir.path()));

    let mut handed = sim.clone().agents(&["b"]);
    handed.claim("b", ids[2]);
    handed.handoff("b", Some("a"), ids[2], 600);
    assert!(!vouches(&handed, dir.path()));

    let blocker = sim.todo_with("a blocker", Priority::P1, Role::Agent, TodoClass::Blocker);
    let waits = sim.todo("waits for the blocker", Priority::P0);
    sim.defer(waits, ResumeWhen::TodoDone(blocker));
    assert_eq!(picks(&sim, dir.path()), (Some(waits), Some(ids[0])), "the glance alone would take it");
    assert!(!vouches(&sim, dir.path()));
}

/// Only a run is taken from a glance: a goal whose work waits, or is finished, is decided on
/// the whole state.
#[test]
fn only_a_run_is_taken_from_a_glance() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = goal_of(1);
    let t = sim.state.todos.keys().next().unwrap().id;
    sim.defer(t, ResumeWhen::At(Timestamp::from_unix_millis(sim.now.unix_millis() + 60_000)));
    assert!(!vouches(&sim, dir.path()));
    let mut done = goal_of(1);
    done.complete(t, true);
    assert!(!vouches(&done, dir.path()));
}

/// A glance's todos are read from the body file the snapshot names: a glance holding todos
/// with none named is refused, and one holding none needs none.
#[test]
fn a_glance_holding_todos_needs_their_body_file() {
    let sim = goal_of(3);
    let form = codec::encode_keys(&sim.state, 0).unwrap();
    let src = Arc::new(form[..codec::glance_end(&form).unwrap()].to_vec());
    assert!(codec::decode_glance(&src, 0, None, vec![0, 1, 2]).is_err());
    assert!(codec::decode_glance(&src, 0, None, vec![0, 1]).is_err(), "an offset for each");
    let empty = Sim::new().agents(&["a"]);
    let form = codec::encode_keys(&empty.state, 0).unwrap();
    let (g, counts) = codec::decode_glance(&Arc::new(form), 0, None, vec![]).unwrap().unwrap();
    assert_eq!((g.todos.len(), counts), (0, Glance::default()));
}
