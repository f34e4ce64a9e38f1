//! `loopx store migrate`: a project's goals copied from one store into another, line for
//! line (so each hash chain carries over unchanged), verified on both sides; then the project
//! directory is pointed at its new home. Nothing is deleted: the file store's goals are kept
//! beside the new ones, a database's rows stay where they are.

use std::fs;
use std::path::{Path, PathBuf};

use loopx_core::{Error, GoalId, Result};

use loopx_kernel::fs as kfs;
use loopx_kernel::project::{Layout, ProjectFile, StoreRef};
use loopx_kernel::store::{Store, read_project, write_project_file as write_project};

/// One goal as copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopiedGoal {
    pub id: GoalId,
    pub events: u64,
    /// The log's head, the same on both sides.
    pub head: String,
}

/// Copies every goal of `from` into `to`, which must hold none of them, and lists them in
/// `to`'s project (keeping `from`'s default goal when `to` has none). Each copy's chain and
/// replay are verified by `to` before it is kept, and its head compared with `from`'s after.
pub fn copy_goals(from: &dyn Store, to: &dyn Store) -> Result<Vec<CopiedGoal>> {
    let source = from.project()?;
    let target = to.project()?;
    if let Some(g) = source.goals.iter().find(|g| target.has_goal(&g.id)) {
        return Err(Error::conflict(format!(
            "goal {} exists in the target already; nothing was copied",
            g.id
        ))
        .with_hint("migrate into an empty project (another --store-project name)"));
    }
    let mut copied = Vec::new();
    for g in &source.goals {
        let lines = from.log_lines(&g.id)?;
        to.import_goal(&g.id, &lines)?;
        let (before, after) = (from.scan(&g.id)?, to.scan(&g.id)?);
        if before.head() != after.head() || before.lines.len() != after.lines.len() {
            return Err(Error::integrity(format!(
                "goal {}: the copy's log does not end where the original's does",
                g.id
            )));
        }
        copied.push(CopiedGoal {
            id: g.id.clone(),
            events: after.lines.len() as u64,
            head: after.head().to_owned(),
        });
    }
    to.update_project(&mut |p| {
        p.goals.extend(source.goals.iter().cloned());
        if p.default_goal.is_none() {
            p.default_goal.clone_from(&source.default_goal);
        }
        Ok(true)
    })?;
    Ok(copied)
}

/// Points the project at `root` to `store`: its file-store goals (if any) move to
/// `.loopx/goals.before-<kind>-<stamp>`, and `project.json` names the store. Returns where the
/// old goals went.
pub fn point_at(root: &Path, store: &StoreRef, stamp: &str) -> Result<Option<PathBuf>> {
    let layout = Layout::new(root);
    let kept = move_aside(&layout, &format!("goals.before-{}-{stamp}", store.kind))?;
    write_project(&layout, &ProjectFile { store: Some(store.clone()), ..ProjectFile::new() })?;
    Ok(kept)
}

/// A file store to copy goals into before they become the project's at `root`:
/// `.loopx/migrate-<stamp>/`, a project directory of its own.
pub fn staging_store(
    root: &Path,
    stamp: &str,
    clock: std::sync::Arc<dyn loopx_core::Clock>,
    reporter: std::sync::Arc<dyn loopx_kernel::Reporter>,
    options: loopx_kernel::StoreOptions,
) -> Result<(PathBuf, loopx_kernel::FileStore)> {
    let dir = Layout::new(root).state_dir().join(format!("migrate-{stamp}"));
    kfs::create_dir_all(&dir)?;
    let (store, _) = loopx_kernel::FileStore::init(&dir, clock, reporter, options)?;
    Ok((dir, store))
}

/// Makes the file store staged at `staging` (a project directory of its own, filled by
/// [`copy_goals`]) the project's at `root`: its goals and `project.json` move in, and the
/// staging directory is removed.
pub fn adopt_staged(root: &Path, staging: &Path, stamp: &str) -> Result<Option<PathBuf>> {
    let (layout, staged) = (Layout::new(root), Layout::new(staging));
    let project = read_project(&staged)?;
    let kept = move_aside(&layout, &format!("goals.before-file-{stamp}"))?;
    if staged.goals_dir().exists() {
        rename(&staged.goals_dir(), &layout.goals_dir())?;
    }
    write_project(&layout, &project)?;
    fs::remove_dir_all(staging).map_err(|e| Error::io("remove", staging, &e))?;
    Ok(kept)
}

fn move_aside(layout: &Layout, name: &str) -> Result<Option<PathBuf>> {
    let goals = layout.goals_dir();
    if !goals.exists() {
        return Ok(None);
    }
    let to = layout.state_dir().join(name);
    rename(&goals, &to)?;
    Ok(Some(to))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| Error::io("move", from, &e))?;
    if let Some(dir) = to.parent() {
        kfs::sync_dir(dir)?;
    }
    Ok(())
}

/// Refuses a move to the store the project is in already (`place` says where that is).
pub fn refuse_same_store(from: &Option<StoreRef>, to: &Option<StoreRef>, place: &str) -> Result<()> {
    if from == to {
        return Err(Error::refused(format!("the project keeps its state in {place} already")));
    }
    Ok(())
}
