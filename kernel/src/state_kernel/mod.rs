//! [`StateKernel`]: the [`Kernel`] command surface over any [`Store`]; [`FileKernel`] is it
//! over the embedded file store.
//!
//! The struct and its construction are here; the [`Kernel`] impl (`surface`) hands each
//! command to the file of its area: goals and agents (`goals`), todos and evidence (`todos`),
//! claims and leases (`claims`), handoffs (`handoffs`), gates (`gates`), driven turns
//! (`turns`), the quota's slots (`slots`), host sessions (`sessions`), and what a goal shows
//! (`queries`). Beside them: one mutation and its replay (`mutate`), the commands loopx may
//! run (`commands`), and polling gates and sending notices (`notices`).
//!
//! [`Kernel`]: loopx_core::kernel::Kernel

mod claims;
mod commands;
mod gates;
mod goals;
mod handoffs;
mod mutate;
mod notices;
mod queries;
mod sessions;
mod slots;
mod surface;
mod todos;
mod turns;

use std::path::Path;
use std::sync::Arc;

use loopx_core::agent::{Cadence, HostCatalog};
use loopx_core::{Clock, Error, GoalId, Result};

use crate::Reporter;
use crate::decide;
use crate::state::GoalState;
use crate::store::{FileStore, InitOutcome, Store, StoreOptions};

pub use queries::Board;

/// The kernel over a store: the rules, the decision table and the gates, with the store
/// keeping what they commit.
#[derive(Debug)]
pub struct StateKernel<S: Store> {
    store: S,
    /// What gate checks and notices may use (none: timers only, nobody told).
    pub(crate) gates: crate::gates::GateRuntime,
    /// The host types this loopx knows, and how each is paced (none: every agent generically).
    hosts: Arc<HostCatalog>,
}

/// The kernel over the embedded file store.
pub type FileKernel = StateKernel<FileStore>;

/// The kernel over the store a project names (the command line's).
pub type DynKernel = StateKernel<Box<dyn Store>>;

/// The kernel over the in-memory store (tests and simulations).
pub type MemKernel = StateKernel<crate::MemStore>;

impl FileKernel {
    /// Opens the project at `root` (the directory holding `.loopx/`).
    pub fn open(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Self> {
        Ok(Self::over(FileStore::open(root, clock, reporter, options)?))
    }

    /// Creates or reuses `.loopx/` at `root`.
    pub fn init(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<(Self, InitOutcome)> {
        let (store, outcome) = FileStore::init(root, clock, reporter, options)?;
        Ok((Self::over(store), outcome))
    }
}

impl<S: Store> StateKernel<S> {
    /// The kernel over `store`.
    pub fn over(store: S) -> Self {
        Self { store, gates: Default::default(), hosts: Arc::default() }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// The providers gate checks and notices use, and whether should-run checks gates itself.
    pub fn with_gates(mut self, gates: crate::gates::GateRuntime) -> Self {
        self.gates = gates;
        self
    }

    /// The host catalog should-run paces agents by (their adapters' cadences).
    pub fn with_hosts(mut self, hosts: Arc<HostCatalog>) -> Self {
        self.hosts = hosts;
        self
    }

    /// How should-run paces: `forced` if the caller named a profile, else as the catalog paces
    /// the agent's host.
    fn pacing<'a>(&'a self, forced: Option<&'a Cadence>) -> decide::Pacing<'a> {
        decide::Pacing { hosts: &self.hosts, forced }
    }

    /// The goal a command addresses: the one named, or the project's default.
    pub fn resolve_goal(&self, goal: Option<&GoalId>) -> Result<GoalId> {
        let project = self.store.project()?;
        match goal {
            Some(g) if project.has_goal(g) => Ok(g.clone()),
            Some(g) => Err(Error::not_found(format!("goal {g} not found in this project")).with_hint(format!(
                "create it with: loopx goal create --goal-id {g} --objective \"…\" (or see loopx goal list)"
            ))),
            None => project.default_goal.ok_or_else(|| {
                Error::not_found("this project has no goal yet")
                    .with_hint("create one with: loopx goal create --goal-id main --objective \"…\"")
            }),
        }
    }

    pub(crate) fn read(&self, goal: Option<&GoalId>) -> Result<Arc<GoalState>> {
        self.store.read(&self.resolve_goal(goal)?)
    }

    /// What time it is for this kernel: its store's clock.
    pub fn now(&self) -> loopx_core::Timestamp {
        self.store.clock().now()
    }
}
