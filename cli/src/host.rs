//! `loopx host …`: reads the host's files, asks the adapter for a plan, has the kernel apply it.

use std::path::{Path, PathBuf};

use serde_json::json;

use loopx_adapter_claude_code_slash as slash;
use loopx_core::traits::{FileAction, InstallPlan, InstallScope};
use loopx_core::{Error, Result};
use loopx_host_claude_code::{self as cc, Paths};

use crate::args::{HostCommand, ScopeArg};
use crate::output::Rendered;

fn check_host(host: &str) -> Result<()> {
    if host == cc::HOST {
        Ok(())
    } else {
        Err(Error::usage(format!("loopx has no adapter for host {host:?} yet")).with_hint("loopx host list"))
    }
}

fn scope(s: ScopeArg) -> InstallScope {
    match s {
        ScopeArg::Project => InstallScope::Project,
        ScopeArg::User => InstallScope::User,
    }
}

fn read_current(files: &[PathBuf]) -> Result<slash::Current> {
    let mut current = slash::Current::new();
    for f in files {
        let text = match std::fs::read(f) {
            Ok(b) => Some(String::from_utf8(b).map_err(|_| {
                Error::refused(format!("{} is not UTF-8 text; loopx leaves it alone", f.display()))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("read", f, &e)),
        };
        current.insert(f.clone(), text);
    }
    Ok(current)
}

fn describe(plan: &InstallPlan, root: &Path) -> (Vec<serde_json::Value>, String) {
    let mut rows = Vec::new();
    let mut text = String::new();
    for a in &plan.actions {
        let (op, reason) = match a {
            FileAction::Create { .. } => ("create", None),
            FileAction::Update { .. } => ("update", None),
            FileAction::Remove { .. } => ("remove", None),
            FileAction::Unchanged { .. } => ("unchanged", None),
            FileAction::Skipped { reason, .. } => ("skipped", Some(reason.clone())),
        };
        let path = loopx_kernel::install::path_of(a);
        let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
        text.push_str(&format!(
            "{op:<9} {shown}{}\n",
            reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
        ));
        rows.push(json!({"op": op, "path": shown, "reason": reason}));
    }
    (rows, text)
}

pub fn run(cmd: &HostCommand, root: &Path, home: &Path) -> Result<Rendered> {
    match cmd {
        HostCommand::List => {
            let d = cc::detect();
            let v = json!({"hosts": [{"host": cc::HOST, "adapter": "claude-code-slash", "installed": d.path.is_some(), "version": d.version}]});
            let text = format!(
                "{:<12} adapter claude-code-slash · {}\n",
                cc::HOST,
                d.version.as_deref().map_or("not found on PATH".to_owned(), |v| format!("found: {v}"))
            );
            Rendered::new(&v, text)
        }
        HostCommand::Detect { host } => {
            check_host(host)?;
            let d = cc::detect();
            let v = json!({"host": host, "path": d.path, "version": d.version});
            let text = match (&d.path, &d.version) {
                (Some(p), v) => {
                    format!("{host}: {} ({})\n", p.display(), v.as_deref().unwrap_or("version unknown"))
                }
                (None, _) => {
                    format!("{host}: not found on PATH (npm install -g @anthropic-ai/claude-code)\n")
                }
            };
            Rendered::new(&v, text)
        }
        HostCommand::Install { host, scope: s, stop_driver, harden, statusline, dry_run } => {
            check_host(host)?;
            let paths = Paths::new(scope(*s), root, home);
            let opts = slash::Options {
                scope: scope(*s),
                stop_driver: *stop_driver,
                harden: *harden,
                statusline: *statusline,
                loopx: "loopx".to_owned(),
                goal: "main".to_owned(),
            };
            let plan = slash::install_plan(&paths, &opts, &read_current(&slash::files(&paths))?)?;
            if !dry_run {
                loopx_kernel::install::apply(&plan)?;
            }
            let (rows, mut text) = describe(&plan, root);
            if *dry_run {
                text.push_str("(dry run: nothing was written)\n");
            } else {
                text.push_str("next: in Claude Code, /loopx <task> joins the goal; /loop keeps turning\n");
            }
            Rendered::new(&json!({"host": host, "dry_run": dry_run, "actions": rows}), text)
        }
        HostCommand::Uninstall { host, scope: s, dry_run } => {
            check_host(host)?;
            let paths = Paths::new(scope(*s), root, home);
            let plan = slash::uninstall_plan(&paths, &read_current(&slash::files(&paths))?)?;
            if !dry_run {
                loopx_kernel::install::apply(&plan)?;
            }
            let (rows, mut text) = describe(&plan, root);
            if rows.is_empty() {
                text.push_str("nothing of loopx's is installed here\n");
            }
            Rendered::new(&json!({"host": host, "dry_run": dry_run, "actions": rows}), text)
        }
        HostCommand::Doctor { host, scope: s } => {
            check_host(host)?;
            let paths = Paths::new(scope(*s), root, home);
            let current = read_current(&slash::files(&paths))?;
            let d = cc::detect();
            let mut checks = vec![(
                "claude on PATH",
                d.path.is_some(),
                d.version.clone().unwrap_or_else(|| "npm install -g @anthropic-ai/claude-code".to_owned()),
            )];
            let has = |p: &Path| {
                current
                    .get(p)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.contains(slash::MARKER) || c.contains("loopx"))
            };
            checks.push((
                "/loopx command",
                has(&paths.command("loopx")),
                paths.command("loopx").display().to_string(),
            ));
            checks.push(("hooks in settings", has(&paths.settings), paths.settings.display().to_string()));
            if let Some(m) = &paths.mcp_json {
                checks.push(("MCP server in .mcp.json", has(m), m.display().to_string()));
            }
            let ok = checks.iter().all(|c| c.1);
            let text: String = checks
                .iter()
                .map(|(n, ok, d)| format!("{} {n}: {d}\n", if *ok { "ok  " } else { "FAIL" }))
                .chain(std::iter::once(match (ok, checks.iter().skip(1).all(|c| c.1)) {
                    (true, _) => "ready\n".to_owned(),
                    (false, true) => {
                        "loopx's wiring is installed; Claude Code itself is not on PATH\n".to_owned()
                    }
                    (false, false) => format!("install with: loopx host install {host}\n"),
                }))
                .collect();
            let v = json!({"host": host, "ok": ok, "checks": checks.iter().map(|(n, ok, d)| json!({"name": n, "ok": ok, "detail": d})).collect::<Vec<_>>()});
            Ok(Rendered::new(&v, text)?.with_exit(if ok { 0 } else { 1 }))
        }
    }
}
