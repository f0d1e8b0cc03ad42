//! Where a session's log is: a JSON Lines file, or a session in a PostgreSQL store
//! (`--store URL --session ID`), and the commands that only a store has (`export`,
//! `sessions`).

use crate::cli::StoreArgs;
use crate::error::{CliError, EXIT_OK};
use crate::output::{JsonLines, note};
use dsh_core::SessionEvent;
use dsh_session::{Durability, Recovery, SessionError, SessionLog};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::runtime::Runtime;

/// A session log's place.
#[derive(Debug, Clone)]
pub enum LogTarget {
    /// A JSON Lines file.
    File(PathBuf),
    /// A session in a PostgreSQL store.
    Postgres {
        /// The store's URL.
        url: String,
        /// The session's id.
        session: String,
        /// The writer's lease.
        lease: Duration,
    },
}

fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl LogTarget {
    /// The log file `log`, or the session `--store`/`--session` name.
    pub fn new(log: Option<&PathBuf>, store: &StoreArgs) -> Result<LogTarget, CliError> {
        match (log, &store.store, &store.session) {
            (Some(path), None, _) => Ok(LogTarget::File(path.clone())),
            (None, Some(url), Some(session)) => {
                if !cfg!(feature = "postgres") {
                    return Err(CliError::Usage(
                        "--store: this dsh was built without the `postgres` feature".into(),
                    ));
                }
                if !valid_session_id(session) {
                    return Err(CliError::Usage(format!(
                        "--session `{session}`: use 1-128 of [A-Za-z0-9_.-], not starting with a dot"
                    )));
                }
                Ok(LogTarget::Postgres {
                    url: url.clone(),
                    session: session.clone(),
                    lease: Duration::from_millis(store.lease_ms),
                })
            }
            _ => Err(CliError::Usage(
                "name a log file, or a session with --store URL --session ID".into(),
            )),
        }
    }

    /// How messages name the log: its path, or `session ID`.
    pub fn label(&self) -> PathBuf {
        match self {
            LogTarget::File(path) => path.clone(),
            LogTarget::Postgres { session, .. } => PathBuf::from(format!("session {session}")),
        }
    }

    /// The log file, when the log is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            LogTarget::File(path) => Some(path),
            LogTarget::Postgres { .. } => None,
        }
    }

    /// The `dsh recover` command line that repairs this log.
    pub fn recover_command(&self) -> String {
        match self {
            LogTarget::File(path) => format!("dsh recover {}", path.display()),
            LogTarget::Postgres { url, session, .. } => {
                format!("dsh recover --store {url} --session {session}")
            }
        }
    }

    /// Opens the log for writing: recovered, and (for a store) under the session's lease,
    /// waited for up to twice its length.
    /// A log file held by another writer is waited for up to `lock_wait`.
    pub async fn open(
        &self,
        durability: Durability,
        lock_wait: Duration,
    ) -> Result<(SessionLog, Recovery), SessionError> {
        match self {
            LogTarget::File(path) => {
                SessionLog::open_file_waiting(path, durability, lock_wait, None).await
            }
            LogTarget::Postgres {
                url,
                session,
                lease,
            } => open_postgres(url, session, durability, *lease).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    url: &str,
    session: &str,
    durability: Durability,
    lease: Duration,
) -> Result<(SessionLog, Recovery), SessionError> {
    let options = dsh_session::postgres::LeaseOptions::with_lease(lease);
    SessionLog::open_postgres(url, session, durability, options, None).await
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _url: &str,
    _session: &str,
    _durability: Durability,
    _lease: Duration,
) -> Result<(SessionLog, Recovery), SessionError> {
    Err(SessionError::Unavailable(
        "this dsh was built without the `postgres` feature".into(),
    ))
}

#[cfg(feature = "postgres")]
async fn connect(url: &str) -> Result<dsh_session::postgres::PgStore, CliError> {
    dsh_session::postgres::PgStore::connect(url, false)
        .await
        .map_err(|e| CliError::log(Path::new("--store"), e))
}

/// Every event of a stored session (which must exist), without taking its lease.
#[cfg(feature = "postgres")]
pub fn read_events(rt: &Runtime, target: &LogTarget) -> Result<Vec<SessionEvent>, CliError> {
    let LogTarget::Postgres { url, session, .. } = target else {
        return Err(CliError::Usage("not a --store session".into()));
    };
    let label = target.label();
    rt.block_on(async {
        let store = connect(url).await?;
        if !store
            .exists(session)
            .await
            .map_err(|e| CliError::log(&label, e))?
        {
            return Err(CliError::log(&label, "no such session in the store"));
        }
        store
            .read_events(session)
            .await
            .map_err(|e| CliError::log(&label, e))
    })
}

/// Every event of a stored session (which must exist), without taking its lease.
#[cfg(not(feature = "postgres"))]
pub fn read_events(_rt: &Runtime, _target: &LogTarget) -> Result<Vec<SessionEvent>, CliError> {
    Err(CliError::Usage(
        "--store: this dsh was built without the `postgres` feature".into(),
    ))
}

/// `dsh export`: the session's stored lines, exactly, on stdout.
#[cfg(feature = "postgres")]
pub fn export(rt: &Runtime, url: &str, session: &str) -> Result<u8, CliError> {
    use std::io::Write;
    let label = PathBuf::from(format!("session {session}"));
    rt.block_on(async {
        let store = connect(url).await?;
        if !store
            .exists(session)
            .await
            .map_err(|e| CliError::log(&label, e))?
        {
            return Err(CliError::log(&label, "no such session in the store"));
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let mut failed = None;
        store
            .for_each_line(session, |_, line| {
                if failed.is_none()
                    && let Err(e) = out
                        .write_all(line.as_bytes())
                        .and_then(|()| out.write_all(b"\n"))
                {
                    failed = Some(e);
                }
                Ok(())
            })
            .await
            .map_err(|e| CliError::log(&label, e))?;
        match failed.map_or_else(|| out.flush(), Err) {
            Ok(()) => Ok(EXIT_OK),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
            Err(e) => Err(CliError::io("write to", Path::new("standard output"), e)),
        }
    })
}

/// `dsh export`: the session's stored lines, exactly, on stdout.
#[cfg(not(feature = "postgres"))]
pub fn export(_rt: &Runtime, _url: &str, _session: &str) -> Result<u8, CliError> {
    Err(CliError::Usage(
        "export: this dsh was built without the `postgres` feature".into(),
    ))
}

/// `dsh sessions`: one JSON object a session, or the pruning of old ones.
#[cfg(feature = "postgres")]
pub fn sessions(
    rt: &Runtime,
    url: &str,
    prune_older_than: Option<u32>,
    out: &mut JsonLines,
) -> Result<u8, CliError> {
    rt.block_on(async {
        let store = connect(url).await?;
        let label = Path::new("--store");
        if let Some(days) = prune_older_than {
            let pruned = store
                .prune_older_than(days)
                .await
                .map_err(|e| CliError::log(label, e))?;
            note(format!(
                "pruned {} session(s) not changed for {days} day(s){}{}",
                pruned.len(),
                if pruned.is_empty() { "" } else { ": " },
                pruned.join(", ")
            ));
            return Ok(EXIT_OK);
        }
        let list = store.list().await.map_err(|e| CliError::log(label, e))?;
        let lines: Vec<serde_json::Value> = list
            .into_iter()
            .map(|s| {
                serde_json::json!({
                    "session": s.id,
                    "events": s.events,
                    "epoch": s.epoch,
                    "holder": s.holder,
                    "updated_at": s.updated_at,
                })
            })
            .collect();
        out.print(&lines)?;
        Ok(EXIT_OK)
    })
}

/// `dsh sessions`: one JSON object a session, or the pruning of old ones.
#[cfg(not(feature = "postgres"))]
pub fn sessions(
    _rt: &Runtime,
    _url: &str,
    _prune_older_than: Option<u32>,
    _out: &mut JsonLines,
) -> Result<u8, CliError> {
    Err(CliError::Usage(
        "sessions: this dsh was built without the `postgres` feature".into(),
    ))
}
