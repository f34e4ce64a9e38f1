//! The person's webhooks (`loopx goal set --notify-webhook https://…`): a webhook's URL is
//! often its secret (Slack's and Feishu's tokens are in the path), and `.loopx/` is often
//! committed, so a goal names its webhook (`config:NAME`) and the URL is kept here, in a file
//! of the user's configuration directory (the caller names it) that only its owner may read.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use loopx_core::{Error, Result};

use loopx_kernel::fs as kfs;

/// The version of the file this build reads and writes.
pub(crate) const WEBHOOKS_SCHEMA_VERSION: u32 = 1;

/// `webhooks.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhooks {
    pub schema_version: u32,
    /// Name → URL.
    pub webhooks: BTreeMap<String, String>,
}

/// The webhooks at `file`; an absent file holds none, a damaged one is refused.
pub fn read(file: &Path) -> Result<Webhooks> {
    let hint = "fix or remove the file; loopx goal set --notify-webhook writes a new one";
    let w = kfs::read_config(file, "loopx's list of webhooks", hint, WEBHOOKS_SCHEMA_VERSION)?;
    Ok(w.unwrap_or(Webhooks { schema_version: WEBHOOKS_SCHEMA_VERSION, webhooks: BTreeMap::new() }))
}

/// Keeps `url` as `name` (`None`: forgets `name`) in the file at `file`, readable by its owner
/// only; returns what `name` held before.
pub fn set(file: &Path, name: &str, url: Option<&str>) -> Result<Option<String>> {
    let mut w = read(file)?;
    let before = match url {
        Some(u) => w.webhooks.insert(name.to_owned(), u.to_owned()),
        None => w.webhooks.remove(name),
    };
    if let Some(dir) = file.parent() {
        kfs::create_dir_all(dir)?;
    }
    let mut bytes = serde_json::to_vec_pretty(&w)
        .map_err(|e| Error::internal(format!("cannot encode the webhooks: {e}")))?;
    bytes.push(b'\n');
    kfs::atomic_write(file, &bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("protect", file, &e))?;
    }
    Ok(before)
}
