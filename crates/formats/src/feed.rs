//! A streamed response fed straight into a running step: each call is pushed the moment its
//! block is complete, so a safe call runs while the model is still writing later ones.

use crate::Format;
use crate::stream::ToolCallStream;
use dsh_core::ToolCall;
use serde_json::Value;
use std::fmt;

/// Where a [`StreamFeeder`] hands each completed call.
///
/// Any `FnMut(ToolCall) -> T` is one, so an open step of `dsh-scheduler` is fed through a
/// closure, `|call| step.push(call)`, and `T` is what its push answers (the call's pending
/// result). The trait keeps this crate (model shapes, at the edge) free of the scheduler.
pub trait CallSink {
    /// What pushing one call gives back (kept, in push order, by the feeder).
    type Pushed;
    /// Hands over one complete call.
    fn push_call(&mut self, call: ToolCall) -> Self::Pushed;
}

impl<F, T> CallSink for F
where
    F: FnMut(ToolCall) -> T,
{
    type Pushed = T;

    fn push_call(&mut self, call: ToolCall) -> T {
        self(call)
    }
}

/// A [`ToolCallStream`] whose completed calls go straight into a [`CallSink`] (an open
/// step), as the bytes arrive.
///
/// A call is pushed when its block is complete (see [`ToolCallStream`]: Anthropic on its
/// `content_block_stop`, OpenAI/DeepSeek when a later `index` starts or the stream ends), with
/// its arguments exactly as the model wrote them ([`dsh_core::Arguments::parse`]: the log
/// keeps the text as `argumentsText` when re-serializing would change a byte). A block whose
/// arguments are not JSON is pushed all the same and answered `TOOL_INPUT_ERROR` by the
/// pipeline; the other calls run as usual. [`StreamFeeder::finish`] pushes what is still open
/// when the response ends (or breaks off) and gives back everything pushed, in block order.
///
/// With `dsh-scheduler`'s open step:
///
/// ```text
/// let step = session.open_step()?;
/// let mut feeder = StreamFeeder::new(Format::OpenAi, |call| step.push(call));
/// while let Some(chunk) = response.chunk().await? {
///     feeder.push_bytes(&chunk);            // calls start here, mid-stream
/// }
/// let pending = feeder.finish();            // Vec<Result<PendingCall, SchedulerError>>
/// let outcome = step.finish().await?;       // every result, recorded, in block order
/// ```
///
/// Any closure works as the sink:
///
/// ```
/// use dsh_formats::{Format, StreamFeeder};
/// let mut started = Vec::new();
/// let mut feeder = StreamFeeder::new(Format::OpenAi, |call: dsh_core::ToolCall| {
///     started.push(call.name.clone());
///     call.call_id
/// });
/// let chunk = |json: &str| format!("data: {json}\n\n");
/// feeder.push_bytes(chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"glob","arguments":"{\"pattern\": \"*.rs\"}"}}]}}]}"#).as_bytes());
/// assert_eq!(feeder.pushed().len(), 0, "c1 may still grow");
/// feeder.push_bytes(chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"read_file","arguments":"{}"}}]}}]}"#).as_bytes());
/// assert_eq!(feeder.pushed(), ["c1"], "c2 started, so c1 is complete and pushed");
/// assert_eq!(feeder.finish(), ["c1", "c2"]);
/// assert_eq!(started, ["glob", "read_file"]);
/// ```
pub struct StreamFeeder<S: CallSink> {
    stream: ToolCallStream,
    sink: S,
    pushed: Vec<S::Pushed>,
}

impl<S: CallSink> fmt::Debug for StreamFeeder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamFeeder")
            .field("stream", &self.stream)
            .field("pushed", &self.pushed.len())
            .finish_non_exhaustive()
    }
}

impl<S: CallSink> StreamFeeder<S> {
    /// A feeder of `format`'s events into `sink`.
    pub fn new(format: Format, sink: S) -> StreamFeeder<S> {
        StreamFeeder {
            stream: ToolCallStream::new(format),
            sink,
            pushed: Vec::new(),
        }
    }

    /// Feeds raw server-sent-event bytes, split anywhere; pushes the calls they complete.
    /// Answers how many calls it pushed.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> usize {
        let calls = self.stream.push_bytes(bytes);
        self.push(calls)
    }

    /// Feeds one decoded event (an OpenAI chunk, an Anthropic event); pushes the calls it
    /// completes. Answers how many calls it pushed.
    pub fn push_event(&mut self, event: &Value) -> usize {
        let calls = self.stream.push_event(event);
        self.push(calls)
    }

    /// What the sink gave back for each call pushed so far, in block order.
    pub fn pushed(&self) -> &[S::Pushed] {
        &self.pushed
    }

    /// The assembler, for [`ToolCallStream::malformed_events`].
    pub fn stream(&self) -> &ToolCallStream {
        &self.stream
    }

    /// The end of the response: pushes every call still open as it stands (arguments cut
    /// short are answered `TOOL_INPUT_ERROR`), and gives back what the sink answered for every
    /// call, in block order.
    pub fn finish(mut self) -> Vec<S::Pushed> {
        let calls = self.stream.finish();
        self.push(calls);
        self.pushed
    }

    fn push(&mut self, calls: Vec<ToolCall>) -> usize {
        let n = calls.len();
        for call in calls {
            tracing::debug!(call_id = %call.call_id, tool = %call.name, "streamed call complete");
            let pushed = self.sink.push_call(call);
            self.pushed.push(pushed);
        }
        n
    }
}
