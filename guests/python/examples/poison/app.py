"""Dead-letters events whose payload says ``"poison": true`` (with the
payload's ``"reason"``, else "poison event"); acks the rest (the Python
twin of guests/poison)."""

from rheo_handler import Ack, Reject, handler, log


@handler
def handle(delivery):
    payload = delivery.event.payload
    if payload.get("poison") is not True:
        return Ack()
    reason = payload.get("reason")
    if not isinstance(reason, str):
        reason = "poison event"
    log.warn(f"rejecting {delivery.event.id}: {reason}")
    return Reject(reason)
