//! loopx-pgstore: the PostgreSQL store. A goal's hash-chained log is one row an event, its
//! state one row kept with it in the same transaction, so machines that share a database share
//! goals. The kernel's commit protocol is unchanged: the [`Txn`] applies the event and computes
//! its state root; [`Store::append`] inserts the line and updates the state, then commits.
//!
//! - **Locking**: a writer holds a transaction-scoped advisory lock on its goal from loading
//!   the state to committing (never across anything but its own statements); a waiter gives up
//!   after the lock timeout with "busy".
//! - **Concurrent appends**: `(ns, goal, seq)` is the events' primary key, so two appends of the
//!   same event number cannot both commit.
//! - **Hand edits**: a trigger marks a goal when any of its event rows is updated or deleted
//!   (and every goal when the table is truncated), firing always, replication role or not;
//!   the next command then verifies the whole chain, as the file store does when `events.jsonl`
//!   changed size or time. Every command checks the triggers are there and enabled, and while
//!   they are not it verifies the whole chain each time. A changed state row is caught by its
//!   root on every read.
//! - **Namespaces**: one database holds many loopx projects, each under its own `ns`.
//!
//! Connections are secured as the URL's `sslmode` says, with rustls (see [`tls`]).

use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod tls;

use parking_lot::ReentrantMutex;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::Type;
use postgres::{Client, NoTls};
use sha2::{Digest, Sha256};

use loopx_core::event::Event;
use loopx_core::kernel::{DoctorCheck, DoctorGoal, DoctorReport};
use loopx_core::{Clock, Error, GoalId, Result};
use loopx_kernel::codec;
use loopx_kernel::doctor::{report, verify_log, with_repairs};
use loopx_kernel::log::{self, EventLine, Scan};
use loopx_kernel::project::ProjectFile;
use loopx_kernel::state::{ArchiveHead, ArchivedTodo, GoalState};
use loopx_kernel::store::{
    Commit, Doctor, Store, Txn, archive_text, chain_error, check_root, encode_state, events_missing, genesis,
    lines_of, read_archive, replay, root_matches, verify_lines,
};
use loopx_kernel::table;
use loopx_kernel::{Reporter, StoreOptions};

/// The schema, one entry a version; a database is brought to the last on connect.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE loopx_projects (ns TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE loopx_goals (
    ns TEXT NOT NULL, goal TEXT NOT NULL,
    seq BIGINT NOT NULL, head TEXT NOT NULL, state TEXT NOT NULL,
    dirty BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (ns, goal));
CREATE TABLE loopx_events (
    ns TEXT NOT NULL, goal TEXT NOT NULL, seq BIGINT NOT NULL, line TEXT NOT NULL,
    PRIMARY KEY (ns, goal, seq));
CREATE TABLE loopx_archive (
    ns TEXT NOT NULL, goal TEXT NOT NULL, n BIGINT NOT NULL, line TEXT NOT NULL,
    PRIMARY KEY (ns, goal, n));
CREATE FUNCTION loopx_events_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE loopx_goals SET dirty = true WHERE ns = OLD.ns AND goal = OLD.goal;
    RETURN NULL;
END $$;
CREATE TRIGGER loopx_events_changed AFTER UPDATE OR DELETE ON loopx_events
    FOR EACH ROW EXECUTE FUNCTION loopx_events_changed();
",
    r"
ALTER TABLE loopx_events ENABLE ALWAYS TRIGGER loopx_events_changed;
CREATE FUNCTION loopx_events_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE loopx_goals SET dirty = true;
    RETURN NULL;
END $$;
CREATE TRIGGER loopx_events_truncated AFTER TRUNCATE ON loopx_events
    FOR EACH STATEMENT EXECUTE FUNCTION loopx_events_truncated();
ALTER TABLE loopx_events ENABLE ALWAYS TRIGGER loopx_events_truncated;
",
];

/// How many of the triggers that mark hand edits are in place and fire always (also under
/// `session_replication_role = replica`): both, or every command verifies the whole log.
const GUARDS: &str = "(SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = to_regclass('loopx_events')      AND t.tgname IN ('loopx_events_changed', 'loopx_events_truncated') AND t.tgenabled = 'A')";

/// The triggers, enabled again (`doctor --repair`).
const GUARDS_ON: &str = "ALTER TABLE loopx_events ENABLE ALWAYS TRIGGER loopx_events_changed;      ALTER TABLE loopx_events ENABLE ALWAYS TRIGGER loopx_events_truncated";

/// The channel every commit is announced on (`LISTEN loopx_commits`), with a JSON payload
/// `{"project", "goal", "seq"}`.
pub const CHANNEL: &str = "loopx_commits";

/// What an append is called in errors.
const APPEND: &str = "append the event";

