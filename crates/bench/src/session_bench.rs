//! Session-log benchmarks.
//!
//! - `session/append`: appends acknowledged per second through the writer actor, each
//!   appender awaiting every ack before its next append (as the scheduler does), over a fixed
//!   time. `memory_events_per_s`, `file_none_events_per_s`, `file_batch16_events_per_s` and
//!   `file_always_events_per_s` use 16 concurrent appenders; `file_batch1_events_per_s` one.
//!   Goals: memory ≥ 1,000,000/s, file+batch with 16 appenders ≥ 100,000/s. Also
//!   `memory_burst8_events_per_s`: the 16 appenders each send eight appends before awaiting
//!   them, the way the scheduler records a step's calls. `memory_1thread_events_per_s`: the 16
//!   appenders on a current-thread runtime, which shows what waking tasks across the two
//!   workers costs (most of the multi-threaded figure's time is spent parking and unparking
//!   worker threads, not in the writer). And `fdatasync_p50_us` / `fdatasync_mean_us`, the
//!   disk's own sync latency for a 160-byte append, which bounds every syncing figure: 16
//!   appenders, each awaiting its ack, can never get more than 16 appends per sync;
//!   `file_batch16_events_per_sync` says how many shared each sync in the run, and
//!   `file_batch16_share_of_disk_pct` how close `file_batch16_events_per_s` comes to
//!   `16 / fdatasync_p50` (goal ≥ 70 %). A virtual disk's sync latency drifts by an order of
//!   magnitude within seconds, so the batch16 run is six rounds of 250 ms, each between
//!   probes of its own, and the share is the median of the rounds' shares. Two figures put it
//!   in context: `fdatasync_group_p50_us` and `file_batch16_share_of_group_sync_pct` probe
//!   with the bytes one group of 16 appends really writes (about 3 KiB, which syncs slower
//!   than 160 bytes), and `bare_batch16_share_of_disk_pct` is a bare group-commit loop (no
//!   actor, no JSON, no checks) run in the same rounds: what this machine's runtime and disk
//!   leave for any writer that syncs off the async workers.
//! - `session/replay`: a 1,000,000-event log rebuilt into a transcript (`replay_1m_s`, goal
//!   ≤ 1.5 s), against merely parsing every line into a `serde_json::Value`
//!   (`replay_to_parse_ratio`, goal ≤ 1.5). Warm cache, median of 3 alternating runs.
// A bench whose setup fails should stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use dsh_core::event::{ToolCallData, ToolResultData, UserMessageData};
use dsh_core::{ContentBlock, EventBody, SessionEvent};
use dsh_session::{Durability, SessionLog};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "session/append",
        in_all: true,
        run: append,
    },
    Bench {
        name: "session/replay",
        in_all: true,
        run: replay,
    },
];

const APPEND_FOR: Duration = Duration::from_millis(1500);

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A `tool/call` of the size models usually send.
fn call_body(appender: usize, n: u64) -> EventBody {
    EventBody::ToolCall(ToolCallData {
        call_id: format!("call_{appender}_{n}"),
        name: "read_file".into(),
        arguments: json!({ "path": "src/session/writer.rs", "offset": n }),
        arguments_text: None,
        agent: "main".into(),
        parent: None,
    })
}

/// Acknowledged appends per second from `appenders` concurrent appenders over `APPEND_FOR`.
/// Each appender sends `burst` appends, then awaits their acks (1: one append in flight; 8:
/// how the scheduler records a step of eight calls).
pub(crate) async fn append_rate(log: &SessionLog, appenders: usize, burst: usize) -> f64 {
    append_rate_for(log, appenders, burst, APPEND_FOR).await
}

