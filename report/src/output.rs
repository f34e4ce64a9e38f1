//! Where a picture of the report is written: stdout, or a regular file the writing replaces.

use std::path::{Path, PathBuf};

use loopx_core::{Error, Result};
use loopx_kernel::fs as kfs;

/// Where `--svg` or `--png` writes the picture: stdout (`-`), or a regular file, replaced by
/// rename, or a new one. A link, a FIFO, a device, a directory or a file with other names
/// (hard links) is refused, never replaced: a rename would turn it into a plain file.
#[derive(Debug)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

impl Target {
    pub fn of(flag: &str, path: &Path) -> Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Self::Stdout);
        }
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let what = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::File(path.to_owned())),
            Err(e) => {
                return Err(Error::refused(format!("{flag} {}: cannot look at it: {e}", path.display()))
                    .with_hint(format!("give a file you can write, or {flag} - for stdout")));
            }
            Ok(m) if m.is_file() && m.nlink() <= 1 => return Ok(Self::File(path.to_owned())),
            Ok(m) => {
                let t = m.file_type();
                if t.is_symlink() {
                    "a symbolic link"
                } else if t.is_dir() {
                    "a directory"
                } else if t.is_fifo() {
                    "a FIFO"
                } else if t.is_char_device() || t.is_block_device() {
                    "a device"
                } else if t.is_socket() {
                    "a socket"
                } else if t.is_file() {
                    "a file with other names (hard links)"
                } else {
                    "not a regular file"
                }
            }
        };
        Err(Error::refused(format!(
            "{flag} {} is {what}: loopx writes the picture only to a regular file, which it replaces, and leaves this one alone",
            path.display()
        ))
        .with_hint(format!("give the path of a regular file (or a new one), or {flag} - to print the picture on stdout")))
    }

    /// Writes `bytes` to the file (checked again, just before), or gives them back to print.
    pub fn write(&self, flag: &str, bytes: &[u8]) -> Result<Option<Vec<u8>>> {
        match self {
            Self::Stdout => Ok(Some(bytes.to_vec())),
            Self::File(path) => {
                Self::of(flag, path)?;
                kfs::atomic_write(path, bytes)?;
                Ok(None)
            }
        }
    }
}
