#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! The kernel's rules for changing work (`loopx_kernel::rules`), called directly on states built
//! event by event: what an update records, what completing needs, who may take a claim over,
//! what a lease allows, which todos a handoff carries and who receives it.

use loopx_core::event::Event;
use loopx_core::kernel::{
    AcceptHandoff, AskGate, BindThread, CompleteTodo, LeaseOp, LeaseRequest, NewEvidence, OfferHandoff,
    QuotaChange, RefreshState, SetGoal, SpendSlot, SupersedeTodo, UpdateTodo,
};
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateCheck, GateKind, GateStatus, HandoffMode, NotifyFormat,
    NotifyPolicy, Priority, PullRef, ResumeWhen, Role, TodoClass,
};
use loopx_core::next::NextStep;
use loopx_core::traits::{EvidenceDraft, TransitionProposal};
use loopx_core::{AgentType, ErrorKind, HandoffId, Result, Timestamp, TodoId};
use loopx_kernel::rules::{self, Actor, MAX_HANDOFF_SECS, MAX_LEASE_SECS};

use crate::support::{Sim, T0, agent, evidence, t};

fn by(who: &str) -> Actor {
    if who == "user" { Actor::User } else { Actor::Agent(agent(who)) }
}

impl Sim {
    fn update(&self, who: &str, req: &UpdateTodo) -> Result<Option<Event>> {
        rules::update(&self.state, &by(who), req, self.now)
    }

    fn completing(
        &self,
        who: &str,
        t: TodoId,
        proof: bool,
        no_follow_up: bool,
        note: bool,
    ) -> Result<Option<Event>> {
        let req = CompleteTodo {
            todo: t,
            evidence: proof.then(evidence),
            no_follow_up,
            note: note.then(|| "nothing more is needed".to_owned()),
            next_todo: None,
        };
        rules::complete(&self.state, &by(who), &req, None, self.now)
    }

    fn leasing(&self, who: &str, t: TodoId, op: LeaseOp, key: Option<&str>) -> Result<Option<Event>> {
        let req = LeaseRequest { todo: t, op, key: key.map(str::to_owned), expected_version: None };
        rules::lease(&self.state, &by(who), &req, self.now)
    }

    fn lease(&mut self, who: &str, t: TodoId, secs: u64, scope: &[&str]) {
        let op =
            LeaseOp::Acquire { ttl_secs: secs, write_scope: scope.iter().map(|s| (*s).to_owned()).collect() };
        let e = self.leasing(who, t, op, None).unwrap().unwrap();
        self.apply(who, e);
    }

    fn hard_lease(&mut self) {
        let req = SetGoal { handoff_mode: Some(HandoffMode::HardLease), ..SetGoal::default() };
        let e = rules::set_goal(&self.state, &req).unwrap().unwrap();
        self.apply("user", e);
    }

    /// Starts `who`'s driver with lease `id`, held for an hour; returns when it expires.
    fn start_driver(&mut self, who: &str, id: &str) -> Timestamp {
        let until = Timestamp::from_unix_millis(self.now.unix_millis() + 3_600_000);
        let lease = loopx_core::drive::DriverLease {
            agent: agent(who),
            id: id.into(),
            host: "claude-code".into(),
            machine: "m".into(),
            pid: 1,
            since: self.now,
            expires_at: until,
            turn: None,
            todo: None,
            turns: 0,
            limited: None,
        };
        self.apply(who, Event::DriverStarted { lease, replaced: None });
        until
    }

    /// How `who`'s turn `turn` on `todo` ended now: exit 0, written back as `run` (none: failed).
    fn turn_end(
        &self,
        who: &str,
        turn: &str,
        todo: Option<TodoId>,
        run: Option<loopx_core::RunId>,
    ) -> loopx_core::drive::TurnEnd {
        loopx_core::drive::TurnEnd {
            agent: agent(who),
            turn: turn.into(),
            todo,
            exit: loopx_core::drive::TurnExit::Exited,
            exit_code: Some(0),
            signal: None,
            started_at: self.now,
            ended_at: self.now,
            run,
            spent_by: None,
            usage: loopx_core::drive::TurnUsage::default(),
            tail: None,
            note: None,
        }
    }

    fn later(&mut self, secs: i64) {
        self.now = Timestamp::from_unix_millis(self.now.unix_millis() + secs * 1000);
    }

    fn offering(
        &self,
        who: &str,
        host: &'static str,
        to: Option<&str>,
        todos: &[TodoId],
        ttl_secs: u64,
    ) -> Result<Event> {
        let req = OfferHandoff {
            to_host: AgentType::from_static(host),
            to_agent: to.map(agent),
            todos: todos.to_vec(),
            note: None,
            ttl_secs,
        };
        rules::offer_handoff(&self.state, &by(who), &req, self.now)
    }

    /// A turn of `who` on `t` written back, under `turn` if given.
    fn write_back(&mut self, who: &str, t: TodoId, turn: Option<&str>) {
        let req = RefreshState {
            todo: t,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        let e = rules::refresh_state(&self.state, &by(who), turn, &req, self.now).unwrap().unwrap();
        self.apply(who, e);
    }

    fn spending(&self, who: &str, t: TodoId, turn: Option<&str>, usd: Option<f64>) -> Result<Event> {
        let req = SpendSlot { todo: t, slots: 1, tokens: None, usd, dry_run: false };
        rules::spend_slot(&self.state, &by(who), turn, &req, self.now)
    }
}

fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    r.unwrap_err().kind
}

fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().message
}

/// A goal with agents a, b and c and todo t1 claimed by a.
fn claimed() -> (Sim, TodoId) {
    let mut s = Sim::new().agents(&["a", "b", "c"]);
    let t = s.todo("write the parser", Priority::P1);
    s.claim("a", t);
    (s, t)
}

#[test]
fn an_update_records_only_what_it_changes() {
    let (s, t) = claimed();
    let same_text = UpdateTodo { text: Some("write the parser".into()), ..UpdateTodo::of(t) };
    assert_eq!(s.update("a", &same_text).unwrap(), None, "the text it has: nothing to record");
    let req = UpdateTodo { priority: Some(Priority::P0), ..same_text.clone() };
    let Some(Event::TodoUpdated { text, priority, clear_claim, status, .. }) = s.update("a", &req).unwrap()
    else {
        panic!("an update")
    };
    assert_eq!((text, priority, clear_claim, status), (None, Some(Priority::P0), false, None));
    let req = UpdateTodo {
        text: Some("write the lexer".into()),
        priority: Some(Priority::P1),
        ..UpdateTodo::of(t)
    };
    let Some(Event::TodoUpdated { text, priority, .. }) = s.update("a", &req).unwrap() else {
        panic!("an update")
    };
    assert_eq!((text.as_deref(), priority), (Some("write the lexer"), None), "P1 is its priority already");
    let clear = UpdateTodo { clear_claim: true, ..UpdateTodo::of(t) };
    let Some(Event::TodoUpdated { clear_claim, .. }) = s.update("a", &clear).unwrap() else {
        panic!("an update")
    };
    assert!(clear_claim, "clearing the claim alone is an update");
    assert_eq!(kind(s.update("b", &req)), ErrorKind::Conflict, "b cannot update a's todo");
}

#[test]
fn a_takeover_needs_both_its_words_and_changes_nothing_else() {
    let (s, t) = claimed();
    let only_to = UpdateTodo { claimed_by: Some(agent("b")), ..UpdateTodo::of(t) };
    assert!(message(s.update("user", &only_to)).contains("go together"));
    let only_why = UpdateTodo { takeover_reason: Some("a is stuck".into()), ..UpdateTodo::of(t) };
    assert!(message(s.update("user", &only_why)).contains("go together"));
    let base = UpdateTodo::takeover(t, agent("b"), "a is stuck");
    let others = [
        UpdateTodo { text: Some("x".into()), ..base.clone() },
        UpdateTodo { priority: Some(Priority::P0), ..base.clone() },
        UpdateTodo { status: Some(loopx_core::model::TodoStatus::Blocked), ..base.clone() },
        UpdateTodo { resume_when: Some(loopx_core::model::ResumeWhen::TodoDone(t)), ..base.clone() },
        UpdateTodo { clear_claim: true, ..base.clone() },
        UpdateTodo { note: Some("n".into()), ..base.clone() },
        UpdateTodo { evidence: Some(evidence()), ..base.clone() },
    ];
    for req in &others {
        assert!(message(s.update("user", req)).contains("changes only the claim"), "{req:?}");
    }
    let Some(Event::TodoTakenOver { from, to, .. }) = s.update("user", &base).unwrap() else {
        panic!("a takeover")
    };
    assert_eq!((from, to), (agent("a"), agent("b")));
    let to_holder = UpdateTodo::takeover(t, agent("a"), "no change");
    assert_eq!(s.update("user", &to_holder).unwrap(), None, "to the agent that holds it: nothing");
}

#[test]
fn a_claim_moves_by_its_holder_a_person_or_the_receiver_once_the_lease_expired() {
    let (mut s, t) = claimed();
    let to_b = UpdateTodo::takeover(t, agent("b"), "over to b");
    assert!(s.update("a", &to_b).unwrap().is_some(), "the holder hands it over");
    assert_eq!(kind(s.update("b", &to_b)), ErrorKind::Conflict, "no lease: b waits for a");
    assert_eq!(kind(s.update("c", &to_b)), ErrorKind::Conflict, "c moves nobody's claim");
    s.lease("a", t, 60, &[]);
    assert_eq!(kind(s.update("b", &to_b)), ErrorKind::Conflict, "a's lease still runs");
    s.later(120);
    assert!(s.update("b", &to_b).unwrap().is_some(), "a's lease expired: b takes it");
    assert_eq!(kind(s.update("c", &to_b)), ErrorKind::Conflict, "only the receiver, even then");
}

#[test]
fn completing_an_agents_todo_needs_proof_or_a_reasoned_no_follow_up() {
    let (mut s, t) = claimed();
    assert!(message(s.completing("a", t, false, false, false)).contains("needs evidence"));
    assert!(message(s.completing("a", t, false, true, false)).contains("needs evidence"), "no reason given");
    assert!(
        message(s.completing("a", t, false, false, true)).contains("needs evidence"),
        "a note is no proof"
    );
    assert!(s.completing("a", t, false, true, true).unwrap().is_some());
    assert!(s.completing("a", t, true, false, false).unwrap().is_some());
    let mine = s.todo_with("sign the release", Priority::P1, Role::User, TodoClass::Advance);
    assert!(
        s.completing("user", mine, false, false, false).unwrap().is_some(),
        "a person's todo, by the person"
    );
    assert_eq!(kind(s.completing("a", mine, true, false, false)), ErrorKind::Refused, "never by an agent");
}

