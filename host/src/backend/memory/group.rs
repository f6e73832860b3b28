//! One group's delivery state in memory.
//!
//! Per partition, deliveries live in a dense deque indexed by sequence
//! (`slots[seq - lo]`), created lazily as the group's cursor passes each
//! event. Sequences below `lo` without a slot lie before the group's start
//! and count as settled. Four ordered sets index the open deliveries so
//! that claiming, settling and expiry cost O(log n) in the number of *open*
//! deliveries and never walk history:
//!
//! * `ready`   — available and due, by sequence;
//! * `expired` — leased, expiry seen, not yet re-claimed, by sequence;
//! * `leases`  — leased, by (expires_at, sequence);
//! * `delayed` — nacked with a delay, by (due, sequence).
//!
//! A fetch first moves whatever the clock has passed from `leases` to
//! `expired` (or to the dead letters: the poison guard) and from `delayed`
//! to `ready`, then claims the lowest sequence among `ready`, `expired` and
//! the cursor, round-robin across partitions.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::backend::policy::{
    GroupConfig, OpenCounts, POISON_REASON, Write, claim_capacity, poisoned, round_robin,
    settle_write,
};
use crate::backend::{Error, Result};
use crate::model::{ConsumerId, Group, LeaseId, SettleOp, SettleTarget, Timestamp, clip_reason};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Before the group's start point (a placeholder created by a replay
    /// that reached below it); settled for frontier purposes.
    Outside,
    Available,
    Leased,
    Acked,
    Dead,
}

#[derive(Debug)]
struct Held {
    lease_id: LeaseId,
    consumer_id: ConsumerId,
    leased_at: Timestamp,
    expires_at: Timestamp,
}

#[derive(Debug)]
struct Slot {
    status: Status,
    attempt: u32,
    /// Set while `Leased`.
    lease: Option<Box<Held>>,
    /// Set while `Available` and waiting in `delayed`.
    due: Option<Timestamp>,
}

impl Slot {
    fn new(status: Status) -> Self {
        Slot {
            status,
            attempt: 0,
            lease: None,
            due: None,
        }
    }

    fn is_settled(&self) -> bool {
        matches!(self.status, Status::Acked | Status::Dead | Status::Outside)
    }
}

/// A freshly claimed delivery, for the caller to turn into a `Lease`.
#[derive(Debug)]
pub(super) struct Claimed {
    pub(super) partition: u32,
    pub(super) sequence: u64,
    pub(super) attempt: u32,
    pub(super) lease_id: LeaseId,
    pub(super) leased_at: Timestamp,
    pub(super) expires_at: Timestamp,
}

/// A live lease, as renew reports it.
#[derive(Debug)]
pub(super) struct Renewed {
    pub(super) attempt: u32,
    pub(super) consumer_id: ConsumerId,
    pub(super) leased_at: Timestamp,
    pub(super) expires_at: Timestamp,
}

#[derive(Debug)]
struct PartState {
    lo: u64,
    slots: VecDeque<Slot>,
    frontier: u64,
    ready: BTreeSet<u64>,
    expired: BTreeSet<u64>,
    leases: BTreeSet<(Timestamp, u64)>,
    delayed: BTreeSet<(Timestamp, u64)>,
    /// Slots in `ready` with attempt 0: part of `pending`.
    fresh: u64,
}

impl PartState {
    /// A partition whose group starts after `start` (exclusive).
    fn new(start: u64) -> Self {
        PartState {
            lo: start + 1,
            slots: VecDeque::new(),
            frontier: start,
            ready: BTreeSet::new(),
            expired: BTreeSet::new(),
            leases: BTreeSet::new(),
            delayed: BTreeSet::new(),
            fresh: 0,
        }
    }

    /// The next sequence without a slot.
    fn cursor(&self) -> u64 {
        self.lo + self.slots.len() as u64
    }

    fn slot_mut(&mut self, seq: u64) -> Option<&mut Slot> {
        let index = usize::try_from(seq.checked_sub(self.lo)?).ok()?;
        self.slots.get_mut(index)
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        let index = usize::try_from(seq.checked_sub(self.lo)?).ok()?;
        self.slots.get(index)
    }

    fn make_ready(&mut self, seq: u64) {
        let slot = self.slot_mut(seq).expect("slot exists");
        slot.status = Status::Available;
        slot.due = None;
        let fresh = slot.attempt == 0;
        if self.ready.insert(seq) && fresh {
            self.fresh += 1;
        }
    }

