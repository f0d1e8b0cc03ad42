//! The `permissions` block of Claude Code's settings files, as dsh permission rules.
//!
//! ```json
//! {"permissions": {"allow": ["Bash(npm run test:*)", "Read"],
//!                  "ask":   ["Bash(git push:*)"],
//!                  "deny":  ["Read(./secrets/**)", "Edit(//etc/**)", "mcp__github"]}}
//! ```
//!
//! Each rule becomes one or more rules of dsh's syntax (see `dsh_guards::permissions`):
//!
//! - `Edit(…)` binds every tool that edits files (`Edit`, `MultiEdit`, `Write`), `Read(…)` every
//!   tool that reads them (`Read`, `Grep`, `Glob`, `LS`), as in Claude Code.
//! - Paths are gitignore-style: `//abs/path` is an absolute path, `~/x` is in the home folder,
//!   `/x` and `./x` are anchored at the project (the workspace), and `x` matches at any depth.
//! - `Bash(npm run test:*)` is a prefix of words, which dsh's command rules read as they are.
//! - `mcp__server` covers every tool of that server (`mcp__server__*`).
//!
//! Files are merged as Claude Code merges them: the rules of every file count, and deny beats
//! ask beats allow whichever file a rule came from.

use crate::error::ClaudeCodeError;
use serde_json::Value;
use std::path::Path;

/// The rules read from one or more settings files, in dsh's syntax.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermissionLists {
    /// `allow` rules.
    pub allow: Vec<String>,
    /// `ask` rules.
    pub ask: Vec<String>,
    /// `deny` rules.
    pub deny: Vec<String>,
}

impl PermissionLists {
    /// Adds the `permissions` block of a settings file (nothing when it has none).
    ///
    /// ```
    /// use dsh_claude_code::settings::{PermissionLists, Places};
    /// let mut lists = PermissionLists::default();
    /// let text = r#"{"permissions": {"deny": ["Read(./.env)"], "allow": ["Bash(npm run test:*)"]}}"#;
    /// lists.add_json(text, Places::default()).unwrap();
    /// assert!(lists.deny.contains(&"Read(.env/**)".to_string()));
    /// assert!(lists.deny.contains(&"Grep(.env/**)".to_string()));
    /// assert_eq!(lists.allow, ["Bash(npm run test:*)"]);
    /// ```
    pub fn add_json(&mut self, text: &str, places: Places<'_>) -> Result<(), ClaudeCodeError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ClaudeCodeError::Invalid(e.to_string()))?;
        let Some(permissions) = value.get("permissions") else {
            return Ok(());
        };
        let Value::Object(block) = permissions else {
            return Err(ClaudeCodeError::Invalid(
                "`permissions` is not an object".into(),
            ));
        };
        for (key, list) in [
            ("allow", &mut self.allow),
            ("ask", &mut self.ask),
            ("deny", &mut self.deny),
        ] {
            let Some(rules) = block.get(key) else {
                continue;
            };
            let Value::Array(rules) = rules else {
                return Err(ClaudeCodeError::Invalid(format!(
                    "`permissions.{key}` is not a list"
                )));
            };
            for rule in rules {
                let Value::String(rule) = rule else {
                    return Err(ClaudeCodeError::Invalid(format!(
                        "`permissions.{key}` holds {rule}, not a string"
                    )));
                };
                for translated in translate_rule(rule, places)
                    .into_iter()
                    .chain(net_rule_of(rule))
                {
                    if !list.contains(&translated) {
                        list.push(translated);
                    }
                }
            }
        }
        // The sandbox's allowed domains: `net(…)` allow rules (dsh's proxy enforces them).
        if let Some(domains) = value.pointer("/sandbox/network/allowedDomains") {
            let Value::Array(domains) = domains else {
                return Err(ClaudeCodeError::Invalid(
                    "`sandbox.network.allowedDomains` is not a list".into(),
                ));
            };
            for domain in domains {
                let Value::String(domain) = domain else {
                    return Err(ClaudeCodeError::Invalid(format!(
                        "`sandbox.network.allowedDomains` holds {domain}, not a string"
                    )));
                };
                let rule = format!("net({})", domain.trim());
                if !self.allow.contains(&rule) {
                    self.allow.push(rule);
                }
            }
        }
        Ok(())
    }
}

