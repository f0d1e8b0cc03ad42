//! grep and glob honour ignore files from inside the workspace only: never one above its
//! root, and never one followed out (or in) through a symlink.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, ok};
use serde_json::json;

#[tokio::test]
async fn a_gitignore_above_the_workspace_changes_nothing() {
    let env = Env::new().await;
    // The folder holding the workspace (and `outside/`): not the agent's business.
    std::fs::write(env.dir.path().join(".gitignore"), "*.txt\nsrc/\n").unwrap();
    env.put("src/a.txt", "needle\n");
    env.put("b.txt", "needle\n");
    let text = ok(&env.call("glob", json!({"pattern": "**/*.txt"})).await);
    assert_eq!(text, "2 files match `**/*.txt`\nb.txt\nsrc/a.txt");
    let text = ok(&env.call("grep", json!({"pattern": "needle"})).await);
    assert_eq!(text, "2 files match\nb.txt\nsrc/a.txt");
    env.close().await;
}

#[tokio::test]
async fn a_symlinked_ignore_file_is_not_an_oracle_on_its_target() {
    let env = Env::new().await;
    // Is `guess-a` a line of the file outside? Ignoring would answer.
    std::fs::write(env.outside.join("private.txt"), "guess-a\n").unwrap();
    env.symlink(env.outside.join("private.txt"), ".gitignore");
    env.symlink(env.outside.join("private.txt"), "sub/.ignore");
    env.put("guess-a", "x\n");
    env.put("guess-b", "x\n");
    env.put("sub/guess-a", "x\n");
    let text = ok(&env.call("glob", json!({"pattern": "**/guess-*"})).await);
    assert_eq!(
        text,
        "3 files match `**/guess-*`\nguess-a\nguess-b\nsub/guess-a"
    );
    let text = ok(&env.call("grep", json!({"pattern": "x"})).await);
    assert_eq!(text, "3 files match\nguess-a\nguess-b\nsub/guess-a");
    env.close().await;
}

#[tokio::test]
async fn a_symlinked_ignore_file_pointing_inside_is_not_read_either() {
    // An oracle on a file of the workspace the rules hide.
    let env = Env::with_rules(r#"deny = ["*(secrets/**)"]"#).await;
    env.put("secrets/words.txt", "guess-a\n");
    env.symlink("secrets/words.txt", ".gitignore");
    env.put("guess-a", "x\n");
    env.put("guess-b", "x\n");
    let text = ok(&env.call("glob", json!({"pattern": "guess-*"})).await);
    assert!(text.starts_with("2 files match"), "{text}");
    env.close().await;
}

#[tokio::test]
async fn the_workspace_s_own_ignore_files_still_count_from_its_root_down() {
    let env = Env::new().await;
    env.put(".gitignore", "build/\n*.log\n!keep.log\n");
    env.put("src/.ignore", "gen.rs\n");
    env.put("src/build/out.rs", "x\n");
    env.put("src/a.log", "x\n");
    env.put("src/keep.log", "x\n");
    env.put("src/gen.rs", "x\n");
    env.put("src/main.rs", "x\n");
    // Rooted below the root, the root's .gitignore still applies.
    let text = ok(&env
        .call("glob", json!({"pattern": "**/*", "path": "src"}))
        .await);
    assert_eq!(
        text, "2 files match `**/*`\nsrc/keep.log\nsrc/main.rs",
        "{text}"
    );
    let text = ok(&env
        .call("grep", json!({"pattern": "x", "path": "src"}))
        .await);
    assert_eq!(text, "2 files match\nsrc/keep.log\nsrc/main.rs");
    // Searched explicitly, an ignored folder is searched (as ripgrep does).
    let text = ok(&env
        .call("glob", json!({"pattern": "*", "path": "src/build"}))
        .await);
    assert_eq!(text, "1 file match `*`\nsrc/build/out.rs");
    env.close().await;
}
