//! Claude Code's command hooks (`PreToolUse`, `PostToolUse`) run real shell scripts around
//! calls going through the real pipeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use dsh_command_hooks::{CommandHooks, HookSettings};
use dsh_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, ContentBlock, FrozenResult, HookError,
    Hooks, SessionEvent, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepOutcome, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tool that records the input it ran with.
struct Recorder {
    name: String,
    ran: Arc<Mutex<Vec<(String, Value)>>>,
}

#[async_trait]
impl ToolDefinition for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "records its input"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}},
               "additionalProperties": false})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.ran
            .lock()
            .unwrap()
            .push((self.name.clone(), input.clone()));
        Ok(json!({"echoed": input.get("text").cloned().unwrap_or(Value::Null)}))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!("ran with {}", value["echoed"]))]
    }
}

/// Approves every `ask`, keeping the prompts.
#[derive(Default)]
struct Approver {
    prompts: Mutex<Vec<String>>,
}

#[async_trait]
impl ApprovalResponder for Approver {
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        self.prompts.lock().unwrap().push(request.prompt.clone());
        Ok(ApprovalAnswer::Approve)
    }
}

struct Rig {
    dir: tempfile::TempDir,
    ran: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            dir: tempfile::tempdir().unwrap(),
            ran: Arc::default(),
        }
    }

    fn ws(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.ws().join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Writes an executable `#!/bin/sh` script into the workspace; returns its path.
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    fn ran(&self) -> Vec<(String, Value)> {
        self.ran.lock().unwrap().clone()
    }

    /// Runs one step of calls `(id, tool, args)` with the given settings.
    async fn step(
        &self,
        settings: Value,
        approver: Option<Arc<dyn ApprovalResponder>>,
        calls: Vec<(&str, &str, Value)>,
    ) -> (StepOutcome, Vec<SessionEvent>) {
        let settings = HookSettings::from_json(&settings.to_string()).unwrap();
        let registry = Arc::new(ToolRegistry::new());
        for name in ["alpha", "beta", "gamma", "delta"] {
            registry
                .register(Recorder {
                    name: name.into(),
                    ran: self.ran.clone(),
                })
                .unwrap();
        }
        let mut hooks = Hooks::new();
        CommandHooks::new(settings, self.ws())
            .with_session_id("session-42")
            .with_transcript_path(self.path("session.jsonl"))
            .install(&mut hooks);
        let mut builder = HarnessBuilder::new(registry).hooks(hooks);
        if let Some(a) = approver {
            builder = builder.approval(a);
        }
        let harness = builder.build().await.unwrap();
        let log = SessionLog::memory().await.unwrap();
        let session = harness
            .open(log.clone(), SchedulerConfig::default(), None)
            .await
            .unwrap();
        let calls = calls
            .into_iter()
            .map(|(id, tool, args)| ToolCall::new(id, tool, args))
            .collect();
        let outcome = session.run_step(StepRequest::new(calls)).await.unwrap();
        let events = log.snapshot().await.unwrap();
        session.shutdown().await;
        harness.shutdown().await;
        (outcome, events)
    }

    /// One call of `alpha` with `{"text": "hi"}`.
    async fn one(&self, settings: Value) -> FrozenResult {
        let (outcome, _) = self
            .step(settings, None, vec![("c1", "alpha", json!({"text": "hi"}))])
            .await;
        outcome.results.into_iter().next().unwrap()
    }
}

fn command(cmd: &str) -> Value {
    json!({"type": "command", "command": cmd})
}

fn pre(hooks: Vec<Value>) -> Value {
    json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": hooks}]}})
}

