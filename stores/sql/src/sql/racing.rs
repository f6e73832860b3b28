//! Writers that race what a check does on one node of a shared store (a
//! trim in `retention_rows`, a delete in `stale_nodes`): two on each node,
//! appending, fetching and settling in an unordered group `g`, a
//! key-ordered group `o` and a group `f` with `key_concurrency = 2`, and
//! replaying, redriving, resetting and creating groups, until stopped.
//! Each check says which errors they may get.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rheo_core::backend::conformance::{Harness, cid, gn};
use rheo_core::backend::{
    Backend, Error, FetchRequest, Partitions, Redrive, Replay, ResetRequest, Result,
};
use rheo_core::model::{EventInput, Flow, GroupOrdering, GroupSpec, StreamName};

/// How a writer settles a lease.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Settle {
    Ack,
    Nack,
    Reject,
}

/// What a writer does once a round, after its fetches.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Chore {
    /// Replays `g` from its start.
    Replay,
    /// Redrives every dead letter of the group.
    Redrive(&'static str),
    /// Resets `g` to the beginning.
    Reset,
    /// Creates a group of a new name.
    NewGroup,
}

/// What each writer does each round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Events appended, with keys `k0` to `k<keys - 1>`.
    pub(crate) batch: usize,
    pub(crate) keys: usize,
    /// Leases a fetch asks for, in each group.
    pub(crate) limit: u32,
    /// Lease `i` of a fetch in round `r` gets settle `(i + r) % len`.
    pub(crate) settles: &'static [Settle],
    /// Round `r` does chore `r % len`.
    pub(crate) chores: &'static [Chore],
}

/// Creates the groups the writers use on `s`: `g`, `o` ordered by key,
/// and `f` letting two deliveries of a key out at once
/// (`docs/groups.md#flow`).
pub(crate) async fn groups(h: &Harness, s: &StreamName) {
    h.group(s, "g").await;
    let ordered = GroupSpec {
        ordering: GroupOrdering::Key,
        ..GroupSpec::new(gn("o"))
    };
    h.group_with(s, ordered).await;
    let limited = GroupSpec {
        flow: Flow {
            key_concurrency: Some(2),
            ..Flow::default()
        },
        ..GroupSpec::new(gn("f"))
    };
    h.group_with(s, limited).await;
}

/// Four writers at work on one stream.
pub(crate) struct Writers {
    stop: Arc<AtomicBool>,
    running: Vec<tokio::task::JoinHandle<Vec<Error>>>,
}

impl Writers {
    /// Starts four writers doing `load` on `s`, two through each node.
    pub(crate) fn start(
        a: Arc<dyn Backend>,
        b: Arc<dyn Backend>,
        s: &StreamName,
        load: Load,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let running = (0..4)
            .map(|worker| {
                let node = if worker % 2 == 0 { &a } else { &b };
                let writing = keep_writing(node.clone(), s.clone(), load, worker, stop.clone());
                tokio::spawn(writing)
            })
            .collect();
        Writers { stop, running }
    }

    /// Stops the writers; the errors they got.
    pub(crate) async fn stop(self) -> Vec<Error> {
        self.stop.store(true, Ordering::SeqCst);
        let mut errors = Vec::new();
        for writer in self.running {
            errors.extend(writer.await.expect("a writer"));
        }
        errors
    }
}

/// Does `load` on `s` through `b` round after round until `stop`; returns
/// the errors it got.
async fn keep_writing(
    b: Arc<dyn Backend>,
    s: StreamName,
    load: Load,
    worker: usize,
    stop: Arc<AtomicBool>,
) -> Vec<Error> {
    let mut errors = Vec::new();
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let events = (0..load.batch)
            .map(|k| EventInput {
                key: Some(format!("k{}", (round + k) % load.keys)),
                ..EventInput::default()
            })
            .collect();
        note(b.append(&s, events).await.map(drop));
        for group in ["g", "o", "f"] {
            let g = gn(group);
            let req = FetchRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: load.limit,
                consumer_id: cid(&format!("w{worker}")),
                lease_ms: 30_000,
                partitions: Partitions::All,
            };
            match b.fetch(req).await {
                Ok(leases) => {
                    for (i, lease) in leases.iter().enumerate() {
                        let target = lease.target();
                        let r = match load.settles[(i + round) % load.settles.len()] {
                            Settle::Ack => b.ack(&s, &g, target).await,
                            Settle::Nack => b.nack(&s, &g, target, None, Some(0)).await,
                            Settle::Reject => b.reject(&s, &g, target, Some("bad".into())).await,
                        };
                        note(r);
                    }
                }
                Err(e) => note(Err(e)),
            }
        }
        match load.chores[round % load.chores.len()] {
            Chore::Replay => {
                let how = Replay::FromSequence {
                    after: 0,
                    partitions: Partitions::All,
                };
                note(b.replay(&s, &gn("g"), how).await.map(drop));
            }
            Chore::Redrive(group) => note(b.redrive(&s, &gn(group), Redrive::All).await.map(drop)),
            Chore::Reset => {
                let req = ResetRequest::to_the_beginning(&s, &gn("g"));
                note(b.reset(req).await);
            }
            Chore::NewGroup => {
                let spec = GroupSpec::new(gn(&format!("x{worker}-{round}")));
                note(b.create_group(&s, spec).await.map(drop));
            }
        }
    }
    errors
}
