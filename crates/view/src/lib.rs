//! The session view: one self-contained HTML page of a dsh session log.
//!
//! [`ViewBuilder`] takes the log's events in order (one pass; a huge log is held as the few
//! fields the page shows, each cut to [`Limits::field_bytes`], and at most
//! [`Limits::max_calls`] calls drawn), and [`render_page`] writes the page: the session's
//! figures, a timeline with a row per step and a bar per call on the step's time axis (by
//! order when the log has no times), `run_code` sub-calls nested under their parent, deferred
//! context after its step, and each call's arguments, result, error and meta on click, with a
//! filter and keyboard navigation.
//!
//! Nothing from the log becomes markup: the header's strings are HTML-escaped, the data is
//! JSON inside a `<script type="application/json">` with `<`, `>` and `&` escaped, and the
//! script draws it with `textContent`. The page's Content-Security-Policy names its own
//! script and style by hash, so a log that injects `<script>` or `onerror=` runs nothing.
//!
//! ```
//! use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
//! use dsh_view::{render_events, PageOptions};
//! let e = SessionEvent {
//!     seq: 1,
//!     step: 1,
//!     at: None,
//!     body: EventBody::UserMessage(UserMessageData { content: "<b>hi</b>".into(), origin: "c1".into() }),
//! };
//! let page = render_events([e], &PageOptions::new("demo.jsonl"));
//! assert!(page.starts_with("<!DOCTYPE html>"));
//! assert!(!page.contains("<b>hi</b>"));
//! ```

mod error;
mod model;
mod page;

pub use error::ViewError;
pub use model::{
    CallView, ContextView, Figures, Limits, OPEN, SessionView, StepView, ViewBuilder, cap_text,
};
pub use page::{PageOptions, escape_html, json_for_script, render_page};

use dsh_core::SessionEvent;
use std::io::BufRead;

/// The page of these events (in log order).
pub fn render_events(
    events: impl IntoIterator<Item = SessionEvent>,
    options: &PageOptions,
) -> String {
    let mut builder = ViewBuilder::new(options.limits);
    events.into_iter().for_each(|e| builder.push(e));
    render_page(&builder.finish(), options)
}

/// The page of a JSON Lines log read from `reader`, one line at a time: a line that is not an
/// event (a torn tail, garbage) is counted and skipped, and a line longer than
/// [`dsh_core::event::MAX_EVENT_BYTES`] is refused unread.
pub fn render_lines(reader: impl BufRead, options: &PageOptions) -> Result<String, ViewError> {
    Ok(render_page(&read_view(reader, options.limits)?, options))
}

/// The view of a JSON Lines log read from `reader`, as [`render_lines`] reads it.
pub fn read_view(reader: impl BufRead, limits: Limits) -> Result<SessionView, ViewError> {
    let _span = tracing::debug_span!("dsh_view.read").entered();
    let mut builder = ViewBuilder::new(limits);
    read_lines(reader, |line| match line {
        Some(line) => match SessionEvent::from_json_line(line) {
            Ok(event) => builder.push(event),
            Err(_) => builder.bad_line(),
        },
        None => builder.bad_line(),
    })?;
    Ok(builder.finish())
}

/// Calls `each` with every line of `reader` (without its newline), or `None` for a line that
/// is not UTF-8 or passes the largest event's size.
fn read_lines(
    mut reader: impl BufRead,
    mut each: impl FnMut(Option<&str>),
) -> Result<(), ViewError> {
    let max = dsh_core::event::MAX_EVENT_BYTES;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let mut too_long = false;
        // Reads up to the newline, keeping at most `max + 1` bytes of a line.
        loop {
            let chunk = reader.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            let (used, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(n) => (n + 1, true),
                None => (chunk.len(), false),
            };
            let take = &chunk[..if done { used - 1 } else { used }];
            if buf.len() + take.len() > max {
                too_long = true;
            } else {
                buf.extend_from_slice(take);
            }
            reader.consume(used);
            if done {
                break;
            }
        }
        if buf.is_empty() && !too_long {
            // End of input, or an empty line.
            if reader.fill_buf()?.is_empty() {
                return Ok(());
            }
            continue;
        }
        if too_long {
            each(None);
        } else {
            match std::str::from_utf8(&buf) {
                Ok(line) => each(Some(line.trim_end_matches('\r'))),
                Err(_) => each(None),
            }
        }
    }
}
