#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! `loopx drive` in the kernel: the driver lease (one driver per agent, taken over only from
//! a driver that is gone), a driven turn's end (the writeback spent once, a failure recorded
//! and not spent, a late writeback refused, the host's tokens counted against the budget), and
//! the turn prompt's budget.

use std::path::Path;
use std::sync::Arc;

use loopx_core::decision::DecisionKind;
use loopx_core::drive::{DriverOp, DriverRequest, EndTurn, TurnExit, TurnUsage};
use loopx_core::kernel::*;
use loopx_core::model::{DeliveryOutcome, EvidenceKind, Priority};
use loopx_core::{AgentId, AgentType, Clock, ErrorKind, GoalId, ManualClock, Timestamp};
use loopx_kernel::drive::PromptFor;
use loopx_kernel::rules::Actor;
use loopx_kernel::{MemKernel, MemStore, Silent};

use crate::support::block_on;

struct World {
    k: MemKernel,
    /// A clock the test moves.
    clock: Arc<ManualClock>,
    goal: GoalId,
}

fn bot() -> AgentId {
    AgentId::new("bot").unwrap()
}

impl World {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_800_000_000_000)));
        let k =
            MemKernel::over(MemStore::new(Path::new("/nonexistent/drive"), clock.clone(), Arc::new(Silent)));
        let goal = GoalId::new("g").unwrap();
        let create =
            CreateGoal { id: goal.clone(), objective: "ship it".into(), title: None, make_default: true };
        block_on(k.create_goal(create)).unwrap();
        let w = World { k, clock, goal };
        let reg = RegisterAgent { id: bot(), agent_type: AgentType::other(), require_new: false };
        block_on(w.k.register_agent(&w.ctx(None), reg)).unwrap();
        w
    }

    fn ctx(&self, turn: Option<&str>) -> CommandContext {
        crate::support::agent_ctx(&self.goal, bot(), turn)
    }

    fn person(&self) -> CommandContext {
        crate::support::person_ctx(&self.goal)
    }

    fn advance(&self, secs: i64) {
        self.clock.advance_millis(secs * 1000);
    }

    fn lease(&self, id: &str, op: DriverOp) -> loopx_core::Result<Receipt<loopx_core::drive::DriverBody>> {
        block_on(self.k.drive_lease(&self.ctx(None), DriverRequest { id: id.into(), op }))
    }

    fn add(&self, text: &str) {
        block_on(self.k.add_todo(&self.person(), AddTodo::agent(text, Priority::P2))).unwrap();
    }

    fn decide(&self, turn: &str) -> loopx_core::decision::ShouldRunAnswer {
        block_on(self.k.should_run(&self.ctx(Some(turn)), None)).unwrap()
    }

    /// What an agent does in a good turn: claim, complete with evidence, write back.
    fn work(&self, turn: &str) {
        let a = self.decide(turn);
        let todo = a.selected_todo.unwrap().id;
        block_on(self.k.claim_todo(&self.ctx(None), todo)).unwrap();
        let done = CompleteTodo {
            todo,
            evidence: Some(crate::support::evidence()),
            no_follow_up: false,
            note: None,
            next_todo: None,
        };
        block_on(self.k.complete_todo(&self.ctx(None), done)).unwrap();
        self.write_back(turn, todo).unwrap();
    }

    fn write_back(&self, turn: &str, todo: loopx_core::TodoId) -> loopx_core::Result<Receipt<RunBody>> {
        let req = RefreshState {
            todo,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        block_on(self.k.refresh_state(&self.ctx(Some(turn)), req))
    }

    fn end(&self, turn: &str, exit: TurnExit, usage: TurnUsage) -> loopx_core::drive::TurnEnd {
        let req = EndTurn {
            turn: turn.into(),
            exit,
            exit_code: Some(if exit == TurnExit::Exited { 0 } else { 1 }),
            signal: None,
            started_at: self.clock.now(),
            usage,
            tail: Some("the last words".into()),
        };
        block_on(self.k.end_turn(&self.ctx(None), req)).unwrap().body.end
    }

    fn spends(&self) -> usize {
        block_on(self.k.quota_status(Some(&self.goal))).unwrap().quota.used_slots as usize
    }
}

fn start(host: &str, pid: u32, replaces: Option<&str>) -> DriverOp {
    DriverOp::Start {
        host: host.into(),
        machine: "box".into(),
        pid,
        ttl_secs: 600,
        replaces: replaces.map(str::to_owned),
    }
}

