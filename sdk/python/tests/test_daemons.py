"""Daemons through the real session: DAEMON_START is acked at once,
DAEMON_STOP sets stopped and is acked when the function returned, a daemon
that returns by itself is reported, and stopping the handler stops its
daemons before it says goodbye. Sync and async daemons alike."""

import asyncio
import json
import threading
import unittest

import tether
from tether import kwargs
from tether.bindings import Kind
from tether.v1 import broker_pb2 as pb

from broker_fake import WAIT, FakeBroker, Runner

W = ("test.tether.dev", "v1", "widgets")


def start(uid, binding="daemon"):
    ref = pb.ObjectRef(resource=pb.Resource(group=W[0], version="v1", resource="widgets"), namespace="ns",
                       name="w-" + uid, uid=uid)
    obj = b'{"metadata":{"name":"w-%s","namespace":"ns","uid":"%s"}}' % (uid.encode(), uid.encode())
    return pb.Delivery(binding_id=binding, kind=pb.DELIVERY_KIND_DAEMON_START, attempt=1, ref=ref, object=obj)


def stop(uid, binding="daemon"):
    d = start(uid, binding)
    d.kind = pb.DELIVERY_KIND_DAEMON_STOP
    return d


class Watch:
    """What a daemon saw, shared with the test."""

    def __init__(self):
        self.running = threading.Event()
        self.returned = threading.Event()
        self.reason = None


def sync_daemon(watch, fail=False, by_itself=False):
    def follow(stopped, **_):
        watch.running.set()
        if not by_itself:
            stopped.wait()
            watch.reason = stopped.reason
        watch.returned.set()
        if fail:
            raise RuntimeError("lost the connection")
    return follow


def async_daemon(watch, fail=False, by_itself=False):
    async def follow(stopped, **_):
        watch.running.set()
        if not by_itself:
            await stopped
            assert stopped.is_set() and await stopped.wait(0)
            watch.reason = stopped.reason
        watch.returned.set()
        if fail:
            raise RuntimeError("lost the connection")
    return follow


FLAVOURS = [("sync", sync_daemon), ("async", async_daemon)]


