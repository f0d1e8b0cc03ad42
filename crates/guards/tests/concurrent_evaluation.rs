//! Evaluation does not serialize behind one guard: a slow guard delays only the call it is
//! checking, and a panicking guard denies only its call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_guards::{FnGuard, GuardCall, GuardSet, GuardVerdict};
use serde_json::json;
use std::sync::Mutex;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Generous: nothing here should take more than milliseconds; the bound only keeps a broken
/// build from hanging. It is longer than the guard set's 5 s request timeout, so an
/// evaluation queued behind the slow guard (and denied for it) fails the test either way.
const PATIENCE: Duration = Duration::from_secs(20);

/// A guard that, for a call whose arguments say `"slow": true`, reports that it started and
/// then blocks its thread until released (at most a minute, so a failing test still ends). It
/// denies `rm` and abstains on everything else.
fn gate() -> (
    FnGuard<impl Fn(&GuardCall) -> GuardVerdict + Send + Sync>,
    mpsc::UnboundedReceiver<String>,
    std_mpsc::Sender<()>,
) {
    let (entered_tx, entered) = mpsc::unbounded_channel::<String>();
    let (release, held) = std_mpsc::channel::<()>();
    let held = Mutex::new(held);
    let guard = FnGuard::new("gate", move |c: &GuardCall| {
        if c.arguments.get("slow").and_then(|v| v.as_bool()) == Some(true) {
            let _ = entered_tx.send(c.call_id.clone());
            let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(60));
            return GuardVerdict::Deny("checked slowly".into());
        }
        if c.tool == "rm" {
            GuardVerdict::Deny("no rm".into())
        } else {
            GuardVerdict::Abstain
        }
    });
    (guard, entered, release)
}

// A current-thread runtime: if the guards ran on the runtime's own thread, the blocked guard
// would stall every other evaluation too.
#[tokio::test]
async fn a_slow_guard_delays_only_the_call_it_checks() {
    let set = GuardSet::spawn(None).await.unwrap();
    let (guard, mut entered, release) = gate();
    let _owner = set.register(guard).await.unwrap();

    let slow = tokio::spawn({
        let set = set.clone();
        async move {
            set.evaluate(GuardCall::new("slow", "write_file", json!({"slow": true})))
                .await
        }
    });
    let started = tokio::time::timeout(PATIENCE, entered.recv())
        .await
        .expect("the slow guard never started")
        .unwrap();
    assert_eq!(started, "slow");

    // While the guard holds the slow call, twenty other calls are evaluated concurrently and
    // all get their own verdicts.
    let mut others = JoinSet::new();
    for i in 0..20 {
        let set = set.clone();
        let tool = if i % 2 == 0 { "rm" } else { "ls" };
        others.spawn(async move {
            let verdict = set
                .evaluate(GuardCall::new(format!("c{i}"), tool, json!({"path": "a"})))
                .await;
            (tool, verdict)
        });
    }
    let mut answered = 0;
    while let Some(joined) = tokio::time::timeout(PATIENCE, others.join_next())
        .await
        .expect("other calls waited behind the slow guard")
    {
        let (tool, verdict) = joined.unwrap();
        let expected = if tool == "rm" {
            GuardVerdict::Deny("guard `gate`: no rm".into())
        } else {
            GuardVerdict::Abstain
        };
        assert_eq!(verdict, expected, "{tool}");
        answered += 1;
    }
    assert_eq!(answered, 20);

    // Registration is not held up either.
    let late = tokio::time::timeout(
        PATIENCE,
        set.register(FnGuard::new("late", |_c: &GuardCall| GuardVerdict::Abstain)),
    )
    .await
    .expect("registration waited behind the slow guard")
    .unwrap();
    assert_eq!(set.ids().await.unwrap(), ["gate", "late"]);

    // The slow call is still waiting for its guard, and gets that guard's verdict once it
    // answers.
    assert!(
        !slow.is_finished(),
        "the slow call did not wait for its guard"
    );
    release.send(()).unwrap();
    let verdict = tokio::time::timeout(PATIENCE, slow)
        .await
        .expect("the slow call never finished")
        .unwrap();
    assert_eq!(
        verdict,
        GuardVerdict::Deny("guard `gate`: checked slowly".into())
    );
    late.unregister().await.unwrap();
    set.shutdown().await;
}

