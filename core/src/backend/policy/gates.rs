//! Group ordering's decisions (`docs/groups.md#ordering`): which events a
//! fetch's walk over unseen events leases or parks ([`GateWalk`]), and
//! which delivery heads a gate after a settle, a poison guard, a replay or
//! a redrive ([`regate`]). A store reads the gate, asks here, and writes
//! what it is told under a guard on what it read; it never decides itself.

use std::collections::HashSet;

use crate::model::GroupOrdering;

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
    ordering: GroupOrdering,
    want: usize,
    /// The walk looks at sequences below this.
    limit: u64,
    /// The next window's length; 0 before the first window, which holds
    /// what the walk wants by then (at least 16 events).
    span: u64,
    /// Stopped at a busy event under `partition` ordering.
    stopped: bool,
    /// Gates this walk leased an event of.
    taken: HashSet<String>,
    /// Sequences to lease now, with their gate.
    pub lease: Vec<(u64, Option<String>)>,
    /// Sequences to park behind their gate's head.
    pub park: Vec<(u64, String)>,
    /// The cursor after the walk.
    pub next: u64,
}

impl GateWalk {
    /// The longest window read at once.
    const MAX_SPAN: u64 = 1024;

    /// A walk from `cursor` that wants `want` leases.
    pub fn new(ordering: GroupOrdering, cursor: u64, want: usize) -> Self {
        Self {
            ordering,
            want,
            limit: cursor.saturating_add(WALK_PER_CLAIM as u64),
            // The first window holds what is wanted when it is read (a
            // fetch's share may have grown by then: `want_more`); each next
            // one, after parked events, twice as many.
            span: 0,
            stopped: false,
            taken: HashSet::new(),
            lease: Vec::new(),
            park: Vec::new(),
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
    /// not leased an event of.
    pub fn to_ask<'a>(
        &self,
        events: impl IntoIterator<Item = &'a (u64, Option<String>)>,
    ) -> HashSet<String> {
        events
            .into_iter()
            .filter_map(|(_, key)| self.ordering.gate(key.as_deref()))
            .filter(|gate| !self.taken.contains(*gate))
            .map(str::to_owned)
            .collect()
    }

    /// Passes a window's events, (sequence, key) in sequence order from
    /// [`GateWalk::next`] on; `busy` says whether an asked gate has a
    /// delivery open. A window without events ends the walk.
    pub fn pass(
        &mut self,
        events: impl IntoIterator<Item = (u64, Option<String>)>,
        busy: impl Fn(&str) -> bool,
    ) {
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            self.stopped = true;
        }
        for (seq, key) in events {
            if self.lease.len() == self.want {
                return;
            }
            match self.ordering.gate(key.as_deref()).map(str::to_owned) {
                None => self.lease.push((seq, None)),
                Some(gate) if self.taken.contains(&gate) || busy(&gate) => {
                    if self.ordering == GroupOrdering::Partition {
                        self.stopped = true;
                        return;
                    }
                    self.park.push((seq, gate));
                }
                Some(gate) => {
                    self.taken.insert(gate.clone());
                    self.lease.push((seq, Some(gate)));
                }
            }
            self.next = seq + 1;
        }
    }
}

/// A gate's open deliveries as [`regate`] needs to see them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateView {
    /// One of its deliveries is out: leased (its lease expired or not) and
    /// not re-opened.
    pub out: bool,
    /// Its delivery handed to the claims — available, not parked — if it
    /// has one.
    pub head: Option<u64>,
    /// Its lowest open delivery: out, head or parked.
    pub lowest: Option<u64>,
}

/// What a gate changes so that it has the one head the rule gives it
/// ([`regate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regate {
    /// The parked delivery to hand to the claims: the gate's new head
    /// (claimable at once, or at its retry's due time).
    pub release: Option<u64>,
    /// The delivery handed to the claims to park again: it is no longer
    /// the head (a replay re-opened a lower one, or one is out).
    pub park: Option<u64>,
}

/// The rule of a gate's head (`docs/groups.md#ordering`): while one of its
/// deliveries is out, the gate hands out nothing; else its lowest open
/// delivery is its head. Every change of a gate ends with this decision:
///
/// - an ack, a dead letter (a reject, `max_attempts`, the poison guard):
///   the settled delivery leaves the gate, which then hands out its lowest
///   parked one;
/// - a retry: the settled delivery is parked (with its due time), and the
///   gate hands out its lowest open one — the retried one itself, unless a
///   replay or a redrive re-opened a lower one while it was out;
/// - a replay or a redrive: the re-opened deliveries are parked (one that
///   was out is no longer), and each gate they belong to hands out its
///   lowest open one, unless another of its deliveries is still out.
///
/// A store reads `view`, writes the returned changes guarded on what it
/// read, and sets nothing else.
pub fn regate(view: GateView) -> Regate {
    let head = if view.out { None } else { view.lowest };
    if view.head == head {
        return Regate::default();
    }
    Regate {
        release: head,
        park: view.head,
    }
}
