//! The reference model: a stream with partitions and per-partition
//! sequences, groups with `max_attempts`, a backoff schedule and an
//! `ordering` and a `flow` (`key_concurrency`, `key_rate`), deliveries that are available (due at a time, paced or not), leased
//! (under a lease id, until `expires_at`), acked or dead-lettered, and a
//! cursor per partition. Nothing else: no index, no cache, no store's
//! idea of a "head" kept anywhere — every rule is evaluated from these
//! facts when it is asked, straight from `docs/groups.md`.

use std::collections::{BTreeMap, HashMap};

use crate::backend::policy::is_quarantine;
use crate::backend::{Partitions, Redrive, Replay};
use crate::model::{
    EventId, Flow, GroupInfo, GroupName, GroupOrdering, GroupSpec, Lag, LeaseId, OnExhausted,
    PartitionLag, SettleOp, SettleTarget, Settlement, StartAfter, StartPosition, StreamName,
    Timestamp,
};

/// An error code the model predicts (`docs/errors.md`).
pub(super) type Code = &'static str;

/// Where one delivery stands (docs/groups.md#deliveries).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum State {
    /// Claimable once `due` has come (and, under an ordering, once it is
    /// its gate's head).
    Available {
        due: Timestamp,
    },
    /// Held under `lease_id`; claimable by others from `expires_at` on.
    Leased {
        lease_id: LeaseId,
        /// The backend's settle identity for this claim.
        receipt: Option<String>,
        leased_at: Timestamp,
        expires_at: Timestamp,
        /// Held by the quarantine (docs/groups.md#quarantine), with its
        /// head's last failure; its lease id is the backend's, learned
        /// from the leases it lists ([`Model::learn_holds`]).
        hold: Option<String>,
    },
    Acked,
    Dead {
        reason: String,
        at: Timestamp,
    },
}

/// One event for one group.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    /// Claims so far, the current one included.
    pub(super) attempt: u32,
    pub(super) state: State,
    /// Available at the slot its key's bucket reserved for it
    /// (docs/groups.md#flow): it goes out when due without a token.
    pub(super) paced: bool,
}

impl Delivery {
    /// Available or leased: not terminal.
    pub(super) fn is_open(&self) -> bool {
        matches!(self.state, State::Available { .. } | State::Leased { .. })
    }

    /// Available and due, or leased with the lease expired: what a claim
    /// may take when nothing else holds it back.
    fn is_due(&self, now: Timestamp) -> bool {
        match self.state {
            State::Available { due } => due <= now,
            State::Leased { expires_at, .. } => expires_at <= now,
            _ => false,
        }
    }
}

/// One group's state in one partition.
#[derive(Debug, Clone)]
pub(super) struct Part {
    /// The exclusive start sequence of the group's creation or last reset.
    pub(super) start: u64,
    /// The next sequence the group will reach; every event below it from
    /// the start point on has a delivery.
    pub(super) cursor: u64,
    pub(super) deliveries: BTreeMap<u64, Delivery>,
    /// Under `flow.key_rate`, each key's bucket as its theoretical
    /// arrival time in microseconds (docs/groups.md#flow); none: full.
    pub(super) tats: HashMap<String, i64>,
}

impl Part {
    fn starting_after(start: u64) -> Self {
        Part {
            start,
            cursor: start + 1,
            deliveries: BTreeMap::new(),
            tats: HashMap::new(),
        }
    }

    /// The highest F such that everything from the start to F is terminal:
    /// one less than the lowest open delivery, or than the cursor.
    fn frontier(&self) -> u64 {
        let first_open = self
            .deliveries
            .iter()
            .find(|(_, d)| d.is_open())
            .map(|(seq, _)| *seq);
        first_open.unwrap_or(self.cursor).min(self.cursor) - 1
    }
}

/// One consumer group.
#[derive(Debug, Clone)]
pub(super) struct ModelGroup {
    pub(super) name: GroupName,
    pub(super) max_attempts: u32,
    pub(super) backoff: Vec<u64>,
    pub(super) ordering: GroupOrdering,
    pub(super) flow: Flow,
    pub(super) on_exhausted: OnExhausted,
    pub(super) parts: Vec<Part>,
}

impl ModelGroup {
    /// The delay of a nack without its own delay after `attempt`: the
    /// schedule indexed by attempt − 1, its last entry repeating, else 0.
    fn backoff_ms(&self, attempt: u32) -> u64 {
        let index = attempt.saturating_sub(1) as usize;
        self.backoff
            .get(index)
            .or(self.backoff.last())
            .copied()
            .unwrap_or(0)
    }
}

/// One event of the log, as the model needs it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) id: EventId,
    pub(super) timestamp: Timestamp,
    pub(super) key: Option<String>,
}

