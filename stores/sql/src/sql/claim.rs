//! Claims and lease renewal (`docs/groups.md#claims`,
//! `docs/groups.md#leases-and-fencing`).
//!
//! A fetch runs in one write transaction: the poison guard first, then the
//! claimable deliveries of each selected partition (locked, where the
//! dialect locks, skipping rows other fetchers hold), then the cursor rows
//! (locked in partition order, so one fetcher at a time creates deliveries
//! in a partition). The shares per partition come from the shared
//! round-robin; re-claims and new deliveries are written in one statement
//! each, and the cursors move past the new ones. Lock order — delivery
//! rows, then cursor rows in partition order — keeps concurrent
//! transactions deadlock-free.
//!
//! A fetch of a gated group — one with an ordering (`docs/groups.md#ordering`)
//! or a `key_concurrency` (`docs/groups.md#flow`) — takes the cursor rows
//! first instead, and walks the unseen events, leasing those whose gate
//! has a slot free and parking the others. It can: every delivery row it
//! locks afterwards is taken skipping rows others hold, so it never waits
//! while holding the cursor rows.
//!
//! A fetch of a group with a `flow.key_rate` (`docs/groups.md#flow`) takes
//! the same path, holding the cursor rows from the start: every claim of a
//! keyed delivery takes a token of its key's bucket, whose TAT is read and
//! written (`rheo_key_rates`) under those rows, so two fetches never spend
//! one token. A claim that finds none writes its delivery available, due at
//! the slot the bucket reserves, with its `paced` mark, and is no lease;
//! one whose lease expired is never paced, but counted in its bucket. The
//! claims go through a partition's claimable deliveries in sequence order,
//! reading on past those they pace, before its unseen events.

use std::collections::HashMap;
use std::sync::Arc;

use super::engine::{exec, one, rows};
use super::{Access, Arg, Column, Conn, Dialect, SqlBackend, Statement, Table, args, big, int};
use super::{partitions, small};
use rheo_core::backend::policy::{
    Candidate as Claim, GateState, GateWalk, Gating, Held as Fenced, POISON_REASON, Pace, Pacer,
    Share, WALK_PER_CLAIM, claim_capacity, fence, quarantine_until,
};
use rheo_core::backend::{Error, FetchRequest, RenewRequest, Result, validate_renewals};
use rheo_core::model::{
    ConsumerId, EventId, Flow, GroupName, GroupOrdering, Lease, LeaseId, OnExhausted, SettleTarget,
    StreamName, Timestamp,
};

/// Positions and fresh lease ids as the columns `fetch_claim.sql` and
/// `fetch_materialize.sql` take.
#[derive(Debug, Default)]
struct Claims {
    partition: Vec<i32>,
    sequence: Vec<i64>,
    lease_id: Vec<String>,
}

impl Claims {
    fn push(&mut self, partition: u32, sequence: u64) {
        self.partition.push(partition as i32);
        self.sequence.push(int(sequence));
        self.lease_id.push(LeaseId::generate().as_str().to_owned());
    }

    /// Takes up to `ask` of partition `p`'s `claimable` deliveries after
    /// the `taken` ones taken before; how many it took.
    fn take(&mut self, p: u32, claimable: &[u64], taken: &mut usize, ask: usize) -> usize {
        let take = ask.min(claimable.len() - *taken);
        for &seq in &claimable[*taken..*taken + take] {
            self.push(p, seq);
        }
        *taken += take;
        take
    }

    fn rows(&self) -> Arg<'static> {
        Arg::Rows(vec![
            Column::I32(self.partition.clone()),
            Column::I64(self.sequence.clone()),
            Column::Text(self.lease_id.clone()),
        ])
    }
}

/// Deliveries a fetch paces (`docs/groups.md#flow`): (partition, sequence,
/// due) as `pace_insert.sql` and `pace_update.sql` take them.
#[derive(Debug, Default)]
struct PaceRows {
    partition: Vec<i32>,
    sequence: Vec<i64>,
    due: Vec<Timestamp>,
}

impl PaceRows {
    fn push(&mut self, partition: u32, sequence: u64, due: Timestamp) {
        self.partition.push(partition as i32);
        self.sequence.push(int(sequence));
        self.due.push(due);
    }

    fn is_empty(&self) -> bool {
        self.partition.is_empty()
    }

    fn rows(self) -> Arg<'static> {
        Arg::Rows(vec![
            Column::I32(self.partition),
            Column::I64(self.sequence),
            Column::Time(self.due),
        ])
    }
}

/// A claimable delivery of a key_rate group: its sequence, its event's key,
/// its paced mark and whether its lease expired.
type Candidate = (u64, Option<String>, bool, bool);

