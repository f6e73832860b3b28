//! Creating and listing groups (`docs/groups.md#groups-and-start-positions`).
//!
//! A group's document holds its settings and, per partition, its cursor
//! (`cursor.<partition>`: the next sequence it delivers for the first
//! time) and an `epoch` that a reset moves on, so that a fetch that read
//! the group before a reset cannot move the cursor after it. The epoch
//! starts at a random value, so neither can a fetch that read a group of
//! the same name before a delete (`lifecycle.rs`). `skipped` counts the
//! events retention removed before the group settled them
//! (`retention.rs`; missing while 0). Its `ordering` and `flow` (the
//! text of [`Flow::to_json`]; missing: no limit) change only with a reset
//! of every partition (`rewind.rs`).

use mongodb::bson::{Bson, Document, doc};

use super::lifecycle::{group_tombstone, of_group};
use super::log::{decode_firsts, decode_meta};
use super::{
    DELIVERIES, Fail, GATES, GROUPS, MongoBackend, Phase, RATES, STREAMS, Turn, big, corrupt, int,
    is_duplicate_key, map_error, text, transaction,
};
use rheo_core::backend::policy::{
    Gating, GroupConfig, Marks, clamp_starts, start_lookup, start_points,
};
use rheo_core::backend::{Error, Result};
use rheo_core::model::{
    Flow, Group, GroupName, GroupOrdering, GroupSpec, OnExhausted, StartPosition, StreamName,
};

/// A group as fetches and rewinds read it.
#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    /// Per partition (index), the cursor.
    pub(crate) cursors: Vec<u64>,
    /// Moved on by every reset.
    pub(crate) epoch: i64,
    /// As stored: a reset of every partition may change it.
    pub(crate) ordering: GroupOrdering,
    /// As stored (`docs/groups.md#flow`): a reset of every partition may
    /// change it.
    pub(crate) flow: Flow,
    /// Events retention removed before the group settled them.
    pub(crate) skipped: u64,
}

impl GroupState {
    /// How its deliveries pass gates, as stored.
    pub(crate) fn gating(&self) -> Gating {
        Gating::new(self.ordering, &self.flow)
    }

    /// Whether `config` (what this node kept of the group) has the
    /// ordering and flow stored: else it is out of date (another node's
    /// reset changed them), and is read again.
    pub(crate) fn gates_as(&self, config: &GroupConfig) -> bool {
        self.ordering == config.ordering && self.flow == config.flow
    }

    /// Raises each cursor below its partition's first stored sequence to
    /// it: nothing below is left to deliver (`retention.rs`).
    pub(crate) fn at_log_start(&mut self, firsts: &[u64]) {
        for (cursor, first) in self.cursors.iter_mut().zip(firsts) {
            *cursor = (*cursor).max(*first);
        }
    }
}

/// The filter of one group's document.
pub(crate) fn group_key(s: &StreamName, g: &GroupName) -> Document {
    doc! {"s": s.as_str(), "g": g.as_str()}
}

fn decode_group(s: &StreamName, d: &Document) -> Result<Group> {
    let backoff = d
        .get_array("backoff")
        .map_err(|e| corrupt("group", e))?
        .iter()
        .map(|v| match v {
            Bson::Int64(v) => u64::try_from(*v).map_err(|e| corrupt("backoff", e)),
            Bson::Int32(v) => u64::try_from(*v).map_err(|e| corrupt("backoff", e)),
            other => Err(corrupt("backoff", other)),
        })
        .collect::<Result<Vec<u64>>>()?;
    Ok(Group {
        stream: s.clone(),
        name: GroupName::parse(text(d, "g")?).map_err(|e| corrupt("group name", e))?,
        max_attempts: u32::try_from(int(d, "max_attempts")?).map_err(|e| corrupt("group", e))?,
        retry_backoff_ms: backoff,
        ordering: stored_ordering(d)?,
        on_exhausted: stored_on_exhausted(d)?,
        flow: stored_flow(d)?,
        created_at: rheo_core::model::Timestamp::from_millis(int(d, "created_at")?),
    })
}

/// A group document's ordering (groups created before orderings existed
/// have none).
pub(crate) fn stored_ordering(d: &Document) -> Result<GroupOrdering> {
    match d.get_str("ordering") {
        Ok(o) => o.parse().map_err(|e| corrupt("ordering", e)),
        Err(_) => Ok(GroupOrdering::None),
    }
}

