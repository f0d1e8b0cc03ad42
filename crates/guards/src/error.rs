//! The one error type of this crate.

/// Errors of the guard set and of permission rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardsError {
    /// A guard with this identity is already registered (by someone else).
    #[error("a guard with id `{0}` is already registered")]
    IdTaken(String),
    /// The owner handle does not match the registered guard.
    #[error("guard `{0}` is not owned by this handle")]
    NotOwner(String),
    /// A replacement must keep the guard's identity.
    #[error("a replacement for guard `{old}` must keep its id, not `{new}`")]
    IdentityChanged {
        /// The registered id.
        old: String,
        /// The replacement's id.
        new: String,
    },
    /// A guard that cannot be registered (its `id()` panicked).
    #[error("the guard cannot be registered: {0}")]
    InvalidGuard(String),
    /// The guard-set actor did not answer.
    #[error("the guard set is unavailable: {0}")]
    Unavailable(String),
    /// A permission rule that does not parse.
    #[error("invalid permission rule `{rule}`: {reason}")]
    InvalidRule {
        /// The rule as written.
        rule: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A permission file that is not valid TOML of the expected shape.
    #[error("invalid permission rules file: {0}")]
    InvalidRules(String),
    /// A rule whose tool part names no tool dsh knows: a typo in a deny rule would otherwise
    /// protect nothing.
    #[error("permission rule `{rule}` names no known tool; the known tools are {known}")]
    UnknownTool {
        /// The rule as written.
        rule: String,
        /// The known tools, intents and MCP prefixes, listed.
        known: String,
    },
}
