//! The deterministic simulation (`loopx_testkit::sim`, `cargo xtask sim`): a fixed set of seeds
//! runs 200 simulated hours each on both stores with every invariant holding (on the file
//! store with processes killed mid-commit, torn writes, held locks and full disks); a seed
//! replays its trace byte for byte; a planted bug is caught with the invariant it breaks, a
//! seed that replays it, and a shrunk trace that fails the same way; the bugs the simulation
//! found stay fixed.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use loopx_core::kernel::{
    AddTodo, CommandContext, CompleteTodo, CreateGoal, Kernel, NewEvidence, RefreshState, RegisterAgent,
    SettleTurn, SpendSlot,
};
use loopx_core::model::{DeliveryOutcome, EvidenceKind, Priority};
use loopx_core::{AgentId, FixedClock, GoalId, IdempotencyKey, Timestamp, TodoId};
use loopx_kernel::{MemKernel, MemStore, Silent};
use loopx_testkit::block_on;
use loopx_testkit::sim::{self, Plant, SimConfig, SimStore, Violation};

fn config(seed: u64, store: SimStore, plant: Option<Plant>) -> SimConfig {
    SimConfig { plant, ..SimConfig::new(seed, 200, 4, store, &std::env::temp_dir()) }
}

/// Seeds `seeds`, 200 simulated hours each: no invariant broken, each run did real work, and
/// the seeds together exercised handoffs, leases, cadences (and, on files, crashes and faults).
fn hold(seeds: std::ops::RangeInclusive<u64>, store: SimStore) {
    let mut all = Vec::new();
    for seed in seeds {
        let s = block_on(sim::run(&config(seed, store, None))).unwrap_or_else(|v| panic!("{v}"));
        assert!(s.steps > 500 && s.spends > 10 && s.gates_answered > 0 && s.refusals > 0, "{s:?}");
        all.push(s);
    }
    let sum = |f: fn(&sim::Summary) -> u64| all.iter().map(f).sum::<u64>();
    assert!(sum(|s| s.duplicate_deliveries) > 0 && sum(|s| s.handoffs_accepted) > 0, "{all:?}");
    assert!(sum(|s| s.leases) > 0 && sum(|s| s.backoffs) > 0 && sum(|s| s.failed_checks) > 0, "{all:?}");
    if store == SimStore::Files {
        assert!(sum(|s| s.crashes) > 0 && sum(|s| s.faults) > 0, "faults were injected: {all:?}");
    }
}

#[test]
fn two_hundred_simulated_hours_hold_every_invariant_in_memory_seeds_1_to_4() {
    hold(1..=4, SimStore::Memory);
}

#[test]
fn two_hundred_simulated_hours_hold_every_invariant_in_memory_seeds_5_to_8() {
    hold(5..=8, SimStore::Memory);
}

#[test]
fn two_hundred_simulated_hours_on_files_with_crashes_hold_every_invariant_seeds_1_to_3() {
    hold(1..=3, SimStore::Files);
}

#[test]
fn two_hundred_simulated_hours_on_files_with_crashes_hold_every_invariant_seeds_4_to_6() {
    hold(4..=6, SimStore::Files);
}

#[test]
fn a_seed_replays_its_trace_exactly() {
    for store in [SimStore::Memory, SimStore::Files] {
        let a = block_on(sim::run(&config(42, store, None))).unwrap();
        let b = block_on(sim::run(&config(42, store, None))).unwrap();
        let c = block_on(sim::run(&config(43, store, None))).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.trace_hash, c.trace_hash);
    }
}

/// The first of seeds 1–20 on which `plant` is caught.
fn caught(plant: Plant, store: SimStore) -> Box<Violation> {
    let found = (1..=20).find_map(|seed| block_on(sim::run(&config(seed, store, Some(plant)))).err());
    found.unwrap_or_else(|| panic!("the planted {plant:?} went unnoticed in 20 seeds"))
}

/// The violation replays exactly from its seed, and shrinks to a shorter trace that breaks
/// the same invariant and replays too.
fn replays_and_shrinks(v: &Violation) {
    let again = block_on(sim::run(&v.config)).unwrap_err();
    assert_eq!((again.step, again.invariant, &again.detail), (v.step, v.invariant, &v.detail));
    assert!(v.to_string().contains(&format!("cargo xtask sim --seed {} --store", v.config.seed)), "{v}");
    let short = block_on(sim::shrink(v, 300));
    let kept = short.config.steps.as_ref().expect("a shrunk run names its steps");
    assert_eq!(short.invariant, v.invariant, "{short}");
    assert!(kept.len() < usize::try_from(v.step).unwrap() / 4, "{} of {} steps: {short}", kept.len(), v.step);
    assert!(short.trace.iter().any(|l| l.contains("PLANTED")), "{short}");
    assert!(short.to_string().contains(" --steps "), "{short}");
    let replayed = block_on(sim::run(&short.config)).unwrap_err();
    assert_eq!((replayed.step, replayed.invariant), (short.step, short.invariant));
}

