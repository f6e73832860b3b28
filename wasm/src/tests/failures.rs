//! Guests that do not return: deadlines, the memory cap, traps and fuel.
//! Each failure discards the instance and the next call on the same
//! runner works.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use tracing::Level;

use super::capture::Captured;
use super::{backend, frozen, guest, lease, runner, small_pool};
use crate::model::HandlerName;
use crate::settle::{HandlerFailure, HandlerOutcome};
use crate::{EngineOptions, HandlerEnv, HandlerRunner, InstanceMode, Limits, WasmEngine};

#[tokio::test]
async fn spin_is_stopped_at_its_deadline_and_the_runner_recovers() {
    for instance in [InstanceMode::Reuse, InstanceMode::Fresh] {
        let spin = runner(
            "spin",
            &[],
            Limits {
                timeout_ms: 100,
                instance,
                ..Limits::default()
            },
        )
        .await;
        assert_eq!(
            spin.invoke(&lease("e-1", json!({"spin": true}), 1)).await,
            HandlerOutcome::Failed(HandlerFailure::Timeout { timeout_ms: 100 }),
            "{instance:?}"
        );
        assert_eq!(
            spin.invoke(&lease("e-2", json!({}), 1)).await,
            HandlerOutcome::Ack,
            "{instance:?}"
        );
        let stats = spin.stats();
        assert_eq!((stats.timeouts, stats.discarded), (1, 1), "{stats:?}");
        assert_eq!(stats.instantiations, 2, "{stats:?}");
    }
}

#[tokio::test]
async fn a_spinning_guest_yields_so_other_calls_on_the_same_thread_finish_first() {
    // On a current-thread runtime both calls share one thread: the short
    // one can only finish while the spinning one is still running if the
    // spinner yields at epoch ticks.
    let spin = runner(
        "spin",
        &[],
        Limits {
            timeout_ms: 300,
            ..Limits::default()
        },
    )
    .await;
    let order = AtomicUsize::new(0);
    let spinning = async {
        let outcome = spin.invoke(&lease("e-1", json!({"spin": true}), 1)).await;
        (outcome, order.fetch_add(1, Ordering::SeqCst))
    };
    let quick = async {
        let outcome = spin.invoke(&lease("e-2", json!({}), 1)).await;
        (outcome, order.fetch_add(1, Ordering::SeqCst))
    };
    let ((slow, slow_rank), (fast, fast_rank)) = tokio::join!(spinning, quick);
    assert_eq!(fast, HandlerOutcome::Ack);
    assert_eq!(
        slow,
        HandlerOutcome::Failed(HandlerFailure::Timeout { timeout_ms: 300 })
    );
    assert!(
        fast_rank < slow_rank,
        "the quick call finished after the spinner"
    );
}

#[tokio::test]
async fn hog_is_stopped_at_its_memory_cap_and_the_runner_recovers() {
    for instance in [InstanceMode::Reuse, InstanceMode::Fresh] {
        let hog = runner(
            "hog",
            &[],
            Limits {
                memory_mb: 32,
                instance,
                ..Limits::default()
            },
        )
        .await;
        assert_eq!(
            hog.invoke(&lease("e-1", json!({"hog": true}), 1)).await,
            HandlerOutcome::Failed(HandlerFailure::MemoryLimit { memory_mb: 32 }),
            "{instance:?}"
        );
        assert_eq!(
            hog.invoke(&lease("e-2", json!({}), 1)).await,
            HandlerOutcome::Ack,
            "{instance:?}"
        );
        let stats = hog.stats();
        assert_eq!((stats.memory_limits, stats.discarded), (1, 1), "{stats:?}");
    }
}

#[tokio::test]
async fn a_panic_is_a_trap_with_the_engines_message() {
    let captured = Captured::start();
    let crash = runner("crash", &[], Limits::default()).await;
    match crash.invoke(&lease("e-1", json!({"panic": true}), 1)).await {
        HandlerOutcome::Failed(HandlerFailure::Trap(message)) => {
            assert!(message.contains("unreachable"), "{message}");
            // The wasm backtrace goes to the log, not into the nack reason.
            assert!(!message.contains('\n'), "{message}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_eq!(
        crash.invoke(&lease("e-2", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
    let stats = crash.stats();
    assert_eq!((stats.traps, stats.discarded, stats.warm), (1, 1, 1));

    // The panic message went to stderr, which is the log.
    let stderr: Vec<String> = captured
        .of_handler("crash")
        .into_iter()
        .filter(|l| l.field("source") == "stderr" && l.level == Level::WARN)
        .map(|l| l.field("message").to_owned())
        .collect();
    assert!(
        stderr
            .iter()
            .any(|m| m.contains("crash: asked to panic by event e-1")),
        "{stderr:?}"
    );
}

/// An engine with fuel metering, shared by the fuel tests.
fn fuel_engine() -> WasmEngine {
    static ENGINE: OnceLock<WasmEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            WasmEngine::new(EngineOptions {
                fuel: true,
                pooling: Some(small_pool()),
                ..EngineOptions::default()
            })
            .expect("the fuel engine builds")
        })
        .clone()
}

#[tokio::test]
async fn fuel_stops_a_spinning_guest() {
    let module = fuel_engine().load(guest("spin"), None).await.unwrap();
    let env = HandlerEnv::new(HandlerName::parse("spin").unwrap(), backend(frozen()));
    let limits = Limits {
        fuel: Some(5_000_000),
        ..Limits::default()
    };
    let spin = HandlerRunner::new(module, env, limits).unwrap();
    assert_eq!(
        spin.invoke(&lease("e-1", json!({"spin": true}), 1)).await,
        HandlerOutcome::Failed(HandlerFailure::OutOfFuel)
    );
    assert_eq!(
        spin.invoke(&lease("e-2", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
    assert_eq!(spin.stats().out_of_fuel, 1);
}

#[tokio::test]
async fn fuel_needs_an_engine_that_meters_it() {
    let module = super::module("echo").await;
    let env = HandlerEnv::new(HandlerName::parse("echo").unwrap(), backend(frozen()));
    let err = HandlerRunner::new(
        module,
        env,
        Limits {
            fuel: Some(1_000),
            ..Limits::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("fuel"), "{err}");
}
