//! Issue 31: sandboxed calls of one tool share their private folder (the mount points of
//! `TMPDIR` and the empty stand-ins of hidden paths), made once. No command can change it:
//! every mount outside the workspace is read-only to the command, and each call's `TMPDIR`
//! is a tmpfs of its own. What one call writes or tries to plant there, the next call does
//! not see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

#[tokio::test]
async fn what_a_call_leaves_in_its_private_folder_the_next_call_does_not_see() {
    let env = Env::new(
        SandboxConfig::workspace_write()
            .hidden_path("secrets")
            .hidden_path(".env"),
    );
    std::fs::create_dir_all(env.path("secrets")).unwrap();
    std::fs::write(env.path("secrets/key"), "TOPSECRET\n").unwrap();
    std::fs::write(env.path(".env"), "TOKEN=1\n").unwrap();
    let first = env
        .ok(
            r#"echo left > "$TMPDIR/left"; p=$(dirname "$(dirname "$TMPDIR")");
               chmod 755 "$p/hide/dir" "$p/w"; touch "$p/hide/dir/planted" "$p/w/planted";
               chmod 644 "$p/hide/file"; echo planted > "$p/hide/file";
               ls -A secrets; cat .env; echo "dir=$p""#,
        )
        .await;
    let out = stdout(&first);
    assert!(
        !out.contains("TOPSECRET") && !out.contains("TOKEN"),
        "{first}"
    );
    let private = PathBuf::from(
        out.lines()
            .find_map(|l| l.strip_prefix("dir="))
            .unwrap_or_else(|| panic!("{first}")),
    );
    let second = env
        .ok(r#"ls -A "$TMPDIR"; ls -A secrets; cat .env; echo "dir=$(dirname "$(dirname "$TMPDIR")")""#)
        .await;
    let out = stdout(&second);
    assert_eq!(
        out.trim(),
        format!("dir={}", private.display()),
        "the next call saw what the first left or planted: {second}"
    );
    // On the host, the shared folder is as it was made.
    let names = |p: PathBuf| -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(private.join("w")), vec!["tmp".to_string()]);
    assert_eq!(names(private.join("w/tmp")), Vec::<String>::new());
    for stand_in in ["hide/dir", "hide/file"] {
        let meta = std::fs::metadata(private.join(stand_in)).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0,
            "{stand_in} was opened up"
        );
    }
    assert_eq!(
        std::fs::metadata(private.join("hide/file")).unwrap().len(),
        0
    );
    assert_eq!(names(private.join("hide/dir")), Vec::<String>::new());
    // The folder goes with the tool.
    drop(env);
    assert!(!private.exists(), "{} outlived the tool", private.display());
}