/// `WebFetch(domain:HOST)` also names the network destination `net(HOST)`: what a command
/// may reach through dsh's proxy.
///
/// ```
/// use dsh_claude_code::settings::{PermissionLists, Places};
/// let mut lists = PermissionLists::default();
/// let text = r#"{"permissions": {"allow": ["WebFetch(domain:docs.rs)"]},
///               "sandbox": {"network": {"allowedDomains": ["*.npmjs.org"]}}}"#;
/// lists.add_json(text, Places::default()).unwrap();
/// assert_eq!(lists.allow, ["WebFetch(domain:docs.rs)", "net(docs.rs)", "net(*.npmjs.org)"]);
/// ```
fn net_rule_of(rule: &str) -> Option<String> {
    let domain = rule
        .trim()
        .strip_prefix("WebFetch(domain:")?
        .strip_suffix(')')?
        .trim();
    (!domain.is_empty()).then(|| format!("net({domain})"))
}

/// The tools a Claude Code rule's tool name binds.
fn tools_of(tool: &str) -> Vec<String> {
    match tool {
        "Edit" => vec!["Edit".into(), "MultiEdit".into(), "Write".into()],
        "Read" => vec!["Read".into(), "Grep".into(), "Glob".into(), "LS".into()],
        // `mcp__server` names a whole server.
        t if t.starts_with("mcp__") && !t["mcp__".len()..].contains("__") => {
            vec![format!("{t}__*")]
        }
        t => vec![t.to_string()],
    }
}

/// Where a settings file's paths point: `~` and the project (the workspace).
#[derive(Debug, Clone, Copy, Default)]
pub struct Places<'a> {
    /// The home folder (`~/`).
    pub home: Option<&'a Path>,
    /// The workspace root: absolute paths inside it become patterns relative to it, as dsh's
    /// rules match paths inside the workspace relative to its root.
    pub root: Option<&'a Path>,
}

/// A path specifier of Claude Code in dsh's pattern syntax.
fn path_pattern(spec: &str, places: Places<'_>) -> String {
    let absolute = if let Some(abs) = spec.strip_prefix("//") {
        Some(format!("/{abs}"))
    } else if let Some(rest) = spec.strip_prefix("~/")
        && let Some(home) = places.home
    {
        Some(format!(
            "{}/{rest}",
            home.display().to_string().trim_end_matches('/')
        ))
    } else {
        None
    };
    if let Some(abs) = absolute {
        let inside = places.root.and_then(|root| {
            let root = root.display().to_string();
            abs.strip_prefix(root.trim_end_matches('/'))
                .and_then(|rest| rest.strip_prefix('/'))
                .map(|rest| format!("/{rest}"))
        });
        match inside {
            // Inside the workspace: anchored at its root, like `/x`.
            Some(rel) => return path_pattern(&rel, Places::default()),
            None => return abs,
        }
    }
    let anchored = spec.strip_prefix("./").or_else(|| spec.strip_prefix('/'));
    match anchored {
        // A pattern with a `/` in it is matched from the workspace root; a single name is
        // anchored as the folder (or file) it names and everything in it.
        Some(rest) if rest.trim_end_matches('/').contains('/') => rest.to_string(),
        Some(rest) => format!("{}/**", rest.trim_end_matches('/')),
        None => spec.to_string(),
    }
}

