//! `cargo run --release -p dsh-bench -- NAME...` runs scenario benchmarks and prints one JSON
//! object per figure: `{"bench": NAME, "metric": M, "value": V, "unit": U}`.
//! `-- --list` lists the names; `-- all` runs every one marked for the default run;
//! `-- compare [--baseline FILE] [NAME...]` runs them against `baseline.json` (see `compare`).
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

mod code_bench;
mod compare;
mod fleet_bench;
mod fs_bench;
mod handoff_bench;
mod net_bench;
mod pg_bench;
mod pipeline_bench;
mod report;
mod serve_bench;
mod session_bench;
mod shell_bench;
mod stream_bench;
mod view_bench;

/// One scenario benchmark.
pub struct Bench {
    /// The name the issues give (`session/append`).
    pub name: &'static str,
    /// Included in `all` (long soaks are not).
    pub in_all: bool,
    /// Runs it and emits its figures.
    pub run: fn(),
}

fn benches() -> Vec<&'static Bench> {
    let lists: [&'static [Bench]; 12] = [
        pipeline_bench::BENCHES,
        handoff_bench::BENCHES,
        session_bench::BENCHES,
        fs_bench::BENCHES,
        code_bench::BENCHES,
        shell_bench::BENCHES,
        pg_bench::BENCHES,
        serve_bench::BENCHES,
        fleet_bench::BENCHES,
        stream_bench::BENCHES,
        view_bench::BENCHES,
        net_bench::BENCHES,
    ];
    lists.iter().flat_map(|l| l.iter()).collect()
}

fn main() {
    // `run_code` runs its scripts in this program started again as a worker.
    dsh_code_mode::worker_main_if_requested();
    // `session/postgres_failover` kills a writer of its own: this program started again.
    pg_bench::old_owner_if_requested();
    // `serve/gateway_ratio`'s upstream MCP server is this program started again.
    serve_bench::mcp_test_server_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = benches();
    if args.is_empty() || args.iter().any(|a| a == "--list" || a == "-l") {
        // One bare name a line, for scripts; which ones `all` skips goes to stderr.
        for b in &all {
            report::out(b.name);
        }
        let skipped: Vec<&str> = all.iter().filter(|b| !b.in_all).map(|b| b.name).collect();
        if !skipped.is_empty() {
            eprintln!("not in `all`: {}", skipped.join(", "));
        }
        return;
    }
    if args.first().is_some_and(|a| a == "compare") {
        std::process::exit(compare::run(&args[1..], &all));
    }
    let mut unknown = Vec::new();
    for arg in &args {
        if arg == "all" {
            all.iter().filter(|b| b.in_all).for_each(|b| (b.run)());
            continue;
        }
        match all.iter().find(|b| b.name == arg) {
            Some(b) => (b.run)(),
            None => unknown.push(arg.clone()),
        }
    }
    if !unknown.is_empty() {
        eprintln!("unknown benchmark(s): {} (see --list)", unknown.join(", "));
        std::process::exit(2);
    }
}