fn post(hooks: Vec<Value>) -> Value {
    json!({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": hooks}]}})
}

/// A hook that prints `json` on stdout and exits 0.
fn printing(rig: &Rig, name: &str, json: Value) -> Value {
    let out = json.to_string().replace('\'', "'\\''");
    command(&rig.script(name, &format!("cat > /dev/null\necho '{out}'")))
}

fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

/// True while `pid` runs; a SIGKILL takes effect when the process is next scheduled, so a
/// process that was just killed is given a moment to go.
fn alive(pid: &str) -> bool {
    let running = || {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        !stat.is_empty() && !stat.contains(") Z ")
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while running() {
        if Instant::now() > deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

// ---------------------------------------------------------------- exit codes

#[tokio::test]
async fn exit_0_without_output_lets_the_call_run() {
    let rig = Rig::new();
    let hook = command(&rig.script("ok.sh", "cat > /dev/null\nexit 0"));
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(r.text(), "ran with \"hi\"");
    assert_eq!(rig.ran().len(), 1);
}

#[tokio::test]
async fn exit_2_before_the_tool_denies_with_stderr_as_the_reason() {
    let rig = Rig::new();
    let hook = command(&rig.script(
        "no.sh",
        "cat > /dev/null\necho 'no writes on Fridays' >&2\nexit 2",
    ));
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("no writes on Fridays"), "{}", r.text());
    assert!(rig.ran().is_empty(), "the tool did not run");
}

#[tokio::test]
async fn another_exit_code_is_a_non_blocking_error_unless_the_hook_fails_closed() {
    let rig = Rig::new();
    let broken = rig.script("broken.sh", "cat > /dev/null\necho 'oops' >&2\nexit 1");
    let r = rig.one(pre(vec![command(&broken)])).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(rig.ran().len(), 1);

    let strict = json!({"type": "command", "command": broken, "fail_closed": true});
    let r = rig.one(pre(vec![strict])).await;
    assert_eq!(code(&r), "DENIED");
    assert!(
        r.text().contains("exit code 1") && r.text().contains("fail closed"),
        "{}",
        r.text()
    );
    assert_eq!(rig.ran().len(), 1, "the second call did not run");
}

#[tokio::test]
async fn exit_2_after_the_tool_blocks_the_result() {
    let rig = Rig::new();
    let hook = command(&rig.script(
        "redact.sh",
        "cat > /dev/null\necho 'output contains a key' >&2\nexit 2",
    ));
    let r = rig.one(post(vec![hook])).await;
    assert_eq!(code(&r), "BLOCKED");
    assert!(r.text().contains("output contains a key"), "{}", r.text());
    assert!(!r.text().contains("ran with"), "{}", r.text());
    assert_eq!(rig.ran().len(), 1, "the tool had run");
}

// ---------------------------------------------------------------- JSON output fields

#[tokio::test]
async fn permission_decision_deny_gives_its_reason_to_the_model() {
    let rig = Rig::new();
    let hook = printing(
        &rig,
        "deny.sh",
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "alpha is retired"}}),
    );
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("alpha is retired"), "{}", r.text());
    assert!(rig.ran().is_empty());
}

#[tokio::test]
async fn permission_decision_ask_goes_to_the_approval_responder() {
    let rig = Rig::new();
    let ask = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "ask", "permissionDecisionReason": "alpha touches prod"}});
    let hook = printing(&rig, "ask.sh", ask);

    // No responder: an ask is denied.
    let r = rig.one(pre(vec![hook.clone()])).await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(rig.ran().is_empty());

    let approver = Arc::new(Approver::default());
    let (outcome, _) = rig
        .step(
            pre(vec![hook]),
            Some(approver.clone()),
            vec![("c1", "alpha", json!({"text": "hi"}))],
        )
        .await;
    assert_eq!(code(&outcome.results[0]), "ok");
    assert_eq!(*approver.prompts.lock().unwrap(), ["alpha touches prod"]);
    assert_eq!(rig.ran().len(), 1);
}

