//! The user's index of projects (`loopx projects`): which project directories `loopx status
//! --all` (and a dashboard) look into. Opt-in and user-level: a JSON file in the user's
//! configuration directory, which the caller names. It holds paths only, never state.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use loopx_core::{Error, Result, Timestamp};

use crate::fs as kfs;

/// The version of the index file this build reads and writes.
pub const INDEX_SCHEMA_VERSION: u32 = 1;

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
    let Some(bytes) = kfs::read_optional(path)? else {
        return Ok(ProjectsIndex { schema_version: INDEX_SCHEMA_VERSION, projects: Vec::new() });
    };
    let index: ProjectsIndex = serde_json::from_slice(&bytes).map_err(|e| {
        Error::integrity(format!("{} is not a loopx projects index: {e}", path.display()))
            .with_hint("fix or remove the file; loopx projects add DIR writes a new one")
    })?;
    if index.schema_version != INDEX_SCHEMA_VERSION {
        return Err(Error::integrity(format!(
            "{} has schema_version {}; this loopx reads version {INDEX_SCHEMA_VERSION}",
            path.display(),
            index.schema_version
        )));
    }
    Ok(index)
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
