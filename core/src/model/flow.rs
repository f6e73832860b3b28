//! A group's flow control (`docs/groups.md#flow`): limits every claim keeps,
//! on every store, whichever server makes it.

use serde::{Deserialize, Serialize};

use super::{GroupOrdering, ValidationError};

/// Largest `key_concurrency`.
pub const MAX_KEY_CONCURRENCY: u32 = 10_000;

/// A group's `flow` option (`docs/groups.md#flow`). Every limit is off
/// when left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// At most this many unsettled deliveries of one key (per partition)
    /// at once, in any order; events without a key are not limited. Needs
    /// `ordering = "none"`: `ordering = "key"` is the ordered limit of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub key_concurrency: Option<u32>,
}

impl Flow {
    /// No limit at all.
    pub fn is_off(&self) -> bool {
        self.key_concurrency.is_none()
    }

    /// Checks each limit's range and that it fits `ordering`.
    pub fn validate(&self, ordering: GroupOrdering) -> Result<(), ValidationError> {
        if let Some(n) = self.key_concurrency {
            if !(1..=MAX_KEY_CONCURRENCY).contains(&n) {
                return Err(ValidationError::new(
                    "flow.key_concurrency",
                    format!("must be between 1 and {MAX_KEY_CONCURRENCY} (got {n})"),
                ));
            }
            if ordering != GroupOrdering::None {
                return Err(ValidationError::new(
                    "flow.key_concurrency",
                    format!(
                        "needs \"ordering\": \"none\" (got {:?}): ordering already lets one \
                         delivery of a key (or partition) out at a time, in order",
                        ordering.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Its text as stored: `{}` when every limit is off.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a flow serializes")
    }

    /// Reads what [`Flow::to_json`] stored; empty text is no limit.
    pub fn from_json(text: &str) -> Result<Self, ValidationError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_json::from_str(text)
            .map_err(|e| ValidationError::new("flow", format!("stored flow unreadable: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_concurrency_is_checked_against_its_range_and_the_ordering() {
        let flow = |n| Flow {
            key_concurrency: Some(n),
        };
        assert!(Flow::default().validate(GroupOrdering::Key).is_ok());
        assert!(flow(3).validate(GroupOrdering::None).is_ok());
        for (f, ordering) in [
            (flow(0), GroupOrdering::None),
            (flow(MAX_KEY_CONCURRENCY + 1), GroupOrdering::None),
            (flow(2), GroupOrdering::Key),
            (flow(2), GroupOrdering::Partition),
        ] {
            assert_eq!(
                f.validate(ordering).unwrap_err().field,
                "flow.key_concurrency"
            );
        }
    }

    #[test]
    fn flows_round_trip_their_stored_text_and_refuse_unknown_limits() {
        let f = Flow {
            key_concurrency: Some(4),
        };
        assert_eq!(Flow::from_json(&f.to_json()).unwrap(), f);
        assert_eq!(Flow::default().to_json(), "{}");
        assert_eq!(Flow::from_json("").unwrap(), Flow::default());
        assert!(serde_json::from_str::<Flow>(r#"{"key_concurency": 2}"#).is_err());
    }
}
