//! Dry runs: a candidate over real history next to the live version,
//! changing nothing.

use serde_json::json;

use super::{Fixture, eventually, gn, hn, sn};
use crate::backend::{Backend, CreateStream, FetchRequest, Partitions};
use crate::handlers::RegistryError;
use crate::model::{ConsumerId, GroupInfo, Query, Stream};
use crate::settle::HandlerOutcome;
use rheo_wasm::testing::guest;

/// Everything a dry run must leave alone: the streams' watermarks, and for
/// each group its info (lag, frontier, cursors, in flight, dead-letter
/// count) and its dead letters (with their attempts and reasons).
async fn state(f: &Fixture, groups: &[&str]) -> (Vec<Stream>, Vec<(GroupInfo, String)>) {
    let streams = f.backend.list_streams().await.unwrap();
    let mut infos = Vec::new();
    for group in groups {
        let info = f.backend.group_info(&sn("in"), &gn(group)).await.unwrap();
        let dead = format!("{:?}", f.dead_letters(group).await);
        infos.push((info, dead));
    }
    (streams, infos)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_poison_where_echo_is_live_lists_what_it_would_reject_and_changes_nothing() {
    let f = Fixture::new().await;
    let poisoned = [3, 7, 11];
    f.append(
        (0..20)
            .map(|i| {
                if poisoned.contains(&i) {
                    json!({"n": i, "poison": true, "reason": format!("bad {i}")})
                } else {
                    json!({"n": i})
                }
            })
            .collect(),
    )
    .await;
    f.deploy("worker", f.manifest("live"), "echo").await;
    eventually("echo acked everything", async || f.lag("live").await == 0).await;
    // A second group mid-flight: two deliveries leased, one dead letter.
    f.create_group("manual", 1).await;
    let leases = f
        .backend
        .fetch(FetchRequest {
            stream: sn("in"),
            group: gn("manual"),
            limit: 3,
            consumer_id: ConsumerId::generate(),
            lease_ms: 30_000,
            partitions: Partitions::All,
        })
        .await
        .unwrap();
    assert_eq!(leases.len(), 3);
    f.backend
        .reject(
            &sn("in"),
            &gn("manual"),
            leases[0].target(),
            Some("by hand".into()),
        )
        .await
        .unwrap();
    let before = state(&f, &["live", "manual"]).await;
    let acked_before = f.view("worker").await.counters.acked;

    let report = f
        .registry
        .trial(&hn("worker"), guest("poison"), Query::default())
        .await
        .unwrap();

    assert_eq!(report.events.len(), 20);
    assert_eq!(report.current.as_ref().map(|c| c.0), Some(1));
    let differing: Vec<_> = report.events.iter().filter(|e| e.differs()).collect();
    let rejected: Vec<i64> = differing
        .iter()
        .map(|e| e.event.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(rejected.len(), poisoned.len(), "{report:#?}");
    for (n, e) in rejected.iter().zip(&differing) {
        assert!(poisoned.contains(&(*n as usize)), "{n} was not poisoned");
        assert_eq!(
            e.candidate.outcome,
            HandlerOutcome::Reject {
                reason: format!("bad {n}")
            }
        );
        assert_eq!(e.current.as_ref().unwrap().outcome, HandlerOutcome::Ack);
    }
    // Differences first, each half in sequence order.
    assert!(report.events[..3].iter().all(|e| e.differs()));
    assert!(report.events[3..].iter().all(|e| !e.differs()));
    assert!(
        report.events[3..]
            .iter()
            .all(|e| e.candidate.outcome == HandlerOutcome::Ack)
    );
    assert_eq!(report.candidate_totals.rejected, 3);
    assert_eq!(report.candidate_totals.acked, 17);
    assert_eq!(report.current_totals.as_ref().unwrap().acked, 20);
    assert_eq!(
        report.candidate_digest,
        crate::wasm::Digest::of(&guest("poison"))
    );

    // Nothing changed: no group, no stream, no handler counter.
    assert_eq!(state(&f, &["live", "manual"]).await, before);
    assert_eq!(f.view("worker").await.counters.acked, acked_before);
    assert_eq!(f.view("worker").await.version, Some(1));

    // The query chooses the events (and pages).
    let report = f
        .registry
        .trial(
            &hn("worker"),
            guest("poison"),
            Query {
                limit: 5,
                ..Query::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(report.events.len(), 5);
    assert_eq!(report.candidate_totals.rejected, 1);
    assert!(report.next_cursor.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_keeps_appends_instead_of_writing_them() {
    let f = Fixture::new().await;
    for name in ["out", "other"] {
        f.backend
            .create_stream(CreateStream {
                name: sn(name),
                partition_count: 1,
                retention: None,
            })
            .await
            .unwrap();
    }
    f.append((0..6).map(|i| json!({ "n": i })).collect()).await;
    let mut manifest = f.manifest("live");
    manifest.config.insert("target_stream".into(), "out".into());
    manifest.append_to = Some(vec![sn("out")]);
    f.deploy("pipeline", manifest, "transform").await;
    eventually("transformed everything", async || f.lag("live").await == 0).await;
    let before = state(&f, &["live"]).await;
    assert_eq!(
        before
            .0
            .iter()
            .find(|s| s.name == sn("out"))
            .unwrap()
            .high_watermarks,
        [6]
    );

    // The same module: the same derived events, kept, not written.
    let report = f
        .registry
        .trial(&hn("pipeline"), guest("transform"), Query::default())
        .await
        .unwrap();
    assert_eq!(report.events.len(), 6);
    for e in &report.events {
        assert_eq!(e.candidate.appends.len(), 1, "{e:#?}");
        let append = &e.candidate.appends[0];
        assert_eq!(append.stream, sn("out"));
        assert_eq!(
            append.input.id.as_ref().map(|id| id.to_string()),
            Some(format!("{}:transformed", e.event.id))
        );
        assert_eq!(e.candidate.outcome, HandlerOutcome::Ack);
        assert_eq!(e.current.as_ref().unwrap().appends.len(), 1);
    }
    assert_eq!(report.candidate_totals.appended, 6);
    assert_eq!(state(&f, &["live"]).await, before, "a dry run appended");

    // echo appends nothing: every event differs by the missing append.
    let report = f
        .registry
        .trial(&hn("pipeline"), guest("echo"), Query::default())
        .await
        .unwrap();
    assert!(report.events.iter().all(|e| e.differs()));
    assert_eq!(report.candidate_totals.appended, 0);
    assert_eq!(report.current_totals.unwrap().appended, 6);
    assert_eq!(state(&f, &["live"]).await, before);
}

#[tokio::test]
async fn a_dry_run_refuses_what_a_deploy_would() {
    let f = Fixture::new().await;
    f.append(vec![json!({"n": 1})]).await;
    let missing = f
        .registry
        .trial(&hn("nobody"), guest("echo"), Query::default())
        .await
        .unwrap_err();
    assert!(matches!(missing, RegistryError::NotFound(_)), "{missing}");
    f.deploy("worker", f.manifest("live"), "echo").await;
    let broken = f
        .registry
        .trial(
            &hn("worker"),
            b"\0asm not a component".to_vec(),
            Query::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(broken, RegistryError::Module(_)), "{broken}");
    // A refused candidate leaves the handler as it was.
    let view = f.view("worker").await;
    assert_eq!((view.version, view.last_error), (Some(1), None));
}
