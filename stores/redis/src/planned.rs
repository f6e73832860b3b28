//! Fetches planned from what this process last saw of a group's
//! partitions (`docs/backends.md#redis`): one round trip instead of a read
//! and then a write, when nothing was ready, due or expired and the events
//! past the cursor are enough to fill the fetch. The plan is decided by
//! the shared policy as a fresh read would be, and the write is guarded on
//! everything the plan assumed, so a stale view only costs the round trip:
//! the caller then reads. That includes the group's stream and settings,
//! whose incarnations tell a group (or stream) created again under a
//! deleted one's name from the deleted one (`lifecycle.rs`); a view names
//! the settings it was seen under and plans nothing for others, and the
//! views of a deleted group are dropped with it: a view of the old group
//! never plans a fetch of the new one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::claims::{Delivery, Entry, Status, entry_id, value};
use super::gates::member;
use super::{Applied, Cas, Phase, RedisBackend, Settings, corrupt, map_error};
use rheo_core::backend::policy::{GateState, GateWalk, Share, claim_capacity, round_robin};
use rheo_core::backend::{FetchRequest, Result};
use rheo_core::model::{Event, GroupName, Lease, LeaseId, StreamName};

/// A group partition as this process last saw it.
#[derive(Debug, Clone)]
pub(super) struct View {
    pub(super) cursor: u64,
    pub(super) high_watermark: u64,
    /// Nothing was ready, due or expired (a later fetch guards that it
    /// still is, see [`RedisBackend::fetch_planned`]).
    pub(super) quiet: bool,
    /// Under a gating, the events from `cursor` on as read ahead (the
    /// log is immutable, so they stay true while the stream does: a delete
    /// drops the views, and a plan is guarded on the stream): what a
    /// gated fetch plans its walk over
    /// ([`RedisBackend::fetch_ordered_planned`]).
    pub(super) ahead: Arc<[Arc<Event>]>,
    /// The group's settings as stored when it was seen: a view is of that
    /// group only, not of one created again under its name (whose settings
    /// have another incarnation).
    pub(super) of: Arc<str>,
}

impl View {
    /// The events `first..=last`, if all were read ahead.
    fn window(&self, first: u64, last: u64) -> Option<&[Arc<Event>]> {
        let start = self.ahead.first()?.sequence;
        let from = usize::try_from(first.checked_sub(start)?).ok()?;
        let to = usize::try_from(last.checked_sub(start)?).ok()?;
        self.ahead.get(from..=to)
    }
}

/// How many events a gated fetch reads ahead past its new cursor, for
/// the next fetch to plan over: twice its share, so that events parked
/// behind busy keys do not leave the next plan short.
pub(super) fn read_ahead(limit: usize, partitions: usize) -> usize {
    limit.div_ceil(partitions.max(1)).saturating_mul(2).max(32)
}

