#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! The decision table (`loopx_kernel::decide`), row by row and against its neighbours, plus
//! metamorphic checks. The table is a pure function of the state and the clock, so these
//! tests build states from events and call it directly.

use loopx_core::agent::{Cadence, HostCatalog, HostType, RuntimeProfile};
use loopx_core::continuation::{Continuation, StopCause};
use loopx_core::decision::{DecisionKind, RunState, SchedulerAction};
use loopx_core::event::Event;
use loopx_core::kernel::{AddTodo, AskGate, CompleteTodo, NewEvidence, QuotaChange};
use loopx_core::model::{EvidenceKind, GateBlocks, GateStatus, Priority, ResumeWhen, Role, TodoClass};
use loopx_core::next::NextStep;
use loopx_core::{AgentType, ErrorKind, GateId, Timestamp, TodoId};
use loopx_kernel::decide::{self, Decision};
use loopx_kernel::rules::{self, Actor};

use crate::support::{Sim, T0, agent, t};

fn check(d: &Decision, decision: DecisionKind, state: RunState) {
    assert_eq!((d.decision, d.state), (decision, state), "{d:#?}");
    assert_eq!(d.should_run(), matches!(decision, DecisionKind::Run | DecisionKind::Replan));
}

// ---- one test per row ------------------------------------------------------------------------

#[test]
fn row_1_stopped_or_zero_compute_pauses_everyone() {
    let mut s = Sim::new().agents(&["a", "b"]);
    s.todo("work", Priority::P1);
    s.stop();
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Stop, RunState::Paused);
    assert_eq!(d.continuation, Continuation::Stop { cause: StopCause::Paused });
    // Row 1 answers before row 2: even an unidentified caller is told to stop.
    check(&s.decide(None), DecisionKind::Stop, RunState::Paused);

    let mut s = Sim::new().agents(&["a"]);
    s.todo("work", Priority::P1);
    s.quota(QuotaChange { compute: Some(0.0), ..Default::default() });
    check(&s.decide(Some("a")), DecisionKind::Stop, RunState::Paused);
}

#[test]
fn row_1_a_completed_goal_stops_everyone_done_until_resumed() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("work", Priority::P1);
    // Only finished work is completed: an open todo, then an open gate, refuse it.
    assert_eq!(rules::complete_goal(&s.state, None).unwrap_err().kind, ErrorKind::Refused);
    assert!(!s.state.work_finished());
    s.complete(x, true);
    assert!(s.state.work_finished());
    let g = s.gate(GateBlocks::Agent(agent("b")));
    assert!(!s.state.work_finished(), "a gate is open");
    assert_eq!(rules::complete_goal(&s.state, None).unwrap_err().kind, ErrorKind::Refused);
    s.answer(g, GateStatus::Approved);
    // A budget spent before the completion (a done goal takes no new settings).
    s.quota(QuotaChange { budget_tokens: Some(1), ..Default::default() });
    s.spend("a", x, Some(5));
    let e = rules::complete_goal(&s.state, Some(&"met".to_owned())).unwrap().unwrap();
    s.apply("user", e);
    assert!(!s.state.work_finished(), "done is no longer waiting for the person");
    assert!(rules::complete_goal(&s.state, None).unwrap().is_none(), "completing again is a no-op");
    for who in [Some("a"), Some("b"), None] {
        let d = s.decide(who);
        check(&d, DecisionKind::Stop, RunState::Done);
        assert_eq!(d.continuation, Continuation::Stop { cause: StopCause::Done });
    }
    // Row 1 before row 3: a spent budget on a done goal still reads done.
    check(&s.decide(Some("a")), DecisionKind::Stop, RunState::Done);
    // A done goal takes no new work; resumed, it is finished (row 4) again.
    let add = AddTodo {
        text: "more".into(),
        priority: Priority::P1,
        role: Role::Agent,
        class: TodoClass::Advance,
        scopes: vec![],
        after_gate: None,
        validation: None,
    };
    assert_eq!(rules::add_todo(&s.state, &add).unwrap_err().kind, ErrorKind::Refused);
    s.apply("user", rules::resume_goal(&s.state).unwrap());
    s.quota(QuotaChange { budget_tokens: Some(1000), ..Default::default() });
    check(&s.decide(Some("a")), DecisionKind::Stop, RunState::Terminal);
}

#[test]
fn completing_a_goal_with_open_work_names_the_first_five_open_todos() {
    let mut s = Sim::new().agents(&["a"]);
    for i in 0..5 {
        s.todo(&format!("work {i}"), Priority::P1);
    }
    let e = rules::complete_goal(&s.state, None).unwrap_err();
    assert!(e.message.contains("5 open todos (t1, t2, t3, t4, t5);"), "{}", e.message);
    s.todo("one more", Priority::P1);
    let e = rules::complete_goal(&s.state, None).unwrap_err();
    assert!(e.message.contains("6 open todos (t1, t2, t3, t4, t5, …);"), "{}", e.message);
}

