//! Issue 28, break 6: commands get a core set of variables and the ones the user names,
//! nothing else; and they cannot reach the kernel's keyrings, whatever the network setting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

/// dsh's environment, with the secrets a deny-list of names let through.
fn environment() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.extend(
        [
            ("DATABASE_URL", "postgres://app:hunter2@db/app"),
            ("PGPASSWORD", "hunter2"),
            ("NPM_AUTH", "hunter2"),
            ("SSH_AUTH_SOCK", "/run/user/0/ssh-agent.sock"),
            ("API_KEY", "hunter2"),
            ("VIRTUAL_ENV", "/opt/venv"),
            ("CARGO_HOME", "/opt/cargo"),
            ("RUSTUP_HOME", "/opt/rustup"),
            ("LC_ALL", "C.UTF-8"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    vars
}

#[tokio::test]
async fn only_the_core_set_and_named_variables_reach_the_command() {
    for network in [false, true] {
        let env = Env::with(|c| {
            c.sandbox(SandboxConfig::workspace_write().with_network(network))
                .pass_env("VIRTUAL_ENV")
                .base_env(environment())
        });
        let v = env
            .ok("for n in DATABASE_URL PGPASSWORD NPM_AUTH SSH_AUTH_SOCK API_KEY VIRTUAL_ENV CARGO_HOME LC_ALL; do echo \"$n=${!n-unset}\"; done; env | grep -c hunter2; test -n \"$PATH\" && test -n \"$HOME\" && echo core")
            .await;
        assert_eq!(
            stdout(&v),
            "DATABASE_URL=unset\nPGPASSWORD=unset\nNPM_AUTH=unset\nSSH_AUTH_SOCK=unset\nAPI_KEY=unset\nVIRTUAL_ENV=/opt/venv\nCARGO_HOME=unset\nLC_ALL=C.UTF-8\n0\ncore\n",
            "network {network}"
        );
    }
}

#[tokio::test]
async fn a_prefix_names_a_toolchain_family() {
    let env = Env::with(|c| {
        c.sandbox(SandboxConfig::workspace_write())
            .pass_env("CARGO_*")
            .base_env(environment())
    });
    let v = env
        .ok("echo \"${CARGO_HOME-unset} ${RUSTUP_HOME-unset} ${PGPASSWORD-unset}\"")
        .await;
    assert_eq!(stdout(&v), "/opt/cargo unset unset\n");
}

const EPERM: i32 = 1;

/// keyctl, add_key: their numbers on this machine's architecture.
#[cfg(target_arch = "x86_64")]
const KEY_CALLS: (i64, i64) = (250, 248);
#[cfg(target_arch = "aarch64")]
const KEY_CALLS: (i64, i64) = (219, 217);

#[tokio::test]
async fn the_keyring_calls_are_refused_whatever_the_network() {
    let (keyctl, add_key) = KEY_CALLS;
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create) and
    // add_key("user", "dsh-test", "x", 1, KEY_SPEC_SESSION_KEYRING): the errno of each.
    let script = format!(
        "perl -e '$! = 0; $r = syscall({keyctl}, 0, -3, 1); print \"get=\", ($r < 0 ? $!+0 : \"ok\"), \"\\n\"; \
         ($t, $d, $p) = (\"user\", \"dsh-test\", \"x\"); $! = 0; $r = syscall({add_key}, $t, $d, $p, 1, -3); print \"add=\", ($r < 0 ? $!+0 : \"ok\"), \"\\n\"'"
    );
    for network in [false, true] {
        let env = Env::new(SandboxConfig::workspace_write().with_network(network));
        let v = env.ok(&script).await;
        assert_eq!(
            stdout(&v),
            format!("get={EPERM}\nadd={EPERM}\n"),
            "network {network}: {v}"
        );
    }
}
