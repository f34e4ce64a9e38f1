//! loopx-machine: what belongs to this machine and its person rather than to a goal's state:
//! which database a project may reach from here and with what password ([`stores`], and the
//! list of those trusted, [`trusted`]), the person key's sealed file ([`person`]), the webhook
//! URLs the person keeps out of the project ([`webhooks`]), the index of the person's projects
//! and their inbox ([`projects`]), moving a project's state from one store to another
//! ([`migrate`]), starting work ([`init`], shared by `loopx init` and a host's `/loopx`), and
//! `loopx demo`, a scripted goal worked to its end in a project of its own ([`demo`]). Its
//! files live in the person's configuration directory, which the caller names; a goal's state
//! it reads and writes only through the kernel (its `Store` and command surface) and writes
//! files only through the kernel's durable writes ([`loopx_kernel::fs`]) — but for the demo,
//! whose scripted agent writes a file of its work into the demo's temporary project, and which
//! removes that project when it is done. What it would read from the machine's environment
//! (the directory, the time, the passwords, the process runner) the caller hands in.

pub mod demo;
pub mod init;
pub mod migrate;
pub mod person;
pub mod projects;
pub mod stores;
pub mod trusted;
pub mod webhooks;
