//! A canary (`docs/handlers.md#canaries`): a second version that gets a
//! share of a handler's first attempts, and the first-attempt counts the
//! two versions are judged by.
//!
//! * **Routing.** An event goes to the canary when its id hashes into the
//!   share and the delivery is its first attempt; every other delivery
//!   goes to the current version. The hash is stable, so which version an
//!   event meets does not depend on the node, the fetch or the order.
//! * **Nothing is lost to the canary.** A retry always runs on the current
//!   version, and a canary's *reject* is settled as a retry (the current
//!   version then decides whether the event is dead-lettered): a broken
//!   canary can delay deliveries, never dead-letter them.
//! * **Counting.** Only first attempts are counted, for both versions, so
//!   the current version's count is not swollen by the retries of what the
//!   canary failed. A failure is anything but an ack: a retry, a reject, a
//!   trap, a timeout, a limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Handler;
pub use crate::cluster::CanaryCounts;
use crate::model::EventId;

/// Shares are in hundredths of a percent: 10% is 1,000.
pub const SHARE_SCALE: u32 = 10_000;

/// A version running beside the current one on a share of first attempts.
#[derive(Debug, Clone)]
pub struct CanaryVersion {
    /// Its version number (its deliveries are counted under it).
    pub number: u64,
    /// The code.
    pub handler: Arc<dyn Handler>,
    /// Its share of first attempts, in hundredths of a percent (1..=10,000).
    pub share: u32,
    /// What both versions did with their first attempts since it started.
    pub tally: Arc<CanaryTally>,
}

impl CanaryVersion {
    /// Whether the first attempt of `event` goes to the canary.
    pub fn takes(&self, event: &EventId) -> bool {
        bucket(event.as_str()) < self.share
    }
}

/// Which of `SHARE_SCALE` buckets an event id falls in: FNV-1a, stable
/// across builds, platforms and nodes.
pub(crate) fn bucket(id: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The high bits mix best.
    ((hash >> 32) % u64::from(SHARE_SCALE)) as u32
}

/// First attempts handled by each version since the canary started.
#[derive(Debug, Default)]
pub struct CanaryTally {
    current_handled: AtomicU64,
    current_failed: AtomicU64,
    canary_handled: AtomicU64,
    canary_failed: AtomicU64,
}

impl CanaryTally {
    /// Counts one finished first attempt, by the canary or not.
    pub(crate) fn record(&self, by_canary: bool, failed: bool) {
        let (handled, failures) = if by_canary {
            (&self.canary_handled, &self.canary_failed)
        } else {
            (&self.current_handled, &self.current_failed)
        };
        handled.fetch_add(1, Ordering::Relaxed);
        if failed {
            failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What was counted so far.
    pub fn counts(&self) -> CanaryCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CanaryCounts {
            current_handled: get(&self.current_handled),
            current_failed: get(&self.current_failed),
            canary_handled: get(&self.canary_handled),
            canary_failed: get(&self.canary_failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_takes_about_that_share_of_event_ids_and_always_the_same_ones() {
        for share in [500, 1_000, 5_000] {
            let taken = (0..20_000)
                .filter(|_| bucket(EventId::generate().as_str()) < share)
                .count();
            let expected = 20_000 * share as usize / SHARE_SCALE as usize;
            // Well within 5 standard deviations of a binomial draw.
            let slack = 5 * ((expected as f64).sqrt() as usize + 1);
            assert!(
                taken.abs_diff(expected) < slack,
                "share {share}: {taken} of 20000, expected about {expected}"
            );
        }
        let id = EventId::generate().to_string();
        assert_eq!(bucket(&id), bucket(&id));
        assert!(bucket(&id) < SHARE_SCALE);
    }

    #[test]
    fn rates_count_failures_of_what_each_version_handled() {
        let tally = CanaryTally::default();
        for i in 0..10 {
            tally.record(true, i < 2);
            tally.record(false, i < 1);
        }
        tally.record(false, false);
        let counts = tally.counts();
        assert_eq!(
            counts,
            CanaryCounts {
                current_handled: 11,
                current_failed: 1,
                canary_handled: 10,
                canary_failed: 2,
            }
        );
        assert!((counts.canary_rate() - 0.2).abs() < 1e-9);
        assert!((counts.current_rate() - 1.0 / 11.0).abs() < 1e-9);
        let both = counts.plus(counts);
        assert_eq!(both.canary_handled, 20);
        assert_eq!(CanaryCounts::default().canary_rate(), 0.0);
    }
}
