//! Who runs this command: a person, or an agent in a host session or a driven turn. The
//! environment says so first (the host's marks, the driver's `LOOPX_*` variables); when it says
//! nothing, the process tree does: an agent can `unset` a variable, but it cannot change who
//! started it. A command with a host's agent process, a `loopx drive` or a `loopx mcp` above it
//! is an agent's, and so is one whose ancestor was started with the marks.
//!
//! The command line hands the walk what it reads and this crate may not: the environment (a
//! function reading one variable), the registered adapters (the marks their hosts set, their
//! agent processes) and where the walk up the process tree stops.

use loopx_core::Error;
use loopx_core::host::HostAdapter;
use loopx_core::kernel::{BindThread, PROCESS_HOST_SUFFIX};
use loopx_providers::process::Ancestor;

/// A command run by the agent command of a `loopx drive` turn: the driver put the agent, the
/// turn and its todo in the environment (`LOOPX_AGENT_ID`, `LOOPX_TURN_ID`, `LOOPX_TODO_ID`).
/// It acts as that agent, never as a person or another agent, and never governs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driven {
    pub agent: loopx_core::AgentId,
    pub turn: Option<loopx_core::IdempotencyKey>,
}

/// The host name a driven turn's commands are marked with, as a session.
pub const DRIVE_SESSION_HOST: &str = "loopx-drive";

impl Driven {
    /// The agent a command acts as in a driven turn (`driven`), given the agent it names: the
    /// driver's, whether named or not; naming another is refused, for a command (`server`
    /// false, naming the turn) and for `loopx mcp` started in the turn alike.
    pub fn acting(
        driven: Option<&Driven>,
        named: Option<loopx_core::AgentId>,
        server: bool,
    ) -> Result<Option<loopx_core::AgentId>, Error> {
        match (driven, named) {
            (Some(d), Some(a)) if a != d.agent => {
                let turn = d.turn.as_ref().map(|t| format!("turn {t} of ")).unwrap_or_default();
                let place = if server {
                    "this server starts in a turn of loopx drive".to_owned()
                } else {
                    format!("this command runs in {turn}loopx drive")
                };
                Err(Error::identity(format!("{place}, as agent {}; it cannot act as {a}", d.agent))
                    .with_hint("leave out --agent-id: the driver's agent acts"))
            }
            (Some(d), _) => Ok(Some(d.agent.clone())),
            (None, named) => Ok(named),
        }
    }

    /// Reads the driver's variables (`get` reads one); `None` outside a driven turn. A value
    /// that is not a valid id is a usage error naming the variable.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, loopx_core::Error> {
        let Some(agent) = get("LOOPX_AGENT_ID") else { return Ok(None) };
        let bad = |var: &str, e: loopx_core::ids::InvalidId| {
            loopx_core::Error::usage(format!("{var} (set by loopx drive): {}", e.message))
                .with_hint(format!("unset {var}, or run this inside a turn of loopx drive"))
        };
        let agent = loopx_core::AgentId::new(&agent).map_err(|e| bad("LOOPX_AGENT_ID", e))?;
        let turn = get("LOOPX_TURN_ID")
            .map(|t| loopx_core::IdempotencyKey::new(&t))
            .transpose()
            .map_err(|e| bad("LOOPX_TURN_ID", e))?;
        Ok(Some(Self { agent, turn }))
    }

    /// The session a driven turn's commands run in: an agent's tool environment.
    pub fn session(&self) -> loopx_core::kernel::BindThread {
        loopx_core::kernel::BindThread {
            host: DRIVE_SESSION_HOST.to_owned(),
            thread: self.turn.as_ref().map(|t| t.as_str().to_owned()).unwrap_or_default(),
        }
    }
}

/// The host name of a session found only as a `loopx mcp` server above the command.
pub const MCP_SESSION_HOST: &str = "loopx-mcp";

/// The host name of a session found only as a process above the command that loopx cannot read
/// (see `Ancestor::unknown`): what it is is unknown, so the command is an agent's, of no session.
pub const HIDDEN_SESSION_HOST: &str = "hidden-process";

/// The session this command runs in, and the driven turn, if any.
#[derive(Debug, Default)]
pub struct Identity {
    pub session: Option<BindThread>,
    pub driven: Option<Driven>,
    /// The process above that tells, when the walk found one: `process 123 (claude -p …)`, for
    /// a refusal to name.
    pub by: Option<String>,
}

