//! A guard's identity is read once, when it is registered: an `id()` that changes later does
//! not change who it is, and an `id()` that panics is refused without harming the set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_guards::{FnGuard, Guard, GuardCall, GuardSet, GuardVerdict};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Says `first` the first time it is asked, `second` ever after; denies everything.
struct Shifty(AtomicUsize);

impl Guard for Shifty {
    fn id(&self) -> &str {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            "first"
        } else {
            "second"
        }
    }
    fn check(&self, _call: &GuardCall) -> GuardVerdict {
        GuardVerdict::Deny("shifty says no".into())
    }
    fn may_block(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn an_id_that_changes_after_registration_does_not_change_the_identity() {
    let set = GuardSet::spawn(None).await.unwrap();
    let owner = set.register(Shifty(AtomicUsize::new(0))).await.unwrap();
    assert_eq!(owner.id(), "first");
    assert_eq!(set.ids().await.unwrap(), ["first"]);

    // "second" is free: the shifty guard is "first".
    let other = set
        .register(FnGuard::non_blocking("second", |_c: &GuardCall| {
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    assert_eq!(set.ids().await.unwrap(), ["first", "second"]);
    let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
    assert_eq!(
        verdict,
        GuardVerdict::Deny("guard `first`: shifty says no".into())
    );

    // Its owner still removes it.
    owner.unregister().await.unwrap();
    assert_eq!(set.ids().await.unwrap(), ["second"]);
    other.unregister().await.unwrap();
    set.shutdown().await;
}

/// Its `id()` panics.
struct Nameless;

impl Guard for Nameless {
    fn id(&self) -> &str {
        panic!("id exploded")
    }
    fn check(&self, _call: &GuardCall) -> GuardVerdict {
        GuardVerdict::Abstain
    }
}

#[tokio::test]
async fn an_id_that_panics_is_refused_and_the_set_keeps_running() {
    let set = GuardSet::spawn(None).await.unwrap();
    let keep = set
        .register(FnGuard::non_blocking("keep", |c: &GuardCall| {
            if c.tool == "rm" {
                GuardVerdict::Deny("no".into())
            } else {
                GuardVerdict::Abstain
            }
        }))
        .await
        .unwrap();
    let refused = set.register(Nameless).await;
    assert!(
        refused.is_err(),
        "a guard without an identity was registered"
    );
    assert_eq!(set.restarts(), 0, "the guard-set actor crashed");
    assert_eq!(set.ids().await.unwrap(), ["keep"]);
    assert!(matches!(
        set.evaluate(GuardCall::new("c", "rm", json!({}))).await,
        GuardVerdict::Deny(_)
    ));
    keep.unregister().await.unwrap();
    set.shutdown().await;
}
