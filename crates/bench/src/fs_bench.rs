//! File-tool benchmarks.
//!
//! - `fs/grep_vs_rg`: the `grep` tool against the `rg` binary on the same generated tree of
//!   source (over 100 MB, with ignored and hidden folders both must skip), same pattern, same
//!   output mode (`files_with_matches` / `--files-with-matches`), same ignore rules
//!   (`.gitignore` honoured outside git: `--no-require-git`), warm cache, alternating runs,
//!   medians. Figures: `dsh_s`, `rg_s`, `ratio` (goal ≤ 1.1), `tree_mb`; also `rg_startup_s`
//!   (rg on an empty folder: the process start that rg pays and the in-process tool does not)
//!   and `files_matched`.
//! - `fs/read_edit`: `read_file` then `edit_file` of a 10,000-line file through the whole
//!   pipeline (harness, session, sandbox, fs-intent monitor, atomic fsync'd write): `p50_ms`.
// A bench whose setup fails should stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use dsh_core::{Hooks, ToolCall, ToolContext, ToolRegistry};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::SessionLog;
use dsh_tool_fs::{FsToolset, Limits};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "fs/grep_vs_rg",
        in_all: true,
        run: grep_vs_rg,
    },
    Bench {
        name: "fs/read_edit",
        in_all: true,
        run: read_edit,
    },
];

/// The regex both searches look for: a literal prefix, then a class, as real searches are.
const PATTERN: &str = r"fn parse_[a-z]+_v2\(";
/// Timed runs of each side (after one warm-up each).
const RUNS: usize = 7;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A small deterministic generator (xorshift64*), so the tree is the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "config", "buffer", "token", "stream", "parser", "render", "signal", "handle", "record",
    "cursor", "window", "bucket", "filter", "shadow", "vertex", "packet", "worker", "socket",
];

/// One Rust-looking source file of about `bytes` bytes; some carry the pattern.
fn source_file(rng: &mut Rng, bytes: usize, with_hit: bool) -> String {
    let mut out = String::with_capacity(bytes + 200);
    let hit_at = bytes / 2;
    let mut hit_done = !with_hit;
    while out.len() < bytes {
        let (a, b, c) = (rng.pick(WORDS), rng.pick(WORDS), rng.pick(WORDS));
        match rng.next() % 6 {
            0 => out.push_str(&format!("pub fn {a}_{b}(x: &{c}) -> Option<{b}> {{\n")),
            1 => out.push_str(&format!("    let {a} = {b}.{c}_with(&mut self.{a});\n")),
            2 => out.push_str(&format!(
                "    // parse the {a} before the {b} reaches {c}\n"
            )),
            3 => out.push_str(&format!(
                "    if {a}.len() > {} {{ return None; }}\n",
                rng.next() % 4096
            )),
            4 => out.push_str(&format!(
                "fn parse_{a}_v1(input: &str) -> {b} {{ todo_{c}() }}\n"
            )),
            _ => out.push_str("}\n\n"),
        }
        if !hit_done && out.len() > hit_at {
            let w = rng.pick(WORDS);
            out.push_str(&format!(
                "fn parse_{w}_v2(input: &[u8]) -> Result<(), Error> {{\n"
            ));
            hit_done = true;
        }
    }
    out
}

/// Writes the tree; answers its size in bytes (searched part only).
fn generate_tree(root: &Path) -> std::io::Result<u64> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut total = 0u64;
    std::fs::write(root.join(".gitignore"), "target/\n*.gen.rs\n")?;
    for top in 0..40 {
        for sub in 0..25 {
            let dir = root.join(format!("crate{top:02}/src/mod{sub:02}"));
            std::fs::create_dir_all(&dir)?;
            for file in 0..4 {
                let with_hit = rng.next().is_multiple_of(10);
                let text = source_file(&mut rng, 26_000, with_hit);
                total += text.len() as u64;
                std::fs::write(dir.join(format!("file{file}.rs")), text)?;
            }
            // Ignored by .gitignore: both sides must skip these hits.
            std::fs::write(dir.join("skip.gen.rs"), source_file(&mut rng, 2_000, true))?;
        }
    }
    for (dir, name) in [("target/debug", "build.rs"), (".cache", "hidden.rs")] {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir)?;
        for i in 0..50 {
            std::fs::write(
                dir.join(format!("{i}-{name}")),
                source_file(&mut rng, 20_000, true),
            )?;
        }
    }
    Ok(total)
}

