//! Lag, group info and the next due time on Redis
//! (`docs/groups.md#frontier-and-lag`): counts come from the delivery
//! indexes, the arithmetic from the policy's `LagBuilder`.

use std::collections::BTreeMap;

use super::{Phase, RedisBackend};
use rheo_core::backend::policy::{LagBuilder, OpenCounts};
use rheo_core::backend::{Partitions, Result};
use rheo_core::model::{GroupInfo, GroupName, Lag, StreamName, Timestamp};

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

    /// Open deliveries of one partition, by kind.
    async fn open_counts(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        now: Timestamp,
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
        let fresh: u64 = self.run(&card(k.fresh(s, g, p)), Phase::Read).await?;
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
        self.build_lag(s, g, &selected, &bounds.high_watermarks)
            .await
    }

    /// The lag of `selected` partitions, whose high watermarks are `hws`.
    async fn build_lag(
        &self,
        s: &StreamName,
        g: &GroupName,
        selected: &[u32],
        hws: &[u64],
    ) -> Result<Lag> {
        let now = self.clock.now();
        let mut lag = LagBuilder::new(s, g);
        for &p in selected {
            let hw = hws[p as usize];
            let cursor = self.cursor(s, g, p).await?;
            let open = self.open_counts(s, g, p, now).await?;
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
        let lag = self.build_lag(s, g, &all, &bounds.high_watermarks).await?;
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
            inflight: lag.inflight,
            dead_letters: dead,
            skipped_by_retention: skipped.iter().sum(),
            cursors,
            lag,
        })
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