class Daemons(unittest.TestCase):
    def serve(self, make, errors=None, **options):
        watch = Watch()
        reg = tether.Registry()
        extra = {} if errors is None else {"errors": errors}
        tether.daemon(*W, registry=reg, id="daemon", **extra)(make(watch, **options))
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        r = Runner(reg, broker=broker.address, window=2).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        broker.connected()
        return broker, r, watch

    def test_stop_is_acked_once_the_function_returned(self):
        for flavour, make in FLAVOURS:
            with self.subTest(flavour):
                broker, r, watch = self.serve(make)
                self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK)
                self.assertTrue(watch.running.wait(WAIT))
                self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK, "already running")
                ack = broker.deliver(stop("u1"))
                self.assertEqual((ack.outcome, ack.message), (pb.OUTCOME_OK, ""))
                self.assertTrue(watch.returned.is_set(), "acked before the function returned")
                self.assertEqual(watch.reason, "stopped by the broker")
                self.assertEqual(broker.deliver(stop("u1")).outcome, pb.OUTCOME_OK, "a stop for no daemon")
                self.assertEqual(broker.messages("daemon_exited"), [])
                r.stop()

    def test_an_error_on_stop_is_the_acks_message(self):
        for flavour, make in FLAVOURS:
            with self.subTest(flavour):
                broker, r, watch = self.serve(make, fail=True)
                broker.deliver(start("u1"))
                ack = broker.deliver(stop("u1"))
                self.assertEqual(ack.outcome, pb.OUTCOME_OK)
                self.assertEqual(ack.message, "RuntimeError: lost the connection")
                r.stop()

    def test_a_daemon_that_returns_by_itself_is_reported(self):
        for flavour, make in FLAVOURS:
            for fail in (False, True):
                with self.subTest(flavour, fail=fail):
                    broker, r, watch = self.serve(make, by_itself=True, fail=fail)
                    broker.deliver(start("u1"))
                    (exited,) = broker.wait_for(lambda: broker.messages("daemon_exited"), "DaemonExited")
                    self.assertEqual((exited.binding_id, exited.uid, exited.failed), ("daemon", "u1", fail))
                    self.assertEqual(exited.message, "RuntimeError: lost the connection" if fail else "")
                    r.stop()

    def test_a_daemon_that_raises_by_itself_under_ignored_reports_a_return(self):
        for flavour, make in FLAVOURS:
            with self.subTest(flavour):
                broker, r, watch = self.serve(make, errors=tether.ErrorsMode.IGNORED, by_itself=True, fail=True)
                with self.assertLogs("tether", "WARNING") as logs:
                    broker.deliver(start("u1"))
                    (exited,) = broker.wait_for(lambda: broker.messages("daemon_exited"), "DaemonExited")
                self.assertEqual((exited.failed, exited.message), (False, ""))
                self.assertIn("ignored (errors=IGNORED): RuntimeError: lost the connection", logs.output[0])
                r.stop()

    def test_a_daemon_adopts_with_its_object_as_the_owner(self):
        def adopting(watch):
            def follow(**_):
                child = {}
                tether.adopt(child)
                watch.reason = child["metadata"]
                watch.returned.set()
            return follow

        def adopting_async(watch):
            async def follow(**_):
                adopting(watch)()
            return follow

        for flavour, make in (("sync", adopting), ("async", adopting_async)):
            with self.subTest(flavour):
                broker, r, watch = self.serve(make)
                broker.deliver(start("u1"))
                self.assertTrue(watch.returned.wait(WAIT))
                self.assertEqual(watch.reason, {"ownerReferences": [{"name": "w-u1", "uid": "u1", "controller": True,
                                                                     "blockOwnerDeletion": True}],
                                                "generateName": "w-u1-", "namespace": "ns", "labels": {}})
                r.stop()

    def test_stopping_the_handler_stops_daemons_before_goodbye(self):
        for flavour, make in FLAVOURS:
            with self.subTest(flavour):
                broker, r, watch = self.serve(make)
                broker.deliver(start("u1"))
                self.assertTrue(watch.running.wait(WAIT))
                r.stop()
                self.assertIsNone(r.error)
                self.assertTrue(watch.returned.is_set())
                self.assertEqual(watch.reason, "handler shutting down")
                self.assertEqual(len(broker.messages("goodbye")), 1)
                self.assertEqual(broker.messages("daemon_exited"), [], "a stop asked for is no exit")

    def test_daemons_take_no_window_slot(self):
        broker, r, watch = self.serve(sync_daemon)
        for uid in ("u1", "u2", "u3"):  # the window is 2
            self.assertEqual(broker.deliver(start(uid)).outcome, pb.OUTCOME_OK)
        for uid in ("u1", "u2", "u3"):
            self.assertEqual(broker.deliver(stop(uid)).outcome, pb.OUTCOME_OK)

    def test_a_start_without_uid_fails(self):
        broker, r, watch = self.serve(sync_daemon)
        d = start("")
        ack = broker.deliver(d)
        self.assertEqual(ack.outcome, pb.OUTCOME_FAIL)
        self.assertIn("without object uid", ack.message)


class Stubborn(unittest.TestCase):
    """Daemons that do not look at stopped. The broker waits for the stop's
    ack up to the binding's cancellation timeout, then sends Cancel for the
    stop: an async daemon is cancelled then, a sync one cannot be."""

    def serve(self, fn, **options):
        reg = tether.Registry()
        tether.daemon(*W, registry=reg, id="daemon", **options)(fn)
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        # The runner's end waits a second, not the default, for the daemons
        # these tests leave running.
        r = Runner(reg, broker=broker.address, drain_timeout=1).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        broker.connected()
        return broker

    def test_an_async_daemon_is_cancelled_when_the_broker_gives_up_on_its_stop(self):
        cancelled = threading.Event()

        async def follow(**_):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        broker = self.serve(follow)
        self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK)
        s = stop("u1")
        broker.deliver(s, wait=False)
        self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_RETRY, "still stopping")
        broker.send(pb.ConnectResponse(cancel=pb.Cancel(delivery_id=s.id, reason="no ack within 1s")))
        self.assertEqual(broker.ack(s.id).outcome, pb.OUTCOME_OK)
        self.assertTrue(cancelled.is_set())
        self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK, "the next start runs")
        self.assertEqual(broker.messages("daemon_exited"), [], "a cancelled daemon did not exit by itself")

    def test_an_async_daemon_is_cancelled_its_cancellation_backoff_after_the_stop(self):
        """Kopf's stop: stopped is set, and an async daemon still running
        cancellation_backoff later is cancelled, with no Cancel from the
        broker; the broker waits for backoff and timeout together."""
        cancelled = threading.Event()

        async def follow(**_):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        broker = self.serve(follow, cancellation_backoff=0.2, cancellation_timeout=30)
        (b,) = broker.connected().hello.bindings
        self.assertEqual(b.daemon.cancellation_timeout.ToTimedelta().total_seconds(), 30.2)
        self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK)
        self.assertEqual(broker.deliver(stop("u1")).outcome, pb.OUTCOME_OK)
        self.assertTrue(cancelled.is_set())

    def test_a_sync_daemon_holds_up_the_next_start_until_it_returns(self):
        release = threading.Event()
        runs = []

        def follow(**_):
            runs.append(1)
            release.wait(WAIT)

        broker = self.serve(follow)
        broker.deliver(start("u1"))
        s = stop("u1")
        broker.deliver(s, wait=False)
        broker.send(pb.ConnectResponse(cancel=pb.Cancel(delivery_id=s.id, reason="no ack within 1s")))
        ack = broker.deliver(start("u1"))
        self.assertEqual(ack.outcome, pb.OUTCOME_RETRY, "a thread cannot be cancelled")
        self.assertIn("still stopping", ack.message)
        release.set()
        self.assertEqual(broker.ack(s.id).outcome, pb.OUTCOME_OK)
        self.assertEqual(broker.deliver(start("u1")).outcome, pb.OUTCOME_OK, "the next start runs")
        broker.wait_for(lambda: len(runs) == 2, "the second run")