/// What the walk knows hosts by, and where it stops.
#[derive(Clone, Copy)]
pub struct Walk<'a> {
    /// Every registered adapter: the marks its host sets on its tools, its agent process.
    pub adapters: &'a [&'a dyn HostAdapter],
    /// The process where the walk up the tree stops (`None`: the top). The command line names
    /// one only in a debug build's tests, so the ancestry a test sees is the one it built.
    pub root: Option<u32>,
}

impl std::fmt::Debug for Walk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<&str> = self.adapters.iter().map(|a| a.host()).collect();
        f.debug_struct("Walk").field("adapters", &hosts).field("root", &self.root).finish()
    }
}

impl Walk<'_> {
    /// Reads the environment (`get` reads one variable) and, when `walk` says so, the ancestry.
    /// Outside any mark the ancestry decides. A mark in this process's own environment (which
    /// an agent may set or change for one command) counts only where it agrees with what the
    /// ancestry says: set where the ancestry says nothing, it only makes the command an agent's;
    /// set against it, the command is refused. A driver's variable that is not a valid id in
    /// this process's own environment is a usage error naming it.
    pub fn find(&self, get: impl Fn(&str) -> Option<String>, walk: bool) -> Result<Identity, Error> {
        let env = self.read_marks(&get)?;
        if !walk {
            return Ok(env.unwrap_or_default());
        }
        let tree = self.in_ancestry(loopx_providers::process::ancestors(self.root));
        match env {
            None => Ok(tree),
            Some(env) => agree(env, tree),
        }
    }

    /// What a set of marks says (this process's environment, or an ancestor's): a driven turn,
    /// or a host's session; `None` without marks.
    fn read_marks(&self, get: impl Fn(&str) -> Option<String>) -> Result<Option<Identity>, Error> {
        if let Some(d) = Driven::from_env(&get)? {
            return Ok(Some(Identity { session: Some(d.session()), driven: Some(d), by: None }));
        }
        Ok(self.tool_session(&get).map(|s| Identity { session: Some(s), driven: None, by: None }))
    }

    /// The host session this process runs inside, if a host marked its environment (`get`
    /// reads a variable). A marked environment without a session id is still an agent's: its
    /// session is the empty id, which is never bound.
    fn tool_session(&self, get: impl Fn(&str) -> Option<String>) -> Option<BindThread> {
        self.adapters.iter().find_map(|a| {
            let env = a.protocol().tool_env()?;
            get(env.marker)?;
            let thread = env.session.and_then(&get).unwrap_or_default();
            Some(BindThread { host: a.host().to_owned(), thread })
        })
    }

    /// The host whose agent process this is (its name, its argv), if it is one.
    fn agent_process(&self, name: &str, argv: &[String]) -> Option<&'static str> {
        self.adapters
            .iter()
            .find(|a| a.protocol().agent_process().is_some_and(|p| p.matches(name, argv)))
            .map(|a| a.host())
    }

    /// Whether `host`'s sessions are known to its tools only by its agent process (see
    /// `HostAdapter::sessions_by_process`).
    fn sessions_by_process(&self, host: &str) -> bool {
        self.adapters.iter().any(|a| a.host() == host && a.protocol().sessions_by_process())
    }
}

/// The identity of a command whose own environment carries marks (`env`), given what its
/// ancestry says (`tree`).
fn agree(env: Identity, tree: Identity) -> Result<Identity, Error> {
    let Some(told) = &tree.session else { return Ok(env) };
    let agrees = match (&env.driven, &tree.driven) {
        (Some(e), Some(t)) => e.agent == t.agent,
        // A command `loopx drive` started itself: the driver's own marks are its environment.
        (Some(_), None) => told.host == DRIVE_SESSION_HOST && told.thread.is_empty(),
        (None, Some(_)) => false,
        (None, None) => {
            let mine = env.session.as_ref().map_or(&told.host, |s| &s.host);
            let same_host = told.host == *mine || told.host.strip_suffix(PROCESS_HOST_SUFFIX) == Some(mine);
            let thread = env.session.as_ref().map_or("", |s| s.thread.as_str());
            // A host process (OpenCode's server) may run many sessions: the one the
            // environment names is finer than the process, not against it.
            same_host
                && (told.is_process() || told.thread.is_empty() || thread.is_empty() || told.thread == thread)
        }
    };
    if !agrees {
        let claim = match (&env.driven, &env.session) {
            (Some(d), _) => format!("its environment names agent {} of a loopx drive turn", d.agent),
            (None, Some(s)) if s.thread.is_empty() => format!("its environment marks a {} session", s.host),
            (None, Some(s)) => format!("its environment names {} session {}", s.host, s.thread),
            (None, None) => "its environment".to_owned(),
        };
        let above = match (&tree.driven, &tree.by) {
            (Some(d), _) => format!("a loopx drive turn of agent {}", d.agent),
            (None, Some(by)) => format!("a {} session ({by})", told.host),
            (None, None) => format!("a {} session", told.host),
        };
        return Err(Error::identity(format!("this command runs inside {above}, but {claim}"))
            .with_hint("unset the variable: a command acts as the session or turn it runs in"));
    }
    // The ancestry names the session when the host's tools see no id of it.
    Ok(if env.session.as_ref().is_some_and(|s| s.thread.is_empty()) && !told.thread.is_empty() {
        tree
    } else {
        Identity { by: tree.by, ..env }
    })
}

