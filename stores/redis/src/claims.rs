//! Deliveries, claims and renewals on Redis (`docs/groups.md#claims`,
//! `docs/groups.md#leases-and-fencing`).
//!
//! A delivery is one JSON record per (group, partition, sequence) in a
//! hash, indexed by what the claim path needs: `ready` (claimable now, by
//! sequence), `delayed` (by due time), `leased` (by expiry) and `open`
//! (every available or leased one, by sequence: the frontier), and by
//! what the lag counts: `fresh` (never handed out, not waiting) and
//! `paced` (never handed out, waiting for its slot under `flow.key_rate`,
//! by due time). A fetch reads the candidates and the cursors, lets the policy share the limit
//! and spot poison, and writes every claim in one script guarded by each
//! record and cursor it read.

use std::collections::HashMap;
use std::sync::Arc;

use super::planned::View;
use super::{
    Applied, Cas, MAX_ATTEMPTS, PartitionKeys, Phase, RedisBackend, Settings, corrupt, map_error,
};
use rheo_core::backend::policy::{
    Held, Hold, QUARANTINE_CONSUMER, Write, claim_capacity, fence, poison_write, poisoned,
    round_robin, unknown_event,
};
use rheo_core::backend::{Error, FetchRequest, Result, validate_renewals};
use rheo_core::model::{
    ConsumerId, Event, GroupName, Lease, LeaseId, SettleTarget, StreamName, Timestamp,
};

/// Where a delivery stands. A delivery acked on its first attempt has no
/// record (one acked later keeps a record of its attempts): below the
/// group's cursor, no record means acked at or above the group's floor
/// (`Keys::floors`), never delivered below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Available,
    /// Available, but held back behind its gate's heads under an ordering
    /// or a `flow.key_concurrency` (`docs/groups.md#ordering`,
    /// `docs/groups.md#flow`): open, in no claim index.
    Parked,
    Leased,
    Acked,
    Dead,
}

impl Status {
    fn tag(self) -> &'static str {
        match self {
            Self::Available => "A",
            Self::Parked => "P",
            Self::Leased => "L",
            Self::Acked => "K",
            Self::Dead => "D",
        }
    }

    fn from_tag(tag: &str) -> Option<Self> {
        Some(match tag {
            "A" => Self::Available,
            "P" => Self::Parked,
            "L" => Self::Leased,
            "K" => Self::Acked,
            "D" => Self::Dead,
            _ => return None,
        })
    }
}

/// Separates a record's fields: ids hold no control characters.
const SEP: char = '\u{1f}';

/// One delivery's record, stored as its fields joined by [`SEP`] in a
/// fixed order that starts with the status and the lease id, so that a
/// settle can fence on a prefix without reading the record first, and
/// ends with the reason, the only field that may hold any character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Delivery {
    pub(super) status: Status,
    pub(super) attempt: u32,
    pub(super) lease_id: Option<String>,
    pub(super) consumer: Option<String>,
    pub(super) leased_at: Option<i64>,
    pub(super) expires_at: Option<i64>,
    /// For an available (or parked) delivery: when it becomes claimable
    /// (none: now).
    pub(super) available_at: Option<i64>,
    pub(super) reason: Option<String>,
    pub(super) dead_at: Option<i64>,
    /// Paced by `flow.key_rate` (`docs/groups.md#flow`): it found no token
    /// and waits for the slot its key's bucket reserved for it, so it goes
    /// out when due without taking another. Stored as a `p` before its due
    /// time; cleared when it is leased or re-opened.
    pub(super) paced: bool,
}

/// The start of the record of a delivery leased under `lease_id` on its
/// `attempt`th claim: what a settle's guard compares (renewals change only
/// later fields).
pub(super) fn leased_prefix(lease_id: &str, attempt: u32) -> String {
    format!("L{SEP}{lease_id}{SEP}{attempt}{SEP}")
}

impl Delivery {
    /// A delivery never handed out: available now, attempt 0.
    pub(super) fn fresh() -> Self {
        Self {
            status: Status::Available,
            attempt: 0,
            lease_id: None,
            consumer: None,
            leased_at: None,
            expires_at: None,
            available_at: None,
            reason: None,
            dead_at: None,
            paced: false,
        }
    }

    pub(super) fn decode(raw: &str) -> Result<Self> {
        let bad = || corrupt("delivery", raw.escape_debug());
        let mut f = raw.splitn(9, SEP);
        let mut next = || f.next().ok_or_else(bad);
        let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let time = |s: &str| -> Result<Option<i64>> {
            if s.is_empty() {
                Ok(None)
            } else {
                s.parse().map(Some).map_err(|_| bad())
            }
        };
        let status = Status::from_tag(next()?).ok_or_else(bad)?;
        let lease_id = text(next()?);
        let attempt = next()?.parse().map_err(|_| bad())?;
        let consumer = text(next()?);
        let leased_at = time(next()?)?;
        let expires_at = time(next()?)?;
        let (paced, available_at) = match next()? {
            due if due.starts_with('p') => (true, time(&due[1..])?),
            due => (false, time(due)?),
        };
        let dead_at = time(next()?)?;
        let reason = text(next()?);
        Ok(Self {
            status,
            attempt,
            lease_id,
            consumer,
            leased_at,
            expires_at,
            available_at,
            reason,
            dead_at,
            paced,
        })
    }