#[test]
fn one_driver_holds_an_agent_until_it_stops_dies_or_expires() {
    let w = World::new();
    let first = w.lease("a", start("other", 10, None)).unwrap();
    assert_eq!(first.body.lease.as_ref().unwrap().pid, 10);
    // Starting again with the same id changes nothing.
    assert!(!w.lease("a", start("other", 10, None)).unwrap().changed);

    let second = w.lease("b", start("other", 20, None)).unwrap_err();
    assert_eq!(second.kind, ErrorKind::Conflict);
    assert!(second.message.contains("pid 10 on box"), "{}", second.message);

    // A driver that found the first one's process gone takes the lease over by naming it.
    w.lease("b", start("other", 20, Some("a"))).unwrap();
    let lost = w.lease("a", DriverOp::Renew { ttl_secs: 600, turn: None, todo: None }).unwrap_err();
    assert_eq!(lost.kind, ErrorKind::Conflict, "{}", lost.message);
    // Stopping a lease one does not hold changes nothing.
    assert!(!w.lease("a", DriverOp::Stop { reason: "done".into() }).unwrap().changed);

    // Once it expires, anyone may start.
    w.advance(601);
    w.lease("c", start("other", 30, None)).unwrap();
    let status = block_on(w.k.status(None)).unwrap();
    assert_eq!(status.drivers.len(), 1);
    assert_eq!(status.drivers[0].pid, 30);

    w.lease("c", DriverOp::Stop { reason: "the goal is finished".into() }).unwrap();
    assert!(block_on(w.k.status(None)).unwrap().drivers.is_empty());
    assert!(w.lease("d", start("other", 40, None)).is_ok());
}

#[test]
fn a_lease_refuses_bad_requests_and_persons() {
    let w = World::new();
    let short =
        DriverOp::Start { host: "other".into(), machine: "box".into(), pid: 1, ttl_secs: 1, replaces: None };
    let e = w.lease("a", short).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Usage);
    // It names the flag a person gives, `loopx drive --lease`, and its range.
    assert!(e.message.starts_with("--lease must be between 10 s and 24 h"), "{}", e.message);
    assert_eq!(e.hint.as_deref(), Some("e.g. loopx drive --lease 10m"));
    assert_eq!(w.lease("has space", start("other", 1, None)).unwrap_err().kind, ErrorKind::Usage);
    assert_eq!(w.lease("a", start("Not A Host", 1, None)).unwrap_err().kind, ErrorKind::Usage);
    // A driver lease lasts up to a day; a host's name is up to 64 letters; a machine's name is
    // some text on one line, up to its limit.
    assert_eq!(loopx_kernel::drive::MAX_LEASE_SECS, 86_400);
    let max = loopx_core::drive::MAX_MACHINE_LEN;
    let starting = |host: String, machine: String, ttl_secs| DriverOp::Start {
        host,
        machine,
        pid: 1,
        ttl_secs,
        replaces: None,
    };
    for (host, machine, ttl_secs, fits) in [
        ("a".repeat(64), "m".repeat(max), 86_400, true),
        ("a".repeat(65), "box".to_owned(), 600, false),
        (String::new(), "box".to_owned(), 600, false),
        ("other".to_owned(), "box".to_owned(), 86_401, false),
        ("other".to_owned(), "m".repeat(max + 1), 600, false),
        ("other".to_owned(), "  ".to_owned(), 600, false),
        ("other".to_owned(), "box\n2".to_owned(), 600, false),
    ] {
        let started = World::new().lease("a", starting(host.clone(), machine.clone(), ttl_secs));
        assert_eq!(started.is_ok(), fits, "{host:?} on {machine:?} for {ttl_secs} s");
    }
    let as_person = CommandContext { agent: Some(AgentId::new("user").unwrap()), ..w.person() };
    let person =
        block_on(w.k.drive_lease(&as_person, DriverRequest { id: "a".into(), op: start("other", 1, None) }))
            .unwrap_err();
    assert_eq!(person.kind, ErrorKind::Identity);
    // A renewal without a start is refused.
    assert_eq!(
        w.lease("z", DriverOp::Renew { ttl_secs: 60, turn: None, todo: None }).unwrap_err().kind,
        ErrorKind::Conflict
    );
}

#[test]
fn a_turn_that_wrote_back_is_spent_once_by_its_end() {
    let w = World::new();
    w.add("parse the header");
    w.lease("a", start("other", 10, None)).unwrap();
    let a = w.decide("d-1");
    w.lease(
        "a",
        DriverOp::Renew {
            ttl_secs: 600,
            turn: Some("d-1".into()),
            todo: a.selected_todo.as_ref().map(|t| t.id),
        },
    )
    .unwrap();
    assert_eq!(block_on(w.k.status(None)).unwrap().drivers[0].turn.as_deref(), Some("d-1"));
    w.work("d-1");
    let usage = TurnUsage { session: Some("s-1".into()), tokens: Some(1200), usd: Some(0.5), limit: None };
    let end = w.end("d-1", TurnExit::Exited, usage);
    assert!(!end.failed());
    assert!(end.spent_by.is_some());
    assert_eq!(end.tail, None, "a turn that wrote back keeps no tail");
    assert_eq!(w.spends(), 1);
    // The driver's turn is over.
    assert_eq!(block_on(w.k.status(None)).unwrap().drivers[0].turn, None);
    // The end again changes nothing; nor does a spend of the same turn.
    let again = block_on(w.k.end_turn(
        &w.ctx(None),
        EndTurn {
            turn: "d-1".into(),
            exit: TurnExit::Lost,
            exit_code: None,
            signal: None,
            started_at: w.clock.now(),
            usage: TurnUsage::default(),
            tail: None,
        },
    ))
    .unwrap();
    assert!(!again.changed);
    assert_eq!(again.body.end, end);
    let spend = SpendSlot { todo: end.todo.unwrap(), slots: 1, tokens: None, usd: None, dry_run: false };
    assert!(block_on(w.k.spend_slot(&w.ctx(Some("d-1")), spend)).is_err());
    assert_eq!(w.spends(), 1);
    // The host's tokens and cost count against the budget.
    let q = block_on(w.k.quota_status(None)).unwrap().quota;
    assert_eq!((q.tokens_used, q.usd_used), (1200, 0.5));
    let view = block_on(w.k.turn(None, &bot(), "d-1")).unwrap();
    assert_eq!(view.spent_by, end.spent_by);
}