/// Decodes what a read ahead from `cursor` returned: the events from
/// `cursor` on, contiguous, or none.
pub(super) fn ahead_of(
    s: &StreamName,
    p: u32,
    cursor: u64,
    entries: Vec<Entry>,
) -> Result<Arc<[Arc<Event>]>> {
    let events = entries
        .into_iter()
        .map(|(entry, fields)| super::decode_event(s, p, &entry, fields).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    // Contiguous from the cursor, or nothing to plan over.
    let contiguous = events
        .iter()
        .enumerate()
        .all(|(i, e)| e.sequence == cursor + i as u64);
    Ok(if contiguous {
        events.into()
    } else {
        Arc::default()
    })
}

impl RedisBackend {
    /// The views of `selected` if every one was seen quiet, with at least
    /// `limit` new events past its cursor: a fresh read could not make a
    /// partition run short, so a plan over them is what a read would give.
    fn planned_views(
        &self,
        (s, g): (&StreamName, &GroupName),
        settings: &Settings,
        selected: &[u32],
        limit: usize,
    ) -> Option<Vec<View>> {
        let views: Vec<View> = {
            let views = self.views.lock();
            selected
                .iter()
                .map(|&p| views.get(&(s.clone(), g.clone(), p)).cloned())
                .collect::<Option<_>>()?
        };
        if views.iter().any(|v| *v.of != *settings.raw) {
            return None;
        }
        views
            .iter()
            .all(|v| v.quiet && claim_capacity(0, v.cursor, v.high_watermark) >= limit)
            .then_some(views)
    }

    /// Applies `cas` and reads in the same round trip, per (partition,
    /// from, count) of `reads`, `count` events of the log from sequence
    /// `from` and the partition's high watermark. `None` when the script
    /// did not apply (a guard failed, or Redis had lost the script, which
    /// is loaded again): nothing was written, the caller reads again.
    pub(super) async fn apply_and_read(
        &self,
        cas: &Cas,
        s: &StreamName,
        reads: &[(u32, u64, usize)],
    ) -> Result<Option<Vec<(Vec<Entry>, u64)>>> {
        let mut pipe = redis::pipe();
        pipe.add_command(self.cas_command(cas));
        for &(p, from, count) in reads {
            pipe.cmd("XRANGE")
                .arg(self.keys.log(s, p))
                .arg(entry_id(from))
                .arg("+")
                .arg("COUNT")
                .arg(count);
            pipe.cmd("HGET").arg(self.keys.high_watermarks(s)).arg(p);
        }
        // The script goes out with the reads.
        super::mark(Phase::Write);
        let replies: Vec<redis::Value> = match pipe.query_async(&mut self.conn.clone()).await {
            Ok(replies) => replies,
            Err(e) if super::is_noscript(&e) => {
                // Redis lost its scripts (a restart): load them; read again.
                self.load_cas().await?;
                return Ok(None);
            }
            Err(e) => return Err(map_error(e, Phase::Write)),
        };
        let mut replies = replies.into_iter();
        let mut next = || replies.next().ok_or_else(|| corrupt("reply", "too short"));
        let failed: i64 = value(next()?)?;
        if self.outcome(cas, failed).await? == Applied::Conflict {
            return Ok(None);
        }
        let mut read = Vec::with_capacity(reads.len());
        for _ in reads {
            let entries: Vec<Entry> = value(next()?)?;
            let high_watermark: Option<u64> = value(next()?)?;
            read.push((entries, high_watermark.unwrap_or(0)));
        }
        Ok(Some(read))
    }

    /// Forgets the views of `selected` (a plan over them failed).
    fn forget_views(&self, s: &StreamName, g: &GroupName, selected: &[u32]) {
        let mut views = self.views.lock();
        for &p in selected {
            views.remove(&(s.clone(), g.clone(), p));
        }
    }

    /// A fetch in one round trip, planned from the views this process
    /// keeps: when every selected partition was last seen with nothing
    /// ready, due or expired and at least `limit` new events, the policy
    /// shares the limit over those views exactly as it would over a fresh
    /// read (no partition can run short, so the larger true high watermarks
    /// change nothing), the claims are sent guarded by what the plan
    /// assumed (each cursor unchanged; no member of `ready`, none due in
    /// `delayed` or expired in `leased`), and the events and the high
    /// watermarks are read in the same pipeline. `None` when there is no
    /// such view or it no longer holds: the caller reads.
    pub(super) async fn fetch_planned(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        selected: &[u32],
        first: usize,
    ) -> Result<Option<Vec<Lease>>> {
        let (s, g) = (&req.stream, &req.group);
        let limit = req.limit as usize;
        let Some(views) = self.planned_views((s, g), settings, selected, limit) else {
            return Ok(None);
        };
        let capacity: Vec<usize> = views
            .iter()
            .map(|v| claim_capacity(0, v.cursor, v.high_watermark))
            .collect();
        let quotas = round_robin(&capacity, limit, first);
        let now = self.clock.now();
        let expires_at = now.add_ms(req.lease_ms);
        let now_ms = now.as_millis().to_string();
        let cursors = self.keys.cursors(s, g);
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut claimed = Vec::with_capacity(limit);
        let mut pipe_reads = Vec::new();
        for ((&p, view), &quota) in selected.iter().zip(&views).zip(&quotas) {
            let k = self.keys.partition(s, g, p);
            cas.zset_none_until(&k.ready, "+inf");
            cas.zset_none_until(&k.delayed, &now_ms);
            cas.zset_none_until(&k.leased, &now_ms);
            if quota == 0 {
                continue;
            }
            let field = p.to_string();
            cas.hget_is(&cursors, &field, Some(&view.cursor.to_string()));
            let next = view.cursor + quota as u64;
            for seq in view.cursor..next {
                let lease_id = LeaseId::generate();
                let new = Delivery::fresh().leased(&lease_id, &req.consumer_id, now, expires_at);
                self.place(&mut cas, &k, seq, None, &new);
                claimed.push((p, seq, 1, lease_id));
            }
            cas.write(&["HSET", &cursors, &field, &next.to_string()]);
            pipe_reads.push((p, view.cursor, quota, next));
        }
        let reads: Vec<(u32, u64, usize)> = pipe_reads
            .iter()
            .map(|&(p, cursor, quota, _)| (p, cursor, quota))
            .collect();
        let Some(read) = self.apply_and_read(&cas, s, &reads).await? else {
            self.forget_views(s, g, selected);
            return Ok(None);
        };
        let mut events = HashMap::with_capacity(claimed.len());
        for (&(p, _, _, cursor), (entries, high_watermark)) in pipe_reads.iter().zip(read) {
            for (entry, fields) in entries {
                let event = super::decode_event(s, p, &entry, fields)?;
                events.insert((p, event.sequence), Arc::new(event));
            }
            let view = View {
                cursor,
                high_watermark,
                quiet: true,
                ahead: Arc::default(),
                of: Arc::clone(&settings.raw),
            };
            self.views.lock().insert((s.clone(), g.clone(), p), view);
        }
        let leases = self.leases(req, settings, claimed, events, (now, expires_at))?;
        Ok(Some(leases))
    }

    /// A gated fetch in one round trip (`docs/groups.md#ordering`,
    /// `docs/groups.md#flow`),
    /// planned like [`Self::fetch_planned`] and walking the events this
    /// process read ahead: when every selected partition was last seen
    /// quiet with at least `limit` new events, and the group's gates were
    /// not lately found crowded, the shared walk runs over the events read
    /// ahead, taking every gate it passes to be free. The claims, the
    /// parked events, the gates' members and the cursors are sent guarded
    /// on all of that (each cursor unchanged; nothing ready, due or
    /// expired; each gate passed without an open delivery), with the next
    /// read ahead in the same pipeline. `None` when the plan cannot be made
    /// (a walk would need an event not read ahead, or a partition would
    /// give less than asked) or no longer holds: the caller reads.
    pub(super) async fn fetch_ordered_planned(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        selected: &[u32],
        first: usize,
    ) -> Result<Option<Vec<Lease>>> {
        let (s, g) = (&req.stream, &req.group);
        let gating = settings.config.gating();
        let group = (s.clone(), g.clone());
        if self.crowded.lock().contains(&group) {
            return Ok(None);
        }
        let limit = req.limit as usize;
        let Some(views) = self.planned_views((s, g), settings, selected, limit) else {
            return Ok(None);
        };
        if views.iter().any(|v| v.ahead.is_empty()) {
            return Ok(None);
        }
        let bound: Vec<usize> = views
            .iter()
            .map(|v| claim_capacity(0, v.cursor, v.high_watermark))
            .collect();
        // The walks, over what was read ahead; every gate a walk passes
        // is taken to be free (and guarded so).
        let mut share = Share::new(bound, limit, first);
        let mut walks: Vec<Option<GateWalk>> = selected.iter().map(|_| None).collect();
        let mut free: Vec<HashSet<String>> = vec![HashSet::new(); selected.len()];
        while !share.done() {
            for (i, ask) in share.asks().into_iter().enumerate() {
                if ask == 0 {
                    continue;
                }
                let view = &views[i];
                let walk = walks[i].get_or_insert_with(|| GateWalk::new(gating, view.cursor, 0));
                let before = walk.lease.len();
                walk.want_more(ask);
                while let Some((a, b)) = walk.window(view.high_watermark) {
                    let Some(window) = view.window(a, b) else {
                        return Ok(None);
                    };
                    let pairs: Vec<(u64, Option<String>)> =
                        window.iter().map(|e| (e.sequence, e.key.clone())).collect();
                    free[i].extend(walk.to_ask(&pairs));
                    walk.pass(pairs, |_| GateState::FREE);
                }
                let got = walk.lease.len() - before;
                if got < ask {
                    // A fresh read might find more (the views' high
                    // watermarks are a floor): not plannable.
                    return Ok(None);
                }
                share.gave(i, ask, got);
            }
        }

        let now = self.clock.now();
        let expires_at = now.add_ms(req.lease_ms);
        let now_ms = now.as_millis().to_string();
        let cursors = self.keys.cursors(s, g);
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut claimed = Vec::with_capacity(limit);
        let mut events: HashMap<(u32, u64), Arc<Event>> = HashMap::with_capacity(limit);
        let mut moved = Vec::new();
        for (i, &p) in selected.iter().enumerate() {
            let k = self.keys.partition(s, g, p);
            cas.zset_none_until(&k.ready, "+inf");
            cas.zset_none_until(&k.delayed, &now_ms);
            cas.zset_none_until(&k.leased, &now_ms);
            let Some(walk) = walks[i].take() else {
                continue;
            };
            let view = &views[i];
            let field = p.to_string();
            cas.hget_is(&cursors, &field, Some(&view.cursor.to_string()));
            // Every gate passed had nothing open; now it has what the walk
            // added to it.
            let mut joined: HashMap<&str, u64> = HashMap::new();
            for (_, gate) in &walk.lease {
                if let Some(gate) = gate {
                    *joined.entry(gate).or_default() += 1;
                }
            }
            for (_, gate) in &walk.park {
                *joined.entry(gate).or_default() += 1;
            }
            for gate in &free[i] {
                cas.hget_is(&k.counts, gate, None);
                if let Some(n) = joined.get(gate.as_str()) {
                    cas.write(&["HSET", &k.counts, gate, &n.to_string()]);
                }
            }
            for (seq, gate) in walk.lease {
                let lease_id = LeaseId::generate();
                let new = Delivery::fresh().leased(&lease_id, &req.consumer_id, now, expires_at);
                self.place(&mut cas, &k, seq, None, &new);
                if let Some(gate) = gate {
                    cas.write(&["ZADD", &k.gates, "0", &member(&gate, seq)]);
                }
                let event = view
                    .window(seq, seq)
                    .and_then(|e| e.first())
                    .ok_or_else(|| corrupt("read ahead", format!("{p}:{seq}")))?;
                events.insert((p, seq), Arc::clone(event));
                claimed.push((p, seq, 1, lease_id));
            }
            for (seq, gate) in walk.park {
                let parked = Delivery {
                    status: Status::Parked,
                    ..Delivery::fresh()
                };
                self.place(&mut cas, &k, seq, None, &parked);
                cas.write(&["ZADD", &k.gates, "0", &member(&gate, seq)]);
            }
            cas.write(&["HSET", &cursors, &field, &walk.next.to_string()]);
            moved.push((p, walk.next));
        }
        // What each moved partition keeps of its read ahead (from its new
        // cursor on), and reads more of in the same round trip.
        let ahead = read_ahead(limit, selected.len());
        let mut kept: Vec<Vec<Arc<Event>>> = Vec::with_capacity(moved.len());
        let mut reads = Vec::with_capacity(moved.len());
        for &(p, next) in &moved {
            let i = selected.iter().position(|&q| q == p).expect("selected");
            let left: Vec<Arc<Event>> = views[i]
                .ahead
                .iter()
                .filter(|e| e.sequence >= next)
                .cloned()
                .collect();
            let from = left.last().map_or(next, |e| e.sequence + 1);
            reads.push((p, from, ahead.saturating_sub(left.len()).max(1)));
            kept.push(left);
        }
        let Some(read) = self.apply_and_read(&cas, s, &reads).await? else {
            // A gate taken to be free may be busy: the next fetches ask.
            self.crowded.lock().insert(group);
            self.forget_views(s, g, selected);
            return Ok(None);
        };
        for (((&(p, cursor), &(_, from, _)), mut left), (entries, high_watermark)) in
            moved.iter().zip(&reads).zip(kept).zip(read)
        {
            left.extend(ahead_of(s, p, from, entries)?.iter().cloned());
            let contiguous = left
                .iter()
                .enumerate()
                .all(|(i, e)| e.sequence == cursor + i as u64);
            let view = View {
                cursor,
                high_watermark,
                quiet: true,
                ahead: if contiguous {
                    left.into()
                } else {
                    Arc::default()
                },
                of: Arc::clone(&settings.raw),
            };
            self.views.lock().insert((s.clone(), g.clone(), p), view);
        }
        let leases = self.leases(req, settings, claimed, events, (now, expires_at))?;
        Ok(Some(leases))
    }
}
