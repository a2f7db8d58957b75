"""tether.event, info, warn and exception: the Events a function posts go
into its delivery's ack, within the protocol's limits, from async functions
and sync ones (in their threads too), and nowhere outside a delivery."""

import concurrent.futures
import unittest

import tether
from tether import limits
from tether.testing import FAIL, OK, RETRY, FakeBroker

W = ("test.tether.dev", "v1", "widgets")
OBJ = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "uid": "u1"}}
REF = {"apiVersion": "test.tether.dev/v1", "kind": "Widget", "namespace": "ns", "name": "w", "uid": "u1"}
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}


def broker(fn, **opts):
    registry = tether.Registry()
    tether.on.create(*W, registry=registry, **opts)(fn)
    return FakeBroker(registry)


class Events(unittest.TestCase):
    def test_the_events_a_function_posts_land_in_its_ack(self):
        def sync(body, **_):
            tether.info(body, reason="Created", message="made it")
            tether.warn([CM], reason="Odd")

        async def asynchronous(body, **_):
            tether.event(body, type="Normal", reason="Created", message="made it")
            tether.event(CM, type="Warning", reason="Odd")

        def threaded(body, **_):
            # a thread the function starts with the context copied, as the dispatcher does for sync functions
            import contextvars
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                ctx = contextvars.copy_context()
                pool.submit(ctx.run, tether.info, body, reason="Created", message="made it").result()
                pool.submit(ctx.run, tether.warn, CM, reason="Odd").result()

        want = ({"type": "Normal", "reason": "Created", "message": "made it", "regarding": REF},
                {"type": "Warning", "reason": "Odd", "message": "",
                 "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "other", "name": "c", "uid": ""}})
        for fn in (sync, asynchronous, threaded):
            with self.subTest(fn=fn.__name__):
                r = broker(fn).create(OBJ)
                self.assertEqual(r.outcome, OK)
                self.assertEqual(r.events, want)

    def test_events_go_with_every_outcome(self):
        def fails(body, **_):
            try:
                raise ValueError("no disk")
            except ValueError:
                tether.exception(body, message="could not make it:")
                raise tether.PermanentError("gave up")

        def retries(body, **_):
            tether.exception(body, reason="Later", exc=tether.TemporaryError("busy"))
            raise tether.TemporaryError("busy", delay=1)

        for fn, out, reason, message in ((fails, FAIL, "ValueError", "could not make it: no disk"),
                                         (retries, RETRY, "Later", "busy")):
            with self.subTest(fn=fn.__name__):
                r = broker(fn).create(OBJ)
                self.assertEqual(r.outcome, out)
                self.assertEqual([(e["type"], e["reason"], e["message"]) for e in r.events],
                                 [("Warning", reason, message)])

    def test_limits(self):
        def many(body, **_):
            tether.info(body, reason="Long", message="é" * 1000)
            for i in range(limits.MAX_ACK_EVENTS + 5):
                tether.info(body, reason=f"N{i}")

        with self.assertLogs("tether", "WARNING"):
            r = broker(many).create(OBJ)
        self.assertEqual(len(r.events), limits.MAX_ACK_EVENTS)
        self.assertEqual(len(r.events[0]["message"].encode()), 1023)
        self.assertTrue(r.events[0]["message"].endswith("…"))

    def test_invalid_events_are_errors_of_the_call(self):
        for kwargs, obj in (({"type": "Error", "reason": "X"}, OBJ), ({"type": "Normal", "reason": ""}, OBJ),
                            ({"type": "Normal", "reason": "R" * (limits.MAX_EVENT_REASON_BYTES + 1)}, OBJ),
                            ({"type": "Normal", "reason": "X"}, {"kind": "Widget"})):
            with self.subTest(kwargs=kwargs, obj=obj):
                def fn(**_):
                    tether.event(obj, **kwargs)

                r = broker(fn).create(OBJ)
                self.assertEqual(r.outcome, RETRY)
                self.assertIn("ValueError", r.message)

    def test_outside_a_delivery_it_is_a_runtime_error(self):
        with self.assertRaisesRegex(RuntimeError, "outside a handler function"):
            tether.info(OBJ, reason="Nowhere")

    def test_a_daemon_cannot_post_events(self):
        registry = tether.Registry()
        seen = []

        @tether.daemon(*W, registry=registry)
        def d(body, **_):
            try:
                tether.info(body, reason="X")
            except RuntimeError as e:
                seen.append(str(e))

        with FakeBroker(registry) as b:
            b.daemon(OBJ)
        self.assertEqual(len(seen), 1)
        self.assertIn("daemon", seen[0])