#[tokio::test]
async fn several_hooks_combine_deny_over_ask_over_allow() {
    let rig = Rig::new();
    let allow = printing(
        &rig,
        "allow.sh",
        json!({"hookSpecificOutput": {"permissionDecision": "allow",
            "permissionDecisionReason": "fine by me"}}),
    );
    let ask = printing(
        &rig,
        "ask.sh",
        json!({"hookSpecificOutput": {"permissionDecision": "ask",
            "permissionDecisionReason": "sure?"}}),
    );
    let deny = printing(
        &rig,
        "deny.sh",
        json!({"hookSpecificOutput": {"permissionDecision": "deny",
            "permissionDecisionReason": "never"}}),
    );
    let approver = Arc::new(Approver::default());
    let run = |hooks: Vec<Value>| {
        let approver = approver.clone();
        let rig = &rig;
        async move {
            let (outcome, _) = rig
                .step(
                    pre(hooks),
                    Some(approver),
                    vec![("c1", "alpha", json!({"text": "hi"}))],
                )
                .await;
            outcome.results[0].clone()
        }
    };

    let r = run(vec![allow.clone(), ask.clone(), deny.clone()]).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("never"), "{}", r.text());
    assert!(
        approver.prompts.lock().unwrap().is_empty(),
        "deny wins before any ask"
    );

    let r = run(vec![allow.clone(), ask]).await;
    assert_eq!(code(&r), "ok");
    assert_eq!(*approver.prompts.lock().unwrap(), ["sure?"]);

    let r = run(vec![allow]).await;
    assert_eq!(code(&r), "ok");
    assert_eq!(
        approver.prompts.lock().unwrap().len(),
        1,
        "allow asks no one"
    );
    assert_eq!(rig.ran().len(), 2);
}

#[tokio::test]
async fn updated_input_is_what_the_tool_runs_with_and_is_validated_again() {
    let rig = Rig::new();
    let rewrite = printing(
        &rig,
        "rewrite.sh",
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "allow", "updatedInput": {"text": "rewritten"}}}),
    );
    let r = rig.one(pre(vec![rewrite])).await;
    assert_eq!(code(&r), "ok");
    assert_eq!(
        rig.ran(),
        [("alpha".to_string(), json!({"text": "rewritten"}))]
    );

    let bad = printing(
        &rig,
        "bad.sh",
        json!({"hookSpecificOutput": {"updatedInput": {"text": 5}}}),
    );
    let r = rig.one(pre(vec![bad])).await;
    assert_eq!(code(&r), "TOOL_INPUT_ERROR", "{}", r.text());
    assert_eq!(rig.ran().len(), 1);
}

#[tokio::test]
async fn continue_false_stops_the_call_with_its_stop_reason() {
    let rig = Rig::new();
    let stop = printing(
        &rig,
        "stop.sh",
        json!({"continue": false, "stopReason": "budget exhausted"}),
    );
    let r = rig.one(pre(vec![stop.clone()])).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("budget exhausted"), "{}", r.text());
    assert!(rig.ran().is_empty());

    let r = rig.one(post(vec![stop])).await;
    assert_eq!(code(&r), "BLOCKED");
    assert!(r.text().contains("budget exhausted"), "{}", r.text());
}

#[tokio::test]
async fn decision_block_denies_before_and_blocks_after() {
    let rig = Rig::new();
    let block = printing(
        &rig,
        "block.sh",
        json!({"decision": "block", "reason": "lint failed"}),
    );
    let r = rig.one(pre(vec![block.clone()])).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("lint failed"), "{}", r.text());

    let r = rig.one(post(vec![block])).await;
    assert_eq!(code(&r), "BLOCKED");
    assert!(r.text().contains("lint failed"), "{}", r.text());
}

