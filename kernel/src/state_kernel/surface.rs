//! The [`Kernel`] command surface over [`StateKernel`]: each command's body is the method of
//! the same name with `_impl`, in the file of its area.

use std::path::Path;

use async_trait::async_trait;

use loopx_core::decision::ShouldRunAnswer;
use loopx_core::kernel::*;
use loopx_core::model::RuntimeProfile;
use loopx_core::{AgentId, GoalId, Result, TodoId};

use crate::store::Store;

use super::StateKernel;

#[async_trait]
impl<S: Store> Kernel for StateKernel<S> {
    async fn create_goal(&self, req: CreateGoal) -> Result<Receipt<GoalBody>> {
        self.create_goal_impl(req).await
    }

    async fn list_goals(&self) -> Result<GoalList> {
        self.list_goals_impl().await
    }

    async fn show_goal(&self, goal: Option<&GoalId>) -> Result<GoalDetail> {
        self.show_goal_impl(goal).await
    }

    async fn set_goal(&self, ctx: &CommandContext, req: SetGoal) -> Result<Receipt<GoalBody>> {
        self.set_goal_impl(ctx, req).await
    }

    async fn stop_goal(
        &self,
        ctx: &CommandContext,
        reason: Option<String>,
        now: bool,
    ) -> Result<Receipt<GoalBody>> {
        self.stop_goal_impl(ctx, reason, now).await
    }

    async fn resume_goal(&self, ctx: &CommandContext) -> Result<Receipt<GoalBody>> {
        self.resume_goal_impl(ctx).await
    }

    async fn complete_goal(&self, ctx: &CommandContext, note: Option<String>) -> Result<Receipt<GoalBody>> {
        self.complete_goal_impl(ctx, note).await
    }

    async fn set_person_key(&self, ctx: &CommandContext, public_key: String) -> Result<Receipt<GoalBody>> {
        self.set_person_key_impl(ctx, public_key).await
    }

    async fn register_agent(&self, ctx: &CommandContext, req: RegisterAgent) -> Result<Receipt<AgentBody>> {
        self.register_agent_impl(ctx, req).await
    }

    async fn list_agents(&self, goal: Option<&GoalId>) -> Result<AgentList> {
        self.list_agents_impl(goal).await
    }

    async fn add_todo(&self, ctx: &CommandContext, req: AddTodo) -> Result<Receipt<TodoBody>> {
        self.add_todo_impl(ctx, req).await
    }

    async fn list_todos(&self, goal: Option<&GoalId>, filter: &TodoFilter) -> Result<TodoList> {
        self.list_todos_impl(goal, filter).await
    }

