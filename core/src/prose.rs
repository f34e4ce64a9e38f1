//! The words of a continuation: what a host shows the model when loopx keeps it working.
//! Host-neutral; a host's vocabulary (how it names loopx's MCP tools) comes in as `tool`.

use crate::decision::{DecisionKind, ShouldRunAnswer};
use crate::untrusted::{flatten, quoted};

/// The next instruction for a `run` or `replan` answer (for anything else, its reason).
pub fn continuation(answer: &ShouldRunAnswer, tool: &dyn Fn(&str) -> String) -> String {
    let who = answer.agent_id.as_ref().map_or_else(|| "loopx".to_owned(), |a| format!("loopx ({a})"));
    match (&answer.decision, &answer.selected_todo) {
        (DecisionKind::Run, Some(t)) => {
            let claim = if t.claim_required {
                format!("Claim it first ({}, todo_id {}). ", tool("claim_task"), t.id)
            } else {
                String::new()
            };
            format!(
                "{who}: continue with {} ({}): {}. {claim}Do one bounded, verified slice, then call {} (todo_id {}, a new turn_id, evidence).",
                t.id,
                t.priority,
                quoted(&t.text, 400),
                tool("complete_task"),
                t.id
            )
        }
        (DecisionKind::Replan, _) => {
            let agent = answer.agent_id.as_ref().map_or("<you>", |a| a.as_str());
            format!(
                "{who}: {}. Add the next todos (loopx todo add --agent-id {agent} --text \"…\") or close the goal's last todo with --no-follow-up.",
                flatten(&answer.reason, 600)
            )
        }
        _ => format!("{who}: {}", flatten(&answer.reason, 600)),
    }
}
