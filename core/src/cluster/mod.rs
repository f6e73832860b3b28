//! Several `rheo serve` processes on one shared store: who is up
//! ([`Membership`]), and the handler records every node runs
//! ([`ClusterStore`]). See `docs/cluster.md`.
//!
//! A backend that several servers can share offers a [`ClusterStore`]
//! ([`Backend::cluster`](crate::backend::Backend::cluster)); with one, a
//! server is in *cluster mode*: its handlers live in the store, not in its
//! handlers directory, and a change made through any node reaches every
//! node (a notification where the store has one, a poll otherwise). The
//! embedded and in-memory backends have none: their one server keeps its
//! handlers in its directory, as always.
//!
//! The store keeps three things and knows nothing of what they mean:
//! * **Nodes**: one row per server, refreshed by its heartbeat, deleted
//!   when it leaves. A node whose heartbeat is older than the timeout is
//!   not listed (and is forgotten after a while).
//! * **Modules**: WebAssembly bytes by content digest, written once.
//! * **Handler records**: one JSON document per handler name with a
//!   revision that every write bumps by one, written only if the revision
//!   is still the one the writer read (compare-and-set), so two nodes
//!   changing one handler at once never lose a change: the second one
//!   re-reads and tries again. [`crate::handlers`] decides what the
//!   document holds.

mod membership;
pub mod memory;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

pub use membership::{Membership, MembershipSettings, RunningHandlers};

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use utoipa::ToSchema;

use crate::backend::Result;
use crate::model::Timestamp;

/// One server of a cluster, as it last reported itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeRecord {
    /// Its id (`--node-id`, else `<hostname>-<random>`), unique while it runs.
    pub id: String,
    /// Where its HTTP API answers (`--advertise`, else the bound address).
    pub address: String,
    /// The `rheo` version it runs.
    pub version: String,
    /// When it started.
    #[schema(value_type = String, format = DateTime)]
    pub started_at: Timestamp,
    /// Its last heartbeat, by its own clock.
    #[schema(value_type = String, format = DateTime)]
    pub heartbeat_at: Timestamp,
    /// The handlers it runs, as of that heartbeat.
    pub handlers: Vec<NodeHandler>,
}

/// A handler as one node runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeHandler {
    /// The handler's name.
    pub name: String,
    /// The version it runs (none: it could not start any; see the
    /// handler's `last_error` on that node).
    pub version: Option<u64>,
    /// That version's content digest.
    pub digest: Option<String>,
    /// `running`, `paused` or `failed`.
    pub status: String,
    /// The canary it runs beside that version, with its counts here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<NodeCanary>,
}

/// A canary as one node runs it: what its judge sums across nodes
/// (`docs/handlers.md#canaries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeCanary {
    /// The canary's id (a canary of the same module started again is
    /// another one).
    pub id: String,
    /// Its version.
    pub version: u64,
    /// What both versions did with their first attempts on this node.
    pub counts: CanaryCounts,
}

/// A handler record: its document and the revision that wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerRecord {
    /// The handler's name.
    pub name: String,
    /// 1 for the first write, one more for each later one.
    pub revision: u64,
    /// What [`crate::handlers`] stored.
    pub doc: serde_json::Value,
}

/// A counter that goes up whenever handler records may have changed (on
/// this node or another): watchers re-read the records when it moves.
#[derive(Debug)]
pub struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl Changes {
    /// Something may have changed.
    pub fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later bump.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Where a cluster's nodes, modules and handler records live: the shared
/// backend's own database. Every method is one round trip (or one
/// transaction); errors are the backend's ([`crate::backend::Error`]).
#[async_trait]
pub trait ClusterStore: Send + Sync + fmt::Debug {
    /// Registers `node`, or refreshes its row: address, heartbeat and the
    /// handlers it runs. Also forgets nodes silent since before `forget`.
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()>;

    /// Removes a node that leaves (a no-op if it is not there).
    async fn leave(&self, id: &str) -> Result<()>;

    /// Nodes whose last heartbeat is at or after `since`, by id.
    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>>;

    /// Stores a module under its digest at `at` (a no-op if it is there).
    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()>;

    /// A module by digest.
    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>>;

    /// Every handler record, by name.
    async fn handlers(&self) -> Result<Vec<HandlerRecord>>;

    /// One handler record.
    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>>;

    /// Writes `doc` as revision `expected + 1` of `name` if its revision is
    /// still `expected` (0: there is no record yet); `false`, with nothing
    /// written, if another write came first. Wakes every node's watchers.
    async fn put_handler(&self, name: &str, expected: u64, doc: &serde_json::Value)
    -> Result<bool>;

    /// Deletes `name`'s record if its revision is still `expected`;
    /// `false` if another write came first (or there is none). Wakes every
    /// node's watchers.
    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool>;

    /// Drops modules no handler record names that were stored before
    /// `before` (a module stored since may be about to be named).
    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64>;

    /// Moves when handler records may have changed (on any node, where the
    /// store can tell; see [`poll_interval`](Self::poll_interval)).
    fn changes(&self) -> watch::Receiver<u64>;

    /// How often watchers re-read the records anyway: often where the
    /// store cannot notify other nodes, rarely (for a lost notification)
    /// where it can.
    fn poll_interval(&self) -> Duration;
}

/// How long a node that stopped heartbeating is still listed.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one node counted of a canary's first attempts (or, summed, every
/// node): the runtime's tally, copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CanaryCounts {
    /// First attempts the current version finished.
    pub current_handled: u64,
    /// Of those, the ones it did not ack.
    pub current_failed: u64,
    /// First attempts the canary finished.
    pub canary_handled: u64,
    /// Of those, the ones it did not ack.
    pub canary_failed: u64,
}

impl CanaryCounts {
    /// Both nodes' counts together.
    pub fn plus(self, other: CanaryCounts) -> CanaryCounts {
        CanaryCounts {
            current_handled: self.current_handled + other.current_handled,
            current_failed: self.current_failed + other.current_failed,
            canary_handled: self.canary_handled + other.canary_handled,
            canary_failed: self.canary_failed + other.canary_failed,
        }
    }

    /// The current version's failure rate (0 when it handled nothing).
    pub fn current_rate(&self) -> f64 {
        rate(self.current_failed, self.current_handled)
    }

    /// The canary's failure rate (0 when it handled nothing).
    pub fn canary_rate(&self) -> f64 {
        rate(self.canary_failed, self.canary_handled)
    }
}

fn rate(failed: u64, handled: u64) -> f64 {
    if handled == 0 {
        0.0
    } else {
        failed as f64 / handled as f64
    }
}
