//! grep, glob and list_dir say what they could not search and why, instead of "No matches";
//! errors keep their reason however long the path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use common::{Env, err, ok};
use dsh_core::ErrorCode;
use serde_json::json;

/// Builds `deep/NAME/NAME/…/deep.txt`, longer than `PATH_MAX` (`std::fs` cannot: each step
/// is made relative to the folder above it).
fn deep_tree(env: &Env) {
    let mut dir = Dir::open_ambient_dir(&env.root, ambient_authority()).unwrap();
    dir.create_dir("deep").unwrap();
    dir = dir.open_dir("deep").unwrap();
    let name = "d".repeat(250);
    for _ in 0..18 {
        dir.create_dir(&name).unwrap();
        dir = dir.open_dir(&name).unwrap();
    }
    dir.write("deep.txt", "needle\n").unwrap();
}

#[tokio::test]
async fn paths_past_path_max_are_reported() {
    let env = Env::new().await;
    env.put("shallow.txt", "hay\n");
    deep_tree(&env);
    let text = ok(&env.call("grep", json!({"pattern": "needle"})).await);
    assert!(text.starts_with("No matches"), "{text}");
    assert!(
        text.contains("longer than 4096 bytes could not be searched"),
        "{text}"
    );
    let text = ok(&env.call("glob", json!({"pattern": "**/deep.txt"})).await);
    assert!(
        text.contains("longer than 4096 bytes could not be searched"),
        "{text}"
    );
    env.close().await;
}

#[tokio::test]
async fn a_match_before_a_nul_byte_is_not_passed_over_in_silence() {
    let env = Env::new().await;
    env.put("data.bin", b"password=hunter2\n\x00\x01\x02");
    env.put("plain.txt", b"nothing here\n");
    let text = ok(&env
        .call(
            "grep",
            json!({"pattern": "password", "output_mode": "content"}),
        )
        .await);
    assert!(
        text.contains("1 binary file(s) (holding a NUL byte) also match")
            && text.contains("`data.bin`"),
        "{text}"
    );
    // A binary file that does not match is not worth a word.
    let text = ok(&env.call("grep", json!({"pattern": "zebra"})).await);
    assert_eq!(text, "No matches for `zebra` in `.`.");
    env.close().await;
}

#[tokio::test]
async fn list_dir_on_a_fifo_says_what_it_is() {
    let env = Env::new().await;
    let status = std::process::Command::new("mkfifo")
        .arg(env.root.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let text = err(
        &env.call("list_dir", json!({"path": "pipe"})).await,
        ErrorCode::ToolError,
    );
    assert!(
        text.contains("FIFO") && !text.contains("is a file"),
        "{text}"
    );
    env.close().await;
}

#[tokio::test]
async fn a_long_path_does_not_push_the_reason_out_of_the_message() {
    let env = Env::new().await;
    let long = vec!["p".repeat(250); 15].join("/");
    for (tool, args, reason) in [
        ("read_file", json!({"path": long}), "does not exist"),
        ("list_dir", json!({"path": long}), "does not exist"),
        (
            "edit_file",
            json!({"path": long, "old_string": "a", "new_string": "b"}),
            "does not exist",
        ),
    ] {
        let text = err(&env.call(tool, args).await, ErrorCode::ToolError);
        assert!(text.contains(reason), "{tool}: {text}");
        assert!(text.len() < 1024, "{tool}: {} bytes", text.len());
    }
    env.close().await;
}
