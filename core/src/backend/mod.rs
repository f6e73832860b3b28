//! The storage seam: one [`Backend`] trait that every store implements, the
//! request types its methods take, the shared policy every store decides
//! by, and the in-memory store. The stores themselves, and `open` to pick
//! one by URL, are the server's (`rheo::backend`).
//!
//! Behaviour is defined by the shared conformance suite in
//! [`conformance`](self::conformance) (compiled for tests and with the
//! `conformance` feature): every backend runs every check. Methods validate
//! their own input first (each request type has a `validate`), so bad input
//! is refused with [`Error::Invalid`] (or a more specific code) before
//! anything is written.

pub mod catalog;
mod deadline;
pub mod entry;
mod error;
pub mod memory;
mod migrations;
pub mod policy;
pub mod quarantine;
mod redact;
pub mod retention;
pub mod turns;
mod wakeup;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

pub use deadline::{DEFAULT_STORE_TIMEOUT, bounded};
pub use deadline::{sending_read, sending_write};
pub use error::{Error, Result};
pub use migrations::MigrationStatus;
pub use redact::{redact_url, redact_urls_in};
pub use wakeup::{Notifier, Wakeup};

use crate::clock::SharedClock;
use crate::model::{
    Appended, ConsumerId, DeadLetterPage, Event, EventId, EventInput, Flow, Group, GroupInfo,
    GroupName, GroupOrdering, GroupSpec, Lag, Lease, LeaseCursor, LeasePage, MAX_FETCH_LIMIT,
    MAX_PARTITIONS, MAX_QUERY_LIMIT, MAX_SETTLE_BATCH, Page, Query, Retention, SettleOp,
    SettleTarget, Settlement, StartPosition, Stream, StreamName, Timestamp, ValidationError,
    validate_lease_ms, validate_limit, validate_sequence,
};

/// What a backend can promise beyond the invariants every backend keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Appends survive a restart of the process.
    pub durable: bool,
    /// Several Rheo servers may share the store and compete for deliveries.
    pub multi_node: bool,
    /// [`Backend::subscribe`] wakes for appends made by other processes too
    /// (in-process appends always wake).
    pub cross_process_wakeups: bool,
}

impl Capabilities {
    /// In process memory: gone with the process.
    pub const VOLATILE: Self = Self {
        durable: false,
        multi_node: false,
        cross_process_wakeups: false,
    };
    /// A durable store one server owns (an embedded database file).
    pub const EMBEDDED: Self = Self {
        durable: true,
        multi_node: false,
        cross_process_wakeups: false,
    };
    /// A durable store several servers share, with wake-ups between them.
    pub const SHARED: Self = Self {
        durable: true,
        multi_node: true,
        cross_process_wakeups: true,
    };
}

/// Create a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStream {
    /// Its name.
    pub name: StreamName,
    /// Partitions, fixed for life (1..=[`MAX_PARTITIONS`]).
    pub partition_count: u32,
    /// How long it keeps events (`docs/log.md#retention`); `None`: for ever.
    pub retention: Option<Retention>,
}

impl CreateStream {
    /// A stream keeping its events for ever.
    pub fn new(name: StreamName, partition_count: u32) -> Self {
        Self {
            name,
            partition_count,
            retention: None,
        }
    }

    /// Checks the partition count and the retention.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_PARTITIONS).contains(&self.partition_count) {
            return Err(Error::InvalidPartitionCount {
                got: self.partition_count,
                max: MAX_PARTITIONS,
            });
        }
        validate_retention(self.retention.as_ref())
    }
}

/// Remove the oldest events of one partition (`docs/log.md#retention`):
/// what the stream's retention decided ([`retention::trim_stream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimRequest {
    /// The stream.
    pub stream: StreamName,
    /// The partition.
    pub partition: u32,
    /// Remove events below this sequence (exclusive)…
    pub before: u64,
    /// …but at most this many, the lowest first (a bounded batch).
    pub limit: u32,
}

impl TrimRequest {
    /// Where this step stops (exclusive) in a partition whose first stored
    /// sequence is `first`: below `before`, at most `limit` events, never
    /// past the high watermark. At or below `first`: nothing to remove.
    pub fn end(&self, first: u64, high_watermark: u64) -> u64 {
        self.before
            .min(first.saturating_add(u64::from(self.limit)))
            .min(high_watermark + 1)
    }
}

