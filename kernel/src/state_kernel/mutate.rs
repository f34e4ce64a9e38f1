//! One mutation: a command's replay key, its stored receipt, and its commit.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use loopx_core::event::Event;
use loopx_core::kernel::*;
use loopx_core::{Error, Result};

use crate::rules::{self, Actor, Lane};
use crate::state::GoalState;
use crate::store::Store;

use super::StateKernel;

/// Whether a replay of `scope` returns the stored receipt byte for byte. Commands that create
/// something (and a spend, whose replay must be exact) keep their receipt; the others keep
/// only the key and answer a replay with the present state of what they changed.
fn replay_verbatim(scope: &str) -> bool {
    matches!(scope, "todo.add" | "evidence.add" | "gate.ask" | "turn.settle")
}

/// Whether a record written with `turn` by `agent` belongs to the turn in `ctx` (the latest
/// record when there is no turn: a first commit).
pub(super) fn same_turn(
    turn: Option<&str>,
    agent: &loopx_core::AgentId,
    wanted: Option<&str>,
    ctx: &CommandContext,
) -> bool {
    wanted.is_none_or(|w| turn == Some(w) && ctx.agent.as_ref().is_none_or(|a| a == agent))
}

/// Whether a stored key (`scope:actor:key#fingerprint`) was made with the turn id `turn`.
pub(super) fn keyed_by(stored: &str, turn: &str) -> bool {
    stored.split_once('#').is_some_and(|(head, _)| head.splitn(3, ':').nth(2) == Some(turn))
}

/// The key a replayable command is stored under: `scope:actor:key#fingerprint`, where the
/// fingerprint is a digest of the request. The same key with another request is refused.
pub(super) fn replay_key(scope: &str, actor: &Actor, key: &str, request: &impl Serialize) -> String {
    // serde_json writes a struct's fields in declaration order: the same request always gives
    // the same bytes, whatever `Debug` prints.
    let bytes = serde_json::to_vec(request).unwrap_or_default();
    let fp = crate::log::line_hash(&bytes);
    format!("{scope}:{}:{key}#{}", actor.name(), &fp[..8])
}

pub(super) fn person(_: &GoalState) -> Result<Lane> {
    Ok(Lane::Person)
}

/// The lane of a person-only decision, with its words.
pub(super) fn governs(what: &'static str) -> impl Fn(&GoalState) -> Result<Lane> {
    move |_| Ok(Lane::Governance(what))
}

/// A receipt body with nothing in it.
#[derive(Debug, serde::Serialize)]
pub(super) struct Nothing {}

impl<S: Store> StateKernel<S> {
    /// One mutation: resolve the actor, return a stored receipt for a replayed key, otherwise
    /// decide and commit at most one event.
    pub(super) fn mutate<T: Serialize + DeserializeOwned>(
        &self,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: impl Fn(&GoalState) -> Result<Lane>,
        decide: impl Fn(&GoalState, &Actor) -> Result<Option<Event>>,
        body: impl Fn(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        let goal = self.resolve_goal(ctx.goal.as_ref())?;
        let mut out = None;
        self.store.transact(&goal, &mut |txn| {
            let actor = rules::resolve_actor(txn.state(), ctx, lane(txn.state())?)?;
            let key = ctx.key.as_ref().map(|k| replay_key(scope, &actor, k.as_str(), request));
            if let Some(k) = &key
                && let Some(r) = txn.replay::<T>(k, &body)?
            {
                out = Some(r);
                return Ok(());
            }
            let receipt = match decide(txn.state(), &actor)? {
                Some(event) => {
                    txn.sign_with(ctx.signer.clone());
                    txn.commit(actor.name(), event, key, replay_verbatim(scope), &body)?
                }
                None => Receipt {
                    goal_id: goal.clone(),
                    seq: txn.seq(),
                    changed: false,
                    body: body(txn.state())?,
                    replayed: false,
                },
            };
            out = Some(receipt);
            Ok(())
        })?;
        out.ok_or_else(|| Error::internal("transaction returned no receipt"))
    }

    /// [`Self::mutate`] for a command that most often finds its work done (a loop armed again,
    /// an agent registered or a session bound again, a take-over with no handoff waiting): when
    /// it changes nothing in the state `read` (or, `None`, one read now), the no-op receipt
    /// comes from that state without taking the goal's lock, as if the command had run just
    /// then. Anything else (a change, a refusal, a key to replay) goes through the lock and is
    /// decided again there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mutate_if_needed<T: Serialize + DeserializeOwned>(
        &self,
        read: Option<Arc<GoalState>>,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: impl Fn(&GoalState) -> Result<Lane>,
        decide: impl Fn(&GoalState, &Actor) -> Result<Option<Event>>,
        body: impl Fn(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        if ctx.key.is_none() {
            let s = match read {
                Some(s) => s,
                None => self.read(ctx.goal.as_ref())?,
            };
            let unchanged = lane(&s)
                .and_then(|l| rules::resolve_actor(&s, ctx, l))
                .is_ok_and(|actor| matches!(decide(&s, &actor), Ok(None)));
            if unchanged {
                let goal_id = s.goal.id.clone();
                return Ok(Receipt { goal_id, seq: s.seq, changed: false, body: body(&s)?, replayed: false });
            }
        }
        self.mutate(ctx, scope, request, lane, decide, body)
    }

    /// The receipt stored for this context's key, if the command was committed before.
    pub(super) fn stored_receipt<T: DeserializeOwned>(
        &self,
        state: &GoalState,
        ctx: &CommandContext,
        scope: &str,
        request: &impl Serialize,
        lane: Lane,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Option<Receipt<T>>> {
        let Some(key) = &ctx.key else { return Ok(None) };
        let actor = rules::resolve_actor(state, ctx, lane)?;
        crate::store::stored_receipt(state, &replay_key(scope, &actor, key.as_str(), request), body)
    }
}

#[cfg(test)]
mod tests {
    use loopx_core::TodoId;

    use super::*;

    #[test]
    fn fingerprints_come_from_the_requests_json_not_its_debug_output() {
        let a = Actor::Agent(loopx_core::AgentId::new("cc").unwrap());
        let key = replay_key("todo.claim", &a, "turn-1", &TodoId::from_number(1));
        assert_eq!(key, format!("todo.claim:cc:turn-1#{}", &crate::log::line_hash(b"\"t1\"")[..8]));
        let req = RefreshState {
            todo: TodoId::from_number(2),
            classification: "implement".into(),
            delivery_outcome: loopx_core::model::DeliveryOutcome::OutcomeProgress,
            next_action: None,
        };
        let json = br#"{"todo":"t2","classification":"implement","delivery_outcome":"outcome_progress","next_action":null}"#;
        assert_eq!(
            replay_key("refresh-state", &a, "k", &req),
            format!("refresh-state:cc:k#{}", &crate::log::line_hash(json)[..8])
        );
    }
}
