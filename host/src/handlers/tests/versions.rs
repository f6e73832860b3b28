//! The registry as the one owner of a handler's versions: at every step,
//! the version, previous version and status it reports are what the
//! runtime runs and what the handlers directory records, across restarts.

use serde_json::json;

use super::{Fixture, eventually, hn};
use crate::handlers::store::Store;
use crate::handlers::{HandlerRegistry, HandlerStatus, HandlerView, RegistryError};
use crate::wasm::Digest;
use rheo_wasm::testing::{engine, guest};

type State = (Option<u64>, Option<u64>, HandlerStatus);

/// Version, previous version and status as the registry reports them, after
/// checking that the handlers directory records the same versions.
async fn reported(f: &Fixture, registry: &HandlerRegistry) -> (HandlerView, State) {
    let view = registry.get(&hn("owner")).await.unwrap();
    let records = Store::open(f.dir.path()).unwrap().records();
    let record = &records[&hn("owner")];
    assert_eq!(
        (
            Some(record.version),
            record.previous.as_ref().map(|p| p.version),
            Some(record.digest.as_str()),
        ),
        (view.version, view.previous_version, view.digest.as_deref()),
        "the directory records what the registry reports"
    );
    let state = (view.version, view.previous_version, view.status);
    (view, state)
}

/// Appends an event and waits until the runtime has handled it with
/// `version`: the registry's current version is the one that runs.
async fn handled_by(f: &Fixture, registry: &HandlerRegistry, version: u64) {
    let processed = async || {
        let view = registry.get(&hn("owner")).await.unwrap();
        view.counters_by_version
            .get(&version)
            .map_or(0, |c| c.processed)
    };
    let before = processed().await;
    f.append(vec![json!({})]).await;
    eventually(&format!("handled by version {version}"), async || {
        processed().await > before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_answers_for_versions_through_swap_failure_rollback_and_pause() {
    use HandlerStatus::{Paused, Running};
    let f = Fixture::new().await;
    let r = &f.registry;
    let h = hn("owner");
    let (echo, poison) = (guest("echo"), guest("poison"));
    let digest = |bytes: &[u8]| Some(Digest::of(bytes).to_hex());

    r.deploy(h.clone(), f.manifest("owner"), echo.clone())
        .await
        .unwrap();
    let (view, state) = reported(&f, r).await;
    assert_eq!(state, (Some(1), None, Running));
    assert_eq!(view.digest, digest(&echo));
    handled_by(&f, r, 1).await;

    r.swap_module(&h, poison.clone()).await.unwrap();
    let (view, state) = reported(&f, r).await;
    assert_eq!(state, (Some(2), Some(1), Running));
    assert_eq!(view.digest, digest(&poison));
    handled_by(&f, r, 2).await;

    // A refused module changes nothing but the error shown.
    let err = r.swap_module(&h, b"garbage".to_vec()).await.unwrap_err();
    assert!(matches!(err, RegistryError::Module(_)), "{err}");
    let (view, state) = reported(&f, r).await;
    assert_eq!(state, (Some(2), Some(1), Running));
    assert!(view.last_error.is_some(), "{view:?}");
    handled_by(&f, r, 2).await;

    let rolled = r.rollback(&h).await.unwrap();
    let (view, state) = reported(&f, r).await;
    assert_eq!(state, (Some(1), Some(2), Running));
    assert_eq!(
        (view.digest, view.last_error, rolled.version),
        (digest(&echo), None, Some(1))
    );
    handled_by(&f, r, 1).await;

    let paused = r.pause(&h).await.unwrap();
    assert_eq!(paused.status, Paused);
    assert_eq!(reported(&f, r).await.1, (Some(1), Some(2), Paused));

    // A swap while paused stays paused, and takes a number no version had.
    r.swap_module(&h, poison.clone()).await.unwrap();
    assert_eq!(reported(&f, r).await.1, (Some(3), Some(1), Paused));

    let resumed = r.resume(&h).await.unwrap();
    assert_eq!(resumed.status, Running);
    assert_eq!(reported(&f, r).await.1, (Some(3), Some(1), Running));
    handled_by(&f, r, 3).await;
    r.shutdown().await;

    // Restarted servers (twice: the first restart must record what it
    // restored) report the same versions and can still roll back.
    for _ in 0..2 {
        let again = HandlerRegistry::new(engine(), f.backend.clone(), Some(f.dir.path())).unwrap();
        assert_eq!(again.sync_directory().await, 1);
        assert_eq!(reported(&f, &again).await.1, (Some(3), Some(1), Running));
        handled_by(&f, &again, 3).await;
        again.shutdown().await;
    }
}
