//! Configuration of `rheo serve`, from three sources merged field by field:
//! command-line flags, then `RHEO_*` environment variables (clap reads
//! both, flags first), then an optional TOML file, then the defaults.
//!
//! The file uses the long flag names with underscores (the `…_ms` keys of
//! earlier releases are still read); docs/configuration.md lists them
//! all, with an example file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::api::tls::TlsFiles;
use crate::api::{ApiSettings, NamedToken};
use crate::handler_logs::{DEFAULT_LOG_LINES, MAX_LOG_LINES};
use crate::model::{MAX_MAX_ATTEMPTS, human_ms, validate_lease_ms};
use crate::telemetry::LogFormat;

/// Where Rheo keeps its data when no backend is given: a SQLite file in the
/// current directory.
pub const DEFAULT_BACKEND: &str = "sqlite://rheo.db";

/// Where the server listens when nothing else is configured.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// Where handlers live when nothing else is configured (relative to the
/// working directory, like the default SQLite file).
pub const DEFAULT_HANDLERS_DIR: &str = "rheo-handlers";

/// The SQLite file in a data folder (`--data-dir`).
pub const DATA_DIR_DATABASE: &str = "rheo.db";

/// The handlers folder in a data folder (`--data-dir`).
pub const DATA_DIR_HANDLERS: &str = "handlers";

/// Longest node id (it is also part of every handler's consumer id).
const MAX_NODE_ID_LEN: usize = 64;

/// Node timeouts accepted: a heartbeat goes out every quarter of it.
const MIN_NODE_TIMEOUT_MS: u64 = 200;
const MAX_NODE_TIMEOUT_MS: u64 = 3_600_000;

/// Group sampling intervals accepted for `/metrics`.
const MIN_METRICS_INTERVAL_MS: u64 = 100;
const MAX_METRICS_INTERVAL_MS: u64 = 3_600_000;

/// Store timeouts accepted (`docs/cluster.md#a-node-cut-off-from-the-store`).
const STORE_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 500..=600_000;
/// Retention intervals accepted (`docs/log.md#retention`).
const RETENTION_INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=3_600_000;
/// Request timeouts accepted (`docs/http.md#request-timeout`).
const REQUEST_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 500..=3_600_000;

/// Smallest body limit accepted: below this even a small batch fails.
const MIN_BODY_LIMIT: usize = 1024;

/// A duration with its unit, `500ms`, `90s`, `10m`, `1h` or `7d`, in
/// milliseconds; more than zero.
pub fn duration_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    match number.parse::<u64>() {
        Ok(n) if n > 0 && scale > 0 => n
            .checked_mul(scale)
            .ok_or_else(|| format!("{text} is too long")),
        _ => Err("expected a duration with its unit, e.g. 500ms, 90s, 10m, 1h or 7d".to_owned()),
    }
}

/// A duration as [`duration_ms`] reads it, or a bare number of
/// milliseconds (what the `…-ms` flags and keys of earlier releases took).
pub fn duration_or_ms(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(ms) => Ok(ms),
        Err(_) => duration_ms(text),
    }
}

