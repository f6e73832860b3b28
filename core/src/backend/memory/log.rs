//! The event log of one in-memory stream: partitions as vectors indexed by
//! sequence, plus an id index for idempotent appends and settles.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::backend::policy::plan_append;
use crate::model::{Appended, Event, EventId, EventInput, Query, StreamName, Timestamp};

/// Events of one stream. `partitions[p][seq - firsts[p]]` is the event at
/// `seq`; retention removes events from the front.
#[derive(Debug)]
pub(super) struct Log {
    partitions: Vec<VecDeque<Arc<Event>>>,
    /// Per partition, the sequence of its first stored event (the high
    /// watermark + 1 when none is).
    firsts: Vec<u64>,
    /// foldhash: fast on short strings and seeded per process, so
    /// producer-chosen ids cannot be crafted to collide.
    ids: HashMap<EventId, (u32, u64), foldhash::fast::RandomState>,
}

impl Log {
    pub(super) fn new(partition_count: u32) -> Self {
        Self {
            partitions: vec![VecDeque::new(); partition_count as usize],
            firsts: vec![1; partition_count as usize],
            ids: HashMap::default(),
        }
    }

    /// Last sequence of `partition` (0 when empty).
    pub(super) fn high_watermark(&self, partition: u32) -> u64 {
        let p = partition as usize;
        self.firsts[p] - 1 + self.partitions[p].len() as u64
    }

    pub(super) fn high_watermarks(&self) -> Vec<u64> {
        (0..self.partitions.len() as u32)
            .map(|p| self.high_watermark(p))
            .collect()
    }

    /// The lowest sequence still stored in `partition`.
    pub(super) fn first_sequence(&self, partition: u32) -> u64 {
        self.firsts[partition as usize]
    }

    pub(super) fn first_sequences(&self) -> Vec<u64> {
        self.firsts.clone()
    }

    pub(super) fn get(&self, partition: u32, sequence: u64) -> Option<&Arc<Event>> {
        let p = partition as usize;
        let index = usize::try_from(sequence.checked_sub(*self.firsts.get(p)?)?).ok()?;
        self.partitions.get(p)?.get(index)
    }

    /// Removes the events of `partition` below `upto` (exclusive), at most
    /// `limit`; returns how many went and the new first sequence.
    pub(super) fn trim(&mut self, partition: u32, upto: u64, limit: u32) -> (u64, u64) {
        let p = partition as usize;
        let mut removed = 0;
        while self.firsts[p] < upto && removed < u64::from(limit) {
            let Some(event) = self.partitions[p].pop_front() else {
                break;
            };
            self.ids.remove(&event.id);
            self.firsts[p] += 1;
            removed += 1;
        }
        (removed, self.firsts[p])
    }

    /// Where the event with `id` lives.
    pub(super) fn locate(&self, id: &EventId) -> Option<(u32, u64)> {
        self.ids.get(id).copied()
    }

    /// Appends already-validated, already-routed inputs; which are new is
    /// the shared append plan's call. Cannot fail, so a batch is
    /// all-or-nothing by construction.
    pub(super) fn append(
        &mut self,
        stream: &StreamName,
        routed: Vec<(EventInput, u32)>,
        now: Timestamp,
    ) -> Vec<Appended> {
        let known: HashSet<EventId> = routed
            .iter()
            .filter_map(|(input, _)| input.id.as_ref())
            .filter(|id| self.ids.contains_key(*id))
            .cloned()
            .collect();
        let plan = plan_append(&routed, &known);
        let mut out = Vec::with_capacity(routed.len());
        for ((mut input, partition), fresh) in routed.into_iter().zip(plan.fresh) {
            if !fresh {
                let id = input
                    .id
                    .as_ref()
                    .expect("only an input with an id is a duplicate");
                let (p, seq) = self.ids[id];
                let event = Arc::clone(self.get(p, seq).expect("indexed event exists"));
                out.push(Appended {
                    event,
                    duplicate: true,
                });
                continue;
            }
            let id = input.id.take().unwrap_or_else(EventId::generate);
            let sequence = self.high_watermark(partition) + 1;
            let log = &mut self.partitions[partition as usize];
            let event =
                Arc::new(input.into_event(id.clone(), stream.clone(), partition, sequence, now));
            self.ids.insert(id, (partition, sequence));
            out.push(Appended {
                event: Arc::clone(&event),
                duplicate: false,
            });
            log.push_back(event);
        }
        out
    }

    /// Up to `limit` events of `partition` after `after`.
    pub(super) fn read(&self, partition: u32, after: u64, limit: u32) -> Vec<Event> {
        let events = &self.partitions[partition as usize];
        let skip = after.saturating_sub(self.first_sequence(partition) - 1);
        let start = usize::try_from(skip)
            .unwrap_or(usize::MAX)
            .min(events.len());
        events
            .range(start..)
            .take(limit as usize)
            .map(|e| (**e).clone())
            .collect()
    }

    /// First sequence of `partition` whose timestamp is at or after `t`.
    pub(super) fn first_at_or_after(&self, partition: u32, t: Timestamp) -> Option<u64> {
        self.partitions[partition as usize]
            .iter()
            .find(|e| e.timestamp >= t)
            .map(|e| e.sequence)
    }

    /// One page of `query`. Ordered by sequence, each partition contributes
    /// at most `limit` events walked from its bound, so the cost follows the
    /// page, not the history; timestamp order scans the sequence range.
    pub(super) fn query(&self, query: &Query) -> Vec<Event> {
        let limit = query.limit as usize;
        let mut hits: Vec<&Arc<Event>> = Vec::new();
        for partition in 0..self.partitions.len() as u32 {
            let Some((lo, hi)) = query.sequence_range(partition, self.high_watermark(partition))
            else {
                continue;
            };
            let lo = lo.max(self.first_sequence(partition));
            let matching = (lo..=hi)
                .filter_map(|seq| self.get(partition, seq))
                .filter(|e| query.matches(e));
            let descending = (lo..=hi)
                .rev()
                .filter_map(|seq| self.get(partition, seq))
                .filter(|e| query.matches(e));
            use crate::model::{Direction, OrderField};
            match (query.order.field, query.order.dir) {
                (OrderField::Sequence, Direction::Asc) => hits.extend(matching.take(limit)),
                (OrderField::Sequence, Direction::Desc) => hits.extend(descending.take(limit)),
                (OrderField::Timestamp, _) => hits.extend(matching),
            }
        }
        hits.sort_by(|a, b| query.order.compare(a, b));
        hits.truncate(limit);
        hits.into_iter().map(|e| (**e).clone()).collect()
    }

    /// Every event `query` matches, ignoring its limit and cursor.
    pub(super) fn matching(&self, query: &Query) -> Vec<(u32, u64)> {
        let unbounded = Query {
            cursor: None,
            ..query.clone()
        };
        let mut out = Vec::new();
        for partition in 0..self.partitions.len() as u32 {
            if let Some((lo, hi)) =
                unbounded.sequence_range(partition, self.high_watermark(partition))
            {
                let lo = lo.max(self.first_sequence(partition));
                out.extend(
                    (lo..=hi)
                        .filter_map(|seq| self.get(partition, seq))
                        .filter(|e| unbounded.matches(e))
                        .map(|e| (e.partition, e.sequence)),
                );
            }
        }
        out
    }
}
