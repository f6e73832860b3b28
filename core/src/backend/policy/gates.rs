//! Group ordering's and flow's gates (`docs/groups.md#ordering`,
//! `docs/groups.md#flow`): which events a fetch's walk over unseen events
//! leases or parks ([`GateWalk`]), and which deliveries head a gate after
//! a settle, a poison guard, a replay or a redrive ([`regate`]). A store
//! reads the gate, asks here, and writes what it is told under a guard on
//! what it read; it never decides itself.

use std::collections::{HashMap, HashSet};

use super::pace::{Candidate, Pace, Pacer};
use crate::model::{Flow, GroupOrdering, KeyRate, Timestamp};

/// How a group's deliveries pass gates: the ordering's one head per key or
/// partition, or `flow.key_concurrency`'s N heads per key in any order
/// (`docs/groups.md#flow`). A gate's *heads* are its open deliveries that
/// are not parked (out, or handed to the claims); it has at most
/// [`Gating::slots`] of them. It also carries `flow.key_rate`, which
/// paces the claims of each key under any ordering ([`super::Pacer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gating {
    ordering: GroupOrdering,
    /// `flow.key_concurrency` under `ordering = "none"`; 0 when off.
    key_concurrency: u32,
    /// `flow.key_rate`.
    key_rate: Option<KeyRate>,
}

impl Gating {
    /// The gating of a group with this ordering and flow.
    pub fn new(ordering: GroupOrdering, flow: &Flow) -> Self {
        Self {
            ordering,
            key_concurrency: match ordering {
                GroupOrdering::None => flow.key_concurrency.unwrap_or(0),
                _ => 0,
            },
            key_rate: flow.key_rate,
        }
    }

    /// Its key rate, if any (`docs/groups.md#flow`).
    pub fn key_rate(self) -> Option<KeyRate> {
        self.key_rate
    }

    /// Whether a fetch walks unseen events one at a time ([`GateWalk`])
    /// rather than taking them in a run: they pass gates, or their keys
    /// are paced.
    pub fn walks(self) -> bool {
        self.is_gated() || self.key_rate.is_some()
    }

    /// The pacer of a fetch at `now` ([`super::Pacer`]): off without a key
    /// rate.
    pub fn pacer(self, now: Timestamp) -> Pacer {
        Pacer::new(self.key_rate, now)
    }

    /// The ordering it keeps.
    pub fn ordering(self) -> GroupOrdering {
        self.ordering
    }

    /// Whether any delivery has a gate.
    pub fn is_gated(self) -> bool {
        self.ordering != GroupOrdering::None || self.key_concurrency > 0
    }

    /// The gate an event with `key` passes, `None` when it passes none:
    /// its key under `ordering = "key"` or `flow.key_concurrency`, its
    /// partition's one gate (`""`) under `ordering = "partition"`.
    pub fn gate(self, key: Option<&str>) -> Option<&str> {
        match self.ordering {
            GroupOrdering::None if self.key_concurrency > 0 => key,
            ordering => ordering.gate(key),
        }
    }

    /// How many heads a gate may have: 1 under an ordering.
    pub fn slots(self) -> usize {
        match self.key_concurrency {
            0 => 1,
            n => n as usize,
        }
    }

    /// What a gate is named after, as stores that compute it in a
    /// statement take it: `"key"`, `"partition"`, or `"none"` (no gate).
    pub fn gate_source(self) -> &'static str {
        match self.ordering {
            GroupOrdering::None if self.key_concurrency > 0 => "key",
            ordering => ordering.as_str(),
        }
    }
}

/// What a fetch's walk must know of a gate it passes: how many heads it
/// has, and whether deliveries are parked behind them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateState {
    /// Its open deliveries that are not parked: out, or handed to the
    /// claims.
    pub heads: usize,
    /// Some of its deliveries are parked.
    pub parked: bool,
}

impl GateState {
    /// A gate with nothing open.
    pub const FREE: Self = Self {
        heads: 0,
        parked: false,
    };
    /// A gate of one slot that is full.
    pub const BUSY: Self = Self {
        heads: 1,
        parked: false,
    };

    /// [`GateState::BUSY`] or [`GateState::FREE`]: what a store that only
    /// asks whether a gate has any delivery open knows, enough under an
    /// ordering (one slot).
    pub fn busy(busy: bool) -> Self {
        if busy { Self::BUSY } else { Self::FREE }
    }

    /// The state of a gate of `slots` slots with `open` open deliveries,
    /// for a store that keeps only that count: the rule of [`regate`]
    /// keeps every gate at `min(open, slots)` heads, the rest parked.
    pub fn of_open(open: usize, slots: usize) -> Self {
        Self {
            heads: open.min(slots),
            parked: open > slots,
        }
    }

    /// Whether an event reaching this gate must be parked, `taken` heads
    /// being leased by the walk already.
    fn is_full(self, taken: usize, slots: usize) -> bool {
        self.parked || self.heads + taken >= slots
    }
}

