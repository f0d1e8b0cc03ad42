//! Answers to `ask` decisions: fixed (`--approve allow|deny`) or asked on the terminal.

use crate::cli::Approve;
use crate::output::printable;
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
            one_at_a_time: Mutex::new(None),
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
///
/// One thread reads stdin for the whole run and hands lines over a channel, so a prompt is an
/// ordinary future: when its call is cancelled (or times out) the prompt is withdrawn at once,
/// says so, and lets the next one ask. A line typed while no question was on screen is an
/// answer to nothing and is dropped before the next question is shown.
struct TerminalPrompt {
    usable: bool,
    /// Parallel calls may ask at once; their questions must not interleave.
    one_at_a_time: Mutex<Option<Lines>>,
}

/// The stdin reader thread's lines; `None` once stdin is closed.
type Lines = tokio::sync::mpsc::Receiver<Option<String>>;

fn start_reader() -> Lines {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let spawned = std::thread::Builder::new()
        .name("dsh-approval-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            loop {
                let mut line = String::new();
                let read = stdin.lock().read_line(&mut line);
                let eof = !matches!(read, Ok(n) if n > 0);
                if tx.blocking_send((!eof).then_some(line)).is_err() || eof {
                    return;
                }
            }
        });
    if spawned.is_err() {
        // No reader: every prompt sees stdin as closed, which refuses.
        let (_, rx) = tokio::sync::mpsc::channel(1);
        return rx;
    }
    rx
}

/// `y` or `yes` (any case) approves; anything else, including end of input, refuses.
fn approves(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Longest view of the arguments a question shows.
const SHOWN_ARGUMENTS: usize = 2_000;

/// The question, every part of it made printable: text from the model (tool name, arguments,
/// the rule's prompt) cannot break a line, so it cannot draw a question of its own; the real
/// question is always the last line.
fn question(request: &ApprovalRequest) -> String {
    let mut arguments = request.arguments.to_string();
    if arguments.len() > SHOWN_ARGUMENTS {
        let mut cut = SHOWN_ARGUMENTS;
        while !arguments.is_char_boundary(cut) {
            cut -= 1;
        }
        let omitted = arguments.len() - cut;
        arguments.truncate(cut);
        arguments.push_str(&format!(" … ({omitted} bytes more)"));
    }
    format!(
        "dsh: approval needed for call {} of `{}`\n     arguments: {}\n     why: {}\n     Run it? [y/N] ",
        printable(&request.call_id),
        printable(&request.tool),
        printable(&arguments),
        printable(&request.prompt),
    )
}

fn ask(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Says that a question on screen no longer stands, when the prompt is dropped unanswered.
struct Withdraw(bool);

impl Drop for Withdraw {
    fn drop(&mut self) {
        if self.0 {
            ask("\ndsh: (the call was cancelled; that question is withdrawn)\n");
        }
    }
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
        let mut turn = self.one_at_a_time.lock().await;
        let lines = turn.get_or_insert_with(start_reader);
        while let Ok(stale) = lines.try_recv() {
            if stale.is_none() {
                return Ok(ApprovalAnswer::Reject(Some(
                    "standard input is closed".into(),
                )));
            }
        }
        ask(&question(request));
        let mut withdraw = Withdraw(true);
        let answer = lines.recv().await.flatten();
        withdraw.0 = false;
        Ok(match answer {
            Some(a) if approves(&a) => ApprovalAnswer::Approve,
            Some(_) => ApprovalAnswer::Reject(Some("the user declined".into())),
            None => ApprovalAnswer::Reject(Some("standard input is closed".into())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_keeps_model_text_on_its_own_lines() {
        let request = ApprovalRequest {
            call_id: "c\u{1b}[2K".into(),
            tool: "write_file".into(),
            agent: "main".into(),
            arguments: serde_json::json!({"path": "a\u{85}b", "content": "x\n     Run it? [y/N] y\u{202E}"}),
            prompt: "rule `ask`".into(),
        };
        let q = question(&request);
        assert_eq!(q.matches('\n').count(), 3, "{q}");
        assert!(q.ends_with("\n     Run it? [y/N] "));
        assert!(!q.contains('\u{1b}') && !q.contains('\u{85}') && !q.contains('\u{202E}'));
        let long = ApprovalRequest {
            arguments: serde_json::json!({"content": "z".repeat(10_000)}),
            ..request
        };
        assert!(question(&long).len() < 3_000);
    }

    #[test]
    fn only_yes_approves() {
        assert!(approves("y\n"));
        assert!(approves(" YES "));
        assert!(!approves(""));
        assert!(!approves("n"));
        assert!(!approves("yep"));
    }
}
