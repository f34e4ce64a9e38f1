//! The store conformance suite (feature `testkit`): what every [`Store`] must do, run the same
//! way against each through the kernel's own commands. A store takes the suite by implementing
//! [`Backend`] and invoking [`store_conformance!`](crate::store_conformance) once, which makes
//! one test per check; `tests/e2e/stores.rs` does so for the file store and the in-memory store.
//!
//! The commit protocol (each receipt's event is in the log, the chain verifies, the state is
//! what a replay of the log gives); a replayed turn commits once; one winner among concurrent
//! claims; a failed commit leaves nothing behind; a long-lived handle reads what a new one
//! reads; concurrent writers lose nothing; a hand-edited history is refused by every command
//! and named by `doctor`; a lost committed event is refused; a torn last line is cut and never
//! counted; closed work moves to the archive and reads back whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support: a failed expectation is a failed test

use loopx_core::kernel::{
    AddTodo, CommandContext, CompleteTodo, CreateGoal, Kernel, NewEvidence, RegisterAgent,
};
use loopx_core::model::{EvidenceKind, Priority};
use loopx_core::{AgentId, AgentType, ErrorKind, GoalId, IdempotencyKey, TodoId};

use crate::block_on;
use loopx_kernel::StateKernel;
use loopx_kernel::state::CLOSED_KEPT;
use loopx_kernel::store::{Store, encode_state, replay};

/// A store under test: how to make one, open it again, and damage it as the world would.
pub trait Backend: Sync {
    type S: Store + 'static;
    /// A new project with no goals.
    fn fresh(&self) -> Self::S;
    /// The same project opened again, as another process opens it.
    fn reopen(&self, store: &Self::S) -> Self::S;
    /// Changes bytes of `goal`'s log with `edit`, as a hand edit or a torn write would.
    fn edit_log(&self, store: &Self::S, goal: &GoalId, edit: &dyn Fn(&mut Vec<u8>));
}

/// One `#[test]` per check, in the module `$name`, for the backend `$backend` gives (an
/// expression of type `Option<B>`, `B` implementing [`Backend`]; `None` skips the check, which
/// the backend must say out loud).
#[macro_export]
macro_rules! store_conformance {
    ($name:ident, $backend:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn commits_are_in_the_log_and_replay_to_the_state() {
                if let Some(b) = $backend {
                    $crate::store_suite::commits(&b);
                }
            }
            #[test]
            fn a_replayed_turn_commits_once() {
                if let Some(b) = $backend {
                    $crate::store_suite::replayed_turn(&b);
                }
            }
            #[test]
            fn one_claim_wins() {
                if let Some(b) = $backend {
                    $crate::store_suite::claim_race(&b);
                }
            }
            #[test]
            fn a_failed_commit_leaves_the_state_the_log_says() {
                if let Some(b) = $backend {
                    $crate::store_suite::failed_commit(&b);
                }
            }
            #[test]
            fn a_long_lived_handle_reads_what_a_new_one_reads() {
                if let Some(b) = $backend {
                    $crate::store_suite::long_lived(&b);
                }
            }
            #[test]
            fn concurrent_writers_lose_nothing() {
                if let Some(b) = $backend {
                    $crate::store_suite::writers(&b);
                }
            }
            #[test]
            fn a_hand_edited_history_is_refused_and_named() {
                if let Some(b) = $backend {
                    $crate::store_suite::tampered(&b);
                }
            }
            #[test]
            fn a_lost_event_is_refused() {
                if let Some(b) = $backend {
                    $crate::store_suite::lost(&b);
                }
            }
            #[test]
            fn a_torn_last_line_is_cut() {
                if let Some(b) = $backend {
                    $crate::store_suite::torn(&b);
                }
            }
            #[test]
            fn closed_work_moves_to_the_archive_and_reads_back() {
                if let Some(b) = $backend {
                    $crate::store_suite::archive(&b);
                }
            }
        }
    };
}

fn goal() -> GoalId {
    GoalId::new("main").unwrap()
}

fn agent(name: &str) -> CommandContext {
    CommandContext { agent: Some(AgentId::new(name).unwrap()), ..Default::default() }
}

fn todo(text: &str) -> AddTodo {
    AddTodo::agent(text, Priority::P1)
}

fn done(t: TodoId) -> CompleteTodo {
    CompleteTodo {
        todo: t,
        evidence: Some(NewEvidence {
            kind: EvidenceKind::Test,
            summary: format!("tests pass for {t}"),
            command: None,
            exit_code: Some(0),
            link: None,
        }),
        no_follow_up: false,
        note: None,
        next_todo: None,
    }
}

