//! A group's flow control (`docs/groups.md#flow`): limits every claim keeps,
//! on every store, whichever server makes it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::{GroupOrdering, ValidationError};

/// Largest `key_concurrency`.
pub const MAX_KEY_CONCURRENCY: u32 = 10_000;

/// Largest `key_rate.per_second` (one claim every 10 µs).
pub const MAX_KEY_RATE: f64 = 100_000.0;

/// Smallest `key_rate.per_second` (one claim a day).
pub const MIN_KEY_RATE: f64 = 1.0 / 86_400.0;

/// Largest `key_rate.burst`.
pub const MAX_KEY_BURST: u32 = 100_000;

/// `flow.key_rate` (`docs/groups.md#flow`): at most `per_second` claims of
/// one key a second, with up to `burst` at once after a quiet spell — a
/// token bucket per key, kept in the store and shared by every server.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyRate {
    /// Claims a second, sustained: a fraction is fine (`0.5` is one every
    /// two seconds).
    #[schema(minimum = 0.0000116, maximum = 100000)]
    pub per_second: f64,
    /// Claims at once after a quiet spell (the bucket's size); 1 when
    /// left out.
    #[serde(default = "KeyRate::default_burst")]
    #[schema(minimum = 1, maximum = 100000, default = 1)]
    pub burst: u32,
}

// `per_second` is checked finite and positive before any rate is kept.
impl Eq for KeyRate {}

impl KeyRate {
    fn default_burst() -> u32 {
        1
    }

    fn from_map(map: Map<String, Value>) -> Result<Self, String> {
        let mut rate = KeyRate {
            per_second: f64::NAN,
            burst: Self::default_burst(),
        };
        let mut seen = false;
        for (field, value) in map {
            match field.as_str() {
                "per_second" => {
                    rate.per_second = value.as_f64().ok_or_else(|| {
                        format!("key_rate.per_second: expected a number, got {value}")
                    })?;
                    seen = true;
                }
                "burst" => rate.burst = whole(&value, "key_rate.burst")?,
                _ => {
                    return Err(format!(
                        "unknown field `{field}` of key_rate, expected `per_second` or `burst`"
                    ));
                }
            }
        }
        if !seen {
            return Err("missing field `per_second` of key_rate".into());
        }
        Ok(rate)
    }

    /// Checks its ranges.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let r = self.per_second;
        if !r.is_finite() || !(MIN_KEY_RATE..=MAX_KEY_RATE).contains(&r) {
            return Err(ValidationError::new(
                "flow.key_rate.per_second",
                format!(
                    "must be between {MIN_KEY_RATE:.7} (one a day) and {MAX_KEY_RATE} (got {r})"
                ),
            ));
        }
        if !(1..=MAX_KEY_BURST).contains(&self.burst) {
            return Err(ValidationError::new(
                "flow.key_rate.burst",
                format!("must be between 1 and {MAX_KEY_BURST} (got {})", self.burst),
            ));
        }
        Ok(())
    }

    /// Microseconds between two claims at the sustained rate (at least 1).
    pub fn interval_us(&self) -> i64 {
        ((1_000_000.0 / self.per_second).round() as i64).max(1)
    }
}

/// A group's `flow` option (`docs/groups.md#flow`). Every limit is off
/// when left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// At most this many unsettled deliveries of one key (per partition)
    /// at once, in any order; events without a key are not limited. Needs
    /// `ordering = "none"`: `ordering = "key"` is the ordered limit of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub key_concurrency: Option<u32>,
    /// At most this many claims of one key (per partition) a second: every
    /// claim of a keyed delivery — a first one, a retry, a replayed one —
    /// takes a token, and one that finds none waits for its slot (one
    /// whose lease expired goes out again at once, and counts). Events
    /// without a key are not limited. Works with any ordering and with
    /// `key_concurrency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rate: Option<KeyRate>,
}

/// A whole number as JSON counts one (`4` and `4.0` alike), for `field`.
fn whole(value: &Value, field: &str) -> Result<u32, String> {
    let n = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u64)
    });
    n.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
        format!(
            "{field}: expected a whole number from 0 to {}, got {value}",
            u32::MAX
        )
    })
}

