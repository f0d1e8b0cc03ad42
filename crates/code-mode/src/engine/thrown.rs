//! Turning what a script threw into text the model can act on, and telling the engine's
//! own limit errors from what a script threw.
//!
//! The script is evaluated wrapped in an async function whose first line is the wrapper, so
//! every location QuickJS reports is one line below the model's line: it is moved back here.
//!
//! A limit error is the engine's only if it is a real error object whose `name` is its
//! class's (not an own property a script set): a thrown plain object or a renamed error is
//! the script's exception, whatever it says. When QuickJS runs out of memory so fully that it
//! cannot even make its error object, it throws `null`; a script can throw `null` too, so a
//! `null` is told as running out of memory only when the process's peak memory shows the heap
//! was filled ([`MemoryWitness`]).

use super::SCRIPT_NAME;
use crate::bridge::ScriptEnd;
use rquickjs::object::Filter;
use rquickjs::{Coerced, Object, Value};

/// What was thrown, read without trusting it (getters may throw; those parts stay empty).
#[derive(Debug, Default)]
pub(super) struct Thrown {
    pub name: Option<String>,
    pub message: String,
    pub stack: Option<String>,
    /// A real error object whose `name` it inherits from its class: what the engine makes.
    pub engine_shaped: bool,
    /// `null` or `undefined` (or no exception at all).
    pub nullish: bool,
}

impl Thrown {
    pub(super) fn read(value: &Value<'_>) -> Thrown {
        if let Some(obj) = value.as_object() {
            let name = text_field(obj, "name");
            let message = text_field(obj, "message");
            if name.is_some() || message.is_some() {
                return Thrown {
                    name,
                    message: message.unwrap_or_default(),
                    stack: text_field(obj, "stack").map(|s| user_stack(&s)),
                    engine_shaped: value.is_error() && !has_own(obj, "name"),
                    nullish: false,
                };
            }
        }
        let nullish = value.type_of().is_void();
        let message = if value.type_of() == rquickjs::Type::Uninitialized {
            "null".to_string()
        } else {
            value
                .get::<Coerced<String>>()
                .map(|c| c.0)
                .unwrap_or_else(|_| "a value that cannot be shown".to_string())
        };
        Thrown {
            name: None,
            message,
            stack: None,
            engine_shaped: false,
            nullish,
        }
    }

    fn is(&self, name: &str) -> bool {
        self.engine_shaped && self.name.as_deref() == Some(name)
    }

    /// The engine's own limit errors, or the script's exception.
    pub(super) fn classify(self, memory: &MemoryWitness) -> ScriptEnd {
        if self.is("InternalError") && self.message == "out of memory" {
            return ScriptEnd::OutOfMemory;
        }
        if (self.is("RangeError") && self.message == "Maximum call stack size exceeded")
            || (self.is("InternalError") && self.message.starts_with("stack overflow"))
        {
            return ScriptEnd::StackOverflow;
        }
        if self.nullish && memory.exhausted() {
            return ScriptEnd::OutOfMemory;
        }
        ScriptEnd::Threw(self.text())
    }

    /// A compile error: its position in the model's own lines.
    pub(super) fn syntax(self, code: &str) -> ScriptEnd {
        let (line, column) = self
            .stack
            .as_deref()
            .and_then(first_location)
            .unwrap_or((1, 1));
        let last = u32::try_from(code.lines().count().max(1)).unwrap_or(u32::MAX);
        ScriptEnd::Syntax {
            message: self.message,
            line: line.min(last),
            column,
        }
    }

    pub(super) fn is_syntax_error(&self) -> bool {
        self.is("SyntaxError")
    }

    /// `Name: message` and the stack, the way a console prints an uncaught error.
    pub(super) fn text(&self) -> String {
        let mut out = match &self.name {
            Some(name) if self.message.is_empty() => name.clone(),
            Some(name) => format!("{name}: {}", self.message),
            None => self.message.clone(),
        };
        let stack = self.stack.as_deref().map(str::trim_end).unwrap_or_default();
        if !stack.is_empty() {
            out.push('\n');
            out.push_str(stack);
        }
        out
    }
}

/// Whether `key` is an own property of `obj` (without running any getter).
fn has_own(obj: &Object<'_>, key: &str) -> bool {
    obj.own_keys::<String>(Filter::new().string())
        .any(|k| k.is_ok_and(|k| k == key))
}