/// The advisory lock that serialises migrations.
const MIGRATION_LOCK: i64 = 0x6c6f_6f70_785f_6d69;

struct Conn {
    /// Always there until the store is dropped (then closed off the caller's runtime).
    client: Option<Client>,
    /// A transaction is open on `client` (begun by `transact`, ended by `append` or rollback).
    in_txn: bool,
}

/// A commit another connection made, as [`Listener::wait`] hears of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub goal: GoalId,
    pub seq: u64,
}

/// Hears of the commits to one project, so a dashboard or a waiting agent wakes when the state
/// changes instead of polling it.
pub struct Listener {
    ns: String,
    conn: Conn,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener").field("ns", &self.ns).finish_non_exhaustive()
    }
}

impl Listener {
    /// The next commit to the project, or `None` when `timeout` passes first.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Notice>> {
        let deadline = std::time::Instant::now() + timeout;
        let (ns, conn) = (&self.ns, &mut self.conn);
        off_runtime(|| {
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let mut notices = conn.client().notifications();
                let Some(n) = notices.timeout_iter(left).next().map_err(|e| db("listen", &e))? else {
                    return Ok(None);
                };
                let v: serde_json::Value = serde_json::from_str(n.payload()).unwrap_or_default();
                if v["project"].as_str() != Some(ns.as_str()) {
                    continue;
                }
                let goal = v["goal"].as_str().and_then(|g| GoalId::new(g).ok());
                if let (Some(goal), Some(seq)) = (goal, v["seq"].as_u64()) {
                    return Ok(Some(Notice { goal, seq }));
                }
            }
        })
    }
}

impl Conn {
    fn client(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!("the client is taken only on drop"))
    }

    /// Connects again when the connection was lost between calls (a database restart, an idle
    /// timeout), so a long-lived process (the MCP server) does not stay broken. Never inside a
    /// transaction: a mutation whose connection died is reported and not silently retried.
    fn revive(&mut self, url: &str) -> Result<()> {
        if !self.in_txn && self.client().is_closed() {
            let fresh = client(url)?;
            if let Some(old) = self.client.replace(fresh) {
                drop(old);
            }
        }
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            off_runtime(move || drop(client));
        }
    }
}

/// A loopx project kept in a PostgreSQL database.
pub struct PgStore {
    root: PathBuf,
    ns: String,
    url: String,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    lock_timeout: Duration,
    /// One connection; re-entered by the thread whose transaction commits through it.
    conn: ReentrantMutex<RefCell<Conn>>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore").field("ns", &self.ns).finish_non_exhaustive()
    }
}

/// A database error as loopx reports it. An unreachable database, a server shutting down or
/// restarting, a lost connection, or a lock not granted in time is "busy": nothing was
/// committed, and the command is safe to retry (a turn id makes the retry exact). Anything else
/// names the statement that failed and the server's words.
/// Where loopx finds a database password, for a refused login.
const PASSWORD_HINT: &str = "give loopx the password in LOOPX_STORE_URL (postgres://user:password@…), PGPASSWORD or ~/.pgpass; it is never written to .loopx/";

fn db(what: &str, e: &postgres::Error) -> Error {
    use postgres::error::SqlState;
    // A login refused, or one that needs a password loopx does not have: retrying never helps.
    if let Some(server) = e.as_db_error().filter(|s| s.code().code().starts_with("28")) {
        return Error::refused(format!("{what}: the database refused the login ({})", server.message()))
            .with_hint(PASSWORD_HINT);
    }
    if e.as_db_error().is_none() && format!("{e:?}").contains("password missing") {
        return Error::refused(format!("{what}: the database asks for a password, and loopx was given none"))
            .with_hint(PASSWORD_HINT);
    }
    let Some(server) = e.as_db_error() else {
        let text = e.to_string();
        if text.contains("TLS") || text.contains("certificate") {
            return Error::refused(format!("{what}: the connection could not be secured ({text})")).with_hint(
                "name the server's CA with sslrootcert=/path/to/ca.pem in the URL (verify-full checks the certificate), \
                 or use sslmode=require to encrypt without checking it",
            );
        }
        return Error::busy(format!("{what}: the database is not reachable ({e})"))
            .with_hint("check that PostgreSQL is running and the store URL is right, then try again");
    };
    let code = server.code();
    if *code == SqlState::LOCK_NOT_AVAILABLE {
        return Error::busy(format!("{what}: another writer holds the goal")).with_hint("try again");
    }
    // The events' key refused a second event of the same number: another writer got there
    // first (the advisory lock makes this rare).
    if *code == SqlState::UNIQUE_VIOLATION && what == APPEND {
        return Error::busy(format!("{what}: another writer appended first")).with_hint("try again");
    }
    // Classes 08 (connection), 53 (resources) and 57 (operator intervention: shutdown, restart).
    if ["08", "53", "57"].iter().any(|class| code.code().starts_with(class)) {
        return Error::busy(format!("{what}: the database is unavailable ({})", server.message()))
            .with_hint("try again in a moment");
    }
    Error::internal(format!("{what}: {} ({})", server.message(), code.code()))
}