    pub(super) fn encode(&self) -> String {
        let time = |t: Option<i64>| t.map(|t| t.to_string()).unwrap_or_default();
        let due = match self.paced {
            true => format!("p{}", time(self.available_at)),
            false => time(self.available_at),
        };
        [
            self.status.tag(),
            self.lease_id.as_deref().unwrap_or(""),
            &self.attempt.to_string(),
            self.consumer.as_deref().unwrap_or(""),
            &time(self.leased_at),
            &time(self.expires_at),
            &due,
            &time(self.dead_at),
            self.reason.as_deref().unwrap_or(""),
        ]
        .join(&SEP.to_string())
    }

    /// A delivery acked on its `attempt`th claim.
    pub(super) fn acked(attempt: u32) -> Self {
        Self {
            status: Status::Acked,
            attempt,
            ..Self::fresh()
        }
    }

    /// A delivery with no record below the cursor, re-opened: acked on its
    /// first attempt at or above the floor, never delivered below it.
    pub(super) fn recordless(seq: u64, floor: u64) -> Self {
        Self {
            attempt: u32::from(seq >= floor),
            ..Self::fresh()
        }
    }

    /// This delivery leased to `consumer` until `expires_at`.
    pub(super) fn leased(
        mut self,
        lease_id: &LeaseId,
        consumer: &ConsumerId,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Self {
        self.status = Status::Leased;
        self.attempt += 1;
        self.lease_id = Some(lease_id.as_str().to_owned());
        self.consumer = Some(consumer.as_str().to_owned());
        self.leased_at = Some(now.as_millis());
        self.expires_at = Some(expires_at.as_millis());
        self.available_at = None;
        self.paced = false;
        self
    }

    /// This delivery paced by `flow.key_rate` (`docs/groups.md#flow`):
    /// available, due at the slot its key's bucket reserved for it, with
    /// its mark; a lease that expired loses its holder. Its attempts are
    /// as they were: waiting for a token is no attempt.
    pub(super) fn paced(mut self, due: Timestamp) -> Self {
        self.status = Status::Available;
        self.lease_id = None;
        self.expires_at = None;
        self.available_at = Some(due.as_millis());
        self.paced = true;
        self
    }

    /// This delivery dead-lettered for `reason`.
    pub(super) fn dead(mut self, reason: String, now: Timestamp) -> Self {
        self.status = Status::Dead;
        self.lease_id = None;
        self.expires_at = None;
        self.available_at = None;
        self.paced = false;
        self.reason = Some(reason);
        self.dead_at = Some(now.as_millis());
        self
    }

    /// This delivery held by the quarantine for `reason`
    /// (`docs/groups.md#quarantine`): leased to [`QUARANTINE_CONSUMER`]
    /// under a fresh lease id that never expires ([`Hold`]), its
    /// attempts as they were, so its gate stays shut. Its `leased` index
    /// entry is scored by that expiry: never found expired.
    pub(super) fn quarantined(mut self, reason: &str, now: Timestamp) -> Self {
        let hold = Hold::new(reason, now);
        self.status = Status::Leased;
        self.lease_id = Some(hold.lease_id.as_str().to_owned());
        self.consumer = Some(hold.consumer_id.as_str().to_owned());
        self.leased_at = Some(hold.leased_at.as_millis());
        self.expires_at = Some(hold.expires_at.as_millis());
        self.available_at = None;
        self.reason = Some(hold.reason);
        self
    }

    /// Whether the quarantine holds this delivery
    /// (`docs/groups.md#quarantine`).
    pub(super) fn is_quarantined(&self) -> bool {
        self.status == Status::Leased && self.consumer.as_deref() == Some(QUARANTINE_CONSUMER)
    }

    /// This delivery as the settle policy's `write` makes it at `now`.
    pub(super) fn written(self, write: Write, now: Timestamp) -> Self {
        match write {
            Write::Ack => Self {
                status: Status::Acked,
                ..self
            },
            Write::Retry { due, reason } => Self {
                status: Status::Available,
                lease_id: None,
                expires_at: None,
                available_at: due.map(|t| t.as_millis()),
                reason: Some(reason),
                paced: false,
                ..self
            },
            Write::Dead(reason) => self.dead(reason, now),
            Write::Quarantine(reason) => self.quarantined(&reason, now),
        }
    }
}

/// Which indexes a delivery is in, as far as `place` needs to know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Slot {
    /// `None`: no record yet.
    status: Option<Status>,
    /// Available with a due time.
    delayed: bool,
    /// Available (or parked) and never handed out, and not waiting for a
    /// due time (a paced one is waiting: `docs/groups.md#flow`).
    fresh: bool,
    /// Available, never handed out and waiting for a due time: paced by
    /// `flow.key_rate` (`docs/groups.md#flow`), in [`Keys::paced`] by its
    /// due time, so that the lag counts it pending once due.
    ///
    /// [`Keys::paced`]: super::Keys::paced
    paced: bool,
}

