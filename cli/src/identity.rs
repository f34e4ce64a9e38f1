//! Who runs this command: a person, or an agent in a host session or a driven turn. The
//! environment says so first (the host's marks, the driver's `LOOPX_*` variables); when it says
//! nothing, the process tree does: an agent can `unset` a variable, but it cannot change who
//! started it. A command with a host's agent process, a `loopx drive` or a `loopx mcp` above it
//! is an agent's, and so is one whose ancestor was started with the marks.

use loopx_core::Error;
use loopx_core::kernel::BindThread;
use loopx_providers::process::Ancestor;

use crate::args::{DRIVE_SESSION_HOST, Driven};
use crate::registry;

/// The host name of a session found only as a `loopx mcp` server above the command.
pub const MCP_SESSION_HOST: &str = "loopx-mcp";

/// The session this command runs in, and the driven turn, if any.
#[derive(Debug, Default)]
pub struct Identity {
    pub session: Option<BindThread>,
    pub driven: Option<Driven>,
}

/// Reads the environment (`get` reads one variable), then, when it holds no mark and `walk`
/// says so, the ancestry. A driver's variable that is not a valid id in this process's own
/// environment is a usage error naming it.
pub fn find(get: impl Fn(&str) -> Option<String>, walk: bool) -> Result<Identity, Error> {
    if let Some(d) = Driven::from_env(&get)? {
        return Ok(Identity { session: Some(d.session()), driven: Some(d) });
    }
    if let Some(s) = registry::tool_session(&get) {
        // A host whose tools see no session id: its agent process above names the session.
        if walk && s.thread.is_empty() && registry::sessions_by_process(&s.host) {
            let found = in_ancestry(loopx_providers::process::ancestors(ancestry_root()));
            if found.session.as_ref().is_some_and(|f| f.host.starts_with(s.host.as_str())) {
                return Ok(found);
            }
        }
        return Ok(Identity { session: Some(s), driven: None });
    }
    if !walk {
        return Ok(Identity::default());
    }
    Ok(in_ancestry(loopx_providers::process::ancestors(ancestry_root())))
}

/// The process of `adapter`'s agent this process runs under, named for its whole life
/// (`<pid>.<start>`): what a hook of a host whose sessions are known by their process binds
/// the session's agent to. `None` for any other host, or outside the host's process tree.
pub fn agent_process_key(adapter: &dyn loopx_core::host::HostAdapter) -> Option<String> {
    let process = adapter.agent_process().filter(|_| adapter.sessions_by_process())?;
    loopx_providers::process::ancestor_programs(ancestry_root())
        .find(|a| process.matches(&a.name, &a.argv))
        .map(|a| a.key())
}

/// The identity the nearest telling ancestor gives: its marks (what it was started with), or
/// what it is (a host's agent, a driver, an MCP server).
/// A host whose sessions are known by their agent process (see
/// `HostAdapter::sessions_by_process`) marks its tools without a session id: the walk goes on
/// to that process, which names the session.
pub fn in_ancestry<A: std::borrow::Borrow<Ancestor>>(ancestors: impl IntoIterator<Item = A>) -> Identity {
    // A mark with no session, kept while the walk looks for the process that names it.
    let mut marked: Option<BindThread> = None;
    for a in ancestors {
        let a = a.borrow();
        // Many variables are looked up: the environment is read once.
        let vars = a.vars();
        let get = |k: &str| vars.get(k).map(str::to_owned);
        match Driven::from_env(get) {
            Ok(Some(d)) => return Identity { session: Some(d.session()), driven: Some(d) },
            Ok(None) => {}
            // A driver's mark that is not an id: still a driven turn, of no agent loopx knows.
            Err(_) => return unbound(DRIVE_SESSION_HOST),
        }
        if let Some(s) = registry::tool_session(get) {
            if !(s.thread.is_empty() && registry::sessions_by_process(&s.host)) {
                return Identity { session: Some(s), driven: None };
            }
            marked.get_or_insert(s);
        }
        if let Some(host) = registry::agent_process(&a.name, &a.argv) {
            return match marked {
                Some(m) if m.host != host => Identity { session: Some(m), driven: None },
                _ if registry::sessions_by_process(host) => {
                    Identity { session: Some(BindThread::process(host, &a.key())), driven: None }
                }
                _ => unbound(host),
            };
        }
        if marked.is_some() {
            continue;
        }
        match loopx_subcommand(&a.argv) {
            Some("drive") => return unbound(DRIVE_SESSION_HOST),
            Some("mcp") => return unbound(MCP_SESSION_HOST),
            _ => {}
        }
    }
    Identity { session: marked, driven: None }
}

