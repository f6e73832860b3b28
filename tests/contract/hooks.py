"""Schemathesis hooks of the contract test (tests/tests/contract.rs).

The document states every rule of a request that does not depend on what
the server holds (docs/http.md#contract). A few refusals do, and no schema
can predict them: a partition the stream does not have, a cursor or page
token the server never handed out, an event id the stream does not
hold, a module that is no WebAssembly
component. For the operations that can meet them, the test's configuration
lets `positive_data_acceptance` take a 400; this check then holds each such
400 to exactly the error codes below, so any other refusal of valid data
still fails the run.
"""

import schemathesis

# operationId -> the (code, message prefix) pairs a valid request may meet.
PARTITION = ("invalid_partition", "")
STATE_DEPENDENT = {
    "event_read": [PARTITION],
    "event_append": [PARTITION],
    "event_append_batch": [PARTITION],
    "group_lag": [PARTITION],
    "lease_fetch": [PARTITION],
    # An ordering or a flow changes with a reset of every partition only: a
    # rule across two fields that the schema cannot state
    # (docs/groups.md#reset); and the flow must fit the ordering the reset
    # leaves, which may be the group's own (docs/groups.md#flow).
    "group_reset": [PARTITION, ("invalid", "invalid ordering"), ("invalid", "invalid flow")],
    "group_replay": [
        PARTITION,
        ("invalid", "invalid cursor"),
        ("invalid", "invalid event_ids: not in this stream"),
    ],
    "dead_letter_redrive": [("invalid", "invalid event_ids: not in this stream")],
    "event_query": [("invalid", "invalid cursor")],
    "dead_letter_list": [("cursor_not_found", "")],
    "handler_deploy": [
        ("invalid", "invalid manifest"),
        ("invalid_manifest", ""),
        ("invalid_module", ""),
    ],
    "handler_swap_module": [
        ("invalid_module", ""),
        # A canary's window, margin and evidence only go with `canary`, and
        # its group or module may rule it out (docs/handlers.md#canaries).
        ("invalid", "invalid window_ms"),
        ("invalid", "invalid margin"),
        ("invalid", "invalid min_deliveries"),
        ("invalid_canary", ""),
    ],
    "handler_try": [("invalid_module", ""), ("invalid", "invalid cursor")],
}


@schemathesis.check
def valid_data_refused_only_for_state(ctx, response, case):
    """A 400 to schema-valid data names one of the state-dependent refusals."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    operation_id = case.operation.definition.raw.get("operationId")
    allowed = STATE_DEPENDENT.get(operation_id)
    if allowed is None:
        return None  # positive_data_acceptance already fails it
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"{operation_id}: a 400 without an error body")
    if not any(code == c and message.startswith(prefix) for c, prefix in allowed):
        raise AssertionError(
            f"{operation_id}: valid data refused with 400 {code}: {message}"
        )
    return None