    /// Removes `seq` from whichever open index holds it and clears its lease.
    fn unindex(&mut self, seq: u64) {
        let slot = self.slot_mut(seq).expect("slot exists");
        let lease = slot.lease.take();
        let due = slot.due.take();
        let fresh = slot.attempt == 0;
        match slot.status {
            Status::Leased => {
                let held = lease.expect("a leased slot holds a lease");
                if !self.leases.remove(&(held.expires_at, seq)) {
                    self.expired.remove(&seq);
                }
            }
            Status::Available => match due {
                Some(due) => {
                    self.delayed.remove(&(due, seq));
                }
                None => {
                    if self.ready.remove(&seq) && fresh {
                        self.fresh -= 1;
                    }
                }
            },
            Status::Outside | Status::Acked | Status::Dead => {}
        }
    }

    /// Advances the frontier over settled sequences.
    fn walk(&mut self) {
        let cursor = self.cursor();
        while self.frontier + 1 < cursor {
            match self.slot(self.frontier + 1) {
                Some(s) if s.is_settled() => self.frontier += 1,
                _ => break,
            }
        }
    }

    /// Moves what the clock has passed out of `leases` and `delayed`.
    /// Returns expired leases that were on their last attempt (poisoned).
    fn promote(&mut self, now: Timestamp, max_attempts: u32) -> Vec<u64> {
        let mut poison = Vec::new();
        while let Some(&(expires, seq)) = self.leases.first() {
            if expires > now {
                break;
            }
            self.leases.pop_first();
            let attempt = self.slot(seq).map_or(0, |s| s.attempt);
            if poisoned(attempt, max_attempts) {
                poison.push(seq);
            } else {
                self.expired.insert(seq);
            }
        }
        while let Some(&(due, seq)) = self.delayed.first() {
            if due > now {
                break;
            }
            self.delayed.pop_first();
            self.make_ready(seq);
        }
        poison
    }

    /// Claims the lowest claimable sequence, if any.
    fn claim_next(
        &mut self,
        high_watermark: u64,
        consumer_id: &ConsumerId,
        lease_ms: u64,
        now: Timestamp,
    ) -> Option<(u64, u32, LeaseId, Timestamp)> {
        let ready = self.ready.first().copied();
        let expired = self.expired.first().copied();
        let cursor = self.cursor();
        let unseen = (cursor <= high_watermark).then_some(cursor);
        let seq = [ready, expired, unseen].into_iter().flatten().min()?;
        if Some(seq) == ready {
            self.ready.remove(&seq);
            if self.slot(seq).is_some_and(|s| s.attempt == 0) {
                self.fresh -= 1;
            }
        } else if Some(seq) == expired {
            self.expired.remove(&seq);
        } else {
            self.slots.push_back(Slot::new(Status::Available));
        }
        let lease_id = LeaseId::generate();
        let expires_at = now.add_ms(lease_ms);
        let slot = self.slot_mut(seq).expect("slot exists");
        slot.status = Status::Leased;
        slot.attempt = slot.attempt.saturating_add(1);
        slot.due = None;
        slot.lease = Some(Box::new(Held {
            lease_id: lease_id.clone(),
            consumer_id: consumer_id.clone(),
            leased_at: now,
            expires_at,
        }));
        let attempt = slot.attempt;
        self.leases.insert((expires_at, seq));
        Some((seq, attempt, lease_id, expires_at))
    }

    /// The fencing check: the slot must be leased under `target`.
    fn check_fence(&self, seq: u64, target: &SettleTarget) -> Result<&Held> {
        let held = self
            .slot(seq)
            .filter(|s| s.status == Status::Leased)
            .and_then(|s| s.lease.as_deref())
            .ok_or(Error::StaleLease)?;
        if held.lease_id != target.lease_id {
            return Err(Error::StaleLease);
        }
        match &target.receipt {
            Some(r) if r != held.lease_id.as_str() => Err(Error::ReceiptMismatch),
            _ => Ok(held),
        }
    }

    /// Makes a slot for `seq` exist, adding `Outside` placeholders below
    /// `lo` if needed. Returns false for sequences not materialized yet.
    fn ensure_slot(&mut self, seq: u64) -> bool {
        if seq >= self.cursor() || seq == 0 {
            return false;
        }
        while seq < self.lo {
            self.slots.push_front(Slot::new(Status::Outside));
            self.lo -= 1;
        }
        true
    }
}

/// A dead-lettered delivery's diagnostics.
#[derive(Debug, Clone)]
pub(super) struct DeadRecord {
    pub(super) attempt: u32,
    pub(super) reason: String,
    pub(super) at: Timestamp,
}