#[test]
fn in_hard_lease_mode_an_agent_acts_on_its_todo_only_under_its_own_running_lease() {
    let (mut s, t) = claimed();
    s.hard_lease();
    assert!(message(s.completing("a", t, true, false, false)).contains("hard_lease"), "no lease");
    s.lease("a", t, 60, &[]);
    assert!(s.completing("a", t, true, false, false).unwrap().is_some(), "under a's lease");
    assert_eq!(kind(s.completing("b", t, true, false, false)), ErrorKind::Conflict, "b holds nothing");
    assert!(s.completing("user", t, true, false, false).unwrap().is_some(), "a person needs none");
    s.later(120);
    assert!(message(s.completing("a", t, true, false, false)).contains("hard_lease"), "the lease expired");
}

#[test]
fn a_todo_is_superseded_by_another_but_never_by_itself() {
    let (mut s, t) = claimed();
    let other = s.todo("parse with a generator", Priority::P1);
    let req = SupersedeTodo { todo: t, by: vec![other], new_texts: vec![], note: None };
    let Event::TodoSuperseded { by: with, new, .. } =
        rules::supersede(&s.state, &by("a"), &req, s.now).unwrap()
    else {
        panic!("a supersede")
    };
    assert_eq!((with, new.len()), (vec![other], 0));
    let itself = SupersedeTodo { by: vec![t], ..req };
    assert!(message(rules::supersede(&s.state, &by("a"), &itself, s.now)).contains("itself"));
}

#[test]
fn write_scopes_overlap_when_one_may_name_a_path_of_the_other() {
    let cases = [
        ("src/a.rs", "src/a.rs", true),
        ("src/a.rs", "src/b.rs", false),
        ("src", "src/a.rs", false),
        ("src/**", "src/a.rs", true),
        ("src/a.rs", "src/**", true),
        ("src/**", "src/a/**", true),
        ("src/a/**", "src/**", true),
        ("src/**", "docs/**", false),
        ("src/*.rs", "docs/a.rs", false),
    ];
    for (a, b, overlap) in cases {
        assert_eq!(rules::scopes_overlap(a, b), overlap, "{a} and {b}");
    }
}

#[test]
fn a_lease_is_its_holders_for_a_bounded_time_and_never_overrides_a_peer() {
    let (mut s, t) = claimed();
    let acquire = |secs| LeaseOp::Acquire { ttl_secs: secs, write_scope: vec![] };
    assert_eq!(MAX_LEASE_SECS, 604_800, "a lease lasts up to a week");
    assert_eq!(kind(s.leasing("a", t, acquire(0), None)), ErrorKind::Usage);
    assert_eq!(kind(s.leasing("a", t, acquire(MAX_LEASE_SECS + 1), None)), ErrorKind::Usage);
    assert!(s.leasing("a", t, acquire(MAX_LEASE_SECS), None).unwrap().is_some());
    assert!(message(s.leasing("b", t, acquire(60), None)).contains("a lease never overrides a peer"));
    let user_todo = s.todo_with("sign", Priority::P1, Role::User, TodoClass::Advance);
    assert_eq!(kind(s.leasing("a", user_todo, acquire(60), None)), ErrorKind::Refused);
    let versioned = |v| LeaseRequest { todo: t, op: acquire(60), key: None, expected_version: Some(v) };
    assert_eq!(kind(rules::lease(&s.state, &by("a"), &versioned(7), s.now)), ErrorKind::Conflict);
    assert!(rules::lease(&s.state, &by("a"), &versioned(0), s.now).unwrap().is_some());

    let e = s.leasing("a", t, acquire(60), Some("k1")).unwrap().unwrap();
    s.apply("a", e);
    assert_eq!(
        s.leasing("a", t, acquire(60), Some("k1")).unwrap(),
        None,
        "taken again with its key: nothing"
    );
    assert!(message(s.leasing("a", t, acquire(60), Some("k2"))).contains("you, under another key"));
    assert!(message(s.leasing("b", t, acquire(60), Some("k1"))).contains("leased by a"));
    let renew = || LeaseOp::Renew { ttl_secs: 60 };
    assert!(s.leasing("a", t, renew(), Some("k1")).unwrap().is_some());
    assert!(message(s.leasing("a", t, renew(), None)).contains("present it"));
    assert_eq!(kind(s.leasing("b", t, renew(), Some("k1"))), ErrorKind::Conflict);
    let mut released = s.clone();
    let e = rules::release(&released.state, &by("a"), t, released.now).unwrap().unwrap();
    released.apply("a", e);
    assert_eq!(kind(released.leasing("a", t, renew(), Some("k1"))), ErrorKind::Conflict, "a let the todo go");
    let transfer = |to: &str| LeaseOp::Transfer { to: agent(to) };
    assert_eq!(s.leasing("a", t, transfer("a"), Some("k1")).unwrap(), None, "to itself: nothing");
    assert!(matches!(
        s.leasing("a", t, transfer("b"), Some("k1")).unwrap(),
        Some(Event::LeaseTransferred { .. })
    ));
    s.later(120);
    assert!(message(s.leasing("a", t, transfer("b"), Some("k1"))).contains("renew it first"));
}

#[test]
fn a_lease_whose_scope_overlaps_another_running_lease_is_refused() {
    let (mut s, t) = claimed();
    s.lease("a", t, 60, &["src/**"]);
    let u = s.todo("write the docs", Priority::P1);
    s.claim("b", u);
    let acquire = |scope: &str| LeaseOp::Acquire { ttl_secs: 60, write_scope: vec![scope.to_owned()] };
    assert!(message(s.leasing("b", u, acquire("src/lexer.rs"), None)).contains("overlaps src/**"));
    assert!(s.leasing("b", u, acquire("docs/**"), None).unwrap().is_some());
    let mut done = s.clone();
    done.complete(t, false);
    assert!(done.leasing("b", u, acquire("src/lexer.rs"), None).unwrap().is_some(), "a's todo is done");
    s.later(120);
    assert!(s.leasing("b", u, acquire("src/lexer.rs"), None).unwrap().is_some(), "a's lease ran out");
}

#[test]
fn a_handoff_waits_a_bounded_time_and_carries_the_todos_its_sender_holds() {
    let (mut s, t) = claimed();
    let done = s.todo("done already", Priority::P1);
    s.claim("a", done);
    s.complete(done, false);
    let bs = s.todo("b's work", Priority::P1);
    s.claim("b", bs);
    assert_eq!(MAX_HANDOFF_SECS, 604_800, "a handoff waits up to a week");
    assert_eq!(kind(s.offering("a", "codex-app", None, &[], 0)), ErrorKind::Usage);
    assert_eq!(kind(s.offering("a", "codex-app", None, &[], MAX_HANDOFF_SECS + 1)), ErrorKind::Usage);
    s.lease("a", t, 3600, &["src/**"]);
    let Event::HandoffOffered { handoff } =
        s.offering("a", "codex-app", None, &[], MAX_HANDOFF_SECS).unwrap()
    else {
        panic!("an offer")
    };
    let handed: Vec<TodoId> = handoff.todos.iter().map(|h| h.todo).collect();
    assert_eq!(handed, [t], "only the open todos a holds");
    let lease = s.state.todo(t).unwrap().lease.clone().unwrap();
    // Asked for 3,600 s a second before the clock's event moved on, as it does every event.
    let secs = (lease.expires_at.unix_millis() - lease.acquired_at.unix_millis()) / 1000;
    assert_eq!(handoff.todos[0].lease_secs, Some(u64::try_from(secs).unwrap()), "its running lease's length");
    assert_eq!(secs, 3599);
    assert_eq!(handoff.todos[0].write_scope, ["src/**"]);
    s.later(7200);
    let Event::HandoffOffered { handoff } = s.offering("a", "codex-app", None, &[t], 60).unwrap() else {
        panic!("an offer")
    };
    assert_eq!(
        (handoff.todos[0].lease_secs, handoff.todos[0].write_scope.len()),
        (None, 0),
        "the lease expired"
    );
}

#[test]
fn a_handoffs_receiver_is_the_agent_named_for_its_host() {
    let mut s = Sim::new().agents(&["a", "b", "d"]);
    s.apply(
        "user",
        Event::AgentRegistered { agent: agent("c"), agent_type: AgentType::from_static("claude-code") },
    );
    let mut offer = |host: &'static str, to: &str| -> HandoffId {
        let t = s.todo("work", Priority::P1);
        s.claim("a", t);
        let e = s.offering("a", host, Some(to), &[t], 3600).unwrap();
        s.apply("a", e);
        s.state.handoffs.last().unwrap().id
    };
    offer("claude-code", "c");
    let to_b = offer("codex-app", "b");
    let to_d = offer("codex-app", "d");
    let receiver = |host: &'static str, handoff: Option<HandoffId>| {
        rules::receiver(&s.state, &AcceptHandoff { host: AgentType::from_static(host), handoff }, s.now)
            .unwrap()
    };
    assert_eq!(receiver("codex-app", None), agent("b"), "the first named for the host");
    assert_eq!(receiver("codex-app", Some(to_d)), agent("d"));
    assert_eq!(receiver("codex-app", Some(to_b)), agent("b"));
    assert_eq!(receiver("claude-code", None), agent("c"));
}

#[test]
fn a_spend_accounts_one_unspent_writeback_of_the_spender_while_the_goal_runs() {
    let (mut s, t) = claimed();
    let u = s.todo("other work", Priority::P1);
    s.claim("a", u);
    s.write_back("a", u, None);
    assert!(message(s.spending("a", t, None, None)).contains("no unspent writeback"), "u's is not t's");
    s.write_back("a", t, Some("turn-1"));
    assert!(message(s.spending("b", t, None, None)).contains("no unspent writeback"), "a's is not b's");
    assert!(message(s.spending("a", t, Some("turn-2"), None)).contains("no writeback"), "another turn");
    assert!(s.spending("a", t, Some("turn-1"), None).is_ok());
    for usd in [-0.01, f64::INFINITY, f64::NAN] {
        assert_eq!(kind(s.spending("a", t, None, Some(usd))), ErrorKind::Usage, "{usd}");
    }
    for usd in [0.0, 0.42] {
        assert!(s.spending("a", t, None, Some(usd)).is_ok(), "{usd}");
    }
    let mut paused = s.clone();
    paused.quota(QuotaChange { compute: Some(0.0), ..QuotaChange::default() });
    let e = paused.spending("a", t, None, None).unwrap_err();
    assert_eq!(e.next.map(|n| n.steps), Some(vec![NextStep::RestoreCompute]));
    s.stop();
    let e = s.spending("a", t, None, None).unwrap_err();
    assert_eq!(e.next.map(|n| n.steps), Some(vec![NextStep::ResumeGoal]));
}

#[test]
fn a_goal_takes_todos_up_to_its_maximum_of_live_ones() {
    let mut s = Sim::new();
    for _ in 1..rules::MAX_TODOS {
        s.todo("one of many", Priority::P2);
    }
    let req = loopx_core::kernel::AddTodo::agent("the last that fits", Priority::P2);
    let e = rules::add_todo(&s.state, &req).unwrap();
    s.apply("user", e);
    assert_eq!(s.state.todos.len(), rules::MAX_TODOS);
    assert!(message(rules::add_todo(&s.state, &req)).contains("maximum"));
}