#[test]
fn row_2_identity_is_required() {
    let mut s = Sim::new().agents(&["a", "b"]);
    s.todo("work", Priority::P1);
    assert_eq!(s.decide_err(None), ErrorKind::Identity);
    assert_eq!(s.decide_err(Some("ghost")), ErrorKind::Identity);
    assert_eq!(Sim::new().decide_err(None), ErrorKind::Identity);
    // One registered agent is implied.
    let mut one = Sim::new().agents(&["a"]);
    one.todo("work", Priority::P1);
    check(&one.decide(None), DecisionKind::Run, RunState::Eligible);
    // Row 2 before row 3: an exhausted budget does not answer an unidentified caller.
    s.quota(QuotaChange { budget_tokens: Some(10), ..Default::default() });
    s.spend("a", t(1), Some(10));
    assert_eq!(s.decide_err(None), ErrorKind::Identity);
}

#[test]
fn row_3_an_exhausted_budget_stops() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    s.quota(QuotaChange { budget_tokens: Some(1000), ..Default::default() });
    s.spend("a", x, Some(400));
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
    s.spend("a", x, Some(600));
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Stop, RunState::BudgetExhausted);
    // Row 3 before row 4: a finished goal with a spent budget reports the budget.
    s.complete(x, true);
    check(&s.decide(Some("a")), DecisionKind::Stop, RunState::BudgetExhausted);
    // Money works the same way.
    let mut m = Sim::new().agents(&["a"]);
    let y = m.todo("work", Priority::P1);
    m.quota(QuotaChange { budget_usd: Some(0.0), ..Default::default() });
    m.spend("a", y, None);
    check(&m.decide(Some("a")), DecisionKind::Stop, RunState::BudgetExhausted);
}

#[test]
fn row_4_terminal_needs_every_todo_closed_and_one_no_follow_up() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    let y = s.todo("more", Priority::P2);
    s.complete(x, true);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
    s.complete(y, false);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Stop, RunState::Terminal);
    assert_eq!(d.continuation, Continuation::Stop { cause: StopCause::Terminal });
    // Row 4 needs no open gate: with one, row 5 asks the user instead.
    s.gate(GateBlocks::Goal);
    check(&s.decide(Some("a")), DecisionKind::AskUser, RunState::OperatorGate);
}

#[test]
fn row_4b_the_sender_waits_for_its_handoff_and_the_receiver_takes_the_handed_todo_first() {
    let mut s = Sim::new().agents(&["a", "b", "c"]);
    let x = s.todo("handed", Priority::P2);
    let y = s.todo("urgent", Priority::P0);
    s.claim("a", x);
    s.handoff("a", Some("b"), x, 3600);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Handoff, RunState::Waiting);
    assert!(matches!(&d.continuation, Continuation::Handoff { to_agent: Some(b), .. } if b.as_str() == "b"));
    // Other open work does not pull the sender back while it waits.
    assert_eq!(s.state.pick(Some(&agent("a")), s.now).map(|t| t.id), Some(y));
    // The receiver: the handed todo before a P0 one.
    let d = s.decide(Some("b"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!((d.selected, d.claim_required), (Some(x), true));
    // A third agent never sees it.
    assert_eq!(s.decide(Some("c")).selected, Some(y));
    // The receiver's claim takes it over; the sender's lane is free again.
    s.claim("b", x);
    assert_eq!(s.state.handoffs[0].status, loopx_core::model::HandoffStatus::Accepted);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
    assert_eq!(s.decide(Some("b")).selected, Some(x), "still first for the one who took it over");

    // Expiry: nothing is stranded.
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("handed", Priority::P2);
    s.claim("a", x);
    s.handoff("a", None, x, 60);
    check(&s.decide(Some("a")), DecisionKind::Handoff, RunState::Waiting);
    s.now = Timestamp::from_unix_millis(s.now.unix_millis() + 61_000);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!((d.selected, d.claim_required), (Some(x), true), "open again, for anyone");
}

#[test]
fn accepting_a_handoff_checks_that_nothing_changed_the_todo_since() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("handed", Priority::P2);
    let until = Timestamp::from_unix_millis(T0 + 3_600_000);
    s.apply(
        "a",
        Event::LeaseAcquired {
            todo: x,
            owner: agent("a"),
            expires_at: until,
            key: None,
            write_scope: vec![],
        },
    );
    s.handoff("a", Some("b"), x, 3600);
    let req = loopx_core::kernel::AcceptHandoff { host: AgentType::from_static("codex-app"), handoff: None };
    let b = Actor::Agent(agent("b"));
    assert!(rules::accept_handoff(&s.state, &b, &req, s.now).unwrap().is_some());
    // A lease change behind the handoff's back (as a hand-made event would be).
    s.apply(
        "a",
        Event::LeaseAcquired {
            todo: x,
            owner: agent("a"),
            expires_at: until,
            key: None,
            write_scope: vec![],
        },
    );
    let e = rules::accept_handoff(&s.state, &b, &req, s.now).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
    assert!(e.message.contains("lease version 2 → 3"), "{}", e.message);
}

#[test]
fn row_5_a_goal_or_agent_gate_asks_the_user() {
    let mut s = Sim::new().agents(&["a", "b"]);
    s.todo("work", Priority::P1);
    let g = s.gate(GateBlocks::Goal);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::AskUser, RunState::OperatorGate);
    assert_eq!(d.continuation, Continuation::AskUser { gates: vec![g], fallback: None });
    check(&s.decide(Some("b")), DecisionKind::AskUser, RunState::OperatorGate);
    s.answer(g, GateStatus::Approved);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);

    // Scoped to one agent: only that agent waits.
    s.gate(GateBlocks::Agent(agent("b")));
    check(&s.decide(Some("b")), DecisionKind::AskUser, RunState::OperatorGate);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);

    // Row 5 before row 6: a throttled agent behind a gate is asked about the gate.
    s.quota(QuotaChange { allowed_slots: Some(1), ..Default::default() });
    s.spend("a", t(1), None);
    check(&s.decide(Some("b")), DecisionKind::AskUser, RunState::OperatorGate);
}

