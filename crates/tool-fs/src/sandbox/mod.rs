//! Workspace confinement: the path resolver and the `tools/pre-execute` handler built on it.
//!
//! [`resolve`] turns what the model wrote into a path relative to the workspace root with
//! every existing symlink followed, or refuses it with a [`Denial`]. It is the check; the
//! use goes through [`crate::Workspace`], whose `cap-std` directory handle refuses on its own
//! any open that would leave the root, so a symlink swapped in between check and use cannot
//! escape either.

mod hook;

pub use hook::Sandbox;
pub(crate) use hook::check_glob_pattern;

use crate::error::{Denial, FsError};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Longest path accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest path component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// Symlinks followed for one path before it counts as a loop (Linux's `MAXSYMLINKS`).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Checks a path without touching the disk and makes it relative to `root`: refuses NUL
/// bytes, overlong paths and names, `..` that climbs above the root and absolute paths
/// outside it; drops `.` and folds `a/..`. The empty result is the root itself.
///
/// ```
/// use dsh_tool_fs::sandbox::normalize;
/// use std::path::{Path, PathBuf};
/// let root = Path::new("/ws");
/// assert_eq!(normalize(root, "./src/../lib.rs").unwrap(), PathBuf::from("lib.rs"));
/// assert_eq!(normalize(root, "/ws/src/a.rs").unwrap(), PathBuf::from("src/a.rs"));
/// assert!(normalize(root, "../etc/passwd").is_err());
/// assert!(normalize(root, "/etc/passwd").is_err());
/// ```
pub fn normalize(root: &Path, path: &str) -> Result<PathBuf, FsError> {
    let deny = |why| Err(FsError::denied(path, why));
    if path.is_empty() {
        return deny(Denial::Empty);
    }
    if path.contains('\0') {
        return deny(Denial::NulByte);
    }
    if path.len() > MAX_PATH_BYTES {
        return deny(Denial::PathTooLong(path.len()));
    }
    let given = Path::new(path);
    if given.is_absolute() {
        let absolute = fold(given).map_err(|why| FsError::denied(path, why))?;
        return match absolute.strip_prefix(root) {
            Ok(rel) => Ok(rel.to_path_buf()),
            Err(_) => deny(Denial::Outside),
        };
    }
    fold(given).map_err(|why| FsError::denied(path, why))
}

/// Folds `.` and `..` lexically. For an absolute path `..` at `/` stays at `/`; for a
/// relative one, climbing above the start is [`Denial::ParentEscape`].
fn fold(path: &Path) -> Result<PathBuf, Denial> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Prefix(_) => return Err(Denial::Outside),
            Component::RootDir => out.push(Component::RootDir),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    if path.is_absolute() {
                        continue;
                    }
                    return Err(Denial::ParentEscape);
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(name) => {
                if name.len() > MAX_NAME_BYTES {
                    return Err(Denial::NameTooLong(name.len()));
                }
                out.push(name);
                depth += 1;
            }
        }
    }
    Ok(out)
}

/// [`normalize`], then follows every symlink on the way that exists, refusing one that
/// points outside `root` and loops. `root` must be canonical (no symlinks in it). The
/// answer is relative to `root`; the part of it that does not exist yet is kept as written
/// (a file about to be created).
///
/// ```
/// use dsh_tool_fs::sandbox::resolve;
/// let dir = tempfile::tempdir().unwrap();
/// let root = dir.path().canonicalize().unwrap();
/// std::fs::create_dir(root.join("real")).unwrap();
/// std::os::unix::fs::symlink("real", root.join("alias")).unwrap();
/// std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
/// assert_eq!(resolve(&root, "alias/new.txt").unwrap(), std::path::PathBuf::from("real/new.txt"));
/// assert!(resolve(&root, "etc/passwd").unwrap_err().to_string().contains("points outside"));
/// ```
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, FsError> {
    let relative = normalize(root, path)?;
    follow_links(root, relative).map_err(|why| FsError::denied(path, why))
}

fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        })
        .collect()
}

fn follow_links(root: &Path, relative: PathBuf) -> Result<PathBuf, Denial> {
    let mut pending = components(&relative);
    let mut done = PathBuf::new();
    let mut hops = 0usize;
    while let Some(name) = pending.pop_front() {
        let candidate = done.join(&name);
        let on_disk = root.join(&candidate);
        let is_link = std::fs::symlink_metadata(&on_disk)
            .map(|m| m.file_type().is_symlink())
            .ok();
        match is_link {
            Some(true) => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Denial::SymlinkLoop);
                }
                let link = display(&candidate);
                let Ok(target) = std::fs::read_link(&on_disk) else {
                    // Gone since the lstat: what is there now is checked again at open time.
                    done = candidate;
                    continue;
                };
                let outside = || Denial::SymlinkOutside { link: link.clone() };
                let base = if target.is_absolute() {
                    let folded = fold(&target).map_err(|_| outside())?;
                    folded
                        .strip_prefix(root)
                        .map_err(|_| outside())?
                        .to_path_buf()
                } else {
                    fold(&done.join(&target)).map_err(|why| match why {
                        Denial::NameTooLong(_) => why,
                        _ => outside(),
                    })?
                };
                // Start over from the root: the target may hold symlinks of its own.
                let mut next = components(&base);
                next.extend(pending);
                pending = next;
                done = PathBuf::new();
            }
            Some(false) => done = candidate,
            None => {
                // Missing (or unreadable): nothing below it can be a symlink today.
                done = candidate;
                done.extend(pending.drain(..));
            }
        }
    }
    Ok(done)
}

/// A path relative to the root as the model is shown it: `/`-separated, `.` for the root.
///
/// ```
/// use dsh_tool_fs::sandbox::display;
/// assert_eq!(display(std::path::Path::new("")), ".");
/// assert_eq!(display(std::path::Path::new("src/lib.rs")), "src/lib.rs");
/// ```
pub fn display(relative: &Path) -> String {
    if relative.as_os_str().is_empty() {
        ".".to_string()
    } else {
        relative.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_forms_fold_inside_the_root() {
        let root = Path::new("/ws");
        for (given, want) in [
            (".", ""),
            ("a/./b", "a/b"),
            ("a/b/../c", "a/c"),
            ("/ws", ""),
            ("/ws/../ws/x", "x"),
            ("a//b", "a/b"),
        ] {
            assert_eq!(
                normalize(root, given).unwrap(),
                PathBuf::from(want),
                "{given}"
            );
        }
    }

    #[test]
    fn lexical_refusals_name_their_reason() {
        let root = Path::new("/ws");
        let why = |p: &str| match normalize(root, p) {
            Err(FsError::PathDenied { why, .. }) => why,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(why(""), Denial::Empty);
        assert_eq!(why("a\0b"), Denial::NulByte);
        assert_eq!(why(".."), Denial::ParentEscape);
        assert_eq!(why("a/../../b"), Denial::ParentEscape);
        assert_eq!(why("/ws-evil/x"), Denial::Outside);
        assert_eq!(why("/ws/../etc"), Denial::Outside);
        assert_eq!(why(&"n".repeat(256)), Denial::NameTooLong(256));
        assert_eq!(
            why(&"a/".repeat(3000)),
            Denial::PathTooLong(6000),
            "total length"
        );
    }
}
