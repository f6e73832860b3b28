"""Write a Rheo handler in Python as one function.

    from rheo_handler import Ack, Reject, handler

    @handler
    def handle(delivery):
        if delivery.event.payload.get("ok") is True:
            return Ack()
        return Reject("not ok")

Or one function for a batch of deliveries, with an outcome for each (the
host calls it with up to the manifest's ``batch_size``)::

    from rheo_handler import Ack, Retry, batch_handler

    @batch_handler
    def handle(deliveries):
        return [Ack() if d.event.payload.get("ok") else Retry("later") for d in deliveries]

The module named ``app`` is the handler's; ``build.sh`` turns it, this SDK
and CPython into one WebAssembly component of the ``rheo:handler@0.2.0``
world (``wit/handler.wit``: ``handle`` and ``handle-batch``). The contract
and what the host does with each outcome are in ``docs/handlers.md``.

What this layer adds over the raw WIT bindings:

* the delivery's ``payload`` and ``metadata`` arrive parsed, as dicts; text
  that is not a JSON object is answered with a ``Retry`` that says so, and
  the handler is not called;
* an exception escaping the handler becomes ``Retry("<Type>: <text>")``
  (with the traceback logged) instead of a trap, so the instance is kept;
* a return value that is not ``Ack()``, ``Retry(...)`` or ``Reject(...)``
  becomes a ``Retry`` naming what was returned;
* a ``@batch_handler`` gets the deliveries whose JSON parsed (the others
  are retried, as above); an exception escaping it, or a list of outcomes
  of the wrong length, retries every delivery of the call with a reason
  that says so; a ``@handler`` asked for a batch runs on each delivery in
  turn;
* ``log``, ``config``, ``append`` and ``now_ms`` wrap the host's imports
  with Python types (``append`` takes dicts and raises ``AppendError``).

Import every module a handler needs at the top of ``app.py``: the build
snapshots the interpreter after importing it, and a module imported for the
first time while handling an event is not in the component.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports import types as wit

__all__ = [
    "Ack",
    "AppendError",
    "Delivery",
    "Event",
    "EventRef",
    "Outcome",
    "Reject",
    "Retry",
    "append",
    "batch_handler",
    "config",
    "handler",
    "log",
    "now_ms",
]

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


# --- What a handler receives -------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One record of a stream, with its payload and metadata parsed."""

    id: str
    stream: str
    partition: int
    sequence: int
    key: Optional[str]
    type: Optional[str]
    timestamp_ms: int
    payload: dict
    metadata: dict


@dataclass(frozen=True)
class Delivery:
    """One leased delivery of an event to the handler's group."""

    event: Event
    group: str
    # 1 on the first delivery; grows with every redelivery.
    attempt: int
    # The fencing token of this claim. Informational: the host settles.
    lease_id: str


# --- What a handler returns --------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """Done: the delivery is acked and never comes back to this group."""


@dataclass(frozen=True)
class Retry:
    """Not now: the delivery comes back later, until the group's
    ``max_attempts`` is used up. ``delay_ms`` of ``None`` uses the group's
    backoff; the host clamps a longer delay to its maximum."""

    reason: str
    delay_ms: Optional[int] = None


@dataclass(frozen=True)
class Reject:
    """Never: the delivery is dead-lettered for this group with ``reason``."""

    reason: str


Outcome = Union[Ack, Retry, Reject]


# --- Registration and dispatch -----------------------------------------------

_handler: Optional[Callable[[Delivery], Outcome]] = None
# Whether ``_handler`` takes a list of deliveries (``@batch_handler``).
_batches = False


def _register(function: Any, batches: bool, decorator: str) -> None:
    global _handler, _batches
    if not callable(function):
        raise TypeError(f"@{decorator} needs a function, not {function!r}")
    if _handler is not None and _handler is not function:
        raise RuntimeError(
            f"two handlers registered: {_name(_handler)} and {_name(function)}; "
            "a component has exactly one"
        )
    _handler, _batches = function, batches


def handler(function: Callable[[Delivery], Outcome]) -> Callable[[Delivery], Outcome]:
    """Registers ``function`` as the component's handler (one per component).

    Used as a decorator; returns ``function`` unchanged."""
    _register(function, False, "handler")
    return function


def batch_handler(
    function: Callable[[list], list],
) -> Callable[[list], list]:
    """Registers ``function`` as the component's handler of batches (one
    handler per component): it takes a list of deliveries and returns a
    list of outcomes, one per delivery, in the same order.

    Used as a decorator; returns ``function`` unchanged."""
    _register(function, True, "batch_handler")
    return function