#[test]
fn row_5b_a_todo_gate_lets_other_work_run_with_the_question_surfaced() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("risky migration", Priority::P0);
    let y = s.todo("safe refactor", Priority::P2);
    let g = s.gate(GateBlocks::Todos(vec![x]));
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::OperatorGate);
    assert_eq!(d.selected, Some(y), "the gated P0 is skipped for the safe fallback");
    let answer = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None);
    assert!(answer.user_channel.notify);
    assert_eq!(answer.user_channel.questions[0].gate, g);
    assert_eq!(answer.scheduler.reason_code, "fallback_work");
    // When the gate holds all that is runnable, it is row 5 again.
    s.complete(y, false);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::AskUser, RunState::OperatorGate);
    assert_eq!(d.continuation, Continuation::AskUser { gates: vec![g], fallback: None });
    // Approved: the held todo runs. Rejected gates keep their todos held.
    s.answer(g, GateStatus::Approved);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!(d.selected, Some(x));
    // 5b does not bypass quota (row 6).
    let mut q = Sim::new().agents(&["a"]);
    let x = q.todo("gated", Priority::P0);
    let y = q.todo("free", Priority::P2);
    q.gate(GateBlocks::Todos(vec![x]));
    q.quota(QuotaChange { allowed_slots: Some(1), ..Default::default() });
    q.spend("a", y, None);
    check(&q.decide(Some("a")), DecisionKind::Wait, RunState::Throttled);
}

#[test]
fn row_5_after_gate_and_rejection() {
    let mut s = Sim::new().agents(&["a"]);
    let g = s.gate(GateBlocks::Todos(vec![]));
    let req = AddTodo {
        text: "ship it".into(),
        priority: Priority::P1,
        role: Role::Agent,
        class: TodoClass::Advance,
        scopes: vec![],
        after_gate: Some(g),
        validation: None,
    };
    let e = rules::add_todo(&s.state, &req).unwrap();
    s.apply("user", e);
    check(&s.decide(Some("a")), DecisionKind::AskUser, RunState::OperatorGate);
    let mut rejected = s.clone();
    rejected.answer(g, GateStatus::Rejected);
    // Rejected: nothing may run it; the agent must replan.
    check(&rejected.decide(Some("a")), DecisionKind::Replan, RunState::Eligible);
    s.answer(g, GateStatus::Approved);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
}

#[test]
fn row_6_spent_slots_throttle_until_one_frees() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    s.quota(QuotaChange { allowed_slots: Some(2), window_hours: Some(1), ..Default::default() });
    s.spend("a", x, None);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
    let first_spend = s.state.spends[0].at;
    s.spend("a", x, None);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Throttled);
    let frees = Timestamp::from_unix_millis(first_spend.unix_millis() + 3_600_000);
    assert_eq!(d.continuation, Continuation::Wait { until: Some(frees), on: Some("quota".into()) });
    let answer = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None);
    assert_eq!(answer.scheduler.action, SchedulerAction::WaitUntil);
    assert_eq!(answer.quota.next_slot_at, Some(frees));
    // A heartbeat comes back when the slot frees: the whole minutes to it, rounded up.
    let left = frees.unix_millis() - s.now.unix_millis();
    assert!(left > 59 * 60_000, "{left} ms");
    assert_eq!(answer.scheduler.cadence_minutes, Some(60));
    assert_eq!(answer.scheduler.reason_code, "throttled");
    assert_eq!(
        (answer.scheduler.ack, answer.scheduler.fail),
        (
            Some(NextStep::SchedulerAck {
                cadence_minutes: 60,
                rrule: Some("FREQ=MINUTELY;INTERVAL=60".into())
            }),
            Some(NextStep::SchedulerFail)
        )
    );
    // Time passes: the window rolls and a slot frees.
    s.now = Timestamp::from_unix_millis(frees.unix_millis() + 1);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);

    // No slot at all: nothing frees, so the heartbeat stops until the quota changes.
    let mut z = Sim::new().agents(&["a"]);
    z.todo("work", Priority::P1);
    z.quota(QuotaChange { allowed_slots: Some(0), ..Default::default() });
    let d = z.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Throttled);
    assert_eq!(d.reason, "the quota allows 0 slots; none are left");
    let h = decide::answer(&z.state, Some(&agent("a")), &d, by_type(), z.now, None).scheduler;
    assert_eq!(
        (h.action, h.reason_code.as_str(), h.cadence_minutes, h.ack),
        (SchedulerAction::StopUntilResume, "throttled", None, None)
    );
}

