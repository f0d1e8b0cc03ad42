//! `dsh serve`: the pipeline as an MCP server over stdio, started the way `dsh run` starts it;
//! with `--http`, over MCP's streamable HTTP transport, one session (and log) per client
//! session on one harness.

use crate::cli::{Approve, ServeArgs};
use crate::error::CliError;
use crate::harness;
use crate::output::note;
use dsh_core::ApprovalResponder;
use dsh_scheduler::CancelTarget;
use dsh_serve::{
    DshServer, ElicitingApprover, HttpGuard, ServeConfig, ServeLimits, SessionTable,
    StatelessSessions,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;
use tokio::runtime::Runtime;

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

/// Serves until stdin ends (exit 0) or a signal comes (130 or 143); either way the calls in
/// flight are recorded as aborted and the log is closed.
pub fn serve(rt: &Runtime, args: &ServeArgs) -> Result<u8, CliError> {
    if args.print_plan {
        return print_plan(args);
    }
    if let Some(addr) = &args.http {
        return serve_http(rt, args, addr);
    }
    let approver = Arc::new(ElicitingApprover::new());
    // `--approve prompt` (the default): the client is who is asked.
    let responder: Option<Arc<dyn ApprovalResponder>> = match args.options.approve {
        Approve::Prompt => Some(approver.clone()),
        Approve::Allow | Approve::Deny => None,
    };
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut int, mut term) = (|| {
            Ok::<_, std::io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })()
        .map_err(|e| CliError::Start(format!("cannot watch for SIGINT and SIGTERM: {e}")))?;
        // stdin carries MCP, so no terminal prompt can use it.
        let log = crate::store::LogTarget::new(args.log.as_ref(), &args.store)?;
        let running =
            match harness::start(&args.workspace, &log, &args.options, false, responder).await {
                Ok(running) => running,
                Err(e) => {
                    crate::serve_refusal::refuse(&e.to_string()).await;
                    return Err(e);
                }
            };
        let server = DshServer::new(
            running.session.clone(),
            running.harness.pipeline().registry(),
            approver,
            ServeConfig::default(),
        );
        note(format!(
            "serving MCP on stdio; log: {}",
            running.log_path.display()
        ));
        let received = Arc::new(AtomicI32::new(0));
        let flag = received.clone();
        // A store session whose lease is lost (this process was paused past it, another node
        // took the session over) stops serving: its calls are cancelled and their processes
        // killed, so nothing of this owner runs on beside the new one.
        let lease_lost = crate::serve_watchdog::LeaseLost::watch(
            log.lease_lost(),
            running.session.clone(),
            running.hooks.clone(),
        );
        let lost = lease_lost.clone();
        let shutdown = async move {
            let first = tokio::select! {
                _ = int.recv() => SIGINT,
                _ = term.recv() => SIGTERM,
                () = lost.stopped() => return,
            };
            flag.store(first, Ordering::SeqCst);
            // A second signal stops at once.
            tokio::spawn(async move {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                note("stopping now; `dsh recover` repairs the log if it needs it");
                std::process::exit(128 + first);
            });
        };
        let served = dsh_serve::serve_stdio(server, shutdown).await;
        // No client waits for what still runs: cancel it (recorded ABORTED), with the hook
        // processes it started.
        let _ = running.session.cancel(CancelTarget::Session);
        if let Some(hooks) = &running.hooks {
            hooks.kill_all();
        }
        let log = running.log_path.clone();
        running.shutdown().await;
        let signal = received.load(Ordering::SeqCst);
        if let Err(e) = served {
            note(format!("error: {e}"));
        }
        if let Some(why) = lease_lost.reason() {
            return Err(CliError::log(
                &log,
                format!("{why}; its running calls were cancelled and killed, and serving stops"),
            ));
        }
        let why = match signal {
            SIGINT => "SIGINT",
            SIGTERM => "SIGTERM",
            _ => "the client closed standard input",
        };
        note(format!(
            "stopped ({why}): calls in flight were recorded as aborted; {} is closed",
            log.display()
        ));
        Ok(if signal == 0 {
            0
        } else {
            u8::try_from(128 + signal).unwrap_or(u8::MAX)
        })
    })
}

/// `dsh serve --print-plan`: what the command line means, on stderr; nothing starts.
fn print_plan(args: &ServeArgs) -> Result<u8, CliError> {
    if args.http.is_some() && (args.store.store.is_some() || args.store.store_file.is_some()) {
        // A node of a fleet: the plan says where sessions live, and connects to nothing.
        let store = dsh_scheduler::SessionStore::Memory;
        let label = Path::new("the store");
        let logs = harness::Logs::Shared(&store);
        return harness::print_plan(&args.workspace, logs, label, &args.options, "serve --http");
    }
    if args.http.is_some() {
        let folder = args.log.as_deref().ok_or_else(|| {
            CliError::Usage(
                "--http needs --log DIR: the folder of the client sessions' logs".into(),
            )
        })?;
        let logs = harness::Logs::Folder(folder);
        return harness::print_plan(&args.workspace, logs, folder, &args.options, "serve --http");
    }
    let log = crate::store::LogTarget::new(args.log.as_ref(), &args.store)?;
    let logs = harness::Logs::One(&log);
    harness::print_plan(&args.workspace, logs, &log.label(), &args.options, "serve")
}

