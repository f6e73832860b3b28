//! Claims, renewals and settles (`docs/groups.md#claims`,
//! `docs/groups.md#leases-and-fencing`, `docs/groups.md#settle-policy`),
//! each a conditional write of single delivery documents — atomic in
//! MongoDB without a transaction.
//!
//! A delivery document exists for every event a group has handed out (or
//! had re-opened by a replay): `st` is `available`, `leased`, `acked` or
//! `dead`; `a` counts claims; `lid` is the fencing token while leased;
//! `due` delays an available delivery; `exp` ends a lease; `pc` marks an
//! available delivery paced by `flow.key_rate`, due at the slot its key's
//! bucket reserved for it (`gates.rs`).
//!
//! A fetch first dead-letters expired leases that used their last attempt
//! (the poison guard), then re-claims what is claimable — each with a
//! `find_one_and_update` that holds only if the delivery is still as read —
//! and creates the deliveries of events past the cursor by inserting them
//! already leased: the unique (stream, group, partition, sequence) index
//! lets exactly one fetcher create each, and the cursor is moved with
//! `$max` after the insert, so an event below the cursor always has its
//! delivery (a fetcher that dies in between leaves leased deliveries above
//! the cursor, which the next fetcher steps over and which expire like
//! any lease).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::future::{join_all, try_join_all};
use mongodb::bson::{Bson, Document, doc, oid::ObjectId};
use mongodb::error::ErrorKind;
use mongodb::options::ReturnDocument;

use super::groups::group_key;
use super::{
    DELIVERIES, GROUPS, MongoBackend, Phase, big, corrupt, int, map_error, opt_int, opt_text, text,
    uint,
};
use rheo_core::backend::policy::{
    GroupConfig, Held, Hold, POISON_REASON, Write, claim_capacity, fence, plain_acks, poison_write,
    round_robin, settle_write, unknown_event,
};
use rheo_core::backend::{
    Error, FetchRequest, RenewRequest, Result, validate_renewals, validate_settlements,
};
use rheo_core::model::{
    ConsumerId, Event, EventId, GroupName, Lease, LeaseId, SettleTarget, Settlement, StreamName,
    Timestamp, clip_reason,
};

/// Delivery statuses.
pub(crate) const AVAILABLE: &str = "available";
/// Available, but held back behind its gate's head (`gates.rs`).
pub(crate) const PARKED: &str = "parked";
pub(crate) const LEASED: &str = "leased";
pub(crate) const ACKED: &str = "acked";
pub(crate) const DEAD: &str = "dead";

/// The filter of one group's deliveries.
pub(crate) fn deliveries_of(s: &StreamName, g: &GroupName) -> Document {
    doc! {"s": s.as_str(), "g": g.as_str()}
}

/// The update that claims a delivery under `lease_id` for `consumer`
/// (clearing its `flow.key_rate` mark `pc`: it is out, `gates.rs`).
pub(crate) fn lease_update(
    lease_id: &LeaseId,
    consumer: &str,
    (now, expires_at): (Timestamp, Timestamp),
) -> Document {
    doc! {
        "$set": {
            "st": LEASED,
            "lid": lease_id.as_str(),
            "c": consumer,
            "lat": now.as_millis(),
            "exp": expires_at.as_millis(),
        },
        "$inc": {"a": 1_i64},
        "$unset": {"due": "", "pc": ""},
    }
}

/// The update that parks a gated head out of attempts
/// (`docs/groups.md#quarantine`): it stays leased, to the quarantine, under
/// a fresh `lease_id` that never expires (so no claim and no poison guard
/// picks it up), its attempts unchanged and `reason` kept; its gate stays
/// out.
pub(crate) fn quarantine_update(hold: &Hold) -> Document {
    doc! {
        "$set": {
            "st": LEASED,
            "lid": hold.lease_id.as_str(),
            "c": hold.consumer_id.as_str(),
            "lat": hold.leased_at.as_millis(),
            "exp": hold.expires_at.as_millis(),
            "r": &hold.reason,
        },
        "$unset": {"due": ""},
    }
}

/// The delivery `target` names, leased or not.
pub(crate) fn named_by(s: &StreamName, g: &GroupName, target: &SettleTarget) -> Document {
    let mut filter = deliveries_of(s, g);
    filter.insert("e", target.event_id.as_str());
    filter
}

