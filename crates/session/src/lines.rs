//! Reading a log line by line through one reused buffer, so opening, replaying or checking a
//! log of any size needs memory for its longest line, not for the whole file.

use std::io::{self, Read};

const CHUNK: usize = 1 << 20;

/// One line of a log.
pub(crate) struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    /// Byte offset of the line's start in the file.
    pub offset: u64,
    /// The line without its newline.
    pub bytes: &'a [u8],
    /// False only for a last line that has no newline after it.
    pub terminated: bool,
}

/// Calls `each` for every line of `reader`, in order, stopping at its first error. Answers
/// the number of bytes read.
pub(crate) fn for_each_line<E>(
    mut reader: impl Read,
    mut each: impl FnMut(Line<'_>) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
) -> Result<u64, E> {
    let mut buf = vec![0u8; CHUNK];
    // buf[..filled] holds bytes read but not yet handed out; they start at `offset`.
    let mut filled = 0usize;
    let mut offset = 0u64;
    let mut number = 0usize;
    loop {
        if filled == buf.len() {
            // A line longer than the buffer: make room for the rest of it.
            buf.resize(buf.len() * 2, 0);
        }
        let n = match reader.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e)),
        };
        if n == 0 {
            if filled > 0 {
                number += 1;
                each(Line {
                    number,
                    offset,
                    bytes: &buf[..filled],
                    terminated: false,
                })?;
                offset += filled as u64;
            }
            return Ok(offset);
        }
        let end = filled + n;
        let mut start = 0usize;
        // Only the new bytes can hold a newline: the carried-over part had none.
        let mut search = filled;
        while let Some(i) = memchr::memchr(b'\n', &buf[search..end]) {
            let nl = search + i;
            number += 1;
            each(Line {
                number,
                offset,
                bytes: &buf[start..nl],
                terminated: true,
            })?;
            offset += (nl + 1 - start) as u64;
            start = nl + 1;
            search = start;
        }
        buf.copy_within(start..end, 0);
        filled = end - start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(bytes: &[u8]) -> Vec<(usize, u64, Vec<u8>, bool)> {
        let mut out = Vec::new();
        let total = for_each_line(
            bytes,
            |l| {
                out.push((l.number, l.offset, l.bytes.to_vec(), l.terminated));
                Ok::<(), io::Error>(())
            },
            |e| e,
        )
        .unwrap();
        assert_eq!(total, bytes.len() as u64);
        out
    }

    #[test]
    fn lines_offsets_and_the_unterminated_tail() {
        let got = collect(b"ab\n\ncd\nef");
        assert_eq!(
            got,
            vec![
                (1, 0, b"ab".to_vec(), true),
                (2, 3, b"".to_vec(), true),
                (3, 4, b"cd".to_vec(), true),
                (4, 7, b"ef".to_vec(), false),
            ]
        );
        assert!(collect(b"").is_empty());
    }

    #[test]
    fn lines_longer_than_the_buffer_and_reads_split_anywhere() {
        let long = vec![b'x'; CHUNK * 2 + 17];
        let mut bytes = long.clone();
        bytes.push(b'\n');
        bytes.extend_from_slice(b"tail\n");
        // A reader that hands out a few bytes at a time splits lines at every position.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = out.len().min(self.0.len()).min(7919);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut got = Vec::new();
        for_each_line(
            Trickle(&bytes),
            |l| {
                got.push((l.offset, l.bytes.len(), l.terminated));
                Ok::<(), io::Error>(())
            },
            |e| e,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![(0, long.len(), true), (long.len() as u64 + 1, 4, true)]
        );
    }
}