#[tokio::test]
async fn an_evaluation_limit_denies_only_the_slow_call() {
    let set = GuardSet::spawn(None)
        .await
        .unwrap()
        .with_evaluation_timeout(Duration::from_millis(50));
    let (guard, mut entered, release) = gate();
    let _owner = set.register(guard).await.unwrap();

    let verdict = tokio::time::timeout(
        PATIENCE,
        set.evaluate(GuardCall::new("slow", "ls", json!({"slow": true}))),
    )
    .await
    .expect("the evaluation limit did not end the wait");
    match verdict {
        GuardVerdict::Deny(reason) => {
            assert!(reason.contains("did not answer within 50 ms"), "{reason}")
        }
        GuardVerdict::Abstain => panic!("a guard that did not answer let the call through"),
    }
    assert_eq!(entered.recv().await.as_deref(), Some("slow"));

    // The guard is still blocked on its thread; other calls are unaffected.
    assert_eq!(
        set.evaluate(GuardCall::new("c", "ls", json!({}))).await,
        GuardVerdict::Abstain
    );
    assert_eq!(
        set.evaluate(GuardCall::new("d", "rm", json!({}))).await,
        GuardVerdict::Deny("guard `gate`: no rm".into())
    );
    release.send(()).unwrap();
    set.shutdown().await;
}

#[tokio::test]
async fn a_panicking_guard_denies_its_call_and_the_set_keeps_serving() {
    // On the blocking pool, and in the calling task.
    for may_block in [true, false] {
        panicking_guard_denies_its_call(may_block).await;
    }
}

async fn panicking_guard_denies_its_call(may_block: bool) {
    let set = GuardSet::spawn(None).await.unwrap();
    let fragile: fn(&GuardCall) -> GuardVerdict = |c| {
        if c.arguments.get("boom").is_some() {
            panic!("guard exploded")
        }
        GuardVerdict::Abstain
    };
    let guard = if may_block {
        FnGuard::new("fragile", fragile)
    } else {
        FnGuard::non_blocking("fragile", fragile)
    };
    let _owner = set.register(guard).await.unwrap();
    let verdict = set
        .evaluate(GuardCall::new("c1", "ls", json!({"boom": true})))
        .await;
    assert_eq!(
        verdict,
        GuardVerdict::Deny("guard `fragile` failed while checking the call".into())
    );
    assert_eq!(
        set.evaluate(GuardCall::new("c2", "ls", json!({}))).await,
        GuardVerdict::Abstain
    );
    assert_eq!(set.restarts(), 0, "a guard's panic is not the actor's");
    assert_eq!(set.ids().await.unwrap(), ["fragile"]);
    set.shutdown().await;
}

#[tokio::test]
async fn an_evaluation_sees_every_change_made_before_it() {
    let set = GuardSet::spawn(None).await.unwrap();
    let call = || GuardCall::new("c", "ls", json!({}));
    assert_eq!(set.evaluate(call()).await, GuardVerdict::Abstain);
    let owner = set
        .register(FnGuard::new("g", |_c: &GuardCall| GuardVerdict::Abstain))
        .await
        .unwrap();
    assert_eq!(set.evaluate(call()).await, GuardVerdict::Abstain);
    owner
        .replace(FnGuard::new("g", |_c: &GuardCall| {
            GuardVerdict::Deny("strict".into())
        }))
        .await
        .unwrap();
    assert_eq!(
        set.evaluate(call()).await,
        GuardVerdict::Deny("guard `g`: strict".into())
    );
    let snapshot = set.snapshot().await.unwrap();
    assert_eq!(snapshot.ids(), ["g"]);
    owner.unregister().await.unwrap();
    assert_eq!(set.evaluate(call()).await, GuardVerdict::Abstain);
    // A snapshot taken before the removal keeps the set it was taken from.
    assert_eq!(
        snapshot.evaluate(call()).await,
        GuardVerdict::Deny("guard `g`: strict".into())
    );
    set.shutdown().await;
}

