"""Unit tests of the rheo_handler SDK outside WebAssembly, on the stub
bindings componentize-py generates from wit/ with the host functions
replaced by fakes. What needs a real component and host is checked by
tests/tests/polyglot.rs.

    guests/python/.venv/bin/python -m unittest discover -s guests/python/tests

(from the repository root, after guests/python/build.sh has set up the venv).
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BINDINGS = tempfile.mkdtemp(prefix="rheo-bindings-")
atexit.register(shutil.rmtree, BINDINGS, True)
subprocess.run(
    [
        os.path.join(os.path.dirname(sys.executable), "componentize-py"),
        "--quiet",
        "-d",
        os.path.join(ROOT, "wit"),
        "-w",
        "handler",
        "bindings",
        BINDINGS,
    ],
    check=True,
)
sys.path[:0] = [BINDINGS, os.path.join(HERE, "..", "sdk")]

import rheo_handler  # noqa: E402
from componentize_py_types import Err  # noqa: E402
from rheo_handler import Ack, AppendError, Reject, Retry  # noqa: E402
from wit_world.imports import host  # noqa: E402
from wit_world.imports import types as wit  # noqa: E402


def delivery(payload='{"n": 1}', metadata="{}", attempt=1, id="e-1"):
    return wit.Delivery(
        event=wit.Event(
            id=id,
            stream="in",
            partition=2,
            sequence=7,
            key="k",
            type="t",
            timestamp_ms=1_700_000_000_000,
            payload=payload,
            metadata=metadata,
        ),
        group="g",
        attempt=attempt,
        lease_id="lease-1",
    )


class FakeHost:
    """Records host calls; `append_answer` is returned or raised."""

    def __init__(self):
        self.logs = []
        self.appended = []
        self.config = {"k": "v"}
        self.append_answer = wit.EventRef(
            id="x", stream="out", partition=0, sequence=1, duplicate=False
        )

    def install(self, test):
        for name, fake in [
            ("log", lambda level, message: self.logs.append((level, message))),
            ("config_get", self.config.get),
            ("append", self.append),
            ("now_ms", lambda: 42),
        ]:
            original = getattr(host, name)
            setattr(host, name, fake)
            test.addCleanup(setattr, host, name, original)

    def append(self, stream, event):
        self.appended.append((stream, event))
        if isinstance(self.append_answer, BaseException):
            raise self.append_answer
        return self.append_answer


class SdkTest(unittest.TestCase):
    def setUp(self):
        self.host = FakeHost()
        self.host.install(self)
        self.addCleanup(setattr, rheo_handler, "_handler", None)
        self.addCleanup(setattr, rheo_handler, "_batches", False)
        rheo_handler._handler = None
        rheo_handler._batches = False

    def run_handler(self, function, d=None):
        rheo_handler._handler = None
        rheo_handler.handler(function)
        return rheo_handler.dispatch(d or delivery())

    def run_batch(self, function, deliveries):
        rheo_handler._handler = None
        rheo_handler.batch_handler(function)
        return rheo_handler.dispatch_batch(deliveries)

    def test_a_batch_handler_answers_each_delivery_in_order(self):
        seen = []

        def handle(ds):
            seen.append([d.event.id for d in ds])
            return [
                {"ack": Ack(), "retry": Retry("later", 50), "reject": Reject("no")}[d.event.payload["do"]]
                for d in ds
            ]

        outcomes = self.run_batch(
            handle,
            [
                delivery('{"do": "reject"}', id="e-1"),
                delivery("{not json", id="e-2"),
                delivery('{"do": "ack"}', id="e-3"),
                delivery('{"do": "retry"}', id="e-4"),
            ],
        )
        # e-2 never reached the handler: its JSON does not parse.
        self.assertEqual(seen, [["e-1", "e-3", "e-4"]])
        self.assertEqual(outcomes[0], wit.Outcome_Reject("no"))
        self.assertTrue(outcomes[1].value.reason.startswith("rheo_handler: the payload of event e-2 is not JSON"))
        self.assertEqual(outcomes[2], wit.Outcome_Ack())
        self.assert_retry(outcomes[3], "later", 50)
        # `handle` of a batch handler is a batch of one.
        self.assertEqual(rheo_handler.dispatch(delivery('{"do": "ack"}')), wit.Outcome_Ack())
        self.assertEqual(seen[-1], ["e-1"])

    def test_a_batch_handler_that_raises_or_miscounts_retries_the_whole_batch(self):
        two = [delivery(id="e-1"), delivery(id="e-2")]

        def boom(ds):
            raise ValueError("db down")

        for outcome in self.run_batch(boom, two):
            self.assert_retry(outcome, "ValueError: db down")
        self.assertIn("handler raised on a batch of 2 deliveries from event e-1", self.host.logs[-1][1])
        for outcome in self.run_batch(lambda ds: [Ack()], two):
            self.assert_retry(outcome, "rheo_handler: the batch handler returned 1 outcomes for 2 deliveries")
        for outcome in self.run_batch(lambda ds: Ack(), two):
            self.assert_retry(outcome, "rheo_handler: the batch handler returned a Ack, not a list of outcomes")
        outcomes = self.run_batch(lambda ds: (Ack(), "ok"), two)
        self.assertEqual(outcomes[0], wit.Outcome_Ack())
        self.assertIn("returned 'ok' (str)", outcomes[1].value.reason)

    def test_a_single_handler_asked_for_a_batch_runs_on_each_in_turn(self):
        rheo_handler.handler(lambda d: Ack() if d.event.id == "e-1" else Reject(d.event.id))
        outcomes = rheo_handler.dispatch_batch([delivery(id="e-1"), delivery(id="e-2")])
        self.assertEqual(outcomes, [wit.Outcome_Ack(), wit.Outcome_Reject("e-2")])

    def test_a_batch_handler_and_a_handler_are_two_handlers(self):
        rheo_handler.batch_handler(lambda ds: [])
        with self.assertRaises(RuntimeError):
            rheo_handler.handler(lambda d: Ack())

    def assert_retry(self, outcome, reason, delay_ms=None):
        self.assertIsInstance(outcome, wit.Outcome_Retry)
        self.assertEqual(outcome.value.reason, reason)
        self.assertEqual(outcome.value.delay_ms, delay_ms)

    def test_the_handler_sees_a_parsed_delivery(self):
        seen = []
        outcome = self.run_handler(
            seen.append, delivery('{"n": 1, "s": "é"}', '{"correlation_id": "c"}', 3)
        )
        d = seen[0]
        self.assertEqual(
            (d.event.id, d.event.stream, d.event.partition, d.event.sequence),
            ("e-1", "in", 2, 7),
        )
        self.assertEqual((d.event.key, d.event.type, d.event.timestamp_ms), ("k", "t", 1_700_000_000_000))
        self.assertEqual(d.event.payload, {"n": 1, "s": "é"})
        self.assertEqual(d.event.metadata, {"correlation_id": "c"})
        self.assertEqual((d.group, d.attempt, d.lease_id), ("g", 3, "lease-1"))
        # `list.append` returned None: not an outcome.
        self.assertIsInstance(outcome, wit.Outcome_Retry)

    def test_outcomes_map_to_the_wit_variant(self):
        self.assertEqual(self.run_handler(lambda d: Ack()), wit.Outcome_Ack())
        self.assert_retry(self.run_handler(lambda d: Retry("later")), "later")
        self.assert_retry(self.run_handler(lambda d: Retry("later", delay_ms=250)), "later", 250)
        self.assert_retry(self.run_handler(lambda d: Retry("later", 0)), "later", 0)
        self.assertEqual(self.run_handler(lambda d: Reject("no")), wit.Outcome_Reject("no"))

    def test_bad_json_is_a_retry_and_the_handler_is_not_called(self):
        called = []
        for payload, metadata, expected in [
            ("{not json", "{}", "rheo_handler: the payload of event e-1 is not JSON: "),
            ("[1, 2]", "{}", "rheo_handler: the payload of event e-1 is a JSON list, not an object"),
            ("", "{}", "rheo_handler: the payload of event e-1 is not JSON: "),
            ("{}", "null", "rheo_handler: the metadata of event e-1 is a JSON NoneType, not an object"),
        ]:
            outcome = self.run_handler(called.append, delivery(payload, metadata))
            self.assertIsInstance(outcome, wit.Outcome_Retry)
            self.assertTrue(outcome.value.reason.startswith(expected), outcome.value.reason)
        self.assertEqual(called, [])

    def test_an_exception_is_a_retry_with_its_type_and_text(self):
        def boom(d):
            raise KeyError("missing")

        self.assert_retry(self.run_handler(boom), "KeyError: 'missing'")
        level, message = self.host.logs[-1]
        self.assertEqual(level, wit.Level.ERROR)
        self.assertIn("handler raised on event e-1 (attempt 1)", message)
        self.assertIn("Traceback", message)

        class Quiet(Exception):
            pass

        def quiet(d):
            raise Quiet()

        self.assert_retry(self.run_handler(quiet), "SdkTest.test_an_exception_is_a_retry_with_its_type_and_text.<locals>.Quiet")

        def leave(d):
            raise SystemExit(3)

        self.assert_retry(self.run_handler(leave), "SystemExit: 3")

    def test_anything_else_returned_is_a_retry_that_names_it(self):
        outcome = self.run_handler(lambda d: "ack")
        self.assert_retry(
            outcome,
            "rheo_handler: the handler returned 'ack' (str), not Ack(), Retry(reason) or Reject(reason)",
        )
        outcome = self.run_handler(lambda d: Ack)
        self.assertIn("returned <class", outcome.value.reason)
        long = self.run_handler(lambda d: "x" * 1000).value.reason
        self.assertLess(len(long), 400)

    def test_a_bad_delay_falls_back_to_the_backoff_with_a_note(self):
        for delay in [-1, 1.5, True, 2**64, "10"]:
            outcome = self.run_handler(lambda d, delay=delay: Retry("later", delay_ms=delay))
            self.assertIsNone(outcome.value.delay_ms)
            self.assertTrue(outcome.value.reason.startswith(f"later (rheo_handler: delay_ms {delay!r} "), outcome.value.reason)

    def test_reasons_survive_lone_surrogates(self):
        outcome = self.run_handler(lambda d: Reject("bad \udc80 byte"))
        outcome.value.encode("utf-8")
        self.assertEqual(outcome.value, "bad ? byte")

    def test_no_handler_is_a_retry(self):
        self.assert_retry(
            rheo_handler.dispatch(delivery()),
            "rheo_handler: no handler registered (decorate a function with @handler)",
        )

    def test_a_second_handler_is_refused(self):
        rheo_handler.handler(lambda d: Ack())
        with self.assertRaises(RuntimeError):
            rheo_handler.handler(lambda d: Ack())
        with self.assertRaises(TypeError):
            rheo_handler.handler("not a function")

    def test_log_config_and_now_call_the_host(self):
        rheo_handler.log.trace("t")
        rheo_handler.log.debug("d")
        rheo_handler.log.info("i")
        rheo_handler.log.warn("w")
        rheo_handler.log.error(7)
        self.assertEqual(
            self.host.logs,
            [
                (wit.Level.TRACE, "t"),
                (wit.Level.DEBUG, "d"),
                (wit.Level.INFO, "i"),
                (wit.Level.WARN, "w"),
                (wit.Level.ERROR, "7"),
            ],
        )
        self.assertEqual(rheo_handler.config("k"), "v")
        self.assertIsNone(rheo_handler.config("nope"))
        self.assertEqual(rheo_handler.now_ms(), 42)

    def test_append_sends_json_text_and_answers_a_ref(self):
        ref = rheo_handler.append(
            "out",
            {"a": [1, "é"]},
            id="x",
            type="t",
            key="k",
            partition=1,
            metadata={"correlation_id": "c"},
        )
        self.assertEqual(ref, rheo_handler.EventRef(id="x", stream="out", partition=0, sequence=1, duplicate=False))
        stream, event = self.host.appended[-1]
        self.assertEqual(stream, "out")
        self.assertEqual((event.id, event.type, event.key, event.partition), ("x", "t", "k", 1))
        self.assertEqual(json.loads(event.payload), {"a": [1, "é"]})
        self.assertEqual(json.loads(event.metadata), {"correlation_id": "c"})
        rheo_handler.append("out", {})
        _, event = self.host.appended[-1]
        self.assertEqual((event.id, event.type, event.key, event.partition, event.metadata), (None, None, None, None, ""))

    def test_append_refuses_what_the_host_could_never_take(self):
        for call in [
            lambda: rheo_handler.append("out", [1]),
            lambda: rheo_handler.append("out", {}, metadata="{}"),
            lambda: rheo_handler.append(7, {}),
            lambda: rheo_handler.append("out", {}, id=5),
            lambda: rheo_handler.append("out", {}, partition=-1),
            lambda: rheo_handler.append("out", {}, partition=True),
            lambda: rheo_handler.append("out", {"x": float("nan")}),
        ]:
            with self.assertRaises((TypeError, ValueError)):
                call()
        self.assertEqual(self.host.appended, [])

    def test_append_errors_become_append_error(self):
        for error, kind, message, retryable in [
            (wit.AppendError_StreamNotFound(), "stream_not_found", "", False),
            (wit.AppendError_Invalid("bad id"), "invalid", "bad id", False),
            (wit.AppendError_NotAllowed("not listed"), "not_allowed", "not listed", False),
            (wit.AppendError_Unavailable("down"), "unavailable", "down", True),
        ]:
            self.host.append_answer = Err(error)
            with self.assertRaises(AppendError) as caught:
                rheo_handler.append("out", {})
            self.assertEqual(
                (caught.exception.kind, caught.exception.message, caught.exception.retryable),
                (kind, message, retryable),
            )
        self.assertEqual(str(caught.exception), "unavailable: down")


if __name__ == "__main__":
    unittest.main()
