//! Path policies: which files a tool may read or write, asked per path by the tools that
//! touch files, at the moment they touch them.
//!
//! The `tools/pre-execute` waterfall judges a call by the paths it names. That is not enough
//! for a tool that visits paths nobody named (a `grep` walking a tree lists and reads every
//! file under its root) nor for a path that is one thing when judged and another when used
//! (a symlink, a hard link, a name swapped in between). A [`PathPolicy`] is asked about each
//! path a body actually reads or writes, resolved and absolute:
//!
//! - [`PathPolicy::refuses`]: may `tool` read or write `path` **without anyone having been
//!   asked about that path**? A walk asks this of every entry it visits; whatever is refused
//!   is skipped (hidden), since a walk cannot stop to ask a human about each file.
//! - [`PathPolicy::forbids`]: is `path` refused **even to a call that was allowed or
//!   approved for it**? A body asks this of the paths its call named, just before it uses
//!   them, after every symlink is resolved. An `ask` rule was already put to the approver by
//!   the pre-execute waterfall, so it does not forbid; a deny rule, or a file no tool may
//!   write, does.
//!
//! The pipeline composes one [`PathPolicies`] from [`ProtectedPaths`] and every pre-execute
//! handler's [`crate::PreExecuteHandler::path_policy`], and hands it to every body (sub-calls
//! included) as [`crate::ToolContext::policy`].

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// What a tool is about to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Show the model something of it: its content, or its name in a listing.
    Read,
    /// Create, replace, change or delete it.
    Write,
}

impl Access {
    /// `read` or `write`.
    ///
    /// ```
    /// assert_eq!(dsh_core::Access::Write.as_str(), "write");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// A rule about paths, asked by the tools for each path they touch.
///
/// `path` is absolute, and resolved: every symlink inside the workspace already followed, so
/// it names the file that will be read or written, not an alias of it. An answer
/// `Some(reason)` refuses the access; the reason may be shown to the model (a walk shows only
/// how many entries it skipped, never which). Implementations must be cheap (a walk asks once
/// per entry) and must not block on anything but a `stat`.
///
/// ```
/// use dsh_core::{Access, PathPolicy};
/// use std::path::Path;
///
/// #[derive(Debug)]
/// struct NoKeys;
///
/// impl PathPolicy for NoKeys {
///     fn refuses(&self, _tool: &str, _access: Access, path: &Path) -> Option<String> {
///         (path.extension()? == "pem").then(|| "keys stay private".to_string())
///     }
/// }
///
/// assert!(NoKeys.refuses("grep", Access::Read, Path::new("/ws/a/key.pem")).is_some());
/// assert!(NoKeys.forbids("read_file", Access::Read, Path::new("/ws/a/key.pem")).is_some());
/// assert!(NoKeys.refuses("grep", Access::Read, Path::new("/ws/a/lib.rs")).is_none());
/// ```
pub trait PathPolicy: Send + Sync + fmt::Debug {
    /// Whether `tool` may `access` `path` when nobody was asked about this path (each entry
    /// of a walk): `Some(reason)` refuses. Rules that would ask refuse here.
    fn refuses(&self, tool: &str, access: Access, path: &Path) -> Option<String>;

    /// Whether `tool` may `access` `path`, a path its call named and that the pre-execute
    /// waterfall (and the approver, if it was asked) let through: `Some(reason)` refuses
    /// whatever was approved. By default the same answer as [`PathPolicy::refuses`]; a policy
    /// whose rules may ask narrows it to the rules that deny.
    fn forbids(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        self.refuses(tool, access, path)
    }
}

/// Several policies as one: the first refusal wins. Cheap to clone (one `Arc`).
///
/// ```
/// use dsh_core::{Access, PathPolicies, PathPolicy, ProtectedPaths};
/// use std::path::Path;
/// use std::sync::Arc;
/// let dir = tempfile::tempdir().unwrap();
/// let log = dir.path().join("session.jsonl");
/// let mut protected = ProtectedPaths::new();
/// protected.protect(&log);
/// let policies = PathPolicies::none().with(Arc::new(protected));
/// assert!(policies.forbids("write_file", Access::Write, &log).is_some());
/// assert!(policies.refuses("read_file", Access::Read, &log).is_none());
/// assert!(PathPolicies::none().refuses("write_file", Access::Write, &log).is_none());
/// ```
#[derive(Clone, Default)]
pub struct PathPolicies {
    list: Arc<[Arc<dyn PathPolicy>]>,
}

impl fmt::Debug for PathPolicies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.list.iter()).finish()
    }
}

impl PathPolicies {
    /// No policy: everything is let through (the workspace confinement still applies).
    pub fn none() -> PathPolicies {
        PathPolicies::default()
    }

    /// These policies, asked in order.
    pub fn new(list: Vec<Arc<dyn PathPolicy>>) -> PathPolicies {
        PathPolicies { list: list.into() }
    }

    /// These policies and then `policy`.
    pub fn with(&self, policy: Arc<dyn PathPolicy>) -> PathPolicies {
        let mut list: Vec<Arc<dyn PathPolicy>> = self.list.to_vec();
        list.push(policy);
        PathPolicies::new(list)
    }

    /// True when there is no policy to ask.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How many policies are asked.
    pub fn len(&self) -> usize {
        self.list.len()
    }
}

impl PathPolicy for PathPolicies {
    fn refuses(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        self.list.iter().find_map(|p| p.refuses(tool, access, path))
    }

    fn forbids(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        self.list.iter().find_map(|p| p.forbids(tool, access, path))
    }
}

