//! Reasons and warnings name a hook by its event, matcher and position, never by its command
//! line: a command carries secrets (`AUDIT_TOKEN=sk-live-… ./audit.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Rig, code};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const SECRET: &str = "sk-live-secret";

/// `AUDIT_TOKEN=<secret> <script>` as the second hook of the `alpha|beta` group, after a
/// harmless one in a group of its own.
fn settings(event: &str, script: &str, extra: Value) -> Value {
    let mut hook = json!({"type": "command", "command": format!("AUDIT_TOKEN={SECRET} {script}")});
    if let (Some(hook), Some(extra)) = (hook.as_object_mut(), extra.as_object()) {
        hook.extend(extra.clone());
    }
    json!({"hooks": {event: [
        {"matcher": "gamma", "hooks": [{"type": "command", "command": "true"}]},
        {"matcher": "alpha|beta", "hooks": [{"type": "command", "command": "true"}, hook]}
    ]}})
}

#[tokio::test]
async fn no_reason_or_warning_quotes_a_hooks_command_line() {
    let rig = Rig::new();
    let cases = [
        // exit 2 with nothing on stderr: the reason is dsh's own.
        (
            "PreToolUse",
            "silent-no.sh",
            "cat > /dev/null\nexit 2",
            json!({}),
            "DENIED",
        ),
        // a failure that fails closed.
        (
            "PreToolUse",
            "broken.sh",
            "cat > /dev/null\nexit 1",
            json!({"fail_closed": true}),
            "DENIED",
        ),
        // a JSON deny without a reason.
        (
            "PreToolUse",
            "deny.sh",
            "cat > /dev/null\necho '{\"hookSpecificOutput\": {\"permissionDecision\": \"deny\"}}'",
            json!({}),
            "DENIED",
        ),
        // a timeout that fails closed.
        (
            "PreToolUse",
            "hang.sh",
            "cat > /dev/null\nsleep 5",
            json!({"timeout": 0.3, "fail_closed": true}),
            "DENIED",
        ),
        // a block after the tool without a reason.
        (
            "PostToolUse",
            "block.sh",
            "cat > /dev/null\necho '{\"decision\": \"block\"}'",
            json!({}),
            "BLOCKED",
        ),
        // broken JSON after the tool: a warning only.
        (
            "PostToolUse",
            "bad.sh",
            "cat > /dev/null\necho '{'",
            json!({}),
            "ok",
        ),
    ];
    for (event, name, body, extra, expected) in cases {
        let script = rig.script(name, body);
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = lines.clone();
        let hooks = rig
            .hooks(&settings(event, &script, extra))
            .with_warnings(Arc::new(move |l: &str| sink.lock().unwrap().push(l.into())));
        let r = rig.call_with(&hooks, json!({"text": "hi"})).await;
        assert_eq!(code(&r), expected, "{name}: {}", r.text());
        let said = format!("{} {:?}", r.text(), lines.lock().unwrap());
        assert!(!said.contains(SECRET), "{name}: {said}");
        assert!(!said.contains("AUDIT_TOKEN"), "{name}: {said}");
        if expected != "ok" {
            assert!(
                r.text()
                    .contains(&format!("{event} hook #3 (matcher \"alpha|beta\")")),
                "{name}: {}",
                r.text()
            );
        } else {
            assert!(said.contains(&format!("{event} hook #3")), "{name}: {said}");
        }
    }
}
