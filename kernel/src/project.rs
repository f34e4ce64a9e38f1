//! The project: `.loopx/project.json` and where things live under `.loopx/`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use loopx_core::{GoalId, Timestamp};

/// The state directory's name.
pub const STATE_DIR: &str = ".loopx";
/// The version of `project.json` and `snapshot.json` this build writes and reads.
pub(crate) const STORE_SCHEMA_VERSION: u32 = 1;

/// `.loopx/project.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProjectFile {
    pub schema_version: u32,
    pub default_goal: Option<GoalId>,
    pub goals: Vec<ProjectGoal>,
    /// Where the project's state is kept when not in `.loopx/` (then `goals` is kept there too,
    /// and this file only points at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreRef>,
}

/// A store outside `.loopx/`, as `project.json` names it: never with a credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreRef {
    /// The store's kind: `postgres`.
    pub kind: String,
    /// Where it is, without a password (`postgres://user@host:port/database`).
    pub url: String,
    /// The project's name inside it: projects pointing at the same name share their goals.
    pub project: String,
}

/// A goal as `project.json` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProjectGoal {
    pub id: GoalId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub created_at: Timestamp,
}

impl ProjectFile {
    pub fn new() -> Self {
        Self { schema_version: STORE_SCHEMA_VERSION, default_goal: None, goals: Vec::new(), store: None }
    }
    pub fn has_goal(&self, id: &GoalId) -> bool {
        self.goals.iter().any(|g| &g.id == id)
    }
    /// The goal asked about, or every listed one.
    pub fn goals_or(&self, only: Option<&GoalId>) -> Vec<GoalId> {
        match only {
            Some(g) => vec![g.clone()],
            None => self.goals.iter().map(|g| g.id.clone()).collect(),
        }
    }
    /// Lists a new goal (the default one if asked, or if there is none yet).
    pub fn add_goal(
        &mut self,
        id: &GoalId,
        title: Option<String>,
        created_at: Timestamp,
        make_default: bool,
    ) {
        self.goals.push(ProjectGoal { id: id.clone(), title, created_at });
        if make_default || self.default_goal.is_none() {
            self.default_goal = Some(id.clone());
        }
    }
}

impl Default for ProjectFile {
    fn default() -> Self {
        Self::new()
    }
}

/// Paths of one project's state.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// `root` is the project directory (the one holding `.loopx/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(STATE_DIR)
    }
    pub fn project_file(&self) -> PathBuf {
        self.state_dir().join("project.json")
    }
    pub(crate) fn project_lock(&self) -> PathBuf {
        self.state_dir().join("lock")
    }
    pub fn gitignore(&self) -> PathBuf {
        self.state_dir().join(".gitignore")
    }
    pub fn goals_dir(&self) -> PathBuf {
        self.state_dir().join("goals")
    }
    pub fn goal_dir(&self, id: &GoalId) -> PathBuf {
        self.goals_dir().join(id.as_str())
    }
    pub fn events(&self, id: &GoalId) -> PathBuf {
        self.goal_dir(id).join("events.jsonl")
    }
    pub fn snapshot(&self, id: &GoalId) -> PathBuf {
        self.goal_dir(id).join("snapshot.json")
    }
    pub fn goal_md(&self, id: &GoalId) -> PathBuf {
        self.goal_dir(id).join("GOAL.md")
    }
    /// Closed todos that left the live state, with their evidence (see `state::ArchiveHead`).
    pub fn archive(&self, id: &GoalId) -> PathBuf {
        self.goal_dir(id).join("archive.jsonl")
    }
    /// The file holding the goal's live todos' JSON, begun by the commit of event `generation`.
    pub fn bodies(&self, id: &GoalId, generation: u64) -> PathBuf {
        self.goal_dir(id).join(format!("todos-{generation}.dat"))
    }
    pub(crate) fn goal_lock(&self, id: &GoalId) -> PathBuf {
        self.goal_dir(id).join("lock")
    }
}

/// The nearest directory at or above `start` that holds `.loopx/project.json`, like git.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find(|dir| dir.join(STATE_DIR).join("project.json").is_file()).map(Path::to_path_buf)
}
