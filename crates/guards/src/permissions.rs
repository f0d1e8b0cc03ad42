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
//! ## Intents: `read(glob)` and `write(glob)`
//!
//! `write(secrets/**)` matches every call that declares it writes a matching path, whatever
//! the tool: `write_file`, `edit_file`, `apply_patch`, and any tool that declares its path
//! arguments ([`dsh_core::ToolDefinition::path_args`], a typed tool's `WorkspacePath`, an
//! MCP tool whose schema carries the annotation). `read(glob)` does the same for reads. One
//! rule instead of one per writing tool, so a forgotten tool is not a hole. As a path policy
//! they bind the paths a body touches too (each file a walk visits, the resolved target of a
//! write), and the shell's sandbox (read-only and hidden paths) honours them.
//!
//! ## Every rule names a tool
//!
//! [`PermissionRules::check_tools`] refuses rules whose tool part names no known tool (a
//! registered tool, an intent, or a name under a prefix such as an MCP server's
//! `mcp__NAME__`): `deny = ["wirte_file(secrets/**)"]` must fail loudly, not protect nothing.
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
//! - A pattern ending in `/**` also covers the folder itself: `grep(secrets/**)` stops a
//!   `grep` rooted at `secrets`, which would read everything the rule covers.
//!
//! ## The same rules for the paths a call does not name
//!
//! The rules are also a [`PathPolicy`] ([`PreExecuteHandler::path_policy`]), asked by the
//! tools about each path they touch, absolute and resolved (so the rules need
//! [`PermissionRules::with_root`]):
//!
//! - **Reading** (`Access::Read`: a file's content, or a name in a listing). Every file a
//!   walk visits must pass the rules `read_file` would: an entry is hidden when a `deny` or
//!   `ask` rule with a pattern covers it, for the walking tool or for `read_file`
//!   (`grep` skips what `read_file(secrets/**)` covers), or when a `deny` or `ask` rule
//!   without a pattern names `read_file` and not the walking tool. An `ask` rule hides because
//!   a walk cannot stop to ask about each file. A rule without a pattern that names the
//!   walking tool itself was judged when the call was let through, so it hides nothing.
//! - **Writing** (`Access::Write`): a `deny` or `ask` rule with a pattern, for the writing
//!   tool, that covers the target.
//! - A path the call named was put to the waterfall (and to the approver, for an `ask`)
//!   already: asked again as it is used ([`PathPolicy::forbids`]), only the `deny` rules
//!   refuse it, so an approved call is not refused by the rule that asked.

