//! Which database a project may be connected to from this machine, and with what password.
//! `project.json` never holds a credential: the password comes from the full URL the person
//! exported, from `PGPASSWORD`, or from a pgpass file ([`Passwords`], which the caller reads
//! from its environment). A database `project.json` names is connected to only once this
//! machine's person trusted it for that project directory ([`Trust`]), and a password travels
//! to another machine only over TLS ([`guard_password`]).

use std::path::{Path, PathBuf};

use loopx_core::{Error, Result, Timestamp};
use loopx_kernel::project::StoreRef;

use crate::trusted;

/// Where a password for a store may come from, as the caller's environment gives them.
#[derive(Clone, Debug, Default)]
pub struct Passwords {
    /// A full URL, with its password, the person exported for the store (`LOOPX_STORE_URL`).
    pub store_url: Option<String>,
    /// `PGPASSWORD`.
    pub pgpassword: Option<String>,
    /// The pgpass file to look in (`PGPASSFILE`, else `~/.pgpass`).
    pub pgpass_file: Option<PathBuf>,
}

/// A `postgres://` URL taken apart: `scheme://user[:password]@host[:port]/database[?params]`.
#[derive(Debug, PartialEq, Eq)]
pub struct PgUrl<'a> {
    scheme: &'a str,
    user: &'a str,
    password: Option<&'a str>,
    host: &'a str,
    port: Option<&'a str>,
    rest: &'a str,
}

impl<'a> PgUrl<'a> {
    /// `url` taken apart; anything but a PostgreSQL URL naming a user and a host is refused.
    pub fn parse(url: &'a str) -> Result<Self> {
        let bad = || {
            Error::usage(format!("{:?} is not a PostgreSQL URL", redacted(url))).with_hint(
                "write it as postgres://user@host:5432/database (the password from PGPASSWORD or ~/.pgpass)",
            )
        };
        let (scheme, after) = url.split_once("://").ok_or_else(bad)?;
        if scheme != "postgres" && scheme != "postgresql" {
            return Err(bad());
        }
        let (auth, hostpart) = after.rsplit_once('@').ok_or_else(|| {
            Error::usage(format!("{:?} names no user", redacted(url)))
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
        Ok(Self { scheme, user, password, host, port, rest })
    }

    /// Whether the URL carries a password.
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// The URL as `project.json` may keep it.
    pub fn without_password(&self) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{}@{}{port}{}", self.scheme, self.user, self.host, self.rest)
    }

    /// The URL with `password`, percent-encoded.
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
    PgUrl::parse(url).is_ok_and(|u| u.has_password())
}

/// `url` with any password masked, for messages.
pub fn redacted(url: &str) -> String {
    match url.split_once("://").and_then(|(s, a)| a.rsplit_once('@').map(|(auth, h)| (s, auth, h))) {
        Some((s, auth, h)) if auth.contains(':') => {
            format!("{s}://{}:***@{h}", auth.split(':').next().unwrap_or(""))
        }
        _ => url.to_owned(),
    }
}

/// `store` as it may be shown: its URL without a password, whatever `project.json` holds.
pub fn shown(store: &Option<StoreRef>) -> Option<StoreRef> {
    store.as_ref().map(|s| StoreRef { url: redacted(&s.url), ..s.clone() })
}

/// What `project.json` records for a store at `url`: the URL without its password.
pub fn store_ref(url: &str, project: &str) -> Result<StoreRef> {
    let parsed = PgUrl::parse(url)?;
    if project.is_empty() || project.chars().any(char::is_control) {
        return Err(Error::usage("--store-project needs a name").with_hint("--store-project default"));
    }
    Ok(StoreRef { kind: "postgres".to_owned(), url: parsed.without_password(), project: project.to_owned() })
}

/// `url` with the password `passwords` find for it, if it has none of its own: the exported
/// full URL for the same database, then `PGPASSWORD`, then the pgpass file.
pub fn with_password(url: &str, passwords: &Passwords) -> Result<String> {
    let parsed = PgUrl::parse(url)?;
    if parsed.has_password() {
        return Ok(url.to_owned());
    }
    if let Some(full) = &passwords.store_url
        && let Ok(p) = PgUrl::parse(full)
        && p.has_password()
        && p.without_password() == parsed.without_password()
    {
        return Ok(full.clone());
    }
    if let Some(password) = &passwords.pgpassword {
        return Ok(parsed.with(password));
    }
    let found =
        passwords.pgpass_file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).and_then(|text| {
            pgpass_lookup(&text, parsed.host, parsed.port.unwrap_or("5432"), parsed.database(), parsed.user)
        });
    Ok(found.map_or_else(|| url.to_owned(), |p| parsed.with(&p)))
}

/// The URL to connect with for a database the person named on the command line (`init
/// --store`, `store migrate --to`): as given, or with the password found for it, and never a
/// password to another machine without TLS.
pub fn given_url(url: &str, passwords: &Passwords) -> Result<String> {
    let url = with_password(url, passwords)?;
    guard_password(&url)?;
    Ok(url)
}

