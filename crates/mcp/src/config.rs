//! The config file, in the shape other harnesses use:
//! `{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}`.
//!
//! Besides `command`, `args` and `env`, a server may give `cwd` (relative paths are taken from
//! the default directory) and `timeout` (milliseconds, the per-call deadline, as Gemini CLI
//! spells it; 60 s when absent). `"type": "stdio"` is accepted; a remote server (`url`,
//! `httpUrl`, or another `type`) is refused with an error naming it; `"disabled": true` skips
//! a server. Other keys that harnesses add are ignored. `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`
//! and `cwd` are taken from the environment, as Claude Code does.

use crate::error::McpError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One stdio MCP server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The name as the config spells it (used in messages).
    pub name: String,
    /// The name used in tool names: `mcp__<tool_prefix>__<tool>`.
    pub tool_prefix: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the inherited environment.
    pub env: BTreeMap<String, String>,
    /// The working directory (`None`: the process's own).
    pub cwd: Option<PathBuf>,
    /// The deadline of each call to one of its tools, applied by the timeout wrapper
    /// (`None`: the source's [`McpOptions::default_timeout`](crate::McpOptions), by default
    /// [`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT), 60 s).
    pub timeout_ms: Option<u64>,
}

/// The servers of a config file.
///
/// ```
/// use dsh_mcp::McpServers;
/// let servers = McpServers::from_json(r#"{"mcpServers": {
///     "files": {"command": "mcp-files", "args": ["--root", "."], "timeout": 5000}
/// }}"#).unwrap();
/// assert_eq!(servers.len(), 1);
/// assert_eq!(servers.servers()[0].timeout_ms, Some(5000));
/// assert!(McpServers::from_json(r#"{"mcpServers": {"x": {"args": []}}}"#)
///     .unwrap_err().to_string().contains("MCP server `x`"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServers {
    servers: Vec<McpServerConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    #[serde(alias = "timeout_ms", alias = "timeoutMs")]
    timeout: Option<u64>,
    #[serde(rename = "type")]
    kind: Option<String>,
    url: Option<String>,
    http_url: Option<String>,
    #[serde(default)]
    disabled: bool,
}

/// The name a server's tools carry: characters outside `[A-Za-z0-9_-]` become `_`, as
/// Claude Code names MCP tools.
pub(crate) fn normalize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn server_error(server: &str, reason: impl Into<String>) -> McpError {
    McpError::Server {
        server: server.to_string(),
        reason: reason.into(),
    }
}

