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
mod fleet;
mod harness;
mod net;
mod output;
mod outside_paths;
mod plan;
mod policy_paths;
mod replay;
mod run;
mod serve;
mod serve_refusal;
mod serve_view;
mod serve_watchdog;
mod shell_env;
mod shell_limits;
mod store;
mod tools;
mod view;

use clap::Parser;
use cli::{Cli, Command};
use error::{CliError, EXIT_IO};
use output::{JsonLines, note};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    // `run_code` runs each script in this program started again as a worker: that run ends
    // here, before anything else starts.
    dsh_code_mode::worker_main_if_requested();
    let cli = Cli::parse();
    let telemetry = match init_tracing() {
        Ok(telemetry) => telemetry,
        Err(e) => {
            note(format!("cannot start the OTLP exporter: {e}"));
            return ExitCode::from(EXIT_IO);
        }
    };
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
        Command::Run(args) if args.print_plan => run::print_plan(&args),
        Command::Run(args) if args.dry_run => {
            if args.log.is_some() || args.store.session.is_some() {
                note("--dry-run: the log is not opened or written");
            }
            run::dry_run(
                &rt,
                run::DryRunPlan {
                    transcript: run::TranscriptSource::from_arg(&args.transcript),
                    workspace: &args.workspace,
                    options: &args.options,
                },
                &mut out,
            )
        }
        Command::Run(args) => {
            store::LogTarget::new(args.log.as_ref(), &args.store).and_then(|log| {
                run::run(
                    &rt,
                    run::RunPlan {
                        transcript: run::TranscriptSource::from_arg(&args.transcript),
                        workspace: &args.workspace,
                        log: &log,
                        options: &args.options,
                    },
                    &mut out,
                )
            })
        }
        Command::Replay(args) => store::LogTarget::new(args.log.as_ref(), &args.store)
            .and_then(|log| replay::replay(&rt, &log, args.format.into(), &mut out)),
        Command::Check(args) => store::LogTarget::new(args.log.as_ref(), &args.store)
            .and_then(|log| replay::check(&rt, &log)),
        Command::Recover(args) => store::LogTarget::new(args.log.as_ref(), &args.store)
            .and_then(|log| replay::recover(&rt, &log)),
        Command::Serve(args) => serve::serve(&rt, &args),
        Command::Store(args) => fleet::store_command(&rt, &args),
        Command::Export(args) => {
            store::store_url(&args.store).and_then(|url| store::export(&rt, &url, &args.session))
        }
        Command::Sessions(args) => store::store_url(&args.store).and_then(|url| {
            let action = store::SessionsAction::of(args.prune_older_than, args.release);
            store::sessions(&rt, &url, action, &mut out)
        }),
        Command::Demo(args) => demo::demo(&rt, &args, &mut out),
        Command::Tools(args) => tools::tools(&rt, &args, &mut out),
        Command::View(args) => store::LogTarget::new(args.log.as_ref(), &args.store)
            .and_then(|log| view::view(&rt, view::ViewPlan::from_args(&log, &args))),
    };
    // An approval prompt abandoned at its timeout still waits on stdin in a blocking thread;
    // dropping the runtime would wait for it, so stop waiting after a moment.
    rt.shutdown_timeout(Duration::from_millis(200));
    telemetry.finish();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            note(&e);
            ExitCode::from(e.exit_code())
        }
    }
}

/// Library diagnostics go to stderr only when asked for with `RUST_LOG`, so that the normal
/// output stays the one-line messages of this program. Built with the `otlp` feature, the
/// pipeline's spans are also exported when an OTLP endpoint variable is set.
fn init_tracing() -> Result<Telemetry, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let fmt = std::env::var_os("RUST_LOG").is_some().then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::from_default_env())
    });
    let telemetry = Telemetry::from_env()?;
    let otel = telemetry.layer();
    if fmt.is_some() || otel.is_some() {
        let _ = tracing_subscriber::registry()
            .with(fmt)
            .with(otel)
            .try_init();
    }
    Ok(telemetry)
}

/// The OTLP exporter, when this build has one and the environment names an endpoint.
struct Telemetry {
    #[cfg(feature = "otlp")]
    inner: Option<dsh_otel::Telemetry>,
}

impl Telemetry {
    #[cfg(feature = "otlp")]
    fn from_env() -> Result<Telemetry, String> {
        let inner = dsh_otel::Telemetry::otlp_from_env().map_err(|e| e.to_string())?;
        Ok(Telemetry { inner })
    }

    #[cfg(not(feature = "otlp"))]
    fn from_env() -> Result<Telemetry, String> {
        Ok(Telemetry {})
    }

    #[cfg(feature = "otlp")]
    fn layer<S>(&self) -> Option<impl tracing_subscriber::Layer<S> + use<S>>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        self.inner
            .as_ref()
            .map(|t| t.layer().with_filter(dsh_otel::dsh_targets()))
    }

    #[cfg(not(feature = "otlp"))]
    fn layer(&self) -> Option<tracing_subscriber::layer::Identity> {
        None
    }

    /// Sends what is still batched; a collector that is down costs a note, not the run's result.
    fn finish(self) {
        #[cfg(feature = "otlp")]
        if let Some(inner) = self.inner
            && let Err(e) = inner.shutdown()
        {
            note(format!("OTLP export: {e}"));
        }
    }
}