/// [`append_rate`] over `time`.
async fn append_rate_for(log: &SessionLog, appenders: usize, burst: usize, time: Duration) -> f64 {
    let start = Instant::now();
    let deadline = start + time;
    let tasks: Vec<_> = (0..appenders)
        .map(|a| {
            let log = log.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                let mut acks = Vec::with_capacity(burst);
                while Instant::now() < deadline {
                    for _ in 0..(64 / burst).max(1) {
                        for _ in 0..burst {
                            acks.push(log.send(1, call_body(a, n)));
                            n += 1;
                        }
                        for ack in acks.drain(..) {
                            ack.await.expect("append");
                        }
                    }
                }
                n
            })
        })
        .collect();
    let mut total = 0u64;
    for t in tasks {
        total += t.await.expect("appender");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// The rate, and how many events shared each sync on average.
async fn file_rate(dir: &Path, name: &str, durability: Durability, appenders: usize) -> (f64, f64) {
    let path = dir.join(name);
    let (log, _) = SessionLog::open_file(&path, durability, None)
        .await
        .expect("open the log");
    let rate = append_rate(&log, appenders, 1).await;
    let stats = log.stats();
    log.close().await.expect("close the log");
    (rate, stats.events as f64 / stats.syncs.max(1) as f64)
}

/// Adds `n` samples of the disk's own `write` + `fdatasync` latency for appending `bytes`, in
/// microseconds, to `samples`.
fn probe_fdatasync(dir: &Path, bytes: &[u8], n: usize, samples: &mut Vec<f64>) {
    let mut file = std::fs::File::create(dir.join("probe")).expect("probe file");
    for _ in 0..n {
        let t = Instant::now();
        file.write_all(bytes).expect("write");
        file.sync_data().expect("sync");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
}

/// The bytes one group of 16 appends writes: 16 `tool/call` lines as the bench sends them.
fn group_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    for n in 0..16 {
        let event = SessionEvent {
            at: None,
            seq: 100_000 + n,
            step: 1,
            body: call_body(n as usize, 10_000 + n),
        };
        serde_json::to_writer(&mut out, &event).expect("encode");
        out.push(b'\n');
    }
    out
}

/// A bare group-commit loop on the same runtime and disk, for reference: 16 tasks hand a
/// oneshot to a queue, one task takes whatever is queued, writes a line per append, syncs
/// through the blocking pool and answers them. No actor, no JSON, no checks: what this
/// machine's runtime and disk leave for any writer that syncs off the async workers.
async fn bare_group_commit_rate(dir: &Path, time: Duration) -> f64 {
    use std::sync::{Arc, Mutex};
    use tokio::sync::{Notify, oneshot};
    struct Queue {
        acks: Mutex<Vec<oneshot::Sender<()>>>,
        ring: Notify,
    }
    let queue = Arc::new(Queue {
        acks: Mutex::new(Vec::new()),
        ring: Notify::new(),
    });
    let file = Arc::new(Mutex::new(
        std::fs::File::create(dir.join("bare.jsonl")).expect("bare log"),
    ));
    let appenders: Vec<_> = (0..16)
        .map(|_| {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                loop {
                    let (tx, rx) = oneshot::channel();
                    let first = {
                        let mut acks = queue.acks.lock().expect("queue");
                        acks.push(tx);
                        acks.len() == 1
                    };
                    if first {
                        queue.ring.notify_one();
                    }
                    if rx.await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    let mut events = 0u64;
    let line = [b'y'; 200];
    while start.elapsed() < time {
        queue.ring.notified().await;
        for _ in 0..64 {
            if queue.acks.lock().expect("queue").len() >= 16 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let acks = std::mem::take(&mut *queue.acks.lock().expect("queue"));
        let bytes: Vec<u8> = acks.iter().flat_map(|_| line).collect();
        let file = Arc::clone(&file);
        tokio::task::spawn_blocking(move || {
            let mut file = file.lock().expect("file");
            file.write_all(&bytes).expect("write");
            file.sync_data().expect("sync");
        })
        .await
        .expect("sync task");
        events += acks.len() as u64;
        for ack in acks {
            let _ = ack.send(());
        }
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    for task in appenders {
        task.abort();
    }
    rate
}

/// Rounds of the batch16 run: the disk is probed right before and after each, so a drift of
/// its sync latency between rounds does not skew the share.
const BATCH16_ROUNDS: usize = 6;
const BATCH16_ROUND: Duration = Duration::from_millis(250);

/// What the batch16 rounds measured.
struct Batch16 {
    events_per_s: f64,
    events_per_sync: f64,
    /// Every small (160-byte) probe, and every group-sized one.
    small: Vec<f64>,
    group: Vec<f64>,
    /// Per round: the rate's share of `16 / p50` of that round's small probes, and of its
    /// group-sized probes.
    share_small: Vec<f64>,
    share_group: Vec<f64>,
    /// Per round: the bare loop's share of `16 / p50` of the small probes.
    share_bare: Vec<f64>,
}

async fn batch16(dir: &Path) -> Batch16 {
    let (log, _) = SessionLog::open_file(dir.join("batch16.jsonl"), Durability::Batch, None)
        .await
        .expect("open the log");
    let small_line = [b'x'; 160];
    let group_line = group_bytes();
    let mut out = Batch16 {
        events_per_s: 0.0,
        events_per_sync: 0.0,
        small: Vec::new(),
        group: Vec::new(),
        share_small: Vec::new(),
        share_group: Vec::new(),
        share_bare: Vec::new(),
    };
    let mut rates = 0.0;
    for _ in 0..BATCH16_ROUNDS {
        let (mut small, mut group) = (Vec::new(), Vec::new());
        probe_fdatasync(dir, &small_line, 50, &mut small);
        probe_fdatasync(dir, &group_line, 50, &mut group);
        let rate = append_rate_for(&log, 16, 1, BATCH16_ROUND).await;
        let bare = bare_group_commit_rate(dir, BATCH16_ROUND).await;
        probe_fdatasync(dir, &small_line, 50, &mut small);
        probe_fdatasync(dir, &group_line, 50, &mut group);
        rates += rate;
        let (small_p50, _) = fdatasync_us(small.clone());
        let (group_p50, _) = fdatasync_us(group.clone());
        out.share_small
            .push(rate / (16.0 * 1e6 / small_p50) * 100.0);
        out.share_group
            .push(rate / (16.0 * 1e6 / group_p50) * 100.0);
        out.share_bare.push(bare / (16.0 * 1e6 / small_p50) * 100.0);
        out.small.extend(small);
        out.group.extend(group);
    }
    let stats = log.stats();
    log.close().await.expect("close the log");
    out.events_per_s = rates / BATCH16_ROUNDS as f64;
    out.events_per_sync = stats.events as f64 / stats.syncs.max(1) as f64;
    out
}

/// Median and mean of the probes (the mean is what bounds a syncing writer's throughput).
fn fdatasync_us(mut samples: Vec<f64>) -> (f64, f64) {
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    (quantile(&mut samples, 0.5), mean)
}

fn append() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let b = "session/append";
    rt.block_on(async {
        let log = SessionLog::memory().await.expect("memory log");
        let rate = append_rate(&log, 16, 1).await;
        log.close().await.expect("close");
        emit(b, "memory_events_per_s", rate, "events/s");
        let log = SessionLog::memory().await.expect("memory log");
        let rate = append_rate(&log, 16, 8).await;
        log.close().await.expect("close");
        emit(b, "memory_burst8_events_per_s", rate, "events/s");
    });
    // The same 16 appenders on one thread: what is left when no task wakes another worker.
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    one.block_on(async {
        let log = SessionLog::memory().await.expect("memory log");
        let rate = append_rate(&log, 16, 1).await;
        log.close().await.expect("close");
        emit(b, "memory_1thread_events_per_s", rate, "events/s");
    });
    let batch16 = rt.block_on(async {
        let (none, _) = file_rate(dir.path(), "none.jsonl", Durability::None, 16).await;
        emit(b, "file_none_events_per_s", none, "events/s");
        let (batch1, _) = file_rate(dir.path(), "batch1.jsonl", Durability::Batch, 1).await;
        emit(b, "file_batch1_events_per_s", batch1, "events/s");
        let batch16 = batch16(dir.path()).await;
        emit(
            b,
            "file_batch16_events_per_s",
            batch16.events_per_s,
            "events/s",
        );
        emit(
            b,
            "file_batch16_events_per_sync",
            batch16.events_per_sync,
            "events",
        );
        let (always, _) = file_rate(dir.path(), "always.jsonl", Durability::Always, 16).await;
        emit(b, "file_always_events_per_s", always, "events/s");
        batch16
    });
    let (p50, mean) = fdatasync_us(batch16.small);
    emit(b, "fdatasync_p50_us", p50, "us");
    emit(b, "fdatasync_mean_us", mean, "us");
    let (group_p50, _) = fdatasync_us(batch16.group);
    emit(b, "fdatasync_group_p50_us", group_p50, "us");
    // 16 appenders, each awaiting its ack, get at most 16 appends per sync: what the disk
    // allows is 16 / fdatasync_p50 (goal: batch16 reaches >= 70 % of it). The median over the
    // rounds, each against the probes around it.
    let mut share = batch16.share_small;
    emit(
        b,
        "file_batch16_share_of_disk_pct",
        quantile(&mut share, 0.5),
        "%",
    );
    let mut share = batch16.share_group;
    emit(
        b,
        "file_batch16_share_of_group_sync_pct",
        quantile(&mut share, 0.5),
        "%",
    );
    let mut share = batch16.share_bare;
    emit(
        b,
        "bare_batch16_share_of_disk_pct",
        quantile(&mut share, 0.5),
        "%",
    );
}

struct LogWriter {
    out: std::io::BufWriter<std::fs::File>,
    seq: u64,
}

impl LogWriter {
    fn put(&mut self, step: u64, body: EventBody) -> u64 {
        self.seq += 1;
        let line = SessionEvent {
            at: None,
            seq: self.seq,
            step,
            body,
        }
        .to_json_line();
        self.out.write_all(line.as_bytes()).expect("write");
        self.out.write_all(b"\n").expect("write");
        self.seq
    }
}

/// Writes a log of `events` events: steps of eight parallel calls, their results in another
/// order, and one deferred context message.
pub(crate) fn write_log(path: &Path, events: u64) {
    let file = std::fs::File::create(path).expect("log file");
    let mut w = LogWriter {
        out: std::io::BufWriter::new(file),
        seq: 0,
    };
    let text = "fn main() {\n    println!(\"hello from the file this result shows\");\n}\n";
    let mut step = 0u64;
    while w.seq + 17 <= events {
        step += 1;
        let mut calls = Vec::new();
        for i in 0..8 {
            let id = format!("call_{step}_{i}");
            let s = w.put(
                step,
                EventBody::ToolCall(ToolCallData {
                    call_id: id.clone(),
                    name: "read_file".into(),
                    arguments: json!({ "path": format!("src/module_{i}.rs"), "limit": 200 }),
                    arguments_text: None,
                    agent: "main".into(),
                    parent: None,
                }),
            );
            calls.push((id, s));
        }
        for (id, s) in calls.into_iter().rev() {
            w.put(
                step,
                EventBody::result(
                    ToolResultData {
                        started_at: None,
                        call_id: id,
                        message: vec![ContentBlock::text(text)],
                        error: None,
                        meta: None,
                    },
                    s,
                ),
            );
        }
        w.put(
            step,
            EventBody::UserMessage(UserMessageData {
                content: "The file was changed since you last read it.".into(),
                origin: format!("call_{step}_0"),
            }),
        );
    }
    while w.seq < events {
        w.put(
            step,
            EventBody::UserMessage(UserMessageData {
                content: "filler".into(),
                origin: "x".into(),
            }),
        );
    }
    w.out.flush().expect("flush");
}

/// The baseline: every line parsed into a `serde_json::Value`, nothing else.
fn parse_only(path: &Path) -> usize {
    let bytes = std::fs::read(path).expect("read");
    let mut n = 0;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).expect("a JSON line");
        n += usize::from(v.is_object());
    }
    n
}

fn replay() {
    const EVENTS: u64 = 1_000_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("replay.jsonl");
    write_log(&path, EVENTS);
    let size = std::fs::metadata(&path).expect("log size").len();
    let mut replays = Vec::new();
    let mut parses = Vec::new();
    // Warms the page cache.
    assert_eq!(parse_only(&path) as u64, EVENTS);
    for _ in 0..3 {
        let t = Instant::now();
        let transcript = dsh_session::replay::replay_file(&path).expect("replay");
        replays.push(t.elapsed().as_secs_f64());
        assert!(transcript.steps.len() > 50_000);
        drop(transcript);
        let t = Instant::now();
        assert_eq!(parse_only(&path) as u64, EVENTS);
        parses.push(t.elapsed().as_secs_f64());
    }
    let replay_s = quantile(&mut replays, 0.5);
    let parse_s = quantile(&mut parses, 0.5);
    let b = "session/replay";
    emit(b, "replay_1m_s", replay_s, "s");
    emit(b, "parse_1m_s", parse_s, "s");
    emit(b, "replay_to_parse_ratio", replay_s / parse_s, "ratio");
    emit(b, "log_mb", size as f64 / 1e6, "MB");
}
