//! A throwaway PostgreSQL server for the PostgreSQL store's tests: initialised in a temporary
//! directory, listening on a free port of 127.0.0.1, stopped and removed when dropped.
//! `cargo xtask ci` starts one for the suite; a test that restarts a database starts its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What can go wrong starting a server: a message.
pub type Result<T> = std::result::Result<T, String>;

/// Runs `cmd`, failing with its name.
fn run(what: &str, cmd: &mut Command) -> Result<()> {
    // Its chatter would mix with the output of whoever started the server (a bench's tables);
    // and no pipe: the server `pg_ctl` leaves running would hold it open.
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{what} failed ({status}); see its messages above")) }
}

/// A running server; `url` is what `LOOPX_TEST_PG_URL` gets.
#[derive(Debug)]
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
    pub url: String,
}

/// The database the tests use: the one `LOOPX_TEST_PG_URL` names, none when `LOOPX_SKIP_PG=1`
/// (said loudly), or a server started here.
pub fn for_tests() -> Result<(Option<String>, Option<Server>)> {
    if std::env::var("LOOPX_SKIP_PG").as_deref() == Ok("1") {
        eprintln!("LOOPX_SKIP_PG=1: the PostgreSQL store's tests are SKIPPED");
        return Ok((None, None));
    }
    if let Ok(url) = std::env::var("LOOPX_TEST_PG_URL")
        && !url.is_empty()
    {
        return Ok((Some(url), None));
    }
    let server = start()?;
    Ok((Some(server.url.clone()), Some(server)))
}

/// The database a test runs against: `LOOPX_TEST_PG_URL`, or `None` when `LOOPX_SKIP_PG=1`
/// says to skip (said on stderr). Without either the test fails: never a silent skip.
pub fn test_url(test: &str) -> Option<String> {
    match std::env::var("LOOPX_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("LOOPX_SKIP_PG").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: {test} needs PostgreSQL (LOOPX_SKIP_PG=1)");
            None
        }
        _ => panic!(
            "{test}: LOOPX_TEST_PG_URL is not set: run the suite with `cargo xtask ci` (which starts \
             PostgreSQL), point it at a database, or set LOOPX_SKIP_PG=1 to skip the PostgreSQL tests"
        ),
    }
}

/// A name no other test uses, for a project in the shared database.
pub fn unique_project(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// The directory holding `initdb` and `pg_ctl`: on the PATH, or Debian's newest version.
pub fn binaries() -> Option<PathBuf> {
    if let Ok(p) = which::which("pg_ctl") {
        return p.parent().map(Path::to_path_buf);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Starts a server of its own: in a new temporary directory, on a free port.
pub fn start() -> Result<Server> {
    start_with(|_| Ok(String::new()))
}

/// Whether the server runs as the `postgres` user (this process is root's): files it reads must
/// then be given to that user.
pub fn runs_as_postgres() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Gives `path` to the server's user (when it is not this process's) and makes it private.
pub fn give_to_server(path: &Path) -> Result<()> {
    if runs_as_postgres() {
        run("chown a server file", Command::new("chown").arg("postgres").arg(path))?;
    }
    run("chmod a server file", Command::new("chmod").arg("600").arg(path))
}

/// [`start`] with more server options: `extra` gets the server's directory (to put files in)
/// and returns `-c name=value` options.
pub fn start_with(extra: impl FnOnce(&Path) -> Result<String>) -> Result<Server> {
    let Some(bin) = binaries() else {
        return Err("PostgreSQL is needed for the PostgreSQL store's tests and was not found: install it \
             (Debian: apt-get install postgresql; .ci/run does), or set LOOPX_SKIP_PG=1 to skip them"
            .to_owned());
    };
    // PostgreSQL will not run as root; there it runs as the `postgres` user Debian creates.
    let as_postgres = runs_as_postgres();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("loopx-pg-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let server =
        Server { bin, dir, as_postgres, url: format!("postgresql://loopx@127.0.0.1:{port}/postgres") };
    if as_postgres {
        run("chown the database directory", Command::new("chown").arg("postgres").arg(&server.dir))?;
    }
    let data = server.dir.join("data");
    run(
        "initdb (a throwaway PostgreSQL for the store tests)",
        server.command("initdb").arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            "loopx",
            "-E",
            "UTF8",
            "--no-sync",
        ]),
    )?;
    let more = extra(&server.dir)?;
    let options = format!("-p {port} -k {} -c listen_addresses=127.0.0.1 {more}", server.dir.display());
    run(
        &format!("start PostgreSQL on 127.0.0.1:{port}"),
        server
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-w", "-o", &options, "-l"])
            .arg(server.dir.join("log"))
            .arg("start"),
    )?;
    Ok(server)
}

impl Server {
    /// Stops the server and starts it again on the same port and data (a database restart).
    pub fn restart(&self) -> Result<()> {
        run(
            "restart PostgreSQL",
            self.command("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-w", "-m", "fast", "restart"]),
        )
    }

    fn command(&self, name: &str) -> Command {
        let bin = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ =
            self.command("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "fast", "stop"]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
