//! What a tool is: its definition, the input it runs with, and how it fails.

use crate::content::ContentBlock;
use crate::dispatcher::SubCallDispatcher;
use crate::error::ErrorCode;
use crate::paths::{Confinement, DeclaredPath, PathArg, ResolvedPaths, declared_by_args};
use crate::policy::PathPolicies;
use crate::signal::Signal;
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the scheduler may place a tool's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// A barrier: runs alone, after every earlier call and before every later one.
    #[default]
    Exclusive,
    /// May share the rolling pool with neighbouring parallel calls, when
    /// [`ToolDefinition::is_concurrency_safe`] also returns `true` for the input.
    Parallel,
}

/// Opt-in retries for a tool, applied by the retry wrapper to failures marked retryable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 means no retry).
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled for each further one.
    pub backoff: Duration,
}

/// A failure reported by a tool's body (or by a wrapper around it).
///
/// A failure may carry content: what the model sees in place of the bare message (a command's
/// output up to its timeout, say). The message stays the short `error.message`; the content
/// is the result's presentation, bounded like a success's.
///
/// ```
/// use dsh_core::{ContentBlock, ErrorCode, ToolFailure};
/// let f = ToolFailure::new("disk on fire").retryable();
/// assert_eq!(f.code, ErrorCode::ToolError);
/// assert!(f.retryable);
/// let timed_out = ToolFailure::with_code(ErrorCode::ToolTimeout, "killed after 5 s")
///     .with_content(vec![ContentBlock::text("compiling foo…")]);
/// assert_eq!(timed_out.content.unwrap()[0].as_text(), Some("compiling foo…"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// The code the result will carry; bodies normally use `TOOL_ERROR`.
    pub code: ErrorCode,
    /// What the model is told.
    pub message: String,
    /// Whether the retry wrapper may try again.
    pub retryable: bool,
    /// The result's presentation, when it says more than the message (partial output); none
    /// means the message alone.
    pub content: Option<Vec<ContentBlock>>,
    /// Metadata the result persists beside the error.
    pub meta: Option<Map<String, Value>>,
}

impl ToolFailure {
    /// A `TOOL_ERROR` failure.
    pub fn new(message: impl Into<String>) -> ToolFailure {
        ToolFailure::with_code(ErrorCode::ToolError, message)
    }

    /// A failure with an explicit code.
    pub fn with_code(code: ErrorCode, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            code,
            message: message.into(),
            retryable: false,
            content: None,
            meta: None,
        }
    }

    /// Marks the failure as worth retrying.
    pub fn retryable(mut self) -> ToolFailure {
        self.retryable = true;
        self
    }

    /// The content the model sees for this failure, in place of the bare message.
    pub fn with_content(mut self, content: Vec<ContentBlock>) -> ToolFailure {
        self.content = Some(content);
        self
    }

    /// Metadata for the failed result.
    pub fn with_meta(mut self, meta: Map<String, Value>) -> ToolFailure {
        self.meta = Some(meta);
        self
    }
}

/// A view of a running body's output so far, kept by the pipeline: a call interrupted while
/// its body runs (a cancel stops the call at once, without waiting for the body) still shows
/// what the body had, after its `ABORTED` message. A body that has nothing worth showing
/// ignores it.
///
/// ```
/// use dsh_core::{ContentBlock, PartialOutput};
/// let partial = PartialOutput::default();
/// assert!(partial.snapshot().is_none());
/// partial.publish(|| vec![ContentBlock::text("line 1")]);
/// assert_eq!(partial.snapshot().unwrap()[0].as_text(), Some("line 1"));
/// ```
#[derive(Clone, Default)]
pub struct PartialOutput {
    view: Arc<Mutex<Option<PartialView>>>,
}

type PartialView = Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync>;

impl fmt::Debug for PartialOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialOutput")
            .field("published", &self.current().is_some())
            .finish()
    }
}