#[test]
fn an_unnamed_receiver_is_the_only_other_agent_of_the_host() {
    let mut s = Sim::new().agents(&["a", "b"]);
    s.apply(
        "user",
        Event::AgentRegistered { agent: agent("c"), agent_type: AgentType::from_static("claude-code") },
    );
    let t = s.todo("work", Priority::P1);
    s.claim("a", t);
    let e = s.offering("a", "codex-app", None, &[t], 3600).unwrap();
    s.apply("a", e);
    let accept = AcceptHandoff { host: AgentType::from_static("codex-app"), handoff: None };
    assert_eq!(rules::receiver(&s.state, &accept, s.now).unwrap(), agent("b"), "not its sender, not c");
    s.apply(
        "user",
        Event::AgentRegistered { agent: agent("d"), agent_type: AgentType::from_static("codex-app") },
    );
    assert!(message(rules::receiver(&s.state, &accept, s.now)).contains("say which one"));
}

/// A command's context: the agent it names, inside session `s1` of Claude Code if `in_session`.
fn context(named: Option<&str>, in_session: bool) -> loopx_core::kernel::CommandContext {
    loopx_core::kernel::CommandContext {
        agent: named.map(agent),
        session: in_session.then(|| BindThread { host: "claude-code".into(), thread: "s1".into() }),
        ..Default::default()
    }
}

#[test]
fn inside_a_session_a_command_acts_as_the_sessions_agent_and_never_as_a_person() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let session = BindThread { host: "claude-code".into(), thread: "s1".into() };
    let actor = |st: &Sim, named: Option<&str>| rules::session_agent(&st.state, &context(named, true));
    assert!(message(actor(&s, None)).contains("has not joined"));
    assert_eq!(actor(&s, Some("b")).unwrap(), Some(agent("b")), "not joined: the agent named");
    let e = rules::bind_thread(&s.state, &by("a"), &session).unwrap().unwrap();
    s.apply("a", e);
    assert_eq!(actor(&s, None).unwrap(), Some(agent("a")));
    assert_eq!(actor(&s, Some("a")).unwrap(), Some(agent("a")), "its own agent, named");
    assert!(message(actor(&s, Some("b"))).contains("acts as agent a; it cannot act as b"));
    assert!(message(actor(&s, Some("user"))).contains("cannot act as a person"));
    assert_eq!(
        rules::session_agent(&s.state, &context(Some("b"), false)).unwrap(),
        Some(agent("b")),
        "no session"
    );
}

#[test]
fn the_actor_is_a_person_unless_an_agent_is_named_or_implied_in_the_agent_lane() {
    use rules::Lane;
    let resolve = |st: &Sim, named: Option<&str>, lane: Lane| {
        rules::resolve_actor(&st.state, &context(named, false), lane)
    };
    let one = Sim::new().agents(&["a"]);
    assert_eq!(resolve(&one, None, Lane::Agent).unwrap(), Actor::Agent(agent("a")), "the only agent");
    assert_eq!(resolve(&one, None, Lane::Person).unwrap(), Actor::User);
    assert_eq!(resolve(&one, Some("user"), Lane::Agent).unwrap(), Actor::User, "a person, named");
    assert_eq!(resolve(&one, Some("a"), Lane::Agent).unwrap(), Actor::Agent(agent("a")));
    assert_eq!(kind(resolve(&one, Some("z"), Lane::Agent)), ErrorKind::Identity, "z is not registered");
    assert_eq!(
        resolve(&one, Some("z"), Lane::Joining).unwrap(),
        Actor::Agent(agent("z")),
        "z registers itself"
    );
    assert!(
        message(resolve(&one, Some("a"), Lane::Governance("changing the quota")))
            .contains("agent a cannot make it")
    );
    let two = Sim::new().agents(&["a", "b"]);
    assert!(message(resolve(&two, None, Lane::Agent)).contains("say which one"));
    assert!(
        message(rules::resolve_actor(&two.state, &context(None, true), Lane::Governance("x")))
            .contains("session")
    );
}

#[test]
fn a_goal_setting_records_only_what_it_changes() {
    let mut s = Sim::new();
    let set = |st: &Sim, req: SetGoal| rules::set_goal(&st.state, &req).unwrap();
    assert_eq!(
        set(&s, SetGoal { objective: Some("test".into()), ..SetGoal::default() }),
        None,
        "its objective"
    );
    let Some(Event::GoalUpdated { objective, title, clear_notify, .. }) =
        set(&s, SetGoal { objective: Some("test".into()), title: Some("T".into()), ..SetGoal::default() })
    else {
        panic!("an update")
    };
    assert_eq!((objective, title.as_deref(), clear_notify), (None, Some("T"), false));
    let Some(Event::GoalUpdated { objective, .. }) =
        set(&s, SetGoal { objective: Some("new".into()), ..SetGoal::default() })
    else {
        panic!("an update")
    };
    assert_eq!(objective.as_deref(), Some("new"));
    let scope = || Some(vec!["src/**".to_owned()]);
    let e = set(&s, SetGoal { write_scope: scope(), ..SetGoal::default() }).unwrap();
    s.apply("user", e);
    assert_eq!(set(&s, SetGoal { write_scope: scope(), ..SetGoal::default() }), None, "its write scope");
    let notify = |webhook: Option<&str>, command: Option<&str>| NotifyPolicy {
        webhook: webhook.map(str::to_owned),
        format: NotifyFormat::Generic,
        command: command.map(|c| vec![c.to_owned()]),
        remind_after_secs: None,
    };
    let bad = SetGoal { notify: Some(notify(None, None)), ..SetGoal::default() };
    assert_eq!(kind(rules::set_goal(&s.state, &bad)), ErrorKind::Usage, "neither a webhook nor a command");
    assert!(
        set(&s, SetGoal { notify: Some(notify(None, Some("notify-send"))), ..SetGoal::default() }).is_some()
    );
    let hook = || Some(notify(Some("env:LOOPX_TEST_HOOK"), None));
    let e = set(&s, SetGoal { notify: hook(), ..SetGoal::default() }).unwrap();
    s.apply("user", e);
    assert_eq!(set(&s, SetGoal { notify: hook(), ..SetGoal::default() }), None, "its notify policy");
    let Some(Event::GoalUpdated { clear_notify, .. }) =
        set(&s, SetGoal { title: Some("U".into()), ..SetGoal::default() })
    else {
        panic!("an update")
    };
    assert!(!clear_notify, "not asked to");
    let clear = || SetGoal { clear_notify: true, ..SetGoal::default() };
    let Some(Event::GoalUpdated { clear_notify, .. }) = set(&s, clear()) else { panic!("an update") };
    assert!(clear_notify);
    let e = set(&s, clear()).unwrap();
    s.apply("user", e);
    assert_eq!(set(&s, clear()), None, "no policy to clear");
}

#[test]
fn evidence_names_a_command_that_was_run_and_numbers_after_what_the_same_commit_adds() {
    let (s, t) = claimed();
    let with_command = |argv: Vec<&str>| NewEvidence {
        command: Some(argv.into_iter().map(str::to_owned).collect()),
        ..evidence()
    };
    let make = |e: &NewEvidence, offset| rules::make_evidence(&s.state, &by("a"), t, e, s.now, offset);
    assert_eq!(kind(make(&with_command(vec![]), 0)), ErrorKind::Usage, "no command");
    let e = make(&with_command(vec!["cargo", "test"]), 2).unwrap();
    assert_eq!(e.id.number(), s.state.next_evidence_id().number() + 2);
    assert_eq!((e.author.as_str(), e.command.map(|c| c.join(" "))), ("a", Some("cargo test".to_owned())));
}

#[test]
fn a_notify_policy_names_its_webhook_and_its_command_and_reminds_within_a_month() {
    let policy = |webhook: Option<&str>, command: Option<Vec<&str>>, remind: Option<u64>| SetGoal {
        notify: Some(NotifyPolicy {
            webhook: webhook.map(str::to_owned),
            format: NotifyFormat::Generic,
            command: command.map(|c| c.into_iter().map(str::to_owned).collect()),
            remind_after_secs: remind,
        }),
        ..SetGoal::default()
    };
    let s = Sim::new();
    let ok = |req: SetGoal| rules::set_goal(&s.state, &req).is_ok();
    assert!(ok(policy(Some("env:HOOK"), None, None)), "a webhook alone");
    assert!(ok(policy(None, Some(vec!["notify-send", "loopx"]), None)), "a command alone");
    assert!(!ok(policy(None, Some(vec![]), None)), "an empty command");
    assert!(!ok(policy(None, Some(vec!["notify-send", "a\nb"]), None)), "a word that is not one");
    assert!(ok(policy(None, Some(vec!["x"]), Some(1))));
    assert!(ok(policy(None, Some(vec!["x"]), Some(30 * 86_400))));
    assert!(!ok(policy(None, Some(vec!["x"]), Some(0))));
    assert!(!ok(policy(None, Some(vec!["x"]), Some(30 * 86_400 + 1))));
    let name = "N".repeat(64);
    for good in ["env:LOOPX_HOOK_1", "config:team-alerts.v2", &format!("env:{name}")] {
        assert!(rules::check_webhook(good).is_ok(), "{good}");
    }
    let long = format!("env:{name}N");
    for bad in ["env:", "env:A-B", "config:", "config:a/b", "https://hooks.example.com/x", "HOOK", &long] {
        assert_eq!(kind(rules::check_webhook(bad)), ErrorKind::Usage, "{bad}");
    }
    assert!(message(rules::check_webhook("env:A-B")).contains("invalid variable name"));
    assert!(message(rules::check_webhook("config:a/b")).contains("invalid webhook name"));
}

#[test]
fn an_agent_registers_once_under_one_type_and_never_as_a_reserved_name() {
    let s = Sim::new().agents(&["a"]);
    let register = |id: &str, host: &'static str, require_new: bool| {
        let req = loopx_core::kernel::RegisterAgent {
            id: loopx_core::AgentId::new(id).unwrap(),
            agent_type: AgentType::from_static(host),
            require_new,
        };
        rules::register_agent(&s.state, &req)
    };
    assert!(register("b", "codex-app", true).unwrap().is_some());
    assert_eq!(register("a", "codex-app", false).unwrap(), None, "again, as it is");
    assert_eq!(kind(register("a", "codex-app", true)), ErrorKind::Conflict);
    assert_eq!(kind(register("a", "claude-code", false)), ErrorKind::Refused, "another type");
    assert_eq!(kind(register("user", "codex-app", false)), ErrorKind::Usage);
}

