//! The messages between the engine thread and the body's task, and how a script ended.

use serde_json::Value;

/// A sub-call the script asked for (engine → body). Ids count from 0 in request order.
#[derive(Debug)]
pub(crate) struct SubCallRequest {
    pub id: u32,
    pub name: String,
    pub arguments: Value,
}

/// Body → engine.
#[derive(Debug)]
pub(crate) enum HostMsg {
    /// A sub-call finished; `json` is what the script's promise settles with.
    Reply { id: u32, json: String },
    /// Look at the signal and the deadline again (sent on cancel and at the deadline).
    Wake,
}

/// Why the engine stopped a script that was still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The wall-time limit passed.
    Deadline,
    /// The call's signal fired (its reason says why).
    Cancelled,
    /// The script asked for more sub-calls than allowed.
    SubcallLimit,
}

/// How the script ended.
#[derive(Debug, Clone, PartialEq)]
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
    /// It awaits something that nothing will ever settle.
    Stalled,
    /// The engine itself failed.
    Internal(String),
}

/// What the engine thread hands back when it is done.
#[derive(Debug, Clone)]
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
