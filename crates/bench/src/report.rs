//! The one output format outside checks read: a JSON object per figure, one per line.
#![allow(dead_code)]

/// One figure as emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub bench: String,
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

/// Where figures go instead of stdout while `dsh-bench compare` runs benches.
static CAPTURE: std::sync::Mutex<Option<Vec<Figure>>> = std::sync::Mutex::new(None);

/// Runs `f`, answering the figures it emitted instead of printing them.
pub fn captured(f: impl FnOnce()) -> Vec<Figure> {
    *CAPTURE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    f();
    CAPTURE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default()
}

/// Prints `{"bench": NAME, "metric": M, "value": V, "unit": U}`, keys in that order.
pub fn emit(bench: &str, metric: &str, value: f64, unit: &str) {
    if let Some(figures) = CAPTURE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        figures.push(Figure {
            bench: bench.to_string(),
            metric: metric.to_string(),
            value,
            unit: unit.to_string(),
        });
        return;
    }
    let s = |v: &str| serde_json::Value::from(v).to_string();
    // A figure that is not finite is not JSON; it is reported as null rather than dropped.
    let value = if value.is_finite() {
        serde_json::Value::from(value).to_string()
    } else {
        "null".to_string()
    };
    let line = format!(
        "{{\"bench\": {}, \"metric\": {}, \"value\": {value}, \"unit\": {}}}",
        s(bench),
        s(metric),
        s(unit)
    );
    out(&line);
}

/// Writes one line to stdout and flushes it, so a reader sees each figure as it is measured.
/// A reader that has gone away (`| head`) ends the run quietly instead of with a panic.
pub fn out(line: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(0);
    }
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