use crate::error::GuardsError;
use async_trait::async_trait;
use dsh_core::SubjectKind;
use dsh_core::command_words::{self, Word};
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use dsh_core::{Access, DeclaredPath, PathPolicy};
use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The tool whose rules every read must also pass.
const READ_FILE: &str = "read_file";
/// The intent rule about reading: `read(glob)` matches every tool that declares it reads a
/// matching path.
pub const INTENT_READ: &str = "read";
/// The intent rule about writing: `write(glob)` matches every tool that declares it writes a
/// matching path.
pub const INTENT_WRITE: &str = "write";

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
    /// For a pattern ending in `/**`, the pattern without it: the folder itself is covered
    /// too, since a search rooted there reads everything the rule covers.
    folder: Option<GlobMatcher>,
    /// For an intent rule (`read(…)`, `write(…)`), the access it is about: it matches every
    /// tool that declares that access to a matching path, whatever the tool's name.
    intent: Option<Access>,
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
        let folder = match pattern.map(folder_of) {
            Some(Some(f)) => Some(glob(f, text)?),
            _ => None,
        };
        let intent = match tool {
            INTENT_READ => Some(Access::Read),
            INTENT_WRITE => Some(Access::Write),
            _ => None,
        };
        Ok(Rule {
            intent,
            source: trimmed.to_string(),
            tool: glob(tool, text)?,
            pattern: match pattern {
                Some(p) => Some(glob(p, text)?),
                None => None,
            },
            anchored: pattern.is_some_and(|p| p.contains('/')),
            folder,
        })
    }

    /// The same rule for another tool: `Edit(src/**)` as `edit_file(src/**)` (a tool profile's
    /// rules also bind the built-in its tool stands on).
    ///
    /// ```
    /// let rule = dsh_guards::Rule::parse("Edit(src/**)").unwrap();
    /// assert_eq!(rule.for_tool("edit_file").unwrap().source(), "edit_file(src/**)");
    /// ```
    pub fn for_tool(&self, tool: &str) -> Result<Rule, GuardsError> {
        let rest = self.source.find('(').map_or("", |i| &self.source[i..]);
        Rule::parse(&format!("{tool}{rest}"))
    }

    /// Whether the rule's tool part matches this tool name.
    pub fn names_tool(&self, tool: &str) -> bool {
        self.tool.is_match(tool)
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
        if self.intent.is_some() || !self.tool.is_match(tool) {
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
        if self.folder.as_ref().is_some_and(|f| f.is_match(subject)) {
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

    /// For an intent rule (`read(glob)`, `write(glob)`), the access it matches.
    ///
    /// ```
    /// use dsh_core::Access;
    /// assert_eq!(dsh_guards::Rule::parse("write(secrets/**)").unwrap().intent(), Some(Access::Write));
    /// assert_eq!(dsh_guards::Rule::parse("write_file(secrets/**)").unwrap().intent(), None);
    /// ```
    pub fn intent(&self) -> Option<Access> {
        self.intent
    }

    /// An intent rule for `access` that covers one of `paths` (normalized), or that has no
    /// pattern and `paths` is not empty.
    fn intent_covers(&self, access: Access, paths: &[String]) -> bool {
        if self.intent != Some(access) || paths.is_empty() {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(p) => paths.iter().any(|s| self.covers(p, s)),
        }
    }

    /// The rule as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The tool part as written (a name or a glob).
    pub fn tool_part(&self) -> &str {
        match self.source.find('(') {
            Some(open) => self.source[..open].trim(),
            None => self.source.trim(),
        }
    }

    /// Whether the tool part can name a tool of `known`: it matches a known name, or it can
    /// name a tool under a known prefix (a literal name must be longer than the prefix; a glob's
    /// literal head must agree with the prefix), or it is an intent.
    fn names_a_known_tool(&self, known: &KnownTools) -> bool {
        if self.intent.is_some() {
            return true;
        }
        let tool = self.tool_part();
        if known.names.iter().any(|n| self.tool.is_match(n)) {
            return true;
        }
        let head = match tool.find(['*', '?', '[', '{', '\\']) {
            Some(i) => &tool[..i],
            None => {
                return known
                    .prefixes
                    .iter()
                    .any(|p| tool.len() > p.len() && tool.starts_with(p.as_str()));
            }
        };
        known
            .prefixes
            .iter()
            .any(|p| p.starts_with(head) || head.starts_with(p.as_str()))
    }

    /// True when this rule, whatever the subjects, covers every tool whose name starts with
    /// `prefix`: it has no pattern, and its tool part is a literal prefix of `prefix` followed
    /// by a lone `*` (`mcp__github__*`, `mcp__*`, `*`).
    fn covers_every_tool_with_prefix(&self, prefix: &str) -> bool {
        if self.pattern.is_some() || self.intent.is_some() {
            return false;
        }
        let tool = self.source.trim();
        let Some(literal) = tool.strip_suffix('*') else {
            return false;
        };
        !literal.contains(['*', '?', '[', ']', '{', '}', '\\']) && prefix.starts_with(literal)
    }

    /// A rule with a pattern that covers `subject` (already normalized), for `tool`.
    fn covers_for(&self, tool: &str, subject: &str) -> bool {
        self.intent.is_none()
            && self.tool.is_match(tool)
            && self
                .pattern
                .as_ref()
                .is_some_and(|p| self.covers(p, subject))
    }

    /// Whether this rule keeps `tool` from reading `subject` unasked (see the module docs).
    fn hides_read(&self, tool: &str, subject: &str) -> bool {
        if self.intent.is_some() {
            return self.intent_covers(Access::Read, &[subject.to_string()]);
        }
        match &self.pattern {
            Some(_) => self.covers_for(tool, subject) || self.covers_for(READ_FILE, subject),
            None => self.tool.is_match(READ_FILE) && !self.tool.is_match(tool),
        }
    }
}

/// `a/**` (or `a/**/**`) is `a`: the folder whose whole content the pattern covers.
fn folder_of(pattern: &str) -> Option<&str> {
    let mut folder = pattern;
    while let Some(rest) = folder.strip_suffix("/**") {
        folder = rest;
    }
    (folder.len() < pattern.len() && !folder.is_empty()).then_some(folder)
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

/// The tools a policy's rules may name: every rule must name at least one of them, so a typo
/// (`wirte_file(secrets/**)`) is refused when the policy loads instead of protecting nothing.
///
/// Known are the registered tools, and any name under a prefix of a tool source whose tools
/// are listed only once it starts (an MCP server's `mcp__NAME__`).
///
/// ```
/// use dsh_guards::{KnownTools, PermissionRules};
/// let known = KnownTools::new(["read_file", "write_file"]).with_prefix("mcp__github__");
/// let ok = PermissionRules::from_toml(r#"deny = ["write_file(secrets/**)", "mcp__github__push", "mcp__*"]"#).unwrap();
/// assert!(ok.check_tools(&known).is_ok());
/// let typo = PermissionRules::from_toml(r#"deny = ["wirte_file(secrets/**)"]"#).unwrap();
/// let err = typo.check_tools(&known).unwrap_err().to_string();
/// assert!(err.contains("wirte_file") && err.contains("write_file"), "{err}");
/// ```
#[derive(Debug, Clone, Default)]
pub struct KnownTools {
    names: Vec<String>,
    prefixes: Vec<String>,
}

impl KnownTools {
    /// These tool names.
    pub fn new<I, S>(names: I) -> KnownTools
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut known = KnownTools::default();
        for name in names {
            known.add(name);
        }
        known
    }

    /// The tools registered in `registry`.
    pub fn from_registry(registry: &dsh_core::ToolRegistry) -> KnownTools {
        KnownTools::new(registry.names())
    }

    /// Adds one tool name.
    pub fn add(&mut self, name: impl Into<String>) -> &mut Self {
        let name = name.into();
        if !self.names.contains(&name) {
            self.names.push(name);
        }
        self
    }

    /// Every name starting with `prefix` (and longer than it) is known too: the tools of a
    /// source listed only once it starts (`mcp__NAME__`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> KnownTools {
        let prefix = prefix.into();
        if !self.prefixes.contains(&prefix) {
            self.prefixes.push(prefix);
        }
        self
    }

    /// The known names and prefixes, as an error message lists them.
    fn describe(&self) -> String {
        let mut names: Vec<String> = self.names.iter().map(|n| format!("`{n}`")).collect();
        names.sort();
        let mut parts = vec![names.join(", ")];
        parts.push("the intents `read(…)` and `write(…)`".into());
        if !self.prefixes.is_empty() {
            let mut prefixes: Vec<String> =
                self.prefixes.iter().map(|p| format!("`{p}*`")).collect();
            prefixes.sort();
            parts.push(format!("any tool named {}", prefixes.join(", ")));
        }
        parts.retain(|p| !p.is_empty());
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join("; and ")
        }
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
    #[serde(default)]
    shell: crate::shell_policy::ShellPolicy,
}

/// The permission-rules pre-execute handler, and the same rules as a [`PathPolicy`]. Cheap
/// to clone (the rule lists are shared).
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
    allow: Arc<Vec<Rule>>,
    ask: Arc<Vec<Rule>>,
    deny: Arc<Vec<Rule>>,
    root: Option<Arc<Root>>,
    default: RuleClass,
    /// Tools whose unmatched calls get another class than `default`.
    defaults_for: Arc<Vec<(String, RuleClass)>>,
    /// The `[shell]` table.
    shell: Arc<crate::shell_policy::ShellPolicy>,
    /// The `net(…)` rules (`None`: there are none, and the proxy stays off).
    net: Option<Arc<dsh_core::net_rules::NetRules>>,
}

