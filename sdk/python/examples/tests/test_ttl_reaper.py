"""The TTL reaper and its webhook, through tether.testing's FakeBroker and an
in-memory Kubernetes API; the same cases as the Go example's ttl_test.go,
ttlwebhook_test.go and sdktest_test.go."""

import datetime
import unittest

import kube
import tether
import ttl_reaper
from tether.testing import FAIL, OK, FakeBroker

from .fake_kube import FakeKube

CREATED = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)


def secret(ttl, age=10.0, uid="u1"):
    """A Secret ns/s with this ttl, created age seconds ago."""
    created = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=age)
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "uid": uid, "annotations": {ttl_reaper.TTL: ttl},
                         "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")}}


class Durations(unittest.TestCase):
    def test_parse_ttl(self):
        for text, want in {"3s": 3, "1h30m": 5400, "0s": 0}.items():
            self.assertEqual(ttl_reaper.parse_ttl(text), want)
        for text in ("", "soon", "3", "-1s", "1d"):
            with self.assertRaises(tether.PermanentError, msg=text):
                ttl_reaper.parse_ttl(text)

    def test_expired(self):
        for ttl, after, want in [(60, 59, False), (60, 60, True), (60, 3600, True), (0, 0, True),
                                 (3600, -60, False)]:  # clock skew: not yet
            now = CREATED + datetime.timedelta(seconds=after)
            self.assertIs(ttl_reaper.expired(CREATED, ttl, now), want, (ttl, after))

    def test_check_ttl(self):
        for text, want in {
            "1h": "", "30m": "", "1h30m": "", "90s": "", "1ns": "",
            "banana": 'ttl.tether.dev/ttl: "banana" is not a duration such as 1h or 30m',
            "": 'ttl.tether.dev/ttl: "" is not a duration',
            "3": '"3" is not a duration', "1d": '"1d" is not a duration', " 1h": '" 1h" is not a duration',
            "0s": 'ttl.tether.dev/ttl: "0s" is not positive', "0": '"0" is not positive',
            "-5m": '"-5m" is not positive',
        }.items():
            got = ttl_reaper.check_ttl(text)
            if want:
                self.assertIn(want, got, text)
            else:
                self.assertEqual(got, "", text)


class Bindings(unittest.TestCase):
    def test_the_timer_never_holds(self):
        spec = tether.get_default_registry().get("ttl-secrets").spec
        self.assertIs(spec.finalizer, tether.NONE)
        self.assertEqual(spec.annotations, ((ttl_reaper.TTL, "present", ""),))
        self.assertEqual(spec.interval, ttl_reaper.INTERVAL)

    def test_the_webhook_asks_only_about_secrets_with_a_ttl(self):
        spec = tether.get_default_registry().get("validate-ttl").spec
        self.assertEqual(spec.operations, ("CREATE", "UPDATE"))
        self.assertEqual(spec.annotations, ((ttl_reaper.TTL, "present", ""),))
        self.assertEqual(spec.match_conditions, (
            ("has-ttl", 'has(object.metadata.annotations) && "ttl.tether.dev/ttl" in object.metadata.annotations'),))
        self.assertEqual(spec.failure_policy, "", "the broker's default: fail open")


class Deliveries(unittest.TestCase):
    def setUp(self):
        self.broker = FakeBroker()
        self.kube = FakeKube()
        self.addCleanup(setattr, ttl_reaper, "api", ttl_reaper.api)
        ttl_reaper.api = self.kube

    def tick(self, obj):
        self.kube.add(kube.SECRETS, obj)
        return self.broker.tick(obj, binding="ttl-secrets")

    def test_only_expired_secrets_are_deleted(self):
        for ttl, deleted in (("5s", True), ("1h", False)):
            got = self.tick(secret(ttl, age=10))
            self.assertEqual(got.outcome, OK, got.message)
            self.assertIs(self.kube.object(kube.SECRETS, "ns", "s") is None, deleted, ttl)

    def test_a_bad_ttl_fails_for_good(self):
        got = self.tick(secret("banana"))
        self.assertEqual(got.outcome, FAIL)
        self.assertIn('"banana" is not a Go duration', got.message)
        self.assertEqual(self.kube.calls, [], "a Secret with a bad ttl was touched")

    def test_a_secret_already_gone_is_fine(self):
        got = self.broker.tick(secret("1s", age=60), binding="ttl-secrets")
        self.assertEqual(got.outcome, OK, got.message)

    def test_a_secret_recreated_under_the_name_stays(self):
        self.kube.add(kube.SECRETS, secret("1h", age=0, uid="u2"))
        got = self.broker.tick(secret("1s", age=60, uid="u1"), binding="ttl-secrets")
        self.assertEqual(got.outcome, OK, got.message)
        self.assertEqual(self.kube.object(kube.SECRETS, "ns", "s")["metadata"]["uid"], "u2")

    def test_the_webhook_refuses_a_bad_ttl_with_its_message(self):
        for ttl, allowed in (("banana", False), ("-1h", False), ("0s", False), ("10m", True)):
            v = self.broker.validate(secret(ttl), binding="validate-ttl")
            self.assertEqual((v.outcome, v.allowed), (OK, allowed), ttl)
            if not allowed:
                # A refusal, not a failure (which the failure policy would admit).
                self.assertEqual((v.code, v.message), (403, ttl_reaper.check_ttl(ttl)))


if __name__ == "__main__":
    unittest.main()
