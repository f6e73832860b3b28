//! Stream retention on MongoDB (`docs/log.md#retention`,
//! `docs/backends.md#mongodb`): where each partition starts, and trims.
//!
//! A stream's document keeps its retention (`retention`, the JSON text of
//! [`Retention::to_text`]) and, per partition, the first sequence it still
//! stores (`first.<partition>`; missing while it is 1). Which events go is
//! the core's decision (`backend::retention::trim_stream`); a trim removes
//! them in one transaction, bounded by the request's limit:
//!
//! * it reads the stream's document and writes the partition's first
//!   sequence on it (so it conflicts with appends, and with a group's
//!   create, which reads it to start at the log start);
//! * per group of the stream, the open deliveries below the new log start
//!   are counted (with the events the group never reached: below the new
//!   start, at or past its cursor) as skipped, on the group's `skipped`
//!   counter; every delivery below it goes but dead letters, which stay
//!   and keep their event's id (`e`); the cursor moves to the new start;
//!   the gates of the deliveries removed give their next delivery out
//!   (`gates.rs`, as after a settle of the head);
//! * the events below the new start go (`delete_many` on one index range).
//!
//! Nothing else changes on the hot paths: a settle or renewal that finds
//! no lease looks at the log start on that failure path only
//! (`claims.rs`), and the reads that may meet a removed event (dead
//! letters, replays, redrives, start points) read the first sequences
//! where they read the stream anyway or on paths that are not hot.

use std::collections::BTreeSet;

use mongodb::ClientSession;
use mongodb::bson::doc;

use super::claims::{ACKED, AVAILABLE, LEASED, PARKED, deliveries_of};
use super::groups::{decode_state, group_key};
use super::log::{decode_firsts, decode_meta, decode_stream, decode_watermarks, stream_fields};
use super::{
    DELIVERIES, EVENTS, Fail, GROUPS, MongoBackend, Phase, STREAMS, Turn, big, corrupt, map_error,
    opt_text, text, transaction, uint,
};
use rheo_core::backend::policy::skipped_by_trim;
use rheo_core::backend::{Error, Result, TrimRequest, Trimmed};
use rheo_core::model::{GroupName, Retention, Stream, StreamName, Timestamp};

/// A transaction body's result.
type Tx<T> = std::result::Result<T, Fail>;

impl MongoBackend {
    /// Sets or clears the stream's retention: one conditional update of
    /// its document (the stream this node knows, not one created again
    /// under the name).
    pub(crate) async fn set_retention(
        &self,
        s: &StreamName,
        retention: Option<Retention>,
    ) -> Result<Stream> {
        rheo_core::backend::validate_retention(retention.as_ref())?;
        let (partitions, created_at) = self.meta(s).await?;
        let update = match &retention {
            Some(r) => doc! {"$set": {"retention": r.to_text()}},
            None => doc! {"$unset": {"retention": ""}},
        };
        let filter = doc! {
            "_id": s.as_str(),
            "partitions": partitions as i32,
            "created_at": created_at.as_millis(),
        };
        let after = self
            .coll(STREAMS)
            .find_one_and_update(filter, update)
            .projection(stream_fields())
            .return_document(mongodb::options::ReturnDocument::After)
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        match after {
            Some(d) => decode_stream(s.clone(), &d),
            None => Err(self.stream_gone(s)),
        }
    }