#[test]
fn a_todos_validation_is_a_command_with_a_bounded_timeout() {
    let s = Sim::new();
    let adding = |argv: Vec<&str>, timeout_secs: u64| {
        let req = loopx_core::kernel::AddTodo {
            validation: Some(loopx_core::model::Validation {
                argv: argv.into_iter().map(str::to_owned).collect(),
                timeout_secs,
            }),
            ..loopx_core::kernel::AddTodo::agent("parse", Priority::P1)
        };
        rules::add_todo(&s.state, &req)
    };
    // A validation may run for up to six hours.
    assert_eq!(rules::MAX_VALIDATION_SECS, 21_600);
    assert!(adding(vec!["cargo", "test"], 1).is_ok());
    assert!(adding(vec!["cargo", "test"], rules::MAX_VALIDATION_SECS).is_ok());
    assert_eq!(kind(adding(vec!["cargo", "test"], 0)), ErrorKind::Usage);
    assert_eq!(kind(adding(vec!["cargo", "test"], rules::MAX_VALIDATION_SECS + 1)), ErrorKind::Usage);
    assert_eq!(kind(adding(vec![], 60)), ErrorKind::Usage, "no command");
    assert_eq!(kind(adding(vec!["cargo", "a\nb"], 60)), ErrorKind::Usage, "a word that is not one");
    let after = loopx_core::kernel::AddTodo {
        after_gate: Some(loopx_core::GateId::from_number(9)),
        ..loopx_core::kernel::AddTodo::agent("later", Priority::P1)
    };
    assert_eq!(kind(rules::add_todo(&s.state, &after)), ErrorKind::NotFound, "a gate the goal lacks");
}

#[test]
fn a_session_acts_as_one_agent_and_an_agent_in_one_session_of_a_host() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let session = |thread: &str| BindThread { host: "claude-code".into(), thread: thread.into() };
    let e = rules::bind_thread(&s.state, &by("a"), &session("s1")).unwrap().unwrap();
    s.apply("a", e);
    assert_eq!(rules::bind_thread(&s.state, &by("a"), &session("s1")).unwrap(), None, "bound already");
    assert!(message(rules::bind_thread(&s.state, &by("b"), &session("s1"))).contains("already acts as a"));
    assert!(
        message(rules::bind_thread(&s.state, &by("a"), &session("s2"))).contains("never share an identity")
    );
    let codex = BindThread { host: "codex".into(), thread: "s2".into() };
    assert!(rules::bind_thread(&s.state, &by("a"), &codex).unwrap().is_some(), "a session of another host");
    let process = BindThread::process("claude-code", "1234.5678");
    assert!(rules::bind_thread(&s.state, &by("a"), &process).unwrap().is_some(), "its session's process");

    let unbind = |who: &str, whose: &str, thread: &str| {
        rules::unbind_thread(&s.state, &by(who), &agent(whose), &session(thread))
    };
    assert_eq!(kind(unbind("b", "a", "s1")), ErrorKind::Refused, "another agent's");
    assert_eq!(kind(unbind("user", "b", "s1")), ErrorKind::Conflict, "s1 is a's, not b's");
    assert_eq!(unbind("user", "a", "s9").unwrap(), None, "not bound");
    assert!(unbind("a", "a", "s1").unwrap().is_some());
    assert!(unbind("user", "a", "s1").unwrap().is_some());

    assert!(rules::stop_block(&s.state, &by("a"), &session("s1"), Vec::new()).is_ok());
    assert!(rules::stop_block(&s.state, &by("b"), &session("s7"), Vec::new()).is_ok(), "an unbound session");
    assert_eq!(kind(rules::stop_block(&s.state, &by("b"), &session("s1"), Vec::new())), ErrorKind::Identity);

    assert_eq!(rules::set_armed(&s.state, &by("a"), false).unwrap(), None, "not armed");
    let e = rules::set_armed(&s.state, &by("a"), true).unwrap().unwrap();
    s.apply("a", e);
    assert_eq!(rules::set_armed(&s.state, &by("a"), true).unwrap(), None, "armed already");
    assert!(rules::set_armed(&s.state, &by("a"), false).unwrap().is_some());
}

#[test]
fn a_scheduler_report_paces_within_a_day_and_names_a_plain_rrule() {
    let s = Sim::new().agents(&["a"]);
    let report = |cadence: Option<u32>, rrule: Option<&str>, error: Option<&str>| {
        let req = loopx_core::kernel::SchedulerReport {
            cadence_minutes: cadence,
            rrule: rrule.map(str::to_owned),
            error: error.map(str::to_owned),
        };
        rules::scheduler_report(&s.state, &by("a"), &req)
    };
    assert!(matches!(report(Some(1), None, None), Ok(Event::SchedulerAcked { .. })));
    assert!(report(Some(1440), Some("FREQ=MINUTELY;INTERVAL=3"), None).is_ok());
    assert_eq!(kind(report(Some(0), None, None)), ErrorKind::Usage);
    assert_eq!(kind(report(Some(1441), None, None)), ErrorKind::Usage);
    for bad in ["MINUTELY", "FREQ=minutely", &format!("FREQ={}", "1".repeat(200))] {
        assert_eq!(kind(report(None, Some(bad), None)), ErrorKind::Usage, "{bad}");
    }
    assert!(matches!(report(None, None, Some("no heartbeat")), Ok(Event::SchedulerFailed { .. })));
}

#[test]
fn a_writeback_is_classified_and_a_spent_turn_is_closed() {
    let (mut s, t) = claimed();
    let u = s.todo("other", Priority::P1);
    s.claim("a", u);
    let writing = |st: &Sim, todo: TodoId, turn: Option<&str>, classification: &str| {
        let req = RefreshState {
            todo,
            classification: classification.into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        rules::refresh_state(&st.state, &by("a"), turn, &req, st.now)
    };
    let longest = "a".repeat(32);
    for good in ["implement", "fix-it_2", "a", longest.as_str()] {
        assert!(writing(&s, t, None, good).is_ok(), "{good}");
    }
    for bad in ["", "Implement", "1st", "-fix", "fix it", &"a".repeat(33)] {
        assert_eq!(kind(writing(&s, t, None, bad)), ErrorKind::Usage, "{bad}");
    }
    s.write_back("a", t, Some("turn-1"));
    let e = s.spending("a", t, Some("turn-1"), None).unwrap();
    s.apply("a", e);
    assert_eq!(writing(&s, t, Some("turn-1"), "implement").unwrap(), None, "written back and spent already");
    assert!(message(writing(&s, u, Some("turn-1"), "implement")).contains("already wrote back"));
    assert!(writing(&s, u, Some("turn-2"), "implement").unwrap().is_some(), "a new turn");
    assert!(writing(&s, t, None, "implement").unwrap().is_some(), "no turn named");
}

#[test]
fn a_handoff_is_taken_over_once_by_its_receiver_while_it_waits_or_cancelled_by_its_sender() {
    let (mut s, t) = claimed();
    let e = s.offering("a", "codex-app", Some("b"), &[t], 3600).unwrap();
    s.apply("a", e);
    let h = s.state.handoffs.last().unwrap().id;
    let accept = |st: &Sim, who: &str, host: &'static str, handoff: Option<HandoffId>| {
        let req = AcceptHandoff { host: AgentType::from_static(host), handoff };
        rules::accept_handoff(&st.state, &by(who), &req, st.now)
    };
    let cancel = |st: &Sim, who: &str| {
        let req = loopx_core::kernel::CancelHandoff { handoff: h, reason: None };
        rules::cancel_handoff(&st.state, &by(who), &req, st.now)
    };
    assert_eq!(kind(accept(&s, "b", "claude-code", Some(h))), ErrorKind::Usage, "b acts through codex-app");
    assert!(message(accept(&s, "c", "codex-app", Some(h))).contains("not c"));
    assert_eq!(accept(&s, "c", "codex-app", None).unwrap(), None, "nothing waits for c");
    assert_eq!(kind(cancel(&s, "c")), ErrorKind::Refused, "not c's to cancel");

    let mut expired = s.clone();
    expired.later(7200);
    assert!(message(accept(&expired, "b", "codex-app", Some(h))).contains("expired"));
    assert!(message(cancel(&expired, "user")).contains("expired"));

    let mut cancelled = s.clone();
    let e = cancel(&cancelled, "a").unwrap().unwrap();
    cancelled.apply("a", e);
    assert_eq!(cancel(&cancelled, "user").unwrap(), None, "cancelled already");
    assert!(message(accept(&cancelled, "b", "codex-app", Some(h))).contains("cancelled"));

    let Some(Event::HandoffAccepted { todos, registered, .. }) = accept(&s, "b", "codex-app", None).unwrap()
    else {
        panic!("a take-over")
    };
    assert_eq!((todos, registered), (vec![t], None));
    let e = accept(&s, "b", "codex-app", Some(h)).unwrap().unwrap();
    s.apply("b", e);
    assert_eq!(accept(&s, "b", "codex-app", Some(h)).unwrap(), None, "taken over already");
    assert!(message(accept(&s, "c", "codex-app", Some(h))).contains("taken over by b"));
    assert!(message(cancel(&s, "a")).contains("already taken over"));
}

#[test]
fn a_handoff_whose_todo_changed_since_is_not_taken_over_and_a_new_agent_registers_by_taking_one() {
    let (mut s, t) = claimed();
    let e = s.offering("a", "codex-app", None, &[t], 3600).unwrap();
    s.apply("a", e);
    let req = AcceptHandoff { host: AgentType::from_static("codex-app"), handoff: None };
    let Some(Event::HandoffAccepted { registered, .. }) =
        rules::accept_handoff(&s.state, &by("n"), &req, s.now).unwrap()
    else {
        panic!("a take-over")
    };
    assert_eq!(registered, Some(AgentType::from_static("codex-app")), "n was not registered");
    let mut leased = s.clone();
    leased.apply(
        "user",
        Event::LeaseAcquired {
            todo: t,
            owner: agent("a"),
            expires_at: Timestamp::from_unix_millis(s.now.unix_millis() + 60_000),
            key: None,
            write_scope: vec![],
        },
    );
    assert!(
        message(rules::accept_handoff(&leased.state, &by("b"), &req, leased.now)).contains("changed since")
    );
    let mut claimed = s.clone();
    claimed.apply("c", Event::TodoClaimed { todo: t, agent: agent("c") });
    assert!(
        message(rules::accept_handoff(&claimed.state, &by("b"), &req, claimed.now)).contains("claimed by c")
    );
    leased.apply("a", Event::TodoReleased { todo: t });
    assert!(
        message(rules::accept_handoff(&leased.state, &by("b"), &req, leased.now)).contains("lease version")
    );
}

#[test]
fn a_session_is_named_by_short_printable_words_and_never_by_a_placeholder() {
    let s = Sim::new().agents(&["a"]);
    let bind = |host: &str, thread: &str| {
        rules::bind_thread(&s.state, &by("a"), &BindThread { host: host.into(), thread: thread.into() })
    };
    let longest = "x".repeat(200);
    assert!(bind("claude-code", &longest).is_ok());
    let too_long = "x".repeat(201);
    for (host, thread) in [
        ("claude-code", ""),
        ("", "s1"),
        ("claude-code", "s 1"),
        ("claude code", "s1"),
        ("claude-code", &too_long),
    ] {
        assert_eq!(kind(bind(host, thread)), ErrorKind::Usage, "{host:?} {thread:?}");
    }
    assert!(message(bind("claude-code", "<session-id>")).contains("placeholder"));
}