/// One partition's claimable deliveries under `flow.key_rate`, as the
/// fetch's claims go through them in sequence order (`docs/groups.md#flow`).
#[derive(Debug)]
struct Candidates {
    partition: u32,
    /// Read so far, lowest first.
    read: Vec<Candidate>,
    /// The next one to claim.
    next: usize,
    /// The last read found as many as it asked for: more may follow.
    more: bool,
    /// How many to read next time.
    batch: u32,
}

impl Candidates {
    /// The longest batch read at once.
    const MAX_BATCH: u32 = 1024;
}

/// A leased delivery as the fencing check sees it.
pub(super) struct Held {
    pub(super) partition: u32,
    pub(super) sequence: u64,
    pub(super) attempt: u32,
    pub(super) consumer_id: Option<String>,
    pub(super) leased_at: Option<Timestamp>,
    /// It belongs to a gate (`docs/groups.md#ordering`,
    /// `docs/groups.md#flow`).
    pub(super) gated: bool,
}

impl<D: Dialect> SqlBackend<D> {
    pub(super) async fn fetch_tx(&self, req: FetchRequest) -> Result<Vec<Lease>> {
        req.validate()?;
        let meta = self.meta(&req.stream).await?;
        let now = self.now();
        let expires_at = now.add_ms(req.lease_ms);
        let (s, g) = (&req.stream, &req.group);
        let mut tx = self.begin(Access::Write).await?;
        let config = self.group_config(&mut tx, s, g).await?;
        let selected = req.partitions.resolve(meta.partition_count)?;
        if selected.is_empty() {
            return Ok(Vec::new());
        }
        let gating = config.gating();
        // A group with gates or a key rate walks (docs/groups.md#flow); the
        // others take runs of unseen events, in two statements where the
        // dialect can.
        let walking = gating.walks();
        if !walking && D::FETCH_IN_TWO_STATEMENTS {
            let at = (now, expires_at);
            return self
                .fetch_two_statements(tx, &req, &selected, config.max_attempts, at)
                .await;
        }
        // A gated group holds its cursor rows from the start, so that no
        // settle lets a gate's next deliveries through while this fetch is
        // deciding what to park behind it (docs/groups.md#ordering,
        // docs/groups.md#flow), and a key_rate group so that no other fetch
        // reads or writes its keys' buckets meanwhile. Its fetches never
        // wait for a delivery row (they skip locked ones), so taking the
        // cursor rows first cannot deadlock with a settle.
        let mut cursors = Vec::new();
        if walking {
            let stored;
            (cursors, stored) = self.lock_cursors(&mut tx, s, g, &selected).await?;
            self.same_gating((s, g), gating, stored)?;
        }
        let max = small(config.max_attempts);
        // A group that quarantines holds a gated head out of attempts
        // instead of dead-lettering it (docs/groups.md#quarantine).
        let parks = small(u32::from(config.on_exhausted == OnExhausted::Quarantine));
        let poison = args![
            s,
            g,
            now,
            max,
            partitions(&selected),
            POISON_REASON,
            parks,
            quarantine_until()
        ];
        if !gating.is_gated() {
            exec::<D>(&mut tx, Statement::fetch_poison, poison).await?;
        } else {
            let mut dead = Vec::new();
            for row in rows::<D>(&mut tx, Statement::fetch_poison, poison).await? {
                if let Some(gate) = row.opt_text(1)? {
                    dead.push((row.u32(0)?, gate));
                }
            }
            Self::release_gates(&mut tx, s, g, gating.slots(), dead).await?;
        }
        let mut claimable: Vec<Vec<u64>> = vec![Vec::new(); selected.len()];
        // Under a key rate, each partition's candidates with their keys and
        // paced marks, read again past the last while claims go on.
        let mut paced_candidates: Vec<Candidates> = Vec::new();
        if gating.key_rate().is_some() {
            paced_candidates = selected
                .iter()
                .map(|&partition| Candidates {
                    partition,
                    read: Vec::new(),
                    next: 0,
                    more: false,
                    batch: req.limit,
                })
                .collect();
            let from: Vec<(u32, u64)> = selected.iter().map(|&p| (p, 0)).collect();
            let read = Self::pace_candidates(&mut tx, (s, g), now, req.limit, &from).await?;
            for (p, candidate) in read {
                if let Ok(i) = selected.binary_search(&p) {
                    paced_candidates[i].read.push(candidate);
                }
            }
            for (i, candidates) in paced_candidates.iter_mut().enumerate() {
                candidates.read.sort_unstable_by_key(|c| c.0);
                candidates.more = candidates.read.len() >= req.limit as usize;
                claimable[i] = candidates.read.iter().map(|c| c.0).collect();
            }
        } else {
            let args = args![s, g, partitions(&selected), now, small(req.limit)];
            for row in rows::<D>(&mut tx, Statement::fetch_candidates, args).await? {
                let p = row.u32(0)?;
                if let Ok(i) = selected.binary_search(&p) {
                    claimable[i].push(row.u64(1)?);
                }
            }
        }
        // The statement picks each partition's lowest claimable sequences
        // but SQL promises no order for the rows it returns (SQLite gives
        // them by rowid, so a delivery created later for a lower sequence
        // — an event before the start, replayed — came after higher ones):
        // the lowest go first (docs/groups.md#fairness).
        for candidates in &mut claimable {
            candidates.sort_unstable();
        }
        if !walking {
            let stored;
            (cursors, stored) = self.lock_cursors(&mut tx, s, g, &selected).await?;
            self.same_gating((s, g), gating, stored)?;
        }

        // Each partition's share by the shared rule (docs/groups.md#fairness):
        // its claimable deliveries first, then unseen events — all of which
        // a group without gates takes, and which a gated group walks,
        // leasing the events of gates with a slot free and parking the
        // others. A walk that comes back short has no more: its share goes
        // to the others.
        let first = self.rotate(s, g) % selected.len();
        let limit = req.limit as usize;
        // Under a key rate: the claimable deliveries and the unseen events
        // it paces, and each partition's buckets (docs/groups.md#flow).
        let (mut pace_old, mut pace_new) = (PaceRows::default(), PaceRows::default());
        let mut pacers: Vec<Pacer> = selected.iter().map(|_| gating.pacer(now)).collect();
        let (reclaim, mut fresh, moved, to, parked) = if !walking {
            let (reclaim, fresh, to) =
                plan_unordered(&selected, &claimable, &cursors, limit, first);
            let moved = selected.iter().map(|&p| p as i32).collect();
            (
                reclaim,
                fresh,
                moved,
                to.into_iter().map(int).collect(),
                (Vec::new(), Vec::new()),
            )
        } else {
            let mut share = share(&claimable, &cursors, limit, first);
            let mut reclaimed = vec![0; selected.len()];
            let mut walks: Vec<Option<GateWalk>> = selected.iter().map(|_| None).collect();
            let (mut reclaim, mut fresh) = (Claims::default(), Claims::default());
            while !share.done() {
                for (i, ask) in share.asks().into_iter().enumerate() {
                    if ask == 0 {
                        continue;
                    }
                    let p = selected[i];
                    let (take, spent) = match paced_candidates.get_mut(i) {
                        None => (
                            reclaim.take(p, &claimable[i], &mut reclaimed[i], ask),
                            false,
                        ),
                        Some(candidates) => {
                            let to = (&mut reclaim, &mut pace_old);
                            let pacer = &mut pacers[i];
                            Self::take_paced(&mut tx, (s, g), now, candidates, pacer, ask, to)
                                .await?
                        }
                    };
                    let want = if spent { 0 } else { ask - take };
                    let (cursor, hw) = cursors[i];
                    let walked = if want == 0 {
                        0
                    } else {
                        let walk = walks[i].get_or_insert_with(|| GateWalk::new(gating, cursor, 0));
                        let before = walk.lease.len();
                        walk.want_more(want);
                        Self::walk(&mut tx, (s, g), p, walk, hw, &mut pacers[i]).await?;
                        walk.lease.len() - before
                    };
                    share.gave(i, ask, take + walked);
                }
            }
            let (mut moved, mut to) = (Vec::new(), Vec::new());
            let mut parked = (Vec::new(), Vec::new());
            for (i, &p) in selected.iter().enumerate() {
                let next = match walks[i].take() {
                    None => cursors[i].0,
                    Some(walk) => {
                        for (seq, _) in walk.lease {
                            fresh.push(p, seq);
                        }
                        parked.0.extend(walk.park.iter().map(|_| p as i32));
                        parked.1.extend(walk.park.iter().map(|(seq, _)| int(*seq)));
                        for (seq, _, due) in walk.pace {
                            pace_new.push(p, seq, due);
                        }
                        walk.next
                    }
                };
                moved.push(p as i32);
                to.push(int(next));
            }
            (reclaim, fresh, moved, to, parked)
        };

        let leased = || args![s, g, &req.consumer_id, now, expires_at];
        let mut claimed = Vec::with_capacity(reclaim.partition.len() + fresh.partition.len());
        if !reclaim.partition.is_empty() {
            let mut args = leased();
            args.push(reclaim.rows());
            for row in rows::<D>(&mut tx, Statement::fetch_claim, args).await? {
                claimed.push(((row.u32(0)?, row.u64(1)?), row.u32(2)?, row.text(3)?));
            }
        }
        if !fresh.partition.is_empty() {
            self.dialect
                .wrote(Table::Deliveries, fresh.partition.len() as u64);
            let mut args = leased();
            args.push(gating.gate_source().into());
            args.push(fresh.rows());
            exec::<D>(&mut tx, Statement::fetch_materialize, args).await?;
            for i in 0..fresh.partition.len() {
                let position = (fresh.partition[i] as u32, fresh.sequence[i] as u64);
                claimed.push((position, 1, std::mem::take(&mut fresh.lease_id[i])));
            }
        }
        if !parked.0.is_empty() {
            self.dialect.wrote(Table::Deliveries, parked.0.len() as u64);
            let rows = Arg::Rows(vec![Column::I32(parked.0), Column::I64(parked.1)]);
            let args = args![s, g, gating.gate_source(), rows];
            exec::<D>(&mut tx, Statement::fetch_park, args).await?;
        }
        if !pace_old.is_empty() {
            let args = args![s, g, pace_old.rows()];
            exec::<D>(&mut tx, Statement::pace_update, args).await?;
        }
        if !pace_new.is_empty() {
            self.dialect
                .wrote(Table::Deliveries, pace_new.partition.len() as u64);
            let args = args![s, g, gating.gate_source(), pace_new.rows()];
            exec::<D>(&mut tx, Statement::pace_insert, args).await?;
        }
        Self::store_tats(&mut tx, (s, g), now, &selected, &pacers).await?;
        // Every selected partition: the cursor past the new deliveries (and
        // where the dialect keeps one, the scan floor up to the lowest open
        // delivery).
        let moved = Arg::Rows(vec![Column::I32(moved), Column::I64(to)]);
        exec::<D>(&mut tx, Statement::advance_cursors, args![s, g, moved]).await?;

        let positions: Vec<(u32, u64)> = claimed.iter().map(|(pos, _, _)| *pos).collect();
        let mut events = Self::events_at(&mut tx, s, &positions).await?;
        Self::commit(tx).await?;
        let mut leases = Vec::with_capacity(claimed.len());
        for ((p, seq), attempt, lease_id) in claimed {
            let event = events
                .remove(&(p, seq))
                .ok_or_else(|| Error::Failed(format!("event {p}/{seq} is missing")))?;
            let lease_id = LeaseId::parse(lease_id).map_err(|e| super::corrupt("lease id", e))?;
            let consumer = req.consumer_id.clone();
            let event = Arc::new(event);
            let lease = Lease::new(
                g.clone(),
                event,
                lease_id,
                consumer,
                attempt,
                now,
                expires_at,
            );
            leases.push(lease);
        }
        leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
        Ok(leases)
    }

