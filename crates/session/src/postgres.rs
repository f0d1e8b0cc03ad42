//! The PostgreSQL backend: session logs in a database that any node reaches, with one writer
//! per session enforced by a lease and its fencing token (the epoch).
//!
//! # Schema
//! Two tables, created by versioned migrations that [`PgStore::connect`] runs (under an
//! advisory lock, so nodes starting together migrate once): `dsh_sessions` (one row a
//! session: its lease, its epoch, the seq the next event takes) and `dsh_events` (one row an
//! event: `seq` and `step` as `BIGINT`, and `line`, the event's exact JSON Lines text, so an
//! export is byte for byte what a file log of the same run holds).
//!
//! # Lease and fencing
//! Opening a session for writing takes its lease: in one transaction that locks the session's
//! row, a lease that is still running (by the database's clock, so nodes' clocks do not matter)
//! is refused with [`SessionError::Leased`], and otherwise the epoch goes up by one and the
//! lease is this writer's until `now + lease`. Every commit updates the session's row
//! `WHERE epoch = <ours>` in the same statement (or transaction) that inserts the events: a
//! writer whose lease was taken over matches no row, writes nothing, and is poisoned. The row
//! lock orders a takeover and a commit: a commit that got in first is in the log the new owner
//! reads; one that comes after is refused. A live writer renews its lease in the background
//! (every third of the lease).
//!
//! # Failures
//! A commit that fails (the database went away) leaves the commit in doubt: it may have landed
//! before the connection broke. The next commit first deletes, under the same epoch check,
//! whatever lies at or after the seq this writer last acknowledged, so the log holds exactly
//! what was acknowledged, as the [`LogBackend`] contract asks. Connections are made again by
//! the pool; after a failure, commits fail at once for a backoff that doubles up to two seconds.
//!
//! # The sync/async bridge
//! [`LogBackend`] is synchronous and the writer calls it from tokio's blocking pool. The
//! backends of one process to one database share a *driver*: one OS thread running a
//! current-thread tokio runtime that holds the connection pool (at most [`POOL_SIZE`]
//! connections), runs each request a backend sends it (a boxed future, answered over a
//! standard channel) as a task of its own, and runs the lease renewals beside them. So the
//! driver's connections never depend on the caller's runtime (a writer's runtime that stalls
//! cannot stall the renewal), a synchronous caller never needs `block_on` inside a runtime, and
//! a node that opens a session (a fleet's node picking one up) reuses its connections, its
//! schema already checked, instead of connecting again. A backend holds a connection only for
//! each operation (a commit, a renewal, taking the lease), never while it waits, so any number
//! of sessions share the pool; an operation that finds every connection busy for the round-trip
//! limit fails with an error that says so, as a lost database does.

use crate::backend::{Durability, LogBackend};
use crate::error::SessionError;
use crate::recover::{self, Recovery, Tail, Tracker};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dsh_core::SessionEvent;
use futures::StreamExt;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// The migrations, in order: each is applied once, in one transaction with its version row.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE dsh_sessions (
        id TEXT PRIMARY KEY,
        epoch BIGINT NOT NULL DEFAULT 0,
        owner TEXT,
        lease_until TIMESTAMPTZ,
        next_seq BIGINT NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
        created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE dsh_events (
        session_id TEXT NOT NULL REFERENCES dsh_sessions (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL CHECK (seq >= 1),
        step BIGINT NOT NULL CHECK (step >= 0),
        epoch BIGINT NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE INDEX dsh_sessions_updated_at ON dsh_sessions (updated_at);",
    ),
    // The fencing token comes from one counter for the whole store, so it never repeats for
    // a session id, even after the session is deleted and made again. It starts past every
    // epoch ever given: each was taken in a transaction of its own, so none exceeds the
    // transaction counter.
    (
        2,
        "CREATE TABLE dsh_fence (
            only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
            last_epoch BIGINT NOT NULL
        );
        INSERT INTO dsh_fence (last_epoch)
            SELECT greatest(coalesce(max(epoch), 0), txid_current()) FROM dsh_sessions;",
    ),
];

/// The schema version this dsh writes and reads (the last migration's).
pub const SCHEMA_VERSION: i32 = 2;
const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].0 == SCHEMA_VERSION);

/// An arbitrary constant: the advisory lock that serializes migrations across nodes.
const MIGRATION_LOCK: i64 = 0x6473_685f_6d69_6772;

/// The longest backoff after a failed commit.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The longest lease a writer may take: a writer that dies holding one locks its session out
/// for this long at most (`dsh sessions --release` ends it sooner).
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// The shortest and longest bound on one round trip to the database (see
/// [`round_trip_limit`]).
const ROUND_TRIP_RANGE: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(10));

/// How long one round trip to the database (a commit, a lease renewal, taking the lease) may
/// take before the connection is dropped and the operation fails: the lease, kept between 2
/// and 10 seconds. A frozen server answers nothing and its host still answers keepalives, so
/// only a deadline on the client ends the wait; a commit past it is in doubt.
pub fn round_trip_limit(lease: Duration) -> Duration {
    lease.clamp(ROUND_TRIP_RANGE.0, ROUND_TRIP_RANGE.1)
}

/// How a writer takes and keeps a session's lease.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// How long a lease lasts without renewal; a writer renews every third of it.
    pub lease: Duration,
    /// How long opening waits for another writer's lease to end before it fails with
    /// [`SessionError::Leased`] (zero: fail at once).
    pub wait: Duration,
    /// Who this writer is, as shown to a writer that finds the lease held.
    pub owner: String,
    /// Told when this writer loses its lease (see [`LeaseWatch`]).
    pub watch: LeaseWatch,
}

