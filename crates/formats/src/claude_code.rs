//! Claude Code's session files (`~/.claude/projects/<project>/<session>.jsonl`) as transcripts.
//!
//! The format is not documented; this reads what those files hold. Every line is a JSON object
//! with a `type`: `user`, `assistant`, `summary`, `system`, `file-history-snapshot`, … Claude
//! Code writes an assistant message one content block per line, each line repeating the
//! message's `message.id`, so the `tool_use` blocks of one message (its parallel calls) are
//! spread over consecutive lines:
//!
//! ```text
//! {"type":"assistant","uuid":"…","sessionId":"…","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Let me look."}]}}
//! {"type":"assistant","uuid":"…","sessionId":"…","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/w/a.rs"}}]}}
//! {"type":"assistant","uuid":"…","sessionId":"…","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Grep","input":{"pattern":"fn main"}}]}}
//! {"type":"user","uuid":"…","sessionId":"…","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"…"}]}}
//! ```
//!
//! [`ClaudeCodeSteps`] groups the `tool_use` blocks of one `message.id` into one step and skips
//! every other line, counting each skipped line by its `type` (the tool results Claude Code
//! recorded are not replayed: dsh runs the calls itself).

use dsh_core::{Arguments, ToolCall};
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether a transcript line looks like a line of a Claude Code session file: an object with a
/// string `type` and one of the fields every such line carries (`uuid`, `sessionId`,
/// `leafUuid`), as opposed to a bare assistant message.
///
/// ```
/// use dsh_formats::is_claude_code_line;
/// use serde_json::json;
/// assert!(is_claude_code_line(&json!({"type": "summary", "summary": "s", "leafUuid": "u"})));
/// assert!(!is_claude_code_line(&json!({"role": "assistant", "content": []})));
/// ```
pub fn is_claude_code_line(line: &Value) -> bool {
    line.get("type").is_some_and(Value::is_string)
        && ["uuid", "sessionId", "leafUuid"]
            .iter()
            .any(|k| line.get(*k).is_some())
}

/// What one line did.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaudeCodeLine {
    /// An assistant line of the message being gathered (or one without tool calls).
    Gathered,
    /// A line of another type, skipped (counted under its type).
    Skipped,
    /// The line started a new message, which completed the previous one: its calls, in
    /// block order, make one step.
    Completed(Vec<ToolCall>),
}

/// Groups a Claude Code session file's `tool_use` blocks into steps by `message.id`.
///
/// ```
/// use dsh_formats::{ClaudeCodeLine, ClaudeCodeSteps};
/// use serde_json::json;
/// let line = |id: &str, tool: &str| json!({"type": "assistant", "uuid": "u", "message": {"id": id,
///     "role": "assistant", "content": [{"type": "tool_use", "id": format!("t-{tool}"), "name": tool, "input": {}}]}});
/// let mut steps = ClaudeCodeSteps::default();
/// assert_eq!(steps.push_line(&line("m1", "Read")), ClaudeCodeLine::Gathered);
/// assert_eq!(steps.push_line(&line("m1", "Grep")), ClaudeCodeLine::Gathered);
/// assert_eq!(steps.push_line(&json!({"type": "user", "uuid": "v"})), ClaudeCodeLine::Skipped);
/// let ClaudeCodeLine::Completed(first) = steps.push_line(&line("m2", "Edit")) else { panic!() };
/// assert_eq!(first.len(), 2, "one message, two parallel calls");
/// assert_eq!(steps.finish().unwrap()[0].name, "Edit");
/// assert_eq!(steps.skipped()["user"], 1);
/// ```
#[derive(Debug, Default)]
pub struct ClaudeCodeSteps {
    message_id: Option<String>,
    calls: Vec<ToolCall>,
    skipped: BTreeMap<String, usize>,
}

