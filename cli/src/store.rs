//! Which store a project keeps its state in: `.loopx/` itself, or the database its
//! `project.json` names. `project.json` never holds a credential: the password comes from the
//! URL in `LOOPX_STORE_URL`, from `PGPASSWORD`, or from `~/.pgpass` (or `PGPASSFILE`). A
//! database named in `project.json` is connected to only once this machine's person trusted it
//! for the project (`loopx store trust`; `init --store` and `store migrate --to` trust what they
//! were given), and a password travels to another machine only over TLS.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use loopx_core::{Clock, Error, Result};
use loopx_kernel::feed::{ChangeFeed, FileFeed};
use loopx_kernel::project::{Layout, StoreRef};
use loopx_kernel::store::read_project;
use loopx_kernel::{FileStore, Opened, Reporter, Store, StoreOpener, StoreOptions};
use loopx_machine::migrate;
use loopx_machine::stores::{self, Passwords, Trust};
use loopx_pgstore::{Listener, PgStore};

use crate::Env;
use crate::args::StoreCommand;
use crate::output::Rendered;

/// The environment variable naming the store `loopx init` creates a project in.
pub const STORE_URL_VAR: &str = "LOOPX_STORE_URL";

/// The opener every command uses: the store the project's `project.json` names.
pub fn opener() -> StoreOpener {
    Arc::new(open)
}

fn open(
    root: &Path,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: &StoreOptions,
) -> Result<Box<dyn Store>> {
    let files =
        FileStore::open_or_elsewhere(root, Arc::clone(&clock), Arc::clone(&reporter), options.clone())?;
    match files {
        Opened::Files(store) => Ok(store),
        Opened::Elsewhere(s) => {
            let url = trust()?.connect_url(root, &s)?;
            Ok(Box::new(PgStore::connect(&url, &s.project, root, clock, reporter, options)?))
        }
    }
}

/// This machine's trust in stores: the person's list, and the passwords this environment
/// gives (`LOOPX_STORE_URL`, `PGPASSWORD`, `PGPASSFILE` or `~/.pgpass`).
pub fn trust() -> Result<Trust> {
    let var = |name: &str| std::env::var(name).ok();
    let pgpass_file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")));
    Ok(Trust {
        file: crate::projects::config_file("stores.json")?,
        passwords: Passwords { store_url: var(STORE_URL_VAR), pgpassword: var("PGPASSWORD"), pgpass_file },
    })
}

