//! Concurrent clients on one side of a pair: each runs claim-and-ack (or
//! append) rounds until the side's events are all done or a round finds
//! nothing, on a task of its own (so that, as in a server, the clients'
//! own work spreads over the cores). Every round is one latency sample;
//! the side's rate is every client's events over the wall time until the
//! last client stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rheo::bench::{Samples, WorkloadResult};

/// One client's share of a side: the events done by every client so far,
/// and this client's latency samples.
pub(crate) struct Tally {
    /// Which client this is, from 0.
    pub(crate) client: usize,
    done: Arc<AtomicUsize>,
    total: usize,
    samples: Vec<Duration>,
}

impl Tally {
    /// Whether events are left to do.
    pub(crate) fn more(&self) -> bool {
        self.done.load(Ordering::Relaxed) < self.total
    }

    /// Records a round that began at `since` and did `n` events.
    pub(crate) fn record(&mut self, since: Instant, n: usize) {
        self.samples.push(since.elapsed());
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes the next of `total` numbered items (e.g. a batch to append),
    /// or `None` when every one is taken.
    pub(crate) fn take(next: &AtomicUsize, total: usize) -> Option<usize> {
        let i = next.fetch_add(1, Ordering::Relaxed);
        (i < total).then_some(i)
    }
}

/// Runs `clients` clients, each the future `client` makes of its
/// [`Tally`] running rounds until [`Tally::more`] says no or a round finds
/// nothing; the result covers every client's rounds.
pub(crate) async fn timed<F, Fut>(
    name: &str,
    total: usize,
    clients: usize,
    mut client: F,
) -> anyhow::Result<WorkloadResult>
where
    F: FnMut(Tally) -> Fut,
    Fut: Future<Output = anyhow::Result<Tally>> + Send + 'static,
{
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            tokio::spawn(client(Tally {
                client: i,
                done: done.clone(),
                total,
                samples: Vec::new(),
            }))
        })
        .collect();
    let mut samples = Samples::default();
    let mut failed = None;
    for handle in handles {
        match handle.await {
            Ok(Ok(tally)) => tally.samples.into_iter().for_each(|s| samples.push(s)),
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(e) => failed = failed.or(Some(anyhow::anyhow!("a client panicked: {e}"))),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let name = match clients {
        1 => name.to_owned(),
        n => format!("{name}, {n} clients"),
    };
    Ok(samples.result(&name, done.load(Ordering::Relaxed), start.elapsed()))
}

/// Runs `round` until no events are left or a round finds nothing: one
/// client's loop.
pub(crate) async fn rounds<Fut>(
    mut tally: Tally,
    mut round: impl FnMut() -> Fut,
) -> anyhow::Result<Tally>
where
    Fut: Future<Output = anyhow::Result<usize>>,
{
    while tally.more() {
        let since = Instant::now();
        let n = round().await?;
        if n == 0 {
            break;
        }
        tally.record(since, n);
    }
    Ok(tally)
}
