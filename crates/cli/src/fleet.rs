//! `dsh serve --http ADDR --store URL`: a node of a fleet, many such nodes over one
//! PostgreSQL store behind a load balancer, any node serving any named session (see the book's
//! "A fleet of servers"); and `dsh store migrate`.

use crate::cli::{Approve, ServeArgs, StoreSource};
use crate::error::{CliError, EXIT_OK};
use crate::output::note;
use crate::serve::{http_guard, limits, listen_http, serve_until_signal, tokens};
use clap::{Args, Subcommand};
use dsh_core::ApprovalResponder;
use dsh_serve::{
    ElicitingApprover, FleetConfig, ServeConfig, SessionTable, StateSecret, StatelessSessions,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

/// The flags of a node of a fleet (`dsh serve --http ADDR --store URL`).
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// With `--http` and `--store` (no `--session`): the address other nodes and clients reach
    /// this node by, written into each session lease it takes, so that a request for a session
    /// this node holds, landing on another node, is told where it is (default: the address it
    /// listens on).
    #[arg(long, value_name = "ADDR", requires = "http")]
    pub advertise: Option<String>,
    /// With `--http --store`: a named session with nothing in flight (no call, no `ask`
    /// waiting) for this many milliseconds gives its lease back, so its next request may land
    /// on any node.
    #[arg(long, value_name = "MS", default_value_t = 500, requires = "http",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub release_after_ms: u64,
    /// With `--http --store`: how long a request for a session that another node holds waits
    /// for its lease before it is answered with a retryable error naming that node
    /// (`SESSION_BUSY`, JSON-RPC code -32002).
    #[arg(long, value_name = "MS", default_value_t = 2_000, requires = "http",
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub lease_wait_ms: u64,
    /// With `--http --store`: a file holding the secret (at least 16 bytes) every node of the
    /// fleet signs an `ask`'s `requestState` with, so that any node verifies it. Without it,
    /// each node makes its own, and another node refuses its states.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub state_key_file: Option<PathBuf>,
}

/// `dsh store`.
#[derive(Debug, Args)]
pub struct StoreCommandArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// What `dsh store` does.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Bring the store's schema up to date (create dsh's tables in a new database), and say
    /// from which version to which. Every command migrates a schema that is behind when it
    /// connects, if its role may; run this with a role that may `CREATE` before nodes whose
    /// role has row rights only (`SELECT, INSERT, UPDATE, DELETE`) use a new store or one an
    /// upgraded dsh must migrate.
    Migrate {
        #[command(flatten)]
        store: StoreSource,
    },
}

/// `dsh store …`.
pub fn store_command(rt: &Runtime, args: &StoreCommandArgs) -> Result<u8, CliError> {
    match &args.command {
        StoreCommand::Migrate { store } => migrate(rt, &crate::store::store_url(store)?),
    }
}

#[cfg(feature = "postgres")]
fn migrate(rt: &Runtime, url: &str) -> Result<u8, CliError> {
    let (before, after) = rt
        .block_on(dsh_session::postgres::PgStore::migrate_now(url))
        .map_err(|e| CliError::log(Path::new("--store"), e))?;
    if before == after {
        note(format!(
            "the store's schema is at version {after}, up to date: nothing to do"
        ));
    } else {
        note(format!(
            "migrated the store's schema from version {before} to {after}"
        ));
    }
    Ok(EXIT_OK)
}

#[cfg(not(feature = "postgres"))]
fn migrate(_rt: &Runtime, _url: &str) -> Result<u8, CliError> {
    Err(CliError::Usage(
        "store migrate: this dsh was built without the `postgres` feature".into(),
    ))
}

/// The fleet's `requestState` key: from `--state-key-file`, or made for this node alone.
fn state_key(file: Option<&Path>) -> Result<StateSecret, CliError> {
    let Some(file) = file else {
        note(
            "warning: no --state-key-file: an `ask`'s requestState verifies only on this node, \
             another node of the fleet refuses it",
        );
        let secret = rand_bytes()?;
        return StateSecret::from_secret(&secret)
            .ok_or_else(|| CliError::Start("cannot make a requestState key".into()));
    };
    use std::io::Read;
    let mut secret = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut secret))
        .map_err(|e| CliError::io("read the state key from", file, e))?;
    StateSecret::from_secret(&secret).ok_or_else(|| {
        CliError::Usage(format!(
            "--state-key-file {}: the secret must be at least {} bytes",
            file.display(),
            dsh_serve::fleet::MIN_STATE_SECRET
        ))
    })
}

