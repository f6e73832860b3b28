//! Group ordering and flow control on Redis (`docs/groups.md#ordering`,
//! `docs/groups.md#flow`, `docs/backends.md#redis`).
//!
//! Every open delivery of a gated group that has a gate (its key, or its
//! partition) is a member of the partition's `gates` sorted set, all
//! scored 0 and named gate-then-sequence, so that one gate's open
//! deliveries are one lex range in sequence order and its lowest are one
//! `ZRANGEBYLEX … LIMIT` away; the partition's `gatecounts` hash says how
//! many each gate has. A gate's heads (available or leased: at most its
//! slots, [`Gating::slots`], one under an ordering) are in the claim
//! indexes as any delivery; its other open deliveries are *parked*: their
//! records say `P`, and they are in no claim index.
//!
//! Every store keeps the shared rule ([`regate`]): a gate's heads are its
//! deliveries out and, for the slots left, its lowest open deliveries
//! that are not out. So a gate has parked deliveries only while its heads
//! fill its slots, and its count says what a walk must know of it
//! ([`GateState::of_open`]); and its heads that are not out are among its lowest
//! members that are not out, so a settle reads only the gate's first
//! members ([`GateView`]).
//!
//! What a fetch, a settle or a re-open decides from a gate it read is
//! written guarded on that read (the count, the range's first members and
//! their records unchanged), so two servers never let more deliveries of
//! one gate out than it has slots. The walk over unseen events is the
//! shared one ([`GateWalk`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::claims::{Delivery, Entry, Slot, Status};
use super::planned::{ahead_of, read_ahead};
use super::rates::Rates;
use super::{Applied, Cas, PartitionKeys, Phase, RedisBackend, Settings};
use super::{corrupt, map_error};
use rheo_core::backend::policy::{
    Candidate, GateState, GateView as Gate, GateWalk, Gating, Pace, Regate, Share, WALK_PER_CLAIM,
    Write, claim_capacity, poison_write, regate,
};
use rheo_core::backend::{FetchRequest, Result};
use rheo_core::model::{Event, GroupName, Lease, LeaseId, StreamName, Timestamp};

/// The member of the delivery at `seq` in its gate: the gate's length in
/// bytes, the gate and the zero-padded sequence, so that a gate's members
/// are exactly those starting with its length and name, whatever
/// characters a key holds, and sort by sequence.
pub(super) fn member(gate: &str, seq: u64) -> String {
    format!("{:05}:{gate}:{seq:020}", gate.len())
}

/// The lex range (min, max) of a gate's members.
pub(super) fn range(gate: &str) -> [String; 2] {
    let prefix = format!("{:05}:{gate}", gate.len());
    // Every member of the gate is `prefix:` and digits: at or after
    // `prefix:`, before `prefix;` (`;` follows `:`).
    [format!("[{prefix}:"), format!("({prefix};")]
}

/// The sequence of a [`member`].
pub(super) fn sequence_of(member: &str) -> Result<u64> {
    member
        .rsplit_once(':')
        .and_then(|(_, seq)| seq.parse().ok())
        .ok_or_else(|| corrupt("gate member", member.escape_debug()))
}

/// A gate's count of open deliveries as stored (`None`: none).
pub(super) fn parse_count(count: Option<&str>) -> Result<usize> {
    count.map_or(Ok(0), |raw| {
        raw.parse().map_err(|_| corrupt("gate count", raw))
    })
}

/// A gate as a settle of some of its heads (or a trim that closes some of
/// its deliveries) read it (`gate_view.lua`): its count and, when it has
/// more open deliveries than slots (some are parked), its first members
/// with the records of those that are not settled.
///
/// Those are enough: at most `slots` deliveries are out, so the first
/// `2 × slots` members hold the gate's lowest `slots` ones that are not out
/// (all of them, or at least `slots`), its heads that are not out among
/// them; how many are out among the members not read is what the count
/// says is left ([`GateView::step`]).
#[derive(Debug)]
pub(super) struct GateView {
    gate: String,
    slots: usize,
    /// The range read: the gate's, or its part a trim keeps.
    range: [String; 2],
    /// How many of its first members were asked for (0: none).
    window: usize,
    /// The gate's count of open deliveries, as read (`None`: none).
    count: Option<String>,
    /// The range's first members as read, when read (its count is above
    /// its slots).
    firsts: Option<Vec<String>>,
    /// Those of [`GateView::firsts`] that are not settled: sequence and
    /// record (`None`: none), in sequence order.
    others: Vec<(u64, Option<(String, Delivery)>)>,
}

/// One gate a settle (or a trim) asks `gate_view.lua` about: its keys, the
/// range to read, and the settled members, which it does not read.
pub(super) struct GateAsk<'a> {
    pub(super) k: &'a PartitionKeys,
    pub(super) gate: String,
    pub(super) slots: usize,
    /// The range's min, where it is not the gate's own (a trim's `upto`).
    pub(super) from: Option<u64>,
    /// Whether the members are wanted at all.
    pub(super) members: bool,
    pub(super) mine: Vec<u64>,
}

impl GateView {
    /// The gate's count as read.
    pub(super) fn count(&self) -> Result<usize> {
        parse_count(self.count.as_deref())
    }

