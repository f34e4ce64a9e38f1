//! loopx-core: the domain types, traits, typed continuations, wire types and error kinds of
//! loopx. No file, network or clock I/O happens here; time comes in through a [`Clock`].

pub mod agent;
pub mod continuation;
pub mod decision;
pub mod drive;
pub mod error;
pub mod event;
pub mod host;
pub mod ids;
pub mod kernel;
pub mod line;
pub mod model;
pub mod next;
pub mod person_only;
pub mod prose;
pub mod time;
pub mod traits;
pub mod untrusted;

pub use agent::AgentType;
pub use error::{Error, ErrorKind, Result, exit};
pub use ids::{AgentId, EvidenceId, GateId, GoalId, HandoffId, IdempotencyKey, RunId, SpendId, TodoId};
pub use time::{Clock, FixedClock, ManualClock, Timestamp};
