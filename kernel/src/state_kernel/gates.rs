//! The person's gates: asking, answering, listing and polling them.

use loopx_core::kernel::*;
use loopx_core::{Error, GoalId, Result};

use crate::rules::{self, Lane};
use crate::store::Store;

use super::StateKernel;
use super::mutate::{governs, person};

impl<S: Store> StateKernel<S> {
    /// Asks the gate (without telling anyone).
    fn ask_gate_only(&self, ctx: &CommandContext, req: AskGate) -> Result<Receipt<GateBody>> {
        self.mutate(
            ctx,
            "gate.ask",
            &req,
            person,
            |s, _| rules::ask_gate(s, &req, self.now()).map(Some),
            |s| {
                s.gates
                    .last()
                    .cloned()
                    .map(|gate| GateBody { gate })
                    .ok_or_else(|| Error::internal("no gate"))
            },
        )
    }

    pub(super) async fn ask_gate_impl(
        &self,
        ctx: &CommandContext,
        req: AskGate,
    ) -> Result<Receipt<GateBody>> {
        let receipt = self.ask_gate_only(ctx, req)?;
        if let (loopx_core::model::GateKind::Command { argv, .. }, false) =
            (&receipt.body.gate.kind, receipt.replayed)
        {
            self.wrote_command(argv, &receipt.body.gate.asked_by);
        }
        // The person is told at once (a failure is recorded, never fails the question).
        if receipt.body.gate.is_persons() && !receipt.replayed {
            let goal = receipt.goal_id.clone();
            if let Err(e) = self.send_notices(&goal).await {
                self.store.reporter().warn(&format!(
                    "could not notify the person about {}: {}",
                    receipt.body.gate.id, e.message
                ));
            }
        }
        Ok(receipt)
    }

    pub(super) async fn answer_gate_impl(
        &self,
        ctx: &CommandContext,
        req: AnswerGate,
    ) -> Result<Receipt<GateBody>> {
        let id = req.gate;
        self.mutate(
            ctx,
            "gate.answer",
            &req,
            governs("answering a gate"),
            |s, a| rules::answer_gate(s, a, &req).map(Some),
            move |s| Ok(GateBody { gate: rules::find_gate(s, id)?.clone() }),
        )
    }

    pub(super) async fn list_gates_impl(&self, goal: Option<&GoalId>, all: bool) -> Result<GateList> {
        let s = self.read(goal)?;
        let gates = s
            .gates
            .iter()
            .filter(|g| all || g.status == loopx_core::model::GateStatus::Open)
            .cloned()
            .collect();
        Ok(GateList { goal_id: s.goal.id.clone(), gates })
    }

    pub(super) async fn poll_gates_impl(
        &self,
        ctx: &CommandContext,
        only: Option<loopx_core::GateId>,
    ) -> Result<GatePoll> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        // Whoever cannot be named (a session that has not joined) runs only approved commands.
        let runner = rules::resolve_actor(self.store.read(&goal)?.as_ref(), ctx, Lane::Person)
            .map_or_else(|_| "an unnamed agent".to_owned(), |a| a.name().to_owned());
        self.poll(&goal, only, false, &runner).await
    }
}
