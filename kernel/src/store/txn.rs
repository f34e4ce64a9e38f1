//! [`Txn`]: a goal's state, locked for one mutation, and the receipts a replay returns.

use serde::Serialize;
use serde::de::DeserializeOwned;

use loopx_core::event::Event;
use loopx_core::kernel::Receipt;
use loopx_core::{Error, GoalId, Result};

use crate::codec;
use crate::log::{self, EventLine};
use crate::state::{GoalState, StoredReceipt};

use super::traits::{Commit, Store};

/// A goal's state, locked for one mutation.
#[derive(Debug)]
pub struct Txn<'a> {
    store: &'a dyn Store,
    id: GoalId,
    /// Changed only by a commit: a store may keep the state a transaction ends with as the
    /// state of the snapshot it loaded.
    state: GoalState,
    head: String,
    views: Option<String>,
    /// The size the state's encoding had last time, to size its buffer.
    size_hint: usize,
    /// Set once the state starts changing for a commit; `appended` once the store holds it.
    committed: bool,
    appended: bool,
    /// Signs a person's decision, in strict mode.
    signer: Option<loopx_core::kernel::SignerRef>,
    /// The person key this machine saw the goal hold, when the log no longer holds one.
    seen_key: Option<String>,
    /// What its commit wrote of the state.
    written: Option<Written>,
}

/// A committed state's hashed bytes ([`codec::encode_keys`]) and their root.
#[derive(Debug)]
pub(super) struct Written {
    pub(super) keys: Vec<u8>,
    pub(super) root: String,
}

impl<'a> Txn<'a> {
    /// A transaction on goal `id`, whose log ends at `head` with `state`; `views` is handed
    /// back to the store with the commit.
    pub fn new(
        store: &'a dyn Store,
        id: GoalId,
        state: GoalState,
        head: String,
        views: Option<String>,
    ) -> Self {
        Txn {
            store,
            id,
            state,
            head,
            views,
            size_hint: 0,
            committed: false,
            appended: false,
            signer: None,
            seen_key: None,
            written: None,
        }
    }

    /// The person key this machine saw the goal hold ([`crate::witness`]): a goal once in
    /// strict mode stays in it here, whatever its log says now.
    pub(crate) fn strict_as_seen(&mut self, key: Option<String>) {
        self.seen_key = key;
    }

    /// The person's key, to sign a decision of theirs with (strict mode).
    pub(crate) fn sign_with(&mut self, signer: Option<loopx_core::kernel::SignerRef>) {
        self.signer = signer;
    }

    /// The signature a person's decision needs in strict mode (the goal holds a person key, or
    /// the event sets the first one, signed by itself), made and checked here with the line's
    /// own place in the log; `None` where none is needed.
    fn person_signature(&self, line: &EventLine) -> Result<Option<String>> {
        if line.actor != "user" || !line.event.is_persons_decision() {
            return Ok(None);
        }
        let key = match (self.state.goal.person_key.as_ref().or(self.seen_key.as_ref()), &line.event) {
            (Some(k), _) => k.clone(),
            (None, Event::PersonKeySet { public_key }) => public_key.clone(),
            (None, _) => return Ok(None),
        };
        let Some(signer) = &self.signer else {
            return Err(Error::refused(format!(
                "goal {} is in strict mode: a person's decision is taken only signed by the person's key ({})",
                self.id,
                loopx_core::event::key_short(&key)
            ))
            .with_hint(
                "run it in your own terminal, where loopx asks for your key's passphrase (the dashboard asks on its page)",
            ));
        };
        let message = crate::person::message(&self.id, line.seq, &line.prev, &line.event)?;
        let signature = signer.0.sign(&message);
        if !crate::person::verify(&key, &message, &signature) {
            return Err(Error::refused(format!(
                "this decision is signed by key {}, not by goal {}'s person key {}",
                loopx_core::event::key_short(&signer.0.public_key()),
                self.id,
                loopx_core::event::key_short(&key)
            ))
            .with_hint("sign with the key loopx person init recorded for this goal"));
        }
        Ok(Some(signature))
    }

    /// Sizes the state's encoding buffer for `bytes` (the last encoding's size): a large state
    /// is then encoded once, without the buffer doubling (and holding both halves) as it grows.
    pub(crate) fn with_size_hint(mut self, bytes: usize) -> Self {
        self.size_hint = bytes;
        self
    }

    /// The state the transaction began from.
    pub fn state(&self) -> &GoalState {
        &self.state
    }