/// A session loopx cannot name: an agent's, bound to no agent (its empty id is never bound).
fn unbound(host: &str) -> Identity {
    Identity { session: Some(BindThread { host: host.to_owned(), thread: String::new() }), driven: None }
}

/// The subcommand of a `loopx` process's argv (global options skipped), if it is one.
fn loopx_subcommand(argv: &[String]) -> Option<&str> {
    let (program, args) = argv.split_first()?;
    if program.rsplit('/').next() != Some("loopx") {
        return None;
    }
    let mut words = args.iter().map(String::as_str);
    while let Some(w) = words.next() {
        match w {
            "--project" | "--goal-id" | "--color" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return Some(w),
        }
    }
    None
}

/// Where the walk up the process tree stops: in a debug build, the process named by
/// `LOOPX_TEST_ANCESTRY_ROOT` (a test's own, so the ancestry a test sees is the one it built,
/// wherever the suite runs); a release build walks to the top.
fn ancestry_root() -> Option<u32> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var("LOOPX_TEST_ANCESTRY_ROOT").ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(name: &str, argv: &[&str], env: &[(&str, &str)]) -> Ancestor {
        Ancestor {
            pid: 2,
            name: name.to_owned(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            environ: env.iter().flat_map(|(k, v)| format!("{k}={v}\0").into_bytes()).collect(),
            start: 7,
        }
    }

    fn host_of(tree: &[Ancestor]) -> Option<(String, String)> {
        in_ancestry(tree).session.map(|s| (s.host, s.thread))
    }

    #[test]
    fn the_nearest_telling_ancestor_names_the_session() {
        let shell = proc("bash", &["bash"], &[]);
        let marked =
            proc("bash", &["bash", "-c", "x"], &[("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "s1")]);
        let claude = proc("claude", &["claude", "-p"], &[]);
        let login = proc("sshd", &["sshd: u@pts/0"], &[]);
        assert_eq!(
            host_of(&[shell.clone(), marked.clone(), claude.clone()]),
            Some(("claude-code".into(), "s1".into()))
        );
        assert_eq!(
            host_of(&[shell.clone(), claude.clone(), login.clone()]),
            Some(("claude-code".into(), String::new()))
        );
        let node = proc("node", &["/usr/bin/node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"], &[]);
        assert_eq!(host_of(&[shell.clone(), node]), Some(("codex".into(), String::new())));
        let script = proc("claude", &["/bin/sh", "/tmp/bin/claude"], &[]);
        assert_eq!(host_of(&[script]), Some(("claude-code".into(), String::new())), "a script's own name");
        let mcp = proc("loopx", &["/x/loopx", "--project", "mcp", "mcp", "--agent-id", "a1"], &[]);
        assert_eq!(host_of(&[shell.clone(), mcp]), Some((MCP_SESSION_HOST.into(), String::new())));
        let drive = proc("loopx", &["loopx", "drive", "--", "claude"], &[]);
        assert_eq!(host_of(&[drive]), Some((DRIVE_SESSION_HOST.into(), String::new())));
        let turn = proc("sh", &["sh"], &[("LOOPX_AGENT_ID", "bot"), ("LOOPX_TURN_ID", "t-1")]);
        let found = in_ancestry(&[shell.clone(), turn]);
        assert_eq!(found.driven.map(|d| d.agent.to_string()), Some("bot".to_owned()));
        // Gemini CLI's tools carry its mark but no session: the `gemini` process above (the one
        // it relaunched itself as, nearest first) names the session.
        let tool = proc("bash", &["bash", "-c", "x"], &[("GEMINI_CLI", "1")]);
        let child = Ancestor {
            pid: 40,
            ..proc(
                "node",
                &["/usr/bin/node", "--max-old-space-size=9000", "/u/node_modules/.bin/gemini", "-p", "x"],
                &[],
            )
        };
        let parent = Ancestor { pid: 30, ..proc("node", &["node", "/usr/bin/gemini", "-p", "x"], &[]) };
        assert_eq!(
            host_of(&[tool.clone(), child.clone(), parent.clone()]),
            Some(("gemini+process".into(), "40.7".into()))
        );
        assert_eq!(host_of(&[shell.clone(), parent]), Some(("gemini+process".into(), "30.7".into())));
        // Marked, with no `gemini` above (a daemon it left behind): still an agent's, of no session.
        assert_eq!(host_of(&[tool.clone(), login.clone()]), Some(("gemini".into(), String::new())));
        for person in [
            vec![shell.clone(), login.clone()],
            vec![proc("loopx", &["loopx", "status"], &[])],
            vec![proc("vim", &["vim", "claude"], &[])],
            vec![proc("node", &["node", "/home/u/claude-code-notes/x.js"], &[])],
            vec![],
        ] {
            assert_eq!(host_of(&person), None, "{person:?}");
        }
    }
}