/// What a trim removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Events removed.
    pub removed: u64,
    /// The partition's lowest stored sequence now.
    pub first_sequence: u64,
    /// Per group that had not settled some of them: how many (those
    /// groups moved to the new log start).
    pub skipped: Vec<(GroupName, u64)>,
}

impl Trimmed {
    /// A step that removed nothing: the partition still starts at `first`.
    pub fn nothing(first: u64) -> Self {
        Trimmed {
            first_sequence: first,
            ..Trimmed::default()
        }
    }
}

/// Read one partition in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// The stream.
    pub stream: StreamName,
    /// The partition.
    pub partition: u32,
    /// Exclusive lower bound (0 = from the start).
    pub after: u64,
    /// At most this many (1..=1000).
    pub limit: u32,
}

impl ReadRequest {
    /// Checks the limit and `after` (the partition is checked against the stream).
    pub fn validate(&self) -> Result<()> {
        validate_sequence("after", self.after)?;
        Ok(validate_limit(self.limit, MAX_QUERY_LIMIT)?)
    }
}

/// Which partitions an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Partitions {
    /// Every partition of the stream.
    #[default]
    All,
    /// Only these (an empty list selects nothing).
    Only(Vec<u32>),
}

impl Partitions {
    /// The selected partitions, sorted and de-duplicated; any partition
    /// outside `0..partition_count` is [`Error::InvalidPartition`].
    pub fn resolve(&self, partition_count: u32) -> Result<Vec<u32>> {
        match self {
            Partitions::All => Ok((0..partition_count).collect()),
            Partitions::Only(list) => {
                let mut out = list.clone();
                out.sort_unstable();
                out.dedup();
                match out.iter().find(|p| **p >= partition_count) {
                    Some(p) => Err(Error::InvalidPartition {
                        partition: *p,
                        partition_count,
                    }),
                    None => Ok(out),
                }
            }
        }
    }
}

/// Claim leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// At most this many leases (1..=1000).
    pub limit: u32,
    /// Who will hold them.
    pub consumer_id: ConsumerId,
    /// How long they last.
    pub lease_ms: u64,
    /// Where to claim from.
    pub partitions: Partitions,
}

impl FetchRequest {
    /// Checks limit and lease duration.
    pub fn validate(&self) -> Result<()> {
        validate_limit(self.limit, MAX_FETCH_LIMIT)?;
        if policy::is_quarantine(&self.consumer_id) {
            return Err(Error::invalid(
                "consumer_id",
                format!(
                    "{:?} is reserved: it holds quarantined heads (docs/groups.md#quarantine)",
                    policy::QUARANTINE_CONSUMER
                ),
            ));
        }
        Ok(validate_lease_ms(self.lease_ms)?)
    }
}

/// Extend a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// The lease.
    pub target: SettleTarget,
    /// New duration from now.
    pub lease_ms: u64,
}

impl RenewRequest {
    /// Checks the lease duration.
    pub fn validate(&self) -> Result<()> {
        Ok(validate_lease_ms(self.lease_ms)?)
    }
}

/// List dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLettersRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Page size (1..=1000).
    pub limit: u32,
    /// Continue after this event (the previous page's `next`).
    pub after: Option<EventId>,
}

impl DeadLettersRequest {
    /// Checks the limit.
    pub fn validate(&self) -> Result<()> {
        Ok(validate_limit(self.limit, MAX_QUERY_LIMIT)?)
    }
}

/// List the leases a group has out (`docs/groups.md#what-is-out-leases`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasesRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Page size (1..=1000).
    pub limit: u32,
    /// Continue after this position (the previous page's `next`).
    pub after: Option<LeaseCursor>,
}

impl LeasesRequest {
    /// Checks the limit (a cursor past the end is read as the end:
    /// [`LeaseCursor::parse`]).
    pub fn validate(&self) -> Result<()> {
        Ok(validate_limit(self.limit, MAX_QUERY_LIMIT)?)
    }
}

/// Which dead letters to send back for delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redrive {
    /// All of the group's dead letters.
    All,
    /// These events (ids that are not dead-lettered are left alone).
    Events(Vec<EventId>),
}