def _name(function: Any) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def registered() -> Optional[Callable[[Delivery], Outcome]]:
    """The registered handler (``@handler`` or ``@batch_handler``), or
    ``None``."""
    return _handler


def dispatch(delivery: wit.Delivery) -> wit.Outcome:
    """Runs the registered handler on one delivery from the host and turns
    whatever happens into an outcome. Never raises."""
    if _batches:
        return dispatch_batch([delivery])[0]
    try:
        if _handler is None:
            return _retry("rheo_handler: no handler registered (decorate a function with @handler)")
        try:
            parsed = _delivery(delivery)
        except _BadJson as bad:
            return _retry(str(bad))
        try:
            result = _handler(parsed)
        except BaseException as exc:  # noqa: BLE001 - every escape becomes a retry
            _log_exception(delivery, exc)
            return _retry(_describe(exc))
        return _outcome(result)
    except BaseException as exc:  # noqa: BLE001 - a bug here must not trap either
        return _retry(f"rheo_handler: {_describe(exc)}")


def dispatch_batch(deliveries: list) -> list:
    """Runs the registered handler on a batch of deliveries from the host
    and answers one outcome per delivery, in order. Never raises."""
    if not _batches:
        return [dispatch(d) for d in deliveries]
    try:
        outcomes: list = [None] * len(deliveries)
        parsed, places = [], []
        for i, d in enumerate(deliveries):
            try:
                parsed.append(_delivery(d))
                places.append(i)
            except _BadJson as bad:
                outcomes[i] = _retry(str(bad))
        if parsed:
            try:
                results = _handler(parsed)
            except BaseException as exc:  # noqa: BLE001 - every escape becomes a retry
                _log_exception(deliveries[places[0]], exc, len(parsed))
                results = [_retry(_describe(exc))] * len(parsed)
            else:
                results = _outcomes(results, len(parsed))
            for i, outcome in zip(places, results):
                outcomes[i] = outcome
        return outcomes
    except BaseException as exc:  # noqa: BLE001 - a bug here must not trap either
        return [_retry(f"rheo_handler: {_describe(exc)}")] * len(deliveries)


def _outcomes(results: Any, expected: int) -> list:
    """A batch handler's answer as one outcome per delivery: anything but a
    list (or tuple) of ``expected`` outcomes retries every delivery."""
    if not isinstance(results, (list, tuple)):
        shown = type(results).__name__
        return [_retry(f"rheo_handler: the batch handler returned a {shown}, not a list of outcomes")] * expected
    if len(results) != expected:
        return [
            _retry(
                f"rheo_handler: the batch handler returned {len(results)} outcomes "
                f"for {expected} deliveries"
            )
        ] * expected
    return [_outcome(r) for r in results]


def _log_exception(delivery: wit.Delivery, exc: BaseException, batch: int = 1) -> None:
    """Logs the traceback of what the handler raised; best effort."""
    try:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        where = f"event {delivery.event.id} (attempt {delivery.attempt})"
        if batch > 1:
            where = f"a batch of {batch} deliveries from {where}"
        log.error(f"handler raised on {where}:\n" + "".join(lines).rstrip())
    except BaseException:  # noqa: BLE001 - the retry matters more than the log line
        pass


class _BadJson(Exception):
    pass


def _parse_object(text: str, what: str, event_id: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _BadJson(f"rheo_handler: the {what} of event {event_id} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _BadJson(
            f"rheo_handler: the {what} of event {event_id} is a JSON "
            f"{type(value).__name__}, not an object"
        )
    return value


def _delivery(d: wit.Delivery) -> Delivery:
    e = d.event
    return Delivery(
        event=Event(
            id=e.id,
            stream=e.stream,
            partition=e.partition,
            sequence=e.sequence,
            key=e.key,
            type=e.type,
            timestamp_ms=e.timestamp_ms,
            payload=_parse_object(e.payload, "payload", e.id),
            metadata=_parse_object(e.metadata, "metadata", e.id),
        ),
        group=d.group,
        attempt=d.attempt,
        lease_id=d.lease_id,
    )


def _describe(exc: BaseException) -> str:
    name = type(exc).__qualname__
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - a broken __str__
        text = ""
    return f"{name}: {text}" if text else name


def _text(value: Any) -> str:
    """``value`` as text that survives the trip to the host: a lone
    surrogate cannot be encoded as UTF-8, so it is replaced."""
    text = value if isinstance(value, str) else str(value)
    return text.encode("utf-8", "replace").decode("utf-8")


def _retry(reason: str, delay_ms: Optional[int] = None) -> wit.Outcome:
    return wit.Outcome_Retry(wit.Retry(reason=_text(reason), delay_ms=delay_ms))


def _outcome(result: Any) -> wit.Outcome:
    if isinstance(result, Ack):
        return wit.Outcome_Ack()
    if isinstance(result, Reject):
        return wit.Outcome_Reject(_text(result.reason))
    if isinstance(result, Retry):
        delay = result.delay_ms
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= _U64_MAX
        ):
            return _retry(
                f"{_text(result.reason)} (rheo_handler: delay_ms {delay!r} is not a whole "
                "number of milliseconds ≥ 0; the group's backoff applies)"
            )
        return _retry(result.reason, delay)
    shown = repr(result)
    if len(shown) > 200:
        shown = shown[:200] + "…"
    return _retry(
        f"rheo_handler: the handler returned {shown} ({type(result).__name__}), "
        "not Ack(), Retry(reason) or Reject(reason)"
    )


