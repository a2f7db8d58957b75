"""Startup, cleanup and probe functions, run by the real runner against the
fake broker: startup before the Hello and retried as Kopf retries it, its
settings in the Hello, cleanup after the goodbye, the --liveness endpoint;
and @tether.on.login refused."""

import asyncio
import http.client
import json
import socket
import threading
import time
import unittest

import tether
from tether import liveness
from tether.activities import Activity
from tether.v1 import broker_pb2 as pb

from broker_fake import WAIT, FakeBroker, Runner

W = ("test.tether.dev", "v1", "widgets")


def create():
    """A delivery to with_binding()'s create binding."""
    return pb.Delivery(binding_id="create", kind=pb.DELIVERY_KIND_CREATE, attempt=1, object=b'{"metadata":{}}',
                       ref=pb.ObjectRef(namespace="ns", name="w1", uid="u1"))


def with_binding():
    reg = tether.Registry()
    tether.on.create(*W, registry=reg, id="create")(lambda **_: None)
    return reg


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path="/healthz"):
    """(status, decoded JSON body) of GET path; None when nothing listens yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    except ConnectionRefusedError:
        return None
    finally:
        conn.close()


NOT_YET = (503, {"error": "not connected to the broker yet"})


def probed(port, path="/healthz"):
    """The endpoint's first answer that is not NOT_YET."""
    return until("the probes' answer", lambda: (got := get(port, path)) not in (None, NOT_YET) and got)