/// A connection to `url`, secured as its `sslmode` says (see [`tls`]). Call off the runtime.
fn client(url: &str) -> Result<Client> {
    let secured = tls::secure(url)?;
    let mut config: postgres::Config =
        secured.url.parse().map_err(|e| Error::usage(format!("the store URL does not parse: {e}")))?;
    // What `pg_stat_activity` shows for loopx's connections, unless the URL names another.
    if config.get_application_name().is_none() {
        config.application_name("loopx");
    }
    let connected = match secured.tls {
        Some(tls) => config.connect(tls),
        None => config.connect(NoTls),
    };
    connected.map_err(|e| db("connect to the store", &e))
}

/// Runs `f` on a thread of its own: the client drives its own runtime, which cannot run inside
/// the caller's (the command line answers inside one).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// The advisory lock key of a goal.
fn lock_key(ns: &str, goal: &GoalId) -> i64 {
    let d = Sha256::digest(format!("{ns}\0{goal}").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    i64::from_be_bytes(b)
}

fn seq_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::internal("event number out of range"))
}

impl PgStore {
    /// Connects to `url` (a `postgres://` URL or a key=value string, password included: the
    /// caller reads it from wherever the user keeps it), brings the schema up to date, and
    /// opens project `ns` in it (created empty if new). `root` is the project's working
    /// directory.
    pub fn connect(
        url: &str,
        ns: &str,
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: &StoreOptions,
    ) -> Result<Self> {
        let client = off_runtime(|| {
            let mut client = client(url)?;
            // One round trip when the schema is current and the project exists (every command).
            let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
            let found = client.query_typed_one(
                "SELECT (SELECT version FROM loopx_schema LIMIT 1), \
                 EXISTS (SELECT 1 FROM loopx_projects WHERE ns = $1)",
                &[(&ns, Type::TEXT)],
            );
            let project_exists = match found {
                Ok(row) if row.get::<_, Option<i32>>(0) == Some(known) => row.get(1),
                _ => {
                    migrate(&mut client)?;
                    false
                }
            };
            if !project_exists {
                client
                    .execute(
                        "INSERT INTO loopx_projects (ns, body) VALUES ($1, $2) ON CONFLICT (ns) DO NOTHING",
                        &[&ns, &project_text(&ProjectFile::new())?],
                    )
                    .map_err(|e| db("create the project", &e))?;
            }
            Ok::<_, Error>(client)
        })?;
        Ok(Self {
            root: root.to_path_buf(),
            ns: ns.to_owned(),
            url: url.to_owned(),
            clock,
            reporter,
            lock_timeout: options.lock_timeout,
            conn: ReentrantMutex::new(RefCell::new(Conn { client: Some(client), in_txn: false })),
        })
    }

    /// A connection of its own that hears of every commit to this project.
    pub fn listen(&self) -> Result<Listener> {
        let client = off_runtime(|| {
            let mut client = client(&self.url)?;
            client.batch_execute(&format!("LISTEN {CHANNEL}")).map_err(|e| db("listen", &e))?;
            Ok::<_, Error>(client)
        })?;
        Ok(Listener { ns: self.ns.clone(), conn: Conn { client: Some(client), in_txn: false } })
    }

    /// Another connection to the same project, as another process would open it.
    pub fn reopen(&self) -> Result<Self> {
        let options = StoreOptions { lock_timeout: self.lock_timeout, ..StoreOptions::default() };
        Self::connect(&self.url, &self.ns, &self.root, self.clock.clone(), self.reporter.clone(), &options)
    }

    /// Changes goal `id`'s event rows as a hand edit would: `edit` works on the log's bytes,
    /// each complete line that changed is written back to its row, and a line removed deletes its
    /// row (a half line is dropped: a database never holds a torn row). For the store
    /// conformance suite.
    pub fn edit_log(&self, id: &GoalId, edit: &dyn Fn(&mut Vec<u8>)) -> Result<()> {
        let before = self.with(|conn| self.log_bytes(conn.client(), id))?;
        let mut after = before.clone();
        edit(&mut after);
        self.with(|conn| {
            let old: Vec<&[u8]> = before.split(|b| *b == b'\n').collect();
            let lines = after.split(|b| *b == b'\n').collect::<Vec<_>>();
            let complete = &lines[..lines.len().saturating_sub(1)];
            // A line removed is a row deleted.
            let keep = i64::try_from(complete.len()).unwrap_or(i64::MAX);
            conn.client()
                .execute(
                    "DELETE FROM loopx_events WHERE ns = $1 AND goal = $2 AND seq > $3",
                    &[&self.ns, &id.as_str(), &keep],
                )
                .map_err(|e| db("edit the log", &e))?;
            for (i, line) in complete.iter().enumerate() {
                if old.get(i) == Some(line) {
                    continue;
                }
                let text = String::from_utf8_lossy(line).into_owned();
                let seq = i64::try_from(i + 1).unwrap_or(i64::MAX);
                conn.client()
                    .execute(
                        "UPDATE loopx_events SET line = $4 WHERE ns = $1 AND goal = $2 AND seq = $3",
                        &[&self.ns, &id.as_str(), &seq, &text],
                    )
                    .map_err(|e| db("edit the log", &e))?;
            }
            Ok(())
        })
    }