#[test]
fn a_quota_change_stays_within_its_bounds() {
    let s = Sim::new();
    let ok = |change: QuotaChange| {
        rules::set_goal(&s.state, &SetGoal { quota: change, ..SetGoal::default() }).is_ok()
    };
    let window = |h| QuotaChange { window_hours: Some(h), ..QuotaChange::default() };
    let slot = |m| QuotaChange { slot_minutes: Some(m), ..QuotaChange::default() };
    let usd = |u| QuotaChange { budget_usd: Some(u), ..QuotaChange::default() };
    let compute = |c| QuotaChange { compute: Some(c), ..QuotaChange::default() };
    for (change, fits) in [
        (window(1), true),
        (window(rules::MAX_WINDOW_HOURS), true),
        (window(0), false),
        (window(rules::MAX_WINDOW_HOURS + 1), false),
        (slot(1), true),
        (slot(1440), true),
        (slot(0), false),
        (slot(1441), false),
        (usd(0.0), true),
        (usd(25.0), true),
        (usd(-0.5), false),
        (usd(f64::INFINITY), false),
        (compute(0.0), true),
        (compute(1.0), true),
        (compute(1.5), false),
    ] {
        assert_eq!(ok(change.clone()), fits, "{change:?}");
    }
}

fn ask(s: &Sim, kind: GateKind) -> Result<Event> {
    let req = AskGate { question: "is it green?".into(), blocks: GateBlocks::Goal, kind };
    rules::ask_gate(&s.state, &req, s.now)
}

#[test]
fn a_gate_loopx_checks_runs_a_real_command_for_a_bounded_time_at_a_bounded_pace() {
    let s = Sim::new();
    // A check may run for up to six hours, and is checked at least once a day.
    assert_eq!((rules::MAX_CHECK_SECS, rules::MAX_EVERY_SECS), (21_600, 86_400));
    let command = |argv: Vec<&str>, every_secs, timeout_secs| GateKind::Command {
        argv: argv.into_iter().map(str::to_owned).collect(),
        every_secs,
        timeout_secs,
    };
    for (kind, fits) in [
        (command(vec!["cargo", "test"], 60, 1), true),
        (command(vec!["cargo", "test"], rules::MAX_EVERY_SECS, rules::MAX_CHECK_SECS), true),
        (command(vec![], 60, 60), false),
        (command(vec!["cargo", "a\nb"], 60, 60), false),
        (command(vec!["cargo"], 60, 0), false),
        (command(vec!["cargo"], 60, rules::MAX_CHECK_SECS + 1), false),
        (command(vec!["cargo"], 59, 60), false),
        (command(vec!["cargo"], rules::MAX_EVERY_SECS + 1, 60), false),
    ] {
        assert_eq!(ask(&s, kind.clone()).is_ok(), fits, "{kind:?}");
    }
}

#[test]
fn a_checked_gate_retries_an_unknown_sooner_and_opens_a_rejected_ci_gate_only_for_a_new_head() {
    let mut s = Sim::new();
    let pr = PullRef { owner: "o".into(), repo: "r".into(), number: 7 };
    let e = ask(&s, GateKind::Ci { pr, required: vec![], every_secs: 600 }).unwrap();
    s.apply("user", e);
    let g = s.state.gates.last().unwrap().id;
    let waiting = TransitionProposal::KeepWaiting { reason: "pending".into(), head_sha: None, url: None };
    let next_after = |st: &Sim, unknown: Option<&str>, p: &TransitionProposal| {
        let Some(Event::GateChecked { check, verdict, .. }) =
            rules::gate_checked(&st.state, g, p, unknown, st.now).unwrap()
        else {
            panic!("a check")
        };
        ((check.next_at.unix_millis() - st.now.unix_millis()) / 1000, verdict)
    };
    assert_eq!(next_after(&s, Some("offline"), &waiting), (60, None));
    let e = rules::gate_checked(&s.state, g, &waiting, Some("offline"), s.now).unwrap().unwrap();
    s.apply("loopx", e);
    assert_eq!(next_after(&s, Some("offline"), &waiting), (120, None), "backs off a minute a time");
    assert_eq!(next_after(&s, None, &waiting), (600, None), "seen: its own period");

    let answer = |status, head: &str| TransitionProposal::AnswerGate {
        gate: g,
        status,
        summary: "checks".into(),
        head_sha: Some(head.to_owned()),
        url: None,
    };
    let e =
        rules::gate_checked(&s.state, g, &answer(GateStatus::Rejected, "abc"), None, s.now).unwrap().unwrap();
    s.apply("loopx", e);
    assert_eq!(s.state.gates.last().unwrap().status, GateStatus::Rejected);
    assert_eq!(next_after(&s, None, &answer(GateStatus::Rejected, "abc")).1, None, "the same head");
    assert_eq!(
        next_after(&s, None, &answer(GateStatus::Rejected, "def")).1,
        Some(GateStatus::Open),
        "a new head"
    );
    let no_head = TransitionProposal::KeepWaiting { reason: "no head".into(), head_sha: None, url: None };
    assert_eq!(next_after(&s, None, &no_head).1, None);

    let mut answered = Sim::new();
    let e = ask(
        &answered,
        GateKind::Timer { until: Timestamp::from_unix_millis(answered.now.unix_millis() + 1) },
    )
    .unwrap();
    answered.apply("user", e);
    let t = answered.state.gates.last().unwrap().id;
    answered.answer(t, GateStatus::Approved);
    assert_eq!(
        rules::gate_checked(&answered.state, t, &waiting, None, answered.now).unwrap(),
        None,
        "answered"
    );
}

#[test]
fn evidence_a_check_drafted_numbers_after_what_the_same_commit_adds() {
    let (s, t) = claimed();
    let draft = EvidenceDraft {
        kind: EvidenceKind::Test,
        summary: "cargo test passed".into(),
        command: Some(vec!["cargo".into(), "test".into()]),
        exit_code: Some(0),
        output_digest: None,
    };
    let e = rules::evidence_from_draft(&s.state, "loopx", t, &draft, s.now, 3);
    assert_eq!(e.id.number(), s.state.next_evidence_id().number() + 3);
    assert_eq!((e.author.as_str(), e.exit_code), ("loopx", Some(0)));
}

#[test]
fn a_handed_todo_waits_for_its_receiver_and_a_closed_one_for_nobody() {
    let (mut s, t) = claimed();
    let e = s.offering("a", "codex-app", Some("b"), &[t], 3600).unwrap();
    s.apply("a", e);
    let acquire = || LeaseOp::Acquire { ttl_secs: 60, write_scope: vec![] };
    assert!(message(s.leasing("b", t, acquire(), None)).contains("take the handoff over"));
    assert!(message(s.leasing("c", t, acquire(), None)).contains("handed off to"));
    let (mut done, u) = claimed();
    done.complete(u, false);
    let req = UpdateTodo { priority: Some(Priority::P0), ..UpdateTodo::of(u) };
    assert!(message(done.update("user", &req)).contains("cannot update"));
}

#[test]
fn notes_and_write_scopes_are_checked_before_anything_is_recorded() {
    let (s, t) = claimed();
    let long = "n".repeat(loopx_core::model::MAX_TEXT_LEN + 1);
    let noted = UpdateTodo { note: Some(long), ..UpdateTodo::of(t) };
    assert_eq!(kind(s.update("a", &noted)), ErrorKind::Usage);
    let scoped = |scope: &str| loopx_core::kernel::AddTodo {
        scopes: vec![scope.to_owned()],
        ..loopx_core::kernel::AddTodo::agent("scoped", Priority::P1)
    };
    assert!(rules::add_todo(&s.state, &scoped("src/**")).is_ok());
    assert_eq!(kind(rules::add_todo(&s.state, &scoped("src/[a"))), ErrorKind::Usage, "an unclosed class");
    assert_eq!(kind(rules::add_todo(&s.state, &scoped("src/\u{7}"))), ErrorKind::Usage, "not a word");
}

