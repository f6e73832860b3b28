"""Fails on purpose until a given attempt, then acks: shows retries (the
Python twin of guests/flaky).

Config: ``succeed_on_attempt`` (default 3), the first attempt that acks;
``retry_delay_ms`` (optional), the delay asked for with each retry (without
it the group's backoff applies).
"""

import re

from rheo_handler import Ack, Retry, config, handler

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


def config_int(key, largest):
    """The config value as a whole number in 0..=largest; None when unset
    or not such a number."""
    text = (config(key) or "").strip()
    if not re.fullmatch(r"\+?[0-9]+", text):
        return None
    value = int(text)
    return value if value <= largest else None


@handler
def handle(delivery):
    succeed_on = config_int("succeed_on_attempt", _U32_MAX)
    if succeed_on is None:
        succeed_on = 3
    if delivery.attempt >= succeed_on:
        return Ack()
    reason = f"flaky: attempt {delivery.attempt} of {succeed_on} needed"
    return Retry(reason, delay_ms=config_int("retry_delay_ms", _U64_MAX))
