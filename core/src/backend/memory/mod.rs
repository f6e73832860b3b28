//! The in-memory backend: the reference implementation of [`Backend`].
//!
//! Nothing survives the process. Each stream has its log behind a
//! read-write lock and each group its state behind its own mutex ("a lock
//! per group"), so groups never contend with each other and appends only
//! contend with the brief moments a fetch copies events out. Lock order is
//! always group, then log.

mod group;
mod log;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};

use self::group::{GroupState, Settled};
use self::log::Log;
use super::policy::{
    LagBuilder, Marks, clamp_starts, lease_page, route_batch, start_lookup, start_points,
    unknown_event,
};
use super::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, Error,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed, validate_renewals, validate_settlements,
};
use crate::clock::SharedClock;
use crate::model::{
    Appended, DeadLetter, DeadLetterPage, Event, EventId, EventInput, Group, GroupInfo, GroupName,
    GroupSpec, Lag, Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement,
    StartPosition, Stream, StreamName, Timestamp,
};

/// Streams and groups kept in process memory.
#[derive(Debug)]
pub struct MemoryBackend {
    clock: SharedClock,
    streams: RwLock<BTreeMap<StreamName, Arc<StreamState>>>,
    notifier: Notifier,
}

#[derive(Debug)]
struct StreamState {
    name: StreamName,
    partition_count: u32,
    created_at: Timestamp,
    retention: RwLock<Option<Retention>>,
    log: RwLock<Log>,
    groups: RwLock<BTreeMap<GroupName, Arc<Mutex<GroupState>>>>,
}

impl StreamState {
    fn group(&self, name: &GroupName) -> Result<Arc<Mutex<GroupState>>> {
        self.groups
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::GroupNotFound {
                stream: self.name.clone(),
                group: name.clone(),
            })
    }

    fn describe(&self) -> Stream {
        let log = self.log.read();
        Stream {
            name: self.name.clone(),
            partition_count: self.partition_count,
            created_at: self.created_at,
            high_watermarks: log.high_watermarks(),
            first_sequences: log.first_sequences(),
            retention: *self.retention.read(),
        }
    }

    /// The exclusive start sequence of every partition for `start`.
    fn start_points(&self, start: &StartPosition, log: &Log) -> Result<Vec<u64>> {
        let marks: Vec<Marks> = match start_lookup(start, self.partition_count)? {
            Some(t) => (0..self.partition_count)
                .map(|p| Marks {
                    first_at_or_after: log.first_at_or_after(p, t),
                    high_watermark: log.high_watermark(p),
                })
                .collect(),
            None => Vec::new(),
        };
        let starts = start_points(start, self.partition_count, &marks);
        Ok(clamp_starts(starts, &log.first_sequences()))
    }
}

