"""tether.workers: sync functions run in threads, at most size of them, and
their values and exceptions come back to the event loop's callers; calls
that end together are settled together; shutdown ends the threads."""

import asyncio
import threading
import time
import unittest

from tether.workers import Workers

WAIT = 10.0


class WorkersTest(unittest.TestCase):
    def run_loop(self, coro):
        return asyncio.run(asyncio.wait_for(coro, WAIT))

    def test_a_call_runs_in_a_thread_and_returns_its_value(self):
        w = Workers(4)

        async def main():
            return await w.run(lambda: (threading.current_thread().name, 42))

        try:
            name, value = self.run_loop(main())
        finally:
            w.shutdown()
        self.assertEqual(42, value)
        self.assertNotEqual(threading.main_thread().name, name)
        self.assertTrue(name.startswith("tether_"), name)

    def test_an_exception_reaches_the_caller(self):
        w = Workers(1)

        def boom():
            raise KeyError("gone")

        async def main():
            with self.assertRaises(KeyError):
                await w.run(boom)
            return await w.run(lambda: "still serving")

        try:
            self.assertEqual("still serving", self.run_loop(main()))
        finally:
            w.shutdown()

    def test_no_more_threads_than_size_and_the_others_wait_their_turn(self):
        w = Workers(3)
        gate = threading.Event()
        running, peak, lock = [0], [0], threading.Lock()

        def call(i):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            gate.wait(WAIT)
            with lock:
                running[0] -= 1
            return i

        async def main():
            calls = [asyncio.ensure_future(w.run(lambda i=i: call(i))) for i in range(10)]
            deadline = time.monotonic() + WAIT
            while True:  # until three run: the fourth must wait for one of them
                with lock:
                    if running[0] == 3:
                        break
                self.assertLess(time.monotonic(), deadline, "three calls never ran at once")
                await asyncio.sleep(0.001)
            gate.set()
            return await asyncio.gather(*calls)

        try:
            self.assertEqual(list(range(10)), self.run_loop(main()))
        finally:
            w.shutdown()
        self.assertEqual(3, peak[0])
        self.assertLessEqual(len(w._threads), 3)

    def test_grow_allows_more_threads(self):
        w = Workers(1)
        w.grow(1)
        both = threading.Barrier(2, timeout=WAIT)  # broken unless two calls run at once

        async def main():
            return await asyncio.gather(w.run(both.wait), w.run(both.wait))

        try:
            self.assertEqual([0, 1], sorted(self.run_loop(main())))
        finally:
            w.shutdown()

    def test_calls_that_end_together_are_settled_with_one_wake_up(self):
        w = Workers(8)
        gate = threading.Barrier(8)
        settles = []

        async def main():
            real = w._settle

            def counted():
                settles.append(1)
                real()

            w._settle = counted
            # The loop is held while the eight calls end, as when it is busy.
            calls = [asyncio.ensure_future(w.run(lambda i=i: (gate.wait(WAIT), i)[1])) for i in range(8)]
            await asyncio.sleep(0)
            deadline = time.monotonic() + WAIT
            while len(w._ended) < 8:  # blocks the loop: nothing is settled meanwhile
                self.assertLess(time.monotonic(), deadline, "the eight calls never ended")
                threading.Event().wait(0.001)
            return await asyncio.gather(*calls)

        try:
            self.assertEqual(list(range(8)), self.run_loop(main()))
        finally:
            w.shutdown()
        self.assertEqual([1], settles)

    def test_shutdown_ends_the_threads(self):
        w = Workers(4)

        async def main():
            await asyncio.gather(*(w.run(lambda: None) for _ in range(4)))

        self.run_loop(main())
        threads = list(w._threads)
        self.assertTrue(threads)
        w.shutdown()
        for t in threads:
            t.join(WAIT)
            self.assertFalse(t.is_alive(), t.name)


if __name__ == "__main__":
    unittest.main()
