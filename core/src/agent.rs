//! The host catalog: what kinds of host an agent acts through, and how each paces its loop.
//!
//! The catalog is open. An agent's type is a validated name ([`AgentType`]); the hosts loopx
//! knows are declared by their adapters ([`HostType`]: name, aliases, description, cadence)
//! and gathered into a [`HostCatalog`] by whoever wires the adapters in. The state and the
//! rules know no host by name: a log naming a host this loopx has no adapter for reads, keeps
//! and shows it, paced by the generic cadence. Two types are built in because they are no host:
//! [`AgentType::manual`] (a person working the todos) and [`AgentType::other`] (any other
//! runner).

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;
use crate::ids::quote_input;

/// Whether `s` is a well-formed name: 1 to 40 of `a-z`, `0-9` and `sep`, starting with a
/// letter, `sep` neither last nor doubled.
const fn well_formed(s: &str, sep: u8) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 40 || !b[0].is_ascii_lowercase() || b[b.len() - 1] == sep {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let ok = c.is_ascii_lowercase() || c.is_ascii_digit() || (c == sep && b[i - 1] != sep);
        if !ok {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! open_name {
    ($(#[$doc:meta])* $name:ident, $what:literal, $sep:literal, $example:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Cow<'static, str>);

        impl $name {
            /// A name known when loopx is built. Panics on a malformed one (at compile time
            /// where it is a constant).
            pub const fn from_static(name: &'static str) -> Self {
                assert!(well_formed(name, $sep), "a malformed name");
                Self(Cow::Borrowed(name))
            }

            /// A name given at run time, checked.
            pub fn new(name: &str) -> Result<Self, Error> {
                if well_formed(name, $sep) {
                    Ok(Self(Cow::Owned(name.to_owned())))
                } else {
                    Err(Error::usage(format!("invalid {} {}", $what, quote_input(name))).with_hint(format!(
                        "a {} is 1 to 40 lowercase letters, digits and {:?}, starting with a letter, e.g. {}",
                        $what, $sep as char, $example
                    )))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// As written, padded and aligned as asked (`{:<12}`).
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        /// Any well-formed name reads, whether or not this loopx knows it.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Cow::<'de, str>::deserialize(d)?;
                Self::new(&s).map_err(|e| serde::de::Error::custom(e.message))
            }
        }
    };
}

open_name!(
    /// The kind of host an agent acts through: `claude-code`, `codex-app`, `manual`, … An open,
    /// validated name, stored as it is written.
    AgentType,
    "agent type",
    b'-',
    "my-host"
);

open_name!(
    /// How a host drives an agent's turns (`claude_loop`, `codex_heartbeat`, `generic`): the
    /// name of its [`Cadence`], shown in the scheduler hint.
    RuntimeProfile,
    "runtime profile",
    b'_',
    "generic"
);

impl AgentType {
    /// A person working the todos by hand.
    pub const fn manual() -> Self {
        Self::from_static("manual")
    }

    /// Any other runner: no host loopx has an adapter for.
    pub const fn other() -> Self {
        Self::from_static("other")
    }

    /// The name, as stored and shown.
    pub fn name(&self) -> &str {
        self.as_str()
    }
}

/// How a host's loop is paced: what the scheduler hint tells an agent of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cadence {
    pub profile: RuntimeProfile,
    /// Minutes between polls while there is work or a wait with a time; `None`: the host is
    /// not polled (a person starts each turn).
    pub base_minutes: Option<u32>,
    /// Polls in a row that find nothing changed before the loop is told to stop until
    /// resumed; `None`: no limit.
    pub unchanged_poll_limit: Option<u32>,
    /// Whether the host schedules by an RFC 5545 rule (`FREQ=MINUTELY;INTERVAL=n`), which the
    /// hint then carries.
    pub rrule: bool,
}

impl Cadence {
    /// Any runner loopx knows nothing about: polled every 3 minutes, no limit.
    pub const fn generic() -> Self {
        Cadence {
            profile: RuntimeProfile::from_static("generic"),
            base_minutes: Some(3),
            unchanged_poll_limit: None,
            rrule: false,
        }
    }

    /// A person working by hand: never polled.
    pub const fn manual() -> Self {
        Cadence {
            profile: RuntimeProfile::from_static("manual"),
            base_minutes: None,
            unchanged_poll_limit: None,
            rrule: false,
        }
    }
}

/// One row of the catalog, as an adapter declares it and `loopx agent types` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostType {
    pub name: AgentType,
    /// Other names accepted for it (`cc` for `claude-code`).
    pub aliases: Vec<&'static str>,
    pub description: &'static str,
    #[serde(skip)]
    pub cadence: Cadence,
}

/// The host types one loopx knows: the built-in `manual` and `other`, and what its adapters
/// declare.
#[derive(Clone, Debug)]
pub struct HostCatalog {
    types: Vec<HostType>,
}

impl Default for HostCatalog {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl HostCatalog {
    /// The catalog of `declared` types (in order), then the built-in ones. A type declared
    /// twice keeps its first declaration.
    pub fn new(declared: Vec<HostType>) -> Self {
        let builtin = [
            HostType {
                name: AgentType::manual(),
                aliases: vec!["human"],
                description: "a person working the todos by hand",
                cadence: Cadence::manual(),
            },
            HostType {
                name: AgentType::other(),
                aliases: vec!["custom"],
                description: "any other runner",
                cadence: Cadence::generic(),
            },
        ];
        let mut types: Vec<HostType> = Vec::new();
        for t in declared.into_iter().chain(builtin) {
            if !types.iter().any(|k| k.name == t.name) {
                types.push(t);
            }
        }
        Self { types }
    }

    pub fn types(&self) -> &[HostType] {
        &self.types
    }

    pub fn get(&self, name: &AgentType) -> Option<&HostType> {
        self.types.iter().find(|t| &t.name == name)
    }

    /// How agents of `t` are paced: as its adapter declares, or generically for a type this
    /// loopx does not know.
    pub fn cadence(&self, t: &AgentType) -> Cadence {
        self.get(t).map_or_else(Cadence::generic, |h| h.cadence.clone())
    }

    /// The cadence named `profile`, among those the catalog's types declare.
    pub fn cadence_named(&self, profile: &str) -> Result<Cadence, Error> {
        let profile = profile.trim().to_ascii_lowercase();
        let mut known: Vec<&str> = Vec::new();
        for c in self.types.iter().map(|t| &t.cadence) {
            if c.profile.as_str() == profile {
                return Ok(c.clone());
            }
            if !known.contains(&c.profile.as_str()) {
                known.push(c.profile.as_str());
            }
        }
        Err(Error::usage(format!("invalid runtime profile {}", quote_input(&profile)))
            .with_hint(format!("choose one of: {}", known.join(", "))))
    }

    /// Resolves what a person typed: a catalog name or alias, case-insensitively, with `_` for
    /// `-`. A prefix that names several types (`codex`) fails closed, listing the candidates.
    pub fn resolve(&self, input: &str) -> Result<AgentType, Error> {
        let s = input.trim().to_ascii_lowercase().replace('_', "-");
        if let Some(t) = self.types.iter().find(|t| t.name.as_str() == s || t.aliases.contains(&s.as_str())) {
            return Ok(t.name.clone());
        }
        let names = || self.types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
        let candidates: Vec<&str> = self
            .types
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !s.is_empty() && n.starts_with(&s))
            .collect();
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

    fn catalog() -> HostCatalog {
        let t = |name: &'static str, aliases: Vec<&'static str>| HostType {
            name: AgentType::from_static(name),
            aliases,
            description: "",
            cadence: Cadence::generic(),
        };
        HostCatalog::new(vec![
            t("claude-code", vec!["cc", "claude"]),
            t("codex-app", vec![]),
            t("codex-cli", vec![]),
        ])
    }

    #[test]
    fn names_and_aliases_resolve() {
        let c = catalog();
        assert_eq!(c.resolve("claude-code").unwrap().as_str(), "claude-code");
        assert_eq!(c.resolve("cc").unwrap().as_str(), "claude-code");
        assert_eq!(c.resolve("Codex_App").unwrap().as_str(), "codex-app");
        assert_eq!(c.resolve("human").unwrap(), AgentType::manual());
    }

    #[test]
    fn ambiguous_input_fails_closed_listing_candidates() {
        let c = catalog();
        let err = c.resolve("codex").unwrap_err();
        assert!(err.message.contains("codex-app, codex-cli"), "{}", err.message);
        let err = c.resolve("robot").unwrap_err();
        assert!(err.hint.unwrap().contains("claude-code"));
        assert!(c.resolve("").is_err());
    }

    #[test]
    fn any_well_formed_name_reads_and_writes_as_it_is() {
        let t: AgentType = serde_json::from_str("\"gemini-cli\"").unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"gemini-cli\"");
        assert_eq!(catalog().cadence(&t), Cadence::generic(), "an unknown host is paced generically");
        for bad in ["\"\"", "\"Claude\"", "\"a b\"", "\"-x\"", "\"x-\"", "\"a--b\"", "\"1x\"", "3"] {
            assert!(serde_json::from_str::<AgentType>(bad).is_err(), "{bad}");
        }
        assert_eq!(format!("[{:<8}]", AgentType::other()), "[other   ]", "padded like a str");
        assert!(RuntimeProfile::new("codex_heartbeat").is_ok());
        assert!(RuntimeProfile::new("codex-heartbeat").is_err());
    }
}