impl ClaudeCodeSteps {
    /// Takes the next line of the file.
    pub fn push_line(&mut self, line: &Value) -> ClaudeCodeLine {
        let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
        let message = line.get("message");
        let is_assistant = kind == "assistant"
            && message
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                .is_none_or(|r| r == "assistant");
        if !is_assistant {
            let key = if kind.is_empty() { "(no type)" } else { kind };
            *self.skipped.entry(key.to_string()).or_default() += 1;
            return ClaudeCodeLine::Skipped;
        }
        let id = message
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            // A line without a message id is a message of its own.
            .map_or_else(|| format!("(line {})", self.lines_seen()), str::to_string);
        let completed = if self.message_id.as_deref() != Some(id.as_str()) {
            let previous = self.take_step();
            self.message_id = Some(id);
            previous
        } else {
            None
        };
        if let Some(Value::Array(blocks)) = message.and_then(|m| m.get("content")) {
            for block in blocks {
                if block.get("type").and_then(Value::as_str) != Some("tool_use") {
                    continue;
                }
                let text = |k: &str| {
                    block
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                self.calls.push(ToolCall {
                    call_id: text("id"),
                    name: text("name"),
                    arguments: Arguments::from_value(match block.get("input") {
                        None | Some(Value::Null) => Value::Object(Default::default()),
                        Some(input) => input.clone(),
                    }),
                });
            }
        }
        match completed {
            Some(calls) => ClaudeCodeLine::Completed(calls),
            None => ClaudeCodeLine::Gathered,
        }
    }

    /// The end of the file: the last message's calls, if it had any.
    pub fn finish(&mut self) -> Option<Vec<ToolCall>> {
        self.message_id = None;
        self.take_step()
    }

    /// Lines skipped so far, by their `type`.
    pub fn skipped(&self) -> &BTreeMap<String, usize> {
        &self.skipped
    }

    fn lines_seen(&self) -> usize {
        self.skipped.values().sum::<usize>() + self.calls.len()
    }

    /// The gathered calls, when there are any (a message that only talked makes no step).
    fn take_step(&mut self) -> Option<Vec<ToolCall>> {
        if self.calls.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.calls))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_only_messages_make_no_step_and_other_lines_are_counted() {
        let mut steps = ClaudeCodeSteps::default();
        let text = json!({"type": "assistant", "uuid": "a", "message": {"id": "m0", "role": "assistant",
            "content": [{"type": "text", "text": "hello"}]}});
        assert_eq!(steps.push_line(&text), ClaudeCodeLine::Gathered);
        for kind in ["summary", "system", "file-history-snapshot", "user"] {
            assert_eq!(
                steps.push_line(&json!({"type": kind, "uuid": "x"})),
                ClaudeCodeLine::Skipped
            );
        }
        let call = json!({"type": "assistant", "uuid": "b", "message": {"id": "m1", "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "LS", "input": {"path": "/w"}}]}});
        assert_eq!(
            steps.push_line(&call),
            ClaudeCodeLine::Gathered,
            "m0 had no calls"
        );
        let calls = steps.finish().unwrap();
        assert_eq!(calls[0].call_id, "t1");
        assert_eq!(steps.skipped().values().sum::<usize>(), 4);
        assert_eq!(steps.finish(), None);
    }

    #[test]
    fn a_message_id_seen_again_later_is_a_new_step() {
        let mut steps = ClaudeCodeSteps::default();
        let line = |id: &str, call: &str| {
            json!({"type": "assistant", "uuid": "u", "message": {"id": id, "role": "assistant",
            "content": [{"type": "tool_use", "id": call, "name": "Read", "input": {}}]}})
        };
        steps.push_line(&line("m1", "a"));
        assert!(matches!(
            steps.push_line(&line("m2", "b")),
            ClaudeCodeLine::Completed(_)
        ));
        assert!(matches!(
            steps.push_line(&line("m1", "c")),
            ClaudeCodeLine::Completed(_)
        ));
        assert_eq!(steps.finish().unwrap()[0].call_id, "c");
    }
}
