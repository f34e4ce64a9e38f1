//! The user's index of projects (`loopx projects`): which project directories `loopx status
//! --all` (and a dashboard) look into. Opt-in and user-level: a JSON file in the user's
//! configuration directory, which the caller names. It holds paths only, never state.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use loopx_core::kernel::{Kernel, StatusView};
use loopx_core::model::{GoalStatus, Priority};
use loopx_core::{Error, GoalId, Result, Timestamp};

use loopx_kernel::DynKernel;
use loopx_kernel::fs as kfs;

/// The version of the index file this build reads and writes.
pub(crate) const INDEX_SCHEMA_VERSION: u32 = 1;

/// `projects.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectsIndex {
    pub schema_version: u32,
    pub projects: Vec<IndexedProject>,
}

/// One project directory in the index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedProject {
    /// The directory holding `.loopx/`, absolute.
    pub path: PathBuf,
    pub added_at: Timestamp,
}

/// The index at `path`; an absent file is an empty index, a damaged one is refused.
pub fn read(path: &Path) -> Result<ProjectsIndex> {
    let hint = "fix or remove the file; loopx projects add DIR writes a new one";
    let index = kfs::read_config(path, "a loopx projects index", hint, INDEX_SCHEMA_VERSION)?;
    Ok(index.unwrap_or(ProjectsIndex { schema_version: INDEX_SCHEMA_VERSION, projects: Vec::new() }))
}

/// Changes the index at `path` with `f` (which says whether it changed anything), writing it
/// atomically when it did. Returns the index as it is after.
pub fn update(path: &Path, f: impl FnOnce(&mut ProjectsIndex) -> bool) -> Result<ProjectsIndex> {
    let mut index = read(path)?;
    if f(&mut index) {
        if let Some(dir) = path.parent() {
            kfs::create_dir_all(dir)?;
        }
        let mut bytes = serde_json::to_vec_pretty(&index)
            .map_err(|e| Error::internal(format!("cannot encode the projects index: {e}")))?;
        bytes.push(b'\n');
        kfs::atomic_write(path, &bytes)?;
    }
    Ok(index)
}

/// Adds the project at `root` (absolute) to the index at `path`; whether it was added (not
/// there yet), and the index as it is now.
pub fn add(path: &Path, root: &Path, now: Timestamp) -> Result<(bool, ProjectsIndex)> {
    let mut added = false;
    let index = update(path, |i| {
        added = !i.projects.iter().any(|p| p.path == root);
        if added {
            i.projects.push(IndexedProject { path: root.to_path_buf(), added_at: now });
        }
        added
    })?;
    Ok((added, index))
}

/// Takes the project at `root` out of the index at `path` (its files stay as they are); a
/// directory not in the index is not found.
pub fn remove(path: &Path, root: &Path) -> Result<()> {
    let mut removed = false;
    update(path, |i| {
        let before = i.projects.len();
        i.projects.retain(|p| p.path != root);
        removed = i.projects.len() < before;
        removed
    })?;
    if !removed {
        return Err(Error::not_found(format!("{} is not in the projects index", root.display()))
            .with_hint("see the index with: loopx projects list"));
    }
    Ok(())
}

/// One thing a person is needed for.
#[derive(Clone, Debug, Serialize)]
pub struct Need {
    pub project: PathBuf,
    pub goal: GoalId,
    /// `stopped`, `paused`, `budget`, `finished`, `gate`, `user_todo` or `stalled`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub text: String,
    /// The command that acts on it.
    pub command: String,
    #[serde(skip)]
    rank: (u8, Option<Priority>),
}

/// A goal with claimed work and no event for this long is stalled.
pub(crate) const STALLED_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

