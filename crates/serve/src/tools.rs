//! dsh's tools and results in MCP's shapes.

use dsh_core::{ContentBlock, ExecutionMode, FrozenResult, ToolRegistry};
use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The field of a structured result (`structuredContent`) holding what dsh adds for the model
/// beside the tool's own value: the call's `additionalContexts` (hook context, and a note when
/// they were cut). A client that shows the model the structured result instead of the text
/// blocks (pydantic-ai, the Agents SDK with `use_structured_content`) shows it this way; every
/// listed output schema declares it.
pub const CONTEXT_FIELD: &str = "additionalContext";

/// `schema` (a tool's object output schema) declaring [`CONTEXT_FIELD`], so a client that
/// validates structured results against it takes one that carries context.
fn with_context_field(mut schema: Map<String, Value>) -> Map<String, Value> {
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        properties.entry(CONTEXT_FIELD).or_insert_with(|| {
            serde_json::json!({
                "type": "array",
                "items": {"type": "string"},
                "description": "What dsh's hooks add for the model about this call (its additionalContexts)."
            })
        });
    }
    schema
}

/// The `format`s of JSON Schema (2020-12, its format vocabulary): any other (schemars'
/// `uint`, `uint64`, `double` …) makes clients' validators warn, and says nothing they check.
const KNOWN_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Drops, everywhere in `schema`, a string `format` no validator knows.
fn drop_unknown_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let unknown = map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !KNOWN_FORMATS.contains(&f));
            if unknown {
                map.remove("format");
            }
            map.values_mut().for_each(drop_unknown_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_unknown_formats),
        _ => {}
    }
}

/// A schema MCP clients take: a JSON object whose root `type` is `object` (the TypeScript SDK
/// refuses a tool list holding any other), without formats no validator knows.
fn object_schema(mut schema: Value) -> Option<Map<String, Value>> {
    drop_unknown_formats(&mut schema);
    match schema {
        Value::Object(map) if map.get("type").and_then(Value::as_str) == Some("object") => {
            Some(map)
        }
        _ => None,
    }
}

/// Every tool of `registry` as MCP lists it, sorted by name (the same registry always gives
/// the same list): its description, its input schema, its output schema when it declares an
/// object one, and annotations: `readOnlyHint` for a tool that runs in parallel (dsh runs
/// only side-effect-free tools side by side), `destructiveHint` for an exclusive one.
///
/// ```
/// use dsh_core::ToolRegistry;
/// assert!(dsh_serve::mcp_tools(&ToolRegistry::new()).is_empty());
/// ```
pub fn mcp_tools(registry: &ToolRegistry) -> Vec<Tool> {
    let mut names = registry.names();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let tool = registry.get(&name)?;
            let def = tool.definition();
            let input = object_schema(def.input_schema()).unwrap_or_else(|| {
                let mut any = Map::new();
                any.insert("type".into(), Value::String("object".into()));
                any
            });
            let safe = def.execution_mode() == ExecutionMode::Parallel;
            let mut listed = Tool::new(name, def.description().to_string(), Arc::new(input))
                .annotate(ToolAnnotations::new().read_only(safe).destructive(!safe));
            if let Some(output) = def.output_schema().and_then(object_schema) {
                listed = listed.with_raw_output_schema(Arc::new(with_context_field(output)));
            }
            Some(listed)
        })
        .collect()
}

/// A frozen result as MCP's `tools/call` answers it: its content; for an error,
/// `isError: true` and the error code first in the text (`DENIED: …`); and
/// `structuredContent` (the result's value) when `structured` (the tool declares an output
/// schema) and the value is an object, with the call's contexts in [`CONTEXT_FIELD`] (the
/// text blocks carry them too), so they reach the model whichever of the two a client shows.
/// A value that already has a field of that name is not sent as structured content: the
/// text blocks then carry everything.
pub fn mcp_result(result: &FrozenResult, structured: bool) -> CallToolResult {
    let mut content: Vec<rmcp::model::ContentBlock> = result
        .content()
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => rmcp::model::ContentBlock::text(text.clone()),
            ContentBlock::Image { media_type, data } => {
                rmcp::model::ContentBlock::image(data.clone(), media_type.clone())
            }
        })
        .collect();
    match result.code() {
        Some(code) => {
            let first = result
                .content()
                .first()
                .and_then(ContentBlock::as_text)
                .map(str::to_string);
            match first {
                Some(text) => {
                    content[0] = rmcp::model::ContentBlock::text(format!("{code}: {text}"));
                }
                None => content.insert(0, rmcp::model::ContentBlock::text(code.to_string())),
            }
            CallToolResult::error(content)
        }
        None => {
            let mut answer = CallToolResult::success(content);
            if structured && let Some(Value::Object(value)) = result.value() {
                let contexts = result.contexts();
                if contexts.is_empty() {
                    answer.structured_content = Some(Value::Object(value.clone()));
                } else if !value.contains_key(CONTEXT_FIELD) {
                    let mut value = value.clone();
                    value.insert(
                        CONTEXT_FIELD.into(),
                        Value::Array(
                            contexts
                                .into_iter()
                                .map(|c| Value::String(c.into()))
                                .collect(),
                        ),
                    );
                    answer.structured_content = Some(Value::Object(value));
                }
            }
            answer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_no_validator_knows_are_dropped_and_known_ones_kept() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer", "format": "uint64"},
            "list": {"type": "array", "items": {"type": "integer", "format": "uint"}},
            "when": {"type": "string", "format": "date-time"},
            // A property named `format` is not a format.
            "format": {"type": "string"},
        }});
        let cleaned = Value::Object(object_schema(schema).unwrap());
        assert_eq!(cleaned.pointer("/properties/n/format"), None);
        assert_eq!(cleaned.pointer("/properties/list/items/format"), None);
        assert_eq!(
            cleaned.pointer("/properties/when/format"),
            Some(&json!("date-time"))
        );
        assert_eq!(
            cleaned.pointer("/properties/format"),
            Some(&json!({"type": "string"}))
        );
    }
}
