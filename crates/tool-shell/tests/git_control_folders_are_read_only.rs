//! Issue 28, break 3: nothing a command writes may make git, run later by the user outside
//! the sandbox, execute something. The repository's whole `.git` folder (and, where `.git` is
//! a `gitdir:` file, its target) is read-only to commands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

/// A snapshot of every file under `dir`: path and content.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path.clone());
                out.push((path.display().to_string(), Vec::new()));
            } else {
                out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn planted_git_configuration_does_not_land() {
    let env = Env::new(SandboxConfig::workspace_write());
    // A repository without `hooks/` (the command must not create it), with a submodule and
    // a worktree's control folder.
    std::fs::remove_dir_all(env.path(".git/hooks")).unwrap();
    std::fs::create_dir_all(env.path(".git/modules/sub")).unwrap();
    std::fs::write(env.path(".git/modules/sub/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(env.path(".git/worktrees/wt")).unwrap();
    std::fs::write(env.path(".git/worktrees/wt/gitdir"), "/elsewhere\n").unwrap();
    let before = snapshot(&env.path(".git"));
    for attack in [
        "cp -r .git .g2 && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > .g2/config && echo ../.g2 > .git/commondir",
        "mkdir -p .git/hooks && echo 'touch pwned' > .git/hooks/pre-commit",
        "mkdir -p .git/info && echo /tmp/objects > .git/objects/info/alternates",
        "printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> .git/modules/sub/config",
        "mkdir -p .git/modules/sub/hooks && echo x > .git/modules/sub/hooks/post-checkout",
        "echo /tmp/evil > .git/worktrees/wt/gitdir",
        "mv .git .git-old && mkdir .git",
        "echo x > .git/HEAD",
    ] {
        env.ok(attack).await;
        assert_eq!(
            snapshot(&env.path(".git")),
            before,
            "`{attack}` changed .git"
        );
    }
}

#[tokio::test]
async fn a_gitdir_file_and_its_target_are_read_only() {
    let env = Env::new(SandboxConfig::workspace_write());
    let control = tempfile::tempdir().unwrap();
    std::fs::write(control.path().join("config"), "[core]\n").unwrap();
    std::fs::remove_dir_all(env.path(".git")).unwrap();
    let gitdir = format!("gitdir: {}\n", control.path().display());
    std::fs::write(env.path(".git"), &gitdir).unwrap();
    env.ok("echo 'gitdir: ../planted' > .git").await;
    assert_eq!(std::fs::read_to_string(env.path(".git")).unwrap(), gitdir);
    env.ok(&format!(
        "printf '\\tfsmonitor = touch pwned\\n' >> {}/config",
        control.path().display()
    ))
    .await;
    assert_eq!(
        std::fs::read_to_string(control.path().join("config")).unwrap(),
        "[core]\n"
    );
}
