//! Write scopes: the path globs a goal or a todo may write, checked when an agent edits.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use loopx_core::{Error, Result};

/// A set of path globs relative to the project root. `*` and `?` stay within one directory,
/// `**` crosses directories, `{a,b}` picks one: `src/**` is everything under `src/`, `*.md`
/// the Markdown files at the top, `**/*.rs` every Rust file.
#[derive(Clone, Debug)]
pub struct WriteScope {
    globs: Vec<String>,
    set: GlobSet,
}

impl WriteScope {
    /// Compiles `globs`; an invalid glob is a usage error naming it.
    pub fn new(globs: &[String]) -> Result<Self> {
        let mut b = GlobSetBuilder::new();
        for g in globs {
            let glob = GlobBuilder::new(g.trim_start_matches("./")).literal_separator(true).build().map_err(
                |e| {
                    Error::usage(format!("invalid scope glob {g:?}: {e}"))
                        .with_hint("a scope is a path glob such as src/** or docs/*.md")
                },
            )?;
            b.add(glob);
        }
        let set = b.build().map_err(|e| {
            Error::usage(format!("invalid scope globs: {e}"))
                .with_hint("a scope is a path glob such as src/** or docs/*.md")
        })?;
        Ok(Self { globs: globs.to_vec(), set })
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// Whether `path` (absolute, or relative to `cwd`) is inside the scope under `root`. A path
    /// outside the project is never inside a non-empty scope; an empty scope allows everything.
    pub fn allows(&self, root: &Path, cwd: &Path, path: &str) -> bool {
        if self.is_empty() {
            return true;
        }
        let full = normalize(&cwd.join(path));
        match full.strip_prefix(normalize(root)) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.set.is_match(rel),
            _ => false,
        }
    }
}

/// `a/./b/../c` → `a/c`, lexically (the file may not exist yet).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(g: &[&str]) -> WriteScope {
        WriteScope::new(&g.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn globs_are_real_globs() {
        let root = Path::new("/p");
        let s = scope(&["src/**", "*.md"]);
        assert!(s.allows(root, root, "/p/src/a/b.rs"));
        assert!(s.allows(root, Path::new("/p/src"), "lib.rs"), "relative to the session's cwd");
        assert!(s.allows(root, root, "README.md"));
        assert!(!s.allows(root, root, "docs/guide.md"), "* stays in one directory");
        assert!(!s.allows(root, root, "Cargo.toml"));
        assert!(!s.allows(root, root, "/p/src/../Cargo.toml"), ".. is resolved");
        assert!(!s.allows(root, root, "/etc/passwd"), "outside the project");
        assert!(!s.allows(root, root, "/p"));
        let rs = scope(&["*.rs"]);
        assert!(!rs.allows(root, root, "README.md"), "*.rs no longer allows every path");
        assert!(scope(&[]).allows(root, root, "/anything"));
        assert!(WriteScope::new(&["src/[".to_owned()]).is_err());
    }
}