/// What one gate of one partition holds, as a claim sees it.
#[derive(Debug, Default)]
struct GateScan {
    /// Its leased deliveries (expired or not).
    leased: Vec<u64>,
    /// Its open deliveries that are not leased, then its events the group
    /// has not reached yet, in sequence order.
    waiting: Vec<u64>,
}

/// One stream and its groups.
#[derive(Debug, Clone)]
pub(super) struct Model {
    /// Per partition, the events (index = sequence − 1).
    pub(super) log: Vec<Vec<Entry>>,
    /// Where each event id lives.
    pub(super) ids: HashMap<EventId, (u32, u64)>,
    pub(super) groups: Vec<ModelGroup>,
    /// A known deviation of the Redis backend, documented here instead of
    /// fixed (see [`Model::replay`]).
    pub(super) redis_forgets_first_attempt_acks_before_the_start: bool,
}

/// `(event id, partition, sequence, attempt, reason, at)` of a dead letter.
pub(super) type DeadRow = (EventId, u32, u64, u32, String, Timestamp);

/// `(key, partition, sequence, attempt, reason, parked at)` of a parked key.
pub(super) type ParkedRow = (Option<String>, u32, u64, u32, String, Timestamp);

/// The lease id of a hold the model has not learned yet.
fn unlearned() -> LeaseId {
    LeaseId::parse("(unlearned hold)").expect("a lease id")
}

/// `(event id, partition, sequence, lease id, attempt, leased at, expires
/// at, expired)` of a lease a group has out.
pub(super) type OutRow = (EventId, u32, u64, LeaseId, u32, Timestamp, Timestamp, bool);

/// The gate of an event with `key` under `ordering` and `flow`
/// (docs/groups.md#ordering, docs/groups.md#flow): its key under `key` or
/// a `key_concurrency` (none for a keyless event: not gated), one gate for
/// the whole partition under `partition`, none otherwise.
fn gate_of<'a>(ordering: GroupOrdering, flow: &Flow, key: Option<&'a str>) -> Option<&'a str> {
    match ordering {
        GroupOrdering::None if flow.key_concurrency.is_some() => key,
        GroupOrdering::None => None,
        GroupOrdering::Key => key,
        GroupOrdering::Partition => Some(""),
    }
}

impl Model {
    pub(super) fn new(partitions: u32) -> Self {
        Model {
            log: vec![Vec::new(); partitions as usize],
            ids: HashMap::new(),
            groups: Vec::new(),
            redis_forgets_first_attempt_acks_before_the_start: false,
        }
    }

    pub(super) fn partition_count(&self) -> u32 {
        self.log.len() as u32
    }

    pub(super) fn hwm(&self, p: u32) -> u64 {
        self.log[p as usize].len() as u64
    }

    fn entry(&self, p: u32, seq: u64) -> &Entry {
        &self.log[p as usize][seq as usize - 1]
    }

    pub(super) fn event_id(&self, p: u32, seq: u64) -> &EventId {
        &self.entry(p, seq).id
    }

    pub(super) fn timestamp(&self, p: u32, seq: u64) -> Timestamp {
        self.entry(p, seq).timestamp
    }

    pub(super) fn key(&self, p: u32, seq: u64) -> Option<&str> {
        self.entry(p, seq).key.as_deref()
    }

    /// The gate of event `p`/`seq` in group `g`; `None`: not ordered.
    fn gate(&self, g: usize, p: u32, seq: u64) -> Option<&str> {
        let group = &self.groups[g];
        gate_of(group.ordering, &group.flow, self.key(p, seq))
    }

    /// Whether group `g`'s deliveries have gates: an ordering, or a
    /// `key_concurrency`.
    pub(super) fn is_gated(&self, g: usize) -> bool {
        let group = &self.groups[g];
        group.ordering != GroupOrdering::None || group.flow.key_concurrency.is_some()
    }

    /// Whether group `g` has a key rate (docs/groups.md#flow).
    pub(super) fn is_paced(&self, g: usize) -> bool {
        self.groups[g].flow.key_rate.is_some()
    }

    /// How many deliveries of one gate of group `g` may be out or handed
    /// out at once: its `key_concurrency`, else one (an ordering).
    fn slots(&self, g: usize) -> usize {
        self.groups[g].flow.key_concurrency.unwrap_or(1) as usize
    }

    /// The selected partitions, sorted; one out of range is `invalid_partition`.
    pub(super) fn resolve(&self, parts: &Partitions) -> std::result::Result<Vec<u32>, Code> {
        match parts {
            Partitions::All => Ok((0..self.partition_count()).collect()),
            Partitions::Only(list) => {
                let mut out = list.clone();
                out.sort_unstable();
                out.dedup();
                if out.iter().any(|p| *p >= self.partition_count()) {
                    return Err("invalid_partition");
                }
                Ok(out)
            }
        }
    }

