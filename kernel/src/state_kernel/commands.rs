//! The commands a goal names that loopx may run, and this machine's record of which it approves.

use loopx_core::{Error, GoalId, Result};

use crate::store::Store;

use super::StateKernel;

impl<S: Store> StateKernel<S> {
    /// This machine's record of the project's commands, when the runtime keeps one.
    fn approvals(&self) -> Option<crate::approvals::Approvals> {
        self.gates.commands.as_ref().map(|f| crate::approvals::Approvals::new(f.clone(), self.store.root()))
    }

    /// Why `argv`, written by `author`, may not run for `runner` now, if it may not.
    pub(crate) fn withheld(&self, argv: &[String], author: &str, runner: &str) -> Result<Option<String>> {
        match self.approvals() {
            None => Ok(None),
            Some(a) => Ok(a.may_run(argv, author, runner, self.gates.agent_tools)?.map(|w| w.why)),
        }
    }

    /// The commands the goal names that loopx may run: open todos' validations, open command
    /// gates' checks, the notify command; each with its author and this machine's record.
    pub fn commands(&self, goal: Option<&GoalId>) -> Result<Vec<crate::approvals::GoalCommand>> {
        use loopx_core::model::GateKind;
        let s = self.read(goal)?;
        let mut found: Vec<(String, Vec<String>, String)> = Vec::new();
        for t in s.todos.iter().filter(|t| !t.status.is_closed()) {
            if let Some(v) = &t.validation {
                found.push((format!("todo {}", t.id), v.argv.clone(), t.created_by.clone()));
            }
        }
        for g in s.gates.iter().filter(|g| g.status == loopx_core::model::GateStatus::Open) {
            if let GateKind::Command { argv, .. } = &g.kind {
                found.push((format!("gate {}", g.id), argv.clone(), g.asked_by.clone()));
            }
        }
        if let Some(argv) = s.goal.notify.as_ref().and_then(|n| n.command.clone()) {
            found.push(("notify".to_owned(), argv, "user".to_owned()));
        }
        if let Some(webhook) = s.goal.notify.as_ref().and_then(|n| n.webhook.as_deref()) {
            found.push(("notify webhook".to_owned(), crate::approvals::webhook(webhook), "user".to_owned()));
        }
        let approvals = self.approvals();
        found
            .into_iter()
            .map(|(at, argv, author)| {
                let here = approvals.as_ref().map(|a| a.lookup(&argv)).transpose()?.flatten();
                Ok(crate::approvals::GoalCommand {
                    at,
                    quoted: loopx_core::untrusted::shell_exact(&argv),
                    argv,
                    author,
                    here,
                })
            })
            .collect()
    }

    /// Records that this machine's person approves `argv` for the project; whether it was
    /// not approved before. Refused where the runtime keeps no record.
    pub fn approve_command(&self, argv: &[String]) -> Result<bool> {
        let a = self.approvals().ok_or_else(|| Error::internal("no record of commands is kept here"))?;
        a.approve(argv, self.now())
    }

    /// Notes that `by` wrote `argv` on this machine. The command is committed already: a
    /// record that cannot be written only withholds it until a person approves it, and is said.
    pub(super) fn wrote_command(&self, argv: &[String], by: &str) {
        if let Some(a) = self.approvals()
            && let Err(e) = a.written(argv, by, self.now())
        {
            self.store.reporter().warn(&format!(
                "could not record the command `{}` as written here ({}); it runs once a person approves it",
                loopx_core::untrusted::shell_exact(argv),
                e.message
            ));
        }
    }
}