/// A group document's flow (`docs/groups.md#flow`), the text of
/// [`Flow::to_json`] (groups created before flows existed have none: no
/// limit).
pub(crate) fn stored_flow(d: &Document) -> Result<Flow> {
    match d.get("flow") {
        None | Some(Bson::Null) => Ok(Flow::default()),
        Some(Bson::String(text)) => Flow::from_json(text).map_err(|e| corrupt("flow", e)),
        Some(other) => Err(corrupt("flow", other)),
    }
}

/// What a group document's gated heads do once out of attempts
/// (`docs/groups.md#quarantine`; groups created before quarantine existed
/// have none: they dead-letter).
fn stored_on_exhausted(d: &Document) -> Result<OnExhausted> {
    match d.get_str("on_exhausted") {
        Ok(o) => o.parse().map_err(|e| corrupt("on_exhausted", e)),
        Err(_) => Ok(OnExhausted::DeadLetter),
    }
}

impl MongoBackend {
    /// Creates a group once what a delete of the name left is gone
    /// (`lifecycle.rs`), in a transaction that writes the stream's
    /// document, so that it conflicts with a delete of the stream.
    pub(crate) async fn create_group(&self, s: &StreamName, spec: GroupSpec) -> Result<Group> {
        spec.validate()?;
        let now = self.now();
        let g = &spec.name;
        let (id, scopes) = (group_tombstone(s, g), of_group(s, g));
        let mut created = false;
        // Again when the stream turns out to be another one than this node
        // kept (deleted and created again meanwhile).
        for _ in 0..3 {
            let meta = self.meta(s).await?;
            let starts = self.start_points_of(s, meta.0, &spec.start).await?;
            let backoff: Vec<i64> = spec.retry_backoff_ms.iter().map(|d| big(*d)).collect();
            let d = doc! {
                "s": s.as_str(),
                "g": g.as_str(),
                "max_attempts": i64::from(spec.max_attempts),
                "backoff": backoff,
                "created_at": now.as_millis(),
                "epoch": rand::random_range(0..1_i64 << 52),
                "ordering": spec.ordering.as_str(),
                "on_exhausted": spec.on_exhausted.as_str(),
                "flow": spec.flow.to_json(),
            };
            created = self
                .create_after(&id, &scopes, || async {
                    transaction!(self, Turn::of_group(s, g), session => {
                        if self.tombstone_in(&mut session, &id).await? {
                            return Ok(None);
                        }
                        let stream = self
                            .coll(STREAMS)
                            .find_one_and_update(
                                doc! {"_id": s.as_str()},
                                doc! {"$inc": {"rev": 1_i64}},
                            )
                            .projection(doc! {"partitions": 1, "created_at": 1, "first": 1})
                            .session(&mut session)
                            .await?
                            .ok_or_else(|| Error::StreamNotFound(s.clone()))?;
                        if decode_meta(&stream)? != meta {
                            return Ok(Some(false));
                        }
                        // Below the log start as this transaction reads it
                        // (a trim writes the stream's document too).
                        let firsts = decode_firsts(&stream, meta.0);
                        let mut cursors = Document::new();
                        for (p, start) in clamp_starts(starts.clone(), &firsts).iter().enumerate() {
                            cursors.insert(p.to_string(), big(start + 1));
                        }
                        let mut d = d.clone();
                        d.insert("cursor", cursors);
                        // What a node that had not seen a delete of the
                        // name may have written after it.
                        let of = doc! {"s": s.as_str(), "g": g.as_str()};
                        for coll in [DELIVERIES, GATES, RATES] {
                            self.coll(coll)
                                .delete_many(of.clone())
                                .session(&mut session)
                                .await?;
                        }
                        match self.coll(GROUPS).insert_one(d).session(&mut session).await {
                            Ok(_) => Ok(Some(true)),
                            Err(e) if is_duplicate_key(&e) => {
                                let (g, s) = (g.as_str(), s.as_str());
                                Err(Fail::Rheo(Error::AlreadyExists(format!(
                                    "group {g:?} on stream {s:?}"
                                ))))
                            }
                            Err(e) => Err(e.into()),
                        }
                    })
                })
                .await?;
            if created {
                break;
            }
            self.stream_gone(s);
        }
        if !created {
            return Err(Error::BackendUnavailable(
                "the stream was deleted and created again meanwhile; retry the call".into(),
            ));
        }
        // What this node may still keep of a deleted group of the name.
        self.forget_group(s, g);
        Ok(Group {
            stream: s.clone(),
            name: spec.name,
            max_attempts: spec.max_attempts,
            retry_backoff_ms: spec.retry_backoff_ms,
            ordering: spec.ordering,
            on_exhausted: spec.on_exhausted,
            flow: spec.flow,
            created_at: now,
        })
    }

