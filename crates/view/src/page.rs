//! The page itself: the template, the header's figures as escaped HTML, the data as JSON a
//! script block cannot be broken out of, and the Content-Security-Policy that names the
//! page's own script and style by hash.

use crate::model::{Limits, SessionView};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::OnceLock;

const TEMPLATE: &str = include_str!("../assets/page.html");
const STYLE: &str = include_str!("../assets/page.css");
const SCRIPT: &str = include_str!("../assets/page.js");

/// How the page is made.
#[derive(Debug, Clone)]
pub struct PageOptions {
    /// What the page is of (the log's path, or the session's name): shown, escaped.
    pub title: String,
    /// The caps on what the page holds.
    pub limits: Limits,
    /// Reload the page every so many seconds (a live session); `None` for a file.
    pub reload_secs: Option<u32>,
}

impl PageOptions {
    /// A page of `title` with the default caps, not reloading.
    pub fn new(title: impl Into<String>) -> PageOptions {
        PageOptions {
            title: title.into(),
            limits: Limits::default(),
            reload_secs: None,
        }
    }
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, for HTML text and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that can sit inside `<script type="application/json">`: `<`, `>` and `&` are written
/// as `\u003c`, `\u003e`, `\u0026` (the same string to `JSON.parse`), so no `</script>` or
/// `<!--` in the data can end the block.
pub fn json_for_script(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

fn sha256_b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
}

/// The page's policy: nothing from anywhere, but its own script and style (by hash).
fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
             img-src 'none'; base-uri 'none'; form-action 'none'",
            sha256_b64(SCRIPT),
            sha256_b64(STYLE)
        )
    })
}

/// The whole page of `view`.
pub fn render_page(view: &SessionView, options: &PageOptions) -> String {
    let data = serde_json::to_string(view).unwrap_or_else(|_| "{}".into());
    let data = json_for_script(&data);
    let refresh = match options.reload_secs {
        Some(secs) => format!("<meta http-equiv=\"refresh\" content=\"{secs}\">\n"),
        None => String::new(),
    };
    let title = escape_html(&options.title);
    let figures = figures_html(view);
    let legend = legend_html(view);
    let mut out = String::with_capacity(TEMPLATE.len() + STYLE.len() + SCRIPT.len() + data.len());
    // One pass over the template: what is put in is never scanned for markers again.
    let mut rest = TEMPLATE;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        match &after[..close] {
            "CSP" => out.push_str(csp()),
            "REFRESH" => out.push_str(&refresh),
            "TITLE" => out.push_str(&title),
            "STYLE" => out.push_str(STYLE),
            "FIGURES" => out.push_str(&figures),
            "LEGEND" => out.push_str(&legend),
            "DATA" => out.push_str(&data),
            "SCRIPT" => out.push_str(SCRIPT),
            other => {
                out.push_str("{{");
                out.push_str(other);
                out.push_str("}}");
            }
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

fn fig(out: &mut String, id: &str, value: &str, label: &str) {
    let _ = write!(
        out,
        "<div class=\"fig\" id=\"fig-{id}\"><b>{}</b><span>{}</span></div>",
        escape_html(value),
        escape_html(label)
    );
}

fn format_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.2} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

fn figures_html(view: &SessionView) -> String {
    let f = &view.figures;
    let mut out = String::from("<div class=\"figures\">");
    fig(&mut out, "steps", &f.steps.to_string(), "steps");
    fig(&mut out, "calls", &f.calls.to_string(), "calls");
    if f.subcalls > 0 {
        fig(
            &mut out,
            "subcalls",
            &f.subcalls.to_string(),
            "run_code sub-calls",
        );
    }
    fig(&mut out, "denials", &f.denials.to_string(), "denied");
    match f.wall_ms {
        Some(ms) => fig(&mut out, "wall", &format_ms(ms), "wall time"),
        None => fig(&mut out, "wall", "–", "wall time (the log has no times)"),
    }
    fig(
        &mut out,
        "tools-used",
        &f.tools.len().to_string(),
        "tools used",
    );
    if !f.hosts.is_empty() {
        fig(
            &mut out,
            "hosts",
            &f.hosts.len().to_string(),
            "hosts reached",
        );
    }
    out.push_str("</div><div class=\"chips\" id=\"outcomes\">");
    for (outcome, n) in &f.outcomes {
        let _ = write!(
            out,
            "<span class=\"chip o-{}\" data-outcome=\"{}\">{} {}</span>",
            escape_html(outcome),
            escape_html(outcome),
            escape_html(outcome),
            n
        );
    }
    out.push_str("</div><div class=\"chips\" id=\"tools\">");
    for (tool, n) in &f.tools {
        let _ = write!(
            out,
            "<span class=\"chip tool\">{} ×{}</span>",
            escape_html(tool),
            n
        );
    }
    out.push_str("</div>");
    if !f.hosts.is_empty() {
        out.push_str("<div class=\"chips\" id=\"hosts\">");
        for host in &f.hosts {
            let _ = write!(
                out,
                "<span class=\"chip tool\">{}</span>",
                escape_html(host)
            );
        }
        out.push_str("</div>");
    }
    if view.omitted_calls > 0 {
        let _ = write!(
            out,
            "<div class=\"note\" id=\"omitted\">This page leaves out {} calls past its caps \
             (the figures above count them).</div>",
            view.omitted_calls
        );
    }
    if view.cut_fields > 0 {
        let _ = write!(
            out,
            "<div class=\"note\" id=\"cut\">{} fields are cut to the page's per-field cap; each \
             says how much.</div>",
            view.cut_fields
        );
    }
    if view.bad_lines > 0 {
        let _ = write!(
            out,
            "<div class=\"note\" id=\"bad-lines\">{} lines of the log are not events and are not \
             shown.</div>",
            view.bad_lines
        );
    }
    if !view.timed {
        out.push_str(
            "<div class=\"note\" id=\"untimed\">The log has no times: each step's calls are \
             shown in log order, not on a clock.</div>",
        );
    }
    out
}

fn legend_html(view: &SessionView) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for outcome in view.figures.outcomes.keys() {
        let _ = write!(
            out,
            "<span><i class=\"o-{}\"></i>{}</span>",
            escape_html(outcome),
            escape_html(outcome)
        );
    }
    out.push_str("</div>");
    out
}
