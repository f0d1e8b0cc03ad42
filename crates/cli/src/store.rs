//! Where a session's log is: a JSON Lines file, or a session in a PostgreSQL store
//! (`--store URL --session ID`), and the commands that only a store has (`export`,
//! `sessions`).

use crate::cli::{StoreArgs, StoreSource};
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
        /// Told when the writer loses its lease.
        watch: LeaseSignal,
    },
}

/// Tells `dsh run` that its session's lease is lost, so it stops its tools.
#[cfg(feature = "postgres")]
pub type LeaseSignal = dsh_session::postgres::LeaseWatch;

/// Tells `dsh run` that its session's lease is lost: never, without the `postgres` feature.
#[cfg(not(feature = "postgres"))]
#[derive(Debug, Clone, Default)]
pub struct LeaseSignal;

fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The store's URL: `--store`, else the first line of `--store-file`, else of the file
/// `DSH_STORE_FILE` names, else `DSH_STORE`.
fn resolve_url(store: Option<&String>, store_file: Option<&PathBuf>) -> Result<String, CliError> {
    if let Some(url) = store {
        return Ok(url.clone());
    }
    let file = store_file
        .cloned()
        .or_else(|| std::env::var_os("DSH_STORE_FILE").map(PathBuf::from));
    if let Some(file) = file {
        let text = read_bounded(&file)?;
        let url = text.lines().next().unwrap_or("").trim();
        if url.is_empty() || url.chars().any(char::is_control) {
            return Err(CliError::Usage(format!(
                "{}: the file holds no store URL",
                file.display()
            )));
        }
        return Ok(url.to_string());
    }
    match std::env::var("DSH_STORE") {
        Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
        _ => Err(CliError::Usage(
            "name the store: --store-file FILE, DSH_STORE_FILE, DSH_STORE, or --store URL".into(),
        )),
    }
}

/// The most of a store URL file read: a URL is short, and `/dev/zero` must not eat memory.
const MAX_URL_FILE: u64 = 64 * 1024;

/// The start of `file`, at most [`MAX_URL_FILE`] bytes, as text.
fn read_bounded(file: &Path) -> Result<String, CliError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_URL_FILE).read_to_end(&mut bytes))
        .map_err(|e| CliError::io("read the store URL from", file, e))?;
    String::from_utf8(bytes)
        .map_err(|_| CliError::Usage(format!("{}: the store URL is not UTF-8", file.display())))
}

/// The URL of the store `source` names (see [`StoreSource`]).
pub fn store_url(source: &StoreSource) -> Result<String, CliError> {
    resolve_url(source.store.as_ref(), source.store_file.as_ref())
}

