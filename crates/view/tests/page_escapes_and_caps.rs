//! The page without a browser: nothing from the log becomes markup, the data reads back as the
//! log had it, the policy names exactly the page's own script and style, and a huge log is cut
//! to the caps, with the figures still counting everything.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use dsh_core::event::{
    CodeDispatchData, EventBody, SessionEvent, ToolCallData, ToolResultData, UserMessageData,
};
use dsh_core::{ContentBlock, ErrorCode, ToolError};
use dsh_view::{Limits, PageOptions, render_events};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const HOSTILE: &str = "</script><script>alert(1)</script><img src=x onerror=alert(2)><!--";

fn call(seq: u64, step: u64, id: &str, name: &str, at: Option<u64>) -> SessionEvent {
    SessionEvent {
        seq,
        step,
        at,
        body: EventBody::ToolCall(ToolCallData {
            call_id: id.into(),
            name: name.into(),
            arguments: json!({ "path": HOSTILE }),
            arguments_text: None,
            agent: "main".into(),
            parent: None,
        }),
    }
}

fn result(seq: u64, step: u64, id: &str, text: &str, error: Option<ToolError>) -> SessionEvent {
    SessionEvent {
        seq,
        step,
        at: None,
        body: EventBody::result(
            ToolResultData {
                call_id: id.into(),
                message: vec![ContentBlock::text(text)],
                error,
                meta: None,
                started_at: None,
            },
            seq - 1,
        ),
    }
}

/// The JSON the page carries, read back.
fn data_of(page: &str) -> Value {
    let start = page.find("id=\"dsh-data\">").unwrap() + "id=\"dsh-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

fn between<'a>(page: &'a str, open: &str, close: &str) -> &'a str {
    let start = page.find(open).unwrap() + open.len();
    &page[start..start + page[start..].find(close).unwrap()]
}

#[test]
fn every_string_from_the_log_stays_text() {
    let events = vec![
        call(1, 1, HOSTILE, HOSTILE, None),
        result(
            2,
            1,
            HOSTILE,
            HOSTILE,
            Some(ToolError::new(ErrorCode::Denied, HOSTILE)),
        ),
        SessionEvent {
            seq: 3,
            step: 1,
            at: None,
            body: EventBody::CodeDispatch(CodeDispatchData {
                call_id: "d1".into(),
                parent_call_id: HOSTILE.into(),
                name: HOSTILE.into(),
                arguments: json!(HOSTILE),
                message: vec![ContentBlock::text(HOSTILE)],
                error: None,
            }),
        },
        SessionEvent {
            seq: 4,
            step: 1,
            at: None,
            body: EventBody::UserMessage(UserMessageData {
                content: HOSTILE.into(),
                origin: HOSTILE.into(),
            }),
        },
    ];
    let page = render_events(events, &PageOptions::new(HOSTILE));
    // Only the page's own two script elements and no image at all.
    assert_eq!(page.matches("<script").count(), 2, "{page}");
    assert!(!page.contains("<img"));
    assert!(!page.contains("<!--"));
    assert!(!page.contains("alert(1)</script>"));
    // The title and the tool chips are escaped text.
    assert!(page.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
    // The data reads back exactly as the log had it.
    let data = data_of(&page);
    let c = &data["calls"][0];
    assert_eq!(c["name"], HOSTILE);
    assert_eq!(c["id"], HOSTILE);
    assert_eq!(c["result"], HOSTILE);
    assert_eq!(c["reason"], HOSTILE);
    assert_eq!(c["outcome"], "DENIED");
    assert_eq!(
        serde_json::from_str::<Value>(c["args"].as_str().unwrap()).unwrap()["path"],
        HOSTILE
    );
    let sub = &data["calls"][1];
    assert_eq!(sub["sub"], true);
    assert_eq!(
        c["children"],
        json!([1]),
        "the sub-call sits under its parent"
    );
    assert_eq!(data["steps"][0]["context"][0]["content"], HOSTILE);
    assert_eq!(data["figures"]["denials"], 1);
}

#[test]
fn the_policy_names_the_pages_own_script_and_style_and_nothing_else() {
    let page = render_events(Vec::new(), &PageOptions::new("empty"));
    let csp = between(
        &page,
        "http-equiv=\"Content-Security-Policy\" content=\"",
        "\"",
    );
    let hash = |text: &str| {
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
    };
    let script = between(&page, "<script>", "</script>");
    let style = between(&page, "<style>", "</style>");
    assert!(csp.starts_with("default-src 'none';"), "{csp}");
    assert!(
        csp.contains(&format!("script-src 'sha256-{}';", hash(script))),
        "{csp}"
    );
    assert!(
        csp.contains(&format!("style-src 'sha256-{}';", hash(style))),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    // Nothing is fetched: no URL anywhere in the page's markup.
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
}

#[test]
fn a_huge_log_is_cut_to_the_caps_and_the_figures_count_everything() {
    let limits = Limits {
        field_bytes: 1000,
        max_calls: 100,
        data_bytes: 1 << 20,
    };
    let mut events = Vec::new();
    let mut seq = 0;
    for step in 1..=300u64 {
        seq += 1;
        events.push(call(seq, step, "c", "read_file", Some(1000 + seq)));
        seq += 1;
        let text = if step == 1 {
            "y".repeat(50_000)
        } else {
            "ok".into()
        };
        events.push(result(seq, step, "c", &text, None));
    }
    let mut options = PageOptions::new("huge");
    options.limits = limits;
    let page = render_events(events, &options);
    let data = data_of(&page);
    assert_eq!(data["figures"]["calls"], 300);
    assert_eq!(data["figures"]["outcomes"]["ok"], 300);
    assert_eq!(data["calls"].as_array().unwrap().len(), 100);
    assert_eq!(data["omitted_calls"], 200);
    assert!(page.contains("This page leaves out 200 calls"));
    let first = data["calls"][0]["result"].as_str().unwrap();
    assert!(first.len() < 1100, "{}", first.len());
    assert!(
        first.ends_with("[dsh view: 49000 more bytes not shown]"),
        "{first}"
    );
    assert_eq!(data["timed"], true);
}

#[test]
fn a_log_without_times_says_its_calls_are_shown_in_order() {
    let events = vec![
        call(1, 1, "c1", "grep", None),
        result(2, 1, "c1", "x", None),
    ];
    let page = render_events(events, &PageOptions::new("old.jsonl"));
    assert_eq!(data_of(&page)["timed"], false);
    assert!(page.contains("id=\"untimed\""));
    assert!(page.contains("id=\"fig-wall\"><b>–</b>"));
}
