//! The walk `grep` and `glob` share: ripgrep's walker for the traversal, with every decision
//! about what is shown made here, so that nothing outside the workspace and nothing the
//! rules hide is read or listed.
//!
//! - **Ignore files**: `.gitignore` and `.ignore` count only inside the workspace, from the
//!   workspace root down (a search rooted at `src/` honours the root's `.gitignore`); none
//!   is read above the root, no global git config or excludes file is read, and an ignore
//!   file that is a symlink (or is not a regular file, or is over 1 MiB, or is hidden by the
//!   rules) is not read at all: its lines would otherwise act as an oracle on the file it
//!   points to. They are read through the workspace's directory handle, and the file opened
//!   must be the one that was looked at.
//! - **Hidden files** are skipped unless asked for; `.git` is never entered.
//! - **Read rules**: every entry the walk would show or enter is put to the pipeline's path
//!   policy ([`dsh_core::PathPolicy::refuses`], `Access::Read`); a refused folder is not
//!   entered, a refused file not read nor listed. Only their number is reported.
//! - **What could not be searched** (a path past `PATH_MAX`, a folder that cannot be read,
//!   a file with a NUL byte) is counted and reported, never dropped in silence.

use crate::error::quote_path;
use crate::sandbox::MAX_PATH_BYTES;
use crate::toolset::Shared;
use dsh_core::{Access, PathPolicies, PathPolicy};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::{DirEntry, Match, WalkBuilder};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Ignore files larger than this are not read.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;
/// Paths named in a skip note (the rest are counted).
const NAMED: usize = 5;

/// What a walk (or a listing) did not show, and why. Shared by the walk's threads.
#[derive(Debug, Default)]
pub(crate) struct Skips {
    /// Entries the permission rules hide: counted, never named.
    hidden: AtomicUsize,
    /// Paths longer than `PATH_MAX`.
    too_long: AtomicUsize,
    /// Folders or files that could not be read (permissions, a race, an I/O error).
    unreadable: AtomicUsize,
    /// Files `grep` stopped at because of a NUL byte although they match, and the first few
    /// of them.
    binary: AtomicUsize,
    binary_named: Mutex<Vec<String>>,
}

impl Skips {
    pub(crate) fn hidden(&self) {
        self.hidden.fetch_add(1, Ordering::Relaxed);
    }

    /// A failure to read `path`: too long, or unreadable.
    pub(crate) fn failed(&self, path: &Path, e: Option<&std::io::Error>) {
        let long = path.as_os_str().len() >= MAX_PATH_BYTES
            || e.and_then(std::io::Error::raw_os_error) == Some(libc::ENAMETOOLONG);
        if long {
            self.too_long.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unreadable.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn binary(&self, rel: &str) {
        self.binary.fetch_add(1, Ordering::Relaxed);
        let mut named = self.binary_named.lock().unwrap_or_else(|e| e.into_inner());
        if named.len() < NAMED {
            named.push(rel.to_string());
        }
    }

    /// The counts, for the tool's value.
    pub(crate) fn to_json(&self) -> Value {
        let mut named = self
            .binary_named
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        named.sort();
        json!({
            "hidden": self.hidden.load(Ordering::Relaxed),
            "too_long": self.too_long.load(Ordering::Relaxed),
            "unreadable": self.unreadable.load(Ordering::Relaxed),
            "binary": self.binary.load(Ordering::Relaxed),
            "binary_files": named,
        })
    }
}

/// The notes that say what was skipped, one line each, from a value's `skipped` object.
pub(crate) fn skip_notes(value: &Value) -> Vec<String> {
    let skipped = &value["skipped"];
    let count = |k: &str| skipped[k].as_u64().unwrap_or(0);
    let mut notes = Vec::new();
    let hidden = count("hidden");
    if hidden > 0 {
        let what = if hidden == 1 {
            "entry hidden by the permission rules was"
        } else {
            "entries hidden by the permission rules were"
        };
        notes.push(format!("[{hidden} {what} skipped]"));
    }
    let binary = count("binary");
    if binary > 0 {
        let named: Vec<String> = skipped["binary_files"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|p| format!("`{}`", quote_path(p)))
                    .collect()
            })
            .unwrap_or_default();
        let more = if binary as usize > named.len() {
            format!(" and {} more", binary as usize - named.len())
        } else {
            String::new()
        };
        notes.push(format!(
            "[{binary} binary file(s) (holding a NUL byte) also match; their lines are not shown: {}{more}]",
            named.join(", ")
        ));
    }
    let too_long = count("too_long");
    if too_long > 0 {
        notes.push(format!(
            "[{too_long} path(s) longer than {MAX_PATH_BYTES} bytes could not be searched]"
        ));
    }
    let unreadable = count("unreadable");
    if unreadable > 0 {
        notes.push(format!(
            "[{unreadable} folder(s) or file(s) could not be read and were skipped]"
        ));
    }
    notes
}

/// The `.ignore` and `.gitignore` of one folder, as matchers (absent: none, or not read).
#[derive(Default)]
struct FolderIgnores {
    ignore: Option<Gitignore>,
    git: Option<Gitignore>,
}

/// The ignore files of the workspace, read as the walk needs them.
struct IgnoreFiles {
    cache: Mutex<HashMap<PathBuf, Arc<FolderIgnores>>>,
}

impl IgnoreFiles {
    fn folder(&self, walk: &WalkFilter, dir: &Path) -> Arc<FolderIgnores> {
        if let Some(found) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return found.clone();
        }
        let read = Arc::new(FolderIgnores {
            ignore: walk.ignore_file(dir, ".ignore"),
            git: walk.ignore_file(dir, ".gitignore"),
        });
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(dir.to_path_buf())
            .or_insert(read)
            .clone()
    }
}