/// Tells a session's owner that its lease is lost, so it stops its tools: fencing keeps a
/// writer that lost its lease out of the log, but a tool it started runs on (a frozen owner's
/// tools resume the instant it does). The backend marks the lease lost when its local
/// watchdog sees the last successful renewal older than the lease less a margin (on
/// `CLOCK_BOOTTIME`, which counts time the machine was suspended), when a renewal finds the
/// lease taken, and when an append is refused by the fence. Clones share one state.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    lost: Arc<tokio::sync::watch::Sender<Option<String>>>,
}

impl Default for LeaseWatch {
    fn default() -> Self {
        LeaseWatch {
            lost: Arc::new(tokio::sync::watch::channel(None).0),
        }
    }
}

impl LeaseWatch {
    /// Why the lease was lost, once it is.
    pub fn lost_because(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// Waits until the lease is lost; answers why.
    pub async fn lost(&self) -> String {
        let mut rx = self.lost.subscribe();
        let why = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|why| why.clone());
        match why {
            Some(why) => why,
            // The sender lives in `self`: never dropped while this waits.
            None => std::future::pending().await,
        }
    }

    fn mark(&self, why: impl Into<String>) {
        let why = why.into();
        self.lost.send_if_modified(|state| {
            if state.is_none() {
                tracing::error!(reason = %why, "the session's lease is lost");
                *state = Some(why);
                true
            } else {
                false
            }
        });
    }
}

/// Now on `CLOCK_BOOTTIME`: like the monotonic clock, but counting time suspended.
fn boot_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions::with_lease(Duration::from_secs(5))
    }
}

impl LeaseOptions {
    /// A lease of `lease`, waited for up to twice its length, owned by this host and process.
    pub fn with_lease(lease: Duration) -> LeaseOptions {
        LeaseOptions {
            lease,
            wait: lease * 2,
            owner: default_owner(),
            watch: LeaseWatch::default(),
        }
    }
}

/// `pid PID on HOST`, naming this process to other nodes. Never `host:port`: a node of a fleet
/// forwards an ask's answer (with the client's token) to a lease owner that is an address, so
/// an owner that is not a node must not read as one.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("pid {} on {host}", std::process::id())
}

/// One session as [`PgStore::list`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session's id.
    pub id: String,
    /// Events in its log.
    pub events: u64,
    /// Its epoch: the fencing token of its last writer (drawn from a store-wide counter).
    pub epoch: u64,
    /// The writer holding its lease now, if any.
    pub holder: Option<String>,
    /// When its log last changed (UTC, RFC 3339).
    pub updated_at: String,
}

fn db_error(context: impl Into<String>, e: &tokio_postgres::Error) -> SessionError {
    // `Display` of a server error is only "db error"; the source says what.
    let message = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    };
    SessionError::Io {
        context: context.into(),
        message,
    }
}

fn pool_error(context: impl Into<String>, e: &deadpool_postgres::PoolError) -> SessionError {
    let message = match e {
        deadpool_postgres::PoolError::Backend(pg) => return db_error(context, pg),
        other => other.to_string(),
    };
    SessionError::Io {
        context: context.into(),
        message,
    }
}

/// The error of an operation that found every connection of the pool busy for `waited`.
fn pool_busy(url_shown: &str, size: usize, waited: Duration) -> SessionError {
    SessionError::Io {
        context: format!("waiting for a connection to {url_shown}"),
        message: format!(
            "all {size} connections this process keeps to the database stayed busy for {} ms \
             (the database is slow or stuck, or more operations ran at once than the pool \
             serves); the operation was given up",
            waited.as_millis()
        ),
    }
}

fn to_i64(n: u64, what: &str) -> Result<i64, SessionError> {
    i64::try_from(n).map_err(|_| SessionError::Refused(format!("{what} {n} is past 2^63 - 1")))
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A connection pool to one database, migrated; the async side of the backend, also used
/// directly by readers (`dsh check`, `replay`, `export`, `sessions`).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    url_shown: Arc<str>,
    round_trip: Duration,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.url_shown)
            .finish()
    }
}

