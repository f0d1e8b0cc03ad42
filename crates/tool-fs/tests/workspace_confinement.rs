//! Workspace confinement: a corpus of hostile paths and symlink layouts, tried with every
//! tool, through the sandbox and against the tools alone; the capability layer on its own
//! (a symlink swapped in after the check); read-only mode; and paths that are fine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, SECRET, err, ok};
use dsh_core::{ErrorCode, ToolContext};
use dsh_tool_fs::{Existing, FsToolset, Workspace};
use serde_json::{Value, json};
use std::path::Path;

/// Symlinks and folders the hostile paths lean on.
fn lay_out(env: &Env) {
    let out = env.outside.display().to_string();
    env.put("real/inside.txt", "inside\n");
    env.symlink(&env.outside, "link_abs_out");
    env.symlink("../outside", "link_rel_out");
    env.symlink(format!("{out}/secret.txt"), "link_file_out");
    env.symlink("../../../outside", "nested/deep/link_up");
    env.symlink("chain_b", "chain_a");
    env.symlink("link_rel_out", "chain_b");
    env.symlink("loop_b", "loop_a");
    env.symlink("loop_a", "loop_b");
    env.symlink("self_loop", "self_loop");
    env.symlink("/proc/self/root", "proc_link");
    env.symlink("/etc", "etc_link");
    env.symlink("/nonexistent-dsh-test/x", "dangling_out");
    env.symlink("../outside/planted.txt", "dangling_rel_out");
    env.symlink("/", "root_link");
    env.symlink("real/../../outside", "dotdot_link");
    // Inside links: fine.
    env.symlink("real", "ok_link");
    env.symlink(env.root.join("real/inside.txt"), "abs_inside_link");
    // A sibling of the root whose name starts with the root's name.
    let evil = env.root.with_file_name("ws-evil");
    std::fs::create_dir_all(&evil).unwrap();
    std::fs::write(evil.join("secret.txt"), SECRET).unwrap();
}

/// Every hostile path, with a word its denial must contain.
fn corpus(env: &Env) -> Vec<(String, &'static str)> {
    let root = env.root.display().to_string();
    let out = env.outside.display().to_string();
    let v: Vec<(String, &'static str)> = vec![
        ("../outside/secret.txt".into(), "climbs above"),
        ("../../etc/passwd".into(), "climbs above"),
        ("..".into(), "climbs above"),
        ("real/../../outside/secret.txt".into(), "climbs above"),
        ("./../outside/secret.txt".into(), "climbs above"),
        ("real/./../..".into(), "climbs above"),
        ("~/../../etc/passwd".into(), "climbs above"),
        ("/etc/passwd".into(), "outside the workspace"),
        (format!("{out}/secret.txt"), "outside the workspace"),
        ("/proc/self/root/etc/passwd".into(), "outside the workspace"),
        ("/proc/self/cwd".into(), "outside the workspace"),
        ("/proc/self/fd/0".into(), "outside the workspace"),
        ("/dev/fd/0".into(), "outside the workspace"),
        ("//etc/passwd".into(), "outside the workspace"),
        (
            format!("{root}/../outside/secret.txt"),
            "outside the workspace",
        ),
        (format!("{root}-evil/secret.txt"), "outside the workspace"),
        ("link_abs_out/secret.txt".into(), "points outside"),
        ("link_abs_out".into(), "points outside"),
        ("link_rel_out/secret.txt".into(), "points outside"),
        ("link_file_out".into(), "points outside"),
        ("nested/deep/link_up/secret.txt".into(), "points outside"),
        ("chain_a/secret.txt".into(), "points outside"),
        ("real/../link_rel_out/secret.txt".into(), "points outside"),
        ("proc_link/etc/passwd".into(), "points outside"),
        ("etc_link/passwd".into(), "points outside"),
        ("dangling_out".into(), "points outside"),
        ("dangling_rel_out".into(), "points outside"),
        ("root_link/etc/passwd".into(), "points outside"),
        ("dotdot_link/secret.txt".into(), "points outside"),
        ("loop_a".into(), "symlink loop"),
        ("self_loop/x".into(), "symlink loop"),
        ("real\0/inside.txt".into(), "NUL byte"),
        ("inside.txt\0../../etc/passwd".into(), "NUL byte"),
        ("a".repeat(256), "component is 256 bytes"),
        ("a/".repeat(2100), "path is 4200 bytes"),
        (String::new(), "path is empty"),
    ];
    v
}

