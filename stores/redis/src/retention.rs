//! Retention on Redis (`docs/log.md#retention`, `docs/backends.md#redis`):
//! a stream's retention is part of its stored value (after its identity,
//! which guards compare, so a change of retention is no change of stream);
//! a trim removes the oldest events of one partition, at most a batch of
//! them, in one guarded script.
//!
//! A trim reads the partition's first sequence and high watermark, the
//! stream's groups, the events it removes (their ids and keys), and per
//! group its cursor and the records of those sequences; under a gating
//! (an ordering or a `flow.key_concurrency`) also each gate whose open deliveries it closes (`gate_view.lua`, from
//! the first sequence it keeps on). It decides with the shared policy
//! (`regate`) and writes, guarded on all it read: `XTRIM … MINID`, the id
//! index and time index entries of the removed events, the new first
//! sequence, and per group the moved cursor, the closed open deliveries
//! (records and indexes; gate members and counts, the next delivery of a
//! gate whose head went let out), the dropped acked records, the ids of
//! its dead letters' removed events ([`Keys::gone`]) and the events it had
//! not settled ([`Keys::skipped`]). Other clients see the partition and
//! every group before the trim or after it.
//!
//! [`Keys::gone`]: super::Keys::gone
//! [`Keys::skipped`]: super::Keys::skipped

use std::collections::{BTreeMap, HashMap};

use super::claims::{Delivery, Entry, Status, entry_id, value};
use super::gates::{GateAsk, member};
use super::groups::decode_group;
use super::{
    Applied, Bounds, Cas, MAX_ATTEMPTS, PartitionKeys, Phase, RedisBackend, back_off, corrupt,
    first_field, map_error, stream_value,
};
use rheo_core::backend::policy::{Gating, GroupConfig, skipped_by_trim};
use rheo_core::backend::retention::TRIM_BATCH;
use rheo_core::backend::{Error, Result, TrimRequest, Trimmed};
use rheo_core::model::{Event, EventId, GroupName, Retention, Stream, StreamName};

/// The field of [`Keys::gone`](super::Keys::gone) naming a removed event
/// by its position.
pub(super) fn gone_position(partition: u32, seq: u64) -> String {
    format!("{partition}:{seq}")
}

/// The field of [`Keys::gone`](super::Keys::gone) naming a removed event's
/// position by its id.
pub(super) fn gone_id(id: &str) -> String {
    format!("id:{id}")
}

/// One group of the stream as a trim reads it.
struct Reading {
    name: GroupName,
    /// Its settings as stored (guarded).
    raw: String,
    gating: Gating,
    cursor_raw: Option<String>,
    /// The records of the removed sequences, in order.
    records: Vec<Option<String>>,
}

/// A gate of a group that a trim closes open deliveries of.
struct Closing {
    /// Index into the trim's groups.
    group: usize,
    gate: String,
    /// The closed deliveries.
    closed: Vec<(u64, Delivery)>,
}

