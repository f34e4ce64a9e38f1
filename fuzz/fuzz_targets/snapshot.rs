//! The state loader: any bytes either fail to decode or decode to a state whose todos either
//! fail their hashes or encode and decode back to the same bytes; nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use loopx_kernel::table::{self, Bodies};

fuzz_target!(|data: &[u8]| {
    let src = Arc::new(data.to_vec());
    let Ok((state, _)) = table::decode(&src, 0, src.len(), Bodies::Inline) else { return };
    // A todo is decoded only after its JSON matched the hash its key line records.
    if state.todos.check().is_err() {
        return;
    }
    let again = Arc::new(table::encode_state(&state).expect("a decoded state encodes"));
    let (back, _) = table::decode(&again, 0, again.len(), Bodies::Inline).expect("and decodes again");
    assert_eq!(table::encode_state(&back).expect("and encodes again"), *again);
});
