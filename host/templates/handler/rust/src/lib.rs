//! The {{name}} handler: called once per delivery of stream "{{stream}}" to
//! group "{{group}}"; what it returns settles the delivery.

use rheo_guest::{Delivery, Outcome, PayloadError};
use serde::Deserialize;

/// The payload fields this handler reads; others are ignored.
#[derive(Debug, Deserialize)]
struct Payload {
    /// Events that say `"poison": true` are dead-lettered.
    #[serde(default)]
    poison: bool,
}

/// `Ok(Outcome::Ack)` settles the delivery, `Outcome::retry_after(reason, ms)`
/// asks for it again later, `Outcome::reject(reason)` dead-letters it. An
/// `Err` (here: a payload that does not decode) is a retry with its text.
fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    let payload: Payload = delivery.payload()?;
    if payload.poison {
        rheo_guest::warn!("rejecting {}", delivery.event.id);
        return Ok(Outcome::reject("poison marker"));
    }
    let greeting = rheo_guest::config("greeting").unwrap_or_default();
    rheo_guest::info!(
        "{greeting}: event {} (attempt {})",
        delivery.event.id,
        delivery.attempt
    );
    Ok(Outcome::Ack)
}

rheo_guest::handler!(handle);
