//! Whole numbers as JSON Schema counts them: `41` and `41.0` are the same
//! integer (JSON has one number type), so an integer field takes either, as
//! long as it is whole and in range (docs/http.md#contract). serde alone
//! refuses `41.0` for a `u32`; the request fields name these functions with
//! `#[serde(default, deserialize_with = …)]`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

/// `number` as a `T`, when it is a whole number `T` holds.
fn whole<T: TryFrom<u64>>(number: &Number) -> Option<T> {
    let value = match number.as_u64() {
        Some(value) => value,
        None => {
            let float = number.as_f64()?;
            // 2^64 is the first whole float past u64::MAX.
            let whole =
                float.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&float);
            if !whole {
                return None;
            }
            float as u64
        }
    };
    T::try_from(value).ok()
}

/// A JSON value as a whole number `T` holds (for fields read as JSON).
pub(crate) fn of<T: TryFrom<u64>>(value: &Value) -> Option<T> {
    match value {
        Value::Number(number) => whole(number),
        _ => None,
    }
}

/// One whole number, deserialized.
struct Whole<T>(T);

impl<'de, T: TryFrom<u64>> Deserialize<'de> for Whole<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = Number::deserialize(deserializer)?;
        whole(&number).map(Whole).ok_or_else(|| {
            D::Error::custom(format!(
                "invalid value: {number}, expected a whole number in range"
            ))
        })
    }
}

/// An optional whole number.
pub(crate) fn opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    Ok(Option::<Whole<T>>::deserialize(deserializer)?.map(|w| w.0))
}

/// An optional list of whole numbers.
pub(crate) fn opt_vec<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    Ok(Option::<Vec<Whole<T>>>::deserialize(deserializer)?
        .map(|list| list.into_iter().map(|w| w.0).collect()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn whole_floats_are_integers_and_the_rest_is_refused() {
        assert_eq!(of::<u32>(&json!(41)), Some(41));
        assert_eq!(of::<u32>(&json!(41.0)), Some(41));
        assert_eq!(of::<u32>(&json!(41.5)), None);
        assert_eq!(of::<u32>(&json!(-1)), None);
        assert_eq!(of::<u32>(&json!(-1.0)), None);
        assert_eq!(of::<u32>(&json!(4_294_967_296_u64)), None);
        assert_eq!(of::<u64>(&json!(1e300)), None);
        assert_eq!(of::<u64>(&json!("1")), None);
    }
}
