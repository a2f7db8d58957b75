"""Deliveries in batches (docs/protocol.md, [delivery.batch]): the SDK lists
CAPABILITY_DELIVERY_BATCH, and takes each delivery of a DeliveryBatch as if
it had come alone, in order: each runs and is acked by itself, and a
delivery it cannot take is acked FAIL without holding up the rest."""

import unittest

import tether
from tether.v1 import broker_pb2 as pb

from broker_fake import FakeBroker, Runner
from test_runner import W, delivery


class DeliveryBatches(unittest.TestCase):
    def test_each_delivery_of_a_batch_is_taken_as_alone(self):
        reg = tether.Registry()
        seen = []

        @tether.on.create(*W, registry=reg, id="create")
        def created(**_):
            seen.append("create")
            return {"ok": True}

        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        r = Runner(reg, broker=broker.address).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        s = broker.connected()
        self.assertIn(pb.CAPABILITY_DELIVERY_BATCH, s.hello.capabilities)

        batch = [delivery("create", id=f"d{i}") for i in range(3)]
        batch.append(delivery("undeclared", id="d-undeclared"))
        broker.send(pb.ConnectResponse(delivery_batch=pb.DeliveryBatch(deliveries=batch)))
        for i in range(3):
            a = broker.ack(f"d{i}")
            self.assertEqual(a.outcome, pb.OUTCOME_OK, a.message)
            self.assertEqual(a.result, b'{"ok":true}')
        a = broker.ack("d-undeclared")
        self.assertEqual(a.outcome, pb.OUTCOME_FAIL)
        self.assertIn("undeclared", a.message)
        self.assertEqual(seen, ["create"] * 3)
        r.stop()
        self.assertIsNone(r.error)


if __name__ == "__main__":
    unittest.main()
