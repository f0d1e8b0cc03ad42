//! The one output format outside checks read: a JSON object per figure, one per line.
#![allow(dead_code)]

/// Prints `{"bench": NAME, "metric": M, "value": V, "unit": U}`, keys in that order.
#[allow(clippy::print_stdout)]
pub fn emit(bench: &str, metric: &str, value: f64, unit: &str) {
    let s = |v: &str| serde_json::Value::from(v).to_string();
    // A figure that is not finite is not JSON; it is reported as null rather than dropped.
    let value = if value.is_finite() {
        serde_json::Value::from(value).to_string()
    } else {
        "null".to_string()
    };
    println!(
        "{{\"bench\": {}, \"metric\": {}, \"value\": {value}, \"unit\": {}}}",
        s(bench),
        s(metric),
        s(unit)
    );
}

/// The `q`-quantile (0..=1) of `samples` (sorted in place).
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let idx = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[idx.min(samples.len() - 1)]
}