impl PartialOutput {
    /// Publishes how to render the output so far; called again, replaces the view.
    pub fn publish(&self, view: impl Fn() -> Vec<ContentBlock> + Send + Sync + 'static) {
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(view));
    }

    /// The output so far, if the body published a view.
    pub fn snapshot(&self) -> Option<Vec<ContentBlock>> {
        // Rendered outside the lock: a view may take its own locks.
        self.current().map(|view| view())
    }

    fn current(&self) -> Option<PartialView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What a tool's permission subjects are, so that rules match them the right way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectKind {
    /// Paths: normalized, matched like `.gitignore` lines, a folder rule covering what is
    /// inside it; a rule matches when it matches any subject.
    #[default]
    Path,
    /// Commands: each subject is one simple command of what the tool runs, its words encoded
    /// by [`crate::command_words::encode`]. A rule's pattern is matched as a prefix of words;
    /// `allow` covers the call only when every subject is covered, `deny` and `ask` match when
    /// any subject may match (a word only known when the command runs may match anything for
    /// them, and nothing for `allow`).
    Command,
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// What the body receives besides its input.
#[derive(Clone)]
pub struct ToolContext {
    /// The call's id, as the model gave it.
    pub call_id: String,
    /// The agent that made the call.
    pub agent: String,
    /// The parent call, for code-mode sub-calls.
    pub parent: Option<String>,
    /// The fused signal: the caller's own, plus whatever the wrappers added (deadlines).
    pub signal: Signal,
    /// 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// Sends sub-calls back through the whole pipeline (code mode).
    pub dispatcher: Option<Arc<dyn SubCallDispatcher>>,
    /// The pipeline's path policies: a body asks them about every path it reads or writes
    /// (see [`crate::policy`]). A sub-context (code mode) carries its parent's.
    pub policy: PathPolicies,
    /// Where the body may publish its output so far (see [`PartialOutput`]).
    pub partial: PartialOutput,
    /// The call's declared paths ([`ToolDefinition::path_args`]), resolved inside the
    /// workspace and allowed by the path policies before the body runs: read and write them
    /// through these handles, never by their raw names. Empty when the tool declares none or
    /// no workspace confines the pipeline.
    pub paths: ResolvedPaths,
    /// The workspace that confines the pipeline's paths, if one does (the file tools'
    /// sandbox): typed tools resolve their `WorkspacePath` arguments through it.
    pub confinement: Option<Arc<dyn Confinement>>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id)
            .field("agent", &self.agent)
            .field("parent", &self.parent)
            .field("attempt", &self.attempt)
            .finish()
    }
}

impl ToolContext {
    /// A context for calling a body directly (tests, benches).
    ///
    /// ```
    /// use dsh_core::ToolContext;
    /// let ctx = ToolContext::detached("call_1");
    /// assert!(!ctx.signal.is_cancelled());
    /// ```
    pub fn detached(call_id: impl Into<String>) -> ToolContext {
        ToolContext {
            call_id: call_id.into(),
            agent: "main".into(),
            parent: None,
            signal: Signal::never(),
            attempt: 1,
            dispatcher: None,
            policy: PathPolicies::none(),
            partial: PartialOutput::default(),
            paths: ResolvedPaths::default(),
            confinement: None,
        }
    }
}

