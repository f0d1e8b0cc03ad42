//! The ids dsh derives (a sub-call's `PARENT.subN`, a fresh `dsh_STEP_N`) can never be an id
//! the model gave in the same step: a model id of the derived form is renamed (and reported),
//! so every call and sub-call of a step has its own id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::{EventBody, Hooks, ToolCall};
use dsh_scheduler::{SchedulerConfig, StepRequest};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Every id of each step (tool/call and tool/code-dispatch), failing on a repeat.
fn ids_by_step(events: &[dsh_core::SessionEvent]) -> BTreeMap<u64, Vec<String>> {
    let mut by_step: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in events {
        let id = match &e.body {
            EventBody::ToolCall(c) => c.call_id.clone(),
            EventBody::CodeDispatch(d) => d.call_id.clone(),
            _ => continue,
        };
        by_step.entry(e.step).or_default().push(id);
    }
    for (step, ids) in &by_step {
        let unique: HashSet<_> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "step {step} repeats an id: {ids:?}"
        );
    }
    by_step
}

#[tokio::test]
async fn a_model_id_of_the_derived_form_is_renamed_so_sub_call_ids_stay_unique() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let script = json!({"code": "await tools.nap({ text: 'inner' }); return 1;"});
    let out = session
        .run_step(StepRequest::new(vec![
            ToolCall::new("r", "run_code", script.clone()),
            ToolCall::new("r.sub1", "nap", json!({"text": "model's own"})),
            // An empty id gets a fresh one; its sub-call's derived id is given by the model
            // too.
            ToolCall::new("", "run_code", script.clone()),
            ToolCall::new("dsh_1_2.sub1", "nap", json!({})),
            ToolCall::new("x.sub7", "nap", json!({})),
        ]))
        .await
        .unwrap();
    assert!(
        out.results.iter().all(|r| !r.is_error()),
        "{:?}",
        out.results.iter().map(|r| r.text()).collect::<Vec<_>>()
    );
    let renamed: Vec<(usize, &str)> = out
        .renamed
        .iter()
        .map(|r| (r.index, r.original.as_str()))
        .collect();
    assert_eq!(
        renamed,
        [(1, "r.sub1"), (2, ""), (3, "dsh_1_2.sub1"), (4, "x.sub7")],
        "{:?}",
        out.renamed
    );
    let events = log.snapshot().await.unwrap();
    dsh_session::check::check(&events).unwrap();
    let ids = ids_by_step(&events);
    assert!(
        ids[&1].contains(&"r.sub1".to_string()),
        "the sub-call keeps its id: {ids:?}"
    );
    // The results answer the blocks in order, under the ids the log uses.
    assert_eq!(out.results[1].call_id(), out.renamed[0].assigned);
    session.shutdown().await;
    harness.shutdown().await;
}
