//! [`Measured`]: a [`Backend`] that times each operation of the one it
//! wraps and counts its errors by code, for every caller (the HTTP API and
//! the handler runtime alike).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::timing::{CALL_BUCKETS, Timing};
use crate::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed, Wakeup,
};
use crate::clock::SharedClock;
use crate::model::{
    Appended, DeadLetterPage, Event, EventInput, Group, GroupInfo, GroupName, GroupSpec, Lag,
    Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement, Stream, StreamName,
    Timestamp,
};

/// Labels of a backend operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct OpLabels {
    backend: &'static str,
    op: &'static str,
}

/// Labels of a failed backend operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct OpErrorLabels {
    backend: &'static str,
    op: &'static str,
    code: &'static str,
}

/// The backend series.
#[derive(Debug)]
pub(crate) struct BackendMetrics {
    latency: Family<OpLabels, Timing, fn() -> Timing>,
    errors: Family<OpErrorLabels, Counter>,
}

impl Default for BackendMetrics {
    fn default() -> Self {
        Self {
            latency: Family::new_with_constructor(|| Timing::new(CALL_BUCKETS)),
            errors: Family::default(),
        }
    }
}

impl BackendMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "rheo_backend_operation_duration_seconds",
            "Backend operation latency, by backend and operation",
            self.latency.clone(),
        );
        registry.register(
            "rheo_backend_errors",
            "Backend operations that failed, by backend, operation and error code",
            self.errors.clone(),
        );
    }

    /// Runs `call` as operation `op` of `backend`, timing it and counting
    /// an error by its code.
    async fn time<T>(
        &self,
        backend: &'static str,
        op: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call.await;
        self.latency
            .get_or_create(&OpLabels { backend, op })
            .observe(started.elapsed());
        if let Err(e) = &result {
            self.errors
                .get_or_create(&OpErrorLabels {
                    backend,
                    op,
                    code: e.code(),
                })
                .inc();
        }
        result
    }
}

/// A backend whose operations are timed and whose errors are counted.
#[derive(Debug)]
pub struct Measured {
    inner: Arc<dyn Backend>,
    kind: &'static str,
    metrics: Arc<BackendMetrics>,
}

impl Measured {
    pub(crate) fn new(inner: Arc<dyn Backend>, metrics: Arc<BackendMetrics>) -> Self {
        Self {
            kind: inner.kind(),
            inner,
            metrics,
        }
    }
}

#[async_trait]
impl Backend for Measured {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn clock(&self) -> &SharedClock {
        self.inner.clock()
    }

    async fn ping(&self) -> Result<()> {
        let call = self.inner.ping();
        self.metrics.time(self.kind, "ping", call).await
    }

    fn cluster(&self) -> Option<Arc<dyn crate::cluster::ClusterStore>> {
        self.inner.cluster()
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        let call = self.inner.migrate();
        self.metrics.time(self.kind, "migrate", call).await
    }

    async fn migration_status(&self) -> Result<crate::backend::MigrationStatus> {
        let call = self.inner.migration_status();
        self.metrics.time(self.kind, "migration_status", call).await
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        let call = self.inner.create_stream(req);
        self.metrics.time(self.kind, "create_stream", call).await
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        let call = self.inner.list_streams();
        self.metrics.time(self.kind, "list_streams", call).await
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        let call = self.inner.get_stream(stream);
        self.metrics.time(self.kind, "get_stream", call).await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        let call = self.inner.append(stream, events);
        self.metrics.time(self.kind, "append", call).await
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        let call = self.inner.read(req);
        self.metrics.time(self.kind, "read", call).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        let call = self.inner.query(stream, query);
        self.metrics.time(self.kind, "query", call).await
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        let call = self.inner.create_group(stream, spec);
        self.metrics.time(self.kind, "create_group", call).await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        let call = self.inner.list_groups(stream);
        self.metrics.time(self.kind, "list_groups", call).await
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        let call = self.inner.fetch(req);
        self.metrics.time(self.kind, "fetch", call).await
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        let call = self.inner.renew(req);
        self.metrics.time(self.kind, "renew", call).await
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        let call = self.inner.renew_many(stream, group, targets, lease_ms);
        self.metrics.time(self.kind, "renew_many", call).await
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        let call = self.inner.settle(stream, group, items);
        self.metrics.time(self.kind, "settle", call).await
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let call = self.inner.lag(stream, group, partitions);
        self.metrics.time(self.kind, "lag", call).await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        let call = self.inner.group_info(stream, group);
        self.metrics.time(self.kind, "group_info", call).await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        let call = self.inner.dead_letters(req);
        self.metrics.time(self.kind, "dead_letters", call).await
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        let call = self.inner.leases(req);
        self.metrics.time(self.kind, "leases", call).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        let call = self.inner.redrive(stream, group, which);
        self.metrics.time(self.kind, "redrive", call).await
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        let call = self.inner.replay(stream, group, how);
        self.metrics.time(self.kind, "replay", call).await
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        let call = self.inner.reset(req);
        self.metrics.time(self.kind, "reset", call).await
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        let call = self.inner.set_retention(stream, retention);
        self.metrics.time(self.kind, "set_retention", call).await
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        let call = self.inner.trim(req);
        self.metrics.time(self.kind, "trim", call).await
    }

    async fn reclaim(&self) -> Result<()> {
        let call = self.inner.reclaim();
        self.metrics.time(self.kind, "reclaim", call).await
    }

    async fn size(&self) -> Result<Option<u64>> {
        let call = self.inner.size();
        self.metrics.time(self.kind, "size", call).await
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        let call = self.inner.delete_stream(req);
        self.metrics.time(self.kind, "delete_stream", call).await
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        let call = self.inner.delete_group(req);
        self.metrics.time(self.kind, "delete_group", call).await
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
        self.metrics.time(self.kind, "next_due", call).await
    }
}
