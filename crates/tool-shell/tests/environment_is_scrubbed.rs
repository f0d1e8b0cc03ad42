//! Test 9: secret-looking variables and loader variables do not reach the command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

#[tokio::test]
async fn secrets_are_invisible_and_ld_preload_is_stripped() {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.extend(
        [
            ("API_KEY", "sk-secret"),
            ("my_secret", "s"),
            ("LD_PRELOAD", "/nonexistent/evil.so"),
            ("LD_LIBRARY_PATH", "/nonexistent"),
            ("PASSED_TOKEN", "yes"),
            ("TERM", "xterm-256color"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let env = Env::with(|c| {
        c.sandbox(SandboxConfig::workspace_write())
            .pass_env("PASSED_TOKEN")
            .base_env(vars)
    });
    let v = env
        .ok("echo \"key=${API_KEY-unset} s=${my_secret-unset} pre=${LD_PRELOAD-unset} lib=${LD_LIBRARY_PATH-unset} pass=${PASSED_TOKEN-unset} term=$TERM pager=$PAGER gitpager=$GIT_PAGER color=$NO_COLOR\"; env | grep -c sk-secret")
        .await;
    assert_eq!(
        stdout(&v),
        "key=unset s=unset pre=unset lib=unset pass=yes term=dumb pager=cat gitpager=cat color=1\n0\n"
    );
}
