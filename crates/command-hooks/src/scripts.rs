//! The files a hook command names: read as `sh` would split and expand it, closely enough to
//! find every script and file argument (over-approximating is fine: the result is a set of
//! files to protect).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Characters that end a word outside quotes and are not part of any word.
fn is_operator(c: char) -> bool {
    matches!(c, ';' | '&' | '|' | '<' | '>' | '`')
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads one command into words.
struct Reader<'a, 'v> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    var: &'v dyn Fn(&str) -> Option<String>,
    word: String,
    words: Vec<String>,
    /// One entry per open `(` / `$(`: true when a `"` was open where it started, so that its
    /// `)` goes back inside those quotes.
    parens: Vec<bool>,
}

impl Reader<'_, '_> {
    fn end_word(&mut self) {
        if !self.word.is_empty() {
            self.words.push(std::mem::take(&mut self.word));
        }
    }

    fn name(&mut self) -> String {
        std::iter::from_fn(|| self.chars.next_if(|c| is_name_char(*c))).collect()
    }

    /// After a `$`: expands a parameter into the word; false when none follows.
    fn expand(&mut self) -> bool {
        match self.chars.peek().copied() {
            Some('{') => {
                self.chars.next();
                let name = self.name();
                let rest: String =
                    std::iter::from_fn(|| self.chars.next_if(|c| *c != '}')).collect();
                self.chars.next();
                let value = (self.var)(&name).filter(|v| !v.is_empty());
                // `${NAME:-default}`: the default when it is unset; other forms: the value.
                let default = rest.strip_prefix(":-").or_else(|| rest.strip_prefix('-'));
                match (value, default) {
                    (Some(value), _) => self.word.push_str(&value),
                    (None, Some(default)) => self.word.push_str(default),
                    (None, None) => {}
                }
                true
            }
            Some(c) if is_name_char(c) && !c.is_ascii_digit() => {
                let name = self.name();
                self.word.push_str(&(self.var)(&name).unwrap_or_default());
                true
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
                self.chars.next();
                true
            }
            _ => false,
        }
    }

    /// Inside `"…"`, up to its end or up to a `$(` (whose words are read as unquoted ones).
    fn double_quoted(&mut self) {
        while let Some(c) = self.chars.next() {
            match c {
                '"' => return,
                '\\' => match self.chars.peek().copied() {
                    Some(n @ ('"' | '\\' | '$' | '`')) => {
                        self.chars.next();
                        self.word.push(n);
                    }
                    Some('\n') => {
                        self.chars.next();
                    }
                    _ => self.word.push('\\'),
                },
                '$' if self.chars.peek() == Some(&'(') => {
                    self.chars.next();
                    self.end_word();
                    self.parens.push(true);
                    return;
                }
                '$' => {
                    if !self.expand() {
                        self.word.push('$');
                    }
                }
                c => self.word.push(c),
            }
        }
    }

    fn read(mut self) -> Vec<String> {
        while let Some(c) = self.chars.next() {
            match c {
                '\\' => {
                    if let Some(next) = self.chars.next()
                        && next != '\n'
                    {
                        self.word.push(next);
                    }
                }
                '\'' => {
                    while let Some(c) = self.chars.next_if(|c| *c != '\'') {
                        self.word.push(c);
                    }
                    self.chars.next();
                }
                '"' => self.double_quoted(),
                '$' if self.chars.peek() == Some(&'(') => {
                    self.chars.next();
                    self.end_word();
                    self.parens.push(false);
                }
                '$' => {
                    if !self.expand() {
                        self.word.push('$');
                    }
                }
                '#' if self.word.is_empty() => {
                    while self.chars.next_if(|c| *c != '\n').is_some() {}
                }
                '(' => {
                    self.end_word();
                    self.parens.push(false);
                }
                ')' => {
                    self.end_word();
                    if self.parens.pop() == Some(true) {
                        self.double_quoted();
                    }
                }
                c if c.is_whitespace() || is_operator(c) => self.end_word(),
                c => self.word.push(c),
            }
        }
        self.end_word();
        self.words
    }
}

/// Splits `command` into shell words, with quotes removed and `$NAME` / `${NAME}` expanded by
/// `var` (an unknown or special parameter expands to nothing). Operators and the edges of a
/// command substitution end a word; the words inside a substitution are words too.
fn words(command: &str, var: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    Reader {
        chars: command.chars().peekable(),
        var,
        word: String::new(),
        words: Vec::new(),
        parens: Vec::new(),
    }
    .read()
}

