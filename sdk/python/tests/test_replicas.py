"""Every broker replica ([admission.every]): which addresses yield several
replicas, and the runner keeping a session to each for a handler that
answers reviews, against fake brokers on localhost gRPC ports."""

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest
from unittest import mock

import grpc

import tether
from tether import replicas, runner
from tether.v1 import broker_pb2 as pb

from broker_fake import WAIT, FakeBroker, Runner
from test_runner import OBJECT, REF, W, delivery

EVERY = pb.CAPABILITY_EVERY_REPLICA


def review(binding="check"):
    return pb.Delivery(binding_id=binding, kind=pb.DELIVERY_KIND_ADMISSION, attempt=1, ref=REF, object=OBJECT,
                       admission=pb.AdmissionRequest(uid="review-1", operation=pb.ADMISSION_OPERATION_CREATE))


def reviewer(reviewed=None):
    """A registry with a validate binding (check) that allows, counting
    what it reviews, and a create binding (create)."""
    reg = tether.Registry()

    @tether.on.validate(*W, registry=reg, id="check")
    def check(name, **_):
        if reviewed is not None:
            reviewed.append(name)

    tether.on.create(*W, registry=reg, id="create")(lambda **_: "created")
    return reg


class Addresses(unittest.TestCase):
    def test_only_a_dns_name_is_looked_up_for_every_replica(self):
        for target, want in {
            "tether-broker-replicas.tether-system.svc:7443": ("tether-broker-replicas.tether-system.svc", "7443"),
            "dns:///tether-broker-replicas.tether-system.svc:7443": ("tether-broker-replicas.tether-system.svc",
                                                                     "7443"),
            "10.0.0.7:7443": None,
            "[fd00::7]:7443": None,
            "localhost:7443": None,
            "passthrough:///bufnet": None,
            "unix:///run/tether.sock": None,
            "ipv4:10.0.0.7:7443": None,
            "tether-broker": None,  # no port
        }.items():
            with self.subTest(target):
                self.assertEqual(replicas.dns_target(target), want)

    def test_lookup_gives_every_address_but_loopback_ones_sorted(self):
        infos = [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.9", 7443)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 7443)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 7443)),  # the same, twice
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 7443)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::7", 7443, 0, 0)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 7443, 0, 0)),
        ]
        got = asyncio.run(self._lookup(infos))
        self.assertEqual(got, ["10.0.0.7:7443", "10.0.0.9:7443", "[fd00::7]:7443"])

    def test_a_name_with_loopback_addresses_only_has_none(self):
        infos = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 7443)),
                 (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 7443, 0, 0))]
        with self.assertRaises(OSError):
            asyncio.run(self._lookup(infos))

    @staticmethod
    async def _lookup(infos):
        async def getaddrinfo(host, port, **_):
            return infos
        with mock.patch.object(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo):
            return await replicas.lookup("tether-broker-replicas", "7443", 1.0)

    def test_which_handlers_and_addresses_get_a_set(self):
        reviews = runner.hello(reviewer(), runner.Config(name="h"))
        lifecycle_only = tether.Registry()
        tether.on.create(*W, registry=lifecycle_only, id="create")(lambda **_: None)
        no_reviews = runner.hello(lifecycle_only, runner.Config(name="h"))
        for hello, brokers, want in (
            (reviews, ("127.0.0.1:1", "127.0.0.1:2"), "127.0.0.1:1, 127.0.0.1:2"),
            (reviews, ("127.0.0.1:1", "127.0.0.1:1"), None),  # one broker, twice
            (reviews, ("127.0.0.1:1",), None),
            (reviews, ("localhost:7443",), None),
            (no_reviews, ("127.0.0.1:1", "127.0.0.1:2"), None),
        ):
            with self.subTest(brokers=brokers, reviews=hello is reviews):
                got = asyncio.run(replicas.replica_set(hello, brokers, 1.0))
                self.assertEqual(got and got.broker, want)

    def test_a_name_with_several_addresses_gets_a_set_dialled_by_address(self):
        async def lookup(host, port, timeout):
            return ["10.0.0.7:7443", "10.0.0.9:7443"]
        hello = runner.hello(reviewer(), runner.Config(name="h"))
        with mock.patch.object(replicas, "lookup", lookup):
            got = asyncio.run(replicas.replica_set(hello, ("tether-broker-replicas.tether-system.svc:7443",), 1.0))
        self.assertEqual((got.broker, got.authority), ("tether-broker-replicas.tether-system.svc:7443",
                                                       "tether-broker-replicas.tether-system.svc:7443"))


