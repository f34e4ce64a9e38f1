//! A throwaway PostgreSQL server for the PostgreSQL store's tests: initialised in a temporary
//! directory, listening on a free port of 127.0.0.1, stopped and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A running server; `url` is what `LOOPX_TEST_PG_URL` gets.
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
    pub url: String,
}

/// The database the tests use: the one `LOOPX_TEST_PG_URL` names, none when `LOOPX_SKIP_PG=1`
/// (said loudly), or a server started here.
pub fn for_tests() -> Result<(Option<String>, Option<Server>)> {
    if let Ok(url) = std::env::var("LOOPX_TEST_PG_URL")
        && !url.is_empty()
    {
        return Ok((Some(url), None));
    }
    if std::env::var("LOOPX_SKIP_PG").as_deref() == Ok("1") {
        eprintln!("xtask: LOOPX_SKIP_PG=1: the PostgreSQL store's tests are SKIPPED");
        return Ok((None, None));
    }
    let server = start()?;
    Ok((Some(server.url.clone()), Some(server)))
}

/// The directory holding `initdb` and `pg_ctl`: on the PATH, or Debian's newest version.
fn binaries() -> Option<PathBuf> {
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

fn start() -> Result<Server> {
    let Some(bin) = binaries() else {
        bail!(
            "PostgreSQL is needed for the PostgreSQL store's tests and was not found: install it \
             (Debian: apt-get install postgresql; .ci/run does), or set LOOPX_SKIP_PG=1 to skip them"
        );
    };
    // PostgreSQL will not run as root; there it runs as the `postgres` user Debian creates.
    let uid = Command::new("id").arg("-u").output().context("cannot run id -u")?;
    let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("loopx-ci-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let server =
        Server { bin, dir, as_postgres, url: format!("postgresql://loopx@127.0.0.1:{port}/postgres") };
    if as_postgres {
        crate::run("chown the database directory", Command::new("chown").arg("postgres").arg(&server.dir))?;
    }
    let data = server.dir.join("data");
    crate::run(
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
    let options = format!("-p {port} -k {} -c listen_addresses=127.0.0.1", server.dir.display());
    crate::run(
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