/// A duration key of the config file: `"30s"`, or a number of milliseconds.
fn duration_key<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Spelled {
        Ms(u64),
        Text(String),
    }
    match Spelled::deserialize(de)? {
        Spelled::Ms(ms) => Ok(Some(ms)),
        Spelled::Text(text) => duration_or_ms(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// The settings one source gives; `None` means "not set here".
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeOptions {
    /// The folder of a single node's state: the SQLite store
    /// (`rheo.db`) and the handlers (`handlers/`), unless `backend` or
    /// `handlers_dir` name others.
    pub data_dir: Option<PathBuf>,
    /// Backend URL.
    pub backend: Option<String>,
    /// Listen address, `host:port` (`:port` means 127.0.0.1; port 0 picks a free one).
    pub listen: Option<String>,
    /// Bearer token required on `/v1` routes.
    pub auth_token: Option<String>,
    /// A bearer token that may only read (`GET`, `HEAD`).
    pub read_token: Option<String>,
    /// Named bearer tokens, `NAME=SECRET` or `NAME:read=SECRET`.
    pub tokens: Option<Vec<String>>,
    /// PEM certificate chain: serve HTTPS (with `tls_key`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Start with a frozen clock and the `/v1/test/clock` routes.
    pub test_clock: Option<bool>,
    /// Apply pending schema migrations at startup.
    pub migrate: Option<bool>,
    /// Largest request body, in bytes.
    pub body_limit: Option<usize>,
    /// Lease duration for fetch and renew requests that give none.
    #[serde(
        default,
        rename = "default_lease",
        alias = "default_lease_ms",
        deserialize_with = "duration_key"
    )]
    pub default_lease_ms: Option<u64>,
    /// `max_attempts` of groups created without one.
    pub default_max_attempts: Option<u32>,
    /// Directory of handler manifests and modules (watched for changes).
    pub handlers_dir: Option<PathBuf>,
    /// Meter guests with fuel (needed by manifests that set `fuel`; ~20% per call).
    pub wasm_fuel: Option<bool>,
    /// This server's id among the nodes of a cluster.
    pub node_id: Option<String>,
    /// This server's API address as the nodes list shows it.
    pub advertise: Option<String>,
    /// How long a silent node is still listed, in ms.
    #[serde(
        default,
        rename = "node_timeout",
        alias = "node_timeout_ms",
        deserialize_with = "duration_key"
    )]
    pub node_timeout_ms: Option<u64>,
    /// Log lines kept in memory per handler.
    pub handler_log_lines: Option<usize>,
    /// Log lines as text or JSON.
    pub log_format: Option<LogFormat>,
    /// Where to export traces (an OTLP/HTTP collector).
    pub otlp_endpoint: Option<String>,
    /// How often the group series of `/metrics` are sampled, in ms.
    #[serde(
        default,
        rename = "metrics_interval",
        alias = "metrics_interval_ms",
        deserialize_with = "duration_key"
    )]
    pub metrics_interval_ms: Option<u64>,
    /// How long a store call may take, in ms.
    #[serde(
        default,
        rename = "store_timeout",
        alias = "store_timeout_ms",
        deserialize_with = "duration_key"
    )]
    pub store_timeout_ms: Option<u64>,
    /// How long a request may take, in ms.
    #[serde(
        default,
        rename = "request_timeout",
        alias = "request_timeout_ms",
        deserialize_with = "duration_key"
    )]
    pub request_timeout_ms: Option<u64>,
    /// How often streams with a retention are trimmed, in ms.
    #[serde(
        default,
        rename = "retention_interval",
        alias = "retention_interval_ms",
        deserialize_with = "duration_key"
    )]
    pub retention_interval_ms: Option<u64>,
}

impl ServeOptions {
    /// Reads a TOML config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// These settings, with the gaps filled from `fallback`.
    pub fn or(self, fallback: ServeOptions) -> ServeOptions {
        ServeOptions {
            data_dir: self.data_dir.or(fallback.data_dir),
            backend: self.backend.or(fallback.backend),
            listen: self.listen.or(fallback.listen),
            auth_token: self.auth_token.or(fallback.auth_token),
            read_token: self.read_token.or(fallback.read_token),
            tokens: self.tokens.or(fallback.tokens),
            tls_cert: self.tls_cert.or(fallback.tls_cert),
            tls_key: self.tls_key.or(fallback.tls_key),
            test_clock: self.test_clock.or(fallback.test_clock),
            migrate: self.migrate.or(fallback.migrate),
            body_limit: self.body_limit.or(fallback.body_limit),
            default_lease_ms: self.default_lease_ms.or(fallback.default_lease_ms),
            default_max_attempts: self.default_max_attempts.or(fallback.default_max_attempts),
            handlers_dir: self.handlers_dir.or(fallback.handlers_dir),
            wasm_fuel: self.wasm_fuel.or(fallback.wasm_fuel),
            node_id: self.node_id.or(fallback.node_id),
            advertise: self.advertise.or(fallback.advertise),
            node_timeout_ms: self.node_timeout_ms.or(fallback.node_timeout_ms),
            handler_log_lines: self.handler_log_lines.or(fallback.handler_log_lines),
            log_format: self.log_format.or(fallback.log_format),
            otlp_endpoint: self.otlp_endpoint.or(fallback.otlp_endpoint),
            metrics_interval_ms: self.metrics_interval_ms.or(fallback.metrics_interval_ms),
            retention_interval_ms: self
                .retention_interval_ms
                .or(fallback.retention_interval_ms),
            store_timeout_ms: self.store_timeout_ms.or(fallback.store_timeout_ms),
            request_timeout_ms: self.request_timeout_ms.or(fallback.request_timeout_ms),
        }
    }
}

