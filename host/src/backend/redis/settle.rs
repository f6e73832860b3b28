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

use std::collections::HashSet;

use super::claims::{Delivery, Slot, Status, entry_id, leased_prefix};
use super::{Applied, Cas, MAX_ATTEMPTS, RedisBackend};
use crate::backend::policy::{Write, settle_write};
use crate::backend::{Error, Result, validate_settlements};
use crate::model::{GroupName, SettleOp, SettleTarget, Settlement, StreamName};

impl RedisBackend {
    pub(crate) async fn settle(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        validate_settlements(&items)?;
        self.meta(s).await?;
        let config = self.group_config(s, g).await?;
        if self.settle_acks(s, g, &items).await? {
            return Ok(items.iter().map(|_| Ok(())).collect());
        }
        let targets: Vec<SettleTarget> = items.iter().map(|i| i.target.clone()).collect();
        for _ in 0..MAX_ATTEMPTS {
            let now = self.clock.now();
            let held = self.held(s, g, &targets).await?;
            let mut cas = Cas::default();
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
                let write = settle_write(item.op.clone(), attempt, &config, now);
                requeued |= write.requeues();
                let new = match write {
                    Write::Ack => Delivery {
                        status: Status::Acked,
                        ..delivery
                    },
                    Write::Retry { due, reason } => Delivery {
                        status: Status::Available,
                        lease_id: None,
                        expires_at: None,
                        available_at: due.map(|t| t.as_millis()),
                        reason: Some(reason),
                        ..delivery
                    },
                    Write::Dead(reason) => delivery.dead(reason, now),
                };
                self.place(&mut cas, &k, seq, Some(old), &new);
                results.push(Ok(()));
            }
            if requeued {
                self.publish_wake(&mut cas, s);
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

    /// Acks `items` without reading them first, if all are acks of leases
    /// whose events this process fetched; `false` (nothing written) when
    /// the batch needs the general path.
    async fn settle_acks(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
    ) -> Result<bool> {
        if items
            .iter()
            .any(|i| i.op != SettleOp::Ack || i.validate().is_err())
        {
            return Ok(false);
        }
        let mut seen = HashSet::new();
        let mut cas = Cas::default();
        let mut keys: Vec<super::PartitionKeys> = Vec::new();
        for item in items {
            let t = &item.target;
            let Some(at) = self.positions.lock().get(&(s.clone(), t.event_id.clone())) else {
                return Ok(false);
            };
            let (p, seq) = (at.partition, at.sequence);
            if !seen.insert((p, seq)) || t.receipt.as_ref().is_some_and(|r| *r != entry_id(seq)) {
                return Ok(false);
            }
            let k = match keys.iter().find(|k| k.partition == p) {
                Some(k) => k,
                None => {
                    keys.push(self.keys.partition(s, g, p));
                    keys.last().expect("just pushed")
                }
            };
            // The attempt is this process's latest lease of the event; the
            // guard checks it with the lease id.
            let prefix = leased_prefix(t.lease_id.as_str(), at.attempt);
            cas.hget_starts(&k.records, &seq.to_string(), &prefix);
            self.place(
                &mut cas,
                k,
                seq,
                Some(Slot::LEASED),
                &Delivery::acked(at.attempt),
            );
        }
        Ok(self.apply(&cas).await? == Applied::Yes)
    }
}