#[test]
fn the_quota_window_holds_the_spends_after_its_start_and_voided_ones_free_their_slots() {
    const HOUR: i64 = 3_600_000;
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    s.quota(QuotaChange { allowed_slots: Some(3), window_hours: Some(1), ..Default::default() });
    for _ in 0..3 {
        s.spend("a", x, None);
    }
    let at: Vec<Timestamp> = s.state.spends.iter().map(|p| p.at).collect();
    let after = |t: Timestamp, ms: i64| Timestamp::from_unix_millis(t.unix_millis() + ms);
    assert_eq!(loopx_kernel::quota::used_slots(&s.state, s.now), 3);
    // Fewer slots allowed than already spent: free again when enough spends have left.
    s.quota(QuotaChange { allowed_slots: Some(1), ..Default::default() });
    assert_eq!(loopx_kernel::quota::next_slot_at(&s.state, s.now), Some(after(at[2], HOUR)));
    // A spend made exactly a window ago has left it.
    let edge = after(at[0], HOUR);
    assert_eq!(loopx_kernel::quota::used_slots(&s.state, edge), 2);
    s.quota(QuotaChange { allowed_slots: Some(2), ..Default::default() });
    assert_eq!(loopx_kernel::quota::next_slot_at(&s.state, edge), Some(after(at[1], HOUR)));
    // A voided spend takes no slot and frees none.
    let first = s.state.spends[0].id;
    let void = loopx_core::kernel::VoidSlot { spend: first, reason: Some("the turn crashed".into()) };
    s.apply("user", rules::void_slot(&s.state, &void).unwrap().unwrap());
    assert_eq!(loopx_kernel::quota::used_slots(&s.state, s.now), 2);
    assert_eq!(loopx_kernel::quota::next_slot_at(&s.state, s.now), Some(after(at[1], HOUR)));
    assert!(rules::void_slot(&s.state, &void).unwrap().is_none(), "voiding it again changes nothing");
    let unknown =
        loopx_core::kernel::VoidSlot { spend: loopx_core::ids::SpendId::from_number(99), reason: None };
    assert_eq!(rules::void_slot(&s.state, &unknown).unwrap_err().kind, ErrorKind::NotFound);
}

#[test]
fn work_after_a_todo_runs_once_it_is_done_archived_or_not_and_work_after_a_gate_once_answered() {
    use loopx_kernel::state::CLOSED_KEPT;
    let mut s = Sim::new().agents(&["a"]);
    let first = s.todo("first", Priority::P1);
    let gone = s.todo("replaced", Priority::P1);
    let later = s.todo("after the first", Priority::P1);
    s.defer(later, ResumeWhen::TodoDone(first));
    let after_gone = s.todo("after the replaced one", Priority::P1);
    s.defer(after_gone, ResumeWhen::TodoDone(gone));
    let req = loopx_core::kernel::SupersedeTodo {
        todo: gone,
        by: vec![],
        new_texts: vec!["its replacement".into()],
        note: None,
    };
    s.apply("user", rules::supersede(&s.state, &Actor::User, &req, s.now).unwrap());
    s.complete(first, false);
    assert!(!s.state.is_waiting(s.state.todos.key(later).unwrap(), s.now));
    // Closed todos past the ones kept live move to the archive: both of these.
    for i in 0..CLOSED_KEPT {
        let t = s.todo(&format!("filler {i}"), Priority::P3);
        s.complete(t, false);
    }
    assert!(s.state.todos.key(first).is_none() && s.state.todos.key(gone).is_none(), "both archived");
    assert!(!s.state.is_waiting(s.state.todos.key(later).unwrap(), s.now), "done, though archived");
    assert!(
        s.state.is_waiting(s.state.todos.key(after_gone).unwrap(), s.now),
        "a replaced todo is never done"
    );
    // What a todo may wait for: not itself, not a todo or gate the goal lacks; an archived
    // todo, yes.
    let resume = |s: &Sim, todo: TodoId, when: ResumeWhen| {
        s.deferring(todo, Some(when)).map(|_| ()).map_err(|e| e.kind)
    };
    assert_eq!(resume(&s, later, ResumeWhen::TodoDone(later)), Err(ErrorKind::Usage));
    assert_eq!(resume(&s, later, ResumeWhen::TodoDone(t(999))), Err(ErrorKind::NotFound));
    assert_eq!(resume(&s, later, ResumeWhen::GateAnswered(GateId::from_number(9))), Err(ErrorKind::NotFound));
    assert_eq!(resume(&s, later, ResumeWhen::TodoDone(first)), Ok(()));
    let c = s.state.counts();
    assert_eq!((c.total, c.done, c.superseded), (5 + CLOSED_KEPT, 1 + CLOSED_KEPT, 1), "{c:?}");
    assert_eq!((c.open, c.deferred), (1, 2), "{c:?}");

    // Done while it was deferred: never picked again, whatever its resume time says.
    let mut d = Sim::new().agents(&["a"]);
    let early = d.todo("deferred, then done", Priority::P0);
    let other = d.todo("the rest", Priority::P2);
    let at = Timestamp::from_unix_millis(T0 + 60_000);
    d.defer(early, ResumeWhen::At(at));
    d.complete(early, false);
    d.now = Timestamp::from_unix_millis(at.unix_millis() + 1);
    assert_eq!(d.decide(Some("a")).selected, Some(other));
    // Deferred with nothing to resume on: set aside until a person opens it again.
    let aside = d.todo("set aside", Priority::P0);
    d.apply("user", d.deferring(aside, None).unwrap().unwrap());
    assert_eq!(d.decide(Some("a")).selected, Some(other));

    let mut g = Sim::new().agents(&["a"]);
    let x = g.todo("after the answer", Priority::P1);
    let gate = g.gate(GateBlocks::Todos(vec![]));
    g.defer(x, ResumeWhen::GateAnswered(gate));
    check(&g.decide(Some("a")), DecisionKind::Wait, RunState::Waiting);
    g.answer(gate, GateStatus::Approved);
    let d = g.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!(d.selected, Some(x));
}

