//! Read-only views (`docs/groups.md#frontier-and-lag`): lag, group info,
//! dead letters, leases (`docs/groups.md#what-is-out-leases`) and the next
//! due time. The open deliveries of a group are summed per partition by
//! one aggregation; the frontier, lag and a page of leases come from the
//! shared policy.

use std::collections::HashMap;

use futures::TryStreamExt as _;
use mongodb::bson::{Document, doc};

use super::claims::{AVAILABLE, DEAD, LEASED, PARKED, claimable, deliveries_of};
use super::groups::GroupState;
use super::{
    DELIVERIES, MongoBackend, Phase, big, corrupt, int, map_error, opt_int, opt_text, text, uint,
};
use rheo_core::backend::policy::{LagBuilder, LeaseRow, OpenCounts, lease_page};
use rheo_core::backend::{DeadLettersRequest, Error, LeasesRequest, Partitions, Result};
use rheo_core::model::{
    ConsumerId, DeadLetter, DeadLetterPage, EventId, GroupInfo, GroupName, Lag, LeaseId, LeasePage,
    StreamName, Timestamp,
};

impl MongoBackend {
    /// Open deliveries per partition: the lowest open sequence and the
    /// counts the lag reports.
    async fn open_counts(
        &self,
        s: &StreamName,
        g: &GroupName,
        now: Timestamp,
    ) -> Result<HashMap<u32, OpenCounts>> {
        let mut matched = deliveries_of(s, g);
        matched.insert("st", doc! {"$in": [AVAILABLE, PARKED, LEASED]});
        let when = |cond: Document| doc! {"$sum": {"$cond": [cond, 1, 0]}};
        let pipeline = vec![
            doc! {"$match": matched},
            doc! {"$group": {
                "_id": "$p",
                "first": {"$min": "$q"},
                "leased": when(doc! {"$eq": ["$st", LEASED]}),
                // Never handed out, and not paced by `flow.key_rate` (a
                // paced one waits for its slot: docs/groups.md#flow).
                "fresh": when(doc! {"$and": [
                    {"$in": ["$st", [AVAILABLE, PARKED]]},
                    {"$eq": ["$a", 0]},
                    {"$not": [{"$gt": ["$due", now.as_millis()]}]},
                ]}),
                "waiting": when(doc! {"$and": [
                    {"$eq": ["$st", AVAILABLE]},
                    {"$gt": ["$due", now.as_millis()]},
                ]}),
            }},
        ];
        let cursor = self
            .coll(DELIVERIES)
            .aggregate(pipeline)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let rows: Vec<Document> = cursor
            .try_collect()
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut out = HashMap::new();
        for r in &rows {
            let p = u32::try_from(int(r, "_id")?).map_err(|e| corrupt("partition", e))?;
            out.insert(
                p,
                OpenCounts {
                    first_open: Some(uint(r, "first")?),
                    leased: uint(r, "leased")?,
                    fresh: uint(r, "fresh")?,
                    waiting: uint(r, "waiting")?,
                },
            );
        }
        Ok(out)
    }

    /// Lag over `selected`; also returns every partition's cursor.
    async fn compute_lag(
        &self,
        s: &StreamName,
        g: &GroupName,
        selected: &[u32],
        partition_count: u32,
    ) -> Result<(Lag, GroupState)> {
        let now = self.now();
        let state = self.group_state(s, g, partition_count).await?;
        let hw = self.high_watermarks(s).await?;
        let open = self.open_counts(s, g, now).await?;
        let mut lag = LagBuilder::new(s, g);
        let mut unsettled = Vec::new();
        for &p in selected {
            let (cursor, high) = (state.cursors[p as usize], hw[p as usize]);
            let frontier = lag.add(p, cursor, high, open.get(&p).copied().unwrap_or_default());
            if frontier < high {
                unsettled.push((p, frontier + 1));
            }
        }
        for event in self.events_at(s, &unsettled).await?.values() {
            lag.unsettled_since(event.timestamp, now);
        }
        Ok((lag.lag, state))
    }

    pub(crate) async fn lag(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: &Partitions,
    ) -> Result<Lag> {
        let (partition_count, _) = self.meta(s).await?;
        self.group_config(s, g).await?;
        let selected = partitions.resolve(partition_count)?;
        Ok(self.compute_lag(s, g, &selected, partition_count).await?.0)
    }

