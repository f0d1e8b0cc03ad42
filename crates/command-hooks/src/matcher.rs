//! Which tools a matcher group applies to, as Claude Code reads a `matcher`.

use regex::Regex;

/// A hook group's `matcher`: empty or `*` matches every tool; a plain name (letters, digits,
/// `_`) or names joined by `|` match exactly; anything else is a regular expression that
/// matches when it is found in the tool's name (`mcp__.*`, `^edit_` ...).
///
/// ```
/// use dsh_command_hooks::Matcher;
/// assert!(Matcher::parse("").unwrap().matches("anything"));
/// assert!(Matcher::parse("*").unwrap().matches("anything"));
/// assert!(Matcher::parse("read_file").unwrap().matches("read_file"));
/// assert!(!Matcher::parse("read").unwrap().matches("read_file"));
/// assert!(Matcher::parse("write_file|edit_file").unwrap().matches("edit_file"));
/// assert!(Matcher::parse("mcp__github__.*").unwrap().matches("mcp__github__list_issues"));
/// assert!(Matcher::parse("(unclosed").is_err());
/// ```
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Every tool.
    All,
    /// Exactly these names.
    Names(Vec<String>),
    /// A regular expression, searched for in the name.
    Pattern(Regex),
}

fn is_plain(matcher: &str) -> bool {
    matcher
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
}

impl Matcher {
    /// Reads a `matcher` string; the error is the regex parser's message.
    pub fn parse(matcher: &str) -> Result<Matcher, String> {
        let matcher = matcher.trim();
        if matcher.is_empty() || matcher == "*" {
            return Ok(Matcher::All);
        }
        if is_plain(matcher) {
            return Ok(Matcher::Names(
                matcher
                    .split('|')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            ));
        }
        Regex::new(matcher)
            .map(Matcher::Pattern)
            .map_err(|e| format!("matcher `{matcher}` is not a valid regular expression: {e}"))
    }

    /// True when a hook of this group runs for `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|n| n == tool),
            Matcher::Pattern(re) => re.is_match(tool),
        }
    }
}
