//! What the page shows, gathered from the events in one pass: each call's few fields (with the
//! long ones cut to a cap), each step's calls and deferred context, and the session's figures.
//! Figures count every event; the calls the page leaves out (past its caps) are counted too.

use dsh_core::event::{CodeDispatchData, EventBody, SessionEvent, ToolCallData, ToolResultData};
use dsh_core::{ContentBlock, ToolError};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How much of a log the page holds, so that a huge log still gives a page that opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes of one field (arguments, result, meta, a context) the page inlines; the
    /// rest is cut with a note saying how much.
    pub field_bytes: usize,
    /// The most calls (sub-calls included) the page draws; later ones are counted, not drawn.
    pub max_calls: usize,
    /// The most bytes of call data the page inlines in all; calls past it are counted, not drawn.
    pub data_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            field_bytes: 8 * 1024,
            max_calls: 20_000,
            data_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One call (or `run_code` sub-call) as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CallView {
    /// Its position in `calls`.
    pub i: usize,
    /// The step it belongs to.
    pub step: u64,
    /// The seq of its `tool/call` (of its `tool/code-dispatch` for a sub-call).
    pub seq: u64,
    /// The call id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The parent call's id: the `run_code` call of a sub-call, or a `tool/call`'s `parent`.
    pub parent: Option<String>,
    /// True for a `tool/code-dispatch` sub-call.
    pub sub: bool,
    /// The arguments as the model sent them: `argumentsText` when there is one.
    pub args: String,
    /// The result as the model saw it (its text blocks; images named).
    pub result: Option<String>,
    /// `ok`, an error code of SPEC.md, or `open` (no result in the log).
    pub outcome: String,
    /// The error's message (a denial's reason).
    pub reason: Option<String>,
    /// The result's meta, as JSON text.
    pub meta: Option<String>,
    /// When its `tool/call` was made (ms since the epoch), when the log has it.
    pub at: Option<u64>,
    /// When its body started (`startedAt`).
    pub start: Option<u64>,
    /// When its result was made.
    pub end: Option<u64>,
    /// The positions of its sub-calls.
    pub children: Vec<usize>,
    /// How many bytes of its fields were cut.
    pub cut: usize,
}

/// Deferred context shown after its step.
#[derive(Debug, Clone, Serialize)]
pub struct ContextView {
    /// The call whose `additionalContexts` it came from.
    pub origin: String,
    /// The text (cut to the field cap).
    pub content: String,
}

/// One step: its calls, in seq order, and its deferred context.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    /// The step number.
    pub step: u64,
    /// Its top-level calls' positions.
    pub calls: Vec<usize>,
    /// The `user/message` events after its results.
    pub context: Vec<ContextView>,
    /// Its first event's time.
    pub first: Option<u64>,
    /// Its last event's time.
    pub last: Option<u64>,
}

/// The session's figures, counted over every event (also those the page leaves out).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// Events read.
    pub events: u64,
    /// Steps.
    pub steps: u64,
    /// Top-level calls.
    pub calls: u64,
    /// `run_code` sub-calls.
    pub subcalls: u64,
    /// Calls and sub-calls by outcome (`ok`, an error code, `open`).
    pub outcomes: BTreeMap<String, u64>,
    /// Calls by tool name.
    pub tools: BTreeMap<String, u64>,
    /// Calls and sub-calls denied (`DENIED` or `BLOCKED`).
    pub denials: u64,
    /// From the first event's time to the last's, when the log has times.
    pub wall_ms: Option<u64>,
    /// The hosts the calls' meta says were reached (`egress`/`hosts`), when the log has them.
    pub hosts: BTreeSet<String>,
}

/// Everything the page is drawn from.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// The figures.
    pub figures: Figures,
    /// True when the log carries times (`at`): the timeline is by clock, else by order.
    pub timed: bool,
    /// The steps, in order.
    pub steps: Vec<StepView>,
    /// The calls drawn, in seq order.
    pub calls: Vec<CallView>,
    /// Calls (and sub-calls) the page leaves out, past its caps.
    pub omitted_calls: u64,
    /// Fields cut to the cap.
    pub cut_fields: u64,
    /// Lines that were not events (counted, skipped).
    pub bad_lines: u64,
}

/// Builds a [`SessionView`] from events pushed in log order.
#[derive(Debug)]
pub struct ViewBuilder {
    limits: Limits,
    view: SessionView,
    /// `(step, call id)` → position, for pairing results and sub-calls within the step.
    by_id: HashMap<(u64, String), usize>,
    /// `(step, call id)` of calls left out, so their results are not counted twice.
    left_out: HashMap<(u64, String), ()>,
    data_bytes: usize,
    /// `tool/result` events read, to count the calls left open.
    results: u64,
    first_at: Option<u64>,
    last_at: Option<u64>,
}

