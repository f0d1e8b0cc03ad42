//! The one error type of this crate.

/// Errors of the proxy's setup (a refused connection is not an error: it is an
/// [`crate::Egress`] record with decision `deny`).
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A `--net-hosts` file that cannot be read or holds a line that is not `ADDRESS NAME…`.
    #[error("the hosts file {path}: {reason}")]
    HostsFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The listening socket could not be used.
    #[error("the proxy cannot listen: {0}")]
    Listen(#[source] std::io::Error),
}
