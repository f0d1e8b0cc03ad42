//! Path arguments: which arguments of a tool are paths, and the handles its body gets for them.
//!
//! A tool declares its path arguments ([`crate::ToolDefinition::path_args`], or a typed tool's
//! `WorkspacePath` fields, or the annotation [`PATH_ANNOTATION`] in a schema). The pipeline then
//! does for it what it does for the built-in file tools:
//!
//! - the workspace sandbox resolves every declared path before the call is judged further,
//!   and refuses (`DENIED`) one that leaves the workspace (`..`, an absolute path outside, a
//!   symlink out) or, in read-only mode, any declared write;
//! - permission rules match declared paths: `tool(glob)`, and the intent rules `read(glob)` /
//!   `write(glob)`, which match every tool declaring that access to a matching path;
//! - just before the body runs, each declared path is resolved again through the workspace's
//!   [`Confinement`] and put to the path policies; the body gets a [`ResolvedPath`] per path in
//!   [`crate::ToolContext::paths`], whose reads and writes go through the confined root, so
//!   it never has to open the raw string.
//!
//! A tool that declares nothing is unchanged.

use crate::error::ErrorCode;
use crate::policy::{Access, PathPolicies, PathPolicy};
use crate::tool::ToolFailure;
use serde_json::Value;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The schema annotation that declares a string as a path: `"x-dsh-path": "read"` or
/// `"write"`, beside `"type": "string"` (or on an array's `items`).
pub const PATH_ANNOTATION: &str = "x-dsh-path";

/// Argument names that look like paths: a tool with a string argument so named and no path
/// declaration gets a warning when it is registered.
pub const PATH_LIKE_NAMES: [&str; 4] = ["path", "file", "file_path", "dir"];

/// One top-level argument a tool declares as a path (a string, or an array of strings).
///
/// ```
/// use dsh_core::{Access, PathArg};
/// assert_eq!(PathArg::write("target").access, Access::Write);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArg {
    /// The argument's name.
    pub name: String,
    /// What the tool does with it.
    pub access: Access,
}

impl PathArg {
    /// An argument the tool reads.
    pub fn read(name: impl Into<String>) -> PathArg {
        PathArg {
            name: name.into(),
            access: Access::Read,
        }
    }

    /// An argument the tool writes (creates, changes or deletes).
    pub fn write(name: impl Into<String>) -> PathArg {
        PathArg {
            name: name.into(),
            access: Access::Write,
        }
    }
}

/// One path a call names, as written, with the access its tool declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredPath {
    /// Where it is in the arguments: a top-level name, or a JSON pointer (`/files/0`).
    pub arg: String,
    /// The path as the model wrote it.
    pub raw: String,
    /// Read or write.
    pub access: Access,
}

