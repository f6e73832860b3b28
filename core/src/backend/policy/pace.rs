//! `flow.key_rate` (`docs/groups.md#flow`): how many claims of one key go
//! out a second, as a token bucket per key kept in the store.
//!
//! The bucket is kept as one number per (group, partition, key), its
//! *theoretical arrival time* (TAT, microseconds since the Unix epoch):
//! the instant at which the bucket would be full again if nothing more
//! were claimed. With `T` = one claim's interval and `τ` = `(burst − 1) · T`,
//! a claim at `now` is conforming when `TAT − τ ≤ now`; it then moves the
//! TAT to `max(TAT, now) + T`. A TAT at or before `now` (or none stored)
//! is a full bucket, so a store may forget one whose time has passed.
//!
//! Every claim of a keyed delivery — an unseen event, a retry, a released
//! one — asks the [`Pacer`]. One that finds no token is *paced*: it is written available, due at the slot it is given
//! (`max(now, TAT − τ)`), and the TAT moves past that slot, so the slot is
//! reserved for it: when it comes due it goes out without asking again.
//! Paced deliveries of one key are due one interval apart, so a key's
//! backlog costs no work per fetch beyond its own claims.
//!
//! A delivery whose lease expired is never paced: it was out, in its
//! gate's slot, and goes out again at once. It is counted all the same
//! ([`Candidate::Expired`]): the bucket moves as for any claim, so the key's
//! next claims wait for its token and the rate holds over time.

use std::collections::{BTreeMap, HashMap};

use crate::model::{KeyRate, Timestamp};

/// What one claim of a key finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// A token: it goes out now.
    Now,
    /// No token: it is paced, due at this instant (its reserved slot).
    At(Timestamp),
}

/// What a claim is of, as the bucket rule tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    /// An event the group had not reached (the walk's).
    Unseen,
    /// An available delivery, due; `paced`: its slot was reserved when it
    /// was paced, so it goes out without a token.
    Due {
        /// It carries the paced mark.
        paced: bool,
    },
    /// A delivery whose lease expired: it goes out again at once, counted.
    Expired,
}

/// What the claim of `candidate` finds under `rate`, its key's bucket at
/// `tat` (`None`: full), which it moves in place
/// (`docs/groups.md#flow`): a paced delivery come due goes out and leaves
/// the bucket alone; one whose lease expired goes out and moves the
/// bucket as any claim does; any other goes out with a token or is paced
/// to its slot.
pub fn take_token(
    rate: &KeyRate,
    candidate: Candidate,
    tat: &mut Option<i64>,
    now: Timestamp,
) -> Pace {
    if candidate == (Candidate::Due { paced: true }) {
        return Pace::Now;
    }
    let (found, next) = pace(rate, *tat, now);
    *tat = Some(next);
    match candidate {
        Candidate::Expired => Pace::Now,
        _ => found,
    }
}

/// The bucket rule for one claim: the stored TAT (`None`: a full bucket)
/// and `now` give what the claim finds and the TAT after it.
pub fn pace(rate: &KeyRate, tat_us: Option<i64>, now: Timestamp) -> (Pace, i64) {
    let interval = rate.interval_us();
    let tolerance = interval.saturating_mul(i64::from(rate.burst.saturating_sub(1)));
    let now_us = now.as_millis().saturating_mul(1000);
    let tat = tat_us.unwrap_or(now_us).max(now_us);
    let slot = now_us.max(tat.saturating_sub(tolerance));
    let next = tat.max(slot).saturating_add(interval);
    if slot <= now_us {
        (Pace::Now, next)
    } else {
        // Due at the first millisecond at or after its slot.
        let due = slot.saturating_add(999) / 1000;
        (Pace::At(Timestamp::from_millis(due)), next)
    }
}

/// The key rate of one fetch: the TATs of the keys it claims, as the
/// store holds them, and what the fetch changes.
///
/// The store loads the TAT of every key [`Pacer::unknown`] names (a key
/// with none stored is loaded as `None`), asks [`Pacer::claim`] for each
/// keyed delivery it would hand out, in the order it would hand them out,
/// writes a paced one available and due at the instant given, with its
/// `paced` mark set, and stores [`Pacer::changed`] in the same
/// transaction, under a guard that no other fetch of the same partition
/// runs between the read and the write.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    rate: Option<KeyRate>,
    now: Timestamp,
    /// Per key: its TAT as loaded or since changed (`None`: none stored).
    tats: HashMap<String, Option<i64>>,
    changed: BTreeMap<String, i64>,
}

impl Pacer {
    /// The pacer of a fetch at `now` under `rate` (`None`: no key rate,
    /// every claim goes out).
    pub fn new(rate: Option<KeyRate>, now: Timestamp) -> Self {
        Self {
            rate,
            now,
            ..Self::default()
        }
    }

    /// Whether the group has a key rate.
    pub fn is_on(&self) -> bool {
        self.rate.is_some()
    }

