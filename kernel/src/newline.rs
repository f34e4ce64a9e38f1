//! Newlines in state files, found a vector at a time without asking the processor what it can
//! do. The `memchr` crate's own functions pick AVX2 when the processor has it, and finding out
//! takes `cpuid` instructions that a virtual machine traps: about 60 µs on first use, in every
//! process, more than a hook spends reading a small goal. SSE2, which every x86-64 processor
//! has, is known without asking; elsewhere the portable search runs.

#[cfg(target_arch = "x86_64")]
use memchr::arch::x86_64::sse2::memchr::One as Vector;

/// The first newline in `bytes`.
pub fn find(bytes: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = Vector::new(b'\n') {
        return v.find(bytes);
    }
    memchr::arch::all::memchr::One::new(b'\n').find(bytes)
}

/// The last newline in `bytes`.
pub fn rfind(bytes: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = Vector::new(b'\n') {
        return v.rfind(bytes);
    }
    memchr::arch::all::memchr::One::new(b'\n').rfind(bytes)
}

/// Every newline in `bytes`, first to last.
pub fn all(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let nl = at + find(bytes.get(at..)?)?;
        at = nl + 1;
        Some(nl)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newlines found are the ones there, at every length and alignment a vector search
    /// handles differently (shorter than a vector, across one, at either end).
    #[test]
    fn every_newline_is_found_where_it_is() {
        let mut seed: u64 = 11;
        for len in (0..70).chain([255, 256, 257, 4099]) {
            for _ in 0..20 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        if (seed >> 60) < 2 { b'\n' } else { b'a' + (seed >> 59) as u8 % 3 }
                    })
                    .collect();
                let plain: Vec<usize> = (0..len).filter(|i| bytes[*i] == b'\n').collect();
                assert_eq!(all(&bytes).collect::<Vec<_>>(), plain, "{len} bytes");
                assert_eq!(find(&bytes), plain.first().copied());
                assert_eq!(rfind(&bytes), plain.last().copied());
            }
        }
    }
}
