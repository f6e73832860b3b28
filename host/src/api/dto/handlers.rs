//! Handler bodies.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

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
#[derive(ToSchema)]
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
