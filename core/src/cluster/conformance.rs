//! What every cluster store must do, run against each by
//! [`cluster_conformance!`](crate::cluster_conformance) with two handles on
//! one store (two servers): nodes, modules, compare-and-set handler
//! records, and a write on one waking the other's watchers.
//!
//! ```ignore
//! async fn pair(clock: SharedClock)
//!     -> Option<(Arc<dyn ClusterStore>, Arc<dyn ClusterStore>)> { … }
//! rheo::cluster_conformance!(pair);
//! ```

#![allow(missing_docs)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{ClusterStore, NodeHandler, NodeRecord};
use crate::backend::conformance::START;
use crate::clock::{FrozenClock, SharedClock};
use crate::model::Timestamp;

/// Two handles on one fresh store, and the clock both read.
#[derive(Debug)]
pub struct Pair {
    pub a: Arc<dyn ClusterStore>,
    pub b: Arc<dyn ClusterStore>,
    pub clock: Arc<FrozenClock>,
    /// What must live as long as the handles (see [`Opened`]); dropped
    /// after them.
    _keep: Keep,
}

/// What a cluster factory opened: the two handles and, optionally,
/// whatever must live as long as they do (the backends whose listeners
/// carry each other's notifications, and with them the store's
/// [`Janitor`](crate::backend::conformance::Janitor)). A factory returns
/// `(a, b)` or `(a, b, keep)`.
#[derive(Debug)]
pub struct Opened {
    pub a: Arc<dyn ClusterStore>,
    pub b: Arc<dyn ClusterStore>,
    keep: Keep,
}

struct Keep {
    _held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keep(..)")
    }
}

impl From<(Arc<dyn ClusterStore>, Arc<dyn ClusterStore>)> for Opened {
    fn from((a, b): (Arc<dyn ClusterStore>, Arc<dyn ClusterStore>)) -> Self {
        Opened {
            a,
            b,
            keep: Keep { _held: None },
        }
    }
}

impl<K: std::any::Any + Send + Sync> From<(Arc<dyn ClusterStore>, Arc<dyn ClusterStore>, K)>
    for Opened
{
    fn from((a, b, keep): (Arc<dyn ClusterStore>, Arc<dyn ClusterStore>, K)) -> Self {
        Opened {
            a,
            b,
            keep: Keep {
                _held: Some(Box::new(keep)),
            },
        }
    }
}

