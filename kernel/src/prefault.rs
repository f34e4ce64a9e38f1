//! Backing a large buffer with memory in one call before it is filled.
//!
//! A command that reads a long goal fills a few large buffers once (the snapshot's bytes, a
//! row per open todo, the body file's offsets) in a process that lives a few milliseconds.
//! Each 4 KiB page of a new buffer costs a page fault when first written; on a virtual machine
//! a fault is dear (1.7 µs here, against 0.6 µs a page when the kernel maps a whole range in
//! one `madvise(MADV_POPULATE_WRITE)`). Mapping in a buffer's capacity changes none of its
//! bytes: it is what writing it would do, a range at a time.

/// Buffers smaller than this are left to fault as they are written: the call would cost more
/// than the few faults it saves.
const AT_LEAST: usize = 32 * 1024;

/// Maps in the spare capacity of `buf` (the part not yet written) when it is large; where the
/// kernel cannot (before Linux 5.14, or elsewhere than Linux) the pages fault in as written.
/// Returns whether the kernel mapped it in.
pub fn spare<T>(buf: &mut Vec<T>) -> bool {
    let spare = buf.spare_capacity_mut();
    let bytes = std::mem::size_of_val(spare);
    bytes >= AT_LEAST && populate(spare.as_mut_ptr().cast(), bytes)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn populate(start: *mut u8, bytes: usize) -> bool {
    const PAGE: usize = 4096;
    // Only whole pages inside the buffer: the pages at its ends may hold another's bytes.
    let first = (start as usize).next_multiple_of(PAGE);
    let end = (start as usize + bytes) & !(PAGE - 1);
    // SAFETY: [first, end) lies inside the allocation `spare` borrows mutably, so nothing else
    // reads or writes it meanwhile, and MADV_POPULATE_WRITE only maps its pages in, leaving
    // every byte as it was; an error (an older kernel) changes nothing either.
    end > first
        && unsafe {
            rustix::mm::madvise(
                first as *mut std::ffi::c_void,
                end - first,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        }
        .is_ok()
}

#[cfg(not(target_os = "linux"))]
fn populate(_start: *mut u8, _bytes: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mapping a buffer in leaves what it holds and what it can hold as they were, at any size
    /// and alignment, and the buffer fills as any other.
    #[test]
    fn a_mapped_in_buffer_keeps_its_bytes_and_fills_as_any_other() {
        for len in [0, 10, AT_LEAST - 1, AT_LEAST, 300_001] {
            let mut buf: Vec<u8> = Vec::with_capacity(len + 7);
            buf.extend_from_slice(b"kept");
            spare(&mut buf);
            assert_eq!(buf, b"kept");
            assert!(buf.capacity() >= len + 7);
            buf.extend((0..len).map(|i| i as u8));
            assert_eq!(&buf[..4], b"kept");
            assert!(buf[4..].iter().enumerate().all(|(i, b)| *b == i as u8));
        }
        let mut rows: Vec<[u64; 7]> = Vec::with_capacity(10_000);
        spare(&mut rows);
        rows.extend((0..10_000u64).map(|i| [i; 7]));
        assert_eq!(rows[9_999], [9_999; 7]);
    }

    /// The memory a process holds, in KiB (Linux: `/proc/self/status`).
    #[cfg(target_os = "linux")]
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A large buffer's pages are in memory before anything is written to it. The buffer is
    /// large enough that other tests of this process freeing memory meanwhile (under `cargo
    /// test` they share it) cannot hide it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_is_in_memory_before_it_is_written() {
        const MIB: usize = 1024 * 1024;
        let mut buf: Vec<u8> = Vec::with_capacity(64 * MIB);
        let before = resident_kib();
        if !spare(&mut buf) {
            // A kernel before 5.14 (or a sandbox) that cannot: the buffer faults in as written.
            eprintln!("this kernel cannot map a buffer in ahead (MADV_POPULATE_WRITE); nothing to check");
            return;
        }
        let grew = resident_kib().saturating_sub(before);
        assert!(grew >= 56 * 1024, "{grew} KiB mapped in for a 64 MiB buffer");
        assert!(buf.is_empty());
    }
}
