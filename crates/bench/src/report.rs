//! The one output format outside checks read: a JSON object per figure, one per line.
#![allow(dead_code)]

/// Prints `{"bench": NAME, "metric": M, "value": V, "unit": U}`.
#[allow(clippy::print_stdout)]
pub fn emit(bench: &str, metric: &str, value: f64, unit: &str) {
    let line =
        serde_json::json!({ "bench": bench, "metric": metric, "value": value, "unit": unit });
    println!("{line}");
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
