//! Turning a caught panic into a readable message.

use std::any::Any;

/// The message a panic carried, if it was a string.
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// A hook's name for a log line, asked under a panic guard (a hook that already failed may
/// fail again here).
pub(crate) fn name_of<'a>(name: impl FnOnce() -> &'a str) -> String {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| name().to_string()))
        .unwrap_or_else(|_| "<its name() panicked>".to_string())
}
