//! `flow.key_rate` on Redis (`docs/groups.md#flow`, `docs/backends.md#redis`):
//! a token bucket per (group, partition, event key), shared by every
//! server on the store.
//!
//! Each partition keeps its keys' TATs in one sorted set
//! ([`Keys::tats`](super::Keys::tats)): member the key, score the TAT in
//! microseconds since the epoch (exact in a double for the next 250
//! years). A fetch of a key-rate group loads the TATs of the keys it may
//! claim (`ZMSCORE`), lets the shared [`Pacer`] decide, and writes the TATs
//! it moved in the same `cas.lua` script as its claims, guarded on each
//! TAT it moved being what it loaded (`Cas::zscore_is`): of two racing
//! fetches, on one node or two, that read the same TAT, one only writes;
//! the other reads again, so no token is spent twice. A passed TAT is a
//! full bucket, like none: the script drops those passed more than
//! [`TAT_GRACE_MS`] ago and gives the set a time to live reaching its
//! last TAT (plus that grace), so TATs expire by themselves. The sets are
//! among a group's keys, removed with the group or its stream and by a
//! reset of their partition.

use std::collections::HashMap;
use std::sync::Arc;

use super::claims::value;
use super::{Cas, PartitionKeys, Phase, RedisBackend, TAT_GRACE_MS, map_error};
use rheo_core::backend::Result;
use rheo_core::backend::policy::{Candidate, Gating, Pace, Pacer};
use rheo_core::model::{GroupName, StreamName, Timestamp};

/// The key rate of one fetch: a [`Pacer`] per selected partition (TATs are
/// per partition), with the TATs as loaded, which its write is guarded on.
#[derive(Debug)]
pub(super) struct Rates {
    on: bool,
    now: Timestamp,
    pacers: Vec<Pacer>,
    /// Per selected partition, each loaded key's TAT (`None`: none stored).
    loaded: Vec<HashMap<String, Option<i64>>>,
}

impl Rates {
    /// The rates of a fetch at `now` of `partitions` selected partitions
    /// (off without a key rate: every claim goes out, nothing is loaded).
    pub(super) fn new(gating: Gating, now: Timestamp, partitions: usize) -> Self {
        Self {
            on: gating.key_rate().is_some(),
            now,
            pacers: (0..partitions).map(|_| gating.pacer(now)).collect(),
            loaded: vec![HashMap::new(); partitions],
        }
    }

    /// Whether the group has a key rate.
    pub(super) fn is_on(&self) -> bool {
        self.on
    }

    /// The pacer of the `i`th selected partition.
    pub(super) fn pacer(&mut self, i: usize) -> &mut Pacer {
        &mut self.pacers[i]
    }

    /// What the claim of `candidate`, a delivery of the `i`th selected
    /// partition with `key`, finds ([`Pacer::claim`]).
    pub(super) fn claim(&mut self, i: usize, key: Option<&str>, candidate: Candidate) -> Pace {
        self.pacers[i].claim(key, candidate)
    }

    /// Writes the TATs the `i`th selected partition's claims moved, guarded
    /// on each being as loaded, drops those long passed and keeps the set
    /// alive until its last one has passed.
    pub(super) fn write(&self, cas: &mut Cas, i: usize, k: &PartitionKeys) {
        let pacer = &self.pacers[i];
        if !pacer.has_changes() {
            return;
        }
        let now_us = self.now.as_millis().saturating_mul(1000);
        let grace_us = TAT_GRACE_MS * 1000;
        let mut last = now_us;
        for (key, _) in pacer.changed() {
            let loaded = self.loaded[i].get(key).copied().flatten();
            cas.zscore_is(&k.tats, key, loaded);
        }
        let passed = format!("({}", now_us.saturating_sub(grace_us));
        cas.write(&["ZREMRANGEBYSCORE", &k.tats, "-inf", &passed]);
        for (key, tat) in pacer.changed() {
            last = last.max(tat);
            cas.write(&["ZADD", &k.tats, &tat.to_string(), key]);
        }
        // Relative to this node's clock: a store whose clock differs from
        // it keeps the TATs as long all the same.
        let ttl_ms = (last - now_us).div_euclid(1000) + 1 + TAT_GRACE_MS;
        cas.write(&["PEXPIRE>", &k.tats, &ttl_ms.to_string()]);
    }
}

impl RedisBackend {
    /// Loads into `rates` the TATs of the keys that `asks` name, per
    /// selected partition (its index and the keys), that its pacer does
    /// not hold yet, in one round trip.
    pub(super) async fn load_tats(
        &self,
        (s, g): (&StreamName, &GroupName),
        selected: &[u32],
        rates: &mut Rates,
        asks: Vec<(usize, Vec<Option<Arc<str>>>)>,
    ) -> Result<()> {
        if !rates.on {
            return Ok(());
        }
        let mut wanted: Vec<(usize, Vec<String>)> = Vec::new();
        for (i, keys) in asks {
            let unknown = rates.pacers[i].unknown(keys.iter().map(|k| k.as_deref()));
            if !unknown.is_empty() {
                wanted.push((i, unknown));
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (i, keys) in &wanted {
            pipe.cmd("ZMSCORE")
                .arg(self.keys.tats(s, g, selected[*i]))
                .arg(keys);
        }
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        for ((i, keys), reply) in wanted.into_iter().zip(replies) {
            let scores: Vec<Option<f64>> = value(reply)?;
            for (key, score) in keys.into_iter().zip(scores) {
                // Integers below 2^53: exact in a double.
                #[allow(clippy::cast_possible_truncation)]
                let tat = score.map(|v| v.round() as i64);
                rates.loaded[i].insert(key.clone(), tat);
                rates.pacers[i].load(key, tat);
            }
        }
        Ok(())
    }
}
