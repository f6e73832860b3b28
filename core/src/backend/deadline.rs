//! Client-side deadlines on every store call (`docs/cluster.md#a-node-cut-off-from-the-store`).
//!
//! [`bounded`] wraps a store so that each [`Backend`] and
//! [`ClusterStore`] call answers within the store timeout
//! (`--store-timeout-ms`), whatever the network does: a store that stops
//! answering — packets dropped, sockets left open — makes the call fail
//! with `backend_unavailable` or `ambiguous` instead of hanging until TCP
//! gives up. Applying it once here, around the trait, bounds a call as a
//! whole (waiting for a connection, every round trip of a transaction,
//! the engine's own retries), on every store alike; a deadline per round
//! trip would let a call of many round trips take many deadlines.
//!
//! Which of the two codes a call that ran out of time gets depends on
//! what it had sent. A call that only reads is `backend_unavailable`. A
//! call that may write asks the store: each store marks, in its one place
//! that sends a commit (or a script, or a statement that commits on its
//! own), that a write is on its way ([`sending_write`]), and where it
//! starts talking to the server that it tracks this ([`sending_read`]).
//! Until a write was sent, nothing can have been applied (an open
//! transaction whose client is gone is rolled back by the server), so the
//! call is `backend_unavailable`; after, or for a store that does not
//! track it, the outcome is unknown: `ambiguous`.
//!
//! What the dropped call leaves behind is the store's to clean up: a
//! PostgreSQL connection is checked before it goes back to its pool
//! (`postgres::release_check`), the Redis and MongoDB drivers drop a
//! connection whose request was abandoned.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, Error,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed, Wakeup,
};
use crate::clock::SharedClock;
use crate::cluster::{ClusterStore, HandlerRecord, NodeRecord};
use crate::model::{
    Appended, DeadLetterPage, Event, EventInput, Group, GroupInfo, GroupName, GroupSpec, Lag,
    Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement, Stream, StreamName,
    Timestamp,
};

/// How long a store call may take when nothing else is configured
/// (`--store-timeout-ms`); the numbers derived from it are in
/// `docs/cluster.md#a-node-cut-off-from-the-store`.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the call running in this task has sent to the store so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The store does not say: a write call that runs out of time is
    /// `ambiguous`.
    Unknown,
    /// Reads, or statements of a transaction not yet committed.
    Nothing,
    /// Something that may apply a write once the server has it.
    Write,
}

tokio::task_local! {
    static SENT: Cell<Sent>;
}

/// Called by a store where a call starts talking to the server: from here
/// on it marks its writes with [`sending_write`]. Outside a bounded call
/// it does nothing.
pub fn sending_read() {
    let _ = SENT.try_with(|sent| {
        if sent.get() == Sent::Unknown {
            sent.set(Sent::Nothing);
        }
    });
}

/// Called by a store just before it sends what may apply a write (a
/// commit, a statement that commits on its own, a script): if the call
/// runs out of time from here on, its outcome is unknown.
pub fn sending_write() {
    let _ = SENT.try_with(|sent| sent.set(Sent::Write));
}

/// Whether a call may change the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// Runs `call` (operation `op`) for at most `timeout`; past it the call is
/// dropped and answers `backend_unavailable` or `ambiguous` (module doc).
async fn bound<T>(
    timeout: Duration,
    op: &'static str,
    kind: Kind,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    SENT.scope(Cell::new(Sent::Unknown), async move {
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(expired(op, kind, SENT.with(Cell::get), timeout)),
        }
    })
    .await
}

/// The error of a call that ran out of time.
fn expired(op: &str, kind: Kind, sent: Sent, timeout: Duration) -> Error {
    let ms = timeout.as_millis();
    match (kind, sent) {
        (Kind::Read, _) | (Kind::Write, Sent::Nothing) => Error::BackendUnavailable(format!(
            "{op}: no answer from the store within {ms} ms (the store timeout); nothing was written"
        )),
        (Kind::Write, Sent::Unknown | Sent::Write) => Error::Ambiguous(format!(
            "{op}: no answer from the store within {ms} ms (the store timeout); the write may have been applied"
        )),
    }
}

/// `store`, with every call bounded by `timeout` (module doc). `migrate`
/// is left unbounded: it runs once, at start or from `rheo migrate`, and
/// may rebuild indexes.
pub fn bounded(store: Arc<dyn Backend>, timeout: Duration) -> Arc<dyn Backend> {
    Arc::new(Bounded {
        inner: store,
        timeout,
    })
}

/// A store whose calls have a deadline.
#[derive(Debug)]
struct Bounded {
    inner: Arc<dyn Backend>,
    timeout: Duration,
}

impl Bounded {
    async fn read<T>(&self, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        bound(self.timeout, op, Kind::Read, call).await
    }

    async fn write<T>(&self, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        bound(self.timeout, op, Kind::Write, call).await
    }
}

#[async_trait]
impl Backend for Bounded {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn clock(&self) -> &SharedClock {
        self.inner.clock()
    }

    async fn ping(&self) -> Result<()> {
        self.read("ping", self.inner.ping()).await
    }

