//! `dsh-bench compare [--baseline FILE] [NAME...]`: runs the named benches (all those in the
//! baseline when none is named) and prints each figure against the baseline
//! (`crates/bench/baseline.json` unless told), with the ratio, marking those more than 25 %
//! worse. Direction-aware: for a rate (`…/s`) higher is better; for times, sizes and ratios
//! lower is better; counts that only describe the run (files matched, calls made) are shown
//! without a verdict. Exits 1 when some figure is marked worse, 2 on a usage error.
//!
//! The baseline is `{"machine": "...", "date": "...", "figures": [{"bench", "metric",
//! "value", "unit"}...]}`: the figures as plain runs print them. Timings on a shared machine
//! are noise: not for CI, but for notes that touch a hot path to quote.

use crate::Bench;
use crate::report::{Figure, captured, out};
use serde_json::Value;

/// How much worse than the baseline a figure may be before it is marked.
const TOLERANCE: f64 = 0.25;

/// The baseline committed beside this crate.
const DEFAULT_BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/baseline.json");

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
    /// Describes the run; no verdict.
    Neither,
}

fn better(figure: &Figure) -> Better {
    let unit = figure.unit.as_str();
    if unit.ends_with("/s") || figure.metric.ends_with("_per_s") || unit == "%" {
        return Better::Higher;
    }
    if figure.metric.contains("saved") || figure.metric.contains("share") {
        return Better::Higher;
    }
    match unit {
        "files" | "calls" | "results" | "events" | "actors" | "MB" => Better::Neither,
        _ => Better::Lower,
    }
}

/// `new / old` and whether that is more than [`TOLERANCE`] worse.
fn verdict(old: &Figure, new: f64) -> (f64, bool) {
    let ratio = new / old.value;
    let worse = match better(old) {
        Better::Higher => ratio < 1.0 / (1.0 + TOLERANCE),
        Better::Lower => ratio > 1.0 + TOLERANCE,
        Better::Neither => false,
    };
    (ratio, worse || !new.is_finite())
}

fn read_baseline(path: &str) -> Result<(String, Vec<Figure>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let machine = format!(
        "{} ({})",
        doc["machine"].as_str().unwrap_or("an unnamed machine"),
        doc["date"].as_str().unwrap_or("undated")
    );
    let figures = doc["figures"]
        .as_array()
        .ok_or_else(|| format!("{path} has no `figures` list"))?
        .iter()
        .filter_map(|f| {
            Some(Figure {
                bench: f["bench"].as_str()?.to_string(),
                metric: f["metric"].as_str()?.to_string(),
                value: f["value"].as_f64()?,
                unit: f["unit"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect();
    Ok((machine, figures))
}

/// Runs `dsh-bench compare ARGS`; answers the exit code.
pub fn run(args: &[String], all: &[&'static Bench]) -> i32 {
    let mut baseline = DEFAULT_BASELINE.to_string();
    let mut names: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--baseline" => match args.next() {
                Some(path) => baseline = path.clone(),
                None => {
                    eprintln!("--baseline needs a file");
                    return 2;
                }
            },
            name => names.push(name.to_string()),
        }
    }
    let (machine, figures) = match read_baseline(&baseline) {
        Ok(read) => read,
        Err(why) => {
            eprintln!("{why}");
            return 2;
        }
    };
    if names.is_empty() {
        for f in &figures {
            if !names.contains(&f.bench) {
                names.push(f.bench.clone());
            }
        }
    }
    let mut runs = Vec::new();
    for name in &names {
        match all.iter().find(|b| b.name == name) {
            Some(b) => runs.push(*b),
            None => {
                eprintln!("unknown benchmark: {name} (see --list)");
                return 2;
            }
        }
    }
    out(&format!("baseline: {baseline}, from {machine}"));
    out(&format!(
        "{:<28} {:<30} {:>14} {:>14} {:>8}  verdict",
        "bench", "metric", "baseline", "now", "ratio"
    ));
    let mut marked = 0;
    for bench in runs {
        let now = captured(|| (bench.run)());
        for figure in &now {
            let old = figures
                .iter()
                .find(|o| o.bench == figure.bench && o.metric == figure.metric);
            let line = match old {
                None => format!(
                    "{:<28} {:<30} {:>14} {:>14.3} {:>8}  new (not in the baseline)",
                    figure.bench, figure.metric, "-", figure.value, "-"
                ),
                Some(old) => {
                    let (ratio, worse) = verdict(old, figure.value);
                    marked += usize::from(worse);
                    let word = match (worse, better(old)) {
                        (true, _) => "WORSE (> 25 %)",
                        (false, Better::Neither) => "(describes the run)",
                        (false, Better::Higher) => "ok (higher is better)",
                        (false, Better::Lower) => "ok (lower is better)",
                    };
                    format!(
                        "{:<28} {:<30} {:>14.3} {:>14.3} {:>8.3}  {word}",
                        figure.bench, figure.metric, old.value, figure.value, ratio
                    )
                }
            };
            out(&line);
        }
    }
    out(&format!("{marked} figure(s) more than 25 % worse"));
    i32::from(marked > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(metric: &str, value: f64, unit: &str) -> Figure {
        Figure {
            bench: "b".into(),
            metric: metric.into(),
            value,
            unit: unit.into(),
        }
    }

    #[test]
    fn rates_are_worse_lower_and_times_worse_higher() {
        let rate = figure("calls_per_s", 100_000.0, "calls/s");
        assert!(verdict(&rate, 70_000.0).1);
        assert!(!verdict(&rate, 90_000.0).1);
        assert!(!verdict(&rate, 300_000.0).1);
        let time = figure("p50_us", 20.0, "us");
        assert!(verdict(&time, 26.0).1);
        assert!(!verdict(&time, 24.0).1);
        assert!(!verdict(&time, 5.0).1);
        let count = figure("files_matched", 10.0, "files");
        assert!(!verdict(&count, 100.0).1);
        assert!(verdict(&time, f64::NAN).1);
    }
}
