//! The stores this machine's person has trusted (`loopx store trust`): a database a project's
//! `project.json` names is connected to only once the person said so for that project
//! directory, like direnv's `allow`. A repository cloned with a `.loopx/project.json` naming
//! someone else's database therefore never makes loopx send a password there. The list is a
//! JSON file in the user's configuration directory, which the caller names.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use loopx_core::{Error, Result, Timestamp};

use loopx_kernel::fs as kfs;

/// The version of the file this build reads and writes.
pub(crate) const TRUSTED_SCHEMA_VERSION: u32 = 1;

/// `stores.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedStores {
    pub schema_version: u32,
    pub stores: Vec<TrustedStore>,
}

/// One store trusted for one project directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedStore {
    /// [`key`] of what is trusted.
    pub key: String,
    /// The project directory, absolute.
    pub path: PathBuf,
    /// The store's URL without a password, and the project's name in it.
    pub url: String,
    pub project: String,
    pub added_at: Timestamp,
}

/// What a trust is keyed by: the project directory, the URL (without a password) and the
/// project's name in the store. Any of them changing needs the person again.
pub fn key(path: &Path, url: &str, project: &str) -> String {
    let mut h = Sha256::new();
    for part in [path.display().to_string().as_str(), url, project] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The list at `file`; an absent file is an empty list, a damaged one is refused.
pub fn read(file: &Path) -> Result<TrustedStores> {
    let hint = "fix or remove the file; loopx store trust writes a new one";
    let list = kfs::read_config(file, "loopx's list of trusted stores", hint, TRUSTED_SCHEMA_VERSION)?;
    Ok(list.unwrap_or(TrustedStores { schema_version: TRUSTED_SCHEMA_VERSION, stores: Vec::new() }))
}

/// Whether `key` is trusted in the list at `file` (a list that cannot be read trusts nothing).
pub fn is_trusted(file: &Path, key: &str) -> bool {
    read(file).is_ok_and(|l| l.stores.iter().any(|s| s.key == key))
}

/// Adds `store` to the list at `file` (or, with `revoke`, takes its key out), writing the file
/// atomically; whether it changed.
pub fn set(file: &Path, store: TrustedStore, revoke: bool) -> Result<bool> {
    let mut list = read(file)?;
    let had = list.stores.iter().any(|s| s.key == store.key);
    let changed = match (had, revoke) {
        (false, false) => {
            list.stores.push(store);
            true
        }
        (true, true) => {
            list.stores.retain(|s| s.key != store.key);
            true
        }
        _ => false,
    };
    if changed {
        if let Some(dir) = file.parent() {
            kfs::create_dir_all(dir)?;
        }
        let mut bytes = serde_json::to_vec_pretty(&list)
            .map_err(|e| Error::internal(format!("cannot encode the trusted stores: {e}")))?;
        bytes.push(b'\n');
        kfs::atomic_write(file, &bytes)?;
    }
    Ok(changed)
}
