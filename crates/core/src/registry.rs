//! The registry of tool definitions, each with its schemas compiled once.

use crate::error::CoreError;
use crate::tool::ToolDefinition;
use dashmap::DashMap;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// A definition with its compiled validators.
pub struct RegisteredTool {
    definition: Arc<dyn ToolDefinition>,
    input: jsonschema::Validator,
    output: Option<jsonschema::Validator>,
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

fn describe_errors<'a>(errors: impl Iterator<Item = jsonschema::ValidationError<'a>>) -> String {
    let mut parts = Vec::new();
    let mut total = 0usize;
    for e in errors {
        total += 1;
        if parts.len() < MAX_REPORTED_ERRORS {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            parts.push(format!("at {at}: {e}"));
        }
    }
    if total > parts.len() {
        parts.push(format!("and {} more", total - parts.len()));
    }
    parts.join("; ")
}

impl RegisteredTool {
    /// Compiles a definition's schemas.
    pub fn compile(definition: Arc<dyn ToolDefinition>) -> Result<RegisteredTool, CoreError> {
        let name = definition.name().to_string();
        let input = jsonschema::validator_for(&definition.input_schema()).map_err(|e| {
            CoreError::InvalidSchema {
                tool: name.clone(),
                which: "input",
                reason: e.to_string(),
            }
        })?;
        let output =
            match definition.output_schema() {
                Some(schema) => Some(jsonschema::validator_for(&schema).map_err(|e| {
                    CoreError::InvalidSchema {
                        tool: name.clone(),
                        which: "output",
                        reason: e.to_string(),
                    }
                })?),
                None => None,
            };
        Ok(RegisteredTool {
            definition,
            input,
            output,
        })
    }

    /// The definition.
    pub fn definition(&self) -> &Arc<dyn ToolDefinition> {
        &self.definition
    }

    /// Checks arguments against the input schema; the error names where and why.
    pub fn validate_input(&self, arguments: &Value) -> Result<(), String> {
        if self.input.is_valid(arguments) {
            return Ok(());
        }
        Err(describe_errors(self.input.iter_errors(arguments)))
    }

    /// Checks a canonical value against the output schema, if there is one.
    pub fn validate_output(&self, value: &Value) -> Result<(), String> {
        match &self.output {
            Some(v) if !v.is_valid(value) => Err(describe_errors(v.iter_errors(value))),
            _ => Ok(()),
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