/// What goal `goal` of the project at `root` needs a person for.
pub fn needs(root: &Path, s: &StatusView, now: Timestamp) -> Vec<Need> {
    let p = format!(
        "loopx --project {} --goal-id {}",
        shell_words::quote(&root.display().to_string()),
        s.goal_id
    );
    let need = |kind, id: Option<String>, text: String, command: String, rank| Need {
        project: root.to_path_buf(),
        goal: s.goal_id.clone(),
        kind,
        id,
        text,
        command,
        rank,
    };
    let mut out = Vec::new();
    let q = &s.quota;
    if s.goal_status == GoalStatus::Stopped {
        out.push(need("stopped", None, "the goal is stopped".into(), format!("{p} goal resume"), (0, None)));
    } else if q.compute <= 0.0 {
        let text = "compute is 0: every agent is paused".to_owned();
        out.push(need("paused", None, text, format!("{p} goal set --compute 1"), (0, None)));
    }
    let tokens_spent = q.budget_tokens.is_some_and(|b| q.tokens_used >= b);
    let usd_spent = q.budget_usd.is_some_and(|b| q.usd_used >= b);
    if tokens_spent || usd_spent {
        let text = "the budget is spent".to_owned();
        let flag = if tokens_spent { "--budget-tokens" } else { "--budget-usd" };
        out.push(need("budget", None, text, format!("{p} goal set {flag} <more>"), (0, None)));
    }
    if s.work_finished {
        let text = format!("its work is finished ({} done): is the objective met?", s.counts.done);
        let command = format!("{p} goal complete   # or add work: todo add --text \"…\"");
        out.push(need("finished", None, text, command, (1, None)));
    }
    for u in &s.needs_user {
        if let Some(g) = u.gate {
            let blocks = u.blocks.as_deref().map(|b| format!(" (blocks {b})")).unwrap_or_default();
            let command = format!("{p} gate answer {g} --approve   # or --reject --note \"…\"");
            out.push(need("gate", Some(g.to_string()), format!("{}{blocks}", u.text), command, (1, None)));
        } else if let Some(t) = u.todo {
            let command = format!("{p} todo complete --todo-id {t} --agent-id user --evidence \"…\"");
            out.push(need("user_todo", Some(t.to_string()), u.text.clone(), command, (2, u.priority)));
        }
    }
    let quiet = s.last_event_at.is_some_and(|at| now.unix_millis() - at.unix_millis() > STALLED_AFTER_MS);
    if !s.in_progress.is_empty() && quiet {
        let held: Vec<String> = s.in_progress.iter().map(|c| format!("{} by {}", c.todo, c.agent)).collect();
        let text = format!("claimed work and no change for over a day: {}", held.join(", "));
        out.push(need("stalled", None, text, format!("{p} status"), (3, None)));
    }
    out
}

/// A project in the index that could not be read, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: String,
}

/// What every goal of a set of projects needs a person for, most urgent first.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Inbox {
    #[serde(rename = "needs_you")]
    pub needs: Vec<Need>,
    /// Projects that could not be read; the others are still shown.
    pub unreadable: Vec<Unreadable>,
}

/// The inbox across the projects at `roots`, each opened with `open`.
pub async fn inbox(roots: &[PathBuf], open: impl Fn(&Path) -> Result<DynKernel>, now: Timestamp) -> Inbox {
    let mut inbox = Inbox::default();
    for root in roots {
        let found = async {
            let k = open(root)?;
            let mut found = Vec::new();
            for g in k.store().project()?.goals {
                found.extend(needs(root, &k.status(Some(&g.id)).await?, now));
            }
            Ok::<_, Error>(found)
        }
        .await;
        match found {
            Ok(n) => inbox.needs.extend(n),
            Err(e) => inbox.unreadable.push(Unreadable { path: root.clone(), error: e.message }),
        }
    }
    inbox.needs.sort_by_key(|n| n.rank);
    inbox
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_project_is_indexed_once_and_taken_out_once() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("loopx").join("projects.json");
        let root = dir.path().join("app");
        let now = Timestamp::from_unix_millis(0);
        let (added, i) = add(&index, &root, now).unwrap();
        assert!(added && i.projects.len() == 1);
        let (again, i) = add(&index, &root, now).unwrap();
        assert!(!again && i.projects.len() == 1, "a project is in the index once");
        remove(&index, &root).unwrap();
        assert!(read(&index).unwrap().projects.is_empty());
        let e = remove(&index, &root).unwrap_err();
        assert!(e.message.contains("is not in the projects index"), "{e:?}");
    }
}
