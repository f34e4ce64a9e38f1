//! Every time and duration reader is total: any input is read or refused, never a panic, and
//! whatever is read prints and reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopx_core::Timestamp;
use loopx_core::time::{parse_duration, parse_when};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = parse_duration(s);
    let now = Timestamp::from_unix_millis(1_800_000_000_000);
    for t in [Timestamp::parse_rfc3339(s), parse_when(s, now)].into_iter().flatten() {
        assert_eq!(Timestamp::parse_rfc3339(&t.to_string()).ok(), Some(t));
    }
    if data.len() >= 8 {
        let t = Timestamp::from_unix_millis(i64::from_le_bytes(data[..8].try_into().unwrap_or_default()));
        assert_eq!(Timestamp::parse_rfc3339(&t.to_string()).ok(), Some(t));
    }
});
