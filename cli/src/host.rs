//! `loopx host …`: asks the host's adapter what to install, has the kernel's installer plan and
//! apply it, and reports. Names no host: the adapter comes from the registry.

use std::collections::BTreeSet;

use serde_json::json;

use std::path::Path;

use loopx_core::host::{Feature, HostAdapter, InstallEnv, InstallOptions, InstallScope, InstallSpec};
use loopx_core::{GoalId, Result};
use loopx_hostkit::install::{self, Plan, Roots};
use loopx_kernel::StoreOptions;

use crate::args::{HostCommand, ScopeArg};
use crate::output::Rendered;
use crate::registry;

fn scope(s: ScopeArg) -> InstallScope {
    match s {
        ScopeArg::Project => InstallScope::Project,
        ScopeArg::User => InstallScope::User,
    }
}

fn describe(plan: &Plan) -> (serde_json::Value, String) {
    let mut text = String::new();
    for n in &plan.notes {
        text.push_str(&format!("note: {n}\n"));
    }
    for f in &plan.files {
        let reason = f.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
        text.push_str(&format!("{:<9} {}{reason}\n", f.op.as_str(), f.path));
    }
    let rows: Vec<_> = plan
        .files
        .iter()
        .map(|f| json!({"op": f.op, "path": f.path.to_string(), "reason": f.reason}))
        .collect();
    (json!(rows), text)
}

/// Finishes an install or uninstall a crash interrupted on this machine; says so on stderr.
fn finish_interrupted(roots: &Roots, adapter: &dyn HostAdapter, s: InstallScope) -> Result<Option<String>> {
    let note = install::recover(roots, adapter.name(), s, &ours(adapter, roots, s)?)?;
    if let Some(n) = &note {
        eprintln!("loopx: {n}");
    }
    Ok(note)
}

/// Where `adapter`'s files are on this machine.
fn roots(adapter: &dyn HostAdapter, project: &Path, home: &Path) -> Roots {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    Roots {
        project: project.to_path_buf(),
        home: home.to_path_buf(),
        host_home: adapter.protocol().host_home(home, &get),
    }
}

/// Everything `a` could have installed in scope `s` (every option on): what uninstall takes
/// out without a manifest, and all a manifest may name.
fn everything(a: &dyn HostAdapter, roots: &Roots, s: InstallScope) -> Result<InstallSpec> {
    let read = install::doctor::read_file(roots);
    a.uninstall_plan(s, &loopx_command(), &InstallEnv { roots, read: &read })
}

/// What `a`'s install in scope `s` may touch, and where this machine records the plans it
/// starts: in the user's own configuration, beside the command approvals, where no project
/// (and no agent that writes only the workspace) reaches.
fn ours(a: &dyn HostAdapter, roots: &Roots, s: InstallScope) -> Result<install::Ours> {
    let witness = crate::projects::config_file("installs")?;
    install::Ours::new(a.name(), s, &everything(a, roots, s)?, a.protocol().host_files(), witness)
}

/// How installed hooks and templates call loopx: this very binary, by its absolute path, so a
/// host whose shell resets `PATH` (a login shell) still finds it.
fn loopx_command() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .map_or_else(|| "loopx".to_owned(), |p| p.display().to_string())
}

