//! write_file and edit_file through the whole pipeline: success paths, atomic replacement,
//! kept permissions and line endings, and each error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::ErrorCode;
use serde_json::json;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;

fn mode(env: &Env, rel: &str) -> u32 {
    std::fs::metadata(env.root.join(rel))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn leftovers(env: &Env, dir: &str) -> Vec<String> {
    std::fs::read_dir(env.root.join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".dsh-"))
        .collect()
}

// ---------------------------------------------------------------- write_file

#[tokio::test]
async fn write_file_creates_missing_folders() {
    let env = Env::new().await;
    let text = ok(&env
        .call(
            "write_file",
            json!({"path": "a/b/c.txt", "content": "hi\r\nthere"}),
        )
        .await);
    assert_eq!(text, "Created `a/b/c.txt` (9 bytes).");
    assert_eq!(
        env.get("a/b/c.txt"),
        "hi\r\nthere",
        "written exactly as given"
    );
    assert!(leftovers(&env, "a/b").is_empty());
    env.close().await;
}

#[tokio::test]
async fn write_file_replaces_atomically_and_keeps_permissions() {
    let env = Env::new().await;
    env.put("run.sh", "echo old\n");
    std::fs::set_permissions(
        env.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    ok(&env.call("read_file", json!({"path": "run.sh"})).await);
    // A reader holding the old file keeps seeing the old bytes: the new file was renamed
    // over it, never written in place, so no one can see a half-written file.
    let mut old_handle = std::fs::File::open(env.root.join("run.sh")).unwrap();
    let text = ok(&env
        .call(
            "write_file",
            json!({"path": "run.sh", "content": "echo new\n"}),
        )
        .await);
    assert_eq!(text, "Overwrote `run.sh` (9 bytes).");
    assert_eq!(env.get("run.sh"), "echo new\n");
    let mut seen = String::new();
    old_handle.read_to_string(&mut seen).unwrap();
    assert_eq!(seen, "echo old\n");
    assert_eq!(mode(&env, "run.sh"), 0o750);
    assert!(leftovers(&env, ".").is_empty());
    env.close().await;
}

#[tokio::test]
async fn write_file_errors_are_clear() {
    let env = Env::new().await;
    env.put("dir/inner.txt", "");
    env.put("plain.txt", "x");
    let msg = err(
        &env.call("write_file", json!({"path": "dir", "content": "x"}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("`dir` is a directory"), "{msg}");
    let msg = err(
        &env.call(
            "write_file",
            json!({"path": "plain.txt/under.txt", "content": "x"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert_eq!(
        msg,
        "writing `plain.txt/under.txt` failed: one of its parent folders is a file"
    );
    let msg = err(
        &env.call("write_file", json!({"path": "x.txt"})).await,
        ErrorCode::ToolInputError,
    );
    assert!(msg.contains("content"), "{msg}");
    env.close().await;
}

#[tokio::test]
async fn write_file_will_not_replace_special_or_oversized_files() {
    let env = Env::with(
        |b| {
            b.limits(dsh_tool_fs::Limits {
                max_file_bytes: 10,
                ..dsh_tool_fs::Limits::default()
            })
        },
        |_, _| {},
    )
    .await;
    let status = std::process::Command::new("mkfifo")
        .arg(env.root.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let msg = err(
        &env.call("write_file", json!({"path": "pipe", "content": "x"}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("`pipe` is not a regular file"), "{msg}");
    env.put("big.txt", "0123456789abcdef");
    let msg = err(
        &env.call("write_file", json!({"path": "big.txt", "content": "x"}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(
        msg.contains("`big.txt` is 16 bytes, over the 10-byte limit"),
        "{msg}"
    );
    let msg = err(
        &env.call(
            "edit_file",
            json!({"path": "big.txt", "old_string": "0", "new_string": "1"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("over the 10-byte limit for edits"), "{msg}");
    assert_eq!(env.get("big.txt"), "0123456789abcdef");
    env.close().await;
}

#[tokio::test]
async fn a_cancelled_call_writes_nothing() {
    let env = Env::new().await;
    env.put("f.txt", "x\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    let (handle, signal) = dsh_core::CancelHandle::new();
    handle.cancel(dsh_core::CancelReason::Step);
    let ctx = dsh_core::ToolContext {
        signal,
        ..dsh_core::ToolContext::detached("cancelled")
    };
    let tools = env.toolset.tools();
    for (name, args) in [
        (
            "edit_file",
            json!({"path": "f.txt", "old_string": "x", "new_string": "y"}),
        ),
        ("write_file", json!({"path": "g.txt", "content": "g"})),
    ] {
        let tool = tools.iter().find(|t| t.name() == name).unwrap();
        let failure = tool.execute(args, ctx.clone()).await.unwrap_err();
        assert_eq!(
            failure.code,
            ErrorCode::Aborted,
            "{name}: {}",
            failure.message
        );
    }
    assert_eq!(env.get("f.txt"), "x\n");
    assert!(!env.exists("g.txt"));
    env.close().await;
}

// ---------------------------------------------------------------- edit_file

async fn edit(env: &Env, args: serde_json::Value) -> dsh_core::FrozenResult {
    env.call("edit_file", args).await
}

#[tokio::test]
async fn edit_file_replaces_a_unique_string() {
    let env = Env::new().await;
    env.put("lib.rs", "fn a() {}\nfn b() {}\n");
    std::fs::set_permissions(
        env.root.join("lib.rs"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    ok(&env.call("read_file", json!({"path": "lib.rs"})).await);
    let text = ok(&edit(
        &env,
        json!({"path": "lib.rs", "old_string": "fn b() {}", "new_string": "fn b() { 1 }"}),
    )
    .await);
    assert_eq!(text, "Edited `lib.rs`: replaced 1 occurrence.");
    assert_eq!(env.get("lib.rs"), "fn a() {}\nfn b() { 1 }\n");
    assert_eq!(mode(&env, "lib.rs"), 0o600);
    assert!(leftovers(&env, ".").is_empty());
    env.close().await;
}

#[tokio::test]
async fn edit_file_replace_all_and_its_count() {
    let env = Env::new().await;
    env.put("f.txt", "x = old; y = old; z = old;");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    let text = ok(&edit(
        &env,
        json!({"path": "f.txt", "old_string": "old", "new_string": "new", "replace_all": true}),
    )
    .await);
    assert_eq!(text, "Edited `f.txt`: replaced 3 occurrences.");
    assert_eq!(env.get("f.txt"), "x = new; y = new; z = new;");
    env.close().await;
}

#[tokio::test]
async fn edit_file_keeps_crlf_and_a_missing_final_newline() {
    let env = Env::new().await;
    env.put("win.txt", "one\r\ntwo\r\nthree");
    ok(&env.call("read_file", json!({"path": "win.txt"})).await);
    ok(&edit(
        &env,
        json!({"path": "win.txt", "old_string": "two\nthree", "new_string": "2\n3\n4"}),
    )
    .await);
    assert_eq!(env.get("win.txt"), "one\r\n2\r\n3\r\n4");
    env.close().await;
}

#[tokio::test]
async fn edit_file_match_count_errors_name_the_count() {
    let env = Env::new().await;
    env.put("f.txt", "a a a\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    let none = err(
        &edit(
            &env,
            json!({"path": "f.txt", "old_string": "b", "new_string": "c"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert_eq!(none, "`f.txt`: old_string was not found");
    let many = err(
        &edit(
            &env,
            json!({"path": "f.txt", "old_string": "a", "new_string": "c"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(
        many.starts_with("`f.txt`: old_string occurs 3 times; add surrounding lines"),
        "{many}"
    );
    assert!(many.contains("replace_all"), "{many}");
    assert_eq!(env.get("f.txt"), "a a a\n", "a failed edit changes nothing");
    env.close().await;
}

#[tokio::test]
async fn edit_file_other_errors() {
    let env = Env::new().await;
    env.put("f.txt", "abc\n");
    env.put("latin1.txt", [b'a', 0xe9, b'\n']);
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    ok(&env.call("read_file", json!({"path": "latin1.txt"})).await);
    let msg = err(
        &edit(
            &env,
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert_eq!(
        msg,
        "`nope.txt` does not exist; use write_file to create it"
    );
    let msg = err(
        &edit(
            &env,
            json!({"path": "f.txt", "old_string": "abc", "new_string": "abc"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("identical"), "{msg}");
    let msg = err(
        &edit(
            &env,
            json!({"path": "f.txt", "old_string": "", "new_string": "z"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("old_string is empty"), "{msg}");
    let msg = err(
        &edit(
            &env,
            json!({"path": "latin1.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("not UTF-8 text"), "{msg}");
    env.put("dir/inner.txt", "");
    let msg = err(
        &edit(
            &env,
            json!({"path": "dir", "old_string": "a", "new_string": "b"}),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert_eq!(msg, "`dir` is a directory");
    let msg = err(
        &edit(&env, json!({"path": "f.txt", "old_string": "a"})).await,
        ErrorCode::ToolInputError,
    );
    assert!(msg.contains("new_string"), "{msg}");
    env.close().await;
}