/// The workspace root, as given and canonical: the policy is asked about resolved paths.
#[derive(Debug)]
struct Root {
    given: PathBuf,
    canonical: Option<PathBuf>,
}

impl PermissionRules {
    /// Parses the TOML form (top-level arrays `allow`, `ask`, `deny`, and the shell tool's
    /// `[shell]` table: [`crate::ShellPolicy`]).
    pub fn from_toml(text: &str) -> Result<PermissionRules, GuardsError> {
        let file: RulesFile =
            toml::from_str(text).map_err(|e| GuardsError::InvalidRules(e.to_string()))?;
        file.shell.check()?;
        let (allow, net_allow) = crate::net_policy::split(file.allow);
        let (ask, net_ask) = crate::net_policy::split(file.ask);
        let (deny, net_deny) = crate::net_policy::split(file.deny);
        let net = crate::net_policy::rules(&net_allow, &net_ask, &net_deny, &file.shell)?;
        let parse = |list: Vec<String>| -> Result<Vec<Rule>, GuardsError> {
            list.iter().map(|r| Rule::parse(r)).collect()
        };
        Ok(PermissionRules {
            allow: Arc::new(parse(allow)?),
            ask: Arc::new(parse(ask)?),
            deny: Arc::new(parse(deny)?),
            root: None,
            default: file.default.unwrap_or_default(),
            defaults_for: Arc::default(),
            shell: Arc::new(file.shell),
            net: net.map(Arc::new),
        })
    }

