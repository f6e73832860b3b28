//! Lag, group info, leases and the next due time on Redis
//! (`docs/groups.md#frontier-and-lag`, `docs/groups.md#what-is-out-leases`):
//! counts come from the delivery indexes, the arithmetic from the policy's
//! `LagBuilder`, a page of leases from its `lease_page`.

use std::collections::BTreeMap;

use super::claims::{Delivery, Status};
use super::{Phase, RedisBackend, corrupt};
use rheo_core::backend::policy::{LagBuilder, LeaseRow, OpenCounts, lease_page};
use rheo_core::backend::{LeasesRequest, Partitions, Result};
use rheo_core::model::{
    ConsumerId, GroupInfo, GroupName, Lag, LeaseId, LeasePage, StreamName, Timestamp,
};

impl RedisBackend {
    pub(crate) async fn ping(&self) -> Result<()> {
        let _: String = self.run(&redis::cmd("PING"), Phase::Read).await?;
        Ok(())
    }

    /// A group's cursor in one partition (1 before anything was delivered).
    pub(super) async fn cursor(&self, s: &StreamName, g: &GroupName, p: u32) -> Result<u64> {
        let raw: Option<u64> = self
            .run(
                redis::cmd("HGET").arg(self.keys.cursors(s, g)).arg(p),
                Phase::Read,
            )
            .await?;
        Ok(raw.unwrap_or(1))
    }

    /// Open deliveries of one partition, by kind. Under `flow.key_rate`
    /// (`key_rate`), a paced delivery never handed out is pending once its
    /// due time has come, though no fetch has moved it out of `delayed`
    /// yet (`docs/groups.md#flow`): the due ones of [`Keys::paced`] are
    /// counted with `fresh`, in the same round trip. A group without a key
    /// rate has none, and is not asked.
    ///
    /// [`Keys::paced`]: super::Keys::paced
    async fn open_counts(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        (now, key_rate): (Timestamp, bool),
    ) -> Result<OpenCounts> {
        let k = &self.keys;
        let first: Vec<u64> = self
            .run(
                redis::cmd("ZRANGE").arg(k.open(s, g, p)).arg(0).arg(0),
                Phase::Read,
            )
            .await?;
        let card = |key: String| redis::cmd("ZCARD").arg(key).clone();
        let leased: u64 = self.run(&card(k.leased(s, g, p)), Phase::Read).await?;
        let fresh: u64 = if key_rate {
            let mut pipe = redis::pipe();
            pipe.cmd("ZCARD").arg(k.fresh(s, g, p));
            pipe.cmd("ZCOUNT")
                .arg(k.paced(s, g, p))
                .arg("-inf")
                .arg(now.as_millis());
            let (fresh, due): (u64, u64) = pipe
                .query_async(&mut self.read_conn())
                .await
                .map_err(|e| super::map_error(e, Phase::Read))?;
            fresh + due
        } else {
            self.run(&card(k.fresh(s, g, p)), Phase::Read).await?
        };
        let waiting: u64 = self
            .run(
                redis::cmd("ZCOUNT")
                    .arg(k.delayed(s, g, p))
                    .arg(format!("({}", now.as_millis()))
                    .arg("+inf"),
                Phase::Read,
            )
            .await?;
        Ok(OpenCounts {
            first_open: first.first().copied(),
            leased,
            fresh,
            waiting,
        })
    }

    pub(crate) async fn lag(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let (settings, bounds) = self.group_now(s, g, true).await?;
        let selected = partitions.resolve(settings.stream.partitions)?;
        let key_rate = settings.config.flow.key_rate.is_some();
        self.build_lag(s, g, (&selected, key_rate), &bounds.high_watermarks)
            .await
    }

    /// The lag of `selected` partitions of a group (with a key rate or
    /// not), whose high watermarks are `hws`.
    async fn build_lag(
        &self,
        s: &StreamName,
        g: &GroupName,
        (selected, key_rate): (&[u32], bool),
        hws: &[u64],
    ) -> Result<Lag> {
        let now = self.clock.now();
        let mut lag = LagBuilder::new(s, g);
        for &p in selected {
            let hw = hws[p as usize];
            let cursor = self.cursor(s, g, p).await?;
            let open = self.open_counts(s, g, p, (now, key_rate)).await?;
            let frontier = lag.add(p, cursor, hw, open);
            // Retention may have removed it since the reads above (then
            // the trim moved the group past it: its age is not known here).
            if frontier < hw
                && let Some(event) = self.stored_event(s, p, frontier + 1).await?
            {
                lag.unsettled_since(event.timestamp, now);
            }
        }
        Ok(lag.lag)
    }