    /// The fetch of a group without gates in two statements, where the
    /// dialect can write several tables in one (docs/benchmarks.md): the
    /// poison guard, the claimable deliveries and the cursor rows in one
    /// (`fetch_open.sql`, in the lock order of the statements it stands
    /// for), the same decision as [`Self::fetch_tx`] makes, then the
    /// re-claims, the new deliveries, the cursors and the events read in
    /// the other (`fetch_lease.sql`). Four round trips with BEGIN and
    /// COMMIT, where the statements one at a time made eight.
    async fn fetch_two_statements(
        &self,
        mut tx: super::Tx<D>,
        req: &FetchRequest,
        selected: &[u32],
        max_attempts: u32,
        (now, expires_at): (Timestamp, Timestamp),
    ) -> Result<Vec<Lease>> {
        let (s, g) = (&req.stream, &req.group);
        // Arguments in the order that lets every statement after SQLite's
        // first name its own as ?1…?k, without a gap (see
        // `sqlite::tests::several_statements_in_one_call_bind_every_parameter`).
        let args = args![
            s,
            g,
            partitions(selected),
            now,
            small(req.limit),
            small(max_attempts),
            POISON_REASON
        ];
        let mut claimable: Vec<Vec<u64>> = vec![Vec::new(); selected.len()];
        let mut cursors = vec![None; selected.len()];
        let mut stored = None;
        for row in rows::<D>(&mut tx, Statement::fetch_open, args).await? {
            let Ok(i) = selected.binary_search(&row.u32(1)?) else {
                continue;
            };
            match row.u32(0)? {
                1 => claimable[i].push(row.u64(2)?),
                2 => {
                    cursors[i] = Some((row.u64(2)?, row.u64(3)?));
                    stored = Some(super::gating(row.text(4)?, row.text(5)?)?);
                }
                // Dead-lettered: a group without gates has none to let go.
                _ => {}
            }
        }
        let Some(cursors) = cursors.into_iter().collect::<Option<Vec<_>>>() else {
            return Err(self.stale(s));
        };
        let ungated = Gating::new(GroupOrdering::None, &Flow::default());
        self.same_gating((s, g), ungated, stored)?;
        for candidates in &mut claimable {
            candidates.sort_unstable();
        }
        let first = self.rotate(s, g) % selected.len();
        let (reclaim, fresh, to) =
            plan_unordered(selected, &claimable, &cursors, req.limit as usize, first);
        let leasing = reclaim.partition.len() + fresh.partition.len();
        if !fresh.partition.is_empty() {
            self.dialect
                .wrote(Table::Deliveries, fresh.partition.len() as u64);
        }
        // One row per lease to make (kind 0 again, 1 new) and per cursor
        // (kind 2, the cursor in the sequence column).
        let mut kind = Vec::with_capacity(leasing + selected.len());
        let mut part = Vec::with_capacity(leasing + selected.len());
        let mut seq = Vec::with_capacity(leasing + selected.len());
        let mut lease = Vec::with_capacity(leasing + selected.len());
        for (k, claims) in [(0, reclaim), (1, fresh)] {
            kind.extend(std::iter::repeat_n(k, claims.partition.len()));
            part.extend(claims.partition);
            seq.extend(claims.sequence);
            lease.extend(claims.lease_id);
        }
        for (&p, cursor) in selected.iter().zip(to) {
            kind.push(2);
            part.push(p as i32);
            seq.push(int(cursor));
            lease.push(String::new());
        }
        let rows_arg = Arg::Rows(vec![
            Column::I32(kind),
            Column::I32(part),
            Column::I64(seq),
            Column::Text(lease),
        ]);
        let gate_source = ungated.gate_source();
        let args = args![
            rows_arg,
            s,
            g,
            &req.consumer_id,
            now,
            expires_at,
            gate_source
        ];
        let mut leases = Vec::with_capacity(leasing);
        for row in rows::<D>(&mut tx, Statement::fetch_lease, args).await? {
            let event = Arc::new(row.event(s, 0)?);
            let lease_id =
                LeaseId::parse(row.text(9)?).map_err(|e| super::corrupt("lease id", e))?;
            let consumer = req.consumer_id.clone();
            let attempt = row.u32(8)?;
            leases.push(Lease::new(
                g.clone(),
                event,
                lease_id,
                consumer,
                attempt,
                now,
                expires_at,
            ));
        }
        if leases.len() != leasing {
            // An event gone from under a delivery (the statement's join
            // found none): nothing is committed.
            return Err(Error::Failed(format!(
                "{} of the {leasing} events to lease are missing",
                leasing - leases.len()
            )));
        }
        Self::commit(tx).await?;
        leases.sort_unstable_by_key(|l| (l.event.partition, l.event.sequence));
        Ok(leases)
    }

