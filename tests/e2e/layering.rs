//! The dependency rules of DESIGN.md §2, checked against `cargo metadata`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

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
fn crates_depend_only_as_the_design_allows() {
    let deps = workspace_deps();
    assert!(
        deps.contains_key("loopx-core")
            && deps.contains_key("loopx-kernel")
            && deps.contains_key("loopx-cli")
    );
    for (name, on) in &deps {
        let allowed: Vec<String> = match name.as_str() {
            "loopx-core" => vec![],
            "loopx-kernel" => vec!["loopx-core".into()],
            n if n.starts_with("loopx-host-") => vec!["loopx-core".into()],
            n if n.starts_with("loopx-adapter-") => {
                let host = on.iter().filter(|d| d.starts_with("loopx-host-")).cloned();
                std::iter::once("loopx-core".to_owned()).chain(host).collect()
            }
            _ => continue, // cli, xtask and tests may depend on anything
        };
        for d in on {
            assert!(allowed.contains(d), "{name} must not depend on {d} (DESIGN.md §2)");
        }
        if name.starts_with("loopx-adapter-") {
            assert!(!on.iter().any(|d| d == "loopx-kernel"), "{name} must not depend on the kernel");
        }
    }
}

#[test]
fn core_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src");
    let forbidden =
        ["std::fs", "std::net", "std::env", "SystemTime::now", "Instant::now", "std::process", "tokio::"];
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for f in forbidden {
            assert!(!text.contains(f), "{} uses {f}: core does no I/O", path.display());
        }
    }
}
