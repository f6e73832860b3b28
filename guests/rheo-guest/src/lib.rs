//! Write a Rheo handler in Rust as one function.
//!
//! ```ignore
//! use rheo_guest::{Delivery, Outcome};
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     id: String,
//!     total_cents: u64,
//! }
//!
//! fn handle(delivery: Delivery) -> Result<Outcome, rheo_guest::PayloadError> {
//!     let order: Order = delivery.payload()?; // bad JSON: a retry with the error
//!     rheo_guest::info!("order {} for {} cents", order.id, order.total_cents);
//!     Ok(Outcome::Ack)
//! }
//!
//! rheo_guest::handler!(handle);
//! ```
//!
//! The crate carries the `rheo:handler` WIT world it is generated from
//! (`wit/`), so a project outside the Rheo repository depends on it by path
//! (`rheo handler new --lang rust` writes a copy into the project's `sdk/`).
//! Over the raw imports it adds: typed payloads and metadata through serde
//! ([`Event::payload`]; text that is not a JSON object is an error, never an
//! empty object), handlers that return `Result<Outcome, E>` (an `Err` is a
//! retry with the error's text), [`config`] lookups, `info!`-style log
//! macros and an [`append`] that takes an [`EventInput`] built from JSON.
//!
//! Build a guest with `cargo build --release --target wasm32-wasip2` (or
//! `rheo handler build`); the result is a component, ready for the host.

// The generated `export!` macro and the bindings name their runtime by an
// absolute path, so guests need no direct `wit-bindgen` dependency. That
// path has to resolve inside this crate too.
extern crate self as rheo_guest;

pub use serde;
use serde::de::DeserializeOwned;
pub use serde_json;
use serde_json::{Map, Value};
#[doc(hidden)]
pub use wit_bindgen;

/// The generated bindings of the `rheo:handler/handler@0.2.0` world
/// (`handle` and `handle-batch`, over the 0.1.0 types and host imports).
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "handler",
        // The types and host imports are the 0.1.0 package's (`wit/deps/`).
        generate_all,
        pub_export_macro: true,
        default_bindings_module: "::rheo_guest::bindings",
        runtime_path: "::rheo_guest::wit_bindgen::rt",
    });
}

pub use bindings::rheo::handler0_1_0::types::{
    AppendError, Delivery, Event, EventInput, EventRef, Level, Outcome, Retry,
};

/// Exports `$handle` as the component's `handle` function. `$handle` is a
/// `fn(Delivery) -> Outcome` or a `fn(Delivery) -> Result<Outcome, E>` with
/// `E: Display` (see [`IntoOutcome`]). Use it once per guest crate (or
/// [`batch_handler!`] instead).
///
/// The component also exports `handle-batch`, which runs `$handle` on each
/// delivery in turn: a handler whose manifest sets `batch_size` gets its
/// deliveries in one call each batch, which saves the host a guest call
/// per delivery.
#[macro_export]
macro_rules! handler {
    ($handle:path) => {
        #[doc(hidden)]
        struct RheoHandlerExport;

        impl $crate::bindings::Guest for RheoHandlerExport {
            fn handle(delivery: $crate::Delivery) -> $crate::Outcome {
                $crate::IntoOutcome::into_outcome($handle(delivery))
            }

            fn handle_batch(
                deliveries: ::std::vec::Vec<$crate::Delivery>,
            ) -> ::std::vec::Vec<$crate::Outcome> {
                deliveries
                    .into_iter()
                    .map(|delivery| $crate::IntoOutcome::into_outcome($handle(delivery)))
                    .collect()
            }
        }

        $crate::bindings::export!(RheoHandlerExport with_types_in $crate::bindings);
    };
}

