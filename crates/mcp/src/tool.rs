//! One MCP tool as a dsh [`ToolDefinition`] named `mcp__<server>__<tool>`.

use crate::content::{Converted, blocks_from_content, convert};
use crate::server::McpServer;
use async_trait::async_trait;
use dsh_core::{ContentBlock, ErrorCode, ExecutionMode, ToolContext, ToolDefinition, ToolFailure};
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

/// How many distinct structured values keep their server-given presentation until it is
/// asked for.
const REMEMBERED_PRESENTATIONS: usize = 64;

/// The server's `content` of structured results, from `execute` until `present`.
///
/// `present` is handed the value only, not the call it belongs to, so the content is found
/// by its value. Results with equal values are kept together, one group per value, with the
/// number of presentations still to come. While every content of a group is the same, that
/// content is the answer. Once a group holds different contents (calls with equal
/// `structuredContent` but different `content` outstanding at once, as parallel read-only
/// calls are), the value alone cannot say which call is asking, so every presentation of the
/// group is `None` (the caller shows the value itself) until the group's last presentation
/// was made: no call is ever shown another call's content.
#[derive(Debug, Default)]
struct Presentations {
    groups: VecDeque<Group>,
}

#[derive(Debug)]
struct Group {
    value: Value,
    contents: Vec<Vec<ContentBlock>>,
    /// Presentations still to come (at least 1 while the group is kept).
    pending: usize,
}

impl Presentations {
    fn remember(&mut self, value: Value, content: Vec<ContentBlock>) {
        if let Some(group) = self.groups.iter_mut().find(|g| g.value == value) {
            group.contents.push(content);
            group.pending += 1;
            return;
        }
        if self.groups.len() >= REMEMBERED_PRESENTATIONS {
            // The oldest group: results whose presentation never came (a body abandoned as
            // it returned), long since.
            self.groups.pop_front();
        }
        self.groups.push_back(Group {
            value,
            contents: vec![content],
            pending: 1,
        });
    }

    fn recall(&mut self, value: &Value) -> Option<Vec<ContentBlock>> {
        let at = self.groups.iter().position(|g| &g.value == value)?;
        let group = &mut self.groups[at];
        group.pending = group.pending.saturating_sub(1);
        let one_content = group.contents.windows(2).all(|w| w[0] == w[1]);
        // Contents are only taken while they all agree, so then there is one per pending
        // presentation; once they disagree they stay until the group is done.
        let answer = if one_content {
            group.contents.pop()
        } else {
            None
        };
        if group.pending == 0 {
            self.groups.remove(at);
        }
        answer
    }
}

/// An MCP server's tool, called through the pipeline like any other.
pub struct McpTool {
    name: String,
    remote_name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    read_only: bool,
    server: Arc<McpServer>,
    /// `present` only sees the value; for structured results (value = `structuredContent`)
    /// the server's own `content` is kept here until it is presented.
    presentations: Mutex<Presentations>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("server", &self.server.config().name)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// The registered name of `tool` on the server whose tools are prefixed `prefix`.
///
/// ```
/// assert_eq!(dsh_mcp::tool_name("github", "list issues"), "mcp__github__list_issues");
/// ```
pub fn tool_name(prefix: &str, tool: &str) -> String {
    format!("mcp__{prefix}__{}", crate::config::normalize_name(tool))
}

impl McpTool {
    pub(crate) fn new(server: Arc<McpServer>, tool: &rmcp::model::Tool) -> McpTool {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_string();
        McpTool {
            name: tool_name(&server.config().tool_prefix, &tool.name),
            remote_name: tool.name.to_string(),
            description,
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object((**s).clone())),
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            server,
            presentations: Mutex::new(Presentations::default()),
        }
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }

    /// The server's name, as the config spells it.
    pub fn server_name(&self) -> &str {
        &self.server.config().name
    }

    /// True when the server marks the tool `annotations.readOnlyHint: true`.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn presentations(&self) -> std::sync::MutexGuard<'_, Presentations> {
        match self.presentations.lock() {
            Ok(kept) => kept,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[async_trait]
impl ToolDefinition for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        self.output_schema.clone()
    }

    /// Parallel only where the server marks the tool `readOnlyHint: true`.
    fn execution_mode(&self) -> ExecutionMode {
        if self.read_only {
            ExecutionMode::Parallel
        } else {
            ExecutionMode::Exclusive
        }
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.read_only
    }