#[tokio::test]
async fn additional_context_reaches_the_model_after_the_steps_results() {
    let rig = Rig::new();
    let context = printing(
        &rig,
        "context.sh",
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
            "additionalContext": "remember to run the tests"}}),
    );
    let (outcome, events) = rig
        .step(
            post(vec![context]),
            None,
            vec![
                ("c1", "alpha", json!({"text": "a"})),
                ("c2", "beta", json!({"text": "b"})),
            ],
        )
        .await;
    assert_eq!(code(&outcome.results[0]), "ok");
    assert_eq!(outcome.results[0].text(), "ran with \"a\"");
    let types: Vec<&str> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(
        types,
        [
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "user/message",
            "user/message"
        ]
    );
    let texts: Vec<String> = outcome.deferred.iter().map(|d| d.content.clone()).collect();
    assert_eq!(
        texts,
        ["remember to run the tests", "remember to run the tests"]
    );
}

// ---------------------------------------------------------------- stdin, cwd, environment

#[tokio::test]
async fn hooks_read_the_call_on_stdin_in_the_workspace() {
    let rig = Rig::new();
    let before = command(&rig.script(
        "before.sh",
        "cat > pre.json\npwd > pre-cwd.txt\necho \"$CLAUDE_PROJECT_DIR\" > pre-env.txt",
    ));
    let after = command(&rig.script("after.sh", "cat > post.json"));
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "alpha", "hooks": [before]}],
        "PostToolUse": [{"matcher": "alpha", "hooks": [after]}]
    }});
    let (outcome, _) = rig
        .step(
            settings,
            None,
            vec![("call-7", "alpha", json!({"text": "hi"}))],
        )
        .await;
    assert_eq!(code(&outcome.results[0]), "ok");

    let ws = rig.ws().canonicalize().unwrap();
    let pre: Value = serde_json::from_str(&rig.read("pre.json")).unwrap();
    assert_eq!(pre["session_id"], "session-42");
    assert_eq!(pre["hook_event_name"], "PreToolUse");
    assert_eq!(pre["tool_name"], "alpha");
    assert_eq!(pre["tool_input"], json!({"text": "hi"}));
    assert_eq!(pre["tool_use_id"], "call-7");
    assert_eq!(
        Path::new(pre["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        ws
    );
    assert_eq!(pre["transcript_path"], json!(rig.path("session.jsonl")));
    assert!(pre.get("tool_response").is_none());
    assert_eq!(
        Path::new(rig.read("pre-cwd.txt").trim())
            .canonicalize()
            .unwrap(),
        ws
    );
    assert_eq!(
        Path::new(rig.read("pre-env.txt").trim())
            .canonicalize()
            .unwrap(),
        ws
    );

    let post: Value = serde_json::from_str(&rig.read("post.json")).unwrap();
    assert_eq!(post["hook_event_name"], "PostToolUse");
    assert_eq!(post["tool_name"], "alpha");
    assert_eq!(post["tool_use_id"], "call-7");
    assert_eq!(post["tool_response"], json!({"echoed": "hi"}));
}

// ---------------------------------------------------------------- matchers

#[tokio::test]
async fn matchers_select_tools_by_name_list_regex_or_all() {
    let rig = Rig::new();
    let hit = rig.script(
        "hit.sh",
        "tool=$(grep -o '\"tool_name\":\"[a-z]*\"' | cut -d'\"' -f4)\necho \"$tool $1\" >> hits.txt",
    );
    let group = |matcher: &str, label: &str| json!({"matcher": matcher, "hooks": [command(&format!("{hit} {label}"))]});
    let settings = json!({"hooks": {"PreToolUse": [
        group("alpha", "exact"),
        group("alph", "prefix-is-not-exact"),
        group("beta|gamma", "list"),
        group("m+a$", "regex"),
        group("^(be|de)", "anchored"),
        group("*", "star"),
        group("", "empty"),
    ]}});
    for tool in ["alpha", "beta", "gamma", "delta"] {
        let (outcome, _) = rig
            .step(settings.clone(), None, vec![("c", tool, json!({}))])
            .await;
        assert_eq!(code(&outcome.results[0]), "ok");
    }
    let mut hits: Vec<String> = rig.read("hits.txt").lines().map(str::to_string).collect();
    hits.sort();
    assert_eq!(
        hits,
        [
            "alpha empty",
            "alpha exact",
            "alpha star",
            "beta anchored",
            "beta empty",
            "beta list",
            "beta star",
            "delta anchored",
            "delta empty",
            "delta star",
            "gamma empty",
            "gamma list",
            "gamma regex",
            "gamma star",
        ]
    );
}

// ---------------------------------------------------------------- timeouts, concurrency

#[tokio::test]
async fn a_hook_that_hangs_is_killed_at_its_timeout_with_what_it_started() {
    let rig = Rig::new();
    let hang = rig.script(
        "hang.sh",
        "cat > /dev/null\necho $$ > hook.pid\nsleep 30 &\necho $! > child.pid\nwait",
    );
    let started = Instant::now();
    let r = rig
        .one(pre(vec![
            json!({"type": "command", "command": hang, "timeout": 0.5}),
        ]))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        code(&r),
        "ok",
        "a timeout is a non-blocking error: {}",
        r.text()
    );
    assert_eq!(rig.ran().len(), 1);
    assert!(!alive(&rig.read("hook.pid")), "the hook was killed");
    assert!(!alive(&rig.read("child.pid")), "and so was what it started");

    let r = rig
        .one(pre(vec![
            json!({"type": "command", "command": hang, "timeout": 0.5, "fail_closed": true}),
        ]))
        .await;
    assert_eq!(code(&r), "DENIED");
    assert!(
        r.text().contains("timeout") && r.text().contains("fail closed"),
        "{}",
        r.text()
    );
    assert_eq!(rig.ran().len(), 1);
}