#[test]
fn row_7_waiting_work_waits() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("later", Priority::P1);
    let at = Timestamp::from_unix_millis(T0 + 3_600_000);
    s.defer(x, ResumeWhen::At(at));
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Waiting);
    assert_eq!(d.continuation, Continuation::Wait { until: Some(at), on: Some(format!("time:{at}")) });
    let h = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None).scheduler;
    assert_eq!((h.action, h.reason_code.as_str()), (SchedulerAction::WaitUntil, "waiting"));
    // Row 7 before row 9: waiting work is not a reason to replan. Due: it runs.
    s.now = Timestamp::from_unix_millis(at.unix_millis());
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);

    // Waiting on another todo.
    let mut s = Sim::new().agents(&["a", "b"]);
    let first = s.todo("first", Priority::P1);
    let second = s.todo("second", Priority::P1);
    s.claim("b", first);
    s.defer(second, ResumeWhen::TodoDone(first));
    check(&s.decide(Some("a")), DecisionKind::Wait, RunState::Waiting);
    s.complete(first, false);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);

    // The work left is a peer's: wait for it, never replan over it.
    let mut s = Sim::new().agents(&["a", "b"]);
    let done = s.todo("done", Priority::P1);
    s.complete(done, false);
    let last = s.todo("the last one", Priority::P2);
    check(&s.decide(Some("a")), DecisionKind::Run, RunState::Eligible);
    s.claim("b", last);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Waiting);
    assert_eq!(d.continuation, Continuation::Wait { until: None, on: Some(format!("{last} claimed by b")) });
    assert!(!d.should_run(), "a stop driver lets the session stop");
    check(&s.decide(Some("b")), DecisionKind::Run, RunState::Eligible);
    s.complete(last, false);
    check(&s.decide(Some("a")), DecisionKind::Replan, RunState::Eligible);

    // Only a person's todo left.
    let mut s = Sim::new().agents(&["a"]);
    s.todo_with("sign the release", Priority::P1, Role::User, TodoClass::Advance);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Waiting);
    let answer = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None);
    assert!(answer.user_channel.notify);
}

#[test]
fn row_8_selection_order_is_mine_then_priority_then_age() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let low = s.todo("low", Priority::P3);
    let high_old = s.todo("high old", Priority::P1);
    let high_new = s.todo("high new", Priority::P1);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!((d.selected, d.claim_required), (Some(high_old), true));
    // Claimed by someone else: skipped.
    s.claim("b", high_old);
    assert_eq!(s.decide(Some("a")).selected, Some(high_new));
    // Claimed by me: first, whatever its priority.
    s.claim("a", low);
    let d = s.decide(Some("a"));
    assert_eq!((d.selected, d.claim_required), (Some(low), false));
    assert_eq!(d.continuation, Continuation::Run { todo: low, claim_required: false });
    // Blocker-class and user todos are never selected.
    let mut only = Sim::new().agents(&["a"]);
    only.todo_with("a blocker", Priority::P0, Role::Agent, TodoClass::Blocker);
    only.todo_with("a person's", Priority::P0, Role::User, TodoClass::Advance);
    assert_ne!(only.decide(Some("a")).decision, DecisionKind::Run);
}

#[test]
fn row_9_nothing_runnable_and_not_terminal_replans() {
    let s = Sim::new().agents(&["a"]);
    check(&s.decide(Some("a")), DecisionKind::Replan, RunState::Eligible);
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    s.complete(x, false); // active_goal: the frontier decides
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Replan, RunState::Eligible);
    assert!(matches!(d.continuation, Continuation::Replan { .. }));
}

#[test]
fn scheduler_backs_off_over_unchanged_polls_and_resets_on_change() {
    // a's only work waits for b's todo: no known time, so the heartbeat backs off.
    let mut s = Sim::new().agents(&["a", "b"]);
    let first = s.todo("b's part", Priority::P1);
    s.claim("b", first);
    let x = s.todo("a's part", Priority::P1);
    s.defer(x, ResumeWhen::TodoDone(first));
    let poll = |s: &mut Sim| {
        let d = s.decide(Some("a"));
        let record = loopx_core::decision::DecisionRecord {
            agent: agent("a"),
            turn: format!("turn-{}", s.state.seq),
            state: d.state,
            continuation: d.continuation.clone(),
        };
        s.apply("a", Event::DecisionRecorded { record });
        decide::answer(&s.state, Some(&agent("a")), &d, paced(&heartbeat()), s.now, None).scheduler
    };
    let cadences: Vec<Option<u32>> = (0..4).map(|_| poll(&mut s).cadence_minutes).collect();
    assert_eq!(cadences, [Some(3), Some(6), Some(10), Some(10)]);
    let h = poll(&mut s);
    assert_eq!(h.rrule.as_deref(), Some("FREQ=MINUTELY;INTERVAL=10"));
    s.todo("new work", Priority::P2);
    let h = poll(&mut s);
    assert_eq!((h.action, h.cadence_minutes), (SchedulerAction::RunNow, Some(3)));
    // Claude's /loop profile stops after its unchanged-poll limit instead of backing off forever.
    let mut c = Sim::new().agents(&["a"]);
    c.gate(GateBlocks::Goal);
    let hint = |c: &Sim| {
        let d = c.decide(Some("a"));
        decide::answer(&c.state, Some(&agent("a")), &d, paced(&claude_loop()), c.now, None).scheduler
    };
    assert_eq!(hint(&c).action, SchedulerAction::WaitForUser);
    for _ in 0..4 {
        poll(&mut c);
    }
    let h = hint(&c);
    assert_eq!(
        (h.action, h.reason_code.as_str()),
        (SchedulerAction::StopUntilResume, "unchanged_poll_limit")
    );
}

