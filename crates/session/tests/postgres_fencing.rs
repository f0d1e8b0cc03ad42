//! The PostgreSQL backend's single writer: a lease with an epoch, checked by every commit; a
//! writer whose lease was taken over writes nothing more, even when its session was deleted
//! and made again; the lease is renewed while the writer lives; a database that goes away, or
//! freezes, fails appends cleanly and in bounded time, without losing what was acknowledged;
//! and a database crash under `--durability none` never loses a `tool/call`.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::SessionEvent;
use dsh_session::check::check;
use dsh_session::postgres::{LeaseOptions, PgStore};
use dsh_session::{Durability, SessionError, SessionLog};
use std::time::Duration;

fn lease(ms: u64, owner: &str) -> LeaseOptions {
    LeaseOptions {
        lease: Duration::from_millis(ms),
        wait: Duration::ZERO,
        owner: owner.into(),
        watch: Default::default(),
    }
}

async fn sql(url: &str, statement: &str, id: &str) -> u64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client.execute(statement, &[&id]).await.unwrap()
}

async fn stored(url: &str, id: &str) -> Vec<SessionEvent> {
    PgStore::connect(url, false)
        .await
        .unwrap()
        .read_events(id)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_lease_was_taken_over_is_refused_and_writes_nothing() {
    let url = pg::url();
    let id = pg::session_id("fenced");
    let (old, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "old"), None)
            .await
            .unwrap();
    let c = old.append(1, call_body("a")).await.unwrap();
    old.append(1, result_body("a", c)).await.unwrap();
    old.append(2, call_body("b")).await.unwrap();

    // The old writer is paused past its lease (here: its lease is made to have run out).
    sql(
        &url,
        "UPDATE dsh_sessions SET lease_until = clock_timestamp() - interval '1 second' WHERE id = $1",
        &id,
    )
    .await;
    let (new, rec) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "new"), None)
            .await
            .unwrap();
    assert_eq!(rec.closed_calls, vec!["b".to_string()]);
    assert_eq!((rec.next_seq, rec.next_step), (5, 3));

    // The old writer wakes up: its next append is refused by the epoch, and so is every one
    // after it.
    let err = old.append(2, result_body("b", 3)).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Poisoned(why) if why.contains("taken over") && why.contains("new")),
        "{err}"
    );
    assert!(matches!(
        old.append(3, user_body("late", "c")).await,
        Err(SessionError::Poisoned(_))
    ));
    assert!(old.close().await.is_err());

    let c = new.append(3, call_body("c")).await.unwrap();
    assert_eq!(c, 5);
    new.append(3, result_body("c", c)).await.unwrap();
    new.close().await.unwrap();

    let events = stored(&url, &id).await;
    assert_eq!(events.len(), 6);
    check(&events).unwrap();
    // Nothing of the old writer after the takeover: seq 4 is recovery's ABORTED result.
    assert_eq!(
        events.iter().map(|e| e.body.type_str()).collect::<Vec<_>>(),
        [
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result"
        ]
    );
    let late = events.iter().any(|e| e.to_json_line().contains("late"));
    assert!(!late, "a fenced append reached the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_writer_renews_its_lease_and_a_second_one_waits_then_gives_up() {
    let url = pg::url();
    let id = pg::session_id("renewal");
    let (first, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(300, "first"), None)
            .await
            .unwrap();
    first.append(1, user_body("a", "c")).await.unwrap();
    // Well past the lease: renewed in the background.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let waiting = LeaseOptions {
        wait: Duration::from_millis(600),
        ..lease(300, "second")
    };
    let started = std::time::Instant::now();
    let err = SessionLog::open_postgres(&url, &id, Durability::Batch, waiting, None)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(550),
        "it did not wait"
    );
    let shown = err.to_string();
    assert!(shown.contains("in use by first, lease until 20"), "{shown}");
    first.append(1, user_body("b", "c")).await.unwrap();
    first.close().await.unwrap();
    assert_eq!(stored(&url, &id).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_waiting_for_the_lease_gets_it_once_the_first_closes() {
    let url = pg::url();
    let id = pg::session_id("handover");
    let (first, _) =
        SessionLog::open_postgres(&url, &id, Durability::Always, lease(5_000, "first"), None)
            .await
            .unwrap();
    first.append(1, user_body("a", "c")).await.unwrap();
    let url2 = url.clone();
    let id2 = id.clone();
    let second = tokio::spawn(async move {
        let waiting = LeaseOptions {
            wait: Duration::from_secs(10),
            ..lease(5_000, "second")
        };
        SessionLog::open_postgres(&url2, &id2, Durability::Always, waiting, None).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.close().await.unwrap();
    let (second, rec) = second.await.unwrap().unwrap();
    assert_eq!(rec.next_seq, 2);
    assert_eq!(second.append(2, user_body("b", "c")).await.unwrap(), 2);
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durability_commits_and_batch_groups_concurrent_appends() {
    let url = pg::url();
    for durability in [Durability::Always, Durability::Batch, Durability::None] {
        let id = pg::session_id("durability");
        let (log, _) = SessionLog::open_postgres(&url, &id, durability, lease(5_000, "d"), None)
            .await
            .unwrap();
        let pending: Vec<_> = (0..64)
            .map(|i| log.send(1, user_body(&format!("m{i}"), "c")))
            .collect();
        let mut seqs = Vec::new();
        for p in pending {
            seqs.push(p.await.unwrap());
        }
        assert_eq!(seqs, (1..=64).collect::<Vec<_>>());
        let stats = log.stats();
        log.close().await.unwrap();
        assert_eq!(stats.events, 64);
        match durability {
            Durability::Always => assert_eq!(stats.commits, 64),
            _ => assert!(stats.commits < 64, "{durability:?}: {stats:?}"),
        }
        assert_eq!(stored(&url, &id).await.len(), 64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_a_session_loses_nothing_acknowledged_and_runs_nothing_unacknowledged()
 {
    let dir = pg::cluster_dir("restart");
    let url = pg::start_cluster(&dir);
    let id = pg::session_id("restart");
    let (log, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "w"), None)
            .await
            .unwrap();
    let c = log.append(1, call_body("a")).await.unwrap();
    log.append(1, result_body("a", c)).await.unwrap();

    pg::stop_cluster(&dir);
    // The call's `tool/call` is not committed: the append fails, so the call must not run.
    let err = log.append(2, call_body("lost")).await.unwrap_err();
    assert!(!matches!(err, SessionError::Poisoned(_)), "{err}");
    pg::start_cluster(&dir);
    // The writer reconnects (after its backoff) and goes on.
    let mut next = None;
    for _ in 0..100 {
        match log.append(2, call_body("b")).await {
            Ok(seq) => {
                next = Some(seq);
                break;
            }
            Err(SessionError::Poisoned(why)) => panic!("poisoned: {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let b = next.expect("the writer never reconnected");
    assert_eq!(b, 3, "the failed append's seq was given back");

    // A `tool/result` that cannot be committed poisons the writer.
    pg::stop_cluster(&dir);
    assert!(log.append(2, result_body("b", b)).await.is_err());
    pg::start_cluster(&dir);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = log.append(3, user_body("after", "c")).await.unwrap_err();
    assert!(matches!(after, SessionError::Poisoned(_)), "{after}");
    assert!(
        log.close().await.is_err(),
        "a poisoned writer closes with its failure"
    );

    // Reopened (its lease made to run out, as after the node's death), the session holds every
    // acknowledged event, nothing unacknowledged, and `b` is closed as ABORTED.
    sql(
        &url,
        "UPDATE dsh_sessions SET lease_until = NULL WHERE id = $1",
        &id,
    )
    .await;
    let (log, rec) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "w2"), None)
            .await
            .unwrap();
    assert_eq!(rec.closed_calls, vec!["b".to_string()]);
    let events = log.snapshot().await.unwrap();
    log.close().await.unwrap();
    check(&events).unwrap();
    let text: Vec<String> = events.iter().map(SessionEvent::to_json_line).collect();
    assert_eq!(events.len(), 4, "{text:#?}");
    assert!(!text.iter().any(|l| l.contains("lost")), "{text:#?}");
    pg::stop_cluster(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_deleted_and_made_again_never_repeats_a_fencing_token() {
    let url = pg::url();
    let id = pg::session_id("recreated");
    let (old, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "old"), None)
            .await
            .unwrap();
    // The old writer is paused past its lease, and `dsh sessions --prune-older-than` deletes
    // the session; a new writer makes a session of the same id.
    sql(
        &url,
        "UPDATE dsh_sessions SET lease_until = clock_timestamp() - interval '1 second',
             updated_at = clock_timestamp() - interval '3 days' WHERE id = $1",
        &id,
    )
    .await;
    let store = PgStore::connect(&url, false).await.unwrap();
    assert!(store.prune_older_than(2).await.unwrap().contains(&id));
    let (new, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "new"), None)
            .await
            .unwrap();

    // The old writer wakes while the new session's next seq is the one it expects.
    let err = old.append(1, call_body("a1")).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Poisoned(why) if why.contains("taken over")),
        "{err}"
    );
    let b = new.append(1, call_body("b1")).await.unwrap();
    new.append(1, result_body("b1", b)).await.unwrap();
    new.close().await.unwrap();

    let events = stored(&url, &id).await;
    check(&events).unwrap();
    let text: Vec<String> = events.iter().map(SessionEvent::to_json_line).collect();
    assert_eq!(events.len(), 2, "{text:#?}");
    assert!(!text.iter().any(|l| l.contains("a1")), "{text:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_past_ten_minutes_is_refused() {
    let url = pg::url();
    let id = pg::session_id("century");
    let err = SessionLog::open_postgres(
        &url,
        &id,
        Durability::Batch,
        lease(9_999_999_999_999, "forever"),
        None,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("at most 600000 ms"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_fences_its_owner_and_frees_the_session_at_once() {
    let url = pg::url();
    let id = pg::session_id("released");
    let (old, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "dead"), None)
            .await
            .unwrap();
    old.append(1, user_body("a", "c")).await.unwrap();
    let store = PgStore::connect(&url, false).await.unwrap();
    assert_eq!(
        store.release(&id).await.unwrap(),
        dsh_session::postgres::Released::Ended {
            owner: Some("dead".into())
        }
    );
    assert_eq!(
        store.release("no-such-session").await.unwrap(),
        dsh_session::postgres::Released::NoSuchSession
    );
    let (new, _) =
        SessionLog::open_postgres(&url, &id, Durability::Batch, lease(60_000, "next"), None)
            .await
            .unwrap();
    let err = old.append(1, user_body("late", "c")).await.unwrap_err();
    assert!(matches!(err, SessionError::Poisoned(_)), "{err}");
    new.append(1, user_body("b", "c")).await.unwrap();
    new.close().await.unwrap();
    let text: Vec<String> = stored(&url, &id)
        .await
        .iter()
        .map(SessionEvent::to_json_line)
        .collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(!text.iter().any(|l| l.contains("late")), "{text:#?}");
}

/// A TCP relay to the server that can be frozen: while frozen it passes nothing on, in either
/// direction, as a paused server (`SIGSTOP`, a frozen VM) whose host still holds the socket.
struct Relay {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(upstream: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16384];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            // Bounded: a test never holds it frozen for a minute.
                            for _ in 0..6000 {
                                if !flag.load(Ordering::SeqCst) {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay { port, frozen }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_database_fails_an_append_within_the_round_trip_bound() {
    let url = pg::url();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports()[0];
    let relay = Relay::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let relayed = url.replace(&format!(":{port}/"), &format!(":{}/", relay.port));
    let id = pg::session_id("frozen");
    // A lease of 1 s: every round trip is bounded by 1 s.
    let (log, _) =
        SessionLog::open_postgres(&relayed, &id, Durability::Batch, lease(1_000, "w"), None)
            .await
            .unwrap();
    log.append(1, user_body("before", "c")).await.unwrap();

    relay.freeze(true);
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        log.append(1, user_body("during", "c")),
    )
    .await;
    let waited = started.elapsed();
    relay.freeze(false);
    let answer = answer.expect("an append to a frozen database never ended");
    assert!(answer.is_err(), "an append to a frozen database succeeded");
    assert!(
        waited < Duration::from_secs(5),
        "the append failed only after {waited:?}"
    );
    let _ = log.close().await;

    // What was acknowledged is there; nothing that failed is.
    let text: Vec<String> = stored(&url, &id)
        .await
        .iter()
        .map(SessionEvent::to_json_line)
        .collect();
    assert!(text[0].contains("before"), "{text:#?}");
    assert!(!text.iter().any(|l| l.contains("during")), "{text:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_under_durability_none_never_loses_a_tool_call() {
    let dir = pg::cluster_dir("crash-none");
    let url = pg::start_cluster(&dir);
    // The server's WAL writer waits 10 s between flushes: an asynchronous commit stays in
    // memory that long, and the crash below loses it.
    {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        for statement in [
            "ALTER SYSTEM SET wal_writer_delay = '10s'",
            "SELECT pg_reload_conf()",
        ] {
            client.batch_execute(statement).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = pg::session_id("crash-none");
    let (log, _) = SessionLog::open_postgres(&url, &id, Durability::None, lease(60_000, "w"), None)
        .await
        .unwrap();
    let a = log.append(1, call_body("a")).await.unwrap();
    log.append(1, result_body("a", a)).await.unwrap();
    // Acknowledged: under write-ahead, the call may run now.
    log.append(2, call_body("b")).await.unwrap();
    pg::crash_cluster(&dir);
    pg::start_cluster(&dir);
    drop(log);

    let events = stored(&url, &id).await;
    let text: Vec<String> = events.iter().map(SessionEvent::to_json_line).collect();
    let calls: Vec<&String> = text.iter().filter(|l| l.contains("tool/call")).collect();
    assert_eq!(
        calls.len(),
        2,
        "a crash lost an acknowledged tool/call: {text:#?}"
    );
    pg::stop_cluster(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}
