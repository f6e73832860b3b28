//! Group ordering and flow control on MongoDB (`docs/groups.md#ordering`,
//! `docs/groups.md#flow`, `docs/backends.md#mongodb`).
//!
//! A delivery of a gated group that has a gate (its key, or its
//! partition) names it in `k`; a gate's heads (one under an ordering, up
//! to `key_concurrency` under a flow: `Gating::slots`) are `available`
//! or `leased` as any delivery, its other open deliveries are `parked`,
//! which no claim reads. A gated delivery of a gate with more than one
//! slot also carries the slot count in `n` (missing: one), so that a
//! settle decides with the group's slots as they were when its
//! deliveries were made, whatever this node kept of the group. Deciding
//! whether a gate is free and letting its next deliveries through touch
//! several documents, so in a gated group the fetch, the settles, the
//! poison guard, replays and redrives each run as one transaction. Every
//! one of them that changes a gate also writes that gate's document in
//! `rheo_gates` (present while the gate has open deliveries): two
//! transactions that decide on one gate then conflict and one runs again,
//! so a fetch never parks an event behind a head a concurrent settle
//! released. The walk over unseen events is the shared one ([`GateWalk`]):
//! it asks `rheo_gates` which gates it passes have deliveries open and,
//! with more than one slot, counts those gates' heads and parked
//! deliveries in one aggregation.
//!
//! `flow.key_rate` (`docs/groups.md#flow`) takes the same path, gated or
//! not (`Gating::walks`): its token buckets are documents of `rheo_rates`,
//! one per (stream, group, partition, event key), `_id` as a gate's, with
//! the key's TAT in `t` (microseconds). The fetch reads the buckets of the
//! keys it may claim (its claimable deliveries' and its walk windows'),
//! asks a `Pacer` per partition for every claim, and writes the TATs it
//! changed in its transaction: two fetches that spend tokens of one key,
//! on one node or two, both write that document, so one of them runs
//! again and no token is spent twice. A delivery that found no token is
//! written `available`, due at the slot reserved for it, marked `pc`
//! (cleared when it is leased, or re-opened by a replay or a redrive), so
//! that it goes out when due without asking its bucket again; a gated one
//! stays a head of its gate. One whose lease expired is never paced: it
//! goes out again at once, counted in its key's bucket (`Candidate::Expired`).
//! A fetch goes through a partition's claimable deliveries in sequence
//! order, reading on past those it paces ([`Claimable`]), before its walk
//! takes any unseen event. Settles never touch the buckets. A TAT that
//! passed is a full bucket: now and then a fetch deletes a partition's
//! passed ones ([`SWEEP_EVERY`]); a reset deletes its partitions', a
//! delete of the group or stream all of them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use mongodb::ClientSession;
use mongodb::bson::{Bson, Document, doc, oid::ObjectId};
use mongodb::options::ReturnDocument;

use super::claims::{
    ACKED, AVAILABLE, Claimed, DEAD, LEASED, PARKED, deliveries_of, held_by, held_of, lease_update,
    quarantine_update,
};
use super::groups::{GroupState, decode_state, group_key};
use super::{
    DELIVERIES, EVENTS, Fail, GATES, GROUPS, MongoBackend, RATES, Turn, big, corrupt, int,
    is_duplicate_key, opt_text, transaction, uint,
};
use rheo_core::backend::policy::{
    Candidate, GateState, GateView, GateWalk, GroupConfig, Hold, Pace, Pacer, QUARANTINE_CONSUMER,
    Regate, Share, WALK_PER_CLAIM, Write, claim_capacity, fence, poison_write, regate,
    settle_write,
};
use rheo_core::backend::{Error, FetchRequest, Result};
use rheo_core::model::{Event, GroupName, LeaseId, Settlement, StreamName, Timestamp, clip_reason};

/// What a transaction's body returns.
type Tx<T> = std::result::Result<T, Fail>;

/// How many fetches that change a partition's buckets, on average, also
/// forget its buckets whose TAT passed ([`MongoBackend::store_tats`]).
const SWEEP_EVERY: u32 = 16;

/// The statuses of an open delivery.
const OPEN: [&str; 3] = [AVAILABLE, PARKED, LEASED];

/// A gate document's id: stream and group names hold no control
/// character, so the gate, last, may hold any.
fn gate_id(s: &StreamName, g: &GroupName, p: u32, gate: &str) -> String {
    format!("{s}\u{1f}{g}\u{1f}{p}\u{1f}{gate}")
}

/// The deliveries of one gate with one of `statuses`.
fn of_gate(s: &StreamName, g: &GroupName, p: u32, gate: &str, statuses: &[&str]) -> Document {
    let mut filter = deliveries_of(s, g);
    filter.insert("p", p as i32);
    filter.insert("k", gate);
    filter.insert("st", doc! {"$in": statuses});
    filter
}

/// The update statements (for [`MongoBackend::update_each`]) that carry
/// out a gate's step in partition `p`: the deliveries handed out before
/// that are no longer heads parked, the new heads let through.
fn head_moves((s, g): (&StreamName, &GroupName), p: u32, step: &Regate) -> Vec<Document> {
    let parked = step.park.iter().map(|&seq| (seq, AVAILABLE, PARKED));
    let released = step.release.iter().map(|&seq| (seq, PARKED, AVAILABLE));
    parked
        .chain(released)
        .map(|(seq, from, to)| {
            let mut filter = deliveries_of(s, g);
            filter.insert("p", p as i32);
            filter.insert("q", big(seq));
            filter.insert("st", from);
            doc! {"q": filter, "u": {"$set": {"st": to}}}
        })
        .collect()
}

/// What [`regate`] sees of a gate of `slots` heads from its open
/// deliveries read, as (sequence, status): all of them, or, for a gate of
/// one slot after a settle of its head, its lowest one.
fn view_of<'a>(slots: usize, open: impl IntoIterator<Item = (u64, &'a str)>) -> GateView {
    let mut open: Vec<(u64, &str)> = open.into_iter().collect();
    open.sort_unstable_by_key(|&(seq, _)| seq);
    let with = |keep: &dyn Fn(&str) -> bool| -> Vec<u64> {
        open.iter()
            .filter(|(_, st)| keep(st))
            .map(|&(seq, _)| seq)
            .collect()
    };
    GateView {
        slots,
        out: open.iter().filter(|(_, st)| *st == LEASED).count(),
        heads: with(&|st| st == AVAILABLE),
        waiting: with(&|st| st != LEASED),
    }
}

/// The slots of the gate a gated delivery document belongs to, as it was
/// made (`n`; missing: one, an ordering's).
fn slots_of(d: &Document) -> Result<usize> {
    match super::opt_int(d, "n")? {
        None => Ok(1),
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| corrupt("slots", n)),
    }
}

