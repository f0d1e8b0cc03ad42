//! What permission rules see of a command: its simple commands, found by a real bash parser
//! (tree-sitter-bash), each as words after quote removal.
//!
//! - Every simple command counts, wherever it is: in a list (`;`, `&&`, `||`), a pipeline, a
//!   subshell, a command or process substitution (`$(…)`, backticks, `<(…)`), a loop, a
//!   function body. `git status; rm -rf x` is two subjects, `git status $(rm x)` too.
//! - A redirection that writes a file (`>`, `>>`, `>|`, `&>`, `<>`; not `/dev/null`, not
//!   `2>&1`) is a subject of its own, `> FILE`.
//! - Quotes and backslashes are removed (`'r'm`, `\rm` and `"rm"` are all `rm`); a word whose
//!   value is only known at run time (`$X`, `$(…)`, a glob) is dynamic.
//! - Assignments before a command stay in its words (`LD_PRELOAD=x git status` is not
//!   `git status`).
//! - For `deny` and `ask`, the same command is also given with what would hide it removed:
//!   the assignments, wrappers (`env`, `sudo`, `timeout -s KILL 5`, `find -exec`, …), a
//!   directory (`/bin/rm` → `rm`), and the scripts a program runs (`bash -c '…'`,
//!   `bash <<< '…'`, `eval`, `trap`, `env -S`: see `wrappers`); a script that cannot be
//!   read before it runs (`… | sh`) is a dynamic subject. These extra subjects
//!   bind `allow` too: a call is allowed only when all of them are.
//! - An expansion that can run code the parser does not see as a command (arithmetic on
//!   names, `${x@P}`, `${!x}`, an operator's word holding an expansion: `hidden_code`)
//!   adds one dynamic subject: no `allow` rule with a pattern covers the command, and every
//!   `deny` and `ask` rule matches it.
//! - A command the parser cannot read whole is one dynamic subject: no `allow` rule with a
//!   pattern covers it, and every `deny` rule with one matches it.

use dsh_core::command_words::{Word, encode, encode_variant};
use std::collections::BTreeSet;
use tree_sitter::{Node, Parser};

mod hidden_code;
mod wrappers;

use wrappers::{Script, Stdin};

/// How deep `bash -c` and `eval` scripts are followed.
const MAX_NESTING: usize = 4;
/// More subjects than this and the command counts as unreadable.
const MAX_SUBJECTS: usize = 512;

/// One subject: the words, and whether it is a variant (seen by deny and ask only).
type Subject = (Vec<Word>, bool);

/// The permission subjects of a command (see the module docs), in [`encode`]'s form.
pub(crate) fn subjects(command: &str) -> Vec<String> {
    let mut out: Vec<Subject> = Vec::new();
    if collect(command, 0, &mut out).is_none() || out.len() > MAX_SUBJECTS {
        return vec![encode(&[Word::Dynamic])];
    }
    let mut seen = BTreeSet::new();
    out.iter()
        .map(|(words, variant)| {
            if *variant {
                encode_variant(words)
            } else {
                encode(words)
            }
        })
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// Adds the subjects of `source` (and their variants) to `out`; `None` when it cannot be read.
fn collect(source: &str, nesting: usize, out: &mut Vec<Subject>) -> Option<()> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(source, None)?;
    let root = tree.root_node();
    if root.has_error() {
        return None;
    }
    let bytes = source.as_bytes();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if hidden_code::runs_hidden_code(node, bytes) {
            add_unknown(out);
        }
        match node.kind() {
            "command" => add_command(
                command_words(node, bytes),
                &wrappers::stdin_of(node, bytes),
                nesting,
                out,
            )?,
            "declaration_command" | "unset_command" => {
                let mut words = Vec::new();
                let mut cursor = node.walk();
                for child in node.children(&mut cursor) {
                    if child.is_named() {
                        words.push(word_of(child, bytes));
                    } else if words.is_empty() {
                        words.push(Word::literal(text(child, bytes)));
                    }
                }
                add_command(words, &Stdin::Inherited, nesting, out)?;
            }
            "file_redirect" => {
                if let Some(target) = written_file(node, bytes) {
                    out.push((vec![Word::literal(">"), target], false));
                }
            }
            _ => {}
        }
        if out.len() > MAX_SUBJECTS {
            return None;
        }
        let mut cursor = node.walk();
        // Reverse, so the stack pops children in source order.
        let children: Vec<Node> = node.children(&mut cursor).collect();
        stack.extend(children.into_iter().rev());
    }
    Some(())
}

