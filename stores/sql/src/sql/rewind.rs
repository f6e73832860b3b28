//! Moving a group back (`docs/groups.md#dead-letters-and-redrive`,
//! `docs/groups.md#replay-and-reset`): redrive dead letters, replay, reset.
//!
//! Whatever re-opens deliveries also lowers the partitions' scan floors
//! (`lower_floors.sql`, last in the transaction, after the deliveries: the
//! order fetches lock them in) in dialects that keep floors.

use std::collections::BTreeMap;

use super::engine::{StreamMeta, exec, one, rows};
use super::{Access, Arg, Column, Conn, Dialect, SqlBackend, Statement, args, big, int, small};
use rheo_core::backend::policy::{Gating, GroupConfig};
use rheo_core::backend::{Redrive, Replay, ResetRequest, Result};
use rheo_core::model::{GroupName, StreamName};

/// The lowest re-opened sequence per partition.
#[derive(Debug, Default)]
struct Floors(BTreeMap<u32, u64>);

impl Floors {
    fn lower(&mut self, partition: u32, sequence: u64) {
        let floor = self.0.entry(partition).or_insert(sequence);
        *floor = (*floor).min(sequence);
    }

    /// In a gated group, gives each gate of the re-opened partitions its
    /// heads again, as many as its slots (`regate.sql`,
    /// `docs/groups.md#ordering`, `docs/groups.md#flow`). After
    /// [`Floors::apply`], which holds the partitions' cursor rows where the
    /// dialect locks them: a fetch that leased a gate's event meanwhile has
    /// committed, and this statement sees it.
    async fn regate<D: Dialect>(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        gating: Gating,
    ) -> Result<()> {
        if !gating.is_gated() || self.0.is_empty() {
            return Ok(());
        }
        let touched: Vec<u32> = self.0.keys().copied().collect();
        let slots = big(gating.slots() as u64);
        let args = args![s, g, super::partitions(&touched), slots];
        exec::<D>(conn, Statement::regate, args).await?;
        Ok(())
    }

    async fn apply<D: Dialect>(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let partitions = self.0.keys().map(|&p| p as i32).collect();
        let floors = self.0.values().map(|&f| int(f)).collect();
        let rows = Arg::Rows(vec![Column::I32(partitions), Column::I64(floors)]);
        exec::<D>(conn, Statement::lower_floors, args![s, g, rows]).await?;
        Ok(())
    }
}

impl<D: Dialect> SqlBackend<D> {
    /// The group's settings read afresh (the ordering and flow gate what a
    /// re-open does, and another node may have changed them), its row held
    /// until the transaction ends so that no delete of the group or its
    /// stream leaves what this writes behind, and replays never run
    /// beside a reset (`lock_group.sql`; `lock_group_reset.sql` for a
    /// `reset`). Checks the stream against `kept` ([`Self::stale`]): what
    /// the caller read of it before (its partition count, the events a
    /// query replay matched) is of this stream, not of one deleted since.
    async fn lock_group(
        &self,
        tx: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        kept: StreamMeta,
        reset: bool,
    ) -> Result<GroupConfig> {
        self.forget_group(s, g);
        let at = self.catalog.generation();
        let statement = match reset {
            true => Statement::lock_group_reset,
            false => Statement::lock_group,
        };
        let Some(row) = one::<D>(tx, statement, args![s, g]).await? else {
            return Err(self.group_missing(tx, s, g).await);
        };
        let stored = StreamMeta {
            partition_count: row.u32(3)?,
            created_at: row.ts(4)?,
        };
        if stored != kept {
            return Err(self.stale(s));
        }
        let config = GroupConfig {
            max_attempts: row.u32(0)?,
            retry_backoff_ms: row.backoff(1)?,
            ordering: super::ordering(row.text(2)?)?,
            on_exhausted: super::on_exhausted(row.text(5)?)?,
            flow: super::flow(row.text(6)?)?,
        };
        self.catalog.keep_group(s, g, config.clone(), at);
        Ok(config)
    }

