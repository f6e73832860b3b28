//! Creating and listing groups on Redis
//! (`docs/groups.md#groups-and-start-positions`): the start of every
//! partition comes from the policy module; the group's settings and
//! cursors are written in one guarded script.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Applied, Bounds, Cas, MAX_ATTEMPTS, Phase, RedisBackend, Settings, StreamFacts, corrupt,
    map_error,
};
use rheo_core::backend::policy::{GroupConfig, Marks, clamp_starts, start_lookup, start_points};
use rheo_core::backend::{Error, Result};
use rheo_core::model::{
    Flow, Group, GroupName, GroupOrdering, GroupSpec, OnExhausted, StartPosition, StreamName,
    Timestamp,
};

impl RedisBackend {
    /// Creates a group, guarded on its stream as kept here and on the log
    /// starts its start points were clamped to (a trim in between sends it
    /// round again). Its settings get an incarnation of their own, and
    /// whatever keys of its name exist are cleared in the same script
    /// (none do: a delete removes them all at once; this only makes sure a
    /// new group never starts on a deleted one's leftovers).
    pub(crate) async fn create_group(&self, s: &StreamName, spec: GroupSpec) -> Result<Group> {
        spec.validate()?;
        let facts = self.meta(s).await?;
        let partition_count = facts.partitions;
        let now = self.clock.now();
        let settings = json!({
            "max_attempts": spec.max_attempts,
            "retry_backoff_ms": spec.retry_backoff_ms,
            "ordering": spec.ordering.as_str(),
            "on_exhausted": spec.on_exhausted.as_str(),
            "flow": flow_value(&spec.flow)?,
            "created_at": now.as_millis(),
            "incarnation": super::incarnation(),
        });
        let (groups, name) = (self.keys.groups(s), spec.name.as_str());
        for attempt in 0..MAX_ATTEMPTS {
            let (starts, bounds) = self.start_points(s, partition_count, &spec.start).await?;
            let mut cas = Cas::default();
            self.guard_stream(&mut cas, s, &facts);
            cas.hget_is(&groups, name, None);
            guard_firsts(&mut cas, &self.keys.high_watermarks(s), &bounds);
            cas.unlink(&self.keys.of_group(s, &spec.name, partition_count));
            cas.write(&["HSET", &groups, name, &settings.to_string()]);
            let cursors = self.keys.cursors(s, &spec.name);
            let floors = self.keys.floors(s, &spec.name);
            for (p, start) in starts.iter().enumerate() {
                let (field, cursor) = (p.to_string(), (start + 1).to_string());
                cas.write(&["HSET", &cursors, &field, &cursor]);
                cas.write(&["HSET", &floors, &field, &cursor]);
            }
            if self.apply(&cas).await? == Applied::Yes {
                return Ok(Group {
                    stream: s.clone(),
                    name: spec.name,
                    max_attempts: spec.max_attempts,
                    retry_backoff_ms: spec.retry_backoff_ms,
                    ordering: spec.ordering,
                    on_exhausted: spec.on_exhausted,
                    flow: spec.flow,
                    created_at: now,
                });
            }
            let cmd = redis::cmd("HEXISTS").arg(&groups).arg(name).clone();
            if self.run::<bool>(&cmd, Phase::Read).await? {
                return Err(Error::AlreadyExists(format!(
                    "group {name:?} on stream {:?}",
                    s.as_str()
                )));
            }
            // A trim moved a log start meanwhile.
            super::back_off(attempt).await;
        }
        Err(Error::Failed(format!(
            "creating group {name:?} of stream {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// The groups of the stream as stored now, read with it.
    pub(crate) async fn list_groups(&self, s: &StreamName) -> Result<Vec<Group>> {
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(self.keys.streams()).arg(s.as_str());
        pipe.cmd("HGETALL").arg(self.keys.groups(s));
        let (raw, all): (Option<String>, BTreeMap<String, String>) = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        self.found_stream(s, raw, at)?;
        all.into_iter()
            .map(|(name, raw)| {
                let name = GroupName::parse(name).map_err(|e| corrupt("group name", e))?;
                decode_group(s, name, &raw)
            })
            .collect()
    }

    /// The exclusive start sequence of every partition for `start`, none
    /// below the log start (`clamp_starts`), with the bounds they were
    /// clamped to: the caller's write is guarded on their first sequences
    /// ([`guard_firsts`]).
    pub(super) async fn start_points(
        &self,
        s: &StreamName,
        partition_count: u32,
        start: &StartPosition,
    ) -> Result<(Vec<u64>, Bounds)> {
        let lookup = start_lookup(start, partition_count)?;
        let bounds = self.bounds(s, partition_count).await?;
        let mut marks = Vec::new();
        if let Some(t) = lookup {
            for (p, &high_watermark) in (0..partition_count).zip(&bounds.high_watermarks) {
                marks.push(Marks {
                    first_at_or_after: self.first_at_or_after(s, p, t).await?,
                    high_watermark,
                });
            }
        }
        let starts = start_points(start, partition_count, &marks);
        Ok((clamp_starts(starts, &bounds.first_sequences), bounds))
    }

    /// The lowest sequence of a partition whose timestamp is at or after
    /// `t`. Timestamps are the producers' and need not grow with the
    /// sequence, so this reads every entry of the time index from `t` on.
    pub(super) async fn first_at_or_after(
        &self,
        s: &StreamName,
        p: u32,
        t: Timestamp,
    ) -> Result<Option<u64>> {
        let cmd = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.times(s, p))
            .arg(t.as_millis())
            .arg("+inf")
            .clone();
        let sequences: Vec<u64> = self.run(&cmd, Phase::Read).await?;
        Ok(sequences.into_iter().min())
    }
}

/// Guards `cas` on each partition's first sequence as `bounds` hold it
/// (in the stream's `hw` hash, `hw` its key): a trim in between fails it.
pub(super) fn guard_firsts(cas: &mut Cas, hw: &str, bounds: &Bounds) {
    for (p, first) in (0u32..).zip(&bounds.first_sequences) {
        let stored = (*first > 1).then(|| first.to_string());
        cas.hget_is(hw, &super::first_field(p), stored.as_deref());
    }
}

/// A group's [`Settings`] from its stored value, with its stream.
pub(super) fn decode_settings(
    s: &StreamName,
    g: &GroupName,
    raw: String,
    stream: StreamFacts,
) -> Result<Settings> {
    let group = decode_group(s, g.clone(), &raw)?;
    Ok(Settings {
        config: GroupConfig::from(&group),
        raw: Arc::from(raw),
        stream,
    })
}

/// Whether two stored values of a group's settings are of one group (its
/// settings changed by a reset that changed its ordering or flow), not of
/// a deleted one and another created again under its name: the same
/// creation time and incarnation.
pub(super) fn same_group(a: &str, b: &str) -> bool {
    let identity = |raw: &str| {
        let v: Value = serde_json::from_str(raw).ok()?;
        Some((
            v["created_at"].as_i64(),
            v["incarnation"].as_str().map(str::to_owned),
        ))
    };
    identity(a).is_some_and(|a| identity(b) == Some(a))
}

pub(super) fn decode_group(s: &StreamName, name: GroupName, raw: &str) -> Result<Group> {
    let v: Value = serde_json::from_str(raw).map_err(|e| corrupt("group", e))?;
    let bad = || corrupt("group", raw);
    let backoff = v["retry_backoff_ms"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|d| d.as_u64().ok_or_else(bad))
        .collect::<Result<_>>()?;
    Ok(Group {
        stream: s.clone(),
        name,
        max_attempts: v["max_attempts"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(bad)?,
        retry_backoff_ms: backoff,
        // Groups created before orderings existed have none.
        ordering: match v["ordering"].as_str() {
            Some(o) => o.parse().map_err(|_| bad())?,
            None => GroupOrdering::None,
        },
        // Groups created before quarantine existed dead-letter
        // (`docs/groups.md#quarantine`).
        on_exhausted: match v["on_exhausted"].as_str() {
            Some(o) => o.parse().map_err(|_| bad())?,
            None => OnExhausted::DeadLetter,
        },
        // Groups created before flow control existed have none
        // (`docs/groups.md#flow`).
        flow: match v.get("flow") {
            Some(flow) => serde_json::from_value(flow.clone()).map_err(|_| bad())?,
            None => Flow::default(),
        },
        created_at: Timestamp::from_millis(v["created_at"].as_i64().ok_or_else(bad)?),
    })
}

/// A group's stored settings with another ordering and flow (the rest
/// kept as it is).
pub(super) fn with_gating(raw: &str, ordering: GroupOrdering, flow: &Flow) -> Result<String> {
    let mut v: Value = serde_json::from_str(raw).map_err(|e| corrupt("group", e))?;
    let settings = v.as_object_mut().ok_or_else(|| corrupt("group", raw))?;
    settings.insert("ordering".into(), ordering.as_str().into());
    settings.insert("flow".into(), flow_value(flow)?);
    Ok(v.to_string())
}

/// A flow as the settings hold it: an object, `{}` when every limit is off.
fn flow_value(flow: &Flow) -> Result<Value> {
    serde_json::to_value(flow).map_err(|e| corrupt("flow", e))
}