    /// Locks the cursor rows of `selected` (sorted) in partition order;
    /// returns each one's (cursor, high watermark), in `selected`'s order,
    /// and the group's gating (its ordering and flow) as stored (a reset
    /// that changes them holds every one of these rows). A selected
    /// partition without its row means the group (or stream) was deleted
    /// since this node read it, or the stream created again with fewer
    /// partitions: [`Self::stale`], before anything is written for it.
    pub(super) async fn lock_cursors(
        &self,
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        selected: &[u32],
    ) -> Result<(Vec<(u64, u64)>, Option<Gating>)> {
        let args = args![s, g, partitions(selected)];
        let mut cursors = vec![None; selected.len()];
        let mut gating = None;
        for row in rows::<D>(conn, Statement::fetch_lock_cursors, args).await? {
            if let Ok(i) = selected.binary_search(&row.u32(0)?) {
                cursors[i] = Some((row.u64(1)?, row.u64(2)?));
            }
            gating = Some(super::gating(row.text(3)?, row.text(4)?)?);
        }
        match cursors.into_iter().collect::<Option<Vec<_>>>() {
            Some(cursors) => Ok((cursors, gating)),
            None => Err(self.stale(s)),
        }
    }

    /// Holds a fetch to the gating (ordering and flow) stored with the
    /// cursor rows it locked: when the cached one is stale (another node's
    /// reset changed it), the cache is dropped and the fetch rolled back to
    /// run again ([`super::conflict`]).
    fn same_gating(
        &self,
        (s, g): (&StreamName, &GroupName),
        cached: Gating,
        stored: Option<Gating>,
    ) -> Result<()> {
        match stored {
            Some(stored) if stored != cached => {
                self.forget_group(s, g);
                Err(super::conflict(format!(
                    "the group's gates are {stored:?} now, not {cached:?}"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Walks a gated group's unseen events of partition `p` on, by the
    /// shared rule ([`GateWalk`]), until it has what it wants or is over:
    /// the store reads each window's keys and says, of each gate the walk
    /// asks about, how many heads it has and whether it has deliveries
    /// parked ([`GateState`]). The walk's own leases and parks are written
    /// once it is over, so a gate asked again in a later window is
    /// counted as the store holds it, and the walk adds what it took.
    ///
    /// Under a key rate each event the gates let through takes a token of
    /// its key from `pacer` ([`GateWalk::pass_paced`]): the buckets of a
    /// window's keys are read before it is passed.
    async fn walk(
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        walk: &mut GateWalk,
        hw: u64,
        pacer: &mut Pacer,
    ) -> Result<()> {
        while let Some((first, last)) = walk.window(hw) {
            let args = args![s, small(p), big(first), big(last)];
            let mut events = Vec::new();
            for row in rows::<D>(conn, Statement::fetch_window, args).await? {
                events.push((row.u64(0)?, row.opt_text(1)?));
            }
            let unknown = pacer.unknown(events.iter().map(|(_, key)| key.as_deref()));
            Self::load_tats(conn, (s, g), p, pacer, unknown).await?;
            let asked = walk.to_ask(&events);
            let mut states: HashMap<String, GateState> = HashMap::new();
            if !asked.is_empty() {
                let asked = Arg::List(Column::Text(asked.into_iter().collect()));
                let args = args![s, g, small(p), asked];
                for row in rows::<D>(conn, Statement::gates_busy, args).await? {
                    let state = GateState {
                        heads: usize::try_from(row.u64(1)?).unwrap_or(usize::MAX),
                        parked: row.u64(2)? != 0,
                    };
                    states.insert(row.text(0)?, state);
                }
            }
            let state = |gate: &str| states.get(gate).copied().unwrap_or(GateState::FREE);
            walk.pass_paced(events, state, pacer);
        }
        Ok(())
    }

    /// Reads a key_rate group's claimable deliveries of each (partition,
    /// after) in `from`: at most `limit` of each partition's past `after`,
    /// with their events' keys, their paced marks and whether their leases
    /// expired (`pace_candidates.sql`).
    async fn pace_candidates(
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        now: Timestamp,
        limit: u32,
        from: &[(u32, u64)],
    ) -> Result<Vec<(u32, Candidate)>> {
        let (parts, after): (Vec<i32>, Vec<i64>) =
            from.iter().map(|&(p, seq)| (p as i32, int(seq))).unzip();
        let from = Arg::Rows(vec![Column::I32(parts), Column::I64(after)]);
        let args = args![s, g, now, small(limit), from];
        let mut read = Vec::new();
        for row in rows::<D>(conn, Statement::pace_candidates, args).await? {
            let candidate = (
                row.u64(1)?,
                row.opt_text(2)?,
                row.u64(3)? != 0,
                row.u64(4)? != 0,
            );
            read.push((row.u32(0)?, candidate));
        }
        Ok(read)
    }

    /// Loads into `pacer` the buckets (TATs) of partition `p`'s `keys` as
    /// the store holds them (`docs/groups.md#flow`); a key without a row
    /// has a full bucket.
    async fn load_tats(
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        p: u32,
        pacer: &mut Pacer,
        keys: Vec<String>,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut stored = HashMap::new();
        let args = args![s, g, small(p), Arg::List(Column::Text(keys.clone()))];
        for row in rows::<D>(conn, Statement::pace_tats, args).await? {
            stored.insert(row.text(0)?, row.i64(1)?);
        }
        for key in keys {
            let tat = stored.remove(&key);
            pacer.load(key, tat);
        }
        Ok(())
    }

    /// Claims up to `ask` of a key_rate group's claimable deliveries of one
    /// partition, in sequence order, each taking a token of its key
    /// (`docs/groups.md#flow`): one that finds none is paced (to
    /// `to.1`) and the next one is taken instead; one whose lease expired
    /// goes out again, counted in its bucket. Reads more candidates
    /// past the last while the partition may have more. Returns how many it
    /// took, and whether the partition is spent for this fetch (it looked
    /// at as many as one claim may, [`WALK_PER_CLAIM`]).
    async fn take_paced(
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        now: Timestamp,
        candidates: &mut Candidates,
        pacer: &mut Pacer,
        ask: usize,
        (reclaim, paced): (&mut Claims, &mut PaceRows),
    ) -> Result<(usize, bool)> {
        let p = candidates.partition;
        let mut took = 0;
        loop {
            let unread = &candidates.read[candidates.next..];
            let unknown = pacer.unknown(unread.iter().map(|c| c.1.as_deref()));
            Self::load_tats(conn, (s, g), p, pacer, unknown).await?;
            while took < ask && candidates.next < candidates.read.len() {
                if candidates.next >= WALK_PER_CLAIM {
                    return Ok((took, true));
                }
                let (seq, key, was_paced, expired) = &candidates.read[candidates.next];
                candidates.next += 1;
                let candidate = if *expired {
                    Claim::Expired
                } else {
                    Claim::Due { paced: *was_paced }
                };
                match pacer.claim(key.as_deref(), candidate) {
                    Pace::Now => {
                        reclaim.push(p, *seq);
                        took += 1;
                    }
                    Pace::At(due) => paced.push(p, *seq, due),
                }
            }
            if took == ask || !candidates.more {
                return Ok((took, false));
            }
            let after = candidates.read.last().map_or(0, |c| c.0);
            candidates.batch = (candidates.batch.saturating_mul(2)).min(Candidates::MAX_BATCH);
            let batch = candidates.batch;
            let read = Self::pace_candidates(conn, (s, g), now, batch, &[(p, after)]).await?;
            let mut read: Vec<Candidate> = read.into_iter().map(|(_, c)| c).collect();
            read.sort_unstable_by_key(|c| c.0);
            candidates.more = read.len() >= batch as usize;
            candidates.read.extend(read);
        }
    }

    /// Stores the buckets (TATs) the fetch's claims changed in each
    /// partition, forgetting those of the same partitions that are full
    /// again (`pace_sweep.sql`, `pace_store.sql`, `docs/groups.md#flow`).
    async fn store_tats(
        conn: &mut Conn<D>,
        (s, g): (&StreamName, &GroupName),
        now: Timestamp,
        selected: &[u32],
        pacers: &[Pacer],
    ) -> Result<()> {
        let (mut parts, mut keys, mut tats) = (Vec::new(), Vec::new(), Vec::new());
        for (&p, pacer) in selected.iter().zip(pacers) {
            for (key, tat) in pacer.changed() {
                parts.push(p as i32);
                keys.push(key.to_owned());
                tats.push(tat);
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        let now_us = now.as_millis().saturating_mul(1000);
        let rows = || {
            Arg::Rows(vec![
                Column::I32(parts.clone()),
                Column::Text(keys.clone()),
                Column::I64(tats.clone()),
            ])
        };
        let now_us = Arg::I64(now_us);
        let sweep = args![s, g, now_us.clone(), rows()];
        exec::<D>(conn, Statement::pace_sweep, sweep).await?;
        exec::<D>(conn, Statement::pace_store, args![s, g, now_us, rows()]).await?;
        Ok(())
    }

    /// Lets each (partition, gate) hand out its lowest parked deliveries
    /// for the slots its heads leave free, `slots` in all
    /// (`docs/groups.md#ordering`, `docs/groups.md#flow`), after heads were
    /// acked, dead-lettered, retried or trimmed away; returns how many were
    /// let through. The caller holds the partitions' cursor rows, and read
    /// `slots` with them or under a lock a reset's change of it waits for.
    pub(super) async fn release_gates(
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        slots: usize,
        gates: Vec<(u32, String)>,
    ) -> Result<u64> {
        if gates.is_empty() {
            return Ok(0);
        }
        let (parts, names): (Vec<i32>, Vec<String>) =
            gates.into_iter().map(|(p, gate)| (p as i32, gate)).unzip();
        let pairs = Arg::Rows(vec![Column::I32(parts), Column::Text(names)]);
        let slots = big(slots as u64);
        exec::<D>(conn, Statement::release_gates, args![s, g, slots, pairs]).await
    }

    /// The fencing check ([`fence`]): the delivery must be leased under
    /// `target`.
    /// The outer error is the call's; the inner one the item's.
    pub(super) async fn fence(
        conn: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        target: &SettleTarget,
    ) -> Result<Result<Held>> {
        let args = args![s, g, &target.event_id];
        let Some(row) = one::<D>(conn, Statement::lease_by_event, args).await? else {
            return Ok(Err(Error::StaleLease));
        };
        let status = row.text(2)?;
        let lease_id = row.opt_text(4)?;
        let held = lease_id
            .as_deref()
            .filter(|_| status == "leased")
            .map(|id| Fenced {
                lease_id: id,
                receipt: id,
            });
        if let Err(e) = fence(held, target) {
            return Ok(Err(e));
        }
        Ok(Ok(Held {
            partition: row.u32(0)?,
            sequence: row.u64(1)?,
            attempt: row.u32(3)?,
            consumer_id: row.opt_text(5)?,
            leased_at: row.opt_ts(6)?,
            gated: row.opt_text(8)?.is_some(),
        }))
    }

    pub(super) async fn renew_tx(&self, req: RenewRequest) -> Result<Lease> {
        req.validate()?;
        self.meta(&req.stream).await?;
        let now = self.now();
        let (s, g) = (&req.stream, &req.group);
        let mut tx = self.begin(Access::Write).await?;
        self.group_config(&mut tx, s, g).await?;
        let (held, expires_at) =
            match Self::renew_in(&mut tx, s, g, &req.target, req.lease_ms, now).await? {
                Ok(renewed) => renewed,
                Err(e) => {
                    // A lease of a group deleted since this node read it
                    // answers that it is gone, one of an event retention
                    // removed that it was (docs/log.md#retention).
                    self.confirm_group(&mut tx, s, g).await?;
                    let id = &req.target.event_id;
                    return Err(Self::removed_event(&mut tx, s, id, e).await?);
                }
            };
        let position = (held.partition, held.sequence);
        let event = Self::events_at(&mut tx, s, &[position])
            .await?
            .remove(&position)
            .ok_or_else(|| Error::Failed(format!("event {position:?} is missing")))?;
        Self::commit(tx).await?;
        let consumer = ConsumerId::parse(held.consumer_id.unwrap_or_default())
            .map_err(|e| super::corrupt("consumer id", e))?;
        let leased_at = held.leased_at.unwrap_or(now);
        let (lease_id, attempt) = (req.target.lease_id, held.attempt);
        let event = Arc::new(event);
        let lease = Lease::new(
            req.group, event, lease_id, consumer, attempt, leased_at, expires_at,
        );
        Ok(lease)
    }

    /// Renews each lease in one transaction; per-item results.
    pub(super) async fn renew_many_tx(
        &self,
        s: &StreamName,
        g: &GroupName,
        targets: Vec<SettleTarget>,
        lease_ms: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        validate_renewals(&targets, lease_ms)?;
        self.meta(s).await?;
        let now = self.now();
        let mut tx = self.begin(Access::Write).await?;
        self.group_config(&mut tx, s, g).await?;
        let mut results = Vec::with_capacity(targets.len());
        for target in &targets {
            let renewed = Self::renew_in(&mut tx, s, g, target, lease_ms, now).await?;
            results.push(renewed.map(|(_, expires_at)| expires_at));
        }
        if results.iter().any(|r| r.is_err()) {
            self.confirm_group(&mut tx, s, g).await?;
            let ids: Vec<&EventId> = targets.iter().map(|t| &t.event_id).collect();
            Self::removed_events(&mut tx, s, &ids, &mut results).await?;
        }
        Self::commit(tx).await?;
        Ok(results)
    }

    /// Fences `target` and moves its expiry to `now + lease_ms`. The outer
    /// error is the call's; the inner one the item's.
    async fn renew_in(
        tx: &mut Conn<D>,
        s: &StreamName,
        g: &GroupName,
        target: &SettleTarget,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<Result<(Held, Timestamp)>> {
        let held = match Self::fence(tx, s, g, target).await? {
            Ok(held) => held,
            Err(e) => return Ok(Err(e)),
        };
        let expires_at = now.add_ms(lease_ms);
        let (t, p, seq) = (target, small(held.partition), big(held.sequence));
        let args = args![s, g, &t.event_id, &t.lease_id, expires_at, p, seq];
        if exec::<D>(tx, Statement::renew, args).await? != 1 {
            return Ok(Err(Error::StaleLease));
        }
        Ok(Ok((held, expires_at)))
    }
}

/// A fetch's limit shared among its partitions round-robin from `first`,
/// each bounded by what it can give ([`claim_capacity`]).
fn share(claimable: &[Vec<u64>], cursors: &[(u64, u64)], limit: usize, first: usize) -> Share {
    let bound = claimable
        .iter()
        .zip(cursors)
        .map(|(c, (cursor, hw))| claim_capacity(c.len(), *cursor, *hw))
        .collect();
    Share::new(bound, limit, first)
}

/// An unordered fetch's leases by the shared rule (`docs/groups.md#fairness`,
/// [`Share`]): each partition's share of `limit`, its claimable deliveries
/// (sorted, lowest first) before the events past its cursor. Returns the
/// deliveries to lease again, the new ones, and each partition's cursor
/// past the new ones.
fn plan_unordered(
    selected: &[u32],
    claimable: &[Vec<u64>],
    cursors: &[(u64, u64)],
    limit: usize,
    first: usize,
) -> (Claims, Claims, Vec<u64>) {
    let mut share = share(claimable, cursors, limit, first);
    let (mut reclaim, mut fresh) = (Claims::default(), Claims::default());
    let mut reclaimed = vec![0; selected.len()];
    let mut fresh_to: Vec<u64> = cursors.iter().map(|(cursor, _)| *cursor).collect();
    while !share.done() {
        for (i, ask) in share.asks().into_iter().enumerate() {
            if ask == 0 {
                continue;
            }
            let p = selected[i];
            let take = reclaim.take(p, &claimable[i], &mut reclaimed[i], ask);
            let hw = cursors[i].1;
            let unseen = hw.saturating_sub(fresh_to[i].saturating_sub(1));
            let n = ((ask - take) as u64).min(unseen);
            for seq in fresh_to[i]..fresh_to[i] + n {
                fresh.push(p, seq);
            }
            fresh_to[i] += n;
            share.gave(i, ask, take + n as usize);
        }
    }
    (reclaim, fresh, fresh_to)
}
