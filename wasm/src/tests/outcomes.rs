//! Guests that return normally: every outcome, configuration, logging,
//! appends, and both instance modes.

use std::sync::Arc;

use serde_json::json;
use tracing::Level;

use super::capture::Captured;
use super::{backend, frozen, lease, lease_with, module, obj, runner};
use crate::backend::{CreateStream, ReadRequest};
use crate::model::{HandlerName, StreamName};
use crate::settle::HandlerOutcome;
use crate::{HandlerEnv, HandlerRunner, InstanceMode, Limits};

fn retry(reason: &str, delay_ms: Option<u64>) -> HandlerOutcome {
    HandlerOutcome::Retry {
        reason: reason.into(),
        delay_ms,
    }
}

#[tokio::test]
async fn echo_acks() {
    let echo = runner("echo", &[], Limits::default()).await;
    assert_eq!(
        echo.invoke(&lease("e-1", json!({"any": "thing"}), 1)).await,
        HandlerOutcome::Ack
    );
}

#[tokio::test]
async fn flaky_retries_until_the_configured_attempt() {
    let flaky = runner(
        "flaky",
        &[("succeed_on_attempt", "3"), ("retry_delay_ms", "250")],
        Limits::default(),
    )
    .await;
    let outcomes = [
        flaky.invoke(&lease("e-1", json!({}), 1)).await,
        flaky.invoke(&lease("e-1", json!({}), 2)).await,
        flaky.invoke(&lease("e-1", json!({}), 3)).await,
    ];
    assert_eq!(
        outcomes,
        [
            retry("flaky: attempt 1 of 3 needed", Some(250)),
            retry("flaky: attempt 2 of 3 needed", Some(250)),
            HandlerOutcome::Ack
        ]
    );
}

#[tokio::test]
async fn flaky_without_config_succeeds_on_attempt_3_with_the_group_backoff() {
    let flaky = runner("flaky", &[], Limits::default()).await;
    assert_eq!(
        flaky.invoke(&lease("e-1", json!({}), 2)).await,
        retry("flaky: attempt 2 of 3 needed", None)
    );
    assert_eq!(
        flaky.invoke(&lease("e-1", json!({}), 3)).await,
        HandlerOutcome::Ack
    );
}

#[tokio::test]
async fn poison_rejects_with_the_guests_reason_and_logs_it() {
    let captured = Captured::start();
    let poison = runner("poison", &[], Limits::default()).await;
    let reject = |reason: &str| HandlerOutcome::Reject {
        reason: reason.into(),
    };
    assert_eq!(
        poison
            .invoke(&lease(
                "e-1",
                json!({"poison": true, "reason": "unknown sku"}),
                1
            ))
            .await,
        reject("unknown sku")
    );
    assert_eq!(
        poison
            .invoke(&lease("e-2", json!({"poison": true}), 1))
            .await,
        reject("poison event")
    );
    assert_eq!(
        poison
            .invoke(&lease("e-3", json!({"poison": false}), 1))
            .await,
        HandlerOutcome::Ack
    );

    let lines = captured.of_handler("poison");
    let messages: Vec<(&Level, &str, &str)> = lines
        .iter()
        .map(|l| (&l.level, l.field("source"), l.field("message")))
        .collect();
    assert_eq!(
        messages,
        [
            (&Level::WARN, "log", "rejecting e-1: unknown sku"),
            (&Level::WARN, "log", "rejecting e-2: poison event"),
        ]
    );
}