impl MemoryBackend {
    /// An empty store reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            streams: RwLock::new(BTreeMap::new()),
            notifier: Notifier::default(),
        }
    }

    fn stream(&self, name: &StreamName) -> Result<Arc<StreamState>> {
        self.streams
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::StreamNotFound(name.clone()))
    }

    fn stream_and_group(
        &self,
        stream: &StreamName,
        group: &GroupName,
    ) -> Result<(Arc<StreamState>, Arc<Mutex<GroupState>>)> {
        let s = self.stream(stream)?;
        let g = s.group(group)?;
        Ok((s, g))
    }

    fn build_lag(
        stream: &StreamState,
        state: &GroupState,
        log: &Log,
        partitions: &[u32],
        now: Timestamp,
    ) -> Lag {
        let mut lag = LagBuilder::new(&stream.name, &state.group.name);
        for &p in partitions {
            let hw = log.high_watermark(p);
            let frontier = lag.add(p, state.cursor(p), hw, state.open_counts(p, now));
            if frontier < hw
                && let Some(e) = log.get(p, frontier + 1)
            {
                lag.unsettled_since(e.timestamp, now);
            }
        }
        lag.lag
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::VOLATILE
    }

    fn clock(&self) -> &SharedClock {
        &self.clock
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        req.validate()?;
        let mut streams = self.streams.write();
        if streams.contains_key(&req.name) {
            return Err(Error::AlreadyExists(format!(
                "stream {:?}",
                req.name.as_str()
            )));
        }
        let state = Arc::new(StreamState {
            name: req.name.clone(),
            partition_count: req.partition_count,
            created_at: self.clock.now(),
            retention: RwLock::new(req.retention),
            log: RwLock::new(Log::new(req.partition_count)),
            groups: RwLock::new(BTreeMap::new()),
        });
        let described = state.describe();
        streams.insert(req.name, state);
        Ok(described)
    }

    async fn list_streams(&self) -> Result<Vec<Stream>> {
        let streams: Vec<_> = self.streams.read().values().cloned().collect();
        Ok(streams.iter().map(|s| s.describe()).collect())
    }

    async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        Ok(self.stream(stream)?.describe())
    }

    async fn append(&self, stream: &StreamName, events: Vec<EventInput>) -> Result<Vec<Appended>> {
        let state = self.stream(stream)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let routed = route_batch(events, state.partition_count)?;
        let now = self.clock.now();
        let appended = state.log.write().append(&state.name, routed, now);
        if appended.iter().any(|a| !a.duplicate) {
            self.notifier.notify(stream);
        }
        Ok(appended)
    }

    async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        req.validate()?;
        let state = self.stream(&req.stream)?;
        if req.partition >= state.partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count: state.partition_count,
            });
        }
        Ok(state.log.read().read(req.partition, req.after, req.limit))
    }

    async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
        query.validate()?;
        let state = self.stream(stream)?;
        let events = state.log.read().query(query);
        Ok(query.page(events))
    }

    async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
        spec.validate()?;
        let state = self.stream(stream)?;
        let mut groups = state.groups.write();
        if groups.contains_key(&spec.name) {
            return Err(Error::AlreadyExists(format!(
                "group {:?} on stream {:?}",
                spec.name.as_str(),
                stream.as_str()
            )));
        }
        let starts = state.start_points(&spec.start, &state.log.read())?;
        let group = Group {
            stream: stream.clone(),
            name: spec.name.clone(),
            max_attempts: spec.max_attempts,
            retry_backoff_ms: spec.retry_backoff_ms,
            ordering: spec.ordering,
            on_exhausted: spec.on_exhausted,
            flow: spec.flow,
            created_at: self.clock.now(),
        };
        groups.insert(
            spec.name,
            Arc::new(Mutex::new(GroupState::new(group.clone(), &starts))),
        );
        Ok(group)
    }

    async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
        let state = self.stream(stream)?;
        let groups: Vec<_> = state.groups.read().values().cloned().collect();
        Ok(groups.iter().map(|g| g.lock().group.clone()).collect())
    }

    async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        req.validate()?;
        let (state, group) = self.stream_and_group(&req.stream, &req.group)?;
        let partitions = req.partitions.resolve(state.partition_count)?;
        let now = self.clock.now();
        let mut g = group.lock();
        let log = state.log.read();
        let claimed = g.claim(
            &partitions,
            |p| log.high_watermark(p),
            |p, seq| key_at(&log, p, seq),
            req.limit as usize,
            &req.consumer_id,
            req.lease_ms,
            now,
        );
        Ok(claimed
            .into_iter()
            .map(|c| {
                let event = log
                    .get(c.partition, c.sequence)
                    .expect("claimed events exist");
                let (group, consumer) = (req.group.clone(), req.consumer_id.clone());
                let (attempt, leased_at) = (c.attempt, c.leased_at);
                Lease::new(
                    group,
                    Arc::clone(event),
                    c.lease_id,
                    consumer,
                    attempt,
                    leased_at,
                    c.expires_at,
                )
            })
            .collect())
    }

    async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        req.validate()?;
        let (state, group) = self.stream_and_group(&req.stream, &req.group)?;
        let now = self.clock.now();
        let mut g = group.lock();
        let log = state.log.read();
        let (p, seq) = (log.locate(&req.target.event_id))
            .ok_or_else(|| unknown_event(&req.target.event_id, &log.first_sequences()))?;
        let renewed = g.renew(p, seq, &req.target, req.lease_ms, now)?;
        let event = log.get(p, seq).expect("located events exist");
        let (lease_id, r) = (req.target.lease_id, renewed);
        let event = Arc::clone(event);
        let lease = Lease::new(
            req.group,
            event,
            lease_id,
            r.consumer_id,
            r.attempt,
            r.leased_at,
            r.expires_at,
        );
        Ok(lease)
    }

    async fn renew_many(
        &self,
        stream: &StreamName,
        group: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        validate_renewals(&targets, lease_ms)?;
        let (state, group) = self.stream_and_group(stream, group)?;
        let now = self.clock.now();
        let mut g = group.lock();
        let log = state.log.read();
        let renew = |target: &SettleTarget| {
            let (p, seq) = (log.locate(&target.event_id))
                .ok_or_else(|| unknown_event(&target.event_id, &log.first_sequences()))?;
            Ok(g.renew(p, seq, target, lease_ms, now)?.expires_at)
        };
        Ok(targets.iter().map(renew).collect())
    }

    async fn settle(
        &self,
        stream: &StreamName,
        group: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        validate_settlements(&items)?;
        let (state, group) = self.stream_and_group(stream, group)?;
        let now = self.clock.now();
        let mut requeued = false;
        let results = {
            let mut g = group.lock();
            let log = state.log.read();
            items
                .into_iter()
                .map(|item| {
                    item.validate()?;
                    let (p, seq) = (log.locate(&item.target.event_id)).ok_or_else(|| {
                        unknown_event(&item.target.event_id, &log.first_sequences())
                    })?;
                    let outcome = g.settle(p, seq, &item.target, item.op, now)?;
                    requeued |= outcome == Settled::Requeued;
                    Ok(())
                })
                .collect()
        };
        if requeued {
            self.notifier.notify(stream);
        }
        Ok(results)
    }

    async fn lag(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let (state, group) = self.stream_and_group(stream, group)?;
        let partitions = partitions.resolve(state.partition_count)?;
        let now = self.clock.now();
        let g = group.lock();
        let log = state.log.read();
        Ok(Self::build_lag(&state, &g, &log, &partitions, now))
    }

    async fn group_info(&self, stream: &StreamName, group: &GroupName) -> Result<GroupInfo> {
        let (state, group) = self.stream_and_group(stream, group)?;
        let partitions: Vec<u32> = (0..state.partition_count).collect();
        let now = self.clock.now();
        let g = group.lock();
        let log = state.log.read();
        let lag = Self::build_lag(&state, &g, &log, &partitions, now);
        Ok(GroupInfo {
            stream: state.name.clone(),
            group: g.group.name.clone(),
            max_attempts: g.group.max_attempts,
            retry_backoff_ms: g.group.retry_backoff_ms.clone(),
            ordering: g.group.ordering,
            on_exhausted: g.group.on_exhausted,
            flow: g.group.flow,
            inflight: g.inflight(),
            dead_letters: g.dead_count(),
            skipped_by_retention: g.skipped(),
            cursors: partitions.iter().map(|&p| (p, g.cursor(p))).collect(),
            lag,
        })
    }

    async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        req.validate()?;
        let (state, group) = self.stream_and_group(&req.stream, &req.group)?;
        let g = group.lock();
        let log = state.log.read();
        let after = match &req.after {
            None => None,
            Some(id) => {
                let (p, seq) = (log.locate(id).or_else(|| g.dead_position(id)))
                    .ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
                Some((seq, p))
            }
        };
        let rows = g.dead_after(after, req.limit as usize);
        let dead_letters: Vec<DeadLetter> = rows
            .into_iter()
            .map(|((seq, p), record)| {
                // Retention may have removed the event: its id was kept.
                let event = log.get(p, seq).map(|e| (**e).clone());
                DeadLetter {
                    event_id: event.as_ref().map_or_else(
                        || {
                            record
                                .event_id
                                .clone()
                                .expect("a removed event's id is kept")
                        },
                        |e| e.id.clone(),
                    ),
                    partition: p,
                    sequence: seq,
                    attempt: record.attempt,
                    reason: record.reason,
                    dead_lettered_at: record.at,
                    event,
                }
            })
            .collect();
        let next = (dead_letters.len() == req.limit as usize)
            .then(|| dead_letters.last().map(|d| d.event_id.clone()))
            .flatten();
        Ok(DeadLetterPage { dead_letters, next })
    }

    async fn leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        req.validate()?;
        let (state, group) = self.stream_and_group(&req.stream, &req.group)?;
        let now = self.clock.now();
        let g = group.lock();
        let log = state.log.read();
        let rows = g.leases_after(req.after, req.limit as usize + 1, &|p, seq| {
            log.get(p, seq).map(|e| e.id.clone())
        });
        Ok(lease_page(rows, req.after, req.limit, now))
    }

    async fn redrive(&self, stream: &StreamName, group: &GroupName, which: Redrive) -> Result<u64> {
        let (state, group) = self.stream_and_group(stream, group)?;
        let count = {
            let mut g = group.lock();
            let log = state.log.read();
            let targets = match which {
                Redrive::All => None,
                Redrive::Events(ids) => Some(locate_all(&log, &ids)?),
            };
            // A dead letter whose event retention removed has nothing to
            // deliver: it stays.
            g.redrive(targets, &|p| log.first_sequence(p), &|p, seq| {
                key_at(&log, p, seq)
            })
        };
        if count > 0 {
            self.notifier.notify(stream);
        }
        Ok(count)
    }

    async fn replay(&self, stream: &StreamName, group: &GroupName, how: Replay) -> Result<u64> {
        how.validate()?;
        let (state, group) = self.stream_and_group(stream, group)?;
        let count = {
            let mut g = group.lock();
            let log = state.log.read();
            let key_of = |p, seq| key_at(&log, p, seq);
            match how {
                Replay::FromSequence { after, partitions } => {
                    let parts = partitions.resolve(state.partition_count)?;
                    parts
                        .iter()
                        .map(|&p| {
                            // Below the log start nothing is left to re-open.
                            let after = after.max(log.first_sequence(p) - 1);
                            g.reopen_after(p, after, log.high_watermark(p), &key_of)
                        })
                        .sum()
                }
                Replay::FromTime { from, partitions } => {
                    let parts = partitions.resolve(state.partition_count)?;
                    parts
                        .iter()
                        .filter_map(|&p| log.first_at_or_after(p, from).map(|seq| (p, seq)))
                        .map(|(p, seq)| g.reopen_after(p, seq - 1, log.high_watermark(p), &key_of))
                        .sum()
                }
                Replay::Query(query) => {
                    let targets = log.matching(&query);
                    targets
                        .into_iter()
                        .map(|(p, seq)| u64::from(g.reopen(p, seq, false, &key_of)))
                        .sum()
                }
                Replay::EventIds(ids) => {
                    let targets = locate_all(&log, &ids)?;
                    targets
                        .into_iter()
                        .map(|(p, seq)| u64::from(g.reopen(p, seq, false, &key_of)))
                        .sum()
                }
            }
        };
        self.notifier.notify(stream);
        Ok(count)
    }

    async fn reset(&self, req: ResetRequest) -> Result<()> {
        req.validate()?;
        let (state, group) = self.stream_and_group(&req.stream, &req.group)?;
        let parts = req.partitions.resolve(state.partition_count)?;
        {
            let mut g = group.lock();
            let log = state.log.read();
            let starts = state.start_points(&req.start, &log)?;
            let (ordering, flow) = req.settings_after(g.gating_settings())?;
            for p in parts {
                g.reset(p, starts[p as usize]);
            }
            // Every partition was reset (`ResetRequest::validate`): no
            // delivery is left to re-gate.
            g.set_gating(ordering, flow);
        }
        self.notifier.notify(&req.stream);
        Ok(())
    }

    async fn set_retention(
        &self,
        stream: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        super::validate_retention(retention.as_ref())?;
        let state = self.stream(stream)?;
        *state.retention.write() = retention;
        Ok(state.describe())
    }

    async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        let state = self.stream(&req.stream)?;
        if req.partition >= state.partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count: state.partition_count,
            });
        }
        let p = req.partition;
        // Lock order: groups, then the log.
        let groups: Vec<_> = state.groups.read().values().cloned().collect();
        let mut held: Vec<_> = groups.iter().map(|g| g.lock()).collect();
        let mut log = state.log.write();
        let first = log.first_sequence(p);
        let upto = req.end(first, log.high_watermark(p));
        if upto <= first {
            return Ok(Trimmed::nothing(first));
        }
        let mut skipped = Vec::new();
        for g in held.iter_mut() {
            let n = g.trim(p, (first, upto), &|seq| {
                log.get(p, seq).map(|e| e.id.clone())
            });
            if n > 0 {
                skipped.push((g.group.name.clone(), n));
            }
        }
        let (removed, first_sequence) = log.trim(p, upto, req.limit);
        drop(log);
        drop(held);
        if !skipped.is_empty() {
            // Gates may have let deliveries out.
            self.notifier.notify(&req.stream);
        }
        Ok(Trimmed {
            removed,
            first_sequence,
            skipped,
        })
    }

    async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        req.validate()?;
        (self.streams.write().remove(&req.stream))
            .ok_or_else(|| Error::StreamNotFound(req.stream.clone()))?;
        // Waiters find the stream gone.
        self.notifier.notify(&req.stream);
        Ok(())
    }

    async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        req.validate()?;
        let state = self.stream(&req.stream)?;
        (state.groups.write().remove(&req.group)).ok_or_else(|| Error::GroupNotFound {
            stream: req.stream.clone(),
            group: req.group.clone(),
        })?;
        self.notifier.notify(&req.stream);
        Ok(())
    }

    async fn next_due(
        &self,
        stream: &StreamName,
        group: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let (state, group) = self.stream_and_group(stream, group)?;
        let partitions = partitions.resolve(state.partition_count)?;
        let now = self.clock.now();
        let g = group.lock();
        let log = state.log.read();
        Ok(g.next_due(&partitions, |p| log.high_watermark(p), now))
    }
}

/// The key of the event at `p`/`seq`, if it has one.
fn key_at(log: &Log, p: u32, seq: u64) -> Option<String> {
    log.get(p, seq).and_then(|e| e.key.clone())
}

/// Resolves event ids to positions; an id the stream does not have is an error.
fn locate_all(log: &Log, ids: &[EventId]) -> Result<Vec<(u32, u64)>> {
    crate::backend::policy::all_located(ids.iter().map(|id| (id.as_str(), log.locate(id))))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::MemoryBackend;
    use crate::backend::Backend;
    use crate::clock::SharedClock;

    async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(MemoryBackend::new(clock)))
    }

    crate::backend_conformance!(factory);
}
