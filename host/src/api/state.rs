//! What every handler shares: the backend, the optional test clock, the
//! settings the server was started with, the metrics registry, and the
//! drain signal long polls listen to.

use std::sync::Arc;

use tokio::sync::watch;

use crate::backend::Backend;
use crate::clock::FrozenClock;
use crate::metrics::Metrics;
use crate::model::{DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS};

/// Largest request body accepted when nothing else is configured: 1 MiB,
/// roomy for a batch of ordinary events and small enough that one request
/// cannot make the server buffer much.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How the HTTP API behaves, fixed when the server starts.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiSettings {
    /// When set, every `/v1` route needs `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// A second token that may only read: with it, `GET` and `HEAD` on
    /// `/v1` routes are allowed and everything else answers 403
    /// `forbidden`. Only together with `auth_token`.
    pub read_token: Option<String>,
    /// Named tokens (`docs/http.md#authentication`): each may do
    /// everything or only read, and changes made with one are recorded
    /// under its name.
    pub tokens: Vec<NamedToken>,
    /// Largest request body in bytes; larger ones are refused with 413.
    pub body_limit: usize,
    /// Lease duration for fetch and renew requests that give none.
    pub default_lease_ms: u64,
    /// `max_attempts` of groups created without one.
    pub default_max_attempts: u32,
    /// Every request answers within this, or 503 (`docs/http.md#request-timeout`).
    pub request_timeout: std::time::Duration,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            auth_token: None,
            read_token: None,
            tokens: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            default_lease_ms: DEFAULT_LEASE_MS,
            default_max_attempts: DEFAULT_MAX_ATTEMPTS,
            request_timeout: super::timeout::DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl ApiSettings {
    /// Whether `/v1` routes need a bearer token: the server has one.
    pub fn auth_required(&self) -> bool {
        self.auth_token.is_some() || !self.tokens.is_empty()
    }
}

/// A token with a name (`--token NAME=SECRET`, or `NAME:read=SECRET` for
/// one that may only read).
#[derive(Clone, PartialEq, Eq)]
pub struct NamedToken {
    /// Its name, recorded with the changes made with it.
    pub name: String,
    /// The bearer token itself.
    pub secret: String,
    /// It may only read (`GET`, `HEAD`).
    pub read_only: bool,
}

impl NamedToken {
    /// Parses `NAME=SECRET` or `NAME:read=SECRET`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (label, secret) = text
            .split_once('=')
            .ok_or("expected NAME=SECRET or NAME:read=SECRET")?;
        let (name, read_only) = match label.split_once(':') {
            Some((name, "read")) => (name, true),
            Some((_, scope)) => {
                return Err(format!(
                    "unknown scope {scope:?}: a named token may do everything (NAME=SECRET) or only read (NAME:read=SECRET)"
                ));
            }
            None => (label, false),
        };
        let good_name = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
        if !good_name {
            return Err(format!(
                "token name {name:?}: 1 to 64 letters, digits, '.', '_', '-' or '@'"
            ));
        }
        if secret.is_empty() {
            return Err(format!("token {name:?} has an empty secret"));
        }
        Ok(Self {
            name: name.to_owned(),
            secret: secret.to_owned(),
            read_only,
        })
    }
}

// The secret never reaches a log line.
impl std::fmt::Debug for NamedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedToken")
            .field("name", &self.name)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

// Hand-written so the token never reaches a log line.
impl std::fmt::Debug for ApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSettings")
            .field("auth_token", &self.auth_token.as_ref().map(|_| "***"))
            .field("read_token", &self.read_token.as_ref().map(|_| "***"))
            .field("tokens", &self.tokens)
            .field("body_limit", &self.body_limit)
            .field("default_lease_ms", &self.default_lease_ms)
            .field("default_max_attempts", &self.default_max_attempts)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// The state behind every route. Cheap to clone (reference counts).
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) test_clock: Option<Arc<FrozenClock>>,
    pub(crate) settings: Arc<ApiSettings>,
    pub(crate) metrics: Arc<Metrics>,
    /// Deployed handlers (`None`: the handler routes answer 404).
    #[cfg(feature = "wasm")]
    pub(crate) handlers: Option<Arc<crate::handlers::HandlerRegistry>>,
    /// This server as a node (`rheo serve` sets it; otherwise a node of
    /// its own with no address).
    pub(crate) membership: Arc<crate::cluster::Membership>,
    // Flipped to true once shutdown starts: long polls stop waiting and
    // answer with what they have, so draining is not held up by them.
    draining: Arc<watch::Sender<bool>>,
}

impl AppState {
    /// State over `backend` with `settings` and no test clock; the
    /// backend's operations are measured in a registry of its own.
    pub fn new(backend: Arc<dyn Backend>, settings: ApiSettings) -> Self {
        let metrics = Arc::new(Metrics::new());
        Self::observed(metrics.measured(backend), settings, metrics)
    }

    /// State over `backend` reporting to `metrics`; `backend` should be
    /// [`Metrics::measured`] by it (so the backend series are there).
    pub fn observed(
        backend: Arc<dyn Backend>,
        settings: ApiSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let clock = backend.clock().clone();
        Self {
            backend,
            test_clock: None,
            settings: Arc::new(settings),
            metrics,
            #[cfg(feature = "wasm")]
            handlers: None,
            membership: Arc::new(crate::cluster::Membership::new(
                crate::cluster::MembershipSettings {
                    id: crate::cluster::MembershipSettings::default_id(),
                    address: String::new(),
                    timeout: crate::cluster::DEFAULT_NODE_TIMEOUT,
                },
                clock,
                None,
                Arc::new(Vec::new),
            )),
            draining: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Enables the `/v1/test/clock` routes over `clock`, which must be the
    /// clock the backend was opened with (or moving it changes nothing).
    pub fn with_test_clock(mut self, clock: Arc<FrozenClock>) -> Self {
        self.test_clock = Some(clock);
        self
    }

    /// Serves the handler routes from `registry`, and shows its handlers
    /// in the metrics.
    #[cfg(feature = "wasm")]
    pub fn with_handlers(mut self, registry: Arc<crate::handlers::HandlerRegistry>) -> Self {
        self.metrics
            .show_handlers(Box::new(crate::handlers::metrics::HandlerCollector(
                Arc::clone(&registry),
            )));
        // The console's plots of a handler start from these
        // (`GET /v1/metrics/samples`).
        let weak = Arc::downgrade(&registry);
        self.metrics.sample_handlers(Box::new(move || {
            let Some(registry) = weak.upgrade() else {
                return Vec::new();
            };
            registry
                .views()
                .into_iter()
                .map(|v| crate::metrics::history::HandlerSample {
                    name: v.name.to_string(),
                    stream: v.manifest.stream.to_string(),
                    group: v.manifest.group.to_string(),
                    processed: v.counters.processed,
                    acked: v.counters.acked,
                })
                .collect()
        }));
        self.handlers = Some(registry);
        self
    }

    /// The metrics `/metrics` shows.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// This server as a node of its cluster (or the only one).
    pub fn with_membership(mut self, membership: Arc<crate::cluster::Membership>) -> Self {
        self.membership = membership;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The settings.
    pub fn settings(&self) -> &ApiSettings {
        &self.settings
    }

    /// Tells waiting long polls to answer now: the server is shutting down.
    pub fn start_draining(&self) {
        self.draining.send_replace(true);
    }

    /// A receiver that sees [`AppState::start_draining`].
    pub(crate) fn draining(&self) -> watch::Receiver<bool> {
        self.draining.subscribe()
    }
}
