//! Canaries and the deploy history (`registry/canary.rs`,
//! `docs/handlers.md#canaries`): real guests, the judge called by the
//! test (no watcher), the window ended by the frozen clock.

use serde_json::json;

use super::{Fixture, eventually, guest, hn};
use crate::clock::Clock;
use crate::handlers::{By, CanaryPlan, DeployStep, HandlerView, RegistryError, StepAction};
use crate::wasm::Digest;

/// Half of the first attempts, a minute, 5 points, judged after 20.
fn plan() -> CanaryPlan {
    CanaryPlan {
        share_percent: 50.0,
        window_ms: 60_000,
        margin_percent: 5.0,
        min_deliveries: 20,
    }
}

fn digest(guest_name: &str) -> String {
    Digest::of(&guest(guest_name)).to_hex()
}

/// Each step as (action, version, digest, by).
fn steps(history: &[DeployStep]) -> Vec<(StepAction, u64, String, Option<String>)> {
    history
        .iter()
        .map(|s| (s.action, s.version, s.digest.clone(), s.by.clone()))
        .collect()
}

async fn history(f: &Fixture, name: &str) -> Vec<DeployStep> {
    f.registry.history(&hn(name)).await.unwrap()
}

async fn canary_handled(f: &Fixture, name: &str) -> u64 {
    f.view(name)
        .await
        .canary
        .map_or(0, |c| c.counts.canary_handled)
}

