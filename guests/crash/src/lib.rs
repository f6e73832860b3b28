//! Panics when the payload says `"panic": true` (else acks): with
//! `panic = "abort"` a Rust panic is a trap, which the host must turn into
//! a failed call, not a crash of its own.

use rheo_guest::serde_json::Value;
use rheo_guest::{Delivery, Outcome, PayloadError};

fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    if delivery.event.payload_json()?.get("panic") == Some(&Value::Bool(true)) {
        panic!("crash: asked to panic by event {}", delivery.event.id);
    }
    Ok(Outcome::Ack)
}

rheo_guest::handler!(handle);
