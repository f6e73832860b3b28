//! Handler bodies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::handler_logs::{LogLevel, LogLine, LogSource};
use crate::handlers::{
    CanaryPlan, CanaryView, DEFAULT_MARGIN_PERCENT, DEFAULT_MIN_DELIVERIES, DEFAULT_WINDOW_MS,
    DeployStep, HandlerStatus, HandlerView, TrialReport, TrialRun, TrialTotals, append_json,
};
use crate::model::Timestamp;
use crate::runtime::{CanaryCounts, CountersSnapshot};

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
    /// The canary running beside the current version, if one does
    /// (docs/handlers.md#canaries).
    canary: Option<CanaryBody>,
}

/// A canary: a version taking a share of first attempts until it is
/// promoted or rolled back.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CanaryBody {
    version: u64,
    /// sha256 of its module, hex.
    digest: String,
    /// Its share of first attempts, in percent.
    share_percent: f64,
    /// How long it runs before it is promoted.
    window_ms: u64,
    /// How many percentage points more often than the current version it
    /// may fail.
    margin_percent: f64,
    /// First attempts it must handle before it is judged either way.
    min_deliveries: u64,
    #[schema(value_type = String, format = DateTime)]
    started_at: Timestamp,
    /// When its window ends: it is promoted then if it has handled
    /// `min_deliveries` and is within the margin.
    #[schema(value_type = String, format = DateTime)]
    ends_at: Timestamp,
    /// What both versions did with their first attempts on this server.
    counts: CanaryCountsBody,
}

/// First attempts handled and failed (not acked) by each version.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CanaryCountsBody {
    current_handled: u64,
    current_failed: u64,
    canary_handled: u64,
    canary_failed: u64,
}

impl From<CanaryCounts> for CanaryCountsBody {
    fn from(c: CanaryCounts) -> Self {
        Self {
            current_handled: c.current_handled,
            current_failed: c.current_failed,
            canary_handled: c.canary_handled,
            canary_failed: c.canary_failed,
        }
    }
}

impl From<CanaryView> for CanaryBody {
    fn from(c: CanaryView) -> Self {
        Self {
            version: c.version,
            digest: c.digest,
            share_percent: c.plan.share_percent,
            window_ms: c.plan.window_ms,
            margin_percent: c.plan.margin_percent,
            min_deliveries: c.plan.min_deliveries,
            started_at: c.started_at,
            ends_at: c.ends_at,
            counts: c.counts.into(),
        }
    }
}

/// How a swap goes live: at once, or as a canary
/// (docs/handlers.md#canaries).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SwapParams {
    /// Run the module as a canary on this percentage of first attempts
    /// (0.01 to 100) instead of swapping it in.
    canary: Option<f64>,
    /// How long the canary runs before it is promoted (default 600000:
    /// 10 minutes; at most 30 days). Only with `canary`.
    window_ms: Option<u64>,
    /// How many percentage points more often than the current version the
    /// canary may fail before it is rolled back (default 5). Only with
    /// `canary`.
    margin: Option<f64>,
    /// First attempts the canary must handle before it is judged (default
    /// 50). Only with `canary`.
    min_deliveries: Option<u64>,
}

impl SwapParams {
    /// The canary's plan, if one was asked for.
    pub(crate) fn plan(&self) -> Result<Option<CanaryPlan>, (&'static str, &'static str)> {
        let Some(share_percent) = self.canary else {
            let stray = [
                ("window_ms", self.window_ms.is_some()),
                ("margin", self.margin.is_some()),
                ("min_deliveries", self.min_deliveries.is_some()),
            ];
            return match stray.into_iter().find(|(_, given)| *given) {
                Some((field, _)) => Err((field, "only with `canary`")),
                None => Ok(None),
            };
        };
        Ok(Some(CanaryPlan {
            share_percent,
            window_ms: self.window_ms.unwrap_or(DEFAULT_WINDOW_MS),
            margin_percent: self.margin.unwrap_or(DEFAULT_MARGIN_PERCENT),
            min_deliveries: self.min_deliveries.unwrap_or(DEFAULT_MIN_DELIVERIES),
        }))
    }
}

/// A handler's deploy history, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HistoryBody {
    handler: String,
    steps: Vec<StepBody>,
}

impl HistoryBody {
    pub(crate) fn new(handler: String, steps: Vec<DeployStep>) -> Self {
        Self {
            handler,
            steps: steps.into_iter().map(StepBody::from).collect(),
        }
    }
}

/// One step of a deploy history.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StepBody {
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    /// `deploy`, `swap`, `rollback`, `canary` or `promote`.
    action: String,
    /// The version the step put in (or, for a canary rolled back, took
    /// out).
    version: u64,
    /// sha256 of that version's module, hex.
    digest: String,
    /// The name of the token that made the change; `rheo` for a canary's
    /// automatic verdict, `directory` for a file of the handlers
    /// directory; null when the request carried no named token.
    by: Option<String>,
    /// The node the change went through.
    node: String,
    /// Why: a canary's plan or verdict, with its numbers.
    reason: Option<String>,
}