/// Tells whether the script's heap was filled, from the worker process's peak resident
/// memory (`VmHWM`): the process runs this one script, so its peak growth since the script
/// started is the script's. Where there is no `/proc`, it never says so.
#[derive(Debug)]
pub(crate) struct MemoryWitness {
    start_kib: std::cell::Cell<Option<u64>>,
    limit_bytes: usize,
}

impl MemoryWitness {
    pub(crate) fn new(limit_bytes: usize) -> MemoryWitness {
        MemoryWitness {
            start_kib: std::cell::Cell::new(None),
            limit_bytes,
        }
    }

    /// Takes the peak as the script starts (the runtime and the prelude are set up).
    pub(crate) fn start(&self) {
        self.start_kib.set(peak_kib());
    }

    /// Whether the peak grew by at least three quarters of the heap limit since the script
    /// started: a heap that was nearly full. A script that throws `null` right after filling
    /// most of its heap may be told it ran out of memory; nothing else is.
    pub(crate) fn exhausted(&self) -> bool {
        let (Some(start), Some(now)) = (self.start_kib.get(), peak_kib()) else {
            return false;
        };
        let grown = now.saturating_sub(start).saturating_mul(1024);
        grown >= (self.limit_bytes as u64 / 4).saturating_mul(3)
    }
}

/// The process's peak resident memory in KiB (`getrusage`'s `ru_maxrss`, which is
/// `/proc/self/status`'s `VmHWM` without formatting and parsing that file on every script).
fn peak_kib() -> Option<u64> {
    crate::fork_sys::peak_rss_kib()
}

fn text_field(obj: &Object<'_>, key: &str) -> Option<String> {
    match obj.get::<_, Value>(key) {
        Ok(v) if v.is_string() => v.get::<String>().ok(),
        _ => None,
    }
}

/// Splits `run_code:L:C` at `at`, answering (L, C, bytes used).
fn location_at(text: &str) -> Option<(u32, u32, usize)> {
    let rest = text.strip_prefix(SCRIPT_NAME)?.strip_prefix(':')?;
    let line_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let line: u32 = rest.get(..line_len)?.parse().ok()?;
    let rest = rest.get(line_len..)?.strip_prefix(':')?;
    let col_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let column: u32 = rest.get(..col_len)?.parse().ok()?;
    Some((line, column, SCRIPT_NAME.len() + 1 + line_len + 1 + col_len))
}

/// The first `run_code:L:C` of a stack (already in the model's lines).
fn first_location(stack: &str) -> Option<(u32, u32)> {
    stack
        .match_indices(SCRIPT_NAME)
        .find_map(|(i, _)| location_at(&stack[i..]))
        .map(|(line, column, _)| (line, column))
}

/// A stack as the model should read it: its lines, without the wrapper's own frame.
fn user_stack(stack: &str) -> String {
    let kept: Vec<&str> = stack
        .lines()
        .filter(|l| !l.trim_start().starts_with("at <eval> ("))
        .collect();
    user_locations(&kept.join("\n"))
}

/// Rewrites every `run_code:L:C` of a stack to the model's line numbers.
pub(super) fn user_locations(stack: &str) -> String {
    let mut out = String::with_capacity(stack.len());
    let mut rest = stack;
    while let Some(i) = rest.find(SCRIPT_NAME) {
        out.push_str(&rest[..i]);
        match location_at(&rest[i..]) {
            Some((line, column, used)) => {
                let line = line.saturating_sub(1).max(1);
                out.push_str(&format!("{SCRIPT_NAME}:{line}:{column}"));
                rest = &rest[i + used..];
            }
            None => {
                out.push_str(SCRIPT_NAME);
                rest = &rest[i + SCRIPT_NAME.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_move_back_to_the_models_lines() {
        let stack = "    at f (run_code:3:9)\n    at <anonymous> (run_code:7:1)\n";
        assert_eq!(
            user_locations(stack),
            "    at f (run_code:2:9)\n    at <anonymous> (run_code:6:1)\n"
        );
        assert_eq!(first_location(&user_locations(stack)), Some((2, 9)));
        assert_eq!(user_locations("run_code: nothing"), "run_code: nothing");
        assert_eq!(first_location("no location"), None);
        assert_eq!(
            user_stack("    at f (run_code:2:5)\n    at <eval> (run_code:4:1)\n"),
            "    at f (run_code:1:5)",
            "the wrapper's frame is not the model's"
        );
    }
}
