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

fn mode(env: &Env, rel: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(env.root.join(rel))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn set_mode(env: &Env, rel: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn a_write_failing_while_committing_rolls_back_and_names_the_file() {
    let env = Env::new().await;
    env.put("a.txt", "one\n");
    // A regular file where the patch wants a folder: the plan cannot see it (nothing exists
    // below it), the write fails, even as root.
    env.put("plain.txt", "i am a file\n");
    read(&env, &["a.txt"]).await;
    let body = "*** Update File: a.txt\n@@\n-one\n+ONE\n\
        *** Add File: plain.txt/x\n+new";
    let msg = err(
        &env.call("apply_patch", patch(body)).await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("`plain.txt/x`"), "names the file: {msg}");
    assert!(
        msg.contains("one of its parent folders is a file"),
        "says why: {msg}"
    );
    assert!(
        msg.contains("the changes already made by this patch were rolled back"),
        "{msg}"
    );
    assert_eq!(
        env.get("a.txt"),
        "one\n",
        "the update was written, then undone"
    );
    assert_eq!(env.get("plain.txt"), "i am a file\n");
    // Nothing left behind beside a.txt (no temporary file of the undone write).
    let mut names: Vec<String> = std::fs::read_dir(&env.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "plain.txt"]);
    env.close().await;
}

#[tokio::test]
async fn a_moved_file_keeps_its_permissions() {
    let env = Env::new().await;
    env.put("run.sh", "#!/bin/sh\necho old\n");
    set_mode(&env, "run.sh", 0o750);
    read(&env, &["run.sh"]).await;
    let body =
        "*** Update File: run.sh\n*** Move to: bin/run.sh\n@@\n #!/bin/sh\n-echo old\n+echo new";
    ok(&env.call("apply_patch", patch(body)).await);
    assert!(!env.exists("run.sh"));
    assert_eq!(env.get("bin/run.sh"), "#!/bin/sh\necho new\n");
    assert_eq!(
        mode(&env, "bin/run.sh"),
        0o750,
        "the moved script is still executable"
    );
    env.close().await;
}

/// Removes `z.txt` behind the patch's back when its deletion is announced, so that deleting
/// it fails in the commit phase after the earlier deletion was done.
struct PullTheRug {
    root: std::path::PathBuf,
}

#[async_trait::async_trait]
impl dsh_tool_fs::FsIntentHandler for PullTheRug {
    fn name(&self) -> &str {
        "pull-the-rug"
    }

    async fn check(&self, intent: &dsh_tool_fs::FsIntent) -> dsh_tool_fs::IntentVerdict {
        if intent.path == "z.txt" {
            std::fs::remove_file(self.root.join("z.txt")).unwrap();
        }
        dsh_tool_fs::IntentVerdict::Allow
    }
}

#[tokio::test]
async fn a_deletion_rolled_back_restores_the_file_with_its_permissions() {
    let env = Env::new().await;
    env.toolset.on_intent(PullTheRug {
        root: env.root.clone(),
    });
    env.put("d.sh", "#!/bin/sh\nexit 0\n");
    set_mode(&env, "d.sh", 0o750);
    env.put("z.txt", "z\n");
    read(&env, &["d.sh", "z.txt"]).await;
    let msg = err(
        &env.call(
            "apply_patch",
            patch("*** Delete File: d.sh\n*** Delete File: z.txt"),
        )
        .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("deleting `z.txt` failed"), "{msg}");
    assert!(msg.contains("were rolled back"), "{msg}");
    assert_eq!(env.get("d.sh"), "#!/bin/sh\nexit 0\n", "put back");
    assert_eq!(mode(&env, "d.sh"), 0o750, "with the permissions it had");
    env.close().await;
}
