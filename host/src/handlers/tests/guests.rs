//! Each example guest doing its job through the whole runtime.

use serde_json::json;

use super::{Fixture, eventually, sn};
use crate::backend::{Backend, Partitions, ReadRequest, Replay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_acks_a_thousand_events() {
    let f = Fixture::new().await;
    f.append((0..1000).map(|i| json!({ "n": i })).collect())
        .await;
    f.deploy("echo", f.manifest("echo"), "echo").await;
    eventually("all acked", async || f.lag("echo").await == 0).await;
    eventually("counted", async || {
        f.view("echo").await.counters.acked == 1000
    })
    .await;
    let c = f.view("echo").await.counters;
    assert_eq!((c.processed, c.retried, c.trapped, c.lost), (1000, 0, 0, 0));
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_succeeds_on_its_configured_attempt() {
    let f = Fixture::new().await;
    f.append(vec![json!({}); 10]).await;
    let mut m = f.manifest("flaky");
    m.config.insert("succeed_on_attempt".into(), "3".into());
    f.deploy("flaky", m, "flaky").await;
    eventually("all acked", async || f.lag("flaky").await == 0).await;
    eventually("counted", async || {
        f.view("flaky").await.counters.acked == 10
    })
    .await;
    let c = f.view("flaky").await.counters;
    assert_eq!(c.retried, 20, "attempts 1 and 2 of each event were retries");
    assert!(f.dead_letters("flaky").await.is_empty());
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_events_land_in_the_dead_letters_with_the_guests_reason() {
    let f = Fixture::new().await;
    f.append(vec![
        json!({"poison": true, "reason": "bad checksum"}),
        json!({"ok": 1}),
        json!({"poison": true}),
    ])
    .await;
    f.deploy("poison", f.manifest("poison"), "poison").await;
    eventually("all settled", async || f.lag("poison").await == 0).await;
    let mut reasons: Vec<String> = f
        .dead_letters("poison")
        .await
        .into_iter()
        .map(|d| d.reason)
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["bad checksum", "poison event"]);
    eventually("counted", async || {
        f.view("poison").await.counters.processed == 3
    })
    .await;
    let c = f.view("poison").await.counters;
    assert_eq!((c.rejected, c.acked), (2, 1));
    f.registry.shutdown().await;
}

/// Creates stream `out`, appends `payloads` to `in`, deploys the transform
/// guest from `in` to `out` and waits until it has processed them all.
async fn transform_into_out(f: &Fixture, payloads: Vec<serde_json::Value>) {
    f.backend
        .create_stream(crate::backend::CreateStream {
            name: sn("out"),
            partition_count: 1,
            retention: None,
        })
        .await
        .unwrap();
    f.append(payloads).await;
    let mut m = f.manifest("transform");
    m.config.insert("target_stream".into(), "out".into());
    f.deploy("transform", m, "transform").await;
    eventually("processed", async || f.lag("transform").await == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transform_appends_once_even_when_the_source_is_retried() {
    let f = Fixture::new().await;
    transform_into_out(&f, vec![json!({"n": 1}), json!({"n": 2})]).await;
    // Process every source event a second time, as a retry would.
    f.backend
        .replay(
            &sn("in"),
            &super::gn("transform"),
            Replay::FromSequence {
                after: 0,
                partitions: Partitions::All,
            },
        )
        .await
        .unwrap();
    eventually("processed again", async || {
        f.view("transform").await.counters.acked == 4
    })
    .await;
    let out = f
        .backend
        .read(ReadRequest {
            stream: sn("out"),
            partition: 0,
            after: 0,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(
        out.len(),
        2,
        "each source event was transformed exactly once"
    );
    assert!(out.iter().all(|e| e.id.as_str().ends_with(":transformed")));
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_is_stopped_at_its_timeout_retried_then_dead_lettered() {
    let f = Fixture::new().await;
    f.create_group("spin", 2).await;
    f.append(vec![json!({"spin": true})]).await;
    let mut m = f.manifest("spin");
    m.timeout_ms = 100;
    f.deploy("spin", m, "spin").await;
    eventually("dead-lettered", async || {
        f.dead_letters("spin").await.len() == 1
    })
    .await;
    let dead = f.dead_letters("spin").await;
    assert_eq!(
        dead[0].reason,
        "max_attempts: handler_error: timed out after 100 ms"
    );
    assert_eq!(dead[0].attempt, 2);
    eventually("counted", async || {
        f.view("spin").await.counters.timed_out == 2
    })
    .await;
    assert_eq!(f.view("spin").await.counters.retried, 2);
    // The host is fine and the next delivery is handled.
    f.append(vec![json!({"spin": false})]).await;
    eventually("next acked", async || {
        f.view("spin").await.counters.acked == 1
    })
    .await;
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hog_is_stopped_at_its_memory_cap() {
    let f = Fixture::new().await;
    f.create_group("hog", 1).await;
    f.append(vec![json!({"hog": true})]).await;
    let mut m = f.manifest("hog");
    m.memory_mb = 16;
    f.deploy("hog", m, "hog").await;
    eventually("dead-lettered", async || {
        f.dead_letters("hog").await.len() == 1
    })
    .await;
    let dead = f.dead_letters("hog").await;
    assert_eq!(
        dead[0].reason,
        "max_attempts: handler_error: memory limit of 16 MiB exceeded"
    );
    f.append(vec![json!({"hog": false})]).await;
    eventually("next acked", async || {
        f.view("hog").await.counters.acked == 1
    })
    .await;
    assert_eq!(f.view("hog").await.counters.trapped, 1);
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_probe_finds_nothing_to_read() {
    let f = Fixture::new().await;
    f.append(vec![json!({})]).await;
    f.deploy("probe", f.manifest("probe"), "probe").await;
    eventually("settled", async || f.lag("probe").await == 0).await;
    assert!(
        f.dead_letters("probe").await.is_empty(),
        "the probe rejects when a file, socket or variable yields data: {:?}",
        f.dead_letters("probe").await
    );
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_sees_payload_numbers_exactly_as_sent() {
    // Past 2^64 either way, and a decimal: an f64 anywhere on the way
    // (storage, the delivery's JSON text, the guest's parser) would change them.
    let sent = r#"{"f":1.5,"n":18446744073709551617,"neg":-18446744073709551617}"#;
    let f = Fixture::new().await;
    transform_into_out(&f, vec![serde_json::from_str(sent).unwrap()]).await;
    let read = |stream| ReadRequest {
        stream: sn(stream),
        partition: 0,
        after: 0,
        limit: 10,
    };
    let source = f.backend.read(read("in")).await.unwrap();
    let derived = f.backend.read(read("out")).await.unwrap();
    assert_eq!(derived.len(), 1);
    // The transform guest copies the payload it was delivered and adds `source`.
    let mut payload = derived[0].payload.clone();
    assert_eq!(payload.remove("source"), Some(json!(source[0].id.as_str())));
    assert_eq!(serde_json::to_string(&payload).unwrap(), sent);
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_guest_acks_retries_and_rejects_items_of_one_batch_separately() {
    let f = Fixture::new().await;
    f.create_group("batch", 2).await;
    let mut payloads = Vec::new();
    for i in 0..30 {
        payloads.push(match i % 3 {
            0 => json!({"do": "ack"}),
            1 => json!({"do": "retry", "delay_ms": 0}),
            _ => json!({"do": "reject"}),
        });
    }
    f.append(payloads).await;
    let mut m = f.manifest("batch");
    (m.batch_size, m.max_demand, m.concurrency) = (10, 20, 2);
    f.deploy("batch", m, "batch").await;
    eventually("all settled", async || f.lag("batch").await == 0).await;
    eventually("counted", async || {
        f.view("batch").await.counters.processed == 40
    })
    .await;
    let c = f.view("batch").await.counters;
    // 10 acked; 10 retried once, then dead on attempt 2; 10 rejected.
    assert_eq!((c.acked, c.retried, c.rejected), (10, 20, 10), "{c:?}");
    let dead = f.dead_letters("batch").await;
    assert_eq!(dead.len(), 20);
    let rejected = dead
        .iter()
        .filter(|d| d.reason.starts_with("reject in a batch of "))
        .count();
    let exhausted = dead
        .iter()
        .filter(|d| d.reason.starts_with("max_attempts: retry in a batch of "))
        .count();
    assert_eq!((rejected, exhausted), (10, 10), "{dead:?}");
    // Calls had more than one delivery.
    assert!(
        dead.iter().any(|d| !d.reason.ends_with("batch of 1")),
        "{dead:?}"
    );
    f.registry.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_size_above_1_needs_a_module_that_exports_handle_batch() {
    let f = Fixture::new().await;
    let mut m = f.manifest("classic");
    m.batch_size = 4;
    let err = f
        .registry
        .deploy(
            super::hn("classic"),
            m.clone(),
            rheo_wasm::testing::guest("classic"),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("needs a module that exports handle-batch"),
        "{err}"
    );
    // The same module with batch_size 1 runs, one delivery a call.
    f.append(vec![json!({}); 5]).await;
    m.batch_size = 1;
    f.deploy("classic", m, "classic").await;
    eventually("all acked", async || f.lag("classic").await == 0).await;
    f.registry.shutdown().await;
}
