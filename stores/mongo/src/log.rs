//! Streams and their events (`docs/log.md`): creating and listing streams,
//! appends, reads, history queries and the lookups groups need (events at
//! positions, events by id, the first event at an instant).
//!
//! A stream's document holds its partition count, the high watermark of
//! each partition (`hw.<partition>`), the first sequence each still stores
//! (`first.<partition>`, missing while it is 1: `retention.rs`) and the
//! retention (`retention`, its JSON text, missing for none). An append runs
//! in a transaction: it
//! reads the batch's known ids, moves the watermarks of the partitions it
//! writes with `$inc` (which also reserves its sequences: a concurrent
//! append conflicts on this document and runs again) and inserts the
//! events. Sequences therefore never repeat (the unique (stream,
//! partition, sequence) index would refuse it anyway) and never skip: the
//! watermark moves only in the transaction that inserts every sequence up
//! to it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::TryStreamExt as _;
use mongodb::ClientSession;
use mongodb::bson::{Bson, Document, doc};

use super::lifecycle::{of_stream, stream_tombstone};
use super::{
    EVENTS, Fail, MongoBackend, Phase, STREAMS, Turn, big, corrupt, int, is_duplicate_key,
    map_error, text, transaction, uint,
};
use rheo_core::backend::entry;
use rheo_core::backend::policy::{appended, plan_append, route_batch};
use rheo_core::backend::{CreateStream, Error, ReadRequest, Result};
use rheo_core::model::{
    Appended, Event, EventId, EventInput, Page, Query, Retention, Stream, StreamName, Timestamp,
};

/// The document of one event (`docs/backends.md#mongodb`): its position
/// and the fields queries filter on, the payload and metadata as BSON when
/// they convert exactly (else `raw: true`, and queries check such events
/// in Rheo), and `body`, the event's JSON text, which is what is read back.
pub(crate) fn event_doc(event: &Event) -> Result<Document> {
    let body = entry::encode(event).map_err(|e| corrupt("event", e))?;
    let mut d = doc! {
        "s": event.stream.as_str(),
        "p": event.partition as i32,
        "q": big(event.sequence),
        "id": event.id.as_str(),
        "ts": event.timestamp.as_millis(),
    };
    if let Some(t) = &event.event_type {
        d.insert("type", t.as_str());
    }
    if let Some(k) = &event.key {
        d.insert("key", k.as_str());
    }
    match (
        super::json::exact_doc(&event.payload),
        super::json::exact_doc(&event.metadata),
    ) {
        (Some(payload), Some(metadata)) => {
            d.insert("payload", payload);
            d.insert("metadata", metadata);
        }
        _ => {
            d.insert("raw", true);
        }
    }
    d.insert("body", body);
    Ok(d)
}

/// An event from its document.
pub(crate) fn decode_event(stream: &StreamName, d: &Document) -> Result<Event> {
    let partition = u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))?;
    let sequence = uint(d, "q")?;
    entry::decode(stream, partition, sequence, text(d, "body")?).map_err(|e| corrupt("event", e))
}

/// Partition count and creation time from a stream's document.
pub(crate) fn decode_meta(d: &Document) -> Result<(u32, Timestamp)> {
    let partitions = u32::try_from(int(d, "partitions")?).map_err(|e| corrupt("stream", e))?;
    Ok((partitions, Timestamp::from_millis(int(d, "created_at")?)))
}

/// Per partition, the value of `field.<partition>` in a stream's document
/// (`missing` when absent).
fn per_partition(d: &Document, field: &str, partitions: u32, missing: u64) -> Vec<u64> {
    let values = d.get_document(field).ok();
    (0..partitions)
        .map(|p| {
            values
                .and_then(|values| match values.get(p.to_string()) {
                    Some(Bson::Int64(v)) => u64::try_from(*v).ok(),
                    Some(Bson::Int32(v)) => u64::try_from(*v).ok(),
                    _ => None,
                })
                .unwrap_or(missing)
        })
        .collect()
}

