//! The adapter conformance suite (feature `testkit`): what every [`HostAdapter`] must do,
//! checked the same way for each. A new adapter adds a row to the table in
//! `tests/e2e/conformance.rs`; it never copies another adapter's tests.
//!
//! Install, for every scope the adapter supports, with no options and with all of them:
//! re-install changes nothing; uninstall gives the tree back byte for byte and directory for
//! directory, also after the project directory moved; a user's file of the same name is
//! skipped; the user's entries in every file loopx merges into survive install and uninstall,
//! also when the user edits the file after install; an unparseable host file is refused with
//! nothing written; a plan stopped half-way is finished by the next command.
//!
//! Hooks: every sample stdin decodes to its event; empty, garbage, non-object, wrong-typed and
//! 5 MB stdin are refused, and the driver answers them the safe way (the tool gate denies,
//! everything else lets the host go on); every reply and failure encodes to output the host
//! accepts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support: a failed expectation is a failed test

use crate::block_on;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use loopx_core::GoalId;
use loopx_core::host::{
    EntryOp, Feature, FileOp, Format, HookPoint, HookReply, HostAdapter, HostPath, InstallEnv,
    InstallOptions, InstallScope, InstallSpec, ManagedFile,
};

use loopx_hostkit::hook::{HookEnv, answer};
use loopx_hostkit::install::doc::Doc;
use loopx_hostkit::install::{Ours, Roots, apply, apply_until, plan_install, plan_uninstall, recover};
use loopx_kernel::{Silent, StoreOptions};

/// What the suite saw, for snapshots: each file of a full project install, rendered.
#[derive(Debug)]
pub struct Conformance {
    pub installed: BTreeMap<String, String>,
}

/// Every file and directory under a root, with contents (directories end in `/`).
pub fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/");
            if p.is_dir() {
                out.insert(format!("{rel}/"), String::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

struct Sandbox {
    _dir: tempfile::TempDir,
    roots: Roots,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots {
            project: dir.path().join("project"),
            home: dir.path().join("home"),
            host_home: Some(dir.path().join("home/.hosthome")),
        };
        std::fs::create_dir_all(&roots.project).unwrap();
        std::fs::create_dir_all(&roots.home).unwrap();
        Self { _dir: dir, roots }
    }
    fn both(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        (tree(&self.roots.project), tree(&self.roots.home))
    }
    fn write(&self, p: &HostPath, text: &str) {
        let abs = self.roots.abs(p);
        std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
        std::fs::write(abs, text).unwrap();
    }
    fn read(&self, p: &HostPath) -> String {
        std::fs::read_to_string(self.roots.abs(p)).unwrap()
    }
}

fn options(scope: InstallScope, features: BTreeSet<Feature>) -> InstallOptions {
    InstallOptions {
        scope,
        features,
        loopx: "loopx".to_owned(),
        goal: GoalId::new("main").unwrap(),
        agent: None,
    }
}

/// What the adapter may read while planning: the files as they are now.
fn read(r: &Roots) -> impl Fn(&HostPath) -> Option<String> + '_ {
    move |p| std::fs::read_to_string(r.abs(p)).ok()
}

fn spec(a: &dyn HostAdapter, r: &Roots, o: &InstallOptions) -> loopx_core::Result<InstallSpec> {
    let read = read(r);
    a.install_plan(o, &InstallEnv { roots: r, read: &read })
}

fn cleanup(a: &dyn HostAdapter, r: &Roots, scope: InstallScope) -> InstallSpec {
    let read = read(r);
    a.uninstall_plan(scope, "loopx", &InstallEnv { roots: r, read: &read }).unwrap()
}

/// What `a` may touch in `scope`, with this sandbox's witness of the plans it starts (beside
/// the project and the home, so their trees stay the install's alone).
fn ours(a: &dyn HostAdapter, r: &Roots, scope: InstallScope) -> Ours {
    let witness = r.project.parent().unwrap().join("witness");
    Ours::new(a.name(), scope, &cleanup(a, r, scope), a.protocol().host_files(), witness).unwrap()
}

fn install(a: &dyn HostAdapter, r: &Roots, o: &InstallOptions) -> loopx_hostkit::install::Plan {
    let plan = plan_install(r, a.name(), o, &spec(a, r, o).unwrap(), &ours(a, r, o.scope)).unwrap();
    apply(r, &plan, None, &ours(a, r, o.scope)).unwrap();
    plan
}

