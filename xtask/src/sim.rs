//! `cargo xtask sim`: the deterministic simulation of long-running goals (`loopx_kernel::sim`)
//! for a range of seeds, with a summary per seed and in all.

use std::time::Instant;

use anyhow::{Context, Result, bail};

use loopx_kernel::sim::{self, SimConfig};
use loopx_kernel::testkit::block_on;

/// What to run.
#[derive(Debug)]
pub struct Options {
    pub first_seed: u64,
    pub seeds: u64,
    pub hours: u64,
    pub agents: usize,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = Options { first_seed: 1, seeds: 20, hours: 200, agents: 4 };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| -> Result<u64> {
                it.next()
                    .with_context(|| format!("{name} needs a number"))?
                    .parse()
                    .with_context(|| format!("{name} needs a number"))
            };
            match a.as_str() {
                "--seed" => {
                    o.first_seed = value("--seed")?;
                    o.seeds = 1;
                }
                "--seeds" => o.seeds = value("--seeds")?,
                "--hours" => o.hours = value("--hours")?,
                "--agents" => o.agents = usize::try_from(value("--agents")?)?,
                other => bail!("unknown sim option {other:?}"),
            }
        }
        if o.seeds == 0 || o.hours == 0 || o.agents == 0 {
            bail!("--seeds, --hours and --agents must be at least 1");
        }
        Ok(o)
    }
}

pub fn run(o: &Options) -> Result<()> {
    let start = Instant::now();
    let (mut steps, mut events, mut checks, mut spends) = (0, 0, 0, 0);
    for seed in o.first_seed..o.first_seed + o.seeds {
        let cfg = SimConfig { seed, hours: o.hours, agents: o.agents, plant: None };
        let s = match block_on(sim::run(&cfg)) {
            Ok(s) => s,
            Err(v) => {
                eprint!("{v}");
                bail!("seed {seed} broke an invariant: {}", v.invariant);
            }
        };
        if o.seeds <= 20 {
            println!(
                "seed {seed}: {} h, {} steps, {} turns, {} settled, {} spends, {} gates asked / {} answered, {} duplicate deliveries, {} refusals, {} clock jumps, {} events, {} checks; trace {}",
                s.simulated_hours,
                s.steps,
                s.turns,
                s.settled,
                s.spends,
                s.gates_asked,
                s.gates_answered,
                s.duplicate_deliveries,
                s.refusals,
                s.clock_jumps,
                s.events,
                s.invariants_checked,
                &s.trace_hash[..16]
            );
        }
        steps += s.steps;
        events += s.events;
        checks += s.invariants_checked;
        spends += s.spends;
    }
    println!(
        "{} seed(s) × {} simulated hours, {} agents: {steps} steps, {events} events, {spends} spends, {checks} invariant checks, 0 violations, {:.1} s",
        o.seeds,
        o.hours,
        o.agents,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
