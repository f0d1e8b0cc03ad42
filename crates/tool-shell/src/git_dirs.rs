//! The git control entries of the workspace, found at every call: a command that could write
//! any repository's control folder could make the user's next `git status` there run its code
//! (hooks, `core.fsmonitor`, `commondir`, `alternates`, `info/`, submodules'
//! `modules/*/config`, worktrees). Every `.git` entry (a folder, or a `gitdir:` file and its
//! target) that exists when the call starts is read-only to the command: the workspace's own,
//! a nested repository's (`vendor/lib/.git`), a submodule's and a worktree's.
//!
//! The walk follows no symlink and is bounded; a folder it cannot list (a command locked it
//! with `chmod 000`) or a workspace past the bound makes the call `DENIED`: a repository
//! could hide there. After the call a second walk names the `.git` entries that appeared, so
//! the result can warn that git should not be run there.

use crate::config::{PathClass, PathRules};
use std::path::{Path, PathBuf};

/// What one walk of the workspace found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The `.git` entries.
    pub git: Vec<PathBuf>,
    /// What the path rules keep read-only.
    pub read_only: Vec<PathBuf>,
    /// What the path rules hide.
    pub hidden: Vec<PathBuf>,
}

/// The most entries one walk reads before it gives up (and the call is `DENIED`).
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// Every `.git` entry beneath `workspace` (not descending into them), or why the walk could
/// not be made.
pub(crate) fn find(workspace: &Path, max_entries: usize) -> Result<Vec<PathBuf>, String> {
    walk(workspace, None, max_entries).map(|found| found.git)
}

/// One walk: the `.git` entries, and what `rules` classify (a classified folder is not
/// entered; neither is a `.git`).
pub(crate) fn walk(
    workspace: &Path,
    rules: Option<&PathRules>,
    max_entries: usize,
) -> Result<Found, String> {
    let mut found = Found::default();
    let mut stack = vec![workspace.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            format!(
                "{} cannot be listed to find the git repositories to protect: {e}",
                dir.display()
            )
        })?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{} cannot be listed: {e}", dir.display()))?;
            seen += 1;
            if seen > max_entries {
                return Err(format!(
                    "the workspace holds more than {max_entries} entries: its git repositories \
                     cannot all be found to protect them"
                ));
            }
            let kind = entry
                .file_type()
                .map_err(|e| format!("{} cannot be read: {e}", entry.path().display()))?;
            if let Some(rules) = rules {
                match (rules.0)(&entry.path()) {
                    PathClass::Hidden => {
                        found.hidden.push(entry.path());
                        continue;
                    }
                    PathClass::ReadOnly => {
                        found.read_only.push(entry.path());
                        continue;
                    }
                    PathClass::Open => {}
                }
            }
            if entry.file_name() == ".git" {
                found.git.push(entry.path());
            } else if kind.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found.git.sort();
    Ok(found)
}

/// The paths to keep read-only for one `.git` entry: itself and, where it is a `gitdir:` file
/// (a worktree, a submodule), its target.
pub(crate) fn control_paths(dot_git: &Path) -> Vec<PathBuf> {
    let mut paths = vec![dot_git.to_path_buf()];
    if let Ok(meta) = std::fs::symlink_metadata(dot_git)
        && meta.is_file()
        && let Ok(text) = std::fs::read_to_string(dot_git)
        && let Some(target) = text.lines().find_map(|l| l.strip_prefix("gitdir:"))
        && let Some(parent) = dot_git.parent()
    {
        let target = Path::new(target.trim());
        paths.push(if target.is_absolute() {
            target.to_path_buf()
        } else {
            parent.join(target)
        });
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_repositories_and_gitdir_files_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [".git/hooks", "vendor/lib/.git", "a/b/c"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        std::fs::write(root.join("a/b/.git"), "gitdir: ../../.git/worktrees/b\n").unwrap();
        let found = find(root, 100).unwrap();
        assert_eq!(
            found,
            vec![
                root.join(".git"),
                root.join("a/b/.git"),
                root.join("vendor/lib/.git")
            ]
        );
        assert_eq!(
            control_paths(&root.join("a/b/.git"))[1],
            root.join("a/b/../../.git/worktrees/b")
        );
        assert!(find(root, 3).is_err(), "past the bound");
    }
}
