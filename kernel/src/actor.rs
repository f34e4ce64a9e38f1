//! Who a command acts as: a person or a registered agent.

use loopx_core::AgentId;

/// Who a command acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A person.
    User,
    /// A registered agent.
    Agent(AgentId),
}

impl Actor {
    pub fn name(&self) -> &str {
        match self {
            Actor::User => "user",
            Actor::Agent(a) => a.as_str(),
        }
    }
    pub fn agent(&self) -> Option<&AgentId> {
        match self {
            Actor::User => None,
            Actor::Agent(a) => Some(a),
        }
    }
}
