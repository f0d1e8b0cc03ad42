//! The policy file's `[shell]` table: settings of the `shell` tool that belong with the rules
//! (a policy that allows `shell(cargo test*)` also says what the command may see).
//!
//! ```toml
//! [shell]
//! env = ["VIRTUAL_ENV", "CARGO_*"]   # passed to commands besides the core set
//! net_default = "deny"                # what `net(…)` rules give an unmatched destination
//! ```

use crate::error::GuardsError;
use serde::Deserialize;

/// The `[shell]` table of a policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellPolicy {
    /// Environment variables commands get besides the core set: names, or a prefix ending
    /// in `*` (`CARGO_*`).
    #[serde(default)]
    pub env: Vec<String>,
    /// What a network destination no `net(…)` rule matches gets: `deny` unless set (the
    /// policy's `default` never reaches the network).
    #[serde(default)]
    pub net_default: Option<crate::RuleClass>,
}

impl ShellPolicy {
    /// Refuses a name that could not be a variable's (a typo must not pass nothing, nor
    /// everything: a lone `*` would hand commands every secret of dsh's environment).
    pub(crate) fn check(&self) -> Result<(), GuardsError> {
        for name in &self.env {
            if !is_env_name(name) {
                return Err(GuardsError::InvalidRules(format!(
                    "[shell] env: `{name}` is not a variable name (letters, digits, `_`, \
                     optionally ending in `*` after at least one of them)"
                )));
            }
        }
        Ok(())
    }
}

/// A variable name, or a non-empty prefix of one followed by `*`.
pub fn is_env_name(name: &str) -> bool {
    let stem = name.strip_suffix('*').unwrap_or(name);
    !stem.is_empty()
        && !stem.starts_with(|c: char| c.is_ascii_digit())
        && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::is_env_name;

    #[test]
    fn names_and_prefixes_only() {
        for ok in ["VIRTUAL_ENV", "CARGO_*", "x1"] {
            assert!(is_env_name(ok), "{ok}");
        }
        for bad in ["", "*", "A B", "1X", "A=B", "A**"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }
}
