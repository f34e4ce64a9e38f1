//! The commands this machine's person lets loopx run, kept outside the project (in the user's
//! configuration directory, `commands.json`). The event log says who wrote a command (a todo's
//! validation: its `created_by`; a command gate: its `asked_by`; the notify command: a person);
//! this record says what this machine saw: a command written here by a person runs, one written
//! here by an agent runs only in that agent's own context, and anything else (written by an
//! agent and run for someone else, or arrived with a cloned `.loopx/`) waits until a person of
//! this machine approves that exact argv (`loopx command approve`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use loopx_core::{Error, Result, Timestamp};

/// The version of the file this build reads and writes.
pub(crate) const APPROVALS_SCHEMA_VERSION: u32 = 1;

/// A person's identity in the log.
const PERSON: &str = "user";

/// `commands.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecords {
    pub schema_version: u32,
    pub commands: Vec<CommandRecord>,
}

/// One command of one project, as this machine saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// The project directory, absolute.
    pub project: PathBuf,
    /// [`digest`] of the argv.
    pub digest: String,
    pub argv: Vec<String>,
    /// Who wrote it here: `user`, or an agent's id.
    pub by: String,
    pub(crate) written_at: Timestamp,
    /// When a person of this machine approved it (a person's own command is approved as
    /// written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Timestamp>,
}

/// A command the goal names, where, who wrote it (per the log), and what this machine knows of
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoalCommand {
    /// `todo t3`, `gate g2`, `notify`.
    pub at: String,
    pub argv: Vec<String>,
    /// The argv as a shell would read it back, quoted exactly.
    pub quoted: String,
    pub author: String,
    /// This machine's record of it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub here: Option<CommandRecord>,
}