/// The high watermarks in a stream's document.
pub(crate) fn decode_watermarks(d: &Document, partitions: u32) -> Vec<u64> {
    per_partition(d, "hw", partitions, 0)
}

/// The first stored sequence of each partition in a stream's document
/// (1 until retention removed events of it).
pub(crate) fn decode_firsts(d: &Document, partitions: u32) -> Vec<u64> {
    per_partition(d, "first", partitions, 1)
}

/// The retention in a stream's document (none when missing).
fn decode_retention(d: &Document) -> Result<Option<Retention>> {
    match d.get("retention") {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(text)) => Retention::from_text(text)
            .map(Some)
            .map_err(|e| corrupt("retention", e)),
        Some(other) => Err(corrupt("retention", other)),
    }
}

/// A stream from its document.
pub(crate) fn decode_stream(name: StreamName, d: &Document) -> Result<Stream> {
    let (partition_count, created_at) = decode_meta(d)?;
    Ok(Stream {
        high_watermarks: decode_watermarks(d, partition_count),
        first_sequences: decode_firsts(d, partition_count),
        retention: decode_retention(d)?,
        name,
        partition_count,
        created_at,
    })
}

/// What a stream's document holds for [`decode_stream`].
pub(crate) fn stream_fields() -> Document {
    doc! {"partitions": 1, "created_at": 1, "hw": 1, "first": 1, "retention": 1}
}

impl MongoBackend {
    /// Partition count and creation time of a stream: kept in the catalog
    /// once read (until a delete; a call that finds the stream's document
    /// gone or different answers `stream_not_found` and forgets it).
    pub(crate) async fn meta(&self, stream: &StreamName) -> Result<(u32, Timestamp)> {
        self.refresh_catalog().await?;
        if let Some(meta) = self.catalog.stream(stream) {
            return Ok(meta);
        }
        let at = self.catalog.generation();
        let meta = self
            .fresh_meta(stream)
            .await?
            .ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        self.catalog.keep_stream(stream, meta, at);
        Ok(meta)
    }

