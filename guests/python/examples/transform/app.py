"""Appends a derived event for every delivery: the pipeline example (the
Python twin of guests/transform).

Config: ``target_stream`` (required). The derived event has the
deterministic id ``"<source id>:transformed"``, so a redelivered event is
appended once (the second append answers the first as a duplicate); type
``"<type>.transformed"`` (``"transformed"`` without a type); the payload
copied plus ``"source": <source id>``; metadata with ``causation_id`` = the
source id, the source's ``correlation_id`` carried over, and
``transformed_at_ms`` from the host's clock. Acks when the append succeeded
(or was a duplicate), retries when it failed. A source whose payload has
``"retry_once": true`` is retried on its first attempt, before anything is
appended.
"""

from rheo_handler import Ack, AppendError, Reject, Retry, append, config, handler, log, now_ms


@handler
def handle(delivery):
    target = config("target_stream")
    if target is None:
        return Reject("transform: config target_stream is not set")
    source = delivery.event
    if delivery.attempt == 1 and source.payload.get("retry_once") is True:
        return Retry("transform: retry_once")

    payload = dict(source.payload, source=source.id)
    metadata = {"causation_id": source.id}
    if "correlation_id" in source.metadata:
        metadata["correlation_id"] = source.metadata["correlation_id"]
    metadata["transformed_at_ms"] = now_ms()
    event_type = f"{source.type}.transformed" if source.type is not None else "transformed"

    try:
        appended = append(
            target,
            payload,
            id=f"{source.id}:transformed",
            type=event_type,
            metadata=metadata,
        )
    except AppendError as error:
        return Retry(f"transform: append to {target} failed: {error}")
    log.debug(
        f"appended {appended.id} to {appended.stream} at "
        f"{appended.partition}/{appended.sequence} (duplicate: {appended.duplicate})"
    )
    return Ack()
