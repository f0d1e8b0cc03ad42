//! MCP's streamable HTTP transport: rmcp's `StreamableHttpService` (one [`DshServer`] per
//! client session, the 2025-11-25 `Mcp-Session-Id` sessions; and one per request of the
//! stateless 2026-07-28 era, which rmcp routes past its sessions) behind the [`GuardLayer`],
//! served over HTTP/1.1 by hyper on a tokio listener.

use crate::admission::Admission;
use crate::error::ServeError;
use crate::http_guard::{GuardLayer, HttpGuard};
use crate::limits::{ServeLimits, SessionTable};
use crate::server::DshServer;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
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
/// this returns (they are recorded `ABORTED`). Bounded by the default [`ServeLimits`]; see
/// [`serve_http_bounded`].
pub async fn serve_http<F>(
    listener: TcpListener,
    guard: HttpGuard,
    make_server: F,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError>
where
    F: Fn() -> DshServer + Send + Sync + 'static,
{
    let table = SessionTable::new(ServeLimits::default());
    serve_http_bounded(listener, guard, table, make_server, shutdown).await
}

/// [`serve_http`] under the bounds of `table` (shared with the [`crate::StatelessSessions`]
/// made with it, so that the sessions of both eras count together): connections, requests in
/// flight per token, the time to send a body, live sessions; and an idle session (nothing in
/// flight for [`ServeLimits::idle_timeout`]) gives back its log and memory.
pub async fn serve_http_bounded<F>(
    listener: TcpListener,
    guard: HttpGuard,
    table: Arc<SessionTable>,
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
    let mut manager = LocalSessionManager::default();
    // rmcp's idle timer restarts only on what the session sends, so it ends a session whose
    // call runs silently for longer; the reaper below counts what is in flight instead.
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let service = StreamableHttpService::new(move || Ok(make_server()), manager.clone(), config);
    let reaper = tokio::spawn(reap_idle(table.clone(), manager, stop.clone()));
    let limits = table.limits().clone();
    let connection_places = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let connections = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        // At the bound, connections wait in the listen queue until one ends.
        let place = tokio::select! {
            () = &mut shutdown => break,
            place = connection_places.clone().acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => break,
            },
        };
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
        let guarded = GuardLayer::new(guard.clone(), local).layer(Admission {
            inner: StreamWatch {
                inner: service.clone(),
            },
            table: table.clone(),
        });
        let stop = stop.clone();
        connections.spawn(async move {
            let _place = place;
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
    let _ = reaper.await;
    connections.close();
    let _ = tokio::time::timeout(
        CONNECTION_GRACE + Duration::from_secs(1),
        connections.wait(),
    )
    .await;
    Ok(())
}

/// Every so often, ends the 2025-11-25 sessions and releases the named 2026-07-28 sessions
/// that have had nothing in flight for the idle timeout.
async fn reap_idle(
    table: Arc<SessionTable>,
    manager: Arc<LocalSessionManager>,
    stop: CancellationToken,
) {
    let idle = table.limits().idle_timeout;
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut ticker = tokio::time::interval(every);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let ended = table.take_idle(idle);
        for id in &ended {
            if let Err(e) = manager.close_session(&id.as_str().into()).await {
                tracing::warn!(session = %id, error = %e, "ending an idle session failed");
            }
        }
        let released = table.release_idle_named(idle);
        if !ended.is_empty() || released > 0 {
            tracing::info!(
                ended = ended.len(),
                released,
                "gave back the logs and memory of idle sessions"
            );
        }
    }
}

/// Put in each HTTP request's extensions (rmcp hands a call the request's parts): cancelled
/// when the response's body is dropped before its end, that is when the client closed the
/// stream it was reading the answer from.
#[derive(Debug, Clone)]
pub struct StreamClosed(pub CancellationToken);

/// A response body that cancels its [`StreamClosed`] when dropped before its end.
struct WatchedBody {
    inner: BoxBody<Bytes, Infallible>,
    closed: CancellationToken,
    done: bool,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.done = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        if !self.done && !self.inner.is_end_stream() {
            self.closed.cancel();
        }
    }
}

/// Gives each request a [`StreamClosed`] and watches its response body.
#[derive(Clone)]
struct StreamWatch<S> {
    inner: S,
}

impl<S, B> tower_service::Service<Request<B>> for StreamWatch<S>
where
    S: tower_service::Service<
            Request<B>,
            Response = Response<BoxBody<Bytes, Infallible>>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let closed = CancellationToken::new();
        request
            .extensions_mut()
            .insert(StreamClosed(closed.clone()));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| {
                BoxBody::new(WatchedBody {
                    inner,
                    closed,
                    done: false,
                })
            }))
        })
    }
}
