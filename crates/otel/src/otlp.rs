//! OTLP export over HTTP/protobuf (feature `otlp`).
//!
//! The exporter is `opentelemetry-otlp`'s HTTP exporter with a blocking client; it runs on
//! the batch processor's own thread, so it needs no async runtime and never holds up the
//! pipeline. It reads the standard variables: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full
//! URL) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` is added), by default
//! `http://localhost:4318/v1/traces`; `OTEL_EXPORTER_OTLP_HEADERS` (and `..._TRACES_HEADERS`),
//! `OTEL_EXPORTER_OTLP_TIMEOUT`; and `OTEL_SERVICE_NAME` for the resource. The transport is
//! always HTTP/protobuf (`OTEL_EXPORTER_OTLP_PROTOCOL` is not read), over plain `http://`.

use crate::{Export, OtelError, Telemetry};
use opentelemetry_otlp::{Protocol, WithExportConfig};

/// The variables that name an OTLP endpoint; [`Telemetry::otlp_from_env`] exports only when
/// one of them is set.
pub const OTLP_ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether one of [`OTLP_ENDPOINT_VARS`] is set (and not empty).
///
/// ```
/// let configured = dsh_otel::otlp_endpoint_configured();
/// assert_eq!(configured, std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some_and(|v| !v.is_empty())
///     || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some_and(|v| !v.is_empty()));
/// ```
pub fn otlp_endpoint_configured() -> bool {
    OTLP_ENDPOINT_VARS
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

fn exporter(endpoint: Option<&str>) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
    let builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    let builder = match endpoint {
        Some(url) => builder.with_endpoint(url),
        None => builder,
    };
    builder
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))
}

impl Telemetry {
    /// Exports over OTLP (HTTP/protobuf, in batches) to the endpoint the standard variables
    /// name, or to `http://localhost:4318/v1/traces`.
    ///
    /// ```no_run
    /// use tracing_subscriber::{Layer as _, layer::SubscriberExt, util::SubscriberInitExt};
    /// let telemetry = dsh_otel::Telemetry::otlp()?;
    /// tracing_subscriber::registry()
    ///     .with(telemetry.layer().with_filter(dsh_otel::dsh_targets()))
    ///     .init();
    /// // ... run sessions ...
    /// telemetry.shutdown()?;
    /// # Ok::<(), dsh_otel::OtelError>(())
    /// ```
    pub fn otlp() -> Result<Telemetry, OtelError> {
        Ok(Telemetry::with_exporter(exporter(None)?, Export::Batch))
    }

    /// Exports over OTLP to `traces_url`, the full URL of the traces endpoint (for example
    /// `http://collector:4318/v1/traces`), whatever the variables say.
    pub fn otlp_to(traces_url: &str) -> Result<Telemetry, OtelError> {
        Ok(Telemetry::with_exporter(
            exporter(Some(traces_url))?,
            Export::Batch,
        ))
    }

    /// [`Telemetry::otlp`] when one of [`OTLP_ENDPOINT_VARS`] is set, `None` otherwise: a
    /// program built with the feature exports only where it is asked to.
    pub fn otlp_from_env() -> Result<Option<Telemetry>, OtelError> {
        if otlp_endpoint_configured() {
            Telemetry::otlp().map(Some)
        } else {
            Ok(None)
        }
    }
}
