//! The content hash that read records are compared by.

use sha2::{Digest, Sha256};
use std::fmt;
use std::fmt::Write as _;

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

    /// All 32 bytes in lowercase hex (64 characters): how a session log keeps a read's hash.
    ///
    /// ```
    /// use dsh_tool_fs::ContentHash;
    /// let hash = ContentHash::of(b"a");
    /// assert_eq!(ContentHash::from_hex(&hash.to_hex()), Some(hash));
    /// assert_eq!(ContentHash::from_hex("zz"), None);
    /// ```
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for b in &self.0 {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// Reads [`ContentHash::to_hex`]'s form back; anything else is `None`.
    pub fn from_hex(text: &str) -> Option<ContentHash> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let pair = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(ContentHash(out))
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
