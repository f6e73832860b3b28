//! Streams: named, partitioned, append-only logs.

use serde::{Deserialize, Serialize};

use super::{StreamName, Timestamp};

/// Most partitions a stream may have. Partition-scoped state is kept per
/// partition in every backend, so the bound keeps one group's state small.
pub const MAX_PARTITIONS: u32 = 1024;

/// A stream and the high watermark (last sequence) of each partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Its name.
    pub name: StreamName,
    /// Fixed at creation.
    pub partition_count: u32,
    /// When it was created.
    pub created_at: Timestamp,
    /// Last allocated sequence per partition (index = partition; 0 = empty).
    pub high_watermarks: Vec<u64>,
    /// The lowest sequence still stored per partition (index = partition):
    /// 1 until retention removes events, the high watermark + 1 when it
    /// removed them all (`docs/log.md#retention`).
    pub first_sequences: Vec<u64>,
    /// How long it keeps events; `None`: for ever.
    pub retention: Option<Retention>,
}

/// The longest `max_age_ms` a retention may have: 100 years.
pub const MAX_RETENTION_AGE_MS: u64 = 100 * 365 * 86_400_000;

/// How long a stream keeps its events (`docs/log.md#retention`); a stream
/// without one keeps everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Events older than this (by their timestamp) are removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3_153_600_000_000_u64)]
    pub max_age_ms: Option<u64>,
    /// Each partition keeps at most its newest this many events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_u64)]
    pub max_events: Option<u64>,
    /// `limits` (default): the limits alone decide; `interest`: an event
    /// goes once every group has settled it, the limits as a hard cap.
    #[serde(default)]
    pub policy: RetentionPolicy,
}

/// What removes events besides the limits (`docs/log.md#retention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RetentionPolicy {
    /// Only the limits: events go whatever the groups did.
    #[default]
    Limits,
    /// Also every event all the stream's groups have settled (acked or
    /// dead-lettered); a stream without groups keeps everything.
    Interest,
}

impl RetentionPolicy {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionPolicy::Limits => "limits",
            RetentionPolicy::Interest => "interest",
        }
    }
}

impl Retention {
    /// Checks the limits: each at least 1, an age at most
    /// [`MAX_RETENTION_AGE_MS`], and `limits` with at least one limit.
    pub fn validate(&self) -> Result<(), super::ValidationError> {
        use super::ValidationError;
        if let Some(ms) = self.max_age_ms
            && !(1..=MAX_RETENTION_AGE_MS).contains(&ms)
        {
            return Err(ValidationError::new(
                "retention.max_age_ms",
                format!("must be between 1 and {MAX_RETENTION_AGE_MS} (got {ms})"),
            ));
        }
        if let Some(n) = self.max_events
            && !(1..=super::MAX_SEQUENCE).contains(&n)
        {
            return Err(ValidationError::new(
                "retention.max_events",
                format!("must be between 1 and {} (got {n})", super::MAX_SEQUENCE),
            ));
        }
        if self.policy == RetentionPolicy::Limits
            && self.max_age_ms.is_none()
            && self.max_events.is_none()
        {
            return Err(ValidationError::new(
                "retention",
                "the limits policy needs max_age_ms or max_events \
                 (leave retention out to keep every event)",
            ));
        }
        Ok(())
    }

    /// The form stores keep (JSON text).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a retention serializes")
    }

    /// Reads what [`Retention::to_text`] wrote.
    pub fn from_text(text: &str) -> Result<Self, super::ValidationError> {
        serde_json::from_str(text)
            .map_err(|e| super::ValidationError::new("retention", format!("stored retention: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_bounds_are_the_checked_ones() {
        // The OpenAPI schema of `Retention` repeats these as literals.
        assert_eq!(MAX_RETENTION_AGE_MS, 3_153_600_000_000);
        assert_eq!(super::super::MAX_SEQUENCE, 9_007_199_254_740_991);
        let at_most = Retention {
            max_age_ms: Some(MAX_RETENTION_AGE_MS),
            max_events: Some(super::super::MAX_SEQUENCE),
            policy: RetentionPolicy::Limits,
        };
        assert!(at_most.validate().is_ok());
        let interest = Retention {
            policy: RetentionPolicy::Interest,
            ..Retention::default()
        };
        assert!(interest.validate().is_ok());
        assert!(Retention::default().validate().is_err());
        assert_eq!(Retention::from_text(&at_most.to_text()), Ok(at_most));
    }
}