/// The resolved, checked configuration of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The data folder, created at start when given.
    pub data_dir: Option<PathBuf>,
    /// Backend URL.
    pub backend: String,
    /// Address to bind, `host:port`.
    pub listen: String,
    /// Serve HTTPS with this certificate and key (`None`: plain HTTP).
    pub tls: Option<TlsFiles>,
    /// Run on a frozen clock with the test clock routes.
    pub test_clock: bool,
    /// Apply pending migrations at startup.
    pub migrate: bool,
    /// How the HTTP API behaves.
    pub api: ApiSettings,
    /// Where handler manifests and modules live.
    pub handlers_dir: PathBuf,
    /// Fuel metering for guests.
    pub wasm_fuel: bool,
    /// This server's node id (`None`: host name and a random suffix).
    pub node_id: Option<String>,
    /// The address the nodes list shows (`None`: `http://<bound address>`).
    pub advertise: Option<String>,
    /// A node silent this long is no longer listed.
    pub node_timeout: std::time::Duration,
    /// Log lines kept in memory per handler (`docs/handlers.md#handler-logs`).
    pub handler_log_lines: usize,
    /// Log lines as text or JSON.
    pub log_format: LogFormat,
    /// Where traces are exported, if anywhere.
    pub otlp_endpoint: Option<String>,
    /// How often the group series of `/metrics` are sampled.
    pub metrics_interval: std::time::Duration,
    /// Every store call answers within this
    /// (`docs/cluster.md#a-node-cut-off-from-the-store`).
    pub store_timeout: std::time::Duration,
    /// How often streams with a retention are trimmed (`docs/log.md#retention`).
    pub retention_interval: std::time::Duration,
}

