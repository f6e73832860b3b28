//! The run: generate a step, apply it to the backend and to the
//! reference model, compare. The fetch (`fetch.rs`), the concurrent
//! settles of one lease and the restart (`race.rs`) live apart.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;

use super::super::{Harness, gn};
use super::reference::{Code, DeadRow, Model, OutRow, ParkedRow};
use crate::backend::policy::is_quarantine;
use crate::backend::quarantine::{Parked, ReleaseRequest, parked_keys, release};
use crate::backend::{
    Backend, DeadLettersRequest, LeasesRequest, Partitions, Redrive, RenewRequest, Replay,
    ResetRequest, Result,
};
use crate::model::{
    Appended, EventId, EventInput, Flow, GroupName, GroupOrdering, HeldLease, Lease, LeaseId,
    OnExhausted, SettleOp, SettleTarget, Settlement, StartAfter, StartPosition, StreamName,
    Timestamp,
};

pub(super) const LEASES_MS: [u64; 4] = [1_000, 2_000, 5_000, 30_000];
const ADVANCES_MS: [u64; 7] = [1, 499, 500, 1_000, 2_000, 5_000, 31_000];
/// Group orderings, drawn at random for each group and for a reset that
/// changes it: `key` most often, since it has the most rules.
pub(super) const ORDERINGS: [GroupOrdering; 5] = [
    GroupOrdering::None,
    GroupOrdering::Key,
    GroupOrdering::Key,
    GroupOrdering::Partition,
    GroupOrdering::Partition,
];

/// A group's flow (docs/groups.md#flow) drawn at random: a
/// `key_concurrency` of 1 to 3 three times in four, else none, and a
/// `key_rate` (a half, one or two a second, bursts of 1 to 3) one time in
/// three.
pub(super) fn random_flow(rng: &mut impl Rng) -> Flow {
    Flow {
        key_concurrency: rng.random_bool(0.75).then(|| rng.random_range(1..=3)),
        key_rate: rng.random_bool(1.0 / 3.0).then(|| crate::model::KeyRate {
            per_second: [0.5, 1.0, 2.0][rng.random_range(0..3)],
            burst: rng.random_range(1..=3),
        }),
    }
}

/// How often a step restarts a backend that can be reopened: a few times
/// a run.
const RESTART_CHANCE: f64 = 0.015;

/// Event keys, drawn at random: three keys and no key.
const KEYS: [Option<&str>; 4] = [Some("a"), Some("b"), Some("c"), None];
pub(super) const DELAYS_MS: [Option<u64>; 5] = [None, Some(0), Some(500), Some(1_000), Some(3_000)];

/// What differed, for the report.
pub(super) type Divergence = String;

/// `"ok"` or the error code.
pub(super) fn outcome<T>(r: &Result<T>) -> Code {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

pub(super) fn expect_code<T>(
    what: &str,
    got: &Result<T>,
    want: Code,
) -> std::result::Result<(), Divergence> {
    match (got, want) {
        (Ok(_), "ok") => Ok(()),
        (Err(e), want) if e.code() == want => Ok(()),
        (Err(e), want) => Err(format!("{what}: expected {want}, got error {e:?}")),
        (Ok(_), want) => Err(format!("{what}: expected {want}, got success")),
    }
}

pub(super) fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &T,
    want: &T,
) -> std::result::Result<(), Divergence> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}:\n  backend: {got:?}\n  model:   {want:?}"))
    }
}

/// One randomized run against one backend.
pub(super) struct Run<'h> {
    pub(super) h: &'h Harness,
    /// The backend under test: the harness's, or the one a restart opened
    /// in its place.
    pub(super) backend: Arc<dyn Backend>,
    pub(super) rng: StdRng,
    pub(super) model: Model,
    pub(super) stream: StreamName,
    /// Every lease the backend handed out: (group index, lease).
    pub(super) issued: Vec<(usize, Lease)>,
    pub(super) lease_ids: HashSet<LeaseId>,
    pub(super) next_id: u64,
    /// One line per step so far.
    pub(super) steps: Vec<String>,
    /// Restarts so far (see [`Run::restart`]), for the summary line.
    pub(super) restarts: usize,
    /// Steps that ended with a key parked, and releases that released
    /// one, for the summary line.
    pub(super) parked: (usize, usize),
    /// Set by a fetch of an ordered group: (group, partitions) whose
    /// cursors the backend may have moved past events it parked (the
    /// store's choice, see [`Model::pass`]); [`Run::compare`] follows it.
    pub(super) passed: Option<(usize, Vec<u32>)>,
}

