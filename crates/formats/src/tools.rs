//! The tool list a model request carries, in each provider's shape.
//!
//! | format | one tool |
//! | --- | --- |
//! | OpenAI/DeepSeek | `{"type": "function", "function": {"name", "description", "parameters", "strict"?}}` |
//! | Anthropic | `{"name", "description", "input_schema"}` |
//!
//! Tools come out sorted by name, so the same registry always renders the same bytes (and a
//! provider's prompt cache keeps hitting). [`check_tool_schema`] says, at registration, which
//! schema a provider would refuse, instead of at the first request.

use crate::Format;
use dsh_core::ToolRegistry;
use serde_json::{Map, Value, json};

/// One tool as a model is told about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

/// The specs of a registry's tools, sorted by name, keeping those `keep` accepts (for
/// example: not denied outright by the permission rules).
///
/// ```
/// use dsh_core::ToolRegistry;
/// use dsh_formats::tool_specs;
/// assert!(tool_specs(&ToolRegistry::new(), |_| true).is_empty());
/// ```
pub fn tool_specs(registry: &ToolRegistry, keep: impl Fn(&str) -> bool) -> Vec<ToolSpec> {
    registry
        .names()
        .into_iter()
        .filter(|name| keep(name))
        .filter_map(|name| {
            let tool = registry.get(&name)?;
            let definition = tool.definition();
            Some(ToolSpec {
                description: definition.description().to_string(),
                input_schema: definition.input_schema(),
                name,
            })
        })
        .collect()
}

/// Why a provider would refuse a tool's schema.
///
/// ```
/// use dsh_formats::{Format, check_tool_schema};
/// use serde_json::json;
/// assert!(check_tool_schema(Format::OpenAi, &json!({"type": "object", "properties": {}})).is_ok());
/// assert!(check_tool_schema(Format::Anthropic, &json!({"type": "string"})).is_err());
/// ```
pub fn check_tool_schema(format: Format, schema: &Value) -> Result<(), String> {
    check_schema_root(format, schema)
}

/// Why a provider would refuse a tool's name: both take `^[a-zA-Z0-9_-]{1,64}$` (dsh also
/// allows `.` and names up to 128 bytes).
///
/// ```
/// use dsh_formats::{Format, check_tool_name};
/// assert!(check_tool_name(Format::OpenAi, "mcp__github__create_issue").is_ok());
/// assert!(check_tool_name(Format::Anthropic, "fs.read").is_err());
/// ```
pub fn check_tool_name(format: Format, name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if fits {
        Ok(())
    } else {
        Err(format!(
            "{format} takes tool names of 1 to 64 letters, digits, `_` and `-`; `{name}` is not one"
        ))
    }
}

fn check_schema_root(format: Format, schema: &Value) -> Result<(), String> {
    let Some(root) = schema.as_object() else {
        return Err("the input schema must be a JSON object".into());
    };
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!(
            "{format} takes only tools whose input schema has `\"type\": \"object\"` at its root"
        ));
    }
    for key in ["anyOf", "oneOf", "allOf", "not", "enum"] {
        if root.contains_key(key) {
            return Err(format!(
                "{format} refuses `{key}` at the root of a tool's input schema; move it into a property"
            ));
        }
    }
    Ok(())
}

/// The input schema as a provider takes it: `$schema` and `$id` are dropped (both providers
/// reject or ignore them at the root), and a missing `properties` is added (OpenAI refuses an
/// object schema without one).
fn adapted(schema: &Value) -> Value {
    let mut root = match schema {
        Value::Object(map) => map.clone(),
        other => return other.clone(),
    };
    root.remove("$schema");
    root.remove("$id");
    root.entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Value::Object(root)
}

