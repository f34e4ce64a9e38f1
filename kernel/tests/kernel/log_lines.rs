#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! The lines a tick commits: a record's time, agent and turn are left out where its line says
//! them (its time is the line's when the clock allows), the log reads back to the state that was
//! committed, and a line never goes back before the one before it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use loopx_core::kernel::*;
use loopx_core::model::{DeliveryOutcome, Priority};
use loopx_core::{AgentId, AgentType, Clock, GoalId, Timestamp};
use loopx_kernel::log::EventLine;
use loopx_kernel::store::Store;
use loopx_kernel::{MemKernel, MemStore, Silent};
use serde_json::Value;

use crate::support::block_on;

/// A clock a millisecond later each time it is read, so a command's own time and its commit's
/// differ.
#[derive(Debug)]
struct Ticking(AtomicI64);

impl Clock for Ticking {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.0.fetch_add(1, Ordering::SeqCst))
    }
}

struct World {
    k: MemKernel,
    store: MemStore,
    clock: Arc<Ticking>,
    goal: GoalId,
}

impl World {
    fn new() -> Self {
        let clock = Arc::new(Ticking(AtomicI64::new(1_800_000_000_000)));
        let store = MemStore::new(Path::new("/nonexistent/lines"), clock.clone(), Arc::new(Silent));
        let k = MemKernel::over(store.clone());
        let goal = GoalId::new("g").unwrap();
        let create =
            CreateGoal { id: goal.clone(), objective: "ship".into(), title: None, make_default: true };
        block_on(k.create_goal(create)).unwrap();
        let w = World { k, store, clock, goal };
        let reg = RegisterAgent { id: bot(), agent_type: AgentType::other(), require_new: false };
        block_on(w.k.register_agent(&w.ctx(None), reg)).unwrap();
        block_on(w.k.add_todo(&w.person(), AddTodo::agent("write the parser", Priority::P2))).unwrap();
        w
    }

    fn ctx(&self, turn: Option<&str>) -> CommandContext {
        crate::support::agent_ctx(&self.goal, bot(), turn)
    }

    fn person(&self) -> CommandContext {
        crate::support::person_ctx(&self.goal)
    }

    /// The log's lines as written.
    fn lines(&self) -> Vec<String> {
        let bytes = self.store.log_from(&self.goal, 0).unwrap();
        String::from_utf8(bytes).unwrap().lines().map(str::to_owned).collect()
    }

    /// Decides as the agent in `ctx` and claims the todo picked.
    fn claim_next(&self, ctx: &CommandContext) -> loopx_core::TodoId {
        let todo = block_on(self.k.should_run(ctx, None)).unwrap().selected_todo.unwrap().id;
        block_on(self.k.claim_todo(ctx, todo)).unwrap();
        todo
    }

    /// A whole tick of turn `turn`: decide, claim, complete with evidence, write back, spend.
    fn tick(&self, turn: &str) {
        let ctx = self.ctx(Some(turn));
        let todo = self.claim_next(&ctx);
        block_on(self.k.complete_todo(&ctx, done(todo))).unwrap();
        let run = RefreshState {
            todo,
            classification: "implement".into(),
            delivery_outcome: DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        block_on(self.k.refresh_state(&ctx, run)).unwrap();
        let spend = SpendSlot { todo, slots: 1, tokens: None, usd: None, dry_run: false };
        block_on(self.k.spend_slot(&ctx, spend)).unwrap();
    }
}

/// Completes `todo` with evidence, nothing to follow.
fn done(todo: loopx_core::TodoId) -> CompleteTodo {
    CompleteTodo {
        todo,
        evidence: Some(crate::support::evidence()),
        no_follow_up: true,
        note: None,
        next_todo: None,
    }
}

fn bot() -> AgentId {
    AgentId::new("bot").unwrap()
}

/// A line's event data as written.
fn data(line: &str) -> Value {
    serde_json::from_str::<Value>(line).unwrap()["data"].clone()
}

#[test]
fn a_ticks_records_leave_out_the_time_agent_and_turn_their_lines_say() {
    let w = World::new();
    w.tick("turn-1");
    let lines = w.lines();
    let tick = &lines[lines.len() - 5..];
    let kinds: Vec<String> = tick
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["decision_recorded", "todo_claimed", "todo_completed", "run_recorded", "slot_spent"]);
    for line in tick {
        let data = data(line).to_string();
        for said in ["\"at\"", "\"agent\"", "\"author\""] {
            assert!(!data.contains(said), "{said} is its line's, yet written: {line}");
        }
    }
    // The run's and the spend's turn is the one their line's key names.
    assert!(!data(&tick[3]).to_string().contains("turn-1"), "{}", tick[3]);
    assert!(!data(&tick[4]).to_string().contains("turn-1"), "{}", tick[4]);
    // Read back, every record has them again, and the state is the one committed.
    let spend: EventLine = serde_json::from_str(&tick[4]).unwrap();
    let loopx_core::event::Event::SlotSpent { spend: s } = &spend.event else { panic!("{spend:?}") };
    assert_eq!((s.agent.as_str(), s.turn.as_deref(), s.at), ("bot", Some("turn-1"), spend.at));
    let committed = w.store.read(&w.goal).unwrap();
    let scan = loopx_kernel::log::scan(&w.store.log_from(&w.goal, 0).unwrap()).unwrap();
    let (replayed, _) = loopx_kernel::store::replay(&w.goal, &scan).unwrap();
    assert_eq!(replayed.spends, committed.spends);
    assert_eq!(serde_json::to_value(&replayed).unwrap(), serde_json::to_value(&*committed).unwrap());
}