/// What a replay re-opens.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay {
    /// Every event after `after` (exclusive) in the selected partitions.
    FromSequence {
        /// Exclusive start sequence.
        after: u64,
        /// Partitions to rewind.
        partitions: Partitions,
    },
    /// Every event from the first at or after `from`, per partition.
    FromTime {
        /// Inclusive start instant.
        from: Timestamp,
        /// Partitions to rewind.
        partitions: Partitions,
    },
    /// Every event the query matches (its limit and cursor are ignored).
    Query(Query),
    /// These events.
    EventIds(Vec<EventId>),
}

impl Replay {
    /// Checks the sequences and instants it names (partitions and event ids
    /// are checked against the stream).
    pub fn validate(&self) -> Result<()> {
        match self {
            Replay::FromSequence { after, .. } => validate_sequence("from_sequence", *after)?,
            Replay::FromTime { from, .. } => drop(from.validate("from")?),
            Replay::Query(query) => query.validate_bounds()?,
            Replay::EventIds(_) => {}
        }
        Ok(())
    }
}

/// Forget a group's delivery state and start it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Must be true; checked before anything else.
    pub confirm: bool,
    /// Where to start again.
    pub start: StartPosition,
    /// Partitions to reset.
    pub partitions: Partitions,
    /// The group's ordering from now on (`docs/groups.md#ordering`);
    /// `None` keeps it. Changing it needs every partition reset.
    pub ordering: Option<GroupOrdering>,
    /// The group's flow control from now on (`docs/groups.md#flow`);
    /// `None` keeps it. Changing it needs every partition reset.
    pub flow: Option<Flow>,
}

impl ResetRequest {
    /// A confirmed reset of every partition of `group` to the beginning,
    /// keeping its ordering.
    pub fn to_the_beginning(stream: &StreamName, group: &GroupName) -> Self {
        Self {
            stream: stream.clone(),
            group: group.clone(),
            confirm: true,
            start: StartPosition::Beginning,
            partitions: Partitions::All,
            ordering: None,
            flow: None,
        }
    }

    /// Checks `confirm` first, then the start point, then that an ordering
    /// change resets every partition (partitions are checked
    /// against the stream).
    pub fn validate(&self) -> Result<()> {
        confirmed(self.confirm)?;
        self.start.validate()?;
        if self.ordering.is_some() && self.partitions != Partitions::All {
            return Err(Error::invalid(
                "ordering",
                "a group's ordering changes for all its partitions at once: \
                 reset every partition (leave partitions out) to change it",
            ));
        }
        if self.flow.is_some() && self.partitions != Partitions::All {
            return Err(Error::invalid(
                "flow",
                "a group's flow changes for all its partitions at once: \
                 reset every partition (leave partitions out) to change it",
            ));
        }
        Ok(())
    }

    /// The ordering and flow the group has after this reset, from what it
    /// had (`now`), checked together ([`Flow::validate`]); a store calls
    /// this with the settings it read under the reset's lock, and writes
    /// what it returns.
    pub fn settings_after(&self, now: (GroupOrdering, Flow)) -> Result<(GroupOrdering, Flow)> {
        let ordering = self.ordering.unwrap_or(now.0);
        let flow = self.flow.unwrap_or(now.1);
        flow.validate(ordering)?;
        Ok((ordering, flow))
    }
}

/// Delete a stream with its events, groups and everything they hold
/// (`docs/operations.md#deleting-streams-and-groups`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteStream {
    /// The stream.
    pub stream: StreamName,
    /// Must be true; checked before anything else.
    pub confirm: bool,
}

impl DeleteStream {
    /// Checks `confirm`.
    pub fn validate(&self) -> Result<()> {
        confirmed(self.confirm)
    }
}

/// Delete a group with its delivery state and dead letters; the stream
/// and its other groups are left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteGroup {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Must be true; checked before anything else.
    pub confirm: bool,
}

impl DeleteGroup {
    /// Checks `confirm`.
    pub fn validate(&self) -> Result<()> {
        confirmed(self.confirm)
    }
}

fn confirmed(confirm: bool) -> Result<()> {
    if confirm {
        Ok(())
    } else {
        Err(Error::ConfirmRequired)
    }
}

