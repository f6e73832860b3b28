//! `GET /v1/nodes`: this server alone on a backend it owns; every node
//! heard from within the timeout in a cluster, with what each runs.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use super::TestApp;
use crate::cluster::memory::MemoryCluster;
use crate::cluster::{ClusterStore, Membership, MembershipSettings, NodeHandler};

fn settings(id: &str) -> MembershipSettings {
    MembershipSettings {
        id: id.to_owned(),
        address: format!("http://{id}.example:7070"),
        timeout: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn a_single_node_lists_itself() {
    let mut app = TestApp::new();
    let me = Arc::new(Membership::new(
        settings("solo"),
        app.clock.clone(),
        None,
        Arc::new(Vec::new),
    ));
    app.state = app.state.clone().with_membership(me);
    app.router = crate::api::router(app.state.clone());
    let a = app.get("/v1/nodes").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["clustered"], false);
    assert_eq!(a.body["this_node"], "solo");
    let nodes = a.body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["address"], "http://solo.example:7070");
    assert_eq!(nodes[0]["handlers"], json!([]));
    assert_eq!(nodes[0]["started_at"], "2026-01-01T00:00:00.000Z");
}

#[tokio::test]
async fn a_cluster_lists_the_live_nodes_with_their_handlers() {
    let mut app = TestApp::new();
    let store: Arc<dyn ClusterStore> = Arc::new(MemoryCluster::new());
    let other = Arc::new(Membership::new(
        settings("b"),
        app.clock.clone(),
        Some(Arc::clone(&store)),
        Arc::new(|| {
            vec![NodeHandler {
                name: "billing".into(),
                version: Some(3),
                digest: Some("ab".repeat(32)),
                status: "paused".into(),
                canary: None,
            }]
        }),
    ));
    other.beat().await.unwrap();
    let me = Arc::new(Membership::new(
        settings("a"),
        app.clock.clone(),
        Some(store),
        Arc::new(Vec::new),
    ));
    me.beat().await.unwrap();
    app.state = app.state.clone().with_membership(Arc::clone(&me));
    app.router = crate::api::router(app.state.clone());

    let a = app.get("/v1/nodes").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(
        (&a.body["clustered"], &a.body["this_node"]),
        (&json!(true), &json!("a"))
    );
    let ids: Vec<&str> = a.body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(
        a.body["nodes"][1]["handlers"],
        json!([{"name": "billing", "version": 3, "digest": "ab".repeat(32), "status": "paused"}])
    );

    // b falls silent past the timeout while a keeps beating.
    app.clock.advance(10_001);
    me.beat().await.unwrap();
    let a = app.get("/v1/nodes").await;
    let ids: Vec<&str> = a.body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a"]);
}
