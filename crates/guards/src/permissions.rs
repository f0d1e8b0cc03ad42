//! Permission rules: a `tools/pre-execute` handler loaded from TOML.
//!
//! ```toml
//! allow = ["read_file", "grep"]
//! ask   = ["write_file", "apply_patch"]
//! deny  = ["write_file(secrets/**)", "mcp__*"]
//! ```
//! A rule is `tool` or `tool(glob)`; the tool part is itself a glob (`mcp__github__*`), the
//! pattern part matches the tool's primary argument (its permission subjects: the path, for
//! file tools). Deny beats ask beats allow, whatever the order; a call no rule matches is
//! allowed (the sandbox and the guards still apply).

use crate::error::GuardsError;
use async_trait::async_trait;
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RuleClass {
    /// `allow`.
    Allow,
    /// `ask`.
    Ask,
    /// `deny`.
    Deny,
}

/// One parsed rule.
#[derive(Clone)]
pub struct Rule {
    source: String,
    tool: GlobMatcher,
    pattern: Option<GlobMatcher>,
    /// A pattern without `/` matches the last path component at any depth, as in `.gitignore`.
    basename_only: bool,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn glob(text: &str, rule: &str) -> Result<GlobMatcher, GuardsError> {
    GlobBuilder::new(text)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| GuardsError::InvalidRule {
            rule: rule.to_string(),
            reason: e.to_string(),
        })
}

impl Rule {
    /// Parses `tool` or `tool(pattern)`.
    ///
    /// ```
    /// let rule = dsh_guards::Rule::parse("write_file(secrets/**)").unwrap();
    /// assert!(rule.matches("write_file", &["secrets/key.pem".to_string()]));
    /// assert!(!rule.matches("write_file", &["src/main.rs".to_string()]));
    /// assert!(dsh_guards::Rule::parse("write_file(").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Rule, GuardsError> {
        let trimmed = text.trim();
        let invalid = |reason: &str| GuardsError::InvalidRule {
            rule: text.to_string(),
            reason: reason.to_string(),
        };
        let (tool, pattern) = match trimmed.find('(') {
            Some(open) => {
                let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                    return Err(invalid("a pattern must end with `)`"));
                };
                (&trimmed[..open], Some(inner))
            }
            None => (trimmed, None),
        };
        if tool.is_empty() {
            return Err(invalid("the tool name is empty"));
        }
        if tool.contains(')') {
            return Err(invalid("unbalanced `)`"));
        }
        Ok(Rule {
            source: trimmed.to_string(),
            tool: glob(tool, text)?,
            pattern: match pattern {
                Some("") => return Err(invalid("the pattern is empty")),
                Some(p) => Some(glob(p, text)?),
                None => None,
            },
            basename_only: pattern.is_some_and(|p| !p.contains('/')),
        })
    }

    /// True when the rule covers this tool and (for a pattern rule) one of the subjects.
    pub fn matches(&self, tool: &str, subjects: &[String]) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(p) => subjects.iter().any(|s| {
                p.is_match(s)
                    || (self.basename_only && s.rsplit('/').next().is_some_and(|b| p.is_match(b)))
            }),
        }
    }

    /// The rule as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// The permission-rules pre-execute handler.
///
/// ```
/// use dsh_guards::{PermissionRules, RuleClass};
/// let rules = PermissionRules::from_toml(r#"
///     allow = ["write_file"]
///     deny = ["write_file(secrets/**)"]
/// "#).unwrap();
/// assert_eq!(rules.classify("write_file", &["secrets/a".into()]).map(|(c, _)| c), Some(RuleClass::Deny));
/// assert_eq!(rules.classify("write_file", &["src/a".into()]).map(|(c, _)| c), Some(RuleClass::Allow));
/// assert!(rules.classify("read_file", &["src/a".into()]).is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct PermissionRules {
    allow: Vec<Rule>,
    ask: Vec<Rule>,
    deny: Vec<Rule>,
    root: Option<PathBuf>,
}

impl PermissionRules {
    /// Parses the TOML form (top-level arrays `allow`, `ask`, `deny`).
    pub fn from_toml(text: &str) -> Result<PermissionRules, GuardsError> {
        let file: RulesFile =
            toml::from_str(text).map_err(|e| GuardsError::InvalidRules(e.to_string()))?;
        let parse = |list: Vec<String>| -> Result<Vec<Rule>, GuardsError> {
            list.iter().map(|r| Rule::parse(r)).collect()
        };
        Ok(PermissionRules {
            allow: parse(file.allow)?,
            ask: parse(file.ask)?,
            deny: parse(file.deny)?,
            root: None,
        })
    }

    /// Absolute paths under `root` are matched as paths relative to it.
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// Adds a rule to a list.
    pub fn add(&mut self, class: RuleClass, rule: Rule) -> &mut Self {
        match class {
            RuleClass::Allow => self.allow.push(rule),
            RuleClass::Ask => self.ask.push(rule),
            RuleClass::Deny => self.deny.push(rule),
        }
        self
    }