    /// Removes the partition's events below `req.before` (at most
    /// `req.limit`), in one transaction (see the module notes).
    pub(crate) async fn trim(&self, req: TrimRequest) -> Result<Trimmed> {
        let meta = self.meta(&req.stream).await?;
        if req.partition >= meta.0 {
            self.verify_stream(&req.stream, meta).await?;
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count: meta.0,
            });
        }
        let (trimmed, woke) = transaction!(self, Turn::Stream(req.stream.clone()), session => {
            self.trim_in(&mut session, &req, meta).await
        })?;
        if woke || !trimmed.skipped.is_empty() {
            // Gates may have let deliveries out; other nodes see the
            // stream's document change.
            self.notifier.notify(&req.stream);
        }
        Ok(trimmed)
    }

    /// One attempt of a trim; also says whether a gate let a delivery out.
    async fn trim_in(
        &self,
        session: &mut ClientSession,
        req: &TrimRequest,
        meta: (u32, Timestamp),
    ) -> Tx<(Trimmed, bool)> {
        let (s, p) = (&req.stream, req.partition);
        let stream = self
            .coll(STREAMS)
            .find_one(doc! {"_id": s.as_str()})
            .projection(doc! {"partitions": 1, "created_at": 1, "hw": 1, "first": 1})
            .session(&mut *session)
            .await?;
        let stream = match stream {
            Some(d) if decode_meta(&d)? == meta => d,
            // Deleted (and maybe created again) since this node read it.
            _ => return Err(Fail::Rheo(Error::StreamNotFound(s.clone()))),
        };
        let first = decode_firsts(&stream, meta.0)[p as usize];
        let high_watermark = decode_watermarks(&stream, meta.0)[p as usize];
        let upto = req.end(first, high_watermark);
        if upto <= first {
            let trimmed = Trimmed::nothing(first);
            return Ok((trimmed, false));
        }
        // The log start first: appends and group creates conflict here.
        self.coll(STREAMS)
            .update_one(
                doc! {"_id": s.as_str()},
                doc! {"$set": {format!("first.{p}"): big(upto)}},
            )
            .session(&mut *session)
            .await?;
        let mut skipped = Vec::new();
        let mut woke = false;
        let groups = (self.find_in(session, GROUPS, doc! {"s": s.as_str()}, None, 0)).await?;
        for d in &groups {
            let g = GroupName::parse(text(d, "g")?).map_err(|e| corrupt("group name", e))?;
            let state = decode_state(s, d, meta.0)?;
            let at = (state.cursors[p as usize], state.gating().slots());
            let (n, released) = self.trim_group(session, (s, &g), p, upto, at).await?;
            woke |= released;
            if n > 0 {
                skipped.push((g, n));
            }
        }
        let events = doc! {
            "s": s.as_str(),
            "p": p as i32,
            "q": {"$gte": big(first), "$lt": big(upto)},
        };
        let removed = self
            .coll(EVENTS)
            .delete_many(events)
            .session(&mut *session)
            .await?
            .deleted_count;
        let trimmed = Trimmed {
            removed,
            first_sequence: upto,
            skipped,
        };
        Ok((trimmed, woke))
    }

    /// Moves group `g` (cursor `cursor` in partition `p`, `slots` heads
    /// per gate) to the new log start `upto`: how many of the removed
    /// events it had not settled, and whether one of its gates let a
    /// delivery out.
    async fn trim_group(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        upto: u64,
        (cursor, slots): (u64, usize),
    ) -> Tx<(u64, bool)> {
        let below = |statuses: &[&str]| {
            let mut filter = deliveries_of(s, g);
            filter.insert("st", doc! {"$in": statuses});
            filter.insert("p", p as i32);
            filter.insert("q", doc! {"$lt": big(upto)});
            filter
        };
        let open = (self.find_in(
            session,
            DELIVERIES,
            below(&[AVAILABLE, PARKED, LEASED]),
            None,
            0,
        ))
        .await?;
        // Open below the cursor, then never reached (from the cursor on;
        // a delivery there is one a fetcher left above the cursor).
        let mut open_below = 0;
        let mut gates = BTreeSet::new();
        for d in &open {
            if uint(d, "q")? < cursor {
                open_below += 1;
            }
            if let Some(gate) = opt_text(d, "k") {
                gates.insert(gate);
            }
        }
        let skipped = skipped_by_trim(open_below, cursor, 0, upto);
        // Dead letters stay; acked deliveries go with their events.
        self.coll(DELIVERIES)
            .delete_many(below(&[AVAILABLE, PARKED, LEASED, ACKED]))
            .session(&mut *session)
            .await?;
        let mut released = false;
        for gate in gates {
            released |= (self.regate_in(session, (s, g), (p, &gate), slots, false)).await?;
        }
        if cursor < upto || skipped > 0 {
            let mut update = doc! {"$max": {format!("cursor.{p}"): big(upto)}};
            if skipped > 0 {
                update.insert("$inc", doc! {"skipped": big(skipped)});
            }
            self.coll(GROUPS)
                .update_one(group_key(s, g), update)
                .session(&mut *session)
                .await?;
        }
        Ok((skipped, released))
    }
}
