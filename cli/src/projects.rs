//! `loopx projects` (the user's index of project directories) and `loopx status --all`: every
//! goal of every indexed project that needs a person, most urgent first, each with the command
//! that acts on it. The index is `$XDG_CONFIG_HOME/loopx/projects.json` (or
//! `~/.config/loopx/projects.json`); it names directories and holds no state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use loopx_core::{Error, Result};
use loopx_kernel::{DynKernel, Reporter, find_root};
use loopx_machine::projects::{self, Inbox};

use crate::Env;
use crate::args::ProjectsCommand;
use crate::output::{Rendered, Style};

/// `name` in loopx's directory of the user's configuration: `$XDG_CONFIG_HOME/loopx/` (or
/// `~/.config/loopx/`).
pub fn config_file(name: &str) -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")).ok_or_else(|| {
            Error::usage("neither XDG_CONFIG_HOME nor HOME is set; loopx keeps its configuration there")
                .with_hint("set HOME to your home directory")
        })?,
    };
    Ok(base.join("loopx").join(name))
}

/// Where the index is kept.
fn index_path() -> Result<PathBuf> {
    config_file("projects.json")
}

/// The project directories in the index, in the order they were added.
pub fn indexed_roots() -> Result<Vec<PathBuf>> {
    Ok(projects::read(&index_path()?)?.projects.into_iter().map(|p| p.path).collect())
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
            let (added, index) = projects::add(&path, &root, env.clock.now())?;
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
            projects::remove(&path, &root)?;
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
    Ok(DynKernel::over(store).with_hosts(crate::registry::catalog()))
}

/// `loopx status --all`.
pub async fn status_all(env: &Env, reporter: Arc<dyn Reporter>, style: Style) -> Result<Rendered> {
    let path = index_path()?;
    let index = projects::read(&path)?;
    let roots: Vec<PathBuf> = index.projects.iter().map(|p| p.path.clone()).collect();
    let Inbox { needs: all, unreadable } =
        projects::inbox(&roots, |root| open(env, root, reporter.clone()), env.clock.now()).await;
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
    for u in &unreadable {
        text.push_str(&format!("cannot read {}: {}\n", u.path.display(), u.error));
    }
    let rendered = Rendered::new(&json!({"needs_you": all, "unreadable": unreadable}), text)?;
    Ok(rendered)
}
