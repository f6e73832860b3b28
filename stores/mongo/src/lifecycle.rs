//! Deleting streams and groups (`docs/operations.md#deleting-streams-and-groups`),
//! and keeping what a node knows of them current (its [`Catalog`](rheo_core::backend::catalog::Catalog)).
//!
//! A delete has two steps. One transaction removes the stream's document
//! (with its groups' documents) or the group's document, raises the
//! *catalog generation* (the `n` of the `generation` document in
//! `rheo_catalog`) and leaves a *tombstone* there naming what is left to
//! remove: from its commit on every call finds the stream or group gone.
//! Then the documents it had — events, deliveries, gates, key rates'
//! buckets — are removed in rounds, each a transaction that first writes
//! the tombstone (so a round and a create of the name conflict) and
//! removes up to [`ROUND`] documents of each collection; the round that
//! finds no more removes the tombstone too. A delete that dies half-way
//! leaves its tombstone.
//!
//! A create of the name first runs the rounds of a tombstone it finds (a
//! delete that died, or one still under way: the rounds of both are
//! fenced on the same tombstone), and its own transaction inserts the
//! document only while no tombstone is there. So a create never sees what
//! a delete left, and no round of an old delete removes anything of the
//! new stream or group. A group's create also removes, in its
//! transaction, deliveries, gates and buckets of the name a node that had
//! not yet seen the delete may have written after it (a group created
//! again starts with full buckets).
//!
//! Other nodes read the generation at most every
//! [`CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY) and forget
//! what they kept when it moved; until then a call that finds a kept
//! stream or group gone answers `stream_not_found` or `group_not_found`
//! and forgets it ([`MongoBackend::gone`]), and no write they make can
//! bring one back: an append writes the stream's document (never
//! upserted), a group's create writes it too, and a fetch's cursor moves
//! only on the group document it read (its epoch, random at creation).

use mongodb::ClientSession;
use mongodb::bson::{Bson, Document, doc, oid::ObjectId};

use super::groups::group_key;
use super::{
    CATALOG, DELIVERIES, EVENTS, Fail, GATES, GROUPS, MongoBackend, Phase, RATES, STREAMS, Turn,
    is_duplicate_key, map_error, transaction, uint,
};
use rheo_core::backend::{DeleteGroup, DeleteStream, Error, Result};
use rheo_core::model::{GroupName, StreamName};

/// The catalog document whose `n` every delete raises.
const GENERATION: &str = "generation";

/// At most this many documents of each collection per round.
const ROUND: i64 = 1000;

/// How many times a create runs the rounds of a tombstone and tries again
/// before it gives up (a tombstone is only there again when the name was
/// created and deleted meanwhile).
const CREATE_ATTEMPTS: u32 = 8;

/// A stream's tombstone (stream and group names hold no control
/// character).
pub(crate) fn stream_tombstone(s: &StreamName) -> String {
    format!("stream\u{1f}{s}")
}

/// A group's tombstone.
pub(crate) fn group_tombstone(s: &StreamName, g: &GroupName) -> String {
    format!("group\u{1f}{s}\u{1f}{g}")
}

/// What a stream's rounds remove: per collection, the filter of its
/// documents. Deliveries before gates: a settle that re-creates a gate
/// touches a delivery first, which a round removing it conflicts with.
pub(crate) fn of_stream(s: &StreamName) -> Vec<(&'static str, Document)> {
    let of = doc! {"s": s.as_str()};
    vec![
        (DELIVERIES, of.clone()),
        (GATES, of.clone()),
        (RATES, of.clone()),
        (GROUPS, of.clone()),
        (EVENTS, of),
    ]
}

/// What a group's rounds remove.
pub(crate) fn of_group(s: &StreamName, g: &GroupName) -> Vec<(&'static str, Document)> {
    let of = doc! {"s": s.as_str(), "g": g.as_str()};
    vec![(DELIVERIES, of.clone()), (GATES, of.clone()), (RATES, of)]
}

/// A transaction body's result.
type Tx<T> = std::result::Result<T, Fail>;

impl MongoBackend {
    /// The catalog generation (0 before the first delete).
    async fn generation(&self) -> Result<u64> {
        let found = self
            .coll(CATALOG)
            .find_one(doc! {"_id": GENERATION})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        match found {
            Some(d) if d.contains_key("n") => uint(&d, "n"),
            _ => Ok(0),
        }
    }

    /// Reads the catalog generation when it is due; when it moved, the
    /// catalog forgets everything, and so does what else this node
    /// derived from streams and groups.
    pub(crate) async fn refresh_catalog(&self) -> Result<()> {
        if self.catalog.refresh(|| self.generation()).await? {
            self.rotation.lock().clear();
        }
        Ok(())
    }

    /// Forgets what this node kept of `s` and answers that it is gone.
    pub(crate) fn stream_gone(&self, s: &StreamName) -> Error {
        self.catalog.forget_stream(s);
        self.rotation.lock().retain(|(of, _), _| of != s);
        Error::StreamNotFound(s.clone())
    }

