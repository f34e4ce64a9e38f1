//! `cargo xtask sim`: the deterministic simulation of long-running goals (`loopx_testkit::sim`)
//! for a range of seeds on each store, with a summary per seed and in all. A failing seed is
//! shrunk to the fewest steps that still fail, and printed with the command that replays it.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use loopx_testkit::block_on;
use loopx_testkit::sim::{self, SimConfig, SimStore, Summary, Violation};

/// What to run.
#[derive(Debug)]
pub struct Options {
    pub first_seed: u64,
    pub seeds: u64,
    pub hours: u64,
    pub agents: usize,
    pub stores: Vec<SimStore>,
    /// Only these steps act (a shrunk trace, replayed).
    pub steps: Option<BTreeSet<u64>>,
    pub jobs: usize,
    /// Print each run's whole trace on stderr.
    pub trace: bool,
}

/// Runs a failing seed may spend on shrinking.
const SHRINK_BUDGET: usize = 400;

impl Options {
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = Options {
            first_seed: 1,
            seeds: 20,
            hours: 200,
            agents: 4,
            stores: vec![SimStore::Memory, SimStore::Files],
            steps: None,
            jobs: 1,
            trace: false,
        };
        // `--seed N` alone is that one seed; with `--seeds K`, K seeds from N.
        let mut seeds = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut text = |name: &str| it.next().with_context(|| format!("{name} needs a value")).cloned();
            let number =
                |name: &str, v: String| v.parse::<u64>().with_context(|| format!("{name} needs a number"));
            match a.as_str() {
                "--seed" => o.first_seed = number("--seed", text("--seed")?)?,
                "--seeds" => seeds = Some(number("--seeds", text("--seeds")?)?),
                "--hours" => o.hours = number("--hours", text("--hours")?)?,
                "--agents" => o.agents = usize::try_from(number("--agents", text("--agents")?)?)?,
                "--trace" => o.trace = true,
                "--jobs" => o.jobs = usize::try_from(number("--jobs", text("--jobs")?)?)?,
                "--store" => {
                    o.stores = match text("--store")?.as_str() {
                        "memory" => vec![SimStore::Memory],
                        "files" => vec![SimStore::Files],
                        "both" => vec![SimStore::Memory, SimStore::Files],
                        other => bail!("--store is memory, files or both, not {other:?}"),
                    }
                }
                "--steps" => {
                    let list = text("--steps")?;
                    let steps = list
                        .split(',')
                        .map(|s| {
                            s.trim().parse::<u64>().with_context(|| format!("--steps: {s:?} is not a step"))
                        })
                        .collect::<Result<BTreeSet<u64>>>()?;
                    o.steps = Some(steps);
                }
                other => bail!("unknown sim option {other:?}"),
            }
        }
        let one = args.iter().any(|a| a == "--seed");
        o.seeds = seeds.unwrap_or(if one { 1 } else { o.seeds });
        if o.seeds == 0 || o.hours == 0 || o.agents == 0 || o.jobs == 0 {
            bail!("--seeds, --hours, --agents and --jobs must be at least 1");
        }
        Ok(o)
    }
}

fn echo(line: &str) {
    eprintln!("{line}");
}

fn line(store: SimStore, s: &Summary) -> String {
    format!(
        "seed {} ({}): {} h, {} steps, {} turns, {} settled, {} spends, {} gates asked / {} answered, {} handoffs offered / {} taken, {} leases, {} takeovers, {} checks failed, {} backoffs kept, {} duplicate deliveries, {} refusals, {} clock jumps, {} crashes, {} other faults, {} events, {} checks; trace {}",
        s.seed,
        store.name(),
        s.simulated_hours,
        s.steps,
        s.turns,
        s.settled,
        s.spends,
        s.gates_asked,
        s.gates_answered,
        s.handoffs_offered,
        s.handoffs_accepted,
        s.leases,
        s.takeovers,
        s.failed_checks,
        s.backoffs,
        s.duplicate_deliveries,
        s.refusals,
        s.clock_jumps,
        s.crashes,
        s.faults,
        s.events,
        s.invariants_checked,
        &s.trace_hash[..16]
    )
}

pub fn run(o: &Options) -> Result<()> {
    let start = Instant::now();
    let runs: Vec<SimConfig> = o
        .stores
        .iter()
        .flat_map(|store| {
            (o.first_seed..o.first_seed + o.seeds).map(|seed| SimConfig {
                steps: o.steps.clone(),
                echo: o.trace.then_some(echo as fn(&str)),
                ..SimConfig::new(seed, o.hours, o.agents, *store, &std::env::temp_dir())
            })
        })
        .collect();
    let next = AtomicU64::new(0);
    let done: Mutex<Vec<(SimConfig, Summary)>> = Mutex::new(Vec::new());
    let failed: Mutex<Option<Box<Violation>>> = Mutex::new(None);
    let verbose = runs.len() <= 40;
    std::thread::scope(|scope| {
        for _ in 0..o.jobs.min(runs.len()) {
            scope.spawn(|| {
                loop {
                    let i = usize::try_from(next.fetch_add(1, Ordering::SeqCst)).unwrap_or(usize::MAX);
                    let Some(cfg) = runs.get(i) else { break };
                    if failed.lock().is_ok_and(|f| f.is_some()) {
                        break;
                    }
                    let began = Instant::now();
                    match block_on(sim::run(cfg)) {
                        Ok(s) => {
                            if verbose {
                                println!("{}, {:.1} s", line(cfg.store, &s), began.elapsed().as_secs_f64());
                            }
                            if let Ok(mut d) = done.lock() {
                                d.push((cfg.clone(), s));
                                if !verbose && d.len() % 100 == 0 {
                                    eprintln!(
                                        "sim: {} of {} runs, 0 violations, {:.0} s",
                                        d.len(),
                                        runs.len(),
                                        start.elapsed().as_secs_f64()
                                    );
                                }
                            }
                        }
                        Err(v) => {
                            if let Ok(mut f) = failed.lock() {
                                f.get_or_insert(v);
                            }
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(v) = failed.into_inner().ok().flatten() {
        eprint!("{v}");
        eprintln!("shrinking (at most {SHRINK_BUDGET} runs)…");
        let short = block_on(sim::shrink(&v, SHRINK_BUDGET));
        let kept = short.config.steps.as_ref().map_or(0, BTreeSet::len);
        if short.step == v.step && kept == usize::try_from(v.step).unwrap_or(usize::MAX) {
            eprintln!("no shorter failure found");
        } else {
            eprintln!("the shortest failure found, {kept} step(s) of {}:", v.step);
            eprint!("{short}");
        }
        bail!("seed {} ({}) broke an invariant: {}", v.config.seed, v.config.store.name(), v.invariant);
    }
    let done = done.into_inner().unwrap_or_default();
    let total = |f: fn(&Summary) -> u64| done.iter().map(|(_, s)| f(s)).sum::<u64>();
    println!(
        "{} run(s) ({} seed(s) × {} store(s)) × {} simulated hours, {} agents: {} steps, {} events, {} spends, {} handoffs taken, {} crashes, {} other faults, {} invariant checks, 0 violations, {:.1} s",
        done.len(),
        o.seeds,
        o.stores.len(),
        o.hours,
        o.agents,
        total(|s| s.steps),
        total(|s| s.events),
        total(|s| s.spends),
        total(|s| s.handoffs_accepted),
        total(|s| s.crashes),
        total(|s| s.faults),
        total(|s| s.invariants_checked),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
