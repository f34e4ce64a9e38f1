//! The deterministic simulation (`loopx_kernel::sim`, `cargo xtask sim`): a fixed set of seeds
//! runs 200 simulated hours each with every invariant holding; a seed replays its trace byte
//! for byte; a planted bug is caught with the invariant it breaks and a seed that replays it.

use loopx_kernel::sim::{self, Plant, SimConfig};
use loopx_kernel::testkit::block_on;

fn config(seed: u64, plant: Option<Plant>) -> SimConfig {
    SimConfig { seed, hours: 200, agents: 4, plant }
}

/// Seeds `seeds`, 200 simulated hours each: no invariant broken, and each run did real work.
fn hold(seeds: std::ops::RangeInclusive<u64>) {
    for seed in seeds {
        let s = block_on(sim::run(&config(seed, None))).unwrap_or_else(|v| panic!("{v}"));
        assert!(
            s.steps > 500 && s.spends > 10 && s.gates_answered > 0 && s.duplicate_deliveries > 0,
            "{s:?}"
        );
        assert!(s.refusals > 0, "rogue agents are refused: {s:?}");
    }
}

#[test]
fn two_hundred_simulated_hours_hold_every_invariant_seeds_1_to_4() {
    hold(1..=4);
}

#[test]
fn two_hundred_simulated_hours_hold_every_invariant_seeds_5_to_8() {
    hold(5..=8);
}

#[test]
fn a_seed_replays_its_trace_exactly() {
    let a = block_on(sim::run(&config(42, None))).unwrap();
    let b = block_on(sim::run(&config(42, None))).unwrap();
    let c = block_on(sim::run(&config(43, None))).unwrap();
    assert_eq!(a, b);
    assert_ne!(a.trace_hash, c.trace_hash);
}

#[test]
fn a_planted_spend_before_writeback_is_caught_and_replays() {
    let caught =
        (1..=20).find_map(|seed| block_on(sim::run(&config(seed, Some(Plant::SpendBeforeWriteback)))).err());
    let v = caught.expect("the planted bug went unnoticed in 20 seeds");
    assert_eq!(v.invariant, "no spend without its writeback", "{v}");
    assert!(v.trace.iter().any(|l| l.contains("PLANTED")), "{v}");
    let again = block_on(sim::run(&config(v.seed, Some(Plant::SpendBeforeWriteback)))).unwrap_err();
    assert_eq!((again.step, again.invariant, &again.detail), (v.step, v.invariant, &v.detail));
    assert!(v.to_string().contains(&format!("cargo xtask sim --seed {}", v.seed)));
}
