//! The snapshot loader: any bytes either fail to decode or decode to a snapshot that encodes
//! and decodes back to itself; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopx_kernel::store::Snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(snap) = serde_json::from_slice::<Snapshot>(data) {
        let again = serde_json::to_vec(&snap).expect("a decoded snapshot encodes");
        let back: Snapshot = serde_json::from_slice(&again).expect("and decodes again");
        assert_eq!(serde_json::to_value(&back.state).ok(), serde_json::to_value(&snap.state).ok());
    }
});