/// Marks a new gated delivery document with its gate's slots when there
/// are more than one ([`slots_of`]).
fn mark_slots(d: &mut Document, slots: usize) {
    if slots > 1 {
        d.insert("n", slots as i64);
    }
}

/// A delivery document's partition.
fn partition_of(d: &Document) -> Result<u32> {
    u32::try_from(int(d, "p")?).map_err(|e| corrupt("partition", e))
}

/// A delivery document's `_id`.
pub(super) fn id_of(d: &Document) -> Result<Bson> {
    d.get("_id")
        .cloned()
        .ok_or_else(|| corrupt("delivery", "no _id"))
}

/// One partition's walk over its unseen events in a gated fetch, with
/// what it read.
#[derive(Debug)]
struct Walking {
    walk: GateWalk,
    /// How many heads each gate may have.
    slots: usize,
    /// Whether each gate asked has its document in `rheo_gates` (has a
    /// delivery open).
    exists: HashMap<String, bool>,
    /// What each gate asked holds, as the walk needs it.
    states: HashMap<String, GateState>,
    /// The events its windows read, by sequence.
    events: HashMap<u64, Event>,
}

/// One partition's claimable deliveries in a walking fetch, read in
/// sequence order as its claims go through them: under `flow.key_rate`
/// (`docs/groups.md#flow`) a claim that finds no token is paced and the
/// next one is taken instead, so the fetch reads on past the first batch
/// (in growing batches) before its walk takes any unseen event.
#[derive(Debug)]
struct Claimable {
    /// Read so far, lowest sequence first, with their sequences.
    read: Vec<(u64, Document)>,
    /// How many of `read` the claims looked at.
    next: usize,
    /// Per filter of [`super::claims::claimable`] (available and due,
    /// lease expired): the highest sequence it read, and whether more may
    /// follow (its last read was full).
    ends: [(u64, bool); 2],
    /// How many to read of a filter next time.
    batch: i64,
}

impl Claimable {
    /// The longest batch read at once.
    const MAX_BATCH: i64 = 1024;

    /// A partition's first reads, one per filter, each at most `batch`.
    fn new(found: [Vec<Document>; 2], batch: i64) -> Result<Self> {
        let mut c = Claimable {
            read: Vec::new(),
            next: 0,
            ends: [(0, false); 2],
            batch,
        };
        for (f, found) in found.into_iter().enumerate() {
            c.add(f, sequenced(found)?);
        }
        Ok(c)
    }

    /// Adds what filter `f` read past its end (at most `self.batch`), with
    /// their sequences.
    fn add(&mut self, f: usize, found: Vec<(u64, Document)>) {
        let full = found.len() as i64 >= self.batch;
        let last = found.iter().map(|(q, _)| *q).max();
        self.ends[f] = (last.unwrap_or(self.ends[f].0), full);
        self.read.extend(found);
        // Every one looked at comes before every one read now.
        self.read.sort_by_key(|(q, _)| *q);
    }

    /// How many of `read` come, in sequence order, before any delivery a
    /// filter has not read yet: those the claims may look at.
    fn ready(&self) -> usize {
        let unread_from = self.ends.iter().filter(|e| e.1).map(|e| e.0).min();
        match unread_from {
            None => self.read.len(),
            Some(end) => self.read.partition_point(|(q, _)| *q <= end),
        }
    }

    /// The filter to read on once every ready one was looked at: the one
    /// whose end comes first among those that may have more, with the
    /// sequence to read past; `None` when none has more.
    fn to_read(&self) -> Option<(usize, u64)> {
        (0..2)
            .filter(|&f| self.ends[f].1)
            .min_by_key(|&f| self.ends[f].0)
            .map(|f| (f, self.ends[f].0))
    }
}

/// Delivery documents with their sequences.
fn sequenced(found: Vec<Document>) -> Result<Vec<(u64, Document)>> {
    found.into_iter().map(|d| Ok((uint(&d, "q")?, d))).collect()
}

