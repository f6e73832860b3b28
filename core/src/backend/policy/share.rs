//! How a fetch shares its limit among the partitions it reads
//! (`docs/groups.md#fairness`): one claim per partition in rotation, so no
//! partition gets two more than one that still had something to give, and
//! a partition with nothing claimable leaves its share to the others.
//!
//! A store rarely knows up front how much a partition can give: under an
//! ordering, unseen events may all wait behind busy gates, and only the
//! walk over them tells. [`Share`] lets a store ask each partition for a
//! bounded share, learn from a short answer that the partition is spent,
//! and ask the others for the rest — the same leases, partition by
//! partition, that claiming one at a time in rotation would give.

/// Shares `limit` claims among partitions one at a time in rotation,
/// starting at `first` (an index into `capacity`): `capacity[i]` is how
/// many partition `i` can give. Returns how many to take from each
/// (`docs/groups.md#claims`).
pub fn round_robin(capacity: &[usize], limit: usize, first: usize) -> Vec<usize> {
    let n = capacity.len();
    let mut take = vec![0; n];
    let mut left = limit;
    let mut progressed = true;
    while left > 0 && progressed {
        progressed = false;
        for step in 0..n {
            let i = (first + step) % n;
            if left > 0 && take[i] < capacity[i] {
                take[i] += 1;
                left -= 1;
                progressed = true;
            }
        }
    }
    take
}

/// How many deliveries a partition can give a fetch: its claimable ones
/// plus the events past the cursor that have none yet.
pub fn claim_capacity(claimable: usize, cursor: u64, high_watermark: u64) -> usize {
    let unseen = high_watermark.saturating_sub(cursor.saturating_sub(1));
    claimable.saturating_add(usize::try_from(unseen).unwrap_or(usize::MAX))
}

/// A fetch's limit shared among its partitions round-robin, as their
/// claims come in (`docs/groups.md#fairness`).
///
/// Each partition starts with a bound on what it can give (for instance
/// [`claim_capacity`]). The store asks each partition for its share
/// ([`Share::asks`]), claims up to that many from it, and reports what it
/// got ([`Share::gave`]); a partition that gave fewer than asked has no
/// more, and its share goes to the others on the next [`Share::asks`].
/// When every ask is zero the fetch is done, and each partition has given
/// exactly what one claim at a time in rotation from `first` would have
/// taken from it.
#[derive(Debug, Clone)]
pub struct Share {
    /// Per partition, the most it can still have given in all.
    bound: Vec<usize>,
    /// Per partition, what it gave so far.
    given: Vec<usize>,
    limit: usize,
    first: usize,
}

impl Share {
    /// A share of `limit` among partitions bounded by `bound`, whose
    /// rotation starts at index `first`.
    pub fn new(bound: Vec<usize>, limit: usize, first: usize) -> Self {
        let given = vec![0; bound.len()];
        Self {
            bound,
            given,
            limit,
            first,
        }
    }

    /// How many more to claim from each partition now; all zero when the
    /// fetch has its leases (or every partition is spent).
    pub fn asks(&self) -> Vec<usize> {
        round_robin(&self.bound, self.limit, self.first)
            .into_iter()
            .zip(&self.given)
            .map(|(share, given)| share.saturating_sub(*given))
            .collect()
    }

    /// Whether [`Share::asks`] would ask anything.
    pub fn done(&self) -> bool {
        self.asks().iter().all(|a| *a == 0)
    }

    /// Partition `i` gave `got` of the `asked` claims: fewer means it is
    /// spent, and gives nothing more in this fetch.
    pub fn gave(&mut self, i: usize, asked: usize, got: usize) {
        debug_assert!(got <= asked, "a partition gave more than asked");
        self.given[i] += got;
        if got < asked {
            self.bound[i] = self.given[i];
        }
    }
}