    async fn show_todo(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<TodoDetail> {
        self.show_todo_impl(goal, todo).await
    }

    async fn claim_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>> {
        self.claim_todo_impl(ctx, todo).await
    }

    async fn update_todo(&self, ctx: &CommandContext, req: UpdateTodo) -> Result<Receipt<TodoBody>> {
        self.update_todo_impl(ctx, req).await
    }

    async fn complete_todo(&self, ctx: &CommandContext, req: CompleteTodo) -> Result<Receipt<CompleteBody>> {
        self.complete_todo_impl(ctx, req).await
    }

    async fn supersede_todo(
        &self,
        ctx: &CommandContext,
        req: SupersedeTodo,
    ) -> Result<Receipt<SupersedeBody>> {
        self.supersede_todo_impl(ctx, req).await
    }

    async fn release_todo(&self, ctx: &CommandContext, todo: TodoId) -> Result<Receipt<TodoBody>> {
        self.release_todo_impl(ctx, todo).await
    }

    async fn add_evidence(&self, ctx: &CommandContext, req: AddEvidence) -> Result<Receipt<EvidenceBody>> {
        self.add_evidence_impl(ctx, req).await
    }

    async fn list_evidence(&self, goal: Option<&GoalId>, todo: Option<TodoId>) -> Result<EvidenceList> {
        self.list_evidence_impl(goal, todo).await
    }

    async fn status(&self, goal: Option<&GoalId>) -> Result<StatusView> {
        self.status_impl(goal).await
    }

    async fn history(&self, goal: Option<&GoalId>, filter: &HistoryFilter) -> Result<HistoryView> {
        self.history_impl(goal, filter).await
    }

    async fn handoff(&self, ctx: &CommandContext, req: OfferHandoff) -> Result<Receipt<HandoffBody>> {
        self.handoff_impl(ctx, req).await
    }

    async fn accept_handoff(&self, ctx: &CommandContext, req: AcceptHandoff) -> Result<Receipt<ResumeBody>> {
        self.accept_handoff_impl(ctx, req).await
    }

    async fn cancel_handoff(&self, ctx: &CommandContext, req: CancelHandoff) -> Result<Receipt<HandoffBody>> {
        self.cancel_handoff_impl(ctx, req).await
    }

    async fn list_handoffs(&self, goal: Option<&GoalId>, all: bool) -> Result<HandoffList> {
        self.list_handoffs_impl(goal, all).await
    }

    async fn handoff_packet(
        &self,
        goal: Option<&GoalId>,
        host: loopx_core::AgentType,
        agent: Option<&loopx_core::AgentId>,
    ) -> Result<Option<HandoffPacket>> {
        self.handoff_packet_impl(goal, host, agent).await
    }

    async fn drive_lease(
        &self,
        ctx: &CommandContext,
        req: loopx_core::drive::DriverRequest,
    ) -> Result<Receipt<loopx_core::drive::DriverBody>> {
        self.drive_lease_impl(ctx, req).await
    }

    async fn end_turn(
        &self,
        ctx: &CommandContext,
        req: loopx_core::drive::EndTurn,
    ) -> Result<Receipt<loopx_core::drive::TurnEndBody>> {
        self.end_turn_impl(ctx, req).await
    }

    async fn turn(
        &self,
        goal: Option<&GoalId>,
        agent: &loopx_core::AgentId,
        turn: &str,
    ) -> Result<loopx_core::drive::TurnView> {
        self.turn_impl(goal, agent, turn).await
    }

    async fn poll_gates(&self, ctx: &CommandContext, only: Option<loopx_core::GateId>) -> Result<GatePoll> {
        self.poll_gates_impl(ctx, only).await
    }

    async fn doctor(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        self.doctor_impl(goal).await
    }

    async fn repair(&self, goal: Option<&GoalId>) -> Result<DoctorReport> {
        self.repair_impl(goal).await
    }

    async fn should_run(
        &self,
        ctx: &CommandContext,
        profile: Option<RuntimeProfile>,
    ) -> Result<ShouldRunAnswer> {
        self.should_run_impl(ctx, profile).await
    }

    async fn ask_gate(&self, ctx: &CommandContext, req: AskGate) -> Result<Receipt<GateBody>> {
        self.ask_gate_impl(ctx, req).await
    }

    async fn answer_gate(&self, ctx: &CommandContext, req: AnswerGate) -> Result<Receipt<GateBody>> {
        self.answer_gate_impl(ctx, req).await
    }

    async fn list_gates(&self, goal: Option<&GoalId>, all: bool) -> Result<GateList> {
        self.list_gates_impl(goal, all).await
    }

    async fn refresh_state(&self, ctx: &CommandContext, req: RefreshState) -> Result<Receipt<RunBody>> {
        self.refresh_state_impl(ctx, req).await
    }

    async fn spend_slot(&self, ctx: &CommandContext, req: SpendSlot) -> Result<Receipt<SpendBody>> {
        self.spend_slot_impl(ctx, req).await
    }

    async fn settle_turn(&self, ctx: &CommandContext, req: SettleTurn) -> Result<Receipt<SettleBody>> {
        self.settle_turn_impl(ctx, req).await
    }

    async fn void_slot(&self, ctx: &CommandContext, req: VoidSlot) -> Result<Receipt<SpendBody>> {
        self.void_slot_impl(ctx, req).await
    }

    async fn quota_status(&self, goal: Option<&GoalId>) -> Result<QuotaStatus> {
        self.quota_status_impl(goal).await
    }

    async fn scheduler_report(
        &self,
        ctx: &CommandContext,
        req: SchedulerReport,
    ) -> Result<Receipt<SchedulerBody>> {
        self.scheduler_report_impl(ctx, req).await
    }

    async fn lease(&self, ctx: &CommandContext, req: LeaseRequest) -> Result<Receipt<LeaseBody>> {
        self.lease_impl(ctx, req).await
    }

    async fn show_lease(&self, goal: Option<&GoalId>, todo: TodoId) -> Result<LeaseBody> {
        self.show_lease_impl(goal, todo).await
    }

    async fn claim_next(&self, ctx: &CommandContext) -> Result<Receipt<TodoBody>> {
        self.claim_next_impl(ctx).await
    }

    async fn bind_thread(&self, ctx: &CommandContext, req: BindThread) -> Result<Receipt<SessionView>> {
        self.bind_thread_impl(ctx, req).await
    }

    async fn unbind_thread(
        &self,
        ctx: &CommandContext,
        agent: loopx_core::AgentId,
        req: BindThread,
    ) -> Result<Receipt<SessionView>> {
        self.unbind_thread_impl(ctx, agent, req).await
    }

    async fn set_armed(&self, ctx: &CommandContext, armed: bool) -> Result<Receipt<SessionView>> {
        self.set_armed_impl(ctx, armed).await
    }

    async fn stop_turn(&self, agent: Option<&AgentId>, req: BindThread, cap: u32) -> Result<StopTurn> {
        self.stop_turn_impl(agent, req, cap).await
    }

    async fn session(&self, goal: Option<&GoalId>, req: &BindThread) -> Result<SessionView> {
        self.session_impl(goal, req).await
    }

    async fn agent_session(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        req: &BindThread,
    ) -> Result<SessionView> {
        self.agent_session_impl(goal, agent, req).await
    }

    async fn check_edits(
        &self,
        goal: Option<&GoalId>,
        agent: &AgentId,
        cwd: &Path,
        paths: &[String],
    ) -> Result<Option<String>> {
        self.check_edits_impl(goal, agent, cwd, paths).await
    }
}