    /// The exclusive start sequence of partition `p` (docs/groups.md#groups-and-start-positions).
    fn start_point(&self, p: u32, start: &StartPosition) -> u64 {
        match start {
            StartPosition::Beginning => 0,
            StartPosition::After(StartAfter::All(seq)) => *seq,
            StartPosition::After(StartAfter::PerPartition(map)) => {
                map.get(&p).copied().unwrap_or(0)
            }
            StartPosition::At(t) => self.log[p as usize]
                .iter()
                .position(|e| e.timestamp >= *t)
                .map_or(self.hwm(p), |i| i as u64),
        }
    }

    pub(super) fn add_group(&mut self, spec: &GroupSpec) {
        let parts = (0..self.partition_count())
            .map(|p| Part::starting_after(self.start_point(p, &spec.start)))
            .collect();
        self.groups.push(ModelGroup {
            name: spec.name.clone(),
            max_attempts: spec.max_attempts,
            on_exhausted: spec.on_exhausted,
            backoff: spec.retry_backoff_ms.clone(),
            ordering: spec.ordering,
            flow: spec.flow,
            parts,
        });
    }

    /// Appends a batch: each input is new (next sequence of its partition)
    /// or a duplicate of a known id, an earlier one of the batch included
    /// (a duplicate keeps the stored event, its key included). Returns
    /// `(id, partition, sequence, duplicate)` per input; `None` ids are
    /// filled in by `generated` (the backend's choice).
    pub(super) fn append(
        &mut self,
        inputs: &[(Option<EventId>, u32, Option<String>)],
        generated: &[Option<EventId>],
        now: Timestamp,
    ) -> Vec<(EventId, u32, u64, bool)> {
        let mut out = Vec::new();
        for ((id, p, key), generated) in inputs.iter().zip(generated) {
            let id = id.clone().or_else(|| generated.clone()).expect("an id");
            if let Some(&(kp, ks)) = self.ids.get(&id) {
                out.push((id, kp, ks, true));
                continue;
            }
            self.log[*p as usize].push(Entry {
                id: id.clone(),
                timestamp: now,
                key: key.clone(),
            });
            let seq = self.hwm(*p);
            self.ids.insert(id.clone(), (*p, seq));
            out.push((id, *p, seq, false));
        }
        out
    }

    /// The poison guard at the start of a fetch: in the selected partitions
    /// an expired lease on its last attempt is dead-lettered.
    pub(super) fn guard(&mut self, g: usize, parts: &[u32], now: Timestamp) {
        let max_attempts = self.groups[g].max_attempts;
        for &p in parts {
            let poisoned: Vec<u64> = (self.groups[g].parts[p as usize].deliveries.iter())
                .filter(|(_, d)| {
                    matches!(d.state, State::Leased { expires_at, .. } if expires_at <= now)
                        && d.attempt >= max_attempts
                })
                .map(|(seq, _)| *seq)
                .collect();
            for seq in poisoned {
                let state = self.exhausted(g, p, seq, "max_attempts_expired".into(), now);
                self.delivery_mut(g, p, seq).state = state;
            }
        }
    }

    /// What a delivery that used its last attempt becomes
    /// (docs/groups.md#quarantine): a dead letter, or, gated in a group
    /// that quarantines, held by the quarantine for good, its lease id yet
    /// to be learned.
    fn exhausted(&self, g: usize, p: u32, seq: u64, reason: String, now: Timestamp) -> State {
        if self.groups[g].on_exhausted == OnExhausted::Quarantine && self.gate(g, p, seq).is_some()
        {
            State::Leased {
                lease_id: unlearned(),
                receipt: None,
                leased_at: now,
                expires_at: Timestamp::MAX,
                hold: Some(reason),
            }
        } else {
            State::Dead { reason, at: now }
        }
    }

    /// Gives each hold of group `g` the lease id the backend lists for it
    /// (`rows`: its leases), once: it must be held by the quarantine, not
    /// one `known` already. `Err` says what is wrong.
    pub(super) fn learn_holds(
        &mut self,
        g: usize,
        rows: &[crate::model::HeldLease],
        known: &std::collections::HashSet<LeaseId>,
    ) -> std::result::Result<(), String> {
        for (p, part) in self.groups[g].parts.iter_mut().enumerate() {
            for (seq, d) in part.deliveries.iter_mut() {
                let State::Leased {
                    lease_id,
                    hold: Some(_),
                    ..
                } = &mut d.state
                else {
                    continue;
                };
                if *lease_id != unlearned() {
                    continue;
                }
                let row = rows
                    .iter()
                    .find(|r| r.partition == p as u32 && r.sequence == *seq);
                let Some(row) = row.filter(|r| is_quarantine(&r.consumer_id)) else {
                    return Err(format!(
                        "p{p}/{seq} should be held by the quarantine; the backend lists {row:?}"
                    ));
                };
                if known.contains(&row.lease_id) {
                    return Err(format!(
                        "the hold on p{p}/{seq} reuses lease id {}",
                        row.lease_id
                    ));
                }
                *lease_id = row.lease_id.clone();
            }
        }
        Ok(())
    }

