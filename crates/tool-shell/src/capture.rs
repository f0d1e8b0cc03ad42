//! Output capture with a fixed memory cap: the head and the tail of a stream are kept, the
//! middle is counted and dropped, so neither a flood nor a long build eats memory, and the
//! end of a failed build (where its error is) is never lost.

use std::collections::VecDeque;

/// One stream's kept bytes.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    pub(crate) fn new(head_cap: usize, tail_cap: usize) -> Capture {
        Capture {
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            total: 0,
        }
    }

    /// Bytes seen in all.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The bytes kept from the start (all of them, while the stream is shorter than the head).
    pub(crate) fn head(&self) -> &[u8] {
        &self.head
    }

    pub(crate) fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if self.head.len() < self.head_cap {
            let take = chunk.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(chunk);
    }

    /// The bytes of the stream in `[start, end)`, which must be kept (in the head, or in the
    /// tail).
    fn range(&self, start: u64, end: u64) -> Vec<u8> {
        let tail_start = self.total - self.tail.len() as u64;
        let mut out = Vec::with_capacity((end - start) as usize);
        for at in start..end {
            let byte = if at < self.head.len() as u64 {
                Some(self.head[at as usize])
            } else if at >= tail_start {
                self.tail.get((at - tail_start) as usize).copied()
            } else {
                None
            };
            if let Some(b) = byte {
                out.push(b);
            }
        }
        out
    }

    /// The text of at most `head + tail` bytes: the first `head` and the last `tail`, with a
    /// marker `… N bytes omitted …` between them when bytes were left out. Answers the text
    /// and the number of bytes omitted.
    pub(crate) fn render(&self, head: usize, tail: usize) -> (String, u64) {
        let head = (head.min(self.head_cap) as u64).min(self.total);
        let tail = (tail.min(self.tail_cap + self.head_cap) as u64).min(self.total - head);
        let tail_start = self.total - tail;
        let omitted = tail_start - head;
        let mut text = String::from_utf8_lossy(&self.range(0, head)).into_owned();
        if omitted > 0 {
            text.push_str(&format!("\n… {omitted} bytes omitted …\n"));
        }
        text.push_str(&String::from_utf8_lossy(
            &self.range(tail_start, self.total),
        ));
        (text, omitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = Capture::new(8, 8);
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.render(100, 100), ("hello world".to_string(), 0));
    }

    #[test]
    fn long_output_keeps_head_and_tail_with_a_marker() {
        let mut c = Capture::new(4, 6);
        for chunk in [&b"abcdefgh"[..], b"ijklmnop", b"qrstuvwxyz"] {
            c.push(chunk);
        }
        assert_eq!(c.total(), 26);
        let (text, omitted) = c.render(2, 3);
        assert_eq!(omitted, 21);
        assert_eq!(text, "ab\n… 21 bytes omitted …\nxyz");
        // Shown as much as is kept.
        let (text, omitted) = c.render(4, 6);
        assert_eq!(text, "abcd\n… 16 bytes omitted …\nuvwxyz");
        assert_eq!(omitted, 16);
    }

    #[test]
    fn memory_stays_bounded() {
        let mut c = Capture::new(16, 16);
        let chunk = vec![b'y'; 65536];
        for _ in 0..100 {
            c.push(&chunk);
        }
        assert_eq!(c.head.len(), 16);
        assert_eq!(c.tail.len(), 16);
        assert_eq!(c.total(), 6_553_600);
    }
}
