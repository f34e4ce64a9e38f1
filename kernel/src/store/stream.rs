//! Reading a long log as a stream, a line at a time.

use std::path::Path;

use loopx_core::{Error, Result};

use crate::log::{self, EventLine};

use super::replay::chain_error;

/// Committed lines of a log read as a stream, in a batch: the bytes (as text when they are
/// UTF-8, checked once for the batch), where each line is in them, and each line's hash.
struct Batch {
    bytes: Result<String, Vec<u8>>,
    lines: Vec<(std::ops::Range<usize>, String)>,
}

/// Reads the log at `path` from `read`, a line at a time, into `f` (see
/// [`Store::each_line`]): a second thread reads and hashes while this one decodes, a few
/// batches of about a MiB between them, so a long log streams at the speed of its decoding.
pub(crate) fn stream_log(
    path: &Path,
    mut read: impl std::io::Read + Send,
    f: &mut dyn FnMut(EventLine) -> Result<bool>,
) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Batch>>(4);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut carry: Vec<u8> = Vec::new();
            loop {
                let mut bytes = std::mem::take(&mut carry);
                let start = bytes.len();
                bytes.resize(start + CHUNK, 0);
                let n = match read.read(&mut bytes[start..]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                        bytes.truncate(start);
                        carry = bytes;
                        continue;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                bytes.truncate(start + n);
                if n == 0 {
                    return; // what is left has no newline: a torn final line, never committed
                }
                // Complete lines go now; the rest waits for the next read.
                let Some(end) = crate::newline::rfind(&bytes).map(|i| i + 1) else {
                    carry = bytes;
                    continue;
                };
                carry = bytes[end..].to_vec();
                bytes.truncate(end);
                let mut lines = Vec::new();
                let mut at = 0;
                for nl in crate::newline::all(&bytes) {
                    lines.push((at..nl, log::line_hash(&bytes[at..nl])));
                    at = nl + 1;
                }
                let bytes = String::from_utf8(bytes).map_err(std::string::FromUtf8Error::into_bytes);
                if tx.send(Ok(Batch { bytes, lines })).is_err() {
                    return; // the reader stopped
                }
            }
        });
        let mut follow = log::Follow::default();
        for batch in rx {
            let batch = batch.map_err(|e| Error::io("read", path, &e))?;
            for (range, hash) in batch.lines {
                let line = match &batch.bytes {
                    Ok(text) => follow.hashed_text(&text[range], hash),
                    Err(bytes) => follow.hashed_line(&bytes[range], hash),
                };
                let line = line.map_err(|b| chain_error(path, &b))?;
                if !f(line)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use loopx_core::event::Event;

    use crate::log::GENESIS;

    use super::*;

    /// `n` chained lines of a log, the way the kernel writes them.
    fn log_of(n: u64) -> (Vec<EventLine>, Vec<u8>) {
        let (mut lines, mut bytes, mut prev) = (Vec::new(), Vec::new(), GENESIS.to_owned());
        for seq in 1..=n {
            let line = EventLine {
                seq,
                at: loopx_core::Timestamp::from_unix_millis(i64::try_from(seq).unwrap() * 1000),
                actor: "user".to_owned(),
                event: Event::GoalResumed {},
                turn: None,
                receipt: None,
                root: None,
                prev: prev.clone(),
                signature: None,
            };
            let text = serde_json::to_string(&line).unwrap();
            prev = log::line_hash(text.as_bytes());
            bytes.extend_from_slice(text.as_bytes());
            bytes.push(b'\n');
            lines.push(line);
        }
        (lines, bytes)
    }

    fn streamed(bytes: &[u8]) -> Result<Vec<EventLine>> {
        let mut out = Vec::new();
        stream_log(Path::new("events.jsonl"), bytes, &mut |l| {
            out.push(l);
            Ok(true)
        })?;
        Ok(out)
    }

    #[test]
    fn a_streamed_log_is_its_lines_across_many_reads_and_a_torn_tail_is_left_out() {
        // Enough lines for several reads of a MiB, a line cut by each read's end.
        let (lines, mut bytes) = log_of(20_000);
        assert!(bytes.len() > 2 << 20);
        bytes.extend_from_slice(b"{\"seq\":20001,\"at\":");
        assert_eq!(streamed(&bytes).unwrap(), lines);
        // A reader that stops early.
        let mut seen = 0;
        stream_log(Path::new("events.jsonl"), &bytes[..], &mut |_| {
            seen += 1;
            Ok(seen < 3)
        })
        .unwrap();
        assert_eq!(seen, 3);
    }

    #[test]
    fn a_bad_line_in_a_stream_is_named_whether_or_not_it_is_text() {
        let (_, bytes) = log_of(5);
        let third = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
        for bad in [&b"{\"seq\":3,\"at\":\"x\"}"[..], &b"{\"seq\":3,\xff\xfe}"[..]] {
            let mut edited = bytes[..third].to_vec();
            edited.extend_from_slice(bad);
            edited.push(b'\n');
            let e = streamed(&edited).unwrap_err();
            assert_eq!(e.kind, loopx_core::ErrorKind::Integrity, "{e:?}");
            assert!(e.message.contains("line 3"), "{}", e.message);
        }
        // A line of another log: it does not chain.
        let mut edited = bytes.clone();
        edited.extend_from_slice(&log_of(1).1);
        assert!(streamed(&edited).unwrap_err().message.contains("line 6"));
    }
}
