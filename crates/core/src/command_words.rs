//! The words of a simple command, as permission rules see them.
//!
//! A tool whose subjects are commands ([`crate::SubjectKind::Command`]) hands each simple
//! command to the rules as one string: its words after quote removal, joined by single
//! spaces, a word with anything but plain characters in single quotes (`'a b'`, `'it'\''s'`).
//! A word whose value is only known when the command runs (`$X`, `$(…)`, a glob) is written
//! as a bare `$?`: it can never be mistaken for a literal word, since a literal `$` is always
//! quoted. The shell tool writes this form; the permission rules read it back.
//!
//! ```
//! use dsh_core::command_words::{decode, encode, Word};
//! let words = vec![Word::literal("git"), Word::literal("commit"), Word::literal("-m"),
//!                  Word::literal("it's done"), Word::Dynamic];
//! let text = encode(&words);
//! assert_eq!(text, r"git commit -m 'it'\''s done' $?");
//! assert_eq!(decode(&text), words);
//! ```

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// A word whose value is known before the command runs (quotes removed).
    Literal(String),
    /// A word only known when it runs: an expansion, a substitution, a glob.
    Dynamic,
}

impl Word {
    /// A literal word.
    pub fn literal(text: impl Into<String>) -> Word {
        Word::Literal(text.into())
    }
}

const DYNAMIC: &str = "$?";
const VARIANT: &str = "$!";

fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+=:,./-^~".contains(c)
}

/// The one-string form of a simple command's words.
pub fn encode(words: &[Word]) -> String {
    let mut out = String::new();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word {
            Word::Dynamic => out.push_str(DYNAMIC),
            Word::Literal(text) if !text.is_empty() && text.chars().all(plain) => {
                out.push_str(text)
            }
            Word::Literal(text) => {
                out.push('\'');
                out.push_str(&text.replace('\'', r"'\''"));
                out.push('\'');
            }
        }
    }
    out
}

fn flush(current: &mut String, started: &mut bool, words: &mut Vec<Word>) {
    if *started {
        if current == DYNAMIC {
            words.push(Word::Dynamic);
        } else {
            words.push(Word::Literal(std::mem::take(current)));
        }
        current.clear();
        *started = false;
    }
}

/// The one-string form of a variant (see the module docs).
pub fn encode_variant(words: &[Word]) -> String {
    format!("{VARIANT} {}", encode(words))
}

/// A subject's words, and whether it is a variant.
///
/// ```
/// use dsh_core::command_words::{decode_subject, encode_variant, Word};
/// let (words, variant) = decode_subject(&encode_variant(&[Word::literal("rm")]));
/// assert!(variant);
/// assert_eq!(words, vec![Word::literal("rm")]);
/// ```
pub fn decode_subject(text: &str) -> (Vec<Word>, bool) {
    match text.trim_start().strip_prefix(VARIANT) {
        Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
            (decode(rest), true)
        }
        _ => (decode(text), false),
    }
}

/// Splits a string back into words: whitespace separates words, single quotes keep
/// everything up to the next single quote, a backslash outside quotes keeps the next
/// character, and a bare `$?` is a dynamic word. Reads [`encode`]'s form exactly, and a
/// rule's pattern the same way.
pub fn decode(text: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut started = false;
    let mut chars = text.chars();
    // `$?` is dynamic only when written bare: a quoted `'$?'` is the literal text.
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if quoted && started {
                    words.push(Word::Literal(std::mem::take(&mut current)));
                    started = false;
                } else {
                    flush(&mut current, &mut started, &mut words);
                }
                quoted = false;
            }
            '\'' => {
                started = true;
                quoted = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    current.push(q);
                }
            }
            '\\' => {
                started = true;
                quoted = true;
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            c => {
                started = true;
                current.push(c);
            }
        }
    }
    if quoted && started {
        words.push(Word::Literal(current));
    } else {
        flush(&mut current, &mut started, &mut words);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_awkward_words() {
        let words = vec![
            Word::literal("echo"),
            Word::literal(""),
            Word::literal("$?"),
            Word::literal("a\nb"),
            Word::literal("''"),
            Word::literal(r"back\slash"),
            Word::Dynamic,
            Word::literal("tab\there"),
        ];
        assert_eq!(decode(&encode(&words)), words);
    }

    #[test]
    fn patterns_split_on_whitespace() {
        assert_eq!(
            decode("  git   status* "),
            vec![Word::literal("git"), Word::literal("status*")]
        );
        assert_eq!(decode(""), Vec::<Word>::new());
    }
}
