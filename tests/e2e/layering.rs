//! The layering rules of ARCHITECTURE.md's code map (`loopx_tests::layering`), on the workspace, and on
//! injected violations to show the check bites.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use loopx_tests::layering::{
    Layer, check_deps, check_source, check_workspace, circles, module_graph, modules_named, refusals,
    refusals_under,
};

fn workspace_deps() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let members: Vec<String> =
        meta["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null()) // normal dependencies, not dev or build
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .filter(|n| members.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn crates_depend_only_as_the_code_map_allows() {
    let deps = workspace_deps();
    assert!(
        deps.contains_key("loopx-core")
            && deps.contains_key("loopx-kernel")
            && deps.contains_key("loopx-cli")
    );
    assert_eq!(check_deps(&deps), Vec::<String>::new());
}

#[test]
fn sources_name_only_what_their_layer_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    assert_eq!(check_workspace(&root), vec![]);
}

/// Inside a crate, no two modules name each other, directly or round a longer circle: each
/// module can be read knowing only those below it.
#[test]
fn no_library_crate_has_a_circle_of_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in ["core", "kernel"] {
        for circle in circles(&module_graph(&root.join(dir).join("src"))) {
            found.push(format!("{dir}: {}", circle.join(" → ")));
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_module_check_finds_an_injected_circle() {
    let a = modules_named("use crate::b::Thing; fn f() {}");
    let b = modules_named("fn g() { crate::c::h(); }");
    let c = modules_named("use crate::{a, d::X}; fn i() { let _ = format!(\"{}\", crate::e::j()); }");
    let tests_only = modules_named("#[cfg(test)] mod tests { use crate::a::f; }");
    assert_eq!(c, BTreeSet::from(["a".to_owned(), "d".to_owned(), "e".to_owned()]));
    assert!(tests_only.is_empty(), "a test may name anything");
    let graph = BTreeMap::from([("a".to_owned(), a), ("b".to_owned(), b.clone()), ("c".to_owned(), c)]);
    assert_eq!(circles(&graph), [["a", "b", "c"]]);
    let open = BTreeMap::from([("a".to_owned(), BTreeSet::from(["b".to_owned()])), ("b".to_owned(), b)]);
    assert!(circles(&open).is_empty());
    // And on disk: a circle written into a copy of a crate's sources.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("x")).unwrap();
    std::fs::write(dir.path().join("lib.rs"), "mod x; mod y;").unwrap();
    std::fs::write(dir.path().join("x/inner.rs"), "pub fn f() { crate::y::g() }").unwrap();
    std::fs::write(dir.path().join("y.rs"), "pub fn g() { crate::x::inner::f() }").unwrap();
    assert_eq!(circles(&module_graph(dir.path())), [["x", "y"]]);
}

/// The check itself: each violation below must be caught (and the legitimate code beside it
/// must not be).
#[test]
fn the_check_catches_each_kind_of_violation() {
    let caught = |layer: Layer, src: &str| {
        let v = check_source(layer, "injected.rs", src);
        assert!(!v.is_empty(), "{layer:?} let this through:\n{src}");
        v[0].what.clone()
    };
    // Core does no I/O, however the import is spelled.
    assert!(caught(Layer::Core, "use std::{env, fs};").contains("std::env"));
    caught(Layer::Core, "use std::fs as f; fn a() { f::read(\"x\").ok(); }");
    caught(Layer::Core, "fn a() { let _ = std::env::var(\"HOME\"); }");
    caught(Layer::Core, "use std::time::Instant; fn a() { let _ = Instant::now(); }");
    caught(Layer::Core, "fn a() -> String { format!(\"{:?}\", std::process::id()) }");
    caught(Layer::Core, "use std::io::*; fn a() { println!(\"x\"); }");
    // Hosts and adapters never write.
    caught(Layer::Host, "fn a() { std::fs::write(\"x\", \"y\").ok(); }");
    caught(Layer::Host, "use std::fs::File; fn a() { File::create(\"x\").ok(); }");
    // A host crate reads and parses: running the host is the host platform's.
    caught(Layer::Host, "use std::process::Command; fn a() { Command::new(\"claude\").output().ok(); }");
    caught(Layer::Host, "use std::fs::{self, OpenOptions};");
    caught(Layer::Adapter, "fn a() { std::fs::write(\"x\", \"y\").ok(); }");
    caught(Layer::Adapter, "fn a() { let _ = std::fs::read(\"x\"); }");
    caught(Layer::Adapter, "fn a() { std::process::Command::new(\"sh\"); }");
    // The kernel never reads the environment or prints.
    caught(Layer::Kernel, "fn a() { let _ = std::env::var(\"X\"); }");
    caught(Layer::Kernel, "fn a() { println!(\"x\"); }");
    caught(Layer::Kernel, "fn a() { eprintln!(\"{}\", 1); }");
    // Providers reach the network and run commands, but read no environment and touch no file.
    caught(Layer::Provider, "fn a() { let _ = std::env::var(\"GITHUB_TOKEN\"); }");
    caught(Layer::Provider, "use tokio::fs; async fn a() { fs::write(\"x\", \"y\").await.ok(); }");
    caught(Layer::Provider, "fn a() { println!(\"token\"); }");
    // The host platform runs processes and asks the kernel, but writes no file of its own.
    caught(Layer::Platform, "fn a() { std::fs::write(\"turn.log\", \"y\").ok(); }");
    caught(Layer::Platform, "fn a() { let _ = std::env::var(\"LOOPX_AGENT_ID\"); }");
    caught(Layer::Platform, "fn a() { eprintln!(\"turn 1\"); }");
    // The kernel and core name no concrete host: not in a name, not in a string.
    let in_kernel = |src: &str| check_source(Layer::Kernel, "kernel/src/injected.rs", src);
    assert!(in_kernel("fn a() -> &'static str { \"codex_heartbeat\" }")[0].what.contains("codex"));
    assert!(!in_kernel("fn a(t: AgentType) -> bool { t == AgentType::ClaudeCode }").is_empty());
    assert!(!check_source(Layer::Core, "core/src/injected.rs", "const X: &str = \"Cursor\";").is_empty());
    assert!(!in_kernel("fn a() { let s = format!(\"{} via gemini\", 1); }").is_empty());
    // In docs and tests they may, and another crate may; a position named cursor is no host.
    for fine in [
        "/// Like Claude Code's Stop hook.\nfn a() {}",
        "#[cfg(test)] mod tests { const H: &str = \"claude-code\"; }",
        "fn a(cursor: usize) -> usize { cursor + 1 }",
    ] {
        assert_eq!(in_kernel(fine), vec![], "{fine}");
    }
    assert_eq!(check_source(Layer::Host, "hosts/codex/src/lib.rs", "const H: &str = \"codex\";"), vec![]);
    // Module directories are read, not tripped over; test modules are exempt.
    let fine = [
        (Layer::Core, "mod inner { pub fn a() -> std::path::PathBuf { std::path::PathBuf::new() } }"),
        (Layer::Core, "#[cfg(test)] mod tests { fn a() { std::fs::read(\"x\").ok(); } }"),
        (Layer::Host, "fn a() { let _ = std::fs::read_to_string(\"x\"); }"),
        (
            Layer::Kernel,
            "fn a() { std::fs::write(\"x\", \"y\").ok(); let _ = std::process::Command::new(\"cargo\"); }",
        ),
        (Layer::Provider, "fn a() { let _ = std::process::Command::new(\"notify-send\"); }"),
        (
            Layer::Platform,
            "fn a() { let _ = std::fs::read(\"/proc/1/environ\"); let _ = tokio::process::Command::new(\"claude\"); }",
        ),
    ];
    for (layer, src) in fine {
        assert_eq!(check_source(layer, "fine.rs", src), vec![], "{layer:?} refused legitimate code:\n{src}");
    }
    // Dependencies: an adapter on two host crates, or on the kernel; a host on the kernel.
    let deps = |name: &str, on: &[&str]| {
        BTreeMap::from([(name.to_owned(), on.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())])
    };
    assert!(
        !check_deps(&deps(
            "loopx-adapter-codex-heartbeat",
            &["loopx-core", "loopx-host-codex", "loopx-host-claude-code"]
        ))
        .is_empty()
    );
    assert!(!check_deps(&deps("loopx-adapter-claude-code-slash", &["loopx-kernel"])).is_empty());
    assert!(
        !check_deps(&deps("loopx-report", &["loopx-core", "loopx-kernel", "loopx-providers"])).is_empty()
    );
    assert!(!check_deps(&deps("loopx-host-codex", &["loopx-kernel"])).is_empty());
    assert!(!check_deps(&deps("loopx-core", &["loopx-kernel"])).is_empty());
    assert!(!check_deps(&deps("loopx-cli", &["loopx-kernel", "loopx-testkit"])).is_empty());
    assert!(!check_deps(&deps("loopx-testkit", &["loopx-cli"])).is_empty());
    assert!(!check_deps(&deps("loopx-providers", &["loopx-kernel"])).is_empty());
    assert!(!check_deps(&deps("loopx-pgstore", &["loopx-cli"])).is_empty());
    assert!(!check_deps(&deps("loopx-hostkit", &["loopx-adapter-claude-code-slash"])).is_empty());
    assert!(check_deps(&deps("loopx-hostkit", &["loopx-core", "loopx-kernel"])).is_empty());
    assert!(check_deps(&deps("loopx-pgstore", &["loopx-core", "loopx-kernel"])).is_empty());
    assert!(
        check_deps(&deps("loopx-adapter-codex-heartbeat", &["loopx-core", "loopx-host-codex"])).is_empty()
    );
}

#[test]
fn the_check_finds_a_violation_in_a_nested_module_file_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("core/src/deep/er");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(dir.path().join("core/src/lib.rs"), "pub mod deep;\n").unwrap();
    std::fs::write(src.join("mod.rs"), "use std::{env, fs};\n").unwrap();
    for krate in ["kernel", "providers"] {
        std::fs::create_dir_all(dir.path().join(krate).join("src")).unwrap();
        std::fs::write(dir.path().join(krate).join("src/lib.rs"), "").unwrap();
    }
    let v = check_workspace(dir.path());
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|x| x.file == "core/src/deep/er/mod.rs"), "{v:?}");
}

