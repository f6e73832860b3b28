//! A cluster store in process memory. No backend offers it to a server
//! (one process is one node); tests run several registries over one, and
//! the conformance checks hold it to the same contract as the real ones.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::{Changes, ClusterStore, HandlerRecord, NodeRecord};
use crate::backend::Result;
use crate::model::Timestamp;

/// Nodes, modules and handler records in memory.
#[derive(Debug, Default)]
pub struct MemoryCluster {
    inner: Mutex<Inner>,
    changes: Changes,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: BTreeMap<String, NodeRecord>,
    modules: HashMap<String, (Vec<u8>, Timestamp)>,
    handlers: BTreeMap<String, HandlerRecord>,
}

impl MemoryCluster {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ClusterStore for MemoryCluster {
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()> {
        let mut inner = self.inner.lock();
        inner.nodes.insert(node.id.clone(), node.clone());
        inner.nodes.retain(|_, n| n.heartbeat_at >= forget);
        Ok(())
    }

    async fn leave(&self, id: &str) -> Result<()> {
        self.inner.lock().nodes.remove(id);
        Ok(())
    }

    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>> {
        let inner = self.inner.lock();
        Ok(inner
            .nodes
            .values()
            .filter(|n| n.heartbeat_at >= since)
            .cloned()
            .collect())
    }

    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()> {
        self.inner
            .lock()
            .modules
            .entry(digest.to_owned())
            .or_insert_with(|| (bytes.to_vec(), at));
        Ok(())
    }

    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.inner.lock().modules.get(digest).map(|m| m.0.clone()))
    }

    async fn handlers(&self) -> Result<Vec<HandlerRecord>> {
        Ok(self.inner.lock().handlers.values().cloned().collect())
    }

    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>> {
        Ok(self.inner.lock().handlers.get(name).cloned())
    }

    async fn put_handler(
        &self,
        name: &str,
        expected: u64,
        doc: &serde_json::Value,
    ) -> Result<bool> {
        let written = {
            let mut inner = self.inner.lock();
            let revision = inner.handlers.get(name).map_or(0, |r| r.revision);
            (revision == expected).then(|| {
                inner.handlers.insert(
                    name.to_owned(),
                    HandlerRecord {
                        name: name.to_owned(),
                        revision: expected + 1,
                        doc: doc.clone(),
                    },
                );
            })
        };
        if written.is_some() {
            self.changes.bump();
        }
        Ok(written.is_some())
    }

    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool> {
        let deleted = {
            let mut inner = self.inner.lock();
            let matches = inner
                .handlers
                .get(name)
                .is_some_and(|r| r.revision == expected);
            if matches {
                inner.handlers.remove(name);
            }
            matches
        };
        if deleted {
            self.changes.bump();
        }
        Ok(deleted)
    }

    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64> {
        let mut inner = self.inner.lock();
        let was = inner.modules.len();
        inner
            .modules
            .retain(|digest, (_, at)| *at >= before || keep.contains(digest));
        Ok((was - inner.modules.len()) as u64)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn poll_interval(&self) -> Duration {
        // Every write wakes every watcher in the process: polling only
        // covers what cannot happen here.
        Duration::from_secs(60)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::MemoryCluster;
    use crate::clock::SharedClock;
    use crate::cluster::ClusterStore;

    async fn pair(_clock: SharedClock) -> Option<(Arc<dyn ClusterStore>, Arc<dyn ClusterStore>)> {
        let store: Arc<dyn ClusterStore> = Arc::new(MemoryCluster::new());
        Some((Arc::clone(&store), store))
    }

    crate::cluster_conformance!(pair);
}
