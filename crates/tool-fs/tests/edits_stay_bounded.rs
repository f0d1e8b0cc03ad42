//! A change's result is sized before it is built: an edit or a patch over the file limit is
//! refused with a clear error, and the file is left as it was.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::ErrorCode;
use dsh_tool_fs::Limits;
use serde_json::json;

const LIMIT: u64 = 64 * 1024;

async fn env() -> Env {
    Env::with(
        |b| {
            b.limits(Limits {
                max_file_bytes: LIMIT,
                max_patch_bytes: 4 * LIMIT,
                ..Limits::default()
            })
        },
        |_, _| {},
    )
    .await
}

#[tokio::test]
async fn replace_all_that_would_multiply_a_file_is_refused() {
    let env = env().await;
    let original = "a".repeat(32 * 1024);
    env.put("a.txt", &original);
    ok(&env.call("read_file", json!({"path": "a.txt"})).await);
    let text = err(
        &env.call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "a", "new_string": "b".repeat(1024), "replace_all": true}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(
        text.contains("33554432 bytes") && text.contains(&format!("{LIMIT}-byte limit")),
        "{text}"
    );
    assert_eq!(env.get("a.txt"), original, "nothing was written");
    // Within the limit it still works.
    ok(&env
        .call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": true}),
        )
        .await);
    env.close().await;
}

#[tokio::test]
async fn a_patch_whose_file_would_pass_the_limit_is_refused() {
    let env = env().await;
    env.put("small.txt", "one\n");
    ok(&env.call("read_file", json!({"path": "small.txt"})).await);
    let big_line = format!("+{}\n", "x".repeat(1000));
    let added = big_line.repeat(70);
    let patch = format!(
        "*** Begin Patch\n*** Add File: big.txt\n{added}*** Update File: small.txt\n@@\n-one\n+{}\n*** End Patch",
        &big_line[1..].trim_end().repeat(70)
    );
    let text = err(
        &env.call("apply_patch", json!({"input": patch})).await,
        ErrorCode::ToolError,
    );
    assert!(text.contains("limit") && text.contains("big.txt"), "{text}");
    assert!(!env.exists("big.txt"));
    assert_eq!(env.get("small.txt"), "one\n");
    env.close().await;
}

#[tokio::test]
async fn a_patch_holding_too_much_in_all_is_refused() {
    let env = env().await;
    // Eight files just under the limit each: changing them all holds 16 of them in memory.
    let body = "y".repeat(LIMIT as usize - 100) + "\n";
    let mut sections = String::new();
    for i in 0..8 {
        env.put(&format!("f{i}.txt"), &body);
        ok(&env
            .call("read_file", json!({"path": format!("f{i}.txt")}))
            .await);
        sections.push_str(&format!("*** Update File: f{i}.txt\n@@\n+tail\n"));
    }
    let patch = format!("*** Begin Patch\n{sections}*** End Patch");
    let text = err(
        &env.call("apply_patch", json!({"input": patch})).await,
        ErrorCode::ToolError,
    );
    assert!(
        text.contains("the files this patch reads and writes"),
        "{text}"
    );
    for i in 0..8 {
        assert_eq!(env.get(&format!("f{i}.txt")), body);
    }
    env.close().await;
}
