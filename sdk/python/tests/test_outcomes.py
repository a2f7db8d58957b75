"""How a function's end becomes the ack, for sync and async functions
alike: returning is OK with patch and result, TemporaryError RETRY after
its delay, PermanentError FAIL, any other exception RETRY."""

import asyncio
import datetime
import threading
import unittest

import tether
from tether import limits, outcome
from tether.testing import FAIL, OK, RETRY, FakeBroker
from tether.v1 import broker_pb2 as pb

W = ("test.tether.dev", "v1", "widgets")
WIDGET = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
          "metadata": {"name": "w", "namespace": "ns", "uid": "u"}, "spec": {"size": 3}}


def both(body):
    """A sync and an async function doing body(**kwargs)."""
    def sync_fn(**kw):
        return body(**kw)

    async def async_fn(**kw):
        await asyncio.sleep(0)  # a real suspension point, not a sync function in disguise
        return body(**kw)

    return [("sync", sync_fn), ("async", async_fn)]


def answer(body):
    """The Results of a create delivered to body as a sync and an async function."""
    out = {}
    for flavour, fn in both(body):
        r = tether.Registry()
        tether.on.create(*W, registry=r, id="create")(fn)
        out[flavour] = FakeBroker(r).create(WIDGET)
    return out


def raise_(exc):
    def body(**_):
        raise exc
    return body


def set_patch(patch, **_):
    patch.metadata.labels["seen"] = "yes"
    patch.status["phase"] = "Ready"
    patch["spec"] = {"paused": None}
    return {"lang": "python", "n": 1}


# (name, body, outcome, message, delay, patch, result)
CASES = [
    ("return value and patch", set_patch, OK, "", None,
     {"metadata": {"labels": {"seen": "yes"}}, "status": {"phase": "Ready"}, "spec": {"paused": None}},
     {"lang": "python", "n": 1}),
    ("nothing", lambda **_: None, OK, "", None, None, None),
    ("an untouched patch sends nothing", lambda patch, **_: [patch.status, patch.metadata.labels] and None, OK, "",
     None, None, None),
    ("temporary error with delay", raise_(tether.TemporaryError("not yet", delay=30)), RETRY, "not yet", 30.0,
     None, None),
    ("temporary error with a timedelta", raise_(tether.TemporaryError("x", delay=datetime.timedelta(minutes=2))),
     RETRY, "x", 120.0, None, None),
    ("temporary error without delay", raise_(tether.TemporaryError("soon")), RETRY, "soon", None, None, None),
    ("permanent error", raise_(tether.PermanentError("cannot clean up")), FAIL, "cannot clean up", None, None,
     None),
    ("any other exception", raise_(ValueError("bad size")), RETRY, "ValueError: bad size", None, None, None),
    ("an exception without text", raise_(KeyError()), RETRY, "KeyError", None, None, None),
    ("a result that is no JSON", lambda **_: {"when": datetime.datetime(2024, 1, 1)}, FAIL,
     "the return value is not JSON", None, None, None),
    ("a result too large to store", lambda **_: "x" * limits.MAX_RESULT_BYTES, FAIL, "more than the 16384", None,
     None, None),
]


class Outcomes(unittest.TestCase):
    def test_errors_and_returns_become_outcomes(self):
        for name, body, want, message, delay, patch, result in CASES:
            for flavour, got in answer(body).items():
                with self.subTest(name, flavour=flavour):
                    self.assertEqual(got.outcome, want)
                    self.assertIn(message, got.message)
                    self.assertEqual(got.delay, delay)
                    self.assertEqual(got.patch, patch)
                    self.assertEqual(got.result, result)

    def test_a_failure_sends_no_patch(self):
        def body(patch, **_):
            patch.status["phase"] = "half-done"
            raise tether.TemporaryError("later")

        for flavour, got in answer(body).items():
            with self.subTest(flavour):
                self.assertEqual((got.outcome, got.patch), (RETRY, None))

    def test_sync_functions_run_in_threads_and_async_ones_on_the_loop(self):
        where = {}

        def sync_fn(**_):
            where["sync"] = threading.current_thread() is threading.main_thread()

        async def async_fn(**_):
            where["async"] = threading.current_thread() is threading.main_thread()

        r = tether.Registry()
        tether.on.create(*W, registry=r)(sync_fn)
        tether.on.update(*W, registry=r)(async_fn)
        k = FakeBroker(r)
        k.create(WIDGET)
        k.update(WIDGET, WIDGET)
        self.assertEqual(where, {"sync": False, "async": True})

    def test_negative_delays_leave_it_to_the_backoff(self):
        self.assertIsNone(tether.TemporaryError("x", delay=-1).delay)
        with self.assertRaises(TypeError):
            tether.TemporaryError("x", delay="5s")


class Acks(unittest.TestCase):
    def test_messages_are_cut_without_splitting_characters(self):
        cut = outcome.truncate("é" * 2000)
        self.assertLessEqual(len(cut.encode()), limits.MAX_MESSAGE)
        self.assertTrue(cut.endswith("…"))
        self.assertEqual(outcome.truncate("short"), "short")
        self.assertLessEqual(len(outcome.fail("d", "x" * 5000).message.encode()), limits.MAX_MESSAGE)

    def test_an_answer_larger_than_the_broker_takes_becomes_a_fail(self):
        big = outcome.ok("d1")
        big.patch = b"{" + b" " * limits.DEFAULT_MAX_MESSAGE_BYTES + b"}"
        req = outcome.request(big)
        self.assertEqual((req.ack.delivery_id, req.ack.outcome), ("d1", pb.OUTCOME_FAIL))
        self.assertIn("more than the 4194304", req.ack.message)
        small = outcome.request(outcome.ok("d2")).ack
        self.assertEqual((small.delivery_id, small.outcome), ("d2", pb.OUTCOME_OK))

    def test_outcome_names(self):
        self.assertEqual([outcome.name(o) for o in (pb.OUTCOME_OK, pb.OUTCOME_RETRY, pb.OUTCOME_FAIL)],
                         [OK, RETRY, FAIL])


if __name__ == "__main__":
    unittest.main()
