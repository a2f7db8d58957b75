"""Kopf's keyword arguments: only those a function declares, all with
**kwargs, and an error at registration for one Tether cannot pass."""

import datetime
import unittest

import tether
from tether import kwargs
from tether.bindings import Kind
from tether.testing import FakeBroker

W = ("test.tether.dev", "v1", "widgets")


def widget(name="w", size=3, **extra):
    obj = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "ns", "uid": "uid-" + name, "labels": {"app": "web"},
                        "annotations": {"note": "hi"}},
           "spec": {"size": size}, "status": {"phase": "New"}}
    obj.update(extra)
    return obj


class Injection(unittest.TestCase):
    def setUp(self):
        self.r = tether.Registry()
        self.broker = FakeBroker(self.r)
        self.seen = {}

    def test_only_declared_arguments_are_passed(self):
        @tether.on.create(*W, registry=self.r)
        def created(name, spec):
            self.seen.update(name=name, spec=spec)

        self.assertEqual(self.broker.create(widget()).outcome, "ok")
        self.assertEqual(self.seen, {"name": "w", "spec": {"size": 3}})

    def test_var_keyword_gets_every_argument_of_the_kind(self):
        @tether.on.create(*W, registry=self.r)
        def created(**kw):
            self.seen.update(kw)

        self.broker.create(widget())
        self.assertEqual(set(self.seen), set(kwargs.names(Kind.CREATE)))
        self.assertEqual(self.seen["body"]["metadata"]["name"], "w")
        self.assertEqual((self.seen["namespace"], self.seen["uid"]), ("ns", "uid-w"))
        self.assertEqual(self.seen["meta"]["labels"], {"app": "web"})
        self.assertEqual((self.seen["labels"], self.seen["annotations"]), ({"app": "web"}, {"note": "hi"}))
        self.assertEqual(self.seen["status"], {"phase": "New"})
        self.assertEqual(self.seen["resource"], tether.Resource("test.tether.dev", "v1", "widgets", "Widget", True))
        self.assertEqual((self.seen["reason"], self.seen["retry"]), ("create", 0))
        self.assertEqual((self.seen["old"], self.seen["new"], self.seen["diff"]), (None, None, ()))
        self.assertIsInstance(self.seen["patch"], tether.Patch)
        self.assertIsInstance(self.seen["started"], datetime.datetime)
        self.assertIsNotNone(self.seen["started"].tzinfo)

    def test_retry_counts_previous_attempts(self):
        @tether.on.create(*W, registry=self.r)
        def created(retry, **_):
            self.seen["retry"] = retry

        self.broker.create(widget(), attempt=3)
        self.assertEqual(self.seen["retry"], 2)

    def test_update_has_old_new_and_diff(self):
        @tether.on.update(*W, registry=self.r)
        def updated(old, new, diff, reason, **_):
            self.seen.update(old=old, new=new, diff=diff, reason=reason)

        self.broker.update(widget(size=3), widget(size=4))
        self.assertEqual(self.seen["reason"], "update")
        self.assertEqual(self.seen["old"]["spec"], {"size": 3})
        self.assertEqual(self.seen["new"]["spec"], {"size": 4})
        self.assertEqual(self.seen["diff"], (tether.DiffItem("change", ("spec", "size"), 3, 4),))

    def test_field_has_the_field_values(self):
        @tether.on.field(*W, field="spec.size", registry=self.r)
        def resized(old, new, **_):
            self.seen.update(old=old, new=new)

        self.broker.field(widget(size=3), widget(size=5))
        self.assertEqual(self.seen, {"old": 3, "new": 5})

    def test_event_has_type_and_event(self):
        @tether.on.event(*W, registry=self.r)
        def watched(type, event, **_):
            self.seen.update(type=type, event=event)

        self.broker.event(widget(), "DELETED")
        self.assertEqual(self.seen["type"], "DELETED")
        self.assertEqual(self.seen["event"]["object"]["metadata"]["name"], "w")

    def test_a_tick_has_its_scheduled_time(self):
        @tether.timer(*W, interval=1, registry=self.r)
        def ticked(scheduled, started, reason, **_):
            self.seen.update(scheduled=scheduled, started=started, reason=reason)

        due = datetime.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
        self.assertEqual(self.broker.tick(widget(), scheduled=due).outcome, "ok")
        self.assertEqual((self.seen["scheduled"], self.seen["reason"]), (due, "tick"))
        self.assertEqual(self.seen["scheduled"].tzinfo, datetime.timezone.utc)
        # Without one, FakeBroker has the tick due now.
        self.broker.tick(widget())
        lateness = self.seen["started"] - self.seen["scheduled"]
        self.assertLess(abs(lateness.total_seconds()), 5)

    def test_scheduled_is_for_timers_only(self):
        self.assertIn("scheduled", kwargs.names(Kind.TIMER))
        for kind in (Kind.CREATE, Kind.DAEMON, Kind.VALIDATE):
            self.assertNotIn("scheduled", kwargs.names(kind))

        def created(scheduled):
            pass

        with self.assertRaises(TypeError) as caught:
            tether.on.create(*W, registry=self.r)(created)
        self.assertIn("does not pass to create functions", str(caught.exception))

    def test_absent_parts_are_empty_dicts(self):
        @tether.on.create(*W, registry=self.r)
        def created(spec, status, labels, **_):
            self.seen.update(spec=spec, status=status, labels=labels)

        self.broker.create({"apiVersion": "test.tether.dev/v1", "kind": "Widget", "metadata": {"name": "bare"}})
        self.assertEqual(self.seen, {"spec": {}, "status": {}, "labels": {}})

    def test_parameters_with_defaults_that_tether_does_not_pass_keep_them(self):
        @tether.on.create(*W, registry=self.r)
        def created(name, settings=None, **_):
            self.seen.update(name=name, settings=settings)

        self.broker.create(widget())
        self.assertEqual(self.seen, {"name": "w", "settings": None})