/// The URL without its password, for messages.
fn shown_url(url: &str) -> String {
    crate::secrets::mask_passwords(url)
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`) and brings its
    /// schema up to date. `asynchronous_commit` makes the pool's commits asynchronous
    /// (`synchronous_commit = off`: the `none` durability); lease changes stay synchronous.
    pub async fn connect(url: &str, asynchronous_commit: bool) -> Result<PgStore, SessionError> {
        PgStore::connect_bounded(url, asynchronous_commit, ROUND_TRIP_RANGE.1).await
    }

    /// [`PgStore::connect`], with `round_trip` as the TCP user timeout of every connection
    /// (data unacknowledged that long drops it) and the bound on making one.
    pub async fn connect_bounded(
        url: &str,
        asynchronous_commit: bool,
        round_trip: Duration,
    ) -> Result<PgStore, SessionError> {
        let store = PgStore::pool(url, asynchronous_commit, round_trip)?;
        store.migrate().await?;
        Ok(store)
    }

    /// The pool of [`PgStore::connect_bounded`], its schema left as it is.
    fn connect_unmigrated(url: &str, round_trip: Duration) -> Result<PgStore, SessionError> {
        PgStore::pool(url, false, round_trip)
    }

    /// A pool of connections to `url`; nothing is connected yet.
    fn pool(
        url: &str,
        asynchronous_commit: bool,
        round_trip: Duration,
    ) -> Result<PgStore, SessionError> {
        let url_shown: Arc<str> = shown_url(url).into();
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| SessionError::Io {
            context: format!("reading the database URL {url_shown}"),
            message: format!("{e}"),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(round_trip.min(Duration::from_secs(5)));
        }
        config.tcp_user_timeout(round_trip);
        config.keepalives_idle(round_trip);
        config.keepalives_interval((round_trip / 4).max(Duration::from_secs(1)));
        config.application_name("dsh");
        if asynchronous_commit {
            config.options("-c synchronous_commit=off");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // Waiting for a free connection is bounded as a round trip is: a pool whose every
        // connection is stuck fails the operation clearly rather than hanging it.
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(round_trip.min(Duration::from_secs(5))))
            .wait_timeout(Some(round_trip))
            .build()
            .map_err(|e| SessionError::Io {
                context: format!("setting up connections to {url_shown}"),
                message: e.to_string(),
            })?;
        Ok(PgStore {
            pool,
            url_shown,
            round_trip,
        })
    }

    /// `dsh store migrate`: connects to the database at `url` and brings its schema up to
    /// [`SCHEMA_VERSION`]; answers the version it was at before and the one it is at now.
    /// Every other command migrates only a schema that is behind, so this is needed only to
    /// migrate ahead of time: with a role that may `CREATE`, before nodes whose role has row
    /// rights alone (which cannot migrate) start on a new or upgraded store.
    pub async fn migrate_now(url: &str) -> Result<(i32, i32), SessionError> {
        let store = PgStore::connect_unmigrated(url, ROUND_TRIP_RANGE.1)?;
        let before = {
            let client = store.client().await?;
            store.schema_version(&client).await?
        };
        store.migrate().await?;
        let client = store.client().await?;
        let after = store.schema_version(&client).await?;
        Ok((before, after))
    }

    /// Runs `op` bounded by the round-trip limit: past it, the idle connections are dropped
    /// (the one `op` held, now back in the pool, may be stuck on a frozen server) and the
    /// operation fails as a lost database does.
    async fn bounded<T>(
        &self,
        context: impl Into<String>,
        op: impl Future<Output = Result<T, SessionError>>,
    ) -> Result<T, SessionError> {
        match tokio::time::timeout(self.round_trip, op).await {
            Ok(result) => result,
            Err(_) => {
                self.pool.retain(|_, _| false);
                Err(SessionError::Io {
                    context: context.into(),
                    message: format!(
                        "{} gave no answer within {} ms; the connection was dropped",
                        self.url_shown,
                        self.round_trip.as_millis()
                    ),
                })
            }
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SessionError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => {
                pool_busy(
                    &self.url_shown,
                    self.pool.status().max_size,
                    self.round_trip,
                )
            }
            e => pool_error(format!("connecting to {}", self.url_shown), &e),
        })
    }

    /// The schema version the database is at (0: no dsh tables yet), read without creating
    /// anything, so a role without `CREATE` can ask.
    async fn schema_version(
        &self,
        client: &deadpool_postgres::Object,
    ) -> Result<i32, SessionError> {
        let ctx = || format!("reading the schema version of {}", self.url_shown);
        let exists: bool = client
            .query_one(
                "SELECT to_regclass('dsh_schema_migrations') IS NOT NULL",
                &[],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?
            .get(0);
        if !exists {
            return Ok(0);
        }
        let row = client
            .query_one(
                "SELECT coalesce(max(version), 0) FROM dsh_schema_migrations",
                &[],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        Ok(row.get(0))
    }

    /// Applies the migrations this database lacks; a schema already up to date is only read,
    /// so a role with row rights alone (no `CREATE`) uses dsh.
    async fn migrate(&self) -> Result<(), SessionError> {
        let ctx = || format!("migrating the schema of {}", self.url_shown);
        let mut client = self.client().await?;
        let latest = MIGRATIONS.last().map_or(0, |m| m.0);
        if self.schema_version(&client).await? == latest {
            return Ok(());
        }
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        tx.batch_execute(&format!(
            "SET LOCAL synchronous_commit = on;
             SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
             CREATE TABLE IF NOT EXISTS dsh_schema_migrations (
                 version INTEGER PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
             );"
        ))
        .await
        .map_err(|e| db_error(ctx(), &e))?;
        let row = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM dsh_schema_migrations",
                &[],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        let applied: i32 = row.get(0);
        if applied > latest {
            return Err(SessionError::Io {
                context: ctx(),
                message: format!(
                    "the schema is at version {applied}, newer than this dsh knows ({latest})"
                ),
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > applied) {
            tx.batch_execute(sql)
                .await
                .map_err(|e| db_error(ctx(), &e))?;
            tx.execute(
                "INSERT INTO dsh_schema_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
            tracing::info!(version, db = %self.url_shown, "schema migrated");
        }
        tx.commit().await.map_err(|e| db_error(ctx(), &e))
    }

    /// The stored line of every event of `session`, in seq order (none for an unknown
    /// session), each passed to `each`.
    pub async fn for_each_line(
        &self,
        session: &str,
        mut each: impl FnMut(i64, String) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        let ctx = || format!("reading session {session} from {}", self.url_shown);
        let client = self.client().await?;
        let rows = client
            .query_raw(
                "SELECT seq, line FROM dsh_events WHERE session_id = $1 ORDER BY seq",
                &[&session],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        let mut rows = std::pin::pin!(rows);
        while let Some(row) = rows.next().await {
            let row = row.map_err(|e| db_error(ctx(), &e))?;
            each(row.get(0), row.get(1))?;
        }
        Ok(())
    }

    /// Every event of `session`, parsed and checked to run 1, 2, 3, … (the log's invariants
    /// are [`crate::check`]'s to verify).
    pub async fn read_events(&self, session: &str) -> Result<Vec<SessionEvent>, SessionError> {
        let mut events = Vec::new();
        self.for_each_line(session, |seq, line| {
            events.push(parse_row(events.len(), seq, &line)?);
            Ok(())
        })
        .await?;
        Ok(events)
    }

    /// True when the session has a row (it was opened once, even if it holds no event).
    pub async fn exists(&self, session: &str) -> Result<bool, SessionError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT 1 FROM dsh_sessions WHERE id = $1", &[&session])
            .await
            .map_err(|e| db_error(format!("looking up session {session}"), &e))?;
        Ok(row.is_some())
    }

    /// Every session, by id.
    pub async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, next_seq - 1, epoch,
                        CASE WHEN lease_until > clock_timestamp() THEN owner END,
                        to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
                 FROM dsh_sessions ORDER BY id",
                &[],
            )
            .await
            .map_err(|e| db_error(format!("listing the sessions of {}", self.url_shown), &e))?;
        Ok(rows
            .iter()
            .map(|r| SessionInfo {
                id: r.get(0),
                events: to_u64(r.get(1)),
                epoch: to_u64(r.get(2)),
                holder: r.get(3),
                updated_at: r.get(4),
            })
            .collect())
    }

    /// Deletes the sessions (and their events) not changed for `days` days and not held by a
    /// writer; answers their ids.
    pub async fn prune_older_than(&self, days: u32) -> Result<Vec<String>, SessionError> {
        let client = self.client().await?;
        let days = i32::try_from(days).unwrap_or(i32::MAX);
        let rows = client
            .query(
                "DELETE FROM dsh_sessions
                 WHERE updated_at < clock_timestamp() - make_interval(days => $1)
                   AND (lease_until IS NULL OR lease_until <= clock_timestamp())
                 RETURNING id",
                &[&days],
            )
            .await
            .map_err(|e| db_error(format!("pruning the sessions of {}", self.url_shown), &e))?;
        let mut ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        ids.sort();
        Ok(ids)
    }

    /// Renews the lease of `session` held under `epoch`: 0 rows when it was taken over.
    async fn renew_lease(
        &self,
        session: &str,
        epoch: i64,
        lease: Duration,
    ) -> Result<u64, SessionError> {
        let renewal = async {
            self.client()
                .await?
                .execute(
                    "UPDATE dsh_sessions SET lease_until = clock_timestamp() + make_interval(secs => $3)
                     WHERE id = $1 AND epoch = $2",
                    &[&session, &epoch, &lease.as_secs_f64()],
                )
                .await
                .map_err(|e| db_error("renewing the lease", &e))
        };
        self.bounded("renewing the lease", renewal).await
    }

    /// Who holds the lease of `session` now, and until when (UTC), if anyone does.
    pub async fn live_lease(
        &self,
        session: &str,
    ) -> Result<Option<(String, String)>, SessionError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT coalesce(owner, ''),
                        to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
                 FROM dsh_sessions WHERE id = $1 AND lease_until > clock_timestamp()",
                &[&session],
            )
            .await
            .map_err(|e| db_error(format!("reading the lease of session {session}"), &e))?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// Ends the lease of `session` whatever its owner (one known to be dead): like a
    /// takeover, the session gets a new fencing token, so that owner, should it wake, writes
    /// nothing more; the next writer takes the session at once.
    pub async fn release(&self, session: &str) -> Result<Released, SessionError> {
        let ctx = || format!("releasing the lease of session {session}");
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        let Some(row) = tx
            .query_opt(
                "SELECT owner, coalesce(lease_until > clock_timestamp(), false)
                 FROM dsh_sessions WHERE id = $1 FOR UPDATE",
                &[&session],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?
        else {
            return Ok(Released::NoSuchSession);
        };
        let owner: Option<String> = row.get(0);
        let live: bool = row.get(1);
        tx.execute(
            "WITH f AS (UPDATE dsh_fence SET last_epoch = last_epoch + 1 RETURNING last_epoch)
             UPDATE dsh_sessions SET epoch = f.last_epoch, lease_until = NULL,
                 updated_at = clock_timestamp()
             FROM f WHERE id = $1",
            &[&session],
        )
        .await
        .map_err(|e| db_error(ctx(), &e))?;
        tx.commit().await.map_err(|e| db_error(ctx(), &e))?;
        tracing::warn!(
            session,
            owner = owner.as_deref().unwrap_or(""),
            live,
            "a lease was released by hand; its owner is fenced"
        );
        Ok(Released::Ended {
            owner: owner.filter(|_| live),
        })
    }

    /// Takes the lease of `session` (creating the session when it is new): the new epoch, or
    /// who holds it and until when.
    async fn acquire(
        &self,
        session: &str,
        options: &LeaseOptions,
    ) -> Result<Result<Taken, Held>, SessionError> {
        let ctx = || format!("taking the lease of session {session}");
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        tx.execute(
            "INSERT INTO dsh_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
            &[&session],
        )
        .await
        .map_err(|e| db_error(ctx(), &e))?;
        let row = tx
            .query_one(
                "SELECT coalesce(owner, ''), coalesce(lease_until > clock_timestamp(), false),
                        coalesce(to_char(lease_until AT TIME ZONE 'UTC',
                                         'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), ''),
                        coalesce(extract(epoch FROM lease_until - clock_timestamp()) * 1000, 0)::float8
                 FROM dsh_sessions WHERE id = $1 FOR UPDATE",
                &[&session],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        let previous_owner: String = row.get(0);
        if row.get::<_, bool>(1) {
            let remaining: f64 = row.get(3);
            return Ok(Err(Held {
                owner: row.get(0),
                until: row.get(2),
                remaining: Duration::from_secs_f64((remaining / 1000.0).max(0.0)),
            }));
        }
        // The row lock above comes before the counter's in every path (here and in
        // `release`), so takeovers of different sessions never deadlock.
        let row = tx
            .query_one(
                "WITH f AS (UPDATE dsh_fence SET last_epoch = last_epoch + 1 RETURNING last_epoch)
                 UPDATE dsh_sessions SET epoch = f.last_epoch, owner = $2,
                     lease_until = clock_timestamp() + make_interval(secs => $3),
                     updated_at = clock_timestamp()
                 FROM f WHERE id = $1 RETURNING epoch",
                &[&session, &options.owner, &options.lease.as_secs_f64()],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        let epoch: i64 = row.get(0);
        tx.commit().await.map_err(|e| db_error(ctx(), &e))?;
        Ok(Ok(Taken {
            epoch,
            previous_owner: Some(previous_owner).filter(|o| !o.is_empty()),
        }))
    }

    /// Takes the lease, waiting up to `options.wait` for another writer's to end.
    async fn acquire_waiting(
        &self,
        session: &str,
        options: &LeaseOptions,
    ) -> Result<Taken, SessionError> {
        let deadline = Instant::now() + options.wait;
        loop {
            let attempt = self.acquire(session, options);
            match self
                .bounded(format!("taking the lease of session {session}"), attempt)
                .await?
            {
                Ok(taken) => return Ok(taken),
                Err(held) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(SessionError::Leased {
                            session: session.to_string(),
                            owner: held.owner,
                            until: held.until,
                        });
                    }
                    let pause = held
                        .remaining
                        .clamp(Duration::from_millis(10), Duration::from_millis(100))
                        .min(deadline - now);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// The session's epoch and owner now, to say who fenced a writer.
    async fn current_holder(&self, session: &str) -> Option<(i64, String, i64)> {
        let client = self.client().await.ok()?;
        let row = client
            .query_opt(
                "SELECT epoch, coalesce(owner, ''), next_seq FROM dsh_sessions WHERE id = $1",
                &[&session],
            )
            .await
            .ok()??;
        Some((row.get(0), row.get(1), row.get(2)))
    }
}

/// What [`PgStore::release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The store has no such session.
    NoSuchSession,
    /// The session's lease is ended and its last owner fenced.
    Ended {
        /// Who held a live lease (none when it had already run out).
        owner: Option<String>,
    },
}

