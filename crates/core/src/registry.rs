//! The registry of tool definitions, each with its schemas compiled once.

use crate::error::CoreError;
use crate::tool::ToolDefinition;
use dashmap::DashMap;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

mod absent;
mod schema_cost;

pub use absent::strict_schema;

/// The most subschema applications validating one value of an instance may cost; a schema
/// that can cost more (nested `anyOf`/`$ref` chains multiply) is refused at registration.
pub const MAX_SCHEMA_APPLICATIONS_PER_VALUE: u64 = schema_cost::MAX_APPLICATIONS_PER_VALUE;
/// The most JSON values a tool's schema document may hold.
pub const MAX_SCHEMA_VALUES: usize = schema_cost::MAX_SCHEMA_VALUES;
/// The deepest a tool's schema document may be nested.
pub const MAX_SCHEMA_DEPTH: usize = schema_cost::MAX_SCHEMA_DEPTH;
/// The most work (values × applications per value) one validation may take; a larger value
/// is refused unchecked, with a message saying so.
pub const MAX_VALIDATION_WORK: u64 = 50_000_000;
/// The most work within which a mismatch is located; past it, the report says only that the
/// value does not match (collecting every error is what costs memory).
pub const MAX_REPORT_WORK: u64 = 200_000;

/// One compiled schema and what validating against it may cost.
struct CompiledSchema {
    validator: jsonschema::Validator,
    per_value: u64,
}

/// A definition with its compiled validators.
pub struct RegisteredTool {
    definition: Arc<dyn ToolDefinition>,
    input: CompiledSchema,
    output: Option<CompiledSchema>,
    /// The input schema, for [`RegisteredTool::without_absent`].
    input_schema: Value,
    /// [`ToolDefinition::empty_means_absent`].
    empties: Vec<String>,
    /// The synchronous methods known to be dsh's defaults (bits of [`crate::inline`]).
    defaults: std::sync::atomic::AtomicU8,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.definition.name())
            .finish()
    }
}

/// At most this many schema errors are reported for one value.
const MAX_REPORTED_ERRORS: usize = 3;
/// Each reported error is cut to this many bytes (its text may quote the whole value).
const MAX_ERROR_TEXT: usize = 300;

/// A fancy-regex pattern that backtracks more than this is left undecided (the validator
/// then reports only what holds either way) instead of running on.
const PATTERN_BACKTRACK_LIMIT: usize = 100_000;
/// Compiled size of one pattern, and of its lazy DFA's cache: a pattern like `\w{1000}`
/// would otherwise take megabytes, and a schema can hold many.
const PATTERN_SIZE_LIMIT: usize = 512 * 1024;

fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

fn describe_errors<'a>(errors: impl Iterator<Item = jsonschema::ValidationError<'a>>) -> String {
    let mut parts = Vec::new();
    let mut total = 0usize;
    for e in errors {
        total += 1;
        if parts.len() < MAX_REPORTED_ERRORS {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            parts.push(cut(format!("at {at}: {e}"), MAX_ERROR_TEXT));
        }
    }
    if total > parts.len() {
        parts.push(format!("and {} more", total - parts.len()));
    }
    parts.join("; ")
}

