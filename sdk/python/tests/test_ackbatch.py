"""Acks in batches (docs/protocol.md, [ack.batch]): with a broker that lists
CAPABILITY_ACK_BATCH, the acks waiting together in the outbox go in one
AckBatch, in order with the other messages, within MAX_ACK_BATCH and the
bound on one message; a lone ack goes as a plain Ack; without the
capability every ack goes alone."""

import asyncio
import unittest

import tether
from tether import limits, outbox
from tether.v1 import broker_pb2 as pb

from broker_fake import FakeBroker, Runner
from test_runner import W, delivery

BOOTSTRAP, BATCH = pb.CAPABILITY_CAPABILITIES, pb.CAPABILITY_ACK_BATCH
_CLOSE = object()


def ack(i: int, **fields) -> pb.ConnectRequest:
    return pb.ConnectRequest(ack=pb.Ack(delivery_id=f"d{i}", outcome=pb.OUTCOME_OK, **fields))


def shape(writes) -> list:
    """Each write as the delivery ids of its acks, or the kind of message."""
    out = []
    for w in writes:
        if w is _CLOSE:
            out.append("close")
        elif w.WhichOneof("message") == "ack_batch":
            out.append([a.delivery_id for a in w.ack_batch.acks])
        elif w.WhichOneof("message") == "ack":
            out.append(w.ack.delivery_id)
        else:
            out.append(w.WhichOneof("message"))
    return out


class Writes(unittest.TestCase):
    def test_runs_of_acks_go_as_batches_in_order(self):
        goodbye = pb.ConnectRequest(goodbye=pb.Goodbye(reason="x"))
        items = [ack(1), ack(2), ack(3), goodbye, ack(4), pb.ConnectRequest(flow_control=pb.FlowControl(window=2)),
                 ack(5), ack(6), _CLOSE]
        self.assertEqual(shape(outbox.writes(items, True)),
                         [["d1", "d2", "d3"], "goodbye", "d4", "flow_control", ["d5", "d6"], "close"])
        # The lone ack is the very message the handler queued: nothing copied.
        self.assertIs(list(outbox.writes([items[4]], True))[0], items[4])
        # The batch carries the acks as they were.
        batch = next(outbox.writes([ack(1, message="m1"), ack(2, result=b'{"a":1}')], True))
        self.assertEqual([(a.message, a.result) for a in batch.ack_batch.acks], [("m1", b""), ("", b'{"a":1}')])

    def test_without_the_capability_every_ack_goes_alone(self):
        items = [ack(1), ack(2), _CLOSE]
        self.assertEqual(list(outbox.writes(items, False)), items)

    def test_a_batch_holds_at_most_max_ack_batch_acks(self):
        n = limits.MAX_ACK_BATCH
        sizes = [len(w.ack_batch.acks) if w.HasField("ack_batch") else 1
                 for w in outbox.writes([ack(i) for i in range(2 * n + 1)], True)]
        self.assertEqual(sizes, [n, n, 1])

    def test_a_batch_stays_within_the_bound_on_one_message(self):
        big = limits.DEFAULT_MAX_MESSAGE_BYTES * 2 // 5  # two fit in one message, three do not
        items = [ack(i, patch=b"x" * big) for i in range(5)]
        writes = list(outbox.writes(items, True))
        self.assertEqual(shape(writes), [["d0", "d1"], ["d2", "d3"], "d4"])
        for w in writes:
            self.assertLessEqual(w.ByteSize(), limits.DEFAULT_MAX_MESSAGE_BYTES)


class Session(unittest.TestCase):
    N = 8

    def serve(self, offered: tuple[int, ...]) -> FakeBroker:
        """Run a handler whose N async creates all return in one turn of
        the loop (the last to start releases them all), deliver N creates
        and return the broker once every ack is in."""
        reg = tether.Registry()
        started, release = [0], asyncio.Event()

        @tether.on.create(*W, registry=reg, id="create")
        async def created(**_):
            started[0] += 1
            if started[0] == self.N:
                release.set()
            await release.wait()
            return {"ok": True}

        broker = FakeBroker(capabilities=offered).start()
        self.addCleanup(broker.stop)
        r = Runner(reg, broker=broker.address).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        s = broker.connected()
        self.assertIn(BATCH, s.hello.capabilities)
        ids = [f"d{i}" for i in range(self.N)]
        for i in ids:
            broker.deliver(delivery("create", id=i), wait=False)
        for i in ids:
            a = broker.ack(i)
            self.assertEqual(a.outcome, pb.OUTCOME_OK, a.message)
            self.assertEqual(a.result, b'{"ok":true}')
        r.stop()
        self.assertIsNone(r.error)
        return broker

    def test_acks_ready_together_go_in_one_batch(self):
        broker = self.serve((BOOTSTRAP, BATCH))
        batches = broker.messages("ack_batch")
        self.assertEqual(broker.messages("ack"), [], "an ack went alone though all were ready together")
        self.assertEqual(len(batches), 1, [len(b.acks) for b in batches])
        self.assertEqual(sorted(a.delivery_id for a in batches[0].acks), [f"d{i}" for i in range(self.N)])

    def test_a_broker_without_the_capability_gets_every_ack_alone(self):
        for name, offered in (("a list without it", (BOOTSTRAP,)), ("a broker older than capabilities", ())):
            with self.subTest(name):
                broker = self.serve(offered)
                self.assertEqual(broker.messages("ack_batch"), [])
                self.assertEqual(len(broker.messages("ack")), self.N)


if __name__ == "__main__":
    unittest.main()
