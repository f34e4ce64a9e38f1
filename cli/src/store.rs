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
            let url = connect_url(root, &s)?;
            Ok(Box::new(PgStore::connect(&url, &s.project, root, clock, reporter, options)?))
        }
    }
}

/// The file listing the stores this machine's person trusted.
fn trusted_file() -> Result<PathBuf> {
    crate::projects::config_file("stores.json")
}

/// What a trust of `store` for the project at `root` is keyed by.
fn trust_key(root: &Path, store: &StoreRef) -> Result<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    Ok(loopx_machine::trusted::key(&root, &parse(&store.url)?.without_password(), &store.project))
}

/// Records that this machine's person trusts `store` for the project at `root` (or, with
/// `revoke`, no longer does); whether it changed.
pub fn trust(root: &Path, store: &StoreRef, revoke: bool, now: loopx_core::Timestamp) -> Result<bool> {
    let path = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let entry = loopx_machine::trusted::TrustedStore {
        key: trust_key(root, store)?,
        path,
        url: parse(&store.url)?.without_password(),
        project: store.project.clone(),
        added_at: now,
    };
    loopx_machine::trusted::set(&trusted_file()?, entry, revoke)
}

/// The URL to connect to for the store the project at `root` names: refused unless this
/// machine's person trusted it for the project, with the password found for it, and never a
/// password to another machine without TLS.
fn connect_url(root: &Path, store: &StoreRef) -> Result<String> {
    if !loopx_machine::trusted::is_trusted(&trusted_file()?, &trust_key(root, store)?) {
        return Err(Error::refused(format!(
            "this project keeps its state in PostgreSQL at {} (project {}), which nobody on this machine has trusted for {}: loopx will not connect there (it would send your password)",
            redacted_text(&store.url),
            store.project,
            root.display()
        ))
        .with_hint("if you know that database, trust it with: loopx store trust (in this project)"));
    }
    let url = with_password(&store.url)?;
    guard_password(&url)?;
    Ok(url)
}

/// Refuses to send a password to another machine over a connection that may be plain text:
/// a URL with a password to a host other than this one needs `sslmode=require`, `verify-ca`
/// or `verify-full`.
fn guard_password(url: &str) -> Result<()> {
    let parsed = parse(url)?;
    let local = matches!(parsed.host, "localhost" | "::1" | "[::1]")
        || parsed.host.starts_with("127.")
        || parsed.host.starts_with('/')
        || parsed.host.starts_with("%2F")
        || parsed.host.starts_with("%2f");
    let tls = parsed
        .rest
        .split(['?', '&'])
        .any(|p| matches!(p, "sslmode=require" | "sslmode=verify-ca" | "sslmode=verify-full"));
    if parsed.password.is_none() || local || tls {
        return Ok(());
    }
    Err(Error::refused(format!(
        "loopx sends a password to another machine only over TLS, and {} may connect in plain text",
        redacted_text(url)
    ))
    .with_hint("add sslmode=require to the URL (or verify-full with sslrootcert=/path/to/ca.pem)"))
}