class Failures(unittest.TestCase):
    """What a daemon that raises tells the broker, and what it is told."""

    def exited(self, fn, d=None):
        reg = tether.Registry()
        tether.daemon(*W, registry=reg, id="daemon", restart=True)(fn)
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        r = Runner(reg, broker=broker.address).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        broker.connected()
        broker.deliver(d or start("u1"))
        (exited,) = broker.wait_for(lambda: broker.messages("daemon_exited"), "DaemonExited")
        return exited

    def test_a_temporary_errors_delay_is_the_restarts(self):
        cases = [
            ("delay", tether.TemporaryError("not yet", delay=2.5), 2.5),
            ("no delay", tether.TemporaryError("not yet"), None),
            ("another exception", RuntimeError("boom"), None),
        ]
        for name, error, want in cases:
            with self.subTest(name):
                def follow(**_):
                    raise error

                exited = self.exited(follow)
                self.assertTrue(exited.failed)
                after = exited.retry_after.ToTimedelta().total_seconds() if exited.HasField("retry_after") else None
                self.assertEqual(after, want)

    def test_retry_counts_the_failed_runs_before_this_start(self):
        seen = []

        def follow(retry, **_):
            seen.append(retry)

        d = start("u1")
        d.attempt = 4
        self.exited(follow, d)
        self.assertEqual(seen, [3])


class Carried(unittest.TestCase):
    """What a daemon's run writes goes with its exit report, failed or not."""

    def exited(self, fn):
        return Failures.exited(self, fn)

    def test_the_patch_goes_with_a_temporary_error(self):
        def follow(patch, retry, **_):
            patch.status["message"] = f"failed {retry + 1} times"
            patch.metadata.labels["watched"] = "no"
            raise tether.TemporaryError("not yet", delay=1)

        exited = self.exited(follow)
        self.assertTrue(exited.failed)
        self.assertEqual(json.loads(exited.patch),
                         {"status": {"message": "failed 1 times"}, "metadata": {"labels": {"watched": "no"}}})
        self.assertEqual(exited.result, b"")

    def test_the_patch_and_the_return_value_go_with_a_return(self):
        async def follow(patch, **_):
            patch.status["message"] = "finished"
            return {"runs": 1}

        exited = self.exited(follow)
        self.assertFalse(exited.failed)
        self.assertEqual(json.loads(exited.patch), {"status": {"message": "finished"}})
        self.assertEqual(json.loads(exited.result), {"runs": 1})

    def test_a_return_value_that_is_not_json_sends_nothing_of_the_run(self):
        def follow(patch, **_):
            patch.status["message"] = "finished"
            return object()

        exited = self.exited(follow)
        self.assertEqual((exited.patch, exited.result), (b"", b""))

    def test_a_daemon_may_take_patch(self):
        self.assertIn("patch", kwargs.names(Kind.DAEMON))


class StoppedFlags(unittest.TestCase):
    def test_sync_flag(self):
        flag = tether.DaemonStopped()
        self.assertFalse(flag or flag.is_set() or flag.wait(0))
        flag._set("why")
        flag._set("later reasons do not replace the first")
        self.assertTrue(flag and flag.wait(0))
        self.assertEqual(flag.reason, "why")

    def test_async_flag(self):
        async def check():
            flag = tether.AsyncDaemonStopped()
            self.assertFalse(await flag.wait(0.01))
            asyncio.get_running_loop().call_soon(flag._set, "why")
            await asyncio.wait_for(flag, WAIT)
            self.assertTrue(flag and await flag.wait(0))

        asyncio.run(check())


if __name__ == "__main__":
    unittest.main()