    /// The gate's count as stored when read (`None`: none).
    pub(super) fn raw_count(&self) -> Option<&str> {
        self.count.as_deref()
    }

    /// Whether a batch that settles `settled` of its deliveries could have
    /// guessed it right without reading it: they are its only open ones.
    pub(super) fn holds_only(&self, settled: usize) -> bool {
        self.count().is_ok_and(|c| c == settled)
    }

    /// Guards `cas` on what was read of the gate's members (the count is
    /// the caller's: it writes it).
    fn guard_members(&self, cas: &mut Cas, k: &PartitionKeys) {
        let Some(firsts) = &self.firsts else { return };
        cas.lex_first_are(&k.gates, self.range.clone(), self.window, firsts.clone());
        for (seq, record) in &self.others {
            let raw = record.as_ref().map(|(raw, _)| raw.as_str());
            cas.hget_is(&k.records, &seq.to_string(), raw);
        }
    }

    /// What the shared rule ([`regate`]) changes of the gate as read, once
    /// `gone` of its heads are settled or closed (heads no longer: their
    /// gate is read without them) and `retried` of them wait again, not
    /// out. `None` when its members were not read: it has no parked
    /// delivery, so every open one stays a head.
    fn step(&self, gone: usize, retried: &[u64]) -> Result<Option<Regate>> {
        if self.firsts.is_none() {
            return Ok(None);
        }
        let heads_before = self.count()?.min(self.slots);
        let status = |want: Status| {
            self.others
                .iter()
                .filter(move |(_, r)| r.as_ref().is_some_and(|(_, d)| d.status == want))
                .map(|(seq, _)| *seq)
        };
        let heads: Vec<u64> = status(Status::Available).collect();
        let leased_seen = status(Status::Leased).count();
        // The heads left are out, or handed out (all of those among the
        // members read).
        let out = heads_before
            .saturating_sub(gone + heads.len())
            .max(leased_seen);
        let mut waiting: Vec<u64> = status(Status::Available)
            .chain(status(Status::Parked))
            .chain(retried.iter().copied())
            .collect();
        waiting.sort_unstable();
        Ok(Some(regate(&Gate {
            slots: self.slots,
            out,
            heads,
            waiting,
        })))
    }

    /// Writes `step`'s changes of the members read (records and claim
    /// indexes); whether one was let through.
    fn apply(
        &self,
        backend: &RedisBackend,
        cas: &mut Cas,
        k: &PartitionKeys,
        step: &Regate,
    ) -> bool {
        let mut released = false;
        for (seq, record) in &self.others {
            let Some((_, d)) = record else { continue };
            let status = if step.release.contains(seq) {
                released = true;
                Status::Available
            } else if step.park.contains(seq) {
                Status::Parked
            } else {
                continue;
            };
            if status != d.status {
                let moved = Delivery {
                    status,
                    ..d.clone()
                };
                backend.place(cas, k, *seq, Some(Slot::of(d)), &moved);
            }
        }
        released
    }
}

/// Per (partition, gate), in the order first met, the indexes of the
/// items `gated` names: (index, partition, gate).
pub(super) fn by_gate(gated: &[(usize, u32, String)]) -> Vec<((u32, String), Vec<usize>)> {
    let mut out: Vec<((u32, String), Vec<usize>)> = Vec::new();
    let mut at: HashMap<(u32, String), usize> = HashMap::new();
    for (i, p, gate) in gated {
        let key = (*p, gate.clone());
        match at.get(&key) {
            Some(&j) => out[j].1.push(*i),
            None => {
                at.insert(key.clone(), out.len());
                out.push((key, vec![*i]));
            }
        }
    }
    out
}

/// A re-opened delivery, decided but not written yet.
#[derive(Debug)]
pub(super) struct Reopened {
    pub(super) seq: u64,
    /// Its record as read (`None`: it had none).
    pub(super) raw: Option<String>,
    pub(super) new: Delivery,
}

/// One partition asked for claims in a round of a gated fetch: its
/// index, the ask, how many it re-claimed, and its walk (an index into the
/// fetch's walks) with what that walk had leased before the round.
type Asked = (usize, usize, usize, Option<(usize, usize)>);

/// One partition's walk over its unseen events in a gated fetch.
struct Walking {
    /// Index into the fetch's selected partitions.
    at: usize,
    walk: GateWalk,
    cursor: u64,
    cursor_raw: Option<String>,
    high_watermark: u64,
    /// What the candidates read ahead of the cursor.
    ahead: Vec<Entry>,
}

