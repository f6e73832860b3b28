//! Handler manifests: what a handler consumes and how it may run, as TOML
//! files in the handlers directory or JSON through the API.
//!
//! ```toml
//! stream = "orders"
//! group = "billing"
//! module = "billing.wasm"    # relative to the manifest
//! concurrency = 4
//! timeout_ms = 5000
//! [config]
//! currency = "EUR"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::Partitions;
use crate::model::{
    ConsumerId, DEFAULT_LEASE_MS, Flow, GroupName, GroupOrdering, HandlerName, MAX_FETCH_LIMIT,
    OnExhausted, StreamName, validate_lease_ms,
};
use crate::runtime::{
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_IDLE_POLL, DEFAULT_MAX_RETRY_DELAY_MS, HandlerSettings,
};
use crate::wasm::{
    DEFAULT_MAX_INVOCATIONS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_MS, InstanceMode, Limits,
    MAX_TIMEOUT_MS,
};

/// Most deliveries one handler runs at once.
pub const MAX_CONCURRENCY: usize = 256;
/// Longest `batch_wait_ms`.
pub const MAX_BATCH_WAIT_MS: u64 = 10_000;
/// Most configuration entries, and bytes per key or value.
pub const MAX_CONFIG_ENTRIES: usize = 256;
/// Longest configuration key or value, in bytes.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// A manifest that cannot be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct ManifestError(pub String);

/// How instances are used, as written in manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceSetting {
    /// Warm instances reused across calls (default).
    #[default]
    Reuse,
    /// A fresh instance per delivery.
    Fresh,
}

/// One handler's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The handler's name; defaults to the file's stem (or the URL's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<HandlerName>,
    /// Stream to consume.
    pub stream: StreamName,
    /// Group to consume as (created if missing).
    pub group: GroupName,
    /// The group's ordering (`docs/groups.md#ordering`): the group is
    /// created with it, and an existing group must have it. Unset: the
    /// group's own (a new one: `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<GroupOrdering>,
    /// What a head that exhausts its attempts does
    /// (`docs/groups.md#quarantine`): the group is created with it, and an
    /// existing group must have it. Unset: the group's own (a new one:
    /// `dead_letter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exhausted: Option<OnExhausted>,
    /// The group's flow control (`docs/groups.md#flow`), e.g.
    /// `flow = { key_concurrency = 4 }`: the group is created with it, and
    /// an existing group must have it. Unset: the group's own (a new one:
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
    /// The `.wasm` file, relative to the manifest (files only; uploads carry
    /// the module separately).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Deliveries handled at once (default 1).
    #[serde(default = "defaults::concurrency")]
    pub concurrency: usize,
    /// Most deliveries in one call of `handle-batch` (default 1: one
    /// delivery a call, through `handle`). Above 1 the module must export
    /// `handle-batch` (`rheo:handler@0.2.0`); at most `max_demand`.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: usize,
    /// How long a batch shorter than `batch_size` waits for more leases,
    /// in ms (default 0: it goes at once with what is there).
    #[serde(default)]
    pub batch_wait_ms: u64,
    /// Leases held at most (default 10).
    #[serde(default = "defaults::max_demand")]
    pub max_demand: usize,
    /// Lease duration in ms (default 30 000); renewed every half.
    #[serde(default = "defaults::lease_ms")]
    pub lease_ms: u64,
    /// Partitions to consume (default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<u32>>,
    /// Deadline of one call in ms (default 30 000).
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// Memory cap of one instance in MiB (default 128).
    #[serde(default = "defaults::memory_mb")]
    pub memory_mb: u64,
    /// Fuel per call (needs a server started with fuel metering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// `reuse` (default) or `fresh`.
    #[serde(default)]
    pub instance: InstanceSetting,
    /// Calls a warm instance serves before it is replaced (default 10 000).
    #[serde(default = "defaults::max_invocations")]
    pub max_invocations: u64,
    /// Longest retry delay the handler may ask for, in ms (default 1 hour).
    #[serde(default = "defaults::max_retry_delay_ms")]
    pub max_retry_delay_ms: u64,
    /// Streams the handler may append to (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_to: Option<Vec<StreamName>>,
    /// What `config-get` answers.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

mod defaults {
    pub(super) fn concurrency() -> usize {
        1
    }
    pub(super) fn batch_size() -> usize {
        1
    }
    pub(super) fn max_demand() -> usize {
        10
    }
    pub(super) fn lease_ms() -> u64 {
        crate::model::DEFAULT_LEASE_MS
    }
    pub(super) fn timeout_ms() -> u64 {
        crate::wasm::DEFAULT_TIMEOUT_MS
    }
    pub(super) fn memory_mb() -> u64 {
        crate::wasm::DEFAULT_MEMORY_MB
    }
    pub(super) fn max_invocations() -> u64 {
        crate::wasm::DEFAULT_MAX_INVOCATIONS
    }
    pub(super) fn max_retry_delay_ms() -> u64 {
        crate::runtime::DEFAULT_MAX_RETRY_DELAY_MS
    }
}

