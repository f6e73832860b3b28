//! This server as a node: its identity, its heartbeat, the live nodes, and
//! leaving. On a backend without a cluster store the server is the only
//! node, and is listed from memory.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{ClusterStore, NodeHandler, NodeRecord};
use crate::backend::Result;
use crate::clock::SharedClock;
use crate::model::Timestamp;

/// How often a node looks whether what it runs changed (and then beats at
/// once, between its regular heartbeats).
const CHECK: Duration = Duration::from_millis(100);

/// What a node says it runs: read at each heartbeat.
pub type RunningHandlers = Arc<dyn Fn() -> Vec<NodeHandler> + Send + Sync>;

/// How a node identifies itself and how often it reports.
#[derive(Debug, Clone)]
pub struct MembershipSettings {
    /// Its id; unique among the live nodes.
    pub id: String,
    /// Where its API answers.
    pub address: String,
    /// A node silent for this long is not listed.
    pub timeout: Duration,
}

impl MembershipSettings {
    /// The default id: the host name and a random suffix, so two servers
    /// on one host (or a restarted one) never share an id.
    pub fn default_id() -> String {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "rheo".into());
        let suffix: u16 = rand::random();
        format!("{host}-{suffix:04x}")
    }

    /// A heartbeat every quarter of the timeout (at least every 50 ms), so
    /// three can be late before the node is taken for dead.
    pub fn heartbeat_interval(&self) -> Duration {
        (self.timeout / 4).max(Duration::from_millis(50))
    }

    /// Rows of nodes silent for this long are deleted (a node that comes
    /// back registers again).
    fn forget_after(&self) -> Duration {
        self.timeout.saturating_mul(10).max(Duration::from_secs(60))
    }
}

/// This server as a node of its cluster (or as the only node).
pub struct Membership {
    settings: MembershipSettings,
    started_at: Timestamp,
    clock: SharedClock,
    store: Option<Arc<dyn ClusterStore>>,
    running: RunningHandlers,
    stop: CancellationToken,
    /// The heartbeat task, awaited by `leave` so no beat lands after it.
    beating: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("settings", &self.settings)
            .field("started_at", &self.started_at)
            .field("clustered", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Membership {
    /// This node; with `store`, a member of that cluster once
    /// [`join`](Self::join)ed.
    pub fn new(
        settings: MembershipSettings,
        clock: SharedClock,
        store: Option<Arc<dyn ClusterStore>>,
        running: RunningHandlers,
    ) -> Self {
        Self {
            started_at: clock.now(),
            settings,
            clock,
            store,
            running,
            stop: CancellationToken::new(),
            beating: parking_lot::Mutex::new(None),
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.settings.id
    }

    /// Whether it shares a cluster store with other nodes.
    pub fn clustered(&self) -> bool {
        self.store.is_some()
    }

    /// How this node describes itself now.
    pub fn record(&self) -> NodeRecord {
        NodeRecord {
            id: self.settings.id.clone(),
            address: self.settings.address.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: self.started_at,
            heartbeat_at: self.clock.now(),
            handlers: (self.running)(),
        }
    }

    /// One heartbeat (the first one registers the node).
    pub async fn beat(&self) -> Result<()> {
        self.report().await.map(drop)
    }

    /// One heartbeat; the handlers it reported.
    async fn report(&self) -> Result<Vec<NodeHandler>> {
        let record = self.record();
        if let Some(store) = &self.store {
            let forget = before(record.heartbeat_at, self.settings.forget_after());
            store.heartbeat(&record, forget).await?;
        }
        Ok(record.handlers)
    }

    /// Registers the node and keeps its heartbeat going until
    /// [`leave`](Self::leave). A failed heartbeat is logged and retried at
    /// the next beat: the node keeps working, and is listed again once the
    /// store answers.
    pub async fn join(self: &Arc<Self>) -> Result<()> {
        if self.store.is_none() {
            return Ok(());
        }
        self.warn_if_taken().await;
        let mut reported = self.report().await?;
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            // A look at what the node runs every CHECK (cheap, local): a
            // change is reported at once, so the list shows a deploy or a
            // swap as soon as this node runs it; otherwise a beat every
            // interval.
            let interval = this.settings.heartbeat_interval();
            let mut ticks = tokio::time::interval(interval.min(CHECK));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            let mut last = tokio::time::Instant::now();
            let mut failing = false;
            loop {
                tokio::select! {
                    () = this.stop.cancelled() => break,
                    _ = ticks.tick() => {}
                }
                if (this.running)() == reported && last.elapsed() < interval {
                    continue;
                }
                last = tokio::time::Instant::now();
                match this.report().await {
                    Ok(sent) => {
                        reported = sent;
                        if failing {
                            tracing::info!(node = %this.id(), "heartbeats reach the store again");
                            failing = false;
                        }
                    }
                    Err(e) if !failing => {
                        tracing::warn!(node = %this.id(), error = %e, "heartbeat failed; retrying at each beat");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        });
        *self.beating.lock() = Some(task);
        Ok(())
    }

    /// Warns when a live node already has this node's id: two servers
    /// with one id overwrite each other's row (and share consumer ids).
    async fn warn_if_taken(&self) {
        let Ok(live) = self.nodes().await else {
            return;
        };
        if let Some(other) = live.iter().find(|n| n.id == self.settings.id) {
            tracing::warn!(
                node = %self.settings.id,
                other_address = %other.address,
                other_started_at = %other.started_at,
                "a live node already has this id (or this node restarted within the node timeout); give each server its own --node-id"
            );
        }
    }

    /// Stops the heartbeat and removes the node's row, so the others stop
    /// listing it at once.
    pub async fn leave(&self) -> Result<()> {
        self.stop.cancel();
        let beating = self.beating.lock().take();
        if let Some(task) = beating {
            // A beat in flight would write the row back after the delete.
            let _ = task.await;
        }
        match &self.store {
            Some(store) => store.leave(&self.settings.id).await,
            None => Ok(()),
        }
    }

    /// The live nodes, by id: those heard from within the timeout (by
    /// this node's clock). Without a cluster, this node alone.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let Some(store) = &self.store else {
            return Ok(vec![self.record()]);
        };
        let since = before(self.clock.now(), self.settings.timeout);
        store.nodes(since).await
    }
}

/// `at` minus `d`, never before the epoch.
fn before(at: Timestamp, d: Duration) -> Timestamp {
    at.sub_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
