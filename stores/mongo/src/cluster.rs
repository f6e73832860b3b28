//! The cluster store on MongoDB: nodes, modules and handler records in
//! their own collections of the backend's database (no index beyond `_id`;
//! each collection holds a handful of documents).
//!
//! * [`NODES`]: one document per node (`_id`: its id; times in ms; the
//!   handlers it runs as JSON text).
//! * [`MODULES`] and [`MODULE_PARTS`]: a module's head (`_id`: its digest,
//!   `stored_at` in ms, its size, how many parts, and the id of the write
//!   that stored it) and its bytes in parts of at most [`PART`] bytes, so a
//!   module larger than MongoDB's 16 MiB document limit fits. Each write
//!   stores its parts under its own write id before it inserts the head,
//!   so a write that loses the race for the head, or a module forgotten
//!   while another node stores it again, never touches the parts the head
//!   names.
//! * [`HANDLERS`]: one document per handler (`_id`: its name, `revision`,
//!   `doc` as JSON text so every number reads back as written). A write is
//!   one conditional single-document write: an insert (a duplicate `_id`
//!   loses) or an update or delete filtered on the revision read.
//! * [`CLUSTER`]: the count of handler writes (`_id`: [`WRITES`], `n`),
//!   raised after each one.
//!
//! Notifications: a handler write wakes this node's watchers at once;
//! other nodes' watchers are woken by a task that reads the count of
//! writes every [`POLL`] and bumps the store's [`Changes`] when it moved
//! since the last read (and after its first read, and after a failed read
//! once reads succeed again). A count, not the records' revisions: a
//! handler created and deleted between two reads leaves the records as
//! they were, yet a watcher may have read them in between. A writer that
//! dies between its write and raising the count is caught by the
//! watchers' own re-read every [`poll_interval`](ClusterStore::poll_interval).
//! The task starts with the first [`changes`](ClusterStore::changes) and
//! stops with the store.

use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt as _;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, Document, doc};
use mongodb::{Collection, Database};
use tokio::sync::watch;

use super::{Phase, big, corrupt, int, is_duplicate_key, map_error, text, uint};
use rheo_core::backend::Result;
use rheo_core::cluster::{Changes, ClusterStore, HandlerRecord, NodeHandler, NodeRecord};
use rheo_core::model::Timestamp;

/// The cluster store's collections.
pub(crate) const NODES: &str = "rheo_nodes";
pub(crate) const MODULES: &str = "rheo_modules";
pub(crate) const MODULE_PARTS: &str = "rheo_module_parts";
pub(crate) const HANDLERS: &str = "rheo_handlers";
pub(crate) const CLUSTER: &str = "rheo_cluster";

/// The [`CLUSTER`] document that counts handler writes.
const WRITES: &str = "handler_writes";

/// The most bytes of a module one part document holds.
const PART: usize = 4 << 20;

/// How often other nodes' handler writes are looked for.
const POLL: Duration = Duration::from_secs(1);

/// The cluster collections of one database.
#[derive(Debug)]
pub(crate) struct MongoCluster {
    db: Database,
    changes: std::sync::Arc<Changes>,
    /// The task that looks for other nodes' writes, once started.
    poller: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Tests: drops the database when the last store (and backend) goes.
    #[cfg(test)]
    pub(super) janitor: std::sync::OnceLock<std::sync::Arc<super::tests::Janitor>>,
}

impl Drop for MongoCluster {
    fn drop(&mut self) {
        if let Some(task) = self.poller.get_mut().take() {
            task.abort();
        }
    }
}

fn read_err(e: mongodb::error::Error) -> rheo_core::backend::Error {
    map_error(e, Phase::Read)
}

fn write_err(e: mongodb::error::Error) -> rheo_core::backend::Error {
    map_error(e, Phase::Write)
}

/// The id of one part of the module written by `write`.
fn part_id(digest: &str, write: &ObjectId, i: usize) -> String {
    format!("{digest}/{}/{i}", write.to_hex())
}

fn node_of(d: &Document) -> Result<NodeRecord> {
    let handlers: Vec<NodeHandler> =
        serde_json::from_str(text(d, "handlers")?).map_err(|e| corrupt("node handlers", e))?;
    Ok(NodeRecord {
        id: text(d, "_id")?.to_owned(),
        address: text(d, "address")?.to_owned(),
        version: text(d, "version")?.to_owned(),
        started_at: Timestamp::from_millis(int(d, "started_at")?),
        heartbeat_at: Timestamp::from_millis(int(d, "heartbeat_at")?),
        handlers,
    })
}

fn handler_of(d: &Document) -> Result<HandlerRecord> {
    Ok(HandlerRecord {
        name: text(d, "_id")?.to_owned(),
        revision: uint(d, "revision")?,
        doc: serde_json::from_str(text(d, "doc")?).map_err(|e| corrupt("handler record", e))?,
    })
}

impl MongoCluster {
    pub(super) fn new(db: Database) -> Self {
        Self {
            db,
            changes: std::sync::Arc::default(),
            poller: parking_lot::Mutex::new(None),
            #[cfg(test)]
            janitor: std::sync::OnceLock::new(),
        }
    }

