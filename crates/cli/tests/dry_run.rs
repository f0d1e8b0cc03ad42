//! `dsh run --dry-run`: "what would these rules have denied?" Each call is judged (command
//! hooks, rules, confinement, guards, read-before-edit simulated from the transcript's own
//! earlier reads) and printed as one JSON line; no tool body runs, nothing in the workspace
//! changes and no log is written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Run, dsh, message, sample_workspace, session_file, transcript};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file and directory under `dir`, with the bytes of each file.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// `dsh run TRANSCRIPT --workspace WS --log LOG --dry-run EXTRA..`.
fn dry_run(transcript: &Path, ws: &Path, log: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        transcript.into(),
        "--workspace".into(),
        ws.into(),
        "--log".into(),
        log.into(),
        "--dry-run".into(),
    ];
    args.extend(extra.iter().map(Into::into));
    dsh(&args)
}

/// callId → (decision, reason) of each printed line, checking each line's shape.
fn decisions(ran: &Run) -> BTreeMap<String, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    for line in ran.messages() {
        let decision = line["decision"].as_str().unwrap().to_string();
        assert!(
            ["allow", "ask", "deny"].contains(&decision.as_str()),
            "{line}"
        );
        assert!(line["tool"].is_string(), "{line}");
        let reason = line["reason"].as_str().map(str::to_string);
        assert_eq!(reason.is_none(), decision == "allow", "{line}");
        out.insert(
            line["callId"].as_str().unwrap().to_string(),
            (decision, reason),
        );
    }
    out
}

fn decision_of(all: &BTreeMap<String, (String, Option<String>)>, id: &str) -> String {
    all.get(id)
        .unwrap_or_else(|| panic!("no line for {id}: {all:?}"))
        .0
        .clone()
}

fn reason_of(all: &BTreeMap<String, (String, Option<String>)>, id: &str) -> String {
    all[id].1.clone().unwrap_or_default()
}