class EveryReplica(unittest.TestCase):
    def brokers(self, *fakes):
        for b in fakes:
            b.start()
            self.addCleanup(b.stop)
        return fakes

    def run_on(self, reg, broker, **settings):
        r = Runner(reg, broker=broker, **settings).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        return r

    def test_a_handler_with_reviews_keeps_a_session_to_every_replica(self):
        leader, follower = self.brokers(FakeBroker(), FakeBroker(reviews_only=True))
        reviewed = []
        self.run_on(reviewer(reviewed), (leader.address, follower.address))
        for b in (leader, follower):
            s = b.connected()
            self.assertIn(EVERY, s.hello.capabilities, f"the Hello to {b.address}")
            ack = b.deliver(review())
            self.assertEqual((ack.outcome, ack.admission.allowed), (pb.OUTCOME_OK, True))
        self.assertEqual(reviewed, ["w1", "w1"])
        self.assertEqual(leader.deliver(delivery("create")).result, b'"created"')
        ack = follower.deliver(delivery("create"))
        self.assertEqual(ack.outcome, pb.OUTCOME_FAIL, "a lifecycle delivery on a session for reviews only")
        self.assertIn("reviews only", ack.message)

    def test_a_followers_reviews_do_not_wait_for_the_leaders_work(self):
        # A window of 1: the leader's sync create takes the window's one
        # thread until released; the follower's review needs one of its own.
        leader, follower = self.brokers(FakeBroker(), FakeBroker(reviews_only=True))
        release = threading.Event()
        reg = tether.Registry()
        tether.on.validate(*W, registry=reg, id="check")(lambda **_: None)
        tether.on.create(*W, registry=reg, id="create")(lambda **_: release.wait(WAIT))
        self.run_on(reg, (leader.address, follower.address), window=1)
        self.addCleanup(release.set)  # before the runner stops, which waits for the create
        leader.connected()
        follower.connected()
        leader.deliver(delivery("create"), wait=False)
        d = review()
        d.id = "review-while-busy"
        follower.deliver(d, wait=False)
        ack = follower.wait_for(lambda: follower.acks.get(d.id), "the follower's review answered while the leader's "
                                "create runs", timeout=3.0)
        self.assertEqual(ack.outcome, pb.OUTCOME_OK)

    def test_stopping_says_goodbye_on_every_session(self):
        leader, follower = self.brokers(FakeBroker(), FakeBroker(reviews_only=True))
        r = self.run_on(reviewer(), (leader.address, follower.address))
        sessions = [leader.connected(), follower.connected()]
        # A session stopped before its Welcome is read ends with no Goodbye
        # (there is nothing to drain): each answers a review first, which
        # it reads after its Welcome.
        for b in (leader, follower):
            self.assertEqual(b.deliver(review()).outcome, pb.OUTCOME_OK)
        r.stop()
        self.assertIsNone(r.error)
        for b, s in zip((leader, follower), sessions):
            self.assertTrue(b.wait_ended(s), f"the session with {b.address} did not end")
            self.assertEqual(len(b.messages("goodbye")), 1, f"no goodbye to {b.address}")

    def test_a_handler_without_reviews_keeps_one_session(self):
        a, b = self.brokers(FakeBroker(), FakeBroker())
        reg = tether.Registry()
        tether.on.create(*W, registry=reg, id="create")(lambda **_: "ok")
        self.run_on(reg, (a.address, b.address))
        s = a.connected()
        self.assertNotIn(EVERY, s.hello.capabilities)
        self.assertEqual(a.deliver(delivery("create")).result, b'"ok"')
        self.assertEqual(len(b.streams), 0, "the second broker got a session while the first kept its own")

    def test_one_address_keeps_one_session_without_the_capability(self):
        (b,) = self.brokers(FakeBroker())
        self.run_on(reviewer(), b.address)
        self.assertNotIn(EVERY, b.connected().hello.capabilities)

    def test_a_reviews_only_session_ended_by_its_replica_leading_reconnects_at_once(self):
        leader, follower = self.brokers(FakeBroker(), FakeBroker(reviews_only=True))
        with mock.patch.object(runner, "RECONNECT_MIN", 3600.0):  # any backoff would outlast the test
            self.run_on(reviewer(), (leader.address, follower.address), max_backoff=3600.0)
            leader.connected()
            follower.connected(1)
            follower.reviews_only = False  # it leads now
            follower.end(status=(grpc.StatusCode.UNAVAILABLE, "this broker replica leads now"))
            follower.connected(2)
        self.assertEqual(follower.deliver(delivery("create")).result, b'"created"')

    def test_replicas_that_come_and_go_get_and_lose_their_sessions(self):
        a, b, c = self.brokers(FakeBroker(), FakeBroker(reviews_only=True), FakeBroker(reviews_only=True))
        answer = [a.address, b.address]

        async def lookup(host, port, timeout):
            return list(answer)
        with mock.patch.object(replicas, "lookup", lookup):
            self.run_on(reviewer(), "tether-broker-replicas.test:7443")
            a.connected()
            gone = b.connected()
            # Dropped before its Welcome is read, a session ends with no
            # Goodbye: the review shows it was read.
            self.assertEqual(b.deliver(review()).outcome, pb.OUTCOME_OK)
            answer[:] = [a.address, c.address]
            a.end(status=(grpc.StatusCode.UNAVAILABLE, "broker stopping"))  # a session's end: looked up at once
            c.connected()
            self.assertTrue(b.wait_ended(gone), "the session of a replica gone did not end")
            self.assertEqual(len(b.messages("goodbye")), 1, "the session of a replica gone ended without goodbye")
            a.connected(2)
        self.assertEqual(c.deliver(review()).outcome, pb.OUTCOME_OK)

    def test_a_rejection_by_one_replica_stops_every_session(self):
        leader, follower = self.brokers(FakeBroker(), FakeBroker(reviews_only=True))
        r = self.run_on(reviewer(), (leader.address, follower.address))
        kept = leader.connected()
        follower.connected()
        follower.reject = (grpc.StatusCode.PERMISSION_DENIED, "rights withdrawn")
        follower.end(status=(grpc.StatusCode.UNAVAILABLE, "broker stopping"))
        r.wait()
        self.assertIsInstance(r.error, tether.RejectedError)
        self.assertTrue(leader.wait_ended(kept), "the leader's session outlived the rejection")