    fn cluster(&self) -> Option<Arc<dyn ClusterStore>> {
        let inner = self.inner.cluster()?;
        Some(Arc::new(BoundedCluster {
            inner,
            timeout: self.timeout,
        }))
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        self.inner.migrate().await
    }

    async fn migration_status(&self) -> Result<super::MigrationStatus> {
        self.read("migration_status", self.inner.migration_status())
            .await
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        self.write("create_stream", self.inner.create_stream(req))
            .await
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        self.read("list_streams", self.inner.list_streams()).await
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        self.read("get_stream", self.inner.get_stream(stream)).await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        self.write("append", self.inner.append(stream, events))
            .await
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        Bounded::read(self, "read", self.inner.read(req)).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        Bounded::read(self, "query", self.inner.query(stream, query)).await
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        self.write("create_group", self.inner.create_group(stream, spec))
            .await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        Bounded::read(self, "list_groups", self.inner.list_groups(stream)).await
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        self.write("fetch", self.inner.fetch(req)).await
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        self.write("renew", self.inner.renew(req)).await
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        let call = self.inner.renew_many(stream, group, targets, lease_ms);
        self.write("renew_many", call).await
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        self.write("settle", self.inner.settle(stream, group, items))
            .await
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let call = self.inner.lag(stream, group, partitions);
        Bounded::read(self, "lag", call).await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        Bounded::read(self, "group_info", self.inner.group_info(stream, group)).await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        Bounded::read(self, "dead_letters", self.inner.dead_letters(req)).await
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        Bounded::read(self, "leases", self.inner.leases(req)).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        self.write("redrive", self.inner.redrive(stream, group, which))
            .await
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        self.write("replay", self.inner.replay(stream, group, how))
            .await
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        self.write("reset", self.inner.reset(req)).await
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        let call = self.inner.set_retention(stream, retention);
        self.write("set_retention", call).await
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        self.write("trim", self.inner.trim(req)).await
    }

    async fn reclaim(&self) -> Result<()> {
        self.write("reclaim", self.inner.reclaim()).await
    }

    async fn size(&self) -> Result<Option<u64>> {
        self.read("size", self.inner.size()).await
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        self.write("delete_stream", self.inner.delete_stream(req))
            .await
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        self.write("delete_group", self.inner.delete_group(req))
            .await
    }

    fn notifier(&self) -> &Notifier {
        self.inner.notifier()
    }

    fn subscribe(&self, stream: &StreamName) -> Wakeup {
        self.inner.subscribe(stream)
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let call = self.inner.next_due(stream, group, partitions);
        Bounded::read(self, "next_due", call).await
    }
}

/// A cluster store whose calls have a deadline (heartbeats, handler
/// records, modules), like the [`Bounded`] store it belongs to.
#[derive(Debug)]
struct BoundedCluster {
    inner: Arc<dyn ClusterStore>,
    timeout: Duration,
}

impl BoundedCluster {
    async fn call<T>(
        &self,
        op: &'static str,
        kind: Kind,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        bound(self.timeout, op, kind, call).await
    }
}

#[async_trait]
impl ClusterStore for BoundedCluster {
    async fn heartbeat(&self, node: &NodeRecord, forget: Timestamp) -> Result<()> {
        let call = self.inner.heartbeat(node, forget);
        self.call("heartbeat", Kind::Write, call).await
    }

    async fn leave(&self, id: &str) -> Result<()> {
        self.call("leave", Kind::Write, self.inner.leave(id)).await
    }

    async fn nodes(&self, since: Timestamp) -> Result<Vec<NodeRecord>> {
        self.call("nodes", Kind::Read, self.inner.nodes(since))
            .await
    }

    async fn put_module(&self, digest: &str, bytes: &[u8], at: Timestamp) -> Result<()> {
        let call = self.inner.put_module(digest, bytes, at);
        self.call("put_module", Kind::Write, call).await
    }

    async fn module(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        self.call("module", Kind::Read, self.inner.module(digest))
            .await
    }

    async fn handlers(&self) -> Result<Vec<HandlerRecord>> {
        self.call("handlers", Kind::Read, self.inner.handlers())
            .await
    }

    async fn handler(&self, name: &str) -> Result<Option<HandlerRecord>> {
        self.call("handler", Kind::Read, self.inner.handler(name))
            .await
    }

    async fn put_handler(
        &self,
        name: &str,
        expected: u64,
        doc: &serde_json::Value,
    ) -> Result<bool> {
        let call = self.inner.put_handler(name, expected, doc);
        self.call("put_handler", Kind::Write, call).await
    }

    async fn delete_handler(&self, name: &str, expected: u64) -> Result<bool> {
        let call = self.inner.delete_handler(name, expected);
        self.call("delete_handler", Kind::Write, call).await
    }

    async fn forget_modules(&self, keep: &[String], before: Timestamp) -> Result<u64> {
        let call = self.inner.forget_modules(keep, before);
        self.call("forget_modules", Kind::Write, call).await
    }

    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes()
    }

    fn poll_interval(&self) -> Duration {
        self.inner.poll_interval()
    }
}

#[cfg(test)]
mod tests;