    /// Group `g`'s parked keys as `(key, partition, sequence, attempt,
    /// reason, parked at)`, in (partition, sequence) order.
    pub(super) fn parked(&self, g: usize) -> Vec<ParkedRow> {
        let group = &self.groups[g];
        let mut out = Vec::new();
        for (p, part) in group.parts.iter().enumerate() {
            let p = p as u32;
            for (seq, d) in &part.deliveries {
                if let State::Leased {
                    hold: Some(reason),
                    leased_at,
                    ..
                } = &d.state
                {
                    let key = match group.ordering {
                        GroupOrdering::Partition => None,
                        _ => self.key(p, *seq).map(str::to_owned),
                    };
                    out.push((key, p, *seq, d.attempt, reason.clone(), *leased_at));
                }
            }
        }
        out
    }

    /// A release (docs/groups.md#quarantine) of the parked heads at
    /// `heads`: each goes out again with its attempts started over, or,
    /// with `skip`, to the dead letters.
    pub(super) fn release(&mut self, g: usize, heads: &[(u32, u64)], skip: bool, now: Timestamp) {
        for &(p, seq) in heads {
            let d = self.delivery_mut(g, p, seq);
            let State::Leased {
                hold: Some(reason), ..
            } = &d.state
            else {
                unreachable!("a parked head")
            };
            if skip {
                d.state = State::Dead {
                    reason: crate::backend::quarantine::skipped_reason(reason),
                    at: now,
                };
            } else {
                *d = Delivery {
                    attempt: 0,
                    state: State::Available { due: now },
                    paced: false,
                };
            }
        }
    }

    /// The claimable sequences of partition `p`, lowest first
    /// (docs/groups.md#claims): available and due, leased but expired, and
    /// the events the group has not reached yet — and under an ordering
    /// (docs/groups.md#ordering) of each gate only its head (see
    /// [`Model::heads`]), when it is due or not reached yet. Every earlier
    /// delivery of the gate is then terminal, so a key's events go in
    /// sequence order, re-opened ones included.
    pub(super) fn claimable(&self, g: usize, p: u32, now: Timestamp) -> Vec<u64> {
        let part = &self.groups[g].parts[p as usize];
        let mut out: Vec<u64> = part
            .deliveries
            .iter()
            .filter(|(seq, d)| self.gate(g, p, **seq).is_none() && d.is_due(now))
            .map(|(seq, _)| *seq)
            .collect();
        out.extend((part.cursor..=self.hwm(p)).filter(|seq| self.gate(g, p, *seq).is_none()));
        out.extend(
            self.heads(g, p)
                .into_iter()
                .filter(|head| *head >= part.cursor || part.deliveries[head].is_due(now)),
        );
        out.sort_unstable();
        out
    }

    /// The heads of each gate of partition `p` (docs/groups.md#ordering,
    /// docs/groups.md#flow), as many as the gate's slots (one under an
    /// ordering): the deliveries it has out (leased, expired or not), then,
    /// for the slots left, its lowest open deliveries, then its lowest
    /// events the group has not reached yet. So a nacked head stays a
    /// head, an expired one is handed out again, and a delivery re-opened
    /// below the ones out waits until a slot is free, then goes first.
    pub(super) fn heads(&self, g: usize, p: u32) -> Vec<u64> {
        let part = &self.groups[g].parts[p as usize];
        let slots = self.slots(g);
        let mut gates: HashMap<&str, GateScan> = HashMap::new();
        for (&seq, d) in part.deliveries.iter().filter(|(_, d)| d.is_open()) {
            if let Some(gate) = self.gate(g, p, seq) {
                let scan = gates.entry(gate).or_default();
                match d.state {
                    State::Leased { .. } => scan.leased.push(seq),
                    _ => scan.waiting.push(seq),
                }
            }
        }
        for seq in part.cursor..=self.hwm(p) {
            if let Some(gate) = self.gate(g, p, seq) {
                let scan = gates.entry(gate).or_default();
                if scan.waiting.len() < slots {
                    scan.waiting.push(seq);
                }
            }
        }
        gates
            .values()
            .flat_map(|scan| {
                let free = slots.saturating_sub(scan.leased.len());
                scan.leased
                    .iter()
                    .chain(scan.waiting.iter().take(free))
                    .copied()
            })
            .collect()
    }