    /// Runs `f` on the connection (not inside another call's borrow), off any async runtime.
    fn with<T: Send>(&self, f: impl FnOnce(&mut Conn) -> Result<T> + Send) -> Result<T> {
        let guard = self.conn.lock();
        let mut conn =
            guard.try_borrow_mut().map_err(|_| Error::internal("the store's connection is in use"))?;
        let conn: &mut Conn = &mut conn;
        off_runtime(move || {
            conn.revive(&self.url)?;
            f(conn)
        })
    }

    fn log_name(&self, id: &GoalId) -> PathBuf {
        PathBuf::from(format!("postgres:{}/goals/{id}/events", self.ns))
    }

    /// The log's bytes, as `events.jsonl` would hold them.
    fn log_bytes(&self, c: &mut Client, id: &GoalId) -> Result<Vec<u8>> {
        let rows = c
            .query(
                "SELECT line FROM loopx_events WHERE ns = $1 AND goal = $2 ORDER BY seq",
                &[&self.ns, &id.as_str()],
            )
            .map_err(|e| db("read the log", &e))?;
        let mut bytes = Vec::new();
        for r in rows {
            bytes.extend_from_slice(r.get::<_, &str>(0).as_bytes());
            bytes.push(b'\n');
        }
        Ok(bytes)
    }

