"""Kopf's top-level names under tether: each is there, or an AttributeError
says why it is not and what to do instead."""

import unittest

import tether

# kopf.__all__, the names a ported operator may reach for
KOPF = """
on lifecycles register execute daemon timer index configure LogFormat login_via_pykube login_via_client
login_via_async_client login_with_kubeconfig login_with_service_account LoginError ConnectionInfo
AiohttpSession event info warn exception spawn_tasks run_tasks operator run adopt label get_default_lifecycle
set_default_lifecycle build_object_reference build_owner_reference append_owner_reference remove_owner_reference
harmonize_naming adjust_namespace not_ all_ any_ none_ get_default_registry set_default_registry
PRESENT ABSENT AdmissionError WebhookClientConfigService WebhookClientConfig Operation UserInfo Headers SSLPeer
WebhookFn WebhookServerProtocol WebhookServer WebhookMinikubeServer WebhookDockerDesktopServer WebhookNgrokTunnel
WebhookAutoServer WebhookAutoTunnel PermanentError TemporaryError HandlerTimeoutError HandlerRetriesError
OperatorRegistry OperatorSettings DiffBaseStorage AnnotationsDiffBaseStorage StatusDiffBaseStorage
MultiDiffBaseStorage ProgressRecord ProgressStorage AnnotationsProgressStorage StatusProgressStorage
MultiProgressStorage SmartProgressStorage RawEventType RawEvent RawBody Status Spec Meta Labels Annotations
ObjectReference OwnerReference Memo Index Store ObjectLogger LocalObjectLogger FieldSpec FieldPath DiffItem
DiffOperation Diff Reason Patch HandlerId PatchFn DaemonStopped DaemonStoppingReason SyncDaemonStopperChecker
AsyncDaemonStopperChecker Resource EVERYTHING Body BodyEssence Logger ErrorsMode subhandler
""".split()


class KopfNames(unittest.TestCase):
    def test_every_kopf_name_is_there_or_says_why_not(self):
        for name in KOPF:
            with self.subTest(name=name):
                try:
                    getattr(tether, name)
                except AttributeError as e:
                    self.assertIn(f"kopf.{name} has no counterpart in Tether: ", str(e))

    def test_the_reasons_point_to_what_to_do(self):
        for name, words in (("lifecycles", "no order of handlers"),
                            ("login_via_client", "--token-file"),
                            ("WebhookClientConfig", "no server, certificate or tunnel"), ("EVERYTHING", "one resource"),
                            ("HandlerRetriesError", "retries=")):
            with self.subTest(name=name):
                with self.assertRaises(AttributeError) as caught:
                    getattr(tether, name)
                self.assertIn(words, str(caught.exception))
        with self.assertRaises(AttributeError) as caught:
            tether.on.this
        self.assertIn("kopf.on.this has no counterpart", str(caught.exception))
        self.assertIn("use tether.subhandler", str(caught.exception))

    def test_other_names_are_plainly_missing(self):
        self.assertFalse(hasattr(tether, "no_such_name"))
        with self.assertRaises(AttributeError) as caught:
            tether.no_such_name
        self.assertEqual(str(caught.exception), "module 'tether' has no attribute 'no_such_name'")
        self.assertFalse(hasattr(tether.on, "no_such_name"))

    def test_kopfs_registry_name_is_the_registry(self):
        self.assertIs(tether.OperatorRegistry, tether.Registry)
        self.assertEqual(tether.build_owner_reference({"kind": "Widget", "metadata": {"name": "w", "uid": "u"}}),
                         {"kind": "Widget", "name": "w", "uid": "u", "controller": True, "blockOwnerDeletion": True})
