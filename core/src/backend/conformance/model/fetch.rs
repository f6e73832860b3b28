//! The fetch step: a random claim, judged against what
//! docs/groups.md#claims and #ordering specify, then followed where they
//! leave the choice to the store.

use std::collections::BTreeMap;

use rand::Rng;
use rand::seq::IndexedRandom;

use super::super::cid;
use super::run::{Divergence, LEASES_MS, Run, expect_code, same};
use crate::backend::FetchRequest;
use crate::model::{Lease, Timestamp};

/// What the leases of one fetch must be, given the claimable sequences of
/// each selected partition (lowest first, at most one per gate: see
/// `Model::claimable`) and the limit. `taken` holds the sequences leased
/// per selected partition, in order.
///
/// * per partition, the lowest claimable deliveries, whatever their gate
///   (fair across keys);
/// * in all, as many as the limit allows: `min(limit, claimable in all)`,
///   so a partition with nothing (more) claimable — everything of it
///   waiting behind a gate, say — leaves its share to the others;
/// * shared round-robin: no partition gives two more than one that still
///   had some claimable. Where the rotation starts is the store's choice.
fn judge(
    claimable: &BTreeMap<u32, Vec<u64>>,
    taken: &BTreeMap<u32, Vec<u64>>,
    limit: usize,
) -> std::result::Result<(), String> {
    let total: usize = claimable.values().map(Vec::len).sum();
    let got: usize = taken.values().map(Vec::len).sum();
    if got != total.min(limit) {
        return Err(format!(
            "expected {} leases (limit {limit}, {total} claimable), got {got}",
            total.min(limit)
        ));
    }
    for (p, seqs) in taken {
        let lowest = &claimable[p][..seqs.len().min(claimable[p].len())];
        if lowest != &seqs[..] {
            return Err(format!(
                "partition {p} did not give its lowest claimable deliveries"
            ));
        }
    }
    for (p, seqs) in taken {
        for (q, other) in taken {
            if seqs.len() < claimable[p].len() && other.len() > seqs.len() + 1 {
                return Err(format!(
                    "not round-robin: partition {q} gave {} while {p} gave {} and had more",
                    other.len(),
                    seqs.len()
                ));
            }
        }
    }
    Ok(())
}

