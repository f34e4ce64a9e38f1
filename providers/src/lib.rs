//! The providers loopx's gates observe the world through (the process runner for validation
//! commands and command gates, GitHub for CI and merges), and the notifier that tells a person
//! a gate needs them. Each implements a core trait (`Provider`, `Notifier`); the kernel never
//! names them, the CLI wires them in. No state is written here; tokens and webhook addresses
//! kept in the environment never leave this crate but as request headers and bodies.

pub mod github;
pub mod notify;
pub mod process;

pub use github::GitHub;
pub use notify::Notify;
pub use process::ProcessProvider;