@unittest.skipUnless(shutil.which("openssl"), "openssl makes the test's certificate")
class Verified(unittest.TestCase):
    def test_tls_verifies_the_name_whichever_address_is_dialled(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        key, cert, token = (os.path.join(tmp, n) for n in ("key.pem", "cert.pem", "token"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=replicas.test",
                        "-addext", "subjectAltName=DNS:replicas.test"], check=True, capture_output=True)
        with open(token, "w") as f:
            f.write("a-token")
        with open(key, "rb") as k, open(cert, "rb") as c:
            pair = (k.read(), c.read())
        leader = FakeBroker(credentials=grpc.ssl_server_credentials([pair])).start()
        follower = FakeBroker(credentials=grpc.ssl_server_credentials([pair]), reviews_only=True).start()
        for b in (leader, follower):
            self.addCleanup(b.stop)

        async def lookup(host, port, timeout):
            self.assertEqual((host, port), ("replicas.test", "7443"))
            return [leader.address, follower.address]  # addresses, which the certificate does not name
        with mock.patch.object(replicas, "lookup", lookup):
            r = Runner(reviewer(), broker="replicas.test:7443", insecure=False, token_file=token,
                       tls_ca_file=cert).start()
            self.addCleanup(lambda: r.done.is_set() or r.stop())
            for b in (leader, follower):
                self.assertIn(EVERY, b.connected().hello.capabilities)
        self.assertEqual(follower.deliver(review()).outcome, pb.OUTCOME_OK)


class Indices(unittest.TestCase):
    def test_without_index_bindings_nothing_is_waited_for(self):
        self.assertTrue(reviewer().indices.complete.is_set())
