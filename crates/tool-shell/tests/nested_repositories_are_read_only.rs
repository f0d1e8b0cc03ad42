//! Issue 28, break 3 (the rest): every git control entry that exists when a call starts is
//! read-only to the command, not only the workspace's `.git`: a nested repository
//! (`vendor/lib/.git`), a submodule checkout's `.git` file and its target, a worktree's. A
//! repository the command creates is allowed, and the result names it (the user should not
//! run git there unchecked).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

#[tokio::test]
async fn nested_repositories_are_read_only_and_new_ones_are_named() {
    let env = Env::new(SandboxConfig::workspace_write());
    std::fs::create_dir_all(env.path("vendor/lib/.git/hooks")).unwrap();
    std::fs::write(env.path("vendor/lib/.git/config"), "[core]\n").unwrap();
    // A submodule checkout: `.git` is a file naming its control folder.
    std::fs::create_dir_all(env.path("deps/sub")).unwrap();
    std::fs::create_dir_all(env.path("other/modules/sub")).unwrap();
    std::fs::write(env.path("other/modules/sub/config"), "[core]\n").unwrap();
    std::fs::write(
        env.path("deps/sub/.git"),
        "gitdir: ../../other/modules/sub\n",
    )
    .unwrap();

    for attack in [
        "echo '[core] fsmonitor = touch /tmp/pwned' >> vendor/lib/.git/config",
        "echo 'rm -rf ~' > vendor/lib/.git/hooks/pre-commit",
        "mv vendor/lib/.git vendor/lib/.g2",
        "echo '[core] fsmonitor = x' >> other/modules/sub/config",
        "mkdir other/modules/sub/hooks",
        "echo 'gitdir: /tmp/evil' > deps/sub/.git",
        "rm deps/sub/.git",
    ] {
        let v = env.ok(attack).await;
        assert_ne!(code(&v), 0, "`{attack}` was allowed: {v}");
    }
    assert_eq!(
        std::fs::read_to_string(env.path("vendor/lib/.git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!env.path("vendor/lib/.git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(env.path("other/modules/sub/config")).unwrap(),
        "[core]\n"
    );
    assert!(!env.path("other/modules/sub/hooks").exists());
    assert_eq!(
        std::fs::read_to_string(env.path("deps/sub/.git")).unwrap(),
        "gitdir: ../../other/modules/sub\n"
    );

    // The rest of the nested repository's folder stays writable.
    let v = env
        .ok("echo x > vendor/lib/file && cat vendor/lib/file")
        .await;
    assert_eq!(stdout(&v), "x\n", "{v}");

    // A repository the command makes: allowed, and named.
    let v = env.ok("mkdir -p fresh/.git && echo made").await;
    assert_eq!(code(&v), 0, "{v}");
    assert_eq!(v["meta"]["newGitEntries"][0], "fresh/.git", "{v}");
    assert!(
        env.tool_text(&v).contains("fresh/.git"),
        "{}",
        env.tool_text(&v)
    );
    // At the next call it exists when the call starts: read-only from then on.
    let v = env.ok("echo '[core]' > fresh/.git/config").await;
    assert_ne!(code(&v), 0, "{v}");
}
