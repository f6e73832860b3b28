//! Moving a group back (`docs/groups.md#dead-letters-and-redrive`,
//! `docs/groups.md#replay-and-reset`): redrive dead letters, replay, reset.
//! Each re-opening is a conditional `update_many` of delivery documents
//! (deliveries a replay re-opens below the group's start are inserted;
//! the unique key keeps a concurrent fetch from creating them twice); a
//! holder of a re-opened lease finds its lease id gone, so its settle is
//! stale.

use std::collections::HashSet;

use mongodb::bson::{Document, doc, oid::ObjectId};
use mongodb::options::InsertManyOptions;

use super::claims::{AVAILABLE, DEAD, deliveries_of};
use super::gates::Reopen;
use super::groups::{group_key, stored_flow, stored_ordering};
use super::{
    DELIVERIES, Fail, GROUPS, MongoBackend, Phase, Turn, big, is_duplicate_key, map_error,
    transaction, uint,
};
use rheo_core::backend::policy::clamp_starts;
use rheo_core::backend::{Error, Redrive, Replay, ResetRequest, Result};
use rheo_core::model::{GroupName, Query, StreamName};

impl MongoBackend {
    pub(crate) async fn redrive(
        &self,
        s: &StreamName,
        g: &GroupName,
        which: Redrive,
    ) -> Result<u64> {
        self.meta(s).await?;
        // Read afresh: the ordering or flow gates what this re-opens.
        self.forget_group(s, g);
        let config = self.group_config(s, g).await?;
        // Dead letters whose event retention removed have nothing to
        // deliver: they stay. Named events are stored ones.
        let stored = match &which {
            Redrive::All => stored_only(&self.marks(s).await?.1),
            Redrive::Events(_) => None,
        };
        if config.gating().is_gated() {
            let events = match &which {
                Redrive::All => None,
                Redrive::Events(ids) => {
                    self.locate_all(s, ids).await?;
                    Some(ids.iter().map(|id| id.as_str()).collect())
                }
            };
            let count = (self.reopen_ordered(s, g, &Reopen::Dead(events, stored))).await?;
            if count > 0 {
                self.wake(s).await;
            }
            return Ok(count);
        }
        let mut filter = deliveries_of(s, g);
        filter.insert("st", DEAD);
        if let Some(stored) = stored {
            filter.insert("$or", stored);
        }
        if let Redrive::Events(ids) = &which {
            self.locate_all(s, ids).await?;
            let names: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
            filter.insert("e", doc! {"$in": names});
        }
        let update = doc! {
            "$set": {"st": AVAILABLE, "a": 0_i64},
            "$unset": {"due": "", "lid": "", "dat": "", "pc": ""},
        };
        let done = self
            .coll(DELIVERIES)
            .update_many(filter, update)
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        if done.modified_count > 0 {
            self.wake(s).await;
        }
        Ok(done.modified_count)
    }

    /// Re-opens the sequences strictly between `after` and `before` in one
    /// partition: creates the deliveries the group never had (below its
    /// start) and makes every other one available now. Returns how many
    /// were not open.
    async fn reopen(
        &self,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        after: u64,
        before: u64,
    ) -> Result<u64> {
        if after.saturating_add(1) >= before {
            return Ok(0);
        }
        let mut range = deliveries_of(s, g);
        range.insert("p", p as i32);
        range.insert("q", doc! {"$gt": big(after), "$lt": big(before)});
        // Deliveries the group never had: one per event without one.
        let existing: HashSet<u64> = self
            .find_all(DELIVERIES, range.clone(), None, 0)
            .await?
            .iter()
            .map(|d| uint(d, "q"))
            .collect::<Result<_>>()?;
        let mut created = 0;
        if existing.len() as u64 != before - after - 1 {
            let events = self.read_range(s, p, after + 1, before - 1).await?;
            let docs: Vec<Document> = events
                .iter()
                .filter(|e| !existing.contains(&e.sequence))
                .map(|e| {
                    doc! {
                        "_id": ObjectId::new(),
                        "s": s.as_str(),
                        "g": g.as_str(),
                        "p": p as i32,
                        "q": big(e.sequence),
                        "e": e.id.as_str(),
                        "st": AVAILABLE,
                        "a": 0_i64,
                    }
                })
                .collect();
            if !docs.is_empty() {
                let n = docs.len() as u64;
                let unordered = InsertManyOptions::builder().ordered(false).build();
                match self
                    .coll(DELIVERIES)
                    .insert_many(docs)
                    .with_options(unordered)
                    .await
                {
                    Ok(_) => created = n,
                    // A fetch created some at the same moment: those are
                    // re-opened below like any other.
                    Err(e) if is_duplicate_key(&e) => {
                        created = n.saturating_sub(duplicates(&e));
                    }
                    Err(e) => return Err(map_error(e, Phase::Write)),
                }
            }
        }
        let mut closed = range.clone();
        closed.insert("st", doc! {"$ne": AVAILABLE});
        let reopened = self
            .coll(DELIVERIES)
            .update_many(
                closed,
                doc! {"$set": {"st": AVAILABLE}, "$unset": {"due": "", "lid": "", "dat": "", "pc": ""}},
            )
            .await
            .map_err(|e| map_error(e, Phase::Write))?
            .modified_count;
        // Deliveries already open but waiting on a retry delay become due
        // now; they were not closed, so they are not counted.
        let mut delayed = range;
        delayed.insert("st", AVAILABLE);
        delayed.insert("due", doc! {"$ne": null});
        self.coll(DELIVERIES)
            .update_many(delayed, doc! {"$unset": {"due": "", "pc": ""}})
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        Ok(created + reopened)
    }

