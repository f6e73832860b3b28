//! Cluster mode (`registry/cluster.rs`, `docs/cluster.md`): several
//! registries — nodes, each with its own node id — over one shared memory
//! backend and one [`MemoryCluster`]. A change through any node is written
//! to the handler's record; the other nodes catch up when they reconcile,
//! which these tests call explicitly (no watcher, no sleeping), so what
//! each node runs at every step is known.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::json;

use super::{eventually, gn, hn, obj, sn};
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, CreateStream, Partitions};
use crate::clock::FrozenClock;
use crate::cluster::memory::MemoryCluster;
use crate::cluster::{ClusterStore, NodeHandler};
use crate::handlers::registry::CompileHook;
use crate::handlers::{
    HandlerRegistry, HandlerStatus, HandlerView, Manifest, RegistryError, watch_cluster,
};
use crate::model::{EventInput, Timestamp};
use crate::wasm::Digest;
use rheo_wasm::testing::{engine, guest};

/// One shared backend (on a frozen clock, with stream `in` of 2
/// partitions) and one shared cluster store.
struct Cluster {
    backend: Arc<MemoryBackend>,
    store: Arc<MemoryCluster>,
}

impl Cluster {
    async fn new() -> Self {
        let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
        let backend = Arc::new(MemoryBackend::new(clock));
        backend
            .create_stream(CreateStream {
                name: sn("in"),
                partition_count: 2,
                retention: None,
            })
            .await
            .unwrap();
        Cluster {
            backend,
            store: Arc::new(MemoryCluster::new()),
        }
    }

    /// A cluster and two nodes of it without a directory, `node-a` and
    /// `node-b`.
    async fn pair() -> (Self, HandlerRegistry, HandlerRegistry) {
        let c = Self::new().await;
        let (a, b) = (c.node("node-a", None), c.node("node-b", None));
        (c, a, b)
    }

    /// A node of this cluster, with a handlers directory or none.
    fn node(&self, id: &str, dir: Option<&Path>) -> HandlerRegistry {
        HandlerRegistry::new(engine(), self.backend.clone(), dir)
            .unwrap()
            .with_node_id(id)
            .with_cluster(self.store.clone())
    }

    /// The revision of `name`'s record (none: no record).
    async fn revision(&self, name: &str) -> Option<u64> {
        self.store.handler(name).await.unwrap().map(|r| r.revision)
    }

    async fn append(&self, range: std::ops::Range<u64>) {
        let inputs = range
            .map(|n| EventInput::with_payload(obj(json!({ "n": n }))))
            .collect();
        self.backend.append(&sn("in"), inputs).await.unwrap();
    }

    async fn lag(&self, group: &str) -> u64 {
        self.backend
            .lag(&sn("in"), &gn(group), &Partitions::All)
            .await
            .unwrap()
            .lag
    }
}

/// Drains every node's handlers.
async fn stop(nodes: &[&HandlerRegistry]) {
    for node in nodes {
        node.shutdown().await;
    }
}

/// A manifest consuming `in` as `group`.
fn manifest(group: &str) -> Manifest {
    let mut m = Manifest::new(sn("in"), gn(group));
    m.concurrency = 2;
    m
}

fn digest(guest_name: &str) -> String {
    Digest::of(&guest(guest_name)).to_hex()
}

type State = (Option<u64>, Option<u64>, Option<String>, HandlerStatus);

/// Version, previous version, digest and status.
fn state_of(view: &HandlerView) -> State {
    (
        view.version,
        view.previous_version,
        view.digest.clone(),
        view.status,
    )
}

/// What `node` says it runs as `name`.
async fn state(node: &HandlerRegistry, name: &str) -> State {
    let view = node
        .get(&hn(name))
        .await
        .unwrap_or_else(|e| panic!("{name} on this node: {e}"));
    state_of(&view)
}

fn running(version: u64, guest_name: &str) -> State {
    (
        Some(version),
        None,
        Some(digest(guest_name)),
        HandlerStatus::Running,
    )
}

fn with_previous(version: u64, previous: u64, guest_name: &str, status: HandlerStatus) -> State {
    (
        Some(version),
        Some(previous),
        Some(digest(guest_name)),
        status,
    )
}

