//! Settles on Redis (`docs/groups.md#settle-policy`): each item is fenced
//! on its record as read, the policy says what it becomes, and the whole
//! batch is written in one guarded script (read again if another node
//! changed a record in between). Each item keeps its own result.
//!
//! A batch of plain acks of leases this process fetched (the runtime's
//! usual batch) skips the read: each item is guarded on its record still
//! starting with its lease, and an ack writes nothing that depends on the
//! record. If any guard fails, the batch takes the general path, which
//! gives each item its own answer.
//!
//! In a gated group (`docs/groups.md#ordering`, `docs/groups.md#flow`) a
//! settle of a gate's heads also reads the gate, once for all the heads of
//! the batch it has, and lets its next deliveries through
//! (`gates::RedisBackend::settle_gated`). The plain-ack path first guards
//! that each gate's acked heads are its only open deliveries; when they
//! are not, it reads the gates (one round trip, `gate_view.lua`), still
//! not the records.

use std::collections::{HashMap, HashSet};

use super::claims::{Delivery, Slot, entry_id, leased_prefix};
use super::gates::{GateAsk, GateView, by_gate, member};
use super::{Applied, Cas, MAX_ATTEMPTS, PartitionKeys, RedisBackend, Settings};
use rheo_core::backend::policy::{Write, settle_write};
use rheo_core::backend::{Error, Result, validate_settlements};
use rheo_core::model::{GroupName, SettleOp, SettleTarget, Settlement, StreamName};

/// An item of a settle that holds its lease: its index in the batch, its
/// partition and sequence, and its record as read (raw and decoded).
type Live = (usize, u32, u64, String, Delivery);

/// The gated items of a batch, grouped by gate (`gates::by_gate`): each
/// group's partition and gate, and the indexes of its items.
type Groups = Vec<((u32, String), Vec<usize>)>;

/// A plain ack: partition, sequence, attempt and the lease's prefix.
type Ack = (u32, u64, u32, String);

/// A batch of plain acks: the acks, their gates' groups and the keys of
/// their partitions.
type Acks<'a> = (&'a [Ack], &'a Groups, &'a HashMap<u32, PartitionKeys>);