/// Adds `path` (absolute, or relative to one of `bases`) when it is an existing regular file:
/// its canonical path, and the link itself when the last component is a symbolic link.
fn add(path: &str, bases: &[PathBuf], home: Option<&Path>, found: &mut BTreeSet<PathBuf>) {
    if path.is_empty() {
        return;
    }
    let path = match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    };
    let candidates: Vec<PathBuf> = if path.is_absolute() {
        vec![path]
    } else {
        bases.iter().map(|base| base.join(&path)).collect()
    };
    for candidate in candidates {
        if !std::fs::metadata(&candidate).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(target) = candidate.canonicalize() else {
            continue;
        };
        found.insert(target);
        let is_link = std::fs::symlink_metadata(&candidate).is_ok_and(|m| m.is_symlink());
        if let (true, Some(parent), Some(file)) =
            (is_link, candidate.parent(), candidate.file_name())
            && let Ok(parent) = parent.canonicalize()
        {
            found.insert(parent.join(file));
        }
    }
}

/// The existing files `commands` name (see `HookSettings::script_paths`).
pub(crate) fn named_files<'a>(
    commands: impl Iterator<Item = &'a str>,
    root: &Path,
) -> Vec<PathBuf> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let var = |name: &str| -> Option<String> {
        if name == "CLAUDE_PROJECT_DIR" {
            Some(root.display().to_string())
        } else {
            std::env::var(name).ok()
        }
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut found = BTreeSet::new();
    for command in commands {
        let mut words = words(command, &var);
        // A quoted word that is itself a command (`sh -c './a.sh && ./b.sh'`) names files
        // too; one level of that is read, and two (`sh -c "bash -c '…'"`).
        for _ in 0..2 {
            let inner: Vec<String> = words
                .iter()
                .filter(|w| w.contains(|c: char| c.is_whitespace() || is_operator(c)))
                .flat_map(|w| self::words(w, &var))
                .filter(|w| !words.contains(w))
                .collect();
            if inner.is_empty() {
                break;
            }
            words.extend(inner);
        }
        // Relative paths are read from the workspace, and from wherever the command `cd`s.
        let mut bases = vec![root.clone()];
        for pair in words.windows(2) {
            if pair[0] == "cd" {
                let dir = Path::new(&pair[1]);
                bases.push(if dir.is_absolute() {
                    dir.to_path_buf()
                } else {
                    root.join(dir)
                });
            }
        }
        for word in &words {
            add(word, &bases, home.as_deref(), &mut found);
            if let Some((_, value)) = word.split_once('=') {
                add(value, &bases, home.as_deref(), &mut found);
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(command: &str) -> Vec<String> {
        words(command, &|name| match name {
            "CLAUDE_PROJECT_DIR" => Some("/ws".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        })
    }

    #[test]
    fn words_are_read_as_the_shell_reads_them() {
        assert_eq!(
            split(r#"A=1 "$CLAUDE_PROJECT_DIR"/hooks/a.sh 'my dir/b.sh' c\ d.sh"#),
            ["A=1", "/ws/hooks/a.sh", "my dir/b.sh", "c d.sh"]
        );
        assert_eq!(
            split("${CLAUDE_PROJECT_DIR}/x.sh&&y.sh|z.sh;w.sh>out.log 2>&1"),
            ["/ws/x.sh", "y.sh", "z.sh", "w.sh", "out.log", "2", "1"]
        );
        assert_eq!(
            split(r#"python3 "$(dirname "$0")/p.py" ${UNSET:-d}/q.py $1 # ./c.sh"#),
            ["python3", "dirname", "/p.py", "d/q.py"]
        );
        assert_eq!(
            split(r#"(cd sub && ./run.sh) "in $(echo "x") quotes" $(a $(b)) c"#),
            [
                "cd", "sub", "./run.sh", "in ", "echo", "x", " quotes", "a", "b", "c"
            ]
        );
        assert_eq!(
            split("echo \"a\\\"b\" \"$EMPTY\" x$CLAUDE_PROJECT_DIR"),
            ["echo", "a\"b", "x/ws"]
        );
        assert_eq!(split("'unterminated"), ["unterminated"]);
        assert_eq!(split("\"$"), ["$"]);
    }
}
