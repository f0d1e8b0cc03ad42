//! Typed tools: arguments and output are Rust types, their JSON Schemas generated with
//! `schemars`, and the tool registers as an ordinary [`ToolDefinition`], so every stage of the
//! pipeline still applies (the input is validated against the generated schema before the
//! body, the output against its own schema after it, and the canonical value stays out of the
//! log).
//!
//! ```
//! use async_trait::async_trait;
//! use dsh_core::typed::{Typed, TypedTool, WorkspacePath};
//! use dsh_core::{ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Args {
//!     /// The file to count the words of.
//!     path: WorkspacePath,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Count {
//!     words: usize,
//! }
//!
//! struct WordCount;
//!
//! #[async_trait]
//! impl TypedTool for WordCount {
//!     type Args = Args;
//!     type Output = Count;
//!     fn name(&self) -> &str { "word_count" }
//!     fn description(&self) -> &str { "Counts the words of a file in the workspace." }
//!     async fn call(&self, args: Args, _ctx: ToolContext) -> Result<Count, ToolFailure> {
//!         let text = args.path.read_to_string(1 << 20)?;
//!         Ok(Count { words: text.split_whitespace().count() })
//!     }
//! }
//!
//! let registry = ToolRegistry::new();
//! registry.register(Typed::new(WordCount)).unwrap();
//! let tool = registry.get("word_count").unwrap();
//! let schema = tool.definition().input_schema();
//! assert_eq!(schema["properties"]["path"]["x-dsh-path"], "read");
//! ```

use crate::content::ContentBlock;
use crate::error::ErrorCode;
use crate::paths::{
    DeclaredPath, PathArg, ResolvedPath, ResolvedPaths, declared_by_args, declared_by_schema,
};
use crate::policy::Access;
use crate::tool::{ExecutionMode, ToolContext, ToolDefinition, ToolFailure};
use async_trait::async_trait;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

/// A tool whose arguments and output are Rust types. Register it wrapped in [`Typed`].
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments, deserialized from the model's JSON; their schema is what the model is
    /// given. A [`WorkspacePath`] field is a path confined to the workspace.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The canonical value; its schema is validated after the body.
    type Output: Serialize + JsonSchema + Send;

    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What the model is told it does.
    fn description(&self) -> &str;

    /// The body.
    async fn call(&self, args: Self::Args, ctx: ToolContext) -> Result<Self::Output, ToolFailure>;

    /// Exclusive unless the tool says otherwise.
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Exclusive
    }

    /// Whether a call may run beside others (see [`ToolDefinition::is_concurrency_safe`]).
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        false
    }

    /// The tool's own deadline.
    fn timeout_ms(&self) -> Option<u64> {
        None
    }

    /// The paths a call declares, when the schema's [`WorkspacePath`] fields do not say it
    /// all (a path argument with a default, a tool that resolves its own paths); `None` (the
    /// default): the schema's.
    fn declared_paths(&self, _input: &Value) -> Option<Vec<DeclaredPath>> {
        None
    }

    /// Top-level string arguments that are paths (see [`ToolDefinition::path_args`]); for a
    /// tool that takes them as plain strings rather than [`WorkspacePath`]s. None by default.
    fn path_args(&self) -> Vec<PathArg> {
        Vec::new()
    }

    /// What permission rules match against; `None` (the default): the declared paths, as for
    /// any tool ([`ToolDefinition::permission_subjects`]).
    fn permission_subjects(&self, _input: &Value) -> Option<Vec<String>> {
        None
    }

    /// True for a tool that resolves and checks its declared paths itself, through the
    /// workspace (the built-in file tools; see [`ToolDefinition::resolves_own_paths`]).
    fn resolves_own_paths(&self) -> bool {
        false
    }

    /// See [`ToolDefinition::empty_means_absent`].
    fn empty_means_absent(&self) -> &[&'static str] {
        &[]
    }

    /// What the model sees of the output: by default its JSON (a string output as itself).
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        match value {
            Value::String(s) => vec![ContentBlock::text(s.clone())],
            other => vec![ContentBlock::text(other.to_string())],
        }
    }
}