impl Run<'_> {
    /// A fetch with a random limit, lease duration, consumer and selection
    /// of partitions, judged by [`judge`]; the leases are then claimed in
    /// the model and each must carry what the model says (event, attempt,
    /// consumer, times, a receipt, a lease id never seen before).
    pub(super) async fn fetch(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.pick_group();
        let limit = if self.rng.random_bool(0.1) {
            10
        } else {
            self.rng.random_range(1..=4)
        };
        let lease_ms = *LEASES_MS.choose(&mut self.rng).expect("lease");
        let consumer = format!("c{}", self.rng.random_range(1..=3));
        let partitions = self.pick_partitions(g);
        self.note(format!(
            "fetch {} limit {limit} lease {lease_ms} ms as {consumer} partitions {partitions:?}",
            self.group_name(g)
        ));
        let req = FetchRequest {
            stream: self.stream.clone(),
            group: self.group_name(g),
            limit,
            consumer_id: cid(&consumer),
            lease_ms,
            partitions: partitions.clone(),
        };
        let got = self.b().fetch(req).await;
        if g >= self.model.groups.len() {
            return expect_code("fetch of a missing group", &got, "group_not_found");
        }
        let parts = match self.model.resolve(&partitions) {
            Ok(parts) => parts,
            Err(code) => return expect_code("fetch", &got, code),
        };
        let leases = got.map_err(|e| format!("fetch failed: {e:?}"))?;
        let now = self.now();
        self.model.guard(g, &parts, now);
        let candidates: BTreeMap<u32, Vec<u64>> = parts
            .iter()
            .map(|&p| (p, self.model.claimable(g, p, now)))
            .collect();
        // Under a key rate each candidate takes a token or is paced
        // (docs/groups.md#flow): what the fetch may lease is what finds a
        // token, in the same order.
        let plans: BTreeMap<u32, Vec<(u64, Option<Timestamp>)>> = candidates
            .iter()
            .map(|(&p, seqs)| (p, self.model.pace_plan(g, p, seqs, now)))
            .collect();
        let claimable: BTreeMap<u32, Vec<u64>> = plans
            .iter()
            .map(|(&p, plan)| {
                let goes = plan.iter().filter(|(_, due)| due.is_none());
                (p, goes.map(|(seq, _)| *seq).collect())
            })
            .collect();

        // Sorted by (partition, sequence), from selected partitions only.
        let positions: Vec<(u32, u64)> = leases
            .iter()
            .map(|l| (l.event.partition, l.event.sequence))
            .collect();
        if !positions.is_sorted_by(|a, b| a < b) {
            return Err(format!(
                "fetch: leases not sorted by (partition, sequence): {positions:?}"
            ));
        }
        let mut taken: BTreeMap<u32, Vec<u64>> = parts.iter().map(|&p| (p, Vec::new())).collect();
        for &(p, seq) in &positions {
            match taken.get_mut(&p) {
                Some(list) => list.push(seq),
                None => {
                    return Err(format!(
                        "fetch: a lease from unselected partition {p}: {positions:?}"
                    ));
                }
            }
        }
        if let Err(why) = judge(&claimable, &taken, limit as usize) {
            let keys = self.keys_of(&claimable);
            let open: Vec<String> = parts
                .iter()
                .map(|&p| format!("p{p}: {}", self.model.describe(g, p, now)))
                .collect();
            return Err(format!(
                "fetch: {why}\n  leases (partition, sequence): {positions:?}\n  model's claimable per partition: {claimable:?}\n  their keys: {keys:?}\n  model's open deliveries (seq[key]:state/attempt), ordering {}, flow {}:\n    {}",
                self.model.groups[g].ordering.as_str(),
                self.model.groups[g].flow.to_json(),
                open.join("\n    ")
            ));
        }
        // Each partition's candidates in order, up to where the fetch
        // stopped looking: its last lease, when it gave what it was asked;
        // all of them, when it was spent. A lease takes its token, a
        // paced candidate its slot.
        let total: usize = taken.values().map(Vec::len).sum();
        let mut by_position: BTreeMap<(u32, u64), Lease> = leases
            .into_iter()
            .map(|l| ((l.event.partition, l.event.sequence), l))
            .collect();
        let mut text = Vec::new();
        let mut unsure = Vec::new();
        for &p in &parts {
            let plan = &plans[&p];
            let got = taken[&p].len();
            let goes: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].1.is_none()).collect();
            let end = if got < goes.len() {
                if got == 0 { 0 } else { goes[got - 1] + 1 }
            } else if total < limit as usize {
                plan.len()
            } else {
                // Gave all it could lease and the fetch was full: whether
                // it looked at the paced candidates after its last lease
                // shows only in its lag.
                let end = goes.last().map_or(0, |i| i + 1);
                if end < plan.len() {
                    unsure.push((p, end));
                }
                end
            };
            for &(seq, due) in &plan[..end] {
                match due {
                    None => {
                        let lease = by_position.remove(&(p, seq)).expect("a judged lease");
                        self.model.spend(g, p, seq, now);
                        self.take(g, lease, now, lease_ms, &consumer)?;
                        text.push(self.lease_text(self.issued.len() - 1));
                    }
                    Some(due) => {
                        self.model.pace(g, (p, seq), due, now).map_err(|passed| {
                            format!("fetch: paced p{p}/{seq} but passed p{p}/{passed}, whose gate was free")
                        })?;
                        text.push(format!("paced p{p}/{seq} to +{}", due.ms_since(now)));
                    }
                }
            }
        }
        for (p, end) in unsure {
            let gname = self.group_name(g);
            let only = crate::backend::Partitions::Only(vec![p]);
            let lag = self
                .b()
                .lag(&self.stream, &gname, &only)
                .await
                .map_err(|e| format!("lag failed: {e:?}"))?;
            if lag == self.model.lag(&self.stream, g, &[p], now) {
                continue;
            }
            let mut paced = self.model.clone();
            for &(seq, due) in &plans[&p][end..] {
                let due = due.expect("only paced candidates after the last lease");
                paced.pace(g, (p, seq), due, now).map_err(|passed| {
                    format!("fetch: paced p{p}/{seq} but passed p{p}/{passed}, whose gate was free")
                })?;
            }
            same(
                &format!(
                    "fetch: the lag of p{p} after it (the paced candidates {:?} after its last lease looked at or not)",
                    &plans[&p][end..]
                ),
                &lag,
                &paced.lag(&self.stream, g, &[p], now),
            )?;
            self.model = paced;
            text.push(format!("paced the rest of p{p}"));
        }
        if self.model.is_gated(g) || self.model.is_paced(g) {
            self.passed = Some((g, parts));
        }
        self.then(&format!(" → [{}]", text.join(", ")));
        Ok(())
    }

    /// Claims one lease of a judged fetch in the model and checks it.
    fn take(
        &mut self,
        g: usize,
        lease: Lease,
        now: crate::model::Timestamp,
        lease_ms: u64,
        consumer: &str,
    ) -> std::result::Result<(), Divergence> {
        let (p, seq) = (lease.event.partition, lease.event.sequence);
        if !self.lease_ids.insert(lease.lease_id.clone()) {
            return Err(format!(
                "fetch: lease id {} handed out twice",
                lease.lease_id
            ));
        }
        let claimed = self.model.claim(
            g,
            (p, seq),
            (lease.lease_id.clone(), lease.receipt.clone()),
            now,
            lease_ms,
        );
        let attempt = claimed.map_err(|passed| {
            format!("fetch: leased p{p}/{seq} but passed p{p}/{passed}, whose gate was free")
        })?;
        same(
            &format!(
                "fetch: lease on p{p}/{seq} (event, attempt, consumer, leased_at, expires_at, has a receipt, key)"
            ),
            &(
                &lease.event_id,
                &lease.event.id,
                lease.attempt,
                lease.consumer_id.as_str(),
                lease.leased_at,
                lease.expires_at,
                lease.receipt.as_deref().is_some_and(|r| !r.is_empty()),
                lease.event.key.as_deref(),
            ),
            &(
                self.model.event_id(p, seq),
                self.model.event_id(p, seq),
                attempt,
                consumer,
                now,
                now.add_ms(lease_ms),
                true,
                self.model.key(p, seq),
            ),
        )?;
        self.issued.push((g, lease));
        Ok(())
    }

    /// The keys of the claimable deliveries, for a divergence report.
    fn keys_of(&self, claimable: &BTreeMap<u32, Vec<u64>>) -> BTreeMap<u32, Vec<String>> {
        claimable
            .iter()
            .map(|(&p, seqs)| {
                let keys = seqs
                    .iter()
                    .map(|&seq| format!("{seq}:{}", self.model.key(p, seq).unwrap_or("-")))
                    .collect();
                (p, keys)
            })
            .collect()
    }
}
