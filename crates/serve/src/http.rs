//! MCP's streamable HTTP transport: rmcp's `StreamableHttpService` (one [`DshServer`] per
//! client session, the 2025-11-25 `Mcp-Session-Id` sessions) behind the [`GuardLayer`],
//! served over HTTP/1.1 by hyper on a tokio listener.

use crate::error::ServeError;
use crate::http_guard::{GuardLayer, HttpGuard};
use crate::server::DshServer;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;

/// How long open connections get to end after the shutdown began (their calls have been
/// answered `ABORTED` by then, or are about to be, when the caller shuts the sessions down).
const CONNECTION_GRACE: Duration = Duration::from_secs(2);

/// Serves MCP over streamable HTTP on `listener` until `shutdown` resolves: every request
/// passes `guard` first; each client session (`initialize` → `Mcp-Session-Id`) gets its own
/// server from `make_server` (see [`DshServer::per_client`]). When `shutdown` resolves, no
/// more connections are taken, every client session ends, and open connections get a short
/// grace to finish. Calls still in flight are not cancelled here: shut the harness down after
/// this returns (they are recorded `ABORTED`).
pub async fn serve_http<F>(
    listener: TcpListener,
    guard: HttpGuard,
    make_server: F,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError>
where
    F: Fn() -> DshServer + Send + Sync + 'static,
{
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        // The guard layer checks Host and Origin against the address each connection
        // arrived at; rmcp's fixed list would refuse a non-loopback bind's clients.
        .disable_allowed_hosts()
        .with_cancellation_token(stop.child_token());
    let service = StreamableHttpService::new(
        move || Ok(make_server()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let connections = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, a connection reset before accept: the server
                    // stays up for the others.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let local = match stream.local_addr() {
            Ok(local) => local,
            Err(e) => {
                tracing::warn!(error = %e, "an HTTP connection has no local address");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let guarded = GuardLayer::new(guard.clone(), local).layer(service.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(guarded));
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    match tokio::time::timeout(CONNECTION_GRACE, connection.as_mut()).await {
                        Ok(ended) => ended,
                        Err(_) => Ok(()),
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "an HTTP connection ended with an error");
            }
        });
    }
    // Every client session ends (rmcp drops their servers: each session then shuts itself
    // down), and open streams are told to close.
    stop.cancel();
    connections.close();
    let _ = tokio::time::timeout(
        CONNECTION_GRACE + Duration::from_secs(1),
        connections.wait(),
    )
    .await;
    Ok(())
}