/// A driver killed after its turn wrote back, and the driver that took over killed before it
/// ended that turn: the third still finds the turn on the lease and spends its writeback.
#[test]
fn a_lost_turn_outlives_a_second_dead_driver() {
    let w = World::new();
    w.add("parse the header");
    w.lease("a", start("other", 10, None)).unwrap();
    let a = w.decide("a-1");
    let renew = DriverOp::Renew {
        ttl_secs: 600,
        turn: Some("a-1".into()),
        todo: a.selected_todo.as_ref().map(|t| t.id),
    };
    w.lease("a", renew).unwrap();
    w.work("a-1");
    // Driver a dies; b takes over and dies before it ends a's turn.
    let b = w.lease("b", start("other", 20, Some("a"))).unwrap().body.lease.unwrap();
    assert_eq!(b.turn.as_deref(), Some("a-1"), "the lost turn stays on the lease");
    let c = w.lease("c", start("other", 30, Some("b"))).unwrap().body.lease.unwrap();
    assert_eq!(c.turn.as_deref(), Some("a-1"));
    let end = w.end("a-1", TurnExit::Lost, TurnUsage::default());
    assert!(end.spent_by.is_some(), "{end:?}");
    assert_eq!(w.spends(), 1);
    // Ended, it is no one's to recover any more.
    let d = w.lease("d", start("other", 40, Some("c"))).unwrap().body.lease.unwrap();
    assert_eq!(d.turn, None);
}

#[test]
fn a_turn_without_writeback_is_recorded_not_spent_and_takes_none_later() {
    let w = World::new();
    w.add("parse the header");
    let a = w.decide("d-1");
    let todo = a.selected_todo.unwrap().id;
    let end = w.end("d-1", TurnExit::Exited, TurnUsage { tokens: Some(300), ..TurnUsage::default() });
    assert!(end.failed());
    assert_eq!(end.tail.as_deref(), Some("the last words"));
    assert_eq!(w.spends(), 0);
    // A command the turn left running writes back too late: refused.
    let late = w.write_back("d-1", todo).unwrap_err();
    assert_eq!(late.kind, ErrorKind::Refused);
    assert!(late.message.contains("has ended"), "{}", late.message);
    // The failed turn's tokens were used all the same.
    assert_eq!(block_on(w.k.quota_status(None)).unwrap().quota.tokens_used, 300);
    // The todo is picked again.
    assert_eq!(w.decide("d-2").selected_todo.unwrap().id, todo);
}

