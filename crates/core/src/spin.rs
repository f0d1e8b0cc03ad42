//! Adaptive spinning before sleeping, for the two sides of a hand-off to the user-code pool.
//!
//! A wait that sleeps costs a wake-up across threads when its event comes: a futex call, and
//! on a VM whose idle vCPU has halted, tens of microseconds before the woken thread runs.
//! Spinning a little first avoids that when the event comes soon, and wastes the core when it
//! does not (or when another thread needs that core to make the event happen). So whether to
//! spin follows what spinning achieved, as a branch predictor does: a spin that saw its event
//! earns [`HIT_CREDIT`] credit (at most [`MAX_CREDIT`]), one that did not costs one; a full
//! window is spun while there is credit (so spinning stays on while at least about one spin in
//! three pays off); without credit, one wait in [`PROBE_EVERY`] spins a full window as a
//! probe, so a machine that becomes quiet again is noticed.
//! A fixed window set by the environment (`DSH_POOL_SPIN_US`, `DSH_POOL_CALLER_SPIN_US`;
//! `0` turns spinning off) replaces the adaptation.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// While spinning is off, one wait in this many spins a probe.
pub(crate) const PROBE_EVERY: u32 = 32;

/// What a spin that saw its event earns.
const HIT_CREDIT: u32 = 2;

/// The most credit kept: after a change of conditions, at most this many spins miss.
const MAX_CREDIT: u32 = 4;

/// How wide a spin may be, learnt from what earlier spins achieved.
#[derive(Debug)]
pub(crate) struct AdaptiveSpin {
    /// Set by the environment: no adaptation.
    fixed: Option<Duration>,
    max_us: u32,
    /// Spins still to be tried (see the module's doc).
    credit: AtomicU32,
    /// Waits since spinning went off (for the probes).
    off_waits: AtomicU32,
}

impl AdaptiveSpin {
    /// A window of at most `max_us`, starting there, unless `env` names a fixed one.
    pub(crate) fn new(env: &str, max_us: u32) -> AdaptiveSpin {
        let fixed = std::env::var(env)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| Duration::from_micros(us.min(10_000)));
        AdaptiveSpin {
            fixed,
            max_us,
            credit: AtomicU32::new(MAX_CREDIT),
            off_waits: AtomicU32::new(0),
        }
    }

    /// Never spins (for tests that need a thread asleep).
    #[cfg(test)]
    pub(crate) fn off() -> AdaptiveSpin {
        AdaptiveSpin::fixed(Duration::ZERO)
    }

    /// Always spins `window` (for tests).
    #[cfg(test)]
    pub(crate) fn fixed(window: Duration) -> AdaptiveSpin {
        AdaptiveSpin {
            fixed: Some(window),
            max_us: 0,
            credit: AtomicU32::new(0),
            off_waits: AtomicU32::new(0),
        }
    }

    /// How long to spin now (zero: sleep at once).
    pub(crate) fn window(&self) -> Duration {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        let full = Duration::from_micros(u64::from(self.max_us));
        if self.credit.load(Ordering::Relaxed) > 0 {
            return full;
        }
        let waits = self
            .off_waits
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        if waits.is_multiple_of(PROBE_EVERY) {
            // A probe as wide as a spin may be: a narrower one would miss events that a
            // full window catches, and spinning would never come back.
            full
        } else {
            Duration::ZERO
        }
    }

    /// A spin of `window` ended; `hit`: what it waited for came while it spun.
    pub(crate) fn record(&self, window: Duration, hit: bool) {
        if self.fixed.is_some() || window.is_zero() {
            return;
        }
        let credit = self.credit.load(Ordering::Relaxed);
        let next = if hit {
            (credit + HIT_CREDIT).min(MAX_CREDIT)
        } else {
            credit.saturating_sub(1)
        };
        self.credit.store(next, Ordering::Relaxed);
    }
}

/// At most one thread of the process spins for pool work at a time: two spinning threads
/// (the user-code pool's and the guard set's) on a two-core machine would take the cores
/// from the callers they wait for.
static SPINNER: AtomicBool = AtomicBool::new(false);

/// The right to spin for work, held by one thread of the process; given back when dropped.
pub(crate) struct SpinTurn(());

impl SpinTurn {
    /// The turn, if no other thread holds it.
    pub(crate) fn take() -> Option<SpinTurn> {
        SPINNER
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(SpinTurn(()))
    }
}

impl Drop for SpinTurn {
    fn drop(&mut self) {
        SPINNER.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive(max_us: u32) -> AdaptiveSpin {
        AdaptiveSpin::new("DSH_TEST_SPIN_THAT_IS_NEVER_SET", max_us)
    }

    #[test]
    fn spins_that_miss_turn_spinning_off_and_probes_bring_it_back() {
        let spin = adaptive(128);
        let full = Duration::from_micros(128);
        assert_eq!(spin.window(), full);
        // One spin in three paying off keeps spinning on.
        for _ in 0..10 {
            spin.record(spin.window(), true);
            spin.record(spin.window(), false);
            spin.record(spin.window(), false);
            assert_eq!(spin.window(), full);
        }
        // Misses only: off after at most MAX_CREDIT of them.
        for _ in 0..MAX_CREDIT {
            let w = spin.window();
            spin.record(w, false);
        }
        let windows: Vec<Duration> = (0..PROBE_EVERY).map(|_| spin.window()).collect();
        let probes: Vec<&Duration> = windows.iter().filter(|w| !w.is_zero()).collect();
        assert_eq!(
            probes,
            vec![&full],
            "one full probe in {PROBE_EVERY} waits while off"
        );
        // A probe that hits turns spinning back on.
        spin.record(full, true);
        assert_eq!(spin.window(), full);
    }

    #[test]
    fn one_spinner_at_a_time() {
        // A pool thread of another test may hold the turn for a moment.
        let first = loop {
            if let Some(turn) = SpinTurn::take() {
                break turn;
            }
            std::thread::yield_now();
        };
        assert!(SpinTurn::take().is_none(), "a second spinner got the turn");
        drop(first);
    }
}