/// What a batch of settles did to each gate's deliveries: (partition,
/// gate) to (sequence, its new open status, or none once settled for good).
type Settled = HashMap<(u32, String), Vec<(u64, Option<&'static str>)>>;

/// How a replay or a redrive names what it re-opens.
#[derive(Debug)]
pub(super) enum Reopen<'a> {
    /// Dead letters: all, or those of these events; with the clauses
    /// keeping those of removed events out (`rewind::stored_only`).
    Dead(Option<Vec<&'a str>>, Option<Vec<Document>>),
    /// Per partition, the sequences strictly between two bounds.
    Ranges(Vec<(u32, u64, u64)>),
}

impl MongoBackend {
    /// Writes gate `gate`'s document (creating it), so that transactions
    /// deciding on the gate conflict.
    async fn touch_gate(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        gate: &str,
    ) -> Tx<()> {
        let update = doc! {
            "$inc": {"rev": 1_i64},
            "$setOnInsert": {"s": s.as_str(), "g": g.as_str(), "p": p as i32},
        };
        let written = self
            .coll(GATES)
            .update_one(doc! {"_id": gate_id(s, g, p, gate)}, update)
            .upsert(true)
            .session(&mut *session)
            .await;
        match written {
            Ok(_) => Ok(()),
            // Another transaction created it first: decide again.
            Err(e) if is_duplicate_key(&e) => Err(Fail::Retry),
            Err(e) => Err(e.into()),
        }
    }

    /// A gated group's fetch (`docs/groups.md#ordering`,
    /// `docs/groups.md#flow`), in one transaction: the poison guard (each
    /// dead head letting its gate's next delivery through), re-claims
    /// (what is claimable is a head, or has no gate), then per partition
    /// the shared walk over its unseen events, asking what the gates it
    /// passes hold; the new deliveries (leased or parked), the gates'
    /// documents and the cursors are written with it. Under
    /// `flow.key_rate` every claim takes a token of its key, and one that
    /// finds none is paced instead (see the module's documentation), the
    /// buckets written with the rest. `None` when the group's ordering or
    /// flow changed (read again); else the claims and the lease times.
    #[allow(clippy::type_complexity)]
    pub(super) async fn fetch_ordered(
        &self,
        req: &FetchRequest,
        config: &GroupConfig,
        selected: &[u32],
        partition_count: u32,
    ) -> Result<Option<(Vec<Claimed>, (Timestamp, Timestamp))>> {
        let now = self.now();
        let expires_at = now.add_ms(req.lease_ms);
        let first = self.rotate(&req.stream, &req.group) % selected.len();
        let times = (now, expires_at);
        let claims = transaction!(self, Turn::of_group(&req.stream, &req.group), session => {
            self.fetch_ordered_in(&mut session, req, config, selected, (partition_count, first), times)
                .await
        })?;
        let Some((claimed, woke)) = claims else {
            return Ok(None);
        };
        if woke {
            self.wake(&req.stream).await;
        }
        Ok(Some((claimed, times)))
    }

    async fn fetch_ordered_in(
        &self,
        session: &mut ClientSession,
        req: &FetchRequest,
        config: &GroupConfig,
        selected: &[u32],
        (partition_count, first): (u32, usize),
        (now, expires_at): (Timestamp, Timestamp),
    ) -> Tx<Option<(Vec<Claimed>, bool)>> {
        let (s, g) = (&req.stream, &req.group);
        let state = self.state_in(session, s, g, partition_count).await?;
        if !state.gates_as(config) {
            self.forget_group(s, g);
            return Ok(None);
        }
        let gating = config.gating();
        let in_selected: Vec<i32> = selected.iter().map(|&p| p as i32).collect();
        let max = i64::from(config.max_attempts);

        // The poison guard.
        let mut poison = deliveries_of(s, g);
        poison.insert("st", LEASED);
        poison.insert("p", doc! {"$in": &in_selected});
        poison.insert("exp", doc! {"$lte": now.as_millis()});
        poison.insert("a", doc! {"$gte": max});
        let mut woke = false;
        for d in self.find_in(session, DELIVERIES, poison, None, 0).await? {
            let gate = opt_text(&d, "k");
            let guard = doc! {"_id": id_of(&d)?, "st": LEASED};
            let update = match poison_write(gate.is_some(), config) {
                // Parked, its gate left shut (`docs/groups.md#quarantine`).
                Write::Quarantine(reason) => {
                    let hold = quarantine_update(&Hold::new(&reason, now));
                    self.coll(DELIVERIES)
                        .update_one(guard, hold)
                        .session(&mut *session)
                        .await?;
                    continue;
                }
                Write::Dead(reason) => doc! {
                    "$set": {"st": DEAD, "r": clip_reason(&reason), "dat": now.as_millis()},
                    "$unset": {"lid": "", "due": ""},
                },
                other => unreachable!("the poison guard writes no {other:?}"),
            };
            self.coll(DELIVERIES)
                .update_one(guard, update)
                .session(&mut *session)
                .await?;
            if let Some(gate) = gate {
                let p = partition_of(&d)?;
                woke |= self
                    .regate_in(session, (s, g), (p, &gate), gating.slots(), true)
                    .await?;
            }
        }

        // Claimable deliveries, each partition's lowest (read on past them
        // as the claims need: [`Claimable`]).
        let mut lists: Vec<Claimable> = Vec::with_capacity(selected.len());
        for &p in selected {
            let limit = i64::from(req.limit);
            let mut found = [Vec::new(), Vec::new()];
            let filters = super::claims::claimable(s, g, &[p as i32], now, config.max_attempts);
            for (f, filter) in filters.into_iter().enumerate() {
                let sort = Some(doc! {"q": 1});
                found[f] = self
                    .find_in(session, DELIVERIES, filter, sort, limit)
                    .await?;
            }
            lists.push(Claimable::new(found, limit)?);
        }
        // A cursor below the log start (a reset that raced a trim) starts
        // at it.
        let (hw, firsts) = self.marks(s).await?;
        let mut state = state;
        state.at_log_start(&firsts);
        // Each partition's share by the shared rule (docs/groups.md#fairness):
        // its claimable heads first, then a walk over its unseen events; a
        // walk that comes back short has no more, and its share goes to the
        // others, whose walks go on.
        let bound: Vec<usize> = selected
            .iter()
            .zip(&lists)
            .map(|(p, list)| {
                let claimable = list.read.len();
                claim_capacity(claimable, state.cursors[*p as usize], hw[*p as usize])
            })
            .collect();
        let mut share = Share::new(bound, req.limit as usize, first);
        let consumer = req.consumer_id.as_str();
        let mut claimed = Vec::new();
        let mut walks: Vec<Option<Walking>> = selected.iter().map(|_| None).collect();
        // `flow.key_rate` (`docs/groups.md#flow`): one pacer per partition
        // (its buckets are the partition's), holding the TATs of the keys
        // of its claimable deliveries, read now, and of its walk's.
        let mut pacers: Vec<Pacer> = selected.iter().map(|_| gating.pacer(now)).collect();
        let read: Vec<&[(u64, Document)]> = lists.iter().map(|l| l.read.as_slice()).collect();
        let mut candidates =
            (self.candidates_in(session, (s, g), selected, &read, &mut pacers)).await?;
        let pacing = gating.key_rate().is_some();
        let mut paced = Vec::new();
        while !share.done() {
            for (i, ask) in share.asks().into_iter().enumerate() {
                if ask == 0 {
                    continue;
                }
                let p = selected[i];
                let list = &mut lists[i];
                let mut take = 0;
                // Under a key rate, a partition whose claims looked at as
                // many claimable deliveries as one claim may walk over
                // ([`WALK_PER_CLAIM`]) gives nothing more in this fetch.
                let mut spent = false;
                loop {
                    let ready = list.ready();
                    while take < ask && list.next < ready {
                        if pacing && list.next >= WALK_PER_CLAIM {
                            spent = true;
                            break;
                        }
                        let (q, d) = &list.read[list.next];
                        list.next += 1;
                        let (key, event) = candidates.remove(&(p, *q)).unwrap_or_default();
                        let guard = doc! {"_id": id_of(d)?, "st": super::text(d, "st")?};
                        let was_paced = d.get_bool("pc").unwrap_or(false);
                        let candidate = if super::text(d, "st")? == LEASED {
                            Candidate::Expired
                        } else {
                            Candidate::Due { paced: was_paced }
                        };
                        if let Pace::At(due) = pacers[i].claim(key.as_deref(), candidate) {
                            // No token: available, due at its reserved
                            // slot; a gated one stays a head (not parked).
                            // The next one is taken instead.
                            let update = doc! {
                                "$set": {"st": AVAILABLE, "due": due.as_millis(), "pc": true},
                            };
                            paced.push(doc! {"q": guard, "u": update});
                            continue;
                        }
                        let lease_id = LeaseId::generate();
                        let update = lease_update(&lease_id, consumer, (now, expires_at));
                        let after = self
                            .coll(DELIVERIES)
                            .find_one_and_update(guard, update)
                            .return_document(ReturnDocument::After)
                            .session(&mut *session)
                            .await?
                            .ok_or(Fail::Retry)?;
                        let mut c = Claimed::of(&after, lease_id)?;
                        c.event = event;
                        claimed.push(c);
                        take += 1;
                    }
                    if spent || take == ask {
                        break;
                    }
                    // Every claimable delivery read in sequence order was
                    // looked at, some paced: read on, in sequence order,
                    // before the walk takes any unseen event
                    // (`docs/groups.md#flow`).
                    let Some((f, end)) = list.to_read() else {
                        break;
                    };
                    list.batch = list.batch.saturating_mul(2).min(Claimable::MAX_BATCH);
                    let [available, expired] =
                        super::claims::claimable(s, g, &[p as i32], now, config.max_attempts);
                    let mut filter = if f == 0 { available } else { expired };
                    filter.insert("q", doc! {"$gt": big(end)});
                    let sort = Some(doc! {"q": 1});
                    let found =
                        (self.find_in(session, DELIVERIES, filter, sort, list.batch)).await?;
                    let found = sequenced(found)?;
                    let pacer = std::slice::from_mut(&mut pacers[i]);
                    candidates.extend(
                        (self.candidates_in(session, (s, g), &[p], &[&found], pacer)).await?,
                    );
                    list.add(f, found);
                }
                let mut walked = 0;
                if ask > take && !spent {
                    let w = match &mut walks[i] {
                        Some(w) => w,
                        slot => {
                            // Deliveries above the cursor without it moved
                            // (an unordered fetcher that died, or raced the
                            // reset that ordered the group) are stepped
                            // over, as unordered fetches do.
                            let cursor = self
                                .created_from(s, g, p, state.cursors[p as usize])
                                .await?;
                            slot.insert(Walking {
                                walk: GateWalk::new(gating, cursor, 0),
                                slots: gating.slots(),
                                exists: HashMap::new(),
                                states: HashMap::new(),
                                events: HashMap::new(),
                            })
                        }
                    };
                    let before = w.walk.lease.len();
                    w.walk.want_more(ask - take);
                    let pacer = &mut pacers[i];
                    (self.walk_on(session, (s, g), p, w, pacer, hw[p as usize])).await?;
                    walked = w.walk.lease.len() - before;
                }
                share.gave(i, ask, take + walked);
            }
        }
        let expected = paced.len() as u64;
        if self.update_each(session, DELIVERIES, paced).await? != expected {
            // Each statement names one document this transaction read.
            return Err(Fail::Retry);
        }
        for (i, w) in walks.into_iter().enumerate() {
            if let Some(w) = w {
                let p = selected[i];
                let lease = (consumer, now, expires_at);
                claimed.extend(
                    self.write_walk(session, (s, g), p, &state, w, lease)
                        .await?,
                );
            }
        }
        self.store_tats(session, (s, g), selected, &pacers, now)
            .await?;
        Ok(Some((claimed, woke)))
    }

    /// The group's document, read in the transaction.
    async fn state_in(
        &self,
        session: &mut ClientSession,
        s: &StreamName,
        g: &GroupName,
        partition_count: u32,
    ) -> Tx<GroupState> {
        let d = self
            .coll(GROUPS)
            .find_one(group_key(s, g))
            .session(&mut *session)
            .await?
            .ok_or_else(|| Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            })?;
        Ok(decode_state(s, &d, partition_count)?)
    }

    /// Walks partition `p`'s unseen events on by the shared rule, until
    /// the walk has what it wants or is over, asking `rheo_gates` which
    /// gates it passes have deliveries open (a gate without a document is
    /// free) and, when a gate has more than one slot, how many heads and
    /// whether parked deliveries those gates have ([`Self::gate_states`]).
    /// A gate asked again in a later window is answered from what was read:
    /// the walk writes nothing before [`Self::write_walk`], so the store
    /// would answer the same.
    async fn walk_on(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        w: &mut Walking,
        pacer: &mut Pacer,
        hw: u64,
    ) -> Tx<()> {
        let Walking {
            walk,
            slots,
            exists,
            states,
            events,
        } = w;
        while let Some((first, last)) = walk.window(hw) {
            let window = self.read_range(s, p, first, last).await?;
            let pairs: Vec<(u64, Option<String>)> =
                window.iter().map(|e| (e.sequence, e.key.clone())).collect();
            let asked: Vec<String> = walk
                .to_ask(&pairs)
                .into_iter()
                .filter(|gate| !exists.contains_key(gate))
                .collect();
            if !asked.is_empty() {
                let ids: Vec<String> = asked.iter().map(|gate| gate_id(s, g, p, gate)).collect();
                let filter = doc! {"_id": {"$in": ids}};
                let found: HashSet<String> = self
                    .find_in(session, GATES, filter, None, 0)
                    .await?
                    .iter()
                    .filter_map(|d| d.get_str("_id").ok().map(str::to_owned))
                    .collect();
                let mut open = Vec::new();
                for gate in asked {
                    let busy = found.contains(&gate_id(s, g, p, &gate));
                    // One slot: a gate with a delivery open is full.
                    states.insert(gate.clone(), GateState::busy(busy));
                    if busy {
                        open.push(gate.clone());
                    }
                    exists.insert(gate, busy);
                }
                if *slots > 1 && !open.is_empty() {
                    let counted = self.gate_states(session, (s, g), p, &open).await?;
                    for gate in open {
                        let state = counted.get(&gate).copied().unwrap_or(GateState::FREE);
                        states.insert(gate, state);
                    }
                }
            }
            // `flow.key_rate`: the buckets of the window's keys not read yet.
            let unknown = pacer.unknown(pairs.iter().map(|(_, key)| key.as_deref()));
            if !unknown.is_empty() {
                let wanted = [(p, unknown)];
                self.load_tats(session, (s, g), &wanted, std::slice::from_mut(pacer))
                    .await?;
            }
            let state = |gate: &str| states.get(gate).copied().unwrap_or(GateState::FREE);
            walk.pass_paced(pairs, state, pacer);
            events.extend(window.into_iter().map(|e| (e.sequence, e)));
        }
        Ok(())
    }

    /// Under `flow.key_rate` (`docs/groups.md#flow`): the key and event of
    /// each claimable delivery of `read` (indexed as `selected`) that is
    /// not paced, by (partition, sequence), read in one query of the events
    /// (they never change), and the TATs of those keys loaded into each
    /// partition's pacer (`pacers`, indexed as `selected`). Nothing without
    /// a key rate.
    #[allow(clippy::type_complexity)]
    async fn candidates_in(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        selected: &[u32],
        read: &[&[(u64, Document)]],
        pacers: &mut [Pacer],
    ) -> Tx<HashMap<(u32, u64), (Option<String>, Option<Arc<Event>>)>> {
        if !pacers.first().is_some_and(Pacer::is_on) {
            return Ok(HashMap::new());
        }
        let mut positions = Vec::new();
        for (&p, list) in selected.iter().zip(read) {
            for (q, d) in list.iter() {
                if !d.get_bool("pc").unwrap_or(false) {
                    positions.push((p, *q));
                }
            }
        }
        let events = self.events_at(s, &positions).await?;
        let mut wanted = Vec::new();
        for (i, &p) in selected.iter().enumerate() {
            let keys = events
                .iter()
                .filter(|((of, _), _)| *of == p)
                .map(|(_, e)| e.key.as_deref());
            let unknown = pacers[i].unknown(keys);
            wanted.push((p, unknown));
        }
        self.load_tats(session, (s, g), &wanted, pacers).await?;
        Ok(events
            .into_iter()
            .map(|(at, e)| (at, (e.key.clone(), Some(e))))
            .collect())
    }

    /// Loads the TATs of `wanted` — per partition, keys — from
    /// `rheo_rates` into `pacers` (indexed as `wanted`), in one read; a key
    /// with no document is loaded as a full bucket.
    async fn load_tats(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        wanted: &[(u32, Vec<String>)],
        pacers: &mut [Pacer],
    ) -> Tx<()> {
        let ids: Vec<String> = wanted
            .iter()
            .flat_map(|(p, keys)| keys.iter().map(move |key| gate_id(s, g, *p, key)))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut stored: HashMap<String, i64> = HashMap::new();
        let filter = doc! {"_id": {"$in": ids}};
        for d in self.find_in(session, RATES, filter, None, 0).await? {
            stored.insert(super::text(&d, "_id")?.to_owned(), int(&d, "t")?);
        }
        for ((p, keys), pacer) in wanted.iter().zip(pacers.iter_mut()) {
            for key in keys {
                pacer.load(key.as_str(), stored.get(&gate_id(s, g, *p, key)).copied());
            }
        }
        Ok(())
    }

    /// Stores the TATs the fetch's pacers changed (`pacers`, indexed as
    /// `selected`), in one round trip. Two fetches that spend tokens of one
    /// key both write its document, so one of them runs again: a token is
    /// never spent twice (`docs/groups.md#flow`). Now and then a partition
    /// whose buckets changed also forgets those whose TAT passed (full
    /// buckets, as if none were stored), so that keys seen once do not
    /// pile up.
    async fn store_tats(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        selected: &[u32],
        pacers: &[Pacer],
        now: Timestamp,
    ) -> Tx<()> {
        let mut updates = Vec::new();
        let mut changed = Vec::new();
        for (&p, pacer) in selected.iter().zip(pacers) {
            if !pacer.has_changes() {
                continue;
            }
            changed.push(p as i32);
            for (key, tat) in pacer.changed() {
                updates.push(doc! {
                    "q": {"_id": gate_id(s, g, p, key)},
                    "u": {
                        "$set": {"t": tat},
                        "$setOnInsert": {"s": s.as_str(), "g": g.as_str(), "p": p as i32},
                    },
                    "upsert": true,
                });
            }
        }
        if updates.is_empty() {
            return Ok(());
        }
        self.update_each(session, RATES, updates).await?;
        if rand::random_range(0..SWEEP_EVERY) == 0 {
            // Every TAT just stored is past `now`: none of them goes.
            let passed = doc! {
                "s": s.as_str(),
                "g": g.as_str(),
                "p": {"$in": changed},
                "t": {"$lte": now.as_millis().saturating_mul(1000)},
            };
            self.coll(RATES)
                .delete_many(passed)
                .session(&mut *session)
                .await?;
        }
        Ok(())
    }

    /// Forgets the key rates' buckets of a group's partitions (a reset:
    /// they are full again, `docs/groups.md#flow`).
    pub(super) async fn forget_rates(
        &self,
        session: Option<&mut ClientSession>,
        sg: (&StreamName, &GroupName),
        partitions: &[i32],
    ) -> Tx<()> {
        self.forget_in(RATES, session, sg, partitions).await
    }

    /// Deletes what collection `name` keeps of a group's partitions.
    async fn forget_in(
        &self,
        name: &str,
        session: Option<&mut ClientSession>,
        (s, g): (&StreamName, &GroupName),
        partitions: &[i32],
    ) -> Tx<()> {
        let filter = doc! {"s": s.as_str(), "g": g.as_str(), "p": {"$in": partitions}};
        let coll = self.coll(name);
        let delete = coll.delete_many(filter);
        match session {
            Some(session) => delete.session(session).await?,
            None => delete.await?,
        };
        Ok(())
    }

    /// What `gates` of partition `p` hold ([`GateState`]), in one
    /// aggregation of their open deliveries: how many are heads (leased,
    /// their lease expired or not, or handed to the claims), and whether
    /// any are parked. A gate with nothing open is left out.
    async fn gate_states(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        gates: &[String],
    ) -> Tx<HashMap<String, GateState>> {
        let mut filter = deliveries_of(s, g);
        filter.insert("p", p as i32);
        filter.insert("k", doc! {"$in": gates});
        filter.insert("st", doc! {"$in": OPEN.as_slice()});
        let parked = doc! {"$eq": ["$st", PARKED]};
        let pipeline = vec![
            doc! {"$match": filter},
            doc! {"$group": {
                "_id": "$k",
                "heads": {"$sum": {"$cond": [parked.clone(), 0, 1]}},
                "parked": {"$sum": {"$cond": [parked, 1, 0]}},
            }},
        ];
        let mut states = HashMap::new();
        for row in self.aggregate_in(session, DELIVERIES, pipeline).await? {
            let gate = super::text(&row, "_id")?.to_owned();
            let state = GateState {
                heads: usize::try_from(uint(&row, "heads")?).map_err(|e| corrupt("heads", e))?,
                parked: uint(&row, "parked")? > 0,
            };
            states.insert(gate, state);
        }
        Ok(states)
    }

    /// Writes what partition `p`'s walk decided: the new deliveries, leased
    /// or parked, each with its gate; the document of every gate they
    /// joined; the cursor.
    async fn write_walk(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        state: &GroupState,
        Walking {
            walk,
            slots,
            exists,
            mut events,
            ..
        }: Walking,
        (consumer, now, expires_at): (&str, Timestamp, Timestamp),
    ) -> Tx<Vec<Claimed>> {
        if walk.next == state.cursors[p as usize] {
            return Ok(Vec::new());
        }
        let mut docs = Vec::with_capacity(walk.lease.len() + walk.park.len() + walk.pace.len());
        let mut claimed = Vec::with_capacity(walk.lease.len());
        let mut joined: BTreeSet<String> = BTreeSet::new();
        for (seq, gate) in walk.lease {
            let event = events
                .remove(&seq)
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            let lease_id = LeaseId::generate();
            let mut d = doc! {
                "_id": ObjectId::new(),
                "s": s.as_str(),
                "g": g.as_str(),
                "p": p as i32,
                "q": big(seq),
                "e": event.id.as_str(),
                "st": LEASED,
                "a": 1_i64,
                "lid": lease_id.as_str(),
                "c": consumer,
                "lat": now.as_millis(),
                "exp": expires_at.as_millis(),
            };
            if let Some(gate) = gate {
                d.insert("k", gate.as_str());
                mark_slots(&mut d, slots);
                joined.insert(gate);
            }
            docs.push(d);
            claimed.push(Claimed {
                partition: p,
                sequence: seq,
                attempt: 1,
                lease_id,
                event: Some(Arc::new(event)),
            });
        }
        // Paced by `flow.key_rate`: available, due at the slot reserved
        // for it, no attempt made; a head of its gate (not parked).
        for (seq, gate, due) in walk.pace {
            let event = events
                .get(&seq)
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            let mut d = unseen_delivery((s, g), (p, seq), event.id.as_str(), AVAILABLE);
            d.insert("due", due.as_millis());
            d.insert("pc", true);
            if let Some(gate) = gate {
                d.insert("k", gate.as_str());
                mark_slots(&mut d, slots);
                joined.insert(gate);
            }
            docs.push(d);
        }
        for (seq, gate) in walk.park {
            let event = events
                .get(&seq)
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            let mut d = unseen_delivery((s, g), (p, seq), event.id.as_str(), PARKED);
            d.insert("k", gate.as_str());
            mark_slots(&mut d, slots);
            docs.push(d);
            joined.insert(gate);
        }
        if !docs.is_empty() {
            // Another fetcher may have created one: read again.
            self.insert_all(session, DELIVERIES, docs).await?;
        }
        self.touch_gates(session, (s, g), p, &joined, &exists)
            .await?;
        let mut filter = group_key(s, g);
        filter.insert("epoch", state.epoch);
        let moved = self
            .coll(GROUPS)
            .update_one(
                filter,
                doc! {"$set": {format!("cursor.{p}"): big(walk.next)}},
            )
            .session(&mut *session)
            .await?;
        if moved.matched_count != 1 {
            // A reset moved the epoch on.
            return Err(Fail::Retry);
        }
        Ok(claimed)
    }

    /// Settles of a gated group, in one transaction: each item fenced and
    /// written as the policy says; an ack or a dead letter of a head lets
    /// its gate's lowest parked delivery through (as many as it has slots
    /// free), a retry keeps the head unless lower deliveries of the gate
    /// wait for its slots (re-opened by a replay).
    pub(super) async fn settle_ordered(
        &self,
        s: &StreamName,
        g: &GroupName,
        items: &[Settlement],
        config: &GroupConfig,
    ) -> Result<Vec<Result<()>>> {
        let (results, woke) = transaction!(self, Turn::of_group(s, g), session => {
            self.settle_in(&mut session, (s, g), items, config).await
        })?;
        if woke {
            self.wake(s).await;
        }
        Ok(results)
    }

    /// The body of [`Self::settle_ordered`], in a constant number of round
    /// trips whatever the batch: the deliveries the items name (one
    /// `find`), the open deliveries of the gates they hold (one `find`),
    /// then every settle and every gate's new head as one ordered `update`
    /// command, and the gates' documents (one `update`, one `delete` when
    /// a gate is done). The items are judged in order against what the
    /// batch has written so far, so a lease named twice is settled once.
    async fn settle_in(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        items: &[Settlement],
        config: &GroupConfig,
    ) -> Tx<(Vec<Result<()>>, bool)> {
        let now = self.now();
        let events: Vec<&str> = items.iter().map(|i| i.target.event_id.as_str()).collect();
        let mut by_event = deliveries_of(s, g);
        by_event.insert("e", doc! {"$in": &events});
        let mut named: HashMap<String, Document> = HashMap::new();
        for d in self.find_in(session, DELIVERIES, by_event, None, 0).await? {
            named.insert(super::text(&d, "e")?.to_owned(), d);
        }
        let mut results = Vec::with_capacity(items.len());
        let mut woke = false;
        let mut updates = Vec::new();
        let mut settled: Settled = HashMap::new();
        for item in items {
            if let Err(e) = item.validate() {
                results.push(Err(e.into()));
                continue;
            }
            let t = &item.target;
            let held = named.get_mut(t.event_id.as_str());
            if let Err(e) = fence(held.as_deref().and_then(held_of), t) {
                results.push(Err(e));
                continue;
            }
            let Some(held) = held else {
                unreachable!("the fence holds only on a delivery found");
            };
            let attempt = u32::try_from(int(held, "a")?).map_err(|e| corrupt("attempt", e))?;
            let (p, seq) = (partition_of(held)?, uint(held, "q")?);
            let gate = opt_text(held, "k");
            let write = settle_write(item.op.clone(), attempt, gate.is_some(), config, now);
            let (update, status) = match write {
                Write::Ack => (
                    doc! {"$set": {"st": ACKED, "acked_at": now.as_millis()}},
                    ACKED,
                ),
                Write::Dead(reason) => (
                    doc! {
                        "$set": {"st": DEAD, "r": clip_reason(&reason), "dat": now.as_millis()},
                        "$unset": {"lid": "", "due": ""},
                    },
                    DEAD,
                ),
                Write::Retry { due, reason } => {
                    // A gated delivery is parked, and its gate hands out
                    // its lowest open one below: itself, or one a replay
                    // re-opened below it.
                    let status = if gate.is_some() { PARKED } else { AVAILABLE };
                    woke |= gate.is_none() && due.is_none();
                    let mut set = doc! {"st": status, "r": clip_reason(&reason)};
                    let mut unset = doc! {"lid": ""};
                    match due {
                        Some(due) => set.insert("due", due.as_millis()),
                        None => unset.insert("due", ""),
                    };
                    (doc! {"$set": set, "$unset": unset}, status)
                }
                // Parked under the quarantine's lease: its gate stays out,
                // untouched (`docs/groups.md#quarantine`).
                Write::Quarantine(reason) => {
                    let hold = Hold::new(&reason, now);
                    let mut guard = held_by(s, g, t);
                    guard.insert("_id", id_of(held)?);
                    updates.push(doc! {"q": guard, "u": quarantine_update(&hold)});
                    // Later items of the batch find the caller's lease gone.
                    held.insert("lid", hold.lease_id.as_str());
                    results.push(Ok(()));
                    continue;
                }
            };
            let mut guard = held_by(s, g, t);
            guard.insert("_id", id_of(held)?);
            updates.push(doc! {"q": guard, "u": update});
            // Later items of the batch see this one settled.
            held.insert("st", status);
            if let Some(gate) = gate {
                let open = (status == PARKED).then_some(PARKED);
                settled.entry((p, gate)).or_default().push((seq, open));
            }
            results.push(Ok(()));
        }
        let (heads, done) = self.regate_settled(session, (s, g), &settled).await?;
        woke |= heads.values().any(|step| !step.release.is_empty());
        for ((p, _), step) in &heads {
            updates.extend(head_moves((s, g), *p, step));
        }
        let expected = updates.len() as u64;
        if self.update_each(session, DELIVERIES, updates).await? != expected {
            // Each statement names one document this transaction read.
            return Err(Fail::Retry);
        }
        let touches = heads
            .keys()
            .map(|(p, gate)| {
                doc! {
                    "q": {"_id": gate_id(s, g, *p, gate)},
                    "u": {"$inc": {"rev": 1_i64}, "$setOnInsert": {"s": s.as_str(), "g": g.as_str(), "p": *p as i32}},
                    "upsert": true,
                }
            })
            .collect();
        self.update_each(session, GATES, touches).await?;
        if !done.is_empty() {
            let ids: Vec<String> = done
                .iter()
                .map(|(p, gate)| gate_id(s, g, *p, gate))
                .collect();
            self.coll(GATES)
                .delete_many(doc! {"_id": {"$in": ids}})
                .session(&mut *session)
                .await?;
        }
        Ok((results, woke))
    }

    /// What the gates a batch of settles held decide next (`regate`,
    /// `docs/groups.md#ordering`), from one read of their open deliveries
    /// as the batch leaves them: per gate with something open the step,
    /// and the gates with nothing open, which are forgotten.
    async fn regate_settled(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        settled: &Settled,
    ) -> Tx<(HashMap<(u32, String), Regate>, Vec<(u32, String)>)> {
        if settled.is_empty() {
            return Ok(Default::default());
        }
        let gates: Vec<Document> = settled
            .keys()
            .map(|(p, gate)| doc! {"p": *p as i32, "k": gate})
            .collect();
        let mut filter = deliveries_of(s, g);
        filter.insert("st", doc! {"$in": OPEN.as_slice()});
        filter.insert("$or", gates);
        let found = self.find_in(session, DELIVERIES, filter, None, 0).await?;
        let mut open: HashMap<(u32, String), HashMap<u64, String>> = settled
            .keys()
            .map(|gate| (gate.clone(), HashMap::new()))
            .collect();
        // Each gate's slots as its deliveries were made (the settled ones
        // among them): a reset that changes the flow removes every
        // delivery, so they are the group's slots now, whatever this node
        // kept of it.
        let mut slots: HashMap<(u32, String), usize> = HashMap::new();
        for d in &found {
            let gate = (partition_of(d)?, super::text(d, "k")?.to_owned());
            let status = super::text(d, "st")?.to_owned();
            if let Some(of_gate) = open.get_mut(&gate) {
                of_gate.insert(uint(d, "q")?, status);
                let n = slots_of(d)?;
                slots
                    .entry(gate)
                    .and_modify(|slots| *slots = n.min(*slots))
                    .or_insert(n);
            }
        }
        for (gate, writes) in settled {
            let of_gate = open.get_mut(gate).expect("every settled gate is read");
            for (seq, status) in writes {
                match status {
                    Some(status) => of_gate.insert(*seq, (*status).to_owned()),
                    None => of_gate.remove(seq),
                };
            }
        }
        let mut heads = HashMap::new();
        let mut done = Vec::new();
        for (gate, of_gate) in open {
            if of_gate.is_empty() {
                done.push(gate);
                continue;
            }
            let slots = slots.get(&gate).copied().unwrap_or(1);
            let view = view_of(slots, of_gate.iter().map(|(q, st)| (*q, st.as_str())));
            heads.insert(gate, regate(&view));
        }
        Ok((heads, done))
    }

    /// A replay or a redrive of a gated group, in one transaction:
    /// re-opens what `how` names, then gives each gate it touched its heads
    /// again (`docs/groups.md#ordering`, `docs/groups.md#flow`). Returns
    /// how many were not open.
    pub(super) async fn reopen_ordered(
        &self,
        s: &StreamName,
        g: &GroupName,
        how: &Reopen<'_>,
    ) -> Result<u64> {
        let (partition_count, _) = self.meta(s).await?;
        let count = transaction!(self, Turn::of_group(s, g), session => {
            self.reopen_in(&mut session, (s, g), partition_count, how).await
        })?;
        Ok(count)
    }

    async fn reopen_in(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        partition_count: u32,
        how: &Reopen<'_>,
    ) -> Tx<u64> {
        let state = self.state_in(session, s, g, partition_count).await?;
        let gating = state.gating();
        let mut count = 0;
        let mut touched: BTreeSet<(u32, String)> = BTreeSet::new();
        match how {
            Reopen::Dead(events, stored) => {
                let mut filter = deliveries_of(s, g);
                filter.insert("st", DEAD);
                if let Some(events) = events {
                    filter.insert("e", doc! {"$in": events});
                    // Named quarantined heads are redriven as dead letters
                    // are (`docs/groups.md#quarantine`): leased ones are
                    // read too, and kept only when the quarantine holds them.
                    filter.insert("st", doc! {"$in": [DEAD, LEASED]});
                }
                if let Some(stored) = stored {
                    filter.insert("$or", stored.clone());
                }
                let found = self.find_in(session, DELIVERIES, filter, None, 0).await?;
                for d in &found {
                    let mut guard = doc! {"_id": id_of(d)?, "st": DEAD};
                    if super::text(d, "st")? == LEASED {
                        if opt_text(d, "c").as_deref() != Some(QUARANTINE_CONSUMER) {
                            continue;
                        }
                        guard.insert("st", LEASED);
                        guard.insert("lid", super::text(d, "lid")?);
                    }
                    // A gated one is parked; its gate then gets its head.
                    let mut status = AVAILABLE;
                    if let Some(gate) = opt_text(d, "k") {
                        touched.insert((partition_of(d)?, gate));
                        status = PARKED;
                    }
                    self.coll(DELIVERIES)
                        .update_one(
                            guard,
                            doc! {
                                "$set": {"st": status, "a": 0_i64},
                                "$unset": {"due": "", "lid": "", "dat": "", "pc": ""},
                            },
                        )
                        .session(&mut *session)
                        .await?;
                    count += 1;
                }
            }
            Reopen::Ranges(ranges) => {
                for &(p, after, before) in ranges {
                    if after.saturating_add(1) >= before {
                        continue;
                    }
                    let mut range = deliveries_of(s, g);
                    range.insert("p", p as i32);
                    range.insert("q", doc! {"$gt": big(after), "$lt": big(before)});
                    let existing = self
                        .find_in(session, DELIVERIES, range.clone(), None, 0)
                        .await?;
                    let seen: HashSet<u64> = existing
                        .iter()
                        .map(|d| uint(d, "q"))
                        .collect::<Result<_>>()?;
                    for d in &existing {
                        if let Some(gate) = opt_text(d, "k") {
                            touched.insert((p, gate));
                        }
                    }
                    // Deliveries the group never had (before its start).
                    let mut docs = Vec::new();
                    if seen.len() as u64 != before - after - 1 {
                        let filter = doc! {
                            "s": s.as_str(),
                            "p": p as i32,
                            "q": {"$gt": big(after), "$lt": big(before)},
                        };
                        for e in self.find_in(session, EVENTS, filter, None, 0).await? {
                            let seq = uint(&e, "q")?;
                            if seen.contains(&seq) {
                                continue;
                            }
                            let mut d = doc! {
                                "_id": ObjectId::new(),
                                "s": s.as_str(),
                                "g": g.as_str(),
                                "p": p as i32,
                                "q": big(seq),
                                "e": super::text(&e, "id")?,
                                "st": AVAILABLE,
                                "a": 0_i64,
                            };
                            let key = opt_text(&e, "key");
                            if let Some(gate) = gating.gate(key.as_deref()) {
                                d.insert("k", gate);
                                d.insert("st", PARKED);
                                mark_slots(&mut d, gating.slots());
                                touched.insert((p, gate.to_owned()));
                            }
                            docs.push(d);
                        }
                    }
                    if !docs.is_empty() {
                        count += docs.len() as u64;
                        self.insert_all(session, DELIVERIES, docs).await?;
                    }
                    // What is not open re-opens: parked when it has a
                    // gate (its gate then gets its head), else available.
                    for (gated, status) in [(false, AVAILABLE), (true, PARKED)] {
                        let mut closed = range.clone();
                        closed.insert("st", doc! {"$nin": [AVAILABLE, PARKED]});
                        closed.insert("k", doc! {"$exists": gated});
                        count += self
                            .coll(DELIVERIES)
                            .update_many(
                                closed,
                                doc! {"$set": {"st": status}, "$unset": {"due": "", "lid": "", "dat": "", "pc": ""}},
                            )
                            .session(&mut *session)
                            .await?
                            .modified_count;
                    }
                    // Open ones waiting on a retry delay are due now.
                    let mut delayed = range;
                    delayed.insert("st", doc! {"$in": [AVAILABLE, PARKED]});
                    delayed.insert("due", doc! {"$ne": null});
                    self.coll(DELIVERIES)
                        .update_many(delayed, doc! {"$unset": {"due": "", "pc": ""}})
                        .session(&mut *session)
                        .await?;
                }
            }
        }
        for (p, gate) in touched {
            (self.regate_in(session, (s, g), (p, &gate), gating.slots(), false)).await?;
        }
        // Fetches that read the group meanwhile run again.
        self.coll(GROUPS)
            .update_one(group_key(s, g), doc! {"$inc": {"rev": 1_i64}})
            .session(&mut *session)
            .await?;
        Ok(count)
    }

    /// Writes the documents of `gates` of partition `p` in two round trips
    /// at most, as [`Self::touch_gate`] writes one: those `existing` says
    /// exist are updated together (all must still be there), the others
    /// created together (none may be yet: another transaction that created
    /// one first sends this one round again).
    async fn touch_gates(
        &self,
        session: &mut ClientSession,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        gates: impl IntoIterator<Item = &String>,
        existing: &HashMap<String, bool>,
    ) -> Tx<()> {
        let (old, new): (Vec<&String>, Vec<&String>) = gates
            .into_iter()
            .partition(|gate| existing.get(*gate).copied().unwrap_or(false));
        if !new.is_empty() {
            let docs = new
                .iter()
                .map(|gate| {
                    doc! {
                        "_id": gate_id(s, g, p, gate),
                        "rev": 1_i64,
                        "s": s.as_str(),
                        "g": g.as_str(),
                        "p": p as i32,
                    }
                })
                .collect();
            self.insert_all(session, GATES, docs).await?;
        }
        if !old.is_empty() {
            let ids: Vec<String> = old.iter().map(|gate| gate_id(s, g, p, gate)).collect();
            let updated = self
                .coll(GATES)
                .update_many(doc! {"_id": {"$in": ids}}, doc! {"$inc": {"rev": 1_i64}})
                .session(&mut *session)
                .await?;
            if updated.matched_count != old.len() as u64 {
                // A gate read as busy was forgotten meanwhile: decide again.
                return Err(Fail::Retry);
            }
        }
        Ok(())
    }

    /// Gives a gate of `slots` heads the heads the shared rule gives it
    /// ([`regate`], `docs/groups.md#ordering`, `docs/groups.md#flow`) —
    /// its deliveries out and, for the slots left, its lowest open ones —
    /// parking those handed out before that are no longer heads; forgets
    /// the gate when nothing of it is open. After a settle of the head of
    /// a gate of one slot (`settled`: acked, dead-lettered, or retried and
    /// parked) nothing of the gate is out or handed out, so its lowest open
    /// delivery is all there is to read; otherwise every open delivery of
    /// the gate is read. Whether a delivery was let through.
    pub(super) async fn regate_in(
        &self,
        session: &mut ClientSession,
        sg: (&StreamName, &GroupName),
        (p, gate): (u32, &str),
        slots: usize,
        settled: bool,
    ) -> Tx<bool> {
        let filter = of_gate(sg.0, sg.1, p, gate, &OPEN);
        let limit = if settled && slots == 1 { 1 } else { 0 };
        let open = self
            .find_in(session, DELIVERIES, filter, Some(doc! {"q": 1}), limit)
            .await?;
        if open.is_empty() {
            self.coll(GATES)
                .delete_one(doc! {"_id": gate_id(sg.0, sg.1, p, gate)})
                .session(&mut *session)
                .await?;
            return Ok(false);
        }
        let read = open
            .iter()
            .map(|d| Ok((uint(d, "q")?, super::text(d, "st")?)))
            .collect::<Result<Vec<_>>>()?;
        let step = regate(&view_of(slots, read));
        let moves = head_moves(sg, p, &step);
        let expected = moves.len() as u64;
        if self.update_each(session, DELIVERIES, moves).await? != expected {
            // Each statement names one document this transaction read.
            return Err(Fail::Retry);
        }
        self.touch_gate(session, sg, p, gate).await?;
        Ok(!step.release.is_empty())
    }

    /// Forgets the gates of a group's partitions (a reset).
    pub(super) async fn forget_gates(
        &self,
        session: Option<&mut ClientSession>,
        sg: (&StreamName, &GroupName),
        partitions: &[i32],
    ) -> Tx<()> {
        self.forget_in(GATES, session, sg, partitions).await
    }
}

/// The delivery a walk writes for an event the group had not reached, in
/// status `st`, never claimed.
fn unseen_delivery(
    (s, g): (&StreamName, &GroupName),
    (p, seq): (u32, u64),
    event_id: &str,
    st: &str,
) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "s": s.as_str(),
        "g": g.as_str(),
        "p": p as i32,
        "q": big(seq),
        "e": event_id,
        "st": st,
        "a": 0_i64,
    }
}