// ---- what a row says, and the conditions inside rows 5b, 7 and 8 -------------------------------

#[test]
fn row_1_says_why_the_goal_stopped() {
    let mut s = Sim::new().agents(&["a"]);
    s.todo("work", Priority::P1);
    s.stop();
    assert_eq!(s.decide(Some("a")).reason, "the goal is stopped: \"lunch\"");
    let mut s = Sim::new().agents(&["a"]);
    s.todo("work", Priority::P1);
    s.apply("user", Event::GoalStopped { reason: None, now: false });
    assert_eq!(s.decide(Some("a")).reason, "the goal is stopped");
    let mut s = Sim::new().agents(&["a"]);
    s.todo("work", Priority::P1);
    s.quota(QuotaChange { compute: Some(0.0), ..Default::default() });
    assert_eq!(s.decide(Some("a")).reason, "compute is 0: the goal is paused for every agent");
}

#[test]
fn row_3_names_the_budget_that_is_spent() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    s.quota(QuotaChange { budget_tokens: Some(1000), ..Default::default() });
    s.spend("a", x, Some(1000));
    assert_eq!(s.decide(Some("a")).reason, "the token budget is spent (1000 of 1000)");
    // Tokens left, money spent: the money budget is the one named.
    let mut m = Sim::new().agents(&["a"]);
    let y = m.todo("work", Priority::P1);
    m.quota(QuotaChange { budget_tokens: Some(1000), budget_usd: Some(0.0), ..Default::default() });
    m.spend("a", y, Some(10));
    let d = m.decide(Some("a"));
    check(&d, DecisionKind::Stop, RunState::BudgetExhausted);
    assert_eq!(d.reason, "the money budget is spent ($0.00 of $0.00)");
}

#[test]
fn row_5b_names_the_gate_in_the_reason_and_leaves_out_work_that_waits() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("risky migration", Priority::P0);
    let y = s.todo("safe refactor", Priority::P2);
    let g = s.gate(GateBlocks::Todos(vec![x]));
    let d = s.decide(Some("a"));
    assert_eq!(d.reason, format!("{y} is the next open todo (P2); {g} waits for a person"));
    // The gated todo waits on a time: the gate holds nothing runnable now, so the run is plain.
    s.defer(x, ResumeWhen::At(Timestamp::from_unix_millis(T0 + 3_600_000)));
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Run, RunState::Eligible);
    assert_eq!(
        (d.selected, d.reason.as_str()),
        (Some(y), format!("{y} is the next open todo (P2)").as_str())
    );
}

#[test]
fn row_7_a_third_agent_waits_for_work_handed_to_another() {
    let mut s = Sim::new().agents(&["a", "b", "c"]);
    let x = s.todo("handed", Priority::P1);
    s.claim("a", x);
    s.handoff("a", Some("b"), x, 3600);
    let h = s.state.handoffs[0].clone();
    let d = s.decide(Some("c"));
    check(&d, DecisionKind::Wait, RunState::Waiting);
    assert_eq!(d.reason, format!("{x} is handed off to b (codex-app) ({}); wait for it", h.id));
    assert_eq!(
        d.continuation,
        Continuation::Wait { until: Some(h.expires_at), on: Some(format!("handoff {}", h.id)) }
    );
    // Closed while the handoff waits (a person completed it): it holds no one up any more;
    // what c waits for is the work b holds.
    let mut closed = s.clone();
    let z = closed.todo("b's part", Priority::P2);
    closed.claim("b", z);
    closed.complete(x, false);
    let d = closed.decide(Some("c"));
    assert_eq!(d.continuation, Continuation::Wait { until: None, on: Some(format!("{z} claimed by b")) });
    // The receiver runs it; once the handoff expires, it is open for anyone, c included.
    check(&s.decide(Some("b")), DecisionKind::Run, RunState::Eligible);
    s.now = Timestamp::from_unix_millis(h.expires_at.unix_millis() + 1);
    let d = s.decide(Some("c"));
    assert_eq!((d.selected, d.claim_required), (Some(x), true));
}

#[test]
fn row_7_only_open_person_work_makes_the_agent_wait_for_a_person() {
    let mut s = Sim::new().agents(&["a"]);
    let built = s.todo("build it", Priority::P1);
    s.complete(built, false);
    let signed = s.todo_with("sign the draft", Priority::P1, Role::User, TodoClass::Advance);
    s.complete(signed, false);
    let publish = s.todo_with("publish the release", Priority::P2, Role::User, TodoClass::Advance);
    let d = s.decide(Some("a"));
    check(&d, DecisionKind::Wait, RunState::Waiting);
    assert_eq!(d.reason, format!("only a person's work is left: {publish} \"publish the release\""));
    assert_eq!(d.continuation, Continuation::Wait { until: None, on: Some(format!("user todo {publish}")) });
    let channel = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None).user_channel;
    assert_eq!((channel.notify, channel.user_todos), (true, 1), "the open person's todo, not the signed one");
}

