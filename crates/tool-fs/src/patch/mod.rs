//! The patch format of OpenAI's Codex CLI, parsed and applied without touching the disk.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +# New
//! *** Update File: src/lib.rs
//! *** Move to: src/core.rs
//! @@ fn main()
//!  let x = 1;
//! -let y = 2;
//! +let y = 3;
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! [`parse`] reads the text; [`apply_hunks`] applies one file's hunks to its content. Both are
//! pure, so a fuzz target can call them directly; the `apply_patch` tool does the I/O.

mod apply;
mod parse;

pub use apply::apply_hunks;
pub use parse::parse;

/// A parsed patch: file operations in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The operations.
    pub ops: Vec<FileOp>,
}

/// One file's section of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// `*** Add File:` — a new file (or a whole replacement) with these contents.
    Add {
        /// The path as written.
        path: String,
        /// The contents (every line ends with `\n`).
        content: String,
    },
    /// `*** Delete File:`.
    Delete {
        /// The path as written.
        path: String,
    },
    /// `*** Update File:`, with an optional `*** Move to:`.
    Update {
        /// The path as written.
        path: String,
        /// The new path, when the file also moves.
        move_to: Option<String>,
        /// The hunks, in file order.
        hunks: Vec<Hunk>,
    },
}

impl FileOp {
    /// The path the section names first.
    pub fn path(&self) -> &str {
        match self {
            FileOp::Add { path, .. } | FileOp::Delete { path } | FileOp::Update { path, .. } => {
                path
            }
        }
    }
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// ` text`: must be in the file, stays.
    Context(String),
    /// `-text`: must be in the file, goes.
    Remove(String),
    /// `+text`: comes in.
    Add(String),
}

/// One `@@` hunk of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The text after `@@ `: a line (a function or class header, usually) to find first;
    /// the hunk's lines are looked for after it.
    pub context: Option<String>,
    /// The lines, in order.
    pub lines: Vec<HunkLine>,
    /// `*** End of File`: the lines are at the end of the file.
    pub end_of_file: bool,
}

impl Hunk {
    /// The lines to find in the file: context and removed lines, in order.
    pub fn old(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    /// What they become: context and added lines, in order.
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Add(t) => Some(t.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }
}

impl Patch {
    /// Every path the patch touches, in order: each section's path, then its move target.
    ///
    /// ```
    /// let p = dsh_tool_fs::patch::parse(
    ///     "*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@\n-x\n+y\n*** Delete File: c\n*** End Patch",
    /// ).unwrap();
    /// assert_eq!(p.paths(), vec!["a", "b", "c"]);
    /// ```
    pub fn paths(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for op in &self.ops {
            out.push(op.path());
            if let FileOp::Update {
                move_to: Some(to), ..
            } = op
            {
                out.push(to.as_str());
            }
        }
        out
    }
}
