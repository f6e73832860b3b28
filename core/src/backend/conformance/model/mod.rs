//! Conformance check: a randomized sequence of operations run against the
//! backend and against a small reference model of the documented semantics
//! (`docs/log.md`, `docs/groups.md`, `docs/errors.md`), compared after every
//! step.
//!
//! The model ([`reference`]) is written from the documents, not from any
//! backend: a stream with partitions, per-partition sequences and event
//! keys, two groups with `max_attempts`, a backoff schedule and an
//! `ordering` (`none`, `key` or `partition`, changed by a reset of every
//! partition), deliveries that are available (due at a time), leased
//! (under a lease id, until `expires_at`), acked or dead-lettered, a cursor
//! per partition, and nothing else. Under an ordering a delivery is
//! claimable only as its gate's head (docs/groups.md#ordering), worked out
//! from those facts at every fetch. Where the documents leave a choice
//! open — which partition a fetch starts its round-robin at, the lease ids
//! a backend mints, how far an ordered fetch moves the cursor over events
//! it parks — the check verifies what is specified (the leases are the
//! lowest claimable deliveries of each partition, as many as the limit and
//! the claimable deliveries allow, shared round-robin so that no partition
//! gets two more than one that still had some; fresh lease ids; only events
//! waiting behind their gate are passed without a lease) and then follows
//! the backend's choice.
//!
//! The run ([`run`], [`fetch`], [`race`]) also settles one lease from
//! several tasks at once, and restarts a backend that can be reopened
//! ([`Harness::reopen`]).
//!
//! The seed comes from `RHEO_MODEL_SEED` (else it is random) and the number
//! of steps from `RHEO_MODEL_STEPS`; a divergence panics with the seed, the
//! step and every step so far, so `RHEO_MODEL_SEED=… cargo test …`
//! reproduces it (docs/groups.md#the-model-based-check).

mod fetch;
mod race;
mod reference;
mod run;

use std::fmt::Write as _;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::{Harness, gn};
use crate::backend::CreateStream;
use crate::model::{GroupOrdering, GroupSpec, OnExhausted, StartAfter, StartPosition};
use reference::Model;
use run::{ORDERINGS, Run};

/// Steps when `RHEO_MODEL_STEPS` is unset, by backend (measured in
/// docs/groups.md#the-model-based-check to stay within about 10 s, and
/// 30 s on the MongoDB stand-in).
fn default_steps(kind: &str) -> usize {
    match kind {
        "memory" => 2000,
        "mongodb" => 150,
        _ => 400,
    }
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

/// Random appends (with keys), fetches, acks, nacks with delays, rejects,
/// concurrent settles of one lease, renews, clock jumps, redrives, replays,
/// resets (some changing the ordering), lag reads and, on a store that
/// can be reopened, restarts, on one stream with two groups, each checked
/// against the reference model, and the groups' info and dead letters
/// compared after every step.
pub async fn random_operations_match_the_reference_model(h: &Harness) {
    let seed = env_number("RHEO_MODEL_SEED").unwrap_or_else(rand::random);
    let steps =
        env_number("RHEO_MODEL_STEPS").map_or_else(|| default_steps(h.b().kind()), |n| n as usize);
    let mut rng = StdRng::seed_from_u64(seed);
    let partitions = rng.random_range(1..=3);
    let stream = super::sn("model");
    h.b()
        .create_stream(CreateStream {
            name: stream.clone(),
            partition_count: partitions,
            retention: None,
        })
        .await
        .expect("create stream");
    let mut model = Model::new(partitions);
    model.redis_forgets_first_attempt_acks_before_the_start = h.b().kind() == "redis";
    let backoffs: [&[u64]; 3] = [&[], &[1_000], &[500, 2_000]];
    let mut specs = Vec::new();
    for (name, attempts) in [("g1", 1..=3), ("g2", 2..=4)] {
        let mut spec = GroupSpec::new(gn(name));
        spec.max_attempts = rng.random_range(attempts);
        spec.retry_backoff_ms = backoffs.choose(&mut rng).expect("backoff").to_vec();
        spec.ordering = *ORDERINGS.choose(&mut rng).expect("ordering");
        // Half the ordered groups park a failing key (docs/groups.md#quarantine).
        if spec.ordering != GroupOrdering::None && rng.random_bool(0.5) {
            spec.on_exhausted = OnExhausted::Quarantine;
        }
        // Most unordered groups limit each key, and some groups of every
        // ordering pace each key's claims (docs/groups.md#flow).
        spec.flow = run::random_flow(&mut rng);
        if spec.ordering != GroupOrdering::None {
            spec.flow.key_concurrency = None;
        }
        if name == "g2" {
            spec.start = StartPosition::After(StartAfter::All(rng.random_range(0..=2)));
        }
        h.b()
            .create_group(&stream, spec.clone())
            .await
            .expect("create group");
        model.add_group(&spec);
        specs.push(spec);
    }
    let mut run = Run::new(h, rng, model, stream);
    run.note(format!(
        "stream \"model\" with {partitions} partitions; groups {}",
        specs
            .iter()
            .map(|s| format!(
                "{} (max_attempts {}, backoff {:?}, start {:?}, ordering {}, on_exhausted {}, \
                 flow {})",
                s.name,
                s.max_attempts,
                s.retry_backoff_ms,
                s.start,
                s.ordering.as_str(),
                s.on_exhausted.as_str(),
                s.flow.to_json()
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let started = std::time::Instant::now();
    for _ in 0..steps {
        if let Err(divergence) = run.step().await {
            let mut report = String::new();
            let _ = writeln!(
                report,
                "the {} backend diverged from the reference model (docs/groups.md)",
                h.b().kind()
            );
            let _ = writeln!(
                report,
                "seed {seed}, step {} of {steps}; reproduce with RHEO_MODEL_SEED={seed} RHEO_MODEL_STEPS={steps}",
                run.steps.len() - 1
            );
            let _ = writeln!(report, "{divergence}");
            let _ = writeln!(report, "steps:");
            for line in &run.steps {
                let _ = writeln!(report, "{line}");
            }
            panic!("{report}");
        }
    }
    eprintln!(
        "model check on {}: seed {seed}, {steps} steps ({} restarts; a key parked after {} \
         steps, {} releases of one) in {:.1?}",
        h.b().kind(),
        run.restarts,
        run.parked.0,
        run.parked.1,
        started.elapsed()
    );
}
