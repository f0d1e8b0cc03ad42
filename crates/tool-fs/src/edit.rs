//! The string replacement behind `edit_file`, pure so it can be tested and fuzzed alone.

use crate::error::FsError;

/// The result of an edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The new content.
    pub content: String,
    /// How many occurrences were replaced.
    pub replacements: usize,
}

/// True when `text`'s lines end in CRLF (at least as many CRLF as bare LF endings).
///
/// ```
/// assert!(dsh_tool_fs::edit::uses_crlf("a\r\nb\r\n"));
/// assert!(!dsh_tool_fs::edit::uses_crlf("a\nb\n"));
/// ```
pub fn uses_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count();
    crlf > 0 && crlf * 2 >= lf
}

/// Rewrites every line ending of `text` as CRLF.
fn to_crlf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// Replaces `old` by `new` in `content`: exactly one occurrence, or every one with
/// `replace_all`. In a CRLF file, `old` and `new` written with LF endings are matched and
/// inserted as CRLF, so the file keeps its line endings; a missing final newline stays
/// missing because only the matched text changes.
///
/// ```
/// use dsh_tool_fs::edit::apply_edit;
/// let e = apply_edit("a = 1\nb = 2", "b = 2", "b = 3", false).unwrap();
/// assert_eq!(e.content, "a = 1\nb = 3");
/// let e = apply_edit("x\r\ny\r\n", "x\ny", "x\nz", false).unwrap();
/// assert_eq!(e.content, "x\r\nz\r\n");
/// assert!(apply_edit("a a", "a", "b", false).unwrap_err().to_string().contains("2 times"));
/// ```
pub fn apply_edit(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Edited, FsError> {
    if old.is_empty() {
        return Err(FsError::EditEmptyOld);
    }
    if old == new {
        return Err(FsError::EditNoop);
    }
    let crlf = uses_crlf(content);
    let (old, new) = if crlf {
        let old = if content.contains(old) {
            old.to_string()
        } else {
            to_crlf(old)
        };
        (old, to_crlf(new))
    } else {
        (old.to_string(), new.to_string())
    };
    let count = content.matches(old.as_str()).count();
    match count {
        0 => Err(FsError::EditNoMatch),
        1 => Ok(Edited {
            content: content.replacen(old.as_str(), &new, 1),
            replacements: 1,
        }),
        n if replace_all => Ok(Edited {
            content: content.replace(old.as_str(), &new),
            replacements: n,
        }),
        n => Err(FsError::EditAmbiguous { count: n }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_all_replaces_every_occurrence() {
        let e = apply_edit("a b a b a", "a", "c", true).unwrap();
        assert_eq!(e.content, "c b c b c");
        assert_eq!(e.replacements, 3);
    }

    #[test]
    fn errors_are_distinct() {
        assert!(matches!(
            apply_edit("abc", "x", "y", false),
            Err(FsError::EditNoMatch)
        ));
        assert!(matches!(
            apply_edit("abc", "", "y", false),
            Err(FsError::EditEmptyOld)
        ));
        assert!(matches!(
            apply_edit("abc", "b", "b", false),
            Err(FsError::EditNoop)
        ));
        assert!(matches!(
            apply_edit("bb b", "b", "c", false),
            Err(FsError::EditAmbiguous { count: 3 })
        ));
    }

    #[test]
    fn crlf_and_missing_final_newline_are_kept() {
        let e = apply_edit("one\r\ntwo\r\nthree", "two\nthree", "2\n3", false).unwrap();
        assert_eq!(e.content, "one\r\n2\r\n3");
        let e = apply_edit("one\ntwo", "two", "2", false).unwrap();
        assert_eq!(e.content, "one\n2");
        // Old already written with CRLF matches as is.
        let e = apply_edit("a\r\nb\r\n", "a\r\nb", "c\r\nd", false).unwrap();
        assert_eq!(e.content, "c\r\nd\r\n");
    }

    #[test]
    fn multibyte_text_is_handled() {
        let e = apply_edit("héllo wörld", "wörld", "мир", false).unwrap();
        assert_eq!(e.content, "héllo мир");
    }
}
