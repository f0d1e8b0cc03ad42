//! SPEC.md's "Oversized arguments": every event the writer accepts reads back identical through
//! dsh's own reader. An event the reader could not read back (nested deeper than its limit,
//! longer than the largest line it reads) is refused by the writer with an error, and nothing
//! of it is written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::event::{CodeDispatchData, MAX_EVENT_BYTES, ToolResultData, UserMessageData};
use dsh_core::{ContentBlock, ErrorCode, EventBody, SessionEvent, ToolError};
use dsh_session::check::check_file;
use dsh_session::replay::read_log;
use dsh_session::{Durability, SessionError, SessionLog};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `levels` arrays nested in each other, around a string.
fn nested(levels: usize) -> Value {
    let mut v = Value::String("core".into());
    for _ in 0..levels {
        v = Value::Array(vec![v]);
    }
    v
}

/// A `tool/call` body (built from `call_body`, so fields added to a call keep defaults).
fn call_with(
    id: &str,
    name: &str,
    arguments: Value,
    agent: &str,
    parent: Option<String>,
) -> EventBody {
    let mut body = call_body(id);
    if let EventBody::ToolCall(d) = &mut body {
        d.name = name.into();
        d.arguments = arguments;
        d.agent = agent.into();
        d.parent = parent;
    }
    body
}

#[test]
fn arguments_nested_past_the_readers_limit_are_refused_and_nothing_is_written() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
            .await
            .unwrap();
        let mut deepest_accepted = None;
        let mut refused = 0;
        let mut step = 0;
        for levels in 100..140 {
            step += 1;
            let before = std::fs::read(&path).unwrap();
            match log
                .append(step, call_with("a", "t", nested(levels), "main", None))
                .await
            {
                Ok(seq) => {
                    deepest_accepted = Some(levels);
                    let result = result_body("a", seq);
                    log.append(step, result).await.unwrap();
                }
                Err(e) => {
                    assert!(matches!(e, SessionError::Refused(_)), "{levels}: {e}");
                    assert!(e.to_string().contains("nest"), "{e}");
                    assert_eq!(std::fs::read(&path).unwrap(), before, "{levels}");
                    refused += 1;
                }
            }
        }
        // The refusals were reported; close reports the first of them again, as it does any
        // append that failed since the last flush.
        assert!(matches!(log.close().await, Err(SessionError::Refused(_))));
        assert!(refused > 0, "every depth up to 140 was accepted");
        let deepest = deepest_accepted.expect("no depth was accepted");
        assert!(deepest >= 100, "{deepest}");
        // Every accepted event reads back identical: the deepest one included.
        let events = read_log(&path).unwrap();
        let deep = events
            .iter()
            .rev()
            .find_map(|e| match &e.body {
                EventBody::ToolCall(d) => Some(&d.arguments),
                _ => None,
            })
            .unwrap();
        assert_eq!(deep, &nested(deepest));
        check_file(&path).unwrap();
    });
}

#[test]
fn an_event_longer_than_the_largest_line_is_refused_counting_its_escapes() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (log, _) = SessionLog::open_file(&path, Durability::None, None)
            .await
            .unwrap();
        // Thirteen million bytes of text, each written as a six-byte escape: 80 MB of line.
        let escaped = "\u{1}".repeat(MAX_EVENT_BYTES / 5);
        let err = log.append(1, user_body(&escaped, "c")).await.unwrap_err();
        assert!(matches!(err, SessionError::Refused(_)), "{err}");
        assert!(err.to_string().contains("bytes"), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert!(matches!(log.flush().await, Err(SessionError::Refused(_))));
        // A long event below the limit is written, and reads back.
        let fits = "\u{1}y".repeat(1 << 20);
        assert_eq!(log.append(1, user_body(&fits, "c")).await.unwrap(), 1);
        log.close().await.unwrap();
        let events = without_times(read_log(&path).unwrap());
        assert_eq!(events, vec![ev(1, 1, user_body(&fits, "c"))]);
    });
}

/// The events with their times (SPEC.md's "Time") checked present and taken out: the writer
/// stamps `at` on every event, so what it wrote equals what it was given apart from times.
fn without_times(mut events: Vec<SessionEvent>) -> Vec<SessionEvent> {
    for e in &mut events {
        assert!(e.at.is_some(), "the writer stamped no time on {e:?}");
        e.at = None;
    }
    events
}

fn any_number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<u64>().prop_map(Number::from),
        any::<i64>().prop_map(Number::from),
        prop::num::f64::ANY.prop_filter_map("finite", Number::from_f64),
        // Integers past 2^53 and near the ends of both ranges.
        prop_oneof![
            Just(u64::MAX),
            Just(1u64 << 53),
            Just((1u64 << 53) + 1),
            Just(i64::MAX as u64 + 1)
        ]
        .prop_map(Number::from),
        Just(Number::from(i64::MIN)),
    ]
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // Escapes, controls, quotes, surrogate-pair characters, a NUL, line separators.
        "[\\\\\"\u{0}-\u{1f}\u{7f}\u{2028}\u{2029}\u{1F600}a-z]{0,12}",
    ]
}

fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number().prop_map(Value::Number),
        any_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any_text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn any_blocks() -> impl Strategy<Value = Vec<ContentBlock>> {
    prop::collection::vec(
        prop_oneof![
            any_text().prop_map(ContentBlock::text),
            (any_text(), any_text())
                .prop_map(|(media_type, data)| ContentBlock::Image { media_type, data }),
        ],
        0..3,
    )
}

