"""A handler that exercises the SDK from inside a real component, for
tests/tests/polyglot.rs: the payload's "do" says what to try. Results come
back as outcomes (a reject's reason is the report), appended events or log
lines; the test runs it in a group with max_attempts 1, so a retry shows up
as a dead letter "max_attempts: <reason>".
"""

import json
import os

from rheo_handler import (
    Ack,
    AppendError,
    Reject,
    Retry,
    append,
    config,
    handler,
    log,
    now_ms,
)


def report_append_error(call):
    try:
        call()
    except AppendError as error:
        return Reject(f"{error.kind}|{error.message}|{error.retryable}")
    return Reject("the append succeeded")


def sandbox():
    leaks = []
    for path in ["/", "/etc", "/tmp", "."]:
        try:
            leaks.append(f"listed {path}: {os.listdir(path)[:5]}")
        except OSError:
            pass
    try:
        with open("/etc/hostname") as file:
            leaks.append(f"read /etc/hostname: {file.read()!r}")
    except OSError:
        pass
    if os.environ:
        leaks.append(f"environment: {sorted(os.environ)}")
    return Reject("sandbox: " + ("; ".join(leaks) or "sealed"))


@handler
def handle(delivery):
    event = delivery.event
    do = event.payload.get("do")
    if do == "raise":
        raise ValueError(f"boom {event.payload.get('n')}")
    if do == "return_none":
        return None
    if do == "return_text":
        return "ack"
    if do == "bad_delay":
        return Retry("later", delay_ms=-5)
    if do == "append_list":
        append("sdk-out", [1, 2])
    if do == "append_missing":
        return report_append_error(lambda: append("no-such-stream", {"a": 1}))
    if do == "append_invalid":
        return report_append_error(lambda: append("sdk-out", {"a": 1}, partition=7))
    if do == "append":
        ref = append(
            "sdk-out",
            {"from": event.id, "text": "héllo ✓"},
            id=f"{event.id}:out",
            type="checked",
            key="k-1",
            metadata={"correlation_id": "c-9"},
        )
        again = append("sdk-out", {"from": event.id}, id=f"{event.id}:out")
        return Reject(
            json.dumps(
                {
                    "id": ref.id,
                    "stream": ref.stream,
                    "partition": ref.partition,
                    "sequence": ref.sequence,
                    "duplicate": ref.duplicate,
                    "again_duplicate": again.duplicate,
                    "again_sequence": again.sequence,
                }
            )
        )
    if do == "config":
        return Reject(f"{config('greeting')!r} {config('missing')!r}")
    if do == "now":
        return Reject(str(now_ms()))
    if do == "delivery":
        return Reject(
            json.dumps(
                {
                    "id": event.id,
                    "stream": event.stream,
                    "partition": event.partition,
                    "sequence": event.sequence,
                    "key": event.key,
                    "type": event.type,
                    "timestamp_ms": event.timestamp_ms,
                    "payload": event.payload,
                    "metadata": event.metadata,
                    "group": delivery.group,
                    "attempt": delivery.attempt,
                    "lease_id": delivery.lease_id,
                }
            )
        )
    if do == "log":
        log.info("sdk-check info line")
        log.warn("sdk-check warn line")
        log.error("sdk-check error line")
        print("sdk-check stdout line")
        return Ack()
    if do == "sandbox":
        return sandbox()
    return Ack()