/// The calls that try `path` with every tool (a patch cannot name the empty path).
fn attempts(path: &str) -> Vec<(&'static str, Value)> {
    let mut calls = vec![
        ("read_file", json!({"path": path})),
        ("list_dir", json!({"path": path})),
        ("grep", json!({"pattern": "SECRET", "path": path})),
        ("glob", json!({"pattern": "**/*", "path": path})),
        ("write_file", json!({"path": path, "content": "PWNED"})),
        (
            "edit_file",
            json!({"path": path, "old_string": "TOP", "new_string": "PWNED"}),
        ),
        (
            "apply_patch",
            json!({"input": format!("*** Begin Patch\n*** Add File: {path}\n+PWNED\n*** End Patch")}),
        ),
        (
            "apply_patch",
            json!({"input": format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch")}),
        ),
    ];
    if path.is_empty() {
        // A patch cannot name the empty path; for grep and glob, whose `path` is optional, an
        // empty one means "not given" (the workspace root: strict_mode_null_optionals.rs).
        calls.retain(|(tool, _)| !matches!(*tool, "apply_patch" | "grep" | "glob"));
    }
    calls
}

/// Nothing outside the workspace changed and nothing appeared.
fn assert_outside_untouched(env: &Env) {
    let names: Vec<String> = std::fs::read_dir(&env.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["secret.txt".to_string()]);
    assert_eq!(
        std::fs::read_to_string(env.outside.join("secret.txt")).unwrap(),
        format!("{SECRET}\n")
    );
    assert!(!Path::new("/nonexistent-dsh-test").exists());
}

#[tokio::test]
async fn hostile_paths_are_denied_by_the_sandbox_with_a_reason() {
    let env = Env::new().await;
    lay_out(&env);
    let corpus = corpus(&env);
    assert!(corpus.len() >= 30, "the corpus has {} paths", corpus.len());
    for (path, reason) in &corpus {
        for (tool, args) in attempts(path) {
            let result = env.call(tool, args).await;
            let msg = err(&result, ErrorCode::Denied);
            assert!(
                msg.contains("is denied") && msg.contains(reason),
                "{tool} {path:?}: {msg}\nexpected a denial saying `{reason}`"
            );
            assert!(!msg.contains(SECRET), "{tool} {path:?} leaked: {msg}");
        }
    }
    assert_outside_untouched(&env);
    env.close().await;
}

#[tokio::test]
async fn hostile_paths_are_denied_by_the_tools_alone() {
    let env = Env::new().await;
    lay_out(&env);
    // The tools resolve and refuse on their own, without the sandbox in front of them.
    let tools = env.toolset.tools();
    for (path, reason) in corpus(&env) {
        for (name, args) in attempts(&path) {
            let tool = tools.iter().find(|t| t.name() == name).unwrap();
            let failure = tool
                .execute(args, ToolContext::detached("direct"))
                .await
                .expect_err(&format!("{name} {path:?} succeeded"));
            assert_eq!(
                failure.code,
                ErrorCode::Denied,
                "{name} {path:?}: {}",
                failure.message
            );
            assert!(
                failure.message.contains(reason),
                "{name} {path:?}: {}",
                failure.message
            );
        }
    }
    assert_outside_untouched(&env);
    env.close().await;
}

#[tokio::test]
async fn walkers_do_not_follow_symlinks_out() {
    let env = Env::new().await;
    lay_out(&env);
    let text = ok(&env.call("grep", json!({"pattern": "TOP-SECRET"})).await);
    assert_eq!(text, "No matches for `TOP-SECRET` in `.`.");
    let text = ok(&env.call("glob", json!({"pattern": "**/secret*"})).await);
    assert!(text.starts_with("No files match"), "{text}");
    let text = ok(&env.call("list_dir", json!({"path": "."})).await);
    assert!(
        text.contains("link_abs_out@"),
        "listed as a link, not entered: {text}"
    );
    env.close().await;
}

#[tokio::test]
async fn the_capability_layer_refuses_escapes_the_resolver_never_saw() {
    let env = Env::new().await;
    lay_out(&env);
    let ws = Workspace::open(&env.root).unwrap();
    // Straight to the directory handle, skipping the resolver.
    for rel in [
        "link_abs_out/secret.txt",
        "link_rel_out/secret.txt",
        "link_file_out",
        "chain_a/secret.txt",
        "root_link/etc/passwd",
    ] {
        let got = ws.load(Path::new(rel), 1 << 20);
        assert!(
            !matches!(got, Ok(Existing::File(_))),
            "{rel} was read: {got:?}"
        );
    }
    // Writing into a folder reached through a symlink out is refused. (A write to a path
    // whose last component is a symlink replaces the link itself: rename never follows.)
    for rel in [
        "link_abs_out/secret.txt",
        "link_rel_out/planted.txt",
        "chain_a/planted.txt",
        "nested/deep/link_up/planted.txt",
    ] {
        assert!(ws.write_atomic(Path::new(rel), b"PWNED").is_err(), "{rel}");
    }
    assert!(
        ws.write_atomic(Path::new("link_file_out"), b"PWNED")
            .is_ok()
    );
    assert_outside_untouched(&env);
    // A folder swapped for a symlink between the check and the use.
    env.put("swap/f.txt", "mine\n");
    let checked = ws.resolve("swap/f.txt").unwrap();
    std::fs::rename(env.root.join("swap"), env.root.join("swap.orig")).unwrap();
    std::os::unix::fs::symlink(&env.outside, env.root.join("swap")).unwrap();
    std::fs::write(env.outside.join("f.txt"), SECRET).unwrap();
    let got = ws.load(&checked, 1 << 20);
    assert!(
        !matches!(got, Ok(Existing::File(_))),
        "read through a swapped symlink: {got:?}"
    );
    assert!(ws.write_atomic(&checked, b"PWNED").is_err());
    assert_eq!(
        std::fs::read_to_string(env.outside.join("f.txt")).unwrap(),
        SECRET
    );
    env.close().await;
}

#[tokio::test]
async fn paths_inside_are_accepted_in_every_form() {
    let env = Env::new().await;
    lay_out(&env);
    let abs = env.root.join("real/inside.txt").display().to_string();
    for path in [
        "real/inside.txt",
        "./real/inside.txt",
        "real/../real/inside.txt",
        "ok_link/inside.txt",
        "abs_inside_link",
        abs.as_str(),
    ] {
        let text = ok(&env.call("read_file", json!({"path": path})).await);
        assert_eq!(text, "     1\tinside\n", "{path}");
    }
    // Names that only look odd are ordinary names inside the workspace.
    for name in ["..foo", "foo..", "%2e%2e", "..\\x", "~"] {
        let text = ok(&env
            .call("write_file", json!({"path": name, "content": "ok"}))
            .await);
        assert!(text.starts_with("Created"), "{name}: {text}");
    }
    env.close().await;
}

async fn read_only_env() -> Env {
    Env::with(|b| b.read_only(true), |_, _| {}).await
}

#[tokio::test]
async fn read_only_mode_refuses_every_mutation() {
    let env = read_only_env().await;
    env.put("f.txt", "x\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    ok(&env.call("grep", json!({"pattern": "x"})).await);
    let mutations = [
        ("write_file", json!({"path": "new.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "f.txt", "old_string": "x", "new_string": "y"}),
        ),
        (
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: n.txt\n+x\n*** End Patch"}),
        ),
    ];
    for (tool, args) in mutations.clone() {
        let msg = err(&env.call(tool, args).await, ErrorCode::Denied);
        assert_eq!(
            msg,
            format!("the workspace is read-only: {tool} is not allowed")
        );
    }
    // And the tools refuse on their own.
    let tools = env.toolset.tools();
    for (name, args) in mutations {
        let tool = tools.iter().find(|t| t.name() == name).unwrap();
        let failure = tool
            .execute(args, ToolContext::detached("direct"))
            .await
            .unwrap_err();
        assert_eq!(failure.code, ErrorCode::Denied, "{name}");
        assert!(failure.message.contains("read-only"), "{}", failure.message);
    }
    assert_eq!(env.get("f.txt"), "x\n");
    assert!(!env.exists("new.txt") && !env.exists("n.txt"));
    env.close().await;
}

#[tokio::test]
async fn a_missing_root_is_a_clear_error() {
    let err = FsToolset::builder("/nonexistent-dsh-root/ws")
        .build()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the workspace root `/nonexistent-dsh-root/ws` cannot be opened"),
        "{err}"
    );
}
