//! The patch text to [`Patch`].

use super::{FileOp, Hunk, HunkLine, Patch};
use crate::error::FsError;

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

fn syntax(line: usize, message: impl Into<String>) -> FsError {
    FsError::PatchSyntax {
        line,
        message: message.into(),
    }
}

/// Lines of the body with their 1-based line number in the patch text.
type Lines<'a> = [(usize, &'a str)];

/// Parses a patch. Lenient where models are sloppy, as Codex is: white space around the
/// markers, a `<<'EOF'` heredoc wrapper, a first hunk without `@@`, CRLF line endings.
///
/// ```
/// use dsh_tool_fs::patch::{parse, FileOp};
/// let p = parse("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch").unwrap();
/// assert_eq!(p.ops, vec![FileOp::Add { path: "a.txt".into(), content: "hi\n".into() }]);
/// assert!(parse("*** Begin Patch\n*** Frobnicate: a\n*** End Patch").is_err());
/// ```
pub fn parse(text: &str) -> Result<Patch, FsError> {
    let numbered: Vec<(usize, &str)> = text
        .trim()
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .collect();
    let numbered = strip_heredoc(&numbered);
    let (first, last) = match numbered {
        [] => return Err(syntax(1, "the patch is empty")),
        [only] => (only, only),
        [first, .., last] => (first, last),
    };
    if first.1.trim() != BEGIN {
        return Err(syntax(first.0, format!("the first line must be `{BEGIN}`")));
    }
    if numbered.len() < 2 || last.1.trim() != END {
        return Err(syntax(last.0, format!("the last line must be `{END}`")));
    }
    let mut body = &numbered[1..numbered.len() - 1];
    let mut ops = Vec::new();
    while let Some(&(_, line)) = body.first() {
        if line.trim().is_empty() {
            body = &body[1..];
            continue;
        }
        let (op, used) = parse_section(body)?;
        ops.push(op);
        body = &body[used..];
    }
    if ops.is_empty() {
        return Err(syntax(last.0, "the patch changes no files"));
    }
    Ok(Patch { ops })
}

fn strip_heredoc<'a, 'b>(lines: &'b Lines<'a>) -> &'b Lines<'a> {
    match lines {
        [first, inner @ .., last]
            if matches!(first.1.trim(), "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                && last.1.trim().ends_with("EOF") =>
        {
            inner
        }
        _ => lines,
    }
}

fn path_of(line_no: usize, rest: &str) -> Result<String, FsError> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(syntax(line_no, "the file path is missing"));
    }
    Ok(path.to_string())
}

/// One section from the start of `lines`; answers it and how many lines it used.
fn parse_section(lines: &Lines<'_>) -> Result<(FileOp, usize), FsError> {
    let (line_no, raw) = lines[0];
    let header = raw.trim();
    if let Some(rest) = header.strip_prefix(ADD.trim_end()) {
        let path = path_of(line_no, rest)?;
        let mut content = String::new();
        let mut used = 1;
        for (_, l) in &lines[1..] {
            let Some(added) = l.strip_prefix('+') else {
                break;
            };
            content.push_str(added);
            content.push('\n');
            used += 1;
        }
        return Ok((FileOp::Add { path, content }, used));
    }
    if let Some(rest) = header.strip_prefix(DELETE.trim_end()) {
        return Ok((
            FileOp::Delete {
                path: path_of(line_no, rest)?,
            },
            1,
        ));
    }
    if let Some(rest) = header.strip_prefix(UPDATE.trim_end()) {
        let path = path_of(line_no, rest)?;
        let mut used = 1;
        let mut move_to = None;
        let move_line = lines
            .get(1)
            .and_then(|&(n, l)| l.trim().strip_prefix(MOVE.trim_end()).map(|r| (n, r)));
        if let Some((n, rest)) = move_line {
            move_to = Some(path_of(n, rest)?);
            used += 1;
        }
        let mut hunks = Vec::new();
        while let Some(&(n, l)) = lines.get(used) {
            if l.trim().is_empty() {
                used += 1;
                continue;
            }
            if l.starts_with("***") && l.trim() != END_OF_FILE {
                break;
            }
            let (hunk, hunk_lines) = parse_hunk(&lines[used..], hunks.is_empty())
                .map_err(|m| syntax(n, format!("in the update of `{path}`: {m}")))?;
            hunks.push(hunk);
            used += hunk_lines;
        }
        if hunks.is_empty() {
            return Err(syntax(
                line_no,
                format!("the update of `{path}` has no hunks"),
            ));
        }
        return Ok((
            FileOp::Update {
                path,
                move_to,
                hunks,
            },
            used,
        ));
    }
    Err(syntax(
        line_no,
        format!(
            "`{header}` is not a section header; expected `{ADD}PATH`, `{DELETE}PATH` or `{UPDATE}PATH`"
        ),
    ))
}