fn is_not_found<T: std::fmt::Debug>(result: Result<T, RegistryError>) -> bool {
    matches!(result, Err(RegistryError::NotFound(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_through_one_node_runs_on_another_once_it_reconciles() {
    let c = Cluster::new().await;
    let dir = tempfile::tempdir().unwrap();
    let a = c.node("node-a", Some(dir.path()));
    let b = c.node("node-b", None);

    let (view, created) = a
        .deploy(hn("first"), manifest("first"), guest("echo"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(state_of(&view), running(1, "echo"));
    assert_eq!(c.revision("first").await, Some(1));
    // In cluster mode the store keeps the handler, not the directory.
    assert!(!dir.path().join("first.toml").exists());

    // B has not looked yet.
    assert!(is_not_found(b.get(&hn("first")).await));
    assert!(b.running().is_empty());
    assert_eq!(a.reconcile().await, 0, "A runs what it wrote");

    assert_eq!(b.reconcile().await, 1);
    assert_eq!(state(&b, "first").await, running(1, "echo"));
    let expected = vec![NodeHandler {
        name: "first".into(),
        version: Some(1),
        digest: Some(digest("echo")),
        status: "running".into(),
        canary: None,
    }];
    assert_eq!(a.running(), expected);
    assert_eq!(b.running(), expected);

    // The revision is followed: nothing more to do on either node.
    assert_eq!(b.reconcile().await, 0);
    assert_eq!(a.reconcile().await, 0);
    assert_eq!(c.revision("first").await, Some(1));
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_rollbacks_and_deploys_through_either_node_are_followed() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("flip");
    a.deploy(name.clone(), manifest("flip"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);

    // A swap through B.
    let swapped = b.swap_module(&name, guest("poison")).await.unwrap();
    let v2 = with_previous(2, 1, "poison", HandlerStatus::Running);
    assert_eq!(state_of(&swapped), v2);
    assert_eq!(state(&a, "flip").await, running(1, "echo"), "not yet");
    assert_eq!(a.reconcile().await, 1);
    assert_eq!(state(&a, "flip").await, v2);
    assert_eq!(c.revision("flip").await, Some(2));

    // A rollback through A.
    let rolled = a.rollback(&name).await.unwrap();
    let back = with_previous(1, 2, "echo", HandlerStatus::Running);
    assert_eq!(state_of(&rolled), back);
    assert_eq!(b.reconcile().await, 1);
    assert_eq!(state(&b, "flip").await, back);
    assert_eq!(c.revision("flip").await, Some(3));

    // A deploy after the rollback does not reuse number 2.
    let (deployed, created) = b
        .deploy(name.clone(), manifest("flip"), guest("transform"))
        .await
        .unwrap();
    assert!(!created);
    let v3 = with_previous(3, 1, "transform", HandlerStatus::Running);
    assert_eq!(state_of(&deployed), v3);
    assert_eq!(a.reconcile().await, 1);
    assert_eq!(state(&a, "flip").await, v3);
    assert_eq!(c.revision("flip").await, Some(4));
    assert_eq!((a.reconcile().await, b.reconcile().await), (0, 0));

    // And a rollback through the other node brings back version 1 on both.
    a.rollback(&name).await.unwrap();
    assert_eq!(b.reconcile().await, 1);
    let again = with_previous(1, 3, "echo", HandlerStatus::Running);
    assert_eq!(state(&a, "flip").await, again);
    assert_eq!(state(&b, "flip").await, again);
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_through_one_node_reach_the_other() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("nap");
    a.deploy(name.clone(), manifest("nap"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);

    assert_eq!(a.pause(&name).await.unwrap().status, HandlerStatus::Paused);
    assert_eq!(b.get(&name).await.unwrap().status, HandlerStatus::Running);
    assert_eq!(b.reconcile().await, 1);
    let b_view = b.get(&name).await.unwrap();
    assert_eq!(
        (b_view.status, b_view.version),
        (HandlerStatus::Paused, Some(1))
    );
    assert_eq!(b.running()[0].status, "paused");
    // Pausing a paused handler writes nothing.
    let revision = c.revision("nap").await;
    assert_eq!(b.pause(&name).await.unwrap().status, HandlerStatus::Paused);
    assert_eq!(c.revision("nap").await, revision);
    assert_eq!(a.reconcile().await, 0);

    // A paused handler stays paused across a swap through the other node.
    let swapped = b.swap_module(&name, guest("poison")).await.unwrap();
    let paused_v2 = with_previous(2, 1, "poison", HandlerStatus::Paused);
    assert_eq!(state_of(&swapped), paused_v2);
    assert_eq!(a.reconcile().await, 1);
    assert_eq!(state(&a, "nap").await, paused_v2);

    assert_eq!(
        b.resume(&name).await.unwrap().status,
        HandlerStatus::Running
    );
    assert_eq!(a.get(&name).await.unwrap().status, HandlerStatus::Paused);
    assert_eq!(a.reconcile().await, 1);
    let running_v2 = with_previous(2, 1, "poison", HandlerStatus::Running);
    assert_eq!(state(&a, "nap").await, running_v2);
    assert_eq!(state(&b, "nap").await, running_v2);
    assert_eq!(a.running()[0].status, "running");
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_through_one_node_drains_the_handler_on_the_other() {
    let c = Cluster::new().await;
    let dir = tempfile::tempdir().unwrap();
    let a = c.node("node-a", Some(dir.path()));
    let b = c.node("node-b", None);
    let name = hn("gone");
    a.deploy(name.clone(), manifest("gone"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);

    let removed = b.remove(&name).await.unwrap();
    assert_eq!(state_of(&removed), running(1, "echo"));
    assert!(is_not_found(b.get(&name).await));
    assert_eq!(c.revision("gone").await, None);
    assert!(a.get(&name).await.is_ok(), "A has not looked yet");

    assert_eq!(a.reconcile().await, 1);
    assert!(is_not_found(a.get(&name).await));
    assert!(a.running().is_empty());
    assert!(a.list().await.is_empty());
    assert_eq!((a.reconcile().await, b.reconcile().await), (0, 0));

    // Removing it again, through either node, is NotFound.
    assert!(is_not_found(b.remove(&name).await));
    assert!(is_not_found(a.remove(&name).await));
    assert!(is_not_found(a.pause(&name).await));
    assert!(is_not_found(b.swap_module(&name, guest("echo")).await));
    assert_eq!(c.revision("gone").await, None);
    stop(&[&a, &b]).await;
}

/// Two threads meet here: each waits (bounded) until the other arrived.
#[derive(Default)]
struct Meeting {
    arrived: Mutex<usize>,
    met: Condvar,
}

/// Holds `node`'s first compile until the other node's first compile has
/// started too: both deploys have then read the record (a deploy reads it
/// before compiling), so both write on top of the same revision.
fn meet_at_first_compile(node: &HandlerRegistry, meeting: Arc<Meeting>) {
    let first = AtomicBool::new(true);
    node.set_compile_hook(Some(CompileHook(Arc::new(move |_| {
        if !first.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut arrived = meeting.arrived.lock();
        *arrived += 1;
        meeting.met.notify_all();
        let deadline = Instant::now() + Duration::from_secs(60);
        while *arrived < 2 {
            if meeting.met.wait_until(&mut arrived, deadline).timed_out() {
                panic!("the other node's deploy never compiled");
            }
        }
    }))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deploys_through_two_nodes_both_land() {
    let (c, a, b) = Cluster::pair().await;
    let meeting = Arc::new(Meeting::default());
    meet_at_first_compile(&a, meeting.clone());
    meet_at_first_compile(&b, meeting.clone());

    let (through_a, through_b) = tokio::join!(
        a.deploy(hn("both"), manifest("both"), guest("echo")),
        b.deploy(hn("both"), manifest("both"), guest("poison")),
    );
    let (view_a, created_a) = through_a.unwrap();
    let (view_b, created_b) = through_b.unwrap();
    assert_eq!(*meeting.arrived.lock(), 2, "both compiled at once");
    // One wrote first and created it; the other lost the race, re-read
    // and wrote version 2 on top.
    let (winner, loser, loser_guest) = if view_a.version == Some(1) {
        assert!(created_a && !created_b);
        (&a, &b, "poison")
    } else {
        assert!(created_b && !created_a);
        (&b, &a, "echo")
    };
    let winner_guest = if loser_guest == "echo" {
        "poison"
    } else {
        "echo"
    };
    let (first, second) = if view_a.version == Some(1) {
        (&view_a, &view_b)
    } else {
        (&view_b, &view_a)
    };
    assert_eq!(state_of(first), running(1, winner_guest));
    let v2 = with_previous(2, 1, loser_guest, HandlerStatus::Running);
    assert_eq!(state_of(second), v2);
    assert_eq!(c.revision("both").await, Some(2));

    assert_eq!(loser.reconcile().await, 0);
    assert_eq!(winner.reconcile().await, 1);
    assert_eq!(state(&a, "both").await, v2);
    assert_eq!(state(&b, "both").await, v2);
    // Version 1 is not lost: a rollback through either node restores it.
    let rolled = loser.rollback(&hn("both")).await.unwrap();
    let v1 = with_previous(1, 2, winner_guest, HandlerStatus::Running);
    assert_eq!(state_of(&rolled), v1);
    assert_eq!(winner.reconcile().await, 1);
    assert_eq!(state(winner, "both").await, v1);
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_does_not_compile_is_refused_before_any_node_sees_it() {
    let (c, a, b) = Cluster::pair().await;
    let garbage = b"not wasm at all".to_vec();

    // A new handler: nothing is recorded, stored or run anywhere.
    let err = a
        .deploy(hn("bad"), manifest("bad"), garbage.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Module(_)), "{err}");
    assert!(c.store.handlers().await.unwrap().is_empty());
    assert_eq!(
        c.store
            .module(&Digest::of(&garbage).to_hex())
            .await
            .unwrap(),
        None
    );
    assert!(is_not_found(a.get(&hn("bad")).await));
    assert_eq!(b.reconcile().await, 0);
    assert!(is_not_found(b.get(&hn("bad")).await));

    // A running handler: the running version keeps running everywhere.
    a.deploy(hn("kept"), manifest("kept"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);
    let err = a
        .swap_module(&hn("kept"), garbage.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Module(_)), "{err}");
    let err = b
        .deploy(hn("kept"), manifest("kept"), garbage.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Module(_)), "{err}");
    assert_eq!(c.revision("kept").await, Some(1));
    assert_eq!((a.reconcile().await, b.reconcile().await), (0, 0));
    for node in [&a, &b] {
        assert_eq!(state(node, "kept").await, running(1, "echo"));
    }
    // A refused swap is shown on the node it went through (as without a
    // cluster; a refused deploy is only answered with the error).
    let view = a.get(&hn("kept")).await.unwrap();
    assert!(
        view.last_error
            .as_deref()
            .is_some_and(|e| e.contains("invalid module")),
        "{view:?}"
    );
    assert_eq!(
        c.store
            .module(&Digest::of(&garbage).to_hex())
            .await
            .unwrap(),
        None
    );
    stop(&[&a, &b]).await;
}

/// Writes `<name>.toml` and `<name>.wasm` into a handlers directory.
fn write_handler(dir: &Path, name: &str, guest_name: &str) {
    std::fs::write(dir.join(format!("{name}.wasm")), guest(guest_name)).unwrap();
    std::fs::write(
        dir.join(format!("{name}.toml")),
        format!("stream = \"in\"\ngroup = \"{name}\"\nmodule = \"{name}.wasm\"\n"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_is_imported_only_where_the_cluster_lacks_the_handler() {
    let c = Cluster::new().await;
    let a = c.node("node-a", None);
    let dir = tempfile::tempdir().unwrap();
    let d = c.node("node-d", Some(dir.path()));

    // The cluster already has "dup" (echo); D's directory has other bytes.
    a.deploy(hn("dup"), manifest("dup"), guest("echo"))
        .await
        .unwrap();
    write_handler(dir.path(), "dup", "poison");
    write_handler(dir.path(), "imp", "transform");

    assert_eq!(d.sync_directory().await, 1, "only imp is imported");
    assert_eq!(state(&d, "imp").await, running(1, "transform"));
    assert_eq!(c.revision("imp").await, Some(1));
    assert_eq!(c.revision("dup").await, Some(1), "dup is not overwritten");
    assert_eq!(a.reconcile().await, 1);
    assert_eq!(state(&a, "imp").await, running(1, "transform"));
    assert_eq!(state(&a, "dup").await, running(1, "echo"));

    // D runs dup as the cluster has it, whatever its directory holds.
    assert_eq!(d.reconcile().await, 1);
    assert_eq!(state(&d, "dup").await, running(1, "echo"));
    assert_eq!(d.sync_directory().await, 0);
    assert_eq!(d.reconcile().await, 0);
    assert_eq!(state(&d, "dup").await, running(1, "echo"));
    assert_eq!(
        (c.revision("dup").await, c.revision("imp").await),
        (Some(1), Some(1))
    );

    // Removed through another node, an imported handler's files go too,
    // so the directory does not bring it back.
    a.remove(&hn("imp")).await.unwrap();
    assert_eq!(d.reconcile().await, 1);
    assert!(is_not_found(d.get(&hn("imp")).await));
    assert!(!dir.path().join("imp.toml").exists());
    assert_eq!(d.sync_directory().await, 0);
    assert_eq!(c.revision("imp").await, None);
    a.shutdown().await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_followed_a_deploy_delivers() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("work");
    a.deploy(name.clone(), manifest("work"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);

    // Both nodes consume the group: every event is acked once between them.
    c.append(0..40).await;
    let acked = async |node: &HandlerRegistry| node.get(&name).await.unwrap().counters.acked;
    eventually("both nodes acked all 40", async || {
        acked(&a).await + acked(&b).await == 40
    })
    .await;
    assert_eq!(c.lag("work").await, 0);

    // With A gone, B alone consumes.
    a.shutdown().await;
    let before = acked(&b).await;
    c.append(40..100).await;
    eventually("B acked the next 60", async || {
        acked(&b).await == before + 60
    })
    .await;
    assert_eq!(c.lag("work").await, 0);
    let by_version = b.get(&name).await.unwrap().counters_by_version;
    assert_eq!(by_version.keys().copied().collect::<Vec<_>>(), [1]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_has_not_caught_up_changes_what_the_cluster_has() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("stale");
    a.deploy(name.clone(), manifest("stale"), guest("echo"))
        .await
        .unwrap();
    a.swap_module(&name, guest("poison")).await.unwrap();

    // B never looked, yet its rollback restores version 1 over version 2.
    let rolled = b.rollback(&name).await.unwrap();
    let back = with_previous(1, 2, "echo", HandlerStatus::Running);
    assert_eq!(state_of(&rolled), back);
    assert_eq!(a.reconcile().await, 1);
    assert_eq!(state(&a, "stale").await, back);

    // A node new to the handler pauses it as the cluster has it.
    let c_node = c.node("node-c", None);
    let paused = c_node.pause(&name).await.unwrap();
    assert_eq!(
        state_of(&paused),
        with_previous(1, 2, "echo", HandlerStatus::Paused)
    );
    assert_eq!((a.reconcile().await, b.reconcile().await), (1, 1));
    assert_eq!(a.get(&name).await.unwrap().status, HandlerStatus::Paused);
    stop(&[&a, &b]).await;
    c_node.shutdown().await;
}

/// A removal through a node that has not caught up with the handler yet
/// removes it from the cluster, so it should say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_through_a_node_that_has_not_caught_up_reports_the_removal() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("unseen");
    a.deploy(name.clone(), manifest("unseen"), guest("echo"))
        .await
        .unwrap();
    let removed = b.remove(&name).await;
    let gone = c.revision("unseen").await.is_none();
    assert!(
        removed.is_ok() == gone,
        "the removal returned {removed:?} but the record {}",
        if gone {
            "was deleted"
        } else {
            "is still there"
        }
    );
    assert!(removed.is_ok(), "{removed:?}");
    assert_eq!(a.reconcile().await, 1);
    assert!(is_not_found(a.get(&name).await));
    stop(&[&a, &b]).await;
}

/// A record removed and written again starts again at revision 1 (the
/// store's contract): a node that missed both must still see the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_removed_and_deployed_again_is_followed_by_a_node_that_missed_both() {
    let (c, a, b) = Cluster::pair().await;
    let name = hn("again");
    a.deploy(name.clone(), manifest("again"), guest("echo"))
        .await
        .unwrap();
    assert_eq!(b.reconcile().await, 1);

    a.remove(&name).await.unwrap();
    a.deploy(name.clone(), manifest("again"), guest("poison"))
        .await
        .unwrap();
    assert_eq!(c.revision("again").await, Some(1));
    assert_eq!(state(&a, "again").await, running(1, "poison"));

    b.reconcile().await;
    assert_eq!(
        state(&b, "again").await,
        running(1, "poison"),
        "B still runs the removed handler's module"
    );
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watching_node_follows_without_being_asked() {
    let c = Cluster::new().await;
    let a = c.node("node-a", None);
    let b = Arc::new(c.node("node-b", None));
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = watch_cluster(b.clone(), stop_watching.clone()).expect("B is clustered");
    assert!(
        watch_cluster(
            Arc::new(HandlerRegistry::new(engine(), c.backend.clone(), None).unwrap()),
            stop_watching.clone()
        )
        .is_none()
    );

    a.deploy(hn("seen"), manifest("seen"), guest("echo"))
        .await
        .unwrap();
    eventually("B runs version 1", async || {
        b.get(&hn("seen")).await.is_ok_and(|v| v.version == Some(1))
    })
    .await;
    a.swap_module(&hn("seen"), guest("poison")).await.unwrap();
    eventually("B runs version 2", async || {
        b.get(&hn("seen")).await.unwrap().version == Some(2)
    })
    .await;
    assert_eq!(
        state(&b, "seen").await,
        with_previous(2, 1, "poison", HandlerStatus::Running)
    );
    a.remove(&hn("seen")).await.unwrap();
    eventually("B forgot it", async || b.get(&hn("seen")).await.is_err()).await;
    stop_watching.cancel();
    watcher.await.unwrap();
    stop(&[&a, &b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_canary_runs_on_every_node_and_one_verdict_from_all_their_counts_ends_it_everywhere() {
    use crate::cluster::NodeRecord;
    use crate::handlers::{By, CanaryPlan, StepAction};

    let (c, a, b) = Cluster::pair().await;
    let name = hn("can");
    a.deploy(name.clone(), manifest("can"), guest("echo"))
        .await
        .unwrap();
    b.reconcile().await;
    let plan = CanaryPlan {
        share_percent: 50.0,
        window_ms: 60_000,
        margin_percent: 5.0,
        min_deliveries: 20,
    };
    a.canary(&name, guest("crash"), plan, By::token("ci"))
        .await
        .unwrap();
    // The record has it: no second canary through another node.
    assert!(matches!(
        b.canary(&name, guest("transform"), plan, By::unknown())
            .await,
        Err(RegistryError::CanaryRunning { version: 2, .. })
    ));
    b.reconcile().await;
    let on_b = b
        .get(&name)
        .await
        .unwrap()
        .canary
        .expect("b runs the canary");
    assert_eq!((on_b.version, on_b.digest), (2, digest("crash")));

    // One event in five makes the canary trap; both nodes deliver.
    let inputs = (0..1_000)
        .map(|i| EventInput::with_payload(obj(json!({ "n": i, "panic": i % 5 == 0 }))))
        .collect();
    c.backend.append(&sn("in"), inputs).await.unwrap();
    eventually("all handled", async || c.lag("can").await == 0).await;
    let counts =
        async |node: &HandlerRegistry| node.get(&name).await.unwrap().canary.unwrap().counts;
    let (here, there) = (counts(&a).await, counts(&b).await);
    assert!(
        here.canary_handled > 0 && there.canary_handled > 0,
        "both nodes ran the canary: {here:?} {there:?}"
    );

    // Node b's counts reach node a through its heartbeat; a judges both.
    let now = c.backend.clock().now();
    let beat = NodeRecord {
        id: "node-b".into(),
        address: "http://b".into(),
        version: "test".into(),
        started_at: now,
        heartbeat_at: now,
        handlers: b.running(),
    };
    c.store.heartbeat(&beat, Timestamp::EPOCH).await.unwrap();
    assert_eq!(a.judge_canaries().await, 1);
    let history = a.history(&name).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!((last.action, last.version), (StepAction::Rollback, 2));
    let both = here.plus(there);
    let reason = last.reason.as_deref().unwrap();
    assert!(
        reason.contains(&format!("of {} first deliveries", both.canary_handled))
            && reason.ends_with(&format!(
                "of {}: more than 5 points worse",
                both.current_handled
            )),
        "{reason} (counts {both:?})"
    );

    // Decided once: b's judge finds nothing left to decide, and follows.
    assert_eq!(b.judge_canaries().await, 0);
    b.reconcile().await;
    let view = b.get(&name).await.unwrap();
    assert!(view.canary.is_none());
    assert_eq!(view.version, Some(1));
    assert_eq!(b.history(&name).await.unwrap(), history);

    // A canary through b, promoted by hand through a, runs on both.
    b.canary(&name, guest("transform"), plan, By::unknown())
        .await
        .unwrap();
    a.reconcile().await;
    let view = a.promote(&name, By::token("ops")).await.unwrap();
    assert_eq!((view.version, view.previous_version), (Some(3), Some(1)));
    b.reconcile().await;
    assert_eq!(
        state(&b, "can").await,
        with_previous(3, 1, "transform", HandlerStatus::Running)
    );
    let actions: Vec<_> = b
        .history(&name)
        .await
        .unwrap()
        .iter()
        .map(|s| (s.action, s.version, s.node.clone()))
        .collect();
    assert_eq!(
        actions,
        [
            (StepAction::Deploy, 1, "node-a".to_owned()),
            (StepAction::Canary, 2, "node-a".to_owned()),
            (StepAction::Rollback, 2, "node-a".to_owned()),
            (StepAction::Canary, 3, "node-b".to_owned()),
            (StepAction::Promote, 3, "node-a".to_owned()),
        ]
    );
    stop(&[&a, &b]).await;
}