/// Exports `$handle_batch` as the component's `handle-batch` function:
/// a `fn(Vec<Delivery>) -> Vec<T>` with `T` an [`Outcome`] or a
/// `Result<Outcome, E>` ([`IntoOutcome`]), one per delivery, in the same
/// order (a list of another length fails the whole batch: the host
/// retries every delivery of it). The host calls it with up to the
/// manifest's `batch_size` deliveries; `handle` (a dry run, `batch_size =
/// 1`) calls it with one. Use it once per guest crate, instead of
/// [`handler!`].
///
/// ```ignore
/// fn handle_batch(deliveries: Vec<Delivery>) -> Vec<Outcome> {
///     let rows: Vec<_> = deliveries.iter().map(|d| d.event.payload.clone()).collect();
///     // … write `rows` in one request …
///     deliveries.iter().map(|_| Outcome::Ack).collect()
/// }
///
/// rheo_guest::batch_handler!(handle_batch);
/// ```
#[macro_export]
macro_rules! batch_handler {
    ($handle_batch:path) => {
        #[doc(hidden)]
        struct RheoHandlerExport;

        impl $crate::bindings::Guest for RheoHandlerExport {
            fn handle(delivery: $crate::Delivery) -> $crate::Outcome {
                $handle_batch(::std::vec![delivery])
                    .into_iter()
                    .next()
                    .map($crate::IntoOutcome::into_outcome)
                    .unwrap_or_else(|| $crate::Outcome::retry("the batch handler returned no outcome"))
            }

            fn handle_batch(
                deliveries: ::std::vec::Vec<$crate::Delivery>,
            ) -> ::std::vec::Vec<$crate::Outcome> {
                $handle_batch(deliveries)
                    .into_iter()
                    .map($crate::IntoOutcome::into_outcome)
                    .collect()
            }
        }

        $crate::bindings::export!(RheoHandlerExport with_types_in $crate::bindings);
    };
}

/// What a handler function may return: an [`Outcome`], or a `Result` whose
/// `Err` becomes a retry (with the group's backoff) whose reason is the
/// error's text — so `?` works inside a handler.
pub trait IntoOutcome {
    /// The outcome the host settles the delivery by.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<E: std::fmt::Display> IntoOutcome for Result<Outcome, E> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| Outcome::retry(e.to_string()))
    }
}

/// A payload or metadata that does not decode: not JSON, not an object,
/// or not the shape of the type asked for.
#[derive(Debug)]
pub struct PayloadError {
    /// `"payload"` or `"metadata"`.
    field: &'static str,
    /// The event's id.
    event_id: String,
    source: serde_json::Error,
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} of event {} does not decode: {}",
            self.field, self.event_id, self.source
        )
    }
}

impl std::error::Error for PayloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Decodes a JSON text of `event` as `T`. The host sends objects only, so
/// as a [`Value`] anything but an object is refused too.
fn decode<T: DeserializeOwned>(
    event: &Event,
    field: &'static str,
    text: &str,
) -> Result<T, PayloadError> {
    let error = |source| PayloadError {
        field,
        event_id: event.id.clone(),
        source,
    };
    let value: Value = serde_json::from_str(text).map_err(error)?;
    if !value.is_object() {
        return Err(error(serde::de::Error::custom(format!(
            "expected a JSON object, got {value}"
        ))));
    }
    serde_json::from_value(value).map_err(error)
}

impl Event {
    /// The payload decoded as `T` (any `serde::Deserialize` type, or
    /// [`Value`]).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        decode(self, "payload", &self.payload)
    }

    /// The metadata decoded as `T` (any `serde::Deserialize` type, or
    /// [`Value`]).
    pub fn metadata<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        decode(self, "metadata", &self.metadata)
    }

    /// The payload as a JSON object.
    pub fn payload_json(&self) -> Result<Map<String, Value>, PayloadError> {
        self.payload()
    }

    /// The metadata as a JSON object.
    pub fn metadata_json(&self) -> Result<Map<String, Value>, PayloadError> {
        self.metadata()
    }
}

impl Delivery {
    /// The event's payload decoded as `T`: `delivery.payload::<Order>()?`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        self.event.payload()
    }
}

impl Outcome {
    /// Retry with the group's backoff.
    pub fn retry(reason: impl Into<String>) -> Self {
        Outcome::Retry(Retry {
            reason: reason.into(),
            delay_ms: None,
        })
    }

    /// Retry after `delay_ms` (the host clamps it to its maximum).
    pub fn retry_after(reason: impl Into<String>, delay_ms: u64) -> Self {
        Outcome::Retry(Retry {
            reason: reason.into(),
            delay_ms: Some(delay_ms),
        })
    }

    /// Dead-letter the delivery for this group.
    pub fn reject(reason: impl Into<String>) -> Self {
        Outcome::Reject(reason.into())
    }
}