#[test]
fn a_turn_the_agent_spent_itself_is_not_spent_again() {
    let w = World::new();
    w.add("parse the header");
    let todo = w.decide("d-1").selected_todo.unwrap().id;
    let settle = SettleTurn {
        complete: CompleteTodo {
            todo,
            evidence: Some(NewEvidence {
                kind: EvidenceKind::Test,
                summary: "passes".into(),
                command: None,
                exit_code: None,
                link: None,
            }),
            no_follow_up: true,
            note: None,
            next_todo: None,
        },
        classification: "implement".into(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        slots: 1,
        tokens: None,
        usd: None,
    };
    let settled = block_on(w.k.settle_turn(&w.ctx(Some("d-1")), settle)).unwrap();
    let end = w.end("d-1", TurnExit::Exited, TurnUsage::default());
    assert_eq!(end.spent_by, Some(settled.body.spend));
    assert_eq!(w.spends(), 1);
}

#[test]
fn a_turn_that_ends_while_the_goal_is_paused_spends_nothing() {
    let w = World::new();
    w.add("parse the header");
    w.work("d-1");
    let pause =
        SetGoal { quota: QuotaChange { compute: Some(0.0), ..QuotaChange::default() }, ..SetGoal::default() };
    block_on(w.k.set_goal(&w.person(), pause)).unwrap();
    let end = w.end("d-1", TurnExit::Exited, TurnUsage::default());
    assert!(!end.failed());
    assert_eq!(end.spent_by, None);
    assert!(end.note.as_deref().unwrap().contains("paused"));
    assert_eq!(w.spends(), 0);
}

#[test]
fn the_budget_the_host_reports_stops_the_goal() {
    let w = World::new();
    w.add("one");
    w.add("two");
    let budget = SetGoal {
        quota: QuotaChange { budget_tokens: Some(1000), ..QuotaChange::default() },
        ..SetGoal::default()
    };
    block_on(w.k.set_goal(&w.person(), budget)).unwrap();
    w.work("d-1");
    w.end("d-1", TurnExit::Exited, TurnUsage { tokens: Some(1000), ..TurnUsage::default() });
    let a = block_on(w.k.should_run(&w.ctx(None), None)).unwrap();
    assert_eq!(a.decision, DecisionKind::Stop);
    assert!(a.reason.contains("budget"), "{}", a.reason);
}

#[test]
fn the_turn_prompt_stays_in_its_budget_on_a_big_goal() {
    let w = World::new();
    let long = "x".repeat(loopx_core::model::MAX_TEXT_LEN);
    let set = SetGoal { objective: Some(long.clone()), ..SetGoal::default() };
    block_on(w.k.set_goal(&w.person(), set)).unwrap();
    w.add(&long);
    // The prompt reads the chosen todo, the gates and the latest evidence, never the list:
    // a thousand todos stand for any number (the benchmark measures it at 10,000).
    for n in 0..1_000 {
        w.add(&format!("todo number {n}"));
    }
    for n in 0..5 {
        let ask = AskGate {
            question: long.clone(),
            blocks: loopx_core::model::GateBlocks::Todos(vec![loopx_core::TodoId::from_number(1_000 - n)]),
            kind: loopx_core::model::GateKind::Person,
        };
        let g = block_on(w.k.ask_gate(&w.ctx(None), ask)).unwrap().body.gate.id;
        if n < 3 {
            let answer = AnswerGate {
                gate: g,
                status: loopx_core::model::GateStatus::Approved,
                note: Some(long.clone()),
            };
            block_on(w.k.answer_gate(&w.person(), answer)).unwrap();
        }
    }
    let todo = loopx_core::TodoId::from_number(1);
    for _ in 0..8 {
        let e = AddEvidence {
            todo,
            evidence: NewEvidence {
                kind: EvidenceKind::Note,
                summary: long.clone(),
                command: None,
                exit_code: None,
                link: None,
            },
        };
        block_on(w.k.add_evidence(&w.ctx(None), e)).unwrap();
    }
    let a = w.decide("d-1");
    assert_eq!(a.selected_todo.as_ref().unwrap().id, todo);
    let p = PromptFor { loopx: "/opt/loopx/bin/loopx", turn: "d-1", budget: 4000 };
    let prompt = w.k.turn_prompt(None, &a, &p).unwrap();
    assert!(prompt.len() <= 4000, "{} bytes", prompt.len());
    for part in [
        "Objective:",
        "This turn: t1",
        "latest answers",
        "refresh-state",
        "/opt/loopx/bin/loopx todo complete",
    ] {
        assert!(prompt.contains(part), "{part:?} missing from:\n{prompt}");
    }
    // A tighter budget leaves the optional parts out, never the instructions.
    let tight = w.k.turn_prompt(None, &a, &PromptFor { budget: 2500, ..p }).unwrap();
    assert!(tight.len() <= 2500 && tight.len() < prompt.len(), "{} bytes", tight.len());
    assert!(tight.contains("refresh-state"));
}

/// The prompt's budget is in bytes: text of three or four bytes a character (CJK, emoji)
/// stays within it, cut at a character boundary, and what the agent wrote (its todo, its
/// notes) gives way before what the person wrote (the objective, their note).
#[test]
fn the_turn_prompt_counts_bytes_and_cuts_what_agents_wrote_first() {
    use loopx_core::TodoId;
    let w = World::new();
    let objective = "目標を達成する".repeat(190); // 3,990 bytes
    let set = SetGoal { objective: Some(objective.clone()), ..SetGoal::default() };
    block_on(w.k.set_goal(&w.person(), set)).unwrap();
    let crabs = "🦀".repeat(1000); // 4,000 bytes
    block_on(w.k.add_todo(&w.ctx(None), AddTodo::agent(&crabs, Priority::P2))).unwrap();
    let t1 = TodoId::from_number(1);
    let person_note = "人の注意".repeat(300);
    let update = UpdateTodo { note: Some(person_note.clone()), ..UpdateTodo::of(t1) };
    let user = crate::support::agent_ctx(&w.goal, AgentId::user(), None);
    block_on(w.k.update_todo(&user, update)).unwrap();
    for n in 0..3 {
        let note = format!("{n}{}", "🦀".repeat(999));
        let update = UpdateTodo { note: Some(note), ..UpdateTodo::of(t1) };
        block_on(w.k.update_todo(&w.ctx(None), update)).unwrap();
    }
    let a = w.decide("d-1");
    let prompt =
        |budget| w.k.turn_prompt(None, &a, &PromptFor { loopx: "loopx", turn: "d-1", budget }).unwrap();
    let line = |p: &str, start: &str| p.lines().find(|l| l.starts_with(start)).map(str::to_owned);
    let objective_line = |p: &str| line(p, "Objective: ").unwrap();
    let roomy = prompt(4000);
    assert!(roomy.len() <= 4000, "{} bytes", roomy.len());
    // The objective at its own cap, 600 bytes, cut between characters.
    let shown = objective_line(&roomy);
    assert!(shown.len() > 590 && shown.len() <= "Objective: ".len() + 600, "{shown}");
    assert!(shown.ends_with("…\""), "{shown}");
    assert!(roomy.contains("- user: \"人の注意"), "{roomy}");
    assert!(roomy.contains("- bot: \"2🦀"), "the newest note of the agent's:\n{roomy}");
    assert!(roomy.contains("refresh-state"));
    // Less room: the agent's notes go (the oldest first), then its todo's text is cut, while
    // the objective and the person's note stay whole.
    let mut last = roomy.len();
    for budget in [3000, 2600, 2300, 2000] {
        let tight = prompt(budget);
        assert!(tight.len() <= budget && tight.len() <= last, "{} bytes in {budget}", tight.len());
        last = tight.len();
        assert_eq!(objective_line(&tight), shown, "in {budget}");
        assert!(tight.contains(&format!("- user: \"{}", &person_note[..150])), "in {budget}:\n{tight}");
        assert!(tight.contains("refresh-state") && tight.contains("This turn: t1"), "in {budget}");
        if tight.contains("- bot: \"0") {
            assert!(tight.contains("- bot: \"1") && tight.contains("- bot: \"2"), "in {budget}:\n{tight}");
        }
    }
    let tightest = prompt(2000);
    assert!(!tightest.contains("- bot:"), "{tightest}");
    let todo = line(&tightest, "This turn: t1").unwrap();
    assert!(todo.len() < line(&roomy, "This turn: t1").unwrap().len(), "{todo}");
    assert!(todo.contains("🦀…\""), "{todo}");
}

#[test]
fn a_renewal_that_changes_nothing_records_nothing() {
    let w = World::new();
    w.add("parse the header");
    w.lease("a", start("other", 10, None)).unwrap();
    let todo = w.decide("d-1").selected_todo.unwrap().id;
    let renew = |ttl_secs, turn: Option<&str>, todo| {
        w.lease("a", DriverOp::Renew { ttl_secs, turn: turn.map(str::to_owned), todo }).unwrap().changed
    };
    // Started for 600 s: renewing to the same end, or an earlier one, with no turn, is nothing.
    assert!(!renew(600, None, None));
    assert!(!renew(300, None, None));
    assert!(renew(601, None, None), "a later end");
    assert!(renew(60, Some("d-1"), None), "a turn begun");
    assert!(renew(60, Some("d-1"), Some(todo)), "the turn's todo");
    assert!(!renew(60, Some("d-1"), Some(todo)));
    assert!(renew(60, None, Some(todo)), "the turn over");
}

#[test]
fn a_turns_end_refuses_a_session_id_or_a_cost_no_host_reports() {
    let w = World::new();
    w.lease("a", start("other", 10, None)).unwrap();
    let max = loopx_core::drive::MAX_SESSION_LEN;
    for (i, (session, usd, fits)) in [
        ("s".repeat(max), Some(0.0), true),
        ("s".repeat(max + 1), None, false),
        ("s-1\n2".to_owned(), None, false),
        ("s-1".to_owned(), Some(-0.01), false),
        ("s-1".to_owned(), Some(f64::NAN), false),
        ("s-1".to_owned(), Some(f64::INFINITY), false),
        ("s-1".to_owned(), Some(1.5), true),
    ]
    .into_iter()
    .enumerate()
    {
        let req = EndTurn {
            turn: format!("d-{i}"),
            exit: TurnExit::Exited,
            exit_code: Some(0),
            signal: None,
            started_at: w.clock.now(),
            usage: TurnUsage { session: Some(session.clone()), tokens: None, usd, limit: None },
            tail: None,
        };
        let ended = block_on(w.k.end_turn(&w.ctx(None), req));
        assert_eq!(ended.is_ok(), fits, "{session:?} costing {usd:?}: {ended:?}");
        if let Err(e) = ended {
            assert_eq!(e.kind, ErrorKind::Usage);
        }
    }
}

/// A turn is known by its own run alone: another turn's writeback is neither its run nor its
/// spend, and once ended it takes only its own writeback again.
#[test]
fn a_turn_is_known_by_its_own_writeback_alone() {
    let w = World::new();
    w.add("parse the header");
    w.add("write the tests");
    w.lease("a", start("other", 10, None)).unwrap();
    w.work("d-1");
    let first = block_on(w.k.turn(None, &bot(), "d-1")).unwrap();
    assert!(first.run.is_some() && first.end.is_none(), "written back, not yet ended: {first:?}");
    let done = first.todo.unwrap();
    assert!(w.end("d-1", TurnExit::Exited, TurnUsage::default()).spent_by.is_some());
    // The turn's own writeback, delivered again once its receipt is no longer kept, changes
    // nothing; one for another todo is refused.
    let second = w.decide("d-2").selected_todo.unwrap().id;
    assert_ne!(second, done);
    let state = loopx_kernel::store::Store::read(w.k.store(), &w.goal).unwrap();
    let writing = |todo| {
        let req = RefreshState {
            todo,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        loopx_kernel::rules::refresh_state(&state, &Actor::Agent(bot()), Some("d-1"), &req, w.clock.now())
    };
    assert!(writing(done).unwrap().is_none());
    assert_eq!(writing(second).unwrap_err().kind, ErrorKind::Refused);
    assert_eq!(w.write_back("d-1", second).unwrap_err().kind, ErrorKind::Refused);
    // The second turn wrote nothing back: it has no run, and its end spends nothing.
    let view = block_on(w.k.turn(None, &bot(), "d-2")).unwrap();
    assert_eq!((view.todo, view.run, view.spent_by), (Some(second), None, None));
    let end = w.end("d-2", TurnExit::Exited, TurnUsage::default());
    assert_eq!((end.run, end.spent_by), (None, None));
    assert_eq!(w.spends(), 1);
}

/// Each optional part of the turn prompt is there only with something in it, and lists all it
/// has room for: the todo's notes, the person's answers (not loopx's own), the open questions
/// and the recent evidence.
#[test]
fn the_turn_prompt_has_a_part_only_for_what_it_lists() {
    use loopx_core::model::{GateBlocks, GateKind, GateStatus};
    use loopx_core::{GateId, TodoId};
    let w = World::new();
    w.add("parse the header");
    w.add("write the tests");
    let (t1, t2) = (TodoId::from_number(1), TodoId::from_number(2));
    let prompt = |turn: &str| {
        let a = w.decide(turn);
        assert_eq!(a.selected_todo.as_ref().map(|t| t.id), Some(t1));
        w.k.turn_prompt(None, &a, &PromptFor { loopx: "loopx", turn, budget: 16_000 }).unwrap()
    };
    let parts = ["Notes on it:", "latest answers:", "Still waiting on the person", "Recent evidence:"];
    let bare = prompt("d-1");
    for part in parts {
        assert!(!bare.contains(part), "{part:?} in:\n{bare}");
    }

    for note in ["the header is big-endian", "mind the checksum"] {
        let update = UpdateTodo { note: Some(note.into()), ..UpdateTodo::of(t1) };
        block_on(w.k.update_todo(&w.person(), update)).unwrap();
    }
    let ask = |question: &str, kind| {
        let req = AskGate { question: question.into(), blocks: GateBlocks::Todos(vec![t2]), kind };
        block_on(w.k.ask_gate(&w.ctx(None), req)).unwrap().body.gate.id
    };
    for (n, question) in ["which endianness?", "which checksum?"].into_iter().enumerate() {
        let gate = ask(question, GateKind::Person);
        let answer = AnswerGate { gate, status: GateStatus::Approved, note: Some(format!("answer {n}")) };
        block_on(w.k.answer_gate(&w.person(), answer)).unwrap();
    }
    // A timer loopx closes itself is no answer of the person's.
    let timer = ask("wait for the window", GateKind::Timer { until: w.clock.now() });
    block_on(w.k.poll_gates(&w.person(), Some(timer))).unwrap();
    assert_eq!(timer, GateId::from_number(3));
    ask("may the tests use the network?", GateKind::Person);
    ask("which fixtures?", GateKind::Person);
    for summary in ["parsed the sample", "fuzzed for an hour"] {
        let e = AddEvidence {
            todo: t1,
            evidence: NewEvidence {
                kind: EvidenceKind::Note,
                summary: summary.into(),
                command: None,
                exit_code: None,
                link: None,
            },
        };
        block_on(w.k.add_evidence(&w.ctx(None), e)).unwrap();
    }

    let full = prompt("d-2");
    for part in parts.into_iter().chain([
        "the header is big-endian",
        "mind the checksum",
        "which endianness?",
        "which checksum?",
        "may the tests use the network?",
        "which fixtures?",
        "parsed the sample",
        "fuzzed for an hour",
    ]) {
        assert!(full.contains(part), "{part:?} missing from:\n{full}");
    }
    assert!(!full.contains("wait for the window"), "{full}");
}

impl World {
    fn set_brakes(&self, brakes: loopx_core::model::Brakes) {
        let req = SetGoal {
            objective: None,
            title: None,
            make_default: false,
            quota: QuotaChange::default(),
            handoff_mode: None,
            write_scope: None,
            notify: None,
            clear_notify: false,
            brakes,
            webhook_changed: false,
        };
        block_on(self.k.set_goal(&self.person(), req)).unwrap();
    }

    /// A turn on the next todo that claims it, notes `note` and writes back: no evidence.
    fn noted(&self, turn: &str, note: &str) -> loopx_core::drive::TurnEnd {
        let todo = self.decide(turn).selected_todo.unwrap().id;
        let _ = block_on(self.k.claim_todo(&self.ctx(None), todo));
        let update = UpdateTodo { note: Some(note.into()), ..UpdateTodo::of(todo) };
        block_on(self.k.update_todo(&self.ctx(None), update)).unwrap();
        self.write_back(turn, todo).unwrap();
        self.end(turn, TurnExit::Exited, TurnUsage::default())
    }

    fn gates(&self) -> Vec<loopx_core::model::Gate> {
        block_on(self.k.list_gates(Some(&self.goal), true)).unwrap().gates
    }
}

#[test]
fn the_same_writeback_again_is_no_progress_and_a_new_one_is() {
    let w = World::new();
    w.add("tidy the docs");
    w.add("another");
    // Evidence from before the turns, and on another todo, is no turn's progress.
    for todo in [1, 2] {
        let add =
            AddEvidence { todo: loopx_core::TodoId::from_number(todo), evidence: crate::support::evidence() };
        block_on(w.k.add_evidence(&w.person(), add)).unwrap();
    }
    w.advance(1);
    w.noted("d-1", "looked at it");
    w.noted("d-2", "looked at it");
    assert!(w.gates().is_empty(), "two turns without progress ask nobody yet");
    // Something new written back resets the count.
    w.noted("d-3", "fixed the first page");
    w.noted("d-4", "fixed the first page");
    w.noted("d-5", "fixed the first page");
    assert!(w.gates().is_empty(), "a new writeback was progress: {:?}", w.gates());
    w.noted("d-6", "fixed the first page");
    let gates = w.gates();
    assert_eq!(gates.len(), 1, "{gates:?}");
    assert!(
        gates[0].question.starts_with("t1: 3 driven turns without progress; last: wrote back implement"),
        "{}",
        gates[0].question
    );
    assert_eq!(gates[0].asked_by, "loopx");
    assert!(gates[0].question.contains("--turn d-4, --turn d-5, --turn d-6"), "{}", gates[0].question);
    // Approved, the todo's count starts again: one more such turn asks nothing yet.
    let answer =
        AnswerGate { gate: gates[0].id, status: loopx_core::model::GateStatus::Approved, note: None };
    block_on(w.k.answer_gate(&w.person(), answer)).unwrap();
    w.noted("d-7", "fixed the first page");
    assert_eq!(w.gates().len(), 1, "{:?}", w.gates());
}

#[test]
fn the_hourly_cap_is_asked_apart_from_a_todos_question_and_a_persons() {
    let w = World::new();
    w.set_brakes(loopx_core::model::Brakes {
        hourly_turn_cap: Some(3),
        todo_turn_cap: Some(1),
        ..Default::default()
    });
    for n in 0..4 {
        w.add(&format!("step {n}"));
    }
    // A turn that leaves t1 open: its cap of one turn asks about t1 (loopx's gate on a todo).
    w.noted("d-1", "began");
    assert_eq!(w.gates().len(), 1);
    let turn = |t: &str| {
        w.work(t);
        w.end(t, TurnExit::Exited, TurnUsage::default());
    };
    turn("d-2");
    // The third turn ends after a person asked a question of the goal: the hourly cap still
    // asks, its own question.
    let todo = w.decide("d-3").selected_todo.unwrap().id;
    block_on(w.k.claim_todo(&w.ctx(None), todo)).unwrap();
    let done = CompleteTodo {
        todo,
        evidence: Some(crate::support::evidence()),
        no_follow_up: false,
        note: None,
        next_todo: None,
    };
    block_on(w.k.complete_todo(&w.ctx(None), done)).unwrap();
    w.write_back("d-3", todo).unwrap();
    let ask = AskGate {
        question: "may it go on?".into(),
        blocks: loopx_core::model::GateBlocks::Goal,
        kind: loopx_core::model::GateKind::Person,
    };
    block_on(w.k.ask_gate(&w.person(), ask)).unwrap();
    w.end("d-3", TurnExit::Exited, TurnUsage::default());
    let gates = w.gates();
    assert_eq!(gates.len(), 3, "{gates:?}");
    assert!(
        gates[2].question.starts_with("the goal ran 3 driven turns in the last hour"),
        "{}",
        gates[2].question
    );
}

#[test]
fn a_limited_or_interrupted_turn_is_not_counted_and_a_failed_one_is() {
    let w = World::new();
    w.add("build it");
    let limit = loopx_core::drive::HostLimit::new("five_hour", Some("You've hit your session limit"));
    for n in 1..=4 {
        let turn = format!("d-{n}");
        w.decide(&turn);
        let end =
            w.end(&turn, TurnExit::Exited, TurnUsage { limit: Some(limit.clone()), ..TurnUsage::default() });
        assert!(!end.failed() && end.limited().is_some());
    }
    w.decide("d-5");
    w.end("d-5", TurnExit::Interrupted, TurnUsage::default());
    assert!(w.gates().is_empty(), "neither a host's limit nor a person's stop is the agent's stall");
    for n in 6..=8 {
        let turn = format!("d-{n}");
        w.decide(&turn);
        w.end(&turn, TurnExit::Exited, TurnUsage::default());
    }
    let gates = w.gates();
    assert_eq!(gates.len(), 1, "{gates:?}");
    assert!(
        gates[0].question.contains("last: exit 0, no writeback: the last words"),
        "{}",
        gates[0].question
    );
    // A bad limit from a host is refused, nothing recorded.
    w.decide("d-9");
    let bad = loopx_core::drive::HostLimit { kind: "five hours!".into(), ..limit };
    let req = EndTurn {
        turn: "d-9".into(),
        exit: TurnExit::Exited,
        exit_code: Some(1),
        signal: None,
        started_at: w.clock.now(),
        usage: TurnUsage { limit: Some(bad), ..TurnUsage::default() },
        tail: None,
    };
    assert_eq!(block_on(w.k.end_turn(&w.ctx(None), req)).unwrap_err().kind, ErrorKind::Usage);
}

#[test]
fn the_hourly_cap_asks_once_for_the_whole_goal_and_turns_older_than_an_hour_do_not_count() {
    let w = World::new();
    w.set_brakes(loopx_core::model::Brakes {
        hourly_turn_cap: Some(3),
        stall_turns: Some(0),
        ..Default::default()
    });
    for n in 0..10 {
        w.add(&format!("step {n}"));
    }
    let turn = |t: &str| {
        w.work(t);
        w.end(t, TurnExit::Exited, TurnUsage::default());
    };
    turn("d-1");
    w.advance(3600);
    turn("d-2");
    turn("d-3");
    assert!(w.gates().is_empty(), "the first turn is more than an hour old");
    turn("d-4");
    let gates = w.gates();
    assert_eq!(gates.len(), 1, "{gates:?}");
    assert_eq!(gates[0].blocks, loopx_core::model::GateBlocks::Goal);
    assert!(
        gates[0].question.starts_with("the goal ran 3 driven turns in the last hour, its cap of 3"),
        "{}",
        gates[0].question
    );
    assert_eq!(w.decide("d-5").decision, DecisionKind::AskUser);
    // Answered, the goal goes on; the cap asks again only once more turns ran.
    let answer =
        AnswerGate { gate: gates[0].id, status: loopx_core::model::GateStatus::Approved, note: None };
    block_on(w.k.answer_gate(&w.person(), answer)).unwrap();
    w.advance(3601);
    turn("d-6");
    assert_eq!(w.gates().iter().filter(|g| g.status == loopx_core::model::GateStatus::Open).count(), 0);
}

#[test]
fn a_todos_turn_cap_asks_about_that_todo_alone_and_an_approval_gives_as_many_again() {
    let w = World::new();
    w.set_brakes(loopx_core::model::Brakes { todo_turn_cap: Some(2), ..Default::default() });
    w.add("endless");
    w.add("other");
    w.noted("d-1", "round 1");
    w.noted("d-2", "round 2");
    let gates = w.gates();
    assert_eq!(gates.len(), 1, "{gates:?}");
    assert!(gates[0].question.starts_with("t1: reached its cap of 2 driven turns"), "{}", gates[0].question);
    assert_eq!(
        gates[0].blocks,
        loopx_core::model::GateBlocks::Todos(vec![loopx_core::TodoId::from_number(1)])
    );
    // The other todo goes on.
    assert_eq!(w.decide("d-3").selected_todo.unwrap().id, loopx_core::TodoId::from_number(2));
}

#[test]
fn a_failed_check_is_no_progress_and_evidence_on_another_todo_is_not_this_ones() {
    let w = World::new();
    w.add("make the tests pass");
    w.add("another");
    let failed = NewEvidence {
        kind: loopx_core::model::EvidenceKind::Command,
        summary: "the tests fail".into(),
        command: Some(vec!["cargo".into(), "test".into()]),
        exit_code: Some(101),
        link: None,
    };
    let t1 = loopx_core::TodoId::from_number(1);
    for n in 1..=3 {
        let turn = format!("d-{n}");
        assert_eq!(w.decide(&turn).selected_todo.unwrap().id, t1);
        let _ = block_on(w.k.claim_todo(&w.ctx(None), t1));
        block_on(w.k.add_evidence(&w.ctx(None), AddEvidence { todo: t1, evidence: failed.clone() })).unwrap();
        let elsewhere =
            AddEvidence { todo: loopx_core::TodoId::from_number(2), evidence: crate::support::evidence() };
        block_on(w.k.add_evidence(&w.person(), elsewhere)).unwrap();
        w.write_back(&turn, t1).unwrap();
        w.end(&turn, TurnExit::Exited, TurnUsage::default());
        w.advance(1);
    }
    let gates = w.gates();
    assert_eq!(gates.len(), 1, "{gates:?}");
    assert!(
        gates[0].question.starts_with("t1: 3 driven turns without progress; last: `cargo test` exited 101"),
        "{}",
        gates[0].question
    );
}
