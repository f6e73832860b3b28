"""The {{name}} handler: called once per delivery of stream "{{stream}}" to
group "{{group}}"; what it returns settles the delivery.

Return ``Ack()``, ``Retry(reason, delay_ms=None)`` or ``Reject(reason)``.
An exception is a retry with its text. Import every module you need at the
top of this file: the build snapshots the interpreter after importing it.
"""

from rheo_handler import Ack, Reject, config, handler, log


@handler
def handle(delivery):
    payload = delivery.event.payload  # a dict
    if payload.get("poison") is True:
        log.warn(f"rejecting {delivery.event.id}")
        return Reject("poison marker")
    greeting = config("greeting") or ""
    log.info(f"{greeting}: event {delivery.event.id} (attempt {delivery.attempt})")
    return Ack()