/// A project with goal `main` and agents `agents`.
fn project<B: Backend>(b: &B, agents: &[&str]) -> StateKernel<B::S> {
    let k = StateKernel::over(b.fresh());
    block_on(k.create_goal(CreateGoal {
        id: goal(),
        objective: "conform".into(),
        title: None,
        make_default: true,
    }))
    .unwrap();
    for a in agents {
        let req =
            RegisterAgent { id: AgentId::new(a).unwrap(), agent_type: AgentType::other(), require_new: true };
        block_on(k.register_agent(&CommandContext::default(), req)).unwrap();
    }
    k
}

/// The log verifies, and replaying it gives the state a read returns, byte for byte.
fn assert_consistent<S: Store>(store: &S) {
    let scan = store.scan(&goal()).unwrap();
    assert_eq!(scan.torn_bytes, 0);
    let (replayed, archive) = replay(&goal(), &scan).unwrap();
    let read = store.read(&goal()).unwrap();
    assert_eq!(read.seq, scan.lines.len() as u64);
    assert_eq!(
        encode_state(&read).unwrap(),
        encode_state(&replayed).unwrap(),
        "the state is not the log's replay"
    );
    let archived: Vec<String> = store
        .archive(&goal(), &read.archive)
        .unwrap()
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
    assert_eq!(archived, archive, "the archive is not the log's replay");
}

/// Each commit is the next event, another process sees it, the state is the log's replay, and
/// `doctor` (and a repair) find it healthy.
pub fn commits<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    let mut seqs = Vec::new();
    for text in ["one", "two", "three"] {
        seqs.push(block_on(k.add_todo(&CommandContext::default(), todo(text))).unwrap().seq);
    }
    let t1 = TodoId::from_number(1);
    seqs.push(block_on(k.claim_todo(&agent("a"), t1)).unwrap().seq);
    seqs.push(block_on(k.complete_todo(&agent("a"), done(t1))).unwrap().seq);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "each commit is the next event: {seqs:?}");
    // Another process sees every acknowledged commit.
    let other = b.reopen(k.store());
    let state = other.read(&goal()).unwrap();
    assert_eq!(state.seq, *seqs.last().unwrap());
    assert_eq!(state.todos.len(), 3);
    assert!(state.todo(t1).unwrap().status.is_closed());
    let scan = other.scan(&goal()).unwrap();
    for s in &seqs {
        assert_eq!(scan.lines[usize::try_from(*s - 1).unwrap()].seq, *s);
    }
    // Streamed, the log is the same lines in the same order, and a reader may stop early.
    let mut streamed = Vec::new();
    other
        .each_line(&goal(), &mut |l| {
            streamed.push(l);
            Ok(true)
        })
        .unwrap();
    assert_eq!(streamed, scan.lines);
    let mut first = 0;
    other
        .each_line(&goal(), &mut |_| {
            first += 1;
            Ok(first < 2)
        })
        .unwrap();
    assert_eq!(first, 2);
    assert_consistent(&other);
    let k = StateKernel::over(other);
    let report = block_on(k.doctor(None)).unwrap();
    assert!(report.healthy, "{report:?}");
    // A repair of a healthy store keeps it so, and says what it did.
    let repaired = block_on(k.repair(None)).unwrap();
    assert!(repaired.healthy && repaired.project[0].name == "repair", "{repaired:?}");
    assert_consistent(k.store());
}

/// A transaction that fails before it commits, or part way through its commit (the state
/// already changed in place, nothing written), leaves the store reading what its log says, on
/// the same handle; the next commit is the next event.
pub fn failed_commit<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    let before = block_on(k.add_todo(&CommandContext::default(), todo("one"))).unwrap().seq;
    let refused = || loopx_core::Error::refused("not this time");
    let store = k.store();
    assert!(store.transact(&goal(), &mut |_| Err(refused())).is_err());
    let failed = store.transact(&goal(), &mut |txn| {
        let event = loopx_core::event::Event::GoalCompleted { note: None };
        txn.commit("user", event, None, false, |_| Err::<(), _>(refused())).map(|_| ())
    });
    assert!(failed.is_err());
    let state = store.read(&goal()).unwrap();
    assert_eq!(state.seq, before, "a failed commit left an event behind");
    assert_eq!(state.goal.status, loopx_core::model::GoalStatus::Active, "a failed commit's change was kept");
    assert_consistent(store);
    let next = block_on(k.add_todo(&CommandContext::default(), todo("two"))).unwrap().seq;
    assert_eq!(next, before + 1);
    assert_consistent(store);
}

