//! A run of file tools (`dsh run`, `dsh serve`) leaves the workspace byte for byte as it was,
//! apart from what the tools wrote: no `.dsh/`, no spill folder, no stray file. The shell's
//! spill folder is made only when a call's output is cut.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{run, transcript};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every entry under `root`: a folder as `None`, a file as its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(rel, None);
                pending.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "pub fn one() -> i32 {\n    1\n}\n").unwrap();
    std::fs::write(ws.join("README.md"), "# Sample\n").unwrap();
    ws
}

fn line(calls: &[(&str, &str, Value)]) -> String {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, tool, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": tool, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": "", "tool_calls": tool_calls}).to_string()
}

/// The workspace as it was, with the two changes the file tools below make.
fn expected_after(
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut expected = before.clone();
    expected.insert(
        "src/lib.rs".into(),
        Some(b"pub fn one() -> i32 {\n    2\n}\n".to_vec()),
    );
    expected.insert("notes.txt".into(), Some(b"written\n".to_vec()));
    expected
}

#[test]
fn a_run_of_file_tools_leaves_only_what_they_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let before = snapshot(&ws);
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            &line(&[
                ("r", "read_file", json!({"path": "src/lib.rs"})),
                ("l", "list_dir", json!({"path": "."})),
                ("g", "grep", json!({"pattern": "fn"})),
            ]),
            &line(&[
                (
                    "e",
                    "edit_file",
                    json!({"path": "src/lib.rs", "old_string": "    1", "new_string": "    2"}),
                ),
                (
                    "w",
                    "write_file",
                    json!({"path": "notes.txt", "content": "written\n"}),
                ),
            ]),
        ],
    );
    let r = run(&t, &ws, &dir.path().join("s.jsonl"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("\"is_error\""), "{}", r.stdout);
    assert_eq!(snapshot(&ws), expected_after(&before));
    assert!(!ws.join(".dsh").exists());
}

#[test]
fn a_shell_call_that_does_not_spill_makes_no_spill_folder_and_one_that_does_makes_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let before = snapshot(&ws);
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[&line(&[("s", "shell", json!({"command": "echo hello"}))])],
    );
    let r = run(&t, &ws, &dir.path().join("s.jsonl"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.tool_content("s").contains("hello"), "{}", r.stdout);
    assert_eq!(
        snapshot(&ws),
        before,
        "a short command's output is not spilled"
    );

    let t = transcript(
        dir.path(),
        "t2.jsonl",
        &[&line(&[(
            "big",
            "shell",
            json!({"command": "seq 1 40000"}),
        )])],
    );
    let r = run(&t, &ws, &dir.path().join("s2.jsonl"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let spilled = std::fs::read_to_string(ws.join(".dsh/spill/big.stdout.txt")).unwrap();
    assert_eq!(spilled.lines().count(), 40000);
}

#[test]
fn a_served_session_of_file_tools_leaves_only_what_they_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let before = snapshot(&ws);
    let log = dir.path().join("served.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve".as_ref(), "--workspace".as_ref(), ws.as_os_str()])
        .args(["--log".as_ref(), log.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, answers) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let Ok(message) = serde_json::from_str(&line) else {
                return;
            };
            if tx.send(message).is_err() {
                return;
            }
        }
    });
    let mut id = 0;
    let mut request = |method: &str, params: Value| -> Value {
        id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}").unwrap();
        if method == "initialize" {
            let ready = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            writeln!(stdin, "{ready}").unwrap();
        }
        stdin.flush().unwrap();
        loop {
            let answer = answers.recv_timeout(Duration::from_secs(60)).unwrap();
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{answer}");
                return answer["result"].clone();
            }
        }
    };
    request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}}),
    );
    let calls = [
        ("read_file", json!({"path": "src/lib.rs"})),
        (
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    1", "new_string": "    2"}),
        ),
        (
            "write_file",
            json!({"path": "notes.txt", "content": "written\n"}),
        ),
    ];
    for (name, arguments) in calls {
        let result = request("tools/call", json!({"name": name, "arguments": arguments}));
        assert_ne!(result["isError"], true, "{name}: {result}");
    }
    // The end of standard input ends the session.
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(snapshot(&ws), expected_after(&before));
    assert!(!ws.join(".dsh").exists());
}