/// Calls the judge until `name` has no canary any more.
async fn judged(f: &Fixture, name: &str) -> HandlerView {
    eventually("the judge's verdict", async || {
        f.registry.judge_canaries().await;
        f.view(name).await.canary.is_none()
    })
    .await;
    f.view(name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_trapping_on_a_fifth_of_its_events_is_rolled_back_in_its_window_and_loses_nothing()
{
    let f = Fixture::new().await;
    f.deploy("worker", f.manifest("worker"), "echo").await;
    let started = f
        .registry
        .canary(&hn("worker"), guest("crash"), plan(), By::token("alice"))
        .await
        .unwrap();
    let canary = started.canary.expect("a canary runs");
    assert_eq!((started.version, canary.version), (Some(1), 2));
    // One event in five makes the canary (`crash`) trap; echo acks all.
    f.append(
        (0..1_000)
            .map(|i| json!({ "n": i, "panic": i % 5 == 0 }))
            .collect(),
    )
    .await;
    let view = judged(&f, "worker").await;

    assert_eq!(view.version, Some(1), "the current version stays");
    let last = history(&f, "worker").await.pop().unwrap();
    assert_eq!(
        (last.action, last.version, last.by.as_deref()),
        (StepAction::Rollback, 2, Some("rheo"))
    );
    let reason = last.reason.unwrap();
    assert!(
        reason.starts_with("the canary failed") && reason.ends_with("more than 5 points worse"),
        "{reason}"
    );
    assert!(
        f.clock.now() < started.deployed_at.unwrap().add_ms(60_000),
        "decided within the window (the clock never moved)"
    );

    // Every event is acked: what the canary trapped on went to version 1.
    eventually("all acked", async || f.lag("worker").await == 0).await;
    eventually("counted", async || {
        f.view("worker").await.counters.acked == 1_000
    })
    .await;
    let view = f.view("worker").await;
    assert!(f.dead_letters("worker").await.is_empty());
    assert!(view.counters_by_version[&2].trapped > 0, "{view:?}");
    assert_eq!(
        view.counters_by_version[&2].acked + view.counters_by_version[&1].acked,
        1_000
    );
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_canary_is_promoted_at_the_end_of_its_window_and_not_before() {
    let f = Fixture::new().await;
    f.deploy("worker", f.manifest("worker"), "echo").await;
    f.registry
        .canary(&hn("worker"), guest("crash"), plan(), By::token("ci"))
        .await
        .unwrap();
    f.append((0..200).map(|i| json!({ "n": i })).collect())
        .await;
    eventually("evidence", async || {
        canary_handled(&f, "worker").await >= 20
    })
    .await;
    eventually("all handled", async || f.lag("worker").await == 0).await;
    assert_eq!(f.registry.judge_canaries().await, 0, "its window runs on");
    assert!(f.view("worker").await.canary.is_some());

    // Nothing is leased when the window ends (no lease expires with it).
    f.clock.advance(60_000);
    let view = judged(&f, "worker").await;
    assert_eq!(
        (view.version, view.previous_version),
        (Some(2), Some(1)),
        "{view:?}"
    );
    assert_eq!(view.digest.as_deref(), Some(digest("crash").as_str()));
    assert_eq!(
        steps(&history(&f, "worker").await),
        [
            (StepAction::Deploy, 1, digest("echo"), None),
            (StepAction::Canary, 2, digest("crash"), Some("ci".into())),
            (StepAction::Promote, 2, digest("crash"), Some("rheo".into())),
        ]
    );
    // The promoted version takes everything now, retries included.
    f.append((200..300).map(|i| json!({ "n": i })).collect())
        .await;
    eventually("all acked", async || f.lag("worker").await == 0).await;
    eventually("counted", async || {
        f.view("worker").await.counters.acked == 300
    })
    .await;
    assert!(f.view("worker").await.counters_by_version[&2].acked >= 100);
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_are_refused_when_they_cannot_be_judged_and_decided_by_hand_otherwise() {
    let f = Fixture::new().await;
    let name = hn("worker");
    let canary = async |module: &str| {
        f.registry
            .canary(&name, guest(module), plan(), By::unknown())
            .await
    };
    assert!(matches!(
        canary("crash").await,
        Err(RegistryError::NotFound(_))
    ));
    f.deploy("worker", f.manifest("worker"), "echo").await;
    assert!(matches!(
        canary("echo").await,
        Err(RegistryError::InvalidCanary(why)) if why.contains("current version")
    ));
    let bad_plan = CanaryPlan {
        share_percent: 0.0,
        ..plan()
    };
    assert!(matches!(
        f.registry
            .canary(&name, guest("crash"), bad_plan, By::unknown())
            .await,
        Err(RegistryError::InvalidCanary(_))
    ));
    assert!(matches!(
        f.registry.promote(&name, By::unknown()).await,
        Err(RegistryError::NoCanary(_))
    ));

    // By hand: a rollback stops the canary and keeps the version.
    canary("crash").await.unwrap();
    assert!(matches!(
        canary("transform").await,
        Err(RegistryError::CanaryRunning { version: 2, .. })
    ));
    let view = f
        .registry
        .rollback_by(&name, By::token("bob"))
        .await
        .unwrap();
    assert_eq!((view.version, view.previous_version), (Some(1), None));
    assert!(view.canary.is_none());

    // A new canary gets a new number; a promotion by hand needs no evidence.
    let view = canary("crash").await.unwrap();
    assert_eq!(view.canary.unwrap().version, 3);
    let view = f.registry.promote(&name, By::token("bob")).await.unwrap();
    assert_eq!((view.version, view.previous_version), (Some(3), Some(1)));

    // A swap while a canary runs ends the canary.
    canary("transform").await.unwrap();
    let view = f
        .registry
        .swap_module_by(&name, guest("echo"), By::token("carol"))
        .await
        .unwrap();
    assert_eq!((view.version, view.previous_version), (Some(5), Some(3)));
    assert!(view.canary.is_none());

    let history = history(&f, "worker").await;
    assert_eq!(
        steps(&history),
        [
            (StepAction::Deploy, 1, digest("echo"), None),
            (StepAction::Canary, 2, digest("crash"), None),
            (StepAction::Rollback, 2, digest("crash"), Some("bob".into())),
            (StepAction::Canary, 3, digest("crash"), None),
            (StepAction::Promote, 3, digest("crash"), Some("bob".into())),
            (StepAction::Canary, 4, digest("transform"), None),
            (StepAction::Swap, 5, digest("echo"), Some("carol".into())),
        ]
    );
    assert_eq!(history[2].reason.as_deref(), Some("rolled back by hand"));
    assert_eq!(
        history[6].reason.as_deref(),
        Some("ends the canary of version 4")
    );

    // A group that dead-letters at the first failure leaves no retry for
    // the current version: no canary there.
    f.create_group("once", 1).await;
    f.deploy("once", f.manifest("once"), "echo").await;
    assert!(matches!(
        f.registry.canary(&hn("once"), guest("crash"), plan(), By::unknown()).await,
        Err(RegistryError::InvalidCanary(why)) if why.contains("max_attempts 1")
    ));
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_survives_a_restart_and_a_canary_running_then_is_recorded_as_rolled_back() {
    let f = Fixture::new().await;
    let name = hn("worker");
    f.deploy("worker", f.manifest("worker"), "echo").await;
    f.registry
        .canary(&name, guest("crash"), plan(), By::token("ci"))
        .await
        .unwrap();
    f.registry.shutdown().await;

    let again = f.restarted();
    assert_eq!(again.sync_directory().await, 1);
    let view = again.get(&name).await.unwrap();
    assert_eq!(view.version, Some(1));
    assert!(
        view.canary.is_none(),
        "a canary does not outlive its server"
    );
    let history = again.history(&name).await.unwrap();
    assert_eq!(
        steps(&history),
        [
            (StepAction::Deploy, 1, digest("echo"), None),
            (StepAction::Canary, 2, digest("crash"), Some("ci".into())),
            (
                StepAction::Rollback,
                2,
                digest("crash"),
                Some("rheo".into())
            ),
        ]
    );
    assert_eq!(
        history[2].reason.as_deref(),
        Some("the server restarted before the canary was judged")
    );
    // The canary's number stays taken.
    let view = again.swap_module(&name, guest("transform")).await.unwrap();
    assert_eq!(view.version, Some(3));
    again.shutdown().await;
}
