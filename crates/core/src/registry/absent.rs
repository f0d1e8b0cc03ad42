//! Optional arguments a model sent without meaning them. Strict function calling (OpenAI's
//! strict mode, the Agents SDK's strict schemas) makes every property required, so a model
//! sends `null`, `""`, `0` or `[]` for each one it does not mean. Such an argument is treated as
//! absent: `null` wherever the property's schema takes no null (at any depth), and the empty
//! values a tool names ([`crate::ToolDefinition::empty_means_absent`], top level only).

use serde_json::{Map, Value};

/// Nesting past which nothing more is looked at (arguments are bounded in depth long before).
const MAX_DEPTH: usize = 64;

/// Drops from `value` the optional properties that are not really given, per `schema`; the
/// top-level ones named in `empties` also when empty. Properties the schema requires, or does
/// not describe, are kept as they are (the schema check then judges them).
pub(crate) fn drop_absent(schema: &Value, value: &mut Value, empties: &[String]) {
    walk(schema, value, empties, 0);
}

fn walk(schema: &Value, value: &mut Value, empties: &[String], depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            map.retain(|name, given| {
                if required.contains(&name.as_str()) {
                    return true;
                }
                let Some(property) = properties.get(name) else {
                    return true;
                };
                let unmeant = (given.is_null() && !takes_null(property))
                    || (empties.iter().any(|e| e == name) && is_empty(given));
                !unmeant
            });
            for (name, given) in map.iter_mut() {
                if let Some(property) = properties.get(name) {
                    walk(property, given, &[], depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items").filter(|i| i.is_object()) {
                for given in items {
                    walk(item, given, &[], depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Whether a property's schema may take `null`: only a plain `type` (or list of types) without
/// `null` says it may not; anything else (`anyOf`, no `type`) is left to the schema check.
fn takes_null(property: &Value) -> bool {
    match property.get("type") {
        Some(Value::String(t)) => t == "null" || has_combinator(property),
        Some(Value::Array(types)) => types.iter().any(|t| t == "null") || has_combinator(property),
        _ => true,
    }
}

fn has_combinator(property: &Value) -> bool {
    ["anyOf", "oneOf", "allOf", "$ref"]
        .iter()
        .any(|k| property.get(*k).is_some())
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) => false,
    }
}

/// Turns `schema` (an object schema) into its strict variant, as OpenAI's strict function
/// calling wants it: at every level, every property required and `additionalProperties:
/// false`, and each property that was optional made nullable (a model then sends `null` for
/// it, which the pipeline reads as absent).
pub fn strict_schema(schema: &Value) -> Value {
    strict(schema, 0)
}

fn strict(schema: &Value, depth: usize) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    if depth > MAX_DEPTH {
        return schema.clone();
    }
    let mut out = object.clone();
    if let Some(items) = object.get("items") {
        out.insert("items".into(), strict(items, depth + 1));
    }
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return Value::Object(out);
    };
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut strict_properties = Map::new();
    for (name, property) in properties {
        let property = strict(property, depth + 1);
        let property = if required.contains(&name.as_str()) {
            property
        } else {
            nullable(property)
        };
        strict_properties.insert(name.clone(), property);
    }
    out.insert(
        "required".into(),
        Value::Array(
            properties
                .keys()
                .map(|k| Value::String(k.clone()))
                .collect(),
        ),
    );
    out.insert("properties".into(), Value::Object(strict_properties));
    out.insert("additionalProperties".into(), Value::Bool(false));
    Value::Object(out)
}

/// `property`, taking `null` too.
fn nullable(property: Value) -> Value {
    let Value::Object(mut map) = property else {
        return property;
    };
    if has_combinator(&Value::Object(map.clone())) {
        return serde_json::json!({"anyOf": [Value::Object(map), {"type": "null"}]});
    }
    match map.get("type").cloned() {
        Some(Value::String(t)) if t != "null" => {
            map.insert("type".into(), serde_json::json!([t, "null"]));
        }
        Some(Value::Array(mut types)) if !types.iter().any(|t| t == "null") => {
            types.push(Value::String("null".into()));
            map.insert("type".into(), Value::Array(types));
        }
        Some(_) => {}
        None => return serde_json::json!({"anyOf": [Value::Object(map), {"type": "null"}]}),
    }
    if let Some(Value::Array(mut options)) = map.get("enum").cloned()
        && !options.contains(&Value::Null)
    {
        options.push(Value::Null);
        map.insert("enum".into(), Value::Array(options));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "mode": {"enum": ["a", "b"], "type": "string"},
                "limit": {"type": "integer", "minimum": 0},
                "any": {},
                "edits": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string"}, "all": {"type": "boolean"}},
                    "required": ["old"]
                }}
            },
            "required": ["pattern"]
        })
    }

    #[test]
    fn nulls_and_named_empties_are_dropped_and_the_rest_kept() {
        let mut v = json!({
            "pattern": "", "path": "", "mode": null, "limit": 0, "any": null,
            "edits": [{"old": "x", "all": null}]
        });
        drop_absent(&schema(), &mut v, &["path".into(), "limit".into()]);
        assert_eq!(
            v,
            json!({"pattern": "", "any": null, "edits": [{"old": "x"}]}),
            "a required empty stays; a null the schema may take stays"
        );
        let mut v = json!({"pattern": null, "path": "x", "limit": 3});
        drop_absent(&schema(), &mut v, &["path".into(), "limit".into()]);
        assert_eq!(v, json!({"pattern": null, "path": "x", "limit": 3}));
    }

    #[test]
    fn the_strict_variant_requires_everything_and_makes_optionals_nullable() {
        let s = strict_schema(&schema());
        let mut required: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        required.sort_unstable();
        assert_eq!(
            required,
            ["any", "edits", "limit", "mode", "path", "pattern"]
        );
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["pattern"]["type"], json!("string"));
        assert_eq!(s["properties"]["path"]["type"], json!(["string", "null"]));
        assert_eq!(s["properties"]["mode"]["enum"], json!(["a", "b", null]));
        let item = &s["properties"]["edits"]["anyOf"];
        assert!(item.is_null(), "{s}");
        let item = &s["properties"]["edits"]["items"];
        assert_eq!(item["required"].as_array().unwrap().len(), 2);
        assert_eq!(
            item["properties"]["all"]["type"],
            json!(["boolean", "null"])
        );
    }
}
