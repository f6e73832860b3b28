//! Appends a derived event for every delivery: the pipeline example.
//!
//! Config: `target_stream` (required). The derived event has the
//! deterministic id `"<source id>:transformed"`, so a redelivered event is
//! appended once (the second append returns the first as a duplicate); type
//! `"<type>.transformed"`; the payload copied plus `"source": <source id>`;
//! metadata with `causation_id` = the source id and the source's
//! `correlation_id` carried over, and `transformed_at_ms` from the host's
//! clock. Acks when the append succeeded (or was a
//! duplicate), retries when it failed. A source whose payload has
//! `"retry_once": true` is retried on its first attempt, before anything is
//! appended: the retry a pipeline shows (and the ordering tests use).

use rheo_guest::serde_json::{Map, Value};
use rheo_guest::{Delivery, EventInput, Outcome, PayloadError};

fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    let Some(target) = rheo_guest::config("target_stream") else {
        return Ok(Outcome::reject(
            "transform: config target_stream is not set",
        ));
    };
    let source = &delivery.event;

    let mut payload = source.payload_json()?;
    if delivery.attempt == 1 && payload.get("retry_once") == Some(&Value::Bool(true)) {
        return Ok(Outcome::retry("transform: retry_once"));
    }
    payload.insert("source".into(), Value::String(source.id.clone()));
    let mut metadata = Map::new();
    metadata.insert("causation_id".into(), Value::String(source.id.clone()));
    if let Some(correlation) = source.metadata_json()?.get("correlation_id") {
        metadata.insert("correlation_id".into(), correlation.clone());
    }
    metadata.insert("transformed_at_ms".into(), rheo_guest::now_ms().into());
    let event_type = match &source.type_ {
        Some(t) => format!("{t}.transformed"),
        None => "transformed".to_owned(),
    };

    let derived = EventInput::json(&Value::Object(payload))
        .with_id(format!("{}:transformed", source.id))
        .with_type(event_type)
        .with_metadata(&Value::Object(metadata));
    Ok(match rheo_guest::append(&target, &derived) {
        Ok(appended) => {
            rheo_guest::debug!(
                "appended {} to {} at {}/{} (duplicate: {})",
                appended.id,
                appended.stream,
                appended.partition,
                appended.sequence,
                appended.duplicate
            );
            Outcome::Ack
        }
        Err(e) => Outcome::retry(format!("transform: append to {target} failed: {e:?}")),
    })
}

rheo_guest::handler!(handle);