fn uninstall(a: &dyn HostAdapter, r: &Roots, scope: InstallScope) {
    let plan = plan_uninstall(r, a.name(), scope, &cleanup(a, r, scope), &ours(a, r, scope)).unwrap();
    apply(r, &plan, None, &ours(a, r, scope)).unwrap();
}

/// Runs the whole suite on `a`; panics, naming the adapter and the check, on the first failure.
pub fn check_adapter(a: &dyn HostAdapter) -> Conformance {
    let caps = a.capabilities();
    assert!(!caps.scopes.is_empty(), "{}: installs nowhere", a.name());
    let all: BTreeSet<Feature> = caps.features.iter().copied().collect();
    let mut installed = BTreeMap::new();
    for &scope in &caps.scopes {
        for features in [BTreeSet::new(), all.clone()] {
            let o = options(scope, features);
            round_trip(a, &o);
            users_files_and_entries(a, &o);
            unparseable_files_are_refused(a, &o);
            half_applied_plans_are_finished(a, &o);
            host_files_go_with_loopxs_directories(a, &o);
        }
        moved_project(a, scope);
    }
    let s = Sandbox::new();
    install(a, &s.roots, &options(InstallScope::Project, all));
    for (k, v) in tree(&s.roots.project) {
        if !k.ends_with('/') && !k.starts_with(".loopx/") {
            installed.insert(k, v);
        }
    }
    unsupported_options_are_refused(a);
    hooks(a);
    Conformance { installed }
}

fn round_trip(a: &dyn HostAdapter, o: &InstallOptions) {
    let s = Sandbox::new();
    std::fs::write(s.roots.project.join("README.md"), "mine\n").unwrap();
    let before = s.both();
    let dry =
        plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
            .unwrap();
    assert_eq!(s.both(), before, "{}: planning writes nothing", a.name());
    let plan = install(a, &s.roots, o);
    assert_eq!(
        dry.files.iter().map(|f| f.op).collect::<Vec<_>>(),
        plan.files.iter().map(|f| f.op).collect::<Vec<_>>()
    );
    assert!(plan.files.iter().any(|f| f.op == FileOp::Create), "{}: {o:?} installs something", a.name());
    let after = s.both();
    let again =
        plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
            .unwrap();
    assert!(!again.changes(), "{}: re-install with {o:?} changes {:?}", a.name(), again.files);
    assert!(again.files.iter().all(|f| f.op == FileOp::Unchanged), "{:?}", again.files);
    assert_eq!(s.both(), after);
    uninstall(a, &s.roots, o.scope);
    assert_eq!(s.both(), before, "{}: uninstall with {o:?} gives the tree back", a.name());
    // And again: nothing left to do.
    let nothing = plan_uninstall(
        &s.roots,
        a.name(),
        o.scope,
        &cleanup(a, &s.roots, o.scope),
        &ours(a, &s.roots, o.scope),
    )
    .unwrap();
    assert!(!nothing.changes(), "{:?}", nothing.files);
}

/// The files a host writes by itself into the directories an install created go with them on
/// uninstall; one the user changed stays, with its directory.
fn host_files_go_with_loopxs_directories(a: &dyn HostAdapter, o: &InstallOptions) {
    if a.protocol().host_files().is_empty() {
        return;
    }
    for changed in [false, true] {
        let s = Sandbox::new();
        let before = s.both();
        let planned =
            plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
                .unwrap();
        // The directories the install will create.
        let mut dirs: Vec<PathBuf> = planned
            .files
            .iter()
            .filter_map(|f| s.roots.abs(&f.path).parent().map(Path::to_path_buf))
            .filter(|d| !d.exists() && !d.ends_with(".loopx/installs"))
            .collect();
        install(a, &s.roots, o);
        dirs.sort();
        dirs.dedup();
        let mut kept = Vec::new();
        for d in &dirs {
            for f in a.protocol().host_files() {
                let content = if changed { format!("{}mine\n", f.content) } else { f.content.to_owned() };
                std::fs::write(d.join(f.name), &content).unwrap();
                kept.push((d.join(f.name), content));
            }
        }
        uninstall(a, &s.roots, o.scope);
        if changed {
            for (p, content) in kept {
                assert_eq!(
                    std::fs::read_to_string(&p).ok(),
                    Some(content),
                    "{}: a changed {} is the user's",
                    a.name(),
                    p.display()
                );
            }
        } else {
            assert_eq!(s.both(), before, "{}: the host's own files go with loopx's directories", a.name());
        }
    }
}

