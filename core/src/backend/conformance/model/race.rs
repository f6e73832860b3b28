//! Steps that are about the store more than about one call: settles of
//! one lease racing each other, and a restart of the backend.

use std::sync::Arc;

use futures::future::join_all;
use rand::Rng;
use rand::seq::IndexedRandom;

use super::reference::Code;
use super::run::{DELAYS_MS, Divergence, Run, outcome, same};
use crate::backend::{Backend, Result};
use crate::model::{GroupName, SettleOp, Settlement, StreamName};

/// One of the racing requests: a single settle, or a batch holding the
/// lease once or twice (the second is stale whatever happens: "a second
/// operation on a lease already settled in the same batch is
/// `stale_lease`").
#[derive(Debug, Clone)]
enum Request {
    One(Settlement),
    Batch(Vec<Settlement>),
}

impl Request {
    /// Sends it; one code per settle in it, in order.
    async fn send(
        self,
        b: Arc<dyn Backend>,
        s: StreamName,
        g: GroupName,
    ) -> Result<Vec<Result<()>>> {
        match self {
            Request::One(item) => {
                let r = match item.op {
                    SettleOp::Ack => b.ack(&s, &g, item.target).await,
                    SettleOp::Nack { reason, delay_ms } => {
                        b.nack(&s, &g, item.target, reason, delay_ms).await
                    }
                    SettleOp::Reject { reason } => b.reject(&s, &g, item.target, reason).await,
                };
                Ok(vec![r])
            }
            Request::Batch(items) => b.settle(&s, &g, items).await,
        }
    }

    fn items(&self) -> &[Settlement] {
        match self {
            Request::One(item) => std::slice::from_ref(item),
            Request::Batch(items) => items,
        }
    }
}

impl Run<'_> {
    /// Two to four settles of one lease at once — single settles and
    /// batches holding it, all acks, all nacks or all rejects — each on its
    /// own task
    /// (docs/groups.md#leases-and-fencing): a live lease is settled by
    /// exactly one of them and every other one answers `stale_lease`; a
    /// lease already stale is `stale_lease` for all. The model then applies
    /// the one that won.
    pub(super) async fn race(&mut self) -> std::result::Result<(), Divergence> {
        let g = self.rng.random_range(0..self.model.groups.len());
        let mine: Vec<usize> = (0..self.issued.len())
            .filter(|&i| self.issued[i].0 == g)
            .collect();
        let live: Vec<usize> = mine
            .iter()
            .copied()
            .filter(|&i| self.model.holds(g, &self.issued[i].1.target()))
            .collect();
        let pool = if !live.is_empty() && self.rng.random_bool(0.9) {
            live
        } else {
            mine
        };
        let gname = self.group_name(g);
        let Some(&i) = pool.choose(&mut self.rng) else {
            self.note(format!("race on {gname}: no lease issued yet"));
            return Ok(());
        };
        let lease = self.issued[i].1.clone();
        // One operation for all, so that the state after does not depend
        // on which one wins (the run stays reproducible from its seed).
        let op = match self.rng.random_range(0..100) {
            0..75 => SettleOp::Ack,
            75..90 => SettleOp::Nack {
                reason: Some(format!("race{}", self.steps.len())),
                delay_ms: *DELAYS_MS.choose(&mut self.rng).expect("delay"),
            },
            _ => SettleOp::Reject {
                reason: Some(format!("race{}", self.steps.len())),
            },
        };
        let mut requests = Vec::new();
        for _ in 0..self.rng.random_range(2..=4) {
            let mut target = lease.target();
            if self.rng.random_bool(0.3) {
                target.receipt = lease.receipt.clone();
            }
            let item = Settlement {
                target,
                op: op.clone(),
            };
            requests.push(match self.rng.random_range(0..100) {
                0..50 => Request::One(item),
                50..85 => Request::Batch(vec![item]),
                _ => Request::Batch(vec![item.clone(), item]),
            });
        }
        let text: Vec<String> = requests
            .iter()
            .map(|r| {
                let ops: Vec<String> = r.items().iter().map(|i| format!("{:?}", i.op)).collect();
                match r {
                    Request::One(_) => ops.join(""),
                    Request::Batch(_) => format!("batch [{}]", ops.join(", ")),
                }
            })
            .collect();
        self.note(format!(
            "race on {gname} L{i}: at once {}",
            text.join(" | ")
        ));

        let tasks = requests.iter().cloned().map(|r| {
            let (b, s, g) = (
                Arc::clone(&self.backend),
                self.stream.clone(),
                gname.clone(),
            );
            tokio::spawn(r.send(b, s, g))
        });
        let mut codes: Vec<Vec<Code>> = Vec::new();
        for joined in join_all(tasks).await {
            let got = joined.map_err(|e| format!("race: a settle task failed: {e}"))?;
            let results = got.map_err(|e| format!("race: a settle failed as a whole: {e:?}"))?;
            codes.push(results.iter().map(outcome).collect());
        }

        // Exactly one winner if the lease was live, none otherwise; the
        // model applies the winner's operation.
        let now = self.now();
        let live = self.model.holds(g, &lease.target());
        let winners: Vec<(usize, usize)> = codes
            .iter()
            .enumerate()
            .flat_map(|(r, c)| c.iter().enumerate().map(move |(k, code)| (r, k, *code)))
            .filter(|(_, _, code)| *code == "ok")
            .map(|(r, k, _)| (r, k))
            .collect();
        let want_winners = usize::from(live);
        if winners.len() != want_winners {
            return Err(format!(
                "race: {} of the settles succeeded, expected {want_winners} (lease {} live in the model); answers {codes:?}",
                winners.len(),
                if live { "is" } else { "is not" }
            ));
        }
        // A batch applies its items in order: its second settle of the
        // lease cannot win when its first lost.
        if winners.iter().any(|&(_, k)| k > 0) {
            return Err(format!(
                "race: a batch's second settle of the lease won, not its first; answers {codes:?}"
            ));
        }
        let mut want: Vec<Vec<Code>> = codes.iter().map(|c| vec!["stale_lease"; c.len()]).collect();
        if let Some(&(r, k)) = winners.first() {
            want[r][k] = "ok";
            let item = &requests[r].items()[k];
            if let Err(code) = self.model.settle(g, item, now) {
                unreachable!("the model held the lease but settles it with {code}");
            }
        }
        same("race answers", &codes, &want)?;
        self.then(&format!(" → {codes:?}"));
        Ok(())
    }

    /// Drops the backend and opens the store again (`Harness::reopen`),
    /// as a restarted server would: everything must be as it was, and the
    /// leases out before stay the live ones (docs/groups.md#leases-and-fencing).
    pub(super) async fn restart(&mut self) {
        let reopen = self.h.reopen.clone().expect("a store that reopens");
        self.note("restart: drop the backend, open the store again".into());
        self.backend = reopen.open().await;
        self.restarts += 1;
    }
}