impl RedisBackend {
    /// Sets or clears a stream's retention: its stored value, rewritten
    /// after its identity, guarded on the value as read.
    pub(crate) async fn set_retention(
        &self,
        s: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        rheo_core::backend::validate_retention(retention.as_ref())?;
        let streams = self.keys.streams();
        for attempt in 0..MAX_ATTEMPTS {
            let at = self.catalog.generation();
            let cmd = redis::cmd("HGET").arg(&streams).arg(s.as_str()).clone();
            let raw: Option<String> = self.run(&cmd, Phase::Read).await?;
            let facts = self.found_stream(s, raw.clone(), at)?;
            let value = stream_value(&facts.identity, retention.as_ref());
            let mut cas = Cas::default();
            cas.hget_is(&streams, s.as_str(), raw.as_deref());
            cas.write(&["HSET", &streams, s.as_str(), &value]);
            if self.apply(&cas).await? == Applied::Yes {
                return self.get_stream(s).await;
            }
            back_off(attempt).await;
        }
        Err(Error::Failed(format!(
            "setting the retention of {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// Removes the partition's events below `req.before`, at most
    /// `req.limit` (and at most [`TRIM_BATCH`]) of them, in one guarded
    /// script (see the module's documentation); read again when something
    /// it read changed.
    pub(crate) async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        for attempt in 0..MAX_ATTEMPTS {
            if let Some(trimmed) = self.trim_once(&req).await? {
                if !trimmed.skipped.is_empty() {
                    // Gates may have let deliveries out; the script told
                    // the other nodes.
                    self.notifier.notify(&req.stream);
                }
                return Ok(trimmed);
            }
            back_off(attempt).await;
        }
        Err(Error::Failed(format!(
            "trimming {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            req.stream.as_str()
        )))
    }

    /// One attempt of a trim; `None` when something it read changed.
    async fn trim_once(&self, req: &TrimRequest) -> Result<Option<Trimmed>> {
        let (s, p) = (&req.stream, req.partition);
        let k = &self.keys;
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(k.streams()).arg(s.as_str());
        pipe.cmd("HGETALL").arg(k.groups(s));
        pipe.cmd("HGETALL").arg(k.high_watermarks(s));
        #[allow(clippy::type_complexity)]
        let (raw, groups, hw): (
            Option<String>,
            BTreeMap<String, String>,
            HashMap<String, u64>,
        ) = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let facts = self.found_stream(s, raw, at)?;
        if p >= facts.partitions {
            return Err(Error::InvalidPartition {
                partition: p,
                partition_count: facts.partitions,
            });
        }
        let bounds = Bounds::of(&hw, facts.partitions);
        let (first, high_watermark) = (
            bounds.first_sequences[p as usize],
            bounds.high_watermarks[p as usize],
        );
        let capped = TrimRequest {
            limit: req.limit.min(TRIM_BATCH),
            ..req.clone()
        };
        let upto = capped.end(first, high_watermark);
        if upto <= first {
            return Ok(Some(Trimmed::nothing(first)));
        }
        let seqs: Vec<u64> = (first..upto).collect();
        let groups = (groups.into_iter())
            .map(|(name, raw)| Ok((group_name(&name)?, raw)))
            .collect::<Result<Vec<(GroupName, String)>>>()?;

        // The removed events and the one after them (the time index's new
        // first of its run), and each group's cursor and records of them.
        let mut pipe = redis::pipe();
        pipe.cmd("XRANGE")
            .arg(k.log(s, p))
            .arg(entry_id(first))
            .arg(entry_id(upto));
        for (name, _) in &groups {
            pipe.cmd("HGET").arg(k.cursors(s, name)).arg(p);
            pipe.cmd("HMGET").arg(k.deliveries(s, name, p)).arg(&seqs);
        }
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut replies = replies.into_iter();
        let mut next = || replies.next().ok_or_else(|| corrupt("reply", "too short"));
        let entries: Vec<Entry> = value(next()?)?;
        let mut events = entries
            .into_iter()
            .map(|(entry, fields)| super::decode_event(s, p, &entry, fields))
            .collect::<Result<Vec<Event>>>()?;
        let kept_first = events
            .last()
            .filter(|e| e.sequence == upto)
            .map(|e| e.timestamp);
        if kept_first.is_some() {
            events.pop();
        }
        let whole = events.len() == seqs.len()
            && events.iter().zip(&seqs).all(|(e, seq)| e.sequence == *seq);
        if !whole {
            // Another trim got in between, or the log is not what the
            // first sequence says.
            if self.first_sequence(s, p).await? != first {
                return Ok(None);
            }
            return Err(corrupt(
                "log",
                format!("partition {p} lacks sequences {first}..{upto}"),
            ));
        }
        let mut readings = Vec::with_capacity(groups.len());
        for (name, raw) in groups {
            let gating = GroupConfig::from(&decode_group(s, name.clone(), &raw)?).gating();
            readings.push(Reading {
                name,
                raw,
                gating,
                cursor_raw: value(next()?)?,
                records: value(next()?)?,
            });
        }

        let mut cas = Cas::default();
        self.guard_stream(&mut cas, s, &facts);
        // The partition's log start as read: another trim in between fails
        // it (the events up to `upto` are then as read: the log only loses
        // events from its front).
        let hw_key = k.high_watermarks(s);
        let stored_first = (first > 1).then(|| first.to_string());
        cas.hget_is(&hw_key, &first_field(p), stored_first.as_deref());
        // Exactly these groups, with these settings.
        let groups_key = k.groups(s);
        cas.hash_len_is(&groups_key, readings.len());
        for r in &readings {
            cas.hget_is(&groups_key, r.name.as_str(), Some(&r.raw));
        }

        let mut skipped = Vec::new();
        let mut closing: Vec<Closing> = Vec::new();
        for (i, r) in readings.iter().enumerate() {
            let pk = k.partition(s, &r.name, p);
            let cursors = k.cursors(s, &r.name);
            cas.hget_is(&cursors, &p.to_string(), r.cursor_raw.as_deref());
            let cursor: u64 = match &r.cursor_raw {
                Some(raw) => raw.parse().map_err(|_| corrupt("cursor", raw))?,
                None => 1,
            };
            let gone_key = k.gone(s, &r.name);
            let mut open = 0;
            let mut gates: BTreeMap<String, Vec<(u64, Delivery)>> = BTreeMap::new();
            for ((seq, raw), event) in seqs.iter().zip(&r.records).zip(&events) {
                let field = seq.to_string();
                cas.hget_is(&pk.records, &field, raw.as_deref());
                let Some(raw) = raw else { continue };
                let delivery = Delivery::decode(raw)?;
                match delivery.status {
                    // A dead letter stays, with its event's id.
                    Status::Dead => {
                        let at = gone_position(p, *seq);
                        let id = event.id.as_str();
                        cas.write(&["HSET", &gone_key, &at, id, &gone_id(id), &at]);
                    }
                    Status::Acked => cas.write(&["HDEL", &pk.records, &field]),
                    Status::Available | Status::Parked | Status::Leased => {
                        open += 1;
                        self.unplace(&mut cas, &pk, *seq, &delivery);
                        if let Some(gate) = r.gating.gate(event.key.as_deref()) {
                            (gates.entry(gate.to_owned()).or_default()).push((*seq, delivery));
                        }
                    }
                }
            }
            closing.extend(gates.into_iter().map(|(gate, closed)| Closing {
                group: i,
                gate,
                closed,
            }));
            // Its open deliveries there, and the events it never reached.
            let unsettled = skipped_by_trim(open, cursor, first, upto);
            if cursor < upto {
                cas.write(&["HSET", &cursors, &p.to_string(), &upto.to_string()]);
            }
            if unsettled > 0 {
                let n = unsettled.to_string();
                cas.write(&["HINCRBY", &k.skipped(s, &r.name), &p.to_string(), &n]);
                skipped.push((r.name.clone(), unsettled));
            }
        }
        self.close_gates(&mut cas, s, p, upto, &readings, closing)
            .await?;

        // The events: the log entries, their ids and times, the log start.
        cas.write(&["XTRIM", &k.log(s, p), "MINID", &entry_id(upto)]);
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        for chunk in ids.chunks(Cas::MAX_ARGS / 2) {
            let ids_key = k.ids(s);
            let mut command = vec!["HDEL", ids_key.as_str()];
            command.extend(chunk);
            cas.write(&command);
        }
        let times = k.times(s, p);
        let members: Vec<String> = seqs.iter().map(u64::to_string).collect();
        for chunk in members.chunks(Cas::MAX_ARGS / 2) {
            let mut command = vec!["ZREM", times.as_str()];
            command.extend(chunk.iter().map(String::as_str));
            cas.write(&command);
        }
        // The time index keeps the first sequence of each run of equal
        // timestamps (`RedisBackend::write_event`): the first event kept
        // becomes a member, in case its run began among those removed (a
        // member already, it keeps its score, which is its timestamp).
        if let Some(stamp) = kept_first {
            let (score, member) = (stamp.as_millis().to_string(), upto.to_string());
            cas.write(&["ZADD", &times, &score, &member]);
        }
        cas.write(&["HSET", &hw_key, &first_field(p), &upto.to_string()]);
        if !skipped.is_empty() {
            self.publish_wake(&mut cas, s);
        }
        if self.apply(&cas).await? == Applied::Conflict {
            return Ok(None);
        }
        Ok(Some(Trimmed {
            removed: upto - first,
            first_sequence: upto,
            skipped,
        }))
    }

    /// Takes the deliveries a trim closes out of their gates: their
    /// members go, each gate counts that many fewer, and a gate that lost
    /// heads gets the heads the shared rule gives it ([`regate`]) from
    /// what it keeps — its lowest open deliveries from `upto` on, for the
    /// slots its deliveries out leave. Reads those gates
    /// (`gate_view.lua`, one round trip), and guards the writes on what it
    /// read.
    ///
    /// [`regate`]: rheo_core::backend::policy::regate
    async fn close_gates(
        &self,
        cas: &mut Cas,
        s: &StreamName,
        p: u32,
        upto: u64,
        readings: &[Reading],
        closing: Vec<Closing>,
    ) -> Result<()> {
        if closing.is_empty() {
            return Ok(());
        }
        let k = &self.keys;
        let parts: Vec<PartitionKeys> = (closing.iter())
            .map(|c| k.partition(s, &readings[c.group].name, p))
            .collect();
        // Heads closed (available or leased), per gate: only a gate that
        // lost some has deliveries to let through.
        let heads_closed: Vec<usize> = (closing.iter())
            .map(|c| {
                (c.closed.iter())
                    .filter(|(_, d)| matches!(d.status, Status::Available | Status::Leased))
                    .count()
            })
            .collect();
        let asks: Vec<GateAsk<'_>> = (closing.iter().zip(&parts).zip(&heads_closed))
            .map(|((c, pk), &heads)| GateAsk {
                k: pk,
                gate: c.gate.clone(),
                slots: readings[c.group].gating.slots(),
                from: Some(upto),
                members: heads > 0,
                mine: Vec::new(),
            })
            .collect();
        let views = self.gate_views(&asks).await?;
        for (((c, pk), heads), view) in closing.iter().zip(&parts).zip(heads_closed).zip(views) {
            for (seq, _) in &c.closed {
                cas.write(&["ZREM", &pk.gates, &member(&c.gate, *seq)]);
            }
            cas.hget_is(&pk.counts, &c.gate, view.raw_count());
            match view.count()?.saturating_sub(c.closed.len()) {
                0 => cas.write(&["HDEL", &pk.counts, &c.gate]),
                left => cas.write(&["HSET", &pk.counts, &c.gate, &left.to_string()]),
            }
            if heads > 0 {
                self.regate_kept(cas, pk, &view, heads)?;
            }
        }
        Ok(())
    }

    /// The id of the event of a dead letter whose event retention removed.
    pub(super) async fn gone_event_id(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        seq: u64,
    ) -> Result<EventId> {
        let cmd = redis::cmd("HGET")
            .arg(self.keys.gone(s, g))
            .arg(gone_position(p, seq))
            .clone();
        let id: Option<String> = self.run(&cmd, Phase::Read).await?;
        let id = id.ok_or_else(|| corrupt("dead letter", format!("{p}:{seq} has no event")))?;
        EventId::parse(id).map_err(|e| corrupt("event id", e))
    }
}

fn group_name(name: &str) -> Result<GroupName> {
    GroupName::parse(name).map_err(|e| corrupt("group name", e))
}
