//! Where a script runs: a worker process that ends when its parent is gone, a clear error
//! when there is no worker or the program named is not one, and a worker that dies is
//! reported, not waited for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_code_mode::{CodeLimits, RunCode, WorkerCommand};
use dsh_core::{Hooks, ToolRegistry};
use dsh_scheduler::SchedulerConfig;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits for `child` to exit, at most `within`.
fn exits_within(child: &mut std::process::Child, within: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn job(code: &str) -> String {
    serde_json::json!({"job": {
        "code": code,
        "tools": [],
        "limits": {
            "memoryBytes": 16 << 20,
            "stackBytes": 1 << 20,
            "maxSubcalls": 10,
            "maxConsoleBytes": 1000,
            "maxResultBytes": 1000
        },
        "timeoutMs": 60000
    }})
    .to_string()
        + "\n"
}

#[test]
fn a_worker_whose_parent_is_gone_stops_even_inside_a_built_in() {
    for code in [
        "while (true) {}",
        "Array(100000).fill(3n ** 60000n).forEach(String);",
    ] {
        let mut worker = Command::new(env!("CARGO_BIN_EXE_dsh-code-worker"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(worker.stdout.take().unwrap());
        let mut hello = String::new();
        out.read_line(&mut hello).unwrap();
        assert_eq!(hello.trim(), r#"{"hello":{"protocol":1}}"#);
        let mut stdin = worker.stdin.take().unwrap();
        stdin.write_all(job(code).as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(worker.try_wait().unwrap().is_none(), "{code}: it runs");
        // What a parent that dies (even SIGKILLed) leaves: the end of the worker's stdin.
        drop(stdin);
        let gone = exits_within(&mut worker, Duration::from_secs(10));
        if !gone {
            let _ = worker.kill();
        }
        assert!(gone, "{code}: the worker outlived its parent's end");
    }
}

async fn one_script(tool: RunCode) -> dsh_core::FrozenResult {
    let probe = Arc::new(Probe::default());
    let registry = Arc::new(ToolRegistry::new());
    registry.register(tool).unwrap();
    registry
        .register(Nap {
            name: "nap",
            parallel: true,
            probe,
        })
        .unwrap();
    let (harness, session, _log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let r = run_code(&session, "c1", "return 1;").await;
    session.shutdown().await;
    harness.shutdown().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_worker_program_run_code_says_what_to_do() {
    // This test program never called worker_main_if_requested, and names no worker.
    let r = one_script(RunCode::new(test_limits())).await;
    assert_eq!(code(&r), "TOOL_ERROR", "{}", r.text());
    assert!(
        r.text().contains("worker_main_if_requested()"),
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_is_not_a_worker_is_refused_clearly() {
    let _serial = serial().await;
    for (program, args, words) in [
        (
            "/nonexistent/dsh-worker",
            vec![],
            "could not start the script worker",
        ),
        (
            "true",
            vec![],
            "is not a script worker: it exited with status 0",
        ),
        (
            "echo",
            vec!["hello"],
            "is not a script worker: its first line",
        ),
    ] {
        let mut command = WorkerCommand::new(program);
        for a in args {
            command = command.arg(a);
        }
        let start = Instant::now();
        let r = one_script(RunCode::new(test_limits()).with_worker(command)).await;
        assert_eq!(code(&r), "TOOL_ERROR", "{program}: {}", r.text());
        assert!(r.text().contains(words), "{program}: {}", r.text());
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{program}: told at once"
        );
    }
    engines_gone().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_before_it_reports_is_told_not_waited_for() {
    let _serial = serial().await;
    let command = WorkerCommand::new("sh")
        .arg("-c")
        .arg(r#"echo '{"hello":{"protocol":1}}'; read job; echo 'the engine broke' >&2; exit 7"#);
    let limits = CodeLimits {
        timeout: Duration::from_secs(60),
        ..test_limits()
    };
    let start = Instant::now();
    let r = one_script(RunCode::new(limits).with_worker(command)).await;
    assert_eq!(code(&r), "TOOL_ERROR", "{}", r.text());
    assert!(
        r.text()
            .contains("worker process exited with status 7 before it reported"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("the engine broke"), "{}", r.text());
    assert!(start.elapsed() < Duration::from_secs(10));
    engines_gone().await;
}
