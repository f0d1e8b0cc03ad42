//! The permission rules as the shell's sandbox sees them: a walk of the workspace that asks
//! the rules, as a path policy, about every entry. What `write_file` may not write becomes a
//! read-only mount, what `read_file` may not read a hidden one. Done once as the run starts
//! (the bound on the workspace's size is checked there), and again by the shell at every call
//! through [`classifier`], so paths created later are covered too.

use crate::error::CliError;
use dsh_core::{Access, PathPolicy};
use dsh_guards::PermissionRules;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// The most entries the walk looks at. A workspace larger than that, under a policy with path
/// rules, does not start (the rules could not be applied to every path, so the shell would be
/// a way around them).
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// The tools whose write rules bind a command: a command cannot write where any of them may
/// not.
const WRITERS: [&str; 3] = ["write_file", "edit_file", "apply_patch"];

/// `(read_only, hidden)`: absolute paths inside `root`. A folder is reported once, not its
/// entries.
pub fn classify(
    root: &Path,
    rules: &PermissionRules,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), CliError> {
    let (mut read_only, mut hidden) = (Vec::new(), Vec::new());
    let mut pending = VecDeque::from([root.to_path_buf()]);
    let mut seen = 0usize;
    while let Some(dir) = pending.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return Err(CliError::Start(format!(
                    "the workspace has more than {MAX_WALK_ENTRIES} entries: the shell's sandbox \
                     cannot apply the policy's path rules to all of them (run without --policy \
                     path rules, or on a smaller workspace)"
                )));
            }
            let path = entry.path();
            if rules.refuses("read_file", Access::Read, &path).is_some() {
                hidden.push(path);
                continue;
            }
            if WRITERS
                .iter()
                .any(|tool| rules.refuses(tool, Access::Write, &path).is_some())
            {
                read_only.push(path);
                continue;
            }
            // Not through symlinks: the walk stays inside the workspace.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push_back(path);
            }
        }
    }
    Ok((read_only, hidden))
}

/// The same rules as a classifier the shell asks at every call, so that what a rule hides is
/// hidden whenever the file appeared (a `.env` made during a long `dsh serve` session).
pub fn classifier(
    rules: PermissionRules,
) -> impl Fn(&Path) -> dsh_tool_shell::PathClass + Send + Sync {
    move |path: &Path| {
        if rules.refuses("read_file", Access::Read, path).is_some() {
            dsh_tool_shell::PathClass::Hidden
        } else if WRITERS
            .iter()
            .any(|tool| rules.refuses(tool, Access::Write, path).is_some())
        {
            dsh_tool_shell::PathClass::ReadOnly
        } else {
            dsh_tool_shell::PathClass::Open
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_become_read_only_and_hidden_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["secrets", "src/gen", "docs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "secrets/key",
            "src/gen/a.rs",
            "src/main.rs",
            "docs/x.md",
            ".env",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        let rules = PermissionRules::from_toml(
            r#"deny = ["read_file(secrets/**)", "*(.env)", "write_file(src/gen/**)"]"#,
        )
        .unwrap()
        .with_root(&root);
        let (mut ro, mut hidden) = classify(&root, &rules).unwrap();
        ro.sort();
        hidden.sort();
        assert_eq!(hidden, vec![root.join(".env"), root.join("secrets")]);
        assert_eq!(ro, vec![root.join("src/gen")]);
    }
}
