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
//! In an ordered group (`docs/groups.md#ordering`) a settle of a gate's
//! head also reads the gate, and lets its next delivery through
//! (`gates::RedisBackend::settle_gated`). The plain-ack path first
//! guards that each head is its gate's only delivery; when one is not, it
//! reads the gates (one round trip, `gate_view.lua`), still not the
//! records.

use std::collections::{HashMap, HashSet};

use super::claims::{Delivery, Slot, entry_id, leased_prefix};
use super::gates::{GateView, later_of_shared_gates, member};
use super::{Applied, Cas, MAX_ATTEMPTS, RedisBackend, Settings};
use rheo_core::backend::policy::{Write, settle_write};
use rheo_core::backend::{Error, Result, validate_settlements};
use rheo_core::model::{GroupName, GroupOrdering, SettleOp, SettleTarget, Settlement, StreamName};

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
            let (mut views, later) = self.views_of(s, g, &settings, &items, &held).await?;
            let mut cas = Cas::default();
            self.guard_settings(&mut cas, s, g, &settings);
            let mut results = Vec::with_capacity(items.len());
            // The same delivery twice in one batch: the first settles it,
            // so the second finds it settled (stale), as if sent after.
            let mut settled = HashSet::new();
            let mut requeued = false;
            for (item, found) in items.iter().zip(held) {
                if let Err(e) = item.validate() {
                    results.push(Err(e.into()));
                    continue;
                }
                // Whatever the read found for it (a receipt mismatch
                // included): the lease is no longer held.
                let (p, seq, raw, delivery) = match found {
                    _ if later.contains(&results.len()) => {
                        // Settled on its own once this batch is written.
                        results.push(Ok(()));
                        continue;
                    }
                    _ if settled.contains(&item.target.event_id) => {
                        results.push(Err(Error::StaleLease));
                        continue;
                    }
                    Ok(found) => {
                        settled.insert(item.target.event_id.clone());
                        found
                    }
                    Err(e) => {
                        results.push(Err(e));
                        continue;
                    }
                };
                let k = self.keys.partition(s, g, p);
                cas.hget_is(&k.records, &seq.to_string(), Some(&raw));
                let (attempt, old) = (delivery.attempt, Slot::of(&delivery));
                let view = views.remove(&results.len());
                let write = settle_write(item.op.clone(), attempt, view.is_some(), config, now);
                requeued |= write.requeues();
                // A quarantined head keeps its gate shut, untouched
                // (`docs/groups.md#quarantine`).
                let parks = matches!(write, Write::Quarantine(_));
                let mut new = delivery.written(write, now);
                if let Some(view) = view.filter(|_| !parks) {
                    let released;
                    (new, released) = self.settle_gated(&mut cas, &k, seq, &view, new);
                    requeued |= released;
                }
                self.place(&mut cas, &k, seq, Some(old), &new);
                results.push(Ok(()));
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
                for i in later {
                    let one = vec![items[i].clone()];
                    let mut settled = Box::pin(self.settle(s, g, one)).await?;
                    results[i] = settled.pop().unwrap_or(Err(Error::StaleLease));
                }
                return Ok(results);
            }
        }
        Err(Error::Failed(format!(
            "settle on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// Under an ordering, the gate of each held item that has one, by the
    /// item's index, and the items whose gate an earlier item of the batch
    /// has (settled after it, one by one).
    async fn views_of(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
        items: &[Settlement],
        held: &[Result<(u32, u64, String, Delivery)>],
    ) -> Result<(HashMap<usize, GateView>, HashSet<usize>)> {
        let ordering = settings.config.ordering;
        if ordering == GroupOrdering::None {
            return Ok((HashMap::new(), HashSet::new()));
        }
        let mut found = Vec::new();
        for (i, (item, held)) in items.iter().zip(held).enumerate() {
            if let Ok((p, seq, ..)) = held {
                let key = (s.clone(), item.target.event_id.clone());
                let at = self.positions.lock().get(&key, &settings.stream.identity);
                found.push((i, (*p, *seq), at.and_then(|at| at.key)));
            }
        }
        let positions: Vec<(u32, u64)> = found.iter().map(|(_, at, _)| *at).collect();
        let known = found.iter().map(|(.., key)| key.clone()).collect();
        let keys = self.keys_at(s, &positions, known).await?;
        let gated: Vec<(usize, u32, String)> = found
            .iter()
            .zip(keys)
            .filter_map(|((i, (p, _), _), key)| {
                let gate = ordering.gate(key.as_deref())?;
                Some((*i, *p, gate.to_owned()))
            })
            .collect();
        let later = later_of_shared_gates(&gated);
        let wanted: Vec<(usize, (u32, u64, String))> = gated
            .into_iter()
            .filter(|(i, ..)| !later.contains(i))
            .map(|(i, p, gate)| {
                let seq = found.iter().find(|(j, ..)| *j == i).expect("found").1.1;
                (i, (p, seq, gate))
            })
            .collect();
        let args: Vec<(u32, u64, String)> = wanted.iter().map(|(_, w)| w.clone()).collect();
        let views = self.gate_views(s, g, &args).await?;
        let views = wanted.into_iter().map(|(i, _)| i).zip(views).collect();
        Ok((views, later))
    }

    /// Acks `items` without reading their records first, if all are acks
    /// of leases whose events this process fetched; `false` (nothing
    /// written) when the batch needs the general path. Under an ordering
    /// an acked head whose gate has other open deliveries lets the next
    /// through, as the general path would, from a read of the gates alone.
    async fn settle_acks(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
        settings: &Settings,
    ) -> Result<bool> {
        let ordering = settings.config.ordering;
        if items
            .iter()
            .any(|i| i.op != SettleOp::Ack || i.validate().is_err())
        {
            return Ok(false);
        }
        // Each item: partition, sequence, attempt, the lease's prefix and
        // its gate.
        let mut acks: Vec<(u32, u64, u32, String, Option<String>)> = Vec::new();
        let mut seen = HashSet::new();
        for item in items {
            let t = &item.target;
            let key = (s.clone(), t.event_id.clone());
            let Some(at) = self.positions.lock().get(&key, &settings.stream.identity) else {
                return Ok(false);
            };
            let (p, seq) = (at.partition, at.sequence);
            if !seen.insert((p, seq)) || t.receipt.as_ref().is_some_and(|r| *r != entry_id(seq)) {
                return Ok(false);
            }
            let gate = match (ordering, &at.key) {
                (GroupOrdering::None, _) => None,
                (_, None) => return Ok(false),
                (_, Some(key)) => ordering.gate(key.as_deref()).map(str::to_owned),
            };
            // The attempt is this process's latest lease of the event; the
            // guard checks it with the lease id.
            let prefix = leased_prefix(t.lease_id.as_str(), at.attempt);
            acks.push((p, seq, at.attempt, prefix, gate));
        }
        // As if each acked head were its gate's only open delivery (guarded
        // on it: nothing to let through), the usual case when the consumer
        // keeps up — unless the group's last batch found otherwise; then
        // (or when that guess fails) with the gates read.
        let group = (s.clone(), g.clone());
        let crowded = self.crowded.lock().contains(&group);
        if !crowded && self.write_acks(s, g, settings, &acks, None).await? {
            return Ok(true);
        }
        let gated: Vec<(u32, u64, String)> = acks
            .iter()
            .filter_map(|(p, seq, _, _, gate)| Some((*p, *seq, gate.clone()?)))
            .collect();
        if gated.is_empty() {
            return Ok(false);
        }
        let shared: Vec<(usize, u32, String)> = gated
            .iter()
            .enumerate()
            .map(|(i, (p, _, gate))| (i, *p, gate.clone()))
            .collect();
        if !later_of_shared_gates(&shared).is_empty() {
            return Ok(false);
        }
        let views = self.gate_views(s, g, &gated).await?;
        if views.iter().any(GateView::is_crowded) {
            self.crowded.lock().insert(group);
        } else if crowded {
            self.crowded.lock().remove(&group);
        }
        self.write_acks(s, g, settings, &acks, Some(views)).await
    }

    /// Writes the acks of [`settle_acks`](Self::settle_acks), each guarded
    /// on its lease; a gated one guarded on its gate as `views` read it (one
    /// per gated ack, in order), or without `views` on being its gate's
    /// only member. `false` when a guard failed (nothing written).
    async fn write_acks(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
        acks: &[(u32, u64, u32, String, Option<String>)],
        views: Option<Vec<GateView>>,
    ) -> Result<bool> {
        let mut views = views.map(Vec::into_iter);
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut keys: Vec<super::PartitionKeys> = Vec::new();
        let mut released = false;
        for (p, seq, attempt, prefix, gate) in acks {
            let k = match keys.iter().position(|k| k.partition == *p) {
                Some(i) => &keys[i],
                None => {
                    keys.push(self.keys.partition(s, g, *p));
                    keys.last().expect("just pushed")
                }
            };
            cas.hget_starts(&k.records, &seq.to_string(), prefix);
            let mut new = Delivery::acked(*attempt);
            match (gate, &mut views) {
                (None, _) => {}
                (Some(gate), None) => {
                    // The head alone in its gate: its count is 1 (its
                    // record's guard says it is the head).
                    cas.hget_is(&k.counts, gate, Some("1"));
                    cas.write(&["ZREM", &k.gates, &member(gate, *seq)]);
                    cas.write(&["HDEL", &k.counts, gate]);
                }
                (Some(_), Some(views)) => {
                    let view = views.next().expect("a view per gated ack");
                    let through;
                    (new, through) = self.settle_gated(&mut cas, k, *seq, &view, new);
                    released |= through;
                }
            }
            self.place(&mut cas, k, *seq, Some(Slot::LEASED), &new);
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