impl Manifest {
    /// Whether both say the same about how the handler runs: `name` and
    /// `module` only locate files (an API deploy has neither; its copy in the
    /// handlers directory has both), so they are not compared.
    pub fn same_settings(&self, other: &Manifest) -> bool {
        let strip = |m: &Manifest| Manifest {
            name: None,
            module: None,
            ..m.clone()
        };
        strip(self) == strip(other)
    }

    /// A manifest with every default, for `stream` and `group`.
    pub fn new(stream: StreamName, group: GroupName) -> Self {
        Self {
            name: None,
            stream,
            group,
            ordering: None,
            on_exhausted: None,
            flow: None,
            module: None,
            concurrency: defaults::concurrency(),
            batch_size: defaults::batch_size(),
            batch_wait_ms: 0,
            max_demand: defaults::max_demand(),
            lease_ms: DEFAULT_LEASE_MS,
            partitions: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            memory_mb: DEFAULT_MEMORY_MB,
            fuel: None,
            instance: InstanceSetting::Reuse,
            max_invocations: DEFAULT_MAX_INVOCATIONS,
            max_retry_delay_ms: DEFAULT_MAX_RETRY_DELAY_MS,
            append_to: None,
            config: BTreeMap::new(),
        }
    }

    /// Parses TOML.
    pub fn from_toml(text: &str) -> Result<Self, ManifestError> {
        toml::from_str(text).map_err(|e| ManifestError(e.to_string().trim().to_owned()))
    }

    /// Parses JSON.
    pub fn from_json(text: &[u8]) -> Result<Self, ManifestError> {
        serde_json::from_slice(text).map_err(|e| ManifestError(e.to_string()))
    }

