//! The one error type of this crate.

/// Why MCP servers could not be configured, started or registered.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The config file could not be read.
    #[error("cannot read the MCP config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The config is not JSON, or not in the `{"mcpServers": {...}}` shape.
    #[error("the MCP config is invalid: {0}")]
    Config(String),
    /// One server's entry is invalid.
    #[error("MCP server `{server}`: {reason}")]
    Server {
        /// The server's name, as the config spells it.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A server could not be started, or did not complete the MCP handshake or list its tools.
    #[error("MCP server `{server}` could not start: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// A server's tool could not be added to the registry.
    #[error("MCP server `{server}`: tool `{tool}` could not be registered: {reason}")]
    Register {
        /// The server's name.
        server: String,
        /// The tool's registered name.
        tool: String,
        /// What the registry said.
        reason: String,
    },
}
