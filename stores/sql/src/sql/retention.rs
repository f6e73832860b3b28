//! Retention (`docs/log.md#retention`): a stream's retention setting, the
//! trim that removes a partition's oldest events, what a settle or renew
//! of a removed event answers, and giving freed space back.
//!
//! A trim is one write transaction, bounded by its limit. It takes the
//! stream's row, every group's row and the partition's allocator row
//! (where the dialect locks rows: `trim_lock_*.sql`), so that nothing that
//! reads the log start to decide where a group starts or what it re-opens
//! (creating a group, replay, redrive, reset) runs beside it; appends and
//! fetches of other partitions lock none of these. Then, in the order
//! fetches lock them, the groups' deliveries of the removed events, their
//! cursor rows, and the deliveries again (`trim_deliveries.sql`): every
//! delivery below the new log start goes but dead letters, which keep
//! their event's id. The events go, the partition's first sequence moves,
//! each group's cursor moves to at least the new log start, counting what
//! it had not settled, and the gates whose heads were removed let their
//! next deliveries out (`release_gates.sql`), as an ack of the heads would.

use std::collections::{BTreeMap, BTreeSet};

use super::engine::{StreamMeta, exec, one, rows};
use super::{Access, Arg, Column, Conn, Dialect, SqlBackend, Statement, args, big, int, small};
use rheo_core::backend::policy::{skipped_by_trim, unknown_event};
use rheo_core::backend::{Error, Result, TrimRequest, Trimmed};
use rheo_core::model::{EventId, GroupName, Retention, Stream, StreamName};

/// What a trim removed of one group's deliveries.
#[derive(Debug, Default)]
struct Removed {
    /// Open deliveries (available, leased, parked): events it had not settled.
    open: u64,
    /// The gates of those: each lets its next deliveries out for the slots
    /// its heads left free. Not only the heads': where rows are locked, a
    /// settle letting a gate's next deliveries out skips those the trim
    /// holds (being deleted), leaving the gate short of heads
    /// (`release_gates.sql`).
    gates: BTreeSet<String>,
}

impl<D: Dialect> SqlBackend<D> {
    pub(super) async fn set_retention_tx(
        &self,
        s: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        rheo_core::backend::validate_retention(retention.as_ref())?;
        let mut tx = self.begin(Access::Write).await?;
        let text = retention.map(|r| r.to_text());
        let args = args![s, Arg::OptText(text.map(Into::into))];
        let Some(row) = one::<D>(&mut tx, Statement::set_retention, args).await? else {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        };
        let meta = StreamMeta {
            partition_count: row.u32(0)?,
            created_at: row.ts(1)?,
        };
        let stream = self.describe(&mut tx, s, meta).await?;
        Self::commit(tx).await?;
        Ok(stream)
    }