/// Makes sure `rg` is there, running the setup script (Debian's `ripgrep`) if not.
fn ensure_rg() -> bool {
    let found = || {
        Command::new("rg")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found() {
        return true;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("setup-rg.sh");
    eprintln!("rg is missing; running {}", script.display());
    let ran = Command::new("sh").arg(&script).status();
    if !ran.is_ok_and(|s| s.success()) {
        eprintln!("the rg setup failed");
    }
    found()
}

fn rg_files(tree: &Path) -> Vec<String> {
    let out = Command::new("rg")
        .args([
            "--files-with-matches",
            "--no-require-git",
            "--no-config",
            "-e",
            PATTERN,
            ".",
        ])
        .current_dir(tree)
        .output()
        .expect("rg runs");
    let mut files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.strip_prefix("./").unwrap_or(l).to_string())
        .collect();
    files.sort();
    files
}

fn grep_vs_rg() {
    const NAME: &str = "fs/grep_vs_rg";
    let dir = tempfile::tempdir().expect("a temporary folder");
    let tree = dir.path().canonicalize().expect("a canonical path");
    let started = Instant::now();
    let bytes = generate_tree(&tree).expect("the tree is written");
    eprintln!(
        "{NAME}: generated {:.1} MB in {:.1}s",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let have_rg = ensure_rg();
    let rt = runtime();
    let limits = Limits {
        max_paths: usize::MAX,
        ..Limits::default()
    };
    let toolset = rt
        .block_on(FsToolset::builder(&tree).limits(limits).build())
        .expect("the toolset");
    let grep = toolset
        .tools()
        .into_iter()
        .find(|t| t.name() == "grep")
        .expect("the grep tool");
    let args = json!({"pattern": PATTERN, "output_mode": "files_with_matches"});
    let dsh_once = || {
        let value = rt
            .block_on(grep.execute(args.clone(), ToolContext::detached("bench")))
            .expect("grep succeeds");
        let _ = grep.present(&value);
        value
    };

    // Warm the page cache for both, and check they find the same files.
    let value = dsh_once();
    let dsh_found: Vec<String> = value["lines"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if have_rg {
        let rg_found = rg_files(&tree);
        if rg_found != dsh_found {
            eprintln!(
                "{NAME}: WARNING: the results differ (dsh {} files, rg {} files)",
                dsh_found.len(),
                rg_found.len()
            );
        } else {
            eprintln!("{NAME}: both find the same {} files", dsh_found.len());
        }
    }

    let mut dsh = Vec::new();
    let mut rg = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        dsh_once();
        dsh.push(t.elapsed().as_secs_f64());
        if have_rg {
            let t = Instant::now();
            rg_files(&tree);
            rg.push(t.elapsed().as_secs_f64());
        }
    }
    let dsh_s = quantile(&mut dsh, 0.5);
    emit(NAME, "dsh_s", dsh_s, "s");
    if have_rg {
        let rg_s = quantile(&mut rg, 0.5);
        emit(NAME, "rg_s", rg_s, "s");
        emit(NAME, "ratio", dsh_s / rg_s, "x");
        // rg pays for starting a process and dsh does not: say how much that is.
        let empty = tempfile::tempdir().expect("a temporary folder");
        let mut startup: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                rg_files(empty.path());
                t.elapsed().as_secs_f64()
            })
            .collect();
        emit(NAME, "rg_startup_s", quantile(&mut startup, 0.5), "s");
    } else {
        eprintln!("{NAME}: rg is not available; rg_s and ratio are not reported");
    }
    emit(NAME, "tree_mb", bytes as f64 / 1e6, "MB");
    emit(NAME, "files_matched", dsh_found.len() as f64, "files");
    rt.block_on(toolset.shutdown());
}

fn read_edit() {
    const NAME: &str = "fs/read_edit";
    const WARMUP: usize = 10;
    const ITERATIONS: usize = 200;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let text: String = (1..=10_000)
        .map(|i| format!("line {i:05}: the quick brown fox jumps over the lazy dog\n"))
        .collect();
    std::fs::write(dir.path().join("big.txt"), text).expect("the file is written");
    let rt = runtime();
    let samples = rt.block_on(async {
        let toolset = FsToolset::builder(dir.path())
            .build()
            .await
            .expect("the toolset");
        let registry = Arc::new(ToolRegistry::new());
        toolset.register(&registry).expect("the tools register");
        let mut hooks = Hooks::new();
        hooks.pre_execute_arc(toolset.sandbox());
        let harness = HarnessBuilder::new(registry)
            .hooks(hooks)
            .build()
            .await
            .expect("the harness");
        let session = harness
            .open(
                SessionLog::memory().await.expect("a log"),
                SchedulerConfig::default(),
                None,
            )
            .await
            .expect("a session");
        let mut samples = Vec::with_capacity(ITERATIONS);
        let mut reads = Vec::with_capacity(ITERATIONS);
        for i in 0..WARMUP + ITERATIONS {
            let (old, new) = if i % 2 == 0 {
                ("line 05000: the quick", "line 05000: THE QUICK")
            } else {
                ("line 05000: THE QUICK", "line 05000: the quick")
            };
            let t = Instant::now();
            let read = session
                .run_step(StepRequest::new(vec![ToolCall::new(
                    format!("r{i}"),
                    "read_file",
                    json!({"path": "big.txt"}),
                )]))
                .await
                .expect("the read step");
            let read_ms = t.elapsed().as_secs_f64() * 1e3;
            let edit = session
                .run_step(StepRequest::new(vec![ToolCall::new(
                    format!("e{i}"),
                    "edit_file",
                    json!({"path": "big.txt", "old_string": old, "new_string": new}),
                )]))
                .await
                .expect("the edit step");
            let elapsed = t.elapsed().as_secs_f64() * 1e3;
            assert!(!read.results[0].is_error(), "{}", read.results[0].text());
            assert!(!edit.results[0].is_error(), "{}", edit.results[0].text());
            if i >= WARMUP {
                samples.push(elapsed);
                reads.push(read_ms);
            }
        }
        session.shutdown().await;
        harness.shutdown().await;
        toolset.shutdown().await;
        (samples, reads)
    });
    let (mut samples, mut reads) = samples;
    emit(NAME, "p50_ms", quantile(&mut samples, 0.5), "ms");
    emit(NAME, "p99_ms", quantile(&mut samples, 0.99), "ms");
    emit(NAME, "read_p50_ms", quantile(&mut reads, 0.5), "ms");
}
