//! Test 3: writes outside the workspace, to `.git/hooks`, to a path a rule denies writing,
//! through a symlink pointing out, and by renaming directories fail; a path a rule denies
//! reading cannot be read; the workspace can be read (and, in `workspace-write`, written);
//! `read-only` refuses every write.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

fn outside() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("victim.txt"), "untouched\n").unwrap();
    dir
}

/// Runs `command` and asserts it failed.
async fn refused(env: &Env, command: &str) -> serde_json::Value {
    let v = env.ok(command).await;
    assert_ne!(code(&v), 0, "`{command}` was allowed: {v}");
    v
}

#[tokio::test]
async fn writes_outside_what_the_mode_allows_fail() {
    let out = outside();
    let o = out.path().canonicalize().unwrap();
    let o = o.display();
    let env = Env::new(SandboxConfig::workspace_write().read_only_path("protected"));
    std::fs::create_dir(env.path("protected")).unwrap();
    std::fs::write(env.path("protected/p.txt"), "keep\n").unwrap();
    std::fs::create_dir(env.path("sub")).unwrap();

    // Outside the workspace, directly and through a symlink inside it.
    let v = refused(&env, &format!("echo x > {o}/victim.txt")).await;
    assert!(
        env.tool_text(&v).contains("sandbox"),
        "the result names the sandbox"
    );
    assert_eq!(v["meta"]["sandboxRefusal"], true);
    refused(&env, &format!("touch {o}/new.txt")).await;
    refused(&env, &format!("ln -s {o} link && echo x > link/victim.txt")).await;
    refused(&env, &format!("ln -s {o}/victim.txt flink; echo x > flink")).await;
    // .git/hooks and .git/config, and what a rule protects.
    refused(&env, "echo 'rm -rf ~' > .git/hooks/pre-commit").await;
    refused(&env, "echo '[core] evil' >> .git/config").await;
    refused(&env, "echo x > protected/p.txt").await;
    refused(&env, "rm protected/p.txt").await;
    // Renames that would carry a protected folder away, or replace the workspace.
    refused(&env, "mv .git .git-moved").await;
    refused(&env, "mv .git/hooks hooks-moved").await;
    refused(&env, "mkdir -p x/hooks && mv -T x/hooks .git/hooks").await;
    refused(&env, "mv sub protected").await;
    refused(
        &env,
        &format!(
            "mkdir $TMPDIR/evil && mv -T $TMPDIR/evil {}",
            env.root().display()
        ),
    )
    .await;
    refused(
        &env,
        &format!("mv {} {}.moved", env.root().display(), env.root().display()),
    )
    .await;

    assert_eq!(
        std::fs::read_to_string(out.path().join("victim.txt")).unwrap(),
        "untouched\n"
    );
    assert!(!out.path().join("new.txt").exists());
    assert!(
        std::fs::read_dir(env.path(".git/hooks"))
            .unwrap()
            .next()
            .is_none()
    );
    assert_eq!(
        std::fs::read_to_string(env.path(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("protected/p.txt")).unwrap(),
        "keep\n"
    );
    assert!(env.path(".git").is_dir() && env.path("sub").is_dir());

    // The workspace itself reads and writes.
    let v = env
        .ok("cat README.md && echo new > made.txt && mkdir -p d/e && mv made.txt d/e/")
        .await;
    assert_eq!(code(&v), 0, "{v}");
    assert_eq!(stdout(&v), "hello\n");
    assert_eq!(
        std::fs::read_to_string(env.path("d/e/made.txt")).unwrap(),
        "new\n"
    );
}

#[tokio::test]
async fn a_path_a_rule_hides_cannot_be_read() {
    let env = Env::new(
        SandboxConfig::workspace_write()
            .hidden_path("secret.env")
            .hidden_path("private"),
    );
    std::fs::write(env.path("secret.env"), "TOP-SECRET\n").unwrap();
    std::fs::create_dir(env.path("private")).unwrap();
    std::fs::write(env.path("private/key.pem"), "TOP-SECRET\n").unwrap();
    for command in [
        "cat secret.env",
        "cat private/key.pem",
        "ls private",
        "grep -r TOP-SECRET .",
        "cp secret.env $TMPDIR/x && cat $TMPDIR/x",
    ] {
        let v = env.ok(command).await;
        assert!(
            !stdout(&v).contains("TOP-SECRET"),
            "`{command}` read a hidden path: {v}"
        );
    }
    let v = env.ok("echo overwrite > secret.env").await;
    assert_ne!(code(&v), 0);
    assert_eq!(
        std::fs::read_to_string(env.path("secret.env")).unwrap(),
        "TOP-SECRET\n"
    );
}

#[tokio::test]
async fn read_only_refuses_every_write() {
    let out = outside();
    let env = Env::new(SandboxConfig::read_only());
    let o = out.path().canonicalize().unwrap();
    for command in [
        "echo x > README.md".to_string(),
        "echo x > new.txt".to_string(),
        "rm README.md".to_string(),
        "mkdir d".to_string(),
        "mv README.md R.md".to_string(),
        format!("echo x > {}/victim.txt", o.display()),
    ] {
        refused(&env, &command).await;
    }
    assert_eq!(
        std::fs::read_to_string(env.path("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!env.path("new.txt").exists() && !env.path("d").exists());
    let v = env.ok("cat README.md").await;
    assert_eq!(stdout(&v), "hello\n");
}