    /// The stored receipt for `key`, if a command with that key was committed before.
    pub fn replay<T: DeserializeOwned>(
        &self,
        key: &str,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Option<Receipt<T>>> {
        stored_receipt(&self.state, key, body)
    }

    /// Commits `event` by `actor`: append, fsync, snapshot, GOAL.md. `body` describes the
    /// result from the new state. With a key, the key is kept so a replay appends nothing; with
    /// `verbatim`, the receipt itself is kept too, so a replay returns it byte for byte
    /// (otherwise a replay describes the current state).
    pub fn commit<T: Serialize>(
        &mut self,
        actor: &str,
        event: Event,
        key: Option<String>,
        verbatim: bool,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        if self.committed {
            return Err(Error::internal("a transaction committed twice"));
        }
        // The time the event's records give, when it is not before the last line's nor after
        // now: those records then leave it out of the line.
        let now = self.store.clock().now();
        let at = event.own_time().filter(|t| *t >= self.state.last_event_at && *t <= now);
        let mut line = EventLine {
            seq: self.state.seq + 1,
            at: at.unwrap_or(now),
            actor: actor.to_owned(),
            event,
            turn: key,
            receipt: None,
            root: None,
            prev: self.head.clone(),
            signature: None,
        };
        line.signature = self.person_signature(&line)?;
        let archive_before = &self.state.archive.clone();
        // Applied in place (a copy of a large state costs as much as encoding it): from here
        // on, a failure leaves the transaction spent, and nothing was written.
        self.committed = true;
        let next = &mut self.state;
        next.apply(&line).map_err(|e| Error::internal(format!("cannot apply own event: {e}")))?;
        let receipt = Receipt {
            goal_id: self.id.clone(),
            seq: line.seq,
            changed: true,
            body: body(next)?,
            replayed: false,
        };
        if line.turn.is_some() {
            if verbatim {
                let value = serde_json::to_value(&receipt)
                    .map_err(|e| Error::internal(format!("cannot encode receipt: {e}")))?;
                line.receipt = Some(value);
            }
            next.keep_receipt(&line).map_err(Error::internal)?;
        }
        let state_keys = codec::encode_keys(next, self.size_hint)?;
        let (root, keys_hash) = codec::state_root_parts(&state_keys);
        line.root = Some(root);
        let text =
            serde_json::to_string(&line).map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
        let hash = log::line_hash(text.as_bytes());
        let views = self.views.take();
        self.store.append(
            &self.id,
            &Commit {
                line: &text,
                hash: &hash,
                state: &self.state,
                state_keys: &state_keys,
                keys_hash,
                archive_before,
                views: views.as_deref(),
            },
        )?;
        self.head = hash;
        self.appended = true;
        self.written = line.root.map(|root| Written { keys: state_keys, root });
        Ok(receipt)
    }

    /// What committing `event` would return, without writing anything (for `--dry-run`).
    pub fn preview<T>(
        &self,
        actor: &str,
        event: Event,
        body: impl FnOnce(&GoalState) -> Result<T>,
    ) -> Result<Receipt<T>> {
        let line = EventLine {
            seq: self.state.seq + 1,
            at: self.store.clock().now(),
            actor: actor.to_owned(),
            event,
            turn: None,
            receipt: None,
            root: None,
            prev: self.head.clone(),
            signature: None,
        };
        let mut next = self.state.clone();
        next.apply(&line).map_err(|e| Error::internal(format!("cannot apply own event: {e}")))?;
        Ok(Receipt {
            goal_id: self.id.clone(),
            seq: self.state.seq,
            changed: false,
            body: body(&next)?,
            replayed: false,
        })
    }

    /// The log head before this transaction's commit (or after it).
    pub fn seq(&self) -> u64 {
        self.state.seq
    }

    /// The state and head the transaction ends with, for a store that keeps its state between
    /// transactions: the loaded ones when nothing was committed, the new ones after a commit,
    /// `None` when a commit failed part way (the state was changed in place, the log was not).
    pub fn finish(self) -> Option<(GoalState, String)> {
        (!self.committed || self.appended).then_some((self.state, self.head))
    }

    /// [`Txn::finish`]'s state, with what its commit wrote of it (`None` without a commit).
    pub(super) fn finish_written(self) -> Option<(GoalState, Option<Written>)> {
        (!self.committed || self.appended).then_some((self.state, self.written))
    }
}

/// The receipt stored under `key` (`scope:actor:turn#fingerprint`). The same turn used for a
/// different request (another fingerprint) is refused rather than silently replayed.
pub(crate) fn stored_receipt<T: DeserializeOwned>(
    state: &GoalState,
    key: &str,
    body: impl FnOnce(&GoalState) -> Result<T>,
) -> Result<Option<Receipt<T>>> {
    match state.receipts.get(key) {
        Some(StoredReceipt { receipt: Some(receipt), .. }) => {
            let mut r: Receipt<T> = receipt.decode().map_err(|e| {
                Error::integrity(format!("the stored receipt for {key:?} does not decode: {e}"))
            })?;
            r.replayed = true;
            return Ok(Some(r));
        }
        Some(StoredReceipt { seq, receipt: None }) => {
            let body = body(state)?;
            return Ok(Some(Receipt {
                goal_id: state.goal.id.clone(),
                seq: *seq,
                changed: true,
                body,
                replayed: true,
            }));
        }
        None => {}
    }
    let base = key.split_once('#').map_or(key, |(b, _)| b);
    let prefix = format!("{base}#");
    if state.receipts.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix)) {
        let turn = base.rsplit(':').next().unwrap_or(base);
        return Err(Error::refused(format!("turn {turn} was already used for a different request"))
            .with_hint("a replay must repeat the same command; use a new --turn-instance-id for new work"));
    }
    Ok(None)
}
