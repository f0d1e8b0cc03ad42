//! A count of this process's live dsh actors, so tests and benches can prove none leak.

use std::sync::atomic::{AtomicI64, Ordering};

static LIVE: AtomicI64 = AtomicI64::new(0);

/// Held in an actor's state: counts the actor as live until the state is dropped, which
/// happens on every exit path (stop, kill, panic).
///
/// ```
/// use dsh_core::live::{live_actors, LiveActor};
/// let before = live_actors();
/// let guard = LiveActor::new();
/// assert_eq!(live_actors(), before + 1);
/// drop(guard);
/// assert_eq!(live_actors(), before);
/// ```
#[derive(Debug)]
pub struct LiveActor(());

impl LiveActor {
    /// Counts one more live actor.
    pub fn new() -> LiveActor {
        LIVE.fetch_add(1, Ordering::SeqCst);
        LiveActor(())
    }
}

impl Default for LiveActor {
    fn default() -> Self {
        LiveActor::new()
    }
}

impl Drop for LiveActor {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many dsh actors are alive in this process now.
pub fn live_actors() -> i64 {
    LIVE.load(Ordering::SeqCst)
}