impl ServeConfig {
    /// Fills unset options with the defaults and checks every value.
    pub fn resolve(options: ServeOptions) -> Result<Self, ConfigError> {
        let defaults = ApiSettings::default();
        let data_dir = options.data_dir;
        if data_dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return Err(invalid("data_dir", "must not be empty"));
        }
        let backend = options.backend.unwrap_or_else(|| match &data_dir {
            Some(dir) => format!("sqlite://{}", dir.join(DATA_DIR_DATABASE).display()),
            None => DEFAULT_BACKEND.to_owned(),
        });
        if backend.trim().is_empty() {
            return Err(invalid("backend", "must not be empty"));
        }
        let listen = normalize_listen(options.listen.as_deref().unwrap_or(DEFAULT_LISTEN))?;
        if options.auth_token.as_deref().is_some_and(str::is_empty) {
            return Err(invalid(
                "auth_token",
                "must not be empty (leave it unset to run without auth)",
            ));
        }
        let tokens = named_tokens(
            options.tokens.as_deref().unwrap_or_default(),
            options.auth_token.as_deref(),
            options.read_token.as_deref(),
        )?;
        let may_change = options.auth_token.is_some() || tokens.iter().any(|t| !t.read_only);
        match (&options.read_token, &options.auth_token) {
            (Some(read), _) if read.is_empty() => {
                return Err(invalid(
                    "read_token",
                    "must not be empty (leave it unset to have no read token)",
                ));
            }
            (Some(_), None) if !may_change => {
                return Err(invalid(
                    "read_token",
                    "needs auth_token too: without it every route is open and a read token would limit nothing",
                ));
            }
            (Some(read), Some(all)) if read == all => {
                return Err(invalid(
                    "read_token",
                    "must differ from auth_token, or it could do everything",
                ));
            }
            _ => {}
        }
        let tls = match (options.tls_cert, options.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("tls_key", "tls_cert needs tls_key too")),
            (None, Some(_)) => return Err(invalid("tls_cert", "tls_key needs tls_cert too")),
        };
        let body_limit = options.body_limit.unwrap_or(defaults.body_limit);
        if body_limit < MIN_BODY_LIMIT {
            return Err(invalid(
                "body_limit",
                format!("must be at least {MIN_BODY_LIMIT} bytes (got {body_limit})"),
            ));
        }
        let default_lease_ms = options
            .default_lease_ms
            .unwrap_or(defaults.default_lease_ms);
        validate_lease_ms(default_lease_ms).map_err(|e| invalid("default_lease", e.message))?;
        let default_max_attempts = options
            .default_max_attempts
            .unwrap_or(defaults.default_max_attempts);
        if !(1..=MAX_MAX_ATTEMPTS).contains(&default_max_attempts) {
            return Err(invalid(
                "default_max_attempts",
                format!("must be between 1 and {MAX_MAX_ATTEMPTS}"),
            ));
        }
        if let Some(id) = &options.node_id {
            let ok = (1..=MAX_NODE_ID_LEN).contains(&id.len())
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(invalid(
                    "node_id",
                    format!("{id:?}: use 1–{MAX_NODE_ID_LEN} characters of [A-Za-z0-9._-]"),
                ));
            }
        }
        if options
            .advertise
            .as_deref()
            .is_some_and(|a| !(a.starts_with("http://") || a.starts_with("https://")))
        {
            return Err(invalid("advertise", "must be an http:// or https:// URL"));
        }
        let node_timeout_ms = options
            .node_timeout_ms
            .unwrap_or(crate::cluster::DEFAULT_NODE_TIMEOUT.as_millis() as u64);
        millis(
            "node_timeout",
            Some(node_timeout_ms),
            std::time::Duration::ZERO,
            MIN_NODE_TIMEOUT_MS..=MAX_NODE_TIMEOUT_MS,
        )?;
        if let Some(endpoint) = &options.otlp_endpoint {
            crate::telemetry::traces_url(endpoint)
                .map_err(|e| invalid("otlp_endpoint", e.to_string()))?;
        }
        let metrics_interval_ms = options
            .metrics_interval_ms
            .unwrap_or(crate::metrics::DEFAULT_SAMPLE_INTERVAL.as_millis() as u64);
        millis(
            "metrics_interval",
            Some(metrics_interval_ms),
            std::time::Duration::ZERO,
            MIN_METRICS_INTERVAL_MS..=MAX_METRICS_INTERVAL_MS,
        )?;
        let store_timeout = millis(
            "store_timeout",
            options.store_timeout_ms,
            crate::backend::DEFAULT_STORE_TIMEOUT,
            STORE_TIMEOUT_MS,
        )?;
        let retention_interval = millis(
            "retention_interval",
            options.retention_interval_ms,
            crate::retention::DEFAULT_INTERVAL,
            RETENTION_INTERVAL_MS,
        )?;
        let request_timeout = millis(
            "request_timeout",
            options.request_timeout_ms,
            crate::api::DEFAULT_REQUEST_TIMEOUT,
            REQUEST_TIMEOUT_MS,
        )?;
        let handler_log_lines = options.handler_log_lines.unwrap_or(DEFAULT_LOG_LINES);
        if !(1..=MAX_LOG_LINES).contains(&handler_log_lines) {
            return Err(invalid(
                "handler_log_lines",
                format!("must be between 1 and {MAX_LOG_LINES} (got {handler_log_lines})"),
            ));
        }
        Ok(Self {
            data_dir: data_dir.clone(),
            handler_log_lines,
            log_format: options.log_format.unwrap_or_default(),
            otlp_endpoint: options.otlp_endpoint,
            metrics_interval: std::time::Duration::from_millis(metrics_interval_ms),
            retention_interval,
            store_timeout,
            backend,
            listen,
            tls,
            node_id: options.node_id,
            advertise: options.advertise,
            node_timeout: std::time::Duration::from_millis(node_timeout_ms),
            test_clock: options.test_clock.unwrap_or(false),
            migrate: options.migrate.unwrap_or(true),
            handlers_dir: options.handlers_dir.unwrap_or_else(|| match &data_dir {
                Some(dir) => dir.join(DATA_DIR_HANDLERS),
                None => PathBuf::from(DEFAULT_HANDLERS_DIR),
            }),
            wasm_fuel: options.wasm_fuel.unwrap_or(false),
            api: ApiSettings {
                auth_token: options.auth_token,
                read_token: options.read_token,
                tokens,
                body_limit,
                default_lease_ms,
                default_max_attempts,
                request_timeout,
            },
        })
    }
}