type Seen = std::sync::Arc<Mutex<Vec<(&'static str, std::thread::ThreadId)>>>;
type BoxedCheck = Box<dyn Fn(&GuardCall) -> GuardVerdict + Send + Sync>;

/// A guard that abstains and records the thread its check ran on.
fn recording(id: &'static str, blocking: bool, seen: &Seen) -> FnGuard<BoxedCheck> {
    let seen = seen.clone();
    let check: BoxedCheck = Box::new(move |_c: &GuardCall| {
        seen.lock().unwrap().push((id, std::thread::current().id()));
        GuardVerdict::Abstain
    });
    if blocking {
        FnGuard::new(id, check)
    } else {
        FnGuard::non_blocking(id, check)
    }
}

// A current-thread runtime: "in the calling task" is then this test's thread.
#[tokio::test]
async fn guards_that_never_block_run_in_the_calling_task_and_one_that_may_moves_all_to_the_pool() {
    let set = GuardSet::spawn(None).await.unwrap();
    let seen: Seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let here = std::thread::current().id();
    let _quick = set
        .register(recording("quick", false, &seen))
        .await
        .unwrap();
    let verdict = set.evaluate(GuardCall::new("c1", "t", json!({}))).await;
    assert_eq!(verdict, GuardVerdict::Abstain);
    assert_eq!(*seen.lock().unwrap(), vec![("quick", here)]);
    assert!(!set.snapshot().await.unwrap().may_block());

    seen.lock().unwrap().clear();
    let _slow = set
        .register(recording("may-block", true, &seen))
        .await
        .unwrap();
    assert!(set.snapshot().await.unwrap().may_block());
    let verdict = set.evaluate(GuardCall::new("c2", "t", json!({}))).await;
    assert_eq!(verdict, GuardVerdict::Abstain);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter().all(|(_, t)| *t != here),
        "with a guard that may block, the whole snapshot runs on the pool: {seen:?}"
    );
}

#[tokio::test]
async fn a_non_blocking_guard_that_overruns_the_limit_is_denied_once_it_returns() {
    let set = GuardSet::spawn(None)
        .await
        .unwrap()
        .with_evaluation_timeout(Duration::from_millis(20));
    let _owner = set
        .register(FnGuard::non_blocking("liar", |c: &GuardCall| {
            if c.tool == "slow" {
                std::thread::sleep(Duration::from_millis(60));
            }
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    let verdict = set.evaluate(GuardCall::new("c1", "slow", json!({}))).await;
    match verdict {
        GuardVerdict::Deny(reason) => assert!(reason.contains("20 ms"), "{reason}"),
        GuardVerdict::Abstain => panic!("an overrun must deny"),
    }
    let quick = set.evaluate(GuardCall::new("c2", "fast", json!({}))).await;
    assert_eq!(quick, GuardVerdict::Abstain);
}

/// A guard whose `may_block` panics: it counts as one that may block, and the set stays whole.
struct Undecided;

impl dsh_guards::Guard for Undecided {
    fn id(&self) -> &str {
        "undecided"
    }
    fn check(&self, c: &GuardCall) -> GuardVerdict {
        if c.tool == "rm" {
            GuardVerdict::Deny("no rm".into())
        } else {
            GuardVerdict::Abstain
        }
    }
    fn may_block(&self) -> bool {
        panic!("cannot say")
    }
}

#[tokio::test]
async fn a_guard_whose_may_block_panics_is_registered_as_one_that_may_block() {
    let set = GuardSet::spawn(None).await.unwrap();
    let owner = set.register(Undecided).await.unwrap();
    assert_eq!(set.restarts(), 0, "the panic stayed out of the actor");
    let snapshot = set.snapshot().await.unwrap();
    assert!(snapshot.may_block());
    assert_eq!(snapshot.ids(), ["undecided"]);
    assert!(matches!(
        set.evaluate(GuardCall::new("c1", "rm", json!({}))).await,
        GuardVerdict::Deny(_)
    ));
    owner.replace(Undecided).await.unwrap();
    let _other = set
        .register(FnGuard::non_blocking("other", |_c: &GuardCall| {
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    assert_eq!(set.ids().await.unwrap(), ["undecided", "other"]);
    assert!(matches!(
        set.evaluate(GuardCall::new("c2", "rm", json!({}))).await,
        GuardVerdict::Deny(_)
    ));
    set.shutdown().await;
}
