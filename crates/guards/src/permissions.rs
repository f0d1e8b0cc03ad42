//! Permission rules: a `tools/pre-execute` handler loaded from TOML.
//!
//! ```toml
//! allow = ["read_file", "grep"]
//! ask   = ["write_file", "apply_patch"]
//! deny  = ["write_file(secrets/**)", "edit_file(.git)", "mcp__*"]
//! ```
//! A rule is `tool` or `tool(glob)`; the tool part is itself a glob (`mcp__github__*`), the
//! pattern part matches the tool's primary argument (its permission subjects: the path, for
//! file tools). Deny beats ask beats allow, whatever the order; a call no rule matches gets the
//! policy's `default` (`allow` unless the file says `default = "ask"` or `default = "deny"`;
//! the sandbox and the guards still apply). An allow-list only means something with
//! `default = "deny"` (or `"ask"`).
//!
//! ## Commands
//!
//! A tool whose subjects are commands ([`SubjectKind::Command`]: `shell`) is matched by words,
//! not paths: `shell(git status*)` matches commands whose first words are `git` and `status`
//! (a trailing `*`, or `:*`, allows any further words; without it the words must match
//! exactly). Each pattern word is a glob of its own (`shell(cargo * --release)`). The tool
//! gives one subject per simple command of a compound command (`a; b`, `a && b`, `a | b`,
//! `$(b)`, …): an `allow` rule covers the call only when every subject is covered by an allow
//! rule, while a `deny` or `ask` rule matches when it matches any one. A word only known when
//! the command runs (`$X`, `$(…)`, a glob) matches any pattern word for `deny` and `ask`, and
//! none for `allow`.
//!
//! Patterns read like `.gitignore` lines, over paths relative to the workspace root (see
//! [`PermissionRules::with_root`]; `./`, `..` and doubled slashes are resolved first):
//!
//! - A pattern that names a folder covers everything inside it: a rule matches a path when it
//!   matches the path itself **or any of its ancestor folders**. `edit_file(.git)` stops
//!   edits to `.git/config`, `edit_file(src/gen)` stops edits to `src/gen/a/b.rs`.
//! - A pattern without a `/` (a trailing one aside) matches a name at any depth: `.git` covers
//!   `sub/.git/HEAD`, `*.env` matches `a/b/prod.env`.
//! - A pattern with a `/` in it is matched from the root: `secrets/**` matches
//!   `secrets/key.pem` but neither `notsecrets/x` nor `a/secrets/x` (write `**/secrets` for
//!   any depth).
//! - `*` and `?` stay inside one path component; `**` crosses folders.
//! - A trailing `/` is ignored (`.git/` is `.git`): a rule cannot tell a folder from a file by
//!   its name, and a folder rule must also cover the folder itself.
//! - A pattern starting with `/` names an absolute path; such a pattern only matches subjects
//!   outside the root (inside it, subjects are relative).

use crate::error::GuardsError;
use async_trait::async_trait;
use dsh_core::SubjectKind;
use dsh_core::command_words::{self, Word};
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Which list a rule is in (and, as the policy's `default`, what an unmatched call gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleClass {
    /// `allow`.
    #[default]
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
    /// A pattern with a `/` (not counting a trailing one) is matched against the path and its
    /// ancestors from the root; one without is matched against each component, at any depth.
    anchored: bool,
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
        let pattern = match pattern {
            Some("") => return Err(invalid("the pattern is empty")),
            Some(p) => Some(strip_trailing_slashes(p)),
            None => None,
        };
        Ok(Rule {
            source: trimmed.to_string(),
            tool: glob(tool, text)?,
            pattern: match pattern {
                Some(p) => Some(glob(p, text)?),
                None => None,
            },
            anchored: pattern.is_some_and(|p| p.contains('/')),
        })
    }

    /// True when the rule covers this tool and (for a pattern rule) one of the subjects: the
    /// pattern matches the subject, or a folder the subject is inside (see the module docs).
    /// Subjects are taken as written; [`PermissionRules::classify`] normalizes them first.
    ///
    /// ```
    /// let rule = dsh_guards::Rule::parse("edit_file(.git)").unwrap();
    /// assert!(rule.matches("edit_file", &["sub/.git/HEAD".to_string()]));
    /// assert!(!rule.matches("edit_file", &[".github/ci.yml".to_string()]));
    /// ```
    pub fn matches(&self, tool: &str, subjects: &[String]) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(p) => subjects.iter().any(|s| self.covers(p, s)),
        }
    }

    /// The pattern matches the whole subject, or (anchored) one of its ancestor paths, or
    /// (unanchored) one of its components.
    fn covers(&self, pattern: &GlobMatcher, subject: &str) -> bool {
        if pattern.is_match(subject) {
            return true;
        }
        if self.anchored {
            // Every proper prefix ending before a `/`: `a/b/c` gives `a`, `a/b`.
            subject
                .match_indices('/')
                .map(|(i, _)| &subject[..i])
                .filter(|ancestor| !ancestor.is_empty())
                .any(|ancestor| pattern.is_match(ancestor))
        } else {
            subject
                .split('/')
                .filter(|component| !component.is_empty())
                .any(|component| pattern.is_match(component))
        }
    }

    /// The rule as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// `a/` is `a`; `/` stays `/`.
