//! PostgreSQL tests: the shared conformance suite, plus what only a shared
//! database has — two nodes competing for one group, a connection lost
//! mid-way, and migrations applied twice.
//!
//! Each test gets its own schema (`rheo_t_<unix secs>_<random>`); schemas
//! older than an hour are dropped by the first test of a run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};

use super::{PostgresBackend, PostgresOptions};
use crate::backend::conformance::service_url;
use crate::backend::{Backend, CreateStream, FetchRequest, Partitions};
use crate::clock::{SharedClock, SystemClock};
use crate::model::{ConsumerId, EventInput, GroupName, GroupSpec, StreamName};

fn url() -> Option<String> {
    service_url("TEST_POSTGRES_URL", "postgres")
}

/// A fresh schema name; the first call of a run drops stale ones.
async fn fresh_schema(url: &str) -> String {
    static CLEANED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    CLEANED
        .get_or_init(|| async {
            let pool = sqlx::PgPool::connect(url)
                .await
                .expect("connect to TEST_POSTGRES_URL");
            let schemas: Vec<String> = sqlx::query_scalar(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rheo\\_t\\_%'",
            )
            .fetch_all(&pool)
            .await
            .expect("list test schemas");
            for schema in schemas {
                let created: u64 = schema
                    .split('_')
                    .nth(2)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                if created + 3600 < now {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    )))
                    .execute(&pool)
                    .await;
                }
            }
        })
        .await;
    format!("rheo_t_{now}_{:08x}", rand::random::<u32>())
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions {
        schema: Some(schema.to_owned()),
        max_connections: 4,
        ..PostgresOptions::default()
    }
}

async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> {
    let url = url()?;
    let schema = fresh_schema(&url).await;
    let backend = PostgresBackend::connect_with(&url, options(&schema), clock, true)
        .await
        .expect("connect to TEST_POSTGRES_URL and migrate");
    Some(Arc::new(backend))
}

crate::backend_conformance!(factory);

fn sn(s: &str) -> StreamName {
    StreamName::parse(s).unwrap()
}

