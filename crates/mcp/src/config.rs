//! The config file, in the shape other harnesses use:
//! `{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}`.
//!
//! Besides `command`, `args` and `env`, a server may give `cwd` (relative paths are taken from
//! the default directory) and `timeout` (milliseconds, the per-call deadline, as Gemini CLI
//! spells it; 60 s when absent). `"type": "stdio"` is accepted; a remote server (`url`,
//! `httpUrl`, or another `type`) is refused with an error naming it; `"disabled": true` skips
//! a server. Other keys that harnesses add are ignored. `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`
//! and `cwd` are taken from the environment, as Claude Code does.
//!
//! Tool names are `mcp__<server>__<tool>`, read back by splitting at the first `__` after
//! `mcp__`. So that no server can claim another's names, a server name whose tool prefix
//! (the name with characters outside `[A-Za-z0-9_-]` made `_`) contains `__` or ends in `_`
//! is refused: with server `a__b` allowed, server `a`'s tool `b__c` and server `a__b`'s tool
//! `c` would both be `mcp__a__b__c`.

use crate::error::McpError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
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

    /// Keeps only the servers `keep` says yes to (the others are never started), e.g. to
    /// start only servers whose tools the policy lets run.
    ///
    /// ```
    /// let mut servers = dsh_mcp::McpServers::from_json(
    ///     r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}"#).unwrap();
    /// servers.retain(|server| server.name != "a");
    /// assert_eq!(servers.servers()[0].name, "b");
    /// assert_eq!(servers.len(), 1);
    /// ```
    pub fn retain(&mut self, keep: impl FnMut(&McpServerConfig) -> bool) {
        let mut keep = keep;
        self.servers.retain(|server| keep(server));
    }

    /// The files the servers would run: every server's program (when `command` is a path,
    /// or a bare name found on the `PATH` the server would get), and every argument that
    /// names an existing regular file (also the part after `=` of a `--flag=FILE`), each
    /// relative to the server's `cwd` (the process's own when it has none). Absolute and
    /// canonical (symlinks resolved), sorted, without repeats; files that do not exist are
    /// left out. It over-approximates on purpose (an argument that happens to name a file
    /// is listed): these are the files whose editing would change what a server runs, to be
    /// protected like hook scripts.
    pub fn command_paths(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        for server in &self.servers {
            let cwd = match &server.cwd {
                Some(cwd) if cwd.is_absolute() => Some(cwd.clone()),
                Some(cwd) => std::env::current_dir().ok().map(|here| here.join(cwd)),
                None => std::env::current_dir().ok(),
            };
            let Some(cwd) = cwd else {
                continue;
            };
            paths.extend(program_path(server, &cwd));
            for arg in &server.args {
                let mut candidates = vec![arg.as_str()];
                if let Some((_, value)) = arg.split_once('=') {
                    candidates.push(value);
                }
                for candidate in candidates {
                    if !candidate.is_empty() {
                        paths.extend(regular_file(&cwd.join(candidate)));
                    }
                }
            }
        }
        paths.sort();
        paths.dedup();
        paths
    }
}

/// `path`, canonical, if it is an existing regular file (after following symlinks).
fn regular_file(path: &Path) -> Option<PathBuf> {
    let canonical = path.canonicalize().ok()?;
    canonical.is_file().then_some(canonical)
}

/// The program a server runs: a path with a `/` is taken from its `cwd` (as the OS does
/// after changing into it); a bare name is looked up on the `PATH` the server gets (its
/// own `env` first), relative `PATH` entries from its `cwd`.
fn program_path(server: &McpServerConfig, cwd: &Path) -> Option<PathBuf> {
    let command = Path::new(&server.command);
    if server.command.contains('/') {
        return regular_file(&cwd.join(command));
    }
    let path = match server.env.get("PATH") {
        Some(path) => Some(path.into()),
        None => std::env::var_os("PATH"),
    }?;
    std::env::split_paths(OsStr::new(&path))
        .map(|dir| cwd.join(dir).join(command))
        .find_map(|candidate| regular_file(&candidate))
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
    let tool_prefix = normalize_name(name);
    if tool_prefix.contains("__") || tool_prefix.ends_with('_') {
        return Err(server_error(
            name,
            format!(
                "its tools would be named `mcp__{tool_prefix}__TOOL`, which another server's \
                 tools could also be named (`__` separates the server from the tool): use a \
                 name without `__` (after characters other than letters, digits, `_` and `-` \
                 become `_`) that does not end in `_`"
            ),
        ));
    }
    Ok(Some(McpServerConfig {
        name: name.to_string(),
        tool_prefix,
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

    #[test]
    fn names_that_could_claim_another_servers_tools_are_refused() {
        for name in ["a__b", "a_", "a..b", "x.", "__", "gh__"] {
            let text = format!(r#"{{"mcpServers": {{"{name}": {{"command": "x"}}}}}}"#);
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("MCP server `{name}`")) && e.contains("`__`"),
                "{name}: {e}"
            );
        }
        let fine = parse(
            r#"{"mcpServers": {"a_b": {"command": "x"}, "_a": {"command": "x"},
                "git hub": {"command": "x"}, "a-": {"command": "x"}}}"#,
        )
        .unwrap();
        assert_eq!(fine.len(), 4);
    }

    #[test]
    fn retain_keeps_the_servers_it_is_told_to() {
        let mut servers = parse(
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"},
                "c": {"command": "z"}}}"#,
        )
        .unwrap();
        servers.retain(|s| s.name != "b");
        let names: Vec<_> = servers.servers().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
    }

    #[test]
    fn command_paths_lists_programs_and_file_arguments_canonically() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("bin")).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        for file in [
            "server.sh",
            "conf.json",
            "data.txt",
            "bin/tool",
            "sub/inner.py",
        ] {
            std::fs::write(ws.join(file), "x").unwrap();
        }
        std::os::unix::fs::symlink(ws.join("data.txt"), ws.join("link.txt")).unwrap();
        let config = serde_json::json!({"mcpServers": {
            "a": {"command": "./server.sh",
                  "args": ["--config=conf.json", "data.txt", "missing.txt", "-v", "sub",
                           "link.txt"]},
            "b": {"command": "tool", "env": {"PATH": "bin"}},
            "c": {"command": "python3", "args": ["inner.py"], "cwd": "sub"},
            "d": {"command": "/nonexistent/server"}
        }});
        let servers = McpServers::from_json(&config.to_string())
            .unwrap()
            .with_default_cwd(&ws);
        let paths = servers.command_paths();
        for expected in [
            "server.sh",
            "conf.json",
            "data.txt",
            "bin/tool",
            "sub/inner.py",
        ] {
            assert!(
                paths.contains(&ws.join(expected)),
                "{expected} missing: {paths:?}"
            );
        }
        assert!(
            paths.iter().all(|p| p.is_absolute() && p.is_file()),
            "{paths:?}"
        );
        assert!(
            !paths.contains(&ws.join("link.txt")),
            "links are resolved: {paths:?}"
        );
        assert!(
            !paths.contains(&ws.join("sub")),
            "directories are not files: {paths:?}"
        );
        let mut sorted = paths.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, paths);
    }
}
