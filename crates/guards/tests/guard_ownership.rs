//! A guard's identity is protected: only its owner handle replaces or removes it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_guards::{FnGuard, GuardCall, GuardSet, GuardVerdict, GuardsError};
use serde_json::json;

fn deny_all(
    id: &str,
    why: &'static str,
) -> FnGuard<impl Fn(&GuardCall) -> GuardVerdict + Send + Sync> {
    FnGuard::new(id, move |_c: &GuardCall| GuardVerdict::Deny(why.into()))
}

fn abstain(id: &str) -> FnGuard<impl Fn(&GuardCall) -> GuardVerdict + Send + Sync> {
    FnGuard::new(id, |_c: &GuardCall| GuardVerdict::Abstain)
}

#[tokio::test]
async fn a_taken_identity_is_refused() {
    let set = GuardSet::spawn(None).await.unwrap();
    let _owner = set.register(abstain("fs-policy")).await.unwrap();
    let second = set.register(deny_all("fs-policy", "impostor")).await;
    assert_eq!(second.err(), Some(GuardsError::IdTaken("fs-policy".into())));
    assert_eq!(set.ids().await.unwrap(), ["fs-policy"]);
    let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
    assert_eq!(verdict, GuardVerdict::Abstain, "the impostor never got in");
    set.shutdown().await;
}

#[tokio::test]
async fn only_the_owner_replaces_or_removes_and_ids_stay_put() {
    let set = GuardSet::spawn(None).await.unwrap();
    let owner = set.register(abstain("a")).await.unwrap();
    let other = set.register(abstain("b")).await.unwrap();

    // The owner of `b` cannot hand in a guard named `a`.
    let err = other.replace(deny_all("a", "hijack")).await.unwrap_err();
    assert!(
        matches!(err, GuardsError::IdentityChanged { .. }),
        "{err:?}"
    );
    assert_eq!(
        set.evaluate(GuardCall::new("c", "t", json!({}))).await,
        GuardVerdict::Abstain
    );

    // The owner of `a` can tighten it.
    owner.replace(deny_all("a", "now strict")).await.unwrap();
    let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
    assert_eq!(verdict, GuardVerdict::Deny("guard `a`: now strict".into()));

    owner.unregister().await.unwrap();
    assert_eq!(set.ids().await.unwrap(), ["b"]);
    other.unregister().await.unwrap();
    assert!(set.ids().await.unwrap().is_empty());
    set.shutdown().await;
}

#[tokio::test]
async fn guards_are_asked_in_order_and_the_first_denial_wins() {
    let set = GuardSet::spawn(None).await.unwrap();
    let _a = set.register(abstain("a")).await.unwrap();
    let _b = set.register(deny_all("b", "first")).await.unwrap();
    let _c = set.register(deny_all("c", "second")).await.unwrap();
    let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
    assert_eq!(verdict, GuardVerdict::Deny("guard `b`: first".into()));
    set.shutdown().await;
}

#[tokio::test]
async fn after_shutdown_every_evaluation_is_a_denial() {
    let set = GuardSet::spawn(None).await.unwrap();
    set.shutdown().await;
    let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
    assert!(matches!(verdict, GuardVerdict::Deny(_)));
    assert!(set.register(abstain("late")).await.is_err());
}