/// A lease this writer took.
struct Taken {
    /// Its fencing token.
    epoch: i64,
    /// The writer whose lease ended before (it may have had calls running).
    previous_owner: Option<String>,
}

/// A lease someone else holds.
struct Held {
    owner: String,
    until: String,
    remaining: Duration,
}

fn parse_row(index: usize, seq: i64, line: &str) -> Result<SessionEvent, SessionError> {
    let number = index + 1;
    let event = SessionEvent::from_json_line(line).map_err(|e| SessionError::Corrupt {
        line: number,
        reason: e.to_string(),
    })?;
    if i64::try_from(event.seq).ok() != Some(seq) {
        return Err(SessionError::Corrupt {
            line: number,
            reason: format!("the event says seq {} but is stored as {seq}", event.seq),
        });
    }
    if event.seq != number as u64 {
        return Err(SessionError::Corrupt {
            line: number,
            reason: format!("seq {} where {number} was expected", event.seq),
        });
    }
    Ok(event)
}

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The most connections the backends of one process keep to one database (one driver's pool).
pub const POOL_SIZE: usize = 16;

/// What a driver is shared by: the database, the commit mode, the round-trip limit.
type DriverKey = (String, bool, Duration);

/// The drivers of this process, one per [`DriverKey`], each with its pool (migrated once).
fn drivers() -> &'static std::sync::Mutex<std::collections::HashMap<DriverKey, Arc<Driver>>> {
    static DRIVERS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<DriverKey, Arc<Driver>>>,
    > = std::sync::OnceLock::new();
    DRIVERS.get_or_init(Default::default)
}

