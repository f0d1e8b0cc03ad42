//! `dsh tools`: the tool list in each provider's request shape. Every built-in tool is
//! compared with a golden file (`tests/tool_lists/*.golden.json`; `DSH_BLESS=1` rewrites
//! them), and the whole list is checked to be accepted by the provider's documented request
//! shape (a JSON Schema of the request, kept beside the golden files). The policy and
//! `--read-only` leave out what could only be denied.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::dsh;
use serde_json::{Value, json};
use std::path::PathBuf;

const BUILT_IN: [&str; 9] = [
    "apply_patch",
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "read_file",
    "run_code",
    "shell",
    "write_file",
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tool_lists")
}

fn list(args: &[&str]) -> Value {
    let mut all = vec!["tools"];
    all.extend_from_slice(args);
    let out = dsh(&all);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn name(tool: &Value) -> &str {
    tool["function"]["name"]
        .as_str()
        .or_else(|| tool["name"].as_str())
        .unwrap()
}

fn names(tools: &Value) -> Vec<&str> {
    tools.as_array().unwrap().iter().map(name).collect()
}

fn accepted_by(schema_file: &str, request: &Value) {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join(schema_file)).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(request)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{schema_file}: {errors:#?}");
}

fn golden(format: &str, tools: &Value) {
    let file = dir().join(format!("{format}.golden.json"));
    let text = serde_json::to_string_pretty(tools).unwrap() + "\n";
    if std::env::var_os("DSH_BLESS").is_some() {
        std::fs::write(&file, &text).unwrap();
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (DSH_BLESS=1 writes it)", file.display()));
    assert_eq!(
        text,
        want,
        "{} differs (DSH_BLESS=1 rewrites it)",
        file.display()
    );
}

#[test]
fn every_built_in_tool_in_openai_form_matches_its_golden_file_and_the_request_shape() {
    let tools = list(&["--format", "openai"]);
    assert_eq!(names(&tools), BUILT_IN, "every built-in tool, sorted");
    golden("openai", &tools);
    accepted_by(
        "openai_request.schema.json",
        &json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "tools": tools}),
    );
    assert_eq!(
        list(&["--format", "openai"]),
        tools,
        "the same bytes every time"
    );
}

#[test]
fn every_built_in_tool_in_anthropic_form_matches_its_golden_file_and_the_request_shape() {
    let tools = list(&["--format", "anthropic"]);
    assert_eq!(names(&tools), BUILT_IN);
    golden("anthropic", &tools);
    accepted_by(
        "anthropic_request.schema.json",
        &json!({"model": "claude-x", "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}], "tools": tools}),
    );
}

#[test]
fn the_policy_and_read_only_leave_out_what_could_only_be_denied() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("policy.toml");
    std::fs::write(
        &policy,
        r#"deny = ["shell", "run_code", "write_file(secrets/**)", "write(secrets/**)"]"#,
    )
    .unwrap();
    let tools = list(&["--policy", policy.to_str().unwrap()]);
    let got = names(&tools);
    assert!(
        !got.contains(&"shell") && !got.contains(&"run_code"),
        "{got:?}"
    );
    assert!(
        got.contains(&"write_file"),
        "denied only under secrets/: {got:?}"
    );

    std::fs::write(
        &policy,
        "default = \"deny\"\nallow = [\"read_file\", \"grep(src/**)\"]\n",
    )
    .unwrap();
    let tools = list(&[
        "--policy",
        policy.to_str().unwrap(),
        "--format",
        "anthropic",
    ]);
    assert_eq!(names(&tools), ["grep", "read_file"]);

    let tools = list(&["--read-only"]);
    let got = names(&tools);
    for writer in ["write_file", "edit_file", "apply_patch"] {
        assert!(!got.contains(&writer), "{got:?}");
    }
    assert!(got.contains(&"read_file"));

    std::fs::write(&policy, r#"deny = ["wirte_file"]"#).unwrap();
    let out = dsh(&["tools", "--policy", policy.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("wirte_file"), "{}", out.stderr);
}