fn gn(s: &str) -> GroupName {
    GroupName::parse(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_apply_once_and_again_change_nothing() {
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let first = PostgresBackend::connect_with(&url, options(&schema), SystemClock::shared(), true)
        .await
        .unwrap();
    let count = |b: &PostgresBackend| {
        let pool = b.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM _sqlx_migrations")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let applied = count(&first).await;
    assert_eq!(applied as usize, super::MIGRATOR.iter().count());
    first.migrate().await.unwrap();
    let again = PostgresBackend::connect_with(&url, options(&schema), SystemClock::shared(), true)
        .await
        .unwrap();
    assert_eq!(count(&again).await, applied, "a second run applies nothing");
}

/// Two independent pools (two servers) drain one group concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_ack_every_event_exactly_once() {
    let Some(url) = url() else { return };
    const EVENTS: usize = 2000;
    let schema = fresh_schema(&url).await;
    let node_a = Arc::new(
        PostgresBackend::connect_with(&url, options(&schema), SystemClock::shared(), true)
            .await
            .unwrap(),
    );
    let node_b = Arc::new(
        PostgresBackend::connect_with(&url, options(&schema), SystemClock::shared(), false)
            .await
            .unwrap(),
    );
    let (s, g) = (sn("orders"), gn("billing"));
    node_a
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 4,
        })
        .await
        .unwrap();
    node_b
        .create_group(&s, GroupSpec::new(g.clone()))
        .await
        .unwrap();
    let mut ids = HashSet::new();
    for chunk in 0..EVENTS / 100 {
        let batch = (0..100)
            .map(|i| EventInput {
                key: Some(format!("k{}", chunk * 100 + i)),
                ..EventInput::default()
            })
            .collect();
        for a in node_a.append(&s, batch).await.unwrap() {
            ids.insert(a.event.id.clone());
        }
    }

    let held = Arc::new(Mutex::new(HashSet::new()));
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (n, node) in [node_a.clone(), node_b.clone()].into_iter().enumerate() {
        for w in 0..3 {
            let (node, s, g) = (node.clone(), s.clone(), g.clone());
            let (held, acked, done) = (held.clone(), acked.clone(), done.clone());
            workers.push(tokio::spawn(async move {
                let consumer = ConsumerId::parse(format!("node{n}-w{w}")).unwrap();
                while done.load(Ordering::SeqCst) < EVENTS {
                    let leases = node
                        .fetch(FetchRequest {
                            stream: s.clone(),
                            group: g.clone(),
                            limit: 1 + rand::random::<u32>() % 25,
                            consumer_id: consumer.clone(),
                            lease_ms: 60_000,
                            partitions: Partitions::All,
                        })
                        .await
                        .expect("fetch");
                    if leases.is_empty() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    for lease in &leases {
                        assert!(
                            held.lock().insert(lease.event_id.clone()),
                            "{} leased to two consumers at once",
                            lease.event_id
                        );
                    }
                    for lease in leases {
                        let id = lease.event_id.clone();
                        node.ack(&s, &g, lease.into_target()).await.expect("ack");
                        held.lock().remove(&id);
                        *acked.lock().entry(id).or_insert(0) += 1;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for w in workers {
        w.await.expect("worker");
    }
    let acked = acked.lock().clone();
    assert_eq!(acked.len(), EVENTS, "every event acked");
    assert!(acked.values().all(|n| *n == 1), "each exactly once");
    assert_eq!(acked.keys().cloned().collect::<HashSet<_>>(), ids);
    let lag = node_b.lag(&s, &g, &Partitions::All).await.unwrap();
    assert_eq!((lag.lag, lag.inflight, lag.pending), (0, 0, 0));
}

/// A TCP relay to PostgreSQL that the test can cut: while down it closes
/// every relayed connection and refuses new ones.
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (up2, links2) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection close
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                links2.lock().push(task.abort_handle());
            }
        });
        Relay { port, up, links }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self.links.lock().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// Rewrites `postgres://user@host:port/db` to go through the relay.
fn via_relay(url: &str, port: u16) -> (String, String) {
    let parsed = url::Url::parse(url).expect("TEST_POSTGRES_URL is a URL");
    let target = format!(
        "{}:{}",
        parsed.host_str().unwrap_or("127.0.0.1"),
        parsed.port().unwrap_or(5432)
    );
    let mut relayed = parsed.clone();
    relayed.set_host(Some("127.0.0.1")).unwrap();
    relayed.set_port(Some(port)).unwrap();
    (relayed.to_string(), target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_is_unavailable_or_ambiguous_and_recovers() {
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let (_, target) = via_relay(&url, 0);
    let relay = Relay::start(target).await;
    let (relayed, _) = via_relay(&url, relay.port);
    let opts = PostgresOptions {
        acquire_timeout: Duration::from_millis(500),
        ..options(&schema)
    };
    let b = PostgresBackend::connect_with(&relayed, opts, SystemClock::shared(), true)
        .await
        .unwrap();
    let (s, g) = (sn("s"), gn("g"));
    b.create_stream(CreateStream {
        name: s.clone(),
        partition_count: 1,
    })
    .await
    .unwrap();
    b.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
    b.append(&s, vec![EventInput::default(); 3]).await.unwrap();
    let req = FetchRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 1,
        consumer_id: ConsumerId::parse("c").unwrap(),
        lease_ms: 60_000,
        partitions: Partitions::All,
    };
    let lease = b.fetch(req.clone()).await.unwrap().pop().unwrap();

    relay.cut();
    let outage = [
        b.append(&s, vec![EventInput::default()]).await.map(|_| ()),
        b.fetch(req.clone()).await.map(|_| ()),
        b.ack(&s, &g, lease.target()).await,
        b.lag(&s, &g, &Partitions::All).await.map(|_| ()),
    ];
    for result in &outage {
        let code = result
            .as_ref()
            .expect_err("the database is unreachable")
            .code();
        assert!(
            code == "backend_unavailable" || code == "ambiguous",
            "unexpected {code}: {result:?}"
        );
    }

    relay.restore();
    b.ack(&s, &g, lease.target())
        .await
        .expect("ack once the database is back");
    let more = b.fetch(req).await.unwrap();
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].event.sequence, 2, "nothing was lost or skipped");
    assert_eq!(
        b.lag(&s, &g, &Partitions::All).await.unwrap().partitions[&0].frontier,
        1
    );
}
