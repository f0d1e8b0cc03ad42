//! Issue 28, break 4: Landlock does not restrict `chmod`, `utimes` or `setxattr`, so the world
//! outside the workspace is read-only in the call's mount namespace. In `workspace-write` and
//! in `read-only`, a command changes no mode (setuid bit included), timestamp or user xattr
//! of a file outside; the workspace (in `workspace-write`) and `$TMPDIR` stay writable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A file outside the workspace, mode 0644, with a known mtime and no xattr.
fn victim() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().canonicalize().unwrap().join("victim");
    std::fs::write(&file, "untouched\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, file)
}

async fn metadata_stays(env: &Env) {
    let (_dir, file) = victim();
    let before = std::fs::metadata(&file).unwrap();
    let f = file.display();
    let attacks = [
        format!("chmod 4777 {f}"),
        format!("chmod 000 {f}"),
        format!("touch -d '2001-01-01 00:00' {f}"),
        format!("touch -a -d '2001-01-01 00:00' {f}"),
        format!("python3 -c 'import os; os.setxattr(\"{f}\", \"user.planted\", b\"x\")'"),
        format!("chown 65534 {f}"),
    ];
    for command in &attacks {
        let v = env.ok(command).await;
        assert_ne!(code(&v), 0, "`{command}` changed a file outside: {v}");
    }
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(
        after.permissions().mode() & 0o7777,
        0o644,
        "the mode of a file outside changed"
    );
    assert_eq!(after.mtime(), before.mtime(), "its mtime changed");
    assert_eq!(after.atime(), before.atime(), "its atime changed");
    assert_eq!(after.uid(), before.uid(), "its owner changed");
    let xattrs = std::process::Command::new("python3")
        .args(["-c", &format!("import os; print(os.listxattr(\"{f}\"))")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&xattrs.stdout).trim(),
        "[]",
        "an xattr was planted"
    );
}

#[tokio::test]
async fn metadata_outside_cannot_change_in_workspace_write() {
    let env = Env::new(SandboxConfig::workspace_write());
    metadata_stays(&env).await;
    // What the mode allows still works: the workspace and the temp folder, metadata too.
    let v = env
        .ok(
            "echo a > mine && chmod 600 mine && touch -d '2001-01-01' mine \
             && echo b > $TMPDIR/t && chmod 600 $TMPDIR/t && cat mine $TMPDIR/t",
        )
        .await;
    assert_eq!(code(&v), 0, "{v}");
    assert_eq!(stdout(&v), "a\nb\n");
    assert_eq!(
        std::fs::metadata(env.path("mine"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

#[tokio::test]
async fn metadata_outside_cannot_change_in_read_only() {
    let env = Env::new(SandboxConfig::read_only());
    metadata_stays(&env).await;
    let readme = env.path("README.md");
    let before = std::fs::metadata(&readme).unwrap();
    let v = env.ok("chmod 4777 README.md").await;
    assert_ne!(code(&v), 0, "{v}");
    assert_eq!(
        std::fs::metadata(&readme).unwrap().permissions().mode(),
        before.permissions().mode()
    );
    let v = env.ok("echo t > $TMPDIR/t && cat $TMPDIR/t").await;
    assert_eq!(stdout(&v), "t\n", "{v}");
}
