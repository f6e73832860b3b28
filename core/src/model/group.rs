//! Consumer groups and where they start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Flow, GroupName, StreamName, Timestamp, ValidationError, validate_sequence};

/// `max_attempts` when the caller gives none: enough for transient faults,
/// few enough that a poison event reaches the dead letters quickly.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Largest `max_attempts`.
pub const MAX_MAX_ATTEMPTS: u32 = 1_000_000;
/// Longest retry delay, whether from a nack or from a backoff schedule: one day.
pub const MAX_DELAY_MS: u64 = 86_400_000;
/// Most steps in a `retry_backoff_ms` schedule.
pub const MAX_BACKOFF_STEPS: usize = 100;

/// A consumer group: independent delivery state over one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The stream it consumes.
    pub stream: StreamName,
    /// Its name, unique per stream.
    pub name: GroupName,
    /// Claims allowed per delivery before a failure dead-letters it.
    pub max_attempts: u32,
    /// Delay before a nacked delivery (without its own delay) is due again,
    /// indexed by attempt − 1, the last value repeating; empty = immediate.
    pub retry_backoff_ms: Vec<u64>,
    /// Which deliveries may be out at once (`docs/groups.md#ordering`).
    #[serde(default)]
    pub ordering: GroupOrdering,
    /// What a gated head that exhausts its attempts does
    /// (`docs/groups.md#quarantine`).
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// Its flow control (`docs/groups.md#flow`).
    #[serde(default)]
    pub flow: Flow,
    /// When it was created.
    pub created_at: Timestamp,
}

/// How a group orders its deliveries (`docs/groups.md#ordering`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GroupOrdering {
    /// Any claimable delivery may go out: several of one key or partition
    /// at once.
    #[default]
    None,
    /// At most one unsettled delivery per key per partition is out, and a
    /// key's events go out in sequence order; events without a key are
    /// not ordered.
    Key,
    /// At most one unsettled delivery per partition is out, always the
    /// partition's lowest unsettled one.
    Partition,
}

impl GroupOrdering {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupOrdering::None => "none",
            GroupOrdering::Key => "key",
            GroupOrdering::Partition => "partition",
        }
    }

    /// The gate an event with `key` passes under this ordering: deliveries
    /// of one gate go out one at a time, lowest sequence first; `None`
    /// when the event is not ordered. Under `Partition` every event of a
    /// partition shares one gate.
    pub fn gate(self, key: Option<&str>) -> Option<&str> {
        match self {
            GroupOrdering::None => None,
            GroupOrdering::Key => key,
            GroupOrdering::Partition => Some(""),
        }
    }
}

/// What happens to a delivery of an ordered group that exhausts its
/// attempts (`docs/groups.md#quarantine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// It goes to the dead letters and its key moves on.
    #[default]
    DeadLetter,
    /// It stays its key's head, parked: nothing of its key (its gate) is
    /// handed out until an operator releases it. Deliveries that are not
    /// ordered (no key under `ordering = "key"`) are dead-lettered.
    Quarantine,
}

impl OnExhausted {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExhausted::DeadLetter => "dead_letter",
            OnExhausted::Quarantine => "quarantine",
        }
    }
}

impl std::str::FromStr for OnExhausted {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dead_letter" => Ok(OnExhausted::DeadLetter),
            "quarantine" => Ok(OnExhausted::Quarantine),
            other => Err(ValidationError::new(
                "on_exhausted",
                format!("must be dead_letter or quarantine (got {other:?})"),
            )),
        }
    }
}

impl std::str::FromStr for GroupOrdering {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(GroupOrdering::None),
            "key" => Ok(GroupOrdering::Key),
            "partition" => Ok(GroupOrdering::Partition),
            other => Err(ValidationError::new(
                "ordering",
                format!("must be none, key or partition (got {other:?})"),
            )),
        }
    }
}

impl Group {
    /// The group's retry delay after a failed `attempt` (1-based).
    pub fn backoff_ms(&self, attempt: u32) -> u64 {
        backoff_ms(&self.retry_backoff_ms, attempt)
    }
}

