//! `loopx serve`: a local web dashboard over the same kernel the command line uses.
//!
//! - **What it shows**: the inbox across the indexed projects (what needs a person, most urgent
//!   first) and, per goal, the objective, a kanban of todos, the gates, the quota, the agents,
//!   the evidence, the run history and a chart of the goal's life ([`page`], from [`view`]).
//! - **What it writes**: a person's answer to a gate and a todo a person adds, through the
//!   kernel's ordinary rules, recorded as `user`. Nothing else; never as an agent.
//! - **Live**: a change feed per project (file watching for the file store, `LISTEN` for a
//!   database, [`live`]) wakes every open page over server-sent events; the page fetches itself
//!   again and swaps its content, without a reload.
//! - **Who may ask** ([`guard`]): bound to 127.0.0.1 only; a random token per run, printed in
//!   the URL and carried by every link and form of the pages (never a cookie, which a browser
//!   would send to every port of 127.0.0.1); the `Host` header checked, and `Origin` too (a
//!   write must come from this dashboard's own origin); a write is a POST carrying the token. Every text is HTML-escaped (maud), and a strict content
//!   security policy forbids inline scripts besides.

mod guard;
mod live;
mod page;
mod view;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};
use tokio::sync::broadcast;

use loopx_core::{Clock, Error, Result};
use loopx_kernel::{DynKernel, Reporter, StoreOpener, StoreOptions};

pub use loopx_kernel::feed::{ChangeFeed, FileFeed};

/// The project directories the dashboard covers, asked again on every page (the index may
/// change while it runs).
pub type ProjectList = Arc<dyn Fn() -> Result<Vec<PathBuf>> + Send + Sync>;

/// Opens the change feed of the project at a directory.
pub type Watch = Arc<dyn Fn(&Path) -> Result<Box<dyn ChangeFeed>> + Send + Sync>;

/// What `loopx serve` starts the dashboard with.
pub struct Config {
    /// 0 picks a free port.
    pub port: u16,
    pub projects: ProjectList,
    pub opener: StoreOpener,
    pub watch: Watch,
    pub clock: Arc<dyn Clock>,
    pub reporter: Arc<dyn Reporter>,
    pub options: StoreOptions,
    /// The token; `None` draws a random one.
    pub token: Option<String>,
    /// Where this machine's person keeps their key (strict mode): the page unseals it with the
    /// passphrase given with an answer, signs, and forgets it.
    pub person_key: Option<PathBuf>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config").field("port", &self.port).finish_non_exhaustive()
    }
}

/// The state every request sees.
pub(crate) struct App {
    pub cfg: Config,
    pub token: String,
    pub port: u16,
    /// A tick per commit seen on any watched project.
    pub changes: broadcast::Sender<()>,
    /// Projects with a feed running.
    pub watched: Mutex<Vec<PathBuf>>,
    /// Charts and run history per goal, kept until the goal's log grows.
    pub activity: view::ActivityCache,
}

impl App {
    pub fn kernel(&self, root: &Path) -> Result<DynKernel> {
        let store =
            (self.cfg.opener)(root, self.cfg.clock.clone(), self.cfg.reporter.clone(), &self.cfg.options)?;
        Ok(DynKernel::over(store))
    }

    /// The projects now, each with a feed started the first time it is seen.
    pub fn projects(self: &Arc<Self>) -> Result<Vec<PathBuf>> {
        let roots = (self.cfg.projects)()?;
        for root in &roots {
            live::ensure_watched(self, root);
        }
        Ok(roots)
    }
}

/// A dashboard bound to its port, not yet serving.
#[derive(Debug)]
pub struct Dashboard {
    listener: tokio::net::TcpListener,
    app: Arc<App>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("port", &self.port).finish_non_exhaustive()
    }
}

impl Dashboard {
    /// Binds 127.0.0.1 (never another address) at the configured port.
    pub async fn bind(cfg: Config) -> Result<Self> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, cfg.port));
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::refused(format!("cannot listen on {addr}: {e}"))
                .with_hint("pick another port with --port N, or --port 0 for any free one")
        })?;
        let port = listener.local_addr().map_err(|e| Error::internal(e.to_string()))?.port();
        let token = match &cfg.token {
            Some(t) => t.clone(),
            None => guard::new_token()?,
        };
        let (changes, _) = broadcast::channel(64);
        let app = Arc::new(App {
            cfg,
            token,
            port,
            changes,
            watched: Mutex::new(Vec::new()),
            activity: view::ActivityCache::default(),
        });
        app.projects()?;
        Ok(Self { listener, app })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.app.port
    }

    /// The URL to open, token included.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?token={}", self.app.port, self.app.token)
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<()> {
        let app = self.app.clone();
        let router = Router::new()
            .route("/", get(page::inbox))
            .route("/p/{project}/{goal}", get(page::goal))
            .route("/p/{project}/{goal}/gate/{gate}", post(page::answer_gate))
            .route("/p/{project}/{goal}/todo", post(page::add_todo))
            .route("/p/{project}/{goal}/todo/{todo}/done", post(page::complete_todo))
            .route("/p/{project}/{goal}/complete", post(page::complete_goal))
            .route("/p/{project}/{goal}/stop", post(page::stop_goal))
            .route("/p/{project}/{goal}/turn/{turn}", get(page::turn))
            .route("/p/{project}/{goal}/report", get(page::report))
            .route("/p/{project}/{goal}/{file}", get(page::report_file))
            .route("/events", get(live::events))
            .route("/assets/app.css", get(page::css))
            .route("/assets/app.js", get(page::js))
            .layer(axum::middleware::from_fn_with_state(app.clone(), guard::check))
            .with_state(app);
        axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| Error::internal(format!("the dashboard stopped: {e}")))
    }
}

/// A short stable key for a project directory, used in its pages' paths.
pub(crate) fn project_key(root: &Path) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(root.to_string_lossy().as_bytes());
    d[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// The person's key unsealed with the page's `passphrase`, to sign one answer on a goal in
/// strict mode under `key`: refused without a passphrase, a key file, or the goal's key.
pub(crate) fn signer(cfg: &Config, key: &str, passphrase: &str) -> Result<loopx_core::kernel::SignerRef> {
    let short = loopx_core::event::key_short(key);
    if passphrase.is_empty() {
        return Err(Error::refused(format!(
            "this goal is in strict mode: an answer is signed by the person key {short}"
        ))
        .with_hint("give the key's passphrase with the answer"));
    }
    let file = cfg.person_key.as_deref().map(loopx_machine::person::read).transpose()?.flatten();
    let file = file.filter(|f| f.public_key == key).ok_or_else(|| {
        Error::refused(format!(
            "this machine has no person key {short}, which this goal's answers are signed by"
        ))
        .with_hint("answer where your key is")
    })?;
    let unsealed = loopx_machine::person::unlock(&file, passphrase)?;
    Ok(loopx_core::kernel::SignerRef(Arc::new(unsealed)))
}