    pub(super) async fn redrive_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        which: Redrive,
    ) -> Result<u64> {
        let meta = self.meta(s).await?;
        let mut tx = self.begin(Access::Write).await?;
        let config = self.lock_group(&mut tx, (s, g), meta, false).await?;
        let mut args = args![s, g];
        let statement = match which {
            Redrive::All => Statement::redrive_all,
            Redrive::Events(ids) => {
                let found = Self::locate_all(&mut tx, s, &ids).await?;
                let names = found.into_iter().map(|(id, _, _)| id.as_str().to_owned());
                args.push(Arg::List(Column::Text(names.collect())));
                Statement::redrive_events
            }
        };
        // One row per redriven delivery: its partition and sequence.
        let mut floors = Floors::default();
        let redriven = rows::<D>(&mut tx, statement, args).await?;
        for row in &redriven {
            floors.lower(row.u32(0)?, row.u64(1)?);
        }
        floors.apply::<D>(&mut tx, s, g).await?;
        floors.regate::<D>(&mut tx, s, g, config.gating()).await?;
        if !redriven.is_empty() {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok(redriven.len() as u64)
    }

    /// Re-opens the sequences strictly between `after` and `before` in one
    /// partition: creates deliveries the group never had (below its start)
    /// and makes every other one available now. Returns how many were not
    /// open.
    async fn reopen(
        conn: &mut Conn<D>,
        (s, g, gating): (&StreamName, &GroupName, Gating),
        p: u32,
        (after, before): (u64, u64),
        floors: &mut Floors,
    ) -> Result<u64> {
        if after.saturating_add(1) >= before {
            return Ok(0);
        }
        floors.lower(p, after + 1);
        let args = || args![s, g, small(p), big(after), big(before)];
        let mut insert = args();
        insert.push(gating.gate_source().into());
        let created = exec::<D>(conn, Statement::reopen_insert, insert).await?;
        let reopened = exec::<D>(conn, Statement::reopen_update, args()).await?;
        // Deliveries already open but waiting on a retry delay become due
        // now; they were not closed, so they are not counted.
        exec::<D>(conn, Statement::reopen_undelay, args()).await?;
        Ok(created + reopened)
    }

    pub(super) async fn replay_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        how: Replay,
    ) -> Result<u64> {
        how.validate()?;
        let meta = self.meta(s).await?;
        // A query replay reads the log (whose events never change) before
        // the transaction; `lock_group` checks the stream was not deleted
        // since.
        let matched = match &how {
            Replay::Query(q) => self.run_query(s, q, false).await?,
            _ => Vec::new(),
        };
        let mut tx = self.begin(Access::Write).await?;
        let gating = self
            .lock_group(&mut tx, (s, g), meta, false)
            .await?
            .gating();
        let positions = Self::positions(&mut tx, s, g).await?;
        let at = |p: u32| positions.get(&p).copied().unwrap_or_default();
        let cursor = |p: u32| at(p).cursor;
        // Every (partition, after, before) range to re-open.
        let ranges: Vec<(u32, u64, u64)> = match how {
            Replay::FromSequence { after, partitions } => partitions
                .resolve(meta.partition_count)?
                .into_iter()
                .map(|p| (p, after, cursor(p)))
                .collect(),
            Replay::FromTime { from, partitions } => {
                let selected = partitions.resolve(meta.partition_count)?;
                let firsts = Self::first_at_or_after(&mut tx, s, &selected, from).await?;
                selected
                    .into_iter()
                    .filter_map(|p| firsts.get(&p).map(|first| (p, first - 1, cursor(p))))
                    .collect()
            }
            Replay::Query(_) => matched
                .iter()
                .map(|e| {
                    (
                        e.partition,
                        e.sequence - 1,
                        (e.sequence + 1).min(cursor(e.partition)),
                    )
                })
                .collect(),
            Replay::EventIds(ids) => Self::locate_all(&mut tx, s, &ids)
                .await?
                .into_iter()
                .map(|(_, p, seq)| (p, seq - 1, (seq + 1).min(cursor(p))))
                .collect(),
        };
        let mut count = 0;
        let mut floors = Floors::default();
        for (p, after, before) in ranges {
            // Below the log start nothing is left to re-open
            // (docs/log.md#retention): not even a dead letter, whose event
            // is gone. The trim that moved it waited for this group's row.
            let after = after.max(at(p).first - 1);
            let group = (s, g, gating);
            count += Self::reopen(&mut tx, group, p, (after, before), &mut floors).await?;
        }
        floors.apply::<D>(&mut tx, s, g).await?;
        floors.regate::<D>(&mut tx, s, g, gating).await?;
        self.notify_in(&mut tx, s).await?;
        Self::commit(tx).await?;
        Ok(count)
    }

    pub(super) async fn reset_tx(&self, req: ResetRequest) -> Result<()> {
        req.validate()?;
        let meta = self.meta(&req.stream).await?;
        let (s, g) = (&req.stream, &req.group);
        let mut tx = self.begin(Access::Write).await?;
        let config = self.lock_group(&mut tx, (s, g), meta, true).await?;
        let selected = req.partitions.resolve(meta.partition_count)?;
        // The ordering and flow after the reset, checked together before
        // anything changes (`docs/groups.md#flow`).
        let (ordering, flow) = req.settings_after((config.ordering, config.flow))?;
        let changes_gates = req.ordering.is_some() || req.flow.is_some();
        if changes_gates {
            // Every partition (`ResetRequest::validate`): its cursor rows
            // first, so that no fetch decides under the old gates while
            // this one changes them and forgets every delivery it gated.
            self.lock_cursors(&mut tx, s, g, &selected).await?;
            let args = args![s, g, ordering.as_str(), flow.to_json()];
            exec::<D>(&mut tx, Statement::set_ordering, args).await?;
        }
        let starts = Self::start_points_in(&mut tx, s, meta.partition_count, &req.start).await?;
        // Deliveries first, cursor rows second: the order fetches lock them
        // in. Then the deliveries again: a fetch that held the cursor rows
        // while the first delete ran (where rows are locked) created
        // deliveries it could not see, which would otherwise stay past the
        // cursor this moves back, and be created a second time.
        let args = || args![s, g, super::partitions(&selected)];
        exec::<D>(&mut tx, Statement::reset_partitions, args()).await?;
        let cursors = selected
            .iter()
            .map(|p| int(starts[*p as usize] + 1))
            .collect();
        let chosen = selected.iter().map(|&p| p as i32).collect();
        let rows = Arg::Rows(vec![Column::I32(chosen), Column::I64(cursors)]);
        exec::<D>(&mut tx, Statement::set_cursors, args![s, g, rows]).await?;
        exec::<D>(&mut tx, Statement::reset_partitions, args()).await?;
        // The key_rate buckets of these partitions start full
        // (docs/groups.md#flow): fetches write them holding the cursor rows
        // set_cursors waited for.
        exec::<D>(&mut tx, Statement::reset_rates, args()).await?;
        self.notify_in(&mut tx, s).await?;
        let committed = Self::commit(tx).await;
        if changes_gates {
            self.forget_group(s, g);
        }
        committed
    }
}
