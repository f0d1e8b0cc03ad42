//! A stdio client that writes a line dsh cannot take (not JSON, invalid UTF-8, JSON that is no
//! JSON-RPC message, a line over the 16 MiB bound) gets a JSON-RPC error reply for it, id
//! `null` unless the line had a readable id, and `dsh serve` goes on serving the next lines
//! of the same session (issue 29, break 7).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::stdio::Client;
use serde_json::{Value, json};

fn start(dir: &std::path::Path) -> Client {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    let log = dir.join("session.jsonl");
    Client::start(&[
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
    ])
}

/// Writes `line` and returns the server's reply to it.
fn reply_to(client: &mut Client, line: &[u8]) -> Value {
    client.send_raw(line);
    client.next_message()
}

#[test]
fn garbage_lines_get_parse_errors_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = start(dir.path());
    client.initialize();

    for line in [
        &b"this is not JSON\n"[..],
        b"\xff\xfe\x00 invalid UTF-8 \xc3\x28\n",
        b"{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \"tools/list\"\n",
    ] {
        let reply = reply_to(&mut client, line);
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert_eq!(reply["error"]["code"], -32700, "{reply}");
        assert_eq!(reply["id"], Value::Null, "{reply}");
    }

    // JSON, but no JSON-RPC message: an invalid request, answered with its id.
    let reply = reply_to(
        &mut client,
        b"{\"jsonrpc\": \"2.0\", \"id\": 41, \"params\": 7}\n",
    );
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], 41, "{reply}");
    let reply = reply_to(&mut client, b"[1, 2, 3]\n");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], Value::Null, "{reply}");

    // A line over the bound: answered, never held.
    let mut long = vec![b'a'; 17 * 1024 * 1024];
    long.push(b'\n');
    let reply = reply_to(&mut client, &long);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");

    // The same session still serves: a tool call works and so does a read-before-edit.
    let (error, text) = client.call("read_file", json!({"path": "notes.txt"}));
    assert!(!error, "{text}");
    assert!(text.contains("hello"), "{text}");
    let (error, text) = client.call(
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
    );
    assert!(!error, "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/notes.txt")).unwrap(),
        "bye\n"
    );
    assert_eq!(client.finish(), 0);
}
