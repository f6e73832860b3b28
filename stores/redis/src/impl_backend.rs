//! The `Backend` trait on Redis: each operation is the inherent method of
//! the same name (`docs/backends.md#redis`). A call on a stream or group
//! that failed because a read found something missing, which a delete on
//! another node meanwhile explains, answers not found
//! ([`RedisBackend::or_gone`]).

use std::sync::Arc;

use async_trait::async_trait;

use super::RedisBackend;
use rheo_core::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, Error,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed,
};
use rheo_core::clock::SharedClock;
use rheo_core::model::{
    Appended, ConsumerId, DeadLetterPage, Event, EventInput, Group, GroupInfo, GroupName,
    GroupSpec, Lag, Lease, LeaseId, LeasePage, Page, Query, Retention, SettleTarget, Settlement,
    Stream, StreamName, Timestamp,
};

#[async_trait]
impl Backend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
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

    fn cluster(&self) -> Option<Arc<dyn rheo_core::cluster::ClusterStore>> {
        Some(Arc::clone(&self.cluster) as Arc<dyn rheo_core::cluster::ClusterStore>)
    }

    async fn ping(&self) -> Result<()> {
        RedisBackend::ping(self).await
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        self.migrate_layout().await
    }

    async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        self.layout_status().await
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        RedisBackend::create_stream(self, req).await
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        RedisBackend::list_streams(self).await
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        let answer = RedisBackend::get_stream(self, stream).await;
        self.or_gone(stream, None, answer).await
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        let answer = RedisBackend::append(self, stream, events).await;
        self.or_gone(stream, None, answer).await
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        let stream = req.stream.clone();
        let answer = RedisBackend::read(self, req).await;
        self.or_gone(&stream, None, answer).await
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        let answer = RedisBackend::query(self, stream, query).await;
        self.or_gone(stream, None, answer).await
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        let answer = RedisBackend::create_group(self, stream, spec).await;
        self.or_gone(stream, None, answer).await
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        let answer = RedisBackend::list_groups(self, stream).await;
        self.or_gone(stream, None, answer).await
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        let (s, g) = (req.stream.clone(), req.group.clone());
        let answer = RedisBackend::fetch(self, req).await;
        self.or_gone(&s, Some(&g), answer).await
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        req.validate()?;
        let answer = self.renew_one(&req).await;
        self.or_gone(&req.stream, Some(&req.group), answer).await
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        let answer = RedisBackend::renew_many(self, stream, group, targets, lease_ms).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        let answer = RedisBackend::settle(self, stream, group, items).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let answer = RedisBackend::lag(self, stream, group, partitions).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        let answer = RedisBackend::group_info(self, stream, group).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        let (s, g) = (req.stream.clone(), req.group.clone());
        let answer = RedisBackend::dead_letters(self, req).await;
        self.or_gone(&s, Some(&g), answer).await
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        let (s, g) = (req.stream.clone(), req.group.clone());
        let answer = RedisBackend::held_leases(self, req).await;
        self.or_gone(&s, Some(&g), answer).await
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        let answer = RedisBackend::redrive(self, stream, group, which).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        let answer = RedisBackend::replay(self, stream, group, how).await;
        self.or_gone(stream, Some(group), answer).await
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        let (s, g) = (req.stream.clone(), req.group.clone());
        let answer = RedisBackend::reset(self, req).await;
        self.or_gone(&s, Some(&g), answer).await
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        let answer = RedisBackend::set_retention(self, stream, retention).await;
        self.or_gone(stream, None, answer).await
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        let stream = req.stream.clone();
        let answer = RedisBackend::trim(self, req).await;
        self.or_gone(&stream, None, answer).await
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        RedisBackend::delete_stream(self, req).await
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        RedisBackend::delete_group(self, req).await
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let answer = RedisBackend::next_due(self, stream, group, partitions).await;
        self.or_gone(stream, Some(group), answer).await
    }
}

impl RedisBackend {
    /// [`Backend::renew`]: the renewal, then the renewed record.
    async fn renew_one(&self, req: &RenewRequest) -> Result<Lease> {
        let (s, g) = (&req.stream, &req.group);
        let target = vec![req.target.clone()];
        let expires_at = RedisBackend::renew_many(self, s, g, target, req.lease_ms)
            .await?
            .pop()
            .unwrap_or(Err(Error::StaleLease))?;
        // The renewed record: who holds it, since when, on which attempt.
        let settings = self.settings(s, g).await?;
        let held = (self.held(s, g, &settings, std::slice::from_ref(&req.target))).await?;
        let (p, seq, _, delivery) = held.into_iter().next().unwrap_or(Err(Error::StaleLease))?;
        let event = self.event_at(s, p, seq).await?;
        let consumer = ConsumerId::parse(delivery.consumer.unwrap_or_default())
            .map_err(|e| super::corrupt("consumer id", e))?;
        let leased_at = Timestamp::from_millis(delivery.leased_at.unwrap_or_default());
        let lease_id = LeaseId::parse(req.target.lease_id.as_str())
            .map_err(|e| super::corrupt("lease id", e))?;
        let mut lease = Lease::new(
            g.clone(),
            Arc::clone(&event),
            lease_id,
            consumer,
            delivery.attempt,
            leased_at,
            expires_at,
        );
        lease.receipt = Some(super::claims::entry_id(seq));
        Ok(lease)
    }
}