    /// Moves the cursor of partition `p` up to `to` (exclusive) without
    /// claiming: a fetch of a gated group passes an event whose gate is
    /// full (as many open deliveries as slots) and parks it behind the
    /// gate's heads (docs/groups.md#ordering, docs/groups.md#flow);
    /// the model gives it an open delivery, available and never claimed.
    /// Only such an event may be passed: an unordered event, or one whose
    /// gate has nothing open before it, is `Err` with its sequence.
    pub(super) fn pass(
        &mut self,
        g: usize,
        p: u32,
        to: u64,
        now: Timestamp,
    ) -> std::result::Result<(), u64> {
        while self.groups[g].parts[p as usize].cursor < to {
            let seq = self.groups[g].parts[p as usize].cursor;
            let gate = self.gate(g, p, seq);
            let part = &self.groups[g].parts[p as usize];
            let busy = gate.is_some_and(|gate| {
                part.deliveries
                    .iter()
                    .filter(|&(&s, d)| d.is_open() && self.gate(g, p, s) == Some(gate))
                    .count()
                    >= self.slots(g)
            });
            if !busy {
                return Err(seq);
            }
            let part = &mut self.groups[g].parts[p as usize];
            part.deliveries.insert(
                seq,
                Delivery {
                    attempt: 0,
                    state: State::Available { due: now },
                    paced: false,
                },
            );
            part.cursor = seq + 1;
        }
        Ok(())
    }

    /// Claims `seq` of partition `p` under `lease_id`; returns the attempt.
    /// A claim past the cursor passes the events before it (see
    /// [`Model::pass`]); `Err` names one it could not pass.
    pub(super) fn claim(
        &mut self,
        g: usize,
        (p, seq): (u32, u64),
        (lease_id, receipt): (LeaseId, Option<String>),
        now: Timestamp,
        lease_ms: u64,
    ) -> std::result::Result<u32, u64> {
        if seq >= self.groups[g].parts[p as usize].cursor {
            self.pass(g, p, seq, now)?;
            self.groups[g].parts[p as usize].cursor = seq + 1;
        }
        let part = &mut self.groups[g].parts[p as usize];
        let d = part.deliveries.entry(seq).or_insert(Delivery {
            attempt: 0,
            state: State::Available { due: now },
            paced: false,
        });
        d.attempt += 1;
        d.paced = false;
        d.state = State::Leased {
            lease_id,
            receipt,
            leased_at: now,
            expires_at: now.add_ms(lease_ms),
            hold: None,
        };
        Ok(d.attempt)
    }

    /// What a fetch's claims of partition `p` find under the group's key
    /// rate (docs/groups.md#flow), taken in the order of `candidates` (the
    /// claimable sequences, lowest first): `None` to go out, `Some(due)`
    /// to be paced to that slot. Each decision moves its key's bucket
    /// for the next. Without a key rate every one goes out.
    pub(super) fn pace_plan(
        &self,
        g: usize,
        p: u32,
        candidates: &[u64],
        now: Timestamp,
    ) -> Vec<(u64, Option<Timestamp>)> {
        let mut tats = self.groups[g].parts[p as usize].tats.clone();
        candidates
            .iter()
            .map(|&seq| (seq, self.token(g, p, seq, &mut tats, now)))
            .collect()
    }

    /// One claim's decision on a key's bucket (docs/groups.md#flow), as the
    /// document states it: with `T = 1/R` and `τ = (B − 1)·T`, a claim at
    /// `now` finds a token when `TAT − τ ≤ now` and moves the TAT to
    /// `max(TAT, now) + T`; a paced one is due at `TAT − τ` (at the next
    /// whole millisecond), its slot; a paced delivery come due goes out, and
    /// so does one whose lease expired, counted in the bucket all the same.
    fn token(
        &self,
        g: usize,
        p: u32,
        seq: u64,
        tats: &mut HashMap<String, i64>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let rate = self.groups[g].flow.key_rate?;
        let key = self.key(p, seq)?;
        let d = self.groups[g].parts[p as usize].deliveries.get(&seq);
        if d.is_some_and(|d| d.paced && matches!(d.state, State::Available { .. })) {
            return None;
        }
        // A delivery whose lease expired goes out again at once, counted.
        let expired = d.is_some_and(|d| matches!(d.state, State::Leased { .. }));
        let t = ((1_000_000.0 / rate.per_second).round() as i64).max(1);
        let tau = t * i64::from(rate.burst - 1);
        let now_us = now.as_millis() * 1000;
        let tat = tats.get(key).copied().unwrap_or(now_us).max(now_us);
        let slot = (tat - tau).max(now_us);
        tats.insert(key.to_owned(), tat.max(slot) + t);
        (slot > now_us && !expired).then(|| Timestamp::from_millis((slot + 999) / 1000))
    }

    /// Takes `seq`'s token in its key's bucket (it goes out now): the
    /// bucket moves as [`Model::pace_plan`] said.
    pub(super) fn spend(&mut self, g: usize, p: u32, seq: u64, now: Timestamp) {
        let mut tats = std::mem::take(&mut self.groups[g].parts[p as usize].tats);
        let paced = self.token(g, p, seq, &mut tats, now);
        debug_assert!(paced.is_none(), "spent a token the plan did not give");
        self.groups[g].parts[p as usize].tats = tats;
    }