/// The state of one consumer group.
#[derive(Debug)]
pub(super) struct GroupState {
    pub(super) group: Group,
    /// The group's retry policy, as the shared settle rules take it.
    config: GroupConfig,
    parts: Vec<PartState>,
    /// Where the next fetch starts its round-robin.
    next_first: usize,
    /// Dead letters by (sequence, partition): the listing order.
    dead: BTreeMap<(u64, u32), DeadRecord>,
}

/// What an individual settle did, for wake-ups.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Settled {
    Done,
    /// A nack made the delivery claimable at once.
    Requeued,
}

impl GroupState {
    /// A group whose partition `p` starts after `starts[p]`.
    pub(super) fn new(group: Group, starts: &[u64]) -> Self {
        GroupState {
            config: GroupConfig::from(&group),
            group,
            parts: starts.iter().map(|s| PartState::new(*s)).collect(),
            next_first: 0,
            dead: BTreeMap::new(),
        }
    }

    fn kill(&mut self, partition: u32, seq: u64, reason: String, now: Timestamp) {
        let part = &mut self.parts[partition as usize];
        part.unindex(seq);
        let slot = part.slot_mut(seq).expect("slot exists");
        slot.status = Status::Dead;
        let attempt = slot.attempt;
        part.walk();
        self.dead.insert(
            (seq, partition),
            DeadRecord {
                attempt,
                reason: clip_reason(&reason),
                at: now,
            },
        );
    }

    /// Claims up to `limit` deliveries from `partitions`, shared among them
    /// by the round-robin rule, starting one partition later on every call.
    pub(super) fn claim(
        &mut self,
        partitions: &[u32],
        high_watermark: impl Fn(u32) -> u64,
        limit: usize,
        consumer_id: &ConsumerId,
        lease_ms: u64,
        now: Timestamp,
    ) -> Vec<Claimed> {
        let max_attempts = self.group.max_attempts;
        for &p in partitions {
            for seq in self.parts[p as usize].promote(now, max_attempts) {
                self.kill(p, seq, POISON_REASON.into(), now);
            }
        }
        if partitions.is_empty() {
            return Vec::new();
        }
        let capacity: Vec<usize> = partitions
            .iter()
            .map(|&p| {
                let part = &self.parts[p as usize];
                let claimable = part.ready.len() + part.expired.len();
                claim_capacity(claimable, part.cursor(), high_watermark(p))
            })
            .collect();
        let first = self.next_first % partitions.len();
        self.next_first = self.next_first.wrapping_add(1);
        let quotas = round_robin(&capacity, limit, first);
        let mut out = Vec::with_capacity(quotas.iter().sum());
        for (&p, quota) in partitions.iter().zip(quotas) {
            let part = &mut self.parts[p as usize];
            for _ in 0..quota {
                let Some((sequence, attempt, lease_id, expires_at)) =
                    part.claim_next(high_watermark(p), consumer_id, lease_ms, now)
                else {
                    break;
                };
                out.push(Claimed {
                    partition: p,
                    sequence,
                    attempt,
                    lease_id,
                    leased_at: now,
                    expires_at,
                });
            }
        }
        out
    }

    /// Applies one fenced settle operation.
    pub(super) fn settle(
        &mut self,
        partition: u32,
        seq: u64,
        target: &SettleTarget,
        op: SettleOp,
        now: Timestamp,
    ) -> Result<Settled> {
        let part = &mut self.parts[partition as usize];
        part.check_fence(seq, target)?;
        let attempt = part.slot(seq).map_or(0, |s| s.attempt);
        match settle_write(op, attempt, &self.config, now) {
            Write::Ack => {
                part.unindex(seq);
                part.slot_mut(seq).expect("slot exists").status = Status::Acked;
                part.walk();
                Ok(Settled::Done)
            }
            Write::Dead(reason) => {
                self.kill(partition, seq, reason, now);
                Ok(Settled::Done)
            }
            Write::Retry { due: None, .. } => {
                part.unindex(seq);
                part.make_ready(seq);
                Ok(Settled::Requeued)
            }
            Write::Retry { due: Some(due), .. } => {
                part.unindex(seq);
                let slot = part.slot_mut(seq).expect("slot exists");
                slot.status = Status::Available;
                slot.due = Some(due);
                part.delayed.insert((due, seq));
                Ok(Settled::Done)
            }
        }
    }