/// `store` as it may be shown: its URL without a password, whatever `project.json` holds.
fn shown(store: &Option<StoreRef>) -> Option<StoreRef> {
    store.as_ref().map(|s| StoreRef { url: redacted_text(&s.url), ..s.clone() })
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
        let changed = trust(root, store, *revoke, env.clock.now())?;
        let url = redacted_text(&store.url);
        let text = match (revoke, changed) {
            (false, true) => format!("trusted {url} (project {}) for {}\n", store.project, root.display()),
            (false, false) => format!("{url} (project {}) was trusted already\n", store.project),
            (true, true) => format!("{url} is no longer trusted for {}\n", root.display()),
            (true, false) => format!("{url} was not trusted for {}\n", root.display()),
        };
        return Rendered::new(
            &json!({"store": shown(&here.store), "trusted": !revoke, "changed": changed}),
            text,
        );
    }
    let place = |s: &Option<StoreRef>| match s {
        None => format!("files in {}", Layout::new(root).state_dir().display()),
        Some(s) => format!("{} at {} (project {})", s.kind, redacted_text(&s.url), s.project),
    };
    let opened = open(root, env.clock.clone(), reporter.clone(), &env.options);
    here.store = shown(&here.store);
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
    let goals = from.project()?.goals;
    match cmd {
        StoreCommand::Trust { .. } | StoreCommand::Show => Err(Error::internal("answered above")),
        StoreCommand::Migrate { to, store_project, dry_run } => {
            let target = if to == "file" { None } else { Some(store_ref(to, store_project)?) };
            if target == here.store {
                return Err(Error::refused(format!(
                    "the project keeps its state in {} already",
                    place(&here.store)
                )));
            }
            let mut events = 0;
            for g in &goals {
                events += from.scan(&g.id)?.lines.len();
            }
            let what = format!(
                "{} goal(s), {events} event(s), from {} to {}",
                goals.len(),
                place(&here.store),
                place(&target)
            );
            if *dry_run {
                let ids: Vec<String> = goals.iter().map(|g| g.id.to_string()).collect();
                return Rendered::new(
                    &json!({"dry_run": true, "from": here.store, "to": target, "goals": ids, "events": events}),
                    format!("would copy {what}; nothing was changed\n"),
                );
            }
            let stamp: String =
                env.clock.now().to_string().chars().filter(char::is_ascii_alphanumeric).collect();
            let (copied, kept) = match &target {
                None => {
                    let (dir, staged) = migrate::staging_store(
                        root,
                        &stamp,
                        env.clock.clone(),
                        reporter.clone(),
                        env.options.clone(),
                    )?;
                    let copied = migrate::copy_goals(from.as_ref(), &staged)?;
                    drop(staged);
                    (copied, migrate::adopt_staged(root, &dir, &stamp)?)
                }
                Some(s) => {
                    let url = if parse(to)?.password.is_some() { to.clone() } else { with_password(to)? };
                    guard_password(&url)?;
                    if in_session.is_none() {
                        trust(root, s, false, env.clock.now())?;
                    }
                    let db = PgStore::connect(
                        &url,
                        &s.project,
                        root,
                        env.clock.clone(),
                        reporter.clone(),
                        &env.options,
                    )?;
                    let copied = migrate::copy_goals(from.as_ref(), &db)?;
                    (copied, migrate::point_at(root, s, &stamp)?)
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
    let url = if parse(url)?.password.is_some() { url.to_owned() } else { with_password(url)? };
    guard_password(&url)?;
    PgStore::connect(&url, &store.project, root, env.clock.clone(), reporter, &env.options)
}

/// The store the project at `root` names in its `project.json`, if it names one. (An
/// unreadable `project.json` is the file store's to report, and `doctor --repair`'s to mend.)
pub fn named_store(root: &Path) -> Option<StoreRef> {
    let layout = Layout::new(root);
    layout.project_file().is_file().then(|| read_project(&layout).ok().and_then(|p| p.store)).flatten()
}

/// A `postgres://` URL taken apart: `scheme://user[:password]@host[:port]/database[?params]`.
#[derive(Debug, PartialEq, Eq)]
struct Url<'a> {
    scheme: &'a str,
    user: &'a str,
    password: Option<&'a str>,
    host: &'a str,
    port: Option<&'a str>,
    rest: &'a str,
}

fn parse(url: &str) -> Result<Url<'_>> {
    let bad = || {
        Error::usage(format!("{:?} is not a PostgreSQL URL", redacted_text(url))).with_hint(
            "write it as postgres://user@host:5432/database (the password from PGPASSWORD or ~/.pgpass)",
        )
    };
    let (scheme, after) = url.split_once("://").ok_or_else(bad)?;
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(bad());
    }
    let (auth, hostpart) = after.rsplit_once('@').ok_or_else(|| {
        Error::usage(format!("{:?} names no user", redacted_text(url)))
            .with_hint("write it as postgres://user@host:5432/database")
    })?;
    let (user, password) = match auth.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (auth, None),
    };
    let (hostport, rest) = hostpart.find(['/', '?']).map_or((hostpart, ""), |i| hostpart.split_at(i));
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => (h, Some(p)),
        _ => (hostport, None),
    };
    if user.is_empty() || host.is_empty() {
        return Err(bad());
    }
    Ok(Url { scheme, user, password, host, port, rest })
}