/// One Claude Code rule as dsh rules.
///
/// ```
/// use dsh_claude_code::settings::{translate_rule, Places};
/// let none = Places::default();
/// assert_eq!(translate_rule("Edit(//etc/**)", none), ["Edit(/etc/**)", "MultiEdit(/etc/**)", "Write(/etc/**)"]);
/// assert_eq!(translate_rule("Bash(npm run test:*)", none), ["Bash(npm run test:*)"]);
/// assert_eq!(translate_rule("mcp__github", none), ["mcp__github__*"]);
/// ```
pub fn translate_rule(rule: &str, places: Places<'_>) -> Vec<String> {
    let rule = rule.trim();
    let (tool, spec) = match rule.find('(') {
        Some(open) if rule.ends_with(')') => (&rule[..open], Some(&rule[open + 1..rule.len() - 1])),
        _ => (rule, None),
    };
    let is_path_tool = matches!(
        tool,
        "Read" | "Edit" | "Write" | "MultiEdit" | "Grep" | "Glob" | "LS"
    );
    let spec = match spec {
        // `Bash(*)` and `Read(*)`-style "everything" rules are the bare tool.
        Some("*") | Some("**") | Some("") => None,
        Some(s) if is_path_tool => Some(path_pattern(s, places)),
        Some(s) => Some(s.to_string()),
        None => None,
    };
    tools_of(tool)
        .into_iter()
        .map(|t| match &spec {
            Some(s) => format!("{t}({s})"),
            None => t,
        })
        .collect()
}

/// The rules a profile rule adds for the built-in tool under it: `Edit(src/**)` also as
/// `edit_file(src/**)`, so the checks the built-in's body makes as it touches each path (by
/// its own name) apply the profile's rules too.
///
/// ```
/// use dsh_claude_code::settings::builtin_alias;
/// assert_eq!(builtin_alias("Read"), Some("read_file"));
/// assert_eq!(builtin_alias("mcp__x__y"), None);
/// ```
pub fn builtin_alias(tool: &str) -> Option<&'static str> {
    crate::builtin_of(tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_like_claude_codes() {
        let none = Places::default();
        let places = Places {
            home: Some(Path::new("/home/u")),
            root: Some(Path::new("/w/proj")),
        };
        assert_eq!(
            translate_rule("Read(./secrets/**)", none)[0],
            "Read(secrets/**)"
        );
        assert_eq!(translate_rule("Read(/docs)", none)[0], "Read(docs/**)");
        assert_eq!(translate_rule("Read(*.env)", none)[0], "Read(*.env)");
        assert_eq!(
            translate_rule("Read(~/.ssh/**)", places)[0],
            "Read(/home/u/.ssh/**)"
        );
        assert_eq!(
            translate_rule("Edit(//w/proj/src/**)", places)[0],
            "Edit(src/**)"
        );
        assert_eq!(
            translate_rule("Edit(//w/proj/Cargo.toml)", places)[0],
            "Edit(Cargo.toml/**)"
        );
        assert_eq!(
            translate_rule("Edit(//w/project/x)", places)[0],
            "Edit(/w/project/x)"
        );
        assert_eq!(translate_rule("Bash(*)", none), ["Bash"]);
        assert_eq!(
            translate_rule("WebFetch(domain:x.com)", none),
            ["WebFetch(domain:x.com)"]
        );
    }

    #[test]
    fn files_merge_and_bad_blocks_are_errors() {
        let mut lists = PermissionLists::default();
        let none = Places::default();
        lists
            .add_json(r#"{"permissions": {"allow": ["Bash(ls:*)"]}}"#, none)
            .unwrap();
        lists
            .add_json(
                r#"{"permissions": {"deny": ["Bash(ls:*)"]}, "hooks": {}}"#,
                none,
            )
            .unwrap();
        lists.add_json(r#"{"model": "x"}"#, none).unwrap();
        assert_eq!(lists.allow, ["Bash(ls:*)"]);
        assert_eq!(lists.deny, ["Bash(ls:*)"]);
        assert!(
            lists
                .add_json(r#"{"permissions": {"deny": "Bash"}}"#, none)
                .is_err()
        );
        assert!(lists.add_json("{not json", none).is_err());
    }
}