    /// The TOML text of this manifest.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Checks every setting; `name` is the name the handler is deployed as.
    pub fn validate(&self, name: &HandlerName) -> Result<(), ManifestError> {
        let bad = |m: String| Err(ManifestError(m));
        if let Some(own) = &self.name
            && own != name
        {
            return bad(format!("name {own:?} does not match the handler {name:?}"));
        }
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return bad(format!(
                "concurrency must be between 1 and {MAX_CONCURRENCY}"
            ));
        }
        if !(1..=MAX_FETCH_LIMIT as usize).contains(&self.max_demand) {
            return bad(format!(
                "max_demand must be between 1 and {MAX_FETCH_LIMIT}"
            ));
        }
        if !(1..=self.max_demand).contains(&self.batch_size) {
            return bad(format!(
                "batch_size must be between 1 and max_demand ({}): a batch is made of held leases",
                self.max_demand
            ));
        }
        validate_lease_ms(self.lease_ms).map_err(|e| ManifestError(e.to_string()))?;
        // A flow set without an ordering is checked against `none`, what
        // a new group gets; an existing one is checked at deploy.
        if let Some(flow) = &self.flow {
            flow.validate(self.ordering.unwrap_or_default())
                .map_err(|e| ManifestError(e.to_string()))?;
        }
        if self.batch_wait_ms > MAX_BATCH_WAIT_MS || self.batch_wait_ms >= self.lease_ms / 2 {
            return bad(format!(
                "batch_wait_ms must be at most {MAX_BATCH_WAIT_MS} and under half of lease_ms: a lease waits in the batch"
            ));
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            return bad(format!("timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"));
        }
        if self.memory_mb == 0 {
            return bad("memory_mb must be at least 1".into());
        }
        if self.max_invocations == 0 {
            return bad("max_invocations must be at least 1".into());
        }
        if self.config.len() > MAX_CONFIG_ENTRIES
            || self
                .config
                .iter()
                .any(|(k, v)| k.len() > MAX_CONFIG_BYTES || v.len() > MAX_CONFIG_BYTES)
        {
            return bad(format!(
                "config holds at most {MAX_CONFIG_ENTRIES} entries of at most {MAX_CONFIG_BYTES} bytes"
            ));
        }
        Ok(())
    }

    /// How the runtime consumes for this handler; `consumer_id` names this
    /// server's leases.
    pub fn settings(&self, consumer_id: ConsumerId) -> HandlerSettings {
        HandlerSettings {
            stream: self.stream.clone(),
            group: self.group.clone(),
            ordering: self.ordering,
            on_exhausted: self.on_exhausted,
            flow: self.flow,
            partitions: self
                .partitions
                .clone()
                .map_or(Partitions::All, Partitions::Only),
            concurrency: self.concurrency,
            batch_size: self.batch_size,
            batch_wait: Duration::from_millis(self.batch_wait_ms),
            max_demand: self.max_demand,
            lease_ms: self.lease_ms,
            max_retry_delay_ms: self.max_retry_delay_ms,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT.max(Duration::from_millis(self.timeout_ms)),
            idle_poll: DEFAULT_IDLE_POLL,
            consumer_id,
        }
    }

    /// The sandbox limits of each call.
    pub fn limits(&self) -> Limits {
        Limits {
            timeout_ms: self.timeout_ms,
            memory_mb: self.memory_mb,
            fuel: self.fuel,
            instance: match self.instance {
                InstanceSetting::Reuse => InstanceMode::Reuse,
                InstanceSetting::Fresh => InstanceMode::Fresh,
            },
            max_invocations: self.max_invocations,
            max_warm: self.concurrency,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_manifest_takes_the_documented_defaults() {
        let m =
            Manifest::from_toml("stream = \"orders\"\ngroup = \"billing\"\nmodule = \"b.wasm\"\n")
                .unwrap();
        assert_eq!((m.concurrency, m.max_demand, m.lease_ms), (1, 10, 30_000));
        assert_eq!((m.timeout_ms, m.memory_mb), (30_000, 128));
        assert_eq!(m.instance, InstanceSetting::Reuse);
        assert_eq!(m.limits().max_warm, 1);
        m.validate(&HandlerName::parse("b").unwrap()).unwrap();
    }

    #[test]
    fn typos_and_bad_values_are_named() {
        let err =
            Manifest::from_toml("stream = \"s\"\ngroup = \"g\"\nconcurency = 4\n").unwrap_err();
        assert!(err.to_string().contains("concurency"), "{err}");
        let err = Manifest::from_toml("stream = \"bad name\"\ngroup = \"g\"\n").unwrap_err();
        assert!(err.to_string().contains("stream"), "{err}");
        let err = Manifest::from_toml("stream = \"s\"\ngroup = \"g\"\nordering = \"keys\"\n")
            .unwrap_err();
        assert!(err.to_string().contains("ordering"), "{err}");
        let mut m = Manifest::new(
            StreamName::parse("s").unwrap(),
            GroupName::parse("g").unwrap(),
        );
        m.concurrency = 0;
        let err = m.validate(&HandlerName::parse("h").unwrap()).unwrap_err();
        assert!(err.to_string().contains("concurrency"), "{err}");
        m.concurrency = 1;
        m.name = Some(HandlerName::parse("other").unwrap());
        assert!(m.validate(&HandlerName::parse("h").unwrap()).is_err());
    }

    #[test]
    fn toml_and_json_round_trip() {
        let mut m = Manifest::new(
            StreamName::parse("s").unwrap(),
            GroupName::parse("g").unwrap(),
        );
        m.config.insert("k".into(), "v".into());
        m.partitions = Some(vec![0, 2]);
        m.instance = InstanceSetting::Fresh;
        m.ordering = Some(GroupOrdering::Key);
        assert_eq!(Manifest::from_toml(&m.to_toml()).unwrap(), m);
        let json = serde_json::to_vec(&m).unwrap();
        assert_eq!(Manifest::from_json(&json).unwrap(), m);
        m.ordering = None;
        m.flow = Some(Flow {
            key_concurrency: Some(4),
            ..Flow::default()
        });
        assert_eq!(Manifest::from_toml(&m.to_toml()).unwrap(), m);
    }

    #[test]
    fn a_flow_is_read_from_toml_and_must_fit_the_ordering() {
        let h = HandlerName::parse("h").unwrap();
        let m =
            Manifest::from_toml("stream = \"s\"\ngroup = \"g\"\nflow = { key_concurrency = 3 }\n")
                .unwrap();
        assert_eq!(m.flow.unwrap().key_concurrency, Some(3));
        assert!(m.validate(&h).is_ok());
        let keyed = Manifest {
            ordering: Some(GroupOrdering::Key),
            ..m
        };
        let err = keyed.validate(&h).unwrap_err();
        assert!(err.to_string().contains("key_concurrency"), "{err}");
        let typo =
            Manifest::from_toml("stream = \"s\"\ngroup = \"g\"\nflow = { key_concurency = 3 }\n");
        assert!(typo.is_err(), "an unknown limit is refused");
        let paced = Manifest::from_toml(
            "stream = \"s\"\ngroup = \"g\"\nordering = \"key\"\n\
             flow = { key_rate = { per_second = 5, burst = 10 } }\n",
        )
        .unwrap();
        let rate = paced.flow.unwrap().key_rate.unwrap();
        assert_eq!((rate.per_second, rate.burst), (5.0, 10));
        assert!(paced.validate(&h).is_ok(), "a key rate fits an ordering");
        assert_eq!(Manifest::from_toml(&paced.to_toml()).unwrap(), paced);
    }
}