    pub(crate) async fn replay(&self, s: &StreamName, g: &GroupName, how: Replay) -> Result<u64> {
        how.validate()?;
        let (partition_count, _) = self.meta(s).await?;
        // Read afresh: the ordering or flow gates what this re-opens.
        self.forget_group(s, g);
        let gated = self.group_config(s, g).await?.gating().is_gated();
        let state = self.group_state(s, g, partition_count).await?;
        let cursor = |p: u32| state.cursors[p as usize];
        // Every (partition, after, before) range to re-open.
        let ranges: Vec<(u32, u64, u64)> = match how {
            Replay::FromSequence { after, partitions } => {
                let selected = partitions.resolve(partition_count)?;
                // Below the log start nothing is left to re-open.
                let (_, firsts) = self.marks(s).await?;
                selected
                    .into_iter()
                    .map(|p| {
                        (
                            p,
                            after.max(firsts[p as usize].saturating_sub(1)),
                            cursor(p),
                        )
                    })
                    .collect()
            }
            Replay::FromTime { from, partitions } => {
                let selected = partitions.resolve(partition_count)?;
                let firsts = self.first_at_or_after(s, &selected, from).await?;
                selected
                    .into_iter()
                    .filter_map(|p| firsts.get(&p).map(|first| (p, first - 1, cursor(p))))
                    .collect()
            }
            Replay::Query(q) => {
                let q = Query { cursor: None, ..q };
                self.scan(s, &q, 0)
                    .await?
                    .iter()
                    .map(|e| {
                        let p = e.partition;
                        (p, e.sequence - 1, (e.sequence + 1).min(cursor(p)))
                    })
                    .collect()
            }
            Replay::EventIds(ids) => self
                .locate_all(s, &ids)
                .await?
                .into_iter()
                .map(|(p, seq)| (p, seq - 1, (seq + 1).min(cursor(p))))
                .collect(),
        };
        let mut count = 0;
        if !gated {
            for (p, after, before) in ranges {
                count += self.reopen((s, g), p, after, before).await?;
            }
        } else {
            count = self.reopen_ordered(s, g, &Reopen::Ranges(ranges)).await?;
        }
        self.wake(s).await;
        Ok(count)
    }

