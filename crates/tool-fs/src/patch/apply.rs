//! One file's hunks applied to its content.

use super::{Hunk, HunkLine};
use crate::edit::uses_crlf;
use crate::error::FsError;

/// How strictly a line of the patch must equal a line of the file: each pass is tried on the
/// whole file before the next, looser one.
const PASSES: [fn(&str, &str) -> bool; 3] = [
    |a, b| a == b,
    |a, b| a.trim_end() == b.trim_end(),
    |a, b| a.trim() == b.trim(),
];

/// Where `pattern` occurs in `lines` at or after `start`: exactly, then ignoring trailing
/// white space, then ignoring surrounding white space. With `at_end`, the position where it
/// would end the file is tried first.
fn seek(lines: &[String], pattern: &[&str], start: usize, at_end: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start.min(lines.len()));
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let fits = |at: usize, same: fn(&str, &str) -> bool| {
        lines[at..at + pattern.len()]
            .iter()
            .zip(pattern)
            .all(|(l, p)| same(l, p))
    };
    if at_end && last_start >= start && PASSES.iter().any(|same| fits(last_start, *same)) {
        return Some(last_start);
    }
    PASSES
        .iter()
        .find_map(|same| (start..=last_start).find(|&at| fits(at, *same)))
}

fn shown(lines: &[&str]) -> String {
    const SHOWN: usize = 6;
    let mut out: Vec<String> = lines.iter().take(SHOWN).map(|l| format!("  {l}")).collect();
    if lines.len() > SHOWN {
        out.push(format!("  … ({} more lines)", lines.len() - SHOWN));
    }
    out.join("\n")
}

fn old_lines(body: &[HunkLine]) -> Vec<&str> {
    body.iter()
        .filter_map(|l| match l {
            HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
            HunkLine::Add(_) => None,
        })
        .collect()
}

