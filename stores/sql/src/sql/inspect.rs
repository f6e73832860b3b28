//! Read-only views: lag, group info, dead letters, leases, the next due
//! time (`docs/groups.md#frontier-and-lag`,
//! `docs/groups.md#what-is-out-leases`), each read in one snapshot.

use std::collections::HashMap;

use super::engine::{StreamMeta, one, rows};
use super::log::{Position, count};
use super::{Access, Arg, Conn, Dialect, SqlBackend, Statement, args, big, partitions, small};
use rheo_core::backend::policy::{LagBuilder, LeaseRow, OpenCounts, lease_page};
use rheo_core::backend::{DeadLettersRequest, Error, LeasesRequest, Partitions, Result};
use rheo_core::model::{
    ConsumerId, DeadLetter, DeadLetterPage, EventId, GroupInfo, GroupName, Lag, LeaseId, LeasePage,
    StreamName, Timestamp,
};

impl<D: Dialect> SqlBackend<D> {
    /// Per partition: the group's position, one for each of `meta`'s
    /// partitions, or [`Self::stale`] (the group or its stream was deleted
    /// since this node read them).
    async fn positions_of(
        &self,
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        meta: StreamMeta,
    ) -> Result<HashMap<u32, Position>> {
        let positions = Self::positions(conn, s, g).await?;
        if positions.len() != meta.partition_count as usize {
            return Err(self.stale(s));
        }
        Ok(positions)
    }

    /// Lag over `selected`; also returns the group's position in every
    /// partition, of which there must be `meta`'s count.
    async fn compute_lag(
        &self,
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        meta: StreamMeta,
        selected: &[u32],
        now: Timestamp,
    ) -> Result<(Lag, HashMap<u32, Position>)> {
        let positions = self.positions_of(conn, (s, g), meta).await?;
        let args = args![s, g, now];
        let mut open: HashMap<u32, OpenCounts> = HashMap::new();
        for r in rows::<D>(conn, Statement::lag_open, args).await? {
            let counts = OpenCounts {
                first_open: r.opt_u64(1)?,
                leased: r.u64(2)?,
                fresh: r.u64(3)?,
                waiting: r.u64(4)?,
            };
            open.insert(r.u32(0)?, counts);
        }
        let mut lag = LagBuilder::new(s, g);
        let mut unsettled = Vec::new();
        for &p in selected {
            let Position {
                cursor,
                high_watermark: hw,
                ..
            } = positions.get(&p).copied().unwrap_or_default();
            let frontier = lag.add(p, cursor, hw, open.get(&p).copied().unwrap_or_default());
            if frontier < hw {
                unsettled.push((p, frontier + 1));
            }
        }
        for event in Self::events_at(conn, s, &unsettled).await?.values() {
            lag.unsettled_since(event.timestamp, now);
        }
        Ok((lag.lag, positions))
    }