impl ViewBuilder {
    /// A builder with these caps.
    pub fn new(limits: Limits) -> ViewBuilder {
        ViewBuilder {
            limits,
            view: SessionView {
                figures: Figures::default(),
                timed: false,
                steps: Vec::new(),
                calls: Vec::new(),
                omitted_calls: 0,
                cut_fields: 0,
                bad_lines: 0,
            },
            by_id: HashMap::new(),
            left_out: HashMap::new(),
            data_bytes: 0,
            results: 0,
            first_at: None,
            last_at: None,
        }
    }

    /// Counts a line that was not an event.
    pub fn bad_line(&mut self) {
        self.view.bad_lines += 1;
    }

    /// Takes the next event of the log.
    pub fn push(&mut self, event: SessionEvent) {
        self.view.figures.events += 1;
        if let Some(at) = event.at {
            self.view.timed = true;
            self.first_at = Some(self.first_at.map_or(at, |f| f.min(at)));
            self.last_at = Some(self.last_at.map_or(at, |l| l.max(at)));
        }
        let step = self.step_mut(event.step);
        if let Some(at) = event.at {
            step.first = Some(step.first.map_or(at, |f| f.min(at)));
            step.last = Some(step.last.map_or(at, |l| l.max(at)));
        }
        match event.body {
            EventBody::ToolCall(data) => self.call(event.step, event.seq, event.at, data),
            EventBody::ToolResult { data, .. } => self.result(event.step, event.at, data),
            EventBody::CodeDispatch(data) => self.dispatch(event.step, event.seq, event.at, data),
            // Past the caps, context is left out with the calls it follows.
            EventBody::UserMessage(_) if self.view.omitted_calls > 0 => {}
            EventBody::UserMessage(data) => {
                let (content, cut) = self.cap(data.content);
                let step = self.step_mut(event.step);
                step.context.push(ContextView {
                    origin: data.origin,
                    content,
                });
                self.note_cut(cut);
            }
        }
    }

    /// The finished view.
    pub fn finish(mut self) -> SessionView {
        let figures = &mut self.view.figures;
        figures.steps = self.view.steps.len() as u64;
        figures.wall_ms = match (self.first_at, self.last_at) {
            (Some(first), Some(last)) => Some(last.saturating_sub(first)),
            _ => None,
        };
        let open = figures.calls.saturating_sub(self.results);
        if open > 0 {
            figures.outcomes.insert(OPEN.into(), open);
        }
        // Rows only for what is drawn: a step whose calls were all left out has nothing to show.
        self.view
            .steps
            .retain(|s| !s.calls.is_empty() || !s.context.is_empty());
        self.view
    }

    fn step_mut(&mut self, step: u64) -> &mut StepView {
        // Steps come in order; a step seen again (an odd log) reuses its row.
        let found = self.view.steps.iter().rposition(|s| s.step == step);
        let index = match found {
            Some(i) => i,
            None => {
                self.view.steps.push(StepView {
                    step,
                    calls: Vec::new(),
                    context: Vec::new(),
                    first: None,
                    last: None,
                });
                self.view.steps.len() - 1
            }
        };
        &mut self.view.steps[index]
    }

    fn cap(&self, text: String) -> (String, usize) {
        cap_text(text, self.limits.field_bytes)
    }

    fn note_cut(&mut self, cut: usize) {
        if cut > 0 {
            self.view.cut_fields += 1;
        }
    }

    /// True when one more call of `bytes` fits the page's caps.
    fn fits(&mut self, bytes: usize) -> bool {
        if self.view.calls.len() >= self.limits.max_calls
            || self.data_bytes.saturating_add(bytes) > self.limits.data_bytes
        {
            self.view.omitted_calls += 1;
            return false;
        }
        self.data_bytes += bytes;
        true
    }

    fn call(&mut self, step: u64, seq: u64, at: Option<u64>, data: ToolCallData) {
        self.view.figures.calls += 1;
        *self
            .view
            .figures
            .tools
            .entry(data.name.clone())
            .or_default() += 1;
        let args = match data.arguments_text {
            Some(text) => text,
            None => data.arguments.to_string(),
        };
        let (args, cut) = self.cap(args);
        if !self.fits(args.len() + data.name.len() + data.call_id.len()) {
            self.left_out.insert((step, data.call_id), ());
            return;
        }
        self.note_cut(cut);
        let i = self.view.calls.len();
        let parent = data.parent;
        if let Some(p) = parent
            .as_ref()
            .and_then(|p| self.by_id.get(&(step, p.clone())))
            .copied()
        {
            self.view.calls[p].children.push(i);
        } else {
            self.step_mut(step).calls.push(i);
        }
        self.by_id.insert((step, data.call_id.clone()), i);
        self.view.calls.push(CallView {
            i,
            step,
            seq,
            id: data.call_id,
            name: data.name,
            parent,
            sub: false,
            args,
            result: None,
            outcome: OPEN.into(),
            reason: None,
            meta: None,
            at,
            start: None,
            end: None,
            children: Vec::new(),
            cut,
        });
    }