    /// The policy's network rules (`net(…)` in `allow`, `ask`, `deny`), with their own
    /// default (`deny` unless `[shell] net_default` says otherwise). `None` when the policy
    /// has none: then commands get no proxy (the network stays as `--shell-network` says).
    pub fn net_rules(&self) -> Option<&dsh_core::net_rules::NetRules> {
        self.net.as_deref()
    }

    /// Replaces the network rules (a profile's settings mapped onto `net(…)` rules).
    pub fn with_net_rules(mut self, rules: Option<dsh_core::net_rules::NetRules>) -> Self {
        self.net = rules.map(Arc::new);
        self
    }

    /// The policy file's `[shell]` table (empty when it has none).
    pub fn shell(&self) -> &crate::shell_policy::ShellPolicy {
        &self.shell
    }

    /// Refuses the rules when one of them names no tool of `known` (see [`KnownTools`]): a
    /// typo in a deny rule must never protect nothing. Call it once the tools are registered,
    /// before the first call runs.
    pub fn check_tools(&self, known: &KnownTools) -> Result<(), GuardsError> {
        let unknown = [&self.deny, &self.ask, &self.allow]
            .into_iter()
            .flat_map(|list| list.iter())
            .find(|rule| !rule.names_a_known_tool(known));
        match unknown {
            None => Ok(()),
            Some(rule) => Err(GuardsError::UnknownTool {
                rule: rule.source().to_string(),
                known: known.describe(),
            }),
        }
    }