    pub(super) async fn lag_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let meta = self.meta(s).await?;
        let now = self.now();
        let mut tx = self.begin(Access::Read).await?;
        self.group_config(&mut tx, s, g).await?;
        let selected = partitions.resolve(meta.partition_count)?;
        let (lag, _) = self
            .compute_lag(&mut tx, (s, g), meta, &selected, now)
            .await?;
        Ok(lag)
    }

    pub(super) async fn group_info_tx(&self, s: &StreamName, g: &GroupName) -> Result<GroupInfo> {
        let meta = self.meta(s).await?;
        let now = self.now();
        let mut tx = self.begin(Access::Read).await?;
        let config = self.group_config(&mut tx, s, g).await?;
        let all: Vec<u32> = (0..meta.partition_count).collect();
        let (lag, positions) = self.compute_lag(&mut tx, (s, g), meta, &all, now).await?;
        let dead_letters = count::<D>(&mut tx, Statement::dead_count, args![s, g]).await?;
        Ok(GroupInfo {
            stream: s.clone(),
            group: g.clone(),
            max_attempts: config.max_attempts,
            retry_backoff_ms: config.retry_backoff_ms,
            ordering: config.ordering,
            on_exhausted: config.on_exhausted,
            flow: config.flow,
            inflight: lag.inflight,
            dead_letters,
            skipped_by_retention: positions.values().map(|at| at.skipped).sum(),
            cursors: all
                .iter()
                .map(|p| (*p, positions.get(p).map_or(1, |at| at.cursor)))
                .collect(),
            lag,
        })
    }

    pub(super) async fn dead_letters_tx(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        req.validate()?;
        self.meta(&req.stream).await?;
        let (s, g) = (&req.stream, &req.group);
        let mut tx = self.begin(Access::Read).await?;
        self.group_config(&mut tx, s, g).await?;
        // Listing order is (sequence, partition); a page starts after its cursor.
        let (after_seq, after_p) = match &req.after {
            None => (big(0), Arg::I32(-1)),
            Some(id) => {
                let found = Self::locate(&mut tx, s, std::slice::from_ref(id)).await?;
                let at = match found.get(id.as_str()) {
                    Some(&at) => Some(at),
                    // The event of a dead letter retention removed: the
                    // dead letter keeps its id.
                    None => Self::delivery_of(&mut tx, s, g, id).await?,
                };
                let (p, seq) = at.ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?;
                (big(seq), small(p))
            }
        };
        let args = args![s, g, after_seq, after_p, small(req.limit)];
        let mut dead_letters = Vec::new();
        // Columns: the event's eight (NULL but the position once retention
        // removed it), then attempt, reason, dead_lettered_at, event id.
        for row in rows::<D>(&mut tx, Statement::dead_letters, args).await? {
            let event = match row.opt_text(2)? {
                Some(_) => Some(row.event(s, 0)?),
                None => None,
            };
            let event_id =
                EventId::parse(row.text(11)?).map_err(|e| super::corrupt("event id", e))?;
            dead_letters.push(DeadLetter {
                event_id,
                partition: row.u32(0)?,
                sequence: row.u64(1)?,
                attempt: row.u32(8)?,
                reason: row.opt_text(9)?.unwrap_or_default(),
                dead_lettered_at: row.opt_ts(10)?.unwrap_or(Timestamp::EPOCH),
                event,
            });
        }
        if dead_letters.is_empty() {
            // None, or a group deleted since this node read it.
            self.confirm_group(&mut tx, s, g).await?;
        }
        let next = (dead_letters.len() == req.limit as usize)
            .then(|| dead_letters.last().map(|d| d.event_id.clone()))
            .flatten();
        Ok(DeadLetterPage { dead_letters, next })
    }

    pub(super) async fn leases_tx(&self, req: &LeasesRequest) -> Result<LeasePage> {
        req.validate()?;
        self.meta(&req.stream).await?;
        let (s, g) = (&req.stream, &req.group);
        let now = self.now();
        let mut tx = self.begin(Access::Read).await?;
        self.group_config(&mut tx, s, g).await?;
        // From the start: before partition 0.
        let (after_p, after_seq) = match req.after {
            None => (Arg::I32(-1), big(0)),
            Some(at) => (small(at.partition), big(at.sequence)),
        };
        // One more than the page, so that the core knows whether one follows.
        let want = big(u64::from(req.limit) + 1);
        let args = args![s, g, after_p, after_seq, want];
        let mut leases = Vec::new();
        for row in rows::<D>(&mut tx, Statement::leases, args).await? {
            let id = |i: usize, what: &str| -> Result<String> {
                row.opt_text(i)?
                    .ok_or_else(|| super::corrupt(what, "NULL while leased"))
            };
            leases.push(LeaseRow {
                partition: row.u32(0)?,
                sequence: row.u64(1)?,
                event_id: EventId::parse(row.text(2)?)
                    .map_err(|e| super::corrupt("event id", e))?,
                lease_id: LeaseId::parse(id(3, "lease id")?)
                    .map_err(|e| super::corrupt("lease id", e))?,
                consumer_id: ConsumerId::parse(id(4, "consumer id")?)
                    .map_err(|e| super::corrupt("consumer id", e))?,
                attempt: row.u32(5)?,
                leased_at: row.ts(6)?,
                expires_at: row.ts(7)?,
                reason: row.opt_text(8)?,
            });
        }
        if leases.is_empty() {
            // None, or a group deleted since this node read it.
            self.confirm_group(&mut tx, s, g).await?;
        }
        Ok(lease_page(leases, req.after, req.limit, now))
    }

    pub(super) async fn next_due_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions_: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let meta = self.meta(s).await?;
        let now = self.now();
        let mut tx = self.begin(Access::Read).await?;
        self.group_config(&mut tx, s, g).await?;
        let selected = partitions_.resolve(meta.partition_count)?;
        if selected.is_empty() {
            return Ok(None);
        }
        let positions = self.positions_of(&mut tx, (s, g), meta).await?;
        let unseen = selected.iter().any(|p| {
            let at = positions.get(p).copied().unwrap_or_default();
            at.cursor <= at.high_watermark
        });
        let args = args![s, g, partitions(&selected), now];
        if unseen
            || one::<D>(&mut tx, Statement::claimable_now, args)
                .await?
                .is_some()
        {
            return Ok(Some(now));
        }
        let args = args![s, g, partitions(&selected)];
        let due = one::<D>(&mut tx, Statement::next_due, args).await?;
        Ok(match due {
            Some(row) => row.opt_ts(0)?.map(|t| t.max(now)),
            None => None,
        })
    }

    /// Where the group's delivery of event `id` is, if it has one.
    async fn delivery_of(
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        id: &EventId,
    ) -> Result<Option<(u32, u64)>> {
        let row = one::<D>(conn, Statement::delivery_by_event, args![s, g, id]).await?;
        row.map(|row| Ok((row.u32(0)?, row.u64(1)?))).transpose()
    }
}