    pub(crate) async fn list_groups(&self, s: &StreamName) -> Result<Vec<Group>> {
        let meta = self.meta(s).await?;
        let docs = self
            .find_all(GROUPS, doc! {"s": s.as_str()}, Some(doc! {"g": 1}), 0)
            .await?;
        if docs.is_empty() {
            self.verify_stream(s, meta).await?;
        }
        docs.iter().map(|d| decode_group(s, d)).collect()
    }

    /// Forgets a group's settings (read again next time): another node
    /// changed its ordering or flow.
    pub(crate) fn forget_group(&self, s: &StreamName, g: &GroupName) {
        self.catalog.forget_group(s, g);
    }

    /// The group's retry policy, ordering and flow; [`Error::GroupNotFound`]
    /// when it has none. Kept in the catalog once read, until a delete (a
    /// call that finds the group gone answers `group_not_found` and forgets
    /// it); every path that depends on the gating compares it with the
    /// stored one ([`GroupState::gates_as`], or a delivery's gate and
    /// slots) and drops what is kept when they differ.
    pub(crate) async fn group_config(&self, s: &StreamName, g: &GroupName) -> Result<GroupConfig> {
        self.refresh_catalog().await?;
        if let Some(config) = self.catalog.group(s, g) {
            return Ok(config);
        }
        let at = self.catalog.generation();
        let found = self
            .coll(GROUPS)
            .find_one(group_key(s, g))
            .projection(doc! {"cursor": 0})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let d = found.ok_or_else(|| Error::GroupNotFound {
            stream: s.clone(),
            group: g.clone(),
        })?;
        let config = GroupConfig::from(&decode_group(s, &d)?);
        self.catalog.keep_group(s, g, config.clone(), at);
        Ok(config)
    }

    /// The group's cursors and epoch, read now.
    pub(crate) async fn group_state(
        &self,
        s: &StreamName,
        g: &GroupName,
        partitions: u32,
    ) -> Result<GroupState> {
        let found = self
            .coll(GROUPS)
            .find_one(group_key(s, g))
            .projection(doc! {"cursor": 1, "epoch": 1, "ordering": 1, "flow": 1, "skipped": 1})
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let d = found.ok_or_else(|| Error::GroupNotFound {
            stream: s.clone(),
            group: g.clone(),
        })?;
        decode_state(s, &d, partitions)
    }
}

/// A group document's cursors, epoch, ordering and flow, for a stream of
/// `partitions` partitions: `stream_not_found` when the group has another
/// count (this node kept a stream deleted and created again since).
pub(crate) fn decode_state(s: &StreamName, d: &Document, partitions: u32) -> Result<GroupState> {
    let cursor = d.get_document("cursor").map_err(|e| corrupt("group", e))?;
    if cursor.len() != partitions as usize {
        return Err(Error::StreamNotFound(s.clone()));
    }
    let cursors = (0..partitions)
        .map(|p| match cursor.get(p.to_string()) {
            Some(Bson::Int64(v)) => u64::try_from(*v).map_err(|e| corrupt("cursor", e)),
            Some(Bson::Int32(v)) => u64::try_from(*v).map_err(|e| corrupt("cursor", e)),
            other => Err(corrupt("cursor", format!("{other:?}"))),
        })
        .collect::<Result<Vec<u64>>>()?;
    Ok(GroupState {
        cursors,
        epoch: int(d, "epoch")?,
        ordering: stored_ordering(d)?,
        flow: stored_flow(d)?,
        skipped: super::opt_int(d, "skipped")?.map_or(0, |n| n.max(0) as u64),
    })
}

impl MongoBackend {
    /// The exclusive start sequence of every partition for `start`.
    pub(crate) async fn start_points_of(
        &self,
        s: &StreamName,
        partition_count: u32,
        start: &StartPosition,
    ) -> Result<Vec<u64>> {
        let mut marks = Vec::new();
        if let Some(t) = start_lookup(start, partition_count)? {
            let all: Vec<u32> = (0..partition_count).collect();
            let firsts = self.first_at_or_after(s, &all, t).await?;
            let hws = self.high_watermarks(s).await?;
            marks = all
                .iter()
                .map(|p| Marks {
                    first_at_or_after: firsts.get(p).copied(),
                    high_watermark: hws.get(*p as usize).copied().unwrap_or(0),
                })
                .collect();
        }
        Ok(start_points(start, partition_count, &marks))
    }
}
