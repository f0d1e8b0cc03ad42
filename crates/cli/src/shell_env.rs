//! Which variables of dsh's environment `shell` commands get besides the core set:
//! `--shell-env NAME` (repeatable) and the policy's `[shell] env`.

use crate::cli::PipelineOptions;
use dsh_guards::PermissionRules;

/// `--shell-env`'s value: a variable name, or a prefix ending in `*`.
pub fn parse_name(name: &str) -> Result<String, String> {
    if dsh_guards::is_env_name(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "`{name}` is not a variable name (letters, digits, `_`, optionally ending in `*`)"
        ))
    }
}

/// The names of `--shell-env` and of the policy's `[shell] env`, each once.
pub fn names(options: &PipelineOptions, rules: Option<&PermissionRules>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let from_policy = rules.map(|r| r.shell().env.as_slice()).unwrap_or_default();
    for name in options.shell_env.iter().chain(from_policy) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}
