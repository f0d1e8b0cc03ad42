//! A cancellation signal that carries its reason.
//!
//! A [`Signal`] is the observing side: a tool body or a wrapper can wait on it and ask why it
//! fired, but cannot fire it. The firing side is a [`CancelHandle`]. Signals compose without
//! background tasks: [`Signal::fuse`] makes a signal that fires when any of its parts fires, and
//! reports the reason of the part that fired first. That is how the registry fuses the caller's
//! original signal back in before the body runs, whatever a wrapper handed inward.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio_util::sync::CancellationToken;

/// Why a signal fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelReason {
    /// The caller cancelled this call.
    Caller(String),
    /// A deadline passed (the timeout wrapper).
    Timeout,
    /// The step this call belongs to was cancelled.
    Step,
    /// The whole session was cancelled or shut down.
    Session,
    /// A sibling in the same step failed and the step cancels its siblings.
    SiblingFailed(String),
    /// The parent call (code mode) was cancelled.
    Parent,
}

impl CancelReason {
    /// True when the reason is a deadline rather than an interrupt.
    pub fn is_timeout(&self) -> bool {
        matches!(self, CancelReason::Timeout)
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Caller(why) if why.is_empty() => f.write_str("cancelled by the caller"),
            CancelReason::Caller(why) => write!(f, "cancelled by the caller: {why}"),
            CancelReason::Timeout => f.write_str("the deadline passed"),
            CancelReason::Step => f.write_str("the step was cancelled"),
            CancelReason::Session => f.write_str("the session was cancelled"),
            CancelReason::SiblingFailed(id) => write!(f, "sibling call {id} failed"),
            CancelReason::Parent => f.write_str("the parent call was cancelled"),
        }
    }
}

/// Orders firings across cells, so a fused signal knows which part fired first.
static FIRE_CLOCK: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
struct Cell {
    token: CancellationToken,
    reason: OnceLock<(u64, CancelReason)>,
}

impl Cell {
    fn new() -> Arc<Self> {
        Arc::new(Cell {
            token: CancellationToken::new(),
            reason: OnceLock::new(),
        })
    }

    fn fire(&self, reason: CancelReason) -> bool {
        let stamp = FIRE_CLOCK.fetch_add(1, Ordering::Relaxed);
        let first = self.reason.set((stamp, reason)).is_ok();
        self.token.cancel();
        first
    }
}

/// The observing side of a cancellation: cheap to clone, cannot fire.
///
/// ```
/// use dsh_core::signal::{CancelHandle, CancelReason, Signal};
/// let (handle, signal) = CancelHandle::new();
/// assert!(!signal.is_cancelled());
/// handle.cancel(CancelReason::Timeout);
/// assert_eq!(signal.reason(), Some(CancelReason::Timeout));
/// ```
#[derive(Clone)]
pub struct Signal {
    cells: Arc<[Arc<Cell>]>,
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("parts", &self.cells.len())
            .field("reason", &self.reason())
            .finish()
    }
}

impl Default for Signal {
    fn default() -> Self {
        Signal::never()
    }
}

impl Signal {
    /// A signal that never fires.
    pub fn never() -> Signal {
        Signal {
            cells: Arc::from(Vec::new()),
        }
    }

    /// A signal that fires when any of `parts` fires, with the reason of the first to fire.
    ///
    /// ```
    /// use dsh_core::signal::{CancelHandle, CancelReason, Signal};
    /// let (caller, caller_signal) = CancelHandle::new();
    /// let fused = Signal::fuse([Signal::never(), caller_signal]);
    /// caller.cancel(CancelReason::Step);
    /// assert_eq!(fused.reason(), Some(CancelReason::Step));
    /// ```
    pub fn fuse<I: IntoIterator<Item = Signal>>(parts: I) -> Signal {
        let mut cells: Vec<Arc<Cell>> = Vec::new();
        for part in parts {
            for cell in part.cells.iter() {
                if !cells.iter().any(|c| Arc::ptr_eq(c, cell)) {
                    cells.push(cell.clone());
                }
            }
        }
        Signal {
            cells: Arc::from(cells),
        }
    }

