//! loopx-machine: what belongs to this machine and its person rather than to a goal's state:
//! the stores this machine trusts ([`trusted`]), the webhook URLs the person keeps out of the
//! project ([`webhooks`]), the index of the person's projects and their inbox ([`projects`]),
//! and moving a project's state from one store to another ([`migrate`]). Its files live in the
//! person's configuration directory, which the caller names; a goal's state it reads and writes
//! only through the kernel (its `Store` and command surface) and writes files only through the
//! kernel's durable writes ([`loopx_kernel::fs`]).

pub mod init;
pub mod migrate;
pub mod person;
pub mod projects;
pub mod stores;
pub mod trusted;
pub mod webhooks;