    /// Paces `seq` of partition `p` (docs/groups.md#flow): it is written
    /// available at `due` with its slot reserved, keeping its attempt (an
    /// expired lease loses its holder; an event the group had not reached
    /// gets a delivery, and the cursor passes it as a claim would). `Err`
    /// names an event below it that could not be passed.
    pub(super) fn pace(
        &mut self,
        g: usize,
        (p, seq): (u32, u64),
        due: Timestamp,
        now: Timestamp,
    ) -> std::result::Result<(), u64> {
        let mut tats = std::mem::take(&mut self.groups[g].parts[p as usize].tats);
        let slot = self.token(g, p, seq, &mut tats, now);
        debug_assert_eq!(slot, Some(due), "paced at another slot than planned");
        self.groups[g].parts[p as usize].tats = tats;
        if seq >= self.groups[g].parts[p as usize].cursor {
            self.pass(g, p, seq, now)?;
            self.groups[g].parts[p as usize].cursor = seq + 1;
        }
        let d = self.groups[g].parts[p as usize]
            .deliveries
            .entry(seq)
            .or_insert(Delivery {
                attempt: 0,
                state: State::Acked,
                paced: false,
            });
        d.state = State::Available { due };
        d.paced = true;
        Ok(())
    }

    /// Fencing (docs/groups.md#leases-and-fencing): the delivery must be
    /// leased under the target's lease id (checked first), then receipt.
    fn fence(&self, g: usize, target: &SettleTarget) -> std::result::Result<(u32, u64), Code> {
        let &(p, seq) = self.ids.get(&target.event_id).ok_or("stale_lease")?;
        let d = self.groups[g].parts[p as usize]
            .deliveries
            .get(&seq)
            .ok_or("stale_lease")?;
        match &d.state {
            State::Leased {
                lease_id, receipt, ..
            } if *lease_id == target.lease_id => match &target.receipt {
                Some(r) if Some(r) != receipt.as_ref() => Err("receipt_mismatch"),
                _ => Ok((p, seq)),
            },
            _ => Err("stale_lease"),
        }
    }

    fn delivery_mut(&mut self, g: usize, p: u32, seq: u64) -> &mut Delivery {
        self.groups[g].parts[p as usize]
            .deliveries
            .get_mut(&seq)
            .expect("a delivery")
    }

    /// The settle policy (docs/groups.md#settle-policy). Under an ordering
    /// nothing more is written: a nacked delivery stays open, so it is
    /// still its gate's lowest and comes back before the rest of the gate;
    /// an ack or a dead letter closes it and the gate moves on.
    pub(super) fn settle(
        &mut self,
        g: usize,
        item: &Settlement,
        now: Timestamp,
    ) -> std::result::Result<(), Code> {
        let (p, seq) = self.fence(g, &item.target)?;
        let max_attempts = self.groups[g].max_attempts;
        let attempt = self.groups[g].parts[p as usize].deliveries[&seq].attempt;
        let backoff = self.groups[g].backoff_ms(attempt);
        let state = match &item.op {
            SettleOp::Ack => State::Acked,
            SettleOp::Reject { reason } => State::Dead {
                reason: reason.clone().unwrap_or_else(|| "rejected".into()),
                at: now,
            },
            SettleOp::Nack { reason, .. } if attempt >= max_attempts => {
                let reason = format!("max_attempts: {}", reason.as_deref().unwrap_or("retry"));
                self.exhausted(g, p, seq, reason, now)
            }
            SettleOp::Nack { delay_ms, .. } => State::Available {
                due: now.add_ms(delay_ms.unwrap_or(backoff)),
            },
        };
        self.delivery_mut(g, p, seq).state = state;
        Ok(())
    }

    /// Renew: fenced; the new expiry. Returns (attempt, leased_at, expires_at).
    pub(super) fn renew(
        &mut self,
        g: usize,
        target: &SettleTarget,
        lease_ms: u64,
        now: Timestamp,
    ) -> std::result::Result<(u32, Timestamp, Timestamp), Code> {
        let (p, seq) = self.fence(g, target)?;
        let d = self.delivery_mut(g, p, seq);
        let State::Leased {
            leased_at,
            expires_at,
            ..
        } = &mut d.state
        else {
            unreachable!("fenced")
        };
        *expires_at = now.add_ms(lease_ms);
        Ok((d.attempt, *leased_at, *expires_at))
    }

    fn locate(&self, ids: &[EventId]) -> std::result::Result<Vec<(u32, u64)>, Code> {
        ids.iter()
            .map(|id| self.ids.get(id).copied().ok_or("invalid"))
            .collect()
    }

