//! Removing a call's private folder whatever the command left in it: folders it made
//! unreadable (`chmod 000`), read-only folders holding data, trees deeper than `PATH_MAX`.
//! `std::fs::remove_dir_all` gives up on the first two when dsh is not root, and every call
//! would leave a `dsh-shell-*` folder behind.
//!
//! Runs once the call's processes are all gone, so nothing moves under it; every step is
//! relative to a directory handle and follows no symlink.

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, chmodat, openat, statat, unlinkat};
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Entries read from one directory before acting on them.
const BATCH: usize = 1024;

fn open_dir(parent: &OwnedFd, name: &std::ffi::CStr) -> rustix::io::Result<OwnedFd> {
    openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Removes `path` and everything beneath it.
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    let mut current = openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // The names from `path` down to `current`: a stack of names, not of handles, so depth
    // costs no descriptors.
    let mut names: Vec<CString> = Vec::new();
    loop {
        let mut entries: Vec<(CString, bool)> = Vec::new();
        let mut dir = Dir::read_from(&current)?;
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => {
                    FileType::from_raw_mode(
                        statat(&current, name, AtFlags::SYMLINK_NOFOLLOW)?.st_mode,
                    ) == FileType::Directory
                }
                _ => false,
            };
            entries.push((name.to_owned(), is_dir));
            if entries.len() >= BATCH {
                break;
            }
        }
        drop(dir);
        let mut subdir = None;
        for (name, is_dir) in entries {
            if is_dir {
                subdir.get_or_insert(name);
            } else {
                unlinkat(&current, name.as_c_str(), AtFlags::empty())?;
            }
        }
        if let Some(name) = subdir {
            // Whatever mode the command left, dsh owns the folder: make it listable.
            chmodat(
                &current,
                name.as_c_str(),
                Mode::from_raw_mode(0o700),
                AtFlags::empty(),
            )?;
            current = open_dir(&current, name.as_c_str())?;
            names.push(name);
            continue;
        }
        // `current` is empty (a full batch of files just went: read it again first).
        let mut again = Dir::read_from(&current)?;
        let empty = std::iter::from_fn(|| again.read())
            .filter_map(Result::ok)
            .all(|e| e.file_name() == c"." || e.file_name() == c"..");
        if !empty {
            continue;
        }
        match names.pop() {
            None => break,
            Some(name) => {
                let parent = open_dir(&current, c"..")?;
                unlinkat(&parent, name.as_c_str(), AtFlags::REMOVEDIR)?;
                current = parent;
            }
        }
    }
    drop(current);
    std::fs::remove_dir(path)
}

#[cfg(test)]
mod tests {
    use super::remove_tree;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn unreadable_read_only_and_deep_trees_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("call");
        let mut deep = root.join("deep");
        std::fs::create_dir_all(&deep).unwrap();
        for _ in 0..15 {
            deep = deep.join("a".repeat(200));
            std::fs::create_dir_all(&deep).unwrap();
        }
        std::fs::write(root.join("ro-file"), "x").unwrap();
        let locked = root.join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("data"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert!(dir.path().exists(), "a symlink was followed");
    }
}
