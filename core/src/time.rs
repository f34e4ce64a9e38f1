//! Time as data. Core never reads a clock: the caller passes a [`Clock`].

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;

/// A point in time with millisecond precision, serialised as RFC 3339 UTC
/// (`2026-11-29T15:39:49.123Z`). Always between [`Timestamp::MIN`] and [`Timestamp::MAX`]
/// (years 1 to 9999, what RFC 3339 can write): arithmetic past them stops there.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Timestamp {
    millis: i64,
}

/// 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z, in milliseconds since 1970.
const MIN_MILLIS: i64 = -62_135_596_800_000;
const MAX_MILLIS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The first moment RFC 3339 can write: 0001-01-01T00:00:00Z.
    pub const MIN: Timestamp = Timestamp { millis: MIN_MILLIS };
    /// The last: 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp { millis: MAX_MILLIS };

    /// The time `millis` after 1970 (before, when negative), kept within [`Timestamp::MIN`]
    /// and [`Timestamp::MAX`].
    pub const fn from_unix_millis(millis: i64) -> Self {
        let millis = if millis < MIN_MILLIS {
            MIN_MILLIS
        } else if millis > MAX_MILLIS {
            MAX_MILLIS
        } else {
            millis
        };
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
        Self::from_unix_millis(millis)
    }
    /// Parses RFC 3339 (`2026-11-29T15:39:49Z`, with or without fractional seconds; an offset
    /// such as `+08:00` is taken away; without a zone the time is UTC), years 1 to 9999.
    pub fn parse_rfc3339(s: &str) -> Result<Self, Error> {
        parse_rfc3339(s.trim()).map(|millis| Self { millis }).ok_or_else(|| {
            Error::usage(format!("invalid time {}", crate::ids::quote_input(s)))
                .with_hint("use RFC 3339 UTC, e.g. 2026-11-29T18:00:00Z")
        })
    }
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self::from_unix_millis(self.millis.saturating_add(ms))
    }
    /// `self` plus `d`, or `None` past [`Timestamp::MAX`].
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        let ms = i64::try_from(d.as_millis()).ok()?;
        self.millis.checked_add(ms).filter(|m| *m <= MAX_MILLIS).map(|millis| Self { millis })
    }
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `s` as digits only, as a number.
fn digits(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// Milliseconds since 1970 of an RFC 3339 time, or `None`: never a panic, whatever `s` is.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let (date, rest) = (s.get(..10)?, s.get(10..)?);
    let sep = rest.as_bytes().first()?;
    if !matches!(sep, b'T' | b't' | b' ')
        || date.as_bytes().get(4) != Some(&b'-')
        || date.as_bytes().get(7) != Some(&b'-')
    {
        return None;
    }
    let (y, mo, d) = (digits(&date[..4])?, digits(&date[5..7])?, digits(&date[8..10])?);
    let rest = &rest[1..];
    let (h, mi, sec) = (digits(rest.get(..2)?)?, digits(rest.get(3..5)?)?, digits(rest.get(6..8)?)?);
    if rest.as_bytes().get(2) != Some(&b':') || rest.as_bytes().get(5) != Some(&b':') {
        return None;
    }
    let mut rest = &rest[8..];
    let mut frac_ms = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 9 {
            return None;
        }
        let ms = format!("{:0<3}", &f[..n.min(3)]);
        frac_ms = i64::from(digits(&ms)?);
        rest = &f[n..];
    }
    let offset_min: i64 = match rest {
        "" | "Z" | "z" => 0,
        o if o.len() == 6 && matches!(o.as_bytes()[0], b'+' | b'-') && o.as_bytes()[3] == b':' => {
            let (oh, om) = (digits(&o[1..3])?, digits(&o[4..6])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = i64::from(oh * 60 + om);
            if o.starts_with('-') { -m } else { m }
        }
        _ => return None,
    };
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if y == 0
        || !(1..=12).contains(&mo)
        || d == 0
        || d > *month_days.get(mo as usize - 1)?
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + sec) - offset_min * 60;
    let millis = secs * 1000 + frac_ms;
    (MIN_MILLIS..=MAX_MILLIS).contains(&millis).then_some(millis)
}

/// The civil date of `days` since 1970-01-01 (proleptic Gregorian): year, month, day.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Timestamp {
    /// The RFC 3339 form, `YYYY-MM-DDTHH:MM:SS.mmmZ`, written digit by digit: every state and
    /// event line holds a few dozen times, so they are encoded without the formatting machinery.
    /// A timestamp's year is always 1–9999 (the constructors clamp, the parser checks).
    fn rfc3339(&self) -> [u8; 24] {
        let days = self.millis.div_euclid(86_400_000);
        let ms = self.millis.rem_euclid(86_400_000);
        let (y, mo, d) = civil(days);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (v.rem_euclid(10)) as u8;
                v /= 10;
            }
        };
        put(0, 4, y);
        put(5, 2, i64::from(mo));
        put(8, 2, i64::from(d));
        put(11, 2, ms / 3_600_000);
        put(14, 2, ms / 60_000 % 60);
        put(17, 2, ms / 1000 % 60);
        put(20, 3, ms % 1000);
        out
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.rfc3339();
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = self.rfc3339();
        s.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::ids::parse_str(d, |s| Self::parse_rfc3339(s).map_err(|e| e.message))
    }
}

/// The longest duration loopx takes: a thousand years (a time that far off is "never").
pub const MAX_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

