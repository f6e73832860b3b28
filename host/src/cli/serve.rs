//! `rheo serve`: reads its arguments (flags > `RHEO_*` variables > the
//! config file), sets up logging, binds the address and hands over to
//! [`crate::server::run`] until SIGINT or SIGTERM.

use std::future::Future;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use clap::builder::BoolishValueParser;
use tokio::net::TcpListener;

use crate::config::{ServeConfig, ServeOptions};
use crate::telemetry::LogFormat;

/// Arguments of `rheo serve`. Each flag can also come from its `RHEO_*`
/// variable or the config file; flags win over variables, variables over
/// the file. Durations are written like 500ms, 30s, 10m or 7d; a bare
/// number is milliseconds, as the `--…-ms` flags of earlier releases took
/// (still accepted, hidden, with their `RHEO_…_MS` variables).
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// TOML config file (keys are the long flag names with underscores;
    /// `migrate = false` for --no-migrate).
    #[arg(long, env = "RHEO_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    /// The folder of this node's state: the SQLite store (DIR/rheo.db) and
    /// the handlers (DIR/handlers), unless --backend or --handlers-dir name
    /// others; created if missing [default: none: rheo.db and rheo-handlers
    /// in the current folder]
    #[arg(long, env = "RHEO_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Backend URL: sqlite://path.db, postgres://user@host/db[?schema=name],
    /// redis://host:port[/db][?prefix=name], mongodb://host:port/database, memory://
    /// [default: sqlite://rheo.db, or sqlite://DIR/rheo.db with --data-dir]
    #[arg(long, env = "RHEO_BACKEND", hide_env_values = true, value_name = "URL")]
    backend: Option<String>,

    /// Address to listen on, host:port (:0 picks a free port; the bound
    /// address is printed) [default: 127.0.0.1:7070]
    #[arg(long, env = "RHEO_LISTEN", value_name = "ADDR")]
    listen: Option<String>,

    /// Require `Authorization: Bearer <TOKEN>` on every /v1 route.
    #[arg(
        long,
        env = "RHEO_AUTH_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    auth_token: Option<String>,

    /// A second token that may only read: GET and HEAD on /v1 routes and
    /// history queries (POST …/query); a fetch takes leases and needs
    /// --auth-token. Needs --auth-token, or a --token that may change
    /// things.
    #[arg(
        long,
        env = "RHEO_READ_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    read_token: Option<String>,

    /// A named token, NAME=SECRET (may do everything) or NAME:read=SECRET
    /// (may only read); repeat for more. A change made with one is recorded
    /// under its name (`rheo handler history`). In RHEO_TOKENS, separate
    /// them with commas.
    #[arg(
        long = "token",
        env = "RHEO_TOKENS",
        value_name = "NAME=SECRET",
        value_delimiter = ',',
        hide_env_values = true
    )]
    tokens: Vec<String>,

    /// Serve HTTPS with this PEM certificate chain (with --tls-key)
    #[arg(long, env = "RHEO_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert
    #[arg(long, env = "RHEO_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,

    /// Run on a frozen clock (starting at the current time) that only moves
    /// through POST /v1/test/clock. For tests, never production.
    #[arg(long, env = "RHEO_TEST_CLOCK", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    test_clock: Option<bool>,

    /// Do not apply pending schema migrations at startup.
    #[arg(long, env = "RHEO_NO_MIGRATE", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    no_migrate: Option<bool>,

    /// Largest request body in bytes [default: 1048576]
    #[arg(long, env = "RHEO_BODY_LIMIT", value_name = "BYTES")]
    body_limit: Option<usize>,

    /// Lease duration for fetch and renew requests that give none, e.g.
    /// 30s or 2m (a bare number is milliseconds) [default: 30s]
    #[arg(long = "default-lease", alias = "default-lease-ms", env = "RHEO_DEFAULT_LEASE", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    default_lease_ms: Option<u64>,

    /// max_attempts of groups created without one [default: 5]
    #[arg(long, env = "RHEO_DEFAULT_MAX_ATTEMPTS", value_name = "N")]
    default_max_attempts: Option<u32>,

    /// Directory of handler manifests (*.toml) and modules (*.wasm), loaded
    /// at start and watched; handlers deployed through the API are kept
    /// there too. On a shared backend (cluster mode) handlers live in the
    /// backend and this directory only adds those the cluster lacks
    /// [default: rheo-handlers, or DIR/handlers with --data-dir]
    #[arg(long, env = "RHEO_HANDLERS_DIR", value_name = "DIR")]
    handlers_dir: Option<PathBuf>,

    /// Meter guests with fuel, so manifests may set `fuel` (~20% slower calls).
    #[arg(long, env = "RHEO_WASM_FUEL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    wasm_fuel: Option<bool>,

    /// This server's id among the nodes sharing the backend, [A-Za-z0-9._-]
    /// [default: host name and a random suffix]
    #[arg(long, env = "RHEO_NODE_ID", value_name = "ID")]
    node_id: Option<String>,

    /// This server's API address as `rheo nodes` shows it [default:
    /// http://<the bound address>]
    #[arg(long, env = "RHEO_ADVERTISE", value_name = "URL")]
    advertise: Option<String>,

    /// A node that has not sent a heartbeat for this long is no longer
    /// listed; heartbeats go out every quarter of it [default: 10s]
    #[arg(long = "node-timeout", alias = "node-timeout-ms", env = "RHEO_NODE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    node_timeout_ms: Option<u64>,

    /// Log lines kept in memory per handler, for GET
    /// /v1/handlers/{name}/logs and `rheo handler logs` (1–100000)
    /// [default: 1000]
    #[arg(long, env = "RHEO_HANDLER_LOG_LINES", value_name = "N")]
    handler_log_lines: Option<usize>,

    /// Log lines as text, or as one JSON object per line (a handler's
    /// lines carry its delivery's fields under "span") [default: text]
    #[arg(long, env = "RHEO_LOG_FORMAT", value_name = "FORMAT", value_enum)]
    log_format: Option<LogFormat>,

    /// Export a trace span per delivery to this OpenTelemetry collector
    /// (OTLP over HTTP, protobuf), e.g. http://127.0.0.1:4318; spans go to
    /// its /v1/traces unless the URL names another path
    #[arg(long, env = "RHEO_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,

    /// How often the group series of /metrics (lag, pending, dead letters,
    /// …) are sampled; a scrape reads the last sample [default: 5s]
    #[arg(long = "metrics-interval", alias = "metrics-interval-ms", env = "RHEO_METRICS_INTERVAL", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    metrics_interval_ms: Option<u64>,

    /// Every call to the backend answers within this, else
    /// backend_unavailable (nothing written) or ambiguous; the backend's
    /// own timeouts (PostgreSQL's lock and idle-in-transaction timeouts,
    /// Redis's response timeout) are derived from it (500ms–10m)
    /// [default: 10s]
    #[arg(long = "store-timeout", alias = "store-timeout-ms", env = "RHEO_STORE_TIMEOUT", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    store_timeout_ms: Option<u64>,

    /// Every request answers within this, else 503 with Retry-After; a
    /// long poll's wait_ms comes on top, and handler changes get ten times
    /// as long (500ms–1h) [default: 30s]
    #[arg(long = "request-timeout", alias = "request-timeout-ms", env = "RHEO_REQUEST_TIMEOUT", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    request_timeout_ms: Option<u64>,

    /// How often streams with a retention are trimmed; each round removes
    /// at most 1000 events per partition per step (docs/log.md#retention)
    /// (10ms–1h) [default: 1s]
    #[arg(long = "retention-interval", alias = "retention-interval-ms", env = "RHEO_RETENTION_INTERVAL", value_name = "DURATION",
          value_parser = crate::config::duration_or_ms)]
    retention_interval_ms: Option<u64>,
}

