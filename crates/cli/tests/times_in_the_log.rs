//! SPEC.md's amendment "Time": every event `dsh run` writes carries `at` (ms since the epoch,
//! after `type` and before `data`), and a result whose tool body ran carries `startedAt`; a
//! call whose body never ran (denied) has none. Logs with and without times read the same.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, example, log_events, replay, run, sample_workspace};
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn every_event_has_its_time_and_each_result_whose_body_ran_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let before = now_ms();
    let ran = run(&example("openai"), &ws, &log, &[]);
    let after = now_ms();
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        // Written after `type` and before `data`.
        let (ty, at, data) = (
            line.find("\"type\":").unwrap(),
            line.find(",\"at\":")
                .unwrap_or_else(|| panic!("no at: {line}")),
            line.find("\"data\":").unwrap(),
        );
        assert!(ty < at && at < data, "{line}");
    }
    let events = log_events(&log);
    let mut denied = 0;
    for e in &events {
        let at = e["at"].as_u64().unwrap();
        assert!(
            (before..=after).contains(&at),
            "{at} not in {before}..={after}"
        );
        if e["type"] != "tool/result" {
            continue;
        }
        let call = &events[e["sourceEventSeqs"][0].as_u64().unwrap() as usize - 1];
        match e["data"]["error"]["code"].as_str() {
            Some("DENIED") => {
                denied += 1;
                assert!(e["data"].get("startedAt").is_none(), "{e}");
            }
            _ => {
                let started = e["data"]["startedAt"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{e}"));
                assert!(call["at"].as_u64().unwrap() <= started, "{e}");
                assert!(started <= at, "{e}");
            }
        }
    }
    assert_eq!(denied, 1);

    // The same log without any time still checks and replays to the same transcript.
    let bare = dir.path().join("bare.jsonl");
    let stripped: String = events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.as_object_mut().unwrap().remove("at");
            e["data"].as_object_mut().unwrap().remove("startedAt");
            format!("{e}\n")
        })
        .collect();
    std::fs::write(&bare, stripped).unwrap();
    assert_eq!(check(&bare).code, 0);
    assert_eq!(check(&log).code, 0);
    assert_eq!(
        replay(&bare, "openai").stdout,
        replay(&log, "openai").stdout
    );
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
}
