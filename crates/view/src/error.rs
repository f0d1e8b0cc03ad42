//! The crate's errors.

/// What can go wrong making a page.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The log could not be read.
    #[error("cannot read the log: {0}")]
    Io(#[from] std::io::Error),
}
