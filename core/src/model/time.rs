//! Millisecond UTC timestamps.
//!
//! Rheo keeps every time (event timestamps, lease expiries, retry due times)
//! as whole milliseconds since the Unix epoch: that is the precision the API
//! promises (RFC 3339 with milliseconds), it compares and sorts as an
//! integer, and every backend can store it exactly.

use std::fmt;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ValidationError;

/// A duration in milliseconds for people: `850ms`, `3.2s`, `4m 05s`, `2h 07m`.
pub fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h {:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A UTC instant with millisecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

/// The latest instant Rheo accepts (year 9999), so every stored time has a
/// four-digit year and text forms sort like the instants they name.
const MAX_MILLIS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The Unix epoch, the earliest instant Rheo accepts.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The latest instant Rheo accepts: 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp(MAX_MILLIS);

    /// From milliseconds since the Unix epoch, unchecked: for values that
    /// come from a clock or a store. Input from callers goes through
    /// [`Timestamp::checked`] or [`Timestamp::parse_rfc3339`].
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// This instant plus `ms` milliseconds, or `None` past [`Timestamp::MAX`].
    pub fn checked_add_ms(self, ms: u64) -> Option<Self> {
        let sum = self.0.checked_add(i64::try_from(ms).ok()?)?;
        (sum <= MAX_MILLIS).then_some(Timestamp(sum))
    }

    /// This instant plus `ms` milliseconds, held at [`Timestamp::MAX`]: a
    /// lease expiry or retry due time computed from a clock within a day of
    /// the year 10000 ends with the representable range instead of leaving
    /// it (a time past it has no four-digit year, so it would neither print
    /// nor sort like the others). Callers bound `ms` (leases, delays), and
    /// the clock is refused a move past the range, so nothing else reaches it.
    pub fn add_ms(self, ms: u64) -> Self {
        self.checked_add_ms(ms).unwrap_or(Self::MAX.max(self))
    }

    /// `ms` earlier, never before the epoch.
    pub fn sub_ms(self, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(ms).max(0))
    }

    /// Milliseconds from `earlier` to `self`, 0 when `earlier` is later.
    pub fn ms_since(self, earlier: Timestamp) -> u64 {
        u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0)
    }

    /// Parses an RFC 3339 timestamp (any offset; sub-millisecond digits are
    /// truncated). Years 1970–9999 are accepted.
    pub fn parse_rfc3339(text: &str) -> Result<Self, ValidationError> {
        let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| {
            ValidationError::new(
                "timestamp",
                format!("{text:?} is not an RFC 3339 timestamp ({e})"),
            )
        })?;
        Self::checked(parsed.timestamp_millis())
    }

    /// Accepts `ms` when it lies between the epoch and the end of year 9999.
    pub fn checked(ms: i64) -> Result<Self, ValidationError> {
        Timestamp(ms).validate("timestamp")
    }

    /// Checks that this instant, given by a caller in `field`, lies between
    /// [`Timestamp::EPOCH`] and [`Timestamp::MAX`]; returns it.
    pub fn validate(self, field: &str) -> Result<Self, ValidationError> {
        if (Self::EPOCH..=Self::MAX).contains(&self) {
            Ok(self)
        } else {
            Err(ValidationError::new(
                field,
                "must lie between 1970-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z",
            ))
        }
    }

    /// RFC 3339 in UTC with exactly three fractional digits, e.g.
    /// `2026-11-29T08:25:16.123Z`. Fixed width, so text order is time order.
    pub fn to_rfc3339(self) -> String {
        match Utc.timestamp_millis_opt(self.0).single() {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => format!("@{}ms", self.0),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_in_utc() {
        let t = Timestamp::from_millis(1_764_404_716_123);
        assert_eq!(t.to_rfc3339(), "2025-11-29T08:25:16.123Z");
        assert_eq!(Timestamp::EPOCH.to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn parses_offsets_and_truncates_below_a_millisecond() {
        let t = Timestamp::parse_rfc3339("2025-11-29T09:25:16.123456+01:00").unwrap();
        assert_eq!(t.as_millis(), 1_764_404_716_123);
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()).unwrap(), t);
    }

    #[test]
    fn refuses_garbage_and_out_of_range_years() {
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
        assert!(Timestamp::parse_rfc3339("1969-12-31T23:59:59Z").is_err());
        assert!(Timestamp::checked(MAX_MILLIS + 1).is_err());
    }

    #[test]
    fn arithmetic_stays_within_the_printable_range() {
        let t = Timestamp::from_millis(1000);
        assert_eq!(t.add_ms(500).as_millis(), 1500);
        assert_eq!(t.ms_since(Timestamp::from_millis(400)), 600);
        assert_eq!(Timestamp::from_millis(400).ms_since(t), 0);
        assert_eq!(t.checked_add_ms(500), Some(Timestamp::from_millis(1500)));
        let late = Timestamp::from_millis(MAX_MILLIS - 10);
        assert_eq!(late.checked_add_ms(10), Some(Timestamp::MAX));
        assert_eq!(late.checked_add_ms(11), None);
        assert_eq!(late.checked_add_ms(u64::MAX), None);
        for ms in [11, 86_400_000, u64::MAX] {
            assert_eq!(late.add_ms(ms), Timestamp::MAX, "{ms}");
        }
        assert_eq!(
            Timestamp::MAX.add_ms(u64::MAX).to_rfc3339(),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn validation_names_the_field() {
        assert!(Timestamp::MAX.validate("from").is_ok());
        assert!(Timestamp::EPOCH.validate("from").is_ok());
        let err = Timestamp::from_millis(-1).validate("start_at").unwrap_err();
        assert_eq!(err.field, "start_at");
        assert!(Timestamp::from_millis(i64::MAX).validate("to").is_err());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(3_249), "3.2s");
        assert_eq!(human_ms(245_000), "4m 05s");
        assert_eq!(human_ms(7_620_000), "2h 07m");
    }
}