fn moved_project(a: &dyn HostAdapter, scope: InstallScope) {
    let s = Sandbox::new();
    std::fs::write(s.roots.project.join("README.md"), "mine\n").unwrap();
    let before = s.both();
    let o = options(scope, a.capabilities().features.into_iter().collect());
    install(a, &s.roots, &o);
    let moved = Roots { project: s.roots.project.with_file_name("moved"), ..s.roots.clone() };
    std::fs::rename(&s.roots.project, &moved.project).unwrap();
    uninstall(a, &moved, scope);
    assert_eq!((tree(&moved.project), tree(&moved.home)), before, "{}: uninstall after a move", a.name());
}

/// A user's element beside ours in an array: a table beside a table, a string otherwise.
fn users_neighbour(ours: &Value) -> Value {
    if ours.is_object() { json!({"user": "kept"}) } else { json!("user-item") }
}

fn users_files_and_entries(a: &dyn HostAdapter, o: &InstallOptions) {
    let s = Sandbox::new();
    let spec = spec(a, &s.roots, o).unwrap();
    let mut expected_kept: Vec<(HostPath, Format, Vec<String>, Value)> = Vec::new();
    for f in &spec.files {
        match f {
            ManagedFile::Text { path, .. } => s.write(path, "the user's own file\n"),
            ManagedFile::Entries { path, format, entries } => {
                let mut doc = Doc::parse(*format, None, "").unwrap();
                doc.set(&["user_key".to_owned()], &json!("kept")).unwrap();
                expected_kept.push((path.clone(), *format, vec!["user_key".to_owned()], json!("kept")));
                for e in entries {
                    match &e.op {
                        EntryOp::Set(_) => {
                            let mut at = e.at[..e.at.len() - 1].to_vec();
                            at.push("user_sibling".to_owned());
                            doc.set(&at, &json!("kept")).unwrap();
                            expected_kept.push((path.clone(), *format, at, json!("kept")));
                        }
                        EntryOp::Push(ours) | EntryOp::Ensure(ours) => {
                            let v = users_neighbour(ours);
                            if !doc
                                .get(&e.at)
                                .and_then(|a| a.as_array().cloned())
                                .is_some_and(|a| a.contains(&v))
                            {
                                doc.push(&e.at, &v).unwrap();
                            }
                            expected_kept.push((path.clone(), *format, e.at.clone(), v));
                        }
                    }
                }
                s.write(path, &doc.render().unwrap());
            }
        }
    }
    let before = s.both();
    let plan = install(a, &s.roots, o);
    for f in spec.files.iter().filter(|f| matches!(f, ManagedFile::Text { .. })) {
        let line = plan.files.iter().find(|l| &l.path == f.path()).unwrap();
        assert_eq!(line.op, FileOp::Skipped, "{}: the user's {} is skipped", a.name(), f.path());
        assert_eq!(s.read(f.path()), "the user's own file\n");
    }
    let kept = |s: &Sandbox| {
        for (path, format, at, v) in &expected_kept {
            let doc = Doc::parse(*format, Some(&s.read(path)), "").unwrap();
            let got = doc.get(at).unwrap_or(Value::Null);
            let ok = got == *v || got.as_array().is_some_and(|arr| arr.contains(v));
            assert!(ok, "{}: the user's {} in {path} is kept (found {got})", a.name(), at.join("."));
        }
    };
    kept(&s);
    uninstall(a, &s.roots, o.scope);
    assert_eq!(s.both(), before, "{}: the user's bytes come back exactly", a.name());

    // Edited after install: uninstall takes out only loopx's entries.
    install(a, &s.roots, o);
    for (path, format, _, _) in &expected_kept {
        let mut doc = Doc::parse(*format, Some(&s.read(path)), "").unwrap();
        doc.set(&["user_after".to_owned()], &json!(1)).unwrap();
        s.write(path, &doc.render().unwrap());
    }
    uninstall(a, &s.roots, o.scope);
    kept(&s);
    for f in &spec.files {
        if let ManagedFile::Entries { path, format, entries } = f {
            let doc = Doc::parse(*format, Some(&s.read(path)), "").unwrap();
            assert_eq!(doc.get(&["user_after".to_owned()]), Some(json!(1)));
            for e in entries {
                let (EntryOp::Set(v) | EntryOp::Push(v) | EntryOp::Ensure(v)) = &e.op;
                let got = doc.get(&e.at);
                let still = got.as_ref() == Some(v)
                    || got.as_ref().and_then(Value::as_array).is_some_and(|a| a.contains(v));
                let was_users =
                    expected_kept.iter().any(|(p, _, at, uv)| p == path && *at == e.at && uv == v);
                assert!(!still || was_users, "{}: loopx's {} is gone from {path}", a.name(), e.at.join("."));
            }
        }
    }
}

