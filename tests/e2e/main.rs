#![allow(clippy::unwrap_used, clippy::expect_used)]
//! End-to-end suite: every test runs the real `loopx` binary in a temporary sandbox.

mod bad_input;
mod bench;
mod commands;
mod concurrency;
mod conformance;
mod demo;
mod handoff;
mod hook_matrix;
mod hooks_claude;
mod hostile_text;
mod install_claude;
mod install_codex;
mod integrity;
mod layering;
mod mcp;
mod newcomer;
mod readme;
mod real_claude;
mod real_codex;
mod real_handoff;
mod snapshots;
mod text_output;
mod tick;
mod trust;
mod trust_model;
