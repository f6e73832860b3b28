//! Deliveries, claims and renewals on Redis (`docs/groups.md#claims`,
//! `docs/groups.md#leases-and-fencing`).
//!
//! A delivery is one JSON record per (group, partition, sequence) in a
//! hash, indexed by what the claim path needs: `ready` (claimable now, by
//! sequence), `delayed` (by due time), `leased` (by expiry) and `open`
//! (every available or leased one, by sequence: the frontier). A fetch
//! reads the candidates and the cursors, lets the policy share the limit
//! and spot poison, and writes every claim in one script guarded by each
//! record and cursor it read.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Applied, Cas, MAX_ATTEMPTS, Phase, RedisBackend, corrupt, map_error};
use crate::backend::policy::{GroupConfig, POISON_REASON, claim_capacity, poisoned, round_robin};
use crate::backend::{Error, FetchRequest, Result, validate_renewals};
use crate::model::{
    ConsumerId, Event, GroupName, Lease, LeaseId, SettleTarget, StreamName, Timestamp,
};

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    Available,
    Leased,
    Acked,
    Dead,
}

/// One delivery's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Delivery {
    pub(super) event_id: String,
    pub(super) status: Status,
    pub(super) attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) consumer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) leased_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) expires_at: Option<i64>,
    /// For an available delivery: when it becomes claimable (none: now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) available_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dead_at: Option<i64>,
}

impl Delivery {
    /// A delivery of `event_id` never handed out: available now, attempt 0.
    pub(super) fn fresh(event_id: String) -> Self {
        Self {
            event_id,
            status: Status::Available,
            attempt: 0,
            lease_id: None,
            consumer: None,
            leased_at: None,
            expires_at: None,
            available_at: None,
            reason: None,
            dead_at: None,
        }
    }

    pub(super) fn decode(raw: &str) -> Result<Self> {
        serde_json::from_str(raw).map_err(|e| corrupt("delivery", e))
    }

    fn encode(&self) -> String {
        serde_json::to_string(self).expect("a delivery serializes")
    }

    /// This delivery leased to `consumer` until `expires_at`.
    fn leased(
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
        self
    }

    /// This delivery dead-lettered for `reason`.
    pub(super) fn dead(mut self, reason: String, now: Timestamp) -> Self {
        self.status = Status::Dead;
        self.lease_id = None;
        self.expires_at = None;
        self.available_at = None;
        self.reason = Some(reason);
        self.dead_at = Some(now.as_millis());
        self
    }
}

/// Which indexes a delivery is in, as far as `place` needs to know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Slot {
    /// `None`: no record yet.
    status: Option<Status>,
    /// Available with a due time.
    delayed: bool,
    /// Available and never handed out.
    fresh: bool,
}

impl Slot {
    pub(super) fn of(d: &Delivery) -> Self {
        Self {
            status: Some(d.status),
            delayed: d.status == Status::Available && d.available_at.is_some(),
            fresh: d.status == Status::Available && d.attempt == 0,
        }
    }

    fn open(&self) -> bool {
        matches!(self.status, Some(Status::Available | Status::Leased))
    }
}

/// One partition's candidates, as read.
#[derive(Debug, Default)]
struct Candidates {
    cursor: u64,
    cursor_raw: Option<String>,
    high_watermark: u64,
    /// Claimable deliveries by sequence, with the record as read.
    claimable: Vec<(u64, String, Delivery)>,
    /// Expired last attempts: dead letters, not claims.
    poison: Vec<(u64, String, Delivery)>,
}

impl RedisBackend {
    /// A group's retry policy (settings are fixed at creation).
    pub(super) async fn group_config(&self, s: &StreamName, g: &GroupName) -> Result<GroupConfig> {
        let key = (s.clone(), g.clone());
        if let Some(config) = self.groups.read().get(&key) {
            return Ok(config.clone());
        }
        let raw: Option<String> = self
            .run(
                redis::cmd("HGET").arg(self.keys.groups(s)).arg(g.as_str()),
                Phase::Read,
            )
            .await?;
        let raw = raw.ok_or_else(|| Error::GroupNotFound {
            stream: s.clone(),
            group: g.clone(),
        })?;
        let group = super::groups::decode_group(s, g.clone(), &raw)?;
        let config = GroupConfig::from(&group);
        self.groups.write().insert(key, config.clone());
        Ok(config)
    }