    fn coll(&self, name: &str) -> Collection<Document> {
        self.db.collection(name)
    }

    async fn find(
        &self,
        coll: &str,
        filter: Document,
        sort: Option<Document>,
    ) -> Result<Vec<Document>> {
        let coll = self.coll(coll);
        let mut find = coll.find(filter);
        if let Some(sort) = sort {
            find = find.sort(sort);
        }
        let cursor = find.await.map_err(read_err)?;
        cursor.try_collect().await.map_err(read_err)
    }

    /// Starts the task that looks for other nodes' writes, unless it runs
    /// (or there is no runtime to run it on).
    fn start_poller(&self) {
        let mut poller = self.poller.lock();
        if poller.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("mongodb: no runtime; other nodes' handler writes are not watched");
            return;
        };
        let counts = self.coll(CLUSTER);
        let changes = std::sync::Arc::clone(&self.changes);
        *poller = Some(runtime.spawn(poll(counts, changes)));
    }

    /// After a handler write: wakes this node's watchers, and raises the
    /// count of writes that other nodes' pollers read.
    async fn written(&self) {
        self.changes.bump();
        let counts = self.coll(CLUSTER);
        for _ in 0..2 {
            let raised = counts
                .update_one(doc! {"_id": WRITES}, doc! {"$inc": {"n": 1_i64}})
                .upsert(true)
                .await;
            match raised {
                Ok(_) => return,
                // Two first writes raced to create the count: once more.
                Err(e) if is_duplicate_key(&e) => {}
                Err(e) => {
                    // The write stands; other nodes see it at their next
                    // re-read instead.
                    tracing::warn!(error = %e, "mongodb: the count of handler writes was not raised");
                    return;
                }
            }
        }
    }

    /// Stores one module's bytes as parts under a new write id.
    async fn put_parts(&self, digest: &str, bytes: &[u8]) -> Result<(ObjectId, usize)> {
        let write = ObjectId::new();
        let parts: Vec<Document> = bytes
            .chunks(PART)
            .enumerate()
            .map(|(i, chunk)| {
                let bytes = Binary {
                    subtype: BinarySubtype::Generic,
                    bytes: chunk.to_vec(),
                };
                doc! {"_id": part_id(digest, &write, i), "bytes": bytes}
            })
            .collect();
        let count = parts.len();
        // One at a time: a part is up to 4 MiB, a batch could pass the
        // server's message limit.
        for part in parts {
            self.coll(MODULE_PARTS)
                .insert_one(part)
                .await
                .map_err(write_err)?;
        }
        Ok((write, count))
    }

    /// Deletes the parts of the module written by `write`.
    async fn delete_parts(&self, digest: &str, write: &ObjectId, count: usize) -> Result<()> {
        let ids: Vec<String> = (0..count).map(|i| part_id(digest, write, i)).collect();
        self.coll(MODULE_PARTS)
            .delete_many(doc! {"_id": {"$in": ids}})
            .await
            .map_err(write_err)?;
        Ok(())
    }
}

