"""tether.operator with Kopf's flags: ready_flag is set at the Welcome and
stop_flag stops it, as an asyncio.Event or Future, a threading.Event or a
concurrent.futures.Future set from another thread."""

import asyncio
import concurrent.futures
import threading
import unittest

import tether
from tether import runner

from broker_fake import WAIT, FakeBroker

W = ("test.tether.dev", "v1", "widgets")


class Flags(unittest.TestCase):
    def run_with(self, make_flag, set_flag):
        """operator() in a thread of its own with flags made by make_flag
        (in the operator's loop), stopped by set_flag from this thread."""
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="c")(lambda **_: None)
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        made, done, error = threading.Event(), threading.Event(), []
        flags = {}

        async def main():
            flags["loop"] = asyncio.get_running_loop()
            flags["ready"], flags["stop"] = make_flag(), make_flag()
            made.set()
            await tether.operator(reg, name="embedded", broker=broker.address, insecure=True,
                                  ready_flag=flags["ready"], stop_flag=flags["stop"], liveness_endpoint=None,
                                  clusterwide=True, standalone=True)

        def thread():
            try:
                asyncio.run(main())
            except BaseException as e:
                error.append(e)
            finally:
                done.set()

        threading.Thread(target=thread, daemon=True).start()
        self.assertTrue(made.wait(WAIT))
        broker.connected()
        ready = flags["ready"]
        check = {asyncio.Event: lambda f: f.is_set(), threading.Event: lambda f: f.is_set()}.get(
            type(ready), lambda f: f.done())
        broker.wait_for(lambda: check(ready), "the ready flag")
        set_flag(flags["loop"], flags["stop"])
        self.assertTrue(done.wait(WAIT), "the operator did not stop by its stop flag")
        self.assertEqual(error, [])
        self.assertEqual([g.reason for g in broker.messages("goodbye")], ["instance shutting down"])

    def test_each_kind_of_flag(self):
        kinds = {
            "asyncio.Event": (asyncio.Event, lambda loop, f: loop.call_soon_threadsafe(f.set)),
            "asyncio.Future": (lambda: asyncio.get_running_loop().create_future(),
                               lambda loop, f: loop.call_soon_threadsafe(f.set_result, None)),
            "threading.Event": (threading.Event, lambda loop, f: f.set()),
            "concurrent.futures.Future": (concurrent.futures.Future, lambda loop, f: f.set_result(None)),
        }
        for name, (make, set_flag) in kinds.items():
            with self.subTest(flag=name):
                self.run_with(make, set_flag)

    def test_a_missing_name_says_what_it_is_for(self):
        with self.assertRaisesRegex(tether.ConfigError, "needs name=: the handler's name, which names its hold"):
            asyncio.run(runner.operator(tether.Registry(), ready_flag=threading.Event()))

    def test_a_flag_of_another_type_is_refused(self):
        with self.assertRaisesRegex(TypeError, "stop_flag= is an asyncio.Event"):
            asyncio.run(runner.operator(tether.Registry(), name="x", stop_flag=True))


if __name__ == "__main__":
    unittest.main()
