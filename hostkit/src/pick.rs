//! Which agent `loopx drive` runs, and on which host: the agent named (registered if new, its
//! type from the host), or the goal's only agent of the host's type, or a new one; a host that
//! cannot run its agent CLI unattended is refused with what to do instead.

use loopx_core::host::HostAdapter;
use loopx_core::kernel::{CommandContext, Kernel as _, RegisterAgent};
use loopx_core::{AgentId, AgentType, Error, GoalId, Result};
use loopx_kernel::DynKernel;

/// The hosts loopx knows (the registry's adapters).
pub type Adapters = &'static [&'static dyn HostAdapter];

/// The host a drive names: an adapter that can drive its CLI, or `other`.
pub fn host_of(adapters: Adapters, name: &str) -> Result<Option<&'static dyn HostAdapter>> {
    if name == "other" {
        return Ok(None);
    }
    let adapter = adapters.iter().copied().find(|a| a.host() == name).ok_or_else(|| {
        let hosts: Vec<&str> =
            adapters.iter().filter(|a| a.protocol().driver().is_some()).map(|a| a.host()).collect();
        Error::usage(format!("loopx has no adapter for host {name:?}"))
            .with_hint(format!("--host {} or other", hosts.join(", --host ")))
    })?;
    if adapter.protocol().driver().is_none() {
        return Err(Error::usage(format!("loopx cannot run {name}'s agent CLI unattended yet"))
            .with_hint("drive it as any command: --host other -- <its command>"));
    }
    Ok(Some(adapter))
}

/// The adapter that drives agents of `t`, if one does.
fn host_for_type(adapters: Adapters, t: AgentType) -> Option<&'static dyn HostAdapter> {
    adapters.iter().copied().find(|a| a.protocol().driver().is_some_and(|d| d.agent_type() == t))
}

/// The agent to drive and its host: the one named (registered if new, its type from the
/// host), or the goal's only agent of the host's type, or a new one.
pub async fn agent_and_host(
    k: &DynKernel,
    adapters: Adapters,
    goal: &GoalId,
    agent_id: Option<&str>,
    host: Option<&str>,
) -> Result<(AgentId, Option<&'static dyn HostAdapter>)> {
    let agents = k.list_agents(Some(goal)).await?.agents;
    let named_host = host.map(|h| host_of(adapters, h)).transpose()?;
    let type_of = |h: Option<&'static dyn HostAdapter>| {
        h.and_then(|h| h.protocol().driver()).map_or_else(AgentType::other, |d| d.agent_type())
    };
    let (agent, host) = match (agent_id, named_host) {
        (Some(id), h) => {
            let id = AgentId::new_registrable(id)?;
            let host = match (h, agents.iter().find(|x| x.id == id)) {
                // `--host` named (other: the command as given).
                (Some(h), _) => h,
                (None, Some(known)) => host_for_type(adapters, known.agent_type.clone()),
                (None, None) => None,
            };
            (id, host)
        }
        (None, h) => {
            let h = h.flatten();
            let want = type_of(h);
            let same: Vec<&AgentId> = agents.iter().filter(|x| x.agent_type == want).map(|x| &x.id).collect();
            match same.as_slice() {
                [one] => ((*one).clone(), h),
                [] => {
                    let prefix = h.map_or("agent", |h| h.agent_prefix());
                    let free = (1..)
                        .map(|n| format!("{prefix}-{n}"))
                        .find(|id| !agents.iter().any(|x| x.id.as_str() == id));
                    (AgentId::new_registrable(&free.unwrap_or_default())?, h)
                }
                many => {
                    let ids: Vec<&str> = many.iter().map(|x| x.as_str()).collect();
                    return Err(Error::usage(format!(
                        "goal {goal} has {} {want} agents ({}); say which one to drive",
                        many.len(),
                        ids.join(", ")
                    ))
                    .with_hint(format!("loopx drive --agent-id {} …", ids[0])));
                }
            }
        }
    };
    let agent_type = type_of(host);
    let ctx =
        CommandContext { goal: Some(goal.clone()), agent: Some(agent.clone()), ..CommandContext::default() };
    match agents.iter().find(|x| x.id == agent) {
        Some(known) if host.is_some() && known.agent_type != agent_type => {
            return Err(Error::usage(format!(
                "agent {agent} is a {} agent; --host {} drives {agent_type} agents",
                known.agent_type,
                host.map_or("other", |h| h.host())
            ))
            .with_hint("drive it with --host other, or drive another agent with --agent-id"));
        }
        Some(_) => {}
        None => {
            k.register_agent(&ctx, RegisterAgent { id: agent.clone(), agent_type, require_new: false })
                .await?;
        }
    }
    Ok((agent, host))
}
