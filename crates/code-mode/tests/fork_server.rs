//! Scripts' workers come from a fork server: the worker program started once, which forks a
//! fresh process for each script (no exec, no program start on the script's path). What each
//! worker gets is its own: it holds nothing but its standard streams (not the server's
//! control socket, not another worker's), and the server goes with its tool.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use serde_json::json;
use std::sync::Arc;

fn open_fds(pid: u32) -> Vec<u32> {
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort();
    fds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_script_runs_in_a_process_forked_by_the_fork_server_holding_only_its_streams() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let first = run_code(&session, "a", "return 1").await;
    assert_eq!(returned(&first), json!(1));
    until("no spare", || dsh_code_mode::spare_workers().len() == 1).await;
    let servers = dsh_code_mode::fork_servers();
    assert_eq!(servers.len(), 1, "one fork server per tool: {servers:?}");
    let server = servers[0];
    assert_eq!(parent(server), Some(std::process::id()));
    let spare = dsh_code_mode::spare_workers()[0];
    assert_eq!(
        parent(spare),
        Some(server),
        "the spare is the server's child"
    );
    // Nothing but stdin, stdout, stderr: no way to the server's control socket or to
    // another script's worker.
    assert_eq!(open_fds(spare), [0, 1, 2]);

    // Many scripts, one server, each in a process of its own.
    for n in 0..5 {
        let r = run_code(
            &session,
            &format!("s{n}"),
            "const seen = globalThis.seen; globalThis.seen = 1; return seen === undefined;",
        )
        .await;
        assert_eq!(returned(&r), json!(true), "a fresh global object each time");
    }
    assert_eq!(dsh_code_mode::fork_servers(), [server]);
    engines_gone().await;

    // The server (and the spare) go with the tool.
    session.shutdown().await;
    harness.shutdown().await;
    drop(session);
    drop(harness);
    until("the fork server outlived its tool", || {
        dsh_code_mode::fork_servers().is_empty()
            && dsh_code_mode::spare_workers().is_empty()
            && parent(server).is_none()
    })
    .await;
}
