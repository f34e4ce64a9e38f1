//! `loopx store migrate`: a project's goals copied from one store into another, line for
//! line (so each hash chain carries over unchanged), verified on both sides; then the project
//! directory is pointed at its new home. Nothing is deleted: the file store's goals are kept
//! beside the new ones, a database's rows stay where they are.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopx_core::{Clock, Error, GoalId, Result, Timestamp};
use loopx_kernel::{Reporter, StoreOptions};

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
fn point_at(root: &Path, store: &StoreRef, stamp: &str) -> Result<Option<PathBuf>> {
    let layout = Layout::new(root);
    let kept = move_aside(&layout, &format!("goals.before-{}-{stamp}", store.kind))?;
    write_project(&layout, &ProjectFile { store: Some(store.clone()), ..ProjectFile::new() })?;
    Ok(kept)
}

/// A file store to copy goals into before they become the project's at `root`:
/// `.loopx/migrate-<stamp>/`, a project directory of its own.
fn staging_store(
    root: &Path,
    stamp: &str,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: StoreOptions,
) -> Result<(PathBuf, loopx_kernel::FileStore)> {
    let dir = Layout::new(root).state_dir().join(format!("migrate-{stamp}"));
    kfs::create_dir_all(&dir)?;
    let (store, _) = loopx_kernel::FileStore::init(&dir, clock, reporter, options)?;
    Ok((dir, store))
}

/// Makes the file store staged at `staging` (a project directory of its own, filled by
/// [`copy_goals`]) the project's at `root`: its goals and `project.json` move in, and the
/// staging directory is removed.
fn adopt_staged(root: &Path, staging: &Path, stamp: &str) -> Result<Option<PathBuf>> {
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

/// What a move of the project in `from` would copy: its goals, and their events in all.
pub fn planned(from: &dyn Store) -> Result<(Vec<GoalId>, usize)> {
    let goals: Vec<GoalId> = from.project()?.goals.into_iter().map(|g| g.id).collect();
    let mut events = 0;
    for g in &goals {
        events += from.scan(g)?.lines.len();
    }
    Ok((goals, events))
}

/// A move's stamp, from the time it starts: the names of what it keeps aside.
fn stamp(now: Timestamp) -> String {
    now.to_string().chars().filter(char::is_ascii_alphanumeric).collect()
}

/// Moves the project at `root` from `from` into files in its `.loopx/`: copied into a staging
/// store, then adopted. The goals copied, and where the file store's earlier goals are kept.
pub fn to_files(
    root: &Path,
    from: &dyn Store,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: StoreOptions,
) -> Result<(Vec<CopiedGoal>, Option<PathBuf>)> {
    let stamp = stamp(clock.now());
    let (dir, staged) = staging_store(root, &stamp, clock, reporter, options)?;
    let copied = copy_goals(from, &staged)?;
    drop(staged);
    Ok((copied, adopt_staged(root, &dir, &stamp)?))
}

/// Moves the project at `root` from `from` into `to` (the store `store` names), then points the
/// project at it. The goals copied, and where the file store's goals are kept.
pub fn to_store(
    root: &Path,
    from: &dyn Store,
    store: &StoreRef,
    to: &dyn Store,
    now: Timestamp,
) -> Result<(Vec<CopiedGoal>, Option<PathBuf>)> {
    let copied = copy_goals(from, to)?;
    Ok((copied, point_at(root, store, &stamp(now))?))
}