/// Renders tools in a provider's request shape.
///
/// ```
/// use dsh_formats::{Format, ToolSpec, render_tools};
/// use serde_json::json;
/// let spec = ToolSpec {
///     name: "read_file".into(),
///     description: "Reads a file.".into(),
///     input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
/// };
/// let openai = render_tools(Format::OpenAi, &[spec.clone()]);
/// assert_eq!(openai[0]["type"], "function");
/// assert_eq!(openai[0]["function"]["parameters"]["required"][0], "path");
/// let anthropic = render_tools(Format::Anthropic, &[spec]);
/// assert_eq!(anthropic[0]["input_schema"]["type"], "object");
/// ```
pub fn render_tools(format: Format, tools: &[ToolSpec]) -> Vec<Value> {
    let mut sorted: Vec<&ToolSpec> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
        .into_iter()
        .map(|t| match format {
            Format::OpenAi => json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": adapted(&t.input_schema),
                },
            }),
            Format::Anthropic => json!({
                "name": t.name,
                "description": t.description,
                "input_schema": adapted(&t.input_schema),
            }),
        })
        .collect()
}

/// Keywords OpenAI's strict function calling refuses in a schema; the strict variant leaves
/// them out (the tool's own schema, which the pipeline checks, still holds them).
const NOT_IN_STRICT: [&str; 8] = [
    "minLength",
    "maxLength",
    "default",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "examples",
];

fn without_strict_refusals(schema: Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !NOT_IN_STRICT.contains(&k.as_str()))
                .map(|(k, v)| {
                    // Names under `properties` are property names, not keywords.
                    let v = if k == "properties" {
                        match v {
                            Value::Object(props) => Value::Object(
                                props
                                    .into_iter()
                                    .map(|(name, p)| (name, without_strict_refusals(p)))
                                    .collect(),
                            ),
                            other => other,
                        }
                    } else {
                        without_strict_refusals(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(without_strict_refusals).collect())
        }
        other => other,
    }
}

/// Renders tools in OpenAI's shape for strict function calling (`"strict": true`): each
/// schema with every property required, the optional ones nullable, `additionalProperties:
/// false` at every level, and no keyword strict mode refuses. A model bound by it sends
/// `null` (or an empty value) for what it does not mean, which dsh's pipeline reads as
/// absent, so the tools take every call it describes.
///
/// ```
/// use dsh_formats::{ToolSpec, render_strict_tools};
/// use serde_json::json;
/// let spec = ToolSpec {
///     name: "read_file".into(),
///     description: "Reads a file.".into(),
///     input_schema: json!({"type": "object", "required": ["path"], "properties": {
///         "path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}}),
/// };
/// let tool = &render_strict_tools(&[spec])[0];
/// assert_eq!(tool["function"]["strict"], true);
/// let params = &tool["function"]["parameters"];
/// assert_eq!(params["properties"]["limit"]["type"], json!(["integer", "null"]));
/// assert_eq!(params["additionalProperties"], false);
/// ```
pub fn render_strict_tools(tools: &[ToolSpec]) -> Vec<Value> {
    let mut sorted: Vec<&ToolSpec> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
        .into_iter()
        .map(|t| {
            let parameters = without_strict_refusals(dsh_core::registry::strict_schema(&adapted(
                &t.input_schema,
            )));
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": parameters,
                    "strict": true,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_come_out_sorted_and_adapted() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("{name} does things"),
            input_schema: json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}),
        };
        let out = render_tools(Format::OpenAi, &[spec("b"), spec("a")]);
        assert_eq!(out[0]["function"]["name"], "a");
        assert_eq!(out[1]["function"]["name"], "b");
        let params = &out[0]["function"]["parameters"];
        assert!(params.get("$schema").is_none());
        assert_eq!(params["properties"], json!({}));
    }

    #[test]
    fn schemas_providers_refuse_are_named() {
        let any_of_root = json!({"type": "object", "anyOf": [{"required": ["a"]}]});
        let why = check_tool_schema(Format::OpenAi, &any_of_root).unwrap_err();
        assert!(why.contains("anyOf"), "{why}");
        assert!(check_tool_schema(Format::OpenAi, &json!(true)).is_err());
    }
}