/// What a command is known by: the SHA-256 of its words, each ended by a NUL.
pub fn digest(argv: &[String]) -> String {
    let mut h = Sha256::new();
    for w in argv {
        h.update(w.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The machine-local record at `file`, for the project at `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Approvals {
    file: PathBuf,
    project: PathBuf,
}

/// Why a command may not run now, and the command that lets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Withheld {
    pub why: String,
}

impl Approvals {
    pub fn new(file: PathBuf, root: &Path) -> Self {
        Self { file, project: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()) }
    }

    /// This project's record of `argv`, if this machine has one (a notify webhook's is
    /// [`webhook`]'s).
    pub(crate) fn lookup(&self, argv: &[String]) -> Result<Option<CommandRecord>> {
        let d = digest(argv);
        Ok(read(&self.file)?.commands.into_iter().find(|c| c.project == self.project && c.digest == d))
    }

    /// Whether `argv`, written (per the log) by `author`, may run for `runner`: approved here,
    /// or an agent's own command, written here, run in its own context (for `runner`, in a
    /// process where its own tools run: `in_its_tools`).
    pub(crate) fn may_run(
        &self,
        argv: &[String],
        author: &str,
        runner: &str,
        in_its_tools: bool,
    ) -> Result<Option<Withheld>> {
        let record = self.lookup(argv)?;
        let own = |r: &CommandRecord| r.by == author && r.by == runner && runner != PERSON && in_its_tools;
        Ok(match record {
            Some(r) if r.approved_at.is_some() || own(&r) => None,
            Some(r) => Some(Withheld {
                why: format!(
                    "it was written by agent {}, and runs only in that agent's own shell (inside its turn or session) until a person of this machine approves it",
                    r.by
                ),
            }),
            None if author == PERSON => Some(Withheld {
                why: "it came with the project (written on another machine or by another tool), and runs only once a person of this machine approves it".to_owned(),
            }),
            None => Some(Withheld {
                why: format!(
                    "it was written by agent {author} elsewhere (not on this machine), and runs only once a person of this machine approves it"
                ),
            }),
        })
    }

    /// Records that `by` wrote `argv` here (a person's command is approved as written); an
    /// existing record keeps its author and approval.
    pub fn written(&self, argv: &[String], by: &str, now: Timestamp) -> Result<()> {
        self.update(|list| {
            let d = digest(argv);
            if list.commands.iter().any(|c| c.project == self.project && c.digest == d) {
                return false;
            }
            list.commands.push(CommandRecord {
                project: self.project.clone(),
                digest: d,
                argv: argv.to_vec(),
                by: by.to_owned(),
                written_at: now,
                approved_at: (by == PERSON).then_some(now),
            });
            true
        })
    }

    /// Records a person's approval of `argv`; whether it was not approved before.
    pub fn approve(&self, argv: &[String], now: Timestamp) -> Result<bool> {
        let mut changed = false;
        self.update(|list| {
            let d = digest(argv);
            match list.commands.iter_mut().find(|c| c.project == self.project && c.digest == d) {
                Some(c) if c.approved_at.is_some() => {}
                Some(c) => {
                    c.approved_at = Some(now);
                    changed = true;
                }
                None => {
                    list.commands.push(CommandRecord {
                        project: self.project.clone(),
                        digest: d,
                        argv: argv.to_vec(),
                        by: PERSON.to_owned(),
                        written_at: now,
                        approved_at: Some(now),
                    });
                    changed = true;
                }
            }
            changed
        })?;
        Ok(changed)
    }

    /// Reads, changes and writes the file under an exclusive lock (processes of many agents
    /// write it at once); `change` says whether it changed anything.
    fn update(&self, change: impl FnOnce(&mut CommandRecords) -> bool) -> Result<()> {
        if let Some(dir) = self.file.parent() {
            crate::fs::create_dir_all(dir)?;
        }
        let lock_path = self.file.with_extension("json.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io("open", &lock_path, &e))?;
        lock.lock().map_err(|e| Error::io("lock", &lock_path, &e))?;
        let mut list = read(&self.file)?;
        if change(&mut list) {
            let mut bytes = serde_json::to_vec_pretty(&list)
                .map_err(|e| Error::internal(format!("cannot encode the command records: {e}")))?;
            bytes.push(b'\n');
            crate::fs::atomic_write(&self.file, &bytes)?;
        }
        drop(lock);
        Ok(())
    }
}

/// The records at `file`; an absent file holds none, a damaged one is refused.
pub fn read(file: &Path) -> Result<CommandRecords> {
    let hint = "fix or remove the file (removing it withholds every command until approved again)";
    let list = crate::fs::read_config(file, "loopx's record of commands", hint, APPROVALS_SCHEMA_VERSION)?;
    Ok(list.unwrap_or(CommandRecords { schema_version: APPROVALS_SCHEMA_VERSION, commands: Vec::new() }))
}

/// How a notify webhook (`env:NAME`, `config:NAME`) is recorded among the commands: posting
/// to it is something `.loopx/` makes this machine do, approved like a command. The first word
/// is no program's name, so no command's record approves it.
pub fn webhook(spec: &str) -> Vec<String> {
    vec!["--notify-webhook".to_owned(), spec.to_owned()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn who_wrote_it_here_decides_who_may_run_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = Approvals::new(dir.path().join("commands.json"), dir.path());
        let now = Timestamp::from_unix_millis(0);
        let (mine, theirs, foreign) = (argv("cargo test"), argv("sh -c id"), argv("make"));
        a.written(&mine, "user", now).unwrap();
        a.written(&theirs, "a1", now).unwrap();
        assert_eq!(a.may_run(&mine, "user", "user", false).unwrap(), None);
        assert_eq!(a.may_run(&mine, "user", "a2", true).unwrap(), None, "a person's command runs for anyone");
        assert_eq!(
            a.may_run(&theirs, "a1", "a1", true).unwrap(),
            None,
            "the agent's own, in its own context"
        );
        assert!(
            a.may_run(&theirs, "a1", "a1", false).unwrap().is_some(),
            "the agent's own, for it but outside its tools (a driver, an MCP server)"
        );
        assert!(a.may_run(&theirs, "a1", "user", false).unwrap().is_some());
        assert!(a.may_run(&theirs, "a1", "a2", true).unwrap().is_some());
        assert!(
            a.may_run(&theirs, "a2", "a2", true).unwrap().is_some(),
            "the log's author is not this machine's"
        );
        let why = |author: &str| {
            a.may_run(&foreign, author, author, true).unwrap().map(|w| w.why).unwrap_or_default()
        };
        assert!(why("user").starts_with("it came with the project"), "{}", why("user"));
        assert!(why("a1").starts_with("it was written by agent a1 elsewhere"), "{}", why("a1"));
        assert!(a.approve(&theirs, now).unwrap());
        assert!(!a.approve(&theirs, now).unwrap());
        assert_eq!(a.may_run(&theirs, "a1", "user", false).unwrap(), None);
        a.written(&theirs, "a3", now).unwrap();
        assert_eq!(a.lookup(&theirs).unwrap().unwrap().by, "a1", "the first writer stays");
        assert_eq!(read(&dir.path().join("commands.json")).unwrap().commands.len(), 2, "a record a command");
        let other = Approvals::new(dir.path().join("commands.json"), &dir.path().join("clone"));
        assert!(
            other.may_run(&mine, "user", "user", false).unwrap().is_some(),
            "another directory is another project"
        );
        other.written(&mine, "a5", now).unwrap();
        assert_eq!(
            other.may_run(&mine, "a5", "a5", true).unwrap(),
            None,
            "recorded there too, as that agent's own"
        );
        assert_eq!(a.lookup(&mine).unwrap().unwrap().by, "user", "and here still the person's");
    }
}