#[test]
fn a_turn_decided_for_a_todo_writes_back_and_spends_for_that_todo_only() {
    let (mut s, t) = claimed();
    let u = s.todo("other", Priority::P2);
    let d = s.decide(Some("a"));
    let record = loopx_core::decision::DecisionRecord {
        agent: agent("a"),
        turn: "turn-1".into(),
        state: d.state,
        continuation: d.continuation.clone(),
    };
    assert_eq!(record.todo(), Some(t), "the turn runs a's claimed todo");
    s.apply("a", Event::DecisionRecorded { record });
    let req = |todo| RefreshState {
        todo,
        classification: "implement".into(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        next_action: None,
    };
    let other = rules::refresh_state(&s.state, &by("a"), Some("turn-1"), &req(u), s.now);
    assert!(message(other).contains("was decided for"));
    assert!(message(s.spending("a", u, Some("turn-1"), None)).contains("was decided for"));
    assert!(rules::refresh_state(&s.state, &by("a"), Some("turn-1"), &req(t), s.now).unwrap().is_some());
}

/// Every agent's next todo found in one pass (GOAL.md, `status`) is the one `pick` finds for it
/// alone: its own held work first, then the best todo nobody holds that is due and not held by
/// a gate; an agent handed work, or anyone while a handoff waits, is picked for alone.
#[test]
fn each_agents_next_todo_in_one_pass_is_the_one_picked_for_it_alone() {
    let mut s = Sim::new().agents(&["a", "b", "c", "d"]);
    let later = s.todo("later, free", Priority::P2);
    let _second = s.todo("same priority, added after", Priority::P2);
    let waiting = s.todo("waits for an hour", Priority::P1);
    let held_b = s.todo("b's", Priority::P3);
    let held_c = s.todo("c's", Priority::P1);
    let gated = s.todo("held by a gate", Priority::P0);
    s.todo_with("a person's", Priority::P0, Role::User, TodoClass::Advance);
    s.todo_with("a blocker", Priority::P0, Role::Agent, TodoClass::Blocker);
    s.claim("b", held_b);
    s.claim("c", held_c);
    s.gate(GateBlocks::Todos(vec![gated]));
    let in_an_hour = Timestamp::from_unix_millis(s.now.unix_millis() + 3_600_000);
    s.defer(waiting, ResumeWhen::At(in_an_hour));
    let ids = [agent("a"), agent("b"), agent("c"), agent("d"), agent("nobody")];
    let refs: Vec<_> = ids.iter().collect();
    let check = |s: &Sim, now: Timestamp, want: [Option<TodoId>; 5]| {
        let one_by_one: Vec<_> = refs.iter().map(|a| s.state.pick(Some(a), now).map(|t| t.id)).collect();
        let together: Vec<_> = s.state.picks(&refs, now).into_iter().map(|t| t.map(|t| t.id)).collect();
        assert_eq!(together, one_by_one, "at {now}");
        assert_eq!(together, want, "at {now}");
    };
    check(&s, s.now, [Some(later), Some(held_b), Some(held_c), Some(later), Some(later)]);
    check(&s, in_an_hour, [Some(waiting), Some(held_b), Some(held_c), Some(waiting), Some(waiting)]);
    // c hands its todo to a: while the handoff waits, it is reserved for a.
    s.handoff("c", Some("a"), held_c, 3600);
    check(&s, s.now, [Some(held_c), Some(held_b), Some(later), Some(later), Some(later)]);
    // Taken over, it is a's: a picks it for itself.
    let req = AcceptHandoff { host: AgentType::from_static("codex-app"), handoff: None };
    let e = rules::accept_handoff(&s.state, &Actor::Agent(agent("a")), &req, s.now).unwrap().unwrap();
    s.apply("a", e);
    check(&s, s.now, [Some(held_c), Some(held_b), Some(later), Some(later), Some(later)]);
    // What was handed to a comes before a's own work, even of a higher priority.
    let own = s.todo("a's own", Priority::P0);
    s.claim("a", own);
    check(&s, s.now, [Some(held_c), Some(held_b), Some(later), Some(later), Some(later)]);
}

/// The 64 most recently closed todos stay live with their evidence, each piece numbered after
/// the last and listed on its todo; the 65th closed moves the oldest, evidence and all, into
/// the archive, and new todos are numbered on from every todo ever added.
#[test]
fn closed_todos_stay_live_up_to_the_kept_number_then_the_oldest_is_archived_with_its_evidence() {
    use loopx_kernel::state::CLOSED_KEPT;
    let mut s = Sim::new().agents(&["a"]);
    let first = s.todo("first", Priority::P1);
    s.complete(first, true);
    let e1 = loopx_core::EvidenceId::from_number(1);
    assert_eq!(s.state.todo(first).unwrap().evidence, vec![e1]);
    assert_eq!(
        (s.state.evidence_total, s.state.next_evidence_id()),
        (1, loopx_core::EvidenceId::from_number(2))
    );
    for i in 1..CLOSED_KEPT {
        let t = s.todo(&format!("filler {i}"), Priority::P3);
        s.complete(t, false);
    }
    let n = CLOSED_KEPT as u64;
    assert_eq!(s.state.evidence_total, n);
    assert_eq!(s.state.archive.todos, 0, "{CLOSED_KEPT} closed: all live");
    assert!(s.state.todos.key(first).is_some() && s.state.evidence(e1).is_some());
    let one_more = s.todo("one more", Priority::P3);
    s.complete(one_more, false);
    let a = &s.state.archive;
    assert_eq!((a.todos, a.done, a.evidence), (1, 1, 1), "the oldest archived");
    assert_eq!(a.last_evidence.as_ref().map(|e| e.id), Some(e1));
    assert!(a.no_followup, "it was completed with no follow-up");
    assert!(s.state.todos.key(first).is_none() && s.state.is_archived(first));
    assert!(s.state.evidence(e1).is_none(), "its evidence went with it");
    let first_line = s.state.archived_now.clone();
    assert_eq!(first_line.len(), 1);
    assert_eq!(
        (a.bytes, &a.hash),
        (first_line[0].len() as u64 + 1, &loopx_kernel::log::line_hash(first_line[0].as_bytes()))
    );
    // The next one: the head counts both, names the newer evidence, and chains the lines.
    let next = s.todo("and one more", Priority::P3);
    s.complete(next, false);
    let a = &s.state.archive;
    assert_eq!((a.todos, a.done, a.evidence), (2, 2, 2));
    assert_eq!(a.last_evidence.as_ref().map(|e| e.id), Some(loopx_core::EvidenceId::from_number(2)));
    let [line] = s.state.archived_now.as_slice() else { panic!("one line archived") };
    assert_eq!(a.bytes, first_line[0].len() as u64 + 1 + line.len() as u64 + 1);
    assert_eq!(a.hash, loopx_kernel::log::line_hash(line.as_bytes()));
    let second: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(second["prev"], loopx_kernel::log::line_hash(first_line[0].as_bytes()));
    assert!(!s.state.is_archived(one_more));
    assert_eq!(s.state.todo(one_more).unwrap().evidence, vec![loopx_core::EvidenceId::from_number(n + 1)]);
    // Ids go on from every todo ever added, archived ones too.
    assert_eq!((s.state.next_todo_id(0), s.state.next_todo_id(2)), (t(n + 3), t(n + 5)));
}

/// A goal's counts: every live todo by its status, and the archived ones done or superseded.
#[test]
fn counts_count_every_live_todo_by_its_status() {
    let mut s = Sim::new().agents(&["a"]);
    let ids: Vec<TodoId> = (0..8).map(|i| s.todo(&format!("todo {i}"), Priority::P2)).collect();
    for &b in &ids[..2] {
        let req = loopx_core::kernel::UpdateTodo {
            status: Some(loopx_core::model::TodoStatus::Blocked),
            ..loopx_core::kernel::UpdateTodo::of(b)
        };
        s.apply("user", rules::update(&s.state, &Actor::User, &req, s.now).unwrap().unwrap());
    }
    s.defer(ids[2], ResumeWhen::TodoDone(ids[3]));
    s.complete(ids[3], false);
    for &gone in &ids[4..6] {
        let req = loopx_core::kernel::SupersedeTodo {
            todo: gone,
            by: vec![],
            new_texts: vec![format!("instead of {gone}")],
            note: None,
        };
        s.apply("user", rules::supersede(&s.state, &Actor::User, &req, s.now).unwrap());
    }
    let c = s.state.counts();
    assert_eq!((c.total, c.open, c.blocked, c.deferred, c.done, c.superseded), (10, 4, 2, 1, 1, 2), "{c:?}");
}

/// A status set by hand ends the todo's resume condition unless it defers the todo, which
/// keeps the one it had.
#[test]
fn a_status_other_than_deferred_ends_the_resume_condition() {
    let mut s = Sim::new().agents(&["a"]);
    let (first, second) = (s.todo("first", Priority::P1), s.todo("second", Priority::P1));
    s.defer(first, ResumeWhen::TodoDone(second));
    let resume = |s: &Sim| s.state.todo(first).unwrap().resume_when.clone();
    assert_eq!(resume(&s), Some(ResumeWhen::TodoDone(second)));
    let status = |status| UpdateTodo { status: Some(status), ..UpdateTodo::of(first) };
    let e = Event::TodoUpdated {
        todo: first,
        text: None,
        priority: None,
        status: Some(loopx_core::model::TodoStatus::Deferred),
        resume_when: None,
        clear_claim: false,
        note: None,
        evidence: None,
    };
    s.apply("user", e);
    assert_eq!(resume(&s), Some(ResumeWhen::TodoDone(second)), "deferred again: the condition stays");
    let e = s.update("user", &status(loopx_core::model::TodoStatus::Open)).unwrap().unwrap();
    s.apply("user", e);
    assert_eq!(resume(&s), None, "open: nothing to resume on");
}

/// Every change to a todo's lease moves its version on by one: acquired, renewed,
/// transferred, released, taken over with it, and handed off and accepted with one.
#[test]
fn each_change_to_a_lease_moves_its_version_on_by_one() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let todo = s.todo("leased", Priority::P1);
    let version = |s: &Sim| s.state.todo(todo).unwrap().lease_version;
    let mut expect = 0;
    let mut step = |s: &mut Sim, who: &str, e: Event| {
        s.apply(who, e);
        expect += 1;
        assert_eq!(version(s), expect, "after {}", s.state.seq);
    };
    let until = Timestamp::from_unix_millis(s.now.unix_millis() + 3_600_000);
    let acquired =
        Event::LeaseAcquired { todo, owner: agent("a"), expires_at: until, key: None, write_scope: vec![] };
    step(&mut s, "a", acquired.clone());
    step(&mut s, "a", Event::LeaseRenewed { todo, expires_at: until });
    step(&mut s, "a", Event::LeaseTransferred { todo, to: agent("b") });
    step(&mut s, "b", Event::LeaseReleased { todo });
    step(&mut s, "a", acquired);
    let taken = Event::TodoTakenOver { todo, from: agent("a"), to: agent("b"), reason: "stale".into() };
    step(&mut s, "b", taken.clone());
    // Taken over with no lease: nothing to move on.
    s.apply("a", taken);
    assert_eq!(version(&s), expect, "no lease, no change");
    s.lease("b", todo, 600, &[]);
    expect += 1;
    s.handoff("b", Some("a"), todo, 3600);
    expect += 1;
    assert_eq!(version(&s), expect, "a lease given up with the todo");
    let req = AcceptHandoff { host: AgentType::from_static("codex-app"), handoff: None };
    let e = rules::accept_handoff(&s.state, &by("a"), &req, s.now).unwrap().unwrap();
    s.apply("a", e);
    assert_eq!(version(&s), expect + 1, "the lease handed with it, taken");
}

/// A handoff cancelled gives its todos back to the agent that offered them, unless one was
/// closed or someone else holds it meanwhile.
#[test]
fn a_cancelled_handoff_gives_back_only_open_todos_nobody_holds() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let (back, done, held) =
        (s.todo("back", Priority::P1), s.todo("done", Priority::P1), s.todo("held", Priority::P1));
    for t in [back, done, held] {
        s.claim("a", t);
    }
    let req = OfferHandoff {
        to_host: AgentType::from_static("codex-app"),
        to_agent: None,
        todos: vec![back, done, held],
        note: None,
        ttl_secs: 3600,
    };
    let e = rules::offer_handoff(&s.state, &by("a"), &req, s.now).unwrap();
    s.apply("a", e);
    s.complete(done, false);
    s.apply("user", Event::TodoClaimed { todo: held, agent: agent("b") });
    let handoff = s.state.handoffs[0].id;
    s.apply("user", Event::HandoffCancelled { handoff, reason: None });
    let holder = |t| s.state.todo(t).unwrap().claimed_by.clone();
    assert_eq!(holder(back), Some(agent("a")), "given back");
    assert_eq!(holder(done), None, "closed: left as it is");
    assert_eq!(holder(held), Some(agent("b")), "held by another: left to it");
}

/// What the fold keeps of decisions, runs and turn ends is bounded to its number exactly, the
/// oldest leaving first, while the totals count every one.
#[test]
fn the_folds_bounded_records_keep_their_number_and_count_every_one() {
    use loopx_core::continuation::Continuation;
    use loopx_core::decision::{DecisionRecord, RunState};
    use loopx_core::model::RunRecord;
    use loopx_kernel::state::{DECISIONS_KEPT, RUNS_KEPT, TURN_ENDS_KEPT};
    let mut s = Sim::new().agents(&["a"]);
    let todo = s.todo("work", Priority::P1);
    for i in 0..=DECISIONS_KEPT {
        let record = DecisionRecord {
            agent: agent("a"),
            turn: format!("turn-{i}"),
            state: RunState::Eligible,
            continuation: Continuation::Replan { reason: "nothing".into() },
        };
        s.apply("a", Event::DecisionRecorded { record });
    }
    assert_eq!((s.state.decisions.len(), s.state.decision_order.len()), (DECISIONS_KEPT, DECISIONS_KEPT));
    assert!(s.state.decision_order.front().is_some_and(|k| k.ends_with("turn-1")), "the oldest left");

    for _ in 0..=RUNS_KEPT {
        let run = RunRecord {
            id: s.state.next_run_id(),
            agent: agent("a"),
            todo,
            turn: None,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
            at: s.now,
            spent_by: None,
        };
        s.apply("a", Event::RunRecorded { run });
    }
    assert_eq!((s.state.runs.len(), s.state.runs_total), (RUNS_KEPT, RUNS_KEPT as u64 + 1));
    assert_eq!(s.state.runs.front().map(|r| r.id.number()), Some(2), "the oldest left");

    // A driver's turns: one that fails (no writeback) and the ones that follow.
    let until = s.start_driver("a", "d1");
    for i in 0..=TURN_ENDS_KEPT {
        let turn = format!("turn-{i}");
        let renewed = Event::DriverRenewed {
            agent: agent("a"),
            id: "d1".into(),
            expires_at: until,
            turn: Some(turn.clone()),
            todo: Some(todo),
        };
        s.apply("a", renewed);
        let end = s.turn_end("a", &turn, Some(todo), (i > 0).then(|| loopx_core::RunId::from_number(1)));
        s.apply("a", Event::TurnEnded { end, spend: None, brake: None });
    }
    let n = TURN_ENDS_KEPT as u64 + 1;
    assert_eq!(s.state.turn_ends.len(), TURN_ENDS_KEPT);
    assert_eq!((s.state.turns_ended_total, s.state.turns_failed_total), (n, 1));
    assert_eq!(s.state.turn_ends.front().map(|e| e.turn.as_str()), Some("turn-1"), "the oldest left");
    let d = &s.state.drivers[&agent("a")];
    assert_eq!(
        (d.turns, d.turn.as_ref(), d.todo),
        (n, None, None),
        "each turn ended is counted on its driver"
    );
}

