//! The PostgreSQL backends of one process share one pool per database: many sessions open at
//! once (more than the pool has connections) all write, none waits forever for a
//! connection, and the process keeps at most `POOL_SIZE` connections to the database, however
//! many sessions it holds; a session that closes and opens again reuses them.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_session::postgres::{LeaseOptions, POOL_SIZE};
use dsh_session::{Durability, SessionLog};
use std::time::Duration;

/// A database of this test's own (so the connections counted are this process's).
async fn fresh_database(url: &str) -> (String, String) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let db = format!("dsh_pool_{}", std::process::id());
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    (format!("{base}/{db}"), db)
}

/// How many connections the server has to database `db`.
async fn connections(url: &str, db: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
            &[&db],
        )
        .await
        .unwrap()
        .get(0)
}

fn lease() -> LeaseOptions {
    LeaseOptions {
        lease: Duration::from_secs(30),
        wait: Duration::ZERO,
        owner: "node-a".into(),
        watch: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sessions_of_one_process_share_one_bounded_pool() {
    let url = pg::url();
    let (fresh, db) = fresh_database(&url).await;
    let count = 3 * POOL_SIZE;
    let opened: Vec<_> = (0..count)
        .map(|n| {
            let fresh = fresh.clone();
            tokio::spawn(async move {
                let id = pg::session_id(&format!("pool{n}"));
                let (log, _) =
                    SessionLog::open_postgres(&fresh, &id, Durability::Batch, lease(), None)
                        .await
                        .unwrap();
                (id, log)
            })
        })
        .collect();
    let mut logs = Vec::new();
    for task in opened {
        logs.push(task.await.unwrap());
    }
    // Every session writes at once: none waits forever for one of the pool's connections.
    let writes: Vec<_> = logs
        .iter()
        .map(|(_, log)| {
            let log = log.clone();
            tokio::spawn(async move {
                let seq = log.append(1, call_body("a")).await?;
                log.append(1, result_body("a", seq)).await?;
                log.flush().await
            })
        })
        .collect();
    let written = tokio::time::timeout(Duration::from_secs(60), async {
        for write in writes {
            write.await.unwrap().unwrap();
        }
    })
    .await;
    assert!(written.is_ok(), "the sessions' writes did not end");
    let held = connections(&url, &db).await;
    assert!(
        held <= POOL_SIZE as i64,
        "{count} sessions hold {held} connections, more than the pool's {POOL_SIZE}"
    );

    // Closed and opened again (a fleet's node picking a session up): the connections are
    // reused, none more.
    for (_, log) in &logs {
        log.close().await.unwrap();
    }
    drop(logs);
    let id = pg::session_id("again");
    for i in 0..5 {
        let (log, recovery) =
            SessionLog::open_postgres(&fresh, &id, Durability::Batch, lease(), None)
                .await
                .unwrap();
        // Each open recovers the call the one before left open.
        assert_eq!(recovery.closed_calls.len(), usize::from(i > 0));
        log.append(recovery.next_step, call_body(&format!("b{i}")))
            .await
            .unwrap();
        log.close().await.unwrap();
    }
    let held = connections(&url, &db).await;
    assert!(held <= POOL_SIZE as i64, "{held} connections");
}
