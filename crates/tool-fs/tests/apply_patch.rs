//! apply_patch through the whole pipeline: every kind of section, all-or-nothing failure,
//! loosening context matching, line endings, clear errors, and permission rules that see
//! every path a patch touches.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::ErrorCode;
use dsh_guards::PermissionRules;
use serde_json::json;

fn patch(body: &str) -> serde_json::Value {
    json!({ "input": format!("*** Begin Patch\n{body}\n*** End Patch\n") })
}

async fn read(env: &Env, paths: &[&str]) {
    for p in paths {
        ok(&env.call("read_file", json!({"path": p})).await);
    }
}

#[tokio::test]
async fn apply_patch_adds_updates_deletes_and_moves() {
    let env = Env::new().await;
    env.put("src/lib.rs", "fn a() {\n    1\n}\n\nfn b() {\n    1\n}\n");
    env.put("old.txt", "bye\n");
    env.put("a.txt", "keep\nchange\n");
    read(&env, &["src/lib.rs", "old.txt", "a.txt"]).await;
    let body = "*** Add File: docs/new.md\n+# New\n+\n+text\n\
        *** Update File: src/lib.rs\n@@ fn b() {\n-    1\n+    2\n\
        *** Delete File: old.txt\n\
        *** Update File: a.txt\n*** Move to: b/a2.txt\n@@\n keep\n-change\n+changed";
    let text = ok(&env.call("apply_patch", patch(body)).await);
    assert_eq!(
        text,
        "Applied the patch:\nA docs/new.md\nM src/lib.rs\nD old.txt\nR a.txt -> b/a2.txt"
    );
    assert_eq!(env.get("docs/new.md"), "# New\n\ntext\n");
    assert_eq!(
        env.get("src/lib.rs"),
        "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n"
    );
    assert!(!env.exists("old.txt"));
    assert!(!env.exists("a.txt"));
    assert_eq!(env.get("b/a2.txt"), "keep\nchanged\n");
    env.close().await;
}

#[tokio::test]
async fn a_failing_hunk_changes_nothing_and_is_named() {
    let env = Env::new().await;
    env.put("one.txt", "a\nb\n");
    env.put("two.txt", "x\ny\nz\n");
    env.put("gone.txt", "g\n");
    read(&env, &["one.txt", "two.txt", "gone.txt"]).await;
    let body = "*** Update File: one.txt\n@@\n-a\n+A\n\
        *** Add File: fresh.txt\n+new\n\
        *** Delete File: gone.txt\n\
        *** Update File: two.txt\n@@\n-x\n+X\n@@\n-nothing like this\n+Q";
    let msg = err(
        &env.call("apply_patch", patch(body)).await,
        ErrorCode::ToolError,
    );
    assert!(
        msg.starts_with("apply_patch changed nothing: `two.txt`, hunk 2: these lines were not found after line 1"),
        "{msg}"
    );
    assert!(msg.contains("nothing like this"), "{msg}");
    assert_eq!(env.get("one.txt"), "a\nb\n");
    assert!(!env.exists("fresh.txt"));
    assert_eq!(env.get("gone.txt"), "g\n");
    assert_eq!(env.get("two.txt"), "x\ny\nz\n");
    env.close().await;
}

#[tokio::test]
async fn context_matches_loosen_and_line_endings_stay() {
    let env = Env::new().await;
    env.put("ws.py", "def f():\n    x = 1   \n    return x\n");
    env.put("win.txt", "a\r\nb\r\nc");
    read(&env, &["ws.py", "win.txt"]).await;
    // The model dropped the trailing blanks and the indentation of the context.
    let body = "*** Update File: ws.py\n@@ def f():\nx = 1\n-    return x\n+    return x + 1\n\
        *** Update File: win.txt\n@@\n b\n-c\n+C";
    let body = body.replace("\nx = 1\n", "\n x = 1\n");
    ok(&env.call("apply_patch", patch(&body)).await);
    assert_eq!(
        env.get("ws.py"),
        "def f():\n    x = 1   \n    return x + 1\n",
        "the context line keeps the file's own white space"
    );
    assert_eq!(
        env.get("win.txt"),
        "a\r\nb\r\nC",
        "CRLF and no final newline kept"
    );
    env.close().await;
}

#[tokio::test]
async fn apply_patch_errors_are_clear() {
    let env = Env::new().await;
    env.put("f.txt", "x\n");
    read(&env, &["f.txt"]).await;
    let cases = [
        (
            json!({"input": "*** Update File: f.txt\n-x\n+y"}),
            "invalid patch, line 1: the first line must be `*** Begin Patch`",
        ),
        (
            patch("*** Update File: nope.txt\n@@\n-x\n+y"),
            "cannot update: `nope.txt` does not exist",
        ),
        (
            patch("*** Delete File: nope.txt"),
            "`nope.txt`: cannot delete: it does not exist",
        ),
        (
            patch("*** Update File: f.txt\n@@\n-x\n+y\n*** Delete File: f.txt"),
            "`f.txt`: the patch touches this file more than once",
        ),
        (
            patch("*** Update File: f.txt\n@@ fn missing()\n-x\n+y"),
            "`f.txt`, hunk 1: the context line `fn missing()` was not found",
        ),
        (
            patch("*** Update File: f.txt"),
            "invalid patch, line 2: the update of `f.txt` has no hunks",
        ),
    ];
    for (input, expected) in cases {
        let msg = err(&env.call("apply_patch", input).await, ErrorCode::ToolError);
        assert!(msg.starts_with("apply_patch changed nothing: "), "{msg}");
        assert!(msg.contains(expected), "{msg}\nexpected: {expected}");
    }
    assert_eq!(env.get("f.txt"), "x\n");
    env.close().await;
}

#[tokio::test]
async fn permission_rules_see_every_path_a_patch_touches() {
    let env = Env::with(
        |b| b,
        |hooks, toolset| {
            hooks.pre_execute(
                PermissionRules::from_toml(r#"deny = ["apply_patch(secrets/**)"]"#)
                    .unwrap()
                    .with_root(toolset.root()),
            );
        },
    )
    .await;
    env.put("secrets/key.pem", "k\n");
    env.put("ok.txt", "o\n");
    env.symlink("secrets", "alias");
    read(&env, &["ok.txt", "secrets/key.pem"]).await;
    let sneaky = [
        "*** Update File: ok.txt\n@@\n-o\n+p\n*** Delete File: secrets/key.pem",
        "*** Update File: ok.txt\n*** Move to: secrets/moved.txt\n@@\n-o\n+p",
        "*** Add File: ./docs/../secrets/new.pem\n+x",
        "*** Add File: alias/through-a-symlink.pem\n+x",
    ];
    for body in sneaky {
        let msg = err(
            &env.call("apply_patch", patch(body)).await,
            ErrorCode::Denied,
        );
        assert!(msg.contains("apply_patch(secrets/**)"), "{msg}");
    }
    assert_eq!(env.get("ok.txt"), "o\n");
    assert!(env.exists("secrets/key.pem"));
    assert!(!env.exists("secrets/moved.txt"));
    ok(&env
        .call("apply_patch", patch("*** Update File: ok.txt\n@@\n-o\n+p"))
        .await);
    env.close().await;
}
