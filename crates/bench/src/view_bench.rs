//! `view/render`: the time `dsh view` takes to make the page of a 100,000-event log (read,
//! parsed and rendered, from the log's bytes to the page's), and the page's size.

use crate::Bench;
use crate::report::{emit, quantile};
use std::time::Instant;

pub const BENCHES: &[Bench] = &[Bench {
    name: "view/render",
    in_all: true,
    run: render,
}];

const EVENTS: u64 = 100_000;

/// A session of 100,000 events: steps of 8 calls and their results, some denied, some failing,
/// a `run_code` call with sub-calls, and deferred context, all with times.
fn log() -> Vec<u8> {
    let mut out = String::new();
    let (mut seq, mut step, mut at) = (0u64, 0u64, 1_767_225_600_000u64);
    while seq < EVENTS {
        step += 1;
        let mut calls = Vec::new();
        for c in 0..8u64 {
            if seq >= EVENTS {
                break;
            }
            seq += 1;
            at += 1;
            let id = format!("call_{step}_{c}");
            let name = ["read_file", "grep", "edit_file", "run_code"][(c % 4) as usize];
            out.push_str(&format!(
                r#"{{"seq":{seq},"step":{step},"type":"tool/call","at":{at},"data":{{"callId":"{id}","name":"{name}","arguments":{{"path":"src/module_{c}.rs","pattern":"fn \\w+"}},"agent":"main","parent":null}}}}"#
            ));
            out.push('\n');
            calls.push((seq, id, name));
        }
        for (call_seq, id, name) in calls {
            if name == "run_code" && seq + 2 < EVENTS {
                for s in 0..2 {
                    seq += 1;
                    at += 3;
                    out.push_str(&format!(
                        r#"{{"seq":{seq},"step":{step},"type":"tool/code-dispatch","at":{at},"data":{{"callId":"{id}.sub{s}","parentCallId":"{id}","name":"read_file","arguments":{{"path":"a.txt"}},"message":[{{"type":"text","text":"line one\nline two"}}]}}}}"#
                    ));
                    out.push('\n');
                }
            }
            if seq >= EVENTS {
                break;
            }
            seq += 1;
            at += 7;
            let error = match call_seq % 13 {
                0 => r#","error":{"code":"DENIED","message":"outside the workspace: /etc/passwd"}"#,
                5 => r#","error":{"code":"TOOL_ERROR","message":"no such file"}"#,
                _ => "",
            };
            out.push_str(&format!(
                r#"{{"seq":{seq},"step":{step},"type":"tool/result","at":{at},"data":{{"callId":"{id}","message":[{{"type":"text","text":"     1\tuse std::io;\n     2\tfn main() {{ println!(\"hello\"); }}\n"}}]{error},"startedAt":{}}},"surfaceOp":"append","sourceEventSeqs":[{call_seq}]}}"#,
                at - 5
            ));
            out.push('\n');
        }
        if seq < EVENTS && step % 10 == 0 {
            seq += 1;
            out.push_str(&format!(
                r#"{{"seq":{seq},"step":{step},"type":"user/message","at":{at},"data":{{"content":"src/lib.rs changed since it was read","origin":"call_{step}_0"}}}}"#
            ));
            out.push('\n');
        }
    }
    out.into_bytes()
}

fn render() {
    let bytes = log();
    let options = dsh_view::PageOptions::new("bench.jsonl");
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let page =
            dsh_view::render_lines(std::io::Cursor::new(&bytes), &options).unwrap_or_default();
        times.push(started.elapsed().as_secs_f64());
        size = page.len();
    }
    emit(
        "view/render",
        "render_100k_s",
        quantile(&mut times, 0.5),
        "s",
    );
    emit("view/render", "page_mb", size as f64 / 1e6, "MB");
    emit("view/render", "log_mb", bytes.len() as f64 / 1e6, "MB");
}
