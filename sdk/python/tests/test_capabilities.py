"""Capabilities in the handshake: the SDK lists its own in Hello, exposes
what the broker offered, and sends an ack's events only to a broker that
has them or that predates capabilities."""

import unittest

import tether
from tether.v1 import broker_pb2 as pb

from broker_fake import FakeBroker, Runner
from test_runner import W, delivery

BOOTSTRAP, EVENTS = pb.CAPABILITY_CAPABILITIES, pb.CAPABILITY_HANDLER_EVENTS


class Capabilities(unittest.TestCase):
    def test_capabilities_are_negotiated_in_the_handshake(self):
        cases = [
            ("a broker older than capabilities gets the events", (), False, 1),
            ("a broker that offers events gets them", (BOOTSTRAP, EVENTS), True, 1),
            ("a broker that lists its capabilities without events gets none", (BOOTSTRAP,), True, 0),
            ("a list without the bootstrap says nothing", (pb.CAPABILITY_PRIORITY,), False, 1),
        ]
        for name, offered, listed, events in cases:
            with self.subTest(name):
                reg = tether.Registry()

                @tether.on.create(*W, registry=reg, id="create")
                def created(body, **_):
                    tether.info(body, reason="Done", message="done")

                broker = FakeBroker(capabilities=offered).start()
                self.addCleanup(broker.stop)
                r = Runner(reg, broker=broker.address).start()
                s = broker.connected()
                for c in (BOOTSTRAP, EVENTS, pb.CAPABILITY_DAEMON_EXIT_RETRY_AFTER):
                    self.assertIn(c, s.hello.capabilities)
                ack = broker.deliver(delivery("create"))
                self.assertEqual(ack.outcome, pb.OUTCOME_OK, ack.message)
                self.assertEqual(len(ack.events), events)
                got = tether.broker_capabilities()
                self.assertEqual((got.listed, got.offered), (listed, offered))
                self.assertEqual(got.lacks(EVENTS), events == 0)
                r.stop()
                self.assertIsNone(r.error)


class Progress(unittest.TestCase):
    def test_the_subhandlers_progress_goes_only_to_a_broker_that_keeps_it(self):
        # Without CAPABILITY_PROGRESS the done subhandlers run again on the
        # next attempt, as with a first attempt: nothing is sent for nothing.
        for name, offered, sent in (("a broker with progress", (BOOTSTRAP, pb.CAPABILITY_PROGRESS), True),
                                    ("a broker without it", (BOOTSTRAP,), False)):
            with self.subTest(name):
                reg = tether.Registry()

                @tether.on.create(*W, registry=reg, id="create")
                def created(**_):
                    tether.subhandler(id="done")(lambda **_: None)

                    @tether.subhandler(id="later")
                    def later(**_):
                        raise tether.TemporaryError("later")

                broker = FakeBroker(capabilities=offered).start()
                self.addCleanup(broker.stop)
                r = Runner(reg, broker=broker.address).start()
                s = broker.connected()
                self.assertIn(pb.CAPABILITY_PROGRESS, s.hello.capabilities)
                ack = broker.deliver(delivery("create"))
                self.assertEqual(ack.outcome, pb.OUTCOME_RETRY, ack.message)
                self.assertEqual(b'"done":["create/done"]' in ack.progress, sent, ack.progress)
                self.assertEqual(bool(ack.progress), sent)
                r.stop()
                self.assertIsNone(r.error)

    def test_a_broker_without_progress_gets_the_retry_whatever_its_size(self):
        # Progress past MAX_PROGRESS_BYTES fails the delivery only where it
        # would be sent: a broker that keeps none gets the RETRY, and the
        # subhandlers run again.
        for name, offered, outcome in (("a broker with progress", (BOOTSTRAP, pb.CAPABILITY_PROGRESS), pb.OUTCOME_FAIL),
                                       ("a broker without it", (BOOTSTRAP,), pb.OUTCOME_RETRY)):
            with self.subTest(name):
                reg = tether.Registry()

                @tether.on.create(*W, registry=reg, id="create")
                def created(**_):
                    @tether.subhandler(id="big")
                    def big(patch, **_):
                        patch.spec["big"] = "x" * (20 << 10)

                    @tether.subhandler(id="later")
                    def later(**_):
                        raise tether.TemporaryError("later")

                broker = FakeBroker(capabilities=offered).start()
                self.addCleanup(broker.stop)
                r = Runner(reg, broker=broker.address).start()
                broker.connected()
                ack = broker.deliver(delivery("create"))
                self.assertEqual(ack.outcome, outcome, ack.message)
                self.assertEqual(ack.progress, b"")
                r.stop()
                self.assertIsNone(r.error)