    /// True when every call of `tool` is denied, whatever its arguments: a deny rule without
    /// a pattern names it, or the default is `deny` and no allow or ask rule (nor intent rule)
    /// could let a call through. Such a tool need not be offered to the model.
    ///
    /// ```
    /// use dsh_guards::PermissionRules;
    /// let rules = PermissionRules::from_toml(r#"deny = ["shell", "write_file(secrets/**)"]"#).unwrap();
    /// assert!(rules.denies_every_call("shell"));
    /// assert!(!rules.denies_every_call("write_file"));
    /// let list = PermissionRules::from_toml("default = \"deny\"\nallow = [\"grep(src/**)\"]").unwrap();
    /// assert!(!list.denies_every_call("grep"));
    /// assert!(list.denies_every_call("write_file"));
    /// ```
    pub fn denies_every_call(&self, tool: &str) -> bool {
        let named = |r: &Rule| r.intent.is_none() && r.tool.is_match(tool);
        if self.deny.iter().any(|r| r.pattern.is_none() && named(r)) {
            return true;
        }
        self.default == RuleClass::Deny
            && !self
                .allow
                .iter()
                .chain(self.ask.iter())
                .any(|r| named(r) || r.intent.is_some())
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

    /// What an unmatched call of `tool` gets, instead of the policy's `default` (a profile
    /// asks before tools that change things).
    pub fn with_default_for(mut self, tool: impl Into<String>, class: RuleClass) -> Self {
        Arc::make_mut(&mut self.defaults_for).push((tool.into(), class));
        self
    }

    /// What an unmatched call of `tool` gets.
    pub fn default_for(&self, tool: &str) -> RuleClass {
        self.defaults_for
            .iter()
            .find(|(t, _)| t == tool)
            .map_or(self.default, |(_, class)| *class)
    }

    /// Every rule, with its list.
    pub fn rules(&self) -> impl Iterator<Item = (RuleClass, &Rule)> {
        [
            (RuleClass::Deny, &*self.deny),
            (RuleClass::Ask, &*self.ask),
            (RuleClass::Allow, &*self.allow),
        ]
        .into_iter()
        .flat_map(|(class, rules)| rules.iter().map(move |r| (class, r)))
    }

    /// Absolute paths under `root` (as given, or canonical) are matched as paths relative to
    /// it. The path policy is asked about resolved paths: without a root, rules with
    /// relative patterns cover none of them.
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Self {
        let given = root.into();
        let canonical = given.canonicalize().ok().filter(|c| *c != given);
        self.root = Some(Arc::new(Root { given, canonical }));
        self
    }

    /// True when a deny rule refuses every call of every tool named `prefix…`, so a source
    /// of such tools (an MCP server: `mcp__NAME__`) need not even be started.
    ///
    /// ```
    /// use dsh_guards::PermissionRules;
    /// let rules = PermissionRules::from_toml(r#"deny = ["mcp__github__*", "mcp__x__y"]"#).unwrap();
    /// assert!(rules.denies_every_tool_with_prefix("mcp__github__"));
    /// assert!(!rules.denies_every_tool_with_prefix("mcp__x__"));
    /// assert!(!rules.denies_every_tool_with_prefix("mcp__gitlab__"));
    /// ```
    pub fn denies_every_tool_with_prefix(&self, prefix: &str) -> bool {
        self.deny
            .iter()
            .any(|rule| rule.covers_every_tool_with_prefix(prefix))
    }

    /// Adds a rule to a list.
    pub fn add(&mut self, class: RuleClass, rule: Rule) -> &mut Self {
        let list = match class {
            RuleClass::Allow => &mut self.allow,
            RuleClass::Ask => &mut self.ask,
            RuleClass::Deny => &mut self.deny,
        };
        Arc::make_mut(list).push(rule);
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

    /// [`PermissionRules::classify_kind`] with the call's declared paths for the intent
    /// rules (see [`PermissionRules::classify_declared`]); for commands, an intent rule that
    /// matches a declared path is stricter than what the commands match.
    pub fn classify_call(
        &self,
        tool: &str,
        kind: SubjectKind,
        subjects: &[String],
        declared: &[DeclaredPath],
    ) -> Option<(RuleClass, &Rule)> {
        match kind {
            SubjectKind::Path => self.classify_declared(tool, subjects, declared),
            SubjectKind::Command => {
                let by_paths = self.classify_declared("", &[], declared);
                let by_words = command_rules::classify(self, tool, subjects);
                match (by_paths, by_words) {
                    (Some(a), Some(b)) => Some(if a.0 >= b.0 { a } else { b }),
                    (a, b) => a.or(b),
                }
            }
        }
    }

    /// The strictest list with a matching rule, and that rule.
    pub fn classify(&self, tool: &str, subjects: &[String]) -> Option<(RuleClass, &Rule)> {
        self.classify_declared(tool, subjects, &[])
    }

    /// [`PermissionRules::classify`], with the paths the call declares
    /// ([`dsh_core::ToolDefinition::declared_paths`]) for the intent rules: `read(glob)` and
    /// `write(glob)` match a call that declares that access to a matching path.
    ///
    /// ```
    /// use dsh_core::{Access, DeclaredPath};
    /// use dsh_guards::{PermissionRules, RuleClass};
    /// let rules = PermissionRules::from_toml(r#"deny = ["write(secrets/**)"]"#).unwrap();
    /// let writes = |raw: &str| vec![DeclaredPath { arg: "path".into(), raw: raw.into(), access: Access::Write }];
    /// let class = |tool, d: &[DeclaredPath]| rules.classify_declared(tool, &[], d).map(|(c, _)| c);
    /// assert_eq!(class("write_file", &writes("secrets/k")), Some(RuleClass::Deny));
    /// assert_eq!(class("my_exporter", &writes("./secrets/x/y")), Some(RuleClass::Deny));
    /// assert_eq!(class("my_exporter", &writes("out/k")), None);
    /// ```
    pub fn classify_declared(
        &self,
        tool: &str,
        subjects: &[String],
        declared: &[DeclaredPath],
    ) -> Option<(RuleClass, &Rule)> {
        let subjects: Vec<String> = subjects.iter().map(|s| self.normalize(s)).collect();
        let by_access = |access: Access| -> Vec<String> {
            declared
                .iter()
                .filter(|d| d.access == access)
                .map(|d| self.normalize(&d.raw))
                .collect()
        };
        let (reads, writes) = (by_access(Access::Read), by_access(Access::Write));
        [
            (RuleClass::Deny, &*self.deny),
            (RuleClass::Ask, &*self.ask),
            (RuleClass::Allow, &*self.allow),
        ]
        .into_iter()
        .find_map(|(class, rules)| {
            rules
                .iter()
                .find(|r| {
                    r.matches(tool, &subjects)
                        || r.intent_covers(Access::Read, &reads)
                        || r.intent_covers(Access::Write, &writes)
                })
                .map(|r| (class, r))
        })
    }

    /// Lexical normalization so `./a/../secrets/x` is matched as `secrets/x`.
    fn normalize(&self, subject: &str) -> String {
        let path = Path::new(subject);
        let relative = match &self.root {
            Some(root) if path.is_absolute() => path
                .strip_prefix(&root.given)
                .ok()
                .or_else(|| {
                    let canonical = root.canonical.as_ref()?;
                    path.strip_prefix(canonical).ok()
                })
                .unwrap_or(path),
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
        let declared = call.tool.declared_paths(call.arguments);
        Ok(match self.classify_call(tool, kind, &subjects, &declared) {
            Some((RuleClass::Deny, rule)) => {
                PreExecuteOutcome::deny(format!("denied by permission rule `{}`", rule.source()))
            }
            Some((RuleClass::Ask, rule)) => PreExecuteOutcome::ask(format!(
                "permission rule `{}` asks before running {tool}",
                rule.source()
            )),
            Some((RuleClass::Allow, _)) => PreExecuteOutcome::allow(),
            None => match self.default_for(tool) {
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

    fn path_policy(&self) -> Option<Arc<dyn PathPolicy>> {
        Some(Arc::new(self.clone()))
    }
}

impl PermissionRules {
    /// The first rule of `lists` (strictest first) that keeps `tool` from `access`ing `path`.
    fn keeping<'a>(
        &self,
        lists: &[&'a [Rule]],
        tool: &str,
        access: Access,
        path: &Path,
    ) -> Option<&'a Rule> {
        let subject = self.normalize(&path.to_string_lossy());
        lists
            .iter()
            .flat_map(|l| l.iter())
            .find(|rule| match access {
                Access::Read => rule.hides_read(tool, &subject),
                Access::Write => {
                    rule.covers_for(tool, &subject)
                        || rule.intent_covers(Access::Write, std::slice::from_ref(&subject))
                }
            })
    }
}

impl PathPolicy for PermissionRules {
    fn refuses(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        let verb = match access {
            Access::Read => "hidden",
            Access::Write => "refused",
        };
        self.keeping(&[&self.deny, &self.ask], tool, access, path)
            .map(|rule| format!("{verb} by permission rule `{}`", rule.source()))
    }

    fn forbids(&self, tool: &str, access: Access, path: &Path) -> Option<String> {
        self.keeping(&[&self.deny], tool, access, path)
            .map(|rule| format!("denied by permission rule `{}`", rule.source()))
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
    fn a_rule_naming_no_known_tool_is_refused_naming_the_known_ones() {
        let known = KnownTools::new(["read_file", "write_file", "edit_file", "shell"])
            .with_prefix("mcp__github__");
        let check = |toml: &str| {
            PermissionRules::from_toml(toml)
                .unwrap()
                .check_tools(&known)
        };
        for good in [
            r#"deny = ["write_file(secrets/**)"]"#,
            r#"ask = ["*"]"#,
            r#"deny = ["*(secrets/**)", "{write,edit}_file(.git)"]"#,
            r#"deny = ["mcp__github__create_issue", "mcp__github__*", "mcp__*"]"#,
            r#"allow = ["shell(git status*)"]"#,
        ] {
            assert!(check(good).is_ok(), "{good}: {:?}", check(good));
        }
        for (bad, named) in [
            (
                r#"deny = ["wirte_file(secrets/**)"]"#,
                "wirte_file(secrets/**)",
            ),
            (
                r#"allow = ["read_file"]
deny = ["mcp__gitlab__*"]"#,
                "mcp__gitlab__*",
            ),
            (r#"ask = ["mcp__github__"]"#, "mcp__github__"),
            (r#"deny = ["bash(rm *)"]"#, "bash(rm *)"),
        ] {
            let err = check(bad).unwrap_err();
            assert!(matches!(err, GuardsError::UnknownTool { .. }), "{bad}");
            let text = err.to_string();
            assert!(text.contains(named), "{text}");
            assert!(
                text.contains("`write_file`"),
                "names the known tools: {text}"
            );
            assert!(
                text.contains("`mcp__github__*`"),
                "and the prefixes: {text}"
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

    #[test]
    fn a_folder_pattern_also_covers_a_search_rooted_at_the_folder() {
        let rules = PermissionRules::from_toml(
            r#"deny = ["grep(secrets/**)", "glob(**/private/**)", "grep(logs/*)"]"#,
        )
        .unwrap();
        assert!(denied(&rules, "grep", "secrets"));
        assert!(denied(&rules, "grep", "./secrets/"));
        assert!(denied(&rules, "glob", "a/b/private"));
        assert!(!denied(&rules, "grep", "secretsx"));
        assert!(
            !denied(&rules, "grep", "logs"),
            "only `/**` covers the folder"
        );
        assert!(!denied(&rules, "grep", "."));
    }

    fn policy(toml: &str) -> PermissionRules {
        PermissionRules::from_toml(toml).unwrap().with_root("/ws")
    }

    fn hides(rules: &PermissionRules, tool: &str, path: &str) -> bool {
        rules
            .refuses(tool, Access::Read, &Path::new("/ws").join(path))
            .is_some()
    }

    #[test]
    fn reads_unasked_pass_the_rules_of_read_file_and_of_the_tool() {
        let rules = policy(r#"deny = ["*(secrets/**)", "*(.env)", "read_file(*.pem)"]"#);
        for p in [
            "secrets",
            "secrets/key.txt",
            ".env",
            "sub/.env",
            "certs/a.pem",
        ] {
            assert!(hides(&rules, "grep", p), "{p}");
            assert!(hides(&rules, "list_dir", p), "{p}");
        }
        for p in ["src/lib.rs", "secretsx/a", ".envrc", "README.md"] {
            assert!(!hides(&rules, "grep", p), "{p}");
        }
        let glob_only = policy(r#"deny = ["glob(docs/**)"]"#);
        assert!(hides(&glob_only, "glob", "docs/a.md"));
        assert!(
            !hides(&glob_only, "grep", "docs/a.md"),
            "another tool's rule"
        );
    }

    #[test]
    fn ask_hides_from_a_walk_but_an_approved_named_path_is_not_forbidden() {
        let rules = policy(r#"ask = ["read_file(notes/**)", "write_file(docs/**)"]"#);
        let at = |p: &str| Path::new("/ws").join(p);
        assert!(hides(&rules, "grep", "notes/a.txt"), "a walk cannot ask");
        assert!(
            rules
                .forbids("read_file", Access::Read, &at("notes/a.txt"))
                .is_none(),
            "the call that named it was asked about it"
        );
        assert!(
            rules
                .refuses("write_file", Access::Write, &at("docs/a.md"))
                .is_some()
        );
        assert!(
            rules
                .forbids("write_file", Access::Write, &at("docs/a.md"))
                .is_none()
        );
        let deny = policy(r#"deny = ["write_file(docs/**)"]"#);
        assert!(
            deny.forbids("write_file", Access::Write, &at("docs/a.md"))
                .is_some()
        );
        assert!(
            deny.forbids("edit_file", Access::Write, &at("docs/a.md"))
                .is_none(),
            "writes pass the writing tool's rules"
        );
    }

    #[test]
    fn rules_without_a_pattern_hide_only_what_read_file_may_not_read() {
        let deny_read = policy(r#"deny = ["read_file"]"#);
        assert!(hides(&deny_read, "grep", "src/lib.rs"));
        let ask_all = policy(r#"ask = ["*"]"#);
        assert!(
            !hides(&ask_all, "grep", "src/lib.rs"),
            "judged (and approved) with the grep call itself"
        );
        let ask_grep = policy(r#"ask = ["grep"]"#);
        assert!(!hides(&ask_grep, "grep", "src/lib.rs"));
        assert!(
            ask_grep
                .refuses("write_file", Access::Write, Path::new("/ws/a"))
                .is_none(),
            "a rule about running a tool is not a rule about paths"
        );
    }

    #[test]
    fn the_policy_matches_canonical_paths_under_a_root_given_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
        let rules = PermissionRules::from_toml(r#"deny = ["*(secrets/**)"]"#)
            .unwrap()
            .with_root(dir.path().join("alias"));
        let canonical = real.canonicalize().unwrap().join("secrets/k");
        assert!(rules.refuses("grep", Access::Read, &canonical).is_some());
    }

    #[test]
    fn clones_share_the_rule_lists() {
        let rules = policy(r#"deny = ["*(secrets/**)"]"#);
        let copy = rules.clone();
        assert!(Arc::ptr_eq(&rules.deny, &copy.deny));
        let handler: &dyn PreExecuteHandler = &rules;
        let policy = handler.path_policy().unwrap();
        assert!(
            policy
                .refuses("glob", Access::Read, Path::new("/ws/secrets/a"))
                .is_some()
        );
    }
}
