//! Dead-letter pages, redrive, replay, reset (`docs/groups.md#dead-letters`,
//! `docs/groups.md#replay-and-reset`) and history queries on Redis.
//!
//! Re-opening is one rule for all three (redrive, replay by sequence,
//! time, query or ids): the delivery becomes available now — with fresh
//! attempts for a redrive — and a sequence the group never delivered but
//! that lies before its cursor (before its start) gets a record. Positions
//! are re-opened in chunks, each one guarded script.

use std::collections::BTreeMap;

use super::claims::{Delivery, Slot, Status, dead_member, dead_position};
use super::gates::Reopened;
use super::groups::guard_firsts;
use super::retention::{gone_id, gone_position};
use super::{
    Applied, Bounds, Cas, MAX_ATTEMPTS, Phase, RedisBackend, Settings, StreamFacts, corrupt,
    decode_position, first_field, map_error,
};
use rheo_core::backend::policy::all_located;
use rheo_core::backend::{DeadLettersRequest, Error, Redrive, Replay, ResetRequest, Result};
use rheo_core::model::{
    DeadLetter, DeadLetterPage, Direction, Event, EventId, GroupName, OrderField, Page, Query,
    StreamName, Timestamp,
};

/// Positions re-opened per script.
const REOPEN_CHUNK: usize = 500;

/// Events read per `XRANGE` while a query scans.
const SCAN_CHUNK: usize = 500;

