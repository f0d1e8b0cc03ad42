//! Programs that run their arguments, or a script, as a command: what `deny` and `ask` rules
//! must see through.
//!
//! - Wrappers run the command after their own options (`timeout -s KILL 5 rm`, `unshare rm`,
//!   `coproc rm`). Which words are the wrapper's options is the wrapper's business, so every
//!   suffix of the words after it is a candidate command.
//! - `find -exec CMD … ;` (and `-execdir`, `-ok`, `-okdir`) runs `CMD …`.
//! - Scripts: a shell's `-c` argument (after any options and `--`), a shell's stdin when it
//!   is a here-string or here-document (also as `/dev/stdin`, and for `source`), `eval`'s words, `trap`'s action, `env -S`'s string,
//!   `watch`'s words, the `-c` of `su`, `runuser`, `script` and `flock`.
//! - What cannot be read before it runs (a script from a pipe or a file redirection, a
//!   dynamic word where a script goes, programs that schedule or multiplex commands such as
//!   `parallel`, `tmux`, `at`) is an unknown subject.
//!
//! A program that acts by itself (`find -delete`, `unlink`, a Python one-liner, a script
//! file) is not a wrapper: a command deny rule cannot see what it does.

use super::{Word, literal};
use tree_sitter::Node;

/// Programs that run the command after their options.
const WRAPPERS: &[&str] = &[
    "env",
    "command",
    "builtin",
    "exec",
    "nohup",
    "nice",
    "ionice",
    "time",
    "timeout",
    "stdbuf",
    "sudo",
    "doas",
    "xargs",
    "setsid",
    "chrt",
    "taskset",
    "unbuffer",
    "strace",
    "ltrace",
    "busybox",
    "flock",
    "watch",
    "caffeinate",
    "coproc",
    "unshare",
    "nsenter",
    "chroot",
    "runuser",
    "setpriv",
    "prlimit",
    "numactl",
    "cgexec",
    "fakeroot",
    "faketime",
    "firejail",
    "bwrap",
    "proot",
    "valgrind",
    "catchsegv",
    "xvfb-run",
    "dbus-launch",
    "dbus-run-session",
    "systemd-run",
    "torsocks",
    "proxychains",
    "proxychains4",
    "tini",
    "dumb-init",
    "sg",
    "ssh-agent",
];

/// Shells: their `-c` script, or their stdin, is read as commands.
const SHELLS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "ksh", "ash", "mksh", "yash", "posh", "rbash",
];

/// Programs that run commands given in a form this parser cannot follow.
const OPAQUE: &[&str] = &["parallel", "tmux", "screen", "at", "batch", "expect"];

/// What a shell reading its standard input would read.
pub(super) enum Stdin {
    /// dsh's own stdin for the call (nothing a command wrote).
    Inherited,
    /// A here-string or here-document whose text is known.
    Script(String),
    /// A pipe, a file, or a here-document with expansions.
    Unknown,
}

/// A script a program runs.
pub(super) enum Script {
    /// The program runs no script of its own.
    None,
    /// Its text, to be read as commands.
    Text(String),
    /// It runs something that cannot be known before it runs.
    Unknown,
}

