//! A Rheo server in the library: [`run`] opens the backend (and migrates
//! it), starts the handlers, joins the cluster and serves the HTTP API on
//! a listener until told to stop, then drains. `rheo serve`
//! (`cli/serve.rs`) only reads its arguments and calls it; a test or an
//! embedding program can start one in-process on a listener of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::backend;
use crate::backend::redact_url as redact;
use crate::clock::{Clock, FrozenClock, SharedClock, SystemClock};
use crate::cluster::{Membership, MembershipSettings, RunningHandlers};
use crate::config::ServeConfig;
use crate::metrics::Metrics;

/// How long in-flight requests get to finish after a shutdown signal.
/// Long polls answer at once when draining starts, so only slow backend
/// calls can use this up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a server as `config` says on `listener` until `shutdown`
/// completes, then drains (no new requests, in-flight ones and handler
/// deliveries finish) and leaves the cluster. `config.listen` is not read:
/// the caller binds (`rheo serve` binds it; a test may bind port 0).
/// Prints `rheo listening on <url>` on stdout once it serves.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let signal = shutdown;
    let test_clock = config.test_clock.then(FrozenClock::at_system_time);
    let clock: SharedClock = match &test_clock {
        Some(frozen) => frozen.clone(),
        None => SystemClock::shared(),
    };
    let url = redact(&config.backend);
    if let Some(dir) = &config.data_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data folder {}", dir.display()))?;
    }
    // One server per SQLite store (docs/backends.md#one-server-per-sqlite-store):
    // held until this server returns.
    #[cfg(feature = "sqlite")]
    let _store_lock = backend::sqlite::lock_store(&config.backend)?;
    let store = backend::connect_with(&config.backend, clock, false, config.store_timeout)
        .await
        .with_context(|| format!("cannot open backend {url}"))?;
    // A store a newer rheo migrated is not ours to read or write
    // (docs/operations.md#upgrades), with or without --no-migrate.
    store
        .migration_status()
        .await
        .with_context(|| format!("reading the migrations of {url}"))?
        .check_not_newer()?;
    if config.migrate {
        let applied = store
            .migrate()
            .await
            .with_context(|| format!("migrating {url}"))?;
        if !applied.is_empty() {
            tracing::info!(
                "applied {} migration(s): {}",
                applied.len(),
                applied.join(", ")
            );
        }
    }
    let addr = listener.local_addr().context("reading the bound address")?;
    // Read before anything else starts, so a bad file stops the server
    // before it joins a cluster or runs a handler.
    let tls = config
        .tls
        .as_ref()
        .map(api::tls::server_config)
        .transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };

    tracing::info!("backend: {} at {url}", store.kind());
    let metrics = Arc::new(Metrics::new());
    let store = metrics.measured(store);
    let mut state = AppState::observed(store, config.api.clone(), Arc::clone(&metrics));
    if let Some(frozen) = test_clock {
        tracing::warn!(
            "test clock: time is frozen at {} and moves only through POST /v1/test/clock",
            frozen.now()
        );
        state = state.with_test_clock(Arc::clone(&frozen));
    }
    if config.api.auth_required() {
        tracing::info!("auth: /v1 routes need a bearer token");
    } else if !addr.ip().is_loopback() {
        tracing::warn!("no --auth-token: /v1 routes are open to anyone who can reach {addr}");
    }

    let store = state.backend().clone();
    let cluster = store.cluster();
    let node_id = config
        .node_id
        .clone()
        .unwrap_or_else(MembershipSettings::default_id);
    match &cluster {
        Some(_) => tracing::info!(
            "cluster mode: node {node_id}; handlers are shared through the {} backend",
            store.kind()
        ),
        None => tracing::info!(
            "single-node mode: the {} backend is not shared; handlers live in {}",
            store.kind(),
            config.handlers_dir.display()
        ),
    }

    #[cfg(feature = "wasm")]
    let handlers = {
        let handlers = start_handlers(&config, state.backend().clone(), &node_id).await?;
        state = state.with_handlers(Arc::clone(&handlers.registry));
        handlers
    };
    #[cfg(feature = "wasm")]
    let running: RunningHandlers = {
        let registry = Arc::clone(&handlers.registry);
        Arc::new(move || registry.running())
    };
    #[cfg(not(feature = "wasm"))]
    let running: RunningHandlers = Arc::new(Vec::new);
    let membership = Arc::new(Membership::new(
        MembershipSettings {
            id: node_id,
            address: config
                .advertise
                .clone()
                .unwrap_or_else(|| format!("{scheme}://{addr}")),
            timeout: config.node_timeout,
        },
        state.backend().clock().clone(),
        cluster,
        running,
    ));
    membership
        .join()
        .await
        .context("registering this node with the cluster")?;
    state = state.with_membership(Arc::clone(&membership));
    let sampling = tokio::spawn(
        Arc::clone(&metrics.groups).run(state.backend().clone(), config.metrics_interval),
    );
    let trimming = tokio::spawn(crate::retention::run(
        state.backend().clone(),
        Arc::clone(&metrics),
        config.retention_interval,
    ));

    tracing::info!(
        "rheo {} listening on {scheme}://{addr}; the console is at {scheme}://{addr}/ui/",
        env!("CARGO_PKG_VERSION")
    );
    // Also on stdout, for scripts and tests that started us on port 0.
    println!("rheo listening on {scheme}://{addr}");

    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        signal.await;
        let _ = signalled_tx.send(());
    };
    let server = async move {
        match tls {
            Some(tls) => {
                api::serve(api::tls::TlsListener::new(listener, tls)?, state, shutdown).await
            }
            None => api::serve(listener, state, shutdown).await,
        }
    };
    let drain_deadline = async move {
        // Only a received signal starts the clock; a dropped sender
        // (the server stopped on its own) never fires.
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(DRAIN_TIMEOUT).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = server => served.context("serving HTTP")?,
        () = drain_deadline => anyhow::bail!(
            "requests still in flight {}s after the shutdown signal; exiting anyway",
            DRAIN_TIMEOUT.as_secs()
        ),
    }

    sampling.abort();
    trimming.abort();
    #[cfg(feature = "wasm")]
    handlers.stop().await;
    // Only once its deliveries are settled: the others list it until then.
    match membership.leave().await {
        Ok(()) if membership.clustered() => tracing::info!("left the cluster"),
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not remove this node from the cluster; the others stop listing it after the node timeout")
        }
    }

    tracing::info!("stopped");
    Ok(())
}

