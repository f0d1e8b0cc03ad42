//! Replays every committed fuzz corpus file (`fuzz/corpus/<target>/*`) through its target:
//! the fast, stable-Rust part of fuzzing that CI runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

#[test]
fn every_corpus_file_runs_clean_through_its_target() {
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in dsh_fuzz_targets::TARGETS {
        let dir = corpora.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("no corpus for {name} at {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "the corpus of {name} is empty");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name} failed on {}", file.display());
            total += 1;
        }
    }
    eprintln!("replayed {total} corpus files");
}