#[test]
fn a_planted_spend_before_writeback_is_caught_replayed_and_shrunk() {
    let v = caught(Plant::SpendBeforeWriteback, SimStore::Memory);
    assert_eq!(v.invariant, "no spend without its writeback", "{v}");
    assert!(v.trace.iter().any(|l| l.contains("PLANTED")), "{v}");
    replays_and_shrinks(&v);
}

#[test]
fn a_planted_claim_without_the_lock_is_caught_on_the_file_store() {
    let v = caught(Plant::ClaimWithoutLock, SimStore::Files);
    assert_eq!(v.invariant, "one holder per todo", "{v}");
    replays_and_shrinks(&v);
}

/// Found by the simulation (seed 5 on the file store, shrunk to steps 103, 106, 107, 118): a
/// turn settled in one commit, the process killed before it answered, and the host delivering
/// the turn's end again by complete, refresh-state and spend-slot. The second writeback opened
/// a second run to spend on, and the turn spent twice.
#[test]
fn regression_a_turn_settled_then_written_back_again_spends_once() {
    let trace =
        SimConfig { steps: Some(BTreeSet::from([103, 106, 107, 118])), ..config(5, SimStore::Files, None) };
    block_on(sim::run(&trace)).unwrap_or_else(|v| panic!("{v}"));

    let store = MemStore::new(
        Path::new("/nonexistent/regression"),
        Arc::new(FixedClock(Timestamp::from_unix_millis(1_767_225_600_000))),
        Arc::new(Silent),
    );
    let k = MemKernel::over(store);
    let goal = GoalId::new("g").unwrap();
    let create = CreateGoal { id: goal.clone(), objective: "o".into(), title: None, make_default: true };
    block_on(k.create_goal(create)).unwrap();
    let cc = AgentId::new("cc").unwrap();
    let ctx = |turn: Option<&str>| CommandContext {
        goal: Some(goal.clone()),
        agent: Some(cc.clone()),
        key: turn.map(|t| IdempotencyKey::new(t).unwrap()),
        session: None,
        signer: None,
    };
    let user = CommandContext { agent: Some(AgentId::new("user").unwrap()), ..ctx(None) };
    let register = RegisterAgent {
        id: cc.clone(),
        agent_type: loopx_core::agent::AgentType::from_static("claude-code"),
        require_new: true,
    };
    block_on(k.register_agent(&user, register)).unwrap();
    block_on(k.add_todo(&user, AddTodo::agent("parse", Priority::P1))).unwrap();
    let t1 = TodoId::from_number(1);
    let turn = ctx(Some("turn-1"));
    block_on(k.claim_todo(&turn, t1)).unwrap();
    let complete = CompleteTodo {
        todo: t1,
        evidence: Some(NewEvidence {
            kind: EvidenceKind::Test,
            summary: "tests pass".into(),
            command: None,
            exit_code: Some(0),
            link: None,
        }),
        no_follow_up: true,
        note: None,
        next_todo: None,
    };
    let settle = SettleTurn {
        complete: complete.clone(),
        classification: "implement".into(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        slots: 1,
        tokens: Some(100),
        usd: None,
    };
    let settled = block_on(k.settle_turn(&turn, settle)).unwrap();
    // The same turn's end again, by the three commands.
    block_on(k.complete_todo(&turn, complete)).unwrap();
    let refresh = RefreshState {
        todo: t1,
        classification: "implement".into(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        next_action: None,
    };
    let written = block_on(k.refresh_state(&turn, refresh.clone())).unwrap();
    assert!(!written.changed, "the turn's writeback stands");
    assert_eq!(written.body.run.id, settled.body.run);
    let spend = SpendSlot { todo: t1, slots: 1, tokens: Some(100), usd: None, dry_run: false };
    let err = block_on(k.spend_slot(&turn, spend)).unwrap_err();
    assert!(err.message.contains("already accounted"), "{err:?}");
    // Nor does the closed turn go on to other work.
    block_on(k.add_todo(&user, AddTodo::agent("print", Priority::P1))).unwrap();
    let other = RefreshState { todo: TodoId::from_number(2), ..refresh };
    let err = block_on(k.refresh_state(&turn, other)).unwrap_err();
    assert!(err.message.contains("already wrote back t1 and spent on it"), "{err:?}");
    let state = block_on(k.quota_status(Some(&goal))).unwrap();
    assert_eq!(state.quota.used_slots, 1, "{state:?}");
}
