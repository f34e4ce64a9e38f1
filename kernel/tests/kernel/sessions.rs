//! Host sessions bound to agents: one session per agent per host, and a session's process
//! (for a host whose tools see no session id) replaced by the session's newer process.

#![allow(clippy::unwrap_used)]
use std::path::Path;
use std::sync::Arc;

use loopx_core::kernel::*;
use loopx_core::{AgentId, AgentType, ErrorKind, GoalId};
use loopx_kernel::store::Store;
use loopx_kernel::{MemKernel, MemStore, Silent, SystemClock};

use crate::support::block_on;

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

#[test]
fn a_stop_hook_turn_goes_on_only_for_an_armed_session_under_its_cap_with_work_to_run() {
    let k = world();
    let s1 = BindThread { host: "h".into(), thread: "s1".into() };
    let stop = |cap| block_on(k.stop_turn(None, s1.clone(), cap)).unwrap();
    let seq = || k.store().read(&GoalId::new("g").unwrap()).unwrap().seq;
    // Unbound: it rests, and nothing is written.
    let unbound = seq();
    assert_eq!((stop(5).continued, stop(5).session.agent, seq()), (None, None, unbound));
    block_on(k.bind_thread(&agent("a1"), s1.clone())).unwrap();
    block_on(k.add_todo(&agent("a1"), AddTodo::agent("work", loopx_core::model::Priority::P1))).unwrap();
    // Bound but not armed: it rests.
    assert!(stop(5).continued.is_none());
    block_on(k.set_armed(&agent("a1"), true)).unwrap();
    // Armed, with work: one continuation a turn, each recorded, until the cap.
    let armed = seq();
    let first = stop(2);
    assert!(first.continued.as_ref().is_some_and(|d| d.should_run), "{first:?}");
    assert_eq!((first.session.stop_blocks, seq()), (0, armed + 1));
    assert_eq!(stop(2).session.stop_blocks, 1);
    let capped = stop(2);
    assert_eq!((capped.continued, capped.session.stop_blocks, seq()), (None, 2, armed + 2));
    // A question holding the whole goal, asked while the session works: should-run says
    // ask_user; the session is shown the question once (recorded), then rests.
    let ask = AskGate {
        question: "may I?".into(),
        blocks: loopx_core::model::GateBlocks::Goal,
        kind: loopx_core::model::GateKind::Person,
    };
    block_on(k.ask_gate(&agent("a1"), ask)).unwrap();
    let held = seq();
    let shown = stop(10);
    assert!(shown.continued.is_none());
    assert_eq!(shown.told.iter().map(|q| q.gate.to_string()).collect::<Vec<_>>(), ["g1"]);
    assert_eq!(seq(), held + 1, "the showing is recorded");
    let rests = stop(10);
    assert!(rests.continued.is_none() && rests.told.is_empty(), "{rests:?}");
    assert_eq!(seq(), held + 1, "a session that rests writes nothing");
    // A host installed with one agent: the named agent's session, bound or not.
    let named = block_on(k.stop_turn(Some(&AgentId::new("a2").unwrap()), s1.clone(), 10)).unwrap();
    assert_eq!((named.session.agent.as_ref().map(AgentId::as_str), named.session.armed), (Some("a2"), false));
}
