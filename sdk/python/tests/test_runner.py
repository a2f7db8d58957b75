"""The real runner and session against a fake broker on a localhost gRPC
port: Hello, deliveries and acks, flow control, cancellation, goodbye,
rejection and reconnection; and the Hello and credentials it builds."""

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import tether
from tether import runner
from tether.v1 import broker_pb2 as pb

from broker_fake import WAIT, FakeBroker, Runner

W = ("test.tether.dev", "v1", "widgets")
OBJECT = b'{"apiVersion":"test.tether.dev/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns","uid":"u1"},"spec":{"size":3}}'
REF = pb.ObjectRef(resource=pb.Resource(group=W[0], version="v1", resource="widgets"), namespace="ns", name="w1",
                   uid="u1")


def delivery(binding, kind=pb.DELIVERY_KIND_CREATE, **fields):
    return pb.Delivery(binding_id=binding, kind=kind, attempt=1, ref=REF, **{"object": OBJECT, **fields})


class Session(unittest.TestCase):
    def serve(self, registry, broker=None, **settings):
        broker = broker or FakeBroker()
        broker.start()
        self.addCleanup(broker.stop)
        r = Runner(registry, broker=broker.address, **settings).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        return broker, r

    def test_hello_delivery_ack_and_goodbye(self):
        reg = tether.Registry()

        @tether.on.create(*W, registry=reg, id="create", timeout=2)
        def created(spec, patch, name, **_):
            patch.metadata.labels["python.tether.dev/created"] = "true"
            return {"lang": "python", "size": spec["size"], "name": name}

        broker, r = self.serve(reg, window=4, grace=0)
        s = broker.connected()
        self.assertEqual((s.hello.handler, s.hello.instance_id, s.hello.window, s.hello.protocol_version),
                         ("test-handler", "test-instance", 4, "v1"))
        self.assertTrue(s.hello.sdk.startswith("tether-python/"))
        self.assertTrue(s.hello.HasField("grace"), "a zero grace is sent, not left to the default")
        self.assertEqual([(b.id, b.kind, b.timeout.seconds) for b in s.hello.bindings],
                         [("create", pb.BINDING_KIND_CREATE, 2)])
        ack = broker.deliver(delivery("create"))
        self.assertEqual(ack.outcome, pb.OUTCOME_OK)
        self.assertEqual(ack.patch, b'{"metadata":{"labels":{"python.tether.dev/created":"true"}}}')
        self.assertEqual(ack.result, b'{"lang":"python","name":"w1","size":3}')
        r.stop()
        self.assertIsNone(r.error)
        self.assertEqual([g.reason for g in broker.messages("goodbye")], ["instance shutting down"])
        self.assertTrue(broker.wait_ended(s), "the handler did not close its stream")
        self.assertEqual(len(broker.streams), 1, "no reconnect after a stop")

    def test_stopping_drains_deliveries_in_flight(self):
        reg, release, started = tether.Registry(), threading.Event(), threading.Event()

        @tether.on.create(*W, registry=reg, id="create")
        def slow(**_):
            started.set()
            release.wait(WAIT)
            return "done"

        broker, r = self.serve(reg)
        broker.connected()
        d = delivery("create")
        broker.deliver(d, wait=False)
        self.assertTrue(started.wait(WAIT))
        r.loop.call_soon_threadsafe(r.stopping.set)
        broker.wait_for(lambda: broker.messages("goodbye"), "goodbye")
        late = broker.deliver(delivery("create"))  # after goodbye: handed back
        self.assertEqual((late.outcome, late.message), (pb.OUTCOME_RETRY, "handler shutting down"))
        self.assertNotIn(d.id, broker.acks, "the slow delivery is still running")
        release.set()
        self.assertEqual(broker.ack(d.id).result, b'"done"')
        r.wait()
        self.assertIsNone(r.error)

    def test_the_window_is_honoured(self):
        reg, release = tether.Registry(), threading.Event()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: release.wait(WAIT) and None)
        broker, r = self.serve(reg, window=1)
        broker.connected()
        first = delivery("create")
        broker.deliver(first, wait=False)
        second = broker.deliver(delivery("create"))
        self.assertEqual((second.outcome, second.message), (pb.OUTCOME_RETRY, "handler window of 1 exceeded"))
        release.set()
        self.assertEqual(broker.ack(first.id).outcome, pb.OUTCOME_OK)

    def test_welcome_window_caps_the_hellos(self):
        reg, release = tether.Registry(), threading.Event()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: release.wait(WAIT) and None)
        broker, r = self.serve(reg, FakeBroker(window=1), window=8)
        broker.connected()
        broker.deliver(delivery("create"), wait=False)
        self.assertEqual(broker.deliver(delivery("create")).outcome, pb.OUTCOME_RETRY)
        release.set()

    def test_cancel_interrupts_an_async_function_and_is_acked(self):
        reg, cancelled = tether.Registry(), threading.Event()

        @tether.on.create(*W, registry=reg, id="create")
        async def stall(**_):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        broker, r = self.serve(reg)
        broker.connected()
        d = delivery("create")
        broker.deliver(d, wait=False)
        broker.send(pb.ConnectResponse(cancel=pb.Cancel(delivery_id=d.id, reason="timeout")))
        ack = broker.ack(d.id)
        self.assertEqual((ack.outcome, ack.message), (pb.OUTCOME_RETRY, "cancelled"))
        self.assertTrue(cancelled.is_set())

    def test_deliveries_that_do_not_fit_are_failed(self):
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: None)
        tether.timer(*W, registry=reg, id="tick", interval=1)(lambda **_: None)
        broker, r = self.serve(reg)
        broker.connected()
        cases = [
            (delivery("nope"), "binding 'nope' is not declared"),
            (delivery("create", kind=pb.DELIVERY_KIND_TICK), "does not take DELIVERY_KIND_TICK"),
            (delivery("tick", kind=pb.DELIVERY_KIND_CREATE), "is a timer binding"),
            (delivery("create", kind=99), "delivery kind 99 is not supported"),
            (delivery("create", object=b"{not json"), "malformed delivery"),
        ]
        for d, words in cases:
            with self.subTest(words):
                ack = broker.deliver(d)
                self.assertEqual(ack.outcome, pb.OUTCOME_FAIL)
                self.assertIn(words, ack.message)
        self.assertEqual(broker.deliver(delivery("create", kind=pb.DELIVERY_KIND_RESUME)).outcome, pb.OUTCOME_OK,
                         "a lifecycle delivery fits any lifecycle binding, as in the Go SDK")

    def test_a_rejected_hello_is_permanent(self):
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create", labels="a=(b")(lambda **_: None)
        broker, r = self.serve(reg, FakeBroker(reject=(grpc.StatusCode.INVALID_ARGUMENT,
                                                       'bindings[0] ("create").label_selector: bad')))
        r.wait()
        self.assertIsInstance(r.error, tether.RejectedError)
        self.assertEqual(r.error.code, "INVALID_ARGUMENT")
        self.assertIn("label_selector", str(r.error))
        self.assertEqual(len(broker.streams), 1, "not retried")

    def test_reconnects_after_the_stream_ends(self):
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: "ok")
        broker, r = self.serve(reg)
        broker.connected(1)
        broker.end(status=(grpc.StatusCode.UNAVAILABLE, "not the leader"))
        broker.connected(2)
        broker.end()  # a clean end without goodbye is a reconnect too
        broker.connected(3)
        self.assertEqual(broker.deliver(delivery("create")).result, b'"ok"')

    def test_several_brokers_are_tried_in_turn(self):
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: "ok")
        follower = FakeBroker(reject=(grpc.StatusCode.UNAVAILABLE, "not leading"))
        leader = FakeBroker()
        for b in (follower, leader):
            b.start()
            self.addCleanup(b.stop)
        r = Runner(reg, broker=(follower.address, leader.address), max_backoff=0.2).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        leader.connected(1)
        self.assertEqual(len(follower.streams), 1, "the first attempt goes to the first broker")
        leader.end(status=(grpc.StatusCode.UNAVAILABLE, "broker stopping"))
        leader.connected(2)
        self.assertEqual(len(follower.streams), 2, "the attempt after the leader's goes to the other broker")
        self.assertEqual(leader.deliver(delivery("create")).result, b'"ok"')

    def test_a_silent_broker_is_given_up_soon(self):
        # A connection that opens and is never answered (a Service that sent
        # the dial to a replica that is gone) is given up after
        # CONNECT_TIMEOUT, not gRPC's 20 s; the next attempt reaches a broker.
        silent = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(silent.close)
        held = []
        accepting = threading.Thread(target=lambda: held.append(silent.accept()), daemon=True)
        accepting.start()
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: "ok")
        leader = FakeBroker()
        leader.start()
        self.addCleanup(leader.stop)
        address = "127.0.0.1:%d" % silent.getsockname()[1]
        begin = time.monotonic()
        r = Runner(reg, broker=(address, leader.address), max_backoff=0.2).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        leader.connected(1)
        self.assertTrue(held, "the silent broker was never dialled")
        self.assertGreaterEqual(time.monotonic() - begin, runner.CONNECT_TIMEOUT * 0.9)

    def test_no_broker_is_a_config_error(self):
        for broker in ((), ("127.0.0.1:7443", "")):
            with self.assertRaises(runner.ConfigError):
                runner.targets(runner.Config(name="h", broker=broker))


