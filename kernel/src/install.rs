//! Applies host install plans. Adapters compute plans; only the kernel writes, through
//! `kernel::fs`: each file atomically, nothing outside the plan, nothing written at all when
//! the plan is refused.

use std::path::Path;

use loopx_core::traits::{FileAction, InstallPlan};
use loopx_core::{Error, Result};

use crate::fs as kfs;

/// Writes and removes what `plan` says. Every path must be absolute.
pub fn apply(plan: &InstallPlan) -> Result<()> {
    for a in &plan.actions {
        let p = path_of(a);
        if !p.is_absolute() {
            return Err(Error::internal(format!("install plan names a relative path {}", p.display())));
        }
    }
    for a in &plan.actions {
        match a {
            FileAction::Create { path, content } | FileAction::Update { path, content } => {
                if let Some(dir) = path.parent() {
                    kfs::create_dir_all(dir)?;
                }
                kfs::atomic_write(path, content.as_bytes())?;
            }
            FileAction::Remove { path } => match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", path, &e)),
            },
            FileAction::Unchanged { .. } | FileAction::Skipped { .. } => {}
        }
    }
    Ok(())
}

pub fn path_of(a: &FileAction) -> &Path {
    match a {
        FileAction::Create { path, .. }
        | FileAction::Update { path, .. }
        | FileAction::Remove { path }
        | FileAction::Unchanged { path }
        | FileAction::Skipped { path, .. } => path,
    }
}