/// Decides, for each entry, whether the walk shows (or enters) it.
pub(crate) struct WalkFilter {
    shared: Arc<Shared>,
    tool: &'static str,
    policy: PathPolicies,
    overrides: Option<Override>,
    hidden: bool,
    ignores: IgnoreFiles,
    skips: Arc<Skips>,
}

impl WalkFilter {
    /// `.ignore` and `.gitignore` count the way ripgrep counts them: the nearest folder's
    /// `.ignore` that has a say wins, then the nearest `.gitignore`.
    fn ignored(&self, path: &Path, is_dir: bool) -> Option<bool> {
        let root = self.shared.ws.root();
        let (mut by_ignore, mut by_git) = (None, None);
        for dir in path.ancestors().skip(1) {
            if !dir.starts_with(root) {
                break;
            }
            let folder = self.ignores.folder(self, dir);
            let decide = |gi: &Option<Gitignore>| match gi.as_ref().map(|g| g.matched(path, is_dir))
            {
                Some(Match::Ignore(_)) => Some(true),
                Some(Match::Whitelist(_)) => Some(false),
                _ => None,
            };
            by_ignore = by_ignore.or_else(|| decide(&folder.ignore));
            by_git = by_git.or_else(|| decide(&folder.git));
            if by_ignore.is_some() {
                break;
            }
        }
        by_ignore.or(by_git)
    }

    /// Reads `dir/name` if it is a regular file inside the workspace that the rules let be
    /// read; a symlink is never followed.
    fn ignore_file(&self, dir: &Path, name: &str) -> Option<Gitignore> {
        let abs = dir.join(name);
        let rel = abs.strip_prefix(self.shared.ws.root()).ok()?;
        let looked = self.shared.ws.dir().symlink_metadata(rel).ok()?;
        if !looked.is_file() || looked.len() > MAX_IGNORE_FILE_BYTES {
            return None;
        }
        if self.policy.refuses(self.tool, Access::Read, &abs).is_some() {
            return None;
        }
        let file = self.shared.ws.dir().open(rel).ok()?.into_std();
        let opened = file.metadata().ok()?;
        if opened.ino() != cap_std::fs::MetadataExt::ino(&looked)
            || opened.dev() != cap_std::fs::MetadataExt::dev(&looked)
        {
            // Swapped between the look and the open.
            return None;
        }
        let mut text = String::new();
        file.take(MAX_IGNORE_FILE_BYTES)
            .read_to_string(&mut text)
            .ok()?;
        let mut builder = GitignoreBuilder::new(dir);
        for line in text.lines() {
            // A bad line is skipped, as git and ripgrep skip it.
            let _ = builder.add_line(None, line);
        }
        builder.build().ok()
    }

    fn keep(&self, entry: &DirEntry) -> bool {
        let name = entry.file_name();
        if name == OsStr::new(".git") {
            return false;
        }
        let path = entry.path();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        let overridden = match self.overrides.as_ref().map(|o| o.matched(path, is_dir)) {
            Some(Match::Ignore(_)) => return false,
            Some(Match::Whitelist(_)) => true,
            _ => false,
        };
        if !overridden {
            match self.ignored(path, is_dir) {
                Some(true) => return false,
                Some(false) => {}
                None => {
                    if !self.hidden && name.as_encoded_bytes().first() == Some(&b'.') {
                        return false;
                    }
                }
            }
        }
        if self.policy.refuses(self.tool, Access::Read, path).is_some() {
            self.skips.hidden();
            return false;
        }
        true
    }
}

/// A walk ready to run.
pub(crate) struct Walk {
    pub(crate) builder: WalkBuilder,
    /// The base itself is hidden by the rules: nothing is to be walked.
    pub(crate) base_hidden: bool,
}

/// A walk of `base` (absolute, inside the workspace) for `tool`, showing hidden files when
/// `hidden`, with `overrides` (grep's `glob`) deciding first; what it skips is counted in
/// `skips`.
pub(crate) fn walk(
    shared: &Arc<Shared>,
    tool: &'static str,
    policy: &PathPolicies,
    base: &Path,
    hidden: bool,
    overrides: Option<Override>,
    skips: &Arc<Skips>,
) -> Walk {
    let base_hidden = policy.refuses(tool, Access::Read, base).is_some();
    if base_hidden {
        skips.hidden();
    }
    let filter = Arc::new(WalkFilter {
        shared: shared.clone(),
        tool,
        policy: policy.clone(),
        overrides,
        hidden,
        ignores: IgnoreFiles {
            cache: Mutex::new(HashMap::new()),
        },
        skips: skips.clone(),
    });
    let mut builder = WalkBuilder::new(base);
    // Every ignore file is read by the filter above, from inside the workspace only.
    builder
        .standard_filters(false)
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_ignore(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| filter.keep(e));
    Walk {
        builder,
        base_hidden,
    }
}

/// Counts a walk error (a folder that could not be listed) for the note.
pub(crate) fn walk_error(skips: &Skips, e: &ignore::Error) {
    let path = walk_error_path(e);
    skips.failed(path.as_deref().unwrap_or(Path::new("")), e.io_error());
}

fn walk_error_path(e: &ignore::Error) -> Option<PathBuf> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path.clone()),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            walk_error_path(err)
        }
        ignore::Error::Partial(errs) => errs.first().and_then(walk_error_path),
        _ => None,
    }
}
