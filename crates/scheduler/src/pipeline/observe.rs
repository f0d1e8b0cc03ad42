//! `tools/result`: synchronous observers of the frozen result. An observer's panic is logged
//! and changes nothing (its `name` is asked under the same guard: this runs in the call's and
//! the scheduler's actors, which a panic must never reach).

use super::panic;
use dsh_core::{FrozenResult, Hooks};
use std::panic::AssertUnwindSafe;

pub(super) fn notify(hooks: &Hooks, result: &FrozenResult) {
    for observer in hooks.observers() {
        if std::panic::catch_unwind(AssertUnwindSafe(|| observer.observe(result))).is_err() {
            tracing::error!(
                observer = %panic::name_of(|| observer.name()),
                call_id = result.call_id(),
                "result observer panicked; the result is unchanged"
            );
        }
    }
}