#[test]
fn row_8_says_whose_todo_it_is() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("first step", Priority::P1);
    let d = s.decide(Some("a"));
    assert_eq!(d.reason, format!("{x} is the next open todo (P1)"));
    let h = decide::answer(&s.state, Some(&agent("a")), &d, by_type(), s.now, None).scheduler;
    assert_eq!((h.action, h.reason_code.as_str()), (SchedulerAction::RunNow, "eligible"));
    s.claim("a", x);
    assert_eq!(s.decide(Some("a")).reason, format!("continue {x}, which you hold"));
    // Completed with a successor: the successor is assigned to the one who completed it.
    let req = CompleteTodo {
        todo: x,
        evidence: Some(NewEvidence {
            kind: EvidenceKind::Test,
            summary: "the first step's test passes".into(),
            command: None,
            exit_code: None,
            link: None,
        }),
        no_follow_up: false,
        note: None,
        next_todo: Some("second step".into()),
    };
    let e = rules::complete(&s.state, &Actor::Agent(agent("a")), &req, None, s.now).unwrap().unwrap();
    s.apply("a", e);
    let next = s.state.todos.last().unwrap().id;
    let d = s.decide(Some("a"));
    assert_eq!((d.selected, d.claim_required), (Some(next), true));
    assert_eq!(d.reason, format!("{next} follows {x}, which you completed; claim it"));
}

#[test]
fn a_check_gates_question_says_when_it_is_next_checked_and_a_persons_does_not() {
    let mut s = Sim::new().agents(&["a"]);
    let until = Timestamp::from_unix_millis(T0 + 3_600_000);
    let req = AskGate {
        question: "after the freeze".into(),
        blocks: GateBlocks::Goal,
        kind: loopx_core::model::GateKind::Timer { until },
    };
    let e = rules::ask_gate(&s.state, &req, s.now).unwrap();
    s.apply("user", e);
    let timer = s.state.gates.last().unwrap().clone();
    let q = decide::open_question(&timer, 200);
    assert_eq!(
        (q.question.as_str(), q.kind.as_deref(), q.next_check_at),
        ("after the freeze", Some("timer"), Some(until))
    );
    let q = decide::open_question(&timer, 6);
    assert_eq!(q.question, "after…", "cut to its length, the cut marked");
    let person = s.gate(GateBlocks::Goal);
    let q = decide::open_question(s.state.gate(person).unwrap(), 200);
    assert_eq!((q.kind, q.next_check_at), (None, None));
}

#[test]
fn the_next_steps_and_the_persons_notice_follow_the_decision() {
    use NextStep::{AcquireLease, AddTodo, Claim, Complete, ListGates, ListTodos, RefreshState, SpendSlot};
    let said = |s: &Sim, who: Option<&str>| {
        let a = who.map(agent);
        let (me, d) = decide::decide(&s.state, a.as_ref(), s.now).unwrap();
        let answer = decide::answer(&s.state, me.as_ref(), &d, by_type(), s.now, None);
        (answer.next, answer.user_channel.notify)
    };
    let turn = |t: TodoId| [Complete { todo: t }, RefreshState { todo: t }, SpendSlot { todo: t }];

    // Row 8: claim, then the turn; held already, the turn alone. No one is told anything.
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("mine", Priority::P1);
    let y = s.todo("free", Priority::P2);
    s.todo_with("a person's", Priority::P3, Role::User, TodoClass::Advance);
    let claim_then = |t| [vec![Claim { todo: t }], turn(t).to_vec()].concat();
    assert_eq!(said(&s, Some("a")), (claim_then(x), false), "an open person's todo alone tells no one");
    s.claim("a", x);
    assert_eq!(said(&s, Some("a")), (turn(x).to_vec(), false));
    // A hard-lease goal takes a lease instead of a claim, except on a todo handed over.
    s.handoff("a", Some("b"), x, 3600);
    let hard = loopx_core::kernel::SetGoal {
        handoff_mode: Some(loopx_core::model::HandoffMode::HardLease),
        ..Default::default()
    };
    s.apply("user", rules::set_goal(&s.state, &hard).unwrap().unwrap());
    assert_eq!(said(&s, Some("b")).0, claim_then(x), "the claim takes the handoff over");
    let mut c = s.clone();
    c.apply(
        "user",
        Event::AgentRegistered { agent: agent("c"), agent_type: AgentType::from_static("codex-app") },
    );
    let lease_then = [vec![AcquireLease { todo: y, ttl: "45m".into() }], turn(y).to_vec()].concat();
    assert_eq!(said(&c, Some("c")).0, lease_then);

    // Row 9, row 5, a wait on time, a wait for the quota, the ends.
    let mut s = Sim::new().agents(&["a"]);
    assert_eq!(said(&s, Some("a")), (vec![AddTodo, ListTodos], false));
    let x = s.todo("later", Priority::P1);
    s.defer(x, ResumeWhen::At(Timestamp::from_unix_millis(T0 + 3_600_000)));
    assert_eq!(said(&s, Some("a")), (vec![NextStep::ShouldRun], false), "a wait on time tells no one");
    s.gate(GateBlocks::Goal);
    assert_eq!(said(&s, Some("a")), (vec![ListGates, NextStep::ShouldRun], true));
    let mut q = Sim::new().agents(&["a"]);
    q.todo("work", Priority::P1);
    q.quota(QuotaChange { allowed_slots: Some(0), ..Default::default() });
    assert_eq!(said(&q, Some("a")), (vec![NextStep::ShouldRun], false), "a throttled agent tells no one");
    let mut p = q.clone();
    p.stop();
    assert_eq!(said(&p, Some("a")).0, [NextStep::ResumeGoal]);
    assert_eq!(said(&p, None).0, [NextStep::ResumeGoal], "an unidentified caller is told too");
    q.quota(QuotaChange { compute: Some(0.0), ..Default::default() });
    assert_eq!(said(&q, Some("a")).0, [NextStep::RestoreCompute]);
    let mut t = Sim::new().agents(&["a"]);
    let last = t.todo("last", Priority::P1);
    t.complete(last, true);
    assert_eq!(said(&t, Some("a")).0, [NextStep::Status], "terminal");
    t.apply("user", rules::complete_goal(&t.state, None).unwrap().unwrap());
    assert_eq!(said(&t, Some("a")).0, [NextStep::Status], "done");
}

