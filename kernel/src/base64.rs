//! The 96-bit digests loopx writes as text: a state's root, a todo's hash.

/// Appends the first 96 bits of `digest` to `out` as 16 characters of unpadded base64url.
pub(crate) fn base64_96(digest: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for chunk in digest[..12].chunks(3) {
        let n = (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8) | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
        }
    }
}