fn unparseable_files_are_refused(a: &dyn HostAdapter, o: &InstallOptions) {
    let fresh = Sandbox::new();
    for f in &spec(a, &fresh.roots, o).unwrap().files {
        let ManagedFile::Entries { path, format, .. } = f else { continue };
        let s = Sandbox::new();
        s.write(path, if *format == Format::Json { "{ \"model\": \"opus\", " } else { "model = = \"o3\"\n" });
        let before = s.both();
        let e =
            plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
                .unwrap_err();
        assert!(e.message.contains("is not valid"), "{}: {}", a.name(), e.message);
        assert_eq!(s.both(), before, "{}: nothing written next to a broken {path}", a.name());
        let e = plan_uninstall(
            &s.roots,
            a.name(),
            o.scope,
            &cleanup(a, &s.roots, o.scope),
            &ours(a, &s.roots, o.scope),
        );
        assert!(e.is_err() || !e.unwrap().changes());
        assert_eq!(s.both(), before);
    }
}

fn half_applied_plans_are_finished(a: &dyn HostAdapter, o: &InstallOptions) {
    let s = Sandbox::new();
    let before = s.both();
    let plan =
        plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
            .unwrap();
    let w = &ours(a, &s.roots, o.scope);
    apply_until(&s.roots, &plan, None, w, Some(1)).unwrap();
    // The same journal where this machine never started it (a repository shipped it, an agent
    // wrote it): refused, nothing written, in the project or the home.
    let elsewhere = Sandbox::new();
    let journal = loopx_hostkit::install::manifest_path(a.name(), o.scope).unwrap();
    elsewhere.write(&journal, &s.read(&journal));
    let before_elsewhere = elsewhere.both();
    let e = recover(&elsewhere.roots, a.name(), o.scope, &ours(a, &elsewhere.roots, o.scope)).unwrap_err();
    assert!(e.message.contains("did not start"), "{}: {}", a.name(), e.message);
    assert_eq!(elsewhere.both(), before_elsewhere, "{}: a foreign plan wrote", a.name());
    assert!(
        recover(&s.roots, a.name(), o.scope, w).unwrap().is_some(),
        "{}: a pending plan is seen",
        a.name()
    );
    // Finished: the install is whole, so installing again changes nothing.
    let again =
        plan_install(&s.roots, a.name(), o, &spec(a, &s.roots, o).unwrap(), &ours(a, &s.roots, o.scope))
            .unwrap();
    assert!(!again.changes(), "{}: the interrupted install is finished: {:?}", a.name(), again.files);
    let un = plan_uninstall(
        &s.roots,
        a.name(),
        o.scope,
        &cleanup(a, &s.roots, o.scope),
        &ours(a, &s.roots, o.scope),
    )
    .unwrap();
    apply_until(&s.roots, &un, None, w, Some(1)).unwrap();
    recover(&s.roots, a.name(), o.scope, w).unwrap();
    assert_eq!(s.both(), before, "{}: the interrupted uninstall is finished", a.name());
}

fn unsupported_options_are_refused(a: &dyn HostAdapter) {
    let caps = a.capabilities();
    for f in Feature::ALL.into_iter().filter(|f| !caps.features.contains(f)) {
        let o = options(caps.scopes[0], [f].into_iter().collect());
        let s = Sandbox::new();
        assert!(spec(a, &s.roots, &o).is_err(), "{}: {} is refused", a.name(), f.flag());
    }
}