fn strip_trailing_slashes(pattern: &str) -> &str {
    let stripped = pattern.trim_end_matches('/');
    if stripped.is_empty() {
        pattern
    } else {
        stripped
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    default: Option<RuleClass>,
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
    default: RuleClass,
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
            default: file.default.unwrap_or_default(),
        })
    }

    /// What a call no rule matches gets (`allow` unless set).
    pub fn default_class(&self) -> RuleClass {
        self.default
    }

    /// Sets what a call no rule matches gets.
    pub fn with_default(mut self, class: RuleClass) -> Self {
        self.default = class;
        self
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

    /// [`PermissionRules::classify`] for subjects of the given kind: commands are matched by
    /// words (see the module docs), paths as paths. For commands the rule named for `allow` is
    /// the first allow rule that covers some subject (every subject is covered by one).
    pub fn classify_kind(
        &self,
        tool: &str,
        kind: SubjectKind,
        subjects: &[String],
    ) -> Option<(RuleClass, &Rule)> {
        match kind {
            SubjectKind::Path => self.classify(tool, subjects),
            SubjectKind::Command => command_rules::classify(self, tool, subjects),
        }
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
        let kind = call.tool.permission_subject_kind();
        Ok(match self.classify_kind(tool, kind, &subjects) {
            Some((RuleClass::Deny, rule)) => {
                PreExecuteOutcome::deny(format!("denied by permission rule `{}`", rule.source()))
            }
            Some((RuleClass::Ask, rule)) => PreExecuteOutcome::ask(format!(
                "permission rule `{}` asks before running {tool}",
                rule.source()
            )),
            Some((RuleClass::Allow, _)) => PreExecuteOutcome::allow(),
            None => match self.default {
                RuleClass::Allow => PreExecuteOutcome::allow(),
                RuleClass::Ask => PreExecuteOutcome::ask(format!(
                    "no permission rule allows this {tool} call, and the policy's default is ask"
                )),
                RuleClass::Deny => PreExecuteOutcome::deny(format!(
                    "no permission rule allows this {tool} call, and the policy's default is deny"
                )),
            },
        })
    }
}

/// Matching by words, for tools whose subjects are commands. Kept apart from the path
/// matching above: the two share only the rule lists.
mod command_rules {
    use super::*;

    /// A pattern read as words: each a glob, plus whether further words may follow.
    /// (`ask` and `deny` rules also see a subject's variants; see `dsh_core::command_words`.)
    struct WordPattern {
        words: Vec<GlobMatcher>,
        prefix: bool,
    }

    fn pattern(rule: &Rule) -> Option<WordPattern> {
        let source = rule
            .source
            .find('(')
            .map(|open| &rule.source[open + 1..rule.source.len() - 1])?;
        let trimmed = source.trim_end();
        let (body, prefix) = match trimmed
            .strip_suffix(":*")
            .or_else(|| trimmed.strip_suffix('*'))
        {
            Some(rest) => (rest, true),
            None => (trimmed, false),
        };
        let words = command_words::decode(body)
            .into_iter()
            .map(|w| match w {
                Word::Literal(text) => text,
                Word::Dynamic => "$?".into(),
            })
            .map(|text| {
                GlobBuilder::new(&text)
                    .literal_separator(false)
                    .build()
                    .map(|g| g.compile_matcher())
            })
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        Some(WordPattern { words, prefix })
    }

