//! How reasons and warnings name a hook.

use crate::settings::HookEvent;
use std::fmt;

/// The most of a matcher quoted in a hook's name.
const MATCHER_SHOWN: usize = 60;

/// A hook as reasons and warnings name it: its event, its position among the event's command
/// hooks (from 1, in the order of the settings file, across matcher groups) and its group's
/// matcher; `PreToolUse hook #2 (matcher "write_file|edit_file")`. Never its command line,
/// which may carry secrets (`AUDIT_TOKEN=… ./audit.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookName {
    pub event: HookEvent,
    pub position: usize,
    pub matcher: String,
}

impl fmt::Display for HookName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} hook #{}", self.event.as_str(), self.position)?;
        let matcher = self.matcher.trim();
        if matcher.is_empty() {
            return f.write_str(" (no matcher)");
        }
        let mut shown: String = matcher.chars().take(MATCHER_SHOWN).collect();
        if shown.len() < matcher.len() {
            shown.push('…');
        }
        // Debug quoting escapes quotes and control characters: the name stays one line.
        write!(f, " (matcher {shown:?})")
    }
}