/// A duration in milliseconds (`default` when unset) within `range`.
fn millis(
    key: &'static str,
    value: Option<u64>,
    default: std::time::Duration,
    range: std::ops::RangeInclusive<u64>,
) -> Result<std::time::Duration, ConfigError> {
    let ms = value.unwrap_or(default.as_millis() as u64);
    if !range.contains(&ms) {
        return Err(invalid(
            key,
            format!(
                "must be between {} and {} (got {})",
                human_ms(*range.start()),
                human_ms(*range.end()),
                human_ms(ms)
            ),
        ));
    }
    Ok(std::time::Duration::from_millis(ms))
}

/// `host:port` as given, or `127.0.0.1:port` for `:port`; the port must be a number.
fn normalize_listen(listen: &str) -> Result<String, ConfigError> {
    let listen = listen.trim();
    let Some((host, port)) = listen.rsplit_once(':') else {
        return Err(invalid(
            "listen",
            format!("{listen:?} is not host:port (e.g. 127.0.0.1:7070, or :0 for any free port)"),
        ));
    };
    if port.parse::<u16>().is_err() {
        return Err(invalid("listen", format!("{port:?} is not a port number")));
    }
    Ok(if host.is_empty() {
        format!("127.0.0.1:{port}")
    } else {
        listen.to_owned()
    })
}

