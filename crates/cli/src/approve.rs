//! Answers to `ask` decisions: fixed (`--approve allow|deny`) or asked on the terminal.

use crate::cli::Approve;
use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use tokio::sync::Mutex;

/// The responder for an `--approve` mode. `stdin_free` is false when standard input carries
/// the transcript, so it cannot also carry a human's answers.
pub fn responder(mode: Approve, stdin_free: bool) -> Arc<dyn ApprovalResponder> {
    match mode {
        Approve::Allow => Arc::new(Fixed(true)),
        Approve::Deny => Arc::new(Fixed(false)),
        Approve::Prompt => Arc::new(TerminalPrompt {
            usable: stdin_free && std::io::stdin().is_terminal(),
            one_at_a_time: Mutex::new(()),
        }),
    }
}

struct Fixed(bool);

#[async_trait]
impl ApprovalResponder for Fixed {
    async fn respond(&self, _request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        Ok(if self.0 {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Reject(Some("refused by --approve deny".into()))
        })
    }
}

/// Asks on stderr, reads the answer from the terminal on stdin.
struct TerminalPrompt {
    usable: bool,
    /// Parallel calls may ask at once; their questions must not interleave.
    one_at_a_time: Mutex<()>,
}

/// `y` or `yes` (any case) approves; anything else, including end of input, refuses.
fn approves(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[async_trait]
impl ApprovalResponder for TerminalPrompt {
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        if !self.usable {
            return Ok(ApprovalAnswer::Reject(Some(
                "approval needed but there is no terminal to ask on (use --approve allow to approve)"
                    .into(),
            )));
        }
        let _turn = self.one_at_a_time.lock().await;
        let question = format!(
            "dsh: {} {}\n     {}. Run it? [y/N] ",
            request.tool, request.arguments, request.prompt
        );
        let answer = tokio::task::spawn_blocking(move || {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(question.as_bytes());
            let _ = err.flush();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| HookError::new(format!("the approval prompt failed: {e}")))?
        .map_err(|e| HookError::new(format!("could not read the answer: {e}")))?;
        Ok(if approves(&answer) {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Reject(Some("the user declined".into()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_approves() {
        assert!(approves("y\n"));
        assert!(approves(" YES "));
        assert!(!approves(""));
        assert!(!approves("n"));
        assert!(!approves("yep"));
    }
}
