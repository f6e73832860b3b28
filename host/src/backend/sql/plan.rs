//! Decisions both SQL backends make the same way, kept apart from the
//! statements that carry them out: which appended events are new, what a
//! settle operation writes, how per-partition lag adds up.

use std::collections::{BTreeMap, HashSet};

use crate::model::{
    EventId, EventInput, GroupName, Lag, PartitionLag, SettleOp, Settlement, StreamName, Timestamp,
    backoff_ms,
};

/// A group's retry policy, as settles need it.
#[derive(Debug, Clone)]
pub(crate) struct GroupConfig {
    pub(crate) max_attempts: u32,
    pub(crate) retry_backoff_ms: Vec<u64>,
}

/// Which inputs of a batch are new, and how many sequences each partition needs.
#[derive(Debug)]
pub(crate) struct AppendPlan {
    /// Per input: true when it must be written (false: a known or repeated id).
    pub(crate) fresh: Vec<bool>,
    /// New events per partition.
    pub(crate) per_partition: BTreeMap<u32, u64>,
}

/// Plans a batch given the ids that already exist in the stream.
pub(crate) fn plan_append(routed: &[(EventInput, u32)], known: &HashSet<EventId>) -> AppendPlan {
    let mut seen: HashSet<&EventId> = HashSet::new();
    let mut per_partition = BTreeMap::new();
    let fresh = routed
        .iter()
        .map(|(input, partition)| {
            let fresh = match &input.id {
                Some(id) => !known.contains(id) && seen.insert(id),
                None => true,
            };
            if fresh {
                *per_partition.entry(*partition).or_insert(0) += 1;
            }
            fresh
        })
        .collect();
    AppendPlan {
        fresh,
        per_partition,
    }
}

/// The write a settle operation turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    Ack,
    /// Back to available, due at `due` (`None`: now).
    Retry {
        due: Option<Timestamp>,
        reason: String,
    },
    Dead(String),
}

/// What `op` on a delivery at `attempt` writes under `config`.
pub(crate) fn settle_write(
    op: SettleOp,
    attempt: u32,
    config: &GroupConfig,
    now: Timestamp,
) -> Write {
    match op {
        SettleOp::Ack => Write::Ack,
        SettleOp::Reject { reason } => Write::Dead(reason.unwrap_or_else(|| "rejected".into())),
        SettleOp::Nack { reason, delay_ms } => {
            let reason = reason.unwrap_or_else(|| "retry".into());
            if attempt >= config.max_attempts {
                return Write::Dead(format!("max_attempts: {reason}"));
            }
            let delay = delay_ms.unwrap_or_else(|| backoff_ms(&config.retry_backoff_ms, attempt));
            Write::Retry {
                due: (delay > 0).then(|| now.add_ms(delay)),
                reason,
            }
        }
    }
}

/// Whether a batch is the common case: acks of distinct events with no
/// receipt to check, which one fenced statement can apply at once.
pub(crate) fn plain_acks(items: &[Settlement]) -> bool {
    let mut seen = HashSet::new();
    !items.is_empty()
        && items.iter().all(|i| {
            i.op == SettleOp::Ack
                && i.target
                    .receipt
                    .as_deref()
                    .is_none_or(|r| r == i.target.lease_id.as_str())
                && seen.insert(i.target.event_id.as_str())
        })
}

/// Open deliveries of one partition, as the lag statement counts them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpenCounts {
    /// Lowest open sequence.
    pub(crate) first_open: Option<u64>,
    pub(crate) leased: u64,
    /// Available and never delivered.
    pub(crate) fresh: u64,
    /// Available but not due yet.
    pub(crate) waiting: u64,
}

/// Builds a [`Lag`] partition by partition.
#[derive(Debug)]
pub(crate) struct LagBuilder {
    pub(crate) lag: Lag,
}

impl LagBuilder {
    pub(crate) fn new(stream: &StreamName, group: &GroupName) -> Self {
        Self {
            lag: Lag {
                stream: stream.clone(),
                group: group.clone(),
                lag: 0,
                partitions: BTreeMap::new(),
                pending: 0,
                inflight: 0,
                waiting_retry: 0,
                oldest_unacked_age_ms: None,
            },
        }
    }

    /// Adds a partition with cursor `cursor` and high watermark `hw`;
    /// returns its frontier. The frontier is one less than the lowest open
    /// delivery, or than the cursor when none is open.
    pub(crate) fn add(&mut self, partition: u32, cursor: u64, hw: u64, open: OpenCounts) -> u64 {
        let frontier = open
            .first_open
            .unwrap_or(cursor)
            .min(cursor)
            .saturating_sub(1);
        let entry = PartitionLag::new(frontier, hw);
        self.lag.lag += entry.lag;
        self.lag.partitions.insert(partition, entry);
        self.lag.pending += hw.saturating_sub(cursor.saturating_sub(1)) + open.fresh;
        self.lag.inflight += open.leased;
        self.lag.waiting_retry += open.waiting;
        frontier
    }

    /// Records the age of a partition's first unsettled event.
    pub(crate) fn unsettled_since(&mut self, event_time: Timestamp, now: Timestamp) {
        let age = now.ms_since(event_time);
        self.lag.oldest_unacked_age_ms =
            Some(self.lag.oldest_unacked_age_ms.map_or(age, |a| a.max(age)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(id: Option<&str>) -> EventInput {
        EventInput {
            id: id.map(|i| EventId::parse(i).unwrap()),
            ..EventInput::default()
        }
    }

    #[test]
    fn known_and_repeated_ids_are_not_fresh() {
        let routed = vec![
            (input(Some("a")), 0),
            (input(Some("b")), 1),
            (input(Some("a")), 0),
            (input(None), 1),
        ];
        let known = HashSet::from([EventId::parse("b").unwrap()]);
        let plan = plan_append(&routed, &known);
        assert_eq!(plan.fresh, [true, false, false, true]);
        assert_eq!(plan.per_partition, BTreeMap::from([(0, 1), (1, 1)]));
    }

    #[test]
    fn nacks_follow_attempts_and_backoff() {
        let config = GroupConfig {
            max_attempts: 3,
            retry_backoff_ms: vec![100],
        };
        let now = Timestamp::from_millis(1000);
        let nack = |delay| SettleOp::Nack {
            reason: None,
            delay_ms: delay,
        };
        assert_eq!(
            settle_write(nack(None), 1, &config, now),
            Write::Retry {
                due: Some(Timestamp::from_millis(1100)),
                reason: "retry".into()
            }
        );
        assert_eq!(
            settle_write(nack(Some(0)), 2, &config, now),
            Write::Retry {
                due: None,
                reason: "retry".into()
            }
        );
        assert_eq!(
            settle_write(nack(None), 3, &config, now),
            Write::Dead("max_attempts: retry".into())
        );
        assert_eq!(
            settle_write(SettleOp::Reject { reason: None }, 1, &config, now),
            Write::Dead("rejected".into())
        );
    }
}
