//! Validated names and identifiers.
//!
//! Every identifier that crosses a boundary (HTTP path, CLI argument, WIT
//! call, storage row) is parsed once into one of these newtypes; code behind
//! the boundary never re-validates. Parsing failures name the field and the
//! rule that was broken, so an API error can be shown to a user as is.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bad input, with the name of the field at fault and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field or parameter at fault (`stream`, `limit`, `where.payload.x`, …).
    pub field: String,
    /// What is wrong with it, in words a user can act on.
    pub message: String,
}

impl ValidationError {
    /// Builds an error for `field` saying `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Longest stream, group or handler name.
pub const MAX_NAME_LEN: usize = 128;
/// Longest event id, consumer id or lease id, in characters (as JSON
/// Schema's `maxLength` counts): at most 1 KiB of UTF-8. Long enough for a
/// UUID with a prefix or a composite business key, short enough to index
/// cheaply.
pub const MAX_ID_LEN: usize = 256;

/// The rule of [`check_name`] as a regular expression (ECMA 262, as the
/// OpenAPI document states it; `docs/http.md#contract`): the name alphabet,
/// with at least one character other than `.` — `.` and `..` are path
/// segments that HTTP clients resolve away, so such a name could never be
/// addressed in a URL. The length, 1–[`MAX_NAME_LEN`], is stated apart.
pub const NAME_PATTERN: &str = "^[A-Za-z0-9._-]*[A-Za-z0-9_-][A-Za-z0-9._-]*$";

/// The rule of [`check_id`] as a regular expression: no control character
/// (Unicode category Cc, what `char::is_control` tests). The length,
/// 1–[`MAX_ID_LEN`] characters, is stated apart.
pub const ID_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

fn check_name(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(ValidationError::new(
            field,
            format!(
                "must be at most {MAX_NAME_LEN} characters (got {})",
                value.len()
            ),
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(ValidationError::new(
            field,
            format!("{value:?} contains {bad:?}; allowed are A-Z, a-z, 0-9, '.', '_' and '-'"),
        ));
    }
    if value.chars().all(|c| c == '.') {
        return Err(ValidationError::new(
            field,
            format!("{value:?} has nothing but dots; a URL could not name it"),
        ));
    }
    Ok(())
}

fn check_id(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    let chars = value.chars().count();
    if chars > MAX_ID_LEN {
        return Err(ValidationError::new(
            field,
            format!("must be at most {MAX_ID_LEN} characters (got {chars})"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ValidationError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal, $check:ident) => {
        $(#[$doc])*
        ///
        /// Backed by a shared `Arc<str>`: ids and names are copied into
        /// every lease and result, and cloning one is a reference count.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Parses and validates `value`.
            pub fn parse(value: impl AsRef<str>) -> Result<Self, ValidationError> {
                let value = value.as_ref();
                $check($field, value)?;
                Ok(Self(Arc::from(value)))
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = ValidationError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_newtype!(
    /// A stream name: 1–128 characters of `[A-Za-z0-9._-]`, not only dots.
    StreamName,
    "stream",
    check_name
);
string_newtype!(
    /// A consumer group name: 1–128 characters of `[A-Za-z0-9._-]`, not only dots.
    GroupName,
    "group",
    check_name
);
string_newtype!(
    /// A handler name: 1–128 characters of `[A-Za-z0-9._-]`, not only dots.
    HandlerName,
    "handler",
    check_name
);
string_newtype!(
    /// An event id: 1–256 characters, no control characters. Unique per stream;
    /// appending a known id returns the stored event (idempotent append).
    EventId,
    "event_id",
    check_id
);
string_newtype!(
    /// Who holds a lease: 1–256 characters, no control characters.
    ConsumerId,
    "consumer_id",
    check_id
);
string_newtype!(
    /// The fencing token of one claim. Fresh for every claim; settling with
    /// an old one fails with `stale_lease`.
    LeaseId,
    "lease_id",
    check_id
);

impl EventId {
    /// A fresh UUIDv7 (36 chars): 48 bits of Unix milliseconds and 74
    /// random bits, so ids generated later sort after earlier ones.
    pub fn generate() -> Self {
        Self(crate::model::time_ordered_token())
    }
}

impl ConsumerId {
    /// A fresh random consumer id (`c-` and 22 random characters).
    pub fn generate() -> Self {
        Self(Arc::from(format!("c-{}", crate::model::random_token())))
    }
}

impl LeaseId {
    /// A fresh random fencing token.
    pub fn generate() -> Self {
        Self(crate::model::random_token())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_the_documented_alphabet() {
        assert!(StreamName::parse("orders.v2_eu-west").is_ok());
        assert!(StreamName::parse("a".repeat(128)).is_ok());
    }

    #[test]
    fn empty_names_are_refused_with_the_field_named() {
        let err = StreamName::parse("").unwrap_err();
        assert_eq!(err.field, "stream");
        assert!(err.message.contains("empty"), "{err}");
        assert_eq!(GroupName::parse("").unwrap_err().field, "group");
    }

    #[test]
    fn over_long_names_are_refused() {
        let err = GroupName::parse("g".repeat(129)).unwrap_err();
        assert!(err.message.contains("at most 128"), "{err}");
    }

    #[test]
    fn names_with_other_characters_are_refused() {
        let err = StreamName::parse("orders/eu").unwrap_err();
        assert!(err.message.contains("'/'"), "{err}");
        assert!(StreamName::parse("white space").is_err());
        assert!(StreamName::parse("ünï").is_err());
    }

    #[test]
    fn names_of_nothing_but_dots_are_refused() {
        for dots in [".", "..", "..."] {
            assert!(StreamName::parse(dots).is_err(), "{dots}");
        }
        assert!(StreamName::parse(".hidden").is_ok());
        assert!(GroupName::parse("v1.2").is_ok());
    }

    #[test]
    fn ids_are_measured_in_characters() {
        assert!(EventId::parse("é".repeat(MAX_ID_LEN)).is_ok());
        assert!(EventId::parse("é".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn ids_allow_free_text_but_not_control_characters() {
        assert!(EventId::parse("order:42/shipped ✓").is_ok());
        assert!(EventId::parse("a\nb").is_err());
        assert!(EventId::parse("").is_err());
        assert!(EventId::parse("x".repeat(257)).is_err());
    }

    #[test]
    fn generated_ids_are_distinct_and_valid() {
        let a = EventId::generate();
        let b = EventId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 36);
        assert_eq!(LeaseId::generate().as_str().len(), 22);
        assert!(EventId::parse(a.as_str()).is_ok());
        assert!(ConsumerId::generate().as_str().starts_with("c-"));
    }

    #[test]
    fn serde_validates_on_the_way_in() {
        let ok: StreamName = serde_json::from_str("\"s1\"").unwrap();
        assert_eq!(ok.as_str(), "s1");
        assert!(serde_json::from_str::<StreamName>("\"\"").is_err());
    }
}
