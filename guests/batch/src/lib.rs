//! A batch handler (`handle-batch`, `rheo:handler@0.2.0`): settles each
//! delivery of a batch as its payload's `"do"` asks — `"ack"` (or no
//! `"do"`), `"retry"` (after `"delay_ms"`, if given) or `"reject"` — so
//! one call can ack, retry and reject items separately. A retry's or
//! reject's reason says how many deliveries the call had. `"skip"` leaves
//! the delivery's outcome out of the list, which breaks the contract: the
//! host then fails the whole batch (what a list of the wrong length does).

use rheo_guest::{Delivery, Outcome};

fn handle_batch(deliveries: Vec<Delivery>) -> Vec<Outcome> {
    let size = deliveries.len();
    deliveries
        .iter()
        .filter(|d| {
            let skip = d.event.payload_json().ok().and_then(|p| p.get("do").cloned());
            skip.as_ref().and_then(|v| v.as_str()) != Some("skip")
        })
        .map(|delivery| {
            let payload = match delivery.event.payload_json() {
                Ok(payload) => payload,
                Err(e) => return Outcome::reject(e.to_string()),
            };
            let action = payload.get("do").and_then(|v| v.as_str());
            let delay = payload.get("delay_ms").and_then(|v| v.as_u64());
            let why = |what: &str| format!("{what} in a batch of {size}");
            match (action, delay) {
                (None | Some("ack"), _) => Outcome::Ack,
                (Some("retry"), Some(delay)) => Outcome::retry_after(why("retry"), delay),
                (Some("retry"), None) => Outcome::retry(why("retry")),
                (Some("reject"), _) => Outcome::reject(why("reject")),
                (Some(other), _) => Outcome::reject(format!("unknown \"do\": {other}")),
            }
        })
        .collect()
}

rheo_guest::batch_handler!(handle_batch);
