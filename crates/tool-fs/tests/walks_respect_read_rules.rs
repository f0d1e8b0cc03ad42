//! Every file a tool reads or lists, each file a walk visits included, passes the read rules
//! `read_file` passes: a hidden file is skipped, and the answer says how many were, not which.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::{ErrorCode, PathPolicies, ToolContext};
use serde_json::json;
use std::sync::Arc;

const RULES: &str = r#"deny = ["*(secrets/**)", "*(.env)"]"#;
const KEY: &str = "API_KEY=sk-live-4242";
const TOKEN: &str = "TOKEN=dotenv-9999";

async fn env() -> Env {
    let env = Env::with_rules(RULES).await;
    env.put("secrets/key.txt", format!("{KEY}\n"));
    env.put("secrets/deeper/more.txt", format!("{KEY}\n"));
    env.put(".env", format!("{TOKEN}\n"));
    env.put("src/config.rs", "let x = 1;\n");
    env
}

#[track_caller]
fn nothing_hidden_leaks(text: &str) {
    for leak in [KEY, TOKEN, "key.txt", "more.txt", "deeper"] {
        assert!(!text.contains(leak), "`{leak}` leaked:\n{text}");
    }
}

#[tokio::test]
async fn read_file_of_a_hidden_file_is_denied() {
    let env = env().await;
    err(
        &env.call("read_file", json!({"path": "secrets/key.txt"}))
            .await,
        ErrorCode::Denied,
    );
    env.close().await;
}

#[tokio::test]
async fn grep_skips_hidden_files_and_says_how_many() {
    let env = env().await;
    let text = ok(&env
        .call("grep", json!({"pattern": "=", "output_mode": "content"}))
        .await);
    nothing_hidden_leaks(&text);
    assert!(text.contains("src/config.rs:1:let x = 1;"), "{text}");
    // `secrets` (not entered) and `.env`: `.env` is hidden anyway (a dotfile), so the rules
    // skip the one folder.
    assert!(
        text.contains("1 entry hidden by the permission rules was skipped"),
        "{text}"
    );
    let text = ok(&env
        .call(
            "grep",
            json!({"pattern": "=", "glob": ".env", "output_mode": "content"}),
        )
        .await);
    nothing_hidden_leaks(&text);
    assert!(text.contains("hidden by the permission rules"), "{text}");
    for mode in ["files_with_matches", "count"] {
        let text = ok(&env
            .call("grep", json!({"pattern": "API", "output_mode": mode}))
            .await);
        nothing_hidden_leaks(&text);
        assert!(text.starts_with("No matches"), "{text}");
    }
    env.close().await;
}

#[tokio::test]
async fn glob_and_list_dir_do_not_list_hidden_names() {
    let env = env().await;
    let text = ok(&env.call("glob", json!({"pattern": "**/*"})).await);
    nothing_hidden_leaks(&text);
    assert!(text.contains("src/config.rs"), "{text}");
    assert!(text.contains("hidden by the permission rules"), "{text}");
    let text = ok(&env.call("glob", json!({"pattern": "**/.env"})).await);
    assert!(
        !text.contains(".env\n") && text.starts_with("No files"),
        "{text}"
    );
    let text = ok(&env.call("list_dir", json!({"path": "."})).await);
    assert!(
        !text.contains("secrets") && !text.contains(".env"),
        "{text}"
    );
    assert!(
        text.contains("2 entries hidden by the permission rules were skipped"),
        "{text}"
    );
    env.close().await;
}

#[tokio::test]
async fn a_search_rooted_in_a_hidden_folder_is_denied() {
    let env = env().await;
    for (tool, args) in [
        ("grep", json!({"pattern": "API", "path": "secrets"})),
        ("grep", json!({"pattern": "API", "path": "./secrets/"})),
        ("glob", json!({"pattern": "*", "path": "secrets"})),
        ("list_dir", json!({"path": "secrets"})),
    ] {
        let text = err(&env.call(tool, args.clone()).await, ErrorCode::Denied);
        nothing_hidden_leaks(&text);
    }
    // Through a symlink to the folder, too.
    env.symlink("secrets", "public");
    let text = err(
        &env.call("grep", json!({"pattern": "API", "path": "public"}))
            .await,
        ErrorCode::Denied,
    );
    nothing_hidden_leaks(&text);
    env.close().await;
}

#[tokio::test]
async fn ask_rules_hide_from_walks_since_a_walk_cannot_ask() {
    let env = Env::with_rules(r#"ask = ["read_file(notes/**)"]"#).await;
    env.put("notes/diary.txt", "dear diary\n");
    env.put("src/a.txt", "dear reader\n");
    let text = ok(&env.call("grep", json!({"pattern": "dear"})).await);
    assert!(!text.contains("diary"), "{text}");
    assert!(text.contains("src/a.txt"), "{text}");
    assert!(text.contains("1 entry hidden"), "{text}");
    env.close().await;
}

#[tokio::test]
async fn the_bodies_ask_the_policy_themselves() {
    // A body called with the pipeline's policy but no pre-execute check in front of it (what
    // a handler that rewrote the input, or a symlink swapped after the check, would leave).
    let env = env().await;
    let rules = dsh_guards::PermissionRules::from_toml(RULES)
        .unwrap()
        .with_root(&env.root);
    let ctx = ToolContext {
        policy: PathPolicies::new(vec![Arc::new(rules)]),
        ..ToolContext::detached("direct")
    };
    let tools = env.toolset.tools();
    let tool = |name: &str| tools.iter().find(|t| t.name() == name).unwrap().clone();
    let read = tool("read_file")
        .execute(json!({"path": "secrets/key.txt"}), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(read.code, ErrorCode::Denied, "{}", read.message);
    assert!(!read.message.contains(KEY));
    let grep = tool("grep")
        .execute(json!({"pattern": "API", "path": "secrets"}), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(grep.code, ErrorCode::Denied, "{}", grep.message);
    let value = tool("grep")
        .execute(json!({"pattern": "API", "output_mode": "content"}), ctx)
        .await
        .unwrap();
    assert_eq!(value["files"], 0, "{value}");
    assert_eq!(value["skipped"]["hidden"], 1, "{value}");
    env.close().await;
}
