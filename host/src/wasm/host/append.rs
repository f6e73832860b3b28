//! `append(stream, event)`: a handler emits an event.
//!
//! The append goes to the backend the handler was given, through the same
//! `Backend::append_one` as the HTTP API, so it gets the same validation,
//! routing and idempotency: an event whose id is already in the stream is
//! not stored again and comes back with `duplicate: true`. A handler that
//! derives its event id from the delivered event (`"<source id>:…"`) can
//! therefore append, fail, be redelivered and append again without ever
//! duplicating the derived event.
//!
//! Every failure is an `append-error` value, never a trap: the guest
//! decides whether to retry. Errors are mapped so that the guest can tell
//! "retrying may help" (`unavailable`) from "this input will never work"
//! (`invalid`, `stream-not-found`, `not-allowed`).

use serde_json::Value;

use super::HandlerEnv;
use crate::backend::Error;
use crate::model::{EventId, EventInput as ModelEventInput, JsonObject, StreamName};
use crate::wasm::bindings::{AppendError, EventInput, EventRef};

/// Appends `input` to `stream` for the handler of `env`.
pub(crate) async fn append(
    env: &HandlerEnv,
    stream: &str,
    input: EventInput,
) -> Result<EventRef, AppendError> {
    let stream = StreamName::parse(stream).map_err(|e| AppendError::Invalid(e.to_string()))?;
    if let Some(allowed) = &env.append_streams
        && !allowed.contains(&stream)
    {
        return Err(AppendError::NotAllowed(format!(
            "handler {} may not append to stream {stream}",
            env.name
        )));
    }
    let input = to_model(input)?;
    let appended = env
        .backend
        .append_one(&stream, input)
        .await
        .map_err(to_append_error)?;
    let event = &appended.event;
    Ok(EventRef {
        id: event.id.to_string(),
        stream: event.stream.to_string(),
        partition: event.partition,
        sequence: event.sequence,
        duplicate: appended.duplicate,
    })
}

/// Converts the WIT input, parsing its JSON texts.
fn to_model(input: EventInput) -> Result<ModelEventInput, AppendError> {
    let id = input
        .id
        .map(EventId::parse)
        .transpose()
        .map_err(|e| AppendError::Invalid(e.to_string()))?;
    Ok(ModelEventInput {
        id,
        event_type: input.type_,
        key: input.key,
        partition: input.partition,
        timestamp: None,
        payload: json_object("payload", &input.payload)?,
        metadata: json_object("metadata", &input.metadata)?,
    })
}

/// Parses JSON object text; empty text is `{}`.
fn json_object(field: &str, text: &str) -> Result<JsonObject, AppendError> {
    if text.trim().is_empty() {
        return Ok(JsonObject::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(AppendError::Invalid(format!(
            "{field}: must be a JSON object"
        ))),
        Err(e) => Err(AppendError::Invalid(format!(
            "{field}: not valid JSON ({e})"
        ))),
    }
}

/// Maps the portable backend error vocabulary to what a guest can act on.
fn to_append_error(error: Error) -> AppendError {
    match error {
        Error::StreamNotFound(_) => AppendError::StreamNotFound,
        // Transient, or a definite failure of the store itself: the same
        // append may work later.
        Error::BackendUnavailable(_)
        | Error::Ambiguous(_)
        | Error::StorageFull(_)
        | Error::Failed(_) => AppendError::Unavailable(error.to_string()),
        // Everything else is about the input.
        other => AppendError::Invalid(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ValidationError;

    fn input(payload: &str, metadata: &str) -> EventInput {
        EventInput {
            id: Some("e-1".into()),
            type_: Some("t".into()),
            key: None,
            partition: Some(0),
            payload: payload.into(),
            metadata: metadata.into(),
        }
    }

    #[test]
    fn json_texts_must_be_objects_and_empty_means_empty() {
        let ok = to_model(input(r#"{"a":1}"#, "")).unwrap();
        assert_eq!(ok.payload["a"], 1);
        assert!(ok.metadata.is_empty());
        assert_eq!(ok.id.unwrap().as_str(), "e-1");
        assert!(
            matches!(to_model(input("[1]", "")), Err(AppendError::Invalid(m)) if m.starts_with("payload"))
        );
        assert!(
            matches!(to_model(input("{}", "{")), Err(AppendError::Invalid(m)) if m.starts_with("metadata"))
        );
    }

    #[test]
    fn bad_ids_are_invalid() {
        let mut bad = input("{}", "{}");
        bad.id = Some(String::new());
        assert!(matches!(to_model(bad), Err(AppendError::Invalid(_))));
    }

    #[test]
    fn backend_errors_map_by_meaning() {
        let s = StreamName::parse("s").unwrap();
        assert!(matches!(
            to_append_error(Error::StreamNotFound(s)),
            AppendError::StreamNotFound
        ));
        for transient in [
            Error::BackendUnavailable("down".into()),
            Error::Ambiguous("timeout".into()),
            Error::Failed("disk".into()),
        ] {
            assert!(matches!(
                to_append_error(transient),
                AppendError::Unavailable(_)
            ));
        }
        assert!(matches!(
            to_append_error(Error::Invalid(ValidationError::new("type", "too long"))),
            AppendError::Invalid(m) if m.contains("type")
        ));
        assert!(matches!(
            to_append_error(Error::InvalidPartition {
                partition: 3,
                partition_count: 1
            }),
            AppendError::Invalid(_)
        ));
    }
}