impl Walk<'_> {
    /// The process of `adapter`'s agent this process runs under, named for its whole life
    /// (`<pid>.<start>`): what a hook of a host whose sessions are known by their process binds
    /// the session's agent to. `None` for any other host, or outside the host's process tree.
    pub fn agent_process_key(&self, adapter: &dyn HostAdapter) -> Option<String> {
        let process =
            adapter.protocol().agent_process().filter(|_| adapter.protocol().sessions_by_process())?;
        loopx_providers::process::ancestor_programs(self.root)
            .find(|a| process.matches(&a.name, &a.argv))
            .map(|a| a.key())
    }

    /// The identity the nearest telling ancestor gives: its marks (what it was started with), or
    /// what it is (a host's agent, a driver, an MCP server).
    /// A host whose sessions are known by their agent process (see
    /// `HostAdapter::sessions_by_process`) marks its tools without a session id: the walk goes on
    /// to that process, which names the session.
    pub fn in_ancestry<A: std::borrow::Borrow<Ancestor>>(
        &self,
        ancestors: impl IntoIterator<Item = A>,
    ) -> Identity {
        // A mark with no session, kept while the walk looks for the process that names it.
        let mut marked: Option<(BindThread, String)> = None;
        for a in ancestors {
            let a = a.borrow();
            let by = || describe(a);
            if a.unknown {
                // What is above cannot be known: never the person's.
                return match marked {
                    Some((m, by)) => Identity { session: Some(m), driven: None, by: Some(by) },
                    None => unbound(HIDDEN_SESSION_HOST, by()),
                };
            }
            // Many variables are looked up: the environment is read once.
            let vars = a.vars();
            let get = |k: &str| vars.get(k).map(str::to_owned);
            match self.read_marks(get) {
                Ok(Some(Identity { driven: Some(d), .. })) => {
                    return Identity { session: Some(d.session()), driven: Some(d), by: Some(by()) };
                }
                Ok(Some(Identity { session: Some(s), .. })) => {
                    if !(s.thread.is_empty() && self.sessions_by_process(&s.host)) {
                        return Identity { session: Some(s), driven: None, by: Some(by()) };
                    }
                    if marked.is_none() {
                        marked = Some((s, by()));
                    }
                }
                Ok(_) => {}
                // A driver's mark that is not an id: still a driven turn, of no agent loopx knows.
                Err(_) => return unbound(DRIVE_SESSION_HOST, by()),
            }
            if let Some(host) = self.agent_process(&a.name, &a.argv) {
                return match marked {
                    Some((m, by)) if m.host != host => {
                        Identity { session: Some(m), driven: None, by: Some(by) }
                    }
                    _ if self.sessions_by_process(host) => Identity {
                        session: Some(BindThread::process(host, &a.key())),
                        driven: None,
                        by: Some(by()),
                    },
                    _ => unbound(host, by()),
                };
            }
            if marked.is_some() {
                continue;
            }
            match loopx_subcommand(&a.argv) {
                Some("drive") => return unbound(DRIVE_SESSION_HOST, by()),
                Some("mcp") => return unbound(MCP_SESSION_HOST, by()),
                _ => {}
            }
        }
        match marked {
            Some((m, by)) => Identity { session: Some(m), driven: None, by: Some(by) },
            None => Identity::default(),
        }
    }
}

/// A session loopx cannot name: an agent's, bound to no agent (its empty id is never bound).
fn unbound(host: &str, by: String) -> Identity {
    Identity {
        session: Some(BindThread { host: host.to_owned(), thread: String::new() }),
        driven: None,
        by: Some(by),
    }
}

