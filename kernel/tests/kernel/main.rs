//! The kernel's tests, one test binary: the decision table, the rules, the log, the drive
//! rules, sessions, strict mode, the todo table and the glance, each over the kernel's own
//! library (no binary, no process).

mod support;

mod decision_table;
mod drive;
mod glance;
mod goal_md;
mod log_lines;
mod rules;
mod sessions;
mod strict;
mod table;