/// Spending adds up the tokens and money and numbers the spends; a spend a week older than the
/// newest leaves the list, one exactly a week older stays; voiding takes its tokens and money
/// back, once.
#[test]
fn spends_add_up_leave_after_a_week_and_void_back() {
    use loopx_core::model::Spend;
    use loopx_kernel::state::SPEND_HORIZON_MS;
    let mut s = Sim::new().agents(&["a"]);
    let todo = s.todo("work", Priority::P1);
    let t0 = s.now.unix_millis() + 1000;
    let spend_at = |s: &mut Sim, at: i64, tokens: u64, usd: f64| {
        s.now = Timestamp::from_unix_millis(at - 1000);
        let spend = Spend {
            id: s.state.next_spend_id(),
            agent: agent("a"),
            todo,
            run: loopx_core::RunId::from_number(1),
            turn: None,
            slots: 1,
            tokens: Some(tokens),
            usd: Some(usd),
            at: Timestamp::from_unix_millis(at),
            voided: false,
        };
        s.apply("a", Event::SlotSpent { spend });
    };
    spend_at(&mut s, t0, 100, 1.5);
    spend_at(&mut s, t0 + 1000, 20, 0.25);
    assert_eq!((s.state.tokens_used, s.state.usd_used, s.state.spends_total), (120, 1.75, 2));
    let kept = |s: &Sim| s.state.spends.iter().map(|x| x.id.number()).collect::<Vec<_>>();
    spend_at(&mut s, t0 + SPEND_HORIZON_MS + 500, 3, 0.5);
    assert_eq!(kept(&s), [2, 3], "the spend over a week older left");
    spend_at(&mut s, t0 + 1000 + SPEND_HORIZON_MS, 4, 0.5);
    assert_eq!(kept(&s), [2, 3, 4], "the one exactly a week older stays");
    assert_eq!((s.state.tokens_used, s.state.usd_used, s.state.spends_total), (127, 2.75, 4));
    let void = Event::SlotVoided { spend: loopx_core::SpendId::from_number(3), reason: None };
    s.apply("user", void.clone());
    assert_eq!((s.state.tokens_used, s.state.usd_used), (124, 2.25));
    s.apply("user", void);
    assert_eq!((s.state.tokens_used, s.state.usd_used), (124, 2.25), "voided once");
}

/// Arming a loop lists its agent once; disarming takes it, and only it, off.
#[test]
fn arming_lists_each_agent_once_and_disarming_only_that_one() {
    let mut s = Sim::new().agents(&["a", "b"]);
    for (who, armed) in [("a", true), ("a", true), ("b", true)] {
        s.apply(who, Event::LoopArmed { agent: agent(who), armed });
    }
    assert_eq!(s.state.armed, [agent("a"), agent("b")]);
    s.apply("a", Event::LoopArmed { agent: agent("a"), armed: false });
    assert_eq!(s.state.armed, [agent("b")]);
}

/// The finish notice counts failures for the same finished work and starts again when the
/// number of finished todos changes.
#[test]
fn the_finish_notice_starts_again_when_the_finished_work_changes() {
    let mut s = Sim::new();
    let failed = |todos| Event::FinishNotified {
        todos,
        channel: "command".into(),
        attempt: false,
        error: Some("boom".into()),
    };
    s.apply("user", failed(3));
    s.apply("user", failed(3));
    let n = s.state.finish_notice.clone().unwrap();
    assert_eq!((n.todos, n.notified.failures), (3, 2));
    s.apply("user", failed(4));
    let n = s.state.finish_notice.clone().unwrap();
    assert_eq!((n.todos, n.notified.failures), (4, 1));
}

/// A notice records when it was tried; an attempt (a try whose outcome is not known yet)
/// nothing more, a delivery when it was sent or, for a reminder, reminded, and a failure how
/// many there were and the last error, which a later delivery clears.
#[test]
fn a_notice_records_attempts_deliveries_reminders_and_failures_apart() {
    let mut s = Sim::new().agents(&["a"]);
    let gate = s.gate(GateBlocks::Goal);
    let notified = |s: &mut Sim, reminder: bool, attempt: bool, error: Option<&str>| {
        let e = Event::GateNotified {
            gate,
            channel: "command".into(),
            reminder,
            attempt,
            error: error.map(str::to_owned),
        };
        s.apply("user", e);
        let at = s.now;
        (s.state.gates[0].notified.clone().unwrap(), at)
    };
    let (n, at) = notified(&mut s, false, true, Some("not known yet"));
    assert_eq!(
        (n.tried_at, n.sent_at, n.reminded_at, n.failures, n.last_error),
        (Some(at), None, None, 0, None)
    );
    let (n, at) = notified(&mut s, false, false, Some("boom"));
    assert_eq!(
        (n.tried_at, n.sent_at, n.failures, n.last_error.as_deref()),
        (Some(at), None, 1, Some("boom"))
    );
    let (n, sent) = notified(&mut s, false, false, None);
    assert_eq!((n.sent_at, n.reminded_at, n.failures, n.last_error), (Some(sent), None, 1, None));
    let (n, reminded) = notified(&mut s, true, false, None);
    assert_eq!((n.sent_at, n.reminded_at, n.tried_at), (Some(sent), Some(reminded), Some(reminded)));
}

/// A step folded in for a settlement is folded in as the next line: a decision it records is
/// recorded at the next line's number. A driver's lease is named by its agent and its id, and a
/// turn's end by its agent and its turn, both.
#[test]
fn steps_fold_as_the_next_line_and_drivers_and_turn_ends_are_named_in_full() {
    use loopx_core::continuation::Continuation;
    use loopx_core::decision::{DecisionRecord, RunState};
    let mut s = Sim::new().agents(&["a", "b"]);
    let record = DecisionRecord {
        agent: agent("a"),
        turn: "t1".into(),
        state: RunState::Eligible,
        continuation: Continuation::Replan { reason: "nothing".into() },
    };
    let next = s.state.seq + 1;
    s.state.apply_step(&Event::DecisionRecorded { record }, s.now, "a").unwrap();
    let recorded = s.state.decisions.values().next().unwrap().read().unwrap();
    assert_eq!(recorded.seq, next);

    let until = s.start_driver("a", "d1");
    let renew = |id: &str| Event::DriverRenewed {
        agent: agent("a"),
        id: id.into(),
        expires_at: until,
        turn: None,
        todo: None,
    };
    assert!(s.state.apply_step(&renew("d2"), s.now, "a").is_err(), "another lease of the same agent");
    assert!(s.state.apply_step(&renew("d1"), s.now, "a").is_ok());

    let (a1, b2) = (s.turn_end("a", "t1", None, None), s.turn_end("b", "t2", None, None));
    s.apply("a", Event::TurnEnded { end: a1.clone(), spend: None, brake: None });
    s.apply("b", Event::TurnEnded { end: b2.clone(), spend: None, brake: None });
    assert_eq!(s.state.turn_end(&agent("a"), "t1"), Some(&a1));
    assert_eq!(s.state.turn_end(&agent("b"), "t2"), Some(&b2));
    assert_eq!(s.state.turn_end(&agent("a"), "t2"), None, "b's turn, not a's");
    assert_eq!(s.state.turn_end(&agent("b"), "t1"), None);
}

/// A keyed line's key and receipt are kept, up to their number, the oldest leaving first.
#[test]
fn receipts_keep_their_number_the_oldest_leaving_first() {
    use loopx_kernel::state::RECEIPTS_KEPT;
    let mut s = Sim::new();
    for i in 0..=RECEIPTS_KEPT as u64 {
        let line = loopx_kernel::log::EventLine {
            seq: s.state.seq + 1 + i,
            at: s.now,
            actor: "user".into(),
            event: Event::GoalResumed {},
            turn: Some(format!("key-{i}")),
            receipt: Some(serde_json::json!({ "n": i })),
            root: None,
            prev: String::new(),
            signature: None,
        };
        s.state.keep_receipt(&line).unwrap();
    }
    assert_eq!((s.state.receipts.len(), s.state.receipt_order.len()), (RECEIPTS_KEPT, RECEIPTS_KEPT));
    assert!(!s.state.receipts.contains_key("key-0"), "the oldest left");
    assert_eq!(s.state.receipt_order.front().map(String::as_str), Some("key-1"));
}

/// A provider and a notifier that are there and never reach anything: what the gate rules ask
/// of a runtime is only whether it has them.
struct Unreachable;

#[async_trait::async_trait]
impl loopx_core::traits::Provider for Unreachable {
    fn name(&self) -> &'static str {
        "unreachable"
    }
    async fn observe(
        &self,
        _: &loopx_core::traits::ObservationRequest,
    ) -> Result<loopx_core::traits::Observation> {
        Err(loopx_core::Error::usage("nothing is reachable here"))
    }
}

#[async_trait::async_trait]
impl loopx_core::traits::Notifier for Unreachable {
    async fn notify(&self, _: &NotifyPolicy, _: &loopx_core::traits::Notification) -> Result<String> {
        Err(loopx_core::Error::usage("nobody is reachable here"))
    }
}

fn runtime(processes: bool, pulls: bool, notifier: bool) -> loopx_kernel::gates::GateRuntime {
    let provider =
        || Some(std::sync::Arc::new(Unreachable) as std::sync::Arc<dyn loopx_core::traits::Provider>);
    loopx_kernel::gates::GateRuntime {
        processes: processes.then(provider).flatten(),
        pulls: pulls.then(provider).flatten(),
        notifier: notifier
            .then(|| std::sync::Arc::new(Unreachable) as std::sync::Arc<dyn loopx_core::traits::Notifier>),
        ..loopx_kernel::gates::GateRuntime::default()
    }
}

