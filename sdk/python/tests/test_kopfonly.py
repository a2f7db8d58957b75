"""Kopf's top-level names under tether: each is there, or an AttributeError
says why it is not and what to do instead."""

import os
import re
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
AsyncDaemonStopperChecker Resource EVERYTHING Body BodyEssence Logger ErrorsMode subhandler WebhookK3dServer
""".split()
# kopf.on's decorators, and the groups of kopf.OperatorSettings
KOPF_ON = "startup cleanup login probe validate mutate resume create update delete field index event daemon timer subhandler"
SETTINGS = "process posting peering watching queueing scanning admission execution background networking persistence"
FROM_KOPF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "from-kopf.md")


def name_table() -> dict[str, str]:
    """docs/from-kopf.md's table of Kopf's names: name -> status."""
    text = open(FROM_KOPF).read()
    section = text.split("## Kopf's API, name by name", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `(?:kopf\.)?([\w.]+?)(?:\.\*)?` \| (supported|mapped|refused) \|", section, re.M))


class KopfNames(unittest.TestCase):
    def test_every_kopf_name_is_there_or_says_why_not(self):
        for name in KOPF:
            with self.subTest(name=name):
                try:
                    getattr(tether, name)
                except AttributeError as e:
                    self.assertIn(f"kopf.{name} has no counterpart in Tether: ", str(e))

    def test_the_docs_have_a_row_for_every_kopf_name_that_says_what_tether_does(self):
        table = name_table()
        wanted = KOPF + ["harmonize_naming", "adjust_namespace"] + ["on." + n for n in KOPF_ON.split()] + [
            "settings." + g for g in SETTINGS.split()]
        self.assertEqual(sorted(set(table) - set(wanted)), [], "rows for names this test does not list")
        for name in wanted:
            with self.subTest(name=name):
                self.assertIn(name, table, "no row in docs/from-kopf.md")
                if name.startswith("settings."):
                    continue
                module, attr = (tether.on, name[3:]) if name.startswith("on.") else (tether, name)
                if table[name] == "refused":
                    with self.assertRaises(AttributeError) as caught:
                        getattr(module, attr)
                    self.assertIn("has no counterpart in Tether: ", str(caught.exception))
                else:
                    self.assertTrue(callable(getattr(module, attr)) or getattr(module, attr) is not None)

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