/// Expands `${VAR}` and `${VAR:-default}` from `lookup`.
fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    server: &str,
) -> Result<String, McpError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(server_error(server, format!("unclosed `${{` in `{text}`")));
        };
        let inner = &after[..end];
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        match (lookup(var), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(server_error(
                    server,
                    format!("the environment variable `{var}` used in `{text}` is not set"),
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl McpServers {
    /// Reads and parses a config file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<McpServers, McpError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| McpError::Read {
            path: path.display().to_string(),
            source,
        })?;
        McpServers::from_json(&text)
    }

    /// Parses a config, expanding `${VAR}` from the process environment.
    pub fn from_json(text: &str) -> Result<McpServers, McpError> {
        McpServers::from_json_with_env(text, &|var| std::env::var(var).ok())
    }

    /// Parses a config, expanding `${VAR}` with `lookup`.
    pub fn from_json_with_env(
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<McpServers, McpError> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| McpError::Config(format!("not JSON: {e}")))?;
        let Some(entries) = root.get("mcpServers") else {
            return Err(McpError::Config(
                "no `mcpServers` object at the top level".into(),
            ));
        };
        let Some(entries) = entries.as_object() else {
            return Err(McpError::Config(
                "`mcpServers` must be an object of servers by name".into(),
            ));
        };
        let mut servers: Vec<McpServerConfig> = Vec::new();
        for (name, entry) in entries {
            let Some(server) = parse_server(name, entry, lookup)? else {
                continue;
            };
            if let Some(other) = servers.iter().find(|s| s.tool_prefix == server.tool_prefix) {
                return Err(server_error(
                    name,
                    format!(
                        "its tools would be named like those of server `{}` (mcp__{}__*)",
                        other.name, server.tool_prefix
                    ),
                ));
            }
            servers.push(server);
        }
        Ok(McpServers { servers })
    }

    /// Gives servers without a `cwd` this directory, and resolves relative ones against it.
    pub fn with_default_cwd(mut self, dir: impl AsRef<Path>) -> McpServers {
        let dir = dir.as_ref();
        for server in &mut self.servers {
            server.cwd = Some(match server.cwd.take() {
                Some(cwd) if cwd.is_relative() => dir.join(cwd),
                Some(cwd) => cwd,
                None => dir.to_path_buf(),
            });
        }
        self
    }

    /// The servers, by name.
    pub fn servers(&self) -> &[McpServerConfig] {
        &self.servers
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

fn parse_server(
    name: &str,
    entry: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<McpServerConfig>, McpError> {
    if name.is_empty() {
        return Err(McpError::Config("a server has an empty name".into()));
    }
    if !entry.is_object() {
        return Err(server_error(name, "its entry must be an object"));
    }
    let raw: RawServer = serde_json::from_value(entry.clone())
        .map_err(|e| server_error(name, format!("invalid entry: {e}")))?;
    if raw.disabled {
        tracing::info!(
            server = name,
            "MCP server is disabled in the config; skipped"
        );
        return Ok(None);
    }
    if let Some(kind) = raw.kind.as_deref()
        && kind != "stdio"
    {
        return Err(server_error(
            name,
            format!("transport type `{kind}` is not supported; only stdio servers (`command`) are"),
        ));
    }
    let Some(command) = raw.command else {
        let why = if raw.url.is_some() || raw.http_url.is_some() {
            "remote servers (`url`) are not supported; only stdio servers with a `command` are"
        } else {
            "it has no `command`"
        };
        return Err(server_error(name, why));
    };
    let command = expand(&command, lookup, name)?;
    if command.trim().is_empty() {
        return Err(server_error(name, "its `command` is empty"));
    }
    if raw.timeout == Some(0) {
        return Err(server_error(
            name,
            "`timeout` must be at least 1 millisecond",
        ));
    }
    let args = raw
        .args
        .iter()
        .map(|a| expand(a, lookup, name))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = BTreeMap::new();
    for (key, value) in &raw.env {
        env.insert(key.clone(), expand(value, lookup, name)?);
    }
    let cwd = match raw.cwd {
        Some(c) => Some(PathBuf::from(expand(&c, lookup, name)?)),
        None => None,
    };
    Ok(Some(McpServerConfig {
        name: name.to_string(),
        tool_prefix: normalize_name(name),
        command,
        args,
        env,
        cwd,
        timeout_ms: raw.timeout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "HOME" => Some("/home/me".into()),
            "TOKEN" => Some("s3cret".into()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<McpServers, McpError> {
        McpServers::from_json_with_env(text, &env)
    }

    #[test]
    fn reads_the_common_shape_and_ignores_other_keys() {
        let servers = parse(
            r#"{"mcpServers": {
                "git hub": {"type": "stdio", "command": "${HOME}/bin/gh-mcp",
                    "args": ["--token", "${TOKEN}", "${MISSING:-fallback}"],
                    "env": {"A": "1"}, "alwaysAllow": ["x"], "timeout": 250},
                "off": {"command": "nope", "disabled": true}
            }, "otherHarnessKey": true}"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 1);
        let s = &servers.servers()[0];
        assert_eq!(s.name, "git hub");
        assert_eq!(s.tool_prefix, "git_hub");
        assert_eq!(s.command, "/home/me/bin/gh-mcp");
        assert_eq!(s.args, ["--token", "s3cret", "fallback"]);
        assert_eq!(s.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(s.timeout_ms, Some(250));
    }

    #[test]
    fn bad_entries_name_their_server() {
        let cases = [
            (
                r#"{"mcpServers": {"a": {"url": "https://x"}}}"#,
                "remote servers",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "command": "x"}}}"#,
                "`sse`",
            ),
            (r#"{"mcpServers": {"a": {"command": 3}}}"#, "invalid entry"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#,
                "invalid entry",
            ),
            (r#"{"mcpServers": {"a": {"command": "${NOPE}"}}}"#, "`NOPE`"),
            (
                r#"{"mcpServers": {"a": {"command": "${HOME"}}}"#,
                "unclosed",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "timeout": 0}}}"#,
                "timeout",
            ),
            (r#"{"mcpServers": {"a": []}}"#, "object"),
            (
                r#"{"mcpServers": {"a.b": {"command": "x"}, "a_b": {"command": "y"}}}"#,
                "a.b",
            ),
        ];
        for (text, needle) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with("MCP server `a"), "{text}: {e}");
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn a_file_of_the_wrong_shape_says_so() {
        assert!(parse("{").unwrap_err().to_string().contains("not JSON"));
        assert!(parse("{}").unwrap_err().to_string().contains("mcpServers"));
        assert!(
            parse(r#"{"mcpServers": []}"#)
                .unwrap_err()
                .to_string()
                .contains("must be an object")
        );
    }

    #[test]
    fn default_cwd_fills_in_and_anchors_relative_dirs() {
        let servers = parse(
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "cwd": "sub"},
                "c": {"command": "z", "cwd": "/abs"}}}"#,
        )
        .unwrap()
        .with_default_cwd("/ws");
        let cwds: Vec<_> = servers.servers().iter().map(|s| s.cwd.clone()).collect();
        assert_eq!(
            cwds,
            [
                Some(PathBuf::from("/ws")),
                Some(PathBuf::from("/ws/sub")),
                Some(PathBuf::from("/abs"))
            ]
        );
    }
}