#[tokio::test]
async fn matching_hooks_run_at_the_same_time() {
    let rig = Rig::new();
    // Each waits (up to 5 s) for the other's mark: they can only both meet if they overlap.
    let meet = rig.script(
        "meet.sh",
        "cat > /dev/null\ntouch \"mark-$1\"\ni=0\nwhile [ ! -e \"mark-$2\" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n[ -e \"mark-$2\" ] && echo \"$1\" >> met.txt\nexit 0",
    );
    let r = rig
        .one(pre(vec![
            command(&format!("{meet} a b")),
            command(&format!("{meet} b a")),
        ]))
        .await;
    assert_eq!(code(&r), "ok");
    let mut met: Vec<String> = rig.read("met.txt").lines().map(str::to_string).collect();
    met.sort();
    assert_eq!(met, ["a", "b"]);
}

#[tokio::test]
async fn a_settings_file_loads_as_it_is() {
    let rig = Rig::new();
    let deny = rig.script(
        "deny.sh",
        "cat > /dev/null\necho 'from the file' >&2\nexit 2",
    );
    let file = rig.path("settings.json");
    std::fs::write(
        &file,
        json!({
            "$schema": "https://json.schemastore.org/claude-code-settings.json",
            "permissions": {"allow": ["Bash(ls:*)"]},
            "env": {"FOO": "1"},
            "hooks": {
                "PreToolUse": [{"matcher": "beta", "hooks": [
                    {"type": "command", "command": deny},
                    {"type": "prompt", "prompt": "Is this safe?"}
                ]}],
                "SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let settings = HookSettings::from_file(&file).unwrap();
    assert_eq!(
        settings.groups(dsh_command_hooks::HookEvent::PreToolUse)[0]
            .hooks
            .len(),
        1
    );
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let (outcome, _) = rig
        .step(
            json,
            None,
            vec![("a", "alpha", json!({})), ("b", "beta", json!({}))],
        )
        .await;
    assert_eq!(code(&outcome.results[0]), "ok");
    assert_eq!(code(&outcome.results[1]), "DENIED");
    assert!(outcome.results[1].text().contains("from the file"));

    let missing = HookSettings::from_file(rig.path("nope.json")).unwrap_err();
    assert!(missing.to_string().contains("nope.json"), "{missing}");
}