/// The most unseen events one claim looks at in a partition before it
/// gives up for this fetch (`docs/groups.md#ordering`): under an ordering,
/// events whose gate is busy are parked as the cursor passes them, and a
/// long run of one busy key is parked over several fetches rather than in
/// one.
pub const WALK_PER_CLAIM: usize = 4096;

/// A fetch's walk over the unseen events of one partition of an ordered
/// group, from its cursor (`docs/groups.md#ordering`): an event whose gate
/// is free is leased, and its gate is busy from then on; one whose gate is
/// busy is parked behind its head; until `want` are leased, the high
/// watermark is passed or [`WALK_PER_CLAIM`] events were looked at. Under
/// `partition` every event shares one gate, so the walk stops at the first
/// busy one instead of parking the whole partition.
///
/// The store reads the events in the windows [`GateWalk::window`] names,
/// says which of the gates [`GateWalk::to_ask`] lists have a delivery open,
/// and hands both to [`GateWalk::pass`]; what to lease, what to park and
/// where the cursor goes are then in the walk.
#[derive(Debug)]
pub struct GateWalk {
    gating: Gating,
    want: usize,
    /// The walk looks at sequences below this.
    limit: u64,
    /// The next window's length; 0 before the first window, which holds
    /// what the walk wants by then (at least 16 events).
    span: u64,
    /// Stopped at a busy event under `partition` ordering.
    stopped: bool,
    /// Gates this walk leased events of, with how many.
    taken: HashMap<String, usize>,
    /// Gates this walk parked an event behind: everything after it of the
    /// gate is parked too.
    full: HashSet<String>,
    /// Sequences to lease now, with their gate.
    pub lease: Vec<(u64, Option<String>)>,
    /// Sequences to park behind their gate's head.
    pub park: Vec<(u64, String)>,
    /// Sequences whose key had no token (`flow.key_rate`): to write
    /// available and paced, due at the instant given, with their gate (a
    /// paced delivery is one of its gate's heads).
    pub pace: Vec<(u64, Option<String>, Timestamp)>,
    /// The cursor after the walk.
    pub next: u64,
}

impl GateWalk {
    /// The longest window read at once.
    const MAX_SPAN: u64 = 1024;

    /// A walk from `cursor` that wants `want` leases.
    pub fn new(gating: Gating, cursor: u64, want: usize) -> Self {
        Self {
            gating,
            want,
            limit: cursor.saturating_add(WALK_PER_CLAIM as u64),
            // The first window holds what is wanted when it is read (a
            // fetch's share may have grown by then: `want_more`); each next
            // one, after parked events, twice as many.
            span: 0,
            stopped: false,
            taken: HashMap::new(),
            full: HashSet::new(),
            lease: Vec::new(),
            park: Vec::new(),
            pace: Vec::new(),
            next: cursor,
        }
    }

    /// Raises what the walk wants by `more` leases: a fetch's share grew
    /// because another partition was spent ([`super::Share`]). The walk
    /// goes on from where it stopped, within the same bound on what one
    /// fetch looks at.
    pub fn want_more(&mut self, more: usize) {
        self.want += more;
    }

    /// Whether the walk is over for this fetch: it stopped at a busy event
    /// (under `partition`), passed `high_watermark`, or looked at as many
    /// events as one fetch may. A walk that is over and leased fewer than
    /// it wanted is spent.
    pub fn is_over(&self, high_watermark: u64) -> bool {
        self.stopped || self.next > high_watermark || self.next >= self.limit
    }

    /// The next sequences to read, both included, or `None` when the walk
    /// is over (it has what it wants, passed `high_watermark` or looked at
    /// as many events as one claim may).
    pub fn window(&mut self, high_watermark: u64) -> Option<(u64, u64)> {
        if self.lease.len() >= self.want || self.is_over(high_watermark) {
            return None;
        }
        if self.span == 0 {
            self.span = self.want.max(16) as u64;
        }
        let last = (self.next + self.span - 1)
            .min(high_watermark)
            .min(self.limit - 1);
        self.span = (self.span * 2).min(Self::MAX_SPAN);
        Some((self.next, last))
    }

