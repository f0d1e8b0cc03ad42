//! Only a read that showed the model the file's content counts for read-before-edit, and
//! its record is in place before its result is returned.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::{ErrorCode, ToolContext};
use dsh_tool_fs::ContentHash;
use serde_json::json;

#[tokio::test]
async fn a_read_past_the_end_is_not_a_read() {
    let env = Env::new().await;
    env.put("b.txt", "keep me\n");
    err(
        &env.call("read_file", json!({"path": "b.txt", "offset": 99999}))
            .await,
        ErrorCode::ToolError,
    );
    let text = err(
        &env.call("write_file", json!({"path": "b.txt", "content": "gone\n"}))
            .await,
        ErrorCode::Denied,
    );
    assert!(text.contains("has not been read"), "{text}");
    assert_eq!(env.get("b.txt"), "keep me\n");
    env.close().await;
}

#[tokio::test]
async fn a_binary_read_that_showed_nothing_is_not_a_read() {
    let env = Env::new().await;
    env.put("blob.bin", b"\x00\x01\x02 keep");
    let text = ok(&env.call("read_file", json!({"path": "blob.bin"})).await);
    assert!(text.contains("binary"), "{text}");
    err(
        &env.call("write_file", json!({"path": "blob.bin", "content": "gone"}))
            .await,
        ErrorCode::Denied,
    );
    err(
        &env.call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Delete File: blob.bin\n*** End Patch"}),
        )
        .await,
        ErrorCode::Denied,
    );
    assert!(env.exists("blob.bin"));
    env.close().await;
}

#[tokio::test]
async fn a_read_that_showed_the_file_still_counts() {
    let env = Env::new().await;
    env.put("empty.txt", "");
    env.put("long.txt", "1\n2\n3\n");
    ok(&env.call("read_file", json!({"path": "empty.txt"})).await);
    ok(&env
        .call(
            "read_file",
            json!({"path": "long.txt", "offset": 2, "limit": 1}),
        )
        .await);
    ok(&env
        .call(
            "write_file",
            json!({"path": "empty.txt", "content": "now\n"}),
        )
        .await);
    ok(&env
        .call(
            "edit_file",
            json!({"path": "long.txt", "old_string": "3", "new_string": "three"}),
        )
        .await);
    env.close().await;
}

#[tokio::test]
async fn the_record_is_in_place_when_the_read_returns_and_holds_what_was_shown() {
    let env = Env::new().await;
    env.put("f.txt", "shown\n");
    let tools = env.toolset.tools();
    let read = tools.iter().find(|t| t.name() == "read_file").unwrap();
    let value = read
        .execute(json!({"path": "f.txt"}), ToolContext::detached("r1"))
        .await
        .unwrap();
    assert_eq!(value["text"], "     1\tshown\n");
    // The file changes on disk after the read: the record is of the bytes shown, so the
    // change is seen as a change.
    env.put("f.txt", "changed behind the model's back\n");
    let monitor = env.toolset.monitor();
    assert_eq!(
        monitor
            .check("main", "f.txt", Some(ContentHash::of(b"shown\n")))
            .await
            .unwrap(),
        Ok(())
    );
    assert!(
        monitor
            .check(
                "main",
                "f.txt",
                Some(ContentHash::of(b"changed behind the model's back\n"))
            )
            .await
            .unwrap()
            .is_err()
    );
    env.close().await;
}
