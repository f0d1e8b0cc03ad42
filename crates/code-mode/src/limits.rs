//! The hard limits of one `run_code` call.

use std::time::Duration;

/// What one script may use. Each limit ends the script with its own clear error.
///
/// ```
/// use dsh_code_mode::CodeLimits;
/// use std::time::Duration;
/// let limits = CodeLimits { timeout: Duration::from_secs(5), ..CodeLimits::default() };
/// assert_eq!(limits.timeout_ms(), 5_000);
/// assert!(limits.memory_bytes >= 1 << 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLimits {
    /// Wall time of the whole call, sub-calls included (`TOOL_TIMEOUT`). Also the tool's
    /// `timeout_ms`, so a registered timeout wrapper applies the same deadline.
    pub timeout: Duration,
    /// Heap of the script's engine.
    pub memory_bytes: usize,
    /// Stack the script's calls may use (deep recursion ends here).
    pub stack_bytes: usize,
    /// Sub-calls one script may make.
    pub max_subcalls: usize,
    /// Console output kept; the rest is counted and dropped.
    pub max_console_bytes: usize,
    /// Size of the script's return value as JSON.
    pub max_result_bytes: usize,
}

impl Default for CodeLimits {
    fn default() -> Self {
        CodeLimits {
            timeout: Duration::from_secs(60),
            memory_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            max_subcalls: 500,
            max_console_bytes: 32 << 10,
            max_result_bytes: 64 << 10,
        }
    }
}

impl CodeLimits {
    /// The wall-time limit in milliseconds (at least 1).
    pub fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}