impl LogTarget {
    /// The log file `log`, or the session `--session` names in the store.
    pub fn new(log: Option<&PathBuf>, store: &StoreArgs) -> Result<LogTarget, CliError> {
        match (log, &store.session) {
            (Some(path), None) => Ok(LogTarget::File(path.clone())),
            (None, Some(session)) => {
                let url = resolve_url(store.store.as_ref(), store.store_file.as_ref())?;
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
                    url,
                    session: session.clone(),
                    lease: Duration::from_millis(store.lease_ms),
                    watch: LeaseSignal::default(),
                })
            }
            (None, None) if store.store.is_some() || store.store_file.is_some() => Err(
                CliError::Usage("--store names a store: name its session with --session ID".into()),
            ),
            _ => Err(CliError::Usage(
                "name a log file, or a session with --session ID and its store".into(),
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

    /// The `dsh recover` command line that repairs this log (a store's password masked).
    pub fn recover_command(&self) -> String {
        match self {
            LogTarget::File(path) => format!("dsh recover {}", path.display()),
            LogTarget::Postgres { url, session, .. } => format!(
                "dsh recover --store {} --session {session}",
                dsh_session::mask_passwords(url)
            ),
        }
    }

    /// Resolves once the writer of this log lost its lease (a store session's; a file never
    /// does), answering why.
    pub fn lease_lost(&self) -> Option<impl std::future::Future<Output = String> + Send + 'static> {
        match self {
            LogTarget::File(_) => None,
            #[cfg(feature = "postgres")]
            LogTarget::Postgres { watch, .. } => {
                let watch = watch.clone();
                Some(async move { watch.lost().await })
            }
            #[cfg(not(feature = "postgres"))]
            LogTarget::Postgres { .. } => None::<std::future::Pending<String>>,
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
                watch,
            } => open_postgres(url, session, durability, *lease, watch.clone()).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    url: &str,
    session: &str,
    durability: Durability,
    lease: Duration,
    watch: LeaseSignal,
) -> Result<(SessionLog, Recovery), SessionError> {
    let options = dsh_session::postgres::LeaseOptions {
        watch,
        ..dsh_session::postgres::LeaseOptions::with_lease(lease)
    };
    SessionLog::open_postgres(url, session, durability, options, None).await
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _url: &str,
    _session: &str,
    _durability: Durability,
    _lease: Duration,
    _watch: LeaseSignal,
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

/// What `dsh sessions` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionsAction {
    /// List the sessions.
    List,
    /// Delete those not changed for this many days.
    Prune(u32),
    /// End this session's lease, fencing its owner.
    Release(String),
}

impl SessionsAction {
    /// The action the flags ask for (they conflict, so at most one is given).
    pub fn of(prune_older_than: Option<u32>, release: Option<String>) -> SessionsAction {
        match (prune_older_than, release) {
            (Some(days), _) => SessionsAction::Prune(days),
            (None, Some(id)) => SessionsAction::Release(id),
            (None, None) => SessionsAction::List,
        }
    }
}

/// `dsh sessions`: one JSON object a session, the pruning of old ones, or a release.
#[cfg(feature = "postgres")]
pub fn sessions(
    rt: &Runtime,
    url: &str,
    action: SessionsAction,
    out: &mut JsonLines,
) -> Result<u8, CliError> {
    rt.block_on(async {
        let store = connect(url).await?;
        let label = Path::new("--store");
        match action {
            SessionsAction::List => {}
            SessionsAction::Prune(days) => {
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
            SessionsAction::Release(id) => return release(&store, &id).await,
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

/// `dsh sessions --release ID`.
#[cfg(feature = "postgres")]
async fn release(store: &dsh_session::postgres::PgStore, id: &str) -> Result<u8, CliError> {
    use dsh_session::postgres::Released;
    let label = PathBuf::from(format!("session {id}"));
    match store
        .release(id)
        .await
        .map_err(|e| CliError::log(&label, e))?
    {
        Released::NoSuchSession => Err(CliError::log(&label, "no such session in the store")),
        Released::Ended { owner: Some(owner) } => {
            note(format!(
                "session {id}: released the lease {owner} held; it is fenced and writes nothing more"
            ));
            Ok(EXIT_OK)
        }
        Released::Ended { owner: None } => {
            note(format!(
                "session {id}: no live lease; its last writer is fenced all the same"
            ));
            Ok(EXIT_OK)
        }
    }
}

/// Who holds the lease of a stored session now, and until when, if anyone does.
#[cfg(feature = "postgres")]
pub fn live_lease(rt: &Runtime, target: &LogTarget) -> Option<(String, String)> {
    let LogTarget::Postgres { url, session, .. } = target else {
        return None;
    };
    rt.block_on(async {
        let store = connect(url).await.ok()?;
        store.live_lease(session).await.ok().flatten()
    })
}

/// Who holds the lease of a stored session now: never, without the `postgres` feature.
#[cfg(not(feature = "postgres"))]
pub fn live_lease(_rt: &Runtime, _target: &LogTarget) -> Option<(String, String)> {
    None
}

/// `dsh sessions`: one JSON object a session, the pruning of old ones, or a release.
#[cfg(not(feature = "postgres"))]
pub fn sessions(
    _rt: &Runtime,
    _url: &str,
    _action: SessionsAction,
    _out: &mut JsonLines,
) -> Result<u8, CliError> {
    Err(CliError::Usage(
        "sessions: this dsh was built without the `postgres` feature".into(),
    ))
}
