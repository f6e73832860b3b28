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
//!
//! Under a group `ordering` (`docs/groups.md#ordering`) or
//! `flow.key_concurrency` (`docs/groups.md#flow`) every gated delivery
//! belongs to a *gate* — its key, or its whole partition — and a gate
//! hands out at most its slots' worth of deliveries at a time (one under
//! an ordering), its lowest open sequences. The gate's other open
//! deliveries are *parked*: available, but in none of the indexes above
//! until the gate releases them, so a claim never walks past them and
//! costs what it costs ungated.
//!
//! Under `flow.key_rate` each partition keeps its keys' token buckets
//! (their TATs, [`pace`]), and a claim of a keyed delivery that finds no
//! token puts it in `delayed`, *paced*, due at the slot reserved for it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::backend::policy::{
    Candidate, GateView, Gating, GroupConfig, Held as Fenced, Hold, LeaseRow, OpenCounts, Pace,
    Share, WALK_PER_CLAIM, Write, claim_capacity, fence, is_quarantine, poison_write, poisoned,
    regate, settle_write, skipped_by_trim, take_token,
};
use crate::backend::{Error, Result};
use crate::model::{
    ConsumerId, EventId, Flow, Group, GroupOrdering, LeaseCursor, LeaseId, SettleOp, SettleTarget,
    Timestamp, clip_reason,
};

/// The key of the event at a sequence of the partition being claimed.
type KeyOf<'a> = &'a dyn Fn(u64) -> Option<String>;

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
    /// Why a quarantined head is parked (`docs/groups.md#quarantine`).
    reason: Option<String>,
}

#[derive(Debug)]
struct Slot {
    status: Status,
    attempt: u32,
    /// Set while `Leased`.
    lease: Option<Box<Held>>,
    /// Set while `Available` and waiting in `delayed` (or parked with a
    /// retry delay).
    due: Option<Timestamp>,
    /// Its gate under the group's ordering or flow; `None`: not gated.
    gate: Option<Arc<str>>,
    /// Available but held back by its gate: in no claim index.
    parked: bool,
    /// Paced by `flow.key_rate`: its slot is reserved, so it goes out
    /// when due without taking another token.
    paced: bool,
}