class Hello(unittest.TestCase):
    def registry(self, **options):
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create", **options)(lambda **_: None)
        return reg

    def test_namespaces_scope_the_bindings(self):
        reg = self.registry()
        tether.on.update(*W, registry=reg, id="update", namespaces=["a", "b"])(lambda **_: None)
        msg = runner.hello(reg, runner.Config(name="h", namespaces=("b", "c")))
        self.assertEqual([list(b.namespaces) for b in msg.bindings], [["b", "c"], ["b"]])
        with self.assertRaises(runner.ConfigError) as caught:
            runner.hello(reg, runner.Config(name="h", namespaces=("c",)))
        self.assertIn("none of which", str(caught.exception))

    def test_configuration_errors(self):
        cases = [
            (tether.Registry(), {}, "no bindings"),
            (self.registry(), {"name": "Not_A_Name"}, "DNS-1123"),
            (self.registry(), {"window": 0}, "window"),
            (self.registry(), {"priority": -1}, "priority -1 is out of range 0..1000"),
            (self.registry(), {"priority": 1001}, "priority 1001 is out of range"),
            (self.registry(), {"insecure": True, "tls_ca_file": "ca.pem"}, "insecure"),
            (self.registry(namespaces=[f"n{i}" for i in range(100)]),
             {"namespaces": tuple(f"n{i}" for i in range(100))}, None),
        ]
        for reg, settings, words in cases:
            with self.subTest(words):
                cfg = runner.Config(**{"name": "h", **settings})
                if words is None:
                    runner.hello(reg, cfg)
                    continue
                with self.assertRaises(runner.ConfigError) as caught:
                    runner.hello(reg, cfg)
                self.assertIn(words, str(caught.exception))

    def test_an_unreadable_ca_file_is_a_configuration_error(self):
        with self.assertRaises(runner.ConfigError) as caught:
            runner.root_certificates(runner.Config(name="h", tls_ca_file="/no/such/ca.pem"))
        self.assertIn("/no/such/ca.pem", str(caught.exception))
        self.assertIsNone(runner.root_certificates(runner.Config(name="h")))

    def test_too_many_namespaces_in_all(self):
        reg = tether.Registry()
        for i in range(6):
            tether.on.create(*W, registry=reg, id=f"c{i}", namespaces=[f"n{j}" for j in range(100)])(lambda **_: 0)
        with self.assertRaises(runner.ConfigError) as caught:
            runner.hello(reg, runner.Config(name="h"))
        self.assertIn("600 namespaces", str(caught.exception))

    def test_grace_and_absent_release_after(self):
        msg = runner.hello(self.registry(), runner.Config(name="h", grace=45, absent_release_after=0))
        self.assertEqual((msg.grace.seconds, msg.HasField("absent_release_after"), msg.absent_release_after.seconds),
                         (45, True, 0))
        msg = runner.hello(self.registry(), runner.Config(name="h"))
        self.assertFalse(msg.HasField("grace") or msg.HasField("absent_release_after"))

    def test_backoff_doubles_with_jitter_up_to_its_max(self):
        b = runner.Backoff(1.0)
        steps = [b.next() for _ in range(6)]
        for delay, step in zip(steps, (0.1, 0.2, 0.4, 0.8, 1.0, 1.0)):
            self.assertTrue(step / 2 <= delay <= step, (delay, step))
        b.reset()
        self.assertLessEqual(b.next(), 0.1)