#[test]
fn a_record_from_before_the_last_line_keeps_its_own_time_and_lines_never_go_back() {
    let w = World::new();
    let ctx = w.ctx(Some("turn-1"));
    let todo = w.claim_next(&ctx);
    // The clock went back: the completion's own time is before the claim's line.
    w.clock.0.fetch_sub(1_000, Ordering::SeqCst);
    block_on(w.k.complete_todo(&ctx, done(todo))).unwrap();
    let lines = w.lines();
    let (claim, complete) = (&lines[lines.len() - 2], &lines[lines.len() - 1]);
    let at = |l: &str| serde_json::from_str::<Value>(l).unwrap()["at"].as_str().unwrap().to_owned();
    let evidence_at = data(complete)["evidence"][0]["at"].as_str().map(str::to_owned);
    let evidence_at = evidence_at.expect("the evidence keeps its own time");
    assert!(evidence_at < at(claim), "{evidence_at} against {claim}");
    assert_ne!(at(complete), evidence_at, "the line takes the clock's time, not the record's");
}

#[test]
fn a_settled_turns_steps_leave_out_what_their_one_line_says() {
    let w = World::new();
    let ctx = w.ctx(Some("turn-1"));
    let todo = w.claim_next(&ctx);
    let settle = SettleTurn {
        complete: done(todo),
        classification: "implement".into(),
        delivery_outcome: DeliveryOutcome::OutcomeProgress,
        slots: 1,
        tokens: Some(1_200),
        usd: None,
    };
    block_on(w.k.settle_turn(&ctx, settle)).unwrap();
    let lines = w.lines();
    let line = lines.last().unwrap();
    let steps = data(line)["steps"].clone();
    assert_eq!(steps.as_array().map(Vec::len), Some(3), "{line}");
    for said in ["\"at\"", "\"agent\"", "\"author\"", "turn-1"] {
        assert!(!steps.to_string().contains(said), "{said} is its line's, yet written: {line}");
    }
    let read: EventLine = serde_json::from_str(line).unwrap();
    let loopx_core::event::Event::TurnSettled { steps } = &read.event else { panic!("{read:?}") };
    let loopx_core::event::Event::SlotSpent { spend } = &steps[2] else { panic!("{steps:?}") };
    assert_eq!((spend.agent.as_str(), spend.turn.as_deref(), spend.at), ("bot", Some("turn-1"), read.at));
}

#[test]
fn evidence_added_alone_or_with_an_update_leaves_out_its_lines_time_and_author() {
    let w = World::new();
    let ctx = w.ctx(None);
    let todo = w.claim_next(&ctx);
    block_on(w.k.add_evidence(&ctx, AddEvidence { todo, evidence: crate::support::evidence() })).unwrap();
    let update = UpdateTodo {
        note: Some("halfway".into()),
        evidence: Some(crate::support::evidence()),
        ..UpdateTodo::of(todo)
    };
    block_on(w.k.update_todo(&ctx, update)).unwrap();
    let lines = w.lines();
    for line in &lines[lines.len() - 2..] {
        let evidence = data(line)["evidence"].to_string();
        assert!(evidence.contains("\"summary\""), "{line}");
        assert!(!evidence.contains("\"at\"") && !evidence.contains("\"author\""), "{line}");
    }
}