fn any_error() -> impl Strategy<Value = Option<ToolError>> {
    prop::option::of(
        (
            prop::sample::select(vec![
                ErrorCode::Aborted,
                ErrorCode::Denied,
                ErrorCode::ToolError,
                ErrorCode::PipelineError,
                ErrorCode::ToolInputError,
            ]),
            any_text(),
        )
            .prop_map(|(code, message)| ToolError::new(code, message)),
    )
}

/// One call of a step: its id (made unique within the step by the caller), name, arguments,
/// sub-calls and result.
#[derive(Debug, Clone)]
struct GenCall {
    id: String,
    name: String,
    arguments: Value,
    arguments_text: Option<String>,
    agent: String,
    parent: Option<String>,
    dispatches: Vec<(String, Value, Vec<ContentBlock>, Option<ToolError>)>,
    message: Vec<ContentBlock>,
    error: Option<ToolError>,
    meta: Option<Map<String, Value>>,
}

fn any_call() -> impl Strategy<Value = GenCall> {
    (
        (any_text(), any_text(), any_value(), any_text()),
        (prop::option::of(any_text()), prop::option::of(any_text())),
        prop::collection::vec((any_text(), any_value(), any_blocks(), any_error()), 0..2),
        (any_blocks(), any_error()),
        prop::option::of(prop::collection::vec((any_text(), any_value()), 0..3)),
    )
        .prop_map(
            |(
                (id, name, arguments, agent),
                (parent, arguments_text),
                dispatches,
                (message, error),
                meta,
            )| GenCall {
                id,
                name,
                arguments,
                arguments_text,
                agent,
                parent,
                dispatches,
                message,
                error,
                meta: meta.map(|kv| kv.into_iter().collect()),
            },
        )
}

/// The bodies of one step, in log order: its calls, their dispatches, results in reverse
/// order, then the user messages.
fn step_bodies(calls: &[GenCall], users: &[(String, String)]) -> Vec<(usize, EventBody)> {
    // (index of the call whose seq a result names, body); usize::MAX for none.
    let mut out = Vec::new();
    let id = |i: usize, c: &GenCall| format!("{}#{i}", c.id);
    for (i, c) in calls.iter().enumerate() {
        let mut call = call_with(
            &id(i, c),
            &c.name,
            c.arguments.clone(),
            &c.agent,
            c.parent.clone(),
        );
        if let EventBody::ToolCall(d) = &mut call {
            d.arguments_text = c.arguments_text.clone();
        }
        out.push((usize::MAX, call));
    }
    for (i, c) in calls.iter().enumerate() {
        for (j, (name, arguments, message, error)) in c.dispatches.iter().enumerate() {
            out.push((
                usize::MAX,
                EventBody::CodeDispatch(CodeDispatchData {
                    call_id: format!("{}/sub{j}", id(i, c)),
                    parent_call_id: id(i, c),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    message: message.clone(),
                    error: error.clone(),
                }),
            ));
        }
    }
    for (i, c) in calls.iter().enumerate().rev() {
        out.push((
            i,
            EventBody::result(
                ToolResultData {
                    started_at: None,
                    call_id: id(i, c),
                    message: c.message.clone(),
                    error: c.error.clone(),
                    meta: c.meta.clone(),
                },
                0,
            ),
        ));
    }
    for (content, origin) in users {
        out.push((
            usize::MAX,
            EventBody::UserMessage(UserMessageData {
                content: content.clone(),
                origin: origin.clone(),
            }),
        ));
    }
    out
}

type GenStep = (Vec<GenCall>, Vec<(String, String)>);

fn any_steps() -> impl Strategy<Value = Vec<GenStep>> {
    prop::collection::vec(
        (
            prop::collection::vec(any_call(), 0..4),
            prop::collection::vec((any_text(), any_text()), 0..2),
        ),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever the writer accepts, `read_log` gives back exactly, seq for seq, and the log
    /// passes the checker.
    #[test]
    fn every_event_the_writer_accepts_reads_back_identical(
        steps in any_steps(),
        first_step in prop_oneof![Just(1u64), 1u64..1_000_000, Just(dsh_core::event::MAX_STEP - 3)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let written = runtime().block_on(async {
            let (log, _) = SessionLog::open_file(&path, Durability::None, None).await.unwrap();
            let mut written = Vec::new();
            for (k, (calls, users)) in steps.iter().enumerate() {
                let step = first_step + k as u64;
                let mut call_seqs = Vec::new();
                for (names, mut body) in step_bodies(calls, users) {
                    if let EventBody::ToolResult { source_event_seqs, .. } = &mut body {
                        *source_event_seqs = vec![call_seqs[names]];
                    }
                    let seq = log.append(step, body.clone()).await.unwrap();
                    if matches!(body, EventBody::ToolCall(_)) {
                        call_seqs.push(seq);
                    }
                    written.push(SessionEvent { at: None, seq, step, body });
                }
            }
            let snapshot = log.snapshot().await.unwrap();
            log.close().await.unwrap();
            assert_eq!(without_times(snapshot), written, "the writer's own snapshot");
            written
        });
        let read = without_times(read_log(&path).unwrap());
        prop_assert_eq!(&read, &written);
        prop_assert!(check_file(&path).is_ok(), "{:?}", check_file(&path));
        // The in-memory backend stores the same lines, and reads them back the same.
        let memory = runtime().block_on(async {
            let log = SessionLog::memory().await.unwrap();
            for e in &written {
                log.append(e.step, e.body.clone()).await.unwrap();
            }
            let back = log.snapshot().await.unwrap();
            log.close().await.unwrap();
            without_times(back)
        });
        prop_assert_eq!(&memory, &written);
    }
}