fn hooks(a: &dyn HostAdapter) {
    let caps = a.capabilities();
    let samples = a.protocol().samples();
    // The declared table: an event a point, the points the adapter says it has, each event
    // read by either of its names.
    let events = a.protocol().hook_events();
    let mut points: Vec<_> = events.iter().map(|e| e.point).collect();
    points.sort_by_key(|p| format!("{p:?}"));
    points.dedup();
    assert_eq!(points.len(), events.len(), "{}: one event a hook point", a.name());
    let mut declared = caps.hook_points.clone();
    declared.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(points, declared, "{}: the hook table's points are the capabilities'", a.name());
    for e in &events {
        assert_eq!(
            (a.protocol().hook_point(e.cli).ok(), a.protocol().hook_point(e.native).ok()),
            (Some(e.point), Some(e.point))
        );
    }
    for p in &caps.hook_points {
        assert!(
            samples.iter().any(|s| a.protocol().hook_point(s.event).ok() == Some(*p)),
            "{}: a sample for every hook point ({p:?})",
            a.name()
        );
    }
    for s in &samples {
        let p = a.protocol().hook_point(s.event).unwrap();
        assert_eq!(
            a.protocol().decode(p, s.stdin.as_bytes()).unwrap(),
            s.expected,
            "{}: {}",
            a.name(),
            s.event
        );
    }
    assert!(a.protocol().hook_point("no-such-event").is_err());
    let big = format!("{{\"session_id\": \"s\", \"pad\": \"{}\"}}", "x".repeat(5 << 20));
    let bad: [&[u8]; 6] =
        [b"", b"not json", b"[1,2]", b"\"text\"", br#"{"session_id": 7, "cwd": ["x"]}"#, big.as_bytes()];
    let dir = tempfile::tempdir().unwrap();
    let env = HookEnv {
        cwd: dir.path().to_path_buf(),
        project_dir: None,
        stop_cap: 3,
        loopx: "loopx".to_owned(),
        agent: None,
        options: StoreOptions::default(),
        reporter: Arc::new(Silent),
        open: Arc::new(loopx_kernel::open_file_store),
        hosts: Arc::default(),
        clock: Arc::new(loopx_kernel::SystemClock),
        process: None,
    };
    for s in &samples {
        let p = a.protocol().hook_point(s.event).unwrap();
        for stdin in bad {
            assert!(
                a.protocol().decode(p, stdin).is_err(),
                "{}: {} refuses {} bytes of bad stdin",
                a.name(),
                s.event,
                stdin.len()
            );
            let out = block_on(answer(a, s.event, stdin, &env));
            a.protocol()
                .check_answer(Some(p), &out)
                .unwrap_or_else(|e| panic!("{}: {}: {}", a.name(), s.event, e.message));
            assert!(!out.stderr.is_empty(), "{}: {} says why on stderr", a.name(), s.event);
            if p == HookPoint::ToolGate {
                assert!(
                    !out.stdout.is_empty() && out.exit_code == 0,
                    "{}: the tool gate fails closed",
                    a.name()
                );
            } else {
                // Failing open is answering as if loopx had nothing to say.
                let pass = a.protocol().encode(p, &HookReply::Pass);
                assert_eq!(out.stdout, pass.stdout, "{}: {} fails open: {out:?}", a.name(), s.event);
            }
        }
        // Outside any project, a hook stays out of the way.
        let out = block_on(answer(
            a,
            s.event,
            s.stdin.replace("/home/u/p", &dir.path().display().to_string()).as_bytes(),
            &env,
        ));
        a.protocol().check_answer(Some(p), &out).unwrap();
    }
    let replies = [
        HookReply::Pass,
        HookReply::Context("goal main: ship it".to_owned()),
        HookReply::Continue("continue with t1".to_owned()),
        HookReply::Deny("loopx says stop".to_owned()),
        HookReply::Status("loopx main ▶ 1 open".to_owned()),
    ];
    for p in &caps.hook_points {
        for r in &replies {
            let out = a.protocol().encode(*p, r);
            a.protocol()
                .check_answer(Some(*p), &out)
                .unwrap_or_else(|e| panic!("{}: {p:?} {r:?}: {}", a.name(), e.message));
        }
    }
    a.protocol().check_answer(None, &a.protocol().fail_open(None, "loopx: broken")).unwrap();
    let unknown = block_on(answer(a, "no-such-event", b"{}", &env));
    a.protocol().check_answer(None, &unknown).unwrap();
}
