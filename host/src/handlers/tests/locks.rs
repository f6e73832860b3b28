//! Slow compiles hold nothing but their own handler
//! (`docs/handlers.md#slow-compiles`): listing, other handlers' deploys and
//! a directory reload answer while one compiles, and operations on one
//! handler take turns.
//!
//! A compile is held, not slept through: the registry's compile hook blocks
//! the compile thread until the test releases it. The tests run on a
//! current-thread runtime, so a compile that ran on the runtime's own
//! thread (instead of a blocking thread) would be seen by the hook.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

use super::{Fixture, eventually, hn};
use crate::handlers::HandlerRegistry;
use crate::handlers::registry::CompileHook;
use crate::handlers::store::Store;
use crate::wasm::Digest;
use rheo_wasm::testing::guest;

/// Holds every compile of one handler's modules until released.
struct Gate {
    /// One message per compile that reached the hook: whether it ran on
    /// the runtime's thread.
    entered: tokio::sync::mpsc::UnboundedReceiver<bool>,
    release: std::sync::mpsc::Sender<()>,
}

/// Holds the compiles of `held` from now on. Call it from the test's
/// runtime thread. Dropping the gate lets every held compile go.
fn hold_compiles_of(registry: &HandlerRegistry, held: &str) -> Gate {
    let held = hn(held);
    let runtime_thread = std::thread::current().id();
    let (entered_tx, entered) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    registry.set_compile_hook(Some(CompileHook(Arc::new(move |name| {
        if *name != held {
            return;
        }
        let on_runtime_thread = std::thread::current().id() == runtime_thread;
        let _ = entered_tx.send(on_runtime_thread);
        if !on_runtime_thread {
            // Returns at a release, or at once when the gate is gone.
            let _ = release_rx.lock().recv();
        }
    }))));
    Gate { entered, release }
}

impl Gate {
    /// Waits until a compile of the held handler has started.
    async fn entered(&mut self) {
        let on_runtime_thread = self.entered.recv().await.expect("a compile started");
        assert!(
            !on_runtime_thread,
            "the module was compiled on the async runtime's thread, not a blocking one"
        );
    }

    /// Lets one held compile go on.
    fn release(&self) {
        self.release.send(()).expect("a compile is held");
    }
}

fn names(views: Vec<crate::handlers::HandlerView>) -> Vec<String> {
    views.into_iter().map(|v| v.name.to_string()).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn listing_and_other_handlers_answer_while_a_deploy_compiles() {
    let f = Fixture::new().await;
    f.deploy("first", f.manifest("first"), "echo").await;
    let gate = hold_compiles_of(&f.registry, "slow");
    let slow = f
        .registry
        .deploy(hn("slow"), f.manifest("slow"), guest("transform"));
    let meanwhile = async {
        let mut gate = gate;
        gate.entered().await;
        // "slow" is compiling, and stays so until released below: all of
        // this is done before its deploy can return.
        assert_eq!(names(f.registry.list().await), ["first"]);
        assert_eq!(f.view("first").await.version, Some(1));
        let other = f.deploy("other", f.manifest("other"), "poison").await;
        assert_eq!(other.version, Some(1));
        let swapped = f
            .registry
            .swap_module(&hn("first"), guest("poison"))
            .await
            .unwrap();
        assert_eq!(swapped.version, Some(2));
        f.registry.pause(&hn("other")).await.unwrap();
        f.registry.resume(&hn("other")).await.unwrap();
        assert_eq!(f.registry.sync_directory().await, 0, "nothing changed");
        assert!(
            f.registry.get(&hn("slow")).await.is_err(),
            "not deployed yet"
        );
        gate.release();
    };
    let (deployed, ()) = tokio::join!(slow, meanwhile);
    let (view, created) = deployed.unwrap();
    assert_eq!((view.version, created), (Some(1), true));
    assert_eq!(names(f.registry.list().await), ["first", "other", "slow"]);
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn two_deploys_of_one_handler_take_turns() {
    let f = Fixture::new().await;
    let (echo, poison) = (guest("echo"), guest("poison"));
    let mut gate = hold_compiles_of(&f.registry, "twice");
    let log = Mutex::new(Vec::<String>::new());
    let deploy = |module: Vec<u8>| {
        let log = &log;
        let f = &f;
        async move {
            let (view, created) = f
                .registry
                .deploy(hn("twice"), f.manifest("twice"), module)
                .await
                .unwrap();
            log.lock()
                .push(format!("deployed v{:?} created {created}", view.version));
        }
    };
    let driver = async {
        for _ in 0..2 {
            gate.entered().await;
            log.lock().push("compiling".into());
            gate.release();
        }
        drop(gate);
    };
    tokio::join!(deploy(echo.clone()), deploy(poison.clone()), driver);
    // The second compile started only once the first deploy had returned.
    assert_eq!(
        *log.lock(),
        [
            "compiling",
            "deployed vSome(1) created true",
            "compiling",
            "deployed vSome(2) created false",
        ]
    );
    let view = f.view("twice").await;
    assert_eq!((view.version, view.previous_version), (Some(2), Some(1)));
    assert_eq!(view.digest, Some(Digest::of(&poison).to_hex()));
    let records = Store::open(f.dir.path()).unwrap().records();
    let record = &records[&hn("twice")];
    assert_eq!(
        (record.version, record.previous.as_ref().map(|p| p.version)),
        (2, Some(1))
    );
    assert_eq!(record.digest, Digest::of(&poison).to_hex());
    // And version 2 is what runs.
    f.append(vec![json!({})]).await;
    eventually("handled by version 2", async || {
        f.view("twice")
            .await
            .counters_by_version
            .get(&2)
            .is_some_and(|c| c.processed == 1)
    })
    .await;
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_reload_during_a_swap_keeps_what_the_swap_installed() {
    let f = Fixture::new().await;
    f.deploy("late", f.manifest("late"), "echo").await;
    let mut gate = hold_compiles_of(&f.registry, "late");
    let (late, poison) = (hn("late"), guest("poison"));
    // Polled in this order: the swap holds "late" while it compiles, then
    // the reload lists the directory (echo's files, still) and waits for
    // "late", then the compile is let go.
    let (swapped, changed, ()) = tokio::join!(
        f.registry.swap_module(&late, poison.clone()),
        f.registry.sync_directory(),
        async move {
            gate.entered().await;
            gate.release();
        },
    );
    assert_eq!(swapped.unwrap().version, Some(2));
    assert_eq!(changed, 0, "the reload read the files the swap wrote");
    let view = f.view("late").await;
    assert_eq!((view.version, view.previous_version), (Some(2), Some(1)));
    assert_eq!(view.digest, Some(Digest::of(&poison).to_hex()));
    assert!(view.last_error.is_none(), "{view:?}");
    f.registry.shutdown().await;
}