    /// Writes a delivery's new record and moves it between the indexes.
    pub(super) fn place(
        &self,
        cas: &mut Cas,
        s: &StreamName,
        g: &GroupName,
        (p, seq): (u32, u64),
        old: Option<Slot>,
        new: &Delivery,
    ) {
        let k = &self.keys;
        let member = seq.to_string();
        cas.write(&["HSET", &k.deliveries(s, g, p), &member, &new.encode()]);
        let (before, after) = (old.unwrap_or_default(), Slot::of(new));
        // Only the indexes that change are written.
        let index = |slot: &Slot| match slot.status {
            Some(Status::Available) if slot.delayed => Some(k.delayed(s, g, p)),
            Some(Status::Available) => Some(k.ready(s, g, p)),
            Some(Status::Leased) => Some(k.leased(s, g, p)),
            _ => None,
        };
        let (from, to) = (index(&before), index(&after));
        if let Some(from) = &from
            && to.as_ref() != Some(from)
        {
            cas.write(&["ZREM", from, &member]);
        }
        if let Some(to) = &to {
            let score = match after.status {
                Some(Status::Available) => new.available_at.map(|t| t.to_string()),
                _ => new.expires_at.map(|t| t.to_string()),
            };
            cas.write(&["ZADD", to, score.as_deref().unwrap_or(&member), &member]);
        }
        if before.fresh != after.fresh {
            let op = if after.fresh { "ZADD" } else { "ZREM" };
            let fresh = k.fresh(s, g, p);
            if after.fresh {
                cas.write(&[op, &fresh, &member, &member]);
            } else {
                cas.write(&[op, &fresh, &member]);
            }
        }
        if before.open() != after.open() {
            let open = k.open(s, g, p);
            if after.open() {
                cas.write(&["ZADD", &open, &member, &member]);
            } else {
                cas.write(&["ZREM", &open, &member]);
            }
        }
        if after.status == Some(Status::Dead) && before.status != Some(Status::Dead) {
            let dead = k.dead(s, g);
            cas.write(&["ZADD", &dead, &member, &dead_member(p, seq)]);
        }
    }

    /// Claims up to `limit` deliveries, fairly across partitions.
    pub(crate) async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        req.validate()?;
        let (partition_count, _) = self.meta(&req.stream).await?;
        let config = self.group_config(&req.stream, &req.group).await?;
        let selected = req.partitions.resolve(partition_count)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.rotate(&req.stream, &req.group) % selected.len();
        for _ in 0..MAX_ATTEMPTS {
            if let Some(leases) = self.fetch_once(&req, &config, &selected, first).await? {
                return Ok(leases);
            }
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
        config: &GroupConfig,
        selected: &[u32],
        first: usize,
    ) -> Result<Option<Vec<Lease>>> {
        let (s, g) = (&req.stream, &req.group);
        let now = self.clock.now();
        let expires_at = now.add_ms(req.lease_ms);
        let limit = req.limit as usize;
        let mut parts = Vec::with_capacity(selected.len());
        for &p in selected {
            parts.push(self.candidates(s, g, p, now, limit, config).await?);
        }
        let capacity: Vec<usize> = parts
            .iter()
            .map(|c| claim_capacity(c.claimable.len(), c.cursor, c.high_watermark))
            .collect();
        let quotas = round_robin(&capacity, limit, first);

        let mut cas = Cas::default();
        let mut claimed: Vec<(u32, u64, u32, LeaseId)> = Vec::new();
        let mut fresh_events: HashMap<(u32, u64), Arc<Event>> = HashMap::new();
        for ((&p, part), &quota) in selected.iter().zip(&parts).zip(&quotas) {
            let records = self.keys.deliveries(s, g, p);
            for (seq, raw, delivery) in &part.poison {
                cas.hget_is(&records, &seq.to_string(), Some(raw));
                let dead = delivery.clone().dead(POISON_REASON.to_owned(), now);
                self.place(&mut cas, s, g, (p, *seq), Some(Slot::of(delivery)), &dead);
            }
            let take = quota.min(part.claimable.len());
            for (seq, raw, delivery) in &part.claimable[..take] {
                cas.hget_is(&records, &seq.to_string(), Some(raw));
                let lease_id = LeaseId::generate();
                let leased = delivery
                    .clone()
                    .leased(&lease_id, &req.consumer_id, now, expires_at);
                self.place(&mut cas, s, g, (p, *seq), Some(Slot::of(delivery)), &leased);
                claimed.push((p, *seq, leased.attempt, lease_id));
            }
            let fresh = (quota - take) as u64;
            if fresh > 0 {
                let cursors = self.keys.cursors(s, g);
                cas.hget_is(&cursors, &p.to_string(), part.cursor_raw.as_deref());
                let events = self.fresh_events(s, p, part.cursor, fresh).await?;
                for event in events {
                    let (seq, event_id) = (event.sequence, event.id.as_str().to_owned());
                    fresh_events.insert((p, seq), Arc::new(event));
                    cas.hget_is(&records, &seq.to_string(), None);
                    let lease_id = LeaseId::generate();
                    let new = Delivery::fresh(event_id).leased(
                        &lease_id,
                        &req.consumer_id,
                        now,
                        expires_at,
                    );
                    self.place(&mut cas, s, g, (p, seq), None, &new);
                    claimed.push((p, seq, 1, lease_id));
                }
                let next = (part.cursor + fresh).to_string();
                cas.write(&["HSET", &cursors, &p.to_string(), &next]);
            }
        }
        if cas.is_empty() {
            return Ok(Some(Vec::new()));
        }
        if self.apply(&cas).await? == Applied::Conflict {
            return Ok(None);
        }
        let mut leases = Vec::with_capacity(claimed.len());
        for (p, seq, attempt, lease_id) in claimed {
            let event = match fresh_events.remove(&(p, seq)) {
                Some(event) => event,
                None => self.event_at(s, p, seq).await?,
            };
            let consumer = req.consumer_id.clone();
            leases.push(Lease::new(
                g.clone(),
                event,
                lease_id,
                consumer,
                attempt,
                now,
                expires_at,
            ));
        }
        leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
        Ok(Some(leases))
    }

