//! Standard output: one JSON message a line, flushed after each step.

use crate::error::CliError;
use serde_json::Value;
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

/// Prints messages as JSON Lines. A closed pipe (`dsh replay LOG | head`) silences further
/// output instead of failing: the log, not stdout, is the record.
#[derive(Debug, Default)]
pub struct JsonLines {
    closed: bool,
}

impl JsonLines {
    /// Prints `messages`, one a line, then flushes.
    pub fn print(&mut self, messages: &[Value]) -> Result<(), CliError> {
        if self.closed || messages.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        let written = messages
            .iter()
            .try_for_each(|m| {
                let mut line = String::new();
                write_ordered(m, &mut line);
                line.push('\n');
                out.write_all(line.as_bytes())
            })
            .and_then(|()| out.flush());
        match written {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(CliError::io("write to", Path::new("standard output"), e)),
        }
    }
}

/// Keys in the order a reader of chat messages expects them; others follow, sorted.
const KEY_ORDER: &[&str] = &[
    "role",
    "type",
    "id",
    "tool_call_id",
    "tool_use_id",
    "name",
    "is_error",
    "content",
    "text",
    "tool_calls",
    "function",
    "arguments",
    "input",
    "source",
    "media_type",
    "data",
];

fn rank(key: &str) -> usize {
    KEY_ORDER
        .iter()
        .position(|k| *k == key)
        .unwrap_or(KEY_ORDER.len())
}

/// Compact JSON with message keys in reading order (`role` first). Tool inputs are the
/// model's own data and keep their sorted order.
fn write_ordered(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                match &map[key] {
                    data if key == "input" => out.push_str(&data.to_string()),
                    other => write_ordered(other, out),
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_ordered(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Reports one line on stderr, prefixed with `dsh: `. Messages often quote the model's input
/// (call ids, tool names, paths), so the line is made [`printable`] first.
pub fn note(message: impl std::fmt::Display) {
    let line = dsh_session::mask_passwords(&message.to_string());
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "dsh: {}", printable(&line));
}

/// Reports a message of several lines on stderr: the first prefixed with `dsh: `, the others
/// indented under it. The line breaks are dsh's own; each line is made [`printable`], so text
/// from outside (a path, a name) cannot start a line of its own.
pub fn note_lines<I, L>(lines: I)
where
    I: IntoIterator<Item = L>,
    L: std::fmt::Display,
{
    let mut text = String::new();
    for (i, line) in lines.into_iter().enumerate() {
        let prefix = if i == 0 { "dsh: " } else { "     " };
        text.push_str(prefix);
        text.push_str(&printable(&line.to_string()));
        text.push('\n');
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `text` as one word of a POSIX shell command line: as it is when it holds only characters
/// no shell treats specially, else in single quotes. Pasting a command dsh suggests must
/// name the same file.
pub fn shell_word(text: &str) -> Cow<'_, str> {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("'{}'", text.replace('\'', r"'\''")))
    }
}

/// Text made safe for a terminal: control characters (C0 including newlines, DEL, C1) and the
/// invisible bidirectional controls are shown escaped (`\u{1b}`), so text from the model
/// cannot move the cursor, clear a line, start a fake line of its own or reorder what
/// follows it.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// Prints one line of plain text on stdout (a verdict, not a message).
pub fn say(message: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_text_cannot_drive_the_terminal() {
        assert_eq!(printable("c1"), "c1");
        assert_eq!(printable("a\u{1b}[2K\rb"), "a\\u{1b}[2K\\u{d}b");
        assert_eq!(printable("x\ny"), "x\\u{a}y");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m", "C1 CSI");
        assert_eq!(
            printable("abc\u{202E}fed"),
            "abc\\u{202e}fed",
            "bidi override"
        );
        assert_eq!(printable("naïve ✓"), "naïve ✓", "other text stays");
    }

    #[test]
    fn shell_words_name_the_same_file() {
        assert_eq!(
            shell_word("/tmp/dsh-demo-1/session.jsonl"),
            "/tmp/dsh-demo-1/session.jsonl"
        );
        assert_eq!(shell_word("/tmp/my demo/s.jsonl"), "'/tmp/my demo/s.jsonl'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn messages_print_role_first_and_stay_the_same_json() {
        let m = json!({"tool_call_id": "c1", "content": "x", "role": "tool"});
        let mut line = String::new();
        write_ordered(&m, &mut line);
        assert_eq!(line, r#"{"role":"tool","tool_call_id":"c1","content":"x"}"#);
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), m);
        let m = json!({"content": [{"input": {"type": 1, "a": [2]}, "name": "t", "type": "tool_use", "id": "i"}], "role": "assistant"});
        let mut line = String::new();
        write_ordered(&m, &mut line);
        assert_eq!(
            line,
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"t","input":{"a":[2],"type":1}}]}"#
        );
    }
}