    /// The gates of a window's events, given as (sequence, key), whose
    /// state the store must give [`GateWalk::pass`]: those this walk has
    /// not filled or parked behind itself.
    pub fn to_ask<'a>(
        &self,
        events: impl IntoIterator<Item = &'a (u64, Option<String>)>,
    ) -> HashSet<String> {
        let slots = self.gating.slots();
        events
            .into_iter()
            .filter_map(|(_, key)| self.gating.gate(key.as_deref()))
            .filter(|gate| {
                !self.full.contains(*gate) && self.taken.get(*gate).copied().unwrap_or(0) < slots
            })
            .map(str::to_owned)
            .collect()
    }

    /// Passes a window's events, (sequence, key) in sequence order from
    /// [`GateWalk::next`] on; `state` says what an asked gate holds in the
    /// store ([`GateState`]). A window without events ends the walk.
    pub fn pass(
        &mut self,
        events: impl IntoIterator<Item = (u64, Option<String>)>,
        state: impl Fn(&str) -> GateState,
    ) {
        self.pass_paced(events, state, &mut Pacer::default());
    }

    /// [`GateWalk::pass`] under a key rate: an event the gates let through
    /// takes a token of its key from `pacer` (which holds the TAT of every
    /// key among `events`: [`Pacer::unknown`]), and one that finds none is
    /// paced ([`GateWalk::pace`]) instead of leased — still a head of its
    /// gate, but not one of the leases the walk wants.
    pub fn pass_paced(
        &mut self,
        events: impl IntoIterator<Item = (u64, Option<String>)>,
        state: impl Fn(&str) -> GateState,
        pacer: &mut Pacer,
    ) {
        let slots = self.gating.slots();
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            self.stopped = true;
        }
        for (seq, key) in events {
            if self.lease.len() == self.want {
                return;
            }
            match self.gating.gate(key.as_deref()).map(str::to_owned) {
                None => match pacer.claim(key.as_deref(), Candidate::Unseen) {
                    Pace::Now => self.lease.push((seq, None)),
                    Pace::At(due) => self.pace.push((seq, None, due)),
                },
                Some(gate) => {
                    let taken = self.taken.get(&gate).copied().unwrap_or(0);
                    if self.full.contains(&gate)
                        || taken >= slots
                        || state(&gate).is_full(taken, slots)
                    {
                        if self.gating.ordering() == GroupOrdering::Partition {
                            self.stopped = true;
                            return;
                        }
                        self.full.insert(gate.clone());
                        self.park.push((seq, gate));
                    } else {
                        *self.taken.entry(gate.clone()).or_default() += 1;
                        match pacer.claim(key.as_deref(), Candidate::Unseen) {
                            Pace::Now => self.lease.push((seq, Some(gate))),
                            Pace::At(due) => self.pace.push((seq, Some(gate), due)),
                        }
                    }
                }
            }
            self.next = seq + 1;
        }
    }
}

/// A gate's open deliveries as [`regate`] needs to see them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateView {
    /// How many heads it may have ([`Gating::slots`]).
    pub slots: usize,
    /// How many of its deliveries are out: leased (their lease expired or
    /// not) and not re-opened.
    pub out: usize,
    /// Its deliveries handed to the claims (available, not parked), in
    /// sequence order.
    pub heads: Vec<u64>,
    /// Its lowest open deliveries that are not out — handed to the claims
    /// or parked — in sequence order: all of them, or at least `slots`.
    pub waiting: Vec<u64>,
}

impl GateView {
    /// The view of a gate of one slot (an ordering's): whether one of its
    /// deliveries is out, its head if it has one, and its lowest open
    /// delivery that is not out.
    pub fn one(out: bool, head: Option<u64>, waiting: Option<u64>) -> Self {
        Self {
            slots: 1,
            out: usize::from(out),
            heads: head.into_iter().collect(),
            waiting: waiting.into_iter().collect(),
        }
    }
}

/// What a gate changes so that it has the heads the rule gives it
/// ([`regate`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Regate {
    /// Parked deliveries to hand to the claims: new heads (claimable at
    /// once, or at their retry's due time).
    pub release: Vec<u64>,
    /// Deliveries handed to the claims to park again: they are no longer
    /// heads (a replay re-opened lower ones, or ones are out).
    pub park: Vec<u64>,
}

impl Regate {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.release.is_empty() && self.park.is_empty()
    }
}

/// The rule of a gate's heads (`docs/groups.md#ordering`,
/// `docs/groups.md#flow`): a gate has at most `slots` heads, its
/// deliveries out and, for the slots left, its lowest open deliveries
/// that are not out; every other open delivery is parked. Under an
/// ordering (one slot), while one of its deliveries is out the gate hands
/// out nothing, else its lowest open delivery is its head. Every change of
/// a gate ends with this decision:
///
/// - an ack, a dead letter (a reject, `max_attempts`, the poison guard):
///   the settled delivery leaves the gate, which then hands out its lowest
///   parked one;
/// - a retry: the settled delivery is parked (with its due time), and the
///   gate hands out its lowest open ones — the retried one itself, unless a
///   replay or a redrive re-opened a lower one while it was out;
/// - a replay or a redrive: the re-opened deliveries are parked (one that
///   was out is no longer), and each gate they belong to hands out its
///   lowest open ones, as many as its slots not taken by deliveries out.
///
/// A store reads `view`, writes the returned changes guarded on what it
/// read, and sets nothing else.
pub fn regate(view: &GateView) -> Regate {
    let free = view.slots.saturating_sub(view.out);
    let want: Vec<u64> = view.waiting.iter().copied().take(free).collect();
    Regate {
        release: want
            .iter()
            .copied()
            .filter(|seq| !view.heads.contains(seq))
            .collect(),
        park: view
            .heads
            .iter()
            .copied()
            .filter(|seq| !want.contains(seq))
            .collect(),
    }
}