/// Checks a retention a stream is to have (`None`: keep everything).
pub fn validate_retention(retention: Option<&Retention>) -> Result<()> {
    match retention {
        Some(r) => Ok(r.validate()?),
        None => Ok(()),
    }
}

/// Checks a batch settle's size and items.
pub fn validate_settlements(items: &[Settlement]) -> Result<()> {
    if items.len() > MAX_SETTLE_BATCH {
        return Err(Error::Invalid(ValidationError::new(
            "settlements",
            format!("at most {MAX_SETTLE_BATCH} per batch (got {})", items.len()),
        )));
    }
    Ok(())
}

/// Checks a batch renewal: at most [`MAX_SETTLE_BATCH`] leases, and the
/// lease duration.
pub fn validate_renewals(targets: &[SettleTarget], lease_ms: u64) -> Result<()> {
    if targets.len() > MAX_SETTLE_BATCH {
        return Err(Error::Invalid(ValidationError::new(
            "targets",
            format!(
                "at most {MAX_SETTLE_BATCH} per batch (got {})",
                targets.len()
            ),
        )));
    }
    Ok(validate_lease_ms(lease_ms)?)
}

/// A store of streams and consumer groups.
///
/// Streams are checked before groups everywhere: an unknown stream is
/// [`Error::StreamNotFound`] even when the group is unknown too.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// Short name (`memory`, `sqlite`, …) for logs and errors.
    fn kind(&self) -> &'static str;

    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// The clock this backend reads "now" from.
    fn clock(&self) -> &SharedClock;

    /// Cheap round trip to the store.
    async fn ping(&self) -> Result<()>;

    /// Where a cluster of servers sharing this store keeps its nodes and
    /// handlers (`docs/cluster.md`); `None` for a store one server owns.
    fn cluster(&self) -> Option<Arc<dyn crate::cluster::ClusterStore>> {
        None
    }

    /// Brings the store's schema up to date; returns the migrations applied
    /// now (none when it already was, or when the store has no schema).
    async fn migrate(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Where the store's schema stands against this build: applied,
    /// pending and unknown migrations (none for a store with no schema).
    async fn migration_status(&self) -> Result<MigrationStatus> {
        Ok(MigrationStatus::default())
    }

    /// Creates a stream.
    async fn create_stream(&self, req: CreateStream) -> Result<Stream>;

    /// All streams, sorted by name.
    async fn list_streams(&self) -> Result<Vec<Stream>>;

    /// One stream with its high watermarks.
    async fn get_stream(&self, stream: &StreamName) -> Result<Stream>;

    /// Appends a batch atomically (all stored, or none); results are in
    /// input order. A known event id is returned as a duplicate, not stored again.
    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>>;

    /// Reads one partition in sequence order.
    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>>;

    /// Runs a history query; never touches group state.
    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page>;

    /// Creates a group; its cursor and frontier start at `spec.start`.
    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group>;

    /// The stream's groups, sorted by name.
    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>>;

    /// Claims up to `limit` deliveries, fairly across partitions; leases are
    /// returned sorted by (partition, sequence).
    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>>;

    /// Extends a lease (fenced).
    async fn renew(&self, req: RenewRequest) -> Result<Lease>;

    /// Extends several leases of one group in one call, each fenced like
    /// [`Backend::renew`]: what a handler's renewer sends each round. The
    /// outer error is for the call as a whole; each item has its own
    /// result — the lease's new expiry — in input order.
    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>>;

    /// Applies acks, nacks and rejects (each fenced). The outer error is for
    /// the call as a whole (unknown stream, backend down); each item has its
    /// own result, in input order.
    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>>;

    /// Frontier, high watermark and lag per selected partition, with counts.
    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag>;

    /// Lag, inflight, dead letters and cursors.
    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo>;

    /// A page of dead letters in sequence order.
    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage>;

    /// A page of the leases the group has out now, in (partition,
    /// sequence) order after `req.after`: every leased delivery, expired
    /// ones included (marked, by this backend's clock) until a fetch claims
    /// them again or dead-letters them — the same deliveries
    /// [`GroupInfo::inflight`] counts (`docs/groups.md#what-is-out-leases`).
    /// The page is built by [`policy::lease_page`].
    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage>;

    /// Makes dead letters available again with attempts reset; returns how many.
    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64>;

    /// Re-opens deliveries (keeping attempts; current holders become stale)
    /// and rewinds the frontier; returns how many were re-opened.
    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64>;

    /// Deletes the group's delivery state in the selected partitions and
    /// restarts them at `start`.
    async fn reset(&self, req: ResetRequest) -> Result<()>;

    /// Sets or clears the stream's retention (`docs/log.md#retention`);
    /// the next trim applies it. Returns the stream.
    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream>;

    /// Removes the partition's events below `req.before`, at most
    /// `req.limit` of them, the lowest first, in one step of the store's
    /// own atomicity: the partition's first sequence moves up to the first
    /// event kept; every group whose frontier lay below it moves to it,
    /// counting the events it had not settled (`skipped_by_retention`) and
    /// dropping their open deliveries (their gates let the next delivery
    /// out); dead letters stay, without their event. A `before` at or below
    /// the first sequence removes nothing.
    async fn trim(&self, req: TrimRequest) -> Result<Trimmed>;

    /// Gives space freed by trims and deletes back to the filesystem where
    /// the store can (SQLite's incremental vacuum); others reuse it.
    async fn reclaim(&self) -> Result<()> {
        Ok(())
    }

    /// The bytes the store's data takes, where the store can tell (the
    /// SQLite file, PostgreSQL's tables and indexes); `None` elsewhere.
    async fn size(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Deletes a stream: its events, its groups and their state, all at
    /// once. Leases of it become unknown (`stream_not_found`), and a stream
    /// created with the name afterwards starts empty. Other nodes of a
    /// shared store stop using what they knew of it within
    /// [`catalog::CHECK_EVERY`] (`docs/operations.md#deleting-streams-and-groups`).
    async fn delete_stream(&self, req: DeleteStream) -> Result<()>;

    /// Deletes a group: its cursors, deliveries, leases and dead letters.
    /// The stream and its other groups are untouched; a group created with
    /// the name afterwards starts from its own start position.
    async fn delete_group(&self, req: DeleteGroup) -> Result<()>;

    /// The wake-ups of this backend's process: the backend bumps a stream
    /// when something may have become claimable on it (an append, an
    /// immediate nack, a replay, a redrive, a reset, a delete).
    fn notifier(&self) -> &Notifier;

    /// A wake-up handle that fires when something may have become
    /// claimable on `stream`.
    fn subscribe(&self, stream: &StreamName) -> Wakeup {
        self.notifier().subscribe(stream)
    }

    /// When the next delivery becomes claimable by time alone (a lease
    /// expiring, a retry delay ending): `now` if something is claimable
    /// already, `None` if nothing is waiting on time.
    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>>;

    /// Appends one event.
    async fn append_one(&self, stream: &StreamName, event: EventInput) -> Result<Appended> {
        let mut out = self.append(stream, vec![event]).await?;
        out.pop()
            .ok_or_else(|| Error::Failed("append returned no result".into()))
    }

    /// Acks one lease.
    async fn ack(
        &self,
        stream: &StreamName,
        group: &GroupName,
        target: SettleTarget,
    ) -> Result<()> {
        self.settle_one(stream, group, target, SettleOp::Ack).await
    }

    /// Nacks one lease.
    async fn nack(
        &self,
        stream: &StreamName,
        group: &GroupName,
        target: SettleTarget,
        reason: Option<String>,
        delay_ms: Option<u64>,
    ) -> Result<()> {
        self.settle_one(stream, group, target, SettleOp::Nack { reason, delay_ms })
            .await
    }

    /// Rejects (dead-letters) one lease.
    async fn reject(
        &self,
        stream: &StreamName,
        group: &GroupName,
        target: SettleTarget,
        reason: Option<String>,
    ) -> Result<()> {
        self.settle_one(stream, group, target, SettleOp::Reject { reason })
            .await
    }

    /// Applies one settle operation.
    async fn settle_one(
        &self,
        stream: &StreamName,
        group: &GroupName,
        target: SettleTarget,
        op: SettleOp,
    ) -> Result<()> {
        let mut results = self
            .settle(stream, group, vec![Settlement { target, op }])
            .await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Failed("settle returned no result".into())))
    }
}