/// One handle used as a long-lived process uses it (a store may keep the state a transaction
/// leaves for the next): after each of its commits (todos added, claimed, closed, archived),
/// one that commits nothing, and another handle's commit, it reads what a handle opened now
/// reads, byte for byte and field for field; a hand edit of the history is refused on it as on
/// a new handle.
pub fn long_lived<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    let store = k.store();
    let same = |why: &str| {
        let now = b.reopen(store).read(&goal()).unwrap();
        let read = store.read(&goal()).unwrap();
        assert_eq!(encode_state(&read).unwrap(), encode_state(&now).unwrap(), "{why}");
        assert!(read == now, "{why}: the states differ outside their stored form");
    };
    let n = CLOSED_KEPT + 4;
    for i in 1..=n {
        block_on(k.add_todo(&CommandContext::default(), todo(&format!("todo {i}")))).unwrap();
        same("after a todo was added");
    }
    for i in 1..=n {
        let t = TodoId::from_number(i as u64);
        // Two commits with no read between: the second starts from what the first left.
        block_on(k.claim_todo(&agent("a"), t)).unwrap();
        block_on(k.complete_todo(&agent("a"), done(t))).unwrap();
        same("after a todo was claimed and closed");
    }
    assert!(store.read(&goal()).unwrap().archive.todos > 0, "todos were archived");
    store.transact(&goal(), &mut |_| Ok(())).unwrap();
    same("after a transaction that committed nothing");
    let other = StateKernel::over(b.reopen(store));
    let theirs = block_on(other.add_todo(&CommandContext::default(), todo("from elsewhere"))).unwrap();
    same("after another handle's commit");
    assert_eq!(store.read(&goal()).unwrap().seq, theirs.seq);
    let ours = block_on(k.add_todo(&CommandContext::default(), todo("and here"))).unwrap();
    assert_eq!(ours.seq, theirs.seq + 1);
    same("after a commit on top of another handle's");
    b.edit_log(store, &goal(), &|log| retime(log, 2));
    for e in [
        store.read(&goal()).map(|_| ()).unwrap_err(),
        block_on(k.add_todo(&CommandContext::default(), todo("refused"))).map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::Integrity, "{e:?}");
    }
}

/// A turn sent twice (from another process) commits once and answers with the same receipt.
pub fn replayed_turn<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    let ctx = CommandContext { key: Some(IdempotencyKey::new("turn-1").unwrap()), ..agent("a") };
    let first = block_on(k.add_todo(&ctx, todo("once"))).unwrap();
    let again = block_on(StateKernel::over(b.reopen(k.store())).add_todo(&ctx, todo("once"))).unwrap();
    assert!(again.replayed && !first.replayed);
    assert_eq!((again.seq, &again.body), (first.seq, &first.body));
    let state = k.store().read(&goal()).unwrap();
    assert_eq!((state.seq, state.todos.len()), (first.seq, 1));
    assert_consistent(k.store());
}

