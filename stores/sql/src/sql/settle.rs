//! Acks, nacks and rejects (`docs/groups.md#settle-policy`): each one
//! conditional update fenced on (status = 'leased', lease_id), writing what
//! the shared policy decides.

use std::collections::HashSet;

use super::engine::{exec, rows, rows_in};
use super::{Access, Arg, Column, Conn, Dialect, Phase, SqlBackend, Statement, args, big, small};
use rheo_core::backend::policy::{Hold, Write, plain_acks, settle_write};
use rheo_core::backend::{Error, Result, validate_settlements};
use rheo_core::model::{EventId, GroupName, SettleTarget, Settlement, StreamName, clip_reason};

/// An acked event id, with its (partition, gate) when it has one.
type Acked = (String, Option<(u32, String)>);

impl<D: Dialect> SqlBackend<D> {
    /// Applies a batch; returns the per-item results and whether a
    /// delivery became claimable at once (a nack without delay, or a
    /// gate's next delivery let through).
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
            // Not in a gated group, whose acks also let gates through.
            let mut conn = self.conn(Access::Write).await?;
            let config = self.group_config(&mut conn, s, g).await?;
            if config.gating().is_gated() {
                drop(conn);
                return self.ack_ordered(s, g, &items).await;
            }
            let targets: Vec<&SettleTarget> = items.iter().map(|i| &i.target).collect();
            // It commits on its own: a lost connection leaves it unknown.
            let acked = Self::ack_many(&mut conn, s, g, &targets, Phase::Write).await?;
            let mut results = ack_results(&targets, &acked);
            if acked.len() < targets.len() {
                // A lease of a group deleted since this node read it
                // answers that it is gone (nothing was acked then), one of
                // an event retention removed that it was.
                self.confirm_group(&mut conn, s, g).await?;
                let ids: Vec<&EventId> = targets.iter().map(|t| &t.event_id).collect();
                Self::removed_events(&mut conn, s, &ids, &mut results).await?;
            }
            let gates: Vec<(u32, String)> =
                acked.into_iter().filter_map(|(_, gate)| gate).collect();
            if gates.is_empty() {
                return Ok((results, false));
            }
            // A gated delivery: the group is gated now (another node's
            // reset changed its ordering or flow). Its gates let their next
            // deliveries through as a gated ack's would, just not in the
            // ack's transaction.
            drop(conn);
            self.forget_group(s, g);
            // The acks hold whatever happens next: they are what is answered.
            let released = match self.release_apart(s, g, gates).await {
                Ok(released) => released,
                Err(e) => {
                    tracing::warn!(stream = %s, group = %g, error = %e,
                        "acked, but letting the acked keys' next deliveries through failed");
                    false
                }
            };
            return Ok((results, released));
        }
        self.settle_in_tx(s, g, items, now).await
    }

    /// Acks a batch of a gated group in one transaction: one statement
    /// for the acks, then the gates they settled let their next
    /// deliveries through.
    async fn ack_ordered(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
    ) -> Result<(Vec<Result<()>>, bool)> {
        let mut tx = self.begin(Access::Write).await?;
        let targets: Vec<&SettleTarget> = items.iter().map(|i| &i.target).collect();
        let acked = Self::ack_many(&mut tx, s, g, &targets, Phase::Read).await?;
        let mut results = ack_results(&targets, &acked);
        if acked.len() < targets.len() {
            self.confirm_group(&mut tx, s, g).await?;
            let ids: Vec<&EventId> = targets.iter().map(|t| &t.event_id).collect();
            Self::removed_events(&mut tx, s, &ids, &mut results).await?;
        }
        let gates = acked.into_iter().filter_map(|(_, gate)| gate).collect();
        let released = self.release_settled(&mut tx, s, g, gates).await?;
        if released {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok((results, released))
    }

    /// [`Self::release_settled`] in a transaction of its own.
    async fn release_apart(
        &self,
        s: &StreamName,
        g: &GroupName,
        gates: Vec<(u32, String)>,
    ) -> Result<bool> {
        let mut tx = self.begin(Access::Write).await?;
        let released = self.release_settled(&mut tx, s, g, gates).await?;
        if released {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok(released)
    }

    /// Lets the gates whose heads were settled (acked, dead-lettered, or
    /// retried and parked) hand out their lowest parked deliveries for the
    /// slots free; whether any did. The cursor rows first, so that no
    /// fetch is parking behind these gates meanwhile
    /// (docs/groups.md#ordering, docs/groups.md#flow): how many slots a
    /// gate has is read with them, as stored, not as this node kept it.
    async fn release_settled(
        &self,
        tx: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        gates: Vec<(u32, String)>,
    ) -> Result<bool> {
        if gates.is_empty() {
            return Ok(false);
        }
        let mut touched: Vec<u32> = gates.iter().map(|(p, _)| *p).collect();
        touched.sort_unstable();
        touched.dedup();
        let (_, stored) = self.lock_cursors(tx, s, g, &touched).await?;
        let Some(gating) = stored else {
            return Ok(false);
        };
        Ok(Self::release_gates(tx, s, g, gating.slots(), gates).await? > 0)
    }

    /// Applies a batch in one transaction.
    async fn settle_in_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
        now: rheo_core::model::Timestamp,
    ) -> Result<(Vec<Result<()>>, bool)> {
        let mut tx = self.begin(Access::Write).await?;
        let config = self.group_config(&mut tx, s, g).await?;
        let mut results = Vec::with_capacity(items.len());
        let mut requeued = false;
        // Heads of gates that were settled: each gate then hands out its
        // lowest parked deliveries for the slots free
        // (docs/groups.md#ordering, docs/groups.md#flow).
        let mut settled_gates = Vec::new();
        let ids: Vec<EventId> = items.iter().map(|i| i.target.event_id.clone()).collect();
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
            let write = settle_write(item.op, held.attempt, held.gated, &config, now);
            requeued |= write.requeues();
            // Fenced on the lease, located by the full key the fence read.
            let (p, seq) = (small(held.partition), big(held.sequence));
            let changed = match write {
                Write::Ack => {
                    let acked = Self::ack_many(&mut tx, s, g, &[t], Phase::Read).await?;
                    let count = acked.len() as u64;
                    settled_gates.extend(acked.into_iter().filter_map(|(_, gate)| gate));
                    count
                }
                Write::Retry { due, reason } => {
                    // A gated delivery is parked, and its gate hands out its
                    // lowest open delivery below: itself, or one a replay
                    // re-opened below it.
                    let (due, reason) = (Arg::OptTime(due), clip_reason(&reason));
                    let args = args![s, g, &t.event_id, &t.lease_id, due, reason, p, seq];
                    let retried = rows::<D>(&mut tx, Statement::settle_retry, args).await?;
                    for row in &retried {
                        if let Some(gate) = row.opt_text(0)? {
                            settled_gates.push((held.partition, gate));
                        }
                    }
                    retried.len() as u64
                }
                Write::Quarantine(reason) => {
                    // The gate stays shut: nothing to release
                    // (docs/groups.md#quarantine).
                    let hold = Hold::new(&reason, now);
                    let args = args![
                        s,
                        g,
                        &t.event_id,
                        &t.lease_id,
                        hold.lease_id.as_str(),
                        hold.consumer_id.as_str(),
                        hold.leased_at,
                        hold.expires_at,
                        hold.reason,
                        p,
                        seq
                    ];
                    exec::<D>(&mut tx, Statement::settle_quarantine, args).await?
                }
                Write::Dead(reason) => {
                    let reason = clip_reason(&reason);
                    let args = args![s, g, &t.event_id, &t.lease_id, reason, now, p, seq];
                    let dead = rows::<D>(&mut tx, Statement::settle_dead, args).await?;
                    for row in &dead {
                        if let Some(gate) = row.opt_text(0)? {
                            settled_gates.push((held.partition, gate));
                        }
                    }
                    dead.len() as u64
                }
            };
            results.push(match changed {
                1 => Ok(()),
                _ => Err(Error::StaleLease),
            });
        }
        if results.iter().any(|r| r.is_err()) {
            // A lease of a group deleted since this node read it answers
            // that it is gone, one of an event retention removed that it
            // was (docs/log.md#retention).
            self.confirm_group(&mut tx, s, g).await?;
            let ids: Vec<&EventId> = ids.iter().collect();
            Self::removed_events(&mut tx, s, &ids, &mut results).await?;
        }
        requeued |= self.release_settled(&mut tx, s, g, settled_gates).await?;
        if requeued {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok((results, requeued))
    }

    /// Acks the given leases (fenced); returns the event ids that were
    /// acked, each with its (partition, gate) when it has one.
    async fn ack_many(
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        targets: &[&SettleTarget],
        phase: Phase,
    ) -> Result<Vec<Acked>> {
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
            .map(|r| {
                let gate = match r.opt_text(2)? {
                    Some(gate) => Some((r.u32(1)?, gate)),
                    None => None,
                };
                Ok((r.text(0)?, gate))
            })
            .collect()
    }
}

/// Per target of a batch ack: acked, or `stale_lease` when [`ack_many`]
/// did not return its event id.
///
/// [`ack_many`]: SqlBackend::ack_many
fn ack_results(targets: &[&SettleTarget], acked: &[Acked]) -> Vec<Result<()>> {
    let ids: HashSet<&str> = acked.iter().map(|(id, _)| id.as_str()).collect();
    targets
        .iter()
        .map(|t| match ids.contains(t.event_id.as_str()) {
            true => Ok(()),
            false => Err(Error::StaleLease),
        })
        .collect()
}
