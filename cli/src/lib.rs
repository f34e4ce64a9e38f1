//! The `loopx` command line as a library: its clap definition, so tooling (`cargo xtask man`,
//! `cargo xtask dist`) renders man pages and completions from the very definition the binary
//! parses, and its adapter registry, so the benchmark and the tests reach every host the
//! binary does. Everything else lives in the binary.

pub mod args;
pub mod registry;
