//! The quota ledger: slots spent in a rolling window, and the hard budget. Pure.

use loopx_core::Timestamp;
use loopx_core::decision::QuotaView;

use crate::state::GoalState;

fn window_ms(state: &GoalState) -> i64 {
    i64::from(state.goal.quota.window_hours) * 3600 * 1000
}

/// Slots spent inside the window ending at `now`.
pub fn used_slots(state: &GoalState, now: Timestamp) -> u32 {
    let since = now.unix_millis().saturating_sub(window_ms(state));
    state.spends.iter().filter(|s| !s.voided && s.at.unix_millis() > since).map(|s| s.slots).sum()
}

/// When enough spends leave the window for one slot to be free, if none is free now.
pub fn next_slot_at(state: &GoalState, now: Timestamp) -> Option<Timestamp> {
    let allowed = state.goal.quota.effective_allowed_slots();
    let used = used_slots(state, now);
    if used < allowed || allowed == 0 {
        return None;
    }
    let need = used - allowed + 1;
    let since = now.unix_millis().saturating_sub(window_ms(state));
    let mut freed = 0u32;
    for s in state.spends.iter().filter(|s| !s.voided && s.at.unix_millis() > since) {
        freed += s.slots;
        if freed >= need {
            return Some(Timestamp::from_unix_millis(s.at.unix_millis() + window_ms(state)));
        }
    }
    None
}

pub fn is_paused(state: &GoalState) -> bool {
    state.goal.quota.compute <= 0.0
}

pub(crate) fn is_throttled(state: &GoalState, now: Timestamp) -> bool {
    used_slots(state, now) >= state.goal.quota.effective_allowed_slots()
}

pub fn budget_exhausted(state: &GoalState) -> bool {
    let q = &state.goal.quota;
    q.budget_tokens.is_some_and(|b| state.tokens_used >= b)
        || q.budget_usd.is_some_and(|b| state.usd_used >= b)
}

pub fn view(state: &GoalState, now: Timestamp) -> QuotaView {
    let q = &state.goal.quota;
    QuotaView {
        compute: q.compute,
        window_hours: q.window_hours,
        slot_minutes: q.slot_minutes,
        allowed_slots: q.effective_allowed_slots(),
        used_slots: used_slots(state, now),
        next_slot_at: next_slot_at(state, now),
        tokens_used: state.tokens_used,
        budget_tokens: q.budget_tokens,
        usd_used: (state.usd_used * 1e6).round() / 1e6,
        budget_usd: q.budget_usd,
    }
}