/// A tool. Implementors give the schema, the body and the presentation; the pipeline does the
/// rest (validation, policy, timeouts, normalization).
///
/// ```
/// use async_trait::async_trait;
/// use dsh_core::{ToolContext, ToolDefinition, ToolFailure};
/// use serde_json::{json, Value};
///
/// struct Echo;
///
/// #[async_trait]
/// impl ToolDefinition for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn description(&self) -> &str { "Returns its text." }
///     fn input_schema(&self) -> Value {
///         json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
///     }
///     async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
///         Ok(input["text"].clone())
///     }
/// }
///
/// # tokio_test_block(async {
/// let value = Echo.execute(json!({"text": "hi"}), ToolContext::detached("c1")).await.unwrap();
/// assert_eq!(Echo.present(&value)[0].as_text(), Some("hi"));
/// # });
/// # fn tokio_test_block<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[async_trait]
pub trait ToolDefinition: Send + Sync + 'static {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What the model is told it does.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments (compiled once, at registration).
    fn input_schema(&self) -> Value;

    /// JSON Schema of the canonical value, if the tool promises one.
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Exclusive unless the tool says otherwise.
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Exclusive
    }

    /// Whether this particular input may run beside others. Only an exact `true` counts.
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        false
    }

    /// The tool's own deadline, read by the timeout wrapper.
    fn timeout_ms(&self) -> Option<u64> {
        None
    }

    /// The deadline of one call, which may depend on its input (a `timeout_ms` argument);
    /// by default [`ToolDefinition::timeout_ms`]. The timeout wrapper reads this one.
    fn timeout_ms_for(&self, _input: &Value) -> Option<u64> {
        self.timeout_ms()
    }

    /// True when the body enforces its deadline itself and answers `TOOL_TIMEOUT` with what
    /// it has (a command's output so far). The timeout wrapper then does not cut the body at
    /// the deadline: it waits the deadline plus its owned-deadline grace, keeps the body's
    /// own answer, and only past that answers a bare `TOOL_TIMEOUT` as for any tool.
    fn owns_deadline(&self) -> bool {
        false
    }

    /// Opt-in retry policy, read by the retry wrapper.
    fn retry_policy(&self) -> Option<RetryPolicy> {
        None
    }

    /// What [`ToolDefinition::permission_subjects`] are: paths unless the tool says otherwise.
    fn permission_subject_kind(&self) -> SubjectKind {
        SubjectKind::Path
    }

    /// The strings permission rules match against (`tool(pattern)`): by default the declared
    /// paths ([`ToolDefinition::declared_paths`]), or else the `path` argument, if there is one.
    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        let declared = self.declared_paths(input);
        if !declared.is_empty() {
            return declared.into_iter().map(|d| d.raw).collect();
        }
        input
            .get("path")
            .and_then(Value::as_str)
            .map(|p| vec![p.to_string()])
            .unwrap_or_default()
    }

    /// The top-level arguments that are paths, and whether the tool reads or writes them. The
    /// pipeline confines them to the workspace before the body runs, matches them against the
    /// `read(…)`/`write(…)` permission rules, and hands the body their resolved handles in
    /// [`ToolContext::paths`] (see [`crate::paths`]). None by default: the tool is unchanged.
    ///
    /// ```
    /// # use async_trait::async_trait;
    /// use dsh_core::{PathArg, ToolContext, ToolDefinition, ToolFailure};
    /// use serde_json::{json, Value};
    /// struct WordCount;
    /// #[async_trait]
    /// impl ToolDefinition for WordCount {
    ///     fn name(&self) -> &str { "word_count" }
    ///     fn description(&self) -> &str { "Counts the words of a file." }
    ///     fn input_schema(&self) -> Value {
    ///         json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    ///     }
    ///     fn path_args(&self) -> Vec<PathArg> { vec![PathArg::read("path")] }
    ///     async fn execute(&self, _input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
    ///         let file = ctx.paths.get("path").ok_or_else(|| ToolFailure::new("no workspace"))?;
    ///         let text = file.read_to_string(1 << 20).map_err(|e| ToolFailure::new(e.to_string()))?;
    ///         Ok(json!(text.split_whitespace().count()))
    ///     }
    /// }
    /// assert_eq!(WordCount.declared_paths(&json!({"path": "a.txt"}))[0].raw, "a.txt");
    /// ```
    fn path_args(&self) -> Vec<PathArg> {
        Vec::new()
    }

    /// The paths one call declares, with their access: by default the strings of
    /// [`ToolDefinition::path_args`]. A tool whose paths hide inside another argument (a patch)
    /// says so here.
    fn declared_paths(&self, input: &Value) -> Vec<DeclaredPath> {
        declared_by_args(&self.path_args(), input)
    }

    /// Whether the tool declares its paths at all (by default: it has
    /// [`ToolDefinition::path_args`]). A tool that does not, and has a string argument named
    /// like a path, is warned about once when it is registered.
    fn declares_paths(&self) -> bool {
        !self.path_args().is_empty()
    }

    /// True for a tool that resolves and checks its declared paths itself, through the
    /// workspace, as it uses them (the built-in file tools): the pipeline still confines and
    /// judges them before the call runs, but does not resolve them again for the body.
    fn resolves_own_paths(&self) -> bool {
        false
    }

    /// The built-in call this call stands for, when the tool is an adapter over another tool
    /// (a tool profile's `Edit` over `edit_file`): that tool's name and the input translated
    /// for it. Handlers keyed on built-in tool names (workspace confinement, read-only mode)
    /// judge this call as that one. `None` (the default) for a tool that is its own.
    fn stands_for(&self, _input: &Value) -> Option<(String, Value)> {
        None
    }

    /// The dry run of the body (`dsh run --dry-run`): the checks the body would make before
    /// it changes anything (the path policies per resolved path, the `fs/*-intent` handlers
    /// and read-before-edit), changing nothing in the world; `Err` is the refusal the body
    /// would answer. A tool whose later calls depend on what earlier ones did may record the
    /// effect in its own state (a judged read counts as a read for read-before-edit), so a
    /// harness that judges calls must not also run them. `Ok(())` (the default) for a tool
    /// whose body checks nothing of the kind.
    async fn dry_run(&self, _input: Value, _ctx: ToolContext) -> Result<(), ToolFailure> {
        Ok(())
    }

    /// The body. Returns the canonical value, which stays private to the execution.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure>;

    /// The presentation of the canonical value: what the model sees and the log keeps.
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        crate::inline::note::<Self>(crate::inline::PRESENT);
        match value {
            Value::String(s) => vec![ContentBlock::text(s.clone())],
            other => vec![ContentBlock::text(other.to_string())],
        }
    }

    /// Optional top-level arguments whose empty value (`""`, `0`, `[]`, `{}`) can only mean
    /// "not given": the pipeline drops them before anything looks at the arguments, as it drops
    /// an optional argument given as `null` that its schema does not take (models under strict
    /// function calling send one or the other for every property they do not mean). None by
    /// default.
    fn empty_means_absent(&self) -> &[&'static str] {
        &[]
    }

    /// Metadata persisted with a successful result (never shown to the model); none by default.
    fn result_meta(&self, _value: &Value) -> Option<Map<String, Value>> {
        crate::inline::note::<Self>(crate::inline::RESULT_META);
        None
    }

    /// The last, pure, content-only invariant. Runs exactly once per result of this tool.
    fn finalize_content(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        crate::inline::note::<Self>(crate::inline::FINALIZE);
        content
    }

    /// Whether this tool's own [`present`](Self::present), [`result_meta`](Self::result_meta)
    /// and [`finalize_content`](Self::finalize_content) may block: wait on I/O, a sleep, a
    /// channel, or a lock that other code may hold for long. `true` by default, and then the
    /// pipeline calls the tool's own versions of them on the user-code pool under the
    /// user-code deadline: one that blocks ends its call (`PIPELINE_ERROR`) instead of
    /// stalling an async worker.
    ///
    /// Answer `false` only when every one of the three, as this tool has them, computes from
    /// what it is given and returns (bounded work, no waiting): the pipeline then calls them
    /// inline on the call's own task, which saves a hand-off to another thread per call, and
    /// no deadline watches them. A tool that keeps dsh's defaults needs no answer (the
    /// pipeline learns that by itself, see [`crate::inline`]). A wrapper that forwards this
    /// answer from an inner tool vouches for its own versions too.
    ///
    /// ```
    /// use async_trait::async_trait;
    /// use dsh_core::inline::{FINALIZE, PRESENT, RESULT_META};
    /// use dsh_core::{ContentBlock, RegisteredTool, ToolContext, ToolDefinition, ToolFailure};
    /// use serde_json::{Value, json};
    /// use std::sync::Arc;
    ///
    /// /// Shows its value upper-cased: pure formatting, so it says it never blocks.
    /// struct Shout;
    /// #[async_trait]
    /// impl ToolDefinition for Shout {
    ///     fn name(&self) -> &str { "shout" }
    ///     fn description(&self) -> &str { "returns its text, shown upper-cased" }
    ///     fn input_schema(&self) -> Value { json!({"type": "object"}) }
    ///     async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
    ///         Ok(input["text"].clone())
    ///     }
    ///     fn present(&self, value: &Value) -> Vec<ContentBlock> {
    ///         vec![ContentBlock::text(value.as_str().unwrap_or_default().to_uppercase())]
    ///     }
    ///     fn user_code_may_block(&self) -> bool { false }
    /// }
    ///
    /// assert!(!Shout.user_code_may_block());
    /// // The pipeline calls its `present`, `result_meta` and `finalize_content` inline from
    /// // the first call on; a tool that does not say so keeps them on the user-code pool.
    /// let tool = RegisteredTool::compile(Arc::new(Shout)).unwrap();
    /// assert!(tool.defaults_known(PRESENT | RESULT_META | FINALIZE));
    /// ```
    fn user_code_may_block(&self) -> bool {
        true
    }

    /// The implementing type's identity, by which the pipeline learns that `present`,
    /// `result_meta` and `finalize_content` are dsh's own defaults and may be called inline
    /// (see [`crate::inline`]). Not meant to be overridden: an override that answers another
    /// type's identity could have blocking code called on an async worker.
    #[doc(hidden)]
    fn concrete_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<Self>()
    }
}