    /// The server's `timeout`, or the source's default (60 s unless changed).
    fn timeout_ms(&self) -> Option<u64> {
        Some(u64::try_from(self.server.call_timeout().as_millis()).unwrap_or(u64::MAX))
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        // The pre-execute handler refuses first; this holds where it was not installed.
        if self.server.options().read_only && !self.read_only {
            return Err(ToolFailure::with_code(
                ErrorCode::Denied,
                crate::read_only::refusal(&self.name),
            ));
        }
        let Value::Object(arguments) = input else {
            return Err(ToolFailure::with_code(
                ErrorCode::ToolInputError,
                "MCP tools take an object of arguments",
            ));
        };
        let result = self
            .server
            .call(&self.remote_name, arguments, &ctx.signal)
            .await?;
        let Converted {
            value,
            structured_content,
        } = convert(result, &self.name)?;
        if let Some(content) = structured_content {
            let kept = value.clone();
            self.presentations().remember(kept, content);
        }
        Ok(value)
    }

    /// `present` only reads the value and the kept presentations (whose lock is held for a
    /// bounded look-up, never across I/O or an await), and `result_meta` and
    /// `finalize_content` are dsh's defaults: nothing here waits, so the pipeline calls them
    /// inline instead of handing them to the user-code pool.
    fn user_code_may_block(&self) -> bool {
        false
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        if let Some(content) = self.presentations().recall(value) {
            return content;
        }
        if self.output_schema.is_some() {
            return vec![ContentBlock::text(value.to_string())];
        }
        blocks_from_content(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> Vec<ContentBlock> {
        vec![ContentBlock::text(t)]
    }

    #[test]
    fn one_call_at_a_time_each_gets_its_own_content() {
        let mut kept = Presentations::default();
        let v = json!({"ok": true});
        kept.remember(v.clone(), text("first"));
        assert_eq!(kept.recall(&v), Some(text("first")));
        kept.remember(v.clone(), text("second"));
        assert_eq!(kept.recall(&v), Some(text("second")));
        assert!(kept.groups.is_empty());
        assert_eq!(kept.recall(&v), None, "nothing is presented twice");
    }

    #[test]
    fn equal_values_with_different_contents_at_once_are_never_swapped() {
        let mut kept = Presentations::default();
        let v = json!({"ok": true});
        // Two parallel calls both returned before either was presented.
        kept.remember(v.clone(), text("from a"));
        kept.remember(v.clone(), text("from b"));
        assert_eq!(kept.recall(&v), None);
        // A third call with the same value returns before the second presentation: it
        // cannot be told apart from the one still pending either.
        kept.remember(v.clone(), text("from c"));
        assert_eq!(kept.recall(&v), None);
        assert_eq!(kept.recall(&v), None);
        assert!(
            kept.groups.is_empty(),
            "the group ends with its last presentation"
        );
        // After that, one call at a time gets its own content again.
        kept.remember(v.clone(), text("from d"));
        assert_eq!(kept.recall(&v), Some(text("from d")));
    }

    #[test]
    fn equal_values_with_equal_contents_keep_the_content() {
        let mut kept = Presentations::default();
        let v = json!({"sum": 5});
        kept.remember(v.clone(), text("sum is 5"));
        kept.remember(v.clone(), text("sum is 5"));
        kept.remember(json!({"sum": 6}), text("sum is 6"));
        assert_eq!(kept.recall(&json!({"sum": 6})), Some(text("sum is 6")));
        assert_eq!(kept.recall(&v), Some(text("sum is 5")));
        assert_eq!(kept.recall(&v), Some(text("sum is 5")));
        assert!(kept.groups.is_empty());
    }

    #[test]
    fn the_oldest_group_goes_when_too_many_are_kept() {
        let mut kept = Presentations::default();
        for i in 0..=REMEMBERED_PRESENTATIONS {
            kept.remember(json!({"i": i}), text(&i.to_string()));
        }
        assert_eq!(kept.groups.len(), REMEMBERED_PRESENTATIONS);
        assert_eq!(kept.recall(&json!({"i": 0})), None);
        assert_eq!(kept.recall(&json!({"i": 1})), Some(text("1")));
    }
}