impl ServeArgs {
    fn options(&self) -> anyhow::Result<ServeOptions> {
        let legacy = |value: Option<u64>, name: &str| -> anyhow::Result<Option<u64>> {
            match (value, std::env::var(name)) {
                (Some(value), _) => Ok(Some(value)),
                (None, Ok(text)) if !text.is_empty() => crate::config::duration_or_ms(&text)
                    .map(Some)
                    .map_err(|e| anyhow::anyhow!("{name}={text}: {e}")),
                (None, _) => Ok(None),
            }
        };
        Ok(ServeOptions {
            data_dir: self.data_dir.clone(),
            backend: self.backend.clone(),
            listen: self.listen.clone(),
            auth_token: self.auth_token.clone(),
            read_token: self.read_token.clone(),
            tokens: (!self.tokens.is_empty()).then(|| self.tokens.clone()),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            test_clock: self.test_clock,
            migrate: self.no_migrate.map(|no| !no),
            body_limit: self.body_limit,
            default_lease_ms: legacy(self.default_lease_ms, "RHEO_DEFAULT_LEASE_MS")?,
            default_max_attempts: self.default_max_attempts,
            handlers_dir: self.handlers_dir.clone(),
            wasm_fuel: self.wasm_fuel,
            node_id: self.node_id.clone(),
            advertise: self.advertise.clone(),
            node_timeout_ms: legacy(self.node_timeout_ms, "RHEO_NODE_TIMEOUT_MS")?,
            handler_log_lines: self.handler_log_lines,
            log_format: self.log_format,
            otlp_endpoint: self.otlp_endpoint.clone(),
            metrics_interval_ms: legacy(self.metrics_interval_ms, "RHEO_METRICS_INTERVAL_MS")?,
            store_timeout_ms: legacy(self.store_timeout_ms, "RHEO_STORE_TIMEOUT_MS")?,
            request_timeout_ms: legacy(self.request_timeout_ms, "RHEO_REQUEST_TIMEOUT_MS")?,
            retention_interval_ms: legacy(
                self.retention_interval_ms,
                "RHEO_RETENTION_INTERVAL_MS",
            )?,
        })
    }

    /// Runs the server; log lines are filtered by `verbosity` unless
    /// `RUST_LOG` is set.
    pub(crate) async fn run(self, verbosity: &str) -> anyhow::Result<()> {
        let signal = shutdown_signal()?;
        let file = match &self.config {
            Some(path) => ServeOptions::from_file(path)?,
            None => ServeOptions::default(),
        };
        let config = ServeConfig::resolve(self.options()?.or(file))?;
        let telemetry = crate::telemetry::init(
            verbosity,
            config.log_format,
            config.otlp_endpoint.as_deref(),
        )?;
        if let Some(endpoint) = &config.otlp_endpoint {
            tracing::info!(
                "traces: exported to {}",
                crate::telemetry::traces_url(endpoint)?
            );
        }
        let listener = TcpListener::bind(&config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let served = crate::server::run(config, listener, signal).await;
        telemetry.shutdown();
        served
    }
}

/// Listens for SIGINT (Ctrl-C) and, on Unix, SIGTERM from the moment it
/// is called, so a signal during startup is not lost (or fatal); the
/// returned future completes on the first one.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => tracing::info!("received SIGINT"),
                _ = terminate.recv() => tracing::info!("received SIGTERM"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::info!("received Ctrl-C");
            } else {
                std::future::pending::<()>().await;
            }
        })
    }
}