pub fn run(
    cmd: &HostCommand,
    project: &Path,
    home: &Path,
    store: &StoreOptions,
    goal: Option<GoalId>,
) -> Result<Rendered> {
    match cmd {
        HostCommand::List => {
            let mut rows = Vec::new();
            let mut text = String::new();
            for a in registry::adapters() {
                let d = found(*a);
                text.push_str(&format!(
                    "{:<12} adapter {} · {}\n",
                    a.host(),
                    a.name(),
                    d.version.as_deref().map_or("not found on PATH".to_owned(), |v| format!("found: {v}"))
                ));
                rows.push(json!({"host": a.host(), "adapter": a.name(), "installed": d.path.is_some(), "version": d.version, "capabilities": a.capabilities()}));
            }
            Rendered::new(&json!({ "hosts": rows }), text)
        }
        HostCommand::Detect { host } => {
            let a = registry::find(host)?;
            let d = found(a);
            let text = match (&d.path, &d.version) {
                (Some(p), v) => {
                    format!("{host}: {} ({})\n", p.display(), v.as_deref().unwrap_or("version unknown"))
                }
                (None, _) => format!("{host}: not found on PATH ({})\n", a.install_hint()),
            };
            Rendered::new(&json!({"host": host, "path": d.path, "version": d.version}), text)
        }
        HostCommand::Install { host, scope: s, options, dry_run } => {
            let a = registry::find(host)?;
            let roots = &roots(a, project, home);
            let flags = [
                (options.stop_driver, Feature::StopDriver),
                (options.harden, Feature::Harden),
                (options.statusline, Feature::Statusline),
                (options.with_hooks, Feature::Hooks),
                (options.trust_hooks, Feature::TrustHooks),
                (options.with_mcp, Feature::Mcp),
            ];
            let mut features: BTreeSet<Feature> =
                flags.into_iter().filter(|(on, _)| *on).map(|(_, f)| f).collect();
            for name in &options.with {
                features.insert(Feature::parse_for(name, a)?);
            }
            let opts = InstallOptions {
                scope: scope(*s),
                features,
                loopx: a.loopx_command(&loopx_command()),
                goal: goal.map_or_else(|| GoalId::new("main"), Ok)?,
                agent: options.agent_id.as_deref().map(loopx_core::AgentId::new).transpose()?,
            };
            let ours = ours(a, roots, opts.scope)?;
            let recovered = if *dry_run { None } else { finish_interrupted(roots, a, opts.scope)? };
            let spec = install::doctor::spec(a, roots, &opts)?;
            let plan = install::plan_install(roots, a.name(), &opts, &spec, &ours)?;
            if !dry_run {
                install::apply(roots, &plan, store.fault.as_deref(), &ours)?;
            }
            let (rows, mut text) = describe(&plan);
            if *dry_run {
                text.push_str("(dry run: nothing was written)\n");
            } else {
                text.push_str(&format!("next: {}\n", a.after_install()));
            }
            if opts.has(Feature::TrustHooks) {
                // A decision made on the person's behalf: said plainly, with how to take it back.
                text.push_str(&format!(
                    "trusted: your {host} config now marks loopx's hooks as trusted, so {host} runs them without asking you; `loopx host uninstall {host}{}` takes that back\n",
                    if opts.scope == InstallScope::User { " --scope user" } else { "" }
                ));
            }
            let v = json!({"host": host, "adapter": a.name(), "dry_run": dry_run, "actions": rows, "notes": plan.notes, "recovered": recovered});
            Rendered::new(&v, text)
        }
        HostCommand::Uninstall { host, scope: s, dry_run } => {
            let a = registry::find(host)?;
            let roots = &roots(a, project, home);
            let s = scope(*s);
            let recovered = if *dry_run { None } else { finish_interrupted(roots, a, s)? };
            let fallback = everything(a, roots, s)?;
            let ours = ours(a, roots, s)?;
            let plan = install::plan_uninstall(roots, a.name(), s, &fallback, &ours)?;
            if !dry_run {
                install::apply(roots, &plan, store.fault.as_deref(), &ours)?;
            }
            let (rows, mut text) = describe(&plan);
            if plan.files.is_empty() {
                text.push_str("nothing of loopx's is installed here\n");
            } else if *dry_run {
                text.push_str("(dry run: nothing was written)\n");
            }
            let v = json!({"host": host, "adapter": a.name(), "dry_run": dry_run, "actions": rows, "notes": plan.notes, "recovered": recovered});
            Rendered::new(&v, text)
        }
        HostCommand::Doctor { host, scope: s } => {
            let a = registry::find(host)?;
            let roots = &roots(a, project, home);
            let given = s.is_some();
            // Without --scope, where loopx is installed: the project's install, else the user's.
            let installed = |s: InstallScope| -> Result<bool> {
                Ok(install::load_manifest(roots, a.name(), s, &ours(a, roots, s)?)?.is_some())
            };
            let s = match s {
                Some(s) => scope(*s),
                None if !installed(InstallScope::Project)? && installed(InstallScope::User)? => {
                    InstallScope::User
                }
                None => InstallScope::Project,
            };
            doctor(a, roots, s, !given)
        }
    }
}

/// `loopx host doctor`, printed: each check marked, what repairs the install, and what the
/// person still does in the host. The wiring decides the exit code.
fn doctor(a: &dyn HostAdapter, roots: &Roots, s: InstallScope, looked_in_both: bool) -> Result<Rendered> {
    let ours = ours(a, roots, s)?;
    let d = install::doctor::doctor(a, roots, s, looked_in_both, &found(a), &loopx_command(), &ours)?;
    let mark = |i: usize, ok: bool| match (i, ok) {
        (_, true) => "ok  ",
        (0, false) => "warn",
        _ => "FAIL",
    };
    let mut text: String = d
        .checks
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} {}: {}\n", mark(i, c.ok), c.name, c.detail))
        .collect();
    text.push_str(&match (&d.repair, d.on_path()) {
        (None, true) => "ready\n".to_owned(),
        (None, false) => {
            format!("loopx's wiring is fine; {} itself is not on PATH ({})\n", a.host(), a.install_hint())
        }
        (Some(repair), _) => format!("repair with: {repair}\n"),
    });
    if d.ok && !d.steps.is_empty() {
        text.push_str(&format!("then, in {}:\n", a.host()));
        for (i, step) in d.steps.iter().enumerate() {
            text.push_str(&format!("  {}. {step}\n", i + 1));
        }
    }
    let warnings: Vec<String> =
        if d.on_path() { vec![] } else { vec![format!("{} is not on PATH", a.host())] };
    let unfinished = d.unfinished.map(|u| match u {
        install::Unfinished::Ours => "ours",
        install::Unfinished::Foreign => "foreign",
    });
    let v = json!({"host": a.host(), "ok": d.ok, "unfinished": unfinished, "warnings": warnings, "steps": d.steps, "checks": d.checks});
    Ok(Rendered::new(&v, text)?.with_exit(if d.ok { 0 } else { 1 }))
}

/// The host's program on this machine's `PATH`, and its version.
fn found(a: &dyn HostAdapter) -> loopx_core::host::Detection {
    let cwd = std::env::current_dir().unwrap_or_default();
    loopx_hostkit::detect::detect(a.protocol(), std::env::var_os("PATH").as_deref(), &cwd)
}