    /// Whether the subject can match: `must` (for allow) counts a dynamic word as matching
    /// nothing, otherwise (deny, ask) as matching anything.
    fn matches(pattern: &WordPattern, subject: &[Word], must: bool) -> bool {
        for (i, want) in pattern.words.iter().enumerate() {
            match subject.get(i) {
                None => return false,
                Some(Word::Dynamic) => return !must,
                Some(Word::Literal(w)) => {
                    if !want.is_match(w) {
                        return false;
                    }
                }
            }
        }
        let rest = &subject[pattern.words.len()..];
        pattern.prefix || rest.is_empty() || (!must && rest.iter().all(|w| *w == Word::Dynamic))
    }

    fn rule_matches(rule: &Rule, tool: &str, subject: &[Word], must: bool) -> bool {
        if !rule.tool.is_match(tool) {
            return false;
        }
        if rule.pattern.is_none() {
            return true;
        }
        pattern(rule).is_some_and(|p| matches(&p, subject, must))
    }

    pub(super) fn classify<'r>(
        rules: &'r PermissionRules,
        tool: &str,
        subjects: &[String],
    ) -> Option<(RuleClass, &'r Rule)> {
        let subjects: Vec<(Vec<Word>, bool)> = subjects
            .iter()
            .map(|s| command_words::decode_subject(s))
            .collect();
        for (class, list) in [(RuleClass::Deny, &rules.deny), (RuleClass::Ask, &rules.ask)] {
            // A bare `tool` rule matches even a call with no subject.
            let hit = list.iter().find(|r| {
                (r.pattern.is_none() && r.tool.is_match(tool))
                    || subjects
                        .iter()
                        .any(|(s, _)| rule_matches(r, tool, s, false))
            });
            if let Some(rule) = hit {
                return Some((class, rule));
            }
        }
        if let Some(rule) = rules
            .allow
            .iter()
            .find(|r| r.pattern.is_none() && r.tool.is_match(tool))
        {
            return Some((RuleClass::Allow, rule));
        }
        // Variants are for deny and ask: allow judges the commands as written.
        let written: Vec<&Vec<Word>> = subjects
            .iter()
            .filter(|(_, variant)| !variant)
            .map(|(s, _)| s)
            .collect();
        if written.is_empty() {
            return None;
        }
        let mut first = None;
        for subject in written {
            let rule = rules
                .allow
                .iter()
                .find(|r| rule_matches(r, tool, subject, true))?;
            first.get_or_insert(rule);
        }
        first.map(|rule| (RuleClass::Allow, rule))
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

    fn denied(rules: &PermissionRules, tool: &str, path: &str) -> bool {
        matches!(
            rules.classify(tool, &s(&[path])),
            Some((RuleClass::Deny, _))
        )
    }

    #[test]
    fn a_folder_rule_covers_what_is_inside_it_at_any_depth() {
        let rules = PermissionRules::from_toml(r#"deny = ["edit_file(.git)"]"#)
            .unwrap()
            .with_root("/ws");
        for p in [
            ".git",
            ".git/config",
            ".git/refs/heads/main",
            "sub/.git/HEAD",
            "./a/../.git/config",
            "/ws/vendor/lib/.git/index",
        ] {
            assert!(denied(&rules, "edit_file", p), "{p} escaped `.git`");
        }
        for p in [
            ".github/workflows/ci.yml",
            ".gitignore",
            "a.git/x",
            "src/git/x",
        ] {
            assert!(!denied(&rules, "edit_file", p), "{p} is not inside `.git`");
        }
        assert!(!denied(&rules, "write_file", ".git/config"), "other tools");
    }

    #[test]
    fn a_slashless_glob_matches_names_at_any_depth() {
        let rules = PermissionRules::from_toml(r#"deny = ["read_file(*.env)"]"#).unwrap();
        assert!(denied(&rules, "read_file", "prod.env"));
        assert!(denied(&rules, "read_file", "a/b/prod.env"));
        assert!(
            denied(&rules, "read_file", "conf.env/inner.txt"),
            "a folder named so"
        );
        assert!(!denied(&rules, "read_file", "a/b/prod.env.example"));
        assert!(!denied(&rules, "read_file", "a/envs/prod"));
    }

    #[test]
    fn a_pattern_with_a_slash_is_anchored_at_the_root() {
        let rules = PermissionRules::from_toml(
            r#"deny = ["write_file(secrets/**)", "edit_file(src/gen)", "grep(**/private/)"]"#,
        )
        .unwrap()
        .with_root("/ws");
        assert!(denied(&rules, "write_file", "secrets/key.pem"));
        assert!(denied(&rules, "write_file", "secrets/a/b/key.pem"));
        assert!(denied(&rules, "write_file", "/ws/secrets/k"));
        assert!(!denied(&rules, "write_file", "notsecrets/x"));
        assert!(!denied(&rules, "write_file", "a/secrets/x"), "anchored");
        assert!(!denied(&rules, "write_file", "secretsx/y"));

        assert!(denied(&rules, "edit_file", "src/gen"));
        assert!(denied(&rules, "edit_file", "src/gen/a/b.rs"));
        assert!(!denied(&rules, "edit_file", "src/generated/a.rs"));
        assert!(!denied(&rules, "edit_file", "other/src/gen/a.rs"));

        // `**/` reaches any depth; the trailing `/` still covers the folder itself.
        assert!(denied(&rules, "grep", "private"));
        assert!(denied(&rules, "grep", "a/b/private/c.txt"));
        assert!(!denied(&rules, "grep", "a/privateer/c.txt"));
    }

    #[test]
    fn an_absolute_pattern_covers_an_absolute_folder_outside_the_root() {
        let rules = PermissionRules::from_toml(r#"deny = ["read_file(/etc)"]"#)
            .unwrap()
            .with_root("/ws");
        assert!(denied(&rules, "read_file", "/etc/passwd"));
        assert!(denied(&rules, "read_file", "/etc/ssh/sshd_config"));
        assert!(!denied(&rules, "read_file", "/etcetera/x"));
        assert!(
            !denied(&rules, "read_file", "/ws/etc/x"),
            "inside the root: relative"
        );
    }

    #[test]
    fn deny_beats_ask_beats_allow_with_folder_rules_in_every_order() {
        let deny = || Rule::parse("edit_file(.git)").unwrap();
        let ask = || Rule::parse("edit_file(docs)").unwrap();
        let allow = || Rule::parse("edit_file").unwrap();
        // `.git` is in the ask list too, and the allow rule covers every path: the strictest
        // list with a matching rule wins, whatever order the rules were added in.
        let ask_git = || Rule::parse("edit_file(.git)").unwrap();
        let orders: [[RuleClass; 3]; 6] = [
            [RuleClass::Deny, RuleClass::Ask, RuleClass::Allow],
            [RuleClass::Deny, RuleClass::Allow, RuleClass::Ask],
            [RuleClass::Ask, RuleClass::Deny, RuleClass::Allow],
            [RuleClass::Ask, RuleClass::Allow, RuleClass::Deny],
            [RuleClass::Allow, RuleClass::Deny, RuleClass::Ask],
            [RuleClass::Allow, RuleClass::Ask, RuleClass::Deny],
        ];
        for order in orders {
            let mut rules = PermissionRules::default();
            for class in order {
                match class {
                    RuleClass::Deny => rules.add(class, deny()),
                    RuleClass::Ask => rules.add(class, ask()).add(class, ask_git()),
                    RuleClass::Allow => rules.add(class, allow()),
                };
            }
            let class = |p: &str| rules.classify("edit_file", &s(&[p])).map(|(c, _)| c);
            assert_eq!(class(".git/config"), Some(RuleClass::Deny), "{order:?}");
            assert_eq!(class("sub/.git/HEAD"), Some(RuleClass::Deny), "{order:?}");
            assert_eq!(
                class("docs/guide/intro.md"),
                Some(RuleClass::Ask),
                "{order:?}"
            );
            assert_eq!(class("src/main.rs"), Some(RuleClass::Allow), "{order:?}");
        }
        // The same in a file, lists written loosest first.
        let rules = PermissionRules::from_toml(
            r#"
            allow = ["edit_file", "edit_file(.git)"]
            ask = ["edit_file(docs/)", "edit_file(.git)"]
            deny = ["edit_file(.git/)"]
            "#,
        )
        .unwrap();
        let class = |p: &str| rules.classify("edit_file", &s(&[p])).map(|(c, _)| c);
        assert_eq!(class(".git/config"), Some(RuleClass::Deny));
        assert_eq!(class("docs/a.md"), Some(RuleClass::Ask));
        assert_eq!(class("README.md"), Some(RuleClass::Allow));
    }
}
