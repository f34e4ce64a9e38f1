//! Time as data. Core never reads a clock: the caller passes a [`Clock`].

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;

/// A point in time with millisecond precision, serialised as RFC 3339 UTC
/// (`2026-11-29T15:39:49.123Z`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Timestamp {
    millis: i64,
}

impl Timestamp {
    pub const fn from_unix_millis(millis: i64) -> Self {
        Self { millis }
    }
    pub const fn unix_millis(self) -> i64 {
        self.millis
    }
    pub fn from_system_time(t: SystemTime) -> Self {
        let millis = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Self { millis }
    }
    fn to_system_time(self) -> SystemTime {
        if self.millis >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.millis.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(self.millis.unsigned_abs())
        }
    }
    /// Parses RFC 3339 (`2026-11-29T15:39:49Z`, with or without fractional seconds).
    pub fn parse_rfc3339(s: &str) -> Result<Self, Error> {
        humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
            .or_else(|_| humantime::parse_rfc3339(s))
            .map(Self::from_system_time)
            .map_err(|e| {
                Error::usage(format!("invalid time {s:?}: {e}"))
                    .with_hint("use RFC 3339 UTC, e.g. 2026-11-29T18:00:00Z")
            })
    }
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self { millis: self.millis.saturating_add(ms) }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_rfc3339_millis(self.to_system_time()))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::parse_str(d, |s| {
            humantime::parse_rfc3339(s).map(Self::from_system_time).map_err(|e| e.to_string())
        })
    }
}

/// Parses a human duration such as `45m`, `2h`, `1h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    humantime::parse_duration(s).map_err(|e| {
        Error::usage(format!("invalid duration {s:?}: {e}")).with_hint("use e.g. 45m, 2h or 1h30m")
    })
}

/// The source of "now". Kernel commands take one so that tests and replays control time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// A clock that always says the same time; for tests and deterministic replays.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::parse_rfc3339("2026-11-29T15:39:49.123Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-29T15:39:49.123Z");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        assert_eq!(Timestamp::parse_rfc3339("2026-11-29T15:39:49Z").unwrap().unix_millis() % 1000, 0);
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(45 * 60));
        assert!(parse_duration("soon").is_err());
    }
}
