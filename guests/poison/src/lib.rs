//! Dead-letters events whose payload says `"poison": true` (with the
//! payload's `"reason"`, else "poison event"); acks the rest.

use rheo_guest::serde_json::Value;
use rheo_guest::{Delivery, Outcome, PayloadError};

fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    let payload = delivery.event.payload_json()?;
    if payload.get("poison") != Some(&Value::Bool(true)) {
        return Ok(Outcome::Ack);
    }
    let reason = payload
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("poison event");
    rheo_guest::warn!("rejecting {}: {reason}", delivery.event.id);
    Ok(Outcome::reject(reason))
}

rheo_guest::handler!(handle);