/// Parses a human duration such as `45m`, `2h`, `1h 30m`, at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let d = humantime::parse_duration(s).map_err(|e| {
        Error::usage(format!("invalid duration {}: {e}", crate::ids::quote_input(s)))
            .with_hint("use e.g. 45m, 2h or 1h30m")
    })?;
    if d > MAX_DURATION {
        return Err(Error::usage(format!(
            "the duration {} is longer than a thousand years",
            crate::ids::quote_input(s)
        ))
        .with_hint("use e.g. 45m, 2h or 30d"));
    }
    Ok(d)
}

/// A duration as [`parse_duration`] reads it back, in whole seconds (`12h`, `1h 30m`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// The time `offset` (`+2h`, a [`parse_duration`] after a `+`) after `now`, or an RFC 3339
/// time; refused when it is past [`Timestamp::MAX`].
pub fn parse_when(s: &str, now: Timestamp) -> Result<Timestamp, Error> {
    let Some(d) = s.strip_prefix('+') else { return Timestamp::parse_rfc3339(s) };
    now.checked_add(parse_duration(d)?).ok_or_else(|| {
        Error::usage(format!("{} is after the year 9999", crate::ids::quote_input(s)))
            .with_hint("give a nearer time, e.g. +2h or +30d")
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

/// A clock that moves only when its owner moves it: set to a time, or advanced (backwards too,
/// as a wall clock set back). For tests, simulations and scripted stories whose history should
/// read like hours of work while they take a second, and for replays that stamp each record
/// with its own time. Shared behind an `Arc`, it moves for every reader at once.
#[derive(Debug)]
pub struct ManualClock {
    /// Unix milliseconds, always within [`Timestamp::MIN`] and [`Timestamp::MAX`].
    millis: AtomicI64,
}

impl ManualClock {
    /// A clock that says `start` until it is moved.
    pub const fn new(start: Timestamp) -> Self {
        Self { millis: AtomicI64::new(start.unix_millis()) }
    }
    /// From now on it says `t`.
    pub fn set(&self, t: Timestamp) {
        self.millis.store(t.unix_millis(), Ordering::SeqCst);
    }
    /// Moves it `millis` on (back, when negative), stopping at [`Timestamp::MIN`] and
    /// [`Timestamp::MAX`].
    pub fn advance_millis(&self, millis: i64) {
        let step = |m: i64| Some(Timestamp::from_unix_millis(m.saturating_add(millis)).unix_millis());
        // The closure always answers, so the update never fails.
        let _ = self.millis.fetch_update(Ordering::SeqCst, Ordering::SeqCst, step);
    }
    /// Moves it `minutes` on (back, when negative).
    pub fn advance_minutes(&self, minutes: i64) {
        self.advance_millis(minutes.saturating_mul(60_000));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.millis.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_reads_and_writes_without_a_panic() {
        // Edges, and a deterministic spray of strings near the parsers' formats.
        assert_eq!(Timestamp::from_unix_millis(i64::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::MAX.to_string(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::MIN.to_string(), "0001-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::from_unix_millis(-1).to_string(), "1969-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::from_unix_millis(951_782_400_000).to_string(), "2000-02-29T00:00:00.000Z");
        assert!(Timestamp::MAX.checked_add(Duration::from_millis(1)).is_none());
        let now = Timestamp::from_unix_millis(1_800_000_000_000);
        assert!(parse_when("+7973y", now).is_err());
        assert!(parse_duration("99999999999999999999y").is_err());
        assert!(parse_duration("2000y").is_err());
        assert_eq!(parse_when("+2h", now).unwrap().unix_millis(), 1_800_007_200_000);
        let pieces = [
            "+",
            "-",
            "9",
            "99999",
            "y",
            "d",
            "h",
            "ms",
            ":",
            "T",
            "Z",
            "1970-01-01",
            "9999-12-31",
            "00:00:00",
            ".",
            " ",
            "é",
        ];
        let mut seed: u64 = 7;
        for _ in 0..20_000 {
            let mut s = String::new();
            for _ in 0..(seed % 7) {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                s.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let _ = parse_duration(&s);
            if let Ok(t) = parse_when(&s, now) {
                let _ = Timestamp::parse_rfc3339(&t.to_string()).unwrap();
            }
            let t = Timestamp::from_unix_millis(seed as i64);
            assert_eq!(Timestamp::parse_rfc3339(&t.to_string()).unwrap(), t, "{t}");
        }
    }

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::parse_rfc3339("2026-11-29T15:39:49.123Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-29T15:39:49.123Z");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2026-11-29T15:39:49.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        assert_eq!(Timestamp::parse_rfc3339("2026-11-29T15:39:49Z").unwrap().unix_millis() % 1000, 0);
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn a_manual_clock_moves_only_when_moved() {
        let start = Timestamp::parse_rfc3339("2026-11-02T09:00:00Z").unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        assert_eq!(clock.now(), start, "reading it does not move it");
        clock.advance_minutes(90);
        assert_eq!(clock.now().to_string(), "2026-11-02T10:30:00.000Z");
        clock.advance_millis(-1_500);
        assert_eq!(clock.now().to_string(), "2026-11-02T10:29:58.500Z");
        clock.set(start);
        assert_eq!(clock.now(), start);
        clock.set(Timestamp::MAX);
        clock.advance_minutes(i64::MAX);
        assert_eq!(clock.now(), Timestamp::MAX, "it stops at the last time");
        clock.advance_millis(i64::MIN);
        assert_eq!(clock.now(), Timestamp::MIN, "and at the first");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(45 * 60));
        assert!(parse_duration("soon").is_err());
    }
}