/// Applies `hunks` (in file order) to `content`, the current text of `path` (named in
/// errors). The file keeps its line endings (LF or CRLF) and its final newline, or the lack
/// of one. An error names the hunk (1-based) that did not match and what was looked for.
///
/// ```
/// use dsh_tool_fs::patch::{apply_hunks, parse, FileOp};
/// let p = parse("*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n*** End Patch").unwrap();
/// let FileOp::Update { hunks, .. } = &p.ops[0] else { unreachable!() };
/// assert_eq!(apply_hunks("f", "a\nb\nc\n", hunks).unwrap(), "a\nB\nc\n");
/// assert!(apply_hunks("f", "x\n", hunks).unwrap_err().to_string().contains("hunk 1"));
/// ```
pub fn apply_hunks(path: &str, content: &str, hunks: &[Hunk]) -> Result<String, FsError> {
    let crlf = uses_crlf(content);
    let final_newline = content.is_empty() || content.ends_with('\n');
    let mut lines: Vec<String> = content
        .split('\n')
        .map(|l| {
            if crlf {
                l.strip_suffix('\r').unwrap_or(l).to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    if final_newline {
        lines.pop();
    }

    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0usize;
    for (i, hunk) in hunks.iter().enumerate() {
        let fail = |message: String| FsError::PatchHunk {
            path: path.to_string(),
            hunk: i + 1,
            message,
        };
        if let Some(context) = &hunk.context {
            let found = seek(&lines, &[context.as_str()], cursor, false)
                .ok_or_else(|| fail(format!("the context line `{context}` was not found")))?;
            cursor = found + 1;
        }
        let mut body: &[HunkLine] = &hunk.lines;
        // A blank line closing a hunk is often just the separator before the next one.
        let blank_end = matches!(body.last(), Some(HunkLine::Context(t)) if t.is_empty());
        let mut found = None;
        for attempt in 0..2 {
            if attempt == 1 {
                if !blank_end {
                    break;
                }
                body = &body[..body.len() - 1];
            }
            let pattern = old_lines(body);
            if pattern.is_empty() {
                // Only additions: after the `@@` line if there is one, else at the end.
                let at = if hunk.context.is_some() {
                    cursor
                } else {
                    lines.len()
                };
                found = Some(at);
                break;
            }
            found = seek(&lines, &pattern, cursor, hunk.end_of_file);
            if found.is_some() {
                break;
            }
        }
        let at = found.ok_or_else(|| {
            fail(format!(
                "these lines were not found{}:\n{}",
                if cursor > 0 {
                    format!(" after line {cursor}")
                } else {
                    String::new()
                },
                shown(&hunk.old())
            ))
        })?;
        // Context lines keep the file's own text: a loose match must not re-indent them.
        let mut replacement = Vec::new();
        let mut k = at;
        for line in body {
            match line {
                HunkLine::Context(_) => {
                    replacement.push(lines[k].clone());
                    k += 1;
                }
                HunkLine::Remove(_) => k += 1,
                HunkLine::Add(text) => replacement.push(text.clone()),
            }
        }
        edits.push((at, k - at, replacement));
        cursor = k;
    }

    edits.sort_by_key(|(at, _, _)| *at);
    for (at, remove, insert) in edits.into_iter().rev() {
        lines.splice(at..at + remove, insert);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    if final_newline && !lines.is_empty() {
        out.push_str(eol);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{FileOp, parse};

    fn hunks(body: &str) -> Vec<Hunk> {
        let p = parse(&format!(
            "*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch"
        ))
        .unwrap();
        match p.ops.into_iter().next() {
            Some(FileOp::Update { hunks, .. }) => hunks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hunks_apply_in_order_with_context_headers() {
        let text = "fn a() {\n    1\n}\nfn b() {\n    1\n}\n";
        let h = hunks("@@ fn b() {\n-    1\n+    2");
        assert_eq!(
            apply_hunks("f", text, &h).unwrap(),
            "fn a() {\n    1\n}\nfn b() {\n    2\n}\n"
        );
        let h = hunks("@@\n-    1\n+    3\n@@\n-    1\n+    4");
        assert_eq!(
            apply_hunks("f", text, &h).unwrap(),
            "fn a() {\n    3\n}\nfn b() {\n    4\n}\n"
        );
    }

    #[test]
    fn matching_loosens_step_by_step() {
        // Trailing white space in the file.
        let h = hunks("@@\n a\n-b\n+c");
        assert_eq!(apply_hunks("f", "a  \nb\t\n", &h).unwrap(), "a  \nc\n");
        // Leading white space differs; the context line keeps the file's indentation.
        assert_eq!(apply_hunks("f", "    a\n  b\n", &h).unwrap(), "    a\nc\n");
        // An exact match later in the file wins over a loose one earlier.
        let h = hunks("@@\n-x\n+y");
        assert_eq!(apply_hunks("f", " x\nx\n", &h).unwrap(), " x\ny\n");
    }

    #[test]
    fn line_endings_and_final_newline_are_kept() {
        let h = hunks("@@\n-b\n+B");
        assert_eq!(apply_hunks("f", "a\r\nb\r\n", &h).unwrap(), "a\r\nB\r\n");
        assert_eq!(apply_hunks("f", "a\nb", &h).unwrap(), "a\nB");
        let add = hunks("@@\n+z");
        assert_eq!(
            apply_hunks("f", "a\n", &add).unwrap(),
            "a\nz\n",
            "pure addition appends"
        );
        assert_eq!(apply_hunks("f", "", &add).unwrap(), "z\n");
        let after = hunks("@@ fn a\n+    inserted");
        assert_eq!(
            apply_hunks("f", "fn a\n    x\nfn b\n", &after).unwrap(),
            "fn a\n    inserted\n    x\nfn b\n",
            "additions under an `@@` line go right after it"
        );
    }

    #[test]
    fn end_of_file_anchors_at_the_end() {
        let h = hunks("@@\n-x\n+y\n*** End of File");
        assert_eq!(apply_hunks("f", "x\nx\n", &h).unwrap(), "x\ny\n");
    }

    #[test]
    fn errors_name_the_hunk_and_the_lines() {
        let h = hunks("@@\n-a\n+b\n@@\n-zzz\n+q");
        let err = apply_hunks("src/f.rs", "a\n", &h).unwrap_err().to_string();
        assert!(err.contains("`src/f.rs`, hunk 2"), "{err}");
        assert!(err.contains("zzz"), "{err}");
        let h = hunks("@@ missing header\n-a\n+b");
        let err = apply_hunks("f", "a\n", &h).unwrap_err().to_string();
        assert!(
            err.contains("hunk 1") && err.contains("missing header"),
            "{err}"
        );
    }

    #[test]
    fn trailing_blank_context_is_forgiven() {
        // The blank line before `*** End Patch` is read as an empty context line.
        let h = hunks("@@\n-a\n+b\n");
        assert_eq!(h[0].old(), vec!["a", ""]);
        assert_eq!(apply_hunks("f", "a", &h).unwrap(), "b");
    }
}