impl RedisBackend {
    /// How many open deliveries each (partition, gate) has, as its count
    /// reads raw (`None`: none), in one round trip.
    async fn gate_counts(
        &self,
        s: &StreamName,
        g: &GroupName,
        gates: &[(u32, String)],
    ) -> Result<Vec<Option<String>>> {
        if gates.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (p, gate) in gates {
            pipe.cmd("HGET").arg(self.keys.counts(s, g, *p)).arg(gate);
        }
        pipe.query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))
    }

    /// The key of the event at each position: `known` where this process
    /// kept it, else read from the log (none for an event retention
    /// removed since its position was read: every caller's write is
    /// guarded on the delivery's record or the log start, which that trim
    /// changed, so it reads again).
    pub(super) async fn keys_at(
        &self,
        s: &StreamName,
        positions: &[(u32, u64)],
        known: Vec<Option<Option<Arc<str>>>>,
    ) -> Result<Vec<Option<Arc<str>>>> {
        let missing: Vec<(u32, u64)> = positions
            .iter()
            .zip(&known)
            .filter(|(_, k)| k.is_none())
            .map(|(at, _)| *at)
            .collect();
        let events = self.events_at(s, &missing).await?;
        Ok(positions
            .iter()
            .zip(known)
            .map(|(at, k)| match k {
                Some(key) => key,
                None => events.get(at).and_then(|e| e.key.as_deref().map(Arc::from)),
            })
            .collect())
    }

    /// The gates `asks` name as a settle or a trim needs them
    /// ([`GateView`]), in one round trip (`gate_view.lua`).
    pub(super) async fn gate_views(&self, asks: &[GateAsk<'_>]) -> Result<Vec<GateView>> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.gate_view.prepare_invoke();
        let mut ranges = Vec::with_capacity(asks.len());
        for ask in asks {
            let [min, max] = range(&ask.gate);
            let min = match ask.from {
                Some(from) => format!("[{}", member(&ask.gate, from)),
                None => min,
            };
            let window = if ask.members { 2 * ask.slots } else { 0 };
            invocation
                .arg(&ask.k.gates)
                .arg(&ask.k.records)
                .arg(&min)
                .arg(&max)
                .arg(&ask.k.counts)
                .arg(&ask.gate)
                .arg(ask.slots)
                .arg(window)
                .arg(ask.mine.len());
            for seq in &ask.mine {
                invocation.arg(member(&ask.gate, *seq));
            }
            ranges.push(([min, max], window));
        }
        #[allow(clippy::type_complexity)]
        let replies: Vec<(Vec<String>, Vec<Option<String>>, Option<String>)> = invocation
            .invoke_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        if replies.len() != asks.len() {
            return Err(corrupt("gate view", format!("{} replies", replies.len())));
        }
        asks.iter()
            .zip(ranges)
            .zip(replies)
            .map(|((ask, (range, window)), (firsts, records, count))| {
                let read = window > 0 && parse_count(count.as_deref())? > ask.slots;
                let mut others = Vec::new();
                for (i, m) in firsts.iter().enumerate() {
                    let seq = sequence_of(m)?;
                    if ask.mine.contains(&seq) {
                        continue;
                    }
                    let record = match records.get(i).cloned().flatten() {
                        Some(raw) => {
                            let delivery = Delivery::decode(&raw)?;
                            Some((raw, delivery))
                        }
                        None => None,
                    };
                    others.push((seq, record));
                }
                Ok(GateView {
                    gate: ask.gate.clone(),
                    slots: ask.slots,
                    range,
                    window,
                    count,
                    firsts: read.then_some(firsts),
                    others,
                })
            })
            .collect()
    }

    /// Keeps the gate's rule when its heads `settled` — (sequence, the
    /// record the settle policy made), all out until now — are settled,
    /// guarded on `view` (read with them as its settled members): an ack
    /// or a dead letter takes a head out of its gate, a retry has it wait
    /// again, and the gate then gets the heads the shared rule gives it
    /// ([`regate`]): its deliveries still out and, for the slots left, its
    /// lowest open ones — the retried ones themselves, or the gate's
    /// lowest parked ones. A retried delivery that is not a head any more
    /// is parked (its record in `settled` says so). Returns whether another
    /// delivery was let through (claimable now or at its due time).
    pub(super) fn settle_gated(
        &self,
        cas: &mut Cas,
        k: &PartitionKeys,
        view: &GateView,
        settled: &mut [(u64, Delivery)],
    ) -> Result<bool> {
        cas.hget_is(&k.counts, &view.gate, view.count.as_deref());
        view.guard_members(cas, k);
        let closes = |d: &Delivery| matches!(d.status, Status::Acked | Status::Dead);
        let mut closed = 0;
        for (seq, new) in settled.iter() {
            if closes(new) {
                cas.write(&["ZREM", &k.gates, &member(&view.gate, *seq)]);
                closed += 1;
            }
        }
        if closed > 0 {
            // The settled deliveries are open members: at least that many.
            let count = view.count()?.max(settled.len());
            match count - closed {
                0 => cas.write(&["HDEL", &k.counts, &view.gate]),
                left => cas.write(&["HSET", &k.counts, &view.gate, &left.to_string()]),
            }
        }
        let retried: Vec<u64> = (settled.iter())
            .filter(|(_, new)| !closes(new))
            .map(|(seq, _)| *seq)
            .collect();
        let Some(step) = view.step(settled.len(), &retried)? else {
            // Nothing parked: every open delivery stays a head.
            return Ok(false);
        };
        for (seq, new) in settled.iter_mut() {
            if !closes(new) && !step.release.contains(seq) {
                new.status = Status::Parked;
            }
        }
        Ok(view.apply(self, cas, k, &step))
    }

    /// Keeps the gate's rule when a trim closed `closed` of its heads
    /// (with parked deliveries perhaps) below the range `view` read: the
    /// gate gets the heads the shared rule gives it from what it keeps
    /// ([`regate`]), guarded on `view` (its count is the caller's to guard
    /// and write). Whether a delivery was let through.
    pub(super) fn regate_kept(
        &self,
        cas: &mut Cas,
        k: &PartitionKeys,
        view: &GateView,
        closed: usize,
    ) -> Result<bool> {
        view.guard_members(cas, k);
        let Some(step) = view.step(closed, &[])? else {
            return Ok(false);
        };
        Ok(view.apply(self, cas, k, &step))
    }

    /// A fetch of a gated group (`docs/groups.md#ordering`,
    /// `docs/groups.md#flow`): re-claims as any fetch (claimable deliveries
    /// are heads, or have no gate), then walks each partition's unseen
    /// events by the shared rule, asking the gate counts how many open
    /// deliveries each gate it passes has ([`GateState::of_open`]). The
    /// claims, the parked deliveries, the new members and the cursors are
    /// written in one script guarded by the records, the cursors and the
    /// gates it read. A fetch that finds poison dead-letters it (letting
    /// its gate's next delivery through) or quarantines it
    /// ([`bury`](Self::bury)) and runs again. `None` when another node
    /// changed what it read.
    ///
    /// A group with `flow.key_rate` (`docs/groups.md#flow`), gated or not,
    /// is fetched here too: every claim of a keyed delivery, re-claimed or
    /// unseen, takes a token of its key's bucket (`rates.rs`); one that
    /// finds none is paced — written available, due at its reserved slot,
    /// with its mark, still a head of its gate — and does not count toward
    /// the partition's share (the claims go on past it, in sequence
    /// order, reading more candidates when it may have more). A delivery
    /// whose lease expired is never paced, only counted in its bucket. The
    /// TATs moved are written in the same script, guarded on each as read.
    pub(super) async fn fetch_ordered(
        &self,
        req: &FetchRequest,
        settings: &Settings,
        selected: &[u32],
        first: usize,
    ) -> Result<Option<Vec<Lease>>> {
        let (s, g) = (&req.stream, &req.group);
        let gating = settings.config.gating();
        let now = self.clock.now();
        let expires_at = now.add_ms(req.lease_ms);
        let limit = req.limit as usize;
        // The first window of a walk holds at least 16 events.
        let ahead = limit.div_ceil(selected.len()).max(16);
        let mut parts = self
            .candidates(s, g, selected, (now, limit, ahead), settings)
            .await?;
        if parts.iter().any(|p| !p.poison.is_empty()) {
            let poison: Vec<(u32, u64, String, Delivery)> = selected
                .iter()
                .zip(&mut parts)
                .flat_map(|(&p, part)| {
                    std::mem::take(&mut part.poison)
                        .into_iter()
                        .map(move |(seq, raw, d)| (p, seq, raw, d))
                })
                .collect();
            self.bury(s, g, settings, poison, now).await?;
            return Ok(None);
        }
        // Each partition's share by the shared rule (docs/groups.md#fairness):
        // its claimable heads first, then a walk over its unseen events; a
        // walk that comes back short has no more, and its share goes to the
        // others, whose walks go on.
        let bound: Vec<usize> = parts
            .iter()
            .map(|c| claim_capacity(c.claimable.len(), c.cursor, c.high_watermark))
            .collect();
        let mut share = Share::new(bound, limit, first);
        // Under `flow.key_rate` every claim of a keyed delivery takes a
        // token of its key (`rates.rs`): the claimable deliveries' keys
        // and their TATs are read first.
        let mut rates = Rates::new(gating, now, selected.len());
        let mut claimable_keys: Vec<Vec<Option<Arc<str>>>> = vec![Vec::new(); parts.len()];
        if rates.is_on() {
            let positions: Vec<(u32, u64)> = selected
                .iter()
                .zip(&parts)
                .flat_map(|(&p, part)| part.claimable.iter().map(move |(seq, ..)| (p, *seq)))
                .collect();
            let mut keys = self
                .keys_at(s, &positions, vec![None; positions.len()])
                .await?
                .into_iter();
            for (i, part) in parts.iter().enumerate() {
                claimable_keys[i] = keys.by_ref().take(part.claimable.len()).collect();
            }
            let asks = claimable_keys.iter().cloned().enumerate().collect();
            self.load_tats((s, g), selected, &mut rates, asks).await?;
        }
        // Gates are asked before deciding only in a group where they were
        // lately found busy; elsewhere each is taken to be free and the
        // write guarded on it, which saves a round trip when consumers
        // keep up (`docs/backends.md#redis`).
        let group = (s.clone(), g.clone());
        let optimistic = !self.crowded.lock().contains(&group);
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut claimed: Vec<(u32, u64, u32, LeaseId)> = Vec::new();
        let mut reclaimed = vec![0; parts.len()];
        let mut walks: Vec<Walking> = Vec::new();
        let mut events: HashMap<(u32, u64), Arc<Event>> = HashMap::new();
        let mut probed: HashMap<(u32, String), Option<String>> = HashMap::new();
        while !share.done() {
            // Per partition asked: its index, the ask, how many it
            // re-claimed now, and its walk with what the walk had leased
            // before.
            let mut asked: Vec<Asked> = Vec::new();
            for (i, ask) in share.asks().into_iter().enumerate() {
                if ask == 0 {
                    continue;
                }
                let (p, part) = (selected[i], &mut parts[i]);
                let k = self.keys.partition(s, g, p);
                // Claimable deliveries in sequence order until the ask is
                // met; one whose key has no token is paced, available and
                // due at its reserved slot (a gate's head still), and the
                // next one is taken instead — read past those read first
                // while the partition may have more, so that no unseen
                // event goes before them. A partition that looked at as
                // many as one claim may ([`WALK_PER_CLAIM`]) is spent for
                // this fetch.
                let (mut take, mut spent) = (0, false);
                while take < ask {
                    let read = reclaimed[i] == part.claimable.len();
                    if read && !part.more {
                        break;
                    }
                    if rates.is_on() && reclaimed[i] >= WALK_PER_CLAIM {
                        spent = true;
                        break;
                    }
                    if read {
                        let added = self.more_claimable((s, g), p, part, now).await?;
                        if added == 0 {
                            continue;
                        }
                        let positions: Vec<(u32, u64)> = part.claimable[reclaimed[i]..]
                            .iter()
                            .map(|(seq, ..)| (p, *seq))
                            .collect();
                        let keys = (self.keys_at(s, &positions, vec![None; added])).await?;
                        claimable_keys[i].extend(keys.iter().cloned());
                        self.load_tats((s, g), selected, &mut rates, vec![(i, keys)])
                            .await?;
                        continue;
                    }
                    let (seq, raw, delivery) = &part.claimable[reclaimed[i]];
                    let key = claimable_keys[i].get(reclaimed[i]).cloned().flatten();
                    reclaimed[i] += 1;
                    cas.hget_is(&k.records, &seq.to_string(), Some(raw));
                    let candidate = if delivery.status == Status::Leased {
                        Candidate::Expired
                    } else {
                        Candidate::Due {
                            paced: delivery.paced,
                        }
                    };
                    let pace = rates.claim(i, key.as_deref(), candidate);
                    let new = match pace {
                        Pace::Now => {
                            let lease_id = LeaseId::generate();
                            let leased = delivery.clone().leased(
                                &lease_id,
                                &req.consumer_id,
                                now,
                                expires_at,
                            );
                            claimed.push((p, *seq, leased.attempt, lease_id));
                            take += 1;
                            leased
                        }
                        Pace::At(due) => delivery.clone().paced(due),
                    };
                    self.place(&mut cas, &k, *seq, Some(Slot::of(delivery)), &new);
                }
                let walk = (ask > take && !spent).then(|| {
                    let w = match walks.iter().position(|w| w.at == i) {
                        Some(w) => w,
                        None => {
                            walks.push(Walking {
                                at: i,
                                walk: GateWalk::new(gating, part.cursor, 0),
                                cursor: part.cursor,
                                cursor_raw: part.cursor_raw.clone(),
                                high_watermark: part.high_watermark,
                                ahead: std::mem::take(&mut part.ahead),
                            });
                            walks.len() - 1
                        }
                    };
                    walks[w].walk.want_more(ask - take);
                    (w, walks[w].walk.lease.len())
                });
                asked.push((i, ask, take, walk));
            }
            self.walk(
                (s, g),
                selected,
                &mut walks,
                (&mut events, &mut probed, &mut rates),
                (optimistic, gating.slots()),
            )
            .await?;
            for (i, ask, take, walk) in asked {
                let walked = walk.map_or(0, |(w, before)| walks[w].walk.lease.len() - before);
                share.gave(i, ask, take + walked);
            }
        }
        let mut fresh_events: HashMap<(u32, u64), Arc<Event>> = HashMap::new();
        let mut cursors_after = Vec::new();
        // Per (partition, gate), the deliveries the walks added to it.
        let mut joined: HashMap<(u32, String), u64> = HashMap::new();
        for w in walks {
            if w.walk.next == w.cursor {
                continue;
            }
            let p = selected[w.at];
            let k = self.keys.partition(s, g, p);
            // The cursor's guard covers the new records (none exists at or
            // above a cursor) and what the walk read of the log.
            let cursors = self.keys.cursors(s, g);
            cas.hget_is(&cursors, &p.to_string(), w.cursor_raw.as_deref());
            for (seq, gate) in w.walk.lease {
                let lease_id = LeaseId::generate();
                let new = Delivery::fresh().leased(&lease_id, &req.consumer_id, now, expires_at);
                self.place(&mut cas, &k, seq, None, &new);
                if let Some(gate) = gate {
                    cas.write(&["ZADD", &k.gates, "0", &member(&gate, seq)]);
                    *joined.entry((p, gate)).or_default() += 1;
                }
                let event = events
                    .get(&(p, seq))
                    .ok_or_else(|| corrupt("log", format!("{p}:{seq} has no entry")))?;
                fresh_events.insert((p, seq), Arc::clone(event));
                claimed.push((p, seq, 1, lease_id));
            }
            for (seq, gate) in w.walk.park {
                let parked = Delivery {
                    status: Status::Parked,
                    ..Delivery::fresh()
                };
                self.place(&mut cas, &k, seq, None, &parked);
                cas.write(&["ZADD", &k.gates, "0", &member(&gate, seq)]);
                *joined.entry((p, gate)).or_default() += 1;
            }
            // Paced by `flow.key_rate`: available, due at its slot, one of
            // its gate's heads (not parked).
            for (seq, gate, due) in w.walk.pace {
                let paced = Delivery::fresh().paced(due);
                self.place(&mut cas, &k, seq, None, &paced);
                if let Some(gate) = gate {
                    cas.write(&["ZADD", &k.gates, "0", &member(&gate, seq)]);
                    *joined.entry((p, gate)).or_default() += 1;
                }
            }
            cas.write(&["HSET", &cursors, &p.to_string(), &w.walk.next.to_string()]);
            cursors_after.push((p, w.walk.next));
        }
        // The TATs the claims moved, guarded on each as read.
        for (i, &p) in selected.iter().enumerate() {
            rates.write(&mut cas, i, &self.keys.partition(s, g, p));
        }
        // Each gate passed: guarded on its count as read (or taken to be),
        // and counting what the walk added to it.
        let busy = probed.values().any(Option::is_some);
        for ((p, gate), count) in probed {
            let counts = self.keys.counts(s, g, p);
            cas.hget_is(&counts, &gate, count.as_deref());
            if let Some(added) = joined.get(&(p, gate.clone())) {
                let before: u64 = match &count {
                    Some(raw) => raw.parse().map_err(|_| corrupt("gate count", raw))?,
                    None => 0,
                };
                cas.write(&["HSET", &counts, &gate, &(before + added).to_string()]);
            }
        }
        if cas.is_empty() {
            return Ok(Some(Vec::new()));
        }
        // Where gates are taken to be free, the events past each new
        // cursor are read ahead in the same round trip, for the next fetch
        // to plan over (`planned.rs`).
        let applied = if optimistic {
            let ahead = read_ahead(limit, selected.len());
            let reads: Vec<(u32, u64, usize)> = cursors_after
                .iter()
                .map(|&(p, next)| (p, next, ahead))
                .collect();
            self.apply_and_read(&cas, s, &reads).await?
        } else {
            (self.apply(&cas).await? == Applied::Yes).then(Vec::new)
        };
        let Some(read) = applied else {
            // Something changed since the read; when gates were only taken
            // to be free, the next round asks them.
            if optimistic {
                self.crowded.lock().insert(group);
            }
            return Ok(None);
        };
        {
            let mut views = self.views.lock();
            for ((p, cursor), (entries, high_watermark)) in cursors_after.iter().zip(read) {
                if let Some(view) = views.get_mut(&(s.clone(), g.clone(), *p)) {
                    view.high_watermark = view.high_watermark.max(high_watermark);
                    view.ahead = ahead_of(s, *p, *cursor, entries)?;
                }
            }
        }
        if !optimistic && !busy {
            self.crowded.lock().remove(&group);
        } else if busy {
            self.crowded.lock().insert(group);
        }
        let times = (now, expires_at);
        self.claimed(req, settings, claimed, fresh_events, cursors_after, times)
            .await
            .map(Some)
    }

    /// Runs the walks of a gated fetch on in rounds, until each has what
    /// it wants or is over: each round reads the next window of every walk
    /// (one pipeline, from what was read ahead where it covers the window),
    /// then asks the gates they pass (one pipeline) and passes the windows.
    /// Adds the events read to `events`, and each asked gate's count of
    /// open deliveries as read (`None`: free) to `probed` — or,
    /// `optimistic`, each asked gate as free without asking: the caller's
    /// write is guarded on it. A walk passes a gate of `slots` slots as its
    /// count says ([`GateState::of_open`]); one it asks again in a later window is
    /// answered from `probed` (the store holds none of this walk's leases
    /// yet).
    ///
    /// Under `flow.key_rate` the TATs of each window's keys are loaded
    /// into `rates` before the window is passed, and an event its gate
    /// lets through takes a token of its key ([`GateWalk::pass_paced`]).
    #[allow(clippy::type_complexity)]
    async fn walk(
        &self,
        (s, g): (&StreamName, &GroupName),
        selected: &[u32],
        walks: &mut [Walking],
        (events, probed, rates): (
            &mut HashMap<(u32, u64), Arc<Event>>,
            &mut HashMap<(u32, String), Option<String>>,
            &mut Rates,
        ),
        (optimistic, slots): (bool, usize),
    ) -> Result<()> {
        loop {
            // This round's window of each walk: (walk, events), read ahead
            // or to read.
            let mut windows: Vec<(usize, Vec<Event>)> = Vec::new();
            let mut reads: Vec<(usize, u64, u64)> = Vec::new();
            for (i, w) in walks.iter_mut().enumerate() {
                let Some((first, last)) = w.walk.window(w.high_watermark) else {
                    continue;
                };
                let p = selected[w.at];
                let mut held = Vec::new();
                for (entry, fields) in &w.ahead {
                    let seq = super::entry_sequence(entry)?;
                    if (first..=last).contains(&seq) {
                        held.push(super::decode_event(s, p, entry, fields.clone())?);
                    }
                }
                if held.len() as u64 == last - first + 1 {
                    windows.push((i, held));
                } else {
                    reads.push((i, first, last));
                }
            }
            if windows.is_empty() && reads.is_empty() {
                break;
            }
            if !reads.is_empty() {
                let mut pipe = redis::pipe();
                for &(i, first, last) in &reads {
                    pipe.cmd("XRANGE")
                        .arg(self.keys.log(s, selected[walks[i].at]))
                        .arg(super::claims::entry_id(first))
                        .arg(super::claims::entry_id(last));
                }
                let replies: Vec<Vec<Entry>> = pipe
                    .query_async(&mut self.read_conn())
                    .await
                    .map_err(|e| map_error(e, Phase::Read))?;
                for ((i, ..), entries) in reads.into_iter().zip(replies) {
                    let p = selected[walks[i].at];
                    let window = entries
                        .into_iter()
                        .map(|(entry, fields)| super::decode_event(s, p, &entry, fields))
                        .collect::<Result<Vec<_>>>()?;
                    windows.push((i, window));
                }
            }
            let mut asked: Vec<(u32, String)> = Vec::new();
            let mut keyed: Vec<(usize, Vec<(u64, Option<String>)>)> = Vec::new();
            for (i, window) in windows {
                let p = selected[walks[i].at];
                let pairs: Vec<(u64, Option<String>)> =
                    window.iter().map(|e| (e.sequence, e.key.clone())).collect();
                let mut new: HashSet<String> = walks[i].walk.to_ask(&pairs);
                new.retain(|gate| !probed.contains_key(&(p, gate.clone())));
                asked.extend(new.into_iter().map(|gate| (p, gate)));
                for event in window {
                    events.insert((p, event.sequence), Arc::new(event));
                }
                keyed.push((i, pairs));
            }
            if optimistic {
                // Every gate passed is taken to be free; the fetch's write
                // is guarded on each being so.
                probed.extend(asked.into_iter().map(|pg| (pg, None)));
            } else {
                let counts = self.gate_counts(s, g, &asked).await?;
                for (pg, count) in asked.into_iter().zip(counts) {
                    parse_count(count.as_deref())?;
                    probed.insert(pg, count);
                }
            }
            if rates.is_on() {
                let asks = keyed
                    .iter()
                    .map(|(i, pairs)| {
                        let keys = pairs.iter().map(|(_, k)| k.as_deref().map(Arc::from));
                        (walks[*i].at, keys.collect())
                    })
                    .collect();
                self.load_tats((s, g), selected, rates, asks).await?;
            }
            for (i, pairs) in keyed {
                let p = selected[walks[i].at];
                let state = |gate: &str| {
                    let count = probed.get(&(p, gate.to_owned())).cloned().flatten();
                    GateState::of_open(parse_count(count.as_deref()).unwrap_or(0), slots)
                };
                let pacer = rates.pacer(walks[i].at);
                walks[i].walk.pass_paced(pairs, state, pacer);
            }
        }
        Ok(())
    }

    /// Dead-letters expired last attempts of a gated group (the poison
    /// guard, `docs/groups.md#poison-guard`), letting their gates' next
    /// deliveries through, in one guarded script; under quarantine a gated
    /// one is held by the quarantine instead, its gate left shut
    /// (`docs/groups.md#quarantine`).
    async fn bury(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
        poison: Vec<(u32, u64, String, Delivery)>,
        now: Timestamp,
    ) -> Result<()> {
        let gating = settings.config.gating();
        let positions: Vec<(u32, u64)> = poison.iter().map(|(p, seq, ..)| (*p, *seq)).collect();
        let keys = self
            .keys_at(s, &positions, vec![None; positions.len()])
            .await?;
        let mut gated = Vec::new();
        let mut buried = Vec::new();
        for (i, ((p, seq, raw, delivery), key)) in poison.into_iter().zip(keys).enumerate() {
            let gate = gating.gate(key.as_deref()).map(str::to_owned);
            let write = poison_write(gate.is_some(), &settings.config);
            // A dead head lets its gate's next delivery through; a
            // quarantined one leaves its gate as it is.
            if let Some(gate) = gate.filter(|_| !matches!(write, Write::Quarantine(_))) {
                gated.push((i, p, gate));
            }
            let dead = delivery.clone().written(write, now);
            buried.push((p, seq, raw, dead, delivery));
        }
        let groups = by_gate(&gated);
        let parts: HashMap<u32, PartitionKeys> = (buried.iter())
            .map(|(p, ..)| (*p, self.keys.partition(s, g, *p)))
            .collect();
        let asks: Vec<GateAsk<'_>> = (groups.iter())
            .map(|((p, gate), items)| GateAsk {
                k: &parts[p],
                gate: gate.clone(),
                slots: gating.slots(),
                from: None,
                members: true,
                mine: items.iter().map(|&i| buried[i].1).collect(),
            })
            .collect();
        let views = self.gate_views(&asks).await?;
        let mut cas = Cas::default();
        self.guard_settings(&mut cas, s, g, settings);
        let mut released = false;
        for (((p, _), items), view) in groups.iter().zip(&views) {
            let mut settled: Vec<(u64, Delivery)> = (items.iter())
                .map(|&i| (buried[i].1, buried[i].3.clone()))
                .collect();
            released |= self.settle_gated(&mut cas, &parts[p], view, &mut settled)?;
            for (&i, (_, new)) in items.iter().zip(settled) {
                buried[i].3 = new;
            }
        }
        for (p, seq, raw, dead, delivery) in &buried {
            let k = &parts[p];
            cas.hget_is(&k.records, &seq.to_string(), Some(raw));
            self.place(&mut cas, k, *seq, Some(Slot::of(delivery)), dead);
        }
        if released {
            self.publish_wake(&mut cas, s);
        }
        self.apply(&cas).await?;
        Ok(())
    }

    /// Gives each gate that re-opened deliveries of partition `k` belong to
    /// the heads the shared rule gives it ([`regate`],
    /// `docs/groups.md#ordering`, `docs/groups.md#flow`): its deliveries
    /// out that were not re-opened and, for the slots left, its lowest
    /// open ones; the gate's other open deliveries are parked. Sets each
    /// re-opened record's status, adds the re-opened deliveries to their
    /// gates and writes the changes of the gates' other members, guarded
    /// on their records (the caller guards the cursor).
    pub(super) async fn regate(
        &self,
        cas: &mut Cas,
        (s, gating): (&StreamName, Gating),
        k: &PartitionKeys,
        reopened: &mut [Reopened],
    ) -> Result<()> {
        let p = k.partition;
        let positions: Vec<(u32, u64)> = reopened.iter().map(|r| (p, r.seq)).collect();
        let keys = self
            .keys_at(s, &positions, vec![None; positions.len()])
            .await?;
        let mut by_gate: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            if let Some(gate) = gating.gate(key.as_deref()) {
                by_gate.entry(gate.to_owned()).or_default().push(i);
            }
        }
        // The gates' members, their records and counts, as one snapshot.
        let mut invocation = self.gate_members.prepare_invoke();
        invocation.key(&k.gates).key(&k.records).key(&k.counts);
        for gate in by_gate.keys() {
            let [min, max] = range(gate);
            invocation.arg(min).arg(max).arg(gate);
        }
        #[allow(clippy::type_complexity)]
        let read: Vec<(Vec<String>, Vec<Option<String>>, Option<String>)> = if by_gate.is_empty() {
            Vec::new()
        } else {
            invocation
                .invoke_async(&mut self.read_conn())
                .await
                .map_err(|e| map_error(e, Phase::Read))?
        };
        let reopened_seqs: HashSet<u64> = reopened.iter().map(|r| r.seq).collect();
        let mut records: HashMap<u64, (Option<String>, Option<Delivery>)> = HashMap::new();
        let mut gate_members: Vec<Vec<u64>> = Vec::with_capacity(read.len());
        let mut counts = Vec::with_capacity(read.len());
        for (members, raws, count) in read {
            let seqs = members
                .iter()
                .map(|m| sequence_of(m))
                .collect::<Result<Vec<u64>>>()?;
            for (&seq, raw) in seqs.iter().zip(raws) {
                if !reopened_seqs.contains(&seq) {
                    let delivery = raw.as_deref().map(Delivery::decode).transpose()?;
                    records.insert(seq, (raw, delivery));
                }
            }
            gate_members.push(seqs);
            counts.push(count);
        }
        for (((gate, indexes), seqs), count) in by_gate.iter().zip(gate_members).zip(counts) {
            let mut open: Vec<u64> = seqs
                .into_iter()
                .chain(indexes.iter().map(|&i| reopened[i].seq))
                .collect();
            open.sort_unstable();
            open.dedup();
            // The gate counts its members, the re-opened ones with them.
            cas.hget_is(&k.counts, gate, count.as_deref());
            cas.write(&["HSET", &k.counts, gate, &open.len().to_string()]);
            // The re-opened deliveries are parked to start with; the gate
            // then gets the heads the shared rule gives it.
            let standing = |q: &u64| {
                (!reopened_seqs.contains(q))
                    .then(|| records.get(q).and_then(|(_, d)| d.as_ref()))
                    .flatten()
                    .map(|d| d.status)
            };
            let step = regate(&Gate {
                slots: gating.slots(),
                out: open
                    .iter()
                    .filter(|q| standing(q) == Some(Status::Leased))
                    .count(),
                heads: open
                    .iter()
                    .copied()
                    .filter(|q| standing(q) == Some(Status::Available))
                    .collect(),
                waiting: open
                    .iter()
                    .copied()
                    .filter(|q| standing(q) != Some(Status::Leased))
                    .take(gating.slots())
                    .collect(),
            });
            for &i in indexes {
                let r = &mut reopened[i];
                r.new.status = if step.release.contains(&r.seq) {
                    Status::Available
                } else {
                    Status::Parked
                };
                cas.write(&["ZADD", &k.gates, "0", &member(gate, r.seq)]);
            }
            for q in open.iter().filter(|q| !reopened_seqs.contains(q)) {
                let Some((raw, delivery)) = records.get(q) else {
                    continue;
                };
                cas.hget_is(&k.records, &q.to_string(), raw.as_deref());
                let Some(delivery) = delivery else { continue };
                let wanted = if step.release.contains(q) {
                    Status::Available
                } else if step.park.contains(q) {
                    Status::Parked
                } else {
                    continue;
                };
                let new = Delivery {
                    status: wanted,
                    ..delivery.clone()
                };
                self.place(cas, k, *q, Some(Slot::of(delivery)), &new);
            }
        }
        Ok(())
    }
}