    /// Forgets what this node kept of a group found gone, and answers so —
    /// `stream_not_found` when its stream went too (streams are checked
    /// first).
    pub(crate) async fn group_gone(&self, s: &StreamName, g: &GroupName) -> Error {
        self.catalog.forget_group(s, g);
        self.rotation.lock().remove(&(s.clone(), g.clone()));
        let stream = self
            .coll(STREAMS)
            .find_one(doc! {"_id": s.as_str()})
            .projection(doc! {"_id": 1})
            .await;
        match stream {
            Ok(None) => self.stream_gone(s),
            // Found, or not known: the group is gone either way.
            _ => Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            },
        }
    }

    /// A call's result, with a stream or group it found gone forgotten
    /// (and a group gone with its stream answered as the stream's).
    pub(crate) async fn gone<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(Error::StreamNotFound(s)) => Err(self.stream_gone(&s)),
            Err(Error::GroupNotFound { stream, group }) => {
                Err(self.group_gone(&stream, &group).await)
            }
            other => other,
        }
    }

    /// Checks that the group is still there (when a call found less than
    /// it expected, e.g. a lease gone): its error when not.
    pub(crate) async fn group_still_there(&self, s: &StreamName, g: &GroupName) -> Result<()> {
        let found = self
            .coll(GROUPS)
            .find_one(group_key(s, g))
            .projection(doc! {"_id": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        match found {
            Some(_) => Ok(()),
            None => Err(self.group_gone(s, g).await),
        }
    }

    /// The catalog collection with its generation document, created
    /// outside any transaction (MongoDB 4.2 creates no collection inside
    /// one).
    async fn ensure_catalog(&self) -> Result<()> {
        let created = self
            .coll(CATALOG)
            .update_one(
                doc! {"_id": GENERATION},
                doc! {"$setOnInsert": {"n": 0_i64}},
            )
            .upsert(true)
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(e) if is_duplicate_key(&e) => Ok(()),
            Err(e) => Err(map_error(e, Phase::Write)),
        }
    }

    /// In a delete's transaction: leaves the tombstone `id` (of `s`, and
    /// `g` for a group) and raises the generation. The tombstone's token.
    async fn bury(
        &self,
        session: &mut ClientSession,
        id: &str,
        (s, g): (&StreamName, Option<&GroupName>),
    ) -> Tx<ObjectId> {
        let token = ObjectId::new();
        let mut tombstone = doc! {
            "_id": id,
            "t": token,
            "s": s.as_str(),
            "at": self.now().as_millis(),
        };
        if let Some(g) = g {
            tombstone.insert("g", g.as_str());
        }
        let catalog = self.coll(CATALOG);
        let left = catalog
            .replace_one(doc! {"_id": id}, tombstone)
            .upsert(true)
            .session(&mut *session)
            .await;
        match left {
            Ok(_) => {}
            Err(e) if is_duplicate_key(&e) => return Err(Fail::Retry),
            Err(e) => return Err(e.into()),
        }
        catalog
            .update_one(doc! {"_id": GENERATION}, doc! {"$inc": {"n": 1_i64}})
            .upsert(true)
            .session(&mut *session)
            .await?;
        Ok(token)
    }

    /// The `_id`s of up to `limit` documents `filter` selects, in a
    /// transaction.
    async fn ids_in(
        &self,
        session: &mut ClientSession,
        coll: &str,
        filter: Document,
        limit: i64,
    ) -> Tx<Vec<Bson>> {
        let mut cursor = self
            .coll(coll)
            .find(filter)
            .projection(doc! {"_id": 1})
            .limit(limit)
            .session(&mut *session)
            .await?;
        let mut ids = Vec::new();
        while let Some(d) = cursor.next(&mut *session).await {
            if let Some(id) = d?.get("_id") {
                ids.push(id.clone());
            }
        }
        Ok(ids)
    }

    /// Removes what tombstone `id` (with `token`) names, in rounds; the
    /// last removes the tombstone. Stops when the tombstone is gone (a
    /// create or another delete's rounds finished it).
    async fn purge(
        &self,
        id: &str,
        token: &Bson,
        scopes: &[(&'static str, Document)],
    ) -> Result<()> {
        loop {
            let more = transaction!(self, Turn::Purge(id.to_owned()), session => {
                self.purge_round(&mut session, id, token, scopes).await
            })?;
            if !more {
                return Ok(());
            }
        }
    }

    /// One round: whether documents are left for another.
    async fn purge_round(
        &self,
        session: &mut ClientSession,
        id: &str,
        token: &Bson,
        scopes: &[(&'static str, Document)],
    ) -> Tx<bool> {
        let fence = doc! {"_id": id, "t": token.clone()};
        let held = self
            .coll(CATALOG)
            .update_one(fence.clone(), doc! {"$inc": {"rev": 1_i64}})
            .session(&mut *session)
            .await?;
        if held.matched_count == 0 {
            return Ok(false);
        }
        let mut more = false;
        for (coll, filter) in scopes {
            let ids = self.ids_in(session, coll, filter.clone(), ROUND).await?;
            more |= ids.len() as i64 >= ROUND;
            if !ids.is_empty() {
                self.coll(coll)
                    .delete_many(doc! {"_id": {"$in": ids}})
                    .session(&mut *session)
                    .await?;
            }
        }
        if !more {
            self.coll(CATALOG)
                .delete_one(fence)
                .session(&mut *session)
                .await?;
        }
        Ok(more)
    }

    /// Runs the rounds of tombstone `id` if there is one.
    pub(crate) async fn finish_tombstone(
        &self,
        id: &str,
        scopes: &[(&'static str, Document)],
    ) -> Result<()> {
        let found = self
            .coll(CATALOG)
            .find_one(doc! {"_id": id})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        match found.and_then(|d| d.get("t").cloned()) {
            Some(token) => self.purge(id, &token, scopes).await,
            None => Ok(()),
        }
    }

    /// Whether tombstone `id` is there, in a create's transaction.
    pub(crate) async fn tombstone_in(&self, session: &mut ClientSession, id: &str) -> Tx<bool> {
        let found = self
            .coll(CATALOG)
            .find_one(doc! {"_id": id})
            .projection(doc! {"_id": 1})
            .session(&mut *session)
            .await?;
        Ok(found.is_some())
    }

    /// Runs `attempt` (a create's transaction: `None` when it found a
    /// tombstone) after the rounds of tombstone `id`, until it finds none.
    pub(crate) async fn create_after<T, F, Fut>(
        &self,
        id: &str,
        scopes: &[(&'static str, Document)],
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        for _ in 0..CREATE_ATTEMPTS {
            self.finish_tombstone(id, scopes).await?;
            if let Some(made) = attempt().await? {
                return Ok(made);
            }
        }
        Err(Error::BackendUnavailable(
            "a delete of the name is still under way; retry the call".into(),
        ))
    }

    /// The first step of a stream's delete: its document and its groups'
    /// go, the generation moves, a tombstone is left. Its token.
    pub(crate) async fn retire_stream(&self, s: &StreamName) -> Result<ObjectId> {
        self.ensure_catalog().await?;
        let id = stream_tombstone(s);
        let token = transaction!(self, Turn::Stream(s.clone()), session => {
            let found = self
                .coll(STREAMS)
                .find_one_and_delete(doc! {"_id": s.as_str()})
                .session(&mut session)
                .await?;
            if found.is_none() {
                return Err(Fail::Rheo(Error::StreamNotFound(s.clone())));
            }
            self.coll(GROUPS)
                .delete_many(doc! {"s": s.as_str()})
                .session(&mut session)
                .await?;
            self.bury(&mut session, &id, (s, None)).await
        })?;
        self.stream_gone(s);
        Ok(token)
    }

    /// The first step of a group's delete.
    pub(crate) async fn retire_group(&self, s: &StreamName, g: &GroupName) -> Result<ObjectId> {
        self.ensure_catalog().await?;
        let id = group_tombstone(s, g);
        let token = transaction!(self, Turn::of_group(s, g), session => {
            let stream = self
                .coll(STREAMS)
                .find_one(doc! {"_id": s.as_str()})
                .projection(doc! {"_id": 1})
                .session(&mut session)
                .await?;
            if stream.is_none() {
                return Err(Fail::Rheo(Error::StreamNotFound(s.clone())));
            }
            // A delete of the stream removes this document too: the two
            // conflict.
            let found = self
                .coll(GROUPS)
                .find_one_and_delete(group_key(s, g))
                .session(&mut session)
                .await?;
            if found.is_none() {
                return Err(Fail::Rheo(Error::GroupNotFound {
                    stream: s.clone(),
                    group: g.clone(),
                }));
            }
            self.bury(&mut session, &id, (s, Some(g))).await
        })?;
        self.catalog.forget_group(s, g);
        self.rotation.lock().remove(&(s.clone(), g.clone()));
        Ok(token)
    }

    pub(crate) async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        req.validate()?;
        let s = &req.stream;
        let (id, scopes) = (stream_tombstone(s), of_stream(s));
        let token = match self.retire_stream(s).await {
            Ok(token) => token,
            Err(e @ Error::StreamNotFound(_)) => {
                // A delete that died half-way is finished by the next one.
                self.finish_tombstone(&id, &scopes).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // Waiters find it gone (other nodes' listeners see the document go).
        self.notifier.notify(s);
        self.clear_out(&id, token, &scopes).await;
        Ok(())
    }

    pub(crate) async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        let (id, scopes) = (group_tombstone(s, g), of_group(s, g));
        let token = match self.retire_group(s, g).await {
            Ok(token) => token,
            Err(e @ Error::GroupNotFound { .. }) => {
                self.finish_tombstone(&id, &scopes).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.wake(s).await;
        self.clear_out(&id, token, &scopes).await;
        Ok(())
    }

    /// The rounds of a delete just made. The delete stands whatever they
    /// do: what one that fails leaves is removed by the next create or
    /// delete of the name.
    async fn clear_out(&self, id: &str, token: ObjectId, scopes: &[(&'static str, Document)]) {
        if let Err(e) = self.purge(id, &Bson::ObjectId(token), scopes).await {
            tracing::warn!(error = %e, tombstone = id, "mongodb: the documents of a delete were not all removed yet");
        }
    }
}
