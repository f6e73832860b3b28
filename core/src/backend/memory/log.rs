//! The event log of one in-memory stream: partitions as vectors indexed by
//! sequence, plus an id index for idempotent appends and settles.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::backend::policy::plan_append;
use crate::model::{Appended, Event, EventId, EventInput, Query, StreamName, Timestamp};

/// Events of one stream. `partitions[p][seq - 1]` is the event at `seq`.
#[derive(Debug)]
pub(super) struct Log {
    partitions: Vec<Vec<Arc<Event>>>,
    /// foldhash: fast on short strings and seeded per process, so
    /// producer-chosen ids cannot be crafted to collide.
    ids: HashMap<EventId, (u32, u64), foldhash::fast::RandomState>,
}

impl Log {
    pub(super) fn new(partition_count: u32) -> Self {
        Self {
            partitions: vec![Vec::new(); partition_count as usize],
            ids: HashMap::default(),
        }
    }

    /// Last sequence of `partition` (0 when empty).
    pub(super) fn high_watermark(&self, partition: u32) -> u64 {
        self.partitions[partition as usize].len() as u64
    }

    pub(super) fn high_watermarks(&self) -> Vec<u64> {
        self.partitions.iter().map(|p| p.len() as u64).collect()
    }

    pub(super) fn get(&self, partition: u32, sequence: u64) -> Option<&Arc<Event>> {
        let index = usize::try_from(sequence.checked_sub(1)?).ok()?;
        self.partitions.get(partition as usize)?.get(index)
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
            let log = &mut self.partitions[partition as usize];
            let sequence = log.len() as u64 + 1;
            let event =
                Arc::new(input.into_event(id.clone(), stream.clone(), partition, sequence, now));
            self.ids.insert(id, (partition, sequence));
            out.push(Appended {
                event: Arc::clone(&event),
                duplicate: false,
            });
            log.push(event);
        }
        out
    }

    /// Up to `limit` events of `partition` after `after`.
    pub(super) fn read(&self, partition: u32, after: u64, limit: u32) -> Vec<Event> {
        let events = &self.partitions[partition as usize];
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(events.len());
        events[start..]
            .iter()
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
