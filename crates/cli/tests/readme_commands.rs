//! Every `dsh` and `cargo` command line of the README is run, or checked against what CI
//! runs: the README's `sh` blocks run in order as a newcomer would type them (in a fresh
//! folder holding a copy of `examples/`, this build's `dsh` on the PATH), `cargo run -p dsh-cli
//! -- ARGS` as `dsh ARGS`; the test command must be the one `.ci/run` runs; the install line
//! must name the package whose binary is `dsh`. Client configuration lines (`claude mcp add`)
//! are the only ones left out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `sh` blocks of a Markdown text, each a list of command lines (`\` continuations
/// joined).
fn sh_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == "sh" => current = Some(Vec::new()),
            (None, _) => {}
            (Some(_), Some(_)) => blocks.push(current.take().unwrap()),
            (Some(lines), None) => {
                if let Some(head) = line.strip_suffix('\\') {
                    pending.push_str(head);
                    continue;
                }
                pending.push_str(line);
                lines.push(std::mem::take(&mut pending).trim().to_string());
            }
        }
    }
    blocks
}

/// How a README line is covered.
#[derive(Debug, PartialEq)]
enum Coverage {
    /// Run by this test, as this shell line.
    Run(String),
    /// The test command: the one `.ci/run` runs.
    Ci,
    /// `cargo install --path P`: P must be the package of the `dsh` binary.
    Install(String),
    /// Configures an MCP client: not run.
    ClientConfig,
}

fn coverage(line: &str) -> Result<Coverage, String> {
    if let Some(args) = line.strip_prefix("cargo run -p dsh-cli -- ") {
        return Ok(Coverage::Run(format!("dsh {args}")));
    }
    if line.starts_with("cargo test ") {
        return Ok(Coverage::Ci);
    }
    if let Some(rest) = line.strip_prefix("cargo install --path ") {
        let path = rest.split_whitespace().next().unwrap_or("").to_string();
        return Ok(Coverage::Install(path));
    }
    if line.starts_with("cargo ") {
        return Err(format!(
            "no test covers `{line}`: run it here or in .ci/run"
        ));
    }
    if line.starts_with("claude ") {
        return Ok(Coverage::ClientConfig);
    }
    Ok(Coverage::Run(line.to_string()))
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

#[test]
fn the_readme_starts_with_the_demo_and_the_test_command_ci_runs() {
    let text = readme();
    let first = &sh_blocks(&text)[0];
    assert_eq!(first[0], "cargo run -p dsh-cli -- demo");
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    let ci_test = ci
        .lines()
        .rfind(|l| l.starts_with("cargo test "))
        .expect(".ci/run runs the tests");
    assert_eq!(first[1], ci_test, "the README's test command is CI's");
    let head: Vec<&str> = text.lines().take(6).collect();
    assert!(
        head.contains(&first[0].as_str()) && head.contains(&first[1].as_str()),
        "{head:#?}"
    );
    for line in sh_blocks(&text).iter().flatten() {
        if coverage(line) == Ok(Coverage::Ci) {
            assert_eq!(line, ci_test, "every test command of the README is CI's");
        }
    }
}

#[test]
fn the_install_line_names_the_package_of_the_dsh_binary() {
    let installs: Vec<String> = sh_blocks(&readme())
        .into_iter()
        .flatten()
        .filter_map(|l| match coverage(&l) {
            Ok(Coverage::Install(path)) => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(
        installs,
        ["crates/cli"],
        "the README says how to install dsh"
    );
    let manifest = std::fs::read_to_string(repo().join("crates/cli/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[[bin]]\nname = \"dsh\""),
        "crates/cli builds the `dsh` binary"
    );
    let install_line = readme()
        .lines()
        .find(|l| l.starts_with("cargo install"))
        .unwrap()
        .to_string();
    assert!(
        install_line.ends_with("--locked"),
        "{install_line}: the lock file's versions"
    );
}

#[test]
fn every_command_of_the_readme_runs() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_dsh"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo().join("examples"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for block in sh_blocks(&readme()) {
        let mut script = String::from("set -euo pipefail\n");
        for line in &block {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match coverage(line).unwrap_or_else(|e| panic!("{e}")) {
                Coverage::Run(command) => {
                    script.push_str(&format!(
                        "echo \"+ {}\" >&2\n{command} </dev/null\n",
                        command.replace('"', "'")
                    ));
                    ran += 1;
                }
                Coverage::Ci | Coverage::Install(_) | Coverage::ClientConfig => {}
            }
        }
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("TMPDIR", dir.path())
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "a README block failed ({:?}):\n{script}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        ran >= 6,
        "only {ran} commands ran: is the README parser broken?"
    );
    // What the run wrote, the replay and the check read.
    assert!(dir.path().join("session.jsonl").is_file());
}

#[test]
fn the_block_parser_joins_continuations_and_classifies() {
    let text = "x\n```sh\ndsh run a \\\n    --workspace b\n# note\n```\n```toml\nk = 1\n```\n";
    assert_eq!(
        sh_blocks(text),
        [vec![
            "dsh run a     --workspace b".to_string(),
            "# note".into()
        ]]
    );
    assert_eq!(
        coverage("cargo run -p dsh-cli -- demo"),
        Ok(Coverage::Run("dsh demo".into()))
    );
    assert!(coverage("cargo build --release").is_err());
    assert_eq!(
        coverage("claude mcp add dsh -- dsh serve"),
        Ok(Coverage::ClientConfig)
    );
}