    /// Deletes the group's deliveries in the selected partitions, then
    /// moves their cursors to the start and the group's epoch on (a fetch
    /// that read the group before cannot move a cursor after), and forgets
    /// their key rates' buckets (`docs/groups.md#flow`: full again).
    pub(crate) async fn reset(&self, req: ResetRequest) -> Result<()> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        let (partition_count, _) = self.meta(s).await?;
        self.group_config(s, g).await?;
        let selected = req.partitions.resolve(partition_count)?;
        let starts = self.start_points_of(s, partition_count, &req.start).await?;
        let starts = clamp_starts(starts, &self.marks(s).await?.1);
        let mut filter = deliveries_of(s, g);
        let chosen: Vec<i32> = selected.iter().map(|&p| p as i32).collect();
        filter.insert("p", doc! {"$in": &chosen});
        let mut set = Document::new();
        for p in &selected {
            set.insert(format!("cursor.{p}"), big(starts[*p as usize] + 1));
        }
        if req.ordering.is_some() || req.flow.is_some() {
            // A change of ordering or flow (every partition:
            // `ResetRequest::validate`) forgets every delivery and gate
            // with the cursors in one transaction, so no fetch goes on
            // under the old ones. The settings after it are checked
            // together against what is stored, before anything changes.
            transaction!(self, Turn::of_group(s, g), session => {
                let stored = self
                    .coll(GROUPS)
                    .find_one(group_key(s, g))
                    .projection(doc! {"ordering": 1, "flow": 1})
                    .session(&mut session)
                    .await?
                    .ok_or_else(|| Error::GroupNotFound {
                        stream: s.clone(),
                        group: g.clone(),
                    })?;
                let now = (stored_ordering(&stored)?, stored_flow(&stored)?);
                let (ordering, flow) = req.settings_after(now)?;
                let mut set = set.clone();
                set.insert("ordering", ordering.as_str());
                set.insert("flow", flow.to_json());
                let update = doc! {"$set": set, "$inc": {"epoch": 1_i64}};
                self.coll(DELIVERIES)
                    .delete_many(filter.clone())
                    .session(&mut session)
                    .await?;
                self.forget_gates(Some(&mut session), (s, g), &chosen).await?;
                self.forget_rates(Some(&mut session), (s, g), &chosen).await?;
                let reset = self
                    .coll(GROUPS)
                    .update_one(group_key(s, g), update)
                    .session(&mut session)
                    .await?;
                if reset.matched_count == 0 {
                    // Deleted since this transaction read it.
                    return Err(Fail::Rheo(Error::GroupNotFound {
                        stream: s.clone(),
                        group: g.clone(),
                    }));
                }
                Ok(())
            })?;
            self.forget_group(s, g);
        } else {
            self.coll(DELIVERIES)
                .delete_many(filter)
                .await
                .map_err(|e| map_error(e, Phase::Write))?;
            if let Err(fail) = self.forget_gates(None, (s, g), &chosen).await {
                return Err(match fail {
                    Fail::Mongo(e) => map_error(e, Phase::Write),
                    Fail::Rheo(e) => e,
                    Fail::Retry => Error::Failed("reset lost a race; retry it".into()),
                });
            }
            let reset = self
                .coll(GROUPS)
                .update_one(
                    group_key(s, g),
                    doc! {"$set": set, "$inc": {"epoch": 1_i64}},
                )
                .await
                .map_err(|e| map_error(e, Phase::Write))?;
            if reset.matched_count == 0 {
                // Deleted since this node read it (what was removed
                // above was the deleted group's).
                return Err(Error::GroupNotFound {
                    stream: s.clone(),
                    group: g.clone(),
                });
            }
            // After the epoch moved: a fetch that read the group before
            // and spent tokens since has committed by now, or conflicts
            // with the reset (`docs/groups.md#flow`).
            if let Err(fail) = self.forget_rates(None, (s, g), &chosen).await {
                return Err(match fail {
                    Fail::Mongo(e) => map_error(e, Phase::Write),
                    Fail::Rheo(e) => e,
                    Fail::Retry => Error::Failed("reset lost a race; retry it".into()),
                });
            }
        }
        self.wake(s).await;
        Ok(())
    }
}

/// The clauses (of an `$or`) selecting a group's deliveries of events the
/// stream still stores, given each partition's first stored sequence;
/// `None` when retention never removed any (every delivery qualifies).
pub(crate) fn stored_only(firsts: &[u64]) -> Option<Vec<Document>> {
    if firsts.iter().all(|&f| f <= 1) {
        return None;
    }
    let untouched: Vec<i32> = (firsts.iter().enumerate())
        .filter(|&(_, &f)| f <= 1)
        .map(|(p, _)| p as i32)
        .collect();
    let mut clauses: Vec<Document> = (firsts.iter().enumerate())
        .filter(|&(_, &f)| f > 1)
        .map(|(p, &f)| doc! {"p": p as i32, "q": {"$gte": big(f)}})
        .collect();
    if !untouched.is_empty() {
        clauses.push(doc! {"p": {"$in": untouched}});
    }
    Some(clauses)
}

/// How many inserts of an unordered `insert_many` failed on a duplicate key.
fn duplicates(e: &mongodb::error::Error) -> u64 {
    match &*e.kind {
        mongodb::error::ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .map_or(0, |w| w.iter().filter(|w| w.code == 11000).count() as u64),
        _ => 0,
    }
}
