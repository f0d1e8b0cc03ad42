//! read_file, list_dir, glob and grep through the whole pipeline: each one's success path and
//! each of its errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, err, ok};
use dsh_core::ErrorCode;
use dsh_tool_fs::Limits;
use serde_json::json;

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

async fn with_limits(limits: Limits) -> Env {
    Env::with(move |b| b.limits(limits), |_, _| {}).await
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_shows_numbered_lines() {
    let env = Env::new().await;
    env.put("src/a.txt", "one\ntwo\n");
    let text = ok(&env.call("read_file", json!({"path": "src/a.txt"})).await);
    assert_eq!(text, "     1\tone\n     2\ttwo\n");
    env.close().await;
}

#[tokio::test]
async fn read_file_offset_and_limit_say_what_was_left_out() {
    let env = Env::new().await;
    env.put("ten.txt", lines(10));
    let text = ok(&env
        .call(
            "read_file",
            json!({"path": "ten.txt", "offset": 3, "limit": 2}),
        )
        .await);
    assert!(
        text.starts_with("     3\tline 3\n     4\tline 4\n"),
        "{text}"
    );
    assert!(
        text.contains("showing lines 3-4 of 10; call read_file with offset=5"),
        "{text}"
    );
    let tail = ok(&env
        .call("read_file", json!({"path": "ten.txt", "offset": 9}))
        .await);
    assert!(tail.contains("    10\tline 10"), "{tail}");
    assert!(!tail.contains("truncated"), "{tail}");
    env.close().await;
}

#[tokio::test]
async fn read_file_called_directly_with_offset_or_limit_zero_reads_from_line_one() {
    // The schema keeps 0 out of the pipeline; a direct call to the public tool skips it.
    let env = Env::new().await;
    env.put("three.txt", lines(3));
    let tools = env.toolset.tools();
    let tool = tools.iter().find(|t| t.name() == "read_file").unwrap();
    for (args, last) in [
        (json!({"path": "three.txt", "offset": 0}), 3),
        (json!({"path": "three.txt", "offset": 0, "limit": 0}), 1),
    ] {
        let value = tool
            .execute(args.clone(), dsh_core::ToolContext::detached("direct"))
            .await
            .unwrap_or_else(|e| panic!("{args}: {}", e.message));
        assert_eq!(value["first_line"], 1, "{args}: {value}");
        assert_eq!(value["last_line"], last, "{args}: {value}");
        assert!(
            value["text"]
                .as_str()
                .unwrap()
                .starts_with("     1\tline 1\n"),
            "{args}: {value}"
        );
    }
    env.close().await;
}

#[tokio::test]
async fn read_file_caps_lines_bytes_and_long_lines_with_a_note() {
    let env = with_limits(Limits {
        read_lines: 4,
        max_line_chars: 10,
        max_read_output: 60,
        ..Limits::default()
    })
    .await;
    env.put("many.txt", lines(50));
    let text = ok(&env.call("read_file", json!({"path": "many.txt"})).await);
    assert!(text.contains("showing lines 1-4 of 50"), "{text}");
    env.put("long.txt", format!("{}\nshort\n", "x".repeat(40)));
    let text = ok(&env.call("read_file", json!({"path": "long.txt"})).await);
    assert!(
        text.contains("xxxxxxxxxx… [line cut at 10 characters]"),
        "{text}"
    );
    assert!(text.contains("1 overlong line(s) were cut short"), "{text}");
    env.put("wide.txt", "abcdefghi\n".repeat(20));
    let text = ok(&env
        .call("read_file", json!({"path": "wide.txt", "limit": 20}))
        .await);
    assert!(
        text.contains("truncated: showing lines 1-3 of 20"),
        "{text}"
    );
    env.close().await;
}

#[tokio::test]
async fn read_file_refuses_to_dump_binary_and_oversized_files() {
    let env = with_limits(Limits {
        max_file_bytes: 100,
        ..Limits::default()
    })
    .await;
    env.put("blob.bin", [0u8, 159, 146, 150, 1, 2, 3]);
    let text = ok(&env.call("read_file", json!({"path": "blob.bin"})).await);
    assert!(
        text.contains("`blob.bin` is a binary file (7 bytes"),
        "{text}"
    );
    env.put("latin1.txt", [b'c', b'a', b'f', 0xe9, b'\n']);
    let text = ok(&env.call("read_file", json!({"path": "latin1.txt"})).await);
    assert!(text.contains("not UTF-8"), "{text}");
    env.put("big.txt", "y".repeat(200));
    let text = ok(&env.call("read_file", json!({"path": "big.txt"})).await);
    assert!(
        text.contains("`big.txt` is 200 bytes, over the 100-byte limit"),
        "{text}"
    );
    assert!(!text.contains("yyy"), "{text}");
    env.put("empty.txt", "");
    let text = ok(&env.call("read_file", json!({"path": "empty.txt"})).await);
    assert_eq!(text, "`empty.txt` is empty.");
    env.close().await;
}

#[tokio::test]
async fn read_file_errors_are_clear() {
    let env = Env::new().await;
    env.put("d/f.txt", "a\nb\n");
    let missing = err(
        &env.call("read_file", json!({"path": "nope.txt"})).await,
        ErrorCode::ToolError,
    );
    assert_eq!(missing, "`nope.txt` does not exist");
    let dir = err(
        &env.call("read_file", json!({"path": "d"})).await,
        ErrorCode::ToolError,
    );
    assert!(dir.contains("`d` is a directory; use list_dir"), "{dir}");
    let past = err(
        &env.call("read_file", json!({"path": "d/f.txt", "offset": 9}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(past.contains("offset 9 is past the end of `d/f.txt`, which has 2 lines"));
    let bad = err(
        &env.call("read_file", json!({"path": "d/f.txt", "offset": 0}))
            .await,
        ErrorCode::ToolInputError,
    );
    assert!(bad.contains("offset"), "{bad}");
    env.close().await;
}

#[tokio::test]
async fn read_file_does_not_block_on_a_fifo() {
    let env = Env::new().await;
    let status = std::process::Command::new("mkfifo")
        .arg(env.root.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        env.call("read_file", json!({"path": "pipe"})),
    )
    .await
    .expect("read_file hung on a FIFO");
    let msg = err(&result, ErrorCode::ToolError);
    assert!(msg.contains("not a regular file"), "{msg}");
    env.close().await;
}

// ---------------------------------------------------------------- list_dir

#[tokio::test]
async fn list_dir_lists_sorted_entries_with_kinds() {
    let env = Env::new().await;
    env.put("b.txt", "12345");
    env.put("a/x.txt", "");
    env.put(".hidden", "");
    env.symlink("b.txt", "c-link");
    let text = ok(&env.call("list_dir", json!({"path": "."})).await);
    assert_eq!(
        text,
        "./ (4 entries)\n.hidden  (0 bytes)\na/\nb.txt  (5 bytes)\nc-link@"
    );
    let text = ok(&env.call("list_dir", json!({"path": "a"})).await);
    assert_eq!(text, "a/ (1 entry)\nx.txt  (0 bytes)");
    env.put("empty/.keep", "");
    std::fs::remove_file(env.root.join("empty/.keep")).unwrap();
    let text = ok(&env.call("list_dir", json!({"path": "empty"})).await);
    assert_eq!(text, "`empty` is empty.");
    env.close().await;
}

#[tokio::test]
async fn list_dir_caps_long_listings() {
    let env = with_limits(Limits {
        max_entries: 2,
        ..Limits::default()
    })
    .await;
    for name in ["c", "a", "d", "b"] {
        env.put(name, "");
    }
    let text = ok(&env.call("list_dir", json!({"path": "."})).await);
    assert!(text.contains("a  (0 bytes)\nb  (0 bytes)\n"), "{text}");
    assert!(text.contains("showing the first 2 of 4 entries"), "{text}");
    env.close().await;
}

#[tokio::test]
async fn list_dir_errors_are_clear() {
    let env = Env::new().await;
    env.put("f.txt", "x");
    let msg = err(
        &env.call("list_dir", json!({"path": "nope"})).await,
        ErrorCode::ToolError,
    );
    assert_eq!(msg, "`nope` does not exist");
    let msg = err(
        &env.call("list_dir", json!({"path": "f.txt"})).await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("`f.txt` is a file, not a directory"), "{msg}");
    env.close().await;
}

// ---------------------------------------------------------------- glob

#[tokio::test]
async fn glob_matches_sorted_and_honours_gitignore_outside_git() {
    let env = Env::new().await;
    env.put(".gitignore", "target/\n*.log\n");
    env.put("src/main.rs", "");
    env.put("src/util/mod.rs", "");
    env.put("build.rs", "");
    env.put("target/debug/gen.rs", "");
    env.put("src/trace.log", "");
    env.put(".github/ci.rs", "");
    let text = ok(&env.call("glob", json!({"pattern": "**/*.rs"})).await);
    assert_eq!(
        text,
        "3 files match `**/*.rs`\nbuild.rs\nsrc/main.rs\nsrc/util/mod.rs"
    );
    let text = ok(&env.call("glob", json!({"pattern": "*.rs"})).await);
    assert_eq!(
        text, "1 file match `*.rs`\nbuild.rs",
        "`*` stays in one folder"
    );
    let text = ok(&env
        .call("glob", json!({"pattern": "*.rs", "path": "src"}))
        .await);
    assert_eq!(
        text, "1 file match `*.rs`\nsrc/main.rs",
        "paths stay root-relative"
    );
    let text = ok(&env.call("glob", json!({"pattern": ".github/*.rs"})).await);
    assert_eq!(text, "1 file match `.github/*.rs`\n.github/ci.rs");
    env.close().await;
}

#[tokio::test]
async fn glob_reports_no_match_and_caps() {
    let env = with_limits(Limits {
        max_paths: 2,
        ..Limits::default()
    })
    .await;
    for name in ["d.md", "b.md", "a.md", "c.md"] {
        env.put(name, "");
    }
    let text = ok(&env.call("glob", json!({"pattern": "*.md"})).await);
    assert!(
        text.starts_with("4 files match `*.md`\na.md\nb.md\n"),
        "{text}"
    );
    assert!(text.contains("showing the first 2 of 4 paths"), "{text}");
    let text = ok(&env.call("glob", json!({"pattern": "*.zig"})).await);
    assert_eq!(text, "No files match `*.zig` under `.`.");
    env.close().await;
}

#[tokio::test]
async fn glob_errors_are_clear() {
    let env = Env::new().await;
    env.put("f.txt", "");
    let msg = err(
        &env.call("glob", json!({"pattern": "src/[a"})).await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("invalid glob pattern `src/[a`"), "{msg}");
    let msg = err(
        &env.call("glob", json!({"pattern": "*", "path": "f.txt"}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("`f.txt` is not a directory"), "{msg}");
    let msg = err(
        &env.call("glob", json!({"pattern": "../*"})).await,
        ErrorCode::Denied,
    );
    assert!(
        msg.contains("`..` climbs above the workspace root"),
        "{msg}"
    );
    env.close().await;
}

// ---------------------------------------------------------------- grep

async fn grep_env() -> Env {
    let env = Env::new().await;
    env.put(".gitignore", "ignored/\n");
    env.put("src/b.rs", "fn beta() {}\nlet x = 1;\nfn Beta2() {}\n");
    env.put("src/a.rs", "// alpha\nfn alpha() {}\n");
    env.put("notes.md", "fn in markdown\n");
    env.put("ignored/c.rs", "fn hidden_by_gitignore() {}\n");
    env.put("bin.dat", b"fn \x00 binary");
    env
}

#[tokio::test]
async fn grep_lists_files_sorted_by_default() {
    let env = grep_env().await;
    let text = ok(&env.call("grep", json!({"pattern": "^fn "})).await);
    // `bin.dat` matches too, before its NUL byte: it is named, not passed over in silence.
    assert_eq!(
        text,
        "3 files match\nnotes.md\nsrc/a.rs\nsrc/b.rs\n[1 binary file(s) (holding a NUL byte) also match; their lines are not shown: `bin.dat`]"
    );
    let text = ok(&env
        .call("grep", json!({"pattern": "^fn ", "glob": "*.rs"}))
        .await);
    assert_eq!(text, "2 files match\nsrc/a.rs\nsrc/b.rs");
    let text = ok(&env
        .call("grep", json!({"pattern": "fn", "path": "src/a.rs"}))
        .await);
    assert_eq!(
        text, "1 file match\nsrc/a.rs",
        "a single file can be searched"
    );
    env.close().await;
}

#[tokio::test]
async fn grep_content_mode_shows_lines_and_context() {
    let env = grep_env().await;
    let text = ok(&env
        .call(
            "grep",
            json!({"pattern": "beta", "output_mode": "content", "case_insensitive": true}),
        )
        .await);
    assert_eq!(text, "src/b.rs:1:fn beta() {}\nsrc/b.rs:3:fn Beta2() {}");
    let text = ok(&env
        .call(
            "grep",
            json!({"pattern": "alpha\\(", "output_mode": "content", "context": 1}),
        )
        .await);
    assert_eq!(text, "src/a.rs-1-// alpha\nsrc/a.rs:2:fn alpha() {}");
    let text = ok(&env
        .call("grep", json!({"pattern": "fn", "output_mode": "count"}))
        .await);
    assert_eq!(
        text,
        "4 matching lines in 3 files\nnotes.md:1\nsrc/a.rs:1\nsrc/b.rs:2\n[1 binary file(s) (holding a NUL byte) also match; their lines are not shown: `bin.dat`]"
    );
    env.close().await;
}

#[tokio::test]
async fn grep_content_cap_is_stable_and_noted() {
    let env = Env::with(
        |b| {
            b.limits(Limits {
                max_grep_lines: 5,
                ..Limits::default()
            })
        },
        |_, _| {},
    )
    .await;
    for i in 0..40 {
        env.put(&format!("f{i:02}.txt"), "hit\nhit\n");
    }
    let mut outputs = Vec::new();
    for _ in 0..3 {
        outputs.push(ok(&env
            .call("grep", json!({"pattern": "hit", "output_mode": "content"}))
            .await));
    }
    assert!(outputs.iter().all(|o| o == &outputs[0]), "{outputs:?}");
    let text = &outputs[0];
    assert!(
        text.starts_with("f00.txt:1:hit\nf00.txt:2:hit\n--\nf01.txt:1:hit\nf01.txt:2:hit\n"),
        "{text}"
    );
    assert!(
        text.contains("[truncated: 80 matching lines in 40 files in all"),
        "{text}"
    );
    env.close().await;
}

#[tokio::test]
async fn grep_no_match_and_errors() {
    let env = grep_env().await;
    let text = ok(&env.call("grep", json!({"pattern": "zebra"})).await);
    assert_eq!(text, "No matches for `zebra` in `.`.");
    let msg = err(
        &env.call("grep", json!({"pattern": "fn ("})).await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("invalid regex `fn (`"), "{msg}");
    let msg = err(
        &env.call("grep", json!({"pattern": "x", "path": "nope"}))
            .await,
        ErrorCode::ToolError,
    );
    assert_eq!(msg, "`nope` does not exist");
    let msg = err(
        &env.call("grep", json!({"pattern": "x", "output_mode": "lines"}))
            .await,
        ErrorCode::ToolInputError,
    );
    assert!(msg.contains("output_mode"), "{msg}");
    let msg = err(
        &env.call("grep", json!({"pattern": "x", "glob": "{a"}))
            .await,
        ErrorCode::ToolError,
    );
    assert!(msg.contains("invalid glob `{a`"), "{msg}");
    env.close().await;
}

// ---------------------------------------------------------------- cancellation

#[tokio::test]
async fn searches_stop_when_the_call_is_cancelled() {
    let env = grep_env().await;
    let (handle, signal) = dsh_core::CancelHandle::new();
    handle.cancel(dsh_core::CancelReason::Step);
    let ctx = dsh_core::ToolContext {
        signal,
        ..dsh_core::ToolContext::detached("cancelled")
    };
    let tools = env.toolset.tools();
    for (name, args) in [
        ("grep", json!({"pattern": "fn"})),
        ("glob", json!({"pattern": "**/*"})),
    ] {
        let tool = tools.iter().find(|t| t.name() == name).unwrap();
        let failure = tool.execute(args, ctx.clone()).await.unwrap_err();
        assert_eq!(failure.message, format!("{name} was cancelled"));
    }
    env.close().await;
}