    pub(super) async fn trim_tx(&self, req: &TrimRequest) -> Result<Trimmed> {
        let meta = self.meta(&req.stream).await?;
        if req.partition >= meta.partition_count {
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count: meta.partition_count,
            });
        }
        let (s, p) = (&req.stream, req.partition);
        let mut tx = self.begin(Access::Write).await?;
        let Some(row) = one::<D>(&mut tx, Statement::trim_lock_stream, args![s]).await? else {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        };
        let stored = StreamMeta {
            partition_count: row.u32(0)?,
            created_at: row.ts(1)?,
        };
        if stored != meta {
            // Deleted and created again since this node read it.
            return Err(self.stale(s));
        }
        exec::<D>(&mut tx, Statement::trim_lock_groups, args![s]).await?;
        let args = args![s, small(p)];
        let Some(row) = one::<D>(&mut tx, Statement::trim_lock_partition, args).await? else {
            return Err(self.stale(s));
        };
        let (first, high_watermark) = (row.u64(0)?, row.u64(1)?);
        let upto = req.end(first, high_watermark);
        if upto <= first {
            // Nothing to remove: the transaction rolls back.
            return Ok(Trimmed::nothing(first));
        }
        let range = || args![s, small(p), big(first), big(upto)];
        let mut removed: BTreeMap<String, Removed> = BTreeMap::new();
        Self::trim_deliveries(&mut tx, range(), &mut removed).await?;
        let mut cursors = Vec::new();
        for row in rows::<D>(&mut tx, Statement::trim_lock_cursors, args![s, small(p)]).await? {
            cursors.push((row.text(0)?, row.u64(1)?));
        }
        Self::trim_deliveries(&mut tx, range(), &mut removed).await?;
        let events = exec::<D>(&mut tx, Statement::trim_events, range()).await?;
        let args = args![s, small(p), big(upto)];
        exec::<D>(&mut tx, Statement::trim_partition, args).await?;

        // Each group's cursor moves to the new log start at least; what it
        // had not settled of the removed events is what it skips: its open
        // deliveries, and the events it never reached.
        let (mut names, mut to, mut counts, mut floors) = (vec![], vec![], vec![], vec![]);
        let mut skipped = Vec::new();
        let mut gated = Vec::new();
        for (name, cursor) in cursors {
            let gone = removed.remove(&name).unwrap_or_default();
            let count = skipped_by_trim(gone.open, cursor, first, upto);
            if cursor >= upto && count == 0 {
                continue;
            }
            let group = GroupName::parse(&name).map_err(|e| super::corrupt("group name", e))?;
            if count > 0 {
                skipped.push((group.clone(), count));
            }
            if !gone.gates.is_empty() {
                let gates = gone.gates.into_iter().map(|gate| (p, gate)).collect();
                gated.push((group, gates));
            }
            names.push(name);
            to.push(int(cursor.max(upto)));
            counts.push(int(count));
            floors.push(int(upto));
        }
        if !names.is_empty() {
            let moved = Arg::Rows(vec![
                Column::Text(names),
                Column::I64(to),
                Column::I64(counts),
                Column::I64(floors),
            ]);
            exec::<D>(&mut tx, Statement::trim_cursors, args![s, small(p), moved]).await?;
        }
        // The gates whose heads went let their next deliveries out, as an
        // ack of the heads would (docs/groups.md#ordering,
        // docs/groups.md#flow); the trim holds the partition's cursor rows,
        // as the release needs, and the group's row, so its slots are read
        // as stored. A gate whose slots are all still taken is left as it is.
        for (group, gates) in gated {
            let slots = Self::stored_slots(&mut tx, s, &group).await?;
            Self::release_gates(&mut tx, s, &group, slots, gates).await?;
        }
        if !skipped.is_empty() {
            self.notify_in(&mut tx, s).await?;
        }
        Self::commit(tx).await?;
        Ok(Trimmed {
            removed: events,
            first_sequence: upto,
            skipped,
        })
    }

    /// How many heads a gate of group `g` may have, as stored
    /// (`docs/groups.md#flow`): the trim holds the group's row, so no reset
    /// changes it meanwhile.
    async fn stored_slots(conn: &mut Conn<D>, s: &StreamName, g: &GroupName) -> Result<usize> {
        let Some(row) = one::<D>(conn, Statement::group_config, args![s, g]).await? else {
            return Err(super::corrupt("group", "a trimmed group's row is missing"));
        };
        Ok(super::gating(row.text(2)?, row.text(4)?)?.slots())
    }

    /// One run of `trim_deliveries.sql`, added up per group.
    async fn trim_deliveries(
        conn: &mut Conn<D>,
        range: Vec<Arg<'_>>,
        removed: &mut BTreeMap<String, Removed>,
    ) -> Result<()> {
        for row in rows::<D>(conn, Statement::trim_deliveries, range).await? {
            let group = removed.entry(row.text(0)?).or_default();
            if matches!(row.text(1)?.as_str(), "available" | "leased" | "parked") {
                group.open += 1;
                if let Some(gate) = row.opt_text(2)? {
                    group.gates.insert(gate);
                }
            }
        }
        Ok(())
    }

    /// The failure path of settles and renewals: an item that failed as
    /// `stale_lease` whose event the stream no longer holds answers what
    /// [`unknown_event`] says (`event_removed` once retention removed
    /// events of the stream). Reads only when some item failed so.
    pub(super) async fn removed_events<T>(
        conn: &mut Conn<D>,
        s: &StreamName,
        ids: &[&EventId],
        results: &mut [Result<T>],
    ) -> Result<()> {
        let stale: Vec<EventId> = (ids.iter().zip(results.iter()))
            .filter(|(_, r)| matches!(r, Err(Error::StaleLease)))
            .map(|(id, _)| (*id).clone())
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let found = Self::locate(conn, s, &stale).await?;
        if stale.iter().all(|id| found.contains_key(id.as_str())) {
            return Ok(());
        }
        let (partitions, _) = Self::partitions_of(conn, s).await?;
        let firsts: Vec<u64> = partitions.into_values().map(|part| part.first).collect();
        for (id, result) in ids.iter().zip(results.iter_mut()) {
            if matches!(result, Err(Error::StaleLease)) && !found.contains_key(id.as_str()) {
                *result = Err(unknown_event(id, &firsts));
            }
        }
        Ok(())
    }

    /// [`Self::removed_events`] for one item that failed with `e`.
    pub(super) async fn removed_event(
        conn: &mut Conn<D>,
        s: &StreamName,
        id: &EventId,
        e: Error,
    ) -> Result<Error> {
        let mut results: [Result<()>; 1] = [Err(e)];
        Self::removed_events(conn, s, &[id], &mut results).await?;
        let [result] = results;
        Ok(result.err().unwrap_or(Error::StaleLease))
    }
}