impl RedisBackend {
    pub(crate) async fn settle(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        validate_settlements(&items)?;
        let started = self.settings(s, g).await?;
        if self.settle_acks(s, g, &items, &started).await? {
            return Ok(items.iter().map(|_| Ok(())).collect());
        }
        let targets: Vec<SettleTarget> = items.iter().map(|i| i.target.clone()).collect();
        for _ in 0..MAX_ATTEMPTS {
            // Read again after a conflict that found them changed.
            let settings = self.settings_again(s, g, &started).await?;
            let config = &settings.config;
            let now = self.clock.now();
            let held = self.held(s, g, &settings, &targets).await?;
            let mut results = Vec::with_capacity(items.len());
            let mut live: Vec<Live> = Vec::new();
            // The same delivery twice in one batch: the first settles it,
            // so the second finds it settled (stale), as if sent after.
            let mut settled = HashSet::new();
            for (i, (item, found)) in items.iter().zip(held).enumerate() {
                if let Err(e) = item.validate() {
                    results.push(Err(e.into()));
                    continue;
                }
                // Whatever the read found for it (a receipt mismatch
                // included): the lease is no longer held.
                match found {
                    _ if settled.contains(&item.target.event_id) => {
                        results.push(Err(Error::StaleLease));
                    }
                    Ok((p, seq, raw, delivery)) => {
                        settled.insert(item.target.event_id.clone());
                        live.push((i, p, seq, raw, delivery));
                        results.push(Ok(()));
                    }
                    Err(e) => results.push(Err(e)),
                }
            }
            let gates = self.gates_of(s, &settings, &items, &live).await?;
            let mut cas = Cas::default();
            self.guard_settings(&mut cas, s, g, &settings);
            let mut requeued = false;
            let mut news = Vec::with_capacity(live.len());
            let mut gated = Vec::new();
            for (j, ((i, p, _, _, delivery), gate)) in live.iter().zip(gates).enumerate() {
                let op = items[*i].op.clone();
                let write = settle_write(op, delivery.attempt, gate.is_some(), config, now);
                requeued |= write.requeues();
                // A quarantined head keeps its gate shut, untouched
                // (`docs/groups.md#quarantine`).
                if let Some(gate) = gate.filter(|_| !matches!(write, Write::Quarantine(_))) {
                    gated.push((j, *p, gate));
                }
                news.push(delivery.clone().written(write, now));
            }
            let parts: HashMap<u32, PartitionKeys> = (live.iter())
                .map(|(_, p, ..)| (*p, self.keys.partition(s, g, *p)))
                .collect();
            let groups = by_gate(&gated);
            let seqs: Vec<u64> = live.iter().map(|(_, _, seq, ..)| *seq).collect();
            let views = self
                .gate_views(&asks(&parts, &groups, &seqs, &settings))
                .await?;
            for (((p, _), members), view) in groups.iter().zip(&views) {
                requeued |=
                    self.settle_members(&mut cas, &parts[p], view, members, &seqs, &mut news)?;
            }
            for ((_, p, seq, raw, delivery), new) in live.iter().zip(&news) {
                let k = &parts[p];
                cas.hget_is(&k.records, &seq.to_string(), Some(raw));
                self.place(&mut cas, k, *seq, Some(Slot::of(delivery)), new);
            }
            if requeued {
                self.publish_wake(&mut cas, s);
            }
            if cas.is_empty() && !items.is_empty() {
                // Nothing held: unless the group is gone.
                self.recheck(s, g, &settings).await?;
            }
            if cas.is_empty() || self.apply(&cas).await? == Applied::Yes {
                if requeued {
                    self.notifier.notify(s);
                }
                return Ok(results);
            }
        }
        Err(Error::Failed(format!(
            "settle on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// Settles the heads of one gate a batch has — `members`, indexes into
    /// `seqs` and `news` (the records the settle policy made) — guarded on
    /// `view` ([`RedisBackend::settle_gated`]); whether another delivery
    /// was let through.
    fn settle_members(
        &self,
        cas: &mut Cas,
        k: &PartitionKeys,
        view: &GateView,
        members: &[usize],
        seqs: &[u64],
        news: &mut [Delivery],
    ) -> Result<bool> {
        let mut settled: Vec<(u64, Delivery)> = (members.iter())
            .map(|&j| (seqs[j], news[j].clone()))
            .collect();
        let released = self.settle_gated(cas, k, view, &mut settled)?;
        for (&j, (_, new)) in members.iter().zip(settled) {
            news[j] = new;
        }
        Ok(released)
    }

    /// Under a gating, the gate of each item of `live` (none for one
    /// without); an empty list without a gating.
    async fn gates_of(
        &self,
        s: &StreamName,
        settings: &Settings,
        items: &[Settlement],
        live: &[Live],
    ) -> Result<Vec<Option<String>>> {
        let gating = settings.config.gating();
        if !gating.is_gated() {
            return Ok(vec![None; live.len()]);
        }
        let positions: Vec<(u32, u64)> = live.iter().map(|(_, p, seq, ..)| (*p, *seq)).collect();
        let known = (live.iter())
            .map(|(i, ..)| {
                let key = (s.clone(), items[*i].target.event_id.clone());
                let at = self.positions.lock().get(&key, &settings.stream.identity);
                at.and_then(|at| at.key)
            })
            .collect();
        let keys = self.keys_at(s, &positions, known).await?;
        Ok(keys
            .iter()
            .map(|key| gating.gate(key.as_deref()).map(str::to_owned))
            .collect())
    }

    /// Acks `items` without reading their records first, if all are acks
    /// of leases whose events this process fetched; `false` (nothing
    /// written) when the batch needs the general path. In a gated group
    /// acked heads whose gate has other open deliveries let the next
    /// through, as the general path would, from a read of the gates alone.
    async fn settle_acks(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
        settings: &Settings,
    ) -> Result<bool> {
        let gating = settings.config.gating();
        if items
            .iter()
            .any(|i| i.op != SettleOp::Ack || i.validate().is_err())
        {
            return Ok(false);
        }
        // Each item: partition, sequence, attempt and the lease's prefix;
        // the gated ones, by gate.
        let mut acks: Vec<Ack> = Vec::new();
        let mut gated = Vec::new();
        let mut seen = HashSet::new();
        for (j, item) in items.iter().enumerate() {
            let t = &item.target;
            let key = (s.clone(), t.event_id.clone());
            let Some(at) = self.positions.lock().get(&key, &settings.stream.identity) else {
                return Ok(false);
            };
            let (p, seq) = (at.partition, at.sequence);
            if !seen.insert((p, seq)) || t.receipt.as_ref().is_some_and(|r| *r != entry_id(seq)) {
                return Ok(false);
            }
            let gate = match (gating.is_gated(), &at.key) {
                (false, _) => None,
                (true, None) => return Ok(false),
                (true, Some(key)) => gating.gate(key.as_deref()).map(str::to_owned),
            };
            if let Some(gate) = gate {
                gated.push((j, p, gate));
            }
            // The attempt is this process's latest lease of the event; the
            // guard checks it with the lease id.
            let prefix = leased_prefix(t.lease_id.as_str(), at.attempt);
            acks.push((p, seq, at.attempt, prefix));
        }
        let groups = by_gate(&gated);
        if groups.iter().any(|(_, m)| m.len() > gating.slots()) {
            // More heads of a gate than it has slots: not all are held.
            return Ok(false);
        }
        let parts: HashMap<u32, PartitionKeys> = (acks.iter())
            .map(|(p, ..)| (*p, self.keys.partition(s, g, *p)))
            .collect();
        // As if each gate's acked heads were its only open deliveries
        // (guarded on it: nothing to let through), the usual case when the
        // consumer keeps up — unless the group's last batch found
        // otherwise; then (or when that guess fails) with the gates read.
        let group = (s.clone(), g.clone());
        let crowded = self.crowded.lock().contains(&group);
        let batch = (acks.as_slice(), &groups, &parts);
        if !crowded && self.write_acks(s, g, settings, batch, None).await? {
            return Ok(true);
        }
        if groups.is_empty() {
            return Ok(false);
        }
        let seqs: Vec<u64> = acks.iter().map(|(_, seq, ..)| *seq).collect();
        let views = self
            .gate_views(&asks(&parts, &groups, &seqs, settings))
            .await?;
        if (views.iter().zip(&groups)).any(|(v, (_, m))| !v.holds_only(m.len())) {
            self.crowded.lock().insert(group);
        } else if crowded {
            self.crowded.lock().remove(&group);
        }
        self.write_acks(s, g, settings, batch, Some(views)).await
    }

    /// Writes the acks of [`settle_acks`](Self::settle_acks), each guarded
    /// on its lease; the gated ones guarded on their gates as `views` read
    /// them (one per gate of `groups`, in order), or without `views` on
    /// being their gates' only members. `false` when a guard failed
    /// (nothing written).
    async fn write_acks(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
        (acks, groups, parts): Acks<'_>,
        views: Option<Vec<GateView>>,
    ) -> Result<bool> {
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut news: Vec<Delivery> = Vec::with_capacity(acks.len());
        for (p, seq, attempt, prefix) in acks {
            cas.hget_starts(&parts[p].records, &seq.to_string(), prefix);
            news.push(Delivery::acked(*attempt));
        }
        let seqs: Vec<u64> = acks.iter().map(|(_, seq, ..)| *seq).collect();
        let mut released = false;
        match views {
            None => {
                for ((p, gate), members) in groups {
                    // The heads alone in their gate: its count is theirs
                    // (their records' guards say they are its heads).
                    let k = &parts[p];
                    cas.hget_is(&k.counts, gate, Some(&members.len().to_string()));
                    for &j in members {
                        cas.write(&["ZREM", &k.gates, &member(gate, seqs[j])]);
                    }
                    cas.write(&["HDEL", &k.counts, gate]);
                }
            }
            Some(views) => {
                for (((p, _), members), view) in groups.iter().zip(&views) {
                    released |=
                        self.settle_members(&mut cas, &parts[p], view, members, &seqs, &mut news)?;
                }
            }
        }
        for ((p, seq, ..), new) in acks.iter().zip(&news) {
            self.place(&mut cas, &parts[p], *seq, Some(Slot::LEASED), new);
        }
        if released {
            self.publish_wake(&mut cas, s);
        }
        if self.apply(&cas).await? != Applied::Yes {
            return Ok(false);
        }
        if released {
            self.notifier.notify(s);
        }
        Ok(true)
    }
}

/// What a settle asks `gate_view.lua` of each gate of `groups`: its first
/// members but the settled ones (`seqs` by index).
fn asks<'a>(
    parts: &'a HashMap<u32, PartitionKeys>,
    groups: &Groups,
    seqs: &[u64],
    settings: &Settings,
) -> Vec<GateAsk<'a>> {
    let slots = settings.config.gating().slots();
    (groups.iter())
        .map(|((p, gate), members)| GateAsk {
            k: &parts[p],
            gate: gate.clone(),
            slots,
            from: None,
            members: true,
            mine: members.iter().map(|&j| seqs[j]).collect(),
        })
        .collect()
}
