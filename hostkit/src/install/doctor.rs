//! `loopx host doctor`: an install looked at as the person left it — the host on PATH, the
//! install manifest, the binary its hooks call, and every file of the install — without
//! writing anything. An install a crash cut short is named, and finished by the next
//! `host install`.

use std::path::Path;

use serde::Serialize;

use loopx_core::Result;
use loopx_core::host::{
    Detection, FileOp, HostAdapter, HostPath, InstallEnv, InstallOptions, InstallScope, InstallSpec,
};

use super::{Ours, Roots, Unfinished, load_manifest, manifest_path, plan_install, unfinished};

/// One thing looked at, with what was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    fn new(name: impl Into<String>, ok: bool, detail: impl Into<String>) -> Self {
        Self { name: name.into(), ok, detail: detail.into() }
    }
}

/// What the doctor found.
#[derive(Clone, Debug)]
pub struct Doctor {
    /// The host on PATH first (a warning when missing, never a failure), then loopx's wiring.
    pub checks: Vec<Check>,
    /// Every check of the wiring passed.
    pub ok: bool,
    pub unfinished: Option<Unfinished>,
    /// What the person still does in the host, in order.
    pub steps: Vec<String>,
    /// The command line that repairs the install, when it needs repair.
    pub repair: Option<String>,
}

impl Doctor {
    /// Whether the host itself was found on PATH.
    pub fn on_path(&self) -> bool {
        self.checks.first().is_some_and(|c| c.ok)
    }
}

/// The reader of the host's files under `roots`.
pub fn read_file(roots: &Roots) -> impl Fn(&HostPath) -> Option<String> + '_ {
    move |p| std::fs::read_to_string(roots.abs(p)).ok()
}

/// What `a` installs with `opts`, given the files there now.
pub fn spec(a: &dyn HostAdapter, roots: &Roots, opts: &InstallOptions) -> Result<InstallSpec> {
    let read = read_file(roots);
    a.install_plan(opts, &InstallEnv { roots, read: &read })
}

/// Whether the binary the install's hooks call is there, and is `this` loopx: a hook whose
/// binary is gone cannot answer (a tool gate then denies everything, a loop never turns), and
/// another binary answers for another version.
fn binary_check(installed: &str, this: &str) -> Check {
    let (ok, detail) = if !Path::new(installed).is_absolute() {
        (
            false,
            format!("hooks call `{installed}` from the host's PATH, which may hold no loopx or another one"),
        )
    } else if !Path::new(installed).is_file() {
        (false, format!("hooks call {installed}, which is missing"))
    } else if std::fs::canonicalize(installed).map(|p| p.display().to_string()).ok().as_deref() != Some(this)
    {
        (false, format!("hooks call {installed}, not this loopx ({this})"))
    } else {
        (true, format!("hooks call {installed}"))
    };
    Check::new("loopx binary", ok, detail)
}

/// Looks at `a`'s install in scope `s`. `found`: the host's program on PATH; `this`: this
/// loopx binary's path; `looked_in_both`: the scope was not given, and both were looked in.
pub fn doctor(
    a: &dyn HostAdapter,
    roots: &Roots,
    s: InstallScope,
    looked_in_both: bool,
    found: &Detection,
    this: &str,
    ours: &Ours,
) -> Result<Doctor> {
    let unfinished = unfinished(roots, a.name(), s, ours)?;
    let mut checks = vec![Check::new(
        format!("{} on PATH", a.host()),
        found.path.is_some(),
        found.version.clone().unwrap_or_else(|| a.install_hint().to_owned()),
    )];
    let manifest = load_manifest(roots, a.name(), s, ours)?;
    let at = manifest_path(a.name(), s)?;
    let user = if s == InstallScope::User { " --scope user" } else { "" };
    let mut host_checks = Vec::new();
    let mut wiring = |ok: bool, detail: String| checks.push(Check::new("install manifest", ok, detail));
    match &manifest {
        Some(_) if unfinished == Some(Unfinished::Foreign) => wiring(
            false,
            format!(
                "{at} holds an unfinished install plan that loopx on this machine did not start; loopx will not carry it out (delete it if you did not put it there)"
            ),
        ),
        Some(_) if unfinished.is_some() => wiring(
            false,
            format!(
                "an install or uninstall of {} was cut short ({at} records it); `loopx host install {}{user}` finishes it",
                a.name(),
                a.host()
            ),
        ),
        None if looked_in_both => wiring(
            false,
            format!(
                "loopx is not installed here: neither in this project ({}) nor for the user ({})",
                manifest_path(a.name(), InstallScope::Project)?,
                manifest_path(a.name(), InstallScope::User)?
            ),
        ),
        None => wiring(
            false,
            format!(
                "{} is missing: loopx is not installed here ({} scope)",
                manifest_path(a.name(), s)?,
                s.as_str()
            ),
        ),
        Some(m) => {
            let features: Vec<String> =
                m.options.features.iter().map(|f| format!("--with {}", f.name())).collect();
            wiring(
                true,
                format!(
                    "installed for the {} with {}",
                    if s == InstallScope::User { "user" } else { "project" },
                    if features.is_empty() { "no options".to_owned() } else { features.join(" ") }
                ),
            );
            let plan = plan_install(roots, a.name(), &m.options, &spec(a, roots, &m.options)?, ours)?;
            let read = read_file(roots);
            host_checks = a.doctor_checks(&m.options, &InstallEnv { roots, read: &read });
            checks.push(binary_check(&m.options.loopx, this));
            for f in &plan.files {
                let (ok, detail) = match f.op {
                    FileOp::Unchanged => (true, "as loopx installed it".to_owned()),
                    FileOp::Skipped => (false, f.reason.clone().unwrap_or_default()),
                    FileOp::Create => (false, "missing".to_owned()),
                    _ => (false, "loopx's entries are missing or changed".to_owned()),
                };
                checks.push(Check::new(f.path.to_string(), ok, detail));
            }
        }
    }
    checks.extend(host_checks.into_iter().map(|(name, ok, detail)| Check { name, ok, detail }));
    // The wiring decides; the host missing from PATH is a warning, not a failure of loopx's
    // install (CI, a container, a host installed later).
    let ok = checks.iter().skip(1).all(|c| c.ok);
    let steps = manifest.as_ref().map(|m| a.remaining_steps(&m.options)).unwrap_or_default();
    let repair = (!ok).then(|| {
        let flags = manifest
            .map(|m| m.options.features.iter().map(|f| format!(" --with {}", f.name())).collect::<String>());
        let first = if unfinished == Some(Unfinished::Foreign) {
            format!("delete {at} (a plan loopx will not carry out), then ")
        } else {
            String::new()
        };
        format!("{first}loopx host install {}{user}{}", a.host(), flags.unwrap_or_default())
    });
    Ok(Doctor { checks, ok, unfinished, steps, repair })
}