/// `loopx store show`, `loopx store migrate` and `loopx store trust`. `in_session`: run inside
/// an agent's session, where nothing is trusted on the person's behalf.
pub fn run(
    cmd: &StoreCommand,
    root: &Path,
    env: &Env,
    reporter: Arc<dyn Reporter>,
    in_session: Option<&str>,
) -> Result<Rendered> {
    let mut here = read_project(&Layout::new(root))?;
    if let StoreCommand::Trust { revoke } = cmd {
        let Some(store) = &here.store else {
            return Err(Error::usage(
                "this project keeps its state in .loopx/; there is no database to trust",
            )
            .with_hint("see where the state is with: loopx store show"));
        };
        let changed = trust()?.set(root, store, *revoke, env.clock.now())?;
        let url = stores::redacted(&store.url);
        let text = match (revoke, changed) {
            (false, true) => format!("trusted {url} (project {}) for {}\n", store.project, root.display()),
            (false, false) => format!("{url} (project {}) was trusted already\n", store.project),
            (true, true) => format!("{url} is no longer trusted for {}\n", root.display()),
            (true, false) => format!("{url} was not trusted for {}\n", root.display()),
        };
        return Rendered::new(
            &json!({"store": stores::shown(&here.store), "trusted": !revoke, "changed": changed}),
            text,
        );
    }
    let place = |s: &Option<StoreRef>| match s {
        None => format!("files in {}", Layout::new(root).state_dir().display()),
        Some(s) => format!("{} at {} (project {})", s.kind, stores::redacted(&s.url), s.project),
    };
    let opened = open(root, env.clock.clone(), reporter.clone(), &env.options);
    here.store = stores::shown(&here.store);
    if let StoreCommand::Show = cmd {
        // Where the state is, even when the store cannot be opened (not trusted here, no
        // password, down): that is when a person looks.
        let (ids, why) = match opened.and_then(|from| from.project()) {
            Ok(p) => (Some(p.goals.iter().map(|g| g.id.to_string()).collect::<Vec<_>>()), None),
            Err(e) => (None, Some(e)),
        };
        let goals = match (&ids, &why) {
            (Some(ids), _) if ids.is_empty() => "none".to_owned(),
            (Some(ids), _) => ids.join(", "),
            (None, Some(e)) => format!("not read: {}", e.message),
            (None, None) => String::new(),
        };
        let hint =
            why.as_ref().and_then(|e| e.hint.as_ref()).map(|h| format!("hint: {h}\n")).unwrap_or_default();
        let text = format!("state: {}\ngoals: {goals}\n{hint}", place(&here.store));
        let error = why.map(|e| json!({"message": e.message, "hint": e.hint}));
        return Rendered::new(&json!({"store": here.store, "goals": ids, "error": error}), text);
    }
    let from = opened?;
    match cmd {
        StoreCommand::Trust { .. } | StoreCommand::Show => Err(Error::internal("answered above")),
        StoreCommand::Migrate { to, store_project, dry_run } => {
            let target = if to == "file" { None } else { Some(stores::store_ref(to, store_project)?) };
            migrate::refuse_same_store(&here.store, &target, &place(&here.store))?;
            let (goals, events) = migrate::planned(from.as_ref())?;
            let what = format!(
                "{} goal(s), {events} event(s), from {} to {}",
                goals.len(),
                place(&here.store),
                place(&target)
            );
            if *dry_run {
                return Rendered::new(
                    &json!({"dry_run": true, "from": here.store, "to": target, "goals": goals, "events": events}),
                    format!("would copy {what}; nothing was changed\n"),
                );
            }
            let (copied, kept) = match &target {
                None => {
                    migrate::to_files(root, from.as_ref(), env.clock.clone(), reporter, env.options.clone())?
                }
                Some(s) => {
                    let trust = trust()?;
                    let url = stores::given_url(to, &trust.passwords)?;
                    if in_session.is_none() {
                        trust.set(root, s, false, env.clock.now())?;
                    }
                    let db =
                        PgStore::connect(&url, &s.project, root, env.clock.clone(), reporter, &env.options)?;
                    migrate::to_store(root, from.as_ref(), s, &db, env.clock.now())?
                }
            };
            let mut text = format!("copied {what}; each log verified on both sides\n");
            for c in &copied {
                text.push_str(&format!(
                    "  {}: {} events, head {}\n",
                    c.id,
                    c.events,
                    &c.head[..c.head.len().min(16)]
                ));
            }
            if let Some(k) = &kept {
                text.push_str(&format!("the file store's goals are kept in {}\n", k.display()));
            }
            let goals: Vec<_> =
                copied.iter().map(|c| json!({"id": c.id, "events": c.events, "head": c.head})).collect();
            Rendered::new(
                &json!({"dry_run": false, "from": here.store, "to": target, "goals": goals, "kept": kept}),
                text,
            )
        }
    }
}

/// Connects to the database `url` names (as given, or with the password found for it), so a
/// project is never pointed at a store it cannot reach; the store, for the rest of the command.
pub fn reach(
    url: &str,
    store: &StoreRef,
    root: &Path,
    env: &Env,
    reporter: Arc<dyn Reporter>,
) -> Result<PgStore> {
    let url = stores::given_url(url, &trust()?.passwords)?;
    PgStore::connect(&url, &store.project, root, env.clock.clone(), reporter, &env.options)
}

/// The store the project at `root` names in its `project.json`, if it names one. (An
/// unreadable `project.json` is the file store's to report, and `doctor --repair`'s to mend.)
pub fn named_store(root: &Path) -> Option<StoreRef> {
    let layout = Layout::new(root);
    layout.project_file().is_file().then(|| read_project(&layout).ok().and_then(|p| p.store)).flatten()
}

/// A database project's change feed: its commit notices.
struct PgFeed(Listener);

impl ChangeFeed for PgFeed {
    fn wait(&mut self, timeout: std::time::Duration) -> Result<bool> {
        Ok(self.0.wait(timeout)?.is_some())
    }
}

/// The change feed of the project at `root` (of one `goal` of it, on the file store), for the
/// store it names.
pub fn change_feed(
    root: &Path,
    goal: Option<&loopx_core::GoalId>,
    env_clock: Arc<dyn Clock>,
) -> Result<Box<dyn ChangeFeed>> {
    match named_store(root) {
        None => Ok(Box::new(match goal {
            Some(g) => FileFeed::goal(root, g)?,
            None => FileFeed::new(root)?,
        })),
        Some(s) => {
            let url = trust()?.connect_url(root, &s)?;
            let store = PgStore::connect(
                &url,
                &s.project,
                root,
                env_clock,
                Arc::new(loopx_kernel::Silent),
                &StoreOptions::default(),
            )?;
            Ok(Box::new(PgFeed(store.listen()?)))
        }
    }
}
