"""tether.testing.TetherRunner (Kopf's KopfRunner): a handler file run as
``python3 -m tether run`` runs it, in a thread, against a broker on a
localhost port; the test reads its output, exit code and exception."""

import os
import tempfile
import unittest

import tether.testing
from tether.v1 import broker_pb2 as pb

from broker_fake import FakeBroker
from test_runner import delivery

HANDLER = '''import tether as kopf

@kopf.on.create("test.tether.dev", "v1", "widgets", id="create")
def created(name, logger, **_):
    print("printed for", name)
    logger.info("logged for %s", name)
    return {"seen": name}
'''


class Runner(unittest.TestCase):
    def handler(self, source=HANDLER):
        folder = tempfile.mkdtemp()
        self.addCleanup(lambda: [os.remove(os.path.join(folder, f)) for f in os.listdir(folder)] and os.rmdir(folder))
        path = os.path.join(folder, "my_handler.py")
        with open(path, "w") as f:
            f.write(source)
        return path

    def test_a_handler_runs_until_the_block_ends_and_says_what_it_did(self):
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        with tether.testing.KopfRunner(["run", "--all-namespaces", "--verbose", "--standalone", "--insecure",
                                        "--broker", broker.address, self.handler()]) as runner:
            s = broker.connected()
            ack = broker.deliver(delivery("create"))
        self.assertEqual(ack.outcome, pb.OUTCOME_OK)
        self.assertEqual(ack.result, b'{"seen":"w1"}')
        self.assertEqual(s.hello.handler, "testing-my-handler", "named after its file without --name")
        self.assertEqual((runner.exit_code, runner.exception), (0, None))
        self.assertIn("printed for w1", runner.output)
        self.assertIn("[ns/w1] logged for w1", runner.output)
        self.assertIn("stopped", runner.output)

    def test_a_refused_handler_ends_with_its_exit_code_and_exception(self):
        broker = FakeBroker(reject=(__import__("grpc").StatusCode.INVALID_ARGUMENT, "bad binding")).start()
        self.addCleanup(broker.stop)
        runner = tether.testing.TetherRunner(["--insecure", "--broker", broker.address, "--name", "h", self.handler()],
                                             reraise=False)
        with runner:
            runner.wait_stopped()
        self.assertEqual(runner.exit_code, 2)
        self.assertIsInstance(runner.exception, tether.RejectedError)
        self.assertIn("bad binding", runner.output)

    def test_the_handlers_exception_is_raised_at_the_end_unless_asked_not_to(self):
        broker = FakeBroker(reject=(__import__("grpc").StatusCode.PERMISSION_DENIED, "no")).start()
        self.addCleanup(broker.stop)
        with self.assertRaises(tether.RejectedError):
            with tether.testing.TetherRunner(["--insecure", "--broker", broker.address, self.handler()]) as runner:
                runner.wait_stopped()


if __name__ == "__main__":
    unittest.main()
