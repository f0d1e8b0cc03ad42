//! # dsh-otel
//!
//! OpenTelemetry export of dsh's tracing spans. The pipeline already emits `tracing` spans
//! that follow OpenTelemetry's GenAI conventions (`dsh-scheduler`'s telemetry): one
//! `execute_tool` span per call, exported under the name `execute_tool {tool}`, kind
//! internal, with `gen_ai.operation.name = "execute_tool"`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id` and, when the result is an error, `error.type` (the error code);
//! its children are the phases `prepare`, `dispatch` and `finalize`. This crate bridges
//! them to OpenTelemetry with `tracing-opentelemetry` and the OpenTelemetry SDK:
//!
//! - [`Telemetry`] owns a tracer provider whose spans pass through [`ErrorStatus`] (a span
//!   with `error.type` gets the status `Error`, as the conventions ask) on their way to an
//!   exporter, and hands out the `tracing_subscriber` layer ([`Telemetry::layer`]).
//! - [`dsh_targets`] is the filter that keeps that layer to dsh's own spans and events.
//! - With the `otlp` feature (off by default), `Telemetry::otlp` and
//!   `Telemetry::otlp_from_env` export over OTLP (HTTP/protobuf), configured by the
//!   standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! Without the `otlp` feature the crate has no exporter of its own: give [`Telemetry`] any
//! `opentelemetry_sdk` span exporter.
//!
//! ```
//! use dsh_otel::{Export, Telemetry};
//! use opentelemetry_sdk::trace::InMemorySpanExporter;
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::Layer as _;
//!
//! let exporter = InMemorySpanExporter::default();
//! let telemetry = Telemetry::with_exporter(exporter.clone(), Export::Simple);
//! let subscriber = tracing_subscriber::registry()
//!     .with(telemetry.layer().with_filter(dsh_otel::dsh_targets()));
//! tracing::subscriber::with_default(subscriber, || {
//!     // What dsh-scheduler's telemetry emits for a call of `read_file` that failed:
//!     let span = tracing::info_span!(target: "dsh_scheduler::telemetry", "execute_tool",
//!         otel.name = "execute_tool read_file", otel.kind = "internal",
//!         gen_ai.operation.name = "execute_tool", gen_ai.tool.name = "read_file",
//!         gen_ai.tool.call.id = "call_1", error.type = tracing::field::Empty);
//!     span.record("error.type", "TOOL_ERROR");
//! });
//! telemetry.flush()?;
//! let spans = exporter.get_finished_spans()?;
//! assert_eq!(spans[0].name, "execute_tool read_file");
//! assert_eq!(spans[0].status, opentelemetry::trace::Status::error("TOOL_ERROR"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{Context, Key, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use std::time::Duration;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

pub use opentelemetry_sdk;

/// The instrumentation scope of dsh's spans.
pub const SCOPE_NAME: &str = "dsh";

/// The `service.name` of the exported spans, unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` names another.
pub const DEFAULT_SERVICE_NAME: &str = "dsh";

/// The span attribute whose presence marks a failed call (the GenAI conventions' `error.type`).
pub const ERROR_TYPE: &str = "error.type";

/// A failure to flush or shut down the export, or to set up the OTLP exporter.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The exporter could not be built (a bad endpoint, a client that would not start).
    #[error("OpenTelemetry exporter: {0}")]
    Exporter(String),
    /// Flushing or shutting down the spans' export failed.
    #[error("OpenTelemetry export: {0}")]
    Export(String),
}

/// How finished spans reach the exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Export {
    /// In batches, from a background thread of the SDK: the pipeline never waits on the
    /// exporter. For network exporters.
    #[default]
    Batch,
    /// Each span as it ends, on the thread that ends it. For tests and in-memory exporters.
    Simple,
}

/// A span processor that gives every span carrying `error.type` the status `Error` (with
/// the error type as its description, unless the span set a status of its own), then hands
/// it on.
///
/// dsh's spans record the error code as `error.type`; OpenTelemetry's conventions also ask
/// for the span status `Error` on a failed operation, which back ends use to count failures.
///
/// ```
/// use dsh_otel::ErrorStatus;
/// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SimpleSpanProcessor};
/// use opentelemetry::trace::{Span as _, Status, Tracer as _, TracerProvider as _};
/// use opentelemetry::KeyValue;
///
/// let exporter = InMemorySpanExporter::default();
/// let provider = SdkTracerProvider::builder()
///     .with_span_processor(ErrorStatus::new(SimpleSpanProcessor::new(exporter.clone())))
///     .build();
/// let mut span = provider.tracer("t").start("execute_tool x");
/// span.set_attribute(KeyValue::new("error.type", "TOOL_TIMEOUT"));
/// span.end();
/// assert_eq!(exporter.get_finished_spans()?[0].status, Status::error("TOOL_TIMEOUT"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ErrorStatus<P> {
    next: P,
}

impl<P> ErrorStatus<P> {
    /// Wraps the processor the spans go on to.
    pub fn new(next: P) -> ErrorStatus<P> {
        ErrorStatus { next }
    }
}

fn error_type(span: &SpanData) -> Option<&Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == ERROR_TYPE)
        .map(|kv| &kv.value)
}

impl<P: SpanProcessor> SpanProcessor for ErrorStatus<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        if span.status == Status::Unset
            && let Some(kind) = error_type(&span)
        {
            span.status = Status::error(kind.as_str().into_owned());
        }
        self.next.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.next.set_resource(resource);
    }
}