impl Slot {
    fn new(status: Status) -> Self {
        Slot {
            status,
            attempt: 0,
            lease: None,
            due: None,
            gate: None,
            parked: false,
            paced: false,
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
    /// Slots in `ready` or parked with attempt 0: part of `pending`.
    fresh: u64,
    /// Under an ordering: the gates with open deliveries.
    gates: HashMap<Arc<str>, Gate>,
    /// Under `flow.key_rate`: each key's TAT in microseconds ([`pace`]).
    rates: HashMap<String, i64>,
}

/// One key's (or partition's) open deliveries under an ordering or a
/// `key_concurrency`.
#[derive(Debug, Default)]
struct Gate {
    /// Its open sequences: available (parked or not) or leased.
    open: BTreeSet<u64>,
    /// How many of them are leased (expired or not).
    leased: u32,
    /// Those it released to the claim indexes, not yet claimed.
    released: BTreeSet<u64>,
}

impl Gate {
    /// Its heads: out, or released to the claims.
    fn heads(&self) -> usize {
        self.leased as usize + self.released.len()
    }
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
            gates: HashMap::new(),
            rates: HashMap::new(),
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

    /// Holds `seq` back (available, in no claim index) until its gate
    /// releases it. The caller has taken it out of every index.
    fn park(&mut self, seq: u64) {
        let slot = self.slot_mut(seq).expect("slot exists");
        slot.status = Status::Available;
        slot.parked = true;
        if slot.attempt == 0 {
            self.fresh += 1;
        }
    }

    /// Takes `seq` out of its gate's leased or released count (it is being
    /// settled, re-opened or parked again), and with `close` out of the
    /// gate's open deliveries; its gate, if it has one.
    fn ungate(&mut self, seq: u64, close: bool) -> Option<Arc<str>> {
        let slot = self.slot_mut(seq).expect("slot exists");
        let gate_name = slot.gate.clone()?;
        let (leased, parked, fresh) = (
            slot.status == Status::Leased,
            slot.parked,
            slot.attempt == 0,
        );
        slot.parked = false;
        if parked && fresh {
            self.fresh -= 1;
        }
        let gate = self.gates.entry(Arc::clone(&gate_name)).or_default();
        if leased {
            gate.leased = gate.leased.saturating_sub(1);
        }
        gate.released.remove(&seq);
        if close {
            gate.open.remove(&seq);
        }
        Some(gate_name)
    }

    /// Gives `gate` the heads the shared rule gives it ([`regate`]) with
    /// `slots` of them: its deliveries out and, for the slots left, its
    /// lowest open ones (parking again one released before that is no
    /// longer among them: a replay re-opened lower ones). Whether a
    /// delivery became claimable.
    fn release(&mut self, gate_name: &Arc<str>, slots: usize) -> bool {
        let Some(gate) = self.gates.get_mut(gate_name) else {
            return false;
        };
        if gate.open.is_empty() {
            self.gates.remove(gate_name);
            return false;
        }
        let gate = &self.gates[gate_name];
        let waiting = gate
            .open
            .iter()
            .copied()
            .filter(|&seq| self.slot(seq).is_some_and(|s| s.status != Status::Leased))
            .take(slots)
            .collect();
        let step = regate(&GateView {
            slots,
            out: gate.leased as usize,
            heads: gate.released.iter().copied().collect(),
            waiting,
        });
        for before in step.park {
            if let Some(gate) = self.gates.get_mut(gate_name) {
                gate.released.remove(&before);
            }
            let due = self.slot(before).and_then(|s| s.due);
            self.unindex(before);
            self.park(before);
            self.slot_mut(before).expect("slot exists").due = due;
        }
        let released = !step.release.is_empty();
        for head in step.release {
            self.gates
                .get_mut(gate_name)
                .expect("a gate with a head")
                .released
                .insert(head);
            let slot = self.slot_mut(head).expect("slot exists");
            debug_assert!(slot.parked, "a gate's unreleased open delivery is parked");
            slot.parked = false;
            let (due, fresh) = (slot.due, slot.attempt == 0);
            if fresh {
                self.fresh -= 1;
            }
            match due {
                Some(due) => {
                    self.delayed.insert((due, head));
                }
                None => self.make_ready(head),
            }
        }
        released
    }

    /// Opens `seq` in its gate (named by the event's key under the
    /// group's gating), parked, and lets the gate release what is next.
    fn gate_open(&mut self, seq: u64, gate_name: Arc<str>, slots: usize) -> bool {
        self.slot_mut(seq).expect("slot exists").gate = Some(Arc::clone(&gate_name));
        self.gates
            .entry(Arc::clone(&gate_name))
            .or_default()
            .open
            .insert(seq);
        self.park(seq);
        self.release(&gate_name, slots)
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

    /// Claims the lowest claimable sequence, if any. Under a gating an
    /// unseen event whose gate is full (or has deliveries parked) is
    /// parked as the cursor passes it (at most [`WALK_PER_CLAIM`] of them
    /// per call).
    fn claim_next(
        &mut self,
        high_watermark: u64,
        consumer_id: &ConsumerId,
        lease_ms: u64,
        now: Timestamp,
        gating: Gating,
        key_of: KeyOf<'_>,
    ) -> Option<(u64, u32, LeaseId, Timestamp)> {
        let mut walked = 0;
        let seq = loop {
            if walked >= WALK_PER_CLAIM {
                return None;
            }
            let ready = self.ready.first().copied();
            let expired = self.expired.first().copied();
            let cursor = self.cursor();
            let unseen = (cursor <= high_watermark).then_some(cursor);
            let seq = [ready, expired, unseen].into_iter().flatten().min()?;
            if Some(seq) == ready {
                self.ready.remove(&seq);
                let slot = self.slot(seq).expect("slot exists");
                let (fresh, paced) = (slot.attempt == 0, slot.paced);
                if fresh {
                    self.fresh -= 1;
                }
                if !self.paced(seq, Candidate::Due { paced }, now, gating, key_of) {
                    walked += 1;
                    continue;
                }
                if let Some(gate) = self.slot(seq).and_then(|s| s.gate.clone()) {
                    let gate = self.gates.entry(gate).or_default();
                    gate.released.remove(&seq);
                    gate.leased += 1;
                }
                break seq;
            }
            if Some(seq) == expired {
                self.expired.remove(&seq);
                // Out again at once, in its own slot, but counted: the
                // key's next claims wait for its token (docs/groups.md#flow).
                let out = self.paced(seq, Candidate::Expired, now, gating, key_of);
                debug_assert!(out, "an expired lease goes out again");
                break seq;
            }
            self.slots.push_back(Slot::new(Status::Available));
            let key = key_of(seq);
            let Some(gate_name) = gating.gate(key.as_deref()).map(Arc::<str>::from) else {
                if self.paced(seq, Candidate::Unseen, now, gating, key_of) {
                    break seq;
                }
                walked += 1;
                continue;
            };
            self.slot_mut(seq).expect("slot exists").gate = Some(Arc::clone(&gate_name));
            let gate = self.gates.entry(Arc::clone(&gate_name)).or_default();
            // Free: nothing parked (every open one is a head) and a slot left.
            let heads = gate.heads();
            if gate.open.len() == heads && heads < gating.slots() {
                gate.open.insert(seq);
                if self.paced(seq, Candidate::Unseen, now, gating, key_of) {
                    self.gates.get_mut(&gate_name).expect("its gate").leased += 1;
                    break seq;
                }
                let gate = self.gates.get_mut(&gate_name).expect("its gate");
                gate.released.insert(seq);
                walked += 1;
                continue;
            }
            gate.open.insert(seq);
            self.park(seq);
            walked += 1;
        };
        let lease_id = LeaseId::generate();
        let expires_at = now.add_ms(lease_ms);
        let slot = self.slot_mut(seq).expect("slot exists");
        slot.status = Status::Leased;
        slot.attempt = slot.attempt.saturating_add(1);
        slot.due = None;
        slot.paced = false;
        slot.lease = Some(Box::new(Held {
            lease_id: lease_id.clone(),
            consumer_id: consumer_id.clone(),
            leased_at: now,
            expires_at,
            reason: None,
        }));
        let attempt = slot.attempt;
        self.leases.insert((expires_at, seq));
        Some((seq, attempt, lease_id, expires_at))
    }

    /// Whether the claim of `seq` (taken out of its claim index) goes out
    /// now under `flow.key_rate` ([`take_token`]); one that finds no token
    /// is put in `delayed`, paced, due at its reserved slot (its gate's
    /// accounting is the caller's).
    fn paced(
        &mut self,
        seq: u64,
        candidate: Candidate,
        now: Timestamp,
        gating: Gating,
        key_of: KeyOf<'_>,
    ) -> bool {
        let (Some(rate), Some(key)) = (gating.key_rate(), key_of(seq)) else {
            return true;
        };
        if self.rates.len() >= 4096 {
            // A TAT in the past is a full bucket: forget those.
            let now_us = now.as_millis().saturating_mul(1000);
            self.rates.retain(|_, t| *t > now_us);
        }
        let mut tat = self.rates.get(&key).copied();
        let found = take_token(&rate, candidate, &mut tat, now);
        if let Some(tat) = tat {
            self.rates.insert(key, tat);
        }
        match found {
            Pace::Now => true,
            Pace::At(due) => {
                let slot = self.slot_mut(seq).expect("slot exists");
                slot.due = Some(due);
                slot.paced = true;
                self.delayed.insert((due, seq));
                false
            }
        }
    }

    /// The fencing check ([`fence`]): the slot must be leased under
    /// `target`.
    fn check_fence(&self, seq: u64, target: &SettleTarget) -> Result<&Held> {
        let held = self
            .slot(seq)
            .filter(|s| s.status == Status::Leased)
            .and_then(|s| s.lease.as_deref());
        let id = held.map(|h| h.lease_id.as_str());
        fence(
            id.map(|id| Fenced {
                lease_id: id,
                receipt: id,
            }),
            target,
        )?;
        held.ok_or(Error::StaleLease)
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
    /// The event's id, kept once retention removed the event.
    pub(super) event_id: Option<EventId>,
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
    /// Events retention removed before the group settled them.
    skipped: u64,
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
            skipped: 0,
        }
    }

    /// Dead-letters `seq`; whether its gate released a delivery.
    fn kill(&mut self, partition: u32, seq: u64, reason: String, now: Timestamp) -> bool {
        let slots = self.config.gating().slots();
        let part = &mut self.parts[partition as usize];
        let gate = part.ungate(seq, true);
        part.unindex(seq);
        let slot = part.slot_mut(seq).expect("slot exists");
        slot.status = Status::Dead;
        let attempt = slot.attempt;
        part.walk();
        let released = gate.is_some_and(|g| part.release(&g, slots));
        self.dead.insert(
            (seq, partition),
            DeadRecord {
                event_id: None,
                attempt,
                reason: clip_reason(&reason),
                at: now,
            },
        );
        released
    }

    /// Parks a leased (or just expired) head for good
    /// (`docs/groups.md#quarantine`): the quarantine holds it under a fresh
    /// lease that never expires, so its gate hands out nothing more.
    fn quarantine(&mut self, partition: u32, seq: u64, reason: &str, now: Timestamp) {
        let part = &mut self.parts[partition as usize];
        let old = part.slot(seq).and_then(|s| s.lease.as_deref());
        if let Some(expires_at) = old.map(|held| held.expires_at)
            && !part.leases.remove(&(expires_at, seq))
        {
            part.expired.remove(&seq);
        }
        let hold = Hold::new(reason, now);
        part.leases.insert((hold.expires_at, seq));
        let slot = part.slot_mut(seq).expect("slot exists");
        slot.status = Status::Leased;
        slot.lease = Some(Box::new(Held {
            lease_id: hold.lease_id,
            consumer_id: hold.consumer_id,
            leased_at: hold.leased_at,
            expires_at: hold.expires_at,
            reason: Some(hold.reason),
        }));
    }

    /// Claims up to `limit` deliveries from `partitions`, shared among them
    /// by the round-robin rule, starting one partition later on every call.
    /// `key_of` gives an event's key (read only under an ordering).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim(
        &mut self,
        partitions: &[u32],
        high_watermark: impl Fn(u32) -> u64,
        key_of: impl Fn(u32, u64) -> Option<String>,
        limit: usize,
        consumer_id: &ConsumerId,
        lease_ms: u64,
        now: Timestamp,
    ) -> Vec<Claimed> {
        let max_attempts = self.group.max_attempts;
        for &p in partitions {
            // A dead-lettered head lets its gate's next delivery through,
            // into `delayed` if it waits on a retry: promote again, so one
            // whose time has come is claimable in this fetch.
            loop {
                let poison = self.parts[p as usize].promote(now, max_attempts);
                if poison.is_empty() {
                    break;
                }
                for seq in poison {
                    let part = &self.parts[p as usize];
                    let gated = part.slot(seq).is_some_and(|s| s.gate.is_some());
                    match poison_write(gated, &self.config) {
                        Write::Quarantine(reason) => self.quarantine(p, seq, &reason, now),
                        Write::Dead(reason) => drop(self.kill(p, seq, reason, now)),
                        _ => unreachable!("the poison guard dead-letters or quarantines"),
                    }
                }
            }
        }
        if partitions.is_empty() {
            return Vec::new();
        }
        let first = self.next_first % partitions.len();
        self.next_first = self.next_first.wrapping_add(1);
        let gating = self.config.gating();
        let mut out = Vec::new();
        let claim = |part: &mut PartState, p: u32| {
            let key_of = |seq: u64| key_of(p, seq);
            let (sequence, attempt, lease_id, expires_at) = part.claim_next(
                high_watermark(p),
                consumer_id,
                lease_ms,
                now,
                gating,
                &key_of,
            )?;
            Some(Claimed {
                partition: p,
                sequence,
                attempt,
                lease_id,
                leased_at: now,
                expires_at,
            })
        };
        // What a partition can give is bounded by its claimable deliveries
        // and unseen events; under an ordering, only claiming tells how
        // many of them are heads. The shared rule asks each partition for
        // its share and hands what a spent one could not give to the
        // others.
        let bound: Vec<usize> = partitions
            .iter()
            .map(|&p| {
                let part = &self.parts[p as usize];
                let claimable = part.ready.len() + part.expired.len();
                claim_capacity(claimable, part.cursor(), high_watermark(p))
            })
            .collect();
        let mut share = Share::new(bound, limit, first);
        loop {
            let asks = share.asks();
            if asks.iter().all(|a| *a == 0) {
                break;
            }
            for (i, (&p, ask)) in partitions.iter().zip(asks).enumerate() {
                let part = &mut self.parts[p as usize];
                let before = out.len();
                for _ in 0..ask {
                    let Some(claimed) = claim(part, p) else {
                        break;
                    };
                    out.push(claimed);
                }
                share.gave(i, ask, out.len() - before);
            }
        }
        out.sort_unstable_by_key(|c| (c.partition, c.sequence));
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
        let (attempt, gated) = part
            .slot(seq)
            .map_or((0, false), |s| (s.attempt, s.gate.is_some()));
        let write = settle_write(op, attempt, gated, &self.config, now);
        if let Write::Quarantine(reason) = write {
            self.quarantine(partition, seq, &reason, now);
            return Ok(Settled::Done);
        }
        if let Write::Dead(reason) = write {
            let released = self.kill(partition, seq, reason, now);
            return Ok(if released {
                Settled::Requeued
            } else {
                Settled::Done
            });
        }
        let slots = self.config.gating().slots();
        let part = &mut self.parts[partition as usize];
        let close = matches!(write, Write::Ack);
        let gate = part.ungate(seq, close);
        part.unindex(seq);
        let settled = match (write, &gate) {
            (Write::Ack, _) => {
                part.slot_mut(seq).expect("slot exists").status = Status::Acked;
                part.walk();
                Settled::Done
            }
            (Write::Retry { due, .. }, Some(_)) => {
                // The gate decides when it is out again: at once if it is
                // still the gate's lowest, after its delay if it has one.
                part.slot_mut(seq).expect("slot exists").due = due;
                part.park(seq);
                Settled::Done
            }
            (Write::Retry { due: None, .. }, None) => {
                part.make_ready(seq);
                Settled::Requeued
            }
            (Write::Retry { due: Some(due), .. }, None) => {
                let slot = part.slot_mut(seq).expect("slot exists");
                slot.status = Status::Available;
                slot.due = Some(due);
                part.delayed.insert((due, seq));
                Settled::Done
            }
            (Write::Dead(_) | Write::Quarantine(_), _) => {
                unreachable!("dead letters and quarantines are written above")
            }
        };
        match gate {
            Some(gate) if part.release(&gate, slots) => Ok(Settled::Requeued),
            _ => Ok(settled),
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
    /// Returns whether it was not already open. Under an ordering it goes
    /// back into its gate in sequence order: out at once only if nothing
    /// of its gate is out and nothing lower is open (`key_of` gives the
    /// event's key).
    pub(super) fn reopen(
        &mut self,
        partition: u32,
        seq: u64,
        fresh_attempts: bool,
        key_of: &impl Fn(u32, u64) -> Option<String>,
    ) -> bool {
        let gating = self.config.gating();
        let part = &mut self.parts[partition as usize];
        if !part.ensure_slot(seq) {
            return false;
        }
        let before = part.slot(seq).expect("slot exists").status;
        let gate = part.ungate(seq, false);
        part.unindex(seq);
        part.slot_mut(seq).expect("slot exists").paced = false;
        if fresh_attempts {
            part.slot_mut(seq).expect("slot exists").attempt = 0;
        }
        let gate = gate.or_else(|| {
            let key = key_of(partition, seq);
            gating.gate(key.as_deref()).map(Arc::<str>::from)
        });
        match gate {
            Some(gate) => {
                part.slot_mut(seq).expect("slot exists").due = None;
                part.gate_open(seq, gate, gating.slots());
            }
            None => part.make_ready(seq),
        }
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
    pub(super) fn reopen_after(
        &mut self,
        partition: u32,
        after: u64,
        hw: u64,
        key_of: &impl Fn(u32, u64) -> Option<String>,
    ) -> u64 {
        let cursor = self.parts[partition as usize].cursor();
        (after.saturating_add(1)..cursor.min(hw.saturating_add(1)))
            .map(|seq| u64::from(self.reopen(partition, seq, false, key_of)))
            .sum()
    }

    /// Sends dead letters back; `which` = None means all.
    pub(super) fn redrive(
        &mut self,
        which: Option<Vec<(u32, u64)>>,
        first_of: &impl Fn(u32) -> u64,
        key_of: &impl Fn(u32, u64) -> Option<String>,
    ) -> u64 {
        let targets: Vec<(u32, u64)> = match which {
            None => self.dead.keys().map(|&(seq, p)| (p, seq)).collect(),
            // A quarantined head is redriven like a dead letter
            // (`docs/groups.md#quarantine`).
            Some(list) => list
                .into_iter()
                .filter(|(p, seq)| {
                    self.dead.contains_key(&(*seq, *p)) || self.quarantined(*p, *seq)
                })
                .collect(),
        };
        let targets = targets.into_iter().filter(|&(p, seq)| seq >= first_of(p));
        let mut count = 0;
        for (p, seq) in targets {
            if self.reopen(p, seq, true, key_of) {
                count += 1;
            }
        }
        count
    }

    /// Whether `seq` is a head the quarantine holds.
    fn quarantined(&self, partition: u32, seq: u64) -> bool {
        let part = &self.parts[partition as usize];
        part.slot(seq)
            .filter(|s| s.status == Status::Leased)
            .and_then(|s| s.lease.as_deref())
            .is_some_and(|held| is_quarantine(&held.consumer_id))
    }

    /// Retention removed `partition`'s events from `first` up to `upto`
    /// (exclusive): the group moves
    /// to the new log start. Its open deliveries there close (their gates
    /// let the next one out), dead letters stay; returns how many of the
    /// removed events it had not settled (`docs/log.md#retention`).
    pub(super) fn trim(
        &mut self,
        partition: u32,
        (first, upto): (u64, u64),
        id_of: &dyn Fn(u64) -> Option<EventId>,
    ) -> u64 {
        // Dead letters stay; they keep their event's id.
        for ((seq, p), record) in self.dead.range_mut((first, 0)..(upto, 0)) {
            if *p == partition && record.event_id.is_none() {
                record.event_id = id_of(*seq);
            }
        }
        let part = &mut self.parts[partition as usize];
        let cursor = part.cursor();
        let mut skipped = 0;
        let mut gates = Vec::new();
        if part.frontier + 1 < upto {
            let mut open = 0;
            for seq in (part.frontier + 1)..upto.min(cursor) {
                if part.slot(seq).is_none_or(Slot::is_settled) {
                    continue;
                }
                open += 1;
                gates.extend(part.ungate(seq, true));
                part.unindex(seq);
                part.slot_mut(seq).expect("slot exists").status = Status::Outside;
            }
            skipped = skipped_by_trim(open, cursor, part.frontier + 1, upto);
            part.frontier = upto - 1;
        }
        while part.lo < upto && !part.slots.is_empty() {
            part.slots.pop_front();
            part.lo += 1;
        }
        if part.slots.is_empty() && part.lo < upto {
            part.lo = upto;
        }
        part.walk();
        let slots = self.config.gating().slots();
        for gate in gates {
            part.release(&gate, slots);
        }
        self.skipped += skipped;
        skipped
    }

    /// Events retention removed before the group settled them.
    pub(super) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Where the dead letter of a removed event with `id` was.
    pub(super) fn dead_position(&self, id: &EventId) -> Option<(u32, u64)> {
        (self.dead.iter())
            .find(|(_, r)| r.event_id.as_ref() == Some(id))
            .map(|(&(seq, p), _)| (p, seq))
    }

    /// Forgets `partition`'s deliveries and restarts it after `start`.
    pub(super) fn reset(&mut self, partition: u32, start: u64) {
        self.parts[partition as usize] = PartState::new(start);
        self.dead.retain(|&(_, p), _| p != partition);
    }

    /// Sets the group's ordering and flow, once every partition was reset
    /// (`ResetRequest::settings_after`): no delivery is left to re-gate.
    pub(super) fn set_gating(&mut self, ordering: GroupOrdering, flow: Flow) {
        self.group.ordering = ordering;
        self.group.flow = flow;
        self.config = GroupConfig::from(&self.group);
    }

    /// The group's ordering and flow.
    pub(super) fn gating_settings(&self) -> (GroupOrdering, Flow) {
        (self.group.ordering, self.group.flow)
    }

    /// One partition's open deliveries, as the shared lag rules count them.
    pub(super) fn open_counts(&self, partition: u32, now: Timestamp) -> OpenCounts {
        let part = &self.parts[partition as usize];
        let first_open = part.frontier + 1;
        // A paced delivery never handed out whose slot has come is pending,
        // though no fetch has moved it out of `delayed` yet.
        let due_fresh = part
            .delayed
            .range(..(now.add_ms(1), 0))
            .filter(|(_, seq)| part.slot(*seq).is_some_and(|s| s.attempt == 0))
            .count() as u64;
        OpenCounts {
            first_open: (first_open < part.cursor()).then_some(first_open),
            leased: (part.leases.len() + part.expired.len()) as u64,
            fresh: part.fresh + due_fresh,
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

    /// The first `want` leased deliveries after `after` in (partition,
    /// sequence) order, expired ones included: those in `leases` and in
    /// `expired`, the ones [`GroupState::inflight`] counts. `id_of` gives
    /// an event's id (a leased delivery's event is always in the log).
    pub(super) fn leases_after(
        &self,
        after: Option<LeaseCursor>,
        want: usize,
        id_of: &dyn Fn(u32, u64) -> Option<EventId>,
    ) -> Vec<LeaseRow> {
        let mut out = Vec::new();
        let first = after.map_or(0, |a| a.partition);
        for (p, part) in self.parts.iter().enumerate().skip(first as usize) {
            let p = p as u32;
            let above = after.filter(|a| a.partition == p).map_or(0, |a| a.sequence);
            let mut seqs: Vec<u64> = (part.leases.iter().map(|&(_, seq)| seq))
                .chain(part.expired.iter().copied())
                .filter(|&seq| seq > above)
                .collect();
            seqs.sort_unstable();
            for seq in seqs {
                if out.len() >= want {
                    return out;
                }
                let Some(slot) = part.slot(seq) else { continue };
                let (Some(held), Some(event_id)) = (slot.lease.as_deref(), id_of(p, seq)) else {
                    continue;
                };
                out.push(LeaseRow {
                    partition: p,
                    sequence: seq,
                    event_id,
                    lease_id: held.lease_id.clone(),
                    consumer_id: held.consumer_id.clone(),
                    attempt: slot.attempt,
                    leased_at: held.leased_at,
                    expires_at: held.expires_at,
                    reason: held.reason.clone(),
                });
            }
        }
        out
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
