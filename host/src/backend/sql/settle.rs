//! Acks, nacks and rejects (`docs/groups.md#settle-policy`): each one
//! conditional update fenced on (status = 'leased', lease_id), writing what
//! the shared policy decides.

use std::collections::HashSet;

use super::engine::{exec, rows_in};
use super::{Access, Arg, Column, Conn, Dialect, Phase, SqlBackend, Statement, args, big, small};
use crate::backend::policy::{Write, plain_acks, settle_write};
use crate::backend::{Error, Result, validate_settlements};
use crate::model::{GroupName, SettleTarget, Settlement, StreamName, clip_reason};

impl<D: Dialect> SqlBackend<D> {
    /// Applies a batch; returns the per-item results and whether any nack
    /// made a delivery claimable at once.
    pub(super) async fn settle_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<(Vec<Result<()>>, bool)> {
        validate_settlements(&items)?;
        self.meta(s).await?;
        let now = self.now();
        if plain_acks(&items) {
            // One statement is atomic on its own: no transaction round trips.
            let mut conn = self.conn(Access::Write).await?;
            self.group_config(&mut conn, s, g).await?;
            let targets: Vec<&SettleTarget> = items.iter().map(|i| &i.target).collect();
            // It commits on its own: a lost connection leaves it unknown.
            let acked = Self::ack_many(&mut conn, s, g, &targets, Phase::Write).await?;
            let results = targets
                .iter()
                .map(|t| match acked.contains(t.event_id.as_str()) {
                    true => Ok(()),
                    false => Err(Error::StaleLease),
                })
                .collect();
            return Ok((results, false));
        }
        let mut tx = self.begin(Access::Write).await?;
        let config = self.group_config(&mut tx, s, g).await?;
        let mut results = Vec::with_capacity(items.len());
        let mut requeued = false;
        for item in items {
            if let Err(e) = item.validate() {
                results.push(Err(e.into()));
                continue;
            }
            let held = match Self::fence(&mut tx, s, g, &item.target).await? {
                Ok(held) => held,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            let t = &item.target;
            let write = settle_write(item.op, held.attempt, &config, now);
            requeued |= write.requeues();
            // Fenced on the lease, located by the full key the fence read.
            let (p, seq) = (small(held.partition), big(held.sequence));
            let changed = match write {
                Write::Ack => u64::from(
                    Self::ack_many(&mut tx, s, g, &[t], Phase::Read)
                        .await?
                        .contains(t.event_id.as_str()),
                ),
                Write::Retry { due, reason } => {
                    let (due, reason) = (Arg::OptTime(due), clip_reason(&reason));
                    let args = args![s, g, &t.event_id, &t.lease_id, due, reason, p, seq];
                    exec::<D>(&mut tx, Statement::settle_retry, args).await?
                }
                Write::Dead(reason) => {
                    let reason = clip_reason(&reason);
                    let args = args![s, g, &t.event_id, &t.lease_id, reason, now, p, seq];
                    exec::<D>(&mut tx, Statement::settle_dead, args).await?
                }
            };
            results.push(match changed {
                1 => Ok(()),
                _ => Err(Error::StaleLease),
            });
        }
        if requeued {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok((results, requeued))
    }

    /// Acks the given leases (fenced); returns the event ids that were acked.
    async fn ack_many(
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        targets: &[&SettleTarget],
        phase: Phase,
    ) -> Result<HashSet<String>> {
        let (events, leases): (Vec<String>, Vec<String>) = targets
            .iter()
            .map(|t| {
                (
                    t.event_id.as_str().to_owned(),
                    t.lease_id.as_str().to_owned(),
                )
            })
            .unzip();
        let args = args![
            s,
            g,
            Arg::Rows(vec![Column::Text(events), Column::Text(leases)])
        ];
        rows_in::<D>(conn, Statement::settle_acks, args, phase)
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect()
    }
}
