//! The `Backend` trait on MongoDB: each operation is the inherent method of
//! the same name (`docs/backends.md#mongodb`), whose finding a stream or
//! group gone makes this node forget what it kept of it
//! ([`MongoBackend::gone`]).

use async_trait::async_trait;

use super::MongoBackend;
use rheo_core::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed,
};
use rheo_core::clock::SharedClock;
use rheo_core::model::{
    Appended, DeadLetterPage, Event, EventInput, Group, GroupInfo, GroupName, GroupSpec, Lag,
    Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement, Stream, StreamName,
    Timestamp,
};

#[async_trait]
impl Backend for MongoBackend {
    fn kind(&self) -> &'static str {
        "mongodb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::SHARED
    }

    fn clock(&self) -> &SharedClock {
        &self.clock
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    fn cluster(&self) -> Option<std::sync::Arc<dyn rheo_core::cluster::ClusterStore>> {
        Some(std::sync::Arc::clone(&self.cluster)
            as std::sync::Arc<dyn rheo_core::cluster::ClusterStore>)
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        MongoBackend::migrate(self).await
    }

    async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        MongoBackend::migration_status(self).await
    }

    async fn ping(&self) -> Result<()> {
        MongoBackend::ping(self).await
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        self.gone(MongoBackend::create_stream(self, req).await)
            .await
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        self.gone(MongoBackend::list_streams(self).await).await
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        self.gone(MongoBackend::get_stream(self, stream).await)
            .await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        self.gone(MongoBackend::append(self, stream, events).await)
            .await
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        self.gone(MongoBackend::read(self, req).await).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        self.gone(MongoBackend::query(self, stream, query).await)
            .await
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        self.gone(MongoBackend::create_group(self, stream, spec).await)
            .await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        self.gone(MongoBackend::list_groups(self, stream).await)
            .await
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        self.gone(MongoBackend::fetch(self, req).await).await
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        self.gone(MongoBackend::renew(self, req).await).await
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        self.gone(MongoBackend::renew_many(self, stream, group, targets, lease_ms).await)
            .await
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        self.gone(MongoBackend::settle(self, stream, group, items).await)
            .await
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        self.gone(MongoBackend::lag(self, stream, group, partitions).await)
            .await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        self.gone(MongoBackend::group_info(self, stream, group).await)
            .await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        self.gone(MongoBackend::dead_letters(self, req).await).await
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        self.gone(MongoBackend::held_leases(self, req).await).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        self.gone(MongoBackend::redrive(self, stream, group, which).await)
            .await
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        self.gone(MongoBackend::replay(self, stream, group, how).await)
            .await
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        self.gone(MongoBackend::reset(self, req).await).await
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        self.gone(MongoBackend::set_retention(self, stream, retention).await)
            .await
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        self.gone(MongoBackend::trim(self, req).await).await
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        self.gone(MongoBackend::delete_stream(self, req).await)
            .await
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        self.gone(MongoBackend::delete_group(self, req).await).await
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        self.gone(MongoBackend::next_due(self, stream, group, partitions).await)
            .await
    }
}