    /// The goal's state and head. The state row is trusted when no event row changed since it
    /// was written and it hashes to the root its last event records; otherwise the log is
    /// verified and replayed (and the row rewritten when inside a transaction).
    /// Returns whether it rewrote the rows (which the transaction must then commit).
    fn load(&self, c: &mut Client, id: &GoalId, in_txn: bool) -> Result<(GoalState, String, bool)> {
        let row = c
            .query_typed_opt(
                &format!(
                    "SELECT g.state, g.head, g.dirty, e.line, g.seq, {GUARDS} FROM loopx_goals g \
                     LEFT JOIN loopx_events e ON e.ns = g.ns AND e.goal = g.goal AND e.seq = g.seq \
                     WHERE g.ns = $1 AND g.goal = $2"
                ),
                &[(&self.ns, Type::TEXT), (&id.as_str(), Type::TEXT)],
            )
            .map_err(|e| db("read the goal", &e))?
            .ok_or_else(|| {
                Error::not_found(format!("goal {id} not found in this project"))
                    .with_hint("see the goals with: loopx goal list")
            })?;
        let (state_text, head, dirty, last, at, guards): (&str, &str, bool, Option<&str>, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
        if guards != 2 {
            self.reporter.warn(&format!(
                "goal {id}: the triggers that mark hand edits of the log are disabled or gone; the whole log is verified by every command until `loopx doctor --repair` enables them"
            ));
        }
        let dirty = dirty || guards != 2;
        let root = last.and_then(|l| serde_json::from_str::<log::EventLine>(l).ok()).and_then(|l| l.root);
        if !dirty && let Some(root) = root {
            let bytes = Arc::new(state_text.as_bytes().to_vec());
            let (state, _) = codec::decode(&bytes, 0, bytes.len(), table::Bodies::Inline)
                .map_err(|e| Error::integrity(format!("goal {id}: its state row does not decode: {e}")))?;
            // The todos' JSON is checked against the hashes the root covers, once.
            if root_matches(&root, &state)? && state.todos.check().is_ok() {
                return Ok((state, head.to_owned(), false));
            }
        }
        if !dirty {
            self.reporter.warn(&format!(
                "goal {id}: its state row does not hash to the state the log records (edited by hand?); rebuilt from the log"
            ));
        }
        let bytes = self.log_bytes(c, id)?;
        let scan = log::scan(&bytes).map_err(|(_, b)| chain_error(&self.log_name(id), &b))?;
        let committed = u64::try_from(at).unwrap_or(0);
        if committed > scan.lines.len() as u64 {
            return Err(events_missing(id, committed, scan.lines.len() as u64));
        }
        let (state, archive) = replay(id, &scan)?;
        if check_root(id, &scan, &state, &archive)? {
            return Err(Error::integrity(format!("goal {id}: the log was written by an older loopx")));
        }
        let head = scan.head().to_owned();
        if in_txn {
            let text =
                String::from_utf8(encode_state(&state)?).map_err(|e| Error::internal(e.to_string()))?;
            c.execute(
                "UPDATE loopx_goals SET state = $3, head = $4, seq = $5, dirty = false WHERE ns = $1 AND goal = $2",
                &[&self.ns, &id.as_str(), &text, &head, &seq_i64(state.seq)?],
            )
            .map_err(|e| db("rewrite the goal's state", &e))?;
            c.execute("DELETE FROM loopx_archive WHERE ns = $1 AND goal = $2", &[&self.ns, &id.as_str()])
                .map_err(|e| db("rewrite the archive", &e))?;
            insert_archive(c, &self.ns, id, 0, &archive)?;
        }
        Ok((state, head, in_txn))
    }

    fn goal_report(&self, c: &mut Client, id: &GoalId) -> Result<DoctorGoal> {
        let mut checks = Vec::new();
        let guards: i64 =
            c.query_one(&format!("SELECT {GUARDS}"), &[]).map_err(|e| db("read the triggers", &e))?.get(0);
        checks.push(check(
            "edit triggers",
            guards == 2,
            if guards == 2 {
                "hand edits of the log mark the goal for a full check"
            } else {
                "disabled or gone: hand edits go unmarked, so every command verifies the whole log (`doctor --repair` enables them)"
            },
        ));
        let bytes = self.log_bytes(c, id)?;
        let (scan, replayed, archive) = match verify_log(id, &bytes, &mut checks) {
            Ok(v) => v,
            Err(events) => return Ok(DoctorGoal { goal_id: id.clone(), events, checks }),
        };
        let events = scan.lines.len() as u64;
        let row = c
            .query_one("SELECT state FROM loopx_goals WHERE ns = $1 AND goal = $2", &[&self.ns, &id.as_str()])
            .map_err(|e| db("read the goal", &e))?;
        let same = row.get::<_, &str>(0).as_bytes() == encode_state(&replayed)?.as_slice();
        checks.push(check(
            "state",
            same,
            if same { "matches a full replay" } else { "differs from a replay of the log" },
        ));
        let found = archive_lines(c, &self.ns, id)?;
        let same = found == archive;
        checks.push(check(
            "archive",
            same,
            if same { "matches a full replay" } else { "differs from a replay of the log" },
        ));
        Ok(DoctorGoal { goal_id: id.clone(), events, checks })
    }
}

fn check(name: &str, ok: bool, detail: &str) -> DoctorCheck {
    DoctorCheck { name: name.to_owned(), ok, detail: detail.to_owned(), note: false }
}

fn project_text(p: &ProjectFile) -> Result<String> {
    serde_json::to_string(p).map_err(|e| Error::internal(format!("cannot encode the project: {e}")))
}

fn insert_archive(c: &mut Client, ns: &str, id: &GoalId, from: i64, lines: &[String]) -> Result<()> {
    for (i, line) in lines.iter().enumerate() {
        let n = from + i64::try_from(i).unwrap_or(i64::MAX);
        c.execute(
            "INSERT INTO loopx_archive (ns, goal, n, line) VALUES ($1, $2, $3, $4)",
            &[&ns, &id.as_str(), &n, line],
        )
        .map_err(|e| db("append to the archive", &e))?;
    }
    Ok(())
}

fn archive_lines(c: &mut Client, ns: &str, id: &GoalId) -> Result<Vec<String>> {
    let rows = c
        .query("SELECT line FROM loopx_archive WHERE ns = $1 AND goal = $2 ORDER BY n", &[&ns, &id.as_str()])
        .map_err(|e| db("read the archive", &e))?;
    Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
}

/// Brings the database's schema to the last version, one migration at a time, under a lock.
fn migrate(c: &mut Client) -> Result<()> {
    c.batch_execute("CREATE TABLE IF NOT EXISTS loopx_schema (version INT NOT NULL)")
        .map_err(|e| db("create the schema table", &e))?;
    let mut t = c.transaction().map_err(|e| db("migrate", &e))?;
    t.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(|e| db("migrate", &e))?;
    let version: i32 = t
        .query_opt("SELECT version FROM loopx_schema", &[])
        .map_err(|e| db("read the schema version", &e))?
        .map_or(0, |r| r.get(0));
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if version > known {
        return Err(Error::integrity(format!(
            "the store's schema is version {version}; this loopx knows up to {known}"
        ))
        .with_hint("use the loopx version that wrote this database"));
    }
    for sql in &MIGRATIONS[usize::try_from(version).unwrap_or(0)..] {
        t.batch_execute(sql).map_err(|e| db("migrate the schema", &e))?;
    }
    t.execute("DELETE FROM loopx_schema", &[]).map_err(|e| db("migrate", &e))?;
    t.execute("INSERT INTO loopx_schema (version) VALUES ($1)", &[&known]).map_err(|e| db("migrate", &e))?;
    t.commit().map_err(|e| db("migrate", &e))
}

impl Doctor for PgStore {
    fn doctor(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        let project = self.project()?;
        let place = format!("in PostgreSQL project {}", self.ns);
        self.with(|conn| report(&project, only, &place, |g| self.goal_report(conn.client(), g)))
    }