/// The driver and pool this process shares for `url` (made, and the schema brought up to
/// date, the first time; a failure leaves nothing behind, so the next open tries again).
fn shared_driver(
    url: &str,
    asynchronous_commit: bool,
    round_trip: Duration,
) -> Result<(Arc<Driver>, PgStore), SessionError> {
    let key = (url.to_string(), asynchronous_commit, round_trip);
    let mut drivers = drivers().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(driver) = drivers.get(&key)
        && let Some(store) = &driver.store
        && !driver.jobs.is_closed()
    {
        return Ok((driver.clone(), store.clone()));
    }
    let mut driver = Driver::start()?;
    let store = PgStore::pool(url, asynchronous_commit, round_trip)?;
    let migrating = store.clone();
    driver.run(async move { migrating.migrate().await })?;
    driver.store = Some(store.clone());
    let driver = Arc::new(driver);
    drivers.insert(key, driver.clone());
    Ok((driver, store))
}

/// The thread that runs the backend's async work (see the module's docs).
struct Driver {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    /// The pool the driver's runtime holds the connections of, once made.
    store: Option<PgStore>,
}

impl Driver {
    fn start() -> Result<Driver, SessionError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SessionError::io("starting the PostgreSQL driver", &e))?;
        let (jobs, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("dsh-postgres".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // Each request is a task: the sessions sharing the driver wait for one
                    // another only for a connection of the pool.
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job);
                    }
                });
                // Ends the renewal and the connections' tasks.
                runtime.shutdown_timeout(Duration::from_millis(100));
            })
            .map_err(|e| SessionError::io("starting the PostgreSQL driver", &e))?;
        // The thread lives as long as the process (a shared driver is never dropped).
        drop(thread);
        Ok(Driver { jobs, store: None })
    }

    /// Runs `fut` on the driver and waits for its answer.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, SessionError>> + Send + 'static,
    ) -> Result<T, SessionError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job: Job = Box::pin(async move {
            let _ = tx.send(fut.await);
        });
        if self.jobs.send(job).is_err() {
            return Err(SessionError::Unavailable(
                "the PostgreSQL driver stopped".into(),
            ));
        }
        rx.recv().unwrap_or_else(|_| {
            Err(SessionError::Unavailable(
                "the PostgreSQL driver stopped".into(),
            ))
        })
    }

    /// Runs `fut` on the driver without waiting.
    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let _ = self.jobs.send(Box::pin(fut));
    }
}