impl EventInput {
    /// An event with this JSON payload (an object; anything else is sent as
    /// is and refused by the host) and empty metadata.
    pub fn json(payload: &Value) -> Self {
        EventInput {
            id: None,
            type_: None,
            key: None,
            partition: None,
            payload: payload.to_string(),
            metadata: String::new(),
        }
    }

    /// Sets a deterministic id, which makes the append idempotent.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the event type.
    pub fn with_type(mut self, event_type: impl Into<String>) -> Self {
        self.type_ = Some(event_type.into());
        self
    }

    /// Sets the routing key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the metadata (a JSON object).
    pub fn with_metadata(mut self, metadata: &Value) -> Self {
        self.metadata = metadata.to_string();
        self
    }
}

/// A value of the handler's configuration.
pub fn config(key: &str) -> Option<String> {
    bindings::rheo::handler0_1_0::host::config_get(key)
}

/// A configuration value parsed as `T`; `None` when unset or unparsable.
pub fn config_parse<T: std::str::FromStr>(key: &str) -> Option<T> {
    config(key).and_then(|v| v.trim().parse().ok())
}

/// Appends `event` to `stream` through the host.
pub fn append(stream: &str, event: &EventInput) -> Result<EventRef, AppendError> {
    bindings::rheo::handler0_1_0::host::append(stream, event)
}

/// The host's clock, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    bindings::rheo::handler0_1_0::host::now_ms()
}

/// Logging through the host, tagged with the handler's name.
pub mod log {
    use super::Level;
    use crate::bindings::rheo::handler0_1_0::host;

    /// Logs `message` at `level`.
    pub fn log(level: Level, message: &str) {
        host::log(level, message);
    }

    /// Logs at trace level.
    pub fn trace(message: &str) {
        log(Level::Trace, message);
    }

    /// Logs at debug level.
    pub fn debug(message: &str) {
        log(Level::Debug, message);
    }

    /// Logs at info level.
    pub fn info(message: &str) {
        log(Level::Info, message);
    }

    /// Logs at warn level.
    pub fn warn(message: &str) {
        log(Level::Warn, message);
    }

    /// Logs at error level.
    pub fn error(message: &str) {
        log(Level::Error, message);
    }
}

/// Logs a `format!`-style message at trace level: `trace!("got {id}")`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::trace(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::debug(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::info(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::warn(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::error(&::std::format!($($arg)+)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: &str) -> Event {
        Event {
            id: "e-1".into(),
            stream: "orders".into(),
            partition: 0,
            sequence: 1,
            key: None,
            type_: None,
            timestamp_ms: 0,
            payload: payload.into(),
            metadata: r#"{"correlation_id":"c-9"}"#.into(),
        }
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Order {
        id: String,
        cents: u64,
    }

    #[test]
    fn a_payload_decodes_into_the_type_asked_for() {
        let order: Order = event(r#"{"id":"o-1","cents":250}"#).payload().unwrap();
        assert_eq!(
            order,
            Order {
                id: "o-1".into(),
                cents: 250
            }
        );
        let meta = event("{}").metadata_json().unwrap();
        assert_eq!(meta["correlation_id"], "c-9");
    }

    #[test]
    fn what_does_not_decode_is_an_error_naming_the_field_and_event() {
        for (payload, says) in [
            ("{not json", "key must be a string"),
            ("[1, 2]", "expected a JSON object"),
            ("", "EOF while parsing"),
            (r#"{"id":"o-1"}"#, "missing field `cents`"),
        ] {
            let e = event(payload).payload::<Order>().unwrap_err().to_string();
            assert!(
                e.starts_with("the payload of event e-1 does not decode: "),
                "{e}"
            );
            assert!(e.contains(says), "{payload:?}: {e}");
        }
        assert!(event("[]").payload_json().is_err());
    }

    #[test]
    fn an_err_from_a_handler_is_a_retry_with_its_text() {
        let failed: Result<Outcome, PayloadError> =
            event("[]").payload::<Order>().map(|_| Outcome::Ack);
        match failed.into_outcome() {
            Outcome::Retry(Retry { reason, delay_ms }) => {
                assert!(reason.contains("expected a JSON object"), "{reason}");
                assert_eq!(delay_ms, None);
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        let ok: Result<Outcome, String> = Ok(Outcome::reject("bad"));
        assert!(matches!(ok.into_outcome(), Outcome::Reject(r) if r == "bad"));
        assert!(matches!(Outcome::Ack.into_outcome(), Outcome::Ack));
    }
}