    /// True once any part has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cells.iter().any(|c| c.token.is_cancelled())
    }

    /// The reason of the part that fired first, if any fired.
    pub fn reason(&self) -> Option<CancelReason> {
        self.cells
            .iter()
            .filter_map(|c| c.reason.get())
            .min_by_key(|(stamp, _)| *stamp)
            .map(|(_, r)| r.clone())
    }

    /// Waits until the signal fires (forever for [`Signal::never`]) and returns its reason.
    pub async fn cancelled(&self) -> CancelReason {
        match self.cells.len() {
            0 => std::future::pending::<()>().await,
            1 => self.cells[0].token.cancelled().await,
            _ => {
                let waits = self
                    .cells
                    .iter()
                    .map(|c| Box::pin(c.token.cancelled()))
                    .collect::<Vec<_>>();
                futures::future::select_all(waits).await;
            }
        }
        self.reason()
            .unwrap_or_else(|| CancelReason::Caller(String::new()))
    }

    /// True when both signals observe exactly the same parts.
    pub fn same_as(&self, other: &Signal) -> bool {
        self.cells.len() == other.cells.len()
            && self
                .cells
                .iter()
                .zip(other.cells.iter())
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// The firing side of a signal. Dropping it does not fire the signal.
#[derive(Clone)]
pub struct CancelHandle {
    cell: Arc<Cell>,
}

impl fmt::Debug for CancelHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelHandle")
            .field("fired", &self.cell.token.is_cancelled())
            .finish()
    }
}

impl CancelHandle {
    /// A new handle and the signal it fires.
    pub fn new() -> (CancelHandle, Signal) {
        let cell = Cell::new();
        let signal = Signal {
            cells: Arc::from(vec![cell.clone()]),
        };
        (CancelHandle { cell }, signal)
    }

    /// A new handle whose signal also fires when `parent` fires (the parent's reason wins
    /// when it fired first).
    pub fn child_of(parent: &Signal) -> (CancelHandle, Signal) {
        let (handle, own) = CancelHandle::new();
        let signal = Signal::fuse([parent.clone(), own]);
        (handle, signal)
    }

    /// Fires the signal. Returns false when it had already fired (the first reason stays).
    pub fn cancel(&self, reason: CancelReason) -> bool {
        self.cell.fire(reason)
    }

    /// True once fired.
    pub fn is_cancelled(&self) -> bool {
        self.cell.token.is_cancelled()
    }

    /// A signal observing only this handle.
    pub fn signal(&self) -> Signal {
        Signal {
            cells: Arc::from(vec![self.cell.clone()]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins_across_fused_parts() {
        let (a, sa) = CancelHandle::new();
        let (b, sb) = CancelHandle::new();
        let fused = Signal::fuse([sa, sb]);
        assert!(!fused.is_cancelled());
        b.cancel(CancelReason::Timeout);
        a.cancel(CancelReason::Step);
        assert_eq!(fused.reason(), Some(CancelReason::Timeout));
        assert!(!a.cancel(CancelReason::Session), "second fire is ignored");
    }

    #[tokio::test]
    async fn cancelled_wakes_on_any_part() {
        let (a, sa) = CancelHandle::new();
        let (_b, sb) = CancelHandle::new();
        let fused = Signal::fuse([sb, sa]);
        let waiter = tokio::spawn(async move { fused.cancelled().await });
        tokio::task::yield_now().await;
        a.cancel(CancelReason::Caller("stop".into()));
        assert_eq!(waiter.await.unwrap(), CancelReason::Caller("stop".into()));
    }

    #[test]
    fn never_never_fires() {
        let s = Signal::never();
        assert!(!s.is_cancelled());
        assert_eq!(s.reason(), None);
    }
}
