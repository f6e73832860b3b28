//! Hot swap under load, refused modules, rollback.

use serde_json::json;

use super::{Fixture, eventually, hn};
use crate::handlers::RegistryError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_under_load_loses_nothing_and_refuses_a_broken_module() {
    let f = Fixture::new().await;
    f.append((0..10_000).map(|i| json!({ "n": i })).collect())
        .await;
    let v1 = f.deploy("worker", f.manifest("worker"), "echo").await;
    assert_eq!(v1.version, Some(1));
    eventually("flowing", async || {
        f.view("worker").await.counters.acked >= 500
    })
    .await;

    // A broken module is refused; version 1 keeps running.
    let err = f
        .registry
        .swap_module(&hn("worker"), b"\0asm this is not a component".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Module(_)), "{err}");
    let view = f.view("worker").await;
    assert_eq!(view.version, Some(1));
    assert!(
        view.last_error
            .as_deref()
            .unwrap_or("")
            .contains("invalid module"),
        "{view:?}"
    );

    // A good one replaces it while events keep flowing.
    let mut flaky_now_ok = f.manifest("worker");
    flaky_now_ok
        .config
        .insert("succeed_on_attempt".into(), "1".into());
    let v2 = f
        .registry
        .deploy(hn("worker"), flaky_now_ok, super::guest("flaky"))
        .await
        .unwrap()
        .0;
    assert_eq!((v2.version, v2.previous_version), (Some(2), Some(1)));
    f.append((10_000..20_000).map(|i| json!({ "n": i })).collect())
        .await;

    eventually("all acked", async || f.lag("worker").await == 0).await;
    eventually("counted", async || {
        f.view("worker").await.counters.acked == 20_000
    })
    .await;
    let view = f.view("worker").await;
    let c = view.counters;
    assert_eq!(
        (
            c.processed,
            c.retried,
            c.trapped,
            c.timed_out,
            c.lost,
            c.settle_errors
        ),
        (20_000, 0, 0, 0, 0, 0)
    );
    let v1_acked = view.counters_by_version[&1].acked;
    let v2_acked = view.counters_by_version[&2].acked;
    assert!(
        v1_acked >= 500 && v2_acked >= 10_000,
        "both versions worked: {v1_acked} + {v2_acked}"
    );
    assert_eq!(v1_acked + v2_acked, 20_000);
    assert!(f.dead_letters("worker").await.is_empty());
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_restores_the_previous_version_and_back_again() {
    let f = Fixture::new().await;
    f.deploy("h", f.manifest("h"), "echo").await;
    let echo_digest = f.view("h").await.digest;
    f.registry
        .swap_module(&hn("h"), super::guest("poison"))
        .await
        .unwrap();
    let rolled = f.registry.rollback(&hn("h")).await.unwrap();
    assert_eq!(
        (rolled.version, rolled.previous_version),
        (Some(1), Some(2))
    );
    assert_eq!(rolled.digest, echo_digest);
    let again = f.registry.rollback(&hn("h")).await.unwrap();
    assert_eq!(again.version, Some(2));
    f.registry.shutdown().await;

    let f2 = Fixture::new().await;
    f2.deploy("solo", f2.manifest("solo"), "echo").await;
    let err = f2.registry.rollback(&hn("solo")).await.unwrap_err();
    assert!(matches!(err, RegistryError::NoPrevious(_)), "{err}");
    f2.registry.shutdown().await;
}