class Refused(unittest.TestCase):
    def register(self, kind_decorator, fn, **options):
        kind_decorator(*W, registry=tether.Registry(), **options)(fn)

    def test_kopf_only_arguments_say_why(self):
        def created(runtime, **_):
            pass

        with self.assertRaises(TypeError) as caught:
            self.register(tether.on.create, created)
        self.assertIn("'runtime'", str(caught.exception))
        self.assertIn("use started", str(caught.exception))

    def test_an_argument_of_another_kind_is_refused(self):
        def created(stopped):
            pass

        with self.assertRaises(TypeError) as caught:
            self.register(tether.on.create, created)
        self.assertIn("does not pass to create functions", str(caught.exception))

    def test_positional_only_parameters_are_refused(self):
        def created(body, /):
            pass

        with self.assertRaises(TypeError) as caught:
            self.register(tether.on.create, created)
        self.assertIn("positional-only", str(caught.exception))

    def test_generators_are_refused(self):
        def created(**_):
            yield 1

        with self.assertRaises(TypeError):
            self.register(tether.on.create, created)

    def test_daemons_and_reviews_have_their_own(self):
        self.assertIn("stopped", kwargs.names(Kind.DAEMON))
        self.assertNotIn("stopped", kwargs.names(Kind.TIMER))
        for name in ("operation", "dryrun", "warnings", "userinfo", "subresource", "request"):
            self.assertIn(name, kwargs.names(Kind.VALIDATE))
            self.assertIn(name, kwargs.names(Kind.MUTATE))


if __name__ == "__main__":
    unittest.main()


class LazyDecoding(unittest.TestCase):
    """A function that takes nothing read from the object (an ack-only tick,
    say) is called without the object being decoded: most of the cost of
    such a delivery."""

    def test_the_object_is_decoded_only_for_a_function_that_reads_it(self):
        from tether.delivery import MalformedDelivery, decode
        from tether.v1 import broker_pb2 as pb

        r = tether.Registry()
        tether.timer(*W, registry=r, id="uid-only", interval=1)(lambda uid, scheduled: None)
        tether.timer(*W, registry=r, id="labels", interval=1)(lambda labels: None)
        tether.timer(*W, registry=r, id="everything", interval=1)(lambda **_: None)
        ref = pb.ObjectRef(namespace="ns", name="w", uid="uid-w")
        d = pb.Delivery(kind=pb.DELIVERY_KIND_TICK, ref=ref, object=b"{not json")
        cause = decode(d, r.get("uid-only").spec, r.get("uid-only").wants)
        self.assertEqual((cause.uid, cause.name, cause.body), ("uid-w", "w", {}))
        for reads in ("labels", "everything"):
            with self.subTest(reads):
                with self.assertRaises(MalformedDelivery):
                    decode(d, r.get(reads).spec, r.get(reads).wants)
        d.object = b'{"metadata": {"labels": {"app": "web"}}}'
        labels = decode(d, r.get("labels").spec, r.get("labels").wants).body["metadata"]["labels"]
        self.assertEqual(labels, {"app": "web"})
