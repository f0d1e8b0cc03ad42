//! The report pipe: fixed-size records the child processes write, and dsh reads.
//!
//! A record is 8 bytes: kind, stage, a 16-bit index (which mount, say) and a 32-bit value (an
//! errno, or a wait status). Records are smaller than `PIPE_BUF`, so each write is atomic.

use super::plan::Stage;

/// A setup step failed: stage, index, errno. The process then exits.
pub(crate) const KIND_ERROR: u8 = b'E';
/// There is no PID namespace: init is a subreaper instead (value: unshare's errno, or 0 when
/// no namespaces were asked for).
pub(crate) const KIND_FALLBACK: u8 = b'F';
/// The command ended: value is its wait status.
pub(crate) const KIND_EXIT: u8 = b'X';
/// The command ended, and processes it started are still running.
pub(crate) const KIND_LEFTOVERS: u8 = b'L';

/// The size of one record.
pub(crate) const RECORD: usize = 8;

/// One record, as written.
pub(crate) fn encode_record(kind: u8, stage: Stage, index: u16, value: i32) -> [u8; RECORD] {
    let i = index.to_le_bytes();
    let v = value.to_le_bytes();
    [kind, stage as u8, i[0], i[1], v[0], v[1], v[2], v[3]]
}

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record {
    /// A setup step failed.
    Error {
        /// Which step.
        stage: Stage,
        /// Which item of the step (a mount's position).
        index: u16,
        /// The errno.
        errno: i32,
    },
    /// No PID namespace (the errno of the attempt, or 0 when none was asked for).
    Fallback(i32),
    /// The command's wait status.
    Exit(i32),
    /// Processes outlived the command.
    Leftovers,
}

/// Decodes one record; unknown kinds are ignored.
pub(crate) fn decode_record(bytes: &[u8; RECORD]) -> Option<Record> {
    let index = u16::from_le_bytes([bytes[2], bytes[3]]);
    let value = i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    match bytes[0] {
        KIND_ERROR => Some(Record::Error {
            stage: Stage::from_u8(bytes[1]),
            index,
            errno: value,
        }),
        KIND_FALLBACK => Some(Record::Fallback(value)),
        KIND_EXIT => Some(Record::Exit(value)),
        KIND_LEFTOVERS => Some(Record::Leftovers),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let bytes = encode_record(KIND_ERROR, Stage::Landlock, 3, 38);
        assert_eq!(
            decode_record(&bytes),
            Some(Record::Error {
                stage: Stage::Landlock,
                index: 3,
                errno: 38
            })
        );
        let bytes = encode_record(KIND_EXIT, Stage::None, 0, 9);
        assert_eq!(decode_record(&bytes), Some(Record::Exit(9)));
        assert_eq!(decode_record(&[0; RECORD]), None);
    }
}