/// 32 bytes from the OS's random source (a node's own `requestState` key).
fn rand_bytes() -> Result<[u8; 32], CliError> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| CliError::io("read", Path::new("/dev/urandom"), e))?;
    Ok(bytes)
}

#[cfg(feature = "postgres")]
fn session_store(
    url: String,
    args: &ServeArgs,
    owner: String,
) -> Result<dsh_scheduler::SessionStore, CliError> {
    let lease = Duration::from_millis(args.store.lease_ms);
    Ok(dsh_scheduler::SessionStore::Postgres {
        url,
        durability: args.options.durability.into(),
        lease: dsh_session::postgres::LeaseOptions {
            lease,
            wait: Duration::from_millis(args.fleet.lease_wait_ms),
            owner,
            watch: dsh_session::postgres::LeaseWatch::default(),
        },
    })
}

#[cfg(not(feature = "postgres"))]
fn session_store(
    _url: String,
    _args: &ServeArgs,
    _owner: String,
) -> Result<dsh_scheduler::SessionStore, CliError> {
    Err(CliError::Usage(
        "--store: this dsh was built without the `postgres` feature".into(),
    ))
}

/// `dsh serve --http ADDR --store URL`: serves until SIGTERM or SIGINT, then cancels the calls
/// in flight (recorded as aborted) and closes every session, giving its lease back. Exit 0.
pub fn serve(rt: &Runtime, args: &ServeArgs, addr: &str) -> Result<u8, CliError> {
    let url = crate::store::store_url(&StoreSource {
        store: args.store.store.clone(),
        store_file: args.store.store_file.clone(),
    })?;
    let shown = dsh_session::mask_passwords(&url);
    let tokens = tokens(args.token_file.as_deref())?;
    let key = state_key(args.fleet.state_key_file.as_deref())?;
    let approver = Arc::new(ElicitingApprover::new());
    let responder: Option<Arc<dyn ApprovalResponder>> = match args.options.approve {
        Approve::Prompt => Some(approver.clone()),
        Approve::Allow | Approve::Deny => None,
    };
    rt.block_on(async {
        let listening = listen_http(addr, tokens.is_empty()).await?;
        let local = listening.local;
        let owner = args
            .fleet
            .advertise
            .clone()
            .unwrap_or_else(|| local.to_string());
        let store = session_store(url, args, owner.clone())?;
        // The store is reached (and its schema brought up to date, if it is behind) before the
        // node says it serves.
        #[cfg(feature = "postgres")]
        dsh_session::postgres::PgStore::connect(
            match &store {
                dsh_scheduler::SessionStore::Postgres { url, .. } => url,
                _ => "",
            },
            false,
        )
        .await
        .map_err(|e| CliError::log(Path::new("--store"), e))?;
        let label = PathBuf::from(format!("the store {shown}"));
        let serving =
            crate::harness::start_shared(&args.workspace, &store, &label, &args.options, responder)
                .await?;
        // Its advertised address is the `Host` of an answer another node forwards here.
        let guard = http_guard(args, &tokens, Some(&owner))?;
        let table = SessionTable::new(limits(&args.limits));
        let release_after = Duration::from_millis(args.fleet.release_after_ms);
        let config = ServeConfig {
            fleet: Some(FleetConfig {
                state_key: key,
                release_after,
            }),
            ..ServeConfig::default()
        };
        let sessions = StatelessSessions::bounded(
            serving.harness.clone(),
            serving.scheduler.clone(),
            approver,
            config,
            table.clone(),
        );
        let releasing = dsh_serve::release_idle_sessions(&sessions, release_after);
        let make = move || sessions.client_server();
        note(format!(
            "serving MCP on http://{local}/mcp as a node of a fleet (advertised as {owner}); \
             sessions in {shown}"
        ));
        let (why, served) = serve_until_signal(
            listening,
            guard,
            table,
            make,
            serving.harness.clone(),
            "stopping now; the sessions' leases run out by themselves",
        )
        .await;
        releasing.abort();
        if let Some(hooks) = &serving.hooks {
            hooks.kill_all();
        }
        serving.shutdown().await;
        if let Err(e) = served {
            note(format!("error: {e}"));
        }
        note(format!(
            "stopped ({why}): calls in flight were recorded as aborted; every session's lease \
             was given back"
        ));
        Ok(0)
    })
}
