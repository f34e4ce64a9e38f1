//! Live pages: a change feed per project wakes every open page over server-sent events.
//!
//! A feed runs on a thread of its own ([`ensure_watched`]) and ticks the dashboard's broadcast
//! channel at each commit it hears of; `/events` turns the ticks into `change` events, and the
//! page's script fetches the page again and swaps its content.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use notify::{EventKind, RecursiveMode, Watcher};

use loopx_core::{Error, Result};

use crate::App;

/// Hears of the commits to one project.
pub trait ChangeFeed: Send {
    /// Waits up to `timeout`; whether a commit was heard of.
    fn wait(&mut self, timeout: Duration) -> Result<bool>;
}

/// The change feed of a file-store project: the file system's notices of writes under
/// `.loopx/` (creations, changes and removals; reads are not changes).
pub struct FileFeed {
    _watcher: notify::RecommendedWatcher,
    rx: mpsc::Receiver<notify::Result<notify::Event>>,
}

impl std::fmt::Debug for FileFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileFeed")
    }
}

impl FileFeed {
    /// Watches the state directory of the project at `root`.
    pub fn new(root: &Path) -> Result<Self> {
        let dir = root.join(".loopx");
        let (tx, rx) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(tx)
            .map_err(|e| Error::internal(format!("cannot watch {}: {e}", dir.display())))?;
        watcher
            .watch(&dir, RecursiveMode::Recursive)
            .map_err(|e| Error::internal(format!("cannot watch {}: {e}", dir.display())))?;
        Ok(Self { _watcher: watcher, rx })
    }
}

impl ChangeFeed for FileFeed {
    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Ok(e))
                    if matches!(
                        e.kind,
                        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
                    ) =>
                {
                    // One wake for a burst: a commit writes several files, one after another.
                    while self.rx.recv_timeout(Duration::from_millis(25)).is_ok() {}
                    return Ok(true);
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(false),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::internal("the file watcher stopped"));
                }
            }
        }
    }
}

/// Starts the feed of the project at `root` unless one runs. The feed is opened here, so a
/// commit made once this returns is heard of; one that fails (a database restarting, a
/// directory not made yet) is opened again after a pause on the feed's thread.
pub(crate) fn ensure_watched(app: &Arc<App>, root: &Path) {
    let Ok(mut watched) = app.watched.lock() else { return };
    if watched.iter().any(|w| w == root) {
        return;
    }
    watched.push(root.to_path_buf());
    let (root, watch, changes): (PathBuf, _, _) =
        (root.to_path_buf(), app.cfg.watch.clone(), app.changes.clone());
    let mut feed = watch(&root).ok();
    std::thread::spawn(move || {
        loop {
            if let Some(mut f) = feed.take().or_else(|| watch(&root).ok()) {
                while let Ok(heard) = f.wait(Duration::from_secs(5)) {
                    if heard {
                        // Nobody listening is fine: no page is open.
                        let _ = changes.send(());
                    }
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
}

/// `/events`: a `change` event at each commit to a watched project.
pub(crate) async fn events(
    State(app): State<Arc<App>>,
) -> Sse<impl Stream<Item = std::result::Result<Event, Infallible>>> {
    let rx = app.changes.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            // Missed ticks are one change as far as a page is concerned. (An event with no
            // data is never dispatched by a browser: it carries a word.)
            Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                Some((Ok(Event::default().event("change").data("commit")), rx))
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
