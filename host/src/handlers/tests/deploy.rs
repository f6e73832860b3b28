//! Deploy validation, the handlers directory, restarts.

use std::sync::Arc;

use serde_json::json;

use super::{Fixture, eventually, hn, sn};
use crate::handlers::{HandlerRegistry, HandlerStatus, RegistryError, watch_directory};
use rheo_wasm::testing::{engine, guest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_deploys_are_refused_with_a_reason() {
    let f = Fixture::new().await;
    let err = f
        .registry
        .deploy(hn("x"), f.manifest("x"), b"not wasm at all".to_vec())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a WebAssembly component"),
        "{err}"
    );
    let mut missing = f.manifest("x");
    missing.stream = sn("nope");
    let err = f
        .registry
        .deploy(hn("x"), missing, guest("echo"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Backend(_)), "{err}");
    let mut bad = f.manifest("x");
    bad.concurrency = 0;
    let err = f
        .registry
        .deploy(hn("x"), bad, guest("echo"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Manifest(_)), "{err}");
    // A group keeps the ordering it was created with.
    f.create_group("plain", 5).await;
    let mut keyed = f.manifest("plain");
    keyed.ordering = Some(crate::model::GroupOrdering::Key);
    let err = f
        .registry
        .deploy(hn("x"), keyed, guest("echo"))
        .await
        .unwrap_err();
    match &err {
        RegistryError::Backend(e) => assert_eq!(e.code(), "invalid", "{err}"),
        other => panic!("{other}"),
    }
    assert!(f.registry.list().await.is_empty(), "nothing was deployed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_survive_a_restart_with_their_versions_and_rollback() {
    let f = Fixture::new().await;
    f.deploy("keep", f.manifest("keep"), "echo").await;
    f.registry
        .swap_module(&hn("keep"), guest("poison"))
        .await
        .unwrap();
    f.registry.shutdown().await;

    // A new registry over the same directory (a restarted server).
    let again = f.restarted();
    assert_eq!(again.sync_directory().await, 1);
    let view = again.get(&hn("keep")).await.unwrap();
    assert_eq!((view.version, view.previous_version), (Some(2), Some(1)));
    assert_eq!(view.status, HandlerStatus::Running);
    let rolled = again.rollback(&hn("keep")).await.unwrap();
    assert_eq!(rolled.version, Some(1));
    again.shutdown().await;
}

/// A reload of the directory that starts while a deploy compiles (seconds,
/// for a Python module) must not take the handler being deployed for one
/// whose manifest was removed: the directory is listed only once the
/// deploy, files included, is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_during_a_deploy_keeps_the_deployed_handler() {
    let f = Fixture::new().await;
    let (deployed, _) = tokio::join!(
        biased;
        // Polled first: holds the registry while it compiles.
        f.registry.deploy(hn("late"), f.manifest("late"), guest("transform")),
        f.registry.sync_directory(),
    );
    deployed.unwrap();
    let view = f.registry.get(&hn("late")).await.expect("still deployed");
    assert_eq!(view.status, HandlerStatus::Running);
    assert!(f.dir.path().join("late.toml").exists());
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watched_directory_deploys_swaps_and_refuses() {
    let f = Fixture::new().await;
    let registry =
        Arc::new(HandlerRegistry::new(engine(), f.backend.clone(), Some(f.dir.path())).unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    watch_directory(registry.clone(), stop.clone()).expect("watching");
    let dir = f.dir.path();
    std::fs::write(dir.join("dropped.wasm"), guest("echo")).unwrap();
    std::fs::write(
        dir.join("dropped.toml"),
        "stream = \"in\"\ngroup = \"dropped\"\nmodule = \"dropped.wasm\"\n",
    )
    .unwrap();
    eventually("deployed from the directory", async || {
        registry
            .get(&hn("dropped"))
            .await
            .is_ok_and(|v| v.version == Some(1))
    })
    .await;
    f.append(vec![json!({})]).await;
    eventually("it consumes", async || {
        registry.get(&hn("dropped")).await.unwrap().counters.acked == 1
    })
    .await;

    // A broken module is refused; version 1 keeps running.
    std::fs::write(dir.join("dropped.wasm"), b"garbage").unwrap();
    eventually("the error is shown", async || {
        registry
            .get(&hn("dropped"))
            .await
            .unwrap()
            .last_error
            .is_some()
    })
    .await;
    assert_eq!(registry.get(&hn("dropped")).await.unwrap().version, Some(1));

    // A good one is swapped in.
    std::fs::write(dir.join("dropped.wasm"), guest("poison")).unwrap();
    eventually("version 2", async || {
        registry.get(&hn("dropped")).await.unwrap().version == Some(2)
    })
    .await;
    assert!(
        registry
            .get(&hn("dropped"))
            .await
            .unwrap()
            .last_error
            .is_none()
    );

    // Removing the manifest removes the handler.
    std::fs::remove_file(dir.join("dropped.toml")).unwrap();
    eventually("removed", async || {
        registry.get(&hn("dropped")).await.is_err()
    })
    .await;
    stop.cancel();
    registry.shutdown().await;
}
