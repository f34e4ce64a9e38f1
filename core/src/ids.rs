//! Identifiers. Every id is validated when it is made, so a value of these types is always
//! safe to use as a file name or a map key: `../x`, an empty string or 10 KB of text never
//! becomes an id.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A malformed id: what is wrong and how to write one, which a command shows as a usage error
/// (`Error` is made from it). Its own type, so ids need nothing of the errors that name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidId {
    pub message: String,
    pub hint: String,
}

impl InvalidId {
    fn usage(message: impl Into<String>) -> Self {
        Self { message: message.into(), hint: String::new() }
    }

    fn with_hint(self, hint: impl Into<String>) -> Self {
        Self { hint: hint.into(), ..self }
    }
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InvalidId {}

/// Longest name id (goal, agent): 64 characters, as in `^[a-z][a-z0-9._-]{0,63}$`.
pub const MAX_NAME_ID_LEN: usize = 64;
/// Longest turn id or idempotency key.
pub const MAX_KEY_LEN: usize = 128;

fn check_name(what: &str, flag: &str, s: &str) -> Result<(), InvalidId> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_ID_LEN
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(InvalidId::usage(format!("invalid {what} {}", quote_input(s)))
            .with_hint(format!(
                "{flag} must start with a lowercase letter and use only a-z, 0-9, '.', '_' or '-' (at most {MAX_NAME_ID_LEN} characters), e.g. {flag} my-{what}",
                what = what.split(' ').next().unwrap_or(what)
            )))
    }
}

/// Quotes user input for an error message, cut to a readable length.
pub fn quote_input(s: &str) -> String {
    const SHOWN: usize = 40;
    if s.chars().count() > SHOWN {
        let head: String = s.chars().take(SHOWN).collect();
        format!("{head:?}… ({} bytes)", s.len())
    } else {
        format!("{s:?}")
    }
}

macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $flag:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `s` and makes the id.
            pub fn new(s: &str) -> Result<Self, InvalidId> {
                check_name($what, $flag, s)?;
                Ok(Self(s.to_owned()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Self::new(s)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_id!(
    /// A goal id, `^[a-z][a-z0-9._-]{0,63}$`. Names a directory under `.loopx/goals/`.
    GoalId, "goal id", "--goal-id"
);
name_id!(
    /// An agent id, `^[a-z][a-z0-9._-]{0,63}$`. `user` and `loopx` are reserved actors.
    AgentId, "agent id", "--agent-id"
);

impl GoalId {
    /// `main`: the goal a project's first goal is called when nobody names one.
    pub fn main() -> Self {
        Self("main".to_owned())
    }
}

impl AgentId {
    /// Actor names that are never agents: people act as `user`, the kernel as `loopx`.
    pub const RESERVED: [&'static str; 2] = ["user", "loopx"];

    /// `user`: the actor a person acts as.
    pub fn user() -> Self {
        Self("user".to_owned())
    }

    /// Validates an id for registration: the pattern, and not a reserved actor name.
    pub fn new_registrable(s: &str) -> Result<Self, InvalidId> {
        let id = Self::new(s)?;
        if Self::RESERVED.contains(&s) {
            return Err(InvalidId::usage(format!("agent id {s:?} is reserved"))
                .with_hint("choose another --agent-id, e.g. --agent-id agent-2"));
        }
        Ok(id)
    }
}

macro_rules! seq_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u64);

        impl $name {
            /// The id with sequence number `n` (1-based).
            pub fn from_number(n: u64) -> Self {
                Self(n)
            }
            /// The 1-based sequence number.
            pub fn number(self) -> u64 {
                self.0
            }
        }
        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                s.strip_prefix($prefix)
                    .filter(|d| !d.is_empty() && d.len() <= 12 && !d.starts_with('0'))
                    .and_then(|d| d.parse::<u64>().ok())
                    .map(Self)
                    .ok_or_else(|| {
                        InvalidId::usage(format!("invalid {} {}", $what, quote_input(s))).with_hint(
                            format!("{} ids look like {}1, {}2, …", $what, $prefix, $prefix),
                        )
                    })
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0)
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                crate::ids::parse_str(d, |s| s.parse().map_err(|e: InvalidId| e.message))
            }
        }
    };
}

/// Deserializes a string through `parse` without copying it when the input lends it (ids and
/// times are read by the ten thousand when a large state loads).
pub(crate) fn parse_str<'de, D, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct V<T>(fn(&str) -> Result<T, String>);
    impl<T> serde::de::Visitor<'_> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
            (self.0)(s).map_err(E::custom)
        }
    }
    d.deserialize_str(V(parse))
}

seq_id!(
    /// A todo id, `t1`, `t2`, … numbered per goal in creation order.
    TodoId, "t", "todo"
);
seq_id!(
    /// An evidence id, `e1`, `e2`, … numbered per goal.
    EvidenceId, "e", "evidence"
);
seq_id!(
    /// A gate id, `g1`, `g2`, … numbered per goal.
    GateId, "g", "gate"
);
seq_id!(
    /// A handoff id, `h1`, `h2`, … numbered per goal.
    HandoffId, "h", "handoff"
);
seq_id!(
    /// A run record id, `r1`, `r2`, …: one per `refresh-state` writeback.
    RunId, "r", "run"
);
seq_id!(
    /// A spend id, `s1`, `s2`, …: one per `quota spend-slot`.
    SpendId, "s", "spend"
);

/// A turn id or idempotency key: 1–128 characters of `A-Z a-z 0-9 . _ : -`.
/// A mutation carrying one is applied at most once; a replay returns the first receipt.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(s: &str) -> Result<Self, InvalidId> {
        let ok = !s.is_empty()
            && s.len() <= MAX_KEY_LEN
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidId::usage(format!("invalid turn id or idempotency key {}", quote_input(s)))
                .with_hint(format!(
                    "use 1-{MAX_KEY_LEN} characters of A-Z, a-z, 0-9, '.', '_', ':' or '-', e.g. --turn-instance-id turn-42"
                )))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_ids_follow_the_pattern() {
        for ok in ["a", "main", "goal-1", "x.y_z", &"a".repeat(64)] {
            assert!(GoalId::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../x", "has space", "Upper", "1abc", "-a", "a/b", &"a".repeat(65), "é"] {
            assert!(GoalId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reserved_actors_are_not_registrable() {
        assert!(AgentId::new("user").is_ok());
        assert!(AgentId::new_registrable("user").is_err());
        assert!(AgentId::new_registrable("loopx").is_err());
        assert!(AgentId::new_registrable("claude-1").is_ok());
    }

    #[test]
    fn sequence_ids_round_trip() {
        let t: TodoId = "t42".parse().unwrap();
        assert_eq!(t.number(), 42);
        assert_eq!(t.to_string(), "t42");
        for bad in ["t", "t0", "t01", "42", "e1", "t-1", "t1x", "t99999999999999"] {
            assert!(bad.parse::<TodoId>().is_err(), "{bad}");
        }
        assert_eq!("e7".parse::<EvidenceId>().unwrap().to_string(), "e7");
    }

    #[test]
    fn keys_refuse_spaces_and_long_input() {
        assert!(IdempotencyKey::new("turn-1:a.b_c").is_ok());
        assert!(IdempotencyKey::new("turn 1").is_err());
        assert!(IdempotencyKey::new("").is_err());
        assert!(IdempotencyKey::new(&"k".repeat(129)).is_err());
    }
}
