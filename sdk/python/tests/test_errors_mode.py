"""errors= (Kopf's ErrorsMode): what an exception other than TemporaryError
and PermanentError means, per binding."""

import logging
import unittest

import tether
from tether.testing import FAIL, OK, RETRY, FakeBroker

W = ("test.tether.dev", "v1", "widgets")
OBJ = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
       "metadata": {"name": "w", "namespace": "ns", "uid": "uid-w"}, "spec": {}}
M = tether.ErrorsMode


def raising(exc):
    def fn(**kwargs):
        if "patch" in kwargs:  # a daemon is given none
            kwargs["patch"].metadata.labels["tried"] = "yes"
        raise exc
    return fn


class Modes(unittest.TestCase):
    def deliver(self, decorator, deliver, mode, exc, logs=True):
        r = tether.Registry()
        k = FakeBroker(r)
        self.addCleanup(k.close)
        options = {} if mode is None else {"errors": mode}
        decorator(*W, registry=r, id="b", **options)(raising(exc))
        if not logs:
            return deliver(k)
        with self.assertLogs("tether", logging.DEBUG):  # the exception is logged, whatever the mode
            return deliver(k)

    def test_other_exceptions_follow_the_mode_and_tethers_own_do_not(self):
        cases = [
            (None, ValueError("x"), RETRY), (M.TEMPORARY, ValueError("x"), RETRY),
            (M.PERMANENT, ValueError("x"), FAIL), (M.IGNORED, ValueError("x"), OK),
            (M.PERMANENT, tether.TemporaryError("later"), RETRY), (M.IGNORED, tether.TemporaryError("later"), RETRY),
            (M.IGNORED, tether.PermanentError("never"), FAIL), (M.TEMPORARY, tether.PermanentError("never"), FAIL),
        ]
        kinds = [(tether.on.create, lambda k: k.create(OBJ)), (tether.on.update, lambda k: k.update(OBJ, OBJ)),
                 (tether.on.delete, lambda k: k.delete(OBJ)), (tether.on.event, lambda k: k.event(OBJ)),
                 (lambda *a, **kw: tether.timer(*a, interval=1, **kw), lambda k: k.tick(OBJ))]
        for mode, exc, want in cases:
            for decorator, deliver in kinds:
                with self.subTest(mode=mode, exc=exc, decorator=decorator):
                    got = self.deliver(decorator, deliver, mode, exc)
                    self.assertEqual(got.outcome, want)

    def test_an_ignored_exception_is_the_ok_of_returning_none_with_the_patch_made(self):
        got = self.deliver(tether.on.create, lambda k: k.create(OBJ), M.IGNORED, ValueError("x"))
        self.assertEqual((got.outcome, got.result, got.patch), (OK, None, {"metadata": {"labels": {"tried": "yes"}}}))

    def test_a_daemon_that_raises_under_ignored_has_returned(self):
        for mode, want in ((M.IGNORED, OK), (M.TEMPORARY, FAIL), (M.PERMANENT, FAIL)):
            with self.subTest(mode=mode):
                # FakeBroker reports a daemon's end as the broker gets it, and logs only the ignored one
                got = self.deliver(tether.daemon, lambda k: k.daemon(OBJ), mode, ValueError("x"), logs=mode is M.IGNORED)
                self.assertEqual(got.outcome, want)