/// A file's identity: device and inode. Two names with the same identity are one file (a hard
/// link, or a symlink followed).
type Identity = (u64, u64);

#[cfg(unix)]
fn identity(path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<Identity> {
    None
}

/// `path` made absolute and canonical as far as it exists: the longest existing ancestor is
/// canonicalized (symlinks followed) and the rest appended as written, `.` and `..` folded.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let real = dir.path().canonicalize().unwrap();
/// let p = dsh_core::policy::canonical_lenient(&dir.path().join("a/../b/new.txt"));
/// assert_eq!(p, real.join("b/new.txt"));
/// ```
pub fn canonical_lenient(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut folded = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    let mut existing = folded.as_path();
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return folded,
        }
    }
}

#[derive(Debug, Clone)]
struct Protected {
    /// Canonical (as far as it existed when protected).
    canonical: PathBuf,
    /// The file's identity when it was protected, if it existed.
    identity: Option<Identity>,
}

/// dsh's own files (the session log, the policy, the hooks settings, ...): no tool may
/// write them, whatever the rules say. Reading is not refused.
///
/// A write is refused when its target is a protected path, or lies inside a protected folder,
/// compared as canonical paths; and, when the target exists, when it is the same file
/// (device and inode) as a protected file, as it was when protected or as it is now, so a
/// hard link or a symlink made to it is caught too. A path protected before it exists is
/// protected from its creation on (its identity is taken at each check). A hard link made
/// to a file inside a protected folder is not caught (only the folder's own identity is
/// known); protect such files one by one.
///
/// ```
/// use dsh_core::{Access, PathPolicy, ProtectedPaths};
/// let dir = tempfile::tempdir().unwrap();
/// let log = dir.path().join("session.jsonl");
/// std::fs::write(&log, "").unwrap();
/// std::fs::hard_link(&log, dir.path().join("alias")).unwrap();
/// let mut protected = ProtectedPaths::new();
/// protected.protect(&log);
/// assert!(protected.refuses("write_file", Access::Write, &log).is_some());
/// assert!(protected.refuses("write_file", Access::Write, &dir.path().join("alias")).is_some());
/// assert!(protected.refuses("write_file", Access::Write, &dir.path().join("other")).is_none());
/// assert!(protected.refuses("read_file", Access::Read, &log).is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct ProtectedPaths {
    entries: Vec<Protected>,
}

impl ProtectedPaths {
    /// Nothing protected yet.
    pub fn new() -> ProtectedPaths {
        ProtectedPaths::default()
    }

    /// Protects `path` (a file, or a folder and everything in it). Relative paths are taken
    /// from the current directory. Touches the disk (canonicalize, stat).
    pub fn protect(&mut self, path: impl AsRef<Path>) -> &mut Self {
        let canonical = canonical_lenient(path.as_ref());
        let identity = identity(&canonical);
        if !self.entries.iter().any(|e| e.canonical == canonical) {
            self.entries.push(Protected {
                canonical,
                identity,
            });
        }
        self
    }

    /// True when nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The protected paths, canonical.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|e| e.canonical.as_path())
    }

    /// The protected entry `path` is, or is inside, or is the same file as.
    fn hit(&self, path: &Path) -> Option<&Protected> {
        if self.entries.is_empty() {
            return None;
        }
        let target = canonical_lenient(path);
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| target.starts_with(&e.canonical))
        {
            return Some(e);
        }
        let id = identity(&target)?;
        self.entries
            .iter()
            .find(|e| e.identity == Some(id) || identity(&e.canonical) == Some(id))
    }
}

impl PathPolicy for ProtectedPaths {
    fn refuses(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        if access != Access::Write {
            return None;
        }
        // Where dsh keeps its files is not the model's business: the reason names none.
        self.hit(path).map(|_| {
            format!(
                "it is one of dsh's own files; {tool} may not change it, whatever the rules say"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_folder_covers_what_is_inside_it_and_a_symlink_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&out, dir.path().join("link")).unwrap();
        let mut p = ProtectedPaths::new();
        p.protect(&out);
        let w = |rel: &str| p.refuses("write_file", Access::Write, &dir.path().join(rel));
        assert!(w("out").is_some());
        assert!(w("out/new/deep.txt").is_some());
        assert!(w("link/x").is_some(), "through a symlink");
        assert!(w("out/../elsewhere").is_none());
        assert!(
            w("outside").is_none(),
            "a sibling whose name starts the same"
        );
    }

    #[test]
    fn a_path_protected_before_it_exists_is_caught_through_a_hard_link_later() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("later.jsonl");
        let mut p = ProtectedPaths::new();
        p.protect(&log);
        std::fs::write(&log, "x").unwrap();
        std::fs::hard_link(&log, dir.path().join("alias")).unwrap();
        assert!(
            p.refuses("edit_file", Access::Write, &dir.path().join("alias"))
                .is_some()
        );
    }

    #[test]
    fn composites_answer_the_first_refusal_and_clone_cheaply() {
        #[derive(Debug)]
        struct Says(&'static str);
        impl PathPolicy for Says {
            fn refuses(&self, _: &str, _: Access, _: &Path) -> Option<String> {
                Some(self.0.into())
            }
        }
        let both = PathPolicies::new(vec![Arc::new(Says("first")), Arc::new(Says("second"))]);
        let copy = both.clone();
        assert!(Arc::ptr_eq(&both.list, &copy.list));
        assert_eq!(
            copy.refuses("t", Access::Read, Path::new("/x")).as_deref(),
            Some("first")
        );
        assert!(PathPolicies::none().is_empty());
    }
}