/// A flow is read from an object of limits only (JSON, or a manifest's
/// TOML): an unknown limit is refused, so a typo never goes unnoticed, and
/// a whole number may be written `4.0`, as JSON Schema counts integers.
impl<'de> Deserialize<'de> for Flow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        let mut flow = Flow::default();
        for (field, value) in map {
            match (field.as_str(), value) {
                (_, Value::Null) => {}
                ("key_concurrency", value) => {
                    flow.key_concurrency =
                        Some(whole(&value, "key_concurrency").map_err(D::Error::custom)?);
                }
                ("key_rate", Value::Object(rate)) => {
                    flow.key_rate = Some(KeyRate::from_map(rate).map_err(D::Error::custom)?);
                }
                ("key_rate", other) => {
                    return Err(D::Error::custom(format!(
                        "key_rate: expected an object {{\"per_second\": R, \"burst\": B}}, got {other}"
                    )));
                }
                _ => {
                    return Err(D::Error::custom(format!(
                        "unknown field `{field}`, expected `key_concurrency` or `key_rate`"
                    )));
                }
            }
        }
        Ok(flow)
    }
}

impl Flow {
    /// A flow of one limit: at most `per_second` claims of a key a second,
    /// `burst` at once (`key_rate`).
    pub fn paced(per_second: f64, burst: u32) -> Self {
        Self {
            key_rate: Some(KeyRate { per_second, burst }),
            ..Self::default()
        }
    }

    /// No limit at all.
    pub fn is_off(&self) -> bool {
        self.key_concurrency.is_none() && self.key_rate.is_none()
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
        if let Some(rate) = &self.key_rate {
            rate.validate()?;
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
            ..Flow::default()
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
            key_rate: Some(KeyRate {
                per_second: 2.5,
                burst: 3,
            }),
        };
        assert_eq!(Flow::from_json(&f.to_json()).unwrap(), f);
        assert_eq!(Flow::default().to_json(), "{}");
        assert_eq!(Flow::from_json("").unwrap(), Flow::default());
        assert!(serde_json::from_str::<Flow>(r#"{"key_concurency": 2}"#).is_err());
        let rate: Flow = serde_json::from_str(r#"{"key_rate": {"per_second": 5}}"#).unwrap();
        assert_eq!(rate.key_rate.unwrap().burst, 1, "burst defaults to 1");
        assert!(serde_json::from_str::<Flow>(r#"{"key_rate": {"rate": 5}}"#).is_err());
        // An object only, and whole numbers as JSON counts them.
        for bad in [
            "[null, null]",
            "[2]",
            r#"{"key_rate": [1, 2]}"#,
            r#"{"key_rate": {}}"#,
        ] {
            assert!(serde_json::from_str::<Flow>(bad).is_err(), "{bad}");
        }
        let floats: Flow = serde_json::from_str(
            r#"{"key_concurrency": 4.0, "key_rate": {"per_second": 2, "burst": 3.0}}"#,
        )
        .unwrap();
        assert_eq!(floats.key_concurrency, Some(4));
        assert_eq!(floats.key_rate.unwrap().burst, 3);
        assert!(serde_json::from_str::<Flow>(r#"{"key_concurrency": 4.5}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Flow>(r#"{"key_concurrency": null}"#).unwrap(),
            Flow::default()
        );
    }

    #[test]
    fn key_rate_is_checked_against_its_ranges_and_fits_any_ordering() {
        let flow = |per_second, burst| Flow {
            key_rate: Some(KeyRate { per_second, burst }),
            ..Flow::default()
        };
        for ordering in [
            GroupOrdering::None,
            GroupOrdering::Key,
            GroupOrdering::Partition,
        ] {
            assert!(flow(0.5, 1).validate(ordering).is_ok());
        }
        for (f, field) in [
            (flow(0.0, 1), "flow.key_rate.per_second"),
            (flow(-1.0, 1), "flow.key_rate.per_second"),
            (flow(f64::NAN, 1), "flow.key_rate.per_second"),
            (flow(MAX_KEY_RATE * 2.0, 1), "flow.key_rate.per_second"),
            (flow(1.0, 0), "flow.key_rate.burst"),
            (flow(1.0, MAX_KEY_BURST + 1), "flow.key_rate.burst"),
        ] {
            assert_eq!(f.validate(GroupOrdering::None).unwrap_err().field, field);
        }
        assert_eq!(flow(4.0, 1).key_rate.unwrap().interval_us(), 250_000);
    }
}