    /// Extends a lease (fenced).
    pub(super) fn renew(
        &mut self,
        partition: u32,
        seq: u64,
        target: &SettleTarget,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<Renewed> {
        let part = &mut self.parts[partition as usize];
        let old_expiry = part.check_fence(seq, target)?.expires_at;
        if !part.leases.remove(&(old_expiry, seq)) {
            part.expired.remove(&seq);
        }
        let expires_at = now.add_ms(lease_ms);
        part.leases.insert((expires_at, seq));
        let slot = part.slot_mut(seq).expect("slot exists");
        let held = slot.lease.as_mut().expect("fenced slot holds a lease");
        held.expires_at = expires_at;
        Ok(Renewed {
            attempt: slot.attempt,
            consumer_id: held.consumer_id.clone(),
            leased_at: held.leased_at,
            expires_at,
        })
    }

    /// Re-opens one delivery; `fresh_attempts` resets its attempt count.
    /// Returns whether it was not already open.
    pub(super) fn reopen(&mut self, partition: u32, seq: u64, fresh_attempts: bool) -> bool {
        let part = &mut self.parts[partition as usize];
        if !part.ensure_slot(seq) {
            return false;
        }
        let before = part.slot(seq).expect("slot exists").status;
        part.unindex(seq);
        if fresh_attempts {
            part.slot_mut(seq).expect("slot exists").attempt = 0;
        }
        part.make_ready(seq);
        part.frontier = part.frontier.min(seq - 1);
        if before == Status::Dead {
            self.dead.remove(&(seq, partition));
        }
        before != Status::Available
    }

    /// Re-opens every sequence after `after` in `partition` that the group
    /// has seen or that lies before its start, up to the high watermark
    /// `hw`: a start point past the partition's end names sequences that
    /// hold no event yet, and those are skipped when appended, not re-opened.
    pub(super) fn reopen_after(&mut self, partition: u32, after: u64, hw: u64) -> u64 {
        let cursor = self.parts[partition as usize].cursor();
        (after.saturating_add(1)..cursor.min(hw.saturating_add(1)))
            .map(|seq| u64::from(self.reopen(partition, seq, false)))
            .sum()
    }

    /// Sends dead letters back; `which` = None means all.
    pub(super) fn redrive(&mut self, which: Option<Vec<(u32, u64)>>) -> u64 {
        let targets: Vec<(u32, u64)> = match which {
            None => self.dead.keys().map(|&(seq, p)| (p, seq)).collect(),
            Some(list) => list
                .into_iter()
                .filter(|(p, seq)| self.dead.contains_key(&(*seq, *p)))
                .collect(),
        };
        let mut count = 0;
        for (p, seq) in targets {
            if self.reopen(p, seq, true) {
                count += 1;
            }
        }
        count
    }

    /// Forgets `partition`'s deliveries and restarts it after `start`.
    pub(super) fn reset(&mut self, partition: u32, start: u64) {
        self.parts[partition as usize] = PartState::new(start);
        self.dead.retain(|&(_, p), _| p != partition);
    }

    /// One partition's open deliveries, as the shared lag rules count them.
    pub(super) fn open_counts(&self, partition: u32, now: Timestamp) -> OpenCounts {
        let part = &self.parts[partition as usize];
        let first_open = part.frontier + 1;
        OpenCounts {
            first_open: (first_open < part.cursor()).then_some(first_open),
            leased: (part.leases.len() + part.expired.len()) as u64,
            fresh: part.fresh,
            waiting: part.delayed.range((now.add_ms(1), 0)..).count() as u64,
        }
    }

    pub(super) fn cursor(&self, partition: u32) -> u64 {
        self.parts[partition as usize].cursor()
    }

    pub(super) fn inflight(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| (p.leases.len() + p.expired.len()) as u64)
            .sum()
    }

    pub(super) fn dead_count(&self) -> u64 {
        self.dead.len() as u64
    }

    /// Dead letters after position `after` (exclusive), in listing order.
    pub(super) fn dead_after(
        &self,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> Vec<((u64, u32), DeadRecord)> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.dead
            .range((lower, Bound::Unbounded))
            .take(limit)
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// When something in `partitions` next becomes claimable by time alone.
    pub(super) fn next_due(
        &self,
        partitions: &[u32],
        high_watermark: impl Fn(u32) -> u64,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let mut next: Option<Timestamp> = None;
        for &p in partitions {
            let part = &self.parts[p as usize];
            if !part.ready.is_empty()
                || !part.expired.is_empty()
                || part.cursor() <= high_watermark(p)
            {
                return Some(now);
            }
            let candidates = [
                part.leases.first().map(|(t, _)| *t),
                part.delayed.first().map(|(t, _)| *t),
            ];
            for t in candidates.into_iter().flatten() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next.map(|t| t.max(now))
    }
}