@unittest.skipUnless(shutil.which("openssl"), "openssl makes the test's certificate")
class Credentials(unittest.TestCase):
    def test_tls_with_a_bearer_token_read_from_its_file(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        key, cert, token = (os.path.join(tmp, n) for n in ("key.pem", "cert.pem", "token"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=broker.test", "-addext", "subjectAltName=DNS:broker.test"],
                       check=True, capture_output=True)
        with open(token, "w") as f:
            f.write("first-token\n")
        with open(key, "rb") as k, open(cert, "rb") as c:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        broker = FakeBroker(credentials=creds).start()
        self.addCleanup(broker.stop)
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: None)
        r = Runner(reg, broker=broker.address, insecure=False, token_file=token, tls_ca_file=cert,
                   tls_server_name="broker.test").start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        self.assertEqual(broker.connected(1).metadata.get("authorization"), "Bearer first-token")
        with open(token, "w") as f:
            f.write("rotated-token")
        broker.end()
        self.assertEqual(broker.connected(2).metadata.get("authorization"), "Bearer rotated-token",
                         "the token file is read again on every connection")

    def test_the_ca_file_is_read_again_on_every_connection(self):
        """The broker's CA is rotated: the handler's mounted CA file now
        holds the new CA, and the next connection trusts it."""
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        brokers, pems = [], []
        for n in ("a", "b"):
            key, cert = os.path.join(tmp, n + ".key"), os.path.join(tmp, n + ".crt")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                            "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=broker.test",
                            "-addext", "subjectAltName=DNS:broker.test"], check=True, capture_output=True)
            with open(key, "rb") as k, open(cert, "rb") as c:
                pem = c.read()
                broker = FakeBroker(credentials=grpc.ssl_server_credentials([(k.read(), pem)])).start()
            self.addCleanup(broker.stop)
            brokers.append(broker)
            pems.append(pem)
        ca_file = os.path.join(tmp, "ca.crt")
        with open(ca_file, "wb") as f:
            f.write(pems[0])
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: None)
        # The first connection goes to the broker of CA a, the next to b's.
        r = Runner(reg, broker=(brokers[0].address, brokers[1].address), insecure=False, token_file=self.token(tmp),
                   tls_ca_file=ca_file, tls_server_name="broker.test").start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        brokers[0].connected(1)
        with open(ca_file, "wb") as f:
            f.write(pems[1])
        brokers[0].end()
        brokers[1].connected(1)

    @staticmethod
    def token(tmp: str) -> str:
        path = os.path.join(tmp, "token")
        with open(path, "w") as f:
            f.write("a-token")
        return path

    def test_the_default_token_is_the_brokers_audience_where_mounted(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        broker_token, service_token = os.path.join(tmp, "tether.dev-token"), os.path.join(tmp, "sa-token")
        with open(service_token, "w") as f:
            f.write("service\n")
        got = []
        plugin = runner._TokenFile(broker_token, service_token)
        plugin(None, lambda md, err: got.append((md, err)))
        with open(broker_token, "w") as f:
            f.write("broker\n")
        plugin(None, lambda md, err: got.append((md, err)))
        self.assertEqual(got, [((("authorization", "Bearer service"),), None),
                               ((("authorization", "Bearer broker"),), None)],
                         "the ServiceAccount token until a token for the broker is mounted, then that one")
        missing = []
        runner._TokenFile(broker_token + "-missing", service_token + "-missing")(None, lambda md, err: missing.append(err))
        self.assertIsInstance(missing[0], OSError)
        self.assertEqual(runner.DEFAULT_TOKEN_FILES[0], "/var/run/secrets/tether.dev/token")


if __name__ == "__main__":
    unittest.main()
