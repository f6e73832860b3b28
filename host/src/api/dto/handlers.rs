//! Handler bodies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::handler_logs::{LogLevel, LogLine, LogSource};
use crate::handlers::{HandlerStatus, HandlerView};
use crate::model::Timestamp;
use crate::runtime::CountersSnapshot;

/// What a handler has done.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CountersBody {
    processed: u64,
    acked: u64,
    retried: u64,
    rejected: u64,
    trapped: u64,
    timed_out: u64,
    lost: u64,
    settle_errors: u64,
    inflight: u64,
}

impl From<CountersSnapshot> for CountersBody {
    fn from(c: CountersSnapshot) -> Self {
        Self {
            processed: c.processed,
            acked: c.acked,
            retried: c.retried,
            rejected: c.rejected,
            trapped: c.trapped,
            timed_out: c.timed_out,
            lost: c.lost,
            settle_errors: c.settle_errors,
            inflight: c.inflight,
        }
    }
}

/// A deployed handler.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandlerBody {
    name: String,
    stream: String,
    group: String,
    /// `running`, `paused`, or `failed` (see `last_error`).
    status: HandlerStatus,
    version: Option<u64>,
    /// sha256 of the module, hex.
    digest: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    deployed_at: Option<Timestamp>,
    previous_version: Option<u64>,
    config: BTreeMap<String, String>,
    counters: CountersBody,
    /// Counters per version number (keys are version numbers as strings).
    #[schema(value_type = std::collections::HashMap<String, CountersBody>)]
    versions: BTreeMap<u64, CountersBody>,
    /// Why the last deploy or reload was refused (the running version, if
    /// any, kept running).
    last_error: Option<String>,
    /// The manifest in force.
    #[schema(value_type = super::JsonObjectSchema)]
    manifest: serde_json::Value,
}

impl From<HandlerView> for HandlerBody {
    fn from(v: HandlerView) -> Self {
        Self {
            name: v.name.to_string(),
            stream: v.manifest.stream.to_string(),
            group: v.manifest.group.to_string(),
            status: v.status,
            version: v.version,
            digest: v.digest,
            deployed_at: v.deployed_at,
            previous_version: v.previous_version,
            config: v.manifest.config.clone(),
            counters: v.counters.into(),
            versions: v
                .counters_by_version
                .into_iter()
                .map(|(n, c)| (n, c.into()))
                .collect(),
            last_error: v.last_error,
            manifest: serde_json::to_value(&v.manifest).unwrap_or_default(),
        }
    }
}

/// Every handler.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandlerListBody {
    pub(crate) handlers: Vec<HandlerBody>,
}

/// A deploy, as `multipart/form-data`: a `manifest` part and a `module`
/// part.
// Describes the form in the OpenAPI document; the route reads the parts one
// by one.
// No other part is taken (`handlers::handler_deploy`): the document says
// so with `additionalProperties: false`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "describes the document; never built")]
pub(crate) struct DeployForm {
    /// The manifest: JSON, or TOML when the part's content type is
    /// `application/toml`.
    #[schema(value_type = String, format = Binary)]
    manifest: Vec<u8>,
    /// The WebAssembly component (`.wasm`).
    #[schema(value_type = String, format = Binary)]
    module: Vec<u8>,
}

/// A WebAssembly component, the raw body of a module swap.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code, reason = "describes the document; never built")]
pub(crate) struct WasmModule(Vec<u8>);

/// One line a handler's guest wrote (`docs/handlers.md#handler-logs`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LogLineBody {
    /// Its number in the handler's log: 1, 2, …, growing across hot swaps
    /// and rollbacks (the `id` of its server-sent event).
    seq: u64,
    /// When the server received it (its clock).
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    /// `trace`, `debug`, `info`, `warn` or `error` (stdout is `info`,
    /// stderr `warn`).
    #[schema(value_type = String)]
    level: LogLevel,
    /// `log` (the `log` import), `stdout` or `stderr`.
    #[schema(value_type = String)]
    source: LogSource,
    /// The text, cut to 4096 bytes.
    message: String,
    /// The handler version that wrote it (absent while a new version was
    /// being started to validate it, before it had a number).
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u64>,
    /// The event being handled (absent outside a delivery).
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<String>,
    /// Its stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
    /// Its partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<u32>,
    /// Its sequence in the partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence: Option<u64>,
    /// The delivery's attempt (1 = first).
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
}

impl From<&LogLine> for LogLineBody {
    fn from(l: &LogLine) -> Self {
        let d = l.line.delivery.as_deref();
        Self {
            seq: l.seq,
            at: l.line.at,
            level: l.line.level,
            source: l.line.source,
            message: l.line.message.clone(),
            version: l.line.version,
            event_id: d.map(|d| d.event_id.clone()),
            stream: d.map(|d| d.stream.clone()),
            partition: d.map(|d| d.partition),
            sequence: d.map(|d| d.sequence),
            attempt: d.map(|d| d.attempt),
        }
    }
}

/// A handler's last log lines on the server that answers, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandlerLogsBody {
    /// The handler.
    pub(crate) handler: String,
    /// The lines.
    pub(crate) lines: Vec<LogLineBody>,
}

/// `GET /v1/handlers/{handler}/logs` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LogsParams {
    /// At most this many lines, the last ones (default 100, at most the
    /// lines kept per handler: `rheo serve --handler-log-lines`, default
    /// 1000).
    pub(crate) limit: Option<u32>,
    /// Keep the answer open and send new lines as they come, as
    /// server-sent events (`text/event-stream`).
    pub(crate) follow: Option<bool>,
}

/// `event: gap` of a followed log: lines the reader will never get.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LogGapBody {
    /// How many.
    pub(crate) missed: u64,
}