/// Delay for `attempt` (1-based) under `schedule`; the last value repeats.
pub fn backoff_ms(schedule: &[u64], attempt: u32) -> u64 {
    let index = (attempt.max(1) - 1) as usize;
    schedule
        .get(index)
        .or(schedule.last())
        .copied()
        .unwrap_or(0)
}

/// Where a group (or a reset) starts reading.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// From sequence 1 of every partition.
    #[default]
    Beginning,
    /// After the given sequence (exclusive).
    After(StartAfter),
    /// At the first event whose timestamp is at or after this instant, per
    /// partition; a partition with no such event starts at its end.
    At(Timestamp),
}

impl StartPosition {
    /// Checks that every sequence is at most [`MAX_SEQUENCE`](super::MAX_SEQUENCE)
    /// and the instant lies in the accepted range. Partitions named in a
    /// per-partition map are checked by the backend, which knows the stream.
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            StartPosition::Beginning => Ok(()),
            StartPosition::After(StartAfter::All(seq)) => validate_sequence("start_after", *seq),
            StartPosition::After(StartAfter::PerPartition(map)) => map
                .iter()
                .try_for_each(|(p, seq)| validate_sequence(&format!("start_after.{p}"), *seq)),
            StartPosition::At(t) => t.validate("start_at").map(drop),
        }
    }
}

/// `start_after`: one sequence for all partitions, or one per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAfter {
    /// The same sequence in every partition.
    All(u64),
    /// Per partition; partitions missing from the map start at the beginning.
    PerPartition(BTreeMap<u32, u64>),
}

impl StartAfter {
    /// The exclusive start sequence for `partition`.
    pub fn for_partition(&self, partition: u32) -> u64 {
        match self {
            StartAfter::All(seq) => *seq,
            StartAfter::PerPartition(map) => map.get(&partition).copied().unwrap_or(0),
        }
    }
}

/// Options for creating a group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Its name.
    pub name: GroupName,
    /// See [`Group::max_attempts`].
    pub max_attempts: u32,
    /// Where it starts.
    pub start: StartPosition,
    /// See [`Group::retry_backoff_ms`].
    pub retry_backoff_ms: Vec<u64>,
    /// See [`Group::ordering`].
    pub ordering: GroupOrdering,
    /// See [`Group::on_exhausted`].
    pub on_exhausted: OnExhausted,
    /// See [`Group::flow`].
    pub flow: Flow,
}

impl GroupSpec {
    /// A group with the defaults: start at the beginning, 5 attempts, no backoff.
    pub fn new(name: GroupName) -> Self {
        Self {
            name,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            start: StartPosition::Beginning,
            retry_backoff_ms: Vec::new(),
            ordering: GroupOrdering::None,
            on_exhausted: OnExhausted::DeadLetter,
            flow: Flow::default(),
        }
    }

    /// Checks the numeric options, the start point (see
    /// [`StartPosition::validate`]), that a quarantine has a gate to
    /// park and that the flow fits the ordering ([`Flow::validate`]).
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.start.validate()?;
        self.flow.validate(self.ordering)?;
        if self.on_exhausted == OnExhausted::Quarantine && self.ordering == GroupOrdering::None {
            return Err(ValidationError::new(
                "on_exhausted",
                "quarantine parks a key behind its failing head: it needs \"ordering\": \"key\" \
                 (or \"partition\")",
            ));
        }
        if !(1..=MAX_MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(ValidationError::new(
                "max_attempts",
                format!(
                    "must be between 1 and {MAX_MAX_ATTEMPTS} (got {})",
                    self.max_attempts
                ),
            ));
        }
        validate_backoff(&self.retry_backoff_ms)
    }
}

