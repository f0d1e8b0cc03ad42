//! The messages between the body's task and the worker process that runs the script (one
//! JSON object a line, over the worker's stdin and stdout), and how a script ended.
//!
//! The worker says hello first, so a program that is not a worker is told apart at once;
//! then the body sends the job; the worker asks for sub-calls and the body answers each; the
//! worker's last line is its report.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol's version, in the worker's hello: a worker of another build is refused.
pub(crate) const PROTOCOL: u32 = 1;

/// Body → worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ToWorker {
    /// The script to run (the first message).
    Job(Job),
    /// A sub-call finished; `json` is what the script's promise settles with.
    Reply { id: u32, json: String },
    /// Stop the script (cancel, deadline).
    Stop(Stop),
}

/// A script and its limits.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Job {
    pub code: String,
    /// The tools `tools.*` offers.
    pub tools: Vec<String>,
    pub limits: JobLimits,
    /// Milliseconds left until the call's deadline when the job was sent.
    pub timeout_ms: u64,
}

/// The limits the worker enforces itself (the body keeps the wall time too).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobLimits {
    pub memory_bytes: usize,
    pub stack_bytes: usize,
    pub max_subcalls: usize,
    pub max_console_bytes: usize,
    pub max_result_bytes: usize,
}

/// Worker → body.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FromWorker {
    /// The first line: a worker, speaking this protocol. `forks`: it is a fork server (see
    /// `fork_server`), not a worker.
    Hello {
        protocol: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forks: bool,
    },
    /// The script asked for a sub-call.
    Call(SubCallRequest),
    /// The script is over (the last line).
    Done(EngineReport),
}

/// A sub-call the script asked for. Ids count from 0 in request order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubCallRequest {
    pub id: u32,
    pub name: String,
    /// The arguments' JSON text; when `cut`, only its first bytes (it was longer than any
    /// arguments may be, and the sub-call is answered as oversized).
    pub arguments: String,
    pub cut: bool,
}

/// Inside the worker: what the engine's thread waits for.
#[derive(Debug)]
pub(crate) enum HostMsg {
    /// A sub-call finished.
    Reply { id: u32, json: String },
    /// Look at the stop flag and the deadline again.
    Wake,
}

/// Why a script that was still running was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Stop {
    /// The wall-time limit passed.
    Deadline,
    /// The call's signal fired (its reason says why).
    Cancelled,
    /// The script asked for more sub-calls than allowed.
    SubcallLimit,
}

/// How the script ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ScriptEnd {
    /// It returned this value (`undefined` is `null`).
    Returned(Value),
    /// An exception nobody caught, as `Name: message` plus the stack.
    Threw(String),
    /// The code did not compile.
    Syntax {
        message: String,
        line: u32,
        column: u32,
    },
    /// The heap limit was hit.
    OutOfMemory,
    /// The stack limit was hit.
    StackOverflow,
    /// The return value could not be turned into JSON.
    BadResult(String),
    /// The return value's JSON is this many bytes, over the limit.
    ResultTooLarge(usize),
    /// Stopped from outside the script.
    Stopped(Stop),
    /// It did not stop when told (stuck inside a built-in that never looks), so its process
    /// was killed.
    Killed(Stop),
    /// Every script slot stayed busy until the deadline: it never started.
    NoSlot { slots: usize },
    /// It awaits something that nothing will ever settle.
    Stalled,
    /// The engine itself failed.
    Internal(String),
}

/// What the worker hands back when the script is done.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EngineReport {
    pub end: ScriptEnd,
    pub console: String,
    pub console_dropped: usize,
}

impl EngineReport {
    pub(crate) fn bare(end: ScriptEnd) -> EngineReport {
        EngineReport {
            end,
            console: String::new(),
            console_dropped: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_of_json_each_and_read_back() {
        let report = FromWorker::Done(EngineReport {
            end: ScriptEnd::Returned(serde_json::json!({"a": "line\nbreak"})),
            console: "x\ny".into(),
            console_dropped: 3,
        });
        let line = serde_json::to_string(&report).unwrap();
        assert!(!line.contains('\n'), "{line}");
        match serde_json::from_str::<FromWorker>(&line).unwrap() {
            FromWorker::Done(r) => {
                assert_eq!(r.console, "x\ny");
                assert_eq!(
                    r.end,
                    ScriptEnd::Returned(serde_json::json!({"a": "line\nbreak"}))
                );
            }
            other => panic!("{other:?}"),
        }
        let stop = serde_json::to_string(&ToWorker::Stop(Stop::Deadline)).unwrap();
        assert_eq!(stop, r#"{"stop":"deadline"}"#);
    }
}
