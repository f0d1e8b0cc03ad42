//! MCP tool results in dsh's terms: the canonical value, the presentation, the failure.
//!
//! Without `structuredContent` the canonical value is the MCP `content` array as the server
//! sent it, and the presentation is read back from it. With `structuredContent` that is the
//! canonical value (checked against the tool's output schema), and the presentation is still
//! the server's `content`.

use dsh_core::{ContentBlock, ToolFailure};
use rmcp::model::CallToolResult;
use serde_json::Value;

fn str_field<'a>(item: &'a Value, key: &str) -> &'a str {
    item.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn block_from_json(item: &Value) -> ContentBlock {
    match str_field(item, "type") {
        "text" => ContentBlock::text(str_field(item, "text")),
        "image" => ContentBlock::Image {
            media_type: str_field(item, "mimeType").to_string(),
            data: str_field(item, "data").to_string(),
        },
        "audio" => ContentBlock::text(format!(
            "[audio ({}), {} bytes of base64 not shown]",
            str_field(item, "mimeType"),
            str_field(item, "data").len()
        )),
        "resource" => {
            let resource = item.get("resource").unwrap_or(&Value::Null);
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => ContentBlock::text(text),
                None => ContentBlock::text(format!(
                    "[resource {} ({}), binary content not shown]",
                    str_field(resource, "uri"),
                    str_field(resource, "mimeType")
                )),
            }
        }
        "resource_link" => {
            let mut text = format!("[resource link: {}", str_field(item, "uri"));
            let name = str_field(item, "name");
            if !name.is_empty() {
                text.push_str(&format!(" ({name})"));
            }
            let description = str_field(item, "description");
            if !description.is_empty() {
                text.push_str(&format!(": {description}"));
            }
            text.push(']');
            ContentBlock::text(text)
        }
        other => ContentBlock::text(format!("[MCP content of type `{other}` not shown]")),
    }
}

/// The presentation of an MCP `content` array (JSON as on the wire).
///
/// A value that is not such an array (a post-execute handler replaced it) is shown as JSON.
pub(crate) fn blocks_from_content(value: &Value) -> Vec<ContentBlock> {
    match value {
        Value::Array(items) if items.iter().all(|i| i.get("type").is_some()) => {
            items.iter().map(block_from_json).collect()
        }
        Value::String(s) => vec![ContentBlock::text(s.clone())],
        other => vec![ContentBlock::text(other.to_string())],
    }
}

/// A successful MCP call in dsh's terms.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Converted {
    /// The canonical value.
    pub value: Value,
    /// The presentation, when it cannot be read back from the value (structured results).
    pub structured_content: Option<Vec<ContentBlock>>,
}

/// Turns an MCP result into the canonical value, or a `TOOL_ERROR` for `isError: true`.
pub(crate) fn convert(result: CallToolResult, tool: &str) -> Result<Converted, ToolFailure> {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Array(Vec::new()));
    if result.is_error == Some(true) {
        let text = dsh_core::content::joined_text(&blocks_from_content(&content));
        let message = if text.trim().is_empty() {
            format!("the MCP tool `{tool}` reported an error without a message")
        } else {
            text
        };
        return Err(ToolFailure::new(message));
    }
    Ok(match result.structured_content {
        Some(structured) => Converted {
            value: structured,
            structured_content: Some(blocks_from_content(&content)),
        },
        None => Converted {
            value: content,
            structured_content: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_and_images_become_blocks() {
        let c = convert(
            result(json!({"content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"}
            ]})),
            "t",
        )
        .unwrap();
        assert!(c.structured_content.is_none());
        let blocks = blocks_from_content(&c.value);
        assert_eq!(
            blocks,
            vec![
                ContentBlock::text("hello"),
                ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "aGk=".into()
                },
                ContentBlock::text("inside"),
                ContentBlock::text("[resource link: file:///b (b)]"),
            ]
        );
    }

    #[test]
    fn is_error_is_a_tool_error_with_the_text() {
        let f = convert(
            result(json!({"content": [{"type": "text", "text": "no such user"}], "isError": true})),
            "t",
        )
        .unwrap_err();
        assert_eq!(f.code, dsh_core::ErrorCode::ToolError);
        assert_eq!(f.message, "no such user");
        let f = convert(result(json!({"content": [], "isError": true})), "t").unwrap_err();
        assert!(f.message.contains("without a message"), "{}", f.message);
    }

    #[test]
    fn structured_content_is_the_value_and_content_stays_the_presentation() {
        let c = convert(
            result(json!({"content": [{"type": "text", "text": "sum is 3"}],
                          "structuredContent": {"sum": 3}})),
            "t",
        )
        .unwrap();
        assert_eq!(c.value, json!({"sum": 3}));
        assert_eq!(
            c.structured_content,
            Some(vec![ContentBlock::text("sum is 3")])
        );
    }
}
