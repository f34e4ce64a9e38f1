//! Host sessions bound to agents: one session per agent per host, and a session's process
//! (for a host whose tools see no session id) replaced by the session's newer process.

#![allow(clippy::unwrap_used)]
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use loopx_core::kernel::*;
use loopx_core::{AgentId, AgentType, ErrorKind, GoalId};
use loopx_kernel::{MemKernel, MemStore, Silent, SystemClock};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn agent(id: &str) -> CommandContext {
    CommandContext { agent: Some(AgentId::new(id).unwrap()), ..CommandContext::default() }
}

fn world() -> MemKernel {
    let k =
        MemKernel::over(MemStore::new(Path::new("/nonexistent/s"), Arc::new(SystemClock), Arc::new(Silent)));
    let create =
        CreateGoal { id: GoalId::new("g").unwrap(), objective: "o".into(), title: None, make_default: true };
    block_on(k.create_goal(create)).unwrap();
    for id in ["a1", "a2"] {
        let reg = RegisterAgent {
            id: AgentId::new(id).unwrap(),
            agent_type: AgentType::other(),
            require_new: false,
        };
        block_on(k.register_agent(&agent(id), reg)).unwrap();
    }
    k
}

fn bound(k: &MemKernel, t: &BindThread) -> Option<String> {
    block_on(k.session(None, t)).unwrap().agent.map(|a| a.to_string())
}

#[test]
fn an_agent_has_one_session_per_host_but_its_process_moves_on() {
    let k = world();
    let (s1, s2) = (
        BindThread { host: "h".into(), thread: "s1".into() },
        BindThread { host: "h".into(), thread: "s2".into() },
    );
    block_on(k.bind_thread(&agent("a1"), s1.clone())).unwrap();
    let e = block_on(k.bind_thread(&agent("a1"), s2.clone())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{}", e.message);

    let (p1, p2) = (BindThread::process("h", "100.7"), BindThread::process("h", "200.9"));
    assert!(p1.is_process() && !s1.is_process());
    block_on(k.bind_thread(&agent("a1"), p1.clone())).unwrap();
    assert_eq!(bound(&k, &p1).as_deref(), Some("a1"));
    // The session resumed in a new process: the newer process stands for it, the older no more.
    block_on(k.bind_thread(&agent("a1"), p2.clone())).unwrap();
    assert_eq!((bound(&k, &p1), bound(&k, &p2).as_deref()), (None, Some("a1")));
    assert_eq!(bound(&k, &s1).as_deref(), Some("a1"), "the session itself stays bound");
    // A process another agent stands for is not taken.
    let e = block_on(k.bind_thread(&agent("a2"), p2.clone())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict);
    // Another host's process of the same agent is its own.
    let other = BindThread::process("h2", "100.7");
    block_on(k.bind_thread(&agent("a1"), other.clone())).unwrap();
    assert_eq!((bound(&k, &p2).as_deref(), bound(&k, &other).as_deref()), (Some("a1"), Some("a1")));
}
