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
    apply_edit_within(content, old, new, replace_all, usize::MAX)
}

/// [`apply_edit`], refusing an edit whose result would be longer than `max_bytes`. The size
/// is computed from the number of occurrences before the new text is built, so a huge
/// result is never allocated: the memory an edit takes is bounded by its input and the limit.
///
/// ```
/// use dsh_tool_fs::edit::apply_edit_within;
/// let big = "a".repeat(1000);
/// let err = apply_edit_within(&big, "a", &"b".repeat(1000), true, 4096).unwrap_err();
/// assert!(err.to_string().contains("1000000 bytes"), "{err}");
/// assert_eq!(apply_edit_within("ab", "a", "c", false, 2).unwrap().content, "cb");
/// ```
pub fn apply_edit_within(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    max_bytes: usize,
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
    let replaced = if replace_all { count } else { count.min(1) };
    // In u128: 2^64 occurrences of a 2^64-byte string cannot overflow it.
    let size = content.len() as u128 - (replaced as u128) * (old.len() as u128)
        + (replaced as u128) * (new.len() as u128);
    if (count == 1 || replace_all) && size > max_bytes as u128 {
        return Err(FsError::TooLarge {
            what: "the edited file",
            size: u64::try_from(size).unwrap_or(u64::MAX),
            limit: max_bytes as u64,
        });
    }
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
    fn an_edit_past_the_limit_is_refused_before_it_is_built() {
        // What took 4 GB and aborted the process: 2 MB of `a`, each replaced by 4 KB.
        let content = "a".repeat(2 * 1024 * 1024);
        let new = "x".repeat(4096);
        let err = apply_edit_within(&content, "a", &new, true, 10 * 1024 * 1024).unwrap_err();
        assert!(
            matches!(err, FsError::TooLarge { size, .. } if size == 2 * 1024 * 1024 * 4096),
            "{err}"
        );
        // A shrinking or growing edit within the limit goes through.
        let e = apply_edit_within("aaaa", "a", "bb", true, 8).unwrap();
        assert_eq!(e.content, "bbbbbbbb");
        assert!(apply_edit_within("aaaa", "a", "bb", true, 7).is_err());
    }

    #[test]
    fn multibyte_text_is_handled() {
        let e = apply_edit("héllo wörld", "wörld", "мир", false).unwrap();
        assert_eq!(e.content, "héllo мир");
    }
}