    /// Redrive (docs/groups.md#dead-letters-and-redrive): dead letters
    /// become available with their attempts started over. Under an
    /// ordering a redriven delivery is open again below its gate's later
    /// events, so [`Model::claimable`] sends it after the one out and
    /// before the rest.
    pub(super) fn redrive(
        &mut self,
        g: usize,
        which: &Redrive,
        now: Timestamp,
    ) -> std::result::Result<u64, Code> {
        let targets = match which {
            Redrive::All => self
                .dead_letters(g)
                .into_iter()
                .map(|d| (d.1, d.2))
                .collect(),
            Redrive::Events(ids) => self.locate(ids)?,
        };
        let mut n = 0;
        for (p, seq) in targets {
            // A parked head too (docs/groups.md#quarantine).
            if let Some(d) = self.groups[g].parts[p as usize].deliveries.get_mut(&seq)
                && matches!(
                    d.state,
                    State::Dead { .. } | State::Leased { hold: Some(_), .. }
                )
            {
                *d = Delivery {
                    attempt: 0,
                    state: State::Available { due: now },
                    paced: false,
                };
                n += 1;
            }
        }
        Ok(n)
    }

    /// Replay (docs/groups.md#replay): every selected delivery the group
    /// has reached becomes available and due, keeping its attempt; counted
    /// when it was not available already. Under an ordering the re-opened
    /// deliveries go out in their gates' order, through [`Model::claimable`].
    pub(super) fn replay(
        &mut self,
        g: usize,
        how: &Replay,
        now: Timestamp,
    ) -> std::result::Result<u64, Code> {
        let targets: Vec<(u32, u64)> = match how {
            Replay::FromSequence { after, partitions } => {
                let mut out = Vec::new();
                for p in self.resolve(partitions)? {
                    out.extend((after + 1..=self.hwm(p)).map(|seq| (p, seq)));
                }
                out
            }
            Replay::FromTime { from, partitions } => {
                let mut out = Vec::new();
                for p in self.resolve(partitions)? {
                    let first = self.start_point(p, &StartPosition::At(*from));
                    out.extend((first + 1..=self.hwm(p)).map(|seq| (p, seq)));
                }
                out
            }
            Replay::EventIds(ids) => self.locate(ids)?,
            Replay::Query(_) => unreachable!("not generated"),
        };
        let mut n = 0;
        for (p, seq) in targets {
            let part = &mut self.groups[g].parts[p as usize];
            if seq >= part.cursor {
                continue; // not reached yet: needs no replay
            }
            let d = part.deliveries.entry(seq).or_insert(Delivery {
                attempt: 0,
                state: State::Acked, // before the start point: counts as settled
                paced: false,
            });
            if !matches!(d.state, State::Available { .. }) {
                n += 1;
            }
            // Known Redis deviation (not yet fixed): Redis keeps no record
            // of a delivery acked on its first attempt, and re-opens such a
            // record-less delivery at or before the start point of the
            // group's creation or last reset as never delivered (attempt
            // 0, pending) instead of keeping its attempt 1. It shows only
            // for an event before the start that was replayed, claimed once
            // and acked, then replayed again.
            if self.redis_forgets_first_attempt_acks_before_the_start
                && d.state == State::Acked
                && d.attempt == 1
                && seq <= part.start
            {
                d.attempt = 0;
            }
            d.state = State::Available { due: now };
            d.paced = false;
        }
        Ok(n)
    }

    /// Reset (docs/groups.md#reset): the selected partitions start again.
    /// With an `ordering` it must reset every partition (naming
    /// `partitions` is `invalid`), and the group keeps the new ordering.
    pub(super) fn reset(
        &mut self,
        g: usize,
        start: &StartPosition,
        parts: &Partitions,
        ordering: Option<GroupOrdering>,
        flow: Option<Flow>,
    ) -> std::result::Result<(), Code> {
        if (ordering.is_some() || flow.is_some()) && !matches!(parts, Partitions::All) {
            return Err("invalid");
        }
        let group = &self.groups[g];
        let after = (
            ordering.unwrap_or(group.ordering),
            flow.unwrap_or(group.flow),
        );
        if after.1.key_concurrency.is_some() && after.0 != GroupOrdering::None {
            return Err("invalid");
        }
        for p in self.resolve(parts)? {
            let start = self.start_point(p, start);
            self.groups[g].parts[p as usize] = Part::starting_after(start);
        }
        (self.groups[g].ordering, self.groups[g].flow) = after;
        Ok(())
    }