    fn result(&mut self, step: u64, at: Option<u64>, data: ToolResultData) {
        self.results += 1;
        let outcome = outcome_of(data.error.as_ref());
        *self
            .view
            .figures
            .outcomes
            .entry(outcome.clone())
            .or_default() += 1;
        if is_denial(&outcome) {
            self.view.figures.denials += 1;
        }
        if let Some(meta) = &data.meta {
            hosts_in(meta.get("egress"), &mut self.view.figures.hosts);
            hosts_in(meta.get("hosts"), &mut self.view.figures.hosts);
        }
        let key = (step, data.call_id);
        if self.left_out.remove(&key).is_some() {
            return;
        }
        let Some(&i) = self.by_id.get(&key) else {
            return;
        };
        let (result, cut_result) = self.cap(text_of(&data.message));
        let (reason, cut_reason) = match data.error {
            Some(e) => {
                let (r, c) = self.cap(e.message);
                (Some(r), c)
            }
            None => (None, 0),
        };
        let (meta, cut_meta) = match data.meta {
            Some(m) => {
                let (m, c) = self.cap(Value::Object(m).to_string());
                (Some(m), c)
            }
            None => (None, 0),
        };
        let bytes = result.len() + reason.as_ref().map_or(0, String::len);
        self.data_bytes = self
            .data_bytes
            .saturating_add(bytes + meta.as_ref().map_or(0, String::len));
        for cut in [cut_result, cut_reason, cut_meta] {
            self.note_cut(cut);
        }
        let call = &mut self.view.calls[i];
        // A second result for one call (an odd log) is shown as the last one read.
        call.outcome = outcome;
        call.result = Some(result);
        call.reason = reason;
        call.meta = meta;
        call.start = data.started_at;
        call.end = at;
        call.cut += cut_result + cut_reason + cut_meta;
    }

    fn dispatch(&mut self, step: u64, seq: u64, at: Option<u64>, data: CodeDispatchData) {
        self.view.figures.subcalls += 1;
        let outcome = outcome_of(data.error.as_ref());
        *self
            .view
            .figures
            .outcomes
            .entry(outcome.clone())
            .or_default() += 1;
        if is_denial(&outcome) {
            self.view.figures.denials += 1;
        }
        *self
            .view
            .figures
            .tools
            .entry(data.name.clone())
            .or_default() += 1;
        let (args, cut_args) = self.cap(data.arguments.to_string());
        let (result, cut_result) = self.cap(text_of(&data.message));
        let (reason, cut_reason) = match data.error {
            Some(e) => {
                let (r, c) = self.cap(e.message);
                (Some(r), c)
            }
            None => (None, 0),
        };
        let bytes = args.len() + result.len() + reason.as_ref().map_or(0, String::len);
        if !self.fits(bytes) {
            return;
        }
        for cut in [cut_args, cut_result, cut_reason] {
            self.note_cut(cut);
        }
        let i = self.view.calls.len();
        match self
            .by_id
            .get(&(step, data.parent_call_id.clone()))
            .copied()
        {
            Some(p) => self.view.calls[p].children.push(i),
            None => self.step_mut(step).calls.push(i),
        }
        self.view.calls.push(CallView {
            i,
            step,
            seq,
            id: data.call_id,
            name: data.name,
            parent: Some(data.parent_call_id),
            sub: true,
            args,
            result: Some(result),
            outcome,
            reason,
            meta: None,
            at,
            start: None,
            end: at,
            children: Vec::new(),
            cut: cut_args + cut_result + cut_reason,
        });
    }
}

/// The outcome of a call with no result in the log.
pub const OPEN: &str = "open";

fn outcome_of(error: Option<&ToolError>) -> String {
    match error {
        Some(e) => e.code.as_str().to_string(),
        None => "ok".to_string(),
    }
}

fn is_denial(outcome: &str) -> bool {
    outcome == "DENIED" || outcome == "BLOCKED"
}

/// The result as the model saw it: its text blocks, one after another; other blocks named.
fn text_of(message: &[ContentBlock]) -> String {
    let mut out = String::new();
    for (n, block) in message.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        match block {
            ContentBlock::Text { text } => out.push_str(text),
            ContentBlock::Image { media_type, data } => {
                out.push_str(&format!(
                    "[image {media_type}, {} bytes base64]",
                    data.len()
                ));
            }
        }
    }
    out
}

fn hosts_in(value: Option<&Value>, into: &mut BTreeSet<String>) {
    let Some(Value::Array(items)) = value else {
        return;
    };
    for item in items.iter().take(1000) {
        let host = match item {
            Value::String(s) => Some(s.as_str()),
            Value::Object(o) => o.get("host").and_then(Value::as_str),
            _ => None,
        };
        if let Some(h) = host
            && into.len() < 1000
        {
            into.insert(h.chars().take(256).collect());
        }
    }
}

/// Cuts `text` to at most `cap` bytes (on a char boundary) with a note saying how much was
/// left out; answers the text and the bytes cut.
pub fn cap_text(mut text: String, cap: usize) -> (String, usize) {
    if text.len() <= cap {
        return (text, 0);
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("\n… [dsh view: {cut} more bytes not shown]"));
    (text, cut)
}
