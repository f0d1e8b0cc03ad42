//! `dsh`: runs recorded model tool calls through the dsh pipeline, and replays and checks the
//! session log. See `dsh --help`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod approve;
mod cli;
mod demo;
mod error;
mod harness;
mod output;
mod replay;
mod run;

use clap::Parser;
use cli::{Cli, Command};
use error::{CliError, EXIT_IO};
use output::{JsonLines, note};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            note(format!("cannot start the async runtime: {e}"));
            return ExitCode::from(EXIT_IO);
        }
    };
    let mut out = JsonLines::default();
    let result: Result<u8, CliError> = match cli.command {
        Command::Run(args) => run::run(
            &rt,
            run::RunPlan {
                transcript: run::TranscriptSource::from_arg(&args.transcript),
                workspace: &args.workspace,
                log: &args.log,
                options: &args.options,
            },
            &mut out,
        ),
        Command::Replay(args) => replay::replay(&args.log, args.format.into(), &mut out),
        Command::Check(args) => replay::check(&args.log),
        Command::Demo(args) => demo::demo(&rt, &args, &mut out),
    };
    // An approval prompt abandoned at its timeout still waits on stdin in a blocking thread;
    // dropping the runtime would wait for it, so stop waiting after a moment.
    rt.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            note(&e);
            ExitCode::from(e.exit_code())
        }
    }
}

/// Library diagnostics go to stderr only when asked for with `RUST_LOG`, so that the normal
/// output stays the one-line messages of this program.
fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
}