/// One hunk from the start of `lines`; answers it and how many lines it used.
fn parse_hunk(lines: &Lines<'_>, first: bool) -> Result<(Hunk, usize), String> {
    let header = lines[0].1;
    let (context, start) = if header.trim() == "@@" {
        (None, 1)
    } else if let Some(ctx) = header.strip_prefix("@@ ") {
        (Some(ctx.to_string()), 1)
    } else if first {
        (None, 0)
    } else {
        return Err(format!("expected a `@@` hunk header, found `{header}`"));
    };
    let mut hunk = Hunk {
        context,
        lines: Vec::new(),
        end_of_file: false,
    };
    let mut used = start;
    for &(_, line) in &lines[start..] {
        if line.trim() == END_OF_FILE {
            if used == start {
                return Err("the hunk has no lines".into());
            }
            hunk.end_of_file = true;
            used += 1;
            break;
        }
        match line.chars().next() {
            None => hunk.lines.push(HunkLine::Context(String::new())),
            Some(' ') => hunk.lines.push(HunkLine::Context(line[1..].to_string())),
            Some('-') => hunk.lines.push(HunkLine::Remove(line[1..].to_string())),
            Some('+') => hunk.lines.push(HunkLine::Add(line[1..].to_string())),
            Some(_) if used == start => {
                return Err(format!(
                    "unexpected line `{line}`: every hunk line starts with ' ' (context), '-' (removed) or '+' (added)"
                ));
            }
            Some(_) => break,
        }
        used += 1;
    }
    if used == start {
        return Err("the hunk has no lines".into());
    }
    Ok((hunk, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(body: &str) -> Result<Patch, FsError> {
        parse(&format!("*** Begin Patch\n{body}\n*** End Patch"))
    }

    #[test]
    fn every_section_kind() {
        let patch = p("*** Add File: a/new.txt\n+one\n+two\n\
             *** Delete File: gone.txt\n\
             *** Update File: src/x.py\n*** Move to: src/y.py\n@@ def f():\n-    pass\n+    return 1\n \n@@\n context\n+added\n*** End of File")
        .unwrap();
        assert_eq!(patch.ops.len(), 3);
        assert_eq!(
            patch.ops[0],
            FileOp::Add {
                path: "a/new.txt".into(),
                content: "one\ntwo\n".into()
            }
        );
        assert_eq!(
            patch.ops[1],
            FileOp::Delete {
                path: "gone.txt".into()
            }
        );
        let FileOp::Update {
            path,
            move_to,
            hunks,
        } = &patch.ops[2]
        else {
            panic!("not an update");
        };
        assert_eq!(path, "src/x.py");
        assert_eq!(move_to.as_deref(), Some("src/y.py"));
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].context.as_deref(), Some("def f():"));
        assert_eq!(hunks[0].old(), vec!["    pass", ""]);
        assert_eq!(hunks[0].new_lines(), vec!["    return 1", ""]);
        assert!(!hunks[0].end_of_file);
        assert_eq!(hunks[1].old(), vec!["context"]);
        assert_eq!(hunks[1].new_lines(), vec!["context", "added"]);
        assert!(hunks[1].end_of_file);
    }

    #[test]
    fn lenient_forms() {
        let heredoc = "<<'EOF'\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEOF";
        assert_eq!(parse(heredoc).unwrap().ops.len(), 1);
        let crlf = "*** Begin Patch\r\n*** Update File: a\r\n x\r\n+y\r\n*** End Patch\r\n";
        let patch = parse(crlf).unwrap();
        let FileOp::Update { hunks, .. } = &patch.ops[0] else {
            panic!()
        };
        assert_eq!(
            hunks[0].new_lines(),
            vec!["x", "y"],
            "no header, CRLF stripped"
        );
        assert!(parse("  *** Begin Patch  \n *** Delete File: a \n*** End Patch ").is_ok());
    }

    #[test]
    fn errors_point_at_their_line() {
        let line = |r: Result<Patch, FsError>| match r {
            Err(FsError::PatchSyntax { line, message }) => (line, message),
            other => panic!("{other:?}"),
        };
        assert_eq!(line(parse("hello")).0, 1);
        assert!(
            line(parse("*** Begin Patch\n*** Delete File: a"))
                .1
                .contains("last line")
        );
        assert_eq!(line(p("*** Update File: a")).0, 2);
        let (n, m) = line(p("*** Delete File: a\n*** Rename File: b"));
        assert_eq!(n, 3);
        assert!(m.contains("not a section header"), "{m}");
        let (n, m) = line(p("*** Update File: a\n@@\n-x\n@@ y\n!bad"));
        assert_eq!(n, 5, "{m}");
        assert!(line(p("")).1.contains("no files"));
        assert!(line(p("*** Add File:   ")).1.contains("path is missing"));
    }
}