/// Eight claimants on eight handles race for each of ten todos: one winner each time.
pub fn claim_race<B: Backend>(b: &B) {
    let names: Vec<String> = (0..8).map(|i| format!("a{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let k = project(b, &refs);
    for round in 1..=10u64 {
        block_on(k.add_todo(&agent("user"), todo(&format!("race {round}")))).unwrap();
        let t = TodoId::from_number(round);
        let winners: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = names
                .iter()
                .map(|name| {
                    let store = b.reopen(k.store());
                    s.spawn(move || {
                        let k = StateKernel::over(store);
                        match block_on(k.claim_todo(&agent(name), t)) {
                            Ok(r) => {
                                assert!(r.changed);
                                Some(name.clone())
                            }
                            Err(e) => {
                                assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
                                None
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let holder = k.store().read(&goal()).unwrap().todo(t).unwrap().claimed_by.clone();
        assert_eq!(holder.map(|a| a.as_str().to_owned()), winners.first().cloned());
        // The winner finishes, so the next round's todo is free for anyone.
        block_on(k.complete_todo(&agent(&winners[0]), done(t))).unwrap();
    }
    assert_consistent(k.store());
}

/// Eight writers on eight handles add 25 todos each: all 200 are there, in a verified log.
pub fn writers<B: Backend>(b: &B) {
    const THREADS: usize = 8;
    const EACH: usize = 25;
    let k = project(b, &[]);
    let before = k.store().read(&goal()).unwrap().seq;
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let store = b.reopen(k.store());
            s.spawn(move || {
                let k = StateKernel::over(store);
                for i in 0..EACH {
                    block_on(k.add_todo(&CommandContext::default(), todo(&format!("w{w} m{i}")))).unwrap();
                }
            });
        }
    });
    let state = k.store().read(&goal()).unwrap();
    assert_eq!(state.seq, before + (THREADS * EACH) as u64);
    assert_eq!(state.todos.len(), THREADS * EACH);
    for w in 0..THREADS {
        for i in 0..EACH {
            let text = format!("w{w} m{i}");
            assert!(state.todos.iter().any(|t| t.text == text), "{text} was lost");
        }
    }
    assert_consistent(k.store());
}

/// Changes a digit of the milliseconds of event `seq`'s time: the line still parses, and no
/// longer hashes to what the next line's `prev` says.
pub fn retime(log: &mut [u8], seq: usize) {
    let start = log.split(|b| *b == b'\n').take(seq - 1).map(|l| l.len() + 1).sum::<usize>();
    let line = &log[start..];
    let at = line.windows(6).position(|w| w == b"\"at\":\"").unwrap() + 6;
    let digit = &mut log[start + at + 20];
    *digit = if *digit == b'9' { b'0' } else { *digit + 1 };
}

/// A changed byte in an event refuses reads, writes and scans, naming the line; `doctor` names it.
pub fn tampered<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    for text in ["one", "two", "three"] {
        block_on(k.add_todo(&CommandContext::default(), todo(text))).unwrap();
    }
    b.edit_log(k.store(), &goal(), &|log| retime(log, 2));
    let fresh = StateKernel::over(b.reopen(k.store()));
    for e in [
        fresh.store().read(&goal()).map(|_| ()).unwrap_err(),
        block_on(fresh.add_todo(&CommandContext::default(), todo("four"))).map(|_| ()).unwrap_err(),
        fresh.store().scan(&goal()).map(|_| ()).unwrap_err(),
        fresh.store().each_line(&goal(), &mut |_| Ok(true)).unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::Integrity, "{e:?}");
        assert!(e.message.contains("line 3"), "names the first line that does not follow: {}", e.message);
    }
    let report = block_on(fresh.doctor(None)).unwrap();
    assert!(!report.healthy);
    let log = report.goals[0].checks.iter().find(|c| c.name == "event log").unwrap();
    assert!(!log.ok && log.detail.contains("line 3"), "{log:?}");
}

/// The log's last committed line removed: every read and write refuses, saying events are
/// missing, and nothing is rebuilt from the shorter log.
pub fn lost<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    for text in ["one", "two"] {
        block_on(k.add_todo(&CommandContext::default(), todo(text))).unwrap();
    }
    b.edit_log(k.store(), &goal(), &|log| {
        let keep = log[..log.len() - 1].iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        log.truncate(keep);
    });
    let fresh = StateKernel::over(b.reopen(k.store()));
    for e in [
        fresh.store().read(&goal()).map(|_| ()).unwrap_err(),
        block_on(fresh.add_todo(&CommandContext::default(), todo("three"))).map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::Integrity, "{e:?}");
        assert!(e.message.contains("missing"), "{}", e.message);
    }
}

/// Half a line at the end of the log was never an event: the next commit takes its place.
pub fn torn<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    block_on(k.add_todo(&CommandContext::default(), todo("one"))).unwrap();
    let before = k.store().read(&goal()).unwrap().seq;
    b.edit_log(k.store(), &goal(), &|log| log.extend_from_slice(b"{\"seq\":99,\"at\":\"2026-"));
    let fresh = StateKernel::over(b.reopen(k.store()));
    let r = block_on(fresh.add_todo(&CommandContext::default(), todo("two"))).unwrap();
    assert_eq!(r.seq, before + 1, "the torn line was never an event");
    assert_consistent(fresh.store());
    assert!(block_on(fresh.doctor(None)).unwrap().healthy);
}

/// Closed todos past the kept few leave for the archive with their evidence, and read back.
pub fn archive<B: Backend>(b: &B) {
    let k = project(b, &["a"]);
    let n = CLOSED_KEPT + 6;
    for i in 1..=n + 2 {
        block_on(k.add_todo(&CommandContext::default(), todo(&format!("todo {i}")))).unwrap();
    }
    for i in 1..=n {
        let t = TodoId::from_number(i as u64);
        block_on(k.claim_todo(&agent("a"), t)).unwrap();
        block_on(k.complete_todo(&agent("a"), done(t))).unwrap();
    }
    let other = b.reopen(k.store());
    let state = other.read(&goal()).unwrap();
    assert_eq!(state.archive.todos, 6);
    assert_eq!(state.todos.len(), CLOSED_KEPT + 2);
    let archived = other.archive(&goal(), &state.archive).unwrap();
    let ids: Vec<u64> = archived.iter().map(|a| a.todo.id.number()).collect();
    assert_eq!(ids, (1..=6).collect::<Vec<_>>());
    assert!(archived.iter().all(|a| a.evidence.len() == 1));
    assert_consistent(&other);
}
