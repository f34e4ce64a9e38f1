//! Live pages: a change feed per project wakes every open page over server-sent events.
//!
//! A feed runs on a thread of its own ([`ensure_watched`]) and ticks the dashboard's broadcast
//! channel at each commit it hears of; `/events` turns the ticks into `change` events, and the
//! page's script fetches the page again and swaps its content.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;

use crate::App;

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