/// A session log in PostgreSQL, written under a lease (see the module's docs).
///
/// ```no_run
/// use dsh_session::postgres::{LeaseOptions, PostgresBackend};
/// use dsh_session::Durability;
/// let (backend, recovery) = PostgresBackend::open(
///     "postgres://dsh@127.0.0.1:5432/dsh", "s1", Durability::Batch, LeaseOptions::default(),
/// ).unwrap();
/// assert!(recovery.next_seq >= 1);
/// ```
pub struct PostgresBackend {
    driver: Arc<Driver>,
    store: PgStore,
    session: Arc<str>,
    epoch: i64,
    owner: String,
    /// The seq the next committed event takes (everything before it is acknowledged).
    next_seq: u64,
    /// A commit failed in a way that may have left it in the database.
    in_doubt: bool,
    /// The connections commit asynchronously (`--durability none`).
    asynchronous_commit: bool,
    /// Set when the renewal found the lease taken over, or the watchdog took it for lost.
    fenced: Arc<AtomicBool>,
    /// Told when the lease is lost.
    watch: LeaseWatch,
    /// No commit is tried before this (backoff after a failure).
    retry_at: Option<Instant>,
    backoff: Duration,
    renewal: Option<tokio::task::AbortHandle>,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .field("next_seq", &self.next_seq)
            .finish()
    }
}

impl PostgresBackend {
    /// Connects, takes the lease of `session` (waiting up to `options.wait` for another
    /// writer's), reads the session checking every invariant as file recovery does, closes the
    /// calls left open with synthesized `ABORTED` results, and answers the backend and what
    /// recovery did. Blocks: call it off the async workers (`SessionLog::open_postgres` does).
    pub fn open(
        url: &str,
        session: &str,
        durability: Durability,
        options: LeaseOptions,
    ) -> Result<(PostgresBackend, Recovery), SessionError> {
        if options.lease.is_zero() || options.lease > MAX_LEASE {
            return Err(SessionError::Refused(format!(
                "a lease of {} ms: it must be more than 0 and at most {} ms",
                options.lease.as_millis(),
                MAX_LEASE.as_millis()
            )));
        }
        let round_trip = round_trip_limit(options.lease);
        let (driver, store) = shared_driver(url, durability == Durability::None, round_trip)?;
        let sess = session.to_string();
        let opts = options.clone();
        let (store, taken, tracker, renewed_at) = driver.run(async move {
            let taken = store.acquire_waiting(&sess, &opts).await?;
            let mut tracker = Tracker::default();
            let mut broken = None;
            let mut count = 0usize;
            store
                .for_each_line(&sess, |seq, line| {
                    let event = parse_row(count, seq, &line)?;
                    count += 1;
                    if broken.is_none() {
                        broken = tracker.observe(&event).err();
                    }
                    Ok(())
                })
                .await?;
            if let Some(violation) = broken {
                return Err(violation.into());
            }
            // Reading a long log may take a good part of the lease: renew it before the
            // watchdog starts counting, and learn if it was taken meanwhile.
            let renewed_at = boot_now();
            if store.renew_lease(&sess, taken.epoch, opts.lease).await? == 0 {
                return Err(SessionError::Poisoned(format!(
                    "session {sess} was taken over while this writer read it"
                )));
            }
            Ok((store, taken, tracker, renewed_at))
        })?;
        // A call left open was running on the writer whose lease ended: it may have finished
        // there (its effects are real) though its result never reached the log.
        let (closings, recovery) = match &taken.previous_owner {
            Some(owner) => {
                tracker.finish_with(Tail::CLEAN, |id| recover::lease_lost_result(id, owner))?
            }
            None => tracker.finish(Tail::CLEAN)?,
        };
        let epoch = taken.epoch;
        let fenced = Arc::new(AtomicBool::new(false));
        let mut backend = PostgresBackend {
            driver,
            store,
            session: session.into(),
            epoch,
            owner: options.owner.clone(),
            next_seq: recovery.events_read + 1,
            in_doubt: false,
            asynchronous_commit: durability == Durability::None,
            fenced: fenced.clone(),
            watch: options.watch.clone(),
            retry_at: None,
            backoff: Duration::ZERO,
            renewal: None,
        };
        backend.start_renewal(options.lease, renewed_at);
        if !closings.is_empty() {
            backend.commit(closings, true)?;
        }
        recover::report(&backend.describe(), &recovery);
        Ok((backend, recovery))
    }