    /// Lag over `parts` (docs/groups.md#frontier-and-lag). A parked
    /// delivery (open, gated, not its gate's head) holds the frontier below
    /// it; it is pending when never claimed, like the event it was before
    /// the cursor passed; and a nacked one waits for its gate, not for its
    /// time, so it is not in `waiting_retry` (the document is not explicit
    /// here; every store reads it so).
    pub(super) fn lag(&self, stream: &StreamName, g: usize, parts: &[u32], now: Timestamp) -> Lag {
        let group = &self.groups[g];
        let mut lag = Lag {
            stream: stream.clone(),
            group: group.name.clone(),
            lag: 0,
            partitions: BTreeMap::new(),
            pending: 0,
            inflight: 0,
            waiting_retry: 0,
            oldest_unacked_age_ms: None,
        };
        for &p in parts {
            let part = &group.parts[p as usize];
            let hw = self.hwm(p);
            let frontier = part.frontier();
            let entry = PartitionLag {
                frontier,
                high_watermark: hw,
                lag: hw.saturating_sub(frontier),
            };
            lag.lag += entry.lag;
            lag.partitions.insert(p, entry);
            lag.pending += hw.saturating_sub(part.cursor - 1);
            let heads = self.heads(g, p);
            for (seq, d) in &part.deliveries {
                let parked = self.gate(g, p, *seq).is_some() && !heads.contains(seq);
                match d.state {
                    // A paced delivery waits for its slot (docs/groups.md#flow).
                    State::Available { due } if due > now && !parked => lag.waiting_retry += 1,
                    State::Available { .. } if d.attempt == 0 => lag.pending += 1,
                    State::Leased { .. } => lag.inflight += 1,
                    _ => {}
                }
            }
            if frontier < hw {
                let age = now.ms_since(self.timestamp(p, frontier + 1));
                lag.oldest_unacked_age_ms =
                    Some(lag.oldest_unacked_age_ms.map_or(age, |a| a.max(age)));
            }
        }
        lag
    }

    pub(super) fn group_info(&self, stream: &StreamName, g: usize, now: Timestamp) -> GroupInfo {
        let group = &self.groups[g];
        let all: Vec<u32> = (0..self.partition_count()).collect();
        let lag = self.lag(stream, g, &all, now);
        GroupInfo {
            stream: stream.clone(),
            group: group.name.clone(),
            max_attempts: group.max_attempts,
            retry_backoff_ms: group.backoff.clone(),
            ordering: group.ordering,
            on_exhausted: group.on_exhausted,
            flow: group.flow,
            inflight: lag.inflight,
            dead_letters: self.dead_letters(g).len() as u64,
            skipped_by_retention: 0,
            cursors: all
                .iter()
                .map(|&p| (p, group.parts[p as usize].cursor))
                .collect(),
            lag,
        }
    }

    /// `(event id, partition, sequence, attempt, reason, at)` of each dead
    /// letter in (sequence, partition) order.
    pub(super) fn dead_letters(&self, g: usize) -> Vec<DeadRow> {
        let mut out = Vec::new();
        for (p, part) in self.groups[g].parts.iter().enumerate() {
            for (seq, d) in &part.deliveries {
                if let State::Dead { reason, at } = &d.state {
                    let p = p as u32;
                    out.push((
                        self.event_id(p, *seq).clone(),
                        p,
                        *seq,
                        d.attempt,
                        reason.clone(),
                        *at,
                    ));
                }
            }
        }
        out.sort_by_key(|d| (d.2, d.1));
        out
    }

    /// The leases group `g` has out at `now`, in (partition, sequence)
    /// order: every leased delivery, expired or not
    /// (docs/groups.md#what-is-out-leases).
    pub(super) fn leases(&self, g: usize, now: Timestamp) -> Vec<OutRow> {
        let mut out = Vec::new();
        for (p, part) in self.groups[g].parts.iter().enumerate() {
            for (seq, d) in &part.deliveries {
                if let State::Leased {
                    lease_id,
                    leased_at,
                    expires_at,
                    ..
                } = &d.state
                {
                    let p = p as u32;
                    out.push((
                        self.event_id(p, *seq).clone(),
                        p,
                        *seq,
                        lease_id.clone(),
                        d.attempt,
                        *leased_at,
                        *expires_at,
                        *expires_at <= now,
                    ));
                }
            }
        }
        out
    }

    /// Group `g`'s open deliveries in partition `p` and its cursor, one
    /// word each (`seq[key]:state/attempt`), for a divergence report.
    pub(super) fn describe(&self, g: usize, p: u32, now: Timestamp) -> String {
        let part = &self.groups[g].parts[p as usize];
        let mut out: Vec<String> = part
            .deliveries
            .iter()
            .filter(|(_, d)| d.is_open())
            .map(|(&seq, d)| {
                let state = match &d.state {
                    State::Available { due } if *due > now => {
                        format!("due+{}", due.ms_since(now))
                    }
                    State::Available { .. } => "available".into(),
                    State::Leased { hold: Some(_), .. } => "parked".into(),
                    State::Leased { expires_at, .. } if *expires_at <= now => "expired".into(),
                    _ => "leased".into(),
                };
                let key = self.key(p, seq).unwrap_or("");
                format!("{seq}[{key}]:{state}/{}", d.attempt)
            })
            .collect();
        out.push(format!("cursor {}", part.cursor));
        out.join(" ")
    }

    /// Whether a lease (by its target) is still the current lease of its
    /// delivery.
    pub(super) fn holds(&self, g: usize, target: &SettleTarget) -> bool {
        self.fence(g, target).is_ok()
    }
}