/// A [`TypedTool`] as an ordinary [`ToolDefinition`]: schemas generated once, arguments
/// deserialized before the body (a failure is `TOOL_INPUT_ERROR` naming the field and what
/// was expected), the output serialized into the canonical value.
pub struct Typed<T: TypedTool> {
    tool: T,
    input_schema: Value,
    output_schema: Value,
}

impl<T: TypedTool> fmt::Debug for Typed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Typed")
            .field("name", &self.tool.name())
            .finish()
    }
}

/// The schema of `T` as a tool schema: the root's `$schema` (providers refuse or ignore it)
/// and `title` (the Rust type's name) are dropped, the rest kept as generated.
fn schema_of<T: JsonSchema>() -> Value {
    let schema = SchemaGenerator::default().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        // The Rust type's name tells the model nothing (the tool's name and description do).
        map.remove("title");
    }
    value
}

impl<T: TypedTool> Typed<T> {
    /// Wraps `tool`, generating its schemas.
    pub fn new(tool: T) -> Typed<T> {
        Typed {
            tool,
            input_schema: schema_of::<T::Args>(),
            output_schema: schema_of::<T::Output>(),
        }
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &T {
        &self.tool
    }
}

thread_local! {
    /// The resolved paths of the call whose arguments are being deserialized on this thread.
    static BINDING: RefCell<Option<ResolvedPaths>> = const { RefCell::new(None) };
}

/// Deserializes `input` as `A`, binding every [`WorkspacePath`] to its resolved handle.
fn bind<A: DeserializeOwned>(input: Value, paths: &ResolvedPaths) -> Result<A, ToolFailure> {
    BINDING.with(|b| *b.borrow_mut() = Some(paths.clone()));
    let parsed = deserialize_with_path::<A>(input);
    BINDING.with(|b| *b.borrow_mut() = None);
    parsed.map_err(|e| ToolFailure::with_code(ErrorCode::ToolInputError, e))
}

/// `serde_json::from_value`. The pipeline has validated the arguments against the generated
/// schema before the body (a value of the wrong type, a missing field or an unknown variant is
/// reported there, with its path); what is left is what serde checks beyond the schema, said in
/// serde's words (which name the field or variant).
fn deserialize_with_path<A: DeserializeOwned>(input: Value) -> Result<A, String> {
    serde_json::from_value::<A>(input).map_err(|e| format!("the arguments do not fit: {e}"))
}

#[async_trait]
impl<T: TypedTool> ToolDefinition for Typed<T> {
    fn name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        Some(self.output_schema.clone())
    }

    fn execution_mode(&self) -> ExecutionMode {
        self.tool.execution_mode()
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        self.tool.is_concurrency_safe(input)
    }

    fn timeout_ms(&self) -> Option<u64> {
        self.tool.timeout_ms()
    }

    fn declared_paths(&self, input: &Value) -> Vec<DeclaredPath> {
        if let Some(declared) = self.tool.declared_paths(input) {
            return declared;
        }
        let mut declared = declared_by_schema(&self.input_schema, input);
        declared.extend(declared_by_args(&self.tool.path_args(), input));
        declared
    }

    fn declares_paths(&self) -> bool {
        crate::paths::schema_declares_paths(&self.input_schema) || !self.tool.path_args().is_empty()
    }

    fn path_args(&self) -> Vec<PathArg> {
        self.tool.path_args()
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        if let Some(subjects) = self.tool.permission_subjects(input) {
            return subjects;
        }
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

    fn empty_means_absent(&self) -> &[&'static str] {
        self.tool.empty_means_absent()
    }

    fn resolves_own_paths(&self) -> bool {
        self.tool.resolves_own_paths()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let declared = self.declared_paths(&input);
        if !declared.is_empty() && ctx.paths.is_empty() && !self.tool.resolves_own_paths() {
            return Err(ToolFailure::with_code(
                ErrorCode::Denied,
                format!(
                    "{} takes workspace paths, and no workspace confines this pipeline (add the file tools' sandbox)",
                    self.tool.name()
                ),
            ));
        }
        let args: T::Args = bind(input, &ctx.paths)?;
        let output = self.tool.call(args, ctx).await?;
        serde_json::to_value(output).map_err(|e| {
            ToolFailure::with_code(
                ErrorCode::ToolOutputError,
                format!("the output could not be serialized: {e}"),
            )
        })
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        self.tool.present(value)
    }
}

/// What a [`WorkspacePath`] is declared for.
pub trait PathAccess: Send + Sync + 'static {
    /// Read or write.
    const ACCESS: Access;
}