    /// The strictest list with a matching rule, and that rule.
    pub fn classify(&self, tool: &str, subjects: &[String]) -> Option<(RuleClass, &Rule)> {
        let subjects: Vec<String> = subjects.iter().map(|s| self.normalize(s)).collect();
        [
            (RuleClass::Deny, &self.deny),
            (RuleClass::Ask, &self.ask),
            (RuleClass::Allow, &self.allow),
        ]
        .into_iter()
        .find_map(|(class, rules)| {
            rules
                .iter()
                .find(|r| r.matches(tool, &subjects))
                .map(|r| (class, r))
        })
    }

    /// Lexical normalization so `./a/../secrets/x` is matched as `secrets/x`.
    fn normalize(&self, subject: &str) -> String {
        let path = Path::new(subject);
        let relative = match &self.root {
            Some(root) if path.is_absolute() => path.strip_prefix(root).unwrap_or(path),
            _ => path,
        };
        let mut out: Vec<&std::ffi::OsStr> = Vec::new();
        let absolute = relative.is_absolute();
        for c in relative.components() {
            match c {
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    if out.pop().is_none() && !absolute {
                        out.push("..".as_ref());
                    }
                }
                Component::Normal(n) => out.push(n),
            }
        }
        let joined = out
            .iter()
            .map(|s| s.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if absolute {
            format!("/{joined}")
        } else {
            joined
        }
    }
}

#[async_trait]
impl PreExecuteHandler for PermissionRules {
    fn name(&self) -> &str {
        "permissions"
    }

    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        let tool = call.tool.name();
        let subjects = call.tool.permission_subjects(call.arguments);
        Ok(match self.classify(tool, &subjects) {
            Some((RuleClass::Deny, rule)) => {
                PreExecuteOutcome::deny(format!("denied by permission rule `{}`", rule.source()))
            }
            Some((RuleClass::Ask, rule)) => PreExecuteOutcome::ask(format!(
                "permission rule `{}` asks before running {tool}",
                rule.source()
            )),
            Some((RuleClass::Allow, _)) | None => PreExecuteOutcome::allow(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn deny_beats_ask_beats_allow_in_any_order() {
        let rules = PermissionRules::from_toml(
            r#"
            deny = ["edit_file(secrets/**)"]
            allow = ["edit_file", "edit_file(secrets/**)"]
            ask = ["edit_file(src/**)", "edit_file(secrets/**)"]
            "#,
        )
        .unwrap();
        let class = |p: &str| rules.classify("edit_file", &s(&[p])).map(|(c, _)| c);
        assert_eq!(class("secrets/a"), Some(RuleClass::Deny));
        assert_eq!(class("src/lib.rs"), Some(RuleClass::Ask));
        assert_eq!(class("README.md"), Some(RuleClass::Allow));
    }

    #[test]
    fn lexical_tricks_do_not_dodge_a_rule() {
        let rules = PermissionRules::from_toml(r#"deny = ["write_file(secrets/**)"]"#)
            .unwrap()
            .with_root("/ws");
        for p in [
            "./secrets/k",
            "src/../secrets/k",
            "/ws/secrets/k",
            "secrets//k",
        ] {
            assert!(
                matches!(
                    rules.classify("write_file", &s(&[p])),
                    Some((RuleClass::Deny, _))
                ),
                "{p} escaped the rule"
            );
        }
    }

    #[test]
    fn bad_files_and_rules_are_clear_errors() {
        assert!(matches!(
            PermissionRules::from_toml("alow = []"),
            Err(GuardsError::InvalidRules(_))
        ));
        assert!(matches!(
            PermissionRules::from_toml(r#"deny = ["(x)"]"#),
            Err(GuardsError::InvalidRule { .. })
        ));
        assert!(PermissionRules::from_toml(r#"deny = ["a(b"]"#).is_err());
        assert!(PermissionRules::from_toml(r#"deny = ["a()"]"#).is_err());
        assert!(PermissionRules::from_toml(r#"deny = ["a([)"]"#).is_err());
    }

    #[test]
    fn tool_part_is_a_glob_and_slashless_patterns_match_at_any_depth() {
        let rules = PermissionRules::from_toml(
            r#"deny = ["mcp__*", "read_file(*.pem)", "grep(src/*.rs)"]"#,
        )
        .unwrap();
        assert!(rules.classify("mcp__github__create", &[]).is_some());
        assert!(rules.classify("read_file", &s(&["key.pem"])).is_some());
        assert!(
            rules
                .classify("read_file", &s(&["dir/deep/key.pem"]))
                .is_some()
        );
        assert!(rules.classify("read_file", &s(&["key.pem.txt"])).is_none());
        assert!(rules.classify("grep", &s(&["src/a.rs"])).is_some());
        assert!(
            rules.classify("grep", &s(&["src/x/a.rs"])).is_none(),
            "`*` stays in one folder"
        );
    }
}