/// Where the standard input of the `command` node comes from.
pub(super) fn stdin_of(node: Node, bytes: &[u8]) -> Stdin {
    let text = |n: Node| n.utf8_text(bytes).unwrap_or("").to_string();
    let mut redirects: Vec<Node> = Vec::new();
    let mut cursor = node.walk();
    redirects.extend(node.named_children(&mut cursor));
    let mut outer = node;
    if let Some(parent) = node.parent()
        && parent.kind() == "redirected_statement"
    {
        let mut cursor = parent.walk();
        redirects.extend(parent.named_children(&mut cursor));
        outer = parent;
    }
    let mut stdin = Stdin::Inherited;
    for redirect in redirects {
        match redirect.kind() {
            "herestring_redirect" => {
                let value = redirect
                    .named_child(0)
                    .map(|w| super::word_of(w, bytes))
                    .unwrap_or(Word::Dynamic);
                stdin = match value {
                    Word::Literal(script) => Stdin::Script(script),
                    Word::Dynamic => Stdin::Unknown,
                };
            }
            "heredoc_redirect" => {
                let mut cursor = redirect.walk();
                let children: Vec<Node> = redirect.named_children(&mut cursor).collect();
                let start = children.iter().find(|c| c.kind() == "heredoc_start");
                let body = children.iter().find(|c| c.kind() == "heredoc_body");
                let quoted = start.is_some_and(|s| text(*s).starts_with(['\'', '"', '\\']));
                stdin = match body {
                    None => Stdin::Script(String::new()),
                    Some(body) => {
                        let raw = text(*body);
                        if quoted || (body.named_child_count() == 0 && !raw.contains(['$', '`'])) {
                            Stdin::Script(raw)
                        } else {
                            Stdin::Unknown
                        }
                    }
                };
            }
            "file_redirect" => {
                let raw = text(redirect);
                let descriptor: String = raw.chars().take_while(|c| c.is_ascii_digit()).collect();
                let operator = raw[descriptor.len()..].trim_start();
                if (descriptor.is_empty() || descriptor == "0")
                    && operator.starts_with('<')
                    && !operator.starts_with("<<")
                {
                    stdin = Stdin::Unknown;
                }
            }
            _ => {}
        }
    }
    if matches!(stdin, Stdin::Inherited)
        && let Some(parent) = outer.parent()
        && parent.kind() == "pipeline"
        && parent
            .named_child(0)
            .is_some_and(|first| first.id() != outer.id())
    {
        return Stdin::Unknown;
    }
    stdin
}

/// The commands a wrapper runs: every suffix after a wrapper's name, and the commands of
/// `find -exec`.
pub(super) fn inner_commands(name: &str, words: &[Word]) -> Vec<Vec<Word>> {
    if WRAPPERS.contains(&name) {
        return (1..words.len())
            .map(|skip| words[skip..].to_vec())
            .collect();
    }
    if name == "find" {
        let mut found = Vec::new();
        let mut i = 1;
        while i < words.len() {
            if literal(&words[i])
                .is_some_and(|w| matches!(w, "-exec" | "-execdir" | "-ok" | "-okdir"))
            {
                let end = words[i + 1..]
                    .iter()
                    .position(|w| literal(w).is_some_and(|w| w == ";" || w == "+"))
                    .map_or(words.len(), |p| i + 1 + p);
                if end > i + 1 {
                    found.push(words[i + 1..end].to_vec());
                }
                i = end;
            }
            i += 1;
        }
        return found;
    }
    Vec::new()
}

fn join(words: &[Word]) -> Script {
    let mut joined = String::new();
    for word in words {
        match word {
            Word::Literal(w) => {
                joined.push_str(w);
                joined.push(' ');
            }
            Word::Dynamic => return Script::Unknown,
        }
    }
    Script::Text(joined)
}

fn text_or_unknown(word: Option<&Word>) -> Script {
    match word {
        Some(Word::Literal(script)) => Script::Text(script.clone()),
        _ => Script::Unknown,
    }
}

