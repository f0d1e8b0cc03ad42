//! `dsh serve --http ADDR --view VIEW_ADDR`: the pages of the sessions on a listener of their
//! own (see `dsh_serve::serve_view`).

use crate::error::CliError;
use crate::output::note;
use dsh_serve::HttpGuard;
use std::path::Path;

/// Binds `addr` and serves the pages of the logs in `folder` behind `guard` until `stop`
/// resolves (or its sender is dropped). A non-loopback address needs tokens, as `--http` does.
pub async fn start(
    addr: &str,
    guard: &HttpGuard,
    folder: &Path,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<tokio::task::JoinHandle<()>, CliError> {
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| CliError::Usage(format!("--view {addr}: {e}")))?
        .collect();
    let Some(bind) = resolved.first().copied() else {
        return Err(CliError::Usage(format!("--view {addr}: names no address")));
    };
    if !guard.requires_token() && !resolved.iter().all(|a| a.ip().is_loopback()) {
        return Err(CliError::Usage(format!(
            "--view {addr} is not a loopback address: anyone who can reach it could read the \
             sessions, so a bearer token is required (--token-file FILE, or DSH_SERVE_TOKEN)"
        )));
    }
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| CliError::Start(format!("--view {addr}: cannot listen: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::Start(format!("--view {addr}: {e}")))?;
    let login = if guard.requires_token() {
        " (log in with your bearer token)"
    } else {
        ""
    };
    note(format!(
        "serving the sessions' pages on http://{local}/{login}"
    ));
    let guard = guard.clone();
    let folder = folder.to_path_buf();
    Ok(tokio::spawn(async move {
        let stopped = async {
            let _ = stop.await;
        };
        if let Err(e) = dsh_serve::serve_view(listener, guard, folder, stopped).await {
            note(format!("error: --view: {e}"));
        }
    }))
}
