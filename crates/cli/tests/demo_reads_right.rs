//! `dsh demo`'s closing lines read as a person expects: dsh's own lines are lines, what comes
//! from outside (the folder's name) is escaped within its line, and the commands they suggest
//! work when pasted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{dsh, replay};
use std::path::Path;

/// The lines after the last JSON message: dsh's closing words.
fn closing_lines(stderr: &str) -> Vec<&str> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.starts_with("dsh: demo done."))
        .unwrap_or_else(|| panic!("no `demo done.` line in\n{stderr}"));
    lines[start..].to_vec()
}

/// Splits a pasted command line the way a POSIX shell would, for the words dsh writes
/// (plain words, or single-quoted ones).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// The words after `cargo run -p dsh-cli --` of a closing line: the `dsh` arguments.
fn suggested_args(line: &str) -> Vec<String> {
    let (_, command) = line
        .split_once("cargo run -p dsh-cli -- ")
        .unwrap_or_else(|| panic!("no command in {line:?}"));
    shell_words(command)
}

#[test]
fn the_closing_lines_are_five_plain_lines_whose_commands_work_when_pasted() {
    let dir = tempfile::tempdir().unwrap();
    // A space, as in "My Documents": the commands must quote it.
    let demo_dir = dir.path().join("my demo");
    let ran = dsh(&["demo".as_ref(), "--dir".as_ref(), demo_dir.as_os_str()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        !ran.stderr.contains("\\u{"),
        "nothing escaped:\n{}",
        ran.stderr
    );
    let log = demo_dir.join("session.jsonl");
    let lines = closing_lines(&ran.stderr);
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let page = demo_dir.join("session.html");
    assert_eq!(
        lines[4],
        format!(
            "     The session at a glance, in a browser:   {}",
            page.display()
        )
    );
    assert!(page.is_file(), "the page the demo names exists");
    assert_eq!(
        lines[0],
        format!(
            "dsh: demo done. The edited sample project: {}",
            demo_dir.join("workspace").display()
        )
    );
    assert_eq!(lines[1], format!("     The session log: {}", log.display()));
    assert!(lines[2].starts_with("     Rebuild what the model saw from the log: cargo run"));
    assert!(lines[3].starts_with("     Verify the log's invariants:"));

    let replay_args = suggested_args(lines[2]);
    assert_eq!(
        replay_args,
        ["replay", &log.display().to_string(), "--format", "openai"]
    );
    let replayed = dsh(&replay_args);
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(
        replayed.stdout, ran.stdout,
        "the replay shows what the run showed"
    );
    let check_args = suggested_args(lines[3]);
    assert_eq!(check_args, ["check", &log.display().to_string()]);
    let checked = dsh(&check_args);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
}

#[test]
fn a_folder_name_that_holds_a_line_break_stays_inside_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir
        .path()
        .join("x\ndsh: demo done. The edited sample project: /etc\u{1b}[2K");
    let ran = dsh(&["demo".as_ref(), "--dir".as_ref(), demo_dir.as_os_str()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let lines = closing_lines(&ran.stderr);
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(
        lines[4].starts_with("     The session at a glance, in a browser:   ")
            && lines[4].contains("x\\u{a}dsh: demo done.")
            && lines[4].ends_with("/session.html"),
        "the page's path stays on its line, escaped: {:?}",
        lines[4]
    );
    assert!(demo_dir.join("session.html").is_file());
    assert!(lines[0].starts_with("dsh: demo done. The edited sample project: "));
    assert!(
        lines[0].contains("x\\u{a}dsh: demo done.") && lines[0].contains("\\u{1b}[2K"),
        "the folder's name is escaped within the first line: {:?}",
        lines[0]
    );
    assert!(!ran.stderr.contains('\u{1b}'), "{:?}", ran.stderr);
    let log = demo_dir.join("session.jsonl");
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
    assert!(Path::new(&log).is_file());
}