    /// The epoch (fencing token) this writer holds.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Starts the renewal and the watchdog; `renewed_at` is when (on the boot clock) the last
    /// renewal was sent.
    fn start_renewal(&mut self, lease: Duration, renewed_at: Duration) {
        let guard = LeaseGuard {
            store: self.store.clone(),
            session: self.session.clone(),
            epoch: self.epoch,
            lease,
            fenced: self.fenced.clone(),
            watch: self.watch.clone(),
            renewed_at: Arc::new(std::sync::Mutex::new(renewed_at)),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.driver.spawn(async move {
            let task = tokio::spawn(guard.run());
            let _ = tx.send(task.abort_handle());
        });
        self.renewal = rx.recv().ok();
    }

    fn fenced_error(&self) -> SessionError {
        if let Some(why) = self.watch.lost_because()
            && !why.contains("taken over")
        {
            return SessionError::Poisoned(format!(
                "session {}: {why}; this writer (epoch {}) writes nothing more",
                self.session, self.epoch
            ));
        }
        let store = self.store.clone();
        let session = self.session.to_string();
        let holder = self
            .driver
            .run(async move {
                let holder = async { Ok(store.current_holder(&session).await) };
                store.bounded("reading who holds the lease", holder).await
            })
            .ok()
            .flatten();
        let by = match holder {
            Some((epoch, owner, _)) if epoch != self.epoch => {
                format!(" by {owner} (epoch {epoch})")
            }
            _ => String::new(),
        };
        SessionError::Poisoned(format!(
            "session {} was taken over{by}; this writer (epoch {}) no longer owns it and writes \
             nothing more",
            self.session, self.epoch
        ))
    }

    fn failed(&mut self, err: SessionError) -> SessionError {
        self.in_doubt = true;
        self.backoff = (self.backoff * 2).clamp(Duration::from_millis(50), MAX_BACKOFF);
        self.retry_at = Some(Instant::now() + self.backoff);
        tracing::warn!(error = %err, backoff_ms = self.backoff.as_millis() as u64, "a PostgreSQL commit failed");
        err
    }
}

/// The share of the lease the watchdog keeps as margin: the lease is taken as lost a tenth
/// of it before the database would end it.
const WATCHDOG_MARGIN_DIVISOR: u32 = 10;

/// A live writer's lease: renewed every third of its length, and watched on the boot clock.
struct LeaseGuard {
    store: PgStore,
    session: Arc<str>,
    epoch: i64,
    lease: Duration,
    fenced: Arc<AtomicBool>,
    watch: LeaseWatch,
    /// When (boot clock) the last successful renewal was sent: the database's lease runs
    /// from a moment no earlier than that.
    renewed_at: Arc<std::sync::Mutex<Duration>>,
}

impl LeaseGuard {
    /// Renews and watches until the lease is lost or the writer is dropped.
    async fn run(self) {
        let watchdog = self.watchdog();
        let renewal = self.renew();
        tokio::select! {
            () = watchdog => {}
            () = renewal => {}
        }
    }

    fn lose(&self, why: String) {
        self.fenced.store(true, Ordering::SeqCst);
        self.watch.mark(why);
    }

    /// Takes the lease as lost once the last renewal is older than the lease less the
    /// margin. It checks often (a tenth of the lease, at most every 100 ms): a process frozen
    /// past its lease sees so at most one check after it resumes.
    async fn watchdog(&self) {
        let lease = self.lease;
        let limit = lease - lease / WATCHDOG_MARGIN_DIVISOR;
        let every = (lease / 10).clamp(Duration::from_millis(5), Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            let renewed_at = *self.renewed_at.lock().unwrap_or_else(|e| e.into_inner());
            let since = boot_now().saturating_sub(renewed_at);
            if since >= limit {
                self.lose(format!(
                    "the lease was not renewed for {} ms of its {} ms (this process or machine \
                     was paused, or the database was unreachable): it is taken as lost",
                    since.as_millis(),
                    lease.as_millis()
                ));
                return;
            }
        }
    }

    async fn renew(&self) {
        let every = (self.lease / 3).max(Duration::from_millis(10));
        let session = &*self.session;
        loop {
            tokio::time::sleep(every).await;
            let sent_at = boot_now();
            match self
                .store
                .renew_lease(session, self.epoch, self.lease)
                .await
            {
                Ok(0) => {
                    tracing::error!(session, epoch = self.epoch, "the lease was taken over");
                    self.lose("the lease was taken over: a renewal found another writer's".into());
                    return;
                }
                Ok(_) => {
                    let mut at = self.renewed_at.lock().unwrap_or_else(|e| e.into_inner());
                    *at = (*at).max(sent_at);
                }
                Err(e) => {
                    tracing::warn!(error = %e, session, "lease renewal failed");
                }
            }
        }
    }
}

/// The columns of a commit's events.
struct Rows {
    seqs: Vec<i64>,
    steps: Vec<i64>,
    lines: Vec<String>,
}

/// One fenced commit: the session row is updated only under our epoch and seq, and the events
/// go in with it, in one statement (one transaction when an earlier commit is in doubt, or
/// when `synchronous` must override the connection's asynchronous commit).
async fn commit_rows(
    store: PgStore,
    session: Arc<str>,
    epoch: i64,
    from: i64,
    rows: Rows,
    in_doubt: bool,
    synchronous: bool,
) -> Result<bool, SessionError> {
    let Rows { seqs, steps, lines } = rows;
    let ctx = || format!("committing to session {session}");
    let n = seqs.len() as u64;
    let to = from + n as i64;
    let mut client = store.client().await?;
    let insert = "WITH s AS (
            UPDATE dsh_sessions SET next_seq = $4, updated_at = clock_timestamp()
            WHERE id = $1 AND epoch = $2 AND next_seq = $3 RETURNING id)
        INSERT INTO dsh_events (session_id, seq, step, epoch, line)
        SELECT s.id, t.seq, t.step, $2, t.line
        FROM s, unnest($5::bigint[], $6::bigint[], $7::text[]) AS t(seq, step, line)";
    if !in_doubt && !synchronous {
        let rows = if n == 0 {
            client
                .execute(
                    "UPDATE dsh_sessions SET updated_at = clock_timestamp()
                     WHERE id = $1 AND epoch = $2 AND next_seq = $3",
                    &[&&*session, &epoch, &from],
                )
                .await
                .map_err(|e| db_error(ctx(), &e))?
        } else {
            client
                .execute(
                    insert,
                    &[&&*session, &epoch, &from, &to, &seqs, &steps, &lines],
                )
                .await
                .map_err(|e| db_error(ctx(), &e))?
        };
        return Ok(rows == n.max(1));
    }
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error(ctx(), &e))?;
    if synchronous {
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await
            .map_err(|e| db_error(ctx(), &e))?;
    }
    if in_doubt {
        // An earlier commit may have landed after all: whatever lies at or after `from` was
        // never acknowledged, and goes first, under the same fence (an epoch no other writer
        // of any session ever holds).
        let owned = tx
            .execute(
                "UPDATE dsh_sessions SET next_seq = $3, updated_at = clock_timestamp()
                 WHERE id = $1 AND epoch = $2",
                &[&&*session, &epoch, &from],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        if owned == 0 {
            return Ok(false);
        }
        let undone = tx
            .execute(
                "DELETE FROM dsh_events WHERE session_id = $1 AND seq >= $2",
                &[&&*session, &from],
            )
            .await
            .map_err(|e| db_error(ctx(), &e))?;
        if undone > 0 {
            tracing::warn!(session = %session, from, undone, "removed the events of a commit that failed but had landed");
        }
    }
    let rows = if n == 0 {
        tx.execute(
            "UPDATE dsh_sessions SET updated_at = clock_timestamp()
             WHERE id = $1 AND epoch = $2 AND next_seq = $3",
            &[&&*session, &epoch, &from],
        )
        .await
        .map_err(|e| db_error(ctx(), &e))?
    } else {
        tx.execute(
            insert,
            &[&&*session, &epoch, &from, &to, &seqs, &steps, &lines],
        )
        .await
        .map_err(|e| db_error(ctx(), &e))?
    };
    if rows != n.max(1) {
        return Ok(false);
    }
    tx.commit().await.map_err(|e| db_error(ctx(), &e))?;
    Ok(true)
}