    /// The keys among `keys` whose TAT the store must load first (none
    /// without a key rate).
    pub fn unknown<'a>(&self, keys: impl IntoIterator<Item = Option<&'a str>>) -> Vec<String> {
        if self.rate.is_none() {
            return Vec::new();
        }
        let mut out: Vec<String> = keys
            .into_iter()
            .flatten()
            .filter(|k| !self.tats.contains_key(*k))
            .map(str::to_owned)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The TAT the store holds for `key` (`None`: none stored).
    pub fn load(&mut self, key: impl Into<String>, tat_us: Option<i64>) {
        self.tats.entry(key.into()).or_insert(tat_us);
    }

    /// What the claim of `candidate`, a delivery with `key`, finds
    /// ([`take_token`]). A delivery without a key, or a group without a key
    /// rate, always goes out.
    pub fn claim(&mut self, key: Option<&str>, candidate: Candidate) -> Pace {
        let (Some(rate), Some(key)) = (self.rate, key) else {
            return Pace::Now;
        };
        let mut tat = self.tats.get(key).copied().unwrap_or_else(|| {
            debug_assert!(false, "the TAT of key {key:?} was not loaded");
            None
        });
        let before = tat;
        let found = take_token(&rate, candidate, &mut tat, self.now);
        if let Some(next) = tat.filter(|_| tat != before) {
            self.tats.insert(key.to_owned(), Some(next));
            self.changed.insert(key.to_owned(), next);
        }
        found
    }

    /// The TATs this fetch changed, to store, by key.
    pub fn changed(&self) -> impl Iterator<Item = (&str, i64)> {
        self.changed.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether it changed any TAT.
    pub fn has_changes(&self) -> bool {
        !self.changed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: f64, burst: u32) -> KeyRate {
        KeyRate { per_second, burst }
    }

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_slot_an_interval() {
        let r = rate(2.0, 3);
        let now = Timestamp::from_millis(10_000);
        let mut tat = None;
        let mut found = Vec::new();
        for _ in 0..6 {
            let (p, next) = pace(&r, tat, now);
            found.push(p);
            tat = Some(next);
        }
        let at = |ms| Pace::At(Timestamp::from_millis(ms));
        assert_eq!(
            found,
            vec![
                Pace::Now,
                Pace::Now,
                Pace::Now,
                at(10_500),
                at(11_000),
                at(11_500)
            ],
            "three at once, then one every 500 ms"
        );
    }

    #[test]
    fn a_quiet_spell_refills_the_bucket_and_no_more() {
        let r = rate(1.0, 2);
        let t0 = Timestamp::from_millis(0);
        let (_, tat) = pace(&r, None, t0);
        let (_, tat) = pace(&r, Some(tat), t0);
        // Empty now: a claim half a second later is paced to 1 s.
        let (p, _) = pace(&r, Some(tat), t0.add_ms(500));
        assert_eq!(p, Pace::At(Timestamp::from_millis(1_000)));
        // A minute later the bucket holds two again, not sixty.
        let later = t0.add_ms(60_000);
        let (p1, tat) = pace(&r, Some(tat), later);
        let (p2, tat) = pace(&r, Some(tat), later);
        let (p3, _) = pace(&r, Some(tat), later);
        assert_eq!((p1, p2), (Pace::Now, Pace::Now));
        assert_eq!(p3, Pace::At(Timestamp::from_millis(61_000)));
    }

    #[test]
    fn slots_that_fall_between_milliseconds_are_due_at_the_next_one() {
        let r = rate(3.0, 1);
        let t0 = Timestamp::from_millis(0);
        let (p, tat) = pace(&r, None, t0);
        assert_eq!(p, Pace::Now);
        assert_eq!(tat, 333_333);
        let (p, _) = pace(&r, Some(tat), t0);
        assert_eq!(p, Pace::At(Timestamp::from_millis(334)));
    }

    #[test]
    fn the_pacer_reserves_slots_and_lets_paced_deliveries_through() {
        let now = Timestamp::from_millis(5_000);
        let mut pacer = Pacer::new(Some(rate(10.0, 1)), now);
        assert_eq!(
            pacer.unknown([Some("a"), None, Some("b"), Some("a")]),
            vec!["a".to_owned(), "b".to_owned()]
        );
        pacer.load("a", None);
        pacer.load("b", Some(5_050_000));
        assert!(pacer.unknown([Some("a"), Some("b")]).is_empty());
        assert_eq!(pacer.claim(Some("a"), Candidate::Unseen), Pace::Now);
        assert_eq!(
            pacer.claim(Some("a"), Candidate::Unseen),
            Pace::At(Timestamp::from_millis(5_100))
        );
        assert_eq!(
            pacer.claim(Some("a"), Candidate::Unseen),
            Pace::At(Timestamp::from_millis(5_200))
        );
        assert_eq!(
            pacer.claim(Some("b"), Candidate::Due { paced: false }),
            Pace::At(Timestamp::from_millis(5_050))
        );
        assert_eq!(
            pacer.claim(Some("b"), Candidate::Due { paced: true }),
            Pace::Now,
            "a reserved slot"
        );
        assert_eq!(
            pacer.claim(None, Candidate::Unseen),
            Pace::Now,
            "no key, no limit"
        );
        let changed: Vec<_> = pacer.changed().collect();
        assert_eq!(changed, vec![("a", 5_300_000), ("b", 5_150_000)]);
        // An expired lease goes out without a token, and moves the bucket.
        assert_eq!(pacer.claim(Some("a"), Candidate::Expired), Pace::Now);
        assert_eq!(pacer.changed().next(), Some(("a", 5_400_000)));
        let mut off = Pacer::new(None, now);
        assert!(off.unknown([Some("a")]).is_empty());
        assert_eq!(off.claim(Some("a"), Candidate::Unseen), Pace::Now);
        assert!(!off.has_changes());
    }
}