# --- Host functions -----------------------------------------------------------


class _Log:
    """Log lines in the server's log, tagged with the handler's name
    (``print`` works too: stdout and stderr become log lines)."""

    def trace(self, message: Any) -> None:
        host.log(wit.Level.TRACE, _text(message))

    def debug(self, message: Any) -> None:
        host.log(wit.Level.DEBUG, _text(message))

    def info(self, message: Any) -> None:
        host.log(wit.Level.INFO, _text(message))

    def warn(self, message: Any) -> None:
        host.log(wit.Level.WARN, _text(message))

    def error(self, message: Any) -> None:
        host.log(wit.Level.ERROR, _text(message))


log = _Log()


def config(key: str) -> Optional[str]:
    """The manifest's ``config`` value for ``key``; ``None`` when unset."""
    return host.config_get(_text(key))


def now_ms() -> int:
    """The host's clock in Unix milliseconds (the clock that times leases,
    which may be a test clock)."""
    return host.now_ms()


@dataclass(frozen=True)
class EventRef:
    """Where an appended event was stored. ``duplicate`` is true when an
    event with that id already existed and nothing new was written."""

    id: str
    stream: str
    partition: int
    sequence: int
    duplicate: bool


class AppendError(Exception):
    """An append the host refused or could not make.

    ``kind`` is ``"stream_not_found"``, ``"invalid"``, ``"not_allowed"`` or
    ``"unavailable"``; ``message`` the host's text (empty for
    ``stream_not_found``). Only ``unavailable`` may succeed when retried
    (``retryable``), and with a deterministic id it is safe to."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind == "unavailable"


def _append_error(error: Any) -> AppendError:
    if isinstance(error, wit.AppendError_StreamNotFound):
        return AppendError("stream_not_found")
    if isinstance(error, wit.AppendError_Invalid):
        return AppendError("invalid", error.value)
    if isinstance(error, wit.AppendError_NotAllowed):
        return AppendError("not_allowed", error.value)
    if isinstance(error, wit.AppendError_Unavailable):
        return AppendError("unavailable", error.value)
    return AppendError("unavailable", repr(error))


def _json_text(value: Optional[dict], what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, dict):
        raise TypeError(f"append: {what} must be a dict, not {type(value).__name__}")
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _require_text(value: Any, what: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"append: {what} must be a str, not {type(value).__name__}")


def _require_partition(value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U32_MAX
    ):
        raise ValueError(f"append: partition {value!r} is not a whole number in 0..2^32-1")


def _optional_text(value: Any, what: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"append: {what} must be a str or None, not {type(value).__name__}")


def append(
    stream: str,
    payload: dict,
    id: Optional[str] = None,
    type: Optional[str] = None,
    key: Optional[str] = None,
    partition: Optional[int] = None,
    metadata: Optional[dict] = None,
) -> EventRef:
    """Appends one event to ``stream`` through the host, exactly as the HTTP
    API would. A deterministic ``id`` makes the append idempotent: a second
    append with the same id writes nothing and answers ``duplicate=True``.
    Raises ``AppendError`` when the host refuses, ``TypeError`` or
    ``ValueError`` for arguments it could never accept."""
    # (`type` is a parameter here, like the WIT record's field, so the checks
    # that name a value's type live in helpers outside this function.)
    _require_text(stream, "stream")
    _require_partition(partition)
    event = wit.EventInput(
        id=_optional_text(id, "id"),
        type=_optional_text(type, "type"),
        key=_optional_text(key, "key"),
        partition=partition,
        payload=_json_text(payload, "payload"),
        metadata=_json_text(metadata, "metadata"),
    )
    try:
        ref = host.append(stream, event)
    except Err as err:
        raise _append_error(err.value) from None
    return EventRef(
        id=ref.id,
        stream=ref.stream,
        partition=ref.partition,
        sequence=ref.sequence,
        duplicate=ref.duplicate,
    )