    /// What one partition can give a fetch: its cursor and high watermark,
    /// and up to `limit` claimable deliveries (ready, due, expired) in
    /// sequence order, with expired last attempts set apart as poison.
    async fn candidates(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        now: Timestamp,
        limit: usize,
        config: &GroupConfig,
    ) -> Result<Candidates> {
        let k = &self.keys;
        let field = p.to_string();
        let now_ms = now.as_millis();
        // Due retries and expired leases are indexed by time, not sequence:
        // read a generous number of them so that the lowest sequences are
        // among them unless a very large backlog fell due at once.
        let due_cap = limit.saturating_mul(4).saturating_add(1000);
        let due = |index: String| {
            redis::cmd("ZRANGEBYSCORE")
                .arg(index)
                .arg("-inf")
                .arg(now_ms)
                .arg("LIMIT")
                .arg(0)
                .arg(due_cap)
                .clone()
        };
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(k.cursors(s, g)).arg(&field);
        pipe.cmd("HGET").arg(k.high_watermarks(s)).arg(&field);
        pipe.cmd("ZRANGE")
            .arg(k.ready(s, g, p))
            .arg(0)
            .arg(limit.saturating_sub(1));
        pipe.add_command(due(k.delayed(s, g, p)));
        pipe.add_command(due(k.leased(s, g, p)));
        type Read = (Option<String>, Option<u64>, Vec<u64>, Vec<u64>, Vec<u64>);
        let (cursor_raw, high_watermark, ready, delayed, expired): Read = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let cursor = match &cursor_raw {
            Some(raw) => raw.parse().map_err(|_| corrupt("cursor", raw))?,
            None => 1,
        };
        let mut seqs: Vec<u64> = Vec::with_capacity(ready.len() + delayed.len() + expired.len());
        seqs.extend(ready);
        seqs.extend(delayed);
        seqs.extend(expired);
        seqs.sort_unstable();
        seqs.dedup();
        let mut part = Candidates {
            cursor,
            cursor_raw,
            high_watermark: high_watermark.unwrap_or(0),
            ..Candidates::default()
        };
        if seqs.is_empty() {
            return Ok(part);
        }
        let fields: Vec<String> = seqs.iter().map(u64::to_string).collect();
        let raws: Vec<Option<String>> = self
            .run(
                redis::cmd("HMGET").arg(k.deliveries(s, g, p)).arg(&fields),
                Phase::Read,
            )
            .await?;
        for (seq, raw) in seqs.into_iter().zip(raws) {
            let Some(raw) = raw else { continue };
            let delivery = Delivery::decode(&raw)?;
            let claimable = match delivery.status {
                Status::Available => delivery.available_at.is_none_or(|t| t <= now_ms),
                Status::Leased => delivery.expires_at.is_some_and(|t| t <= now_ms),
                Status::Acked | Status::Dead => false,
            };
            if !claimable {
                continue;
            }
            if delivery.status == Status::Leased && poisoned(delivery.attempt, config.max_attempts)
            {
                part.poison.push((seq, raw, delivery));
            } else if part.claimable.len() < limit {
                part.claimable.push((seq, raw, delivery));
            }
        }
        Ok(part)
    }

