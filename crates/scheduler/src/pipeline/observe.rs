//! `tools/result`: synchronous observers of the frozen result, run one after another on the
//! pipeline's user-code pool, before the result is recorded (inline, when every observer says
//! it never blocks: `ResultObserver::may_block`). An observer's panic is logged and
//! changes nothing (its `name` is asked under the same guard). Observers that do not return
//! within the deadline are given up on: the result is recorded as it is (an observer only
//! observes, so giving up on it changes no result), and the rest of the observers run after
//! the stuck one on its thread, if it ever returns.

use super::Pipeline;
use super::panic;
use dsh_core::pool::{Activity, PoolError};
use dsh_core::{FrozenResult, ResultObserver};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

fn run_all(
    observers: &[Arc<dyn ResultObserver>],
    result: &FrozenResult,
    activity: Option<&Activity>,
) {
    for observer in observers {
        let name = panic::name_of(|| observer.name());
        if let Some(activity) = activity {
            activity.set(format!("tools/result observer `{name}`"));
        }
        if std::panic::catch_unwind(AssertUnwindSafe(|| observer.observe(result))).is_err() {
            tracing::error!(
                observer = %name,
                call_id = result.call_id(),
                "result observer panicked; the result is unchanged"
            );
        }
    }
}

fn gave_up(result: &FrozenResult, deadline: Duration, error: &PoolError) {
    tracing::error!(
        call_id = result.call_id(),
        deadline_ms = deadline.as_millis() as u64,
        error = %error,
        "tools/result observers did not finish; the result is recorded as it is"
    );
}

pub(super) async fn notify(pipeline: &Pipeline, result: &FrozenResult, deadline: Duration) {
    let observers = pipeline.hooks.observers();
    if observers.is_empty() {
        return;
    }
    if !pipeline.observers_may_block {
        // Every observer said it never blocks: no hand-off.
        run_all(observers, result, None);
        return;
    }
    let observers = observers.to_vec();
    let frozen = result.clone();
    let job = move |activity: &Activity| run_all(&observers, &frozen, Some(activity));
    if let Err(e) = pipeline
        .user_code
        .run("tools/result observers", Some(deadline), job)
        .await
    {
        gave_up(result, deadline, &e);
    }
}

pub(super) fn notify_blocking(pipeline: &Pipeline, result: &FrozenResult, deadline: Duration) {
    let observers = pipeline.hooks.observers();
    if observers.is_empty() {
        return;
    }
    if !pipeline.observers_may_block {
        run_all(observers, result, None);
        return;
    }
    let observers = observers.to_vec();
    let frozen = result.clone();
    let job = move |activity: &Activity| run_all(&observers, &frozen, Some(activity));
    if let Err(e) = pipeline
        .user_code
        .run_blocking("tools/result observers", Some(deadline), job)
    {
        gave_up(result, deadline, &e);
    }
}