/// The bearer tokens of `--token-file` (one a line; blank lines and `#` comments skipped), or,
/// without the file, `DSH_SERVE_TOKEN`: the file wins when given, so that a rotation (edit the
/// file, SIGHUP) can retire every token.
pub(crate) fn tokens(file: Option<&Path>) -> Result<Vec<String>, CliError> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::io("read the token file", file, e))?;
        let tokens: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|t| !t.is_empty() && !t.starts_with('#'))
            .map(str::to_string)
            .collect();
        if tokens.is_empty() {
            return Err(CliError::Usage(format!(
                "--token-file {} holds no token",
                file.display()
            )));
        }
        if std::env::var_os("DSH_SERVE_TOKEN").is_some() {
            note("DSH_SERVE_TOKEN is ignored: --token-file names the valid tokens");
        }
        return Ok(tokens);
    }
    let mut tokens = Vec::new();
    if let Some(token) = std::env::var_os("DSH_SERVE_TOKEN") {
        let token = token.to_string_lossy().trim().to_string();
        if !token.is_empty() {
            tokens.push(token);
        }
    }
    Ok(tokens)
}

/// On each SIGHUP, reads `file` again and makes its tokens the valid ones; a file that cannot
/// be read or holds no token changes nothing (said on stderr).
pub(crate) fn reload_tokens_on_sighup(file: &Path, guard: HttpGuard) -> Result<(), CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())
        .map_err(|e| CliError::Start(format!("cannot watch for SIGHUP: {e}")))?;
    let file = file.to_path_buf();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match tokens(Some(&file)) {
                Ok(tokens) => {
                    guard.set_tokens(&tokens);
                    note(format!(
                        "SIGHUP: {} token(s) read again from {}",
                        tokens.len(),
                        file.display()
                    ));
                }
                Err(e) => note(format!("SIGHUP: the tokens are unchanged: {e}")),
            }
        }
    });
    Ok(())
}

/// The bounds the flags give.
pub(crate) fn limits(args: &crate::cli::ServeLimitArgs) -> ServeLimits {
    ServeLimits {
        max_sessions: args.max_sessions.max(1),
        max_sessions_per_token: args.max_sessions_per_token.max(1),
        max_connections: args.max_connections.max(1),
        max_requests_per_token: args.max_requests_per_token.max(1),
        body_timeout: Duration::from_secs(args.body_timeout.max(1)),
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
    }
}

/// Makes the log folder, private to the user (0700), when it does not exist yet.
fn private_folder(folder: &Path) -> Result<(), CliError> {
    if folder.exists() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(folder)
        .map_err(|e| CliError::io("create the log folder", folder, e))
}

/// `dsh serve --http ADDR`: serves until SIGTERM or SIGINT, then cancels the calls in flight
/// (recorded as aborted) and closes every session's log. Exit 0.
fn serve_http(rt: &Runtime, args: &ServeArgs, addr: &str) -> Result<u8, CliError> {
    if args.store.store.is_some() || args.store.store_file.is_some() {
        return crate::fleet::serve(rt, args, addr);
    }
    let Some(folder) = args.log.as_ref() else {
        return Err(CliError::Usage(
            "--http needs --log DIR: the folder of the client sessions' logs".into(),
        ));
    };
    if folder.is_file() {
        return Err(CliError::Usage(format!(
            "--http: --log {} is a file; name a folder (one log per client session)",
            folder.display()
        )));
    }
    let tokens = tokens(args.token_file.as_deref())?;
    let approver = Arc::new(ElicitingApprover::new());
    let responder: Option<Arc<dyn ApprovalResponder>> = match args.options.approve {
        Approve::Prompt => Some(approver.clone()),
        Approve::Allow | Approve::Deny => None,
    };
    rt.block_on(async {
        let listening = listen_http(addr, tokens.is_empty()).await?;
        let local = listening.local;
        private_folder(folder)?;
        let serving =
            match harness::start_many(&args.workspace, folder, &args.options, responder).await {
                Ok(serving) => serving,
                Err(e) => return Err(e),
            };
        let guard = http_guard(args, &tokens, None)?;
        // 2025-11-25 clients get a server per `Mcp-Session-Id`; requests of the stateless
        // 2026-07-28 era go to the session they name, kept in `sessions`; both count in
        // `table`.
        let table = SessionTable::new(limits(&args.limits));
        let sessions = StatelessSessions::bounded(
            serving.harness.clone(),
            serving.scheduler.clone(),
            approver,
            ServeConfig::default(),
            table.clone(),
        );
        let make = move || sessions.client_server();
        note(format!(
            "serving MCP on http://{local}/mcp; logs: {}/<session-id>.jsonl",
            serving.folder.display()
        ));
        let (view_stop, view_stopped) = tokio::sync::oneshot::channel::<()>();
        let view = match &args.view {
            Some(view_addr) => Some(
                crate::serve_view::start(view_addr, &guard, &serving.folder, view_stopped).await?,
            ),
            None => None,
        };
        let (why, served) = serve_until_signal(
            listening,
            guard,
            table,
            make,
            serving.harness.clone(),
            "stopping now; `dsh recover` repairs the logs if they need it",
        )
        .await;
        let _ = view_stop.send(());
        if let Some(view) = view {
            let _ = view.await;
        }
        if let Some(hooks) = &serving.hooks {
            hooks.kill_all();
        }
        let folder = serving.folder.clone();
        serving.shutdown().await;
        if let Err(e) = served {
            note(format!("error: {e}"));
        }
        note(format!(
            "stopped ({why}): calls in flight were recorded as aborted; the logs in {} are closed",
            folder.display()
        ));
        Ok(0)
    })
}