impl From<DeployStep> for StepBody {
    fn from(s: DeployStep) -> Self {
        Self {
            at: s.at,
            action: s.action.as_str().to_owned(),
            version: s.version,
            digest: s.digest,
            by: s.by,
            node: s.node,
            reason: s.reason,
        }
    }
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
            canary: v.canary.map(CanaryBody::from),
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

/// A dry run, as `multipart/form-data` (`docs/handlers.md#dry-runs`): the
/// candidate `module` and, optionally, a `query` choosing the events (a
/// query body as JSON; by default the stream's first 100 events).
// Describes the form; the route reads the parts one by one.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "describes the document; never built")]
pub(crate) struct TrialForm {
    /// The candidate WebAssembly component (`.wasm`).
    #[schema(value_type = String, format = Binary)]
    module: Vec<u8>,
    /// Which events, as for `POST /v1/streams/{stream}/query` on the
    /// handler's stream.
    query: Option<super::QueryBody>,
}

/// What a dry run found: the two versions' totals, then per event what
/// each did, events where they differ first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialBody {
    handler: String,
    /// The handler's stream, where the events came from.
    stream: String,
    /// The module tried.
    candidate: TrialVersionBody,
    /// The live version; `null` when none runs.
    current: Option<TrialVersionBody>,
    /// Events where the two versions differ (outcome, reason, delay or
    /// appends).
    differing: u64,
    /// Differences first, then in the query's order.
    events: Vec<TrialEventBody>,
    /// Pass back as the query's `cursor` for the next events.
    next_cursor: Option<String>,
}

/// One version in a dry run.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialVersionBody {
    /// Its number; `null` for the candidate.
    version: Option<u64>,
    /// sha256 of the module, hex.
    digest: String,
    totals: TrialTotalsBody,
}

/// A version's totals over a dry run.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialTotalsBody {
    events: u64,
    acked: u64,
    retried: u64,
    rejected: u64,
    trapped: u64,
    timed_out: u64,
    /// Stopped at the memory cap or out of fuel.
    limited: u64,
    /// Events appended (kept, not written).
    appended: u64,
    /// Median call latency, microseconds.
    p50_us: u64,
    /// Slowest call, microseconds.
    max_us: u64,
}

impl From<&TrialTotals> for TrialTotalsBody {
    fn from(t: &TrialTotals) -> Self {
        Self {
            events: t.events,
            acked: t.acked,
            retried: t.retried,
            rejected: t.rejected,
            trapped: t.trapped,
            timed_out: t.timed_out,
            limited: t.limited,
            appended: t.appended,
            p50_us: micros(t.p50),
            max_us: micros(t.max),
        }
    }
}

/// One event of a dry run.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialEventBody {
    event_id: String,
    partition: u32,
    sequence: u64,
    /// Whether the versions differ on it.
    differs: bool,
    candidate: TrialRunBody,
    /// `null` when no version is live.
    current: Option<TrialRunBody>,
}

/// What one version did with one event.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialRunBody {
    /// `ack`, `retry`, `reject`, `trap`, `timeout`, `memory_limit` or
    /// `out_of_fuel`.
    outcome: String,
    /// The guest's reason (retry, reject) or the failure's.
    reason: Option<String>,
    /// The delay a retry asked for.
    delay_ms: Option<u64>,
    /// How long the call took, microseconds.
    latency_us: u64,
    /// The events it appended: checked, kept, not written.
    #[schema(value_type = Vec<super::JsonObjectSchema>)]
    appends: Vec<serde_json::Value>,
    /// Appends a real append would have refused (the guest got the error).
    refused_appends: u64,
}

impl From<&TrialRun> for TrialRunBody {
    fn from(run: &TrialRun) -> Self {
        Self {
            outcome: run.outcome_name().to_owned(),
            reason: run.reason(),
            delay_ms: run.delay_ms(),
            latency_us: micros(run.latency),
            appends: run.appends.iter().map(append_json).collect(),
            refused_appends: run.refused_appends,
        }
    }
}

impl From<&TrialReport> for TrialBody {
    fn from(r: &TrialReport) -> Self {
        Self {
            handler: r.handler.to_string(),
            stream: r.stream.to_string(),
            candidate: TrialVersionBody {
                version: None,
                digest: r.candidate_digest.to_hex(),
                totals: (&r.candidate_totals).into(),
            },
            current: r.current.as_ref().zip(r.current_totals.as_ref()).map(
                |((number, digest), totals)| TrialVersionBody {
                    version: Some(*number),
                    digest: digest.to_hex(),
                    totals: totals.into(),
                },
            ),
            differing: r.events.iter().filter(|e| e.differs()).count() as u64,
            events: r
                .events
                .iter()
                .map(|e| TrialEventBody {
                    event_id: e.event.id.to_string(),
                    partition: e.event.partition,
                    sequence: e.event.sequence,
                    differs: e.differs(),
                    candidate: (&e.candidate).into(),
                    current: e.current.as_ref().map(Into::into),
                })
                .collect(),
            next_cursor: r.next_cursor.clone(),
        }
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
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