/// Checks a retry backoff schedule.
pub fn validate_backoff(schedule: &[u64]) -> Result<(), ValidationError> {
    if schedule.len() > MAX_BACKOFF_STEPS {
        return Err(ValidationError::new(
            "retry_backoff_ms",
            format!("at most {MAX_BACKOFF_STEPS} steps"),
        ));
    }
    if let Some(bad) = schedule.iter().find(|d| **d > MAX_DELAY_MS) {
        return Err(ValidationError::new(
            "retry_backoff_ms",
            format!("{bad} exceeds the maximum delay of {MAX_DELAY_MS} ms"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_schedule_repeats_its_last_step() {
        let s = [100, 1000, 5000];
        assert_eq!(backoff_ms(&s, 1), 100);
        assert_eq!(backoff_ms(&s, 2), 1000);
        assert_eq!(backoff_ms(&s, 3), 5000);
        assert_eq!(backoff_ms(&s, 9), 5000);
        assert_eq!(backoff_ms(&[], 4), 0);
        assert_eq!(backoff_ms(&s, 0), 100);
    }

    #[test]
    fn spec_validation_names_the_field() {
        let mut spec = GroupSpec::new(GroupName::parse("g").unwrap());
        assert!(spec.validate().is_ok());
        spec.max_attempts = 0;
        assert_eq!(spec.validate().unwrap_err().field, "max_attempts");
        spec.max_attempts = 3;
        spec.retry_backoff_ms = vec![MAX_DELAY_MS + 1];
        assert_eq!(spec.validate().unwrap_err().field, "retry_backoff_ms");
        spec.retry_backoff_ms = vec![];
        spec.on_exhausted = OnExhausted::Quarantine;
        assert_eq!(spec.validate().unwrap_err().field, "on_exhausted");
        spec.ordering = GroupOrdering::Key;
        assert!(spec.validate().is_ok());
    }

    #[test]
    fn start_points_beyond_the_representable_range_are_refused() {
        use crate::model::MAX_SEQUENCE;
        let field = |start: StartPosition| start.validate().map_err(|e| e.field);
        assert_eq!(field(StartPosition::Beginning), Ok(()));
        assert_eq!(
            field(StartPosition::After(StartAfter::All(MAX_SEQUENCE))),
            Ok(())
        );
        assert_eq!(
            field(StartPosition::After(StartAfter::All(u64::MAX))),
            Err("start_after".into())
        );
        let map = BTreeMap::from([(0, 1), (3, MAX_SEQUENCE + 1)]);
        assert_eq!(
            field(StartPosition::After(StartAfter::PerPartition(map))),
            Err("start_after.3".into())
        );
        assert_eq!(field(StartPosition::At(Timestamp::MAX)), Ok(()));
        assert_eq!(
            field(StartPosition::At(Timestamp::from_millis(i64::MAX))),
            Err("start_at".into())
        );
        let mut spec = GroupSpec::new(GroupName::parse("g").unwrap());
        spec.start = StartPosition::After(StartAfter::All(u64::MAX));
        assert_eq!(spec.validate().unwrap_err().field, "start_after");
    }

    #[test]
    fn orderings_read_their_wire_names_and_gate_by_key_or_partition() {
        for o in [
            GroupOrdering::None,
            GroupOrdering::Key,
            GroupOrdering::Partition,
        ] {
            assert_eq!(o.as_str().parse::<GroupOrdering>().unwrap(), o);
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        assert_eq!(
            "Key".parse::<GroupOrdering>().unwrap_err().field,
            "ordering"
        );
        assert_eq!(GroupOrdering::None.gate(Some("k")), None);
        assert_eq!(GroupOrdering::Key.gate(Some("k")), Some("k"));
        assert_eq!(GroupOrdering::Key.gate(None), None);
        assert_eq!(GroupOrdering::Partition.gate(None), Some(""));
        assert_eq!(GroupOrdering::Partition.gate(Some("k")), Some(""));
    }

    #[test]
    fn start_after_map_defaults_missing_partitions_to_the_beginning() {
        let s = StartAfter::PerPartition(BTreeMap::from([(1, 7)]));
        assert_eq!(s.for_partition(1), 7);
        assert_eq!(s.for_partition(0), 0);
        assert_eq!(StartAfter::All(3).for_partition(5), 3);
    }
}