impl Slot {
    /// Where a leased delivery is.
    pub(super) const LEASED: Self = Self {
        status: Some(Status::Leased),
        delayed: false,
        fresh: false,
        paced: false,
    };

    pub(super) fn of(d: &Delivery) -> Self {
        Self {
            status: Some(d.status),
            delayed: d.status == Status::Available && d.available_at.is_some(),
            fresh: match d.status {
                Status::Available => d.available_at.is_none() && d.attempt == 0,
                Status::Parked => d.attempt == 0,
                _ => false,
            },
            paced: d.status == Status::Available && d.available_at.is_some() && d.attempt == 0,
        }
    }

    fn open(&self) -> bool {
        matches!(
            self.status,
            Some(Status::Available | Status::Parked | Status::Leased)
        )
    }
}

/// One partition's candidates, as read.
#[derive(Debug, Default)]
pub(super) struct Candidates {
    pub(super) cursor: u64,
    pub(super) cursor_raw: Option<String>,
    pub(super) high_watermark: u64,
    /// Claimable deliveries by sequence, with the record as read.
    pub(super) claimable: Vec<(u64, String, Delivery)>,
    /// Expired last attempts: dead letters, not claims.
    pub(super) poison: Vec<(u64, String, Delivery)>,
    /// Log entries read ahead from where this process last saw the cursor.
    pub(super) ahead: Vec<Entry>,
    /// Under `flow.key_rate` (`docs/groups.md#flow`), where a paced claim
    /// does not count and the next one is taken instead: the ready index
    /// held as many past `ready_after` as were read, so more claimable
    /// deliveries may follow `claimable` — which holds every one read up to
    /// `ready_after` — before any unseen event ([`RedisBackend::more_claimable`]).
    pub(super) more: bool,
    /// The last ready sequence read, when `more`.
    pub(super) ready_after: u64,
    /// How many ready deliveries were read last.
    pub(super) batch: usize,
    /// Under `flow.key_rate`, due and expired deliveries read past
    /// `ready_after`, by sequence: they join `claimable` as the ready ones
    /// before them are read.
    pub(super) beyond: Vec<(u64, String, Delivery)>,
}

impl Candidates {
    /// The most ready deliveries [`RedisBackend::more_claimable`] reads at
    /// once.
    const MAX_BATCH: usize = 1024;
}

/// How many of `limit` claims each partition's candidates get, starting
/// the round-robin at `first`.
pub(super) fn quotas(parts: &[Candidates], limit: usize, first: usize) -> Vec<usize> {
    let capacity: Vec<usize> = parts
        .iter()
        .map(|c| claim_capacity(c.claimable.len(), c.cursor, c.high_watermark))
        .collect();
    round_robin(&capacity, limit, first)
}

/// A log entry as `XRANGE` gives it: entry id and fields.
pub(super) type Entry = (String, Vec<String>);