/// The handler registry, its directory and cluster watchers, and how to
/// stop them.
#[cfg(feature = "wasm")]
struct Handlers {
    registry: Arc<crate::handlers::HandlerRegistry>,
    stop_watching: tokio_util::sync::CancellationToken,
    /// The task following the cluster's records (cluster mode).
    following: Option<tokio::task::JoinHandle<()>>,
}

#[cfg(feature = "wasm")]
impl Handlers {
    /// Stops watching (the directory, the cluster and the canaries), then drains every
    /// handler: no more fetches, in-flight deliveries finish and are
    /// settled (bounded per handler).
    async fn stop(self) {
        self.stop_watching.cancel();
        if let Some(following) = self.following {
            // A change being followed must not start a handler after the
            // drain below: stop it where it is (the node is leaving).
            following.abort();
            let _ = following.await;
        }
        tracing::info!("draining handlers");
        self.registry.shutdown().await;
    }
}

/// Builds the WebAssembly engine and the registry, deploys what the
/// handlers directory holds and starts watching it.
#[cfg(feature = "wasm")]
async fn start_handlers(
    config: &ServeConfig,
    store: Arc<dyn backend::Backend>,
    node_id: &str,
) -> anyhow::Result<Handlers> {
    use crate::handlers::{HandlerRegistry, watch_canaries, watch_cluster, watch_directory};
    use crate::wasm::{EngineOptions, WasmEngine};

    let engine = WasmEngine::new(EngineOptions {
        fuel: config.wasm_fuel,
        ..EngineOptions::default()
    })
    .context("starting the WebAssembly engine")?;
    let dir = &config.handlers_dir;
    let cluster = store.cluster();
    let mut registry = HandlerRegistry::new(engine, store, Some(dir))
        .with_context(|| format!("handlers directory {}", dir.display()))?
        .with_node_id(node_id)
        .with_log_lines(config.handler_log_lines);
    if let Some(cluster) = cluster {
        registry = registry.with_cluster(cluster);
    }
    let registry = Arc::new(registry);
    // In cluster mode: what the cluster runs, then what the directory has
    // that the cluster does not (`docs/cluster.md`).
    registry.reconcile().await;
    registry.sync_directory().await;
    let loaded = registry.list().await;
    if loaded.is_empty() {
        tracing::info!("handlers: none yet in {}", dir.display());
    }
    for h in &loaded {
        match (&h.version, &h.last_error) {
            (Some(v), _) => tracing::info!(
                "handler {} v{v} ({}/{}) {}",
                h.name,
                h.manifest.stream,
                h.manifest.group,
                h.status
            ),
            (None, Some(e)) => tracing::error!("handler {} not started: {e}", h.name),
            (None, None) => {}
        }
    }
    let stop_watching = tokio_util::sync::CancellationToken::new();
    watch_directory(Arc::clone(&registry), stop_watching.clone());
    watch_canaries(Arc::clone(&registry), stop_watching.clone());
    let following = watch_cluster(Arc::clone(&registry), stop_watching.clone());
    Ok(Handlers {
        registry,
        stop_watching,
        following,
    })
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{ServeConfig, TcpListener, run};
    use crate::config::ServeOptions;

    /// One HTTP/1.1 exchange on a connection of its own; the whole answer.
    async fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(request.as_bytes()).await.expect("send");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.expect("read");
        answer
    }

    /// A server running in-process on port 0, and how to stop it.
    struct InProcess {
        addr: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    impl InProcess {
        /// Starts `server::run` with `options` on a listener bound here.
        async fn start(options: ServeOptions) -> InProcess {
            let config = ServeConfig::resolve(options).expect("a valid configuration");
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("bound address");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(run(config, listener, async {
                let _ = stopped.await;
            }));
            InProcess { addr, stop, task }
        }

        /// Ends its shutdown future; expects a clean stop.
        async fn stop(self) {
            self.stop.send(()).expect("the server is running");
            self.task
                .await
                .expect("the server task")
                .expect("a clean stop");
        }
    }

    /// A server started in-process on a listener the caller bound serves
    /// the API, and stops (draining, `Ok`) when its shutdown future ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_runs_in_process_on_its_listener_until_told_to_stop() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let server = InProcess::start(ServeOptions {
            backend: Some("sqlite::memory:".into()),
            handlers_dir: Some(dir.path().join("handlers")),
            ..ServeOptions::default()
        })
        .await;
        let addr = server.addr;

        let created = exchange(addr, "POST", "/v1/streams", r#"{"name": "orders"}"#).await;
        assert!(created.starts_with("HTTP/1.1 201"), "{created}");
        let listed = exchange(addr, "GET", "/v1/streams", "").await;
        assert!(listed.starts_with("HTTP/1.1 200"), "{listed}");
        assert!(listed.contains(r#""name":"orders""#), "{listed}");

        server.stop().await;
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "nothing listens after the stop"
        );
    }

    /// With only a data folder, the server creates it and keeps the SQLite
    /// store, its lock and the handlers there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_keeps_its_state_in_the_data_folder() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let data = dir.path().join("state");
        let server = InProcess::start(ServeOptions {
            data_dir: Some(data.clone()),
            ..ServeOptions::default()
        })
        .await;
        let created = exchange(server.addr, "POST", "/v1/streams", r#"{"name": "orders"}"#).await;
        assert!(created.starts_with("HTTP/1.1 201"), "{created}");
        for kept in ["rheo.db", "rheo.db.lock"] {
            assert!(data.join(kept).is_file(), "{kept} in the data folder");
        }
        #[cfg(feature = "wasm")]
        assert!(
            data.join("handlers").is_dir(),
            "handlers in the data folder"
        );
        server.stop().await;
    }
}
