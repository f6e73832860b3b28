"""A batch handler (``@batch_handler``, ``rheo:handler@0.2.0``): settles
each delivery of a batch as its payload's ``"do"`` asks — ``"ack"`` (or no
``"do"``), ``"retry"`` (after ``"delay_ms"``, if given) or ``"reject"`` — so
one call acks, retries and rejects items separately; a retry's or reject's
reason says how many deliveries the call had (the Python twin of
guests/batch).
"""

from rheo_handler import Ack, Reject, Retry, batch_handler


@batch_handler
def handle(deliveries):
    why = lambda what: f"{what} in a batch of {len(deliveries)}"  # noqa: E731
    outcomes = []
    for delivery in deliveries:
        action = delivery.event.payload.get("do", "ack")
        delay = delivery.event.payload.get("delay_ms")
        if action == "ack":
            outcomes.append(Ack())
        elif action == "retry":
            outcomes.append(Retry(why("retry"), delay_ms=delay))
        elif action == "reject":
            outcomes.append(Reject(why("reject")))
        else:
            outcomes.append(Reject(f'unknown "do": {action}'))
    return outcomes
