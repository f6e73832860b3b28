use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::FrozenClock;
use crate::cluster::memory::MemoryCluster;
use crate::model::Timestamp;

fn settings(id: &str) -> MembershipSettings {
    MembershipSettings {
        id: id.to_owned(),
        address: format!("http://{id}:7070"),
        timeout: Duration::from_secs(10),
    }
}

fn running(name: &'static str) -> RunningHandlers {
    Arc::new(move || {
        vec![NodeHandler {
            name: name.to_owned(),
            version: Some(1),
            digest: None,
            status: "running".to_owned(),
            canary: None,
        }]
    })
}

#[tokio::test]
async fn without_a_cluster_the_server_is_the_only_node() {
    let clock = FrozenClock::at_system_time();
    let me = Arc::new(Membership::new(
        settings("solo"),
        clock.clone(),
        None,
        running("h"),
    ));
    me.join().await.unwrap();
    let nodes = me.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(
        (
            nodes[0].id.as_str(),
            nodes[0].address.as_str(),
            nodes[0].handlers[0].name.as_str()
        ),
        ("solo", "http://solo:7070", "h")
    );
    assert!(!me.clustered());
    me.leave().await.unwrap();
}

#[tokio::test]
async fn nodes_see_each_other_until_one_is_silent_past_the_timeout_or_leaves() {
    let store: Arc<dyn ClusterStore> = Arc::new(MemoryCluster::new());
    let (c1, c2) = (FrozenClock::at_system_time(), FrozenClock::at_system_time());
    let n1 = Arc::new(Membership::new(
        settings("n1"),
        c1.clone(),
        Some(Arc::clone(&store)),
        running("a"),
    ));
    let n2 = Arc::new(Membership::new(
        settings("n2"),
        c2.clone(),
        Some(Arc::clone(&store)),
        running("b"),
    ));
    n1.join().await.unwrap();
    n2.join().await.unwrap();
    let listed = n1.nodes().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["n1", "n2"]);
    assert_eq!(listed[1].handlers[0].name, "b", "each says what it runs");

    // n2 stops beating (its heartbeat task is stopped without a leave);
    // n1's clock moves past the timeout and n1 beats again.
    n2.stop.cancel();
    c1.advance(11_000);
    n1.beat().await.unwrap();
    let ids: Vec<String> = n1
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(ids, ["n1"], "a silent node is not listed");

    // It comes back, then leaves: gone at once.
    c2.advance(11_000);
    n2.beat().await.unwrap();
    assert_eq!(n1.nodes().await.unwrap().len(), 2);
    n2.leave().await.unwrap();
    let ids: Vec<String> = n1
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(ids, ["n1"]);
}

#[test]
fn heartbeats_come_four_times_per_timeout() {
    let s = settings("x");
    assert_eq!(s.heartbeat_interval(), Duration::from_millis(2500));
    let fast = MembershipSettings {
        timeout: Duration::from_millis(100),
        ..s
    };
    assert_eq!(fast.heartbeat_interval(), Duration::from_millis(50));
    assert!(MembershipSettings::default_id().contains('-'));
}

#[tokio::test(start_paused = true)]
async fn a_change_in_what_a_node_runs_is_reported_before_the_next_heartbeat() {
    let store: Arc<dyn ClusterStore> = Arc::new(MemoryCluster::new());
    let handlers = Arc::new(parking_lot::Mutex::new(Vec::<NodeHandler>::new()));
    let seen = Arc::clone(&handlers);
    let node = Arc::new(Membership::new(
        settings("n1"),
        FrozenClock::at_system_time(),
        Some(Arc::clone(&store)),
        Arc::new(move || seen.lock().clone()),
    ));
    node.join().await.unwrap();
    let reported = || async {
        store.nodes(Timestamp::EPOCH).await.unwrap()[0]
            .handlers
            .clone()
    };
    assert!(reported().await.is_empty());

    handlers.lock().push(NodeHandler {
        name: "h".to_owned(),
        version: Some(1),
        digest: None,
        status: "running".to_owned(),
        canary: None,
    });
    // Virtual time, a tenth of the 2.5 s heartbeat interval.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(reported().await.len(), 1, "reported at once");
    node.leave().await.unwrap();
    assert!(store.nodes(Timestamp::EPOCH).await.unwrap().is_empty());
}
