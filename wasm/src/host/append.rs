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

use super::{AppendCapture, CapturedAppend, HandlerEnv};
use crate::backend::Error;
use crate::backend::policy::route_batch;
use crate::bindings::{AppendError, EventInput, EventRef};
use crate::model::{EventId, EventInput as ModelEventInput, JsonObject, StreamName};

/// Appends `input` to `stream` for the handler of `env` (in a dry run,
/// checks and keeps it: [`captured`]).
pub(crate) async fn append(
    env: &HandlerEnv,
    stream: &str,
    input: EventInput,
) -> Result<EventRef, AppendError> {
    let result = checked_append(env, stream, input).await;
    if result.is_err()
        && let Some(capture) = &env.capture
    {
        capture.note_refused();
    }
    result
}

async fn checked_append(
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
    if let Some(capture) = &env.capture {
        return captured(env, capture, stream, input).await;
    }
    let appended = env
        .backend
        .append_one(&stream, input)
        .await
        .map_err(|error| {
            // The guest gets the error and decides (it may just retry);
            // the operator sees why the store failed it.
            let mapped = to_append_error(error);
            if let AppendError::Unavailable(detail) = &mapped {
                tracing::warn!(handler = %env.name, %stream, error = %detail, "a handler's append failed");
            }
            mapped
        })?;
    let event = &appended.event;
    Ok(EventRef {
        id: event.id.to_string(),
        stream: event.stream.to_string(),
        partition: event.partition,
        sequence: event.sequence,
        duplicate: appended.duplicate,
    })
}

/// A dry run's append: refused as a real one would be (the stream must
/// exist, the event be valid and route to one of its partitions), else
/// kept in `capture`. The guest is answered with the event's id (a made-up
/// one when it gave none), the partition, sequence 0 (nothing was
/// written) and `duplicate: false`.
async fn captured(
    env: &HandlerEnv,
    capture: &AppendCapture,
    stream: StreamName,
    input: ModelEventInput,
) -> Result<EventRef, AppendError> {
    let partition_count = env
        .backend
        .get_stream(&stream)
        .await
        .map_err(to_append_error)?
        .partition_count;
    let mut routed = route_batch(vec![input], partition_count).map_err(to_append_error)?;
    let Some((input, partition)) = routed.pop() else {
        return Err(AppendError::Unavailable("nothing to append".into()));
    };
    let id = input.id.clone().unwrap_or_else(EventId::generate);
    let answer = EventRef {
        id: id.to_string(),
        stream: stream.to_string(),
        partition,
        sequence: 0,
        duplicate: false,
    };
    capture.push(CapturedAppend {
        stream,
        partition,
        input,
    });
    Ok(answer)
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