/// Bytes of arguments a call may carry (their JSON text, or the raw text that did not parse).
/// Past it the arguments are not logged whole and the call ends `TOOL_INPUT_ERROR` (SPEC.md's
/// amendment "Oversized arguments").
pub const MAX_ARGUMENT_BYTES: usize = 4 * 1024 * 1024;

/// How deep arguments may nest (objects and arrays). The log's own envelope adds two levels,
/// and dsh's reader refuses JSON nested past 128, so arguments deeper than this could be
/// written but never read back.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// The arguments of a tool-call block: JSON, or the raw text when the model's string was not
/// JSON (OpenAI's `function.arguments`). Malformed and oversized arguments end as
/// `TOOL_INPUT_ERROR`.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// Parsed arguments (whose serialization is exactly what the model sent, when it sent text).
    Json(Value),
    /// Parsed arguments together with the exact text the model sent, kept because serializing
    /// the value again would not give the same bytes (key order, spacing, number forms). The
    /// log records the text as `argumentsText`, so a replay gives the provider its own bytes.
    Exact {
        /// The parsed value.
        value: Value,
        /// The text as the model wrote it.
        text: String,
    },
    /// Text that did not parse.
    Malformed {
        /// The text as the model wrote it.
        raw: String,
        /// What the parser said.
        error: String,
    },
    /// Arguments past [`MAX_ARGUMENT_BYTES`] or [`MAX_ARGUMENT_DEPTH`]: only their size and the
    /// reason are kept.
    Oversized {
        /// Their size in bytes (of the text, or of the value's JSON up to where counting
        /// stopped).
        bytes: usize,
        /// Which limit they passed.
        reason: String,
    },
}