impl LogBackend for PostgresBackend {
    fn commit(&mut self, events: Vec<SessionEvent>, _sync: bool) -> Result<(), SessionError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(self.fenced_error());
        }
        if let Some(at) = self.retry_at {
            let now = Instant::now();
            if now < at {
                return Err(SessionError::Io {
                    context: format!("committing to session {}", self.session),
                    message: format!(
                        "the database was unreachable; trying again in {} ms",
                        (at - now).as_millis()
                    ),
                });
            }
        }
        if events.is_empty() && !self.in_doubt {
            return Ok(());
        }
        let from = to_i64(self.next_seq, "seq")?;
        let mut seqs = Vec::with_capacity(events.len());
        let mut steps = Vec::with_capacity(events.len());
        let mut lines = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            if event.seq != self.next_seq + i as u64 {
                return Err(SessionError::Refused(format!(
                    "event seq {} where {} was expected",
                    event.seq,
                    self.next_seq + i as u64
                )));
            }
            seqs.push(to_i64(event.seq, "seq")?);
            steps.push(to_i64(event.step, "step")?);
            lines.push(event.to_json_line());
        }
        let n = events.len() as u64;
        // Write-ahead: a `tool/call` is durable before its body may run, under every
        // durability; `none` relaxes only the rest (results, messages).
        let synchronous =
            self.asynchronous_commit && events.iter().any(|e| e.body.type_str() == "tool/call");
        let store = self.store.clone();
        let commit = commit_rows(
            self.store.clone(),
            self.session.clone(),
            self.epoch,
            from,
            Rows { seqs, steps, lines },
            self.in_doubt,
            synchronous,
        );
        let context = format!("committing to session {}", self.session);
        let fut = async move { store.bounded(context, commit).await };
        match self.driver.run(fut) {
            Ok(true) => {
                self.in_doubt = false;
                self.retry_at = None;
                self.backoff = Duration::ZERO;
                self.next_seq += n;
                Ok(())
            }
            Ok(false) => {
                self.fenced.store(true, Ordering::SeqCst);
                self.watch
                    .mark("the lease was taken over: an append was refused by the fence");
                Err(self.fenced_error())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        let store = self.store.clone();
        let session = self.session.to_string();
        let upto = self.next_seq;
        let mut events = self
            .driver
            .run(async move { store.read_events(&session).await })?;
        // A commit in doubt may have left rows past what was acknowledged.
        events.truncate(upto.saturating_sub(1) as usize);
        Ok(events)
    }

    fn commit_blocks(&self, _sync: bool) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("postgres session {}", self.session)
    }
}

impl Drop for PostgresBackend {
    // Gives the lease back (so the next writer need not wait it out); the driver and its
    // connections stay, for this process's other sessions and its next one.
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        if !self.fenced.load(Ordering::SeqCst) {
            let store = self.store.clone();
            let session = self.session.clone();
            let epoch = self.epoch;
            let owner = self.owner.clone();
            let released = self.driver.run(async move {
                let release = async {
                    let client = store.client().await?;
                    client
                        .execute(
                            "UPDATE dsh_sessions SET lease_until = NULL
                             WHERE id = $1 AND epoch = $2 AND owner = $3",
                            &[&&*session, &epoch, &owner],
                        )
                        .await
                        .map_err(|e| db_error("releasing the lease", &e))
                };
                match tokio::time::timeout(Duration::from_secs(2), release).await {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => Err(SessionError::Unavailable(
                        "releasing the lease timed out".into(),
                    )),
                }
            });
            if let Err(e) = released {
                tracing::warn!(error = %e, session = %self.session, "the lease was not released; it runs out by itself");
            }
        }
    }
}