/// A path the tool reads.
#[derive(Debug, Clone, Copy)]
pub struct Reads;

/// A path the tool writes (creates, changes, deletes); it may read it too.
#[derive(Debug, Clone, Copy)]
pub struct Writes;

impl PathAccess for Reads {
    const ACCESS: Access = Access::Read;
}

impl PathAccess for Writes {
    const ACCESS: Access = Access::Write;
}

/// A typed tool's path argument: a string in the schema (annotated so the pipeline knows it
/// is a path, and whether it is read or written), and for the body a handle resolved inside
/// the workspace and allowed by the path policies before the body runs. The body reads and
/// writes through it; it cannot open the raw string. `WorkspacePath` reads,
/// `WorkspacePath<Writes>` writes.
#[derive(Clone)]
pub struct WorkspacePath<A: PathAccess = Reads> {
    raw: String,
    resolved: Option<ResolvedPath>,
    access: PhantomData<A>,
}

impl<A: PathAccess> fmt::Debug for WorkspacePath<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkspacePath")
            .field("raw", &self.raw)
            .field("access", &A::ACCESS)
            .field("resolved", &self.resolved.as_ref().map(|r| r.display()))
            .finish()
    }
}

impl<A: PathAccess> WorkspacePath<A> {
    /// The path as the model wrote it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The resolved handle.
    pub fn resolved(&self) -> Result<&ResolvedPath, ToolFailure> {
        self.resolved.as_ref().ok_or_else(|| {
            ToolFailure::with_code(
                ErrorCode::Denied,
                format!("`{}` was not resolved inside the workspace", self.raw),
            )
        })
    }

    /// The path relative to the workspace root, as the model is shown it.
    pub fn display(&self) -> String {
        self.resolved
            .as_ref()
            .map_or_else(|| self.raw.clone(), ResolvedPath::display)
    }

    /// The file's bytes, if at most `max_bytes` long (blocks).
    pub fn read(&self, max_bytes: u64) -> Result<Vec<u8>, ToolFailure> {
        self.resolved()?
            .read(max_bytes)
            .map_err(|e| ToolFailure::new(format!("reading `{}`: {e}", self.display())))
    }

    /// The file's UTF-8 text, if at most `max_bytes` long (blocks).
    pub fn read_to_string(&self, max_bytes: u64) -> Result<String, ToolFailure> {
        self.resolved()?
            .read_to_string(max_bytes)
            .map_err(|e| ToolFailure::new(format!("reading `{}`: {e}", self.display())))
    }
}

impl WorkspacePath<Writes> {
    /// Replaces the file's content atomically (blocks).
    pub fn write(&self, bytes: &[u8]) -> Result<(), ToolFailure> {
        self.resolved()?
            .write(bytes)
            .map_err(|e| ToolFailure::new(format!("writing `{}`: {e}", self.display())))
    }
}

impl<'de, A: PathAccess> Deserialize<'de> for WorkspacePath<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        let resolved = BINDING.with(|b| {
            b.borrow().as_ref().and_then(|paths| {
                paths
                    .iter()
                    .find(|p| p.raw() == raw && p.access() == A::ACCESS)
                    .cloned()
            })
        });
        Ok(WorkspacePath {
            raw,
            resolved,
            access: PhantomData,
        })
    }
}

impl<A: PathAccess> Serialize for WorkspacePath<A> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<A: PathAccess> JsonSchema for WorkspacePath<A> {
    fn schema_name() -> Cow<'static, str> {
        match A::ACCESS {
            Access::Read => "WorkspacePath".into(),
            Access::Write => "WritableWorkspacePath".into(),
        }
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_generator: &mut SchemaGenerator) -> Schema {
        let access = A::ACCESS.as_str();
        let description = match A::ACCESS {
            Access::Read => "A path inside the workspace, relative to its root.",
            Access::Write => {
                "A path inside the workspace, relative to its root, that the tool writes."
            }
        };
        json_schema!({
            "type": "string",
            "description": description,
            "x-dsh-path": access,
        })
    }
}
