//! Where a partition's log may start under its stream's retention
//! (`docs/log.md#retention`): every store trims to the point decided here.

use crate::model::{Retention, RetentionPolicy, Timestamp};

/// What a partition's trim point is decided from.
#[derive(Debug, Clone, Default)]
pub struct TrimInputs<'a> {
    /// The lowest sequence still stored (the high watermark + 1 when none is).
    pub first_sequence: u64,
    /// The last sequence appended.
    pub high_watermark: u64,
    /// The partition's oldest events, from `first_sequence` on in sequence
    /// order, with their timestamps (a page: trimming by age goes as far
    /// as it shows and no further this round).
    pub oldest: &'a [(u64, Timestamp)],
    /// Each group's frontier in the partition (`interest` only).
    pub frontiers: &'a [u64],
    /// Now, on the store's clock.
    pub now: Timestamp,
}

/// The sequence the partition's log may start at: every event below it
/// may be removed. Never below `first_sequence`, never past the high
/// watermark + 1.
///
/// - `max_events`: the newest `max_events` stay.
/// - `max_age_ms`: the events at the front older than `now − max_age_ms`
///   go, up to the first one that is not (a younger event keeps the older
///   ones behind it: the log only shrinks from its start).
/// - `interest`: also everything every group has settled (below the
///   lowest frontier); a partition of a stream without groups keeps
///   everything but what the limits remove.
pub fn trim_point(retention: &Retention, at: &TrimInputs<'_>) -> u64 {
    let end = at.high_watermark + 1;
    let mut point = at.first_sequence;
    if let Some(max) = retention.max_events {
        point = point.max(at.high_watermark.saturating_sub(max) + 1);
    }
    if let Some(age) = retention.max_age_ms {
        let cutoff = at
            .now
            .as_millis()
            .saturating_sub(i64::try_from(age).unwrap_or(i64::MAX));
        let mut young = None;
        let mut last_old = None;
        for &(sequence, ts) in at.oldest {
            if ts.as_millis() >= cutoff {
                young = Some(sequence);
                break;
            }
            last_old = Some(sequence);
        }
        point = point.max(match (young, last_old) {
            (Some(sequence), _) => sequence,
            (None, Some(sequence)) => sequence + 1,
            (None, None) => at.first_sequence,
        });
    }
    if retention.policy == RetentionPolicy::Interest
        && let Some(lowest) = at.frontiers.iter().min()
    {
        point = point.max(lowest + 1);
    }
    point.min(end).max(at.first_sequence)
}

/// How many events a trim up to `upto` (exclusive) removed before a group
/// settled them: its `open` deliveries among them (available, parked,
/// leased), plus the events it never reached — from its `cursor` (the next
/// sequence it delivers for the first time), but not below `from`, the
/// first of them it had not settled.
pub fn skipped_by_trim(open: u64, cursor: u64, from: u64, upto: u64) -> u64 {
    open + upto.saturating_sub(cursor.max(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn limits(max_age_ms: Option<u64>, max_events: Option<u64>) -> Retention {
        Retention {
            max_age_ms,
            max_events,
            policy: RetentionPolicy::Limits,
        }
    }

    fn at(first: u64, hw: u64) -> TrimInputs<'static> {
        TrimInputs {
            first_sequence: first,
            high_watermark: hw,
            now: ts(1_000_000),
            ..TrimInputs::default()
        }
    }

    #[test]
    fn a_group_skips_its_open_deliveries_and_what_it_never_reached() {
        assert_eq!(skipped_by_trim(2, 5, 1, 9), 2 + 4, "5 to 8 never reached");
        assert_eq!(skipped_by_trim(1, 12, 1, 9), 1, "it reached all of them");
        assert_eq!(
            skipped_by_trim(0, 0, 3, 9),
            6,
            "counted from the first unsettled"
        );
    }

    #[test]
    fn max_events_keeps_the_newest() {
        let r = limits(None, Some(3));
        assert_eq!(trim_point(&r, &at(1, 10)), 8, "8, 9 and 10 stay");
        assert_eq!(trim_point(&r, &at(1, 3)), 1, "not over the limit");
        assert_eq!(trim_point(&r, &at(9, 10)), 9, "never below the start");
        assert_eq!(trim_point(&r, &at(1, 0)), 1, "empty");
    }

    #[test]
    fn max_age_trims_the_front_up_to_the_first_young_event() {
        let r = limits(Some(1000), None);
        let oldest = [(5, ts(10)), (6, ts(999_500)), (7, ts(20))];
        let inputs = TrimInputs {
            oldest: &oldest,
            ..at(5, 7)
        };
        assert_eq!(
            trim_point(&r, &inputs),
            6,
            "7 is old but behind a young one"
        );
        let all_old = [(5, ts(10)), (6, ts(20))];
        let inputs = TrimInputs {
            oldest: &all_old,
            ..at(5, 9)
        };
        assert_eq!(trim_point(&r, &inputs), 7, "as far as the page shows");
        let exactly = [(5, ts(999_000))];
        let inputs = TrimInputs {
            oldest: &exactly,
            ..at(5, 5)
        };
        assert_eq!(trim_point(&r, &inputs), 5, "exactly max_age old stays");
    }

    #[test]
    fn the_stricter_limit_wins() {
        let r = limits(Some(1000), Some(5));
        let oldest = [(1, ts(10)), (2, ts(10)), (3, ts(999_999))];
        let inputs = TrimInputs {
            oldest: &oldest,
            ..at(1, 10)
        };
        assert_eq!(trim_point(&r, &inputs), 6, "the count removes more");
        let inputs = TrimInputs {
            oldest: &oldest,
            ..at(1, 4)
        };
        assert_eq!(trim_point(&r, &inputs), 3, "the age removes more");
    }

    #[test]
    fn interest_follows_the_slowest_group_and_keeps_all_without_groups() {
        let r = Retention {
            policy: RetentionPolicy::Interest,
            ..Retention::default()
        };
        assert_eq!(trim_point(&r, &at(1, 10)), 1, "no groups: keep everything");
        let frontiers = [7, 3, 10];
        let inputs = TrimInputs {
            frontiers: &frontiers,
            ..at(1, 10)
        };
        assert_eq!(trim_point(&r, &inputs), 4, "1 to 3 settled by every group");
        let capped = Retention {
            max_events: Some(2),
            ..r
        };
        assert_eq!(
            trim_point(&capped, &inputs),
            9,
            "the cap removes unsettled ones too"
        );
        let done = [10, 10];
        let inputs = TrimInputs {
            frontiers: &done,
            ..at(1, 10)
        };
        assert_eq!(
            trim_point(&r, &inputs),
            11,
            "everything settled: all may go"
        );
    }
}
