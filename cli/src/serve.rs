//! `loopx serve`: starts the dashboard (`loopx-dashboard`) over the projects in the user's
//! index and the project it is started in, with this command line's stores and change feeds.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use loopx_core::Result;
use loopx_dashboard::{Config, Dashboard};
use loopx_kernel::{Reporter, find_root};

use crate::Env;
use crate::args::{Cli, ServeArgs};
use crate::output::{Printer, Rendered};

pub async fn run(
    a: &ServeArgs,
    cli: &Cli,
    env: &Env,
    reporter: Arc<dyn Reporter>,
    printer: &Printer,
) -> Result<i32> {
    let start = cli.project.as_ref().map_or_else(|| env.cwd.clone(), |p| env.cwd.join(p));
    let here = find_root(&start);
    let projects = Arc::new(move || {
        let mut roots = crate::projects::indexed_roots()?;
        if let Some(h) = &here
            && !roots.contains(h)
        {
            roots.insert(0, h.clone());
        }
        Ok(roots)
    });
    let clock = env.clock.clone();
    let cfg = Config {
        port: a.port,
        projects,
        opener: crate::store::opener(),
        watch: Arc::new(move |root: &Path| crate::store::change_feed(root, None, clock.clone())),
        clock: env.clock.clone(),
        reporter,
        options: env.options.clone(),
        token: None,
        person_key: Some(crate::projects::config_file("person.json")?),
    };
    let dashboard = Dashboard::bind(cfg).await?;
    let url = dashboard.url();
    let text = format!("loopx dashboard: {url}\nopen it in a browser; Ctrl-C stops it\n");
    printer.emit(Rendered::new(&json!({"url": url, "port": dashboard.port()}), text)?);
    if a.open {
        open_browser(&url);
    }
    dashboard
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(loopx_core::exit::SUCCESS)
}

/// Opens `url` in the user's browser; a failure is only a warning (the URL is printed).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("warning: cannot open a browser with {opener}: {e}; open the URL above");
    }
}
