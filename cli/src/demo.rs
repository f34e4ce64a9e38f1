//! `loopx demo`: the scripted goal lives in `loopx-machine` ([`loopx_machine::demo`]); the CLI
//! hands it what it reads from the machine (a fresh temporary directory, the time, the process
//! runner) and prints its report.

use std::path::PathBuf;
use std::sync::Arc;

use loopx_core::{Clock as _, Error, Result};
use loopx_kernel::SystemClock;
use loopx_machine::demo::{self, Stage};

use crate::output::Rendered;

/// Runs the demo. The project is removed afterwards unless `keep`.
pub async fn run(keep: bool) -> Result<Rendered> {
    let now = SystemClock.now();
    let root = temp_project()?;
    let stage = Stage { root, keep, now, processes: Arc::new(loopx_providers::ProcessProvider) };
    let report = demo::run(stage).await?;
    Rendered::new(&report, demo::render(&report))
}

/// A fresh directory for the demo's project.
fn temp_project() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("loopx-demo-{}-{nanos:09}", std::process::id()));
    std::fs::create_dir(&dir)
        .map_err(|e| Error::internal(format!("cannot create the demo project {}: {e}", dir.display())))?;
    Ok(dir)
}