#[tokio::test]
async fn transform_appends_exactly_once_when_the_same_delivery_runs_twice() {
    let clock = frozen();
    let backend = backend(clock.clone());
    let out = StreamName::parse("out").unwrap();
    backend
        .create_stream(CreateStream {
            name: out.clone(),
            partition_count: 1,
            retention: None,
        })
        .await
        .unwrap();
    let env = HandlerEnv::new(
        HandlerName::parse("transform").unwrap(),
        Arc::clone(&backend),
    )
    .with_config([("target_stream".to_owned(), "out".to_owned())].into());
    let transform = HandlerRunner::new(module("transform").await, env, Limits::default()).unwrap();

    let metadata = obj(json!({"correlation_id": "order-42", "producer": "shop"}));
    let delivery = lease_with("src-1", json!({"total": 12.5}), metadata, 1);
    assert_eq!(transform.invoke(&delivery).await, HandlerOutcome::Ack);
    clock.advance(1_000);
    assert_eq!(transform.invoke(&delivery).await, HandlerOutcome::Ack);

    let events = backend
        .read(ReadRequest {
            stream: out,
            partition: 0,
            after: 0,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let derived = &events[0];
    assert_eq!(derived.id.as_str(), "src-1:transformed");
    assert_eq!(
        derived.event_type.as_deref(),
        Some("order.created.transformed")
    );
    assert_eq!(
        derived.payload,
        obj(json!({"total": 12.5, "source": "src-1"}))
    );
    // `transformed_at_ms` is the guest's `now-ms`: the frozen clock at the
    // first (stored) append, not the wall clock.
    assert_eq!(
        derived.metadata,
        obj(json!({
            "causation_id": "src-1",
            "correlation_id": "order-42",
            "transformed_at_ms": 1_750_000_000_123u64,
        }))
    );
}

#[tokio::test]
async fn appends_outside_the_allow_list_or_to_missing_streams_make_transform_retry() {
    let backend = backend(frozen());
    let env = HandlerEnv::new(
        HandlerName::parse("transform").unwrap(),
        Arc::clone(&backend),
    )
    .with_config([("target_stream".to_owned(), "out".to_owned())].into());
    let module = module("transform").await;

    let fenced = env
        .clone()
        .with_append_streams([StreamName::parse("audit").unwrap()]);
    let fenced = HandlerRunner::new(module.clone(), fenced, Limits::default()).unwrap();
    match fenced.invoke(&lease("e-1", json!({}), 1)).await {
        HandlerOutcome::Retry { reason, .. } => {
            assert!(reason.contains("NotAllowed"), "{reason}");
            assert!(reason.contains("may not append to stream out"), "{reason}");
        }
        other => panic!("expected a retry, got {other:?}"),
    }

    let open = HandlerRunner::new(module, env, Limits::default()).unwrap();
    match open.invoke(&lease("e-1", json!({}), 1)).await {
        HandlerOutcome::Retry { reason, .. } => {
            assert!(reason.contains("StreamNotFound"), "{reason}");
        }
        other => panic!("expected a retry, got {other:?}"),
    }
}

#[tokio::test]
async fn fresh_and_reuse_modes_both_work() {
    let fresh = runner(
        "echo",
        &[],
        Limits {
            instance: InstanceMode::Fresh,
            ..Limits::default()
        },
    )
    .await;
    let reuse = runner(
        "echo",
        &[],
        Limits {
            max_invocations: 2,
            ..Limits::default()
        },
    )
    .await;
    for i in 0..5 {
        let l = lease(&format!("e-{i}"), json!({}), 1);
        assert_eq!(fresh.invoke(&l).await, HandlerOutcome::Ack);
        assert_eq!(reuse.invoke(&l).await, HandlerOutcome::Ack);
    }
    let fresh = fresh.stats();
    assert_eq!((fresh.calls, fresh.instantiations, fresh.warm), (5, 5, 0));
    let reuse = reuse.stats();
    // Two calls per instance: instances for calls 1–2, 3–4 and 5.
    assert_eq!(
        (reuse.calls, reuse.instantiations, reuse.retired),
        (5, 3, 2)
    );
    assert_eq!(reuse.warm, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_get_their_own_instance() {
    let echo = Arc::new(
        runner(
            "echo",
            &[],
            Limits {
                max_warm: 4,
                ..Limits::default()
            },
        )
        .await,
    );
    let calls: Vec<_> = (0..32)
        .map(|i| {
            let echo = Arc::clone(&echo);
            tokio::spawn(async move { echo.invoke(&lease(&format!("e-{i}"), json!({}), 1)).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), HandlerOutcome::Ack);
    }
    let stats = echo.stats();
    assert_eq!(stats.calls, 32);
    assert!(stats.warm <= 4, "{stats:?}");
    assert_eq!(stats.discarded, 0);
}

#[tokio::test]
async fn prewarm_leaves_a_warm_instance() {
    let echo = runner("echo", &[], Limits::default()).await;
    echo.prewarm().await.unwrap();
    assert_eq!(echo.stats().warm, 1);
    assert_eq!(
        echo.invoke(&lease("e-1", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
    assert_eq!(echo.stats().instantiations, 1);
}
