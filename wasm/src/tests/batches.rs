//! `handle-batch` (`rheo:handler@0.2.0`, `docs/handlers.md#batches`): one
//! guest call for several deliveries, an outcome for each; and components
//! of the 0.1.0 world, which export `handle` only, running unchanged.

use serde_json::json;

use super::{lease, module, runner};
use crate::Limits;
use crate::settle::{HandlerFailure, HandlerOutcome};

#[tokio::test]
async fn one_call_acks_retries_and_rejects_items_separately() {
    let batch = runner("batch", &[], Limits::default()).await;
    assert!(batch.batches());
    let leases = [
        lease("e-1", json!({"do": "ack"}), 1),
        lease("e-2", json!({"do": "retry", "delay_ms": 250}), 1),
        lease("e-3", json!({"do": "reject"}), 2),
        lease("e-4", json!({"do": "retry"}), 1),
    ];
    let outcomes = batch.invoke_batch(&leases).await;
    assert_eq!(
        outcomes,
        [
            HandlerOutcome::Ack,
            HandlerOutcome::Retry {
                reason: "retry in a batch of 4".into(),
                delay_ms: Some(250),
            },
            HandlerOutcome::Reject {
                reason: "reject in a batch of 4".into(),
            },
            HandlerOutcome::Retry {
                reason: "retry in a batch of 4".into(),
                delay_ms: None,
            },
        ]
    );
    let stats = batch.stats();
    assert_eq!((stats.calls, stats.instantiations), (1, 1), "{stats:?}");
    // `handle` of a batch handler is its batch of one.
    assert_eq!(
        batch
            .invoke(&lease("e-5", json!({"do": "reject"}), 1))
            .await,
        HandlerOutcome::Reject {
            reason: "reject in a batch of 1".into()
        }
    );
}

#[tokio::test]
async fn a_list_of_the_wrong_length_fails_every_delivery_of_the_call() {
    let batch = runner("batch", &[], Limits::default()).await;
    let leases = [
        lease("e-1", json!({"do": "ack"}), 1),
        lease("e-2", json!({"do": "skip"}), 1),
        lease("e-3", json!({"do": "ack"}), 1),
    ];
    let failed = HandlerOutcome::Failed(HandlerFailure::BatchMismatch {
        deliveries: 3,
        outcomes: 2,
    });
    assert_eq!(batch.invoke_batch(&leases).await, vec![failed.clone(); 3]);
    let HandlerOutcome::Failed(failure) = failed else {
        unreachable!()
    };
    assert_eq!(
        failure.reason(),
        "handler_error: handle-batch returned 2 outcomes for 3 deliveries"
    );
    // The guest returned normally: its instance stays warm.
    let stats = batch.stats();
    assert_eq!((stats.discarded, stats.warm), (0, 1), "{stats:?}");
}

#[tokio::test]
async fn a_trap_in_a_batch_fails_every_delivery_and_discards_the_instance() {
    let crash = runner("crash", &[], Limits::default()).await;
    assert!(
        crash.batches(),
        "the SDK's handler! exports handle-batch too"
    );
    let leases = [
        lease("e-1", json!({}), 1),
        lease("e-2", json!({"panic": true}), 1),
        lease("e-3", json!({}), 1),
    ];
    let outcomes = crash.invoke_batch(&leases).await;
    assert_eq!(outcomes.len(), 3);
    for outcome in &outcomes {
        let HandlerOutcome::Failed(HandlerFailure::Trap(message)) = outcome else {
            panic!("not a trap: {outcome:?}");
        };
        assert!(message.contains("unreachable"), "{message}");
    }
    let stats = crash.stats();
    assert_eq!(
        (stats.calls, stats.traps, stats.discarded),
        (1, 1, 1),
        "{stats:?}"
    );
    // The next batch gets a new instance and goes through.
    let next = [lease("e-4", json!({}), 1), lease("e-5", json!({}), 1)];
    assert_eq!(
        crash.invoke_batch(&next).await,
        [HandlerOutcome::Ack, HandlerOutcome::Ack]
    );
}

#[tokio::test]
async fn a_component_of_the_first_contract_is_called_once_per_delivery() {
    assert!(!module("classic").await.batches());
    let classic = runner("classic", &[], Limits::default()).await;
    assert!(!classic.batches());
    assert_eq!(
        classic.invoke(&lease("e-1", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
    let leases = [lease("e-2", json!({}), 1), lease("e-3", json!({}), 1)];
    assert_eq!(
        classic.invoke_batch(&leases).await,
        [HandlerOutcome::Ack, HandlerOutcome::Ack]
    );
    assert_eq!(classic.stats().calls, 3);
}