/// Looks for handler writes every [`POLL`]: bumps `changes` after the first
/// read, when the count of writes moved since the last read, and after a
/// failed read once reads succeed again.
async fn poll(counts: Collection<Document>, changes: std::sync::Arc<Changes>) {
    // `Some(None)`: read, and no write was ever counted.
    let mut seen: Option<Option<Document>> = None;
    loop {
        match counts.find_one(doc! {"_id": WRITES}).await {
            Ok(now) => {
                if seen.as_ref() != Some(&now) {
                    changes.bump();
                }
                seen = Some(now);
            }
            Err(e) => {
                tracing::debug!(error = %e, "mongodb: reading handler revisions failed");
                seen = None;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

#[async_trait]
impl ClusterStore for MongoCluster {
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()> {
        let handlers = serde_json::to_string(&node.handlers)
            .map_err(|e| rheo_core::backend::Error::Failed(format!("node handlers: {e}")))?;
        self.coll(NODES)
            .update_one(
                doc! {"_id": &node.id},
                doc! {
                    "$set": {
                        "address": &node.address,
                        "version": &node.version,
                        "heartbeat_at": node.heartbeat_at.as_millis(),
                        "handlers": handlers,
                    },
                    "$setOnInsert": {"started_at": node.started_at.as_millis()},
                },
            )
            .upsert(true)
            .await
            .map_err(write_err)?;
        self.coll(NODES)
            .delete_many(doc! {"heartbeat_at": {"$lt": forget.as_millis()}})
            .await
            .map_err(write_err)?;
        Ok(())
    }

    async fn leave(&self, id: &str) -> Result<()> {
        self.coll(NODES)
            .delete_one(doc! {"_id": id})
            .await
            .map_err(write_err)?;
        Ok(())
    }

    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>> {
        let docs = self
            .find(
                NODES,
                doc! {"heartbeat_at": {"$gte": since.as_millis()}},
                Some(doc! {"_id": 1}),
            )
            .await?;
        docs.iter().map(node_of).collect()
    }

    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()> {
        let heads = self.coll(MODULES);
        let there = heads
            .find_one(doc! {"_id": digest})
            .projection(doc! {"_id": 1})
            .await
            .map_err(read_err)?;
        if there.is_some() {
            return Ok(());
        }
        let (write, count) = self.put_parts(digest, bytes).await?;
        let head = doc! {
            "_id": digest,
            "stored_at": at.as_millis(),
            "size": big(bytes.len() as u64),
            "parts": big(count as u64),
            "w": write,
        };
        match heads.insert_one(head).await {
            Ok(_) => Ok(()),
            // Another node stored it first: its parts are the module's.
            Err(e) if is_duplicate_key(&e) => self.delete_parts(digest, &write, count).await,
            Err(e) => Err(write_err(e)),
        }
    }

    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        let Some(head) = self
            .coll(MODULES)
            .find_one(doc! {"_id": digest})
            .await
            .map_err(read_err)?
        else {
            return Ok(None);
        };
        let size = usize::try_from(uint(&head, "size")?).map_err(|e| corrupt("module", e))?;
        let count = usize::try_from(uint(&head, "parts")?).map_err(|e| corrupt("module", e))?;
        let write = head.get_object_id("w").map_err(|e| corrupt("module", e))?;
        let ids: Vec<String> = (0..count).map(|i| part_id(digest, &write, i)).collect();
        let mut parts = self
            .find(MODULE_PARTS, doc! {"_id": {"$in": &ids}}, None)
            .await?;
        if parts.len() != count {
            // Forgotten while being read.
            if self
                .coll(MODULES)
                .find_one(doc! {"_id": digest, "w": write})
                .await
                .map_err(read_err)?
                .is_none()
            {
                return Ok(None);
            }
            return Err(corrupt(
                "module",
                format!("{digest}: {} of {count} parts", parts.len()),
            ));
        }
        let order = |d: &Document| {
            ids.iter()
                .position(|id| d.get_str("_id").ok() == Some(id.as_str()))
        };
        parts.sort_by_key(order);
        let mut bytes = Vec::with_capacity(size);
        for part in &parts {
            let chunk = part
                .get_binary_generic("bytes")
                .map_err(|e| corrupt("module part", e))?;
            bytes.extend_from_slice(chunk);
        }
        if bytes.len() != size {
            return Err(corrupt(
                "module",
                format!("{digest}: {} bytes of {size}", bytes.len()),
            ));
        }
        Ok(Some(bytes))
    }

    async fn handlers(&self) -> Result<Vec<HandlerRecord>> {
        let docs = self.find(HANDLERS, doc! {}, Some(doc! {"_id": 1})).await?;
        docs.iter().map(handler_of).collect()
    }

    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>> {
        let found = self
            .coll(HANDLERS)
            .find_one(doc! {"_id": name})
            .await
            .map_err(read_err)?;
        found.as_ref().map(handler_of).transpose()
    }

    async fn put_handler(
        &self,
        name: &str,
        expected: u64,
        doc: &serde_json::Value,
    ) -> Result<bool> {
        let text = serde_json::to_string(doc)
            .map_err(|e| rheo_core::backend::Error::Failed(format!("handler record: {e}")))?;
        let revision = big(expected.saturating_add(1));
        let handlers = self.coll(HANDLERS);
        let written = if expected == 0 {
            let record = doc! {"_id": name, "revision": revision, "doc": text};
            match handlers.insert_one(record).await {
                Ok(_) => true,
                Err(e) if is_duplicate_key(&e) => false,
                Err(e) => return Err(write_err(e)),
            }
        } else {
            let done = handlers
                .update_one(
                    doc! {"_id": name, "revision": big(expected)},
                    doc! {"$set": {"revision": revision, "doc": text}},
                )
                .await
                .map_err(write_err)?;
            done.matched_count == 1
        };
        if written {
            self.written().await;
        }
        Ok(written)
    }

    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool> {
        let done = self
            .coll(HANDLERS)
            .delete_one(doc! {"_id": name, "revision": big(expected)})
            .await
            .map_err(write_err)?;
        let deleted = done.deleted_count == 1;
        if deleted {
            self.written().await;
        }
        Ok(deleted)
    }

    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64> {
        let heads = self.coll(MODULES);
        let old = self
            .find(
                MODULES,
                doc! {"stored_at": {"$lt": before.as_millis()}, "_id": {"$nin": keep}},
                None,
            )
            .await?;
        let mut forgotten = 0;
        for head in old {
            let digest = text(&head, "_id")?;
            let write = head.get("w").cloned().unwrap_or(Bson::Null);
            // Only the head as read: one stored again since is kept.
            let gone = heads
                .delete_one(doc! {"_id": digest, "w": write})
                .await
                .map_err(write_err)?;
            if gone.deleted_count == 0 {
                continue;
            }
            forgotten += 1;
            if let (Ok(write), Ok(count)) = (head.get_object_id("w"), uint(&head, "parts")) {
                let count = usize::try_from(count).unwrap_or_default();
                self.delete_parts(digest, &write, count).await?;
            }
        }
        Ok(forgotten)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.start_poller();
        self.changes.subscribe()
    }

    fn poll_interval(&self) -> Duration {
        POLL
    }
}
