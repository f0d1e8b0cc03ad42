//! `tools/result`: synchronous observers of the frozen result. An observer's panic is logged
//! and changes nothing.

use dsh_core::{FrozenResult, Hooks};
use std::panic::AssertUnwindSafe;

pub(super) fn notify(hooks: &Hooks, result: &FrozenResult) {
    for observer in hooks.observers() {
        if std::panic::catch_unwind(AssertUnwindSafe(|| observer.observe(result))).is_err() {
            tracing::error!(
                observer = observer.name(),
                call_id = result.call_id(),
                "result observer panicked; the result is unchanged"
            );
        }
    }
}