impl Arguments {
    /// The form the log keeps: the JSON, the raw text as a JSON string, or for oversized
    /// arguments the marker `{"$dsh": "omitted", "bytes": N, "reason": "…"}`.
    ///
    /// ```
    /// use dsh_core::Arguments;
    /// let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    /// let logged = Arguments::parse(&deep).to_logged();
    /// assert_eq!(logged["$dsh"], "omitted");
    /// assert_eq!(logged["bytes"], 200);
    /// ```
    pub fn to_logged(&self) -> Value {
        match self {
            Arguments::Json(v) | Arguments::Exact { value: v, .. } => v.clone(),
            Arguments::Malformed { raw, .. } => Value::String(raw.clone()),
            Arguments::Oversized { bytes, reason } => {
                let mut marker = serde_json::Map::new();
                marker.insert("$dsh".into(), Value::String("omitted".into()));
                marker.insert("bytes".into(), Value::from(*bytes));
                marker.insert("reason".into(), Value::String(reason.clone()));
                Value::Object(marker)
            }
        }
    }

    /// The exact text the log keeps as `argumentsText`, when there is one.
    ///
    /// ```
    /// use dsh_core::Arguments;
    /// assert_eq!(Arguments::parse(r#"{"b": 1, "a": 2}"#).logged_text(), Some(r#"{"b": 1, "a": 2}"#));
    /// assert_eq!(Arguments::parse(r#"{"a":1}"#).logged_text(), None);
    /// ```
    pub fn logged_text(&self) -> Option<&str> {
        match self {
            Arguments::Exact { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The parsed value, when the arguments are usable JSON.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Arguments::Json(v) | Arguments::Exact { value: v, .. } => Some(v),
            _ => None,
        }
    }

    /// Parses a model's argument string, within the limits.
    ///
    /// ```
    /// use dsh_core::Arguments;
    /// assert!(matches!(Arguments::parse(r#"{"a":1}"#), Arguments::Json(_)));
    /// assert!(matches!(Arguments::parse(r#"{"a": 1}"#), Arguments::Exact { .. }));
    /// assert!(matches!(Arguments::parse("{oops"), Arguments::Malformed { .. }));
    /// let deep = format!("{{\"x\":{}{}}}", "[".repeat(125), "]".repeat(125));
    /// assert!(matches!(Arguments::parse(&deep), Arguments::Oversized { .. }));
    /// ```
    pub fn parse(raw: &str) -> Arguments {
        if raw.trim().is_empty() {
            return Arguments::Json(Value::Object(Default::default()));
        }
        if raw.len() > MAX_ARGUMENT_BYTES {
            return Arguments::too_large(raw.len());
        }
        // Counted on the text before parsing, so no parser recursion is ever spent on it.
        let depth = text_depth(raw);
        if depth > MAX_ARGUMENT_DEPTH {
            return Arguments::too_deep(raw.len(), depth);
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(value) => {
                if serde_json::to_string(&value).is_ok_and(|again| again == raw) {
                    Arguments::Json(value)
                } else {
                    Arguments::Exact {
                        value,
                        text: raw.to_string(),
                    }
                }
            }
            Err(e) => Arguments::Malformed {
                raw: raw.to_string(),
                error: e.to_string(),
            },
        }
    }

    /// Arguments given as a value (Anthropic's `input`, a code-mode sub-call, an embedder's
    /// call), within the limits.
    ///
    /// ```
    /// use dsh_core::Arguments;
    /// use serde_json::json;
    /// assert_eq!(Arguments::from_value(json!({"a": 1})), Arguments::Json(json!({"a": 1})));
    /// let mut deep = json!(1);
    /// for _ in 0..70 { deep = json!([deep]); }
    /// assert!(matches!(Arguments::from_value(deep), Arguments::Oversized { .. }));
    /// ```
    pub fn from_value(value: Value) -> Arguments {
        Arguments::Json(value).within_limits()
    }

    /// The same arguments, or their [`Arguments::Oversized`] form when they pass a limit.
    /// The scheduler applies it to every call before recording it, so no call, however it was
    /// built, can write an event that cannot be read back.
    pub fn within_limits(self) -> Arguments {
        match self {
            Arguments::Json(ref value) | Arguments::Exact { ref value, .. } => {
                let depth = value_depth(value);
                if depth > MAX_ARGUMENT_DEPTH {
                    // Serializing recurses once per level: only count what is safe to walk,
                    // and otherwise report the two brackets per level it has at least.
                    let bytes = if depth <= 4 * MAX_ARGUMENT_DEPTH {
                        json_len(value, usize::MAX)
                    } else {
                        depth.saturating_mul(2)
                    };
                    return Arguments::too_deep(bytes, depth);
                }
                let bytes = json_len(value, MAX_ARGUMENT_BYTES);
                let text = self.logged_text().map_or(0, str::len);
                if bytes > MAX_ARGUMENT_BYTES || text > MAX_ARGUMENT_BYTES {
                    return Arguments::too_large(bytes.max(text));
                }
                self
            }
            Arguments::Malformed { ref raw, .. } => {
                if raw.len() > MAX_ARGUMENT_BYTES {
                    return Arguments::too_large(raw.len());
                }
                let depth = text_depth(raw);
                if depth > MAX_ARGUMENT_DEPTH {
                    return Arguments::too_deep(raw.len(), depth);
                }
                self
            }
            Arguments::Oversized { .. } => self,
        }
    }

    fn too_large(bytes: usize) -> Arguments {
        Arguments::Oversized {
            bytes,
            reason: format!(
                "the arguments are {bytes} bytes or more, past the limit of {MAX_ARGUMENT_BYTES} bytes"
            ),
        }
    }

    fn too_deep(bytes: usize, depth: usize) -> Arguments {
        Arguments::Oversized {
            bytes,
            reason: format!(
                "the arguments nest {depth} levels deep, past the limit of {MAX_ARGUMENT_DEPTH}"
            ),
        }
    }
}

/// How deep `[` and `{` nest in JSON-like text, outside strings. Malformed text is counted as
/// far as it goes: it only has to bound what a parser would be asked to do.
fn text_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// How deep a value nests (a scalar is 0), without recursion: a value built by hand may be
/// deeper than any stack.
fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 0usize)];
    while let Some((v, depth)) = pending.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(depth + 1);
                pending.extend(items.iter().map(|i| (i, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth + 1);
                pending.extend(map.values().map(|i| (i, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// The length of a value's JSON, counted up to just past `limit` (serialization stops there).
fn json_len(value: &Value, limit: usize) -> usize {
    struct Count {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n = self.n.saturating_add(buf.len());
            if self.n > self.limit {
                return Err(std::io::Error::other("past the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { n: 0, limit };
    let _ = serde_json::to_writer(&mut count, value);
    count.n
}

/// One tool-call block of a model message, before it enters the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The id the model gave (results point back at it).
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call with JSON arguments.
    ///
    /// ```
    /// use dsh_core::ToolCall;
    /// let call = ToolCall::new("c1", "read_file", serde_json::json!({"path": "a.txt"}));
    /// assert_eq!(call.name, "read_file");
    /// ```
    pub fn new(call_id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments: Arguments::from_value(arguments),
        }
    }
}

/// A call as the pipeline carries it (SPEC.md's `ToolExecutionInput`).
#[derive(Debug, Clone)]
pub struct ToolExecutionInput {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub arguments: Arguments,
    /// The agent that made the call.
    pub agent: String,
    /// The caller's signal for this call.
    pub signal: Signal,
    /// The parent call's id (code mode), or none.
    pub parent: Option<String>,
}
