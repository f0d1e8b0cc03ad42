//! `dsh serve`: the pipeline as an MCP server over stdio, started the way `dsh run` starts it.

use crate::cli::{Approve, ServeArgs};
use crate::error::CliError;
use crate::harness;
use crate::output::note;
use dsh_core::ApprovalResponder;
use dsh_scheduler::CancelTarget;
use dsh_serve::{DshServer, ElicitingApprover, ServeConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use tokio::runtime::Runtime;

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

/// Serves until stdin ends (exit 0) or a signal comes (130 or 143); either way the calls in
/// flight are recorded as aborted and the log is closed.
pub fn serve(rt: &Runtime, args: &ServeArgs) -> Result<u8, CliError> {
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
            harness::start(&args.workspace, &log, &args.options, false, responder).await?;
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
        let shutdown = async move {
            let first = tokio::select! {
                _ = int.recv() => SIGINT,
                _ = term.recv() => SIGTERM,
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
