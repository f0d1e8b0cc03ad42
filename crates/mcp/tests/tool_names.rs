//! `mcp__SERVER__TOOL` names are unambiguous: a server name that could claim another's
//! tools is refused, a tool whose name collides or cannot be used is left out, and every
//! tool left out is listed for the user, with the reason.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Rig, SERVER, code, quick};
use dsh_core::Hooks;
use dsh_mcp::{McpServers, McpToolSource};
use serde_json::{Value, json};

fn raw_with_tools(tools: Value) -> Value {
    json!({"command": SERVER, "args": ["raw", "--tools", tools.to_string()]})
}

fn schema_tool(name: &str, schema: Value) -> Value {
    json!({"name": name, "inputSchema": schema})
}

fn object() -> Value {
    json!({"type": "object"})
}

/// The hostile schema: a chain of `anyOf`s of two `$ref`s to the next link.
fn hostile() -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..21 {
        let next = json!({"$ref": format!("#/$defs/n{}", i + 1)});
        defs.insert(format!("n{i}"), json!({"anyOf": [next, next]}));
    }
    defs.insert("n21".into(), json!({"type": "string"}));
    json!({"type": "object", "properties": {"q": {"$ref": "#/$defs/n0"}}, "$defs": defs})
}

#[test]
fn a_server_name_with_a_double_underscore_is_refused() {
    let e = McpServers::from_json(
        &json!({"mcpServers": {
            "a": {"command": SERVER},
            "a__b": {"command": SERVER}
        }})
        .to_string(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("MCP server `a__b`") && e.contains("`__`"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_and_unusable_tool_names_are_left_out_and_listed() {
    let long = "n".repeat(130);
    let tools = json!([
        schema_tool("b__c", object()),
        schema_tool("x y", object()),
        schema_tool("x_y", object()),
        schema_tool("", object()),
        schema_tool(&long, object()),
        schema_tool("costly", hostile()),
        schema_tool("echo", object()),
    ]);
    let servers =
        McpServers::from_json(&json!({"mcpServers": {"a": raw_with_tools(tools)}}).to_string())
            .unwrap();
    let source = McpToolSource::start_with(servers, quick()).await.unwrap();
    let rig = Rig::around(source, Hooks::new()).await;
    assert_eq!(
        rig.registry.names(),
        ["mcp__a__b__c", "mcp__a__echo"],
        "only the usable, unambiguous tools"
    );
    let skipped = rig.source.skipped();
    let reason = |tool: &str| {
        skipped
            .iter()
            .find(|s| s.tool == tool)
            .map(|s| (s.server.clone(), s.to_string()))
            .unwrap_or_else(|| panic!("{tool} not listed in {skipped:?}"))
    };
    for tool in ["x y", "x_y"] {
        let (server, text) = reason(tool);
        assert_eq!(server, "a");
        assert!(
            text.contains("`x y`, `x_y`") && text.contains("mcp__a__x_y"),
            "{text}"
        );
    }
    assert!(reason("").1.contains("empty"));
    assert!(reason(&long).1.contains("longer than 128"));
    let (_, costly) = reason("costly");
    assert!(
        costly.starts_with("MCP server `a`: tool `costly` was not registered")
            && costly.contains("subschema applications"),
        "{costly}"
    );
    assert_eq!(skipped.len(), 5, "{skipped:?}");

    // `mcp__a__b__c` is server `a`'s tool `b__c`: the call reaches server `a` under that
    // name (the raw server has no such tool to run, and says so).
    let r = rig.one("mcp__a__b__c", json!({})).await;
    assert_eq!(code(&r), "TOOL_ERROR");
    assert!(r.text().contains("no tool b__c"), "{}", r.text());
    rig.stop().await;
}
