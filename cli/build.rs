//! Links the unwinder into loopx on Linux with glibc, instead of loading it as a shared library.
//!
//! Rust's standard library on `*-linux-gnu` asks for GCC's unwinder as `libgcc_s.so.1`, which
//! every process then loads at start (a file opened and mapped, its symbols bound, and its
//! constructor asking the processor about itself): about 0.14 ms of a start-up that is all a
//! hook's answer waits for (see BENCHMARKS.md, "The unwinder linked in"). The same unwinder
//! ships with GCC as a static archive, `libgcc_eh.a`, which a statically linked Rust program
//! uses anyway. Taken whole, ahead of the standard library, it defines every unwinder symbol
//! before `libgcc_s` is looked at, so the linker (with `--as-needed`) leaves `libgcc_s` out.
//!
//! Where the C compiler does not name the archive (another C library, a cross build, a compiler
//! without it), nothing changes: the shared unwinder is linked as before.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    let gnu_linux = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    // A static build takes the archive already.
    let dynamic = !var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if !(native && gnu_linux && dynamic) {
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let Ok(out) = Command::new(&cc).arg("-print-file-name=libgcc_eh.a").output() else { return };
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // A compiler that does not have the file prints its bare name back.
    let Some(dir) = path.parent().filter(|_| out.status.success() && path.is_absolute() && path.is_file())
    else {
        return;
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}