/// The lease a delivery document is held under, as the fence sees it
/// ([`fence`]): its lease id while leased (the receipt is the lease id).
pub(crate) fn held_of(d: &Document) -> Option<Held<'_>> {
    let lid = d.get_str("lid").ok()?;
    (d.get_str("st").ok()? == LEASED).then_some(Held {
        lease_id: lid,
        receipt: lid,
    })
}

/// The delivery `target` names, while its lease is the one held: the
/// guard of a write the fence allowed.
pub(crate) fn held_by(s: &StreamName, g: &GroupName, target: &SettleTarget) -> Document {
    let mut filter = deliveries_of(s, g);
    filter.insert("e", target.event_id.as_str());
    filter.insert("st", LEASED);
    filter.insert("lid", target.lease_id.as_str());
    filter
}

/// What makes a delivery of the selected partitions claimable at `now`,
/// as two filters: available and due, or leased with its lease over and
/// attempts left (the poison guard takes the rest). Two filters rather
/// than one `$or`, so that each names only fields of one index.
pub(crate) fn claimable(
    s: &StreamName,
    g: &GroupName,
    partitions: &[i32],
    now: Timestamp,
    max_attempts: u32,
) -> [Document; 2] {
    let now = now.as_millis();
    let mut available = deliveries_of(s, g);
    available.insert("st", AVAILABLE);
    available.insert("p", doc! {"$in": partitions});
    available.insert("due", doc! {"$not": {"$gt": now}});
    let mut expired = deliveries_of(s, g);
    expired.insert("st", LEASED);
    expired.insert("p", doc! {"$in": partitions});
    expired.insert("exp", doc! {"$lte": now});
    expired.insert("a", doc! {"$lt": i64::from(max_attempts)});
    [available, expired]
}

/// A claim made by this fetch.
pub(super) struct Claimed {
    pub(super) partition: u32,
    pub(super) sequence: u64,
    pub(super) attempt: u32,
    pub(super) lease_id: LeaseId,
    pub(super) event: Option<Arc<Event>>,
}

impl Claimed {
    /// A delivery document just claimed under `lease_id`.
    pub(super) fn of(d: &Document, lease_id: LeaseId) -> Result<Self> {
        Ok(Claimed {
            partition: u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))?,
            sequence: uint(d, "q")?,
            attempt: u32::try_from(int(d, "a")?).map_err(|e| corrupt("attempt", e))?,
            lease_id,
            event: None,
        })
    }
}

/// How many documents of an ordered `insert_many` went in before it failed
/// on a duplicate key; `None` for any other failure.
fn inserted_before_duplicate(e: &mongodb::error::Error) -> Option<usize> {
    match &*e.kind {
        ErrorKind::InsertMany(m) => {
            let first = m.write_errors.as_ref()?.iter().min_by_key(|w| w.index)?;
            (first.code == 11000).then_some(first.index)
        }
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) if w.code == 11000 => Some(0),
        _ => None,
    }
}