fn notify_by_command() -> NotifyPolicy {
    NotifyPolicy {
        webhook: None,
        format: NotifyFormat::Generic,
        command: Some(vec!["notify-send".into()]),
        remind_after_secs: None,
    }
}

/// The gates due for a check: those whose time came, not checked in the last minute, of a kind
/// this machine has the means to check (only timers, where it is asked to be quick).
#[test]
fn the_gates_due_are_those_whose_time_came_that_this_machine_can_check() {
    use loopx_core::GateId;
    use loopx_kernel::gates::due;
    let mut s = Sim::new();
    let at = |ms: i64| Timestamp::from_unix_millis(T0 + ms);
    let pr = PullRef::parse("o/r#1").unwrap();
    for kind in [
        GateKind::Person,
        GateKind::Timer { until: at(60_000) },
        GateKind::Timer { until: at(3_600_000) },
        GateKind::Command { argv: vec!["make".into()], every_secs: 60, timeout_secs: 60 },
        GateKind::Ci { pr: pr.clone(), required: vec![], every_secs: 600 },
        GateKind::PrMerged { pr, every_secs: 600 },
    ] {
        let e = ask(&s, kind).unwrap();
        s.apply("a", e);
    }
    let g = GateId::from_number;
    let now = at(60_000);
    let shown = format!("{:?}", runtime(true, false, true));
    assert!(shown.contains(r#"processes: Some("unreachable"), notifier: true"#), "{shown}");
    assert_eq!(due(&s.state, at(59_999), &runtime(false, false, false), false), []);
    assert_eq!(due(&s.state, now, &runtime(false, false, false), false), [g(2)]);
    assert_eq!(due(&s.state, now, &runtime(true, false, false), false), [g(2), g(4)]);
    assert_eq!(due(&s.state, now, &runtime(false, true, false), false), [g(2), g(5), g(6)]);
    assert_eq!(due(&s.state, now, &runtime(true, true, false), true), [g(2)], "timers only");
    assert_eq!(due(&s.state, now, &runtime(true, true, false), false), [g(2), g(4), g(5), g(6)]);
    assert_eq!(due(&s.state, at(3_600_000), &runtime(false, false, false), false), [g(2), g(3)]);
    // Checked just now and due again at once (a check that could not see the world): not
    // before a minute has passed.
    let check = GateCheck {
        at: now,
        summary: "could not run".into(),
        head_sha: None,
        url: None,
        next_at: now,
        unknown: 1,
    };
    s.apply("loopx", Event::GateChecked { gate: g(4), check, verdict: None });
    assert_eq!(due(&s.state, now, &runtime(true, false, false), false), [g(2)]);
    assert_eq!(due(&s.state, at(119_999), &runtime(true, false, false), false), [g(2)]);
    assert_eq!(due(&s.state, at(120_000), &runtime(true, false, false), false), [g(2), g(4)]);
}

/// A person is told of their open gates, and that the goal's work is finished (once each time
/// it finishes), only when the goal says how and this machine can.
#[test]
fn a_person_is_told_only_how_the_goal_says_once_each_time_its_work_finishes() {
    use loopx_kernel::gates::{finish_notice_due, notices_due};
    let mut s = Sim::new();
    let t1 = s.todo("parse", Priority::P1);
    let (told, silent) = (runtime(false, false, true), runtime(false, false, false));
    assert!(!finish_notice_due(&s.state, s.now, &told), "no policy");
    let e = rules::set_goal(&s.state, &SetGoal { notify: Some(notify_by_command()), ..SetGoal::default() });
    s.apply("user", e.unwrap().unwrap());
    assert!(!finish_notice_due(&s.state, s.now, &told), "work left");
    let e = ask(&s, GateKind::Person).unwrap();
    s.apply("a", e);
    let gate = loopx_core::GateId::from_number(1);
    assert_eq!(notices_due(&s.state, s.now, &told), [(gate, false)]);
    assert_eq!(notices_due(&s.state, s.now, &silent), []);
    let e = rules::answer_gate(
        &s.state,
        &by("user"),
        &loopx_core::kernel::AnswerGate { gate, status: GateStatus::Approved, note: None },
    );
    s.apply("user", e.unwrap());
    assert_eq!(notices_due(&s.state, s.now, &told), []);

    s.complete(t1, true);
    assert!(finish_notice_due(&s.state, s.now, &told));
    assert!(!finish_notice_due(&s.state, s.now, &silent));
    let told_once =
        |todos| Event::FinishNotified { todos, channel: "command".into(), attempt: false, error: None };
    s.apply("loopx", told_once(1));
    assert!(!finish_notice_due(&s.state, s.now, &told), "told of this finish");
    // Work added and finished again is a new finish.
    let t2 = s.todo("and the tests", Priority::P1);
    s.complete(t2, true);
    assert!(finish_notice_due(&s.state, s.now, &told));
    s.apply("loopx", told_once(2));
    assert!(!finish_notice_due(&s.state, s.now, &told));
}

/// A done goal changes only through `goal resume`: a stop (which would drop the person's
/// completion), a question, new settings, evidence, a handoff and new todos are refused, each
/// saying the goal is done and naming `loopx goal resume`; resumed, each is taken again.
#[test]
fn a_done_goal_changes_only_through_goal_resume() {
    let mut s = Sim::new().agents(&["a", "b"]);
    let x = s.todo("work", Priority::P1);
    s.claim("a", x);
    s.complete(x, true);
    s.apply("user", rules::complete_goal(&s.state, None).unwrap().unwrap());
    let ask = AskGate { question: "may I?".into(), blocks: GateBlocks::Goal, kind: GateKind::Person };
    let set = SetGoal { objective: Some("another objective".into()), ..SetGoal::default() };
    let more = NewEvidence {
        kind: EvidenceKind::Note,
        summary: "one more thing".into(),
        command: None,
        exit_code: None,
        link: None,
    };
    let offer = OfferHandoff {
        to_host: AgentType::other(),
        to_agent: Some(agent("b")),
        todos: vec![],
        note: None,
        ttl_secs: 3600,
    };
    let attempts: Vec<(&str, Result<Option<Event>>)> = vec![
        ("stop", rules::stop_goal(&s.state, None, false)),
        ("stop --now", rules::stop_goal(&s.state, Some(&"enough".to_owned()), true)),
        ("gate ask", rules::ask_gate(&s.state, &ask, s.now).map(Some)),
        ("goal set", rules::set_goal(&s.state, &set)),
        (
            "evidence add",
            rules::add_evidence(
                &s.state,
                &by("a"),
                &loopx_core::kernel::AddEvidence { todo: x, evidence: more.clone() },
                s.now,
            )
            .map(Some),
        ),
        ("handoff", rules::offer_handoff(&s.state, &by("a"), &offer, s.now).map(Some)),
    ];
    for (what, r) in attempts {
        let e = r.expect_err(what);
        assert_eq!(e.kind, ErrorKind::Refused, "{what}");
        assert!(e.message.contains(&format!("goal {} is done", s.state.goal.id)), "{what}: {}", e.message);
        assert!(e.hint.as_deref().unwrap().contains("loopx goal resume"), "{what}: {:?}", e.hint);
        assert_eq!(e.next.as_ref().unwrap().steps, [NextStep::ResumeGoal], "{what}");
    }
    // What would change nothing is still nothing, not a refusal.
    assert!(rules::set_goal(&s.state, &SetGoal::default()).unwrap().is_none());
    assert!(rules::complete_goal(&s.state, None).unwrap().is_none());
    // Resumed, the goal takes them again.
    s.apply("user", rules::resume_goal(&s.state).unwrap());
    assert!(rules::ask_gate(&s.state, &ask, s.now).is_ok());
    assert!(rules::set_goal(&s.state, &set).unwrap().is_some());
    let evidence = loopx_core::kernel::AddEvidence { todo: x, evidence: more };
    assert!(rules::add_evidence(&s.state, &by("a"), &evidence, s.now).is_ok());
    assert!(rules::stop_goal(&s.state, None, false).unwrap().is_some());
}

/// Every number a person gives the quota or a spend is bounded, the error naming the flag and
/// its range and never an enormous amount itself.
#[test]
fn quota_and_spend_numbers_are_bounded_naming_the_flag_and_its_range() {
    let mut s = Sim::new().agents(&["a"]);
    let x = s.todo("work", Priority::P1);
    let set = |quota: QuotaChange| rules::set_goal(&s.state, &SetGoal { quota, ..SetGoal::default() });
    let cases = [
        (QuotaChange { budget_usd: Some(1e308), ..QuotaChange::default() }, "--budget-usd", "0 and 1000000"),
        (
            QuotaChange { budget_usd: Some(f64::NAN), ..QuotaChange::default() },
            "--budget-usd",
            "0 and 1000000",
        ),
        (
            QuotaChange { budget_tokens: Some(1_000_000_000_001), ..QuotaChange::default() },
            "--budget-tokens",
            "0 and 1000000000000",
        ),
        (
            QuotaChange { allowed_slots: Some(10_081), ..QuotaChange::default() },
            "--allowed-slots",
            "0 and 10080",
        ),
        (QuotaChange { slot_minutes: Some(1441), ..QuotaChange::default() }, "--slot-minutes", "1 and 1440"),
    ];
    for (change, flag, range) in cases {
        let e = set(change).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage, "{flag}");
        assert!(e.message.starts_with(flag) && e.message.contains(range), "{flag}: {}", e.message);
        assert!(e.message.len() < 100, "{}", e.message);
    }
    let top = QuotaChange {
        budget_usd: Some(1_000_000.0),
        budget_tokens: Some(1_000_000_000_000),
        allowed_slots: Some(10_080),
        ..QuotaChange::default()
    };
    assert!(set(top).unwrap().is_some(), "the bounds themselves are taken");
    let spend = |slots, tokens, usd| {
        let req = SpendSlot { todo: x, slots, tokens, usd, dry_run: false };
        rules::spend_slot(&s.state, &by("a"), None, &req, s.now)
    };
    for (r, flag) in [
        (spend(10_081, None, None), "--slots"),
        (spend(1, Some(1_000_000_000_001), None), "--tokens"),
        (spend(1, None, Some(1e12)), "--usd"),
        (spend(1, None, Some(-0.5)), "--usd"),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage, "{flag}");
        assert!(e.message.starts_with(flag), "{flag}: {}", e.message);
    }
}

/// A person pointing the goal's webhook at another URL (kept in their configuration, so the
/// goal's own settings stay the same) is still recorded: an update that says only that.
#[test]
fn a_new_webhook_url_alone_is_an_update_saying_only_that() {
    let s = Sim::new();
    let req = SetGoal { webhook_changed: true, ..SetGoal::default() };
    let Some(Event::GoalUpdated { webhook_changed, notify, objective, .. }) =
        rules::set_goal(&s.state, &req).unwrap()
    else {
        panic!("an update")
    };
    assert!(webhook_changed && notify.is_none() && objective.is_none());
    assert!(rules::set_goal(&s.state, &SetGoal::default()).unwrap().is_none(), "nothing else: nothing");
}