impl Pair {
    pub async fn start<F, Fut, O>(factory: F) -> Option<Pair>
    where
        F: FnOnce(SharedClock) -> Fut,
        Fut: Future<Output = Option<O>>,
        O: Into<Opened>,
    {
        let clock = FrozenClock::new(START);
        let Opened { a, b, keep } = factory(clock.clone()).await?.into();
        Some(Pair {
            a,
            b,
            clock,
            _keep: keep,
        })
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_millis(START.as_millis() + seconds * 1000)
}

fn node(id: &str, heartbeat: Timestamp, handlers: Vec<NodeHandler>) -> NodeRecord {
    NodeRecord {
        id: id.to_owned(),
        address: format!("http://{id}:7070"),
        version: "0.1.0".to_owned(),
        started_at: START,
        heartbeat_at: heartbeat,
        handlers,
    }
}

fn ids(nodes: &[NodeRecord]) -> Vec<&str> {
    nodes.iter().map(|n| n.id.as_str()).collect()
}

pub async fn nodes_are_listed_while_they_heartbeat_and_go_when_they_leave(p: &Pair) {
    let running = vec![
        NodeHandler {
            name: "worker".into(),
            version: Some(2),
            digest: Some("ab".repeat(32)),
            status: "running".into(),
            canary: None,
        },
        // A canary's counts travel with the heartbeat (its judge sums them).
        NodeHandler {
            name: "tried".into(),
            version: Some(1),
            digest: Some("cd".repeat(32)),
            status: "paused".into(),
            canary: Some(crate::cluster::NodeCanary {
                id: "0123456789abcdef".into(),
                version: 3,
                counts: crate::cluster::CanaryCounts {
                    current_handled: 180,
                    current_failed: 2,
                    canary_handled: 20,
                    canary_failed: 4,
                },
            }),
        },
    ];
    p.a.heartbeat(&node("n1", at(0), running.clone()), START)
        .await
        .unwrap();
    p.b.heartbeat(&node("n2", at(0), vec![]), START)
        .await
        .unwrap();
    let listed = p.b.nodes(at(0)).await.unwrap();
    assert_eq!(ids(&listed), ["n1", "n2"]);
    assert_eq!(listed[0], node("n1", at(0), running), "stored as given");

    // n2 beats again later; n1 falls silent: listed only while its last
    // beat is within the window asked for.
    p.b.heartbeat(&node("n2", at(20), vec![]), START)
        .await
        .unwrap();
    assert_eq!(ids(&p.a.nodes(at(10)).await.unwrap()), ["n2"]);
    assert_eq!(ids(&p.a.nodes(at(0)).await.unwrap()), ["n1", "n2"]);
    assert_eq!(
        p.a.nodes(at(0)).await.unwrap()[1].heartbeat_at,
        at(20),
        "a heartbeat refreshes the row"
    );

    // Forgetting drops silent rows for good.
    p.b.heartbeat(&node("n2", at(30), vec![]), at(5))
        .await
        .unwrap();
    assert_eq!(ids(&p.a.nodes(START).await.unwrap()), ["n2"]);

    p.b.leave("n2").await.unwrap();
    p.b.leave("n2").await.unwrap();
    assert!(p.a.nodes(START).await.unwrap().is_empty());
}

pub async fn modules_are_kept_by_digest_until_forgotten(p: &Pair) {
    p.a.put_module("d1", b"one", at(0)).await.unwrap();
    p.b.put_module("d1", b"other bytes", at(1)).await.unwrap();
    p.b.put_module("d2", &[0u8, 255, 7], at(10)).await.unwrap();
    assert_eq!(
        p.b.module("d1").await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        p.a.module("d2").await.unwrap().as_deref(),
        Some(&[0u8, 255, 7][..])
    );
    assert_eq!(p.a.module("nope").await.unwrap(), None);

    // Only modules stored before the cut and not kept go.
    assert_eq!(p.a.forget_modules(&["d1".into()], at(20)).await.unwrap(), 1);
    assert!(p.b.module("d2").await.unwrap().is_none());
    assert_eq!(p.a.forget_modules(&[], at(0)).await.unwrap(), 0);
    assert!(p.b.module("d1").await.unwrap().is_some());
    assert_eq!(p.a.forget_modules(&[], at(1)).await.unwrap(), 1);
}

pub async fn handler_records_are_written_by_compare_and_set(p: &Pair) {
    assert!(p.a.handlers().await.unwrap().is_empty());
    assert_eq!(p.a.handler("h").await.unwrap(), None);
    assert!(p.a.put_handler("h", 0, &json!({"v": 1})).await.unwrap());
    assert!(
        !p.b.put_handler("h", 0, &json!({"v": "again"}))
            .await
            .unwrap(),
        "a second create loses"
    );
    let rec = p.b.handler("h").await.unwrap().expect("the record");
    assert_eq!((rec.revision, rec.doc.clone()), (1, json!({"v": 1})));

    // Two writers read revision 1: one wins, the other must re-read.
    assert!(p.b.put_handler("h", 1, &json!({"v": 2})).await.unwrap());
    assert!(!p.a.put_handler("h", 1, &json!({"v": 3})).await.unwrap());
    assert!(!p.a.delete_handler("h", 1).await.unwrap());
    let rec = p.a.handler("h").await.unwrap().expect("the record");
    assert_eq!((rec.revision, rec.doc), (2, json!({"v": 2})));

    assert!(p.a.put_handler("g", 0, &json!({})).await.unwrap());
    let all = p.b.handlers().await.unwrap();
    let names: Vec<(&str, u64)> = all.iter().map(|r| (r.name.as_str(), r.revision)).collect();
    assert_eq!(names, [("g", 1), ("h", 2)]);

    assert!(p.b.delete_handler("h", 2).await.unwrap());
    assert!(!p.b.delete_handler("h", 2).await.unwrap(), "already gone");
    assert_eq!(p.a.handler("h").await.unwrap(), None);
    // A name deleted starts again at revision 1.
    assert!(p.a.put_handler("h", 0, &json!({"v": 9})).await.unwrap());
    assert_eq!(p.b.handler("h").await.unwrap().unwrap().revision, 1);
}

pub async fn concurrent_writers_of_one_record_never_lose_a_write(p: &Pair) {
    assert!(p.a.put_handler("h", 0, &json!({"n": 0})).await.unwrap());
    // Each writer adds its own mark, re-reading after every lost race:
    // all 20 marks end up in the record.
    let writer = |store: Arc<dyn ClusterStore>, who: &'static str| async move {
        for i in 0..10 {
            loop {
                let rec = store.handler("h").await.unwrap().unwrap();
                let mut doc = rec.doc.clone();
                doc[format!("{who}{i}")] = json!(true);
                if store.put_handler("h", rec.revision, &doc).await.unwrap() {
                    break;
                }
            }
        }
    };
    let (x, y) = tokio::join!(
        tokio::spawn(writer(Arc::clone(&p.a), "a")),
        tokio::spawn(writer(Arc::clone(&p.b), "b"))
    );
    x.unwrap();
    y.unwrap();
    let rec = p.a.handler("h").await.unwrap().unwrap();
    assert_eq!(rec.revision, 21);
    assert_eq!(rec.doc.as_object().unwrap().len(), 21, "{}", rec.doc);
}

pub async fn a_handler_write_on_one_node_wakes_the_other(p: &Pair) {
    let mut watching = p.b.changes();
    watching.mark_unchanged();
    assert!(p.a.put_handler("h", 0, &json!({})).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), watching.changed())
        .await
        .expect("the other node's watcher wakes within 10 s")
        .unwrap();
    watching.mark_unchanged();
    assert!(p.a.delete_handler("h", 1).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), watching.changed())
        .await
        .expect("a delete wakes it too")
        .unwrap();
    assert!(p.a.poll_interval() <= Duration::from_secs(60));
}

#[macro_export]
macro_rules! cluster_conformance {
    ($factory:ident) => {
        $crate::__cluster_tests!($factory [
            nodes_are_listed_while_they_heartbeat_and_go_when_they_leave,
            modules_are_kept_by_digest_until_forgotten,
            handler_records_are_written_by_compare_and_set,
            concurrent_writers_of_one_record_never_lose_a_write,
            a_handler_write_on_one_node_wakes_the_other,
        ]);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __cluster_tests {
    ($factory:ident [ $($check:ident),* $(,)? ]) => {
        mod cluster_conformance {
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    use $crate::cluster::conformance;
                    if let Some(p) = conformance::Pair::start(super::$factory).await {
                        conformance::$check(&p).await;
                    }
                }
            )*
        }
    };
}