/// The declared paths of `input` under `args`: each argument's string, or each string of an
/// array.
///
/// ```
/// use dsh_core::{Access, PathArg, paths::declared_by_args};
/// let got = declared_by_args(&[PathArg::read("path")], &serde_json::json!({"path": "a.txt"}));
/// assert_eq!((got[0].raw.as_str(), got[0].access), ("a.txt", Access::Read));
/// ```
pub fn declared_by_args(args: &[PathArg], input: &Value) -> Vec<DeclaredPath> {
    let mut out = Vec::new();
    for arg in args {
        match input.get(&arg.name) {
            Some(Value::String(s)) => out.push(DeclaredPath {
                arg: arg.name.clone(),
                raw: s.clone(),
                access: arg.access,
            }),
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::String(s) = item {
                        out.push(DeclaredPath {
                            arg: format!("/{}/{i}", arg.name),
                            raw: s.clone(),
                            access: arg.access,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// How an annotated schema declares access.
fn annotated(schema: &Value) -> Option<Access> {
    match schema.get(PATH_ANNOTATION)?.as_str()? {
        "read" => Some(Access::Read),
        "write" => Some(Access::Write),
        _ => None,
    }
}

/// Whether `schema` annotates any string as a path ([`PATH_ANNOTATION`]), anywhere.
pub fn schema_declares_paths(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            annotated(schema).is_some() || map.values().any(schema_declares_paths)
        }
        Value::Array(items) => items.iter().any(schema_declares_paths),
        _ => false,
    }
}

/// The declared paths of `input` under an annotated schema: every string at a place whose
/// schema carries [`PATH_ANNOTATION`], following `properties`, `items`, `anyOf`/`oneOf`/`allOf`
/// and local `$ref`s (`#/$defs/…`, `#/definitions/…`), a bounded number of steps.
///
/// ```
/// use dsh_core::{Access, paths::declared_by_schema};
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {
///     "out": {"type": "string", "x-dsh-path": "write"},
///     "ins": {"type": "array", "items": {"$ref": "#/$defs/In"}}},
///     "$defs": {"In": {"type": "string", "x-dsh-path": "read"}}});
/// let got = declared_by_schema(&schema, &json!({"out": "o.txt", "ins": ["a", "b"]}));
/// let raws: Vec<_> = got.iter().map(|d| (d.raw.as_str(), d.access)).collect();
/// assert_eq!(raws, [("a", Access::Read), ("b", Access::Read), ("o.txt", Access::Write)]);
/// ```
pub fn declared_by_schema(schema: &Value, input: &Value) -> Vec<DeclaredPath> {
    let mut out = Vec::new();
    let mut budget = 10_000usize;
    walk(
        schema,
        schema,
        input,
        String::new(),
        &mut out,
        &mut budget,
        0,
    );
    out
}

fn resolve_ref<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut current = schema;
    for _ in 0..16 {
        let Some(r) = current.get("$ref").and_then(Value::as_str) else {
            return current;
        };
        let Some(pointer) = r.strip_prefix('#') else {
            return current;
        };
        match root.pointer(pointer) {
            Some(target) => current = target,
            None => return current,
        }
    }
    current
}

fn walk(
    root: &Value,
    schema: &Value,
    input: &Value,
    at: String,
    out: &mut Vec<DeclaredPath>,
    budget: &mut usize,
    depth: usize,
) {
    if *budget == 0 || depth > 32 {
        return;
    }
    *budget -= 1;
    let schema = resolve_ref(root, schema);
    if let (Some(access), Value::String(s)) = (annotated(schema), input) {
        let arg = at.strip_prefix('/').filter(|a| !a.contains('/'));
        out.push(DeclaredPath {
            arg: arg.map_or_else(|| at.clone(), str::to_string),
            raw: s.clone(),
            access,
        });
        return;
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            let before = out.len();
            for branch in branches {
                walk(root, branch, input, at.clone(), out, budget, depth + 1);
                if out.len() > before && key != "allOf" {
                    break;
                }
            }
        }
    }
    match input {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, sub) in props {
                    if let Some(value) = map.get(name) {
                        let next = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
                        walk(root, sub, value, next, out, budget, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(root, sub, item, format!("{at}/{i}"), out, budget, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// A workspace whose every open stays below its root (the file tools' `Workspace` is one):
/// what a [`ResolvedPath`] reads and writes through. Its methods block.
pub trait Confinement: Send + Sync + fmt::Debug {
    /// The canonical root.
    fn root(&self) -> &Path;

    /// Resolves a path the model wrote to one relative to the root, every symlink on the way
    /// followed; `Err(why)` when it would leave the root.
    fn resolve(&self, raw: &str) -> Result<PathBuf, String>;

    /// The bytes of the regular file at `rel`, if it is at most `max_bytes` long.
    fn read(&self, rel: &Path, max_bytes: u64) -> io::Result<Vec<u8>>;

    /// Replaces (or creates) the file at `rel` with `bytes`, atomically.
    fn write(&self, rel: &Path, bytes: &[u8]) -> io::Result<()>;
}

/// A declared path, resolved inside the workspace and allowed by the path policies: the only
/// way a body needs to touch it. Reads and writes go through the workspace's confined root,
/// so a symlink swapped in after the check cannot lead outside either. Its methods block
/// (call them from `spawn_blocking` for large files).
#[derive(Clone)]
pub struct ResolvedPath {
    arg: String,
    raw: String,
    relative: PathBuf,
    access: Access,
    confinement: Arc<dyn Confinement>,
}

impl fmt::Debug for ResolvedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedPath")
            .field("arg", &self.arg)
            .field("raw", &self.raw)
            .field("relative", &self.relative)
            .field("access", &self.access)
            .finish()
    }
}

impl ResolvedPath {
    /// Where the path was in the arguments.
    pub fn arg(&self) -> &str {
        &self.arg
    }

    /// The path as the model wrote it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The path relative to the workspace root (empty for the root itself).
    pub fn relative(&self) -> &Path {
        &self.relative
    }

    /// The path as the model is shown it: relative, `/`-separated, `.` for the root.
    pub fn display(&self) -> String {
        if self.relative.as_os_str().is_empty() {
            ".".into()
        } else {
            self.relative.to_string_lossy().into_owned()
        }
    }

    /// The absolute path (for messages; open it through this handle, not by name).
    pub fn absolute(&self) -> PathBuf {
        self.confinement.root().join(&self.relative)
    }

    /// The access the tool declared.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The file's bytes, if it is at most `max_bytes` long.
    pub fn read(&self, max_bytes: u64) -> io::Result<Vec<u8>> {
        self.confinement.read(&self.relative, max_bytes)
    }

    /// The file's text (UTF-8), if it is at most `max_bytes` long.
    pub fn read_to_string(&self, max_bytes: u64) -> io::Result<String> {
        String::from_utf8(self.read(max_bytes)?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the file is not UTF-8 text"))
    }

    /// Replaces the file's content atomically. Refused for a path declared for reading only.
    pub fn write(&self, bytes: &[u8]) -> io::Result<()> {
        if self.access != Access::Write {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "`{}` was declared for reading: the tool may not write it",
                    self.display()
                ),
            ));
        }
        self.confinement.write(&self.relative, bytes)
    }
}

/// The resolved declared paths of one call, in the order the call names them. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ResolvedPaths {
    list: Arc<[ResolvedPath]>,
}

impl ResolvedPaths {
    /// The path of the top-level argument `arg` (the first, for an array).
    pub fn get(&self, arg: &str) -> Option<&ResolvedPath> {
        let element = format!("/{arg}/");
        self.list
            .iter()
            .find(|p| p.arg == arg || p.arg.starts_with(&element))
    }

    /// The path the model wrote as `raw` (the write handle, when one was declared both ways).
    pub fn by_raw(&self, raw: &str) -> Option<&ResolvedPath> {
        let mut hits = self.list.iter().filter(|p| p.raw == raw);
        let first = hits.next()?;
        Some(
            std::iter::once(first)
                .chain(hits)
                .find(|p| p.access == Access::Write)
                .unwrap_or(first),
        )
    }

    /// Every resolved path.
    pub fn iter(&self) -> impl Iterator<Item = &ResolvedPath> {
        self.list.iter()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when the call declared no path (or there is no workspace).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Resolves `declared` through `confinement` and puts each to `policy` (as a path the call
/// named: only what is refused whatever was approved refuses it). The first refusal is the
/// call's `DENIED` failure, before its body runs.
pub fn resolve_declared(
    confinement: &Arc<dyn Confinement>,
    policy: &PathPolicies,
    tool: &str,
    declared: &[DeclaredPath],
) -> Result<ResolvedPaths, ToolFailure> {
    let mut list = Vec::with_capacity(declared.len());
    for d in declared {
        let relative = confinement
            .resolve(&d.raw)
            .map_err(|why| ToolFailure::with_code(ErrorCode::Denied, why))?;
        let absolute = confinement.root().join(&relative);
        if let Some(why) = policy.forbids(tool, d.access, &absolute) {
            return Err(ToolFailure::with_code(
                ErrorCode::Denied,
                format!(
                    "{} `{}` is denied: {why}",
                    match d.access {
                        Access::Read => "reading",
                        Access::Write => "changing",
                    },
                    d.raw
                ),
            ));
        }
        list.push(ResolvedPath {
            arg: d.arg.clone(),
            raw: d.raw.clone(),
            relative,
            access: d.access,
            confinement: confinement.clone(),
        });
    }
    Ok(ResolvedPaths { list: list.into() })
}

/// True when `schema` has a top-level string property named like a path
/// ([`PATH_LIKE_NAMES`]); answers its name.
pub fn path_like_argument(schema: &Value) -> Option<&'static str> {
    let props = schema.get("properties")?.as_object()?;
    PATH_LIKE_NAMES.into_iter().find(|name| {
        props
            .get(*name)
            .and_then(|p| p.get("type"))
            .is_some_and(|t| {
                t == "string"
                    || t.as_array()
                        .is_some_and(|a| a.iter().any(|x| x == "string"))
            })
    })
}
