//! Write a Rheo handler in Rust as one function.
//!
//! ```ignore
//! use rheo_guest::{Delivery, Outcome};
//!
//! fn handle(delivery: Delivery) -> Outcome {
//!     let payload = delivery.event.payload_json();
//!     rheo_guest::log::info(&format!("got {payload}"));
//!     Outcome::Ack
//! }
//!
//! rheo_guest::handler!(handle);
//! ```
//!
//! The crate generates the bindings of the `rheo:handler` world from the
//! repository's `wit/` directory once, so every guest agrees with the host on
//! the same contract, and adds a few conveniences over the raw imports:
//! JSON payloads as [`serde_json::Value`], [`config`] lookups, [`log`]
//! functions per level and an [`append`] that takes an [`EventInput`] built
//! from JSON.
//!
//! Build a guest with `cargo build --release --target wasm32-wasip2`; the
//! result is a component, ready for the host.

// The generated `export!` macro and the bindings name their runtime by an
// absolute path, so guests need no direct `wit-bindgen` dependency. That
// path has to resolve inside this crate too.
extern crate self as rheo_guest;

pub use serde_json;
use serde_json::{Map, Value};
#[doc(hidden)]
pub use wit_bindgen;

/// The generated bindings of the `rheo:handler/handler` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "handler",
        pub_export_macro: true,
        default_bindings_module: "::rheo_guest::bindings",
        runtime_path: "::rheo_guest::wit_bindgen::rt",
    });
}

pub use bindings::rheo::handler::types::{
    AppendError, Delivery, Event, EventInput, EventRef, Level, Outcome, Retry,
};

/// Exports `$handle` (a `fn(Delivery) -> Outcome`) as the component's
/// `handle` function. Use it once per guest crate.
#[macro_export]
macro_rules! handler {
    ($handle:path) => {
        #[doc(hidden)]
        struct RheoHandlerExport;

        impl $crate::bindings::Guest for RheoHandlerExport {
            fn handle(delivery: $crate::Delivery) -> $crate::Outcome {
                $handle(delivery)
            }
        }

        $crate::bindings::export!(RheoHandlerExport with_types_in $crate::bindings);
    };
}

/// Parses JSON object text; anything else (bad JSON, not an object) gives
/// an empty object, since the host only ever sends objects.
fn parse_object(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(Map::new()),
    }
}

impl Event {
    /// The payload as JSON (always an object).
    pub fn payload_json(&self) -> Value {
        parse_object(&self.payload)
    }

    /// The metadata as JSON (always an object).
    pub fn metadata_json(&self) -> Value {
        parse_object(&self.metadata)
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
    bindings::rheo::handler::host::config_get(key)
}

/// A configuration value parsed as `T`; `None` when unset or unparsable.
pub fn config_parse<T: std::str::FromStr>(key: &str) -> Option<T> {
    config(key).and_then(|v| v.trim().parse().ok())
}

/// Appends `event` to `stream` through the host.
pub fn append(stream: &str, event: &EventInput) -> Result<EventRef, AppendError> {
    bindings::rheo::handler::host::append(stream, event)
}

/// The host's clock, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    bindings::rheo::handler::host::now_ms()
}

/// Logging through the host, tagged with the handler's name.
pub mod log {
    use super::Level;
    use crate::bindings::rheo::handler::host;

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
