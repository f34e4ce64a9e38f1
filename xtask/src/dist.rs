//! `cargo xtask man` and `cargo xtask dist`: man pages and completions rendered from the very
//! clap definition the binary parses (`loopx_cli::args::Cli`), and a release archive.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::CommandFactory;
use clap_complete::Shell;

use loopx_cli::args::Cli;

/// Writes `loopx.1` and a page per command and subcommand (`loopx-todo-add.1`) into `dir`.
/// Returns the files written.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let root = Cli::command();
    write_page(dir, "loopx", root.clone(), &mut written)?;
    for sub in root.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("loopx-{}", sub.get_name());
        write_page(dir, &name, sub.clone(), &mut written)?;
        for leaf in sub.get_subcommands().filter(|c| !c.is_hide_set()) {
            write_page(dir, &format!("{name}-{}", leaf.get_name()), leaf.clone(), &mut written)?;
        }
    }
    Ok(written)
}

fn write_page(dir: &Path, name: &str, cmd: clap::Command, written: &mut Vec<PathBuf>) -> Result<()> {
    let cmd = cmd.name(name.to_owned()).bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    Ok(())
}

/// Writes the completion script for every shell clap supports into `dir`.
pub fn completions(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::PowerShell, Shell::Elvish] {
        let path = clap_complete::generate_to(shell, &mut Cli::command(), "loopx", dir)?;
        written.push(path);
    }
    Ok(written)
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc").arg("-vV").output().context("cannot run rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .context("rustc -vV names no host")
}

/// Builds the release binary and packs it with its completions, man pages, README,
/// ARCHITECTURE.md and the docs they link to into
/// `target/dist/loopx-<version>-<host>.tar.gz`. Returns the archive.
pub fn dist(workspace: &Path) -> Result<PathBuf> {
    crate::run(
        "release build",
        crate::cargo().args(["build", "--release", "--locked", "-p", "loopx-cli"]).current_dir(workspace),
    )?;
    let name = format!("loopx-{}-{}", env!("CARGO_PKG_VERSION"), host_triple()?);
    let out = workspace.join("target/dist");
    let stage = out.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("cannot clear {}", stage.display()))?;
    }
    std::fs::create_dir_all(&stage)?;
    let bin = format!("loopx{}", std::env::consts::EXE_SUFFIX);
    std::fs::copy(workspace.join("target/release").join(&bin), stage.join(&bin))
        .context("cannot copy the release binary")?;
    completions(&stage.join("completions"))?;
    man_pages(&stage.join("man"))?;
    for doc in ["README.md", "ARCHITECTURE.md"] {
        std::fs::copy(workspace.join(doc), stage.join(doc)).with_context(|| format!("cannot copy {doc}"))?;
    }
    // What the two link to: the docs' Markdown (their pictures stay in the repository).
    std::fs::create_dir_all(stage.join("docs"))?;
    for e in std::fs::read_dir(workspace.join("docs")).context("cannot read docs/")? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "md") {
            let to = stage.join("docs").join(path.file_name().context("a doc without a name")?);
            std::fs::copy(&path, &to).with_context(|| format!("cannot copy {}", path.display()))?;
        }
    }
    let archive = out.join(format!("{name}.tar.gz"));
    let status = Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(&out)
        .arg(&name)
        .status()
        .context("cannot run tar")?;
    if !status.success() {
        bail!("tar failed ({status})");
    }
    eprintln!("xtask: wrote {}", archive.display());
    Ok(archive)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_man_page_for_every_command_and_completions_for_every_shell() {
        let dir = tempfile::tempdir().unwrap();
        let pages = man_pages(dir.path()).unwrap();
        let names: Vec<String> =
            pages.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for want in ["loopx.1", "loopx-handoff.1", "loopx-todo-add.1", "loopx-completions.1"] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        let page = std::fs::read_to_string(dir.path().join("loopx-todo-add.1")).unwrap();
        assert!(page.contains(".SH NAME") && page.contains("\\-\\-priority"), "{page}");
        let scripts = completions(&dir.path().join("completions")).unwrap();
        assert_eq!(scripts.len(), 5);
        assert!(std::fs::read_to_string(&scripts[0]).unwrap().contains("unbind-thread"));
    }
}