/// The guard of `dsh serve --http` (the log-folder server and a fleet node): `tokens`, the
/// `--allow-host` names and `also` (a fleet node's advertised address), the tokens read again
/// from `--token-file` on each SIGHUP.
pub(crate) fn http_guard(
    args: &ServeArgs,
    tokens: &[String],
    also: Option<&str>,
) -> Result<HttpGuard, CliError> {
    let mut guard = HttpGuard::new().with_tokens(tokens);
    for host in args.allow_host.iter().map(String::as_str).chain(also) {
        guard = guard.allow_host(host);
    }
    if let Some(file) = &args.token_file {
        reload_tokens_on_sighup(file, guard.clone())?;
    }
    Ok(guard)
}

/// Serves `make`'s servers on `listening`, bounded by `table`, until SIGINT or SIGTERM; then
/// every session of `harness` first (the calls in flight are cancelled and recorded ABORTED,
/// their clients get that answer; every log is closed, every lease given back), then the
/// connections. A second signal exits at once (128 + the first's number), saying `hurried`.
/// Answers which signal stopped it, and how serving ended.
pub(crate) async fn serve_until_signal<F>(
    listening: HttpListening,
    guard: HttpGuard,
    table: Arc<SessionTable>,
    make: F,
    harness: dsh_scheduler::Harness,
    hurried: &'static str,
) -> (&'static str, Result<(), dsh_serve::ServeError>)
where
    F: Fn() -> DshServer + Send + Sync + 'static,
{
    let HttpListening {
        listener,
        mut int,
        mut term,
        ..
    } = listening;
    let received = Arc::new(AtomicI32::new(0));
    let flag = received.clone();
    let shutdown = async move {
        let first = tokio::select! {
            _ = int.recv() => SIGINT,
            _ = term.recv() => SIGTERM,
        };
        flag.store(first, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            note(hurried);
            std::process::exit(128 + first);
        });
        harness.shutdown().await;
    };
    let served = dsh_serve::serve_http_bounded(listener, guard, table, make, shutdown).await;
    let why = match received.load(Ordering::SeqCst) {
        SIGINT => "SIGINT",
        _ => "SIGTERM",
    };
    (why, served)
}

/// The listener of `dsh serve --http` and the signals that stop it.
pub(crate) struct HttpListening {
    pub listener: tokio::net::TcpListener,
    pub local: std::net::SocketAddr,
    pub int: tokio::signal::unix::Signal,
    pub term: tokio::signal::unix::Signal,
}

/// Resolves and binds `addr` for `dsh serve --http` (both the log-folder server and a fleet
/// node): a public address without a bearer token is refused, since anyone who reaches it
/// could run tools; SIGINT and SIGTERM are watched before anything is served.
pub(crate) async fn listen_http(addr: &str, no_tokens: bool) -> Result<HttpListening, CliError> {
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| CliError::Usage(format!("--http {addr}: {e}")))?
        .collect();
    let Some(bind) = resolved.first().copied() else {
        return Err(CliError::Usage(format!("--http {addr}: names no address")));
    };
    let loopback = resolved.iter().all(|a| a.ip().is_loopback());
    if no_tokens {
        if !loopback {
            return Err(CliError::Usage(format!(
                "--http {addr} is not a loopback address: anyone who can reach it could run \
                 tools, so a bearer token is required (--token-file FILE, or DSH_SERVE_TOKEN)"
            )));
        }
        note(
            "warning: no bearer token (--token-file or DSH_SERVE_TOKEN): any local program \
             can call the tools",
        );
    }
    use tokio::signal::unix::{SignalKind, signal};
    let (int, term) = (|| {
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })()
    .map_err(|e| CliError::Start(format!("cannot watch for SIGINT and SIGTERM: {e}")))?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| CliError::Start(format!("--http {addr}: cannot listen: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::Start(format!("--http {addr}: {e}")))?;
    Ok(HttpListening {
        listener,
        local,
        int,
        term,
    })
}
