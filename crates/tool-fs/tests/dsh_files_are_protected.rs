//! Files the harness protects (the session log, its policy, ...) are written by no tool,
//! whatever the rules say, through any alias: a symlink, a hard link, a patch's move.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::ErrorCode;
use serde_json::json;

const LOG: &str = "{\"seq\":1}\n";

async fn env() -> Env {
    let allow_all = dsh_guards::PermissionRules::from_toml(
        r#"allow = ["write_file", "edit_file", "apply_patch"]"#,
    )
    .unwrap();
    let env = Env::with_harness(
        |b| b,
        move |hooks, toolset| {
            hooks.pre_execute(allow_all.with_root(toolset.root()));
        },
        |harness, root| {
            harness
                .protect(root.join("session.jsonl"))
                .protect(root.join("out"))
        },
    )
    .await;
    env.put("session.jsonl", LOG);
    env.put("out/report.txt", "report\n");
    env.put("free.txt", "free\n");
    std::fs::hard_link(env.root.join("session.jsonl"), env.root.join("hard")).unwrap();
    env.symlink("session.jsonl", "soft");
    env.symlink("out", "outlink");
    for path in [
        "session.jsonl",
        "hard",
        "soft",
        "out/report.txt",
        "free.txt",
    ] {
        ok(&env.call("read_file", json!({"path": path})).await);
    }
    env
}

#[track_caller]
fn protected(text: &str) {
    assert!(text.contains("one of dsh's own files"), "{text}");
}

#[tokio::test]
async fn no_write_tool_touches_a_protected_file_by_any_name() {
    let env = env().await;
    for path in ["session.jsonl", "./session.jsonl", "hard", "soft"] {
        protected(&err(
            &env.call("write_file", json!({"path": path, "content": "{}\n"}))
                .await,
            ErrorCode::Denied,
        ));
        protected(&err(
            &env.call(
                "edit_file",
                json!({"path": path, "old_string": "1", "new_string": "2"}),
            )
            .await,
            ErrorCode::Denied,
        ));
    }
    for patch in [
        "*** Add File: session.jsonl\n+{}",
        "*** Delete File: soft",
        "*** Update File: hard\n@@\n-{\"seq\":1}\n+{}",
        "*** Update File: free.txt\n*** Move to: session.jsonl\n@@\n-free\n+forged",
        "*** Update File: session.jsonl\n*** Move to: elsewhere.jsonl\n@@\n-{\"seq\":1}\n+{\"seq\":1}",
        "*** Add File: out/new.txt\n+x",
        "*** Add File: outlink/new.txt\n+x",
        "*** Delete File: out/report.txt",
    ] {
        let input = format!("*** Begin Patch\n{patch}\n*** End Patch");
        protected(&err(
            &env.call("apply_patch", json!({"input": input})).await,
            ErrorCode::Denied,
        ));
    }
    assert_eq!(env.get("session.jsonl"), LOG);
    assert_eq!(env.get("out/report.txt"), "report\n");
    assert_eq!(env.get("free.txt"), "free\n");
    assert!(!env.exists("out/new.txt") && !env.exists("elsewhere.jsonl"));
    // Reading is not refused, and other files are written as usual.
    ok(&env
        .call("read_file", json!({"path": "session.jsonl"}))
        .await);
    ok(&env
        .call("write_file", json!({"path": "free.txt", "content": "ok\n"}))
        .await);
    env.close().await;
}

#[tokio::test]
async fn the_pipeline_hands_the_protection_to_every_body() {
    // A body asks the policy it is handed, so a sub-call (which gets the same context from
    // the pipeline) is covered; here, the policy as a body sees it.
    let env = env().await;
    let policy = env.harness.pipeline().path_policy().clone();
    assert!(
        dsh_core::PathPolicy::forbids(
            &policy,
            "write_file",
            dsh_core::Access::Write,
            &env.root.join("hard")
        )
        .is_some()
    );
    assert!(
        dsh_core::PathPolicy::forbids(
            &policy,
            "write_file",
            dsh_core::Access::Write,
            &env.root.join("free.txt")
        )
        .is_none()
    );
    env.close().await;
}
