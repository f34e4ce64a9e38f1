//! Test support for the kernel and the host platform, kept out of the product: the store
//! conformance suite (`store_suite`, run on every store by one `store_conformance!` line), the
//! adapter conformance suite (`adapter`: every host adapter's install plans, hook answers and
//! samples checked against the platform's rules), and the deterministic simulation (`sim`,
//! `cargo xtask sim`).

use std::task::{Context, Poll};

pub mod adapter;
pub mod sim;
pub mod store_suite;
pub mod story;

/// Runs a future of the kernel's to completion. The kernel's futures never wait on anything
/// (its I/O is blocking), so one poll finishes them.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}
