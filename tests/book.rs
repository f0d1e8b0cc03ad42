//! The book under `docs/` holds together: every chapter `SUMMARY.md` lists exists (but the
//! ones other branches are still writing, `PENDING_CHAPTERS`), every chapter is listed, and
//! every relative link in the book, the README, ARCHITECTURE.md and DEVELOPERS.md names a file
//! that exists. Its Rust samples compile as the root crate's doctests (`src/lib.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Chapters `SUMMARY.md` lists that other branches are writing at the same time. Empty it as
/// they are merged: a chapter on this list that exists fails the test.
const PENDING_CHAPTERS: &[&str] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// The targets of the Markdown links `[text](target)` outside fenced code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(target.to_string());
            rest = &after[end..];
        }
    }
    out
}

/// Whether `target` points into this repository (not a URL, not an anchor of the same page).
fn is_relative(target: &str) -> bool {
    !(target.is_empty()
        || target.starts_with('#')
        || target.contains("://")
        || target.starts_with("mailto:"))
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn summary_chapters() -> Vec<String> {
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    links(&summary)
        .into_iter()
        .filter(|t| is_relative(t))
        .collect()
}

#[test]
fn every_chapter_the_summary_lists_exists_but_the_pending_ones() {
    let chapters = summary_chapters();
    assert!(chapters.len() > 5, "{chapters:?}");
    for chapter in &chapters {
        let exists = book().join(chapter).is_file();
        let pending = PENDING_CHAPTERS.contains(&chapter.as_str());
        assert!(
            exists || pending,
            "SUMMARY.md lists {chapter}, which does not exist"
        );
    }
    for pending in PENDING_CHAPTERS {
        assert!(
            chapters.iter().any(|c| c == pending),
            "{pending} is pending but SUMMARY.md does not list it"
        );
        assert!(
            !book().join(pending).exists(),
            "{pending} exists now: take it off PENDING_CHAPTERS"
        );
    }
}

#[test]
fn every_chapter_is_in_the_summary() {
    let chapters = summary_chapters();
    let mut files = Vec::new();
    markdown_files(&book(), &mut files);
    for file in files {
        let name = file
            .strip_prefix(book())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if name == "SUMMARY.md" {
            continue;
        }
        assert!(
            chapters.contains(&name),
            "{name} is not listed in SUMMARY.md: mdBook would not build it"
        );
    }
}

#[test]
fn every_relative_link_names_a_file_that_exists() {
    let mut files = Vec::new();
    markdown_files(&book(), &mut files);
    for top in ["README.md", "ARCHITECTURE.md", "DEVELOPERS.md"] {
        files.push(root().join(top));
    }
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let is_summary = file.ends_with("docs/src/SUMMARY.md");
        for target in links(&text).into_iter().filter(|t| is_relative(t)) {
            let path = target.split('#').next().unwrap();
            if is_summary && PENDING_CHAPTERS.contains(&path) {
                continue;
            }
            let resolved = file.parent().unwrap().join(path);
            assert!(
                resolved.exists(),
                "{} links to {target}, which does not exist",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser broken?"
    );
}

#[test]
fn the_link_parser_finds_links_and_skips_code() {
    let text =
        "See [a](a.md) and [b](b.md#x \"title\").\n```sh\necho [c](c.md)\n```\n[u](https://x.y)";
    assert_eq!(links(text), ["a.md", "b.md#x", "https://x.y"]);
    assert!(!is_relative("https://x.y") && !is_relative("#top") && is_relative("a.md"));
}

#[test]
fn every_code_block_of_the_book_names_its_language() {
    // An unnamed block would be compiled as Rust by the doctests, and shown as Rust by mdBook.
    let mut files = Vec::new();
    markdown_files(&book(), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut open = false;
        for (i, line) in text.lines().enumerate() {
            let Some(info) = line.trim_start().strip_prefix("```") else {
                continue;
            };
            if !open {
                assert!(
                    !info.trim().is_empty(),
                    "{}:{}: a code block without a language",
                    file.display(),
                    i + 1
                );
            }
            open = !open;
        }
        assert!(!open, "{}: a code block is not closed", file.display());
    }
}