    /// Partition count and creation time as stored now (`None`: no stream).
    async fn fresh_meta(&self, stream: &StreamName) -> Result<Option<(u32, Timestamp)>> {
        let found = self
            .coll(STREAMS)
            .find_one(doc! {"_id": stream.as_str()})
            .projection(doc! {"partitions": 1, "created_at": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        found.as_ref().map(decode_meta).transpose()
    }

    /// Checks that the stream `meta` was read of is still there (a call
    /// that found nothing may have used what this node kept of a stream
    /// another node deleted): `stream_not_found` when it is gone or is
    /// another one now.
    pub(crate) async fn verify_stream(
        &self,
        stream: &StreamName,
        meta: (u32, Timestamp),
    ) -> Result<()> {
        match self.fresh_meta(stream).await? {
            Some(now) if now == meta => Ok(()),
            _ => Err(self.stream_gone(stream)),
        }
    }

    /// Last sequence per partition.
    pub(crate) async fn high_watermarks(&self, stream: &StreamName) -> Result<Vec<u64>> {
        let meta = self.meta(stream).await?;
        let found = self
            .coll(STREAMS)
            .find_one(doc! {"_id": stream.as_str()})
            .projection(doc! {"hw": 1, "partitions": 1, "created_at": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        match found {
            // Not the stream this node kept: deleted (and maybe created again).
            Some(d) if decode_meta(&d)? == meta => Ok(decode_watermarks(&d, meta.0)),
            _ => Err(self.stream_gone(stream)),
        }
    }

    /// The stream's document as [`stream_fields`] projects it, read now:
    /// `stream_not_found` when it is gone or is another one than this node
    /// kept.
    pub(crate) async fn stream_doc(&self, stream: &StreamName) -> Result<Document> {
        let meta = self.meta(stream).await?;
        let found = self
            .coll(STREAMS)
            .find_one(doc! {"_id": stream.as_str()})
            .projection(stream_fields())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        match found {
            Some(d) if decode_meta(&d)? == meta => Ok(d),
            _ => Err(self.stream_gone(stream)),
        }
    }

    /// Per partition, the high watermark and the first stored sequence.
    pub(crate) async fn marks(&self, stream: &StreamName) -> Result<(Vec<u64>, Vec<u64>)> {
        let d = self.stream_doc(stream).await?;
        let (partitions, _) = decode_meta(&d)?;
        Ok((
            decode_watermarks(&d, partitions),
            decode_firsts(&d, partitions),
        ))
    }

    /// Creates a stream once what a delete of the name left is gone
    /// (`lifecycle.rs`).
    pub(crate) async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
        req.validate()?;
        let created_at = self.now();
        let mut d = doc! {
            "_id": req.name.as_str(),
            "partitions": req.partition_count as i32,
            "created_at": created_at.as_millis(),
            "hw": {},
            "wake": 0_i64,
        };
        if let Some(retention) = &req.retention {
            d.insert("retention", retention.to_text());
        }
        let id = stream_tombstone(&req.name);
        let scopes = of_stream(&req.name);
        self.create_after(&id, &scopes, || async {
            transaction!(self, Turn::Stream(req.name.clone()), session => {
                if self.tombstone_in(&mut session, &id).await? {
                    return Ok(None);
                }
                match self.coll(STREAMS).insert_one(d.clone()).session(&mut session).await {
                    Ok(_) => Ok(Some(())),
                    Err(e) if is_duplicate_key(&e) => Err(Fail::Rheo(Error::AlreadyExists(
                        format!("stream {:?}", req.name.as_str()),
                    ))),
                    Err(e) => Err(e.into()),
                }
            })
        })
        .await?;
        // What this node may still keep of a deleted stream of the name.
        self.stream_gone(&req.name);
        Ok(Stream {
            name: req.name,
            partition_count: req.partition_count,
            created_at,
            high_watermarks: vec![0; req.partition_count as usize],
            first_sequences: vec![1; req.partition_count as usize],
            retention: req.retention,
        })
    }

    pub(crate) async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
        decode_stream(stream.clone(), &self.stream_doc(stream).await?)
    }

    pub(crate) async fn list_streams(&self) -> Result<Vec<Stream>> {
        let docs = self
            .find_all(STREAMS, doc! {}, Some(doc! {"_id": 1}), 0)
            .await?;
        docs.iter()
            .map(|d| {
                let name = StreamName::parse(text(d, "_id")?).map_err(|e| corrupt("stream", e))?;
                decode_stream(name, d)
            })
            .collect()
    }

    /// Appends a batch atomically (`docs/log.md#appends`).
    pub(crate) async fn append(
        &self,
        stream: &StreamName,
        events: Vec<EventInput>,
    ) -> Result<Vec<Appended>> {
        let meta = self.meta(stream).await?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let routed = route_batch(events, meta.0)?;
        let (out, wrote) = transaction!(self, Turn::Stream(stream.clone()), s => self.append_in(&mut s, stream, meta, &routed).await)?;
        if wrote {
            self.notifier.notify(stream);
        }
        Ok(out)
    }

    /// One attempt of an append; also says whether anything was written.
    /// The stream's document is only updated, never created: an append on
    /// a node that has not seen its delete finds it gone.
    async fn append_in(
        &self,
        session: &mut ClientSession,
        stream: &StreamName,
        meta: (u32, Timestamp),
        routed: &[(EventInput, u32)],
    ) -> std::result::Result<(Vec<Appended>, bool), Fail> {
        let now = self.now();
        let given: Vec<&str> = routed
            .iter()
            .filter_map(|(input, _)| input.id.as_ref().map(EventId::as_str))
            .collect();
        let mut known: HashMap<EventId, Arc<Event>> = HashMap::new();
        if !given.is_empty() {
            let filter = doc! {"s": stream.as_str(), "id": {"$in": &given}};
            for d in self.find_in(session, EVENTS, filter, None, 0).await? {
                let event = decode_event(stream, &d)?;
                known.insert(event.id.clone(), Arc::new(event));
            }
        }
        let plan = plan_append(routed, &known.keys().cloned().collect::<HashSet<_>>());
        if plan.per_partition.is_empty() {
            let out = routed
                .iter()
                .map(|(input, _)| Err(input.id.clone().expect("a duplicate has an id")));
            return Ok((appended(out.collect(), &known), false));
        }
        // Reserve the sequences: the watermarks move by the batch's counts.
        let mut inc = Document::new();
        for (p, count) in &plan.per_partition {
            inc.insert(format!("hw.{p}"), big(*count));
        }
        let moved = self
            .coll(STREAMS)
            .find_one_and_update(doc! {"_id": stream.as_str()}, doc! {"$inc": inc})
            .return_document(mongodb::options::ReturnDocument::After)
            .session(&mut *session)
            .await?
            .ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        if decode_meta(&moved)? != meta {
            // Deleted and created again since this node read it: the
            // batch was routed for the old one (nothing is committed).
            return Err(Fail::Rheo(Error::StreamNotFound(stream.clone())));
        }
        let hw = decode_watermarks(&moved, meta.0);
        let mut next: HashMap<u32, u64> = HashMap::new();
        for (&p, &count) in &plan.per_partition {
            let last = hw[p as usize];
            rheo_core::model::validate_sequence("sequence", last)
                .map_err(|_| Error::Failed(format!("partition {p} of {stream:?} is full")))?;
            next.insert(p, last + 1 - count);
        }

        let mut out = Vec::with_capacity(routed.len());
        let mut docs = Vec::new();
        for ((input, partition), fresh) in routed.iter().zip(&plan.fresh) {
            if !fresh {
                out.push(Err(input.id.clone().expect("a duplicate has an id")));
                continue;
            }
            let seq = next.get_mut(partition).expect("planned partition");
            let sequence = *seq;
            *seq += 1;
            let mut input = input.clone();
            let id = input.id.take().unwrap_or_else(EventId::generate);
            let event =
                Arc::new(input.into_event(id.clone(), stream.clone(), *partition, sequence, now));
            docs.push(event_doc(&event)?);
            known.insert(id, Arc::clone(&event));
            out.push(Ok(event));
        }
        // Another append may have stored one of these ids first: read again.
        self.insert_all(session, EVENTS, docs).await?;
        Ok((appended(out, &known), true))
    }

    /// Events of one partition after `after`, in sequence order.
    pub(crate) async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
        req.validate()?;
        let meta = self.meta(&req.stream).await?;
        let partition_count = meta.0;
        if req.partition >= partition_count {
            self.verify_stream(&req.stream, meta).await?;
            return Err(Error::InvalidPartition {
                partition: req.partition,
                partition_count,
            });
        }
        let filter = doc! {
            "s": req.stream.as_str(),
            "p": req.partition as i32,
            "q": {"$gt": big(req.after)},
        };
        let docs = self
            .find_all(EVENTS, filter, Some(doc! {"q": 1}), i64::from(req.limit))
            .await?;
        if docs.is_empty() {
            self.verify_stream(&req.stream, meta).await?;
        }
        docs.iter().map(|d| decode_event(&req.stream, d)).collect()
    }

    /// Events of one partition from `first` to `last`, both included.
    pub(crate) async fn read_range(
        &self,
        s: &StreamName,
        p: u32,
        first: u64,
        last: u64,
    ) -> Result<Vec<Event>> {
        let filter = doc! {
            "s": s.as_str(),
            "p": p as i32,
            "q": {"$gte": big(first), "$lte": big(last)},
        };
        let docs = self
            .find_all(EVENTS, filter, Some(doc! {"q": 1}), 0)
            .await?;
        docs.iter().map(|d| decode_event(s, d)).collect()
    }

    /// The events at several positions.
    pub(crate) async fn events_at(
        &self,
        s: &StreamName,
        positions: &[(u32, u64)],
    ) -> Result<HashMap<(u32, u64), Arc<Event>>> {
        if positions.is_empty() {
            return Ok(HashMap::new());
        }
        // Partitions × sequences: a superset (one index range per pair at
        // most), cut to the positions asked for below.
        let mut partitions: Vec<i32> = positions.iter().map(|&(p, _)| p as i32).collect();
        let mut sequences: Vec<i64> = positions.iter().map(|&(_, q)| big(q)).collect();
        partitions.sort_unstable();
        partitions.dedup();
        sequences.sort_unstable();
        sequences.dedup();
        let filter = doc! {
            "s": s.as_str(),
            "p": {"$in": partitions},
            "q": {"$in": sequences},
        };
        let docs = self.find_all(EVENTS, filter, None, 0).await?;
        let mut out = HashMap::with_capacity(docs.len());
        let wanted: HashSet<(u32, u64)> = positions.iter().copied().collect();
        for d in &docs {
            let event = decode_event(s, d)?;
            let at = (event.partition, event.sequence);
            if wanted.contains(&at) {
                out.insert(at, Arc::new(event));
            }
        }
        Ok(out)
    }

    /// Where the given events are, by id (unknown ids are left out).
    pub(crate) async fn locate(
        &self,
        s: &StreamName,
        ids: &[EventId],
    ) -> Result<HashMap<String, (u32, u64)>> {
        let names: Vec<&str> = ids.iter().map(EventId::as_str).collect();
        let filter = doc! {"s": s.as_str(), "id": {"$in": names}};
        let cursor = self
            .coll(EVENTS)
            .find(filter)
            .projection(doc! {"id": 1, "p": 1, "q": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let docs: Vec<Document> = cursor
            .try_collect()
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        docs.iter()
            .map(|d| {
                let p = u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))?;
                Ok((text(d, "id")?.to_owned(), (p, uint(d, "q")?)))
            })
            .collect()
    }

    /// Where the given events are, in input order; every id must be in the
    /// stream.
    pub(crate) async fn locate_all(
        &self,
        s: &StreamName,
        ids: &[EventId],
    ) -> Result<Vec<(u32, u64)>> {
        let found = self.locate(s, ids).await?;
        rheo_core::backend::policy::all_located(
            ids.iter()
                .map(|id| (id.as_str(), found.get(id.as_str()).copied())),
        )
    }

    /// Per partition, the first sequence whose timestamp is at or after `t`.
    pub(crate) async fn first_at_or_after(
        &self,
        s: &StreamName,
        selected: &[u32],
        t: Timestamp,
    ) -> Result<HashMap<u32, u64>> {
        let mut out = HashMap::new();
        for &p in selected {
            let filter = doc! {"s": s.as_str(), "p": p as i32, "ts": {"$gte": t.as_millis()}};
            let found = self
                .coll(EVENTS)
                .find_one(filter)
                .sort(doc! {"q": 1})
                .projection(doc! {"q": 1})
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            if let Some(d) = found {
                out.insert(p, uint(&d, "q")?.max(1));
            }
        }
        Ok(out)
    }

    /// Runs a history query (`docs/log.md#queries`).
    pub(crate) async fn query(&self, s: &StreamName, query: &Query) -> Result<Page> {
        query.validate()?;
        let meta = self.meta(s).await?;
        let events = self.scan(s, query, query.limit as usize).await?;
        if events.is_empty() {
            self.verify_stream(s, meta).await?;
        }
        Ok(query.page(events))
    }

    /// The events `query` matches (its cursor included), in its order, at
    /// most `limit` (0: all). MongoDB selects a superset with the
    /// translated filter (`query.rs`); each event is checked by the query
    /// itself, so MongoDB's looser equality never lets a wrong event in.
    pub(crate) async fn scan(
        &self,
        s: &StreamName,
        query: &Query,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let filter = super::query::filter(s, query, query.cursor.is_some());
        let sort = super::query::sort(query.order);
        let mut cursor = self
            .coll(EVENTS)
            .find(filter)
            .sort(sort)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut out = Vec::new();
        while let Some(d) = cursor
            .try_next()
            .await
            .map_err(|e| map_error(e, Phase::Read))?
        {
            let event = decode_event(s, &d)?;
            if query.matches(&event) {
                out.push(event);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}
