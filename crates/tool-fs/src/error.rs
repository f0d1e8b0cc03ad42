//! The crate's one error type, and the reasons a path is refused.

use std::fmt;

/// Why a path was refused by the workspace confinement. Each reason reads as the end of the
/// sentence "access to `PATH` is denied: ...".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The path is the empty string.
    Empty,
    /// The path holds a NUL byte (the kernel would cut it there).
    NulByte,
    /// The whole path is longer than [`crate::sandbox::MAX_PATH_BYTES`].
    PathTooLong(usize),
    /// One component is longer than [`crate::sandbox::MAX_NAME_BYTES`].
    NameTooLong(usize),
    /// `..` climbs above the workspace root.
    ParentEscape,
    /// An absolute path that does not lie under the workspace root.
    Outside,
    /// A symlink on the way points outside the workspace.
    SymlinkOutside {
        /// The symlink, relative to the root.
        link: String,
    },
    /// Too many symlinks to follow (a loop, most likely).
    SymlinkLoop,
    /// A mutation in a read-only workspace.
    ReadOnly,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::sandbox::{MAX_NAME_BYTES, MAX_PATH_BYTES};
        match self {
            Denial::Empty => f.write_str("the path is empty"),
            Denial::NulByte => f.write_str("the path contains a NUL byte"),
            Denial::PathTooLong(n) => {
                write!(f, "the path is {n} bytes long (the limit is {MAX_PATH_BYTES})")
            }
            Denial::NameTooLong(n) => write!(
                f,
                "a path component is {n} bytes long (the limit is {MAX_NAME_BYTES})"
            ),
            Denial::ParentEscape => f.write_str("`..` climbs above the workspace root"),
            Denial::Outside => f.write_str(
                "the absolute path is outside the workspace; give a path relative to the workspace root",
            ),
            Denial::SymlinkOutside { link } => {
                write!(f, "the symlink `{link}` points outside the workspace")
            }
            Denial::SymlinkLoop => {
                f.write_str("too many levels of symlinks (is there a symlink loop?)")
            }
            Denial::ReadOnly => f.write_str("the workspace is read-only"),
        }
    }
}

/// At most this many characters of a refused path are quoted back, so a hostile 100 kB path
/// does not become a 100 kB error.
const QUOTED_PATH_CHARS: usize = 160;

/// A path as it is quoted in messages: control characters escaped, long paths cut.
pub(crate) fn quote_path(path: &str) -> String {
    let mut out = String::new();
    for (i, c) in path.chars().enumerate() {
        if i == QUOTED_PATH_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Errors of `dsh-tool-fs`.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The workspace confinement refused a path.
    #[error("access to `{}` is denied: {why}", quote_path(.path))]
    PathDenied {
        /// The path as given.
        path: String,
        /// Why.
        why: Denial,
    },
    /// The workspace root cannot be used.
    #[error("the workspace root `{path}` cannot be opened: {source}")]
    Root {
        /// The root as given.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file-system operation failed.
    #[error("{what} `{}` failed: {source}", quote_path(.path))]
    Io {
        /// The operation (`reading`, `writing`, ...).
        what: &'static str,
        /// The path, relative to the root.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The patch text does not follow the format.
    #[error("invalid patch, line {line}: {message}")]
    PatchSyntax {
        /// 1-based line of the patch text.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A hunk of an `*** Update File:` section does not apply.
    #[error("`{}`, hunk {hunk}: {message}", quote_path(.path))]
    PatchHunk {
        /// The file.
        path: String,
        /// 1-based hunk number within the file's section.
        hunk: usize,
        /// What did not match.
        message: String,
    },
    /// A patch operation that cannot be done (a missing file, a path touched twice, ...).
    #[error("`{}`: {message}", quote_path(.path))]
    PatchFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// `old_string` does not occur.
    #[error("old_string was not found")]
    EditNoMatch,
    /// `old_string` occurs more than once and `replace_all` is not set.
    #[error(
        "old_string occurs {count} times; add surrounding lines to make it unique, or set replace_all"
    )]
    EditAmbiguous {
        /// How many times it occurs.
        count: usize,
    },
    /// `old_string` is empty.
    #[error("old_string is empty; use write_file to create or overwrite a whole file")]
    EditEmptyOld,
    /// `old_string` equals `new_string`.
    #[error("old_string and new_string are identical; there is nothing to change")]
    EditNoop,
    /// What a change would make is over a size limit; nothing was built nor written.
    #[error("{what} would be {size} bytes, over the {limit}-byte limit; it is refused")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size, in bytes.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The fs-intent monitor could not be asked.
    #[error("the fs-intent monitor is unavailable: {0}")]
    MonitorUnavailable(String),
    /// The monitor actor could not be started.
    #[error("the fs-intent monitor could not start: {0}")]
    Spawn(String),
}

impl FsError {
    /// A refusal for `path`.
    pub fn denied(path: &str, why: Denial) -> FsError {
        FsError::PathDenied {
            path: path.to_string(),
            why,
        }
    }

    /// True for refusals of the confinement (they surface as `DENIED`).
    pub fn is_denial(&self) -> bool {
        matches!(self, FsError::PathDenied { .. })
    }

    pub(crate) fn io(what: &'static str, path: &str, source: std::io::Error) -> FsError {
        FsError::Io {
            what,
            path: path.to_string(),
            source,
        }
    }
}