    pub(crate) async fn group_info(&self, s: &StreamName, g: &GroupName) -> Result<GroupInfo> {
        let (partition_count, _) = self.meta(s).await?;
        let config = self.group_config(s, g).await?;
        let all: Vec<u32> = (0..partition_count).collect();
        let (lag, state) = self.compute_lag(s, g, &all, partition_count).await?;
        let mut dead = deliveries_of(s, g);
        dead.insert("st", DEAD);
        let dead_letters = self
            .coll(DELIVERIES)
            .count_documents(dead)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
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
            skipped_by_retention: state.skipped,
            cursors: all
                .iter()
                .map(|p| (*p, state.cursors[*p as usize]))
                .collect(),
            lag,
        })
    }

    pub(crate) async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        let (partition_count, _) = self.meta(s).await?;
        self.group_config(s, g).await?;
        let mut filter = deliveries_of(s, g);
        filter.insert("st", DEAD);
        // Listing order is (sequence, partition); a page starts after its cursor.
        // The page's cursor as a bound on the sequence alone (an index
        // range); the few at that sequence in lower partitions are skipped
        // here.
        let mut after = None;
        if let Some(id) = &req.after {
            let found = self.locate(s, std::slice::from_ref(id)).await?;
            let (p, seq) = match found.get(id.as_str()) {
                Some(&at) => at,
                // Retention may have removed the event: its dead letter
                // still names it.
                None => self
                    .dead_letter_of(s, g, id)
                    .await?
                    .ok_or_else(|| Error::CursorNotFound(id.as_str().to_owned()))?,
            };
            filter.insert("q", doc! {"$gte": big(seq)});
            after = Some((seq, p));
        }
        let extra = i64::from(partition_count);
        let mut docs = self
            .find_all(
                DELIVERIES,
                filter,
                Some(doc! {"q": 1, "p": 1}),
                i64::from(req.limit) + extra,
            )
            .await?;
        if let Some((seq, p)) = after {
            docs.retain(|d| {
                let position = (uint(d, "q").unwrap_or(0), int(d, "p").unwrap_or(-1));
                position > (seq, i64::from(p))
            });
        }
        docs.truncate(req.limit as usize);
        if docs.is_empty() {
            self.group_still_there(s, g).await?;
        }
        let mut positions = Vec::with_capacity(docs.len());
        for d in &docs {
            let p = u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))?;
            positions.push((p, uint(d, "q")?));
        }
        let mut events = self.events_at(s, &positions).await?;
        let mut dead_letters = Vec::with_capacity(docs.len());
        for (d, (partition, sequence)) in docs.iter().zip(positions) {
            // None once retention removed the event; the delivery keeps its id.
            let event = events.remove(&(partition, sequence));
            let event_id = EventId::parse(text(d, "e")?).map_err(|e| corrupt("event id", e))?;
            dead_letters.push(DeadLetter {
                event_id,
                partition,
                sequence,
                attempt: u32::try_from(int(d, "a")?).map_err(|e| corrupt("attempt", e))?,
                reason: d.get_str("r").unwrap_or_default().to_owned(),
                dead_lettered_at: opt_int(d, "dat")?
                    .map_or(Timestamp::EPOCH, Timestamp::from_millis),
                event: event.map(|e| (*e).clone()),
            });
        }
        let next = (dead_letters.len() == req.limit as usize)
            .then(|| dead_letters.last().map(|d| d.event_id.clone()))
            .flatten();
        Ok(DeadLetterPage { dead_letters, next })
    }

    /// A page of the leases the group has out: its leased deliveries in
    /// (partition, sequence) order after the cursor, read as the rest of
    /// the cursor's partition and then the partitions after it (each
    /// filter naming fields of the `work` index alone), one more than the
    /// page so that the core knows whether one follows.
    pub(crate) async fn held_leases(&self, req: LeasesRequest) -> Result<LeasePage> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        self.meta(s).await?;
        self.group_config(s, g).await?;
        let now = self.now();
        let want = i64::from(req.limit) + 1;
        let leased = || {
            let mut filter = deliveries_of(s, g);
            filter.insert("st", LEASED);
            filter
        };
        let mut docs = Vec::new();
        let later = match req.after {
            None => leased(),
            Some(at) => {
                // No partition reaches i32::MAX: a cursor past it is past all.
                let p = i32::try_from(at.partition).unwrap_or(i32::MAX);
                let mut rest = leased();
                rest.insert("p", p);
                rest.insert("q", doc! {"$gt": big(at.sequence)});
                docs = self
                    .find_all(DELIVERIES, rest, Some(doc! {"q": 1}), want)
                    .await?;
                let mut later = leased();
                later.insert("p", doc! {"$gt": p});
                later
            }
        };
        let missing = want - docs.len() as i64;
        if missing > 0 {
            let sort = Some(doc! {"p": 1, "q": 1});
            docs.extend(self.find_all(DELIVERIES, later, sort, missing).await?);
        }
        if docs.is_empty() {
            self.group_still_there(s, g).await?;
        }
        let mut rows = Vec::with_capacity(docs.len());
        for d in &docs {
            let held = |field: &str| {
                opt_text(d, field).ok_or_else(|| corrupt(field, "absent while leased"))
            };
            rows.push(LeaseRow {
                partition: u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))?,
                sequence: uint(d, "q")?,
                event_id: EventId::parse(text(d, "e")?).map_err(|e| corrupt("event id", e))?,
                lease_id: LeaseId::parse(held("lid")?).map_err(|e| corrupt("lease id", e))?,
                consumer_id: ConsumerId::parse(held("c")?)
                    .map_err(|e| corrupt("consumer id", e))?,
                attempt: u32::try_from(int(d, "a")?).map_err(|e| corrupt("attempt", e))?,
                leased_at: Timestamp::from_millis(int(d, "lat")?),
                expires_at: Timestamp::from_millis(int(d, "exp")?),
                // Shown for a quarantined head only (`docs/groups.md#quarantine`).
                reason: opt_text(d, "r"),
            });
        }
        Ok(lease_page(rows, req.after, req.limit, now))
    }

    /// Where the dead letter of event `id` is, by its delivery (which
    /// outlives an event retention removed).
    async fn dead_letter_of(
        &self,
        s: &StreamName,
        g: &GroupName,
        id: &EventId,
    ) -> Result<Option<(u32, u64)>> {
        let mut filter = deliveries_of(s, g);
        filter.insert("e", id.as_str());
        filter.insert("st", DEAD);
        let found = self
            .coll(DELIVERIES)
            .find_one(filter)
            .projection(doc! {"p": 1, "q": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        found
            .map(|d| {
                let p = u32::try_from(int(&d, "p")?).map_err(|e| corrupt("partition", e))?;
                Ok((p, uint(&d, "q")?))
            })
            .transpose()
    }

    pub(crate) async fn next_due(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: &Partitions,
    ) -> Result<Option<Timestamp>> {
        let (partition_count, _) = self.meta(s).await?;
        let config = self.group_config(s, g).await?;
        let selected = partitions.resolve(partition_count)?;
        if selected.is_empty() {
            return Ok(None);
        }
        let now = self.now();
        let state = self.group_state(s, g, partition_count).await?;
        let hw = self.high_watermarks(s).await?;
        if selected
            .iter()
            .any(|&p| state.cursors[p as usize] <= hw[p as usize])
        {
            return Ok(Some(now));
        }
        let in_selected: Vec<i32> = selected.iter().map(|&p| p as i32).collect();
        let open = || {
            let mut f = deliveries_of(s, g);
            f.insert("p", doc! {"$in": &in_selected});
            f
        };
        // Claimable now, or an expired lease the poison guard will take.
        let [available, _] = claimable(s, g, &in_selected, now, config.max_attempts);
        let mut expired = open();
        expired.insert("st", LEASED);
        expired.insert("exp", doc! {"$lte": now.as_millis()});
        for filter in [available, expired] {
            let found = self
                .coll(DELIVERIES)
                .find_one(filter)
                .projection(doc! {"_id": 1})
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if found.is_some() {
                return Ok(Some(now));
            }
        }
        let mut due = None;
        for (status, field) in [(LEASED, "exp"), (AVAILABLE, "due")] {
            let mut filter = open();
            filter.insert("st", status);
            filter.insert(field, doc! {"$ne": null});
            let found = self
                .coll(DELIVERIES)
                .find_one(filter)
                .sort(doc! {field: 1})
                .projection(doc! {field: 1})
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if let Some(d) = found
                && let Some(t) = opt_int(&d, field)?
            {
                let t = Timestamp::from_millis(t);
                due = Some(due.map_or(t, |d: Timestamp| d.min(t)));
            }
        }
        Ok(due.map(|t| t.max(now)))
    }
}
