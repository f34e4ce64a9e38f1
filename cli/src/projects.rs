//! `loopx projects` (the user's index of project directories) and `loopx status --all`: every
//! goal of every indexed project that needs a person, most urgent first, each with the command
//! that acts on it. The index is `$XDG_CONFIG_HOME/loopx/projects.json` (or
//! `~/.config/loopx/projects.json`); it names directories and holds no state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::json;

use loopx_core::kernel::{Kernel, StatusView};
use loopx_core::model::{GoalStatus, Priority};
use loopx_core::{Error, GoalId, Result, Timestamp};
use loopx_kernel::projects::{self, IndexedProject};
use loopx_kernel::{DynKernel, Reporter, find_root};

use crate::Env;
use crate::args::ProjectsCommand;
use crate::output::{Rendered, Style};

/// Where the index is kept.
fn index_path() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")).ok_or_else(|| {
            Error::usage("neither XDG_CONFIG_HOME nor HOME is set; loopx keeps the projects index there")
                .with_hint("set HOME to your home directory")
        })?,
    };
    Ok(base.join("loopx").join("projects.json"))
}

/// Whether the project at `root` is in the index (an unreadable index: no).
pub fn is_indexed(root: &Path) -> bool {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    index_path().and_then(|p| projects::read(&p)).is_ok_and(|i| i.projects.iter().any(|p| p.path == root))
}

/// `dir` made absolute (and resolved, when it exists).
fn absolute(env: &Env, dir: Option<&PathBuf>) -> PathBuf {
    let dir = dir.map_or_else(|| env.cwd.clone(), |d| env.cwd.join(d));
    dir.canonicalize().unwrap_or(dir)
}

pub fn run(cmd: &ProjectsCommand, env: &Env) -> Result<Rendered> {
    let path = index_path()?;
    match cmd {
        ProjectsCommand::Add { dir } => {
            let start = absolute(env, dir.as_ref());
            let root = find_root(&start).ok_or_else(|| {
                Error::not_found(format!("no loopx project at or above {}", start.display()))
                    .with_hint("start one there with: loopx init")
            })?;
            let mut added = false;
            let now = env.clock.now();
            let index = projects::update(&path, |i| {
                added = !i.projects.iter().any(|p| p.path == root);
                if added {
                    i.projects.push(IndexedProject { path: root.clone(), added_at: now });
                }
                added
            })?;
            let text = if added {
                format!("added {} ({} project(s) in the index)\n", root.display(), index.projects.len())
            } else {
                format!("{} is in the index already\n", root.display())
            };
            Rendered::new(&json!({"project": root, "added": added, "index": path}), text)
        }
        ProjectsCommand::Remove { dir } => {
            // The project this directory is in; a named directory as it is (it may be gone).
            let root = match dir {
                Some(d) => absolute(env, Some(d)),
                None => find_root(&env.cwd).unwrap_or_else(|| absolute(env, None)),
            };
            let mut removed = false;
            projects::update(&path, |i| {
                let before = i.projects.len();
                i.projects.retain(|p| p.path != root);
                removed = i.projects.len() < before;
                removed
            })?;
            if !removed {
                return Err(Error::not_found(format!("{} is not in the projects index", root.display()))
                    .with_hint("see the index with: loopx projects list"));
            }
            Rendered::new(
                &json!({"project": root, "removed": true}),
                format!("removed {} from the index (its files are untouched)\n", root.display()),
            )
        }
        ProjectsCommand::List => {
            let index = projects::read(&path)?;
            let mut rows = Vec::new();
            let mut text = String::new();
            for p in &index.projects {
                let opened = open(env, &p.path, Arc::new(loopx_kernel::Silent)).and_then(|k| {
                    Ok(k.store().project()?.goals.into_iter().map(|g| g.id).collect::<Vec<_>>())
                });
                match opened {
                    Ok(goals) => {
                        let ids: Vec<String> = goals.iter().map(ToString::to_string).collect();
                        text.push_str(&format!("{}  goals: {}\n", p.path.display(), ids.join(", ")));
                        rows.push(json!({"path": p.path, "added_at": p.added_at, "goals": ids}));
                    }
                    Err(e) => {
                        text.push_str(&format!("{}  cannot be read: {}\n", p.path.display(), e.message));
                        rows.push(json!({"path": p.path, "added_at": p.added_at, "error": e.message}));
                    }
                }
            }
            if index.projects.is_empty() {
                text = "no projects in the index; add one with: loopx projects add DIR\n".to_owned();
            }
            Rendered::new(&json!({"index": path, "projects": rows}), text)
        }
    }
}

fn open(env: &Env, root: &Path, reporter: Arc<dyn Reporter>) -> Result<DynKernel> {
    let store = crate::store::opener()(root, env.clock.clone(), reporter, &env.options)?;
    Ok(DynKernel::over(store))
}

/// One thing a person is needed for.
#[derive(Debug, Serialize)]
struct Need {
    project: PathBuf,
    goal: GoalId,
    /// `stopped`, `paused`, `budget`, `gate`, `user_todo` or `stalled`.
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    text: String,
    /// The command that acts on it.
    command: String,
    #[serde(skip)]
    rank: (u8, Option<Priority>),
}

/// A goal with claimed work and no event for this long is stalled.
const STALLED_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

/// What goal `goal` of the project at `root` needs a person for.
fn needs(root: &Path, s: &StatusView, now: Timestamp) -> Vec<Need> {
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

/// `loopx status --all`.
pub async fn status_all(env: &Env, reporter: Arc<dyn Reporter>, style: Style) -> Result<Rendered> {
    let path = index_path()?;
    let index = projects::read(&path)?;
    let now = env.clock.now();
    let (mut all, mut unreadable) = (Vec::new(), Vec::new());
    for p in &index.projects {
        let found = async {
            let k = open(env, &p.path, reporter.clone())?;
            let mut found = Vec::new();
            for g in k.store().project()?.goals {
                found.extend(needs(&p.path, &k.status(Some(&g.id)).await?, now));
            }
            Ok::<_, Error>(found)
        }
        .await;
        match found {
            Ok(n) => all.extend(n),
            Err(e) => unreadable.push((p.path.clone(), e.message)),
        }
    }
    all.sort_by_key(|a| a.rank);
    let mut text = String::new();
    if index.projects.is_empty() {
        text.push_str("no projects in the index; add one with: loopx projects add DIR\n");
    } else if all.is_empty() {
        text.push_str(&format!(
            "nothing needs you in {} project(s)\n",
            index.projects.len() - unreadable.len()
        ));
    } else {
        text.push_str(&format!("needs you ({}):\n", all.len()));
        for n in &all {
            let id = n.id.as_deref().map(|i| format!("{i} ")).unwrap_or_default();
            let label = format!("{} · {}", n.project.display(), n.goal);
            text.push_str(&format!(
                "  {}  {}{}\n      {}\n",
                style.bold(&label),
                style.yellow(&id),
                n.text,
                n.command
            ));
        }
    }
    for (p, why) in &unreadable {
        text.push_str(&format!("cannot read {}: {why}\n", p.display()));
    }
    let unreadable: Vec<_> = unreadable.iter().map(|(p, why)| json!({"path": p, "error": why})).collect();
    let rendered = Rendered::new(&json!({"needs_you": all, "unreadable": unreadable}), text)?;
    Ok(rendered)
}