// ---- metamorphic checks ----------------------------------------------------------------------

/// Goals in many situations, for agent `a` (with `b` also registered).
fn scenarios() -> Vec<(&'static str, Sim)> {
    let base = || Sim::new().agents(&["a", "b"]);
    let mut out = Vec::new();
    out.push(("empty", base()));
    let mut s = base();
    s.todo("one", Priority::P1);
    s.todo("two", Priority::P0);
    out.push(("two open", s.clone()));
    s.claim("a", t(1));
    out.push(("one claimed by a", s.clone()));
    s.claim("b", t(2));
    out.push(("both claimed", s.clone()));
    let mut g = base();
    let x = g.todo("gated", Priority::P0);
    g.todo("free", Priority::P1);
    g.gate(GateBlocks::Todos(vec![x]));
    out.push(("todo gate", g));
    let mut w = base();
    let y = w.todo("later", Priority::P1);
    w.defer(y, ResumeWhen::At(Timestamp::from_unix_millis(T0 + 86_400_000)));
    out.push(("waiting", w));
    let mut q = base();
    let z = q.todo("work", Priority::P1);
    q.quota(QuotaChange { allowed_slots: Some(1), ..Default::default() });
    q.spend("a", z, None);
    out.push(("throttled", q));
    let mut d = base();
    let v = d.todo("done", Priority::P1);
    d.complete(v, true);
    out.push(("terminal", d));
    let mut st = base();
    st.todo("work", Priority::P1);
    st.stop();
    out.push(("stopped", st));
    let mut gg = base();
    gg.todo("work", Priority::P1);
    gg.gate(GateBlocks::Goal);
    out.push(("goal gate", gg));
    out
}

#[test]
fn a_gate_scoped_to_b_never_changes_a_decision() {
    for (name, s) in scenarios() {
        let before = s.decide(Some("a"));
        let mut after = s.clone();
        after.gate(GateBlocks::Agent(agent("b")));
        after.now = s.now;
        let d = after.decide(Some("a"));
        assert_eq!(
            (d.decision, d.state, d.selected, &d.continuation),
            (before.decision, before.state, before.selected, &before.continuation),
            "scenario {name}"
        );
    }
}

#[test]
fn unrelated_done_todos_never_change_the_decision() {
    for (name, s) in scenarios() {
        let before = s.decide(Some("a"));
        let mut after = s.clone();
        for i in 0..3 {
            let x = after.todo(&format!("old {i}"), Priority::P0);
            after.complete(x, false);
        }
        after.now = s.now;
        let d = after.decide(Some("a"));
        assert_eq!(
            (d.decision, d.state, d.selected, &d.continuation),
            (before.decision, before.state, before.selected, &before.continuation),
            "scenario {name}"
        );
    }
}

/// A catalog that knows the Codex App (the type of the agents here), as its adapter declares.
static HOSTS: std::sync::LazyLock<HostCatalog> = std::sync::LazyLock::new(|| {
    HostCatalog::new(vec![HostType {
        name: AgentType::from_static("codex-app"),
        aliases: vec![],
        description: "",
        cadence: heartbeat(),
    }])
});

/// Paced as the catalog paces the agent's type.
fn by_type() -> decide::Pacing<'static> {
    decide::Pacing { hosts: &HOSTS, forced: None }
}

fn paced(c: &Cadence) -> decide::Pacing<'_> {
    decide::Pacing { hosts: &HOSTS, forced: Some(c) }
}

/// The Codex App's heartbeat, as its adapter declares it.
fn heartbeat() -> Cadence {
    Cadence {
        profile: RuntimeProfile::from_static("codex_heartbeat"),
        base_minutes: Some(3),
        unchanged_poll_limit: None,
        rrule: true,
    }
}

/// Claude Code's `/loop`, as its adapter declares it.
fn claude_loop() -> Cadence {
    Cadence {
        profile: RuntimeProfile::from_static("claude_loop"),
        base_minutes: Some(3),
        unchanged_poll_limit: Some(3),
        rrule: false,
    }
}
