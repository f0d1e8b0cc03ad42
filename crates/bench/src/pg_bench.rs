//! PostgreSQL session-store benchmarks. Each starts its own throwaway cluster through
//! `scripts/postgres.sh` (stopped when the bench exits).
//!
//! - `session/postgres_append`: `batch` durability, appenders each awaiting every ack (as the
//!   scheduler does): `events_per_s_16` and `events_per_s_64` (goal at 64: ≥ 20,000/s),
//!   `events_per_commit_64` (how many appends shared each transaction), and the same 64
//!   appenders on the file backend in the same run (`file_events_per_s_64`).
//! - `session/postgres_failover`: a writer with a 2 s lease (another process) is SIGKILLed; the
//!   time from its death to the first event the new owner appended (`p50_ms` over 5 rounds).
//! - `session/postgres_replay`: a 1,000,000-event session read back, checked and rebuilt into
//!   a transcript, as `dsh replay --store` does (`replay_1m_s`, median of 3).
// A bench whose setup fails should stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use crate::session_bench::{append_rate, runtime, write_log};
use dsh_core::EventBody;
use dsh_core::SessionEvent;
use dsh_core::event::UserMessageData;
use dsh_session::postgres::{LeaseOptions, PostgresBackend};
use dsh_session::{Durability, LogBackend, SessionLog};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "session/postgres_append",
        in_all: true,
        run: append,
    },
    Bench {
        name: "session/postgres_failover",
        in_all: true,
        run: failover,
    },
    Bench {
        name: "session/postgres_replay",
        in_all: true,
        run: replay,
    },
];

const CHILD_ENV: &str = "DSH_BENCH_PG_OLD_OWNER";

/// The bench's own cluster, started once.
pub(crate) fn url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh");
        let dir = std::env::temp_dir().join(format!("dsh-bench-pg-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(script)
            .arg("start")
            .arg(&dir)
            .arg("--watch")
            .arg(std::process::id().to_string())
            .output()
            .expect("running scripts/postgres.sh");
        assert!(
            out.status.success(),
            "scripts/postgres.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("a URL")
            .trim()
            .to_string()
    })
    .clone()
}

fn session_id(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos();
    format!("bench-{name}-{nanos}")
}

fn lease(ms: u64) -> LeaseOptions {
    LeaseOptions {
        wait: Duration::from_secs(30),
        ..LeaseOptions::with_lease(Duration::from_millis(ms))
    }
}

fn append() {
    let url = url();
    let rt = runtime();
    let b = "session/postgres_append";
    rt.block_on(async {
        for appenders in [16usize, 64] {
            let id = session_id("append");
            let (log, _) =
                SessionLog::open_postgres(&url, &id, Durability::Batch, lease(5000), None)
                    .await
                    .expect("open the session");
            let rate = append_rate(&log, appenders, 1).await;
            let stats = log.stats();
            log.close().await.expect("close");
            emit(b, &format!("events_per_s_{appenders}"), rate, "events/s");
            if appenders == 64 {
                let per = stats.events as f64 / stats.commits.max(1) as f64;
                emit(b, "events_per_commit_64", per, "events");
            }
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, _) = SessionLog::open_file(dir.path().join("f.jsonl"), Durability::Batch, None)
            .await
            .expect("open the file log");
        let rate = append_rate(&log, 64, 1).await;
        log.close().await.expect("close");
        emit(b, "file_events_per_s_64", rate, "events/s");
    });
}

fn user(n: u64) -> EventBody {
    EventBody::UserMessage(UserMessageData {
        content: format!("m{n}"),
        origin: "bench".into(),
    })
}

/// This program started again as the old owner: takes the session, appends, says `ready`
/// and waits to be killed.
pub fn old_owner_if_requested() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (url, id) = spec.split_once('|').expect("URL|SESSION");
    let rt = runtime();
    rt.block_on(async {
        let (log, rec) = SessionLog::open_postgres(url, id, Durability::Batch, lease(2000), None)
            .await
            .expect("the old owner opens the session");
        log.append(rec.next_step, user(0)).await.expect("append");
        println!("ready");
        let _ = std::io::stdout().flush();
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    });
}

fn failover() {
    let url = url();
    let rt = runtime();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let id = session_id("failover");
        let mut child = Command::new(std::env::current_exe().expect("this program"))
            .env(CHILD_ENV, format!("{url}|{id}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the old owner");
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut ready)
            .expect("ready");
        assert_eq!(ready.trim(), "ready");
        // A random point in the old owner's renewal period.
        std::thread::sleep(Duration::from_millis(
            (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("time")
                .subsec_nanos()
                % 700) as u64,
        ));
        child.kill().expect("SIGKILL the old owner");
        let died = Instant::now();
        let _ = child.wait();
        let ms = rt.block_on(async {
            let (log, rec) =
                SessionLog::open_postgres(&url, &id, Durability::Batch, lease(2000), None)
                    .await
                    .expect("take over");
            log.append(rec.next_step, user(1)).await.expect("append");
            let ms = died.elapsed().as_secs_f64() * 1e3;
            log.close().await.expect("close");
            ms
        });
        samples.push(ms);
    }
    emit(
        "session/postgres_failover",
        "p50_ms",
        quantile(&mut samples, 0.5),
        "ms",
    );
}

fn replay() {
    const EVENTS: u64 = 1_000_000;
    let url = url();
    let dir = tempfile::tempdir().expect("temp dir");
    let path: PathBuf = dir.path().join("replay.jsonl");
    write_log(&path, EVENTS);
    let id = session_id("replay");
    let (mut backend, _) =
        PostgresBackend::open(&url, &id, Durability::Batch, lease(60_000)).expect("open");
    let file = std::fs::File::open(&path).expect("the log");
    let mut chunk = Vec::with_capacity(20_000);
    for line in std::io::BufReader::new(file).lines() {
        let event = SessionEvent::from_json_line(&line.expect("a line")).expect("an event");
        chunk.push(event);
        if chunk.len() == 20_000 {
            backend
                .commit(std::mem::take(&mut chunk), true)
                .expect("commit");
        }
    }
    backend.commit(chunk, true).expect("commit");
    drop(backend);
    let rt = runtime();
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let steps = rt.block_on(async {
            let store = dsh_session::postgres::PgStore::connect(&url, false)
                .await
                .expect("connect");
            let events = store.read_events(&id).await.expect("read");
            assert_eq!(events.len() as u64, EVENTS);
            dsh_session::check::check_stored(&events).expect("a whole log");
            let mut builder = dsh_session::replay::TranscriptBuilder::new();
            events.into_iter().for_each(|e| builder.push(e));
            builder.finish().steps.len()
        });
        times.push(t.elapsed().as_secs_f64());
        assert!(steps > 50_000);
    }
    emit(
        "session/postgres_replay",
        "replay_1m_s",
        quantile(&mut times, 0.5),
        "s",
    );
}
