//! Reading a log line by line through one reused buffer, so opening, replaying or checking a
//! log of any size needs memory for its longest line, not for the whole file; and no line
//! longer than [`MAX_LINE`] is held at all.

use crate::limits::MAX_LINE;
use std::io::{self, Read};

const CHUNK: usize = 1 << 20;

/// Reads `file` from a position on, with positioned reads: the file's own offset is left
/// alone, so several readers (or a writer appending) can share it.
pub(crate) struct ReadAt<'a> {
    file: &'a std::fs::File,
    pos: u64,
}

impl<'a> ReadAt<'a> {
    /// A reader of `file` from `pos`.
    pub fn new(file: &'a std::fs::File, pos: u64) -> ReadAt<'a> {
        ReadAt { file, pos }
    }
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = read_at(self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, pos)
}

#[cfg(windows)]
fn read_at(file: &std::fs::File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, pos)
}

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
/// the number of bytes read. A line that runs past `MAX_LINE` bytes without a newline is not
/// read further: `too_long(number, offset)` is the error.
pub(crate) fn for_each_line<E>(
    reader: impl Read,
    each: impl FnMut(Line<'_>) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
    too_long: impl Fn(usize, u64) -> E,
) -> Result<u64, E> {
    for_each_line_within(reader, MAX_LINE, each, io_error, too_long)
}

fn for_each_line_within<E>(
    mut reader: impl Read,
    max_line: usize,
    mut each: impl FnMut(Line<'_>) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
    too_long: impl Fn(usize, u64) -> E,
) -> Result<u64, E> {
    // One byte more than the longest line, to see that a line is longer.
    let cap = max_line.saturating_add(1);
    let mut buf = vec![0u8; CHUNK.min(cap)];
    // buf[..filled] holds bytes read but not yet handed out; they start at `offset`.
    let mut filled = 0usize;
    let mut offset = 0u64;
    let mut number = 0usize;
    loop {
        if filled == buf.len() {
            if filled >= cap {
                return Err(too_long(number + 1, offset));
            }
            // A line longer than the buffer: make room for the rest of it, up to the cap.
            buf.resize(buf.len().saturating_mul(2).min(cap), 0);
        }
        let n = match reader.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e)),
        };
        if n == 0 {
            if filled > 0 {
                if filled > max_line {
                    return Err(too_long(number + 1, offset));
                }
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
            if nl - start > max_line {
                return Err(too_long(number + 1, offset));
            }
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
        if end - start > max_line {
            return Err(too_long(number + 1, offset));
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
            |n, o| io::Error::other(format!("line {n} at {o} too long")),
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
            |n, o| io::Error::other(format!("line {n} at {o} too long")),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![(0, long.len(), true), (long.len() as u64 + 1, 4, true)]
        );
    }

    #[test]
    fn a_line_past_the_limit_is_refused_without_reading_on() {
        // Reads that never end, as from /dev/zero: the limit stops them.
        struct Zeros(u64);
        impl Read for Zeros {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                out.fill(0);
                self.0 += out.len() as u64;
                Ok(out.len())
            }
        }
        let mut zeros = Zeros(0);
        let mut seen = 0;
        let err = for_each_line_within(
            &mut zeros,
            3000,
            |_| {
                seen += 1;
                Ok::<(), (usize, u64)>(())
            },
            |_| (0, 0),
            |n, o| (n, o),
        )
        .unwrap_err();
        assert_eq!((err, seen), ((1, 0), 0));
        assert!(zeros.0 < 10_000, "read {} bytes", zeros.0);

        // Whole lines up to the limit pass, terminated or not; one byte more does not.
        let at_limit = [vec![b'a'; 100], b"\n".to_vec(), vec![b'b'; 100]].concat();
        let mut lines = Vec::new();
        for_each_line_within(
            &at_limit[..],
            100,
            |l| {
                lines.push(l.bytes.len());
                Ok::<(), (usize, u64)>(())
            },
            |_| (0, 0),
            |n, o| (n, o),
        )
        .unwrap();
        assert_eq!(lines, vec![100, 100]);
        for over in [
            [
                vec![b'a'; 100],
                b"\n".to_vec(),
                vec![b'b'; 101],
                b"\n".to_vec(),
            ]
            .concat(),
            [vec![b'a'; 100], b"\n".to_vec(), vec![b'b'; 101]].concat(),
        ] {
            let err = for_each_line_within(
                &over[..],
                100,
                |_| Ok::<(), (usize, u64)>(()),
                |_| (0, 0),
                |n, o| (n, o),
            )
            .unwrap_err();
            assert_eq!(err, (2, 101));
        }
    }
}