/// Parses the named tokens and checks them against each other and the
/// unnamed ones: names and secrets are unique, and some token may change
/// things.
fn named_tokens(
    texts: &[String],
    auth_token: Option<&str>,
    read_token: Option<&str>,
) -> Result<Vec<NamedToken>, ConfigError> {
    let mut tokens: Vec<NamedToken> = Vec::new();
    for text in texts {
        let token = NamedToken::parse(text).map_err(|e| invalid("tokens", e))?;
        if tokens.iter().any(|t| t.name == token.name) {
            return Err(invalid(
                "tokens",
                format!("the name {:?} is given twice", token.name),
            ));
        }
        let unnamed = [auth_token, read_token];
        if tokens.iter().any(|t| t.secret == token.secret)
            || unnamed.contains(&Some(token.secret.as_str()))
        {
            return Err(invalid(
                "tokens",
                format!(
                    "token {:?} has the secret of another token: each token needs its own",
                    token.name
                ),
            ));
        }
        tokens.push(token);
    }
    if !tokens.is_empty() && auth_token.is_none() && tokens.iter().all(|t| t.read_only) {
        return Err(invalid(
            "tokens",
            "every token may only read: give one that may change things (NAME=SECRET, or auth_token)",
        ));
    }
    Ok(tokens)
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these settings.
    #[error("bad config file {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid {key}: {message}")]
    Invalid {
        /// The setting, by its file key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(f: impl FnOnce(&mut ServeOptions)) -> ServeOptions {
        let mut o = ServeOptions::default();
        f(&mut o);
        o
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = ServeConfig::resolve(ServeOptions::default()).unwrap();
        assert_eq!(c.backend, "sqlite://rheo.db");
        assert_eq!(c.handlers_dir, PathBuf::from("rheo-handlers"));
        assert_eq!(c.data_dir, None);
        assert_eq!(c.listen, "127.0.0.1:7070");
        assert!(!c.test_clock);
        assert!(c.migrate);
        assert_eq!(c.api, ApiSettings::default());
        assert_eq!(c.handler_log_lines, DEFAULT_LOG_LINES);
    }

    #[test]
    fn a_data_dir_holds_the_sqlite_store_and_the_handlers_unless_told_otherwise() {
        let c = ServeConfig::resolve(given(|o| o.data_dir = Some("/srv/rheo".into()))).unwrap();
        assert_eq!(c.data_dir, Some(PathBuf::from("/srv/rheo")));
        assert_eq!(c.backend, "sqlite:///srv/rheo/rheo.db");
        assert_eq!(c.handlers_dir, PathBuf::from("/srv/rheo/handlers"));
        let c = ServeConfig::resolve(given(|o| {
            o.data_dir = Some("data".into());
            o.backend = Some("postgres://db/rheo".into());
            o.handlers_dir = Some("elsewhere".into());
        }))
        .unwrap();
        assert_eq!(c.backend, "postgres://db/rheo");
        assert_eq!(c.handlers_dir, PathBuf::from("elsewhere"));
        let e = ServeConfig::resolve(given(|o| o.data_dir = Some("".into()))).unwrap_err();
        assert!(e.to_string().contains("data_dir"), "{e}");
    }

    #[test]
    fn earlier_sources_win_field_by_field() {
        let flags = given(|o| o.listen = Some("127.0.0.1:0".into()));
        let file = given(|o| {
            o.listen = Some("0.0.0.0:80".into());
            o.backend = Some("memory://".into());
        });
        let c = ServeConfig::resolve(flags.or(file)).unwrap();
        assert_eq!(c.listen, "127.0.0.1:0");
        assert_eq!(c.backend, "memory://");
    }

    #[test]
    fn files_are_toml_with_the_flag_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rheo.toml");
        std::fs::write(
            &path,
            "backend = \"memory://\"\nmigrate = false\nbody_limit = 4096\ndefault_lease_ms = 500\n",
        )
        .unwrap();
        let c = ServeConfig::resolve(ServeOptions::from_file(&path).unwrap()).unwrap();
        assert_eq!(c.backend, "memory://");
        assert!(!c.migrate);
        assert_eq!(c.api.body_limit, 4096);
        assert_eq!(c.api.default_lease_ms, 500);

        std::fs::write(&path, "listne = \"x\"\n").unwrap();
        let err = ServeOptions::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("listne"), "{err}");
        assert!(ServeOptions::from_file(&dir.path().join("missing.toml")).is_err());
    }

    #[test]
    fn durations_are_written_with_their_unit_or_as_milliseconds() {
        let read = |text: &str| toml::from_str::<ServeOptions>(text);
        let file =
            read("default_lease = \"2m\"\nstore_timeout = \"1500ms\"\nnode_timeout = 20000\n")
                .unwrap();
        assert_eq!(file.default_lease_ms, Some(120_000));
        assert_eq!(file.store_timeout_ms, Some(1_500));
        assert_eq!(file.node_timeout_ms, Some(20_000));
        // The keys of earlier releases.
        let old = read("request_timeout_ms = 4000\nretention_interval_ms = \"1s\"\n").unwrap();
        assert_eq!(old.request_timeout_ms, Some(4_000));
        assert_eq!(old.retention_interval_ms, Some(1_000));
        let bad = read("metrics_interval = \"5 parsecs\"\n")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("expected a duration"), "{bad}");
        assert_eq!(duration_ms("7d"), Ok(604_800_000));
        assert!(
            duration_ms("30").is_err(),
            "a unit is needed where no -ms flag was"
        );
        assert_eq!(duration_or_ms("30"), Ok(30));
        assert_eq!(duration_or_ms("30s"), Ok(30_000));
    }

    #[test]
    fn listen_addresses_need_a_port_and_default_the_host() {
        assert_eq!(normalize_listen(":0").unwrap(), "127.0.0.1:0");
        assert_eq!(normalize_listen("[::1]:7070").unwrap(), "[::1]:7070");
        assert!(normalize_listen("localhost").is_err());
        assert!(normalize_listen("localhost:http").is_err());
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        let key = |o: ServeOptions| match ServeConfig::resolve(o) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid setting, got {other:?}"),
        };
        assert_eq!(key(given(|o| o.body_limit = Some(10))), "body_limit");
        assert_eq!(
            key(given(|o| o.default_lease_ms = Some(0))),
            "default_lease"
        );
        assert_eq!(
            key(given(|o| o.default_max_attempts = Some(0))),
            "default_max_attempts"
        );
        assert_eq!(
            key(given(|o| o.auth_token = Some(String::new()))),
            "auth_token"
        );
        assert_eq!(key(given(|o| o.backend = Some(" ".into()))), "backend");
        assert_eq!(
            key(given(|o| o.handler_log_lines = Some(0))),
            "handler_log_lines"
        );
        assert_eq!(
            key(given(|o| o.handler_log_lines = Some(MAX_LOG_LINES + 1))),
            "handler_log_lines"
        );
        let c = ServeConfig::resolve(given(|o| o.handler_log_lines = Some(MAX_LOG_LINES)));
        assert_eq!(c.unwrap().handler_log_lines, MAX_LOG_LINES);
        assert_eq!(
            key(given(|o| o.store_timeout_ms = Some(499))),
            "store_timeout"
        );
        assert_eq!(
            key(given(|o| o.request_timeout_ms = Some(3_600_001))),
            "request_timeout"
        );
        assert_eq!(key(given(|o| o.node_timeout_ms = Some(1))), "node_timeout");
        match ServeConfig::resolve(given(|o| o.metrics_interval_ms = Some(5))) {
            Err(e) => assert_eq!(
                e.to_string(),
                "invalid metrics_interval: must be between 100ms and 1h 00m (got 5ms)"
            ),
            Ok(_) => panic!("5ms is below the range"),
        }
    }

    #[test]
    fn timeouts_default_and_read_from_their_keys() {
        let c = ServeConfig::resolve(ServeOptions::default()).unwrap();
        assert_eq!(c.store_timeout, crate::backend::DEFAULT_STORE_TIMEOUT);
        assert_eq!(c.api.request_timeout, crate::api::DEFAULT_REQUEST_TIMEOUT);
        let c = ServeConfig::resolve(given(|o| {
            o.store_timeout_ms = Some(2_500);
            o.request_timeout_ms = Some(500);
        }))
        .unwrap();
        assert_eq!(c.store_timeout, std::time::Duration::from_millis(2_500));
        assert_eq!(c.api.request_timeout, std::time::Duration::from_millis(500));
    }

    #[test]
    fn a_read_token_needs_a_different_auth_token() {
        let key = |o: ServeOptions| match ServeConfig::resolve(o) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid setting, got {other:?}"),
        };
        let tokens = |all: Option<&str>, read: &str| {
            given(|o| {
                o.auth_token = all.map(str::to_owned);
                o.read_token = Some(read.to_owned());
            })
        };
        assert_eq!(key(tokens(None, "r")), "read_token");
        assert_eq!(key(tokens(Some("a"), "")), "read_token");
        assert_eq!(key(tokens(Some("a"), "a")), "read_token");
        let c = ServeConfig::resolve(tokens(Some("a"), "r")).expect("two tokens");
        assert_eq!(c.api.read_token.as_deref(), Some("r"));
    }

    #[test]
    fn named_tokens_have_unique_names_and_secrets_and_one_may_change_things() {
        let resolve = |auth: Option<&str>, list: &[&str]| {
            ServeConfig::resolve(given(|o| {
                o.auth_token = auth.map(str::to_owned);
                o.tokens = Some(list.iter().map(|t| (*t).to_owned()).collect());
            }))
        };
        let c = resolve(None, &["ci=ci-s3cret", "dash:read=two"]).expect("two named tokens");
        assert!(c.api.auth_required());
        let names: Vec<_> = c
            .api
            .tokens
            .iter()
            .map(|t| (t.name.as_str(), t.read_only))
            .collect();
        assert_eq!(names, [("ci", false), ("dash", true)]);
        assert!(
            !format!("{:?}", c.api).contains("s3cret"),
            "secrets stay out of Debug"
        );
        let refused = [
            resolve(None, &["dash:read=two"]),
            resolve(None, &["ci=one", "ci=three"]),
            resolve(None, &["ci=one", "cd=one"]),
            resolve(Some("one"), &["ci=one"]),
            resolve(None, &["no secret"]),
            resolve(None, &["ci="]),
            resolve(None, &["ci:write=x"]),
            resolve(None, &["a b=x"]),
        ];
        for r in refused {
            assert!(
                matches!(&r, Err(ConfigError::Invalid { key: "tokens", .. })),
                "{r:?}"
            );
        }
    }

    #[test]
    fn tls_needs_a_certificate_and_its_key() {
        let key = |o: ServeOptions| match ServeConfig::resolve(o) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid setting, got {other:?}"),
        };
        assert_eq!(key(given(|o| o.tls_cert = Some("c.pem".into()))), "tls_key");
        assert_eq!(key(given(|o| o.tls_key = Some("k.pem".into()))), "tls_cert");
        let both = given(|o| {
            o.tls_cert = Some("c.pem".into());
            o.tls_key = Some("k.pem".into());
        });
        let tls = ServeConfig::resolve(both).expect("both files").tls;
        assert_eq!(
            tls,
            Some(TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into()
            })
        );
        assert_eq!(ServeConfig::resolve(given(|_| {})).unwrap().tls, None);
    }
}