    fn repair_project(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Rebuilds each goal's state and archive rows from its log (which must verify).
    fn repair(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        let goals = self.project()?.goals_or(only);
        let mut actions = Vec::new();
        self.with(|conn| {
            conn.client().batch_execute(GUARDS_ON).map_err(|e| db("enable the edit triggers", &e))
        })?;
        for id in &goals {
            self.with(|conn| {
                conn.client()
                    .execute(
                        "UPDATE loopx_goals SET dirty = true WHERE ns = $1 AND goal = $2",
                        &[&self.ns, &id.as_str()],
                    )
                    .map_err(|e| db("mark the goal", &e))?;
                Ok(())
            })?;
            self.transact(id, &mut |_| Ok(()))?;
            actions.push(format!("goal {id}: state and archive rebuilt from its log"));
        }
        Ok(with_repairs(self.doctor(only)?, actions))
    }
}

impl Store for PgStore {
    fn project(&self) -> Result<ProjectFile> {
        self.with(|conn| {
            let row = conn
                .client()
                .query_one("SELECT body FROM loopx_projects WHERE ns = $1", &[&self.ns])
                .map_err(|e| db("read the project", &e))?;
            serde_json::from_str(row.get::<_, &str>(0))
                .map_err(|e| Error::integrity(format!("project {} in the store is not valid: {e}", self.ns)))
        })
    }

    fn update_project(&self, f: &mut dyn FnMut(&mut ProjectFile) -> Result<bool>) -> Result<ProjectFile> {
        let guard = self.conn.lock();
        let mut conn =
            guard.try_borrow_mut().map_err(|_| Error::internal("the store's connection is in use"))?;
        let conn: &mut Conn = &mut conn;
        let mut p = off_runtime(|| {
            conn.client().batch_execute("BEGIN").map_err(|e| db("update the project", &e))?;
            let row = conn
                .client()
                .query_one("SELECT body FROM loopx_projects WHERE ns = $1 FOR UPDATE", &[&self.ns])
                .map_err(|e| db("read the project", &e));
            let p = row.and_then(|row| {
                serde_json::from_str::<ProjectFile>(row.get::<_, &str>(0)).map_err(|e| {
                    Error::integrity(format!("project {} in the store is not valid: {e}", self.ns))
                })
            });
            if p.is_err() {
                let _ = conn.client().batch_execute("ROLLBACK");
            }
            p
        })?;
        // The change is decided here, on the caller's thread; the row stays locked meanwhile.
        let changed = f(&mut p);
        off_runtime(|| {
            let written = match &changed {
                Ok(true) => conn
                    .client()
                    .execute(
                        "UPDATE loopx_projects SET body = $2 WHERE ns = $1",
                        &[&self.ns, &project_text(&p)?],
                    )
                    .map(|_| ()),
                _ => Ok(()),
            };
            let end = if changed.is_ok() && written.is_ok() { "COMMIT" } else { "ROLLBACK" };
            let ended = conn.client().batch_execute(end);
            written.and(ended).map_err(|e| db("update the project", &e))
        })?;
        changed.map(|_| p)
    }