/// The script `words` (a command named `name`) runs, reading `stdin` where it is a shell
/// with no script argument.
pub(super) fn script_of(name: &str, words: &[Word], stdin: &Stdin) -> Script {
    if OPAQUE.contains(&name) {
        return Script::Unknown;
    }
    if SHELLS.contains(&name) {
        return shell_script(words, stdin);
    }
    match name {
        "eval" => join(&words[1..]),
        "source" | "." => match words.get(1) {
            None => Script::None,
            Some(Word::Literal(file)) if reads_stdin(file) => from_stdin(stdin),
            Some(Word::Literal(_)) => Script::None,
            // `source <(…)`, `source "$F"`: what it reads is not known.
            Some(Word::Dynamic) => Script::Unknown,
        },
        "trap" => trap_action(words),
        "env" => split_string(words),
        "watch" => {
            let mut i = 1;
            while let Some(word) = words.get(i) {
                match literal(word) {
                    Some("-n" | "--interval" | "-q" | "--equexit") => i += 2,
                    Some(w) if w.starts_with('-') => i += 1,
                    _ => break,
                }
            }
            join(&words[i.min(words.len())..])
        }
        "su" | "runuser" | "script" | "flock" => {
            match words.iter().position(|w| {
                literal(w)
                    .is_some_and(|w| w == "-c" || w == "--command" || w == "--session-command")
            }) {
                Some(i) => text_or_unknown(words.get(i + 1)),
                None => match words
                    .iter()
                    .find_map(|w| literal(w).and_then(|w| w.strip_prefix("--command=")))
                {
                    Some(script) => Script::Text(script.to_string()),
                    None => Script::None,
                },
            }
        }
        _ => Script::None,
    }
}

/// A shell's script: its `-c` argument, its stdin, or none (a script file, which is not read).
fn shell_script(words: &[Word], stdin: &Stdin) -> Script {
    let mut command_flag = false;
    let mut read_stdin = false;
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let Some(w) = literal(word) else {
            // A dynamic option could be `-c`: nothing after it can be known.
            return Script::Unknown;
        };
        if w == "--" || w == "-" {
            i += 1;
            break;
        }
        if matches!(w, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") {
            i += 2;
            continue;
        }
        if w.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(flags) = w.strip_prefix('-').or_else(|| w.strip_prefix('+')) {
            command_flag |= flags.contains('c');
            read_stdin |= flags.contains('s');
            i += 1;
            continue;
        }
        break;
    }
    if command_flag {
        return text_or_unknown(words.get(i));
    }
    match words.get(i) {
        Some(Word::Dynamic) => Script::Unknown,
        Some(Word::Literal(file)) if reads_stdin(file) => from_stdin(stdin),
        // A script file: what it holds is not known here.
        Some(Word::Literal(_)) if !read_stdin => Script::None,
        _ => from_stdin(stdin),
    }
}

/// A script file that is the standard input under another name.
fn reads_stdin(file: &str) -> bool {
    matches!(
        file,
        "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" | "/proc/thread-self/fd/0"
    )
}

fn from_stdin(stdin: &Stdin) -> Script {
    match stdin {
        Stdin::Inherited => Script::None,
        Stdin::Script(script) => Script::Text(script.clone()),
        Stdin::Unknown => Script::Unknown,
    }
}

/// `trap ACTION SIGNAL…`: the action, unless the trap is listed or reset.
fn trap_action(words: &[Word]) -> Script {
    let mut args = &words[1..];
    match args.first().and_then(literal) {
        Some("--") => args = &args[1..],
        Some("-p" | "-l" | "-P") => return Script::None,
        _ => {}
    }
    match args {
        [] | [_] => Script::None,
        [Word::Literal(action), ..] if action == "-" || action.is_empty() => Script::None,
        [action, ..] => text_or_unknown(Some(action)),
    }
}

/// `env -S STRING` (`--split-string`): STRING is split into a command line of its own.
fn split_string(words: &[Word]) -> Script {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let Some(w) = literal(word) else {
            return Script::Unknown;
        };
        if w == "--" || !w.starts_with('-') {
            return Script::None;
        }
        if matches!(w, "-u" | "--unset" | "-C" | "--chdir") {
            i += 2;
            continue;
        }
        let attached = if let Some(rest) = w.strip_prefix("--split-string") {
            Some(rest.strip_prefix('=').unwrap_or(rest))
        } else if !w.starts_with("--") {
            w[1..].find('S').map(|at| &w[at + 2..])
        } else {
            None
        };
        if let Some(attached) = attached {
            let mut rest = Vec::new();
            if !attached.is_empty() {
                rest.push(Word::literal(attached));
            }
            rest.extend_from_slice(&words[i + 1..]);
            return join(&rest);
        }
        i += 1;
    }
    Script::None
}
