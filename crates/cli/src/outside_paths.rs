//! Deny-read rules on absolute paths outside the workspace, for the shell's sandbox: the walk
//! of `policy_paths` only sees the workspace, so `deny = ["read(/srv/keys/**)"]` bound
//! `read_file` but not commands. Each such rule hides its literal prefix (the components
//! before the first glob character) whole; a rule whose prefix is `/` cannot be honoured by a
//! mount and is refused at start, saying why.

use crate::error::CliError;
use dsh_guards::{PermissionRules, RuleClass};
use std::path::{Path, PathBuf};

/// The tools whose read rules bind a command.
const READERS: [&str; 3] = ["read", "read_file", "*"];

/// The literal prefixes of the deny and ask read rules whose pattern is an absolute path
/// outside `root`.
pub fn hidden(root: &Path, rules: &PermissionRules) -> Result<Vec<PathBuf>, CliError> {
    let mut out = Vec::new();
    for (class, rule) in rules.rules() {
        if class == RuleClass::Allow || !READERS.contains(&rule.tool_part()) {
            continue;
        }
        let Some(pattern) = rule
            .source()
            .split_once('(')
            .and_then(|(_, rest)| rest.strip_suffix(')'))
        else {
            continue;
        };
        if !pattern.starts_with('/') {
            continue;
        }
        let prefix: PathBuf = Path::new(pattern)
            .components()
            .take_while(|c| {
                !c.as_os_str()
                    .to_string_lossy()
                    .contains(['*', '?', '[', '{'])
            })
            .collect();
        if prefix.starts_with(root) {
            // Inside the workspace: the walk of `policy_paths` covers it.
            continue;
        }
        if prefix == Path::new("/") || root.starts_with(&prefix) {
            return Err(CliError::Usage(format!(
                "rule `{}`: the shell's sandbox hides what a read rule outside the workspace \
                 names by its literal prefix, and `{}` holds the workspace or everything; \
                 name a folder that does not",
                rule.source(),
                prefix.display()
            )));
        }
        out.push(prefix);
    }
    Ok(out)
}
