"""Kopf's webhook servers and the webhook arguments headers and sslpeer:
accepted, saying that the broker serves the webhooks."""

import unittest

import tether
from tether import testing


class WebhookSettings(unittest.TestCase):
    def test_a_server_and_managed_are_accepted_with_a_line_that_says_the_broker_serves(self):
        settings = tether.OperatorSettings()
        with self.assertLogs("tether.settings", "INFO") as logs:
            settings.admission.server = tether.WebhookAutoServer(port=1234)
            settings.admission.managed = "auto.kopf.dev"
        self.assertEqual(len(logs.output), 2)
        self.assertIn("the broker serves the webhooks", logs.output[0])
        self.assertIn("settings.admission.managed is ignored", logs.output[1])

    def test_other_admission_settings_are_still_refused(self):
        with self.assertRaises(tether.SettingsError):
            tether.OperatorSettings().admission.strict = True


class WebhookArguments(unittest.TestCase):
    def test_headers_and_sslpeer_are_passed_empty(self):
        registry, seen = tether.Registry(), {}

        @tether.on.validate("widgets.test.tether.dev", registry=registry)
        def check(headers: tether.Headers, sslpeer: tether.SSLPeer, warnings, **_):
            seen.update(headers=headers, sslpeer=sslpeer)
            warnings.append(headers.get("User-Agent", "(unidentified)"))

        with testing.FakeBroker(registry) as broker:
            got = broker.validate({"apiVersion": "test.tether.dev/v1", "kind": "Widget",
                                   "metadata": {"name": "w", "namespace": "ns"}})
        self.assertTrue(got.allowed)
        self.assertEqual(seen, {"headers": {}, "sslpeer": {}})
        self.assertEqual(list(got.warnings), ["(unidentified)"])


if __name__ == "__main__":
    unittest.main()
