//! The agent-type catalog.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::ids::quote_input;

/// The kind of host an agent acts through. A fixed catalog: new hosts are added here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentType {
    ClaudeCode,
    CodexApp,
    CodexCli,
    CodexIde,
    Cursor,
    Manual,
    Other,
}

/// One row of the catalog, as `loopx agent types` shows it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AgentTypeInfo {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub description: &'static str,
}

impl AgentType {
    pub const ALL: [AgentType; 7] = [
        AgentType::ClaudeCode,
        AgentType::CodexApp,
        AgentType::CodexCli,
        AgentType::CodexIde,
        AgentType::Cursor,
        AgentType::Manual,
        AgentType::Other,
    ];

    pub fn info(self) -> AgentTypeInfo {
        let (name, aliases, description): (_, &'static [&'static str], _) = match self {
            AgentType::ClaudeCode => ("claude-code", &["cc", "claude"], "Claude Code (CLI or IDE)"),
            AgentType::CodexApp => ("codex-app", &[], "Codex App, driven by a heartbeat automation"),
            AgentType::CodexCli => ("codex-cli", &[], "Codex CLI, driven by /goal"),
            AgentType::CodexIde => ("codex-ide", &[], "Codex in an IDE extension"),
            AgentType::Cursor => ("cursor", &[], "Cursor agent, wired by hand"),
            AgentType::Manual => ("manual", &["human"], "a person working the todos by hand"),
            AgentType::Other => ("other", &["custom"], "any other runner"),
        };
        AgentTypeInfo { name, aliases, description }
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for AgentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AgentType {
    type Err = Error;

    /// Accepts a catalog name or alias, case-insensitively, with `_` for `-`. A prefix that
    /// names several types (`codex`) fails closed, listing the candidates.
    fn from_str(input: &str) -> Result<Self, Error> {
        let s = input.trim().to_ascii_lowercase().replace('_', "-");
        if let Some(t) =
            Self::ALL.into_iter().find(|t| t.info().name == s || t.info().aliases.contains(&s.as_str()))
        {
            return Ok(t);
        }
        let names = || Self::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
        let candidates: Vec<&str> =
            Self::ALL.iter().map(|t| t.name()).filter(|n| !s.is_empty() && n.starts_with(&s)).collect();
        match candidates.as_slice() {
            [only] => Err(Error::usage(format!("unknown agent type {}", quote_input(input)))
                .with_hint(format!("did you mean --agent-type {only}?"))),
            [] => Err(Error::usage(format!("unknown agent type {}", quote_input(input)))
                .with_hint(format!("choose one of: {}", names()))),
            many => Err(Error::usage(format!(
                "agent type {} is ambiguous: it could be {}",
                quote_input(input),
                many.join(", ")
            ))
            .with_hint(format!("pass the exact type, e.g. --agent-type {}", many[0]))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_resolve() {
        assert_eq!("claude-code".parse::<AgentType>().unwrap(), AgentType::ClaudeCode);
        assert_eq!("cc".parse::<AgentType>().unwrap(), AgentType::ClaudeCode);
        assert_eq!("Codex_App".parse::<AgentType>().unwrap(), AgentType::CodexApp);
    }

    #[test]
    fn ambiguous_input_fails_closed_listing_candidates() {
        let err = "codex".parse::<AgentType>().unwrap_err();
        assert!(err.message.contains("codex-app, codex-cli, codex-ide"), "{}", err.message);
        let err = "robot".parse::<AgentType>().unwrap_err();
        assert!(err.hint.unwrap().contains("claude-code"));
        assert!("".parse::<AgentType>().is_err());
    }
}
