//! The content hash that read records are compared by.

use sha2::{Digest, Sha256};
use std::fmt;

/// SHA-256 of a file's bytes. A cryptographic hash, so "unchanged since read" cannot be
/// faked by a file crafted to collide.
///
/// ```
/// use dsh_tool_fs::ContentHash;
/// assert_eq!(ContentHash::of(b"a"), ContentHash::of(b"a"));
/// assert_ne!(ContentHash::of(b"a"), ContentHash::of(b"b"));
/// assert_eq!(ContentHash::of(b"").to_string().len(), 12);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The first 6 bytes in hex: enough for a log line.
impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}