/// The resource the spans are exported with: the SDK's detectors (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own attributes), with `service.name`
/// [`DEFAULT_SERVICE_NAME`] where neither variable names a service.
///
/// ```
/// let resource = dsh_otel::resource();
/// let name = resource.get(&opentelemetry::Key::new("service.name")).unwrap();
/// assert!(!name.as_str().starts_with("unknown_service"));
/// ```
pub fn resource() -> Resource {
    let detected = Resource::builder().build();
    let unnamed = detected
        .get(&Key::new("service.name"))
        .is_none_or(|name| name.as_str().starts_with("unknown_service"));
    if unnamed {
        Resource::builder()
            .with_service_name(DEFAULT_SERVICE_NAME)
            .build()
    } else {
        detected
    }
}

/// The filter for [`Telemetry::layer`] that keeps dsh's own spans and events (targets
/// `dsh*`, at `INFO` and above) and leaves out those of its dependencies (rmcp, ractor,
/// the OTLP client's HTTP stack).
///
/// ```
/// use tracing::{Level, Metadata};
/// let targets = dsh_otel::dsh_targets();
/// assert!(targets.would_enable("dsh_scheduler::telemetry", &Level::INFO));
/// assert!(!targets.would_enable("dsh_scheduler::telemetry", &Level::DEBUG));
/// assert!(!targets.would_enable("rmcp::service", &Level::INFO));
/// ```
pub fn dsh_targets() -> Targets {
    Targets::new().with_target("dsh", tracing::Level::INFO)
}

/// An OpenTelemetry export of dsh's spans: the tracer provider, and the layer that feeds it.
///
/// Keep it for as long as spans should be exported, and call [`Telemetry::shutdown`] or
/// drop it at the end: that exports what is still queued and stops the export. (The layer
/// holds a tracer of the provider, so a layer left in a global subscriber alone would never
/// flush it.)
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    shut_down: bool,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if !self.shut_down {
            let _ = self.provider.shutdown();
        }
    }
}

impl Telemetry {
    /// Export through `exporter`, with [`ErrorStatus`] in front of it and the [`resource`].
    pub fn with_exporter<E: SpanExporter + 'static>(exporter: E, export: Export) -> Telemetry {
        let builder = SdkTracerProvider::builder().with_resource(resource());
        let builder = match export {
            Export::Batch => builder.with_span_processor(ErrorStatus::new(
                BatchSpanProcessor::builder(exporter).build(),
            )),
            Export::Simple => builder.with_span_processor(ErrorStatus::new(
                opentelemetry_sdk::trace::SimpleSpanProcessor::new(exporter),
            )),
        };
        Telemetry::from_provider(builder.build())
    }

    /// Export through a provider built elsewhere (its processors are used as they are; wrap
    /// them in [`ErrorStatus`] to get the error status).
    pub fn from_provider(provider: SdkTracerProvider) -> Telemetry {
        Telemetry {
            provider,
            shut_down: false,
        }
    }

    /// The provider.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// A tracer of the provider, for the [`SCOPE_NAME`] scope.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer(SCOPE_NAME)
    }

    /// The `tracing_subscriber` layer that turns tracing spans into OpenTelemetry spans:
    /// `otel.name` is the span's name, `otel.kind` its kind, every other field an attribute,
    /// and a span's parent its OpenTelemetry parent. Add [`dsh_targets`] as its filter to
    /// export only dsh's spans.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer())
    }

    /// Exports every span that has ended and not been exported yet.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.provider
            .force_flush()
            .map_err(|e| OtelError::Export(e.to_string()))
    }

    /// Exports what is left and stops the export (waiting up to 5 s for the exporter).
    /// Spans that end later are dropped.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shut_down = true;
        self.provider
            .shutdown()
            .map_err(|e| OtelError::Export(e.to_string()))
    }
}

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "otlp")]
pub use otlp::{OTLP_ENDPOINT_VARS, otlp_endpoint_configured};

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{Span as _, Tracer as _};
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    fn exported(build: impl FnOnce(&SdkTracer)) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let telemetry = Telemetry::with_exporter(exporter.clone(), Export::Simple);
        build(&telemetry.tracer());
        telemetry.flush().unwrap();
        exporter.get_finished_spans().unwrap()
    }

    #[test]
    fn error_type_gives_the_error_status_and_an_explicit_status_stays() {
        let spans = exported(|tracer| {
            let mut plain = tracer.start("plain");
            plain.end();
            let mut failed = tracer.start("failed");
            failed.set_attribute(KeyValue::new(ERROR_TYPE, "DENIED"));
            failed.end();
            let mut explicit = tracer.start("explicit");
            explicit.set_attribute(KeyValue::new(ERROR_TYPE, "DENIED"));
            explicit.set_status(Status::Ok);
            explicit.end();
        });
        let status = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.status.clone())
                .unwrap()
        };
        assert_eq!(status("plain"), Status::Unset);
        assert_eq!(status("failed"), Status::error("DENIED"));
        assert_eq!(status("explicit"), Status::Ok);
    }

    #[test]
    fn batches_are_exported_on_flush_and_on_shutdown() {
        let exporter = InMemorySpanExporter::default();
        let telemetry = Telemetry::with_exporter(exporter.clone(), Export::Batch);
        telemetry.tracer().start("first").end();
        telemetry.flush().unwrap();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
        telemetry.tracer().start("second").end();
        telemetry.shutdown().unwrap();
        assert!(exporter.is_shutdown_called());
    }

    #[test]
    fn the_service_is_named_dsh_unless_the_environment_names_one() {
        let name = resource()
            .get(&Key::new("service.name"))
            .map(|v| v.as_str().into_owned())
            .unwrap();
        match std::env::var("OTEL_SERVICE_NAME") {
            Ok(set) if !set.is_empty() => assert_eq!(name, set),
            _ if std::env::var("OTEL_RESOURCE_ATTRIBUTES")
                .is_ok_and(|a| a.contains("service.name")) => {}
            _ => assert_eq!(name, DEFAULT_SERVICE_NAME),
        }
    }
}
