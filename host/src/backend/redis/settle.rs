//! Settles on Redis (`docs/groups.md#settle-policy`): each item is fenced
//! on its record as read, the policy says what it becomes, and the whole
//! batch is written in one guarded script (read again if another node
//! changed a record in between). Each item keeps its own result.

use std::collections::HashSet;

use super::claims::{Delivery, Slot, Status};
use super::{Applied, Cas, MAX_ATTEMPTS, RedisBackend};
use crate::backend::policy::{Write, settle_write};
use crate::backend::{Error, Result, validate_settlements};
use crate::model::{GroupName, SettleTarget, Settlement, StreamName};

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
                let (p, seq, raw, delivery) = match found {
                    Ok(found) if settled.insert((found.0, found.1)) => found,
                    Ok(_) => {
                        results.push(Err(Error::StaleLease));
                        continue;
                    }
                    Err(e) => {
                        results.push(Err(e));
                        continue;
                    }
                };
                let records = self.keys.deliveries(s, g, p);
                cas.hget_is(&records, &seq.to_string(), Some(&raw));
                let (attempt, old) = (delivery.attempt, Slot::of(&delivery));
                let write = settle_write(item.op.clone(), attempt, &config, now);
                requeued |= write.requeues();
                let new = match write {
                    Write::Ack => Delivery {
                        status: Status::Acked,
                        lease_id: None,
                        expires_at: None,
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
                self.place(&mut cas, s, g, (p, seq), Some(old), &new);
                results.push(Ok(()));
            }
            if cas.is_empty() || self.apply(&cas).await? == Applied::Yes {
                if requeued {
                    self.wake(s).await;
                }
                return Ok(results);
            }
        }
        Err(Error::Failed(format!(
            "settle on {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }
}