    pub(crate) async fn group_info(&self, s: &StreamName, g: &GroupName) -> Result<GroupInfo> {
        let (settings, bounds) = self.group_now(s, g, true).await?;
        let config = settings.config;
        let all: Vec<u32> = (0..settings.stream.partitions).collect();
        let key_rate = config.flow.key_rate.is_some();
        let lag = (self.build_lag(s, g, (&all, key_rate), &bounds.high_watermarks)).await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ZCARD").arg(self.keys.dead(s, g));
        pipe.cmd("HVALS").arg(self.keys.skipped(s, g));
        let (dead, skipped): (u64, Vec<u64>) = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| super::map_error(e, Phase::Read))?;
        let mut cursors = BTreeMap::new();
        for &p in &all {
            cursors.insert(p, self.cursor(s, g, p).await?);
        }
        Ok(GroupInfo {
            stream: s.clone(),
            group: g.clone(),
            max_attempts: config.max_attempts,
            retry_backoff_ms: config.retry_backoff_ms,
            ordering: config.ordering,
            on_exhausted: config.on_exhausted,
            flow: config.flow,
            inflight: lag.inflight,
            dead_letters: dead,
            skipped_by_retention: skipped.iter().sum(),
            cursors,
            lag,
        })
    }

    /// A page of the leases the group has out: per partition from the
    /// cursor's on, the members of its `leased` index (every leased
    /// delivery, expired or not, scored by expiry) in sequence order, their
    /// records read in batches until the page and one more are found (a
    /// record settled since it was listed is passed over).
    pub(crate) async fn held_leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        let (settings, _) = self.group_now(s, g, false).await?;
        let now = self.clock.now();
        let want = req.limit as usize + 1;
        let mut rows = Vec::new();
        let first = req.after.map_or(0, |a| a.partition);
        for p in first..settings.stream.partitions {
            if rows.len() >= want {
                break;
            }
            let above = (req.after)
                .filter(|a| a.partition == p)
                .map_or(0, |a| a.sequence);
            let cmd = redis::cmd("ZRANGE")
                .arg(self.keys.leased(s, g, p))
                .arg(0)
                .arg(-1)
                .clone();
            let members: Vec<u64> = self.run(&cmd, Phase::Read).await?;
            let mut seqs: Vec<u64> = members.into_iter().filter(|&q| q > above).collect();
            seqs.sort_unstable();
            let mut rest = seqs.as_slice();
            while !rest.is_empty() && rows.len() < want {
                let (batch, after) = rest.split_at((want - rows.len()).min(rest.len()));
                rest = after;
                rows.extend(self.leased_rows(s, g, p, batch).await?);
            }
        }
        Ok(lease_page(rows, req.after, req.limit, now))
    }

    /// The deliveries at `seqs` of partition `p` that are leased, as a
    /// page of leases lists them, with their events' ids.
    async fn leased_rows(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        seqs: &[u64],
    ) -> Result<Vec<LeaseRow>> {
        let cmd = redis::cmd("HMGET")
            .arg(self.keys.deliveries(s, g, p))
            .arg(seqs)
            .clone();
        let raws: Vec<Option<String>> = self.run(&cmd, Phase::Read).await?;
        let mut held = Vec::new();
        for (&seq, raw) in seqs.iter().zip(raws) {
            let Some(raw) = raw else { continue };
            let d = Delivery::decode(&raw)?;
            if d.status == Status::Leased {
                held.push((seq, d));
            }
        }
        let positions: Vec<(u32, u64)> = held.iter().map(|(seq, _)| (p, *seq)).collect();
        let mut events = self.events_at(s, &positions).await?;
        let mut rows = Vec::with_capacity(held.len());
        for (seq, d) in held {
            // Retention closes the deliveries of what it removes.
            let Some(event) = events.remove(&(p, seq)) else {
                continue;
            };
            let lease_id = LeaseId::parse(d.lease_id.unwrap_or_default())
                .map_err(|e| corrupt("lease id", e))?;
            let consumer_id = ConsumerId::parse(d.consumer.unwrap_or_default())
                .map_err(|e| corrupt("consumer id", e))?;
            rows.push(LeaseRow {
                partition: p,
                sequence: seq,
                event_id: event.id.clone(),
                lease_id,
                consumer_id,
                attempt: d.attempt,
                leased_at: Timestamp::from_millis(d.leased_at.unwrap_or_default()),
                expires_at: Timestamp::from_millis(d.expires_at.unwrap_or_default()),
                // Shown for a quarantined head (`docs/groups.md#quarantine`).
                reason: d.reason,
            });
        }
        Ok(rows)
    }

    /// When the next delivery becomes claimable by time alone: `now` when
    /// something is claimable already (an event never delivered, a ready
    /// delivery, or one due or expired), the earliest due time or expiry otherwise, `None` when
    /// nothing waits on time.
    pub(crate) async fn next_due(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let (settings, bounds) = self.group_now(s, g, true).await?;
        let hws = bounds.high_watermarks;
        let now = self.clock.now();
        let mut next: Option<i64> = None;
        for p in partitions.resolve(settings.stream.partitions)? {
            let k = &self.keys;
            let ready: u64 = self
                .run(
                    &redis::cmd("ZCARD").arg(k.ready(s, g, p)).clone(),
                    Phase::Read,
                )
                .await?;
            // Claimable now: a ready delivery, or an event never delivered.
            if ready > 0 || self.cursor(s, g, p).await? <= hws[p as usize] {
                return Ok(Some(now));
            }
            for index in [k.delayed(s, g, p), k.leased(s, g, p)] {
                let first: Vec<(String, f64)> = self
                    .run(
                        redis::cmd("ZRANGE")
                            .arg(index)
                            .arg(0)
                            .arg(0)
                            .arg("WITHSCORES"),
                        Phase::Read,
                    )
                    .await?;
                if let Some((_, score)) = first.first() {
                    let at = *score as i64;
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
        }
        Ok(next.map(|at| Timestamp::from_millis(at).max(now)))
    }
}