    fn create_goal(&self, id: &GoalId, first: Event, make_default: bool) -> Result<GoalState> {
        let (state, text) = genesis(id, first, self.clock.now())?;
        self.with(|conn| {
            let mut t = conn.client().transaction().map_err(|e| db("create the goal", &e))?;
            let row = t
                .query_one("SELECT body FROM loopx_projects WHERE ns = $1 FOR UPDATE", &[&self.ns])
                .map_err(|e| db("read the project", &e))?;
            let mut project: ProjectFile = serde_json::from_str(row.get::<_, &str>(0)).map_err(|e| {
                Error::integrity(format!("project {} in the store is not valid: {e}", self.ns))
            })?;
            if project.has_goal(id) {
                return Err(Error::conflict(format!("goal {id} already exists"))
                    .with_hint(format!("see it with: loopx goal show --goal-id {id}")));
            }
            let state_text =
                String::from_utf8(encode_state(&state)?).map_err(|e| Error::internal(e.to_string()))?;
            t.execute(
                "INSERT INTO loopx_events (ns, goal, seq, line) VALUES ($1, $2, 1, $3)",
                &[&self.ns, &id.as_str(), &text],
            )
            .map_err(|e| db("create the goal", &e))?;
            t.execute(
                "INSERT INTO loopx_goals (ns, goal, seq, head, state) VALUES ($1, $2, 1, $3, $4)",
                &[&self.ns, &id.as_str(), &log::line_hash(text.as_bytes()), &state_text],
            )
            .map_err(|e| db("create the goal", &e))?;
            project.add_goal(id, state.goal.title.clone(), state.goal.created_at, make_default);
            t.execute(
                "UPDATE loopx_projects SET body = $2 WHERE ns = $1",
                &[&self.ns, &project_text(&project)?],
            )
            .map_err(|e| db("create the goal", &e))?;
            t.commit().map_err(|e| db("create the goal", &e))?;
            Ok(state.clone())
        })
    }

    fn read(&self, id: &GoalId) -> Result<Arc<GoalState>> {
        self.with(|conn| self.load(conn.client(), id, false)).map(|(s, _, _)| Arc::new(s))
    }