#[test]
fn a_claude_code_session_file_under_a_policy_lists_its_denials_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let session = session_file(dir.path(), &ws);
    // Claude Code's own settings: LS is denied, reads and edits under src/ allowed, but
    // MultiEdit asked about (ask beats allow); a hook refuses every Grep.
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({
            "permissions": {
                "allow": ["Read", "Glob", "Grep", "Edit(./src/**)"],
                "ask": ["MultiEdit"],
                "deny": ["LS"]
            },
            "hooks": {"PreToolUse": [{"matcher": "Grep", "hooks": [{
                "type": "command",
                "command": "echo 'no searching today' >&2; exit 2"
            }]}]}
        })
        .to_string(),
    )
    .unwrap();
    let log = dir.path().join("log.jsonl");
    let before = snapshot(&ws);
    let ran = dry_run(
        &session,
        &ws,
        &log,
        &[
            "--profile",
            "claude-code",
            "--claude-settings",
            settings.to_str().unwrap(),
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let all = decisions(&ran);
    assert_eq!(all.len(), 6, "{}", ran.stdout);
    assert_eq!(decision_of(&all, "toolu_01R"), "allow");
    assert_eq!(decision_of(&all, "toolu_01G"), "deny");
    assert!(
        reason_of(&all, "toolu_01G").contains("no searching today"),
        "the PreToolUse hook ran: {all:?}"
    );
    assert_eq!(decision_of(&all, "toolu_01Gl"), "allow");
    assert_eq!(decision_of(&all, "toolu_01L"), "deny");
    // The Edit comes after the session's Read of the same file: read-before-edit passes.
    assert_eq!(decision_of(&all, "toolu_01E"), "allow");
    assert_eq!(decision_of(&all, "toolu_01M"), "ask");
    // Steps as a run would number them; a denial names its code.
    let lines = ran.messages();
    let ls = lines.iter().find(|l| l["callId"] == "toolu_01L").unwrap();
    assert_eq!(
        (ls["tool"].as_str(), ls["step"].as_u64()),
        (Some("LS"), Some(2))
    );
    assert_eq!(ls["code"], "DENIED");

    assert_eq!(snapshot(&ws), before, "the workspace changed");
    assert!(!log.exists(), "a log was written");
    assert!(ran.stderr.contains("no log was written"), "{}", ran.stderr);
}

#[test]
fn read_before_edit_is_simulated_from_the_transcripts_own_reads() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let lib = format!("{}/src/lib.rs", ws.display());
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            &message(&[(
                "edit_unread",
                "Edit",
                json!({"file_path": lib, "old_string": "a + b", "new_string": "a - b"}),
            )]),
            &message(&[("read", "Read", json!({"file_path": "src/lib.rs"}))]),
            &message(&[
                (
                    "edit_read",
                    "Edit",
                    json!({"file_path": lib, "old_string": "a + b", "new_string": "a - b"}),
                ),
                (
                    "overwrite_unread",
                    "Write",
                    json!({"file_path": "src/main.rs", "content": "fn main() {}\n"}),
                ),
                (
                    "create",
                    "Write",
                    json!({"file_path": "src/new.rs", "content": "// new\n"}),
                ),
            ]),
            // Written (not read) by the model before: editing it again needs no read.
            &message(&[(
                "edit_after_edit",
                "Edit",
                json!({"file_path": "src/lib.rs", "old_string": "a - b", "new_string": "a * b"}),
            )]),
        ],
    );
    let log = dir.path().join("log.jsonl");
    let before = snapshot(&ws);
    let ran = dry_run(
        &t,
        &ws,
        &log,
        &["--profile", "claude-code", "--approve", "allow"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let all = decisions(&ran);
    assert_eq!(decision_of(&all, "edit_unread"), "deny");
    assert!(
        reason_of(&all, "edit_unread").contains("has not been read"),
        "{all:?}"
    );
    assert_eq!(decision_of(&all, "read"), "allow");
    assert_eq!(decision_of(&all, "edit_read"), "allow");
    assert_eq!(decision_of(&all, "overwrite_unread"), "deny");
    assert_eq!(decision_of(&all, "create"), "allow");
    assert_eq!(decision_of(&all, "edit_after_edit"), "allow");
    assert_eq!(snapshot(&ws), before, "the workspace changed");
    assert!(!log.exists(), "a log was written");
}

#[test]
fn the_default_profile_is_judged_too() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "deny = [\"read_file(CHANGELOG.md)\"]\nask = [\"shell\"]\n",
    )
    .unwrap();
    let call = |id: &str, name: &str, args: Value| {
        json!({"id": id, "type": "function",
               "function": {"name": name, "arguments": args.to_string()}})
    };
    let line = |calls: Vec<Value>| {
        json!({"role": "assistant", "content": null, "tool_calls": calls}).to_string()
    };
    let patch = "*** Begin Patch\n*** Update File: src/main.rs\n@@\n-fn main() {\n+fn main() { // patched\n*** End Patch\n";
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            &line(vec![
                call("secret", "read_file", json!({"path": "CHANGELOG.md"})),
                call("readme", "read_file", json!({"path": "README.md"})),
                call("outside", "read_file", json!({"path": "../../etc/passwd"})),
            ]),
            &line(vec![
                call(
                    "edit",
                    "edit_file",
                    json!({"path": "README.md", "old_string": "a", "new_string": "b"}),
                ),
                call("cmd", "shell", json!({"command": "touch made-by-shell"})),
                call("nope", "no_such_tool", json!({})),
            ]),
            &line(vec![call(
                "patch_unread",
                "apply_patch",
                json!({"input": patch}),
            )]),
            &line(vec![call(
                "read_main",
                "read_file",
                json!({"path": "src/main.rs"}),
            )]),
            &line(vec![call(
                "patch_read",
                "apply_patch",
                json!({"input": patch}),
            )]),
            "this line is not JSON",
        ],
    );
    let log = dir.path().join("log.jsonl");
    let before = snapshot(&ws);
    let ran = dry_run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(ran.code, 1, "a bad line exits 1: {}", ran.stderr);
    let all = decisions(&ran);
    assert_eq!(decision_of(&all, "secret"), "deny");
    assert_eq!(decision_of(&all, "readme"), "allow");
    assert_eq!(decision_of(&all, "outside"), "deny");
    assert_eq!(decision_of(&all, "edit"), "allow");
    assert_eq!(decision_of(&all, "cmd"), "ask");
    assert_eq!(decision_of(&all, "nope"), "deny");
    // apply_patch: read-before-edit for every file it changes.
    assert_eq!(decision_of(&all, "patch_unread"), "deny");
    assert!(
        reason_of(&all, "patch_unread").contains("has not been read"),
        "{all:?}"
    );
    assert_eq!(decision_of(&all, "patch_read"), "allow");
    assert_eq!(decision_of(&all, "dsh_line_6"), "deny");
    let codes: BTreeMap<String, Value> = ran
        .messages()
        .into_iter()
        .map(|l| (l["callId"].as_str().unwrap().to_string(), l["code"].clone()))
        .collect();
    assert_eq!(codes["secret"], "DENIED");
    assert_eq!(codes["nope"], "UNKNOWN_TOOL");
    assert_eq!(codes["dsh_line_6"], "TOOL_INPUT_ERROR");
    assert_eq!(snapshot(&ws), before, "the workspace changed");
    assert!(!log.exists(), "a log was written");
}

#[test]
fn the_help_says_hooks_are_executed() {
    let help = dsh(&["run", "--help"]).stdout;
    assert!(help.contains("--dry-run"), "{help}");
    assert!(help.contains("command hooks are executed"), "{help}");
}