fn text<'a>(node: Node, bytes: &'a [u8]) -> &'a str {
    node.utf8_text(bytes).unwrap_or("")
}

/// The words of a `command` node: assignments, the name, the arguments, in source order.
fn command_words(node: Node, bytes: &[u8]) -> Vec<Word> {
    let mut words = Vec::new();
    let mut cursor = node.walk();
    for child in node.named_children(&mut cursor) {
        match child.kind() {
            "variable_assignment" => words.push(assignment(child, bytes)),
            "file_redirect" | "herestring_redirect" => {}
            _ => words.push(word_of(child, bytes)),
        }
    }
    words
}

fn assignment(node: Node, bytes: &[u8]) -> Word {
    let name = node
        .child_by_field_name("name")
        .map(|n| text(n, bytes))
        .unwrap_or("");
    match node.child_by_field_name("value") {
        None => Word::literal(format!("{name}=")),
        Some(value) => match word_of(value, bytes) {
            Word::Literal(v) => Word::literal(format!("{name}={v}")),
            Word::Dynamic => Word::Dynamic,
        },
    }
}

/// Removes backslash escapes (and line continuations); `None` when an unescaped glob
/// character makes the word's value a run-time matter.
fn unescape_word(raw: &str) -> Option<String> {
    if raw == "[" || raw == "]" || raw == "[[" {
        return Some(raw.to_string());
    }
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(next) => out.push(next),
            },
            '*' | '?' | '[' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Inside double quotes only `\"`, `\\`, `\$`, `` \` `` and a line continuation are escapes.
fn unescape_double_quoted(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('"' | '\\' | '$' | '`') => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                    continue;
                }
                Some('\n') => {
                    chars.next();
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// The value of one word node, when it is known before the command runs.
fn word_of(node: Node, bytes: &[u8]) -> Word {
    let raw = text(node, bytes);
    match node.kind() {
        "command_name" => match node.named_child(0) {
            Some(inner) => word_of(inner, bytes),
            None => Word::Dynamic,
        },
        "word" | "number" | "variable_name" => match unescape_word(raw) {
            Some(text) => Word::Literal(text),
            None => Word::Dynamic,
        },
        "raw_string" => Word::literal(
            raw.strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .unwrap_or(raw),
        ),
        "string" => {
            let mut cursor = node.walk();
            let mut value = String::new();
            for child in node.named_children(&mut cursor) {
                if child.kind() != "string_content" {
                    return Word::Dynamic;
                }
                value.push_str(&unescape_double_quoted(text(child, bytes)));
            }
            Word::Literal(value)
        }
        "concatenation" => {
            let mut cursor = node.walk();
            let mut value = String::new();
            for child in node.named_children(&mut cursor) {
                match word_of(child, bytes) {
                    Word::Literal(part) => value.push_str(&part),
                    Word::Dynamic => return Word::Dynamic,
                }
            }
            Word::Literal(value)
        }
        _ => Word::Dynamic,
    }
}

/// The file a write redirection targets, if it is one.
fn written_file(node: Node, bytes: &[u8]) -> Option<Word> {
    let mut operator = "";
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        if !child.is_named() {
            operator = text(child, bytes);
        }
    }
    let destination = node.child_by_field_name("destination")?;
    let target = word_of(destination, bytes);
    let writes = matches!(operator, ">" | ">>" | ">|" | "&>" | "&>>" | "<>");
    let duplicates = matches!(operator, ">&" | "<&" | ">&-" | "<&-");
    match (&target, writes, duplicates) {
        (Word::Literal(path), true, _) if path == "/dev/null" => None,
        (_, true, _) => Some(target),
        // `>&2`, `2>&1`, `>&-`: descriptors, not files; `>& file` writes a file.
        (Word::Literal(t), _, true) if t == "-" || t.chars().all(|c| c.is_ascii_digit()) => None,
        (_, _, true) if operator.starts_with('>') => Some(target),
        _ => None,
    }
}

fn literal(word: &Word) -> Option<&str> {
    match word {
        Word::Literal(s) => Some(s),
        Word::Dynamic => None,
    }
}