impl MongoBackend {
    pub(crate) async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        req.validate()?;
        let (partition_count, _) = self.meta(&req.stream).await?;
        self.group_config(&req.stream, &req.group).await?;
        let selected = req.partitions.resolve(partition_count)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        // A fetch that lost every race to other fetchers looks again: what
        // they left may still be claimable. So does one that found the
        // group's ordering or flow changed (read again here).
        for _ in 0..3 {
            let config = self.group_config(&req.stream, &req.group).await?;
            // Gated, or paced by `flow.key_rate` (`docs/groups.md#flow`):
            // a walk in one transaction.
            if config.gating().walks() {
                let (s, g) = (&req.stream, &req.group);
                let Some(claimed) = self
                    .fetch_ordered(&req, &config, &selected, partition_count)
                    .await?
                else {
                    continue;
                };
                let now_and_expiry = claimed.1;
                return self
                    .leases_of(s, g, &req.consumer_id, claimed.0, now_and_expiry)
                    .await;
            }
            let (leases, lost) = self
                .fetch_once(&req, &config, &selected, partition_count)
                .await?;
            if !leases.is_empty() || !lost {
                return Ok(leases);
            }
        }
        Ok(Vec::new())
    }

    /// The leases of a fetch's claims, in partition and sequence order
    /// (the events of re-claims read now; new ones came with theirs).
    pub(super) async fn leases_of(
        &self,
        s: &StreamName,
        g: &GroupName,
        consumer: &ConsumerId,
        claimed: Vec<Claimed>,
        (now, expires_at): (Timestamp, Timestamp),
    ) -> Result<Vec<Lease>> {
        let missing: Vec<(u32, u64)> = claimed
            .iter()
            .filter(|c| c.event.is_none())
            .map(|c| (c.partition, c.sequence))
            .collect();
        let mut events = self.events_at(s, &missing).await?;
        let mut leases = Vec::with_capacity(claimed.len());
        let mut removed = Vec::new();
        for c in claimed {
            let event = match c.event {
                Some(event) => event,
                None => match events.remove(&(c.partition, c.sequence)) {
                    Some(event) => event,
                    None => {
                        removed.push(c);
                        continue;
                    }
                },
            };
            leases.push(Lease::new(
                g.clone(),
                event,
                c.lease_id,
                consumer.clone(),
                c.attempt,
                now,
                expires_at,
            ));
        }
        if !removed.is_empty() {
            self.drop_removed(s, g, &removed).await?;
        }
        leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
        Ok(leases)
    }

    /// Claims of events retention removed (`retention.rs`): deliveries a
    /// fetcher created from events it read just before a trim removed
    /// them. Nothing is left to deliver: their deliveries go (an unordered
    /// group's; an ordered group's fetch conflicts with the trim instead).
    async fn drop_removed(&self, s: &StreamName, g: &GroupName, removed: &[Claimed]) -> Result<()> {
        let (_, firsts) = self.marks(s).await?;
        for c in removed {
            let first = firsts.get(c.partition as usize).copied().unwrap_or(1);
            if c.sequence >= first {
                return Err(Error::Failed(format!(
                    "event {}/{} is missing",
                    c.partition, c.sequence
                )));
            }
            let mut filter = deliveries_of(s, g);
            filter.insert("st", LEASED);
            filter.insert("p", c.partition as i32);
            filter.insert("q", big(c.sequence));
            (self.coll(DELIVERIES).delete_one(filter).await)
                .map_err(|e| map_error(e, Phase::Write))?;
        }
        Ok(())
    }

    /// One round of claims; also says whether a race was lost (or the
    /// group's ordering or flow found changed: the caller reads it again).
    async fn fetch_once(
        &self,
        req: &FetchRequest,
        config: &GroupConfig,
        selected: &[u32],
        partition_count: u32,
    ) -> Result<(Vec<Lease>, bool)> {
        let (s, g) = (&req.stream, &req.group);
        let max_attempts = config.max_attempts;
        // Read first: a group that another node's reset made ordered (or
        // gave a `key_concurrency`) is fetched by the gated path from now on.
        let state = self.group_state(s, g, partition_count).await?;
        if !state.gates_as(config) {
            self.forget_group(s, g);
            return Ok((Vec::new(), true));
        }
        let now = self.now();
        let expires_at = now.add_ms(req.lease_ms);
        let in_selected: Vec<i32> = selected.iter().map(|&p| p as i32).collect();
        let deliveries = self.coll(DELIVERIES);

        // What the claim decides on, read at once (one round trip's wait,
        // not four, where they were read one after another): the poison
        // guard's read (there is rarely anything to write), the claimable
        // deliveries, and the watermarks. The cursors were read first, so
        // the watermarks read here are at least as new as they are.
        let mut poison = deliveries_of(s, g);
        poison.insert("st", LEASED);
        poison.insert("p", doc! {"$in": &in_selected});
        poison.insert("exp", doc! {"$lte": now.as_millis()});
        poison.insert("a", doc! {"$gte": i64::from(max_attempts)});
        let poisoned = async {
            deliveries
                .find_one(poison.clone())
                .projection(doc! {"_id": 1})
                .await
                .map_err(|e| map_error(e, Phase::Read))
        };
        let filters = claimable(s, g, &in_selected, now, max_attempts);
        let claimable_reads = try_join_all(
            filters
                .into_iter()
                .map(|filter| self.lowest_claimable(filter, &in_selected, req.limit)),
        );
        let (any, found, (hw, firsts)) =
            tokio::try_join!(poisoned, claimable_reads, self.marks(s))?;
        if any.is_some() {
            // A gated one of a quarantining group is parked instead
            // (`docs/groups.md#quarantine`); a group fetched here has none
            // unless it raced a change of its ordering.
            if let Write::Quarantine(reason) = poison_write(true, config) {
                for d in self.find_all(DELIVERIES, poison.clone(), None, 0).await? {
                    if !d.contains_key("k") {
                        continue;
                    }
                    let (id, lid) = (super::gates::id_of(&d)?, text(&d, "lid")?);
                    let guard = doc! {"_id": id, "st": LEASED, "lid": lid};
                    let hold = quarantine_update(&Hold::new(&reason, now));
                    deliveries
                        .update_one(guard, hold)
                        .await
                        .map_err(|e| map_error(e, Phase::Write))?;
                }
            }
            deliveries
                .update_many(
                    poison,
                    doc! {
                        "$set": {"st": DEAD, "r": POISON_REASON, "dat": now.as_millis()},
                        "$unset": {"lid": "", "due": ""},
                    },
                )
                .await
                .map_err(|e| map_error(e, Phase::Write))?;
        }
        let mut per_partition: BTreeMap<u32, Vec<Document>> = BTreeMap::new();
        for d in found.into_iter().flatten() {
            let p = u32::try_from(int(&d, "p")?).map_err(|e| corrupt("partition", e))?;
            per_partition.entry(p).or_default().push(d);
        }
        for list in per_partition.values_mut() {
            list.sort_by_key(|d| int(d, "q").unwrap_or(i64::MAX));
        }

        // A cursor below the log start (a reset that raced a trim) starts
        // at it.
        let mut state = state;
        state.at_log_start(&firsts);
        let capacity: Vec<usize> = selected
            .iter()
            .map(|p| {
                let claimable = per_partition.get(p).map_or(0, Vec::len);
                claim_capacity(claimable, state.cursors[*p as usize], hw[*p as usize])
            })
            .collect();
        let first = self.rotate(s, g) % selected.len();
        let quotas = round_robin(&capacity, req.limit as usize, first);

        let consumer = req.consumer_id.as_str();
        let max = max_attempts;
        let mut claimed = Vec::new();
        let mut lost = false;
        // Re-claims, each conditional on the delivery as it was read; the
        // rest of each partition's share are new deliveries.
        let mut attempts = Vec::new();
        let mut fresh = Vec::new();
        for (i, p) in selected.iter().enumerate() {
            let list = per_partition.remove(p).unwrap_or_default();
            let take = quotas[i].min(list.len());
            fresh.push((*p, (quotas[i] - take) as u64));
            for d in list.into_iter().take(take) {
                attempts.push(self.reclaim(d, consumer, (now, expires_at), max.into()));
            }
        }
        // The partitions' new deliveries are made at once, and beside the
        // re-claims: each writes only its own partition's documents.
        let lease = (consumer, now, expires_at);
        let creations = fresh.into_iter().filter(|(_, n)| *n > 0).map(|(p, n)| {
            let (cursor, hw) = (state.cursors[p as usize], hw[p as usize]);
            self.create_leased((s, g), p, cursor, n, hw, lease, state.epoch)
        });
        let (reclaimed, created) = tokio::join!(join_all(attempts), join_all(creations));
        for outcome in reclaimed {
            match outcome? {
                Some(c) => claimed.push(c),
                None => lost = true,
            }
        }
        for outcome in created {
            let (mut created, raced) = outcome?;
            lost |= raced;
            claimed.append(&mut created);
        }

        let times = (now, expires_at);
        let leases = self
            .leases_of(s, g, &req.consumer_id, claimed, times)
            .await?;
        Ok((leases, lost))
    }

    /// The claimable deliveries `filter` selects (one of [`claimable`]),
    /// lowest sequences first in each partition. One read over every
    /// selected partition; when it fills its window it may have cut some
    /// partitions short (a partition with many low sequences takes it
    /// all), so then each partition is read on its own (at once), up to
    /// the most it can be given.
    async fn lowest_claimable(
        &self,
        filter: Document,
        partitions: &[i32],
        limit: u32,
    ) -> Result<Vec<Document>> {
        let window = (i64::from(limit) * partitions.len() as i64).min(10_000);
        let by_sequence = Some(doc! {"q": 1, "p": 1});
        let found = self
            .find_all(DELIVERIES, filter.clone(), by_sequence, window)
            .await?;
        if (found.len() as i64) < window || partitions.len() <= 1 {
            return Ok(found);
        }
        let each = partitions.iter().map(|p| {
            let mut one = filter.clone();
            one.insert("p", *p);
            self.find_all(DELIVERIES, one, Some(doc! {"q": 1}), i64::from(limit))
        });
        Ok(try_join_all(each).await?.into_iter().flatten().collect())
    }

    /// Claims one delivery if it is still as `d` shows it.
    async fn reclaim(
        &self,
        d: Document,
        consumer: &str,
        (now, expires_at): (Timestamp, Timestamp),
        max_attempts: i64,
    ) -> Result<Option<Claimed>> {
        // Still claimable: available and due (whoever had it since), or
        // still the same expired lease.
        let mut guard = doc! {
            "s": text(&d, "s")?,
            "g": text(&d, "g")?,
            "e": text(&d, "e")?,
            "st": text(&d, "st")?,
        };
        if text(&d, "st")? == LEASED {
            guard.insert("lid", text(&d, "lid")?);
            guard.insert("exp", doc! {"$lte": now.as_millis()});
            guard.insert("a", doc! {"$lt": max_attempts});
        } else {
            guard.insert("due", doc! {"$not": {"$gt": now.as_millis()}});
        }
        let lease_id = LeaseId::generate();
        let after = self
            .coll(DELIVERIES)
            .find_one_and_update(guard, lease_update(&lease_id, consumer, (now, expires_at)))
            .return_document(ReturnDocument::After)
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        after.map(|after| Claimed::of(&after, lease_id)).transpose()
    }

    /// Creates up to `n` deliveries of partition `p` from `cursor` on (up
    /// to its high watermark `hw`), leased, and moves the cursor past them;
    /// also says whether another fetcher had created some first. Where one
    /// had, it carries on after the deliveries that exist.
    #[allow(clippy::too_many_arguments)]
    async fn create_leased(
        &self,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        mut cursor: u64,
        mut n: u64,
        hw: u64,
        (consumer, now, expires_at): (&str, Timestamp, Timestamp),
        epoch: i64,
    ) -> Result<(Vec<Claimed>, bool)> {
        let mut claimed = Vec::new();
        let mut ids = Vec::new();
        let mut raced = false;
        let start = cursor;
        for _ in 0..16 {
            if n == 0 || cursor > hw {
                break;
            }
            let last = (cursor + n - 1).min(hw);
            let events = self.read_range(s, p, cursor, last).await?;
            // A trim moved the log start past the cursor it read.
            if let Some(first) = events.first() {
                cursor = cursor.max(first.sequence);
            }
            let mut docs = Vec::with_capacity(events.len());
            let mut batch = Vec::with_capacity(events.len());
            for event in events {
                let lease_id = LeaseId::generate();
                docs.push(doc! {
                    "_id": ObjectId::new(),
                    "s": s.as_str(),
                    "g": g.as_str(),
                    "p": p as i32,
                    "q": big(event.sequence),
                    "e": event.id.as_str(),
                    "st": LEASED,
                    "a": 1_i64,
                    "lid": lease_id.as_str(),
                    "c": consumer,
                    "lat": now.as_millis(),
                    "exp": expires_at.as_millis(),
                });
                batch.push(Claimed {
                    partition: p,
                    sequence: event.sequence,
                    attempt: 1,
                    lease_id,
                    event: Some(Arc::new(event)),
                });
            }
            if docs.is_empty() {
                break;
            }
            let batch_ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            let (inserted, conflict) = match self.coll(DELIVERIES).insert_many(docs).await {
                Ok(_) => (batch.len(), false),
                Err(e) => match inserted_before_duplicate(&e) {
                    Some(k) => (k, true),
                    None => return Err(map_error(e, Phase::Write)),
                },
            };
            ids.extend(batch_ids.into_iter().take(inserted));
            batch.truncate(inserted);
            claimed.append(&mut batch);
            n -= inserted as u64;
            cursor += inserted as u64;
            if !conflict {
                continue;
            }
            // Step over what other fetchers created (one may have died
            // before moving the cursor) and go on from there.
            raced = true;
            cursor = self.created_from(s, g, p, cursor).await?;
        }
        if cursor > start {
            let mut filter = group_key(s, g);
            filter.insert("epoch", epoch);
            let moved = self
                .coll(GROUPS)
                .update_one(filter, doc! {"$max": {format!("cursor.{p}"): big(cursor)}})
                .await
                .map_err(|e| map_error(e, Phase::Write))?;
            if moved.matched_count == 0 && !ids.is_empty() {
                // Reset (its deliveries stay, as a fetcher that died
                // leaves them), or deleted since it was read: then what
                // was just created belongs to no group.
                if let Err(e) = self.group_still_there(s, g).await {
                    (self.coll(DELIVERIES))
                        .delete_many(doc! {"_id": {"$in": ids}})
                        .await
                        .map_err(|e| map_error(e, Phase::Write))?;
                    return Err(e);
                }
            }
        }
        Ok((claimed, raced))
    }

    /// The first sequence from `from` on in partition `p` that has no
    /// delivery yet.
    pub(super) async fn created_from(
        &self,
        s: &StreamName,
        g: &GroupName,
        p: u32,
        from: u64,
    ) -> Result<u64> {
        let mut filter = deliveries_of(s, g);
        filter.insert("p", p as i32);
        filter.insert("q", doc! {"$gte": big(from)});
        let existing = self
            .find_all(DELIVERIES, filter, Some(doc! {"q": 1}), 1000)
            .await?;
        let mut next = from;
        for d in &existing {
            if uint(d, "q")? != next {
                break;
            }
            next += 1;
        }
        Ok(next)
    }

    /// Extends one lease; the updated delivery, or the item's error.
    async fn renew_one(
        &self,
        s: &StreamName,
        g: &GroupName,
        target: &SettleTarget,
        expires_at: Timestamp,
    ) -> Result<Result<Document>> {
        if target.receipt.is_some() {
            // A receipt is checked on what is read; the write is guarded on
            // the lease alone.
            let found = self
                .coll(DELIVERIES)
                .find_one(named_by(s, g, target))
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if let Err(e) = fence(found.as_ref().and_then(held_of), target) {
                return Ok(Err(e));
            }
        }
        let filter = held_by(s, g, target);
        let after = self
            .coll(DELIVERIES)
            .find_one_and_update(filter, doc! {"$set": {"exp": expires_at.as_millis()}})
            .return_document(ReturnDocument::After)
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(after.ok_or(Error::StaleLease))
    }

    pub(crate) async fn renew(&self, req: RenewRequest) -> Result<Lease> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        self.meta(s).await?;
        self.group_config(s, g).await?;
        let expires_at = self.now().add_ms(req.lease_ms);
        let d = match self.renew_one(s, g, &req.target, expires_at).await? {
            Ok(d) => d,
            Err(e) => {
                // No lease: maybe no group any more either, or no event.
                self.group_still_there(s, g).await?;
                let id = &req.target.event_id;
                let mut removed = self.removed_of(s, &[id]).await?;
                return Err(removed.remove(id.as_str()).unwrap_or(e));
            }
        };
        let position = (
            u32::try_from(int(&d, "p")?).map_err(|e| corrupt("partition", e))?,
            uint(&d, "q")?,
        );
        let found = self.events_at(s, &[position]).await?.remove(&position);
        let event = match found {
            Some(event) => event,
            // A trim removed it since the lease was renewed.
            None => {
                let id = &req.target.event_id;
                let mut removed = self.removed_of(s, &[id]).await?;
                return Err((removed.remove(id.as_str()))
                    .unwrap_or_else(|| Error::Failed(format!("event {position:?} is missing"))));
            }
        };
        let consumer = ConsumerId::parse(opt_text(&d, "c").unwrap_or_default())
            .map_err(|e| corrupt("consumer id", e))?;
        let leased_at = Timestamp::from_millis(opt_int(&d, "lat")?.unwrap_or_default());
        let attempt = u32::try_from(int(&d, "a")?).map_err(|e| corrupt("attempt", e))?;
        Ok(Lease::new(
            req.group,
            event,
            req.target.lease_id,
            consumer,
            attempt,
            leased_at,
            expires_at,
        ))
    }

    pub(crate) async fn renew_many(
        &self,
        s: &StreamName,
        g: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        validate_renewals(&targets, lease_ms)?;
        self.meta(s).await?;
        self.group_config(s, g).await?;
        let expires_at = self.now().add_ms(lease_ms);
        let renewals = targets.iter().map(|t| self.renew_one(s, g, t, expires_at));
        let results = join_all(renewals)
            .await
            .into_iter()
            .map(|r| Ok(r?.map(|_| expires_at)))
            .collect::<Result<Vec<_>>>()?;
        let ids: Vec<&EventId> = targets.iter().map(|t| &t.event_id).collect();
        self.unless_gone(s, g, &ids, results).await
    }

    /// Per-item results, unless a stale lease among them is the group
    /// (or stream) having gone: then the call's error. A stale lease of an
    /// event the stream no longer holds is answered as retention says
    /// ([`unknown_event`]). `ids` are the items' event ids.
    async fn unless_gone<T>(
        &self,
        s: &StreamName,
        g: &GroupName,
        ids: &[&EventId],
        mut results: Vec<Result<T>>,
    ) -> Result<Vec<Result<T>>> {
        let stale: Vec<usize> = (results.iter().enumerate())
            .filter(|(_, r)| matches!(r, Err(Error::StaleLease)))
            .map(|(i, _)| i)
            .collect();
        if stale.is_empty() {
            return Ok(results);
        }
        self.group_still_there(s, g).await?;
        let named: Vec<&EventId> = stale.iter().map(|&i| ids[i]).collect();
        let removed = self.removed_of(s, &named).await?;
        for i in stale {
            if let Some(e) = removed.get(ids[i].as_str()) {
                results[i] = Err(e.clone());
            }
        }
        Ok(results)
    }

    /// Of the events `ids` named by settles or renewals that found no
    /// lease, those the stream does not hold, each with what it answers
    /// ([`unknown_event`]: `event_removed` once retention removed events
    /// of the stream). Only on that failure path: two reads at most.
    pub(crate) async fn removed_of(
        &self,
        s: &StreamName,
        ids: &[&EventId],
    ) -> Result<HashMap<String, Error>> {
        let (_, firsts) = self.marks(s).await?;
        if firsts.iter().all(|&f| f <= 1) {
            return Ok(HashMap::new());
        }
        let owned: Vec<EventId> = ids.iter().map(|&id| id.clone()).collect();
        let found = self.locate(s, &owned).await?;
        Ok(owned
            .iter()
            .filter(|id| !found.contains_key(id.as_str()))
            .map(|id| (id.as_str().to_owned(), unknown_event(id, &firsts)))
            .collect())
    }

    pub(crate) async fn settle(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        let ids: Vec<EventId> = items.iter().map(|i| i.target.event_id.clone()).collect();
        let results = self.settle_items(s, g, items).await?;
        let ids: Vec<&EventId> = ids.iter().collect();
        self.unless_gone(s, g, &ids, results).await
    }

    async fn settle_items(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        validate_settlements(&items)?;
        self.meta(s).await?;
        let mut config = self.group_config(s, g).await?;
        let now = self.now();
        if !config.gating().is_gated() {
            if plain_acks(&items)
                && let Some(results) = self.ack_all(s, g, &items, now).await?
            {
                return Ok(results);
            }
            // A delivery with a gate: another node's reset made the group
            // ordered or gave it a flow (`ack_all` found one, or this read
            // does).
            if !plain_acks(&items) && !self.any_gated(s, g, &items).await? {
                return self.settle_each(s, g, items, &config, now).await;
            }
            self.forget_group(s, g);
            config = self.group_config(s, g).await?;
            if !config.gating().is_gated() {
                return self.settle_each(s, g, items, &config, now).await;
            }
        }
        self.settle_ordered(s, g, &items, &config).await
    }

    /// Whether any of the deliveries `items` name has a gate (was created
    /// by a gated group: ordered, or with a `key_concurrency`).
    async fn any_gated(&self, s: &StreamName, g: &GroupName, items: &[Settlement]) -> Result<bool> {
        let events: Vec<&str> = items.iter().map(|i| i.target.event_id.as_str()).collect();
        let mut by_event = deliveries_of(s, g);
        by_event.insert("e", doc! {"$in": &events});
        let docs = self.find_all(DELIVERIES, by_event, None, 0).await?;
        Ok(docs.iter().any(|d| d.contains_key("k")))
    }

    /// Settles of an unordered group, one conditional update each.
    async fn settle_each(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: Vec<Settlement>,
        config: &GroupConfig,
        now: Timestamp,
    ) -> Result<Vec<Result<()>>> {
        let mut results = Vec::with_capacity(items.len());
        let mut requeued = false;
        for item in items {
            if let Err(e) = item.validate() {
                results.push(Err(e.into()));
                continue;
            }
            let t = &item.target;
            let found = self
                .coll(DELIVERIES)
                .find_one(named_by(s, g, t))
                .projection(doc! {"a": 1, "st": 1, "lid": 1, "k": 1})
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if let Err(e) = fence(found.as_ref().and_then(held_of), t) {
                results.push(Err(e));
                continue;
            }
            let (Some(held), filter) = (found, held_by(s, g, t)) else {
                unreachable!("the fence holds only on a delivery found");
            };
            let attempt = u32::try_from(int(&held, "a")?).map_err(|e| corrupt("attempt", e))?;
            // A delivery with a gate was created by a gated group.
            let gated = held.contains_key("k");
            let write = settle_write(item.op, attempt, gated, config, now);
            requeued |= write.requeues();
            let update = match write {
                // An acked delivery keeps its last lease id: it says which
                // lease settled it (see `ack_all`).
                Write::Ack => doc! {"$set": {"st": ACKED, "acked_at": now.as_millis()}},
                Write::Retry { due, reason } => {
                    let mut set = doc! {"st": AVAILABLE, "r": clip_reason(&reason)};
                    let mut unset = doc! {"lid": ""};
                    match due {
                        Some(due) => set.insert("due", due.as_millis()),
                        None => unset.insert("due", ""),
                    };
                    doc! {"$set": set, "$unset": unset}
                }
                Write::Dead(reason) => doc! {
                    "$set": {"st": DEAD, "r": clip_reason(&reason), "dat": now.as_millis()},
                    "$unset": {"lid": "", "due": ""},
                },
                // `docs/groups.md#quarantine`
                Write::Quarantine(reason) => quarantine_update(&Hold::new(&reason, now)),
            };
            let changed = self
                .coll(DELIVERIES)
                .update_one(filter, update)
                .await
                .map_err(|e| map_error(e, Phase::Write))?;
            results.push(match changed.matched_count {
                1 => Ok(()),
                _ => Err(Error::StaleLease),
            });
        }
        if requeued {
            self.wake(s).await;
        }
        Ok(results)
    }

    /// Acks of distinct leases: the deliveries are read by event, those
    /// still leased under the item's lease id are acked by one
    /// `update_many` (lease ids are unique, so `lid ∈ {…}` picks exactly
    /// them) that also stamps them with this call's own token (`ab`), and
    /// only if fewer changed than expected (another writer got in between:
    /// a racing ack of the same lease, a nack, a replay) are they read
    /// again to see which this call acked — those carrying its token, so
    /// of two racing acks of one lease exactly one succeeds. `None`
    /// (nothing written) when a delivery has a gate: the group is gated
    /// now (ordered, or with a `key_concurrency`).
    async fn ack_all(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
        now: Timestamp,
    ) -> Result<Option<Vec<Result<()>>>> {
        let events: Vec<&str> = items.iter().map(|i| i.target.event_id.as_str()).collect();
        let mut by_event = deliveries_of(s, g);
        by_event.insert("e", doc! {"$in": &events});
        let found = self.find_all(DELIVERIES, by_event.clone(), None, 0).await?;
        if found.iter().any(|d| d.contains_key("k")) {
            return Ok(None);
        }
        let held: HashMap<String, (String, Option<String>)> = found
            .iter()
            .map(|d| {
                let e = text(d, "e")?.to_owned();
                Ok((e, (text(d, "st")?.to_owned(), opt_text(d, "lid"))))
            })
            .collect::<Result<_>>()?;
        let fenced = |i: &Settlement| {
            held.get(i.target.event_id.as_str())
                .is_some_and(|(st, lid)| {
                    st == LEASED && lid.as_deref() == Some(i.target.lease_id.as_str())
                })
        };
        let valid: Vec<&Settlement> = items.iter().filter(|i| fenced(i)).collect();
        let token = ObjectId::new().to_hex();
        let mut modified = 0;
        if !valid.is_empty() {
            let mut filter = deliveries_of(s, g);
            let ids: Vec<&str> = valid.iter().map(|i| i.target.event_id.as_str()).collect();
            let leases: Vec<&str> = valid.iter().map(|i| i.target.lease_id.as_str()).collect();
            filter.insert("e", doc! {"$in": ids});
            filter.insert("st", LEASED);
            filter.insert("lid", doc! {"$in": leases});
            let update = doc! {"$set": {"st": ACKED, "acked_at": now.as_millis(), "ab": &token}};
            modified = self
                .coll(DELIVERIES)
                .update_many(filter, update)
                .await
                .map_err(|e| map_error(e, Phase::Write))?
                .modified_count;
        }
        let after = if modified as usize == valid.len() {
            None
        } else {
            // Acked by this call: stamped with its token. The lease id the
            // delivery keeps says which lease was acked, not by which call.
            let docs = self.find_all(DELIVERIES, by_event, None, 0).await?;
            let acked: HashSet<(String, String)> = docs
                .iter()
                .filter(|d| d.get_str("st").is_ok_and(|st| st == ACKED))
                .filter(|d| d.get_str("ab").is_ok_and(|ab| ab == token))
                .filter_map(|d| Some((opt_text(d, "e")?, opt_text(d, "lid")?)))
                .collect();
            Some(acked)
        };
        Ok(Some(
            items
                .iter()
                .map(|i| {
                    let pair = || {
                        let t = &i.target;
                        (
                            t.event_id.as_str().to_owned(),
                            t.lease_id.as_str().to_owned(),
                        )
                    };
                    let done =
                        fenced(i) && after.as_ref().is_none_or(|acked| acked.contains(&pair()));
                    if done { Ok(()) } else { Err(Error::StaleLease) }
                })
                .collect(),
        ))
    }
}
