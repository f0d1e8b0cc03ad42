//! Issue 31: the walk at each call remembers each folder's listing and reads again only the
//! folders whose stamp (device, inode, mode, owner, mtime, ctime) changed, or whose listing
//! was read too soon after their last change. Whatever changes between two calls, the second
//! call still protects every `.git` and hides every hidden path that exists when it starts:
//! an entry made in a remembered folder (its mtime set back with `touch -d`), a folder
//! renamed, two folders that swap names. (The walk's own tests in `git_dirs.rs` add a folder
//! swapped for a symlink and a folder locked with `chmod 000`, which denies.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::{PathClass, SandboxConfig};
use std::path::Path;
use std::time::Duration;

/// Longer than the walk's racy window (100 ms): listings read after this are trusted.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(250)).await;
}

/// Sets `dir`'s mtime back to `mtime` (as `touch -d` does): only its ctime tells.
fn set_mtime_back(dir: &Path, mtime: std::time::SystemTime) {
    std::fs::File::open(dir)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    assert_eq!(std::fs::metadata(dir).unwrap().modified().unwrap(), mtime);
}

#[tokio::test]
async fn a_repository_made_in_a_remembered_folder_is_read_only_at_the_next_call() {
    let env = Env::new(SandboxConfig::workspace_write());
    std::fs::create_dir_all(env.path("src/lib")).unwrap();
    settle().await;
    // Two calls: every folder's listing is remembered, and trusted.
    env.ok("true").await;
    settle().await;
    env.ok("true").await;
    // Between calls, a repository appears in a remembered folder, and the folder's mtime is
    // set back to what it was.
    let before = std::fs::metadata(env.path("src/lib"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::create_dir_all(env.path("src/lib/.git/hooks")).unwrap();
    std::fs::write(env.path("src/lib/.git/config"), "[core]\n").unwrap();
    set_mtime_back(&env.path("src/lib"), before);
    settle().await;
    let v = env
        .ok("echo '[core] fsmonitor = x' >> src/lib/.git/config; echo pwn > src/lib/.git/hooks/pre-commit")
        .await;
    assert_ne!(code(&v), 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(env.path("src/lib/.git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!env.path("src/lib/.git/hooks/pre-commit").exists());
}

#[tokio::test]
async fn a_hidden_file_made_in_a_remembered_folder_is_hidden_at_the_next_call() {
    let env = Env::new(
        SandboxConfig::workspace_write().with_path_rules(|p: &Path| {
            if p.file_name().is_some_and(|n| n == ".env") {
                PathClass::Hidden
            } else {
                PathClass::Open
            }
        }),
    );
    std::fs::create_dir_all(env.path("app/config")).unwrap();
    settle().await;
    env.ok("true").await;
    settle().await;
    env.ok("true").await;
    let before = std::fs::metadata(env.path("app/config"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(env.path("app/config/.env"), "TOKEN=hunter2\n").unwrap();
    set_mtime_back(&env.path("app/config"), before);
    settle().await;
    let v = env.ok("cat app/config/.env").await;
    assert!(!stdout(&v).contains("hunter2"), "{v}");
}

#[tokio::test]
async fn a_repository_in_a_renamed_or_swapped_folder_is_read_only_at_the_next_call() {
    let env = Env::new(SandboxConfig::workspace_write());
    std::fs::create_dir_all(env.path("vendor/lib/.git")).unwrap();
    std::fs::write(env.path("vendor/lib/.git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(env.path("vendor/other")).unwrap();
    settle().await;
    env.ok("true").await;
    settle().await;
    env.ok("true").await;
    // Renamed: the repository is protected where it is now.
    std::fs::rename(env.path("vendor/lib"), env.path("vendor/moved")).unwrap();
    settle().await;
    let v = env.ok("echo x >> vendor/moved/.git/config").await;
    assert_ne!(code(&v), 0, "{v}");
    settle().await;
    env.ok("true").await;
    // Two folders swap names: each name's listing is the folder now under it.
    std::fs::rename(env.path("vendor/moved"), env.path("vendor/tmp")).unwrap();
    std::fs::rename(env.path("vendor/other"), env.path("vendor/moved")).unwrap();
    std::fs::rename(env.path("vendor/tmp"), env.path("vendor/other")).unwrap();
    settle().await;
    let v = env.ok("echo x >> vendor/other/.git/config").await;
    assert_ne!(code(&v), 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(env.path("vendor/other/.git/config")).unwrap(),
        "[core]\n"
    );
}