impl<'h> Run<'h> {
    /// A run of `model` (its stream and groups already created on the
    /// backend) from `rng`.
    pub(super) fn new(h: &'h Harness, rng: StdRng, model: Model, stream: StreamName) -> Self {
        Run {
            h,
            backend: Arc::clone(&h.backend),
            rng,
            model,
            stream,
            issued: Vec::new(),
            lease_ids: HashSet::new(),
            next_id: 0,
            steps: Vec::new(),
            restarts: 0,
            parked: (0, 0),
            passed: None,
        }
    }
}

impl Run<'_> {
    pub(super) fn b(&self) -> &dyn Backend {
        &*self.backend
    }

    pub(super) fn now(&self) -> Timestamp {
        self.h.now()
    }

    pub(super) fn note(&mut self, text: String) {
        let n = self.steps.len();
        self.steps.push(format!("{n:>4}: {text}"));
    }

    /// Appends to the current step's line.
    pub(super) fn then(&mut self, text: &str) {
        if let Some(last) = self.steps.last_mut() {
            last.push_str(text);
        }
    }

    pub(super) fn group_name(&self, g: usize) -> GroupName {
        match self.model.groups.get(g) {
            Some(group) => group.name.clone(),
            None => gn("missing"),
        }
    }

    /// A group index: 0 or 1, and now and then one that does not exist.
    pub(super) fn pick_group(&mut self) -> usize {
        if self.rng.random_bool(0.02) {
            self.model.groups.len()
        } else {
            self.rng.random_range(0..self.model.groups.len())
        }
    }

    /// Partitions for an operation on group `g`: mostly all, else a random
    /// selection, now and then none or one out of range (never for a
    /// missing group, so that only one thing is wrong).
    pub(super) fn pick_partitions(&mut self, g: usize) -> Partitions {
        let n = self.model.partition_count();
        if g >= self.model.groups.len() {
            return Partitions::All;
        }
        match self.rng.random_range(0..100) {
            0..75 => Partitions::All,
            75..95 => Partitions::Only(
                (0..n)
                    .filter(|_| self.rng.random_bool(0.5))
                    .collect::<Vec<_>>(),
            ),
            95..98 => Partitions::Only(vec![]),
            _ => Partitions::Only(vec![n]),
        }
    }

    /// Every event id of the stream, in log order (not sorted: generated
    /// ids differ from run to run, their places in the log do not, so a
    /// seed picks the same events every time).
    pub(super) fn known_ids(&self) -> Vec<EventId> {
        self.model
            .log
            .iter()
            .flatten()
            .map(|e| e.id.clone())
            .collect()
    }

    pub(super) fn pick_ids(&mut self, from: &[EventId], max: usize) -> Vec<EventId> {
        let n = self.rng.random_range(0..=max.min(from.len()));
        let mut out: Vec<EventId> = from.choose_multiple(&mut self.rng, n).cloned().collect();
        if self.rng.random_bool(0.05) {
            out.push(EventId::parse("no-such-event").expect("id"));
        }
        out
    }

    /// A lease of group `g` to settle or renew: mostly a current one, else
    /// any issued before (probably stale), now and then a forged one.
    pub(super) fn pick_target(&mut self, g: usize) -> (SettleTarget, String) {
        let mine: Vec<usize> = (0..self.issued.len())
            .filter(|&i| self.issued[i].0 == g)
            .collect();
        let live: Vec<usize> = mine
            .iter()
            .copied()
            .filter(|&i| {
                g < self.model.groups.len() && self.model.holds(g, &self.issued[i].1.target())
            })
            .collect();
        let pool = if !live.is_empty() && self.rng.random_bool(0.85) {
            live
        } else {
            mine
        };
        let Some(&i) = pool.choose(&mut self.rng) else {
            let target = SettleTarget {
                event_id: EventId::parse("no-such-event").expect("id"),
                lease_id: LeaseId::parse("forged").expect("id"),
                receipt: None,
            };
            return (target, "forged lease of no-such-event".into());
        };
        let lease = &self.issued[i].1;
        let mut target = lease.target();
        let mut text = format!("L{i}");
        target.receipt = match self.rng.random_range(0..100) {
            0..80 => None,
            80..95 => lease.receipt.clone(),
            _ => {
                text.push_str(" (tampered receipt)");
                Some("tampered".into())
            }
        };
        if self.rng.random_bool(0.04) {
            target.lease_id = LeaseId::parse("forged").expect("id");
            text.push_str(" (forged lease id)");
        }
        (target, text)
    }

    pub(super) fn lease_text(&self, i: usize) -> String {
        let l = &self.issued[i].1;
        format!(
            "L{i}={}@p{}/{}[{}] a{} exp+{}",
            l.event_id,
            l.event.partition,
            l.event.sequence,
            l.event.key.as_deref().unwrap_or(""),
            l.attempt,
            l.expires_at.ms_since(l.leased_at)
        )
    }

    // -- the operations --------------------------------------------------

    /// A key for a new event: one of a few, so that gates collide often,
    /// or none (not ordered under `key`).
    fn pick_key(&mut self) -> Option<String> {
        KEYS.choose(&mut self.rng)
            .expect("a key")
            .map(str::to_owned)
    }

    async fn append(&mut self) -> std::result::Result<(), Divergence> {
        let n = self.rng.random_range(1..=3);
        let mut inputs: Vec<(Option<EventId>, u32, Option<String>)> = Vec::new();
        let mut known = self.known_ids();
        for _ in 0..n {
            let p = self.rng.random_range(0..self.model.partition_count());
            let roll = self.rng.random_range(0..100);
            let id = if roll < 15 && !known.is_empty() {
                Some(known.choose(&mut self.rng).expect("id").clone())
            } else if roll < 85 {
                self.next_id += 1;
                Some(EventId::parse(format!("e{}", self.next_id)).expect("id"))
            } else {
                None
            };
            if let Some(id) = &id {
                known.push(id.clone());
            }
            let key = self.pick_key();
            inputs.push((id, p, key));
        }
        let text = inputs
            .iter()
            .map(|(id, p, key)| {
                let id = id
                    .as_ref()
                    .map_or("(generated)".into(), ToString::to_string);
                format!("{id}[{}]→p{p}", key.as_deref().unwrap_or(""))
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.note(format!("append [{text}]"));
        let batch = inputs
            .iter()
            .map(|(id, p, key)| EventInput {
                id: id.clone(),
                partition: Some(*p),
                key: key.clone(),
                ..EventInput::default()
            })
            .collect();
        let got: Vec<Appended> = self
            .b()
            .append(&self.stream, batch)
            .await
            .map_err(|e| format!("append failed: {e:?}"))?;
        if got.len() != inputs.len() {
            return Err(format!(
                "append: {} results for {} inputs",
                got.len(),
                inputs.len()
            ));
        }
        let generated: Vec<Option<EventId>> =
            got.iter().map(|a| Some(a.event.id.clone())).collect();
        let now = self.now();
        let want = self.model.append(&inputs, &generated, now);
        for (i, (a, (id, p, seq, dup))) in got.iter().zip(&want).enumerate() {
            let e = &a.event;
            same(
                &format!("append result {i} (id, partition, sequence, duplicate)"),
                &(&e.id, e.partition, e.sequence, a.duplicate),
                &(id, *p, *seq, *dup),
            )?;
            same(
                &format!("append result {i} (timestamp, key)"),
                &(e.timestamp, e.key.as_deref()),
                &(self.model.timestamp(*p, *seq), self.model.key(*p, *seq)),
            )?;
        }
        let text = want
            .iter()
            .map(|(id, p, s, dup)| format!("{id}@p{p}/{s}{}", if *dup { " dup" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ");
        self.then(&format!(" → [{text}]"));
        Ok(())
    }

    pub(super) fn pick_op(&mut self) -> SettleOp {
        let reason = self
            .rng
            .random_bool(0.7)
            .then(|| format!("r{}", self.steps.len()));
        match self.rng.random_range(0..100) {
            0..45 => SettleOp::Ack,
            45..80 => SettleOp::Nack {
                reason,
                delay_ms: *DELAYS_MS.choose(&mut self.rng).expect("delay"),
            },
            _ => SettleOp::Reject { reason },
        }
    }

    async fn settle(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let n = if self.rng.random_bool(0.75) {
            1
        } else {
            self.rng.random_range(2..=4)
        };
        let mut items = Vec::new();
        let mut text = Vec::new();
        for _ in 0..n {
            let (target, t) = self.pick_target(g);
            let op = self.pick_op();
            text.push(format!("{op:?} {t}"));
            items.push(Settlement { target, op });
        }
        let (s, gname) = (self.stream.clone(), self.group_name(g));
        let single = n == 1 && self.rng.random_bool(0.5);
        self.note(format!(
            "{} {gname}: {}",
            if single { "settle one" } else { "settle batch" },
            text.join("; ")
        ));
        let got: Result<Vec<Result<()>>> = if single {
            let item = items[0].clone();
            let r = match item.op {
                SettleOp::Ack => self.b().ack(&s, &gname, item.target).await,
                SettleOp::Nack { reason, delay_ms } => {
                    self.b()
                        .nack(&s, &gname, item.target, reason, delay_ms)
                        .await
                }
                SettleOp::Reject { reason } => {
                    self.b().reject(&s, &gname, item.target, reason).await
                }
            };
            match r {
                Err(e) if matches!(e.code(), "group_not_found" | "stream_not_found") => Err(e),
                r => Ok(vec![r]),
            }
        } else {
            self.b().settle(&s, &gname, items.clone()).await
        };
        if g >= self.model.groups.len() {
            return expect_code("settle on a missing group", &got, "group_not_found");
        }
        let results = got.map_err(|e| format!("settle failed as a whole: {e:?}"))?;
        let now = self.now();
        let want: Vec<Code> = items
            .iter()
            .map(|item| match self.model.settle(g, item, now) {
                Ok(()) => "ok",
                Err(code) => code,
            })
            .collect();
        let codes: Vec<Code> = results.iter().map(outcome).collect();
        same("settle results", &codes, &want)?;
        self.then(&format!(" → {want:?}"));
        Ok(())
    }

    async fn renew(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let lease_ms = *LEASES_MS.choose(&mut self.rng).expect("lease");
        let (s, gname) = (self.stream.clone(), self.group_name(g));
        if self.rng.random_bool(0.7) {
            let (target, text) = self.pick_target(g);
            self.note(format!("renew {gname} {text} for {lease_ms} ms"));
            let req = RenewRequest {
                stream: s,
                group: gname,
                target: target.clone(),
                lease_ms,
            };
            let got = self.b().renew(req).await;
            if g >= self.model.groups.len() {
                return expect_code("renew on a missing group", &got, "group_not_found");
            }
            let now = self.now();
            match self.model.renew(g, &target, lease_ms, now) {
                Err(code) => expect_code("renew", &got, code)?,
                Ok((attempt, leased_at, expires_at)) => {
                    let l = got.map_err(|e| format!("renew: expected success, got {e:?}"))?;
                    same(
                        "renewed lease (event, lease id, attempt, leased_at, expires_at)",
                        &(
                            &l.event_id,
                            &l.lease_id,
                            l.attempt,
                            l.leased_at,
                            l.expires_at,
                        ),
                        &(
                            &target.event_id,
                            &target.lease_id,
                            attempt,
                            leased_at,
                            expires_at,
                        ),
                    )?;
                }
            }
            self.then(" → done");
        } else {
            let n = self.rng.random_range(0..=3);
            let mut targets = Vec::new();
            let mut text = Vec::new();
            for _ in 0..n {
                let (t, d) = self.pick_target(g);
                targets.push(t);
                text.push(d);
            }
            self.note(format!(
                "renew_many {gname} [{}] for {lease_ms} ms",
                text.join(", ")
            ));
            let got = self
                .b()
                .renew_many(&s, &gname, targets.clone(), lease_ms)
                .await;
            if g >= self.model.groups.len() {
                return expect_code("renew_many on a missing group", &got, "group_not_found");
            }
            let results = got.map_err(|e| format!("renew_many failed as a whole: {e:?}"))?;
            let now = self.now();
            let want: Vec<std::result::Result<Timestamp, Code>> = targets
                .iter()
                .map(|t| self.model.renew(g, t, lease_ms, now).map(|r| r.2))
                .collect();
            let got: Vec<std::result::Result<Timestamp, Code>> = results
                .into_iter()
                .map(|r| r.map_err(|e| e.code()))
                .collect();
            same("renew_many results", &got, &want)?;
            self.then(&format!(" → {want:?}"));
        }
        Ok(())
    }

    fn advance(&mut self) {
        let ms = *ADVANCES_MS.choose(&mut self.rng).expect("advance");
        self.h.clock.advance(ms);
        self.note(format!(
            "advance the clock {ms} ms (now START+{})",
            self.now().ms_since(super::super::START)
        ));
    }

    async fn redrive(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let which = if g >= self.model.groups.len() || self.rng.random_bool(0.4) {
            Redrive::All
        } else {
            let mut pool: Vec<EventId> = match self.model.groups.get(g) {
                Some(_) => self
                    .model
                    .dead_letters(g)
                    .into_iter()
                    .map(|d| d.0)
                    .collect(),
                None => Vec::new(),
            };
            let known = self.known_ids();
            pool.extend(self.pick_ids(&known, 1));
            Redrive::Events(self.pick_ids(&pool, 3))
        };
        let gname = self.group_name(g);
        self.note(format!("redrive {gname} {which:?}"));
        let got = self.b().redrive(&self.stream, &gname, which.clone()).await;
        if g >= self.model.groups.len() {
            return expect_code("redrive on a missing group", &got, "group_not_found");
        }
        let now = self.now();
        let want = self.model.redrive(g, &which, now);
        self.judge_count(("redrive", "redriven"), &got, want)
    }

    /// Judges a call that answers how many deliveries it re-opened (a
    /// redrive, a replay) against the model's answer; `what` names the
    /// call and its count.
    fn judge_count(
        &mut self,
        (call, count): (&str, &str),
        got: &Result<u64>,
        want: std::result::Result<u64, Code>,
    ) -> std::result::Result<(), Divergence> {
        match want {
            Err(code) => expect_code(call, got, code)?,
            Ok(n) => same(count, &outcome_n(got), &Ok(n))?,
        }
        self.then(&format!(" → {:?}", outcome_n(got)));
        Ok(())
    }

    /// The highest high watermark of any partition.
    fn max_hwm(&self) -> u64 {
        (0..self.model.partition_count())
            .map(|p| self.model.hwm(p))
            .max()
            .unwrap_or(0)
    }

    async fn replay(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let known = self.known_ids();
        let max_hwm = self.max_hwm();
        let how = match self.rng.random_range(0..100) {
            0..40 => Replay::FromSequence {
                after: self.rng.random_range(0..=max_hwm + 1),
                partitions: self.pick_partitions(g),
            },
            40..55 => {
                let times: Vec<Timestamp> = self
                    .model
                    .log
                    .iter()
                    .flatten()
                    .map(|e| e.timestamp)
                    .collect();
                let from = times.choose(&mut self.rng).copied().unwrap_or(self.now());
                Replay::FromTime {
                    from,
                    partitions: self.pick_partitions(g),
                }
            }
            _ => Replay::EventIds(self.pick_ids(&known, 3)),
        };
        let how = if g < self.model.groups.len() {
            how
        } else {
            from_seq_all()
        };
        let gname = self.group_name(g);
        self.note(format!("replay {gname} {how:?}"));
        let got = self.b().replay(&self.stream, &gname, how.clone()).await;
        if g >= self.model.groups.len() {
            return expect_code("replay on a missing group", &got, "group_not_found");
        }
        let now = self.now();
        let want = self.model.replay(g, &how, now);
        self.judge_count(("replay", "reopened"), &got, want)
    }

    async fn reset(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let max_hwm = self.max_hwm();
        let start = match self.rng.random_range(0..100) {
            0..40 => StartPosition::Beginning,
            40..70 => StartPosition::After(StartAfter::All(self.rng.random_range(0..=max_hwm + 2))),
            70..80 => StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(
                self.rng.random_range(0..self.model.partition_count()),
                self.rng.random_range(0..=max_hwm + 1),
            )]))),
            _ => {
                let times: Vec<Timestamp> = self
                    .model
                    .log
                    .iter()
                    .flatten()
                    .map(|e| e.timestamp)
                    .collect();
                let at = match times.choose(&mut self.rng) {
                    Some(t) if self.rng.random_bool(0.8) => *t,
                    _ => self.now().add_ms(1),
                };
                StartPosition::At(at)
            }
        };
        let mut partitions = self.pick_partitions(g);
        // A reset of every partition may change the ordering and the flow;
        // one that names partitions with them is refused (only in range,
        // so that only one thing is wrong), and so is a flow that does not
        // fit the ordering after the reset.
        let ordering = self
            .rng
            .random_bool(0.35)
            .then(|| *ORDERINGS.choose(&mut self.rng).expect("ordering"));
        let flow = self
            .rng
            .random_bool(0.3)
            .then(|| random_flow(&mut self.rng));
        if ordering.is_some() || flow.is_some() {
            let n = self.model.partition_count();
            partitions = match partitions {
                Partitions::Only(list) if self.rng.random_bool(0.3) => {
                    Partitions::Only(list.into_iter().filter(|p| *p < n).collect())
                }
                _ => Partitions::All,
            };
        }
        let confirm = self.rng.random_bool(0.95);
        let gname = self.group_name(g);
        self.note(format!(
            "reset {gname} confirm {confirm} start {start:?} partitions {partitions:?}{}{}",
            ordering.map_or(String::new(), |o| format!(" ordering {}", o.as_str())),
            flow.map_or(String::new(), |f| format!(" flow {}", f.to_json()))
        ));
        let req = ResetRequest {
            stream: self.stream.clone(),
            group: gname,
            confirm,
            start: start.clone(),
            partitions: partitions.clone(),
            ordering,
            flow,
        };
        let got = self.b().reset(req).await;
        if !confirm {
            return expect_code("reset without confirm", &got, "confirm_required");
        }
        if g >= self.model.groups.len() {
            return expect_code("reset of a missing group", &got, "group_not_found");
        }
        let want = match self.model.reset(g, &start, &partitions, ordering, flow) {
            Ok(()) => "ok",
            Err(code) => code,
        };
        expect_code("reset", &got, want)?;
        self.then(&format!(" → {want}"));
        Ok(())
    }

    /// Lag over a random selection of partitions.
    async fn lag(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let partitions = self.pick_partitions(g);
        let gname = self.group_name(g);
        self.note(format!("lag {gname} partitions {partitions:?}"));
        let got = self.b().lag(&self.stream, &gname, &partitions).await;
        if g >= self.model.groups.len() {
            return expect_code("lag of a missing group", &got, "group_not_found");
        }
        match self.model.resolve(&partitions) {
            Err(code) => expect_code("lag", &got, code),
            Ok(parts) => {
                let lag = got.map_err(|e| format!("lag failed: {e:?}"))?;
                let want = self.model.lag(&self.stream, g, &parts, self.now());
                same("lag", &lag, &want)
            }
        }
    }

    /// Every lease group `gname` has out, walking its pages: `limit` a page.
    async fn leases_of(
        &self,
        gname: &GroupName,
        limit: u32,
    ) -> std::result::Result<Vec<HeldLease>, Divergence> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .b()
                .leases(LeasesRequest {
                    stream: self.stream.clone(),
                    group: gname.clone(),
                    limit,
                    after,
                })
                .await
                .map_err(|e| format!("leases {gname} failed: {e:?}"))?;
            if page.now != self.now() {
                return Err(format!("leases {gname}: judged at {:?}", page.now));
            }
            out.extend(page.leases);
            match page.next {
                Some(next) if out.len() <= 10_000 => after = Some(next),
                Some(_) => return Err(format!("leases {gname}: paging never ends")),
                None => return Ok(out),
            }
        }
    }

    /// After every step: group info, dead letters and leases of both
    /// groups. After a fetch of an ordered group the model first follows
    /// the cursors the backend reports, as long as every event it passed
    /// without a lease waits behind an open delivery of its gate.
    async fn compare(&mut self) -> std::result::Result<(), Divergence> {
        let now = self.now();
        let passed = self.passed.take();
        for g in 0..self.model.groups.len() {
            let gname = self.group_name(g);
            let info = self
                .b()
                .group_info(&self.stream, &gname)
                .await
                .map_err(|e| format!("group_info {gname} failed: {e:?}"))?;
            if let Some((_, parts)) = passed.as_ref().filter(|(pg, _)| *pg == g) {
                for &p in parts {
                    let to = info.cursors.get(&p).copied().unwrap_or(0);
                    if let Err(seq) = self.model.pass(g, p, to, now) {
                        return Err(format!(
                            "fetch: the cursor of {gname} in partition {p} passed p{p}/{seq} \
                             (to {to}) without a lease, and nothing of its gate was open before it"
                        ));
                    }
                }
            }
            let want = self.model.group_info(&self.stream, g, now);
            same(&format!("group_info {gname}"), &info, &want)?;
            let page = self
                .b()
                .dead_letters(DeadLettersRequest {
                    stream: self.stream.clone(),
                    group: gname.clone(),
                    limit: 1000,
                    after: None,
                })
                .await
                .map_err(|e| format!("dead_letters {gname} failed: {e:?}"))?;
            let got: Vec<DeadRow> = page
                .dead_letters
                .iter()
                .map(|d| {
                    (
                        d.event_id.clone(),
                        d.partition,
                        d.sequence,
                        d.attempt,
                        d.reason.clone(),
                        d.dead_lettered_at,
                    )
                })
                .collect();
            same(
                &format!(
                    "dead letters of {gname} (event, partition, sequence, attempt, reason, at)"
                ),
                &got,
                &self.model.dead_letters(g),
            )?;
            if let Some(d) = (page.dead_letters.iter())
                .find(|d| d.event.as_ref().map(|e| &e.id) != Some(&d.event_id))
            {
                return Err(format!(
                    "dead letter {} carries event {:?}",
                    d.event_id, d.event
                ));
            }
            // Now and then in pages of two, to walk the cursors.
            let limit = if self.steps.len().is_multiple_of(5) {
                2
            } else {
                1000
            };
            let leases = self.leases_of(&gname, limit).await?;
            self.model
                .learn_holds(g, &leases, &self.lease_ids)
                .map_err(|e| format!("leases of {gname}: {e}"))?;
            let got: Vec<OutRow> = leases
                .iter()
                .map(|l| {
                    (
                        l.event_id.clone(),
                        l.partition,
                        l.sequence,
                        l.lease_id.clone(),
                        l.attempt,
                        l.leased_at,
                        l.expires_at,
                        l.expired,
                    )
                })
                .collect();
            same(
                &format!(
                    "leases of {gname} (event, partition, sequence, lease id, attempt, \
                     leased at, expires at, expired)"
                ),
                &got,
                &self.model.leases(g, now),
            )?;
            // The holder is the consumer of the fetch that handed it out,
            // or the quarantine (learned above).
            for l in leases.iter().filter(|l| !is_quarantine(&l.consumer_id)) {
                let issued = (self.issued.iter().rev()).find(|(_, i)| i.lease_id == l.lease_id);
                if issued.map(|(_, i)| &i.consumer_id) != Some(&l.consumer_id) {
                    return Err(format!(
                        "lease {} of {gname} is held by {}, but was handed to {:?}",
                        l.lease_id,
                        l.consumer_id,
                        issued.map(|(_, i)| i.consumer_id.as_str())
                    ));
                }
            }
            if self.model.groups[g].on_exhausted == OnExhausted::Quarantine {
                let listed = parked_keys(self.b(), &self.stream, &gname)
                    .await
                    .map_err(|e| format!("parked keys of {gname} failed: {e:?}"))?;
                let got: Vec<ParkedRow> = listed
                    .into_iter()
                    .map(|k| {
                        (
                            k.key,
                            k.partition,
                            k.sequence,
                            k.attempt,
                            k.reason,
                            k.parked_at,
                        )
                    })
                    .collect();
                same(
                    &format!(
                        "parked keys of {gname} (key, partition, sequence, attempt, reason, \
                         parked at)"
                    ),
                    &got,
                    &self.model.parked(g),
                )?;
                if !got.is_empty() {
                    self.parked.0 += 1;
                }
            }
        }
        Ok(())
    }

    /// A release of parked keys (docs/groups.md#quarantine): all, or some
    /// keys (one maybe not parked), resumed or skipped into the dead
    /// letters.
    async fn release(&mut self) -> std::result::Result<(), Divergence> {
        let Some(g) = (0..self.model.groups.len())
            .find(|&g| self.model.groups[g].on_exhausted == OnExhausted::Quarantine)
        else {
            return self.lag().await;
        };
        let parked = self.model.parked(g);
        let which = if parked.is_empty() || self.rng.random_bool(0.3) {
            Parked::All
        } else {
            let mut keys: Vec<String> = parked.iter().filter_map(|k| k.0.clone()).collect();
            keys.push("zz".into());
            Parked::Keys(self.pick_keys(&keys))
        };
        let skip_head = self.rng.random_bool(0.5);
        let gname = self.group_name(g);
        self.note(format!("release {gname} {which:?} skip_head {skip_head}"));
        let got = release(
            self.b(),
            ReleaseRequest {
                stream: self.stream.clone(),
                group: gname.clone(),
                which: which.clone(),
                skip_head,
                confirm: true,
            },
        )
        .await
        .map_err(|e| format!("release failed: {e:?}"))?;
        let chosen: Vec<(u32, u64)> = parked
            .iter()
            .filter(|k| match &which {
                Parked::All => true,
                Parked::Keys(keys) => k.0.as_ref().is_some_and(|key| keys.contains(key)),
                Parked::Events(_) => unreachable!("not generated"),
            })
            .map(|k| (k.1, k.2))
            .collect();
        let released: Vec<(u32, u64)> = got
            .released
            .iter()
            .map(|k| (k.partition, k.sequence))
            .collect();
        same("released (partition, sequence)", &released, &chosen)?;
        let not_parked: Vec<String> = match &which {
            Parked::Keys(keys) => {
                let mut missing: Vec<String> = (keys.iter())
                    .filter(|key| !parked.iter().any(|k| k.0.as_ref() == Some(*key)))
                    .cloned()
                    .collect();
                missing.sort();
                missing.dedup();
                missing
            }
            _ => Vec::new(),
        };
        same("not parked", &got.not_parked, &not_parked)?;
        let now = self.now();
        self.model.release(g, &chosen, skip_head, now);
        if !chosen.is_empty() {
            self.parked.1 += 1;
        }
        self.then(&format!(" → {} released", released.len()));
        Ok(())
    }

    /// Up to three of `keys`, at random.
    fn pick_keys(&mut self, keys: &[String]) -> Vec<String> {
        let n = self.rng.random_range(1..=keys.len().min(3));
        keys.choose_multiple(&mut self.rng, n).cloned().collect()
    }

    /// One random operation, then [`Run::compare`]. A backend that can be
    /// reopened (`Harness::reopen`) is now and then restarted instead.
    pub(super) async fn step(&mut self) -> std::result::Result<(), Divergence> {
        if self.h.reopen.is_some() && self.rng.random_bool(RESTART_CHANCE) {
            self.restart().await;
            return self.compare().await;
        }
        match self.rng.random_range(0..100) {
            0..14 => self.append().await?,
            14..38 => self.fetch().await?,
            38..59 => self.settle().await?,
            59..62 => self.race().await?,
            62..69 => self.renew().await?,
            69..81 => self.advance(),
            81..86 => self.redrive().await?,
            86..92 => self.replay().await?,
            92..95 => self.reset().await?,
            95..97 => self.release().await?,
            _ => self.lag().await?,
        }
        self.compare().await
    }
}

fn from_seq_all() -> Replay {
    Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    }
}

fn outcome_n(r: &Result<u64>) -> std::result::Result<u64, Code> {
    r.as_ref().copied().map_err(|e| e.code())
}