/// Refuses to send a password to another machine over a connection that may be plain text:
/// a URL with a password to a host other than this one needs `sslmode=require`, `verify-ca`
/// or `verify-full`.
pub fn guard_password(url: &str) -> Result<()> {
    let parsed = PgUrl::parse(url)?;
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
        redacted(url)
    ))
    .with_hint("add sslmode=require to the URL (or verify-full with sslrootcert=/path/to/ca.pem)"))
}

/// The password a pgpass file gives (`host:port:database:user:password` lines, `*` matching
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

/// This machine's trust in the databases projects name: the list in `file` (`stores.json` in
/// the person's configuration directory) and the passwords the caller's environment gives.
#[derive(Clone, Debug)]
pub struct Trust {
    pub file: PathBuf,
    pub passwords: Passwords,
}

impl Trust {
    /// What a trust of `store` for the project at `root` is keyed by.
    fn key(root: &Path, store: &StoreRef) -> Result<String> {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Ok(trusted::key(&root, &PgUrl::parse(&store.url)?.without_password(), &store.project))
    }

    /// Records that this machine's person trusts `store` for the project at `root` (or, with
    /// `revoke`, no longer does); whether it changed.
    pub fn set(&self, root: &Path, store: &StoreRef, revoke: bool, now: Timestamp) -> Result<bool> {
        let entry = trusted::TrustedStore {
            key: Self::key(root, store)?,
            path: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            url: PgUrl::parse(&store.url)?.without_password(),
            project: store.project.clone(),
            added_at: now,
        };
        trusted::set(&self.file, entry, revoke)
    }

    /// The URL to connect to for the store the project at `root` names: refused unless this
    /// machine's person trusted it for the project, with the password found for it, and never
    /// a password to another machine without TLS.
    pub fn connect_url(&self, root: &Path, store: &StoreRef) -> Result<String> {
        if !trusted::is_trusted(&self.file, &Self::key(root, store)?) {
            return Err(Error::refused(format!(
                "this project keeps its state in PostgreSQL at {} (project {}), which nobody on this machine has trusted for {}: loopx will not connect there (it would send your password)",
                redacted(&store.url),
                store.project,
                root.display()
            ))
            .with_hint("if you know that database, trust it with: loopx store trust (in this project)"));
        }
        given_url(&store.url, &self.passwords)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_lose_their_password_and_get_it_back_encoded() {
        let u = PgUrl::parse("postgres://ann:s3cret@db.example:5433/loopx?sslmode=disable").unwrap();
        assert_eq!(u.without_password(), "postgres://ann@db.example:5433/loopx?sslmode=disable");
        assert_eq!(u.database(), "loopx");
        assert_eq!(u.with("p@ss:w/d"), "postgres://ann:p%40ss%3Aw%2Fd@db.example:5433/loopx?sslmode=disable");
        assert_eq!(PgUrl::parse("postgresql://bob@localhost").unwrap().database(), "bob");
        assert_eq!(redacted("postgres://ann:s3cret@h/db"), "postgres://ann:***@h/db");
        for bad in ["mysql://a@h/db", "postgres://h/db", "host=x user=y", "postgres://@h/db"] {
            assert!(PgUrl::parse(bad).is_err(), "{bad}");
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

    #[test]
    fn passwords_come_from_the_exported_url_then_pgpassword_then_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let pgpass = dir.path().join("pgpass");
        std::fs::write(&pgpass, "h:5432:db:ann:fromfile\n").unwrap();
        let url = "postgres://ann@h/db";
        let mut p = Passwords { pgpass_file: Some(pgpass), ..Passwords::default() };
        assert_eq!(with_password(url, &p).unwrap(), "postgres://ann:fromfile@h/db");
        p.pgpassword = Some("env".into());
        assert_eq!(with_password(url, &p).unwrap(), "postgres://ann:env@h/db");
        p.store_url = Some("postgres://ann:full@h/db".into());
        assert_eq!(with_password(url, &p).unwrap(), "postgres://ann:full@h/db");
        // An exported URL for another database is not used for this one.
        p.store_url = Some("postgres://ann:full@other/db".into());
        assert_eq!(with_password(url, &p).unwrap(), "postgres://ann:env@h/db");
    }

    #[test]
    fn a_password_leaves_this_machine_only_over_tls() {
        assert!(guard_password("postgres://ann:pw@db.example/x").is_err());
        assert!(guard_password("postgres://ann:pw@db.example/x?sslmode=require").is_ok());
        assert!(guard_password("postgres://ann:pw@127.0.0.1/x").is_ok());
        assert!(guard_password("postgres://ann@db.example/x").is_ok());
    }

    #[test]
    fn a_store_is_reached_only_once_trusted_for_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let trust = Trust { file: dir.path().join("stores.json"), passwords: Passwords::default() };
        let store = store_ref("postgres://ann@127.0.0.1/db", "team").unwrap();
        let root = dir.path();
        let e = trust.connect_url(root, &store).unwrap_err();
        assert!(e.message.contains("nobody on this machine has trusted"), "{e:?}");
        assert!(trust.set(root, &store, false, Timestamp::from_unix_millis(0)).unwrap());
        assert_eq!(trust.connect_url(root, &store).unwrap(), "postgres://ann@127.0.0.1/db");
        assert!(trust.set(root, &store, true, Timestamp::from_unix_millis(0)).unwrap());
        assert!(trust.connect_url(root, &store).is_err());
    }
}
