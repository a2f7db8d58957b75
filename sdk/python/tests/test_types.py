"""Kopf's type names under tether, for ported annotations, and the
OperatorSettings startup functions change."""

import datetime
import logging
import typing
import unittest

import tether
from tether import runner
from tether.testing import FakeBroker

W = ("test.tether.dev", "v1", "widgets")
WIDGET = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
          "metadata": {"name": "w", "namespace": "ns", "uid": "u", "labels": {"app": "web"},
                       "annotations": {"note": "hi"}},
          "spec": {"size": 3}, "status": {"phase": "New"}}

# The type names of kopf/__init__.py that annotate functions' arguments
# (Kopf's examples use the first sixteen).
KOPF_TYPES = ("Spec", "Body", "Meta", "Status", "Labels", "Annotations", "Patch", "Diff", "Logger", "RawEvent",
              "Memo", "Index", "Store", "OperatorSettings", "Resource", "DiffItem", "RawBody", "RawEventType",
              "BodyEssence", "DiffOperation", "Reason", "UserInfo", "Operation", "DaemonStopped")


def runtime_type(alias):
    """The class a value of the alias is an instance of."""
    origin = typing.get_origin(alias) or alias
    if origin is typing.Literal:
        return tuple({type(a) for a in typing.get_args(alias)})
    if isinstance(alias, type) and issubclass(alias, str):
        return str  # a str enum: Tether passes the plain string, which equals its member
    if origin is typing.Union:
        return tuple(typing.get_origin(a) or a for a in typing.get_args(alias))
    return dict if typing.is_typeddict(alias) else origin


class KopfNames(unittest.TestCase):
    def test_every_name_is_exported(self):
        for name in KOPF_TYPES:
            with self.subTest(name):
                self.assertIn(name, tether.__all__)
                self.assertTrue(hasattr(tether, name))

    def test_the_annotations_name_what_is_passed(self):
        registry, seen = tether.Registry(), {}

        @tether.on.update(*W, registry=registry)
        def updated(body: tether.Body, spec: tether.Spec, meta: tether.Meta, status: tether.Status,
                    labels: tether.Labels, annotations: tether.Annotations, diff: tether.Diff,
                    logger: tether.Logger, patch: tether.Patch, resource: tether.Resource, **_):
            seen.update(body=body, spec=spec, meta=meta, status=status, labels=labels, annotations=annotations,
                        diff=diff, logger=logger, patch=patch, resource=resource)

        @tether.on.event(*W, registry=registry)
        def watched(event: tether.RawEvent, type: tether.RawEventType, reason: tether.Reason, **_):
            seen.update(event=event, type=type, reason=reason)

        new = {**WIDGET, "spec": {"size": 4}}
        self.assertEqual(FakeBroker(registry).update(WIDGET, new).outcome, "ok")
        self.assertEqual(FakeBroker(registry).event(new, "ADDED").outcome, "ok")
        hints = {**typing.get_type_hints(updated), **typing.get_type_hints(watched)}
        for name, value in seen.items():
            with self.subTest(name):
                self.assertIsInstance(value, runtime_type(hints[name]))
        self.assertIn(seen["type"], typing.get_args(tether.RawEventType))
        self.assertEqual(seen["diff"][0].operation, tether.DiffOperation.CHANGE)
        self.assertIsInstance(seen["diff"][0], tether.DiffItem)
        self.assertEqual(seen["reason"], tether.Reason.EVENT)

    def test_memo_keys_are_attributes(self):
        memo = tether.Memo(a=1)
        memo.b = 2
        self.assertEqual((memo.a, memo["b"], dict(memo)), (1, 2, {"a": 1, "b": 2}))
        del memo.a
        with self.assertRaises(AttributeError):
            memo.a
        with self.assertRaises(AttributeError):
            del memo.a

    def test_a_function_requiring_an_index_is_refused(self):
        with self.assertRaises(TypeError) as caught:
            tether.on.create(*W, registry=tether.Registry(), id="c")(lambda by_label: None)
        self.assertIn("'by_label'", str(caught.exception))
        self.assertTrue(issubclass(tether.Index, typing.Mapping))


class Settings(unittest.TestCase):
    def test_the_defaults_are_the_runners(self):
        s = tether.OperatorSettings()
        cfg = runner.Config(name="h")
        self.assertEqual(s.values(), {"window": cfg.window, "priority": cfg.priority, "grace": cfg.grace,
                                      "absent_release_after": cfg.absent_release_after,
                                      "drain_timeout": cfg.drain_timeout, "max_backoff": cfg.max_backoff})

    def test_fields_and_kopfs_names_for_them(self):
        s = tether.OperatorSettings()
        s.window = 4
        s.execution.max_workers = 8
        s.peering.priority = 3
        s.grace = datetime.timedelta(minutes=1)
        s.drain_timeout = 2
        s.absent_release_after = None
        self.assertEqual((s.window, s.execution.max_workers, s.priority, s.grace, s.drain_timeout),
                         (8, 8, 3, 60.0, 2.0))
        self.assertIsNone(s.absent_release_after)

    def test_what_tether_does_anyway_is_accepted(self):
        s = tether.OperatorSettings()
        s.peering.standalone = True
        s.posting.enabled = False
        self.assertEqual((s.peering.standalone, s.posting.enabled), (True, False))

    def test_settings_without_a_counterpart_are_errors(self):
        s = tether.OperatorSettings()
        cases = [
            (lambda: setattr(s.posting, "level", logging.WARNING), "settings.posting.level", "Events"),
            (lambda: setattr(s.posting, "enabled", True), "settings.posting.enabled", "Events"),
            (lambda: setattr(s.persistence, "finalizer", "x/y"), "settings.persistence.finalizer", "--name"),
            (lambda: setattr(s.peering, "standalone", False), "settings.peering.standalone", "by UID"),
            (lambda: setattr(s.admission, "strict", True), "settings.admission.strict", "--admission-listen"),
            (lambda: s.watching.server_timeout, "settings.watching.server_timeout", "broker watches"),
            (lambda: setattr(s, "posting", None), "settings.posting is a section", ""),
            (lambda: setattr(s, "windw", 3), "settings.windw: Tether has no such setting", "window, priority"),
            (lambda: s.windw, "settings.windw", "window"),
        ]
        for do, where, why in cases:
            with self.subTest(where):
                with self.assertRaises(tether.SettingsError) as caught:
                    do()
                self.assertIn(where, str(caught.exception))
                self.assertIn(why, str(caught.exception))
                self.assertIsInstance(caught.exception, AttributeError)
                self.assertIsInstance(caught.exception, tether.PermanentError)

    def test_bad_values_are_type_errors(self):
        s = tether.OperatorSettings()
        for name, value in (("window", "8"), ("window", True), ("grace", "30s"), ("drain_timeout", None)):
            with self.subTest(name=name, value=value), self.assertRaises(TypeError):
                setattr(s, name, value)
        with self.assertRaises(ValueError):
            s.max_backoff = -1

    def test_frozen_settings_refuse_changes(self):
        s = tether.OperatorSettings(window=2)
        s.freeze()
        with self.assertRaises(tether.SettingsError) as caught:
            s.window = 3
        self.assertIn("only in startup functions", str(caught.exception))
        self.assertEqual(s.window, 2)


if __name__ == "__main__":
    unittest.main()
