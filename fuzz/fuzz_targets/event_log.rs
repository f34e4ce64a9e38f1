//! The event-log parser: any bytes either scan (with a torn tail cut off) or stop at a named
//! line; a scanned log replays or is refused, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopx_core::GoalId;
use loopx_kernel::log;
use loopx_kernel::store::replay;

fuzz_target!(|data: &[u8]| {
    let goal = GoalId::new("fuzz").expect("valid id");
    match log::scan(data) {
        Ok(scan) => {
            assert!(scan.valid_len as usize + scan.torn_bytes as usize == data.len());
            assert_eq!(scan.lines.len(), scan.hashes.len());
            let _ = replay(&goal, &scan);
        }
        Err((partial, brk)) => {
            assert_eq!(brk.line as usize, partial.lines.len() + 1);
            assert!(brk.offset as usize <= data.len());
            let _ = replay(&goal, &partial);
        }
    }
});