/// A process, as a refusal names it: `process 123 (claude -p x)`, its command cut short.
fn describe(a: &Ancestor) -> String {
    if a.unknown {
        return format!("process {}, which loopx cannot read", a.pid);
    }
    let command = if a.argv.is_empty() { a.name.clone() } else { a.argv.join(" ") };
    let command = loopx_core::untrusted::printable(&command);
    let mut cut: String = command.chars().take(60).collect();
    if cut.len() < command.len() {
        cut.push('…');
    }
    format!("process {} ({cut})", a.pid)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driven_turn_acts_as_its_own_agent_only() {
        let id = |s: &str| loopx_core::AgentId::new(s).unwrap();
        let d = Driven { agent: id("codex-1"), turn: Some(loopx_core::IdempotencyKey::new("d1-2").unwrap()) };
        assert_eq!(Driven::acting(Some(&d), None, false).unwrap(), Some(id("codex-1")));
        assert_eq!(Driven::acting(Some(&d), Some(id("codex-1")), false).unwrap(), Some(id("codex-1")));
        let e = Driven::acting(Some(&d), Some(id("claude-1")), false).unwrap_err();
        assert!(
            e.message.starts_with("this command runs in turn d1-2 of loopx drive, as agent codex-1"),
            "{e:?}"
        );
        let e = Driven::acting(Some(&d), Some(id("claude-1")), true).unwrap_err();
        assert!(e.message.starts_with("this server starts in a turn of loopx drive"), "{e:?}");
        assert_eq!(Driven::acting(None, Some(id("claude-1")), false).unwrap(), Some(id("claude-1")));
    }

    fn proc(name: &str, argv: &[&str], env: &[(&str, &str)]) -> Ancestor {
        Ancestor {
            pid: 2,
            name: name.to_owned(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            environ: env.iter().flat_map(|(k, v)| format!("{k}={v}\0").into_bytes()).collect(),
            start: 7,
            unknown: false,
        }
    }

    /// The walk over every adapter the `loopx` binary registers.
    fn walk() -> Walk<'static> {
        static ADAPTERS: &[&dyn HostAdapter] = &[
            &loopx_adapter_claude_code_slash::ClaudeCodeSlash,
            &loopx_adapter_codex_heartbeat::CodexHeartbeat,
            &loopx_adapter_cursor_manual::CursorManual,
            &loopx_adapter_gemini_hooks::GeminiHooks,
            &loopx_adapter_opencode_plugin::OpenCodePlugin,
        ];
        Walk { adapters: ADAPTERS, root: None }
    }

    fn host_of(tree: &[Ancestor]) -> Option<(String, String)> {
        walk().in_ancestry(tree).session.map(|s| (s.host, s.thread))
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
        let found = walk().in_ancestry(&[shell.clone(), turn]);
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
        // A process the walk cannot read: what is above it is unknown, so never the person's.
        let hidden = Ancestor { pid: 9, unknown: true, ..Ancestor::default() };
        assert_eq!(
            host_of(&[shell.clone(), hidden.clone(), login.clone()]),
            Some((HIDDEN_SESSION_HOST.into(), String::new()))
        );
        assert_eq!(host_of(&[tool.clone(), hidden]), Some(("gemini".into(), String::new())));
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

    fn session(host: &str, thread: &str) -> Identity {
        Identity {
            session: Some(BindThread { host: host.into(), thread: thread.into() }),
            ..Identity::default()
        }
    }

    #[test]
    fn a_mark_counts_only_where_the_ancestry_agrees() {
        let thread = |r: Result<Identity, Error>| r.ok().and_then(|i| i.session).map(|s| (s.host, s.thread));
        // One OpenCode server process runs many sessions: the environment names which.
        let server = session("opencode+process", "25054.7");
        assert_eq!(
            thread(agree(session("opencode", "ses_a"), server)),
            Some(("opencode".into(), "ses_a".into()))
        );
        // A mark with no session id takes the process's.
        assert_eq!(
            thread(agree(session("gemini", ""), session("gemini+process", "40.7"))),
            Some(("gemini+process".into(), "40.7".into()))
        );
        assert!(agree(session("claude-code", "s1"), session("claude-code", "s1")).is_ok());
        // Another host's mark, or another session of a host that names its sessions, is refused.
        assert!(agree(session("codex", "x"), session("opencode+process", "25054.7")).is_err());
        assert!(agree(session("claude-code", "s2"), session("claude-code", "s1")).is_err());
        assert!(agree(session("claude-code", "s2"), session(MCP_SESSION_HOST, "")).is_err());
    }
}