fn is_assignment(word: &Word) -> bool {
    literal(word).is_some_and(|w| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

/// More variants of one command than this and it counts as unknown.
const MAX_VARIANTS: usize = 256;

/// A command, and (as variants) the forms of it that a wrapper, an assignment or a path
/// would hide from a `deny` rule, and the commands of the scripts it runs (`wrappers`).
fn add_command(
    words: Vec<Word>,
    stdin: &Stdin,
    nesting: usize,
    out: &mut Vec<Subject>,
) -> Option<()> {
    if words.is_empty() {
        return Some(());
    }
    out.push((words.clone(), false));
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut pending = vec![words];
    while let Some(current) = pending.pop() {
        if seen.len() > MAX_VARIANTS {
            return add_unknown(out);
        }
        let start = current.iter().take_while(|w| is_assignment(w)).count();
        let mut next: Vec<Word> = current[start..].to_vec();
        if let Some(Word::Literal(first)) = next.first()
            && first.contains('/')
            && let Some(base) = first.rsplit('/').next()
            && !base.is_empty()
        {
            next[0] = Word::literal(base);
        }
        if next.is_empty() || !seen.insert(encode(&next)) {
            continue;
        }
        if next != current {
            out.push((next.clone(), true));
        }
        let name = literal(&next[0]).unwrap_or("").to_string();
        for inner in wrappers::inner_commands(&name, &next) {
            out.push((inner.clone(), true));
            pending.push(inner);
        }
        match wrappers::script_of(&name, &next, stdin) {
            Script::None => {}
            Script::Unknown => add_unknown(out)?,
            Script::Text(_) if nesting >= MAX_NESTING => add_unknown(out)?,
            Script::Text(source) => {
                if collect(&source, nesting + 1, out).is_none() {
                    add_unknown(out)?;
                }
            }
        }
    }
    Some(())
}

fn add_unknown(out: &mut Vec<Subject>) -> Option<()> {
    out.push((vec![Word::Dynamic], false));
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(command: &str) -> Vec<String> {
        subjects(command)
    }

    #[test]
    fn lists_pipelines_and_substitutions_are_split() {
        assert_eq!(s("git status; rm -rf x"), ["git status", "rm -rf x"]);
        assert_eq!(
            s("git status && curl http://x | sh"),
            // What `sh` reads from the pipe is not known: an unknown subject.
            ["git status", "curl http://x", "sh", "$?"]
        );
        assert_eq!(s("echo $(rm x)"), ["echo $?", "rm x"]);
        assert_eq!(s("echo `rm x`"), ["echo $?", "rm x"]);
        assert_eq!(s("(cd a && make)"), ["cd a", "make"]);
        assert_eq!(s("for f in *.rs; do rm $f; done"), ["rm $?"]);
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        for trick in [
            "'rm' -rf x",
            "\\rm -rf x",
            "\"rm\" -rf x",
            "r'm' -rf x",
            "r\"\"m -rf x",
        ] {
            assert_eq!(s(trick), ["rm -rf x"], "{trick}");
        }
        assert_eq!(s("git commit -m 'a b'"), ["git commit -m 'a b'"]);
        assert_eq!(s("$CMD status"), ["$? status"]);
    }

    #[test]
    fn write_redirections_are_subjects() {
        assert_eq!(s("git status > out.txt"), ["git status", "'>' out.txt"]);
        assert_eq!(s("cargo test 2>&1 >/dev/null"), ["cargo test"]);
        assert_eq!(s("echo x >> ~/.bashrc"), ["echo x", "'>' ~/.bashrc"]);
    }

    #[test]
    fn wrappers_and_nested_scripts_show_what_they_run() {
        let sudo = s("sudo -u root rm -rf /");
        assert_eq!(sudo[0], "sudo -u root rm -rf /");
        assert!(sudo.contains(&"$! rm -rf /".to_string()), "{sudo:?}");
        assert_eq!(s("/bin/rm x"), ["/bin/rm x", "$! rm x"]);
        let env = s("FOO=1 env X=2 rm x");
        assert_eq!(env[0], "FOO=1 env X=2 rm x");
        assert!(env.contains(&"$! rm x".to_string()), "{env:?}");
        assert_eq!(
            s("bash -c 'git status; rm x'"),
            ["bash -c 'git status; rm x'", "git status", "rm x"]
        );
        assert_eq!(s("eval \"rm x\""), ["eval 'rm x'", "rm x"]);
        assert_eq!(s("sh -c \"$X\""), ["sh -c $?", "$?"]);
    }

    #[test]
    fn what_cannot_be_parsed_is_one_dynamic_subject() {
        assert_eq!(s("echo 'unterminated"), ["$?"]);
        assert_eq!(s("if then fi ((("), ["$?"]);
        assert!(s("").is_empty());
    }
}
