//! The one error type of this crate.

/// Errors of serving MCP.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP connection could not be set up (the client went away during the handshake, or
    /// sent something that is not MCP).
    #[error("the MCP connection could not start: {0}")]
    Connect(String),
    /// The connection ended with an error.
    #[error("the MCP connection failed: {0}")]
    Connection(String),
}
