//! Stdio `dsh serve --store`: the session's lease watchdog. Once the lease is lost (the owner
//! was paused past it, a renewal found it taken, an append was refused by the fence), every
//! call in flight is cancelled and its processes killed (command hooks too), and serving
//! stops: fencing keeps a stale owner out of the log, this keeps its tools from acting on the
//! workspace beside the new owner's.

use crate::output::note;
use dsh_command_hooks::CommandHooks;
use dsh_scheduler::{CancelTarget, Session};
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Why the lease was lost, once it was; and a way to wait for it.
#[derive(Clone, Default)]
pub struct LeaseLost {
    reason: Arc<Mutex<Option<String>>>,
    stopped: Arc<Notify>,
}

impl LeaseLost {
    /// Watches `lost` (none for a log file: never lost): when it resolves, cancels every call
    /// of `session` and kills the processes of `hooks`.
    pub fn watch(
        lost: Option<impl Future<Output = String> + Send + 'static>,
        session: Session,
        hooks: Option<CommandHooks>,
    ) -> LeaseLost {
        let watch = LeaseLost::default();
        let Some(lost) = lost else {
            return watch;
        };
        let state = watch.clone();
        tokio::spawn(async move {
            let why = lost.await;
            note(format!(
                "{why}: cancelling and killing the running calls; serving stops"
            ));
            *state.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            let _ = session.cancel(CancelTarget::Session);
            if let Some(hooks) = &hooks {
                hooks.kill_all();
            }
            state.stopped.notify_waiters();
            state.stopped.notify_one();
        });
        watch
    }

    /// Resolves once the lease is lost and the calls were cancelled.
    pub async fn stopped(&self) {
        if self.reason().is_some() {
            return;
        }
        self.stopped.notified().await;
    }

    /// Why the lease was lost, if it was.
    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