    fn transact(&self, id: &GoalId, f: &mut dyn FnMut(&mut Txn<'_>) -> Result<()>) -> Result<()> {
        let guard = self.conn.lock();
        let asked = std::time::Instant::now();
        let mut taken = asked;
        let (state, head, rewrote) = {
            let mut conn = guard.borrow_mut();
            let conn: &mut Conn = &mut conn;
            let taken = &mut taken;
            off_runtime(|| {
                // Begin, bound the wait and take the goal's lock in one round trip.
                let begin = format!(
                    "BEGIN; SET LOCAL lock_timeout = '{}ms'; SELECT pg_advisory_xact_lock({})",
                    self.lock_timeout.as_millis(),
                    lock_key(&self.ns, id)
                );
                conn.revive(&self.url)?;
                conn.in_txn = true;
                let loaded = conn
                    .client()
                    .batch_execute(&begin)
                    .map_err(|e| db(&format!("lock goal {id}"), &e))
                    .and_then(|()| {
                        *taken = std::time::Instant::now();
                        self.load(conn.client(), id, true)
                    });
                if loaded.is_err() {
                    let _ = conn.client().batch_execute("ROLLBACK");
                    conn.in_txn = false;
                }
                loaded
            })?
        };
        let result = f(&mut Txn::new(self, id.clone(), state, head, None));
        let mut conn = guard.borrow_mut();
        if conn.in_txn {
            // No event was committed (a refusal, a replay, or a failure). A state rebuilt from
            // the log is kept; nothing else was written.
            conn.in_txn = false;
            let end = if rewrote { "COMMIT" } else { "ROLLBACK" };
            let conn: &mut Conn = &mut conn;
            off_runtime(|| conn.client().batch_execute(end)).map_err(|e| db("end the transaction", &e))?;
        }
        self.reporter.lock_released(&format!("goal {id}"), taken - asked, taken.elapsed());
        result
    }

    fn scan(&self, id: &GoalId) -> Result<Scan> {
        self.with(|conn| {
            let bytes = self.log_bytes(conn.client(), id)?;
            log::scan(&bytes).map_err(|(_, b)| chain_error(&self.log_name(id), &b))
        })
    }

    fn archive(&self, id: &GoalId, head: &ArchiveHead) -> Result<Vec<ArchivedTodo>> {
        if head.is_empty() {
            return Ok(Vec::new());
        }
        let lines = self.with(|conn| archive_lines(conn.client(), &self.ns, id))?;
        let path = PathBuf::from(format!("postgres:{}/goals/{id}/archive", self.ns));
        read_archive(&path, archive_text(&lines).as_bytes(), head)
    }

    /// Inside the transaction `transact` began: insert the line, update the state, append the
    /// archived todos, commit.
    fn append(&self, id: &GoalId, c: &Commit<'_>) -> Result<()> {
        self.with(|conn| {
            if !conn.in_txn {
                return Err(Error::internal("a commit outside a transaction"));
            }
            let seq = seq_i64(c.state.seq)?;
            let mut whole = c.state_keys.to_vec();
            c.state.todos.append_bodies(&mut whole)?;
            let state = std::str::from_utf8(&whole).map_err(|e| Error::internal(e.to_string()))?;
            // The event, the state and the notice (delivered when, and only if, the transaction
            // commits) in one statement: one round trip.
            let notice = serde_json::json!({"project": self.ns, "goal": id, "seq": seq}).to_string();
            let written = conn
                .client()
                .query_typed(
                    "WITH e AS (INSERT INTO loopx_events (ns, goal, seq, line) VALUES ($1, $2, $3, $4)), \
                     g AS (UPDATE loopx_goals SET seq = $3, head = $5, state = $6 WHERE ns = $1 AND goal = $2) \
                     SELECT pg_notify($7, $8)",
                    &[
                        (&self.ns, Type::TEXT),
                        (&id.as_str(), Type::TEXT),
                        (&seq, Type::INT8),
                        (&c.line, Type::TEXT),
                        (&c.hash, Type::TEXT),
                        (&state, Type::TEXT),
                        (&CHANNEL, Type::TEXT),
                        (&notice, Type::TEXT),
                    ],
                )
                .map(|_| ());
            let written = written.map_err(|e| db(APPEND, &e)).and_then(|()| {
                let from = i64::try_from(c.archive_before.todos).unwrap_or(i64::MAX);
                insert_archive(conn.client(), &self.ns, id, from, &c.state.archived_now)
            });
            if let Err(e) = written {
                let _ = conn.client().batch_execute("ROLLBACK");
                conn.in_txn = false;
                return Err(e);
            }
            conn.in_txn = false;
            conn.client().batch_execute("COMMIT").map_err(|e| db("commit", &e))
        })
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    fn reporter(&self) -> &dyn Reporter {
        self.reporter.as_ref()
    }

    fn log_lines(&self, id: &GoalId) -> Result<Vec<String>> {
        let bytes = self.with(|conn| self.log_bytes(conn.client(), id))?;
        log::scan(&bytes).map_err(|(_, b)| chain_error(&self.log_name(id), &b))?;
        lines_of(&bytes)
    }

    /// Rows in batches by sequence number (each batch its own query: the log only grows, so
    /// a batch never sees a row change under it).
    fn each_line(&self, id: &GoalId, f: &mut dyn FnMut(EventLine) -> Result<bool>) -> Result<()> {
        const BATCH: i64 = 4096;
        let name = self.log_name(id);
        let mut follow = log::Follow::default();
        loop {
            let after = seq_i64(follow.lines())?;
            let rows: Vec<String> = self.with(|conn| {
                let rows = conn
                    .client()
                    .query(
                        "SELECT line FROM loopx_events WHERE ns = $1 AND goal = $2 AND seq > $3 \
                         ORDER BY seq LIMIT $4",
                        &[&self.ns, &id.as_str(), &after, &BATCH],
                    )
                    .map_err(|e| db("read the log", &e))?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
            })?;
            if rows.is_empty() {
                if after == 0 {
                    return Err(Error::not_found(format!("goal {id} not found in this project")));
                }
                return Ok(());
            }
            let full = rows.len() as i64 == BATCH;
            for raw in rows {
                let line = follow.line(raw.as_bytes()).map_err(|b| chain_error(&name, &b))?;
                if !f(line)? {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// One transaction: the event rows as given, the state and archive rows a replay makes.
    fn import_goal(&self, id: &GoalId, lines: &[String]) -> Result<GoalState> {
        let (scan, state, archive) = verify_lines(id, lines)?;
        let state_text =
            String::from_utf8(encode_state(&state)?).map_err(|e| Error::internal(e.to_string()))?;
        self.with(|conn| {
            let c = conn.client();
            c.batch_execute("BEGIN").map_err(|e| db("import the goal", &e))?;
            let imported = (|| {
                let exists = c
                    .query_opt(
                        "SELECT 1 FROM loopx_goals WHERE ns = $1 AND goal = $2",
                        &[&self.ns, &id.as_str()],
                    )
                    .map_err(|e| db("import the goal", &e))?;
                if exists.is_some() {
                    return Err(Error::conflict(format!("goal {id} already exists in project {}", self.ns)));
                }
                for (i, line) in lines.iter().enumerate() {
                    let seq = i64::try_from(i + 1).unwrap_or(i64::MAX);
                    c.execute(
                        "INSERT INTO loopx_events (ns, goal, seq, line) VALUES ($1, $2, $3, $4)",
                        &[&self.ns, &id.as_str(), &seq, line],
                    )
                    .map_err(|e| db("import the goal", &e))?;
                }
                c.execute(
                    "INSERT INTO loopx_goals (ns, goal, seq, head, state) VALUES ($1, $2, $3, $4, $5)",
                    &[&self.ns, &id.as_str(), &seq_i64(state.seq)?, &scan.head(), &state_text],
                )
                .map_err(|e| db("import the goal", &e))?;
                insert_archive(c, &self.ns, id, 0, &archive)
            })();
            let end = if imported.is_ok() { "COMMIT" } else { "ROLLBACK" };
            let ended = c.batch_execute(end).map_err(|e| db("import the goal", &e));
            imported.and(ended)
        })?;
        Ok(state)
    }
}