/// How many values `value` holds (itself, its items and members, recursively), counting no
/// further than `stop`.
fn count_values(value: &Value, stop: u64) -> u64 {
    let mut stack = vec![value];
    let mut count = 0u64;
    while let Some(v) = stack.pop() {
        count += 1;
        if count >= stop {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    count
}

impl CompiledSchema {
    fn compile(
        tool: &str,
        which: &'static str,
        schema: &Value,
    ) -> Result<CompiledSchema, CoreError> {
        let invalid = |reason: String| CoreError::InvalidSchema {
            tool: tool.to_string(),
            which,
            reason,
        };
        // Judged before compiling: compiling is cheap, but the first mismatch would not be.
        let cost = schema_cost::judge(schema).map_err(invalid)?;
        let patterns = jsonschema::PatternOptions::fancy_regex()
            .backtrack_limit(PATTERN_BACKTRACK_LIMIT)
            .size_limit(PATTERN_SIZE_LIMIT)
            .dfa_size_limit(PATTERN_SIZE_LIMIT);
        let validator = jsonschema::options()
            .with_pattern_options(patterns)
            .build(schema)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(CompiledSchema {
            validator,
            per_value: cost.per_value,
        })
    }

    /// Checks `value` with work bounded by [`MAX_VALIDATION_WORK`], and locates a mismatch
    /// only within [`MAX_REPORT_WORK`].
    fn check(&self, value: &Value, what: &str) -> Result<(), String> {
        let per_value = self.per_value.max(1);
        let values = count_values(value, MAX_VALIDATION_WORK / per_value + 1);
        if values.saturating_mul(per_value) > MAX_VALIDATION_WORK {
            return Err(format!(
                "the {what} is too large to check against this schema: it holds more than \
                 {values} values, and the schema may apply up to {per_value} subschemas to \
                 each (the limit is {MAX_VALIDATION_WORK} in all)"
            ));
        }
        if self.validator.is_valid(value) {
            return Ok(());
        }
        if values.saturating_mul(per_value) > MAX_REPORT_WORK {
            return Err(format!(
                "the {what} does not match the schema (with {values} values, against a schema \
                 that may apply up to {per_value} subschemas to each, it is too costly to say \
                 where)"
            ));
        }
        Err(describe_errors(self.validator.iter_errors(value)))
    }
}

impl RegisteredTool {
    /// Compiles a definition's schemas.
    ///
    /// A schema is refused ([`CoreError::InvalidSchema`], with the reason) when it does not
    /// compile, when it holds more than [`MAX_SCHEMA_VALUES`] values or is nested deeper
    /// than [`MAX_SCHEMA_DEPTH`], when a `$ref` cycle would recurse without descending into
    /// the value, or when validating one value against it could cost more than
    /// [`MAX_SCHEMA_APPLICATIONS_PER_VALUE`] subschema applications (nested
    /// `anyOf`/`oneOf`/`$ref` multiply: a 1.7 KB chain of them can cost millions, and
    /// reporting one mismatch gigabytes). The bound is worked out without validating
    /// anything, in time linear in the schema's size for each level of instance depth.
    pub fn compile(definition: Arc<dyn ToolDefinition>) -> Result<RegisteredTool, CoreError> {
        let name = definition.name().to_string();
        let definition_never_blocks = !definition.user_code_may_block();
        let input_schema = definition.input_schema();
        let input = CompiledSchema::compile(&name, "input", &input_schema)?;
        let empties = definition
            .empty_means_absent()
            .iter()
            .map(|e| (*e).to_string())
            .collect();
        let output = match definition.output_schema() {
            Some(schema) => Some(CompiledSchema::compile(&name, "output", &schema)?),
            None => None,
        };
        Ok(RegisteredTool {
            definition,
            input,
            output,
            input_schema,
            empties,
            // A tool that says its own versions never block is called inline from the start.
            defaults: std::sync::atomic::AtomicU8::new(if definition_never_blocks {
                crate::inline::PRESENT | crate::inline::RESULT_META | crate::inline::FINALIZE
            } else {
                0
            }),
        })
    }

    /// Records that the methods `seen` (bits of [`crate::inline`], as
    /// [`crate::inline::defaults_seen`] answered them for this tool's
    /// [`ToolDefinition::concrete_type`]) ran dsh's default implementation.
    pub fn learn_defaults(&self, seen: u8) {
        if seen != 0 {
            self.defaults
                .fetch_or(seen, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// True when every method of `methods` (bits of [`crate::inline`]) is known never to
    /// block: dsh's default, or any version of a tool whose
    /// [`ToolDefinition::user_code_may_block`] is `false`. The pipeline may call them inline.
    pub fn defaults_known(&self, methods: u8) -> bool {
        self.defaults.load(std::sync::atomic::Ordering::Relaxed) & methods == methods
    }

    /// The definition.
    pub fn definition(&self) -> &Arc<dyn ToolDefinition> {
        &self.definition
    }

    /// `arguments` without the optional arguments the model did not mean: `null` where the
    /// property's schema takes no null (at any depth), and the empty values (`""`, `0`, `[]`)
    /// of the properties named by [`ToolDefinition::empty_means_absent`]. Strict function
    /// calling makes models send these for every property they do not mean.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use async_trait::async_trait;
    /// use dsh_core::{RegisteredTool, ToolContext, ToolDefinition, ToolFailure};
    /// use serde_json::{Value, json};
    ///
    /// struct Find;
    /// #[async_trait]
    /// impl ToolDefinition for Find {
    ///     fn name(&self) -> &str { "find" }
    ///     fn description(&self) -> &str { "finds" }
    ///     fn input_schema(&self) -> Value {
    ///         json!({"type": "object", "required": ["q"], "properties": {
    ///             "q": {"type": "string"}, "path": {"type": "string"}, "n": {"type": "integer"}}})
    ///     }
    ///     fn empty_means_absent(&self) -> &[&'static str] { &["path"] }
    ///     async fn execute(&self, _: Value, _: ToolContext) -> Result<Value, ToolFailure> {
    ///         Ok(json!(null))
    ///     }
    /// }
    /// let tool = RegisteredTool::compile(Arc::new(Find)).unwrap();
    /// let sent = json!({"q": "", "path": "", "n": null});
    /// assert_eq!(tool.without_absent(sent), json!({"q": ""}));
    /// ```
    pub fn without_absent(&self, mut arguments: Value) -> Value {
        absent::drop_absent(&self.input_schema, &mut arguments, &self.empties);
        arguments
    }

    /// Checks arguments against the input schema; the error names where and why (for at
    /// most a few mismatches). The work is bounded: arguments too large for the schema's
    /// cost are refused unchecked, and past a smaller bound the error only says that they
    /// do not match.
    pub fn validate_input(&self, arguments: &Value) -> Result<(), String> {
        self.input.check(arguments, "arguments")
    }

    /// Checks a canonical value against the output schema, if there is one (bounded like
    /// [`RegisteredTool::validate_input`]).
    pub fn validate_output(&self, value: &Value) -> Result<(), String> {
        match &self.output {
            Some(schema) => schema.check(value, "value"),
            None => Ok(()),
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The tools a harness knows, by name. Shared (`Arc`) by every session; tools may be added
/// while sessions run (MCP servers coming up).
///
/// ```
/// use dsh_core::ToolRegistry;
/// let registry = ToolRegistry::new();
/// assert!(registry.get("nope").is_none());
/// assert!(registry.names().is_empty());
/// ```
#[derive(Default)]
pub struct ToolRegistry {
    tools: DashMap<String, Arc<RegisteredTool>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds a definition. Fails on a taken or invalid name, or a schema that does not compile.
    pub fn register(&self, definition: impl ToolDefinition) -> Result<(), CoreError> {
        self.register_arc(Arc::new(definition))
    }

    /// Adds a shared definition.
    pub fn register_arc(&self, definition: Arc<dyn ToolDefinition>) -> Result<(), CoreError> {
        let name = definition.name().to_string();
        if !valid_name(&name) {
            return Err(CoreError::InvalidToolName(name));
        }
        warn_undeclared_paths(definition.as_ref());
        let compiled = Arc::new(RegisteredTool::compile(definition)?);
        match self.tools.entry(name) {
            dashmap::Entry::Occupied(e) => Err(CoreError::DuplicateTool(e.key().clone())),
            dashmap::Entry::Vacant(e) => {
                e.insert(compiled);
                Ok(())
            }
        }
    }

    /// Removes a tool; true when it was there.
    pub fn unregister(&self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// Looks a tool up.
    pub fn get(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        self.tools.get(name).map(|e| e.value().clone())
    }

    /// The names of every tool, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.iter().map(|e| e.key().clone()).collect();
        names.sort();
        names
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Logs a warning, once per tool name, for a tool with a string argument named like a path
/// (`path`, `file`, `file_path`, `dir`) that declares no path: the workspace sandbox cannot
/// confine what it does not know is a path.
fn warn_undeclared_paths(definition: &dyn ToolDefinition) {
    use std::sync::{Mutex, OnceLock};
    if definition.declares_paths() {
        return;
    }
    let schema = definition.input_schema();
    if crate::paths::schema_declares_paths(&schema) {
        return;
    }
    let Some(arg) = crate::paths::path_like_argument(&schema) else {
        return;
    };
    static WARNED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let first = WARNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(definition.name().to_string());
    if first {
        tracing::warn!(
            tool = definition.name(),
            argument = arg,
            "the tool has a string argument named like a path but declares no path \
             (ToolDefinition::path_args, or a WorkspacePath in a typed tool): the workspace \
             sandbox does not confine it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{ToolContext, ToolFailure};
    use async_trait::async_trait;
    use serde_json::{Map, json};
    use std::time::{Duration, Instant};

    struct Schemas {
        input: Value,
        output: Option<Value>,
    }

    #[async_trait]
    impl ToolDefinition for Schemas {
        fn name(&self) -> &str {
            "t"
        }
        fn description(&self) -> &str {
            "a tool with given schemas"
        }
        fn input_schema(&self) -> Value {
            self.input.clone()
        }
        fn output_schema(&self) -> Option<Value> {
            self.output.clone()
        }
        async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
            Ok(input)
        }
    }

    fn tool(input: Value) -> Arc<dyn ToolDefinition> {
        Arc::new(Schemas {
            input,
            output: None,
        })
    }

    /// The issue's schema: `links` definitions, each an `anyOf` of two `$ref`s to the next,
    /// under one property; about 1.7 KB at 21 links.
    fn hostile(links: usize) -> Value {
        let mut defs = Map::new();
        for i in 0..links {
            let next = json!({"$ref": format!("#/$defs/n{}", i + 1)});
            defs.insert(format!("n{i}"), json!({"anyOf": [next, next]}));
        }
        defs.insert(format!("n{links}"), json!({"type": "string"}));
        json!({"type": "object", "properties": {"q": {"$ref": "#/$defs/n0"}},
            "required": ["q"], "$defs": defs})
    }

    /// The peak resident memory of this process so far (Linux), in bytes.
    fn peak_memory() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// Runs `f` on a thread, failing the test if it takes longer than `limit` (the thread
    /// is left behind: a blown-up validation cannot be stopped).
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|_| panic!("still running after {limit:?}"))
    }

    #[test]
    fn the_issues_hostile_schema_is_refused_at_registration_quickly_and_small() {
        let schema = hostile(21);
        let size = schema.to_string().len();
        assert!((1_000..=2_500).contains(&size), "{size} bytes");
        let started = Instant::now();
        let refused = within(Duration::from_secs(10), move || {
            ToolRegistry::new()
                .register_arc(tool(schema))
                .map_err(|e| e.to_string())
        });
        let e = refused.unwrap_err();
        assert!(
            e.contains("input schema of tool `t`") && e.contains("subschema applications"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        if let Some(peak) = peak_memory() {
            assert!(peak < 1 << 30, "peak memory {peak} bytes");
        }
        // The same shape as an output schema, where no model is involved.
        let e = ToolRegistry::new()
            .register(Schemas {
                input: json!({"type": "object"}),
                output: Some(hostile(22)),
            })
            .unwrap_err();
        assert!(e.to_string().contains("output schema"), "{e}");
    }

    #[test]
    fn a_schema_just_under_the_bound_reports_a_mismatch_in_bounded_time_and_text() {
        // 2^11 alternatives, within the bound, each failing for a number.
        let schema = hostile(11);
        let registry = ToolRegistry::new();
        registry.register_arc(tool(schema)).unwrap();
        let t = registry.get("t").unwrap();
        let why = within(Duration::from_secs(15), move || {
            t.validate_input(&json!({"q": 5})).unwrap_err()
        });
        assert!(why.len() < 2_000, "{} bytes: {why}", why.len());
        // Many values against it: refused unchecked, or reported without locating.
        let registry = ToolRegistry::new();
        registry.register_arc(tool(hostile(11))).unwrap();
        let t = registry.get("t").unwrap();
        let many: Vec<Value> = (0..50_000).map(|i| json!(i)).collect();
        let why = within(Duration::from_secs(15), move || {
            t.validate_input(&json!({"q": many})).unwrap_err()
        });
        assert!(why.contains("too large to check"), "{why}");
    }

    #[test]
    fn a_mismatch_report_is_short_even_for_a_huge_value() {
        let registry = ToolRegistry::new();
        registry
            .register_arc(tool(json!({"type": "object", "properties": {
                "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"},
                "d": {"type": "string"}}})))
            .unwrap();
        let t = registry.get("t").unwrap();
        let big: Vec<Value> = (0..10_000).map(|i| json!(i)).collect();
        let why = t
            .validate_input(&json!({"a": big, "b": 1, "c": 2, "d": 3}))
            .unwrap_err();
        assert!(why.len() < 2_000, "{} bytes", why.len());
        assert!(why.contains("at /"), "{why}");
        let why = t.validate_input(&json!({"a": 1, "b": 2})).unwrap_err();
        assert!(why.contains("at /a") && why.contains("at /b"), "{why}");
    }

    #[test]
    fn ordinary_schemas_still_register_and_validate() {
        let registry = ToolRegistry::new();
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "pattern": "^[a-z/._-]+$"},
                "edits": {"type": "array", "items": {"$ref": "#/$defs/edit"}},
                "mode": {"anyOf": [{"const": "a"}, {"const": "b"}, {"type": "null"}]}
            },
            "required": ["path"],
            "additionalProperties": false,
            "$defs": {"edit": {"type": "object", "properties": {
                "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["old", "new"]}}
        });
        registry.register_arc(tool(schema)).unwrap();
        let t = registry.get("t").unwrap();
        assert!(
            t.validate_input(&json!({"path": "a", "edits": [{"old": "x", "new": "y"}]}))
                .is_ok()
        );
        let why = t
            .validate_input(&json!({"path": "a", "edits": [{"old": "x"}]}))
            .unwrap_err();
        assert!(why.contains("/edits/0"), "{why}");
    }
}