def until(what, fn):
    """fn's first true value, asked again until WAIT has passed."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.02)  # polling an HTTP endpoint: there is nothing to wait on
    raise AssertionError(f"timed out after {WAIT}s waiting for {what}")


class Case(unittest.TestCase):
    def serve(self, registry, broker=None, **settings):
        broker = (broker or FakeBroker()).start()
        self.addCleanup(broker.stop)
        r = Runner(registry, broker=broker.address, **settings).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        return broker, r


class Startup(Case):
    def test_startup_runs_before_the_hello_retried_and_its_settings_make_the_hello(self):
        reg, calls, broker = with_binding(), [], FakeBroker()

        @tether.on.startup(registry=reg)
        async def first(retry, settings, memo, logger, **_):
            calls.append(("first", retry, len(broker.streams)))
            if retry < 2:
                raise tether.TemporaryError("not yet", delay=0.01)
            settings.execution.max_workers = 3
            settings.priority = 2
            memo.ready = True

        @tether.on.startup(registry=reg, backoff=0.01)
        def second(retry, memo, **_):  # sync, in a thread; after the first has succeeded
            calls.append(("second", retry, memo.ready))
            if retry < 1:
                raise ValueError("a bug, retried")

        broker, r = self.serve(reg, broker)
        s = broker.connected()
        self.assertEqual(calls, [("first", 0, 0), ("first", 1, 0), ("first", 2, 0), ("second", 0, True),
                                 ("second", 1, True)])
        self.assertEqual((s.hello.window, s.hello.priority), (3, 2))
        self.assertEqual([b.id for b in s.hello.bindings], ["create"], "hooks are not bindings")

    def test_a_permanent_error_stops_the_process_before_it_connects(self):
        cases = [
            (dict(), tether.PermanentError("no database"), "startup function broken failed permanently: no database", 1),
            (dict(retries=2), ValueError("bad"), "startup function broken failed after 2 attempts: ValueError: bad", 2),
            (dict(), None, "settings.posting.level: Kopf's setting has no counterpart", 1),
        ]
        for options, error, words, attempts in cases:
            with self.subTest(words):
                reg, calls = with_binding(), []

                @tether.on.startup(registry=reg, backoff=0.01, **options)
                def broken(settings, **_):
                    calls.append(1)
                    if error is None:
                        settings.posting.level = 30
                    raise error

                broker, r = self.serve(reg)
                r.wait()
                self.assertIsInstance(r.error, tether.ActivityError)
                self.assertIn(words, str(r.error))
                self.assertEqual((len(calls), broker.streams), (attempts, []))

    def test_stopping_while_a_startup_waits_to_be_retried_ends_without_connecting(self):
        reg, failed, cleaned = with_binding(), threading.Event(), []

        @tether.on.startup(registry=reg)
        def waiting(**_):
            failed.set()
            raise tether.TemporaryError("later", delay=3600)

        tether.on.cleanup(registry=reg)(lambda **_: cleaned.append(1))
        broker, r = self.serve(reg)
        self.assertTrue(failed.wait(WAIT))
        r.stop()
        self.assertIsNone(r.error)
        self.assertEqual((broker.streams, cleaned), ([], []), "neither connected nor cleaned up")

    def test_stopping_cancels_an_async_startup_function(self):
        reg, waiting, cancelled = with_binding(), threading.Event(), threading.Event()

        @tether.on.startup(registry=reg)
        async def forever(**_):
            waiting.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        broker, r = self.serve(reg)
        self.assertTrue(waiting.wait(WAIT))
        r.stop()
        self.assertIsNone(r.error)
        self.assertTrue(cancelled.is_set())
        self.assertEqual(broker.streams, [])


class Cleanup(Case):
    def test_cleanup_runs_after_the_goodbye_with_the_processs_memo(self):
        reg, seen, broker = with_binding(), [], FakeBroker()

        @tether.on.startup(registry=reg)
        def opened(memo, **_):
            memo.opened = True

        @tether.on.cleanup(registry=reg)
        async def closed(memo, activity, **_):
            seen.append((len(broker.messages("goodbye")), memo.given, memo.opened, activity))

        broker, r = self.serve(reg, broker, memo=tether.Memo(given=1))
        broker.connected()
        # An ack shows the handler has read the Welcome: stopped before it, it would say no goodbye.
        self.assertEqual(broker.deliver(create()).outcome, pb.OUTCOME_OK)
        self.assertEqual(seen, [])
        r.stop()
        self.assertIsNone(r.error)
        self.assertEqual(seen, [(1, 1, True, "cleanup")])

    def test_settings_are_read_only_after_the_startup(self):
        reg = with_binding()

        @tether.on.cleanup(registry=reg)
        def late(settings, **_):
            settings.window = 1

        broker, r = self.serve(reg)
        broker.connected()
        r.stop()
        self.assertIsInstance(r.error, tether.ActivityError)
        self.assertIn("settings.window: the settings apply only in startup functions", str(r.error))


class Probes(Case):
    def test_the_endpoint_answers_503_until_connected_then_the_probes_results(self):
        reg, release, port = with_binding(), threading.Event(), free_port()
        tether.on.startup(registry=reg)(lambda **_: release.wait(WAIT))
        tether.on.probe(registry=reg, id="objects")(lambda **_: 3)

        @tether.on.probe(registry=reg)
        async def names(memo, **_):
            return sorted(memo)

        broker, r = self.serve(reg, liveness=f"http://127.0.0.1:{port}/healthz", memo=tether.Memo(a=1))
        self.assertEqual(until("the endpoint", lambda: get(port)), NOT_YET)
        self.assertEqual(broker.streams, [], "the startup function still runs")
        release.set()
        broker.connected()
        self.assertEqual(probed(port), (200, {"objects": 3, "names": ["a"]}))
        self.assertEqual(get(port, "/other")[0], 404)
        r.stop()
        self.assertIsNone(get(port), "the endpoint closes with the process")

    def test_a_probe_that_raises_makes_the_answer_503(self):
        reg, port = with_binding(), free_port()
        tether.on.probe(registry=reg, id="fine")(lambda **_: "yes")

        @tether.on.probe(registry=reg)
        def broken(**_):
            raise RuntimeError("stuck")

        broker, r = self.serve(reg, liveness=f"http://127.0.0.1:{port}/")
        broker.connected()
        self.assertEqual(probed(port, "/"), (503, {"fine": "yes", "broken": {"error": "RuntimeError: stuck"}}))

    def test_liveness_urls(self):
        for url, want in (("http://0.0.0.0:8080/healthz", ("0.0.0.0", 8080, "/healthz")),
                          ("http://localhost", ("localhost", 80, "/"))):
            self.assertEqual(liveness.parse(url), want)
        for url in ("https://0.0.0.0:8080/healthz", "0.0.0.0:8080", "http://:80/", "http://h:x/", "http://h/?a=1"):
            with self.subTest(url), self.assertRaises(ValueError):
                liveness.parse(url)

    def test_a_bad_liveness_url_is_a_configuration_error(self):
        r = Runner(with_binding(), broker="127.0.0.1:1", liveness="https://0.0.0.0/healthz").start()
        r.wait()
        self.assertIsInstance(r.error, tether.ConfigError)
        self.assertIn("http://HOST[:PORT]/PATH", str(r.error))


class Declaring(unittest.TestCase):
    def test_login_is_accepted_never_called_and_said_so(self):
        def fn(**_):
            raise AssertionError("a login function was called")

        for use in (lambda: tether.on.login()(fn), lambda: tether.on.login(errors="PERMANENT")(fn),
                    lambda: tether.on.login(fn)):
            with self.assertLogs("tether", "WARNING") as logs:
                self.assertIs(use(), fn)
            self.assertIn("is never called: the broker watches and writes with its own credentials", logs.output[0])
            self.assertIn("--token-file", logs.output[0])

    def test_refused_options_and_arguments(self):
        cases = [
            (lambda: tether.on.startup(errors="PERMANENT"), "errors=", "PermanentError"),
            (lambda: tether.on.cleanup(param=1), "param=", "functools.partial"),
            (lambda: tether.on.startup(timeout=5), "timeout=", "asyncio.wait_for"),
            (lambda: tether.on.probe(retries=1), "unexpected keyword argument 'retries'", ""),
            (lambda: tether.on.startup(registry=tether.Registry())(lambda body: None), "requires 'body'",
             "startup functions: it passes logger, memo, settings"),
            (lambda: tether.on.startup(registry=tether.Registry())(lambda param: None), "requires 'param'",
             "close over the value"),
            (lambda: tether.on.startup(backoff=5, max_backoff=1), "@tether.on.startup(): backoff=5.0 is more than "
             "max_backoff=1.0", ""),
            (lambda: tether.on.cleanup(backoff=-1), "@tether.on.cleanup(): backoff=-1 is negative", ""),
            (lambda: tether.on.cleanup(retries="3"), "@tether.on.cleanup(): retries= takes an int", ""),
        ]
        for use, where, why in cases:
            with self.subTest(where), self.assertRaises((TypeError, ValueError)) as caught:
                use()
            self.assertIn(where, str(caught.exception))
            self.assertIn(why, str(caught.exception))

    def test_ids_default_to_the_name_and_are_unique_per_activity(self):
        reg = tether.Registry()

        def check(**_):
            pass

        tether.on.startup(check, registry=reg)  # without the call, too
        tether.on.probe(registry=reg)(check)
        self.assertEqual([(h.activity, h.id) for h in reg._hooks], [(Activity.STARTUP, "check"), (Activity.PROBE, "check")])
        with self.assertRaises(ValueError) as caught:
            tether.on.probe(registry=reg)(check)
        self.assertIn("the probe id 'check' is already used", str(caught.exception))
        self.assertEqual(len(reg), 0, "hooks are not bindings")


if __name__ == "__main__":
    unittest.main()