/// What the repository's docs and code cite must be in the repository: no brief kept
/// elsewhere stands behind a rule.
#[test]
fn the_repository_cites_no_document_outside_itself() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = std::process::Command::new("git").arg("ls-files").current_dir(root).output().unwrap();
    let files = String::from_utf8(out.stdout).unwrap();
    let outside = ["DESIGN", ".md"].concat();
    assert!(files.lines().count() > 100, "git ls-files listed the repository");
    let citing: Vec<&str> = files
        .lines()
        .filter(|f| std::fs::read_to_string(root.join(f)).is_ok_and(|t| t.contains(&outside)))
        .collect();
    assert!(
        root.join(&outside).exists() || citing.is_empty(),
        "{outside} is not in the repository, yet {citing:?} cite it"
    );
}

/// The CLI holds no rule: the only refusals it makes itself are about its own environment,
/// each named here with why it cannot be a library's; every other refusal comes from a
/// library crate.
#[test]
fn the_cli_refuses_only_for_its_environment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let environment = BTreeMap::from([
        // The passphrase is asked on the terminal, and there is none.
        ("cli/src/person.rs".to_owned(), 1),
        // `--png` needs a rasteriser on PATH; the one found did not make the picture.
        ("cli/src/report.rs".to_owned(), 2),
    ]);
    assert_eq!(refusals_under(&root, "cli/src"), environment);
}

#[test]
fn the_refusal_check_sees_a_refusal_wherever_the_code_makes_one() {
    let made = r#"
        use loopx_core::Error;
        fn a() -> Result<()> { Err(Error::refused("a rule")) }
        fn b() -> Result<()> { Err(loopx_core::Error::refused(format!("{}", 1)).with_hint("h")) }
        fn c() -> String { format!("{:?}", Error::refused("inside a macro")) }
        #[cfg(test)]
        mod tests { fn t() { let _ = Error::refused("a test's"); } }
    "#;
    assert_eq!(refusals(made), 3);
    assert_eq!(refusals("fn a() -> Result<()> { Err(Error::usage(\"argv\")) }"), 0);
}