impl RedisBackend {
    /// `(partition, sequence)` of each id; an id the stream lacks is an error.
    async fn locate_all(&self, s: &StreamName, ids: &[EventId]) -> Result<Vec<(u32, u64)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let raw: Vec<&str> = ids.iter().map(EventId::as_str).collect();
        let found: Vec<Option<String>> = self
            .run(
                redis::cmd("HMGET").arg(self.keys.ids(s)).arg(&raw),
                Phase::Read,
            )
            .await?;
        let positions = found
            .into_iter()
            .map(|p| p.map(|raw| decode_position(&raw)).transpose())
            .collect::<Result<Vec<_>>>()?;
        all_located(raw.iter().copied().zip(positions))
    }

    pub(crate) async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        let partition_count = self.group_now(s, g, false).await?.0.stream.partitions;
        let after = match &req.after {
            None => None,
            Some(id) => {
                // The event's position, or where its dead letter was when
                // retention removed the event.
                let mut pipe = redis::pipe();
                pipe.cmd("HGET").arg(self.keys.ids(s)).arg(id.as_str());
                pipe.cmd("HGET")
                    .arg(self.keys.gone(s, g))
                    .arg(gone_id(id.as_str()));
                let (live, gone): (Option<String>, Option<String>) = pipe
                    .query_async(&mut self.read_conn())
                    .await
                    .map_err(|e| map_error(e, Phase::Read))?;
                let raw =
                    (live.or(gone)).ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
                Some(decode_position(&raw)?)
            }
        };
        let limit = req.limit as usize;
        // Members sort by sequence, then partition: the page starts after the
        // cursor's member, reading at most a partition count more to skip
        // the cursor's own sequence.
        let (min, skip_to) = match after {
            None => ("-inf".to_owned(), None),
            Some((p, seq)) => (seq.to_string(), Some(dead_member(p, seq))),
        };
        let members: Vec<String> = self
            .run(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(self.keys.dead(s, g))
                    .arg(min)
                    .arg("+inf")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit + partition_count as usize),
                Phase::Read,
            )
            .await?;
        let mut dead_letters = Vec::new();
        for member in members
            .into_iter()
            .filter(|m| skip_to.as_ref().is_none_or(|after| m > after))
            .take(limit)
        {
            let (p, seq) = dead_position(&member)?;
            let raw: Option<String> = self
                .run(
                    redis::cmd("HGET")
                        .arg(self.keys.deliveries(s, g, p))
                        .arg(seq),
                    Phase::Read,
                )
                .await?;
            let record = Delivery::decode(&raw.ok_or_else(|| corrupt("dead letter", &member))?)?;
            let event = self.stored_event(s, p, seq).await?;
            let event_id = match &event {
                Some(event) => event.id.clone(),
                // Retention removed the event: its id was kept.
                None => self.gone_event_id(s, g, p, seq).await?,
            };
            dead_letters.push(DeadLetter {
                event_id,
                partition: p,
                sequence: seq,
                attempt: record.attempt,
                reason: record.reason.unwrap_or_default(),
                dead_lettered_at: Timestamp::from_millis(record.dead_at.unwrap_or_default()),
                event: event.map(|e| (*e).clone()),
            });
        }
        let next = (dead_letters.len() == limit)
            .then(|| dead_letters.last().map(|d| d.event_id.clone()))
            .flatten();
        Ok(DeadLetterPage { dead_letters, next })
    }

    pub(crate) async fn redrive(
        &self,
        s: &StreamName,
        g: &GroupName,
        which: Redrive,
    ) -> Result<u64> {
        let (started, _) = self.group_now(s, g, false).await?;
        let candidates = match which {
            Redrive::All => self.dead_positions(s, g).await?,
            Redrive::Events(ids) => self.locate_all(s, &ids).await?,
        };
        let count = self.reopen(s, g, &started, &candidates, true).await?;
        if count > 0 {
            self.wake(s).await;
        }
        Ok(count)
    }

    pub(crate) async fn replay(&self, s: &StreamName, g: &GroupName, how: Replay) -> Result<u64> {
        how.validate()?;
        let (started, bounds) = self.group_now(s, g, true).await?;
        let partition_count = started.stream.partitions;
        let hws = &bounds.high_watermarks;
        let mut positions = Vec::new();
        // Up to the cursor, but never past the partition's last event: a
        // start point past the end names sequences that hold no event yet
        // (they are skipped when appended, not re-opened).
        let end = |hws: &[u64], p: u32, cursor: u64| cursor.min(hws[p as usize].saturating_add(1));
        match how {
            Replay::FromSequence { after, partitions } => {
                for p in partitions.resolve(partition_count)? {
                    // Below the log start nothing is left to re-open.
                    let after = after.max(bounds.first_sequences[p as usize] - 1);
                    let end = end(hws, p, self.cursor(s, g, p).await?);
                    positions.extend((after.saturating_add(1)..end).map(|q| (p, q)));
                }
            }
            Replay::FromTime { from, partitions } => {
                for p in partitions.resolve(partition_count)? {
                    if let Some(first) = self.first_at_or_after(s, p, from).await? {
                        let end = end(hws, p, self.cursor(s, g, p).await?);
                        positions.extend((first..end).map(|q| (p, q)));
                    }
                }
            }
            Replay::Query(query) => {
                let unbounded = Query {
                    cursor: None,
                    ..query
                };
                let stream = (started.stream.clone(), bounds.clone());
                let matching = self.scan_in(s, stream, &unbounded, usize::MAX).await?;
                positions.extend(matching.iter().map(|e| (e.partition, e.sequence)));
            }
            Replay::EventIds(ids) => positions = self.locate_all(s, &ids).await?,
        }
        let count = self.reopen(s, g, &started, &positions, false).await?;
        self.wake(s).await;
        Ok(count)
    }

    /// Re-opens deliveries (`fresh_attempts` for a redrive, which only
    /// touches dead letters and quarantined heads); returns how many were
    /// not available already.
    async fn reopen(
        &self,
        s: &StreamName,
        g: &GroupName,
        started: &Settings,
        positions: &[(u32, u64)],
        fresh_attempts: bool,
    ) -> Result<u64> {
        let mut count = 0;
        for chunk in positions.chunks(REOPEN_CHUNK) {
            count += (self.reopen_chunk(s, g, started, chunk, fresh_attempts)).await?;
        }
        Ok(count)
    }

    async fn reopen_chunk(
        &self,
        s: &StreamName,
        g: &GroupName,
        started: &Settings,
        positions: &[(u32, u64)],
        fresh_attempts: bool,
    ) -> Result<u64> {
        for _ in 0..MAX_ATTEMPTS {
            // Read again after a conflict that found them changed: the
            // ordering or the flow gates what this re-opens.
            let settings = self.settings_again(s, g, started).await?;
            let gating = settings.config.gating();
            let mut by_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            for &(p, q) in positions {
                by_partition.entry(p).or_default().push(q);
            }
            // An event named twice is one delivery, re-opened (and counted) once.
            for seqs in by_partition.values_mut() {
                seqs.sort_unstable();
                seqs.dedup();
            }
            let mut cas = Cas::default();
            self.guard_settings(&mut cas, s, g, &settings);
            let mut count = 0;
            for (p, seqs) in by_partition {
                let cursor = self.cursor(s, g, p).await?;
                let cursors = self.keys.cursors(s, g);
                let cursor_text = cursor.to_string();
                cas.hget_is(&cursors, &p.to_string(), Some(&cursor_text));
                let fields: Vec<String> = seqs.iter().map(u64::to_string).collect();
                let k = self.keys.partition(s, g, p);
                let raws: Vec<Option<String>> = self
                    .run(
                        redis::cmd("HMGET").arg(&k.records).arg(&fields),
                        Phase::Read,
                    )
                    .await?;
                // Below the cursor, no record means acked on the first
                // attempt, or never delivered below the floor (`Status`).
                let floor: Option<u64> = self
                    .run(
                        redis::cmd("HGET").arg(self.keys.floors(s, g)).arg(p),
                        Phase::Read,
                    )
                    .await?;
                let floor = floor.unwrap_or(1);
                // Retention removed what lies below the log start: nothing
                // to re-open there, a dead letter included. A trim in
                // between sends this round again.
                let first = self.first_sequence(s, p).await?;
                let stored = (first > 1).then(|| first.to_string());
                let hw = self.keys.high_watermarks(s);
                cas.hget_is(&hw, &first_field(p), stored.as_deref());
                let mut reopened = Vec::new();
                for (seq, raw) in seqs.iter().zip(raws) {
                    if *seq < first {
                        continue;
                    }
                    let before = match &raw {
                        Some(raw) => Some(Delivery::decode(raw)?),
                        None => None,
                    };
                    // A redrive takes dead letters, and heads the
                    // quarantine holds (`docs/groups.md#quarantine`): their
                    // lease is dropped like any re-opened lease.
                    if fresh_attempts
                        && before
                            .as_ref()
                            .is_none_or(|d| d.status != Status::Dead && !d.is_quarantined())
                    {
                        continue;
                    }
                    if before.is_none() && *seq >= cursor {
                        continue; // not delivered yet: nothing to re-open
                    }
                    let new = match before {
                        Some(d) => {
                            if !matches!(d.status, Status::Available | Status::Parked) {
                                count += 1;
                            }
                            let attempt = if fresh_attempts { 0 } else { d.attempt };
                            Delivery {
                                status: Status::Available,
                                attempt,
                                lease_id: None,
                                expires_at: None,
                                available_at: None,
                                dead_at: None,
                                // Re-opened: no slot of its key's bucket
                                // is kept for it (`docs/groups.md#flow`).
                                paced: false,
                                ..d
                            }
                        }
                        None => {
                            count += 1;
                            Delivery::recordless(*seq, floor)
                        }
                    };
                    reopened.push(Reopened {
                        seq: *seq,
                        raw,
                        new,
                    });
                }
                if gating.is_gated() && !reopened.is_empty() {
                    self.regate(&mut cas, (s, gating), &k, &mut reopened)
                        .await?;
                }
                for r in reopened {
                    let old = match &r.raw {
                        Some(raw) => {
                            cas.hget_is(&k.records, &r.seq.to_string(), Some(raw));
                            let d = Delivery::decode(raw)?;
                            if d.status == Status::Dead {
                                cas.write(&["ZREM", &k.dead, &dead_member(p, r.seq)]);
                            }
                            Some(Slot::of(&d))
                        }
                        None => {
                            cas.hget_is(&k.records, &r.seq.to_string(), None);
                            None
                        }
                    };
                    self.place(&mut cas, &k, r.seq, old, &r.new);
                }
            }
            if cas.is_empty() || self.apply(&cas).await? == Applied::Yes {
                return Ok(count);
            }
        }
        Err(Error::Failed(format!(
            "re-opening deliveries on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    pub(crate) async fn reset(&self, req: ResetRequest) -> Result<()> {
        req.validate()?;
        for _ in 0..MAX_ATTEMPTS {
            if self.reset_once(&req).await? == Applied::Yes {
                self.wake(&req.stream).await;
                return Ok(());
            }
        }
        Err(Error::Failed(format!(
            "the settings of group {:?} changed {MAX_ATTEMPTS} times while it was being reset; \
             retry it",
            req.group.as_str()
        )))
    }

    /// One attempt of a reset; `Conflict` when the group's settings
    /// changed meanwhile (its ordering or flow, by another reset).
    async fn reset_once(&self, req: &ResetRequest) -> Result<Applied> {
        let (s, g) = (&req.stream, &req.group);
        // Read afresh: a change of ordering or flow rewrites them, and the
        // reset must not land on a deleted group.
        self.forget_settings(s, g);
        let (settings, _) = self.group_now(s, g, false).await?;
        // The ordering and flow after the reset, checked together before
        // anything changes; written with it (the write is guarded on the
        // settings they were read from).
        let config = &settings.config;
        let (ordering, flow) = req.settings_after((config.ordering, config.flow))?;
        let partition_count = settings.stream.partitions;
        let selected = req.partitions.resolve(partition_count)?;
        let (starts, bounds) = self.start_points(s, partition_count, &req.start).await?;
        let dead = self.dead_positions(s, g).await?;
        let cmd = redis::cmd("HGETALL").arg(self.keys.gone(s, g)).clone();
        let gone: BTreeMap<String, String> = self.run(&cmd, Phase::Read).await?;
        let mut cas = Cas::default();
        let k = &self.keys;
        // Guarded on the stream and the settings as read: a group deleted
        // meanwhile is not found, not brought back. With an ordering or a
        // flow, every partition is reset (`ResetRequest::validate`): every
        // delivery gated under the old ones is forgotten with it, and every
        // write that depends on them is guarded on these settings, so no
        // server goes on under the old ones.
        self.guard_settings(&mut cas, s, g, &settings);
        // Start points clamped to the log starts as read, and the removed
        // events' ids of its dead letters as read: a trim in between sends
        // it round again.
        guard_firsts(&mut cas, &k.high_watermarks(s), &bounds);
        let gone_key = k.gone(s, g);
        cas.hash_len_is(&gone_key, gone.len());
        if req.ordering.is_some() || req.flow.is_some() {
            let raw = super::groups::with_gating(&settings.raw, ordering, &flow)?;
            cas.write(&["HSET", &k.groups(s), g.as_str(), &raw]);
        }
        let dead_key = k.dead(s, g);
        let cursors = k.cursors(s, g);
        let floors = k.floors(s, g);
        for &p in &selected {
            for key in [
                k.deliveries(s, g, p),
                k.ready(s, g, p),
                k.delayed(s, g, p),
                k.leased(s, g, p),
                k.open(s, g, p),
                k.fresh(s, g, p),
                k.paced(s, g, p),
                k.gates(s, g, p),
                k.counts(s, g, p),
                // Its key rate's buckets start full (`docs/groups.md#flow`).
                k.tats(s, g, p),
            ] {
                cas.write(&["DEL", &key]);
            }
            for &(_, seq) in dead.iter().filter(|(dp, _)| *dp == p) {
                cas.write(&["ZREM", &dead_key, &dead_member(p, seq)]);
                let at = gone_position(p, seq);
                if let Some(id) = gone.get(&at) {
                    cas.write(&["HDEL", &gone_key, &at, &gone_id(id)]);
                }
            }
            let start = (starts[p as usize] + 1).to_string();
            cas.write(&["HSET", &cursors, &p.to_string(), &start]);
            cas.write(&["HSET", &floors, &p.to_string(), &start]);
        }
        let applied = self.apply(&cas).await?;
        self.forget_settings(s, g);
        Ok(applied)
    }

    /// `(partition, sequence)` of every dead letter of the group.
    async fn dead_positions(&self, s: &StreamName, g: &GroupName) -> Result<Vec<(u32, u64)>> {
        let cmd = redis::cmd("ZRANGE")
            .arg(self.keys.dead(s, g))
            .arg(0)
            .arg(-1)
            .clone();
        let members: Vec<String> = self.run(&cmd, Phase::Read).await?;
        members.iter().map(|m| dead_position(m)).collect()
    }

    /// A history query, on the stream as stored now.
    pub(crate) async fn query(&self, s: &StreamName, query: &Query) -> Result<Page> {
        query.validate()?;
        let stream = self.stream_now(s).await?;
        let events = self.scan_in(s, stream, query, query.limit as usize).await?;
        Ok(query.page(events))
    }

    /// The events `query` matches in stream `s` with its high watermarks
    /// and log starts as read, in its order, at most `limit`. Ordered by
    /// sequence, each partition is read from its bound (none below its log
    /// start) until it has given `limit` matches; ordered by time, its
    /// whole sequence range is read (`docs/backends.md#redis`).
    async fn scan_in(
        &self,
        s: &StreamName,
        (facts, bounds): (StreamFacts, Bounds),
        query: &Query,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let partition_count = facts.partitions;
        let mut hits = Vec::new();
        for p in 0..partition_count {
            let index = p as usize;
            let Some((lo, hi)) = query.sequence_range(p, bounds.high_watermarks[index]) else {
                continue;
            };
            let lo = lo.max(bounds.first_sequences[index]);
            if lo > hi {
                continue;
            }
            let (by_sequence, descending) = (
                query.order.field == OrderField::Sequence,
                query.order.dir == Direction::Desc,
            );
            let wanted = if by_sequence { limit } else { usize::MAX };
            let backwards = by_sequence && descending;
            let mut found = 0;
            let mut next = if backwards { hi } else { lo };
            while found < wanted {
                let (first, last) = if backwards {
                    (next.saturating_sub(SCAN_CHUNK as u64 - 1).max(lo), next)
                } else {
                    (next, next.saturating_add(SCAN_CHUNK as u64 - 1).min(hi))
                };
                let mut chunk = self.read_range(s, p, first, last).await?;
                if backwards {
                    chunk.reverse();
                }
                for event in chunk.into_iter().filter(|e| query.matches(e)) {
                    if found < wanted {
                        hits.push(event);
                        found += 1;
                    }
                }
                match backwards {
                    true if first == lo => break,
                    true => next = first - 1,
                    false if last == hi => break,
                    false => next = last + 1,
                }
            }
        }
        hits.sort_by(|a, b| query.order.compare(a, b));
        hits.truncate(limit);
        Ok(hits)
    }
}