impl RedisBackend {
    /// A group's settings with its stream, as kept here or read together
    /// (only a reset that changes the ordering or the flow, or a delete,
    /// changes them, and every write that depends on them is guarded on
    /// them: [`RedisBackend::guard_settings`]). A call on a group takes
    /// all it knows of the stream from here, so the two always agree.
    pub(super) async fn settings(&self, s: &StreamName, g: &GroupName) -> Result<Settings> {
        self.refresh_catalog().await?;
        if let Some(settings) = self.catalog.group(s, g) {
            return Ok(settings);
        }
        let at = self.catalog.generation();
        let (stream, group) = self.read_group(s, g).await?;
        let stream = self.found_stream(s, stream, at)?;
        let Some(raw) = group else {
            self.forget_group(s, g);
            return Err(Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            });
        };
        let settings = super::groups::decode_settings(s, g, raw, stream)?;
        self.catalog.keep_group(s, g, settings.clone(), at);
        Ok(settings)
    }

    /// Writes a delivery's new record and moves it between the indexes.
    pub(super) fn place(
        &self,
        cas: &mut Cas,
        k: &PartitionKeys,
        seq: u64,
        old: Option<Slot>,
        new: &Delivery,
    ) {
        let member = seq.to_string();
        if new.status == Status::Acked && new.attempt <= 1 {
            // Acked on the first attempt: no record (`Status`).
            if old.is_some() {
                cas.write(&["HDEL", &k.records, &member]);
            }
        } else if new.status == Status::Acked {
            let kept = Delivery::acked(new.attempt);
            cas.write(&["HSET", &k.records, &member, &kept.encode()]);
        } else {
            cas.write(&["HSET", &k.records, &member, &new.encode()]);
        }
        let (before, after) = (old.unwrap_or_default(), Slot::of(new));
        // Only the indexes that change are written.
        let index = |slot: &Slot| match slot.status {
            Some(Status::Available) if slot.delayed => Some(&k.delayed),
            Some(Status::Available) => Some(&k.ready),
            Some(Status::Leased) => Some(&k.leased),
            _ => None,
        };
        let (from, to) = (index(&before), index(&after));
        if let Some(from) = from
            && to != Some(from)
        {
            cas.write(&["ZREM", from, &member]);
        }
        if let Some(to) = to {
            let score = match after.status {
                Some(Status::Available) => new.available_at.map(|t| t.to_string()),
                _ => new.expires_at.map(|t| t.to_string()),
            };
            cas.write(&["ZADD", to, score.as_deref().unwrap_or(&member), &member]);
        }
        if before.fresh != after.fresh {
            if after.fresh {
                cas.write(&["ZADD", &k.fresh, &member, &member]);
            } else {
                cas.write(&["ZREM", &k.fresh, &member]);
            }
        }
        if after.paced {
            let due = new.available_at.unwrap_or_default().to_string();
            cas.write(&["ZADD", &k.paced, &due, &member]);
        } else if before.paced {
            cas.write(&["ZREM", &k.paced, &member]);
        }
        if before.open() != after.open() {
            if after.open() {
                cas.write(&["ZADD", &k.open, &member, &member]);
            } else {
                cas.write(&["ZREM", &k.open, &member]);
            }
        }
        if after.status == Some(Status::Dead) && before.status != Some(Status::Dead) {
            cas.write(&["ZADD", &k.dead, &member, &dead_member(k.partition, seq)]);
        }
    }

    /// Removes a delivery's record and takes it out of every index but
    /// its gate's (`docs/log.md#retention`: its event is gone).
    pub(super) fn unplace(&self, cas: &mut Cas, k: &PartitionKeys, seq: u64, old: &Delivery) {
        let member = seq.to_string();
        cas.write(&["HDEL", &k.records, &member]);
        let slot = Slot::of(old);
        let index = match slot.status {
            Some(Status::Available) if slot.delayed => Some(&k.delayed),
            Some(Status::Available) => Some(&k.ready),
            Some(Status::Leased) => Some(&k.leased),
            _ => None,
        };
        if let Some(index) = index {
            cas.write(&["ZREM", index, &member]);
        }
        if slot.fresh {
            cas.write(&["ZREM", &k.fresh, &member]);
        }
        if slot.paced {
            cas.write(&["ZREM", &k.paced, &member]);
        }
        if slot.open() {
            cas.write(&["ZREM", &k.open, &member]);
        }
        if slot.status == Some(Status::Dead) {
            cas.write(&["ZREM", &k.dead, &dead_member(k.partition, seq)]);
        }
    }

    /// Claims up to `limit` deliveries, fairly across partitions.
    pub(crate) async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        req.validate()?;
        let started = self.settings(&req.stream, &req.group).await?;
        let selected = req.partitions.resolve(started.stream.partitions)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.fetch_turn(&req.stream, &req.group).await;
        let first = self.rotate(&req.stream, &req.group) % selected.len();
        for _ in 0..MAX_ATTEMPTS {
            // Read again after a conflict that found them changed.
            let settings = self
                .settings_again(&req.stream, &req.group, &started)
                .await?;
            let gating = settings.config.gating();
            if gating.walks() {
                // A key rate's TATs are read before deciding: no plan
                // (`rates.rs`).
                if gating.key_rate().is_none()
                    && let Some(leases) = self
                        .fetch_ordered_planned(&req, &settings, &selected, first)
                        .await?
                {
                    return Ok(leases);
                }
                if let Some(leases) = self
                    .fetch_ordered(&req, &settings, &selected, first)
                    .await?
                {
                    return Ok(leases);
                }
                (self.lost_races).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(leases) = self
                .fetch_planned(&req, &settings, &selected, first)
                .await?
            {
                return Ok(leases);
            }
            if let Some(leases) = self.fetch_once(&req, &settings, &selected, first).await? {
                return Ok(leases);
            }
            (self.lost_races).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
        Err(Error::Failed(format!(
            "fetch on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            req.stream.as_str()
        )))
    }

    /// One attempt; `None` when another node changed what it read.
    async fn fetch_once(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        selected: &[u32],
        first: usize,
    ) -> Result<Option<Vec<Lease>>> {
        let (s, g) = (&req.stream, &req.group);
        let now = self.clock.now();
        let expires_at = now.add_ms(req.lease_ms);
        let limit = req.limit as usize;
        let ahead = limit.div_ceil(selected.len()).max(1);
        let parts = self
            .candidates(s, g, selected, (now, limit, ahead), settings)
            .await?;
        let quotas = quotas(&parts, limit, first);

        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut claimed: Vec<(u32, u64, u32, LeaseId)> = Vec::new();
        let mut fresh_events: HashMap<(u32, u64), Arc<Event>> = HashMap::new();
        let mut cursors_after = Vec::new();
        for ((&p, part), &quota) in selected.iter().zip(parts).zip(&quotas) {
            let k = self.keys.partition(s, g, p);
            for (seq, raw, delivery) in &part.poison {
                cas.hget_is(&k.records, &seq.to_string(), Some(raw));
                // Unordered: nothing is gated, so poison is dead
                // (`docs/groups.md#quarantine`).
                let write = poison_write(false, &settings.config);
                let dead = delivery.clone().written(write, now);
                self.place(&mut cas, &k, *seq, Some(Slot::of(delivery)), &dead);
            }
            let take = quota.min(part.claimable.len());
            for (seq, raw, delivery) in &part.claimable[..take] {
                cas.hget_is(&k.records, &seq.to_string(), Some(raw));
                let lease_id = LeaseId::generate();
                let leased = delivery
                    .clone()
                    .leased(&lease_id, &req.consumer_id, now, expires_at);
                self.place(&mut cas, &k, *seq, Some(Slot::of(delivery)), &leased);
                claimed.push((p, *seq, leased.attempt, lease_id));
            }
            let fresh = (quota - take) as u64;
            if fresh > 0 {
                // The cursor's guard covers the new records: none exists at
                // or above a cursor (`docs/backends.md#redis`).
                let cursors = self.keys.cursors(s, g);
                cas.hget_is(&cursors, &p.to_string(), part.cursor_raw.as_deref());
                let Some(events) = self
                    .fresh_events(s, p, part.cursor, fresh, part.ahead)
                    .await?
                else {
                    return Ok(None);
                };
                for event in events {
                    let seq = event.sequence;
                    fresh_events.insert((p, seq), Arc::new(event));
                    let lease_id = LeaseId::generate();
                    let new =
                        Delivery::fresh().leased(&lease_id, &req.consumer_id, now, expires_at);
                    self.place(&mut cas, &k, seq, None, &new);
                    claimed.push((p, seq, 1, lease_id));
                }
                let next = part.cursor + fresh;
                cas.write(&["HSET", &cursors, &p.to_string(), &next.to_string()]);
                cursors_after.push((p, next));
            }
        }
        if cas.is_empty() {
            return Ok(Some(Vec::new()));
        }
        if self.apply(&cas).await? == Applied::Conflict {
            return Ok(None);
        }
        self.claimed(
            req,
            settings,
            claimed,
            fresh_events,
            cursors_after,
            (now, expires_at),
        )
        .await
        .map(Some)
    }

    /// After a fetch's script applied: moves the kept views' cursors, reads
    /// the events of re-claimed deliveries and makes the leases.
    pub(super) async fn claimed(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        claimed: Vec<(u32, u64, u32, LeaseId)>,
        fresh_events: HashMap<(u32, u64), Arc<Event>>,
        cursors_after: Vec<(u32, u64)>,
        (now, expires_at): (Timestamp, Timestamp),
    ) -> Result<Vec<Lease>> {
        let (s, g) = (&req.stream, &req.group);
        {
            let mut views = self.views.lock();
            for (p, next) in cursors_after {
                if let Some(view) = views.get_mut(&(s.clone(), g.clone(), p)) {
                    view.cursor = next;
                }
            }
        }
        let again: Vec<(u32, u64)> = claimed
            .iter()
            .filter(|(p, seq, ..)| !fresh_events.contains_key(&(*p, *seq)))
            .map(|(p, seq, ..)| (*p, *seq))
            .collect();
        let mut events = self.events_at(s, &again).await?;
        events.extend(fresh_events);
        self.leases(req, settings, claimed, events, (now, expires_at))
    }

    /// The leases of a fetch's claims, in partition and sequence order;
    /// their events' positions (and under a gating their keys) are kept
    /// for the settles.
    pub(super) fn leases(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        claimed: Vec<(u32, u64, u32, LeaseId)>,
        mut events: HashMap<(u32, u64), Arc<Event>>,
        (now, expires_at): (Timestamp, Timestamp),
    ) -> Result<Vec<Lease>> {
        let gated = settings.config.gating().is_gated();
        let mut leases = Vec::with_capacity(claimed.len());
        let mut positions = self.positions.lock();
        for (p, seq, attempt, lease_id) in claimed {
            // A re-claimed delivery whose event retention removed right
            // after the claim (which closed the delivery): nothing to lease.
            let Some(event) = events.remove(&(p, seq)) else {
                continue;
            };
            let key = gated.then(|| event.key.as_deref().map(Arc::from));
            let at = super::Located {
                partition: p,
                sequence: seq,
                attempt,
                key,
                stream: Arc::clone(&settings.stream.identity),
            };
            positions.insert((req.stream.clone(), event.id.clone()), at);
            let mut lease = Lease::new(
                req.group.clone(),
                event,
                lease_id,
                req.consumer_id.clone(),
                attempt,
                now,
                expires_at,
            );
            lease.receipt = Some(entry_id(seq));
            leases.push(lease);
        }
        leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
        Ok(leases)
    }

    /// What each selected partition can give a fetch, in one round trip
    /// (two when there are ready, due or expired deliveries): its cursor
    /// and high watermark, up to `limit` claimable deliveries (ready, due,
    /// expired) in sequence order with expired last attempts set apart as
    /// poison, and the log read ahead from the cursor as last seen here.
    /// The stream and the group are read with them, and checked against
    /// `settings` ([`RedisBackend::judge`]): a fetch that claims nothing
    /// still finds them gone.
    pub(super) async fn candidates(
        &self,
        s: &StreamName,
        g: &GroupName,
        selected: &[u32],
        (now, limit, ahead): (Timestamp, usize, usize),
        settings: &Settings,
    ) -> Result<Vec<Candidates>> {
        let config = &settings.config;
        // Under a key rate, a paced claim does not count toward the limit:
        // every claimable delivery read in sequence order is kept, up to
        // the last ready one read when that index may hold more.
        let key_rate = config.flow.key_rate.is_some();
        let k = &self.keys;
        let now_ms = now.as_millis();
        // Due retries and expired leases are indexed by time, not sequence:
        // read a generous number of them so that the lowest sequences are
        // among them unless a very large backlog fell due at once.
        let due_cap = limit.saturating_mul(4).saturating_add(1000);
        let guesses: Vec<u64> = {
            let views = self.views.lock();
            selected
                .iter()
                .map(|&p| {
                    let key = (s.clone(), g.clone(), p);
                    views.get(&key).map_or(1, |v| v.cursor)
                })
                .collect()
        };
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(k.streams()).arg(s.as_str());
        pipe.cmd("HGET").arg(k.groups(s)).arg(g.as_str());
        for (&p, guess) in selected.iter().zip(&guesses) {
            let field = p.to_string();
            pipe.cmd("HGET").arg(k.cursors(s, g)).arg(&field);
            pipe.cmd("HGET").arg(k.high_watermarks(s)).arg(&field);
            pipe.cmd("ZRANGE")
                .arg(k.ready(s, g, p))
                .arg(0)
                .arg(limit.saturating_sub(1));
            for index in [k.delayed(s, g, p), k.leased(s, g, p)] {
                pipe.cmd("ZRANGEBYSCORE")
                    .arg(index)
                    .arg("-inf")
                    .arg(now_ms)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(due_cap);
            }
            pipe.cmd("XRANGE")
                .arg(k.log(s, p))
                .arg(entry_id(*guess))
                .arg("+")
                .arg("COUNT")
                .arg(ahead);
        }
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut replies = replies.into_iter();
        let mut next = || replies.next().ok_or_else(|| corrupt("reply", "too short"));
        let read = (value(next()?)?, value(next()?)?);
        // The same group with other settings is left to the write's guard.
        self.judge((s, g), settings, read, at)?;
        let mut parts = Vec::with_capacity(selected.len());
        let mut wanted: Vec<(u32, Vec<u64>)> = Vec::new();
        for &p in selected {
            let cursor_raw: Option<String> = value(next()?)?;
            let high_watermark: Option<u64> = value(next()?)?;
            let mut seqs: Vec<u64> = value(next()?)?;
            let more = key_rate && seqs.len() >= limit;
            let ready_after = if more { seqs.last().copied() } else { None };
            seqs.extend(value::<Vec<u64>>(next()?)?);
            seqs.extend(value::<Vec<u64>>(next()?)?);
            let entries: Vec<Entry> = value(next()?)?;
            seqs.sort_unstable();
            seqs.dedup();
            let cursor = match &cursor_raw {
                Some(raw) => raw.parse().map_err(|_| corrupt("cursor", raw))?,
                None => 1,
            };
            self.views.lock().insert(
                (s.clone(), g.clone(), p),
                View {
                    cursor,
                    high_watermark: high_watermark.unwrap_or(0),
                    quiet: seqs.is_empty(),
                    ahead: Arc::default(),
                    of: Arc::clone(&settings.raw),
                },
            );
            if !seqs.is_empty() {
                wanted.push((p, seqs));
            }
            parts.push(Candidates {
                cursor,
                cursor_raw,
                high_watermark: high_watermark.unwrap_or(0),
                ahead: entries,
                more,
                ready_after: ready_after.unwrap_or(u64::MAX),
                batch: limit,
                ..Candidates::default()
            });
        }
        if wanted.is_empty() {
            return Ok(parts);
        }
        let mut pipe = redis::pipe();
        for (p, seqs) in &wanted {
            pipe.cmd("HMGET").arg(k.deliveries(s, g, *p)).arg(seqs);
        }
        let raws: Vec<Vec<Option<String>>> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        for ((p, seqs), raws) in wanted.into_iter().zip(raws) {
            let i = selected.iter().position(|&q| q == p).expect("selected");
            let part = &mut parts[i];
            for (seq, raw) in seqs.into_iter().zip(raws) {
                let Some(raw) = raw else { continue };
                let delivery = Delivery::decode(&raw)?;
                let claimable = match delivery.status {
                    Status::Available => delivery.available_at.is_none_or(|t| t <= now_ms),
                    Status::Leased => delivery.expires_at.is_some_and(|t| t <= now_ms),
                    Status::Parked | Status::Acked | Status::Dead => false,
                };
                if !claimable {
                    continue;
                }
                if delivery.status == Status::Leased
                    && poisoned(delivery.attempt, config.max_attempts)
                {
                    part.poison.push((seq, raw, delivery));
                } else if key_rate && seq > part.ready_after {
                    part.beyond.push((seq, raw, delivery));
                } else if key_rate || part.claimable.len() < limit {
                    part.claimable.push((seq, raw, delivery));
                }
            }
        }
        Ok(parts)
    }

    /// Under `flow.key_rate` (`docs/groups.md#flow`), when the claims of
    /// a fetch went through every claimable delivery of partition `p` read
    /// so far and its ready index may hold more (`part.more`): reads the
    /// next ready ones past the last read (twice as many as last time, at
    /// most [`Candidates::MAX_BATCH`]) and appends the claimable ones to
    /// `part.claimable` in sequence order, with the due and expired ones
    /// read before that come up to the last of them. Returns how many it
    /// appended. The claims' write is guarded on each record it takes.
    pub(super) async fn more_claimable(
        &self,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        part: &mut Candidates,
        now: Timestamp,
    ) -> Result<usize> {
        let k = &self.keys;
        let now_ms = now.as_millis();
        let batch = part.batch.saturating_mul(2).min(Candidates::MAX_BATCH);
        part.batch = batch;
        let cmd = redis::cmd("ZRANGEBYSCORE")
            .arg(k.ready(s, g, p))
            .arg(format!("({}", part.ready_after))
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(batch)
            .clone();
        let seqs: Vec<u64> = self.run(&cmd, Phase::Read).await?;
        part.more = seqs.len() >= batch;
        part.ready_after = match seqs.last() {
            Some(&last) if part.more => last,
            _ => u64::MAX,
        };
        let mut found = Vec::new();
        if !seqs.is_empty() {
            let cmd = redis::cmd("HMGET")
                .arg(k.deliveries(s, g, p))
                .arg(&seqs)
                .clone();
            let raws: Vec<Option<String>> = self.run(&cmd, Phase::Read).await?;
            for (seq, raw) in seqs.into_iter().zip(raws) {
                let Some(raw) = raw else { continue };
                let delivery = Delivery::decode(&raw)?;
                if delivery.status == Status::Available
                    && delivery.available_at.is_none_or(|t| t <= now_ms)
                {
                    found.push((seq, raw, delivery));
                }
            }
        }
        let upto = part.ready_after;
        let (join, beyond) = std::mem::take(&mut part.beyond)
            .into_iter()
            .partition(|(seq, ..)| *seq <= upto);
        part.beyond = beyond;
        found.extend::<Vec<_>>(join);
        // Read apart, a delivery may have moved between indexes: one
        // record each (the write is guarded on the one kept).
        found.sort_by_key(|(seq, ..)| *seq);
        found.dedup_by_key(|(seq, ..)| *seq);
        let added = found.len();
        part.claimable.extend(found);
        Ok(added)
    }

    /// The `count` events from sequence `from` on, taken from what was read
    /// ahead where it holds them (a log has no gaps, so entries that start
    /// at `from` are the ones wanted). `None` when retention removed some
    /// of them since the cursor was read: that trim moved the cursor, and
    /// the fetch reads again.
    async fn fresh_events(
        &self,
        s: &StreamName,
        p: u32,
        from: u64,
        count: u64,
        ahead: Vec<Entry>,
    ) -> Result<Option<Vec<Event>>> {
        let last = from + count - 1;
        let mut events = Vec::with_capacity(count as usize);
        for (entry, fields) in ahead {
            let seq = super::entry_sequence(&entry)?;
            if (from..=last).contains(&seq) {
                events.push(super::decode_event(s, p, &entry, fields)?);
            }
        }
        if events.first().is_some_and(|e| e.sequence != from) {
            events.clear();
        }
        let have = events.last().map_or(from, |e| e.sequence + 1);
        if have <= last {
            events.extend(self.read_range(s, p, have, last).await?);
        }
        if events.len() as u64 != count {
            if self.first_sequence(s, p).await? > from {
                return Ok(None);
            }
            return Err(corrupt(
                "log",
                format!("partition {p} lacks sequences {from}..{}", from + count),
            ));
        }
        Ok(Some(events))
    }

    /// Extends several leases; per-item results.
    pub(crate) async fn renew_many(
        &self,
        s: &StreamName,
        g: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        validate_renewals(&targets, lease_ms)?;
        let started = self.settings(s, g).await?;
        for _ in 0..MAX_ATTEMPTS {
            let settings = self.settings_again(s, g, &started).await?;
            let now = self.clock.now();
            let expires_at = now.add_ms(lease_ms);
            let held = self.held(s, g, &settings, &targets).await?;
            let mut cas = Cas::default();
            // A renewal depends on no setting, but must not land on a
            // deleted group.
            self.guard_settings(&mut cas, s, g, &settings);
            let mut results = Vec::with_capacity(targets.len());
            for found in held {
                match found {
                    Ok((p, seq, raw, mut delivery)) => {
                        let k = self.keys.partition(s, g, p);
                        cas.hget_is(&k.records, &seq.to_string(), Some(&raw));
                        let old = Slot::of(&delivery);
                        delivery.expires_at = Some(expires_at.as_millis());
                        self.place(&mut cas, &k, seq, Some(old), &delivery);
                        results.push(Ok(expires_at));
                    }
                    Err(e) => results.push(Err(e)),
                }
            }
            if cas.is_empty() {
                // No lease held: unless the group is gone.
                if !results.is_empty() {
                    self.recheck(s, g, &settings).await?;
                }
                return Ok(results);
            }
            if self.apply(&cas).await? == Applied::Yes {
                return Ok(results);
            }
        }
        Err(Error::Failed(format!(
            "renew on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// Where each target's event is: from what this process fetched, else
    /// from the id index (`None`: no such event).
    pub(super) async fn locate(
        &self,
        s: &StreamName,
        settings: &Settings,
        targets: &[SettleTarget],
    ) -> Result<Vec<Option<(u32, u64)>>> {
        let mut located: Vec<Option<(u32, u64)>> = {
            let positions = self.positions.lock();
            targets
                .iter()
                .map(|t| {
                    let key = (s.clone(), t.event_id.clone());
                    let at = positions.get(&key, &settings.stream.identity)?;
                    Some((at.partition, at.sequence))
                })
                .collect()
        };
        let missing: Vec<usize> = (0..targets.len())
            .filter(|&i| located[i].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(located);
        }
        let ids: Vec<&str> = missing
            .iter()
            .map(|&i| targets[i].event_id.as_str())
            .collect();
        let found: Vec<Option<String>> = self
            .run(
                redis::cmd("HMGET").arg(self.keys.ids(s)).arg(&ids),
                Phase::Read,
            )
            .await?;
        for (i, position) in missing.into_iter().zip(found) {
            located[i] = position
                .map(|raw| super::decode_position(&raw))
                .transpose()?;
        }
        Ok(located)
    }

    /// The fencing check ([`fence`]) of each target: the delivery must be
    /// leased under its lease id (and receipt: the log entry id). Per target: where it is, its record as
    /// read, or the item's error.
    pub(super) async fn held(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
        targets: &[SettleTarget],
    ) -> Result<Vec<Result<(u32, u64, String, Delivery)>>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let located = self.locate(s, settings, targets).await?;
        let mut by_partition: HashMap<u32, Vec<u64>> = HashMap::new();
        for &(p, seq) in located.iter().flatten() {
            by_partition.entry(p).or_default().push(seq);
        }
        let by_partition: Vec<(u32, Vec<u64>)> = by_partition.into_iter().collect();
        let mut pipe = redis::pipe();
        for (p, seqs) in &by_partition {
            pipe.cmd("HMGET")
                .arg(self.keys.deliveries(s, g, *p))
                .arg(seqs);
        }
        let raws: Vec<Vec<Option<String>>> = if by_partition.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut self.read_conn())
                .await
                .map_err(|e| map_error(e, Phase::Read))?
        };
        let mut records: HashMap<(u32, u64), String> = HashMap::new();
        for ((p, seqs), raws) in by_partition.into_iter().zip(raws) {
            for (seq, raw) in seqs.into_iter().zip(raws) {
                if let Some(raw) = raw {
                    records.insert((p, seq), raw);
                }
            }
        }
        // What answers a target whose event or record is not there: read
        // only then (`docs/log.md#retention`).
        let unknown = located
            .iter()
            .any(|at| at.is_none_or(|at| !records.contains_key(&at)));
        let firsts = if unknown {
            self.bounds(s, settings.stream.partitions)
                .await?
                .first_sequences
        } else {
            Vec::new()
        };
        let mut out = Vec::with_capacity(targets.len());
        for (target, at) in targets.iter().zip(located) {
            let Some((p, seq)) = at else {
                out.push(Err(unknown_event(&target.event_id, &firsts)));
                continue;
            };
            let Some(raw) = records.get(&(p, seq)) else {
                // Located by what this process fetched: retention may have
                // removed the event since.
                let removed = firsts.get(p as usize).is_some_and(|f| seq < *f);
                out.push(Err(if removed {
                    Error::EventRemoved(target.event_id.as_str().to_owned())
                } else {
                    Error::StaleLease
                }));
                continue;
            };
            let delivery = Delivery::decode(raw)?;
            let receipt = entry_id(seq);
            let held = delivery
                .lease_id
                .as_deref()
                .filter(|_| delivery.status == Status::Leased)
                .map(|id| Held {
                    lease_id: id,
                    receipt: &receipt,
                });
            if let Err(e) = fence(held, target) {
                out.push(Err(e));
                continue;
            }
            out.push(Ok((p, seq, raw.clone(), delivery)));
        }
        Ok(out)
    }
}

/// The log entry id of a sequence: the receipt of its leases.
pub(super) fn entry_id(seq: u64) -> String {
    format!("{seq}-0")
}

/// A reply converted, or the reply's shape reported as corrupt.
pub(super) fn value<T: redis::FromRedisValue>(v: redis::Value) -> Result<T> {
    redis::from_redis_value(v).map_err(|e| corrupt("reply", e))
}

/// A dead letter's member in the group's dead set: scored by sequence,
/// then ordered by partition (zero-padded, so text order is number order).
pub(super) fn dead_member(p: u32, seq: u64) -> String {
    format!("{seq:016}:{p:05}")
}

/// `(partition, sequence)` of a [`dead_member`].
pub(super) fn dead_position(member: &str) -> Result<(u32, u64)> {
    member
        .split_once(':')
        .and_then(|(q, p)| Some((p.parse().ok()?, q.parse().ok()?)))
        .ok_or_else(|| corrupt("dead letter", member))
}
