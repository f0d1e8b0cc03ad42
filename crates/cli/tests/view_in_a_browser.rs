//! `dsh view`: the page of a session, driven in headless Chromium through WebDriver. The
//! example transcripts' logs show the right steps, calls and outcomes; a denied call shows its
//! reason; the filter and the keyboard work; a log that injects markup runs no script; a huge
//! log gives a bounded page that opens; the page's own functions answer right in the browser;
//! and the demo's page is photographed into `target/view-tests/` for a person to look at.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "webdriver/mod.rs"]
mod webdriver;

use common::{dsh, example, log_events, run, sample_workspace};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use webdriver::{Browser, artifacts_dir};

fn view(log: &Path, page: &Path) {
    let out = dsh(&[
        "view".as_ref(),
        log.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    assert_eq!(out.code, 0, "dsh view: {}", out.stderr);
}

fn open(browser: &Browser, page: &Path) {
    browser.open_file(page);
    browser.wait_for("return document.body.getAttribute('data-ready') === '1';");
}

fn count(browser: &Browser, css: &str) -> u64 {
    browser
        .eval(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .as_u64()
        .unwrap()
}

fn text(browser: &Browser, css: &str) -> String {
    browser
        .eval(
            "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .as_str()
        .unwrap_or_else(|| panic!("no {css}"))
        .to_string()
}

fn press(browser: &Browser, key: &str) {
    browser.actions(json!([{"type": "key", "id": "keyboard", "actions": [
        {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}
    ]}]));
}

/// What the log itself says: steps, calls, and results by outcome.
fn log_counts(log: &Path) -> (u64, u64, BTreeMap<String, u64>) {
    let events = log_events(log);
    let mut steps: Vec<u64> = events.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    steps.dedup();
    let calls = events.iter().filter(|e| e["type"] == "tool/call").count() as u64;
    let mut outcomes = BTreeMap::new();
    for e in events.iter().filter(|e| e["type"] == "tool/result") {
        let outcome = e["data"]["error"]["code"]
            .as_str()
            .unwrap_or("ok")
            .to_string();
        *outcomes.entry(outcome).or_insert(0) += 1;
    }
    (steps.len() as u64, calls, outcomes)
}

#[test]
fn the_example_logs_show_their_steps_calls_and_outcomes_and_a_denial_its_reason() {
    let browser = Browser::start();
    for format in ["openai", "anthropic"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = sample_workspace(dir.path());
        let log = dir.path().join("session.jsonl");
        let ran = run(&example(format), &ws, &log, &["--approve", "deny"]);
        assert_eq!(ran.code, 0, "{format}: {}", ran.stderr);
        let page = dir.path().join("session.html");
        view(&log, &page);
        open(&browser, &page);

        let (steps, calls, outcomes) = log_counts(&log);
        assert_eq!(steps, 6, "{format}");
        assert_eq!(
            text(&browser, "#fig-steps b"),
            steps.to_string(),
            "{format}"
        );
        assert_eq!(
            text(&browser, "#fig-calls b"),
            calls.to_string(),
            "{format}"
        );
        assert_eq!(
            count(&browser, ".step"),
            steps,
            "{format}: one row per step"
        );
        assert_eq!(
            count(&browser, ".bar:not(.sub)"),
            calls,
            "{format}: a bar per call"
        );
        assert!(outcomes.contains_key("DENIED"), "{format}: {outcomes:?}");
        for (outcome, n) in &outcomes {
            let css = format!(".bar[data-outcome=\"{outcome}\"]");
            assert_eq!(count(&browser, &css), *n, "{format}: {outcome}");
            let chip = format!("#outcomes .chip[data-outcome=\"{outcome}\"]");
            assert_eq!(text(&browser, &chip), format!("{outcome} {n}"), "{format}");
        }
        // The log has times, so the bars stand on a clock.
        assert_eq!(count(&browser, "#untimed"), 0, "{format}");

        // Clicking the denied call shows its reason, exactly as the log has it.
        let reason = log_events(&log)
            .into_iter()
            .find(|e| e["data"]["error"]["code"] == "DENIED")
            .unwrap()["data"]["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        browser.click(&browser.find(".bar[data-outcome=\"DENIED\"]"));
        assert_eq!(text(&browser, "#detail-outcome"), "DENIED", "{format}");
        assert_eq!(text(&browser, "#detail-reason"), reason, "{format}");
        assert!(
            text(&browser, "#details-body").contains("write_file"),
            "{format}"
        );
    }
}

#[test]
fn the_filter_hides_what_it_should_and_the_keyboard_walks_the_calls() {
    let browser = Browser::start();
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    assert_eq!(run(&example("openai"), &ws, &log, &[]).code, 0);
    let page = dir.path().join("session.html");
    view(&log, &page);
    open(&browser, &page);
    let events = log_events(&log);
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool/call").collect();
    let greps = calls.iter().filter(|e| e["data"]["name"] == "grep").count() as u64;
    assert!(greps >= 2);

    browser.type_into(&browser.find("#filter"), "grep");
    assert_eq!(count(&browser, ".bar:not([hidden])"), greps);
    let shown: Vec<Value> = browser
        .eval(
            "return Array.from(document.querySelectorAll('.bar:not([hidden])')).map(b => b.textContent);",
            vec![],
        )
        .as_array()
        .unwrap()
        .clone();
    assert!(shown.iter().all(|n| n == "grep"), "{shown:?}");
    // Steps with nothing left to show are hidden with their calls.
    let steps_with_grep = {
        let mut s: Vec<u64> = calls
            .iter()
            .filter(|e| e["data"]["name"] == "grep")
            .map(|e| e["step"].as_u64().unwrap())
            .collect();
        s.dedup();
        s.len() as u64
    };
    assert_eq!(count(&browser, ".step:not([hidden])"), steps_with_grep);

    // The text is matched in results too: the one call whose result names CHANGELOG.md.
    browser.eval(
        "var f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));",
        vec![],
    );
    assert_eq!(count(&browser, ".bar:not([hidden])"), calls.len() as u64);
    browser.eval(
        "var s = document.getElementById('outcome'); s.value = 'DENIED'; s.dispatchEvent(new Event('change'));",
        vec![],
    );
    assert_eq!(count(&browser, ".bar:not([hidden])"), 1);
    assert_eq!(
        text(&browser, "#count"),
        format!("1 of {} calls shown", calls.len())
    );
    browser.eval(
        "var s = document.getElementById('outcome'); s.value = ''; s.dispatchEvent(new Event('change')); document.activeElement.blur();",
        vec![],
    );

    // j walks forward through the calls in log order, k back; each opens its details.
    press(&browser, "j");
    assert_eq!(
        text(&browser, "#details-body .meta-line"),
        format!(
            "step 1 · seq {} · {}",
            calls[0]["seq"],
            calls[0]["data"]["callId"].as_str().unwrap()
        )
    );
    press(&browser, "j");
    press(&browser, "j");
    press(&browser, "k");
    assert!(
        text(&browser, "#details-body .meta-line")
            .ends_with(calls[1]["data"]["callId"].as_str().unwrap())
    );
    // `/` goes to the filter.
    press(&browser, "/");
    assert_eq!(
        browser.eval("return document.activeElement.id;", vec![]),
        json!("filter")
    );
}

const PWN: &str = "window.__pwned = (window.__pwned || 0) + 1";

/// A log every string of which tries to become markup or script.
fn hostile_log(dir: &Path) -> PathBuf {
    let script = format!("<script>{PWN}</script>");
    let img = format!("<img src=x onerror=\"{PWN}\">");
    let breakout = format!("</script><script>{PWN}</script><!--");
    let log = dir.join(format!("<img src=x onerror={PWN}>.jsonl"));
    let lines = [
        json!({"seq":1,"step":1,"type":"tool/call","at":1000,"data":{"callId":img,"name":script,"arguments":{"path":breakout},"agent":"main","parent":null}}),
        json!({"seq":2,"step":1,"type":"tool/call","at":1001,"data":{"callId":"c2","name":"read_file","arguments":{"x":1},"argumentsText":breakout,"agent":"main","parent":null}}),
        json!({"seq":3,"step":1,"type":"tool/result","at":1005,"data":{"callId":img,"message":[{"type":"text","text":script},{"type":"text","text":img}],"error":{"code":"DENIED","message":img},"meta":{"spill":breakout}},"surfaceOp":"append","sourceEventSeqs":[1]}),
        json!({"seq":4,"step":1,"type":"tool/result","at":1009,"data":{"callId":"c2","message":[{"type":"text","text":breakout}],"startedAt":1002},"surfaceOp":"append","sourceEventSeqs":[2]}),
        json!({"seq":5,"step":1,"type":"user/message","at":1010,"data":{"content":script,"origin":img}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&log, text).unwrap();
    log
}

#[test]
fn a_log_that_injects_script_and_markup_runs_nothing_and_shows_it_as_text() {
    let browser = Browser::start();
    let dir = tempfile::tempdir().unwrap();
    let log = hostile_log(dir.path());
    let page = dir.path().join("hostile.html");
    view(&log, &page);
    let html = std::fs::read_to_string(&page).unwrap();
    // The injected text is in the page only as data: never as a tag.
    assert!(
        !html.contains(&format!("<script>{PWN}")),
        "the log's script is in the page raw"
    );
    assert!(!html.contains("<img"), "the log's image is in the page raw");
    assert!(html.contains("Content-Security-Policy"));
    open(&browser, &page);
    let pwned = "return window.__pwned === undefined;";
    assert_eq!(
        browser.eval(pwned, vec![]),
        json!(true),
        "script ran on load"
    );
    // Every bar opened; its strings are shown, as text.
    let bars = count(&browser, ".bar");
    assert_eq!(bars, 2);
    browser.click(&browser.find(".bar[data-outcome=\"DENIED\"]"));
    assert_eq!(
        text(&browser, "#detail-reason"),
        format!("<img src=x onerror=\"{PWN}\">")
    );
    assert!(text(&browser, "#details-body h2").starts_with("<script>"));
    browser.click(&browser.find(".bar[data-outcome=\"ok\"]"));
    assert!(text(&browser, "#details-body").contains("</script><script>"));
    assert!(text(&browser, ".context").contains("<script>"));
    assert!(text(&browser, "h1 .src").contains("onerror"));
    // Nothing became an element.
    assert_eq!(count(&browser, "img"), 0);
    assert_eq!(
        count(&browser, "script"),
        2,
        "only the page's own data and script"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(browser.eval(pwned, vec![]), json!(true), "script ran later");

    // Were the escaping ever to fail, the page's policy would still stop a script it did not
    // write: the same injection put into the page raw does not run either.
    let raw = html.replacen(
        "<main>",
        &format!("<main><script>{PWN}</script><img src=x onerror=\"{PWN}\">"),
        1,
    );
    let raw_page = dir.path().join("raw.html");
    std::fs::write(&raw_page, raw).unwrap();
    open(&browser, &raw_page);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        browser.eval(pwned, vec![]),
        json!(true),
        "the CSP let a script run"
    );
}

#[test]
fn a_log_of_a_million_events_gives_a_bounded_page_that_opens() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("huge.jsonl");
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
        let big = "x".repeat(20_000);
        let mut seq = 0u64;
        for step in 1..=50_000u64 {
            for c in 0..10u64 {
                seq += 1;
                let id = format!("c{step}_{c}");
                writeln!(out, r#"{{"seq":{seq},"step":{step},"type":"tool/call","at":{},"data":{{"callId":"{id}","name":"read_file","arguments":{{"path":"f{c}"}},"agent":"main","parent":null}}}}"#, seq * 3).unwrap();
                seq += 1;
                let text = if c == 0 && step % 1000 == 1 {
                    big.as_str()
                } else {
                    "ok"
                };
                writeln!(out, r#"{{"seq":{seq},"step":{step},"type":"tool/result","at":{},"data":{{"callId":"{id}","message":[{{"type":"text","text":"{text}"}}]}},"surfaceOp":"append","sourceEventSeqs":[{}]}}"#, seq * 3, seq - 1).unwrap();
            }
        }
        assert_eq!(seq, 1_000_000);
    }
    let page = dir.path().join("huge.html");
    view(&log, &page);
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size <= 20 * 1024 * 1024, "the page is {size} bytes");

    let browser = Browser::start();
    let started = Instant::now();
    open(&browser, &page);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "the page took {took:?} to open"
    );
    assert_eq!(text(&browser, "#fig-calls b"), "500000");
    let omitted = text(&browser, "#omitted");
    assert!(omitted.contains("leaves out"), "{omitted}");
    let drawn = count(&browser, ".bar");
    assert!(drawn > 0 && drawn < 500_000);
    assert!(
        omitted.contains(&(500_000 - drawn).to_string()),
        "{omitted} ({drawn} drawn)"
    );
    // The long result is cut with a note saying how much.
    browser.click(&browser.find(".bar"));
    assert!(text(&browser, "#details-body").contains("more bytes not shown"));
}

#[test]
fn the_pages_own_functions_answer_right_in_the_browser() {
    let browser = Browser::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("empty.jsonl");
    std::fs::write(&log, "").unwrap();
    let page = dir.path().join("empty.html");
    view(&log, &page);
    open(&browser, &page);
    let report = browser.eval(
        r#"
        var v = window.dshView, r = {};
        r.lanes = v.assignLanes([{start:0,end:10},{start:5,end:15},{start:10,end:20},{start:12,end:13}]);
        r.order = v.assignLanes(v.spansOf([{at:null},{at:null},{at:null}], false));
        r.timed = v.spansOf([{at:5,start:7,end:9},{at:5,start:null,end:null},{at:8,start:null,end:4}], true);
        r.place = v.place({start:25,end:50}, 0, 100);
        r.placeTiny = v.place({start:100,end:100}, 0, 100);
        var call = {name:'grep', id:'c1', args:'{"pattern":"TODO"}', result:'src/main.rs:2', reason:null, outcome:'ok'};
        r.match = [v.matches(call, {text:'todo'}), v.matches(call, {text:'MAIN.RS'}), v.matches(call, {text:'nothing'}),
                   v.matches(call, {tool:'read_file'}), v.matches(call, {outcome:'DENIED'}), v.matches(call, {tool:'grep', outcome:'ok', text:''})];
        r.classes = [v.outcomeClass('DENIED'), v.outcomeClass('ok'), v.outcomeClass('x" onclick="y'), v.outcomeClass('open')];
        r.ms = [v.formatMs(12), v.formatMs(1500), v.formatMs(125000), v.formatMs(null)];
        return r;
        "#,
        vec![],
    );
    assert_eq!(
        report["lanes"],
        json!([0, 1, 0, 2]),
        "parallel side by side, the rest share"
    );
    assert_eq!(
        report["order"],
        json!([0, 0, 0]),
        "without times, one after another"
    );
    assert_eq!(
        report["timed"],
        json!([{"start":7,"end":9},{"start":5,"end":5},{"start":8,"end":8}])
    );
    assert_eq!(report["place"], json!([25, 25]));
    assert_eq!(report["placeTiny"], json!([98.5, 1.5]));
    assert_eq!(
        report["match"],
        json!([true, true, false, false, false, true])
    );
    assert_eq!(
        report["classes"],
        json!(["o-DENIED", "o-ok", "o-open", "o-open"])
    );
    assert_eq!(report["ms"], json!(["12 ms", "1.50 s", "2 min 5 s", ""]));
    assert_eq!(text(&browser, "#fig-steps b"), "0");
}

#[test]
fn the_demo_names_its_page_and_a_screenshot_of_it_is_written_to_target() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let ran = dsh(&["demo".as_ref(), "--dir".as_ref(), demo_dir.as_os_str()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let page = demo_dir.join("session.html");
    assert!(
        ran.stderr.contains(&page.display().to_string()),
        "{}",
        ran.stderr
    );
    let browser = Browser::start();
    open(&browser, &page);
    assert_eq!(text(&browser, "#fig-steps b"), "6");
    browser.click(&browser.find(".bar[data-outcome=\"DENIED\"]"));
    let png = browser.screenshot();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let shot = artifacts_dir().join("demo-session.png");
    std::fs::write(&shot, &png).unwrap();
    assert!(png.len() > 10_000, "a blank page? {} bytes", png.len());
}

#[test]
fn view_writes_to_stdout_and_refuses_what_is_not_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    assert_eq!(run(&example("openai"), &ws, &log, &[]).code, 0);
    let out = dsh(&["view".as_ref(), log.as_os_str()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("<!DOCTYPE html>"));
    assert!(out.stdout.contains("call_08"));

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a log\nat all\n").unwrap();
    let refused = dsh(&["view".as_ref(), notes.as_os_str()]);
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not a dsh session log"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());

    let missing = dsh(&["view".as_ref(), dir.path().join("nope.jsonl").as_os_str()]);
    assert_eq!(missing.code, 3, "{}", missing.stderr);

    // A torn tail is counted and skipped; the rest is shown.
    let torn = dir.path().join("torn.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{\"seq\":99,\"st");
    std::fs::write(&torn, text).unwrap();
    let page = dir.path().join("torn.html");
    view(&torn, &page);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("id=\"bad-lines\">1 lines"),
        "torn tail not noted"
    );
    assert!(html.contains("id=\"fig-calls\"><b>12</b>"));
}
