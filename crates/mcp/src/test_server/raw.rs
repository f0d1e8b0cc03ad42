//! A hand-written MCP server over stdio, for what rmcp's server side will not send: lines
//! that are not valid messages, and tool lists that never end.
//!
//! Arguments (after `raw`):
//! - `--endless N`: every `tools/list` page holds N tools and a `nextCursor`.
//! - `--tools JSON`: `tools/list` answers this array of tools, on one page.
//! - `--long-bytes N`: how long the `long` tool's text is (default 1 MiB).
//!
//! Otherwise it lists `surrogate` (answers with a lone surrogate `\ud800` in its text),
//! `surrogate_late` (the same, with the `id` after the result), `long` (a text longer than
//! a client's limit, `id` first), `long_late` (the same, `id` last), `noisy` (writes log
//! lines on stdout, one of them JSON with a lone surrogate, before a good answer),
//! `echo {text}` and `pid`.

use serde_json::{Value, json};
use std::io::{BufRead, Write};

struct Options {
    endless: Option<usize>,
    tools: Option<Value>,
    long_bytes: usize,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        endless: None,
        tools: None,
        long_bytes: 1 << 20,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--endless" => options.endless = Some(value.parse().map_err(|e| format!("{e}"))?),
            "--tools" => {
                options.tools = Some(serde_json::from_str(value).map_err(|e| format!("{e}"))?)
            }
            "--long-bytes" => options.long_bytes = value.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object"}})
}

fn default_tools() -> Value {
    json!([
        tool("surrogate", "Answers with a lone surrogate"),
        tool("surrogate_late", "Answers with a lone surrogate, id last"),
        tool("long", "Answers with a line longer than the client's limit"),
        tool("long_late", "The same, id last"),
        tool("noisy", "Logs on stdout, then answers"),
        {"name": "echo", "description": "Returns its text", "inputSchema": {"type": "object",
            "properties": {"text": {"type": "string"}}}},
        tool("pid", "The server's process id"),
    ])
}

fn result(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn text_result(id: &Value, text: &str) -> String {
    result(id, json!({"content": [{"type": "text", "text": text}]}))
}

fn answer(options: &Options, message: &Value) -> Option<String> {
    let id = message.get("id")?;
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    Some(match method {
        "initialize" => {
            let version = params
                .get("protocolVersion")
                .cloned()
                .unwrap_or(json!("2025-06-18"));
            result(
                id,
                json!({"protocolVersion": version, "capabilities": {"tools": {}},
                    "serverInfo": {"name": "dsh-mcp-test-server-raw", "version": "0"}}),
            )
        }
        "ping" => result(id, json!({})),
        "tools/list" => match (options.endless, &options.tools) {
            (Some(per_page), _) => {
                let page: u64 = params
                    .get("cursor")
                    .and_then(Value::as_str)
                    .and_then(|c| c.strip_prefix("page-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let tools: Vec<Value> = (0..per_page)
                    .map(|i| tool(&format!("t{page}_{i}"), "one of many"))
                    .collect();
                result(
                    id,
                    json!({"tools": tools, "nextCursor": format!("page-{}", page + 1)}),
                )
            }
            (None, Some(tools)) => result(id, json!({"tools": tools})),
            (None, None) => result(id, json!({"tools": default_tools()})),
        },
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            let id_text = id.to_string();
            match name {
                "surrogate" => format!(
                    r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{"content":[{{"type":"text","text":"bad \ud800 text"}}]}}}}"#
                ),
                "surrogate_late" => format!(
                    r#"{{"jsonrpc":"2.0","result":{{"content":[{{"type":"text","text":"bad \ud800 text"}}]}},"id":{id_text}}}"#
                ),
                "long" => text_result(id, &"x".repeat(options.long_bytes)),
                "long_late" => format!(
                    r#"{{"jsonrpc":"2.0","result":{{"content":[{{"type":"text","text":"{}"}}]}},"id":{id_text}}}"#,
                    "x".repeat(options.long_bytes)
                ),
                "echo" => {
                    let text = params
                        .pointer("/arguments/text")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    text_result(id, text)
                }
                "pid" => text_result(id, &std::process::id().to_string()),
                "noisy" => format!(
                    "noisy: starting\n{}\n{}",
                    r#"{"level":"info","msg":"\ud800 working"}"#,
                    text_result(id, "quiet now")
                ),
                _ => json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": format!("no tool {name}")}})
                .to_string(),
            }
        }
        _ => json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": format!("no method {method}")}})
        .to_string(),
    })
}

/// Serves until stdin ends; returns the exit code.
pub(crate) fn serve(args: &[String]) -> i32 {
    let options = match parse(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("dsh-mcp-test-server raw: {e}");
            return 2;
        }
    };
    eprintln!(
        "dsh-mcp-test-server: raw, ready (pid {})",
        std::process::id()
    );
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else {
            break;
        };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(reply) = answer(&options, &message) {
            let written = stdout
                .write_all(reply.as_bytes())
                .and_then(|()| stdout.write_all(b"\n"))
                .and_then(|()| stdout.flush());
            if written.is_err() {
                break;
            }
        }
    }
    0
}