    /// The `count` events from sequence `from` on.
    async fn fresh_events(
        &self,
        s: &StreamName,
        p: u32,
        from: u64,
        count: u64,
    ) -> Result<Vec<Event>> {
        let events: Vec<Event> = self.read_range(s, p, from, from + count - 1).await?;
        if events.len() as u64 != count {
            return Err(corrupt(
                "log",
                format!("partition {p} lacks sequences {from}..{}", from + count),
            ));
        }
        Ok(events)
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
        self.meta(s).await?;
        self.group_config(s, g).await?;
        for _ in 0..MAX_ATTEMPTS {
            let now = self.clock.now();
            let expires_at = now.add_ms(lease_ms);
            let held = self.held(s, g, &targets).await?;
            let mut cas = Cas::default();
            let mut results = Vec::with_capacity(targets.len());
            for found in held {
                match found {
                    Ok((p, seq, raw, mut delivery)) => {
                        let records = self.keys.deliveries(s, g, p);
                        cas.hget_is(&records, &seq.to_string(), Some(&raw));
                        let old = Slot::of(&delivery);
                        delivery.expires_at = Some(expires_at.as_millis());
                        self.place(&mut cas, s, g, (p, seq), Some(old), &delivery);
                        results.push(Ok(expires_at));
                    }
                    Err(e) => results.push(Err(e)),
                }
            }
            if cas.is_empty() || self.apply(&cas).await? == Applied::Yes {
                return Ok(results);
            }
        }
        Err(Error::Failed(format!(
            "renew on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// The fencing check of each target: the delivery must be leased under
    /// its lease id (and receipt). Per target: where it is, its record as
    /// read, or the item's error.
    pub(super) async fn held(
        &self,
        s: &StreamName,
        g: &GroupName,
        targets: &[SettleTarget],
    ) -> Result<Vec<Result<(u32, u64, String, Delivery)>>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = targets.iter().map(|t| t.event_id.as_str()).collect();
        let positions: Vec<Option<String>> = self
            .run(
                redis::cmd("HMGET").arg(self.keys.ids(s)).arg(&ids),
                Phase::Read,
            )
            .await?;
        let mut by_partition: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut located = Vec::with_capacity(targets.len());
        for position in positions {
            let at = position
                .map(|raw| super::decode_position(&raw))
                .transpose()?;
            if let Some((p, seq)) = at {
                by_partition.entry(p).or_default().push(seq);
            }
            located.push(at);
        }
        let mut records: HashMap<(u32, u64), String> = HashMap::new();
        for (p, seqs) in by_partition {
            let fields: Vec<String> = seqs.iter().map(u64::to_string).collect();
            let raws: Vec<Option<String>> = self
                .run(
                    redis::cmd("HMGET")
                        .arg(self.keys.deliveries(s, g, p))
                        .arg(&fields),
                    Phase::Read,
                )
                .await?;
            for (seq, raw) in seqs.into_iter().zip(raws) {
                if let Some(raw) = raw {
                    records.insert((p, seq), raw);
                }
            }
        }
        let mut out = Vec::with_capacity(targets.len());
        for (target, at) in targets.iter().zip(located) {
            let Some((p, seq)) = at else {
                out.push(Err(Error::StaleLease));
                continue;
            };
            let Some(raw) = records.get(&(p, seq)) else {
                out.push(Err(Error::StaleLease));
                continue;
            };
            let delivery = Delivery::decode(raw)?;
            if delivery.status != Status::Leased
                || delivery.lease_id.as_deref() != Some(target.lease_id.as_str())
            {
                out.push(Err(Error::StaleLease));
                continue;
            }
            if let Some(receipt) = &target.receipt
                && receipt != target.lease_id.as_str()
            {
                out.push(Err(Error::ReceiptMismatch));
                continue;
            }
            out.push(Ok((p, seq, raw.clone(), delivery)));
        }
        Ok(out)
    }
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