impl Url<'_> {
    fn without_password(&self) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{}@{}{port}{}", self.scheme, self.user, self.host, self.rest)
    }

    fn with(&self, password: &str) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        let password: String = password
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        format!("{}://{}:{password}@{}{port}{}", self.scheme, self.user, self.host, self.rest)
    }

    /// The database's name (`rest` up to its parameters), or the user's, as libpq defaults.
    fn database(&self) -> &str {
        let db = self.rest.trim_start_matches('/').split('?').next().unwrap_or("");
        if db.is_empty() { self.user } else { db }
    }
}

/// Whether `url` carries a password.
pub fn has_password(url: &str) -> bool {
    parse(url).is_ok_and(|u| u.password.is_some())
}

/// `url` with any password masked, for messages.
fn redacted_text(url: &str) -> String {
    match url.split_once("://").and_then(|(s, a)| a.rsplit_once('@').map(|(auth, h)| (s, auth, h))) {
        Some((s, auth, h)) if auth.contains(':') => {
            format!("{s}://{}:***@{h}", auth.split(':').next().unwrap_or(""))
        }
        _ => url.to_owned(),
    }
}

/// What `project.json` records for a store at `url`: the URL without its password.
pub fn store_ref(url: &str, project: &str) -> Result<StoreRef> {
    let parsed = parse(url)?;
    if project.is_empty() || project.chars().any(char::is_control) {
        return Err(Error::usage("--store-project needs a name").with_hint("--store-project default"));
    }
    Ok(StoreRef { kind: "postgres".to_owned(), url: parsed.without_password(), project: project.to_owned() })
}

/// `url` (as `project.json` keeps it) with the password found in the environment, if any.
pub fn with_password(url: &str) -> Result<String> {
    let parsed = parse(url)?;
    if parsed.password.is_some() {
        return Ok(url.to_owned());
    }
    if let Ok(full) = std::env::var(STORE_URL_VAR)
        && let Ok(p) = parse(&full)
        && p.password.is_some()
        && p.without_password() == parsed.without_password()
    {
        return Ok(full);
    }
    if let Ok(password) = std::env::var("PGPASSWORD") {
        return Ok(parsed.with(&password));
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")));
    let found = file.and_then(|f| std::fs::read_to_string(f).ok()).and_then(|text| {
        pgpass_lookup(&text, parsed.host, parsed.port.unwrap_or("5432"), parsed.database(), parsed.user)
    });
    Ok(found.map_or_else(|| url.to_owned(), |p| parsed.with(&p)))
}

/// The password `~/.pgpass` gives (`host:port:database:user:password` lines, `*` matching
/// anything, `\:` and `\\` escaped), the first matching line winning.
fn pgpass_lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => cur.extend(chars.next()),
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        let [h, p, d, u, password] = &fields[..] else { continue };
        let matches = |pat: &str, v: &str| pat == "*" || pat == v;
        if matches(h, host) && matches(p, port) && matches(d, db) && matches(u, user) {
            return Some(password.clone());
        }
    }
    None
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
            let url = connect_url(root, &s)?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_lose_their_password_and_get_it_back_encoded() {
        let u = parse("postgres://ann:s3cret@db.example:5433/loopx?sslmode=disable").unwrap();
        assert_eq!(u.without_password(), "postgres://ann@db.example:5433/loopx?sslmode=disable");
        assert_eq!(u.database(), "loopx");
        assert_eq!(u.with("p@ss:w/d"), "postgres://ann:p%40ss%3Aw%2Fd@db.example:5433/loopx?sslmode=disable");
        assert_eq!(parse("postgresql://bob@localhost").unwrap().database(), "bob");
        assert_eq!(redacted_text("postgres://ann:s3cret@h/db"), "postgres://ann:***@h/db");
        for bad in ["mysql://a@h/db", "postgres://h/db", "host=x user=y", "postgres://@h/db"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let r = store_ref("postgres://ann:s3cret@h:1/db", "team").unwrap();
        assert!(!r.url.contains("s3cret"), "{r:?}");
    }

    #[test]
    fn pgpass_matches_fields_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:*:ann:no\nh:5432:db:ann:pa\\:ss\\\\1\n*:*:*:*:fallback\n";
        assert_eq!(pgpass_lookup(text, "h", "5432", "db", "ann").as_deref(), Some("pa:ss\\1"));
        assert_eq!(pgpass_lookup(text, "x", "1", "y", "z").as_deref(), Some("fallback"));
        assert_eq!(pgpass_lookup("h:5432:db:ann\n", "h", "5432", "db", "ann"), None);
    }
}
