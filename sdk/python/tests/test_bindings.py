"""Decorators to the Hello's Bindings: every option lands in its proto
field, and what the protocol has no field for is refused at decoration."""

import datetime
import functools
import unittest

from google.protobuf import text_format

import tether
from tether import bindings
from tether.v1 import broker_pb2 as pb

W = ("test.tether.dev", "v1", "widgets")


def fn(**_):
    pass


async def _async_filter(**_):
    return True


def binding(decorator, *args, **options):
    """The proto Binding a decorator makes of fn."""
    r = tether.Registry()
    decorator(*(args or W), registry=r, **options)(fn)
    reg = list(r)[0]  # a field binding's create companion comes second (test_fieldcreate.py)
    return bindings.to_proto(reg.spec)


def proto(text):
    return text_format.Parse(text, pb.Binding())


RESOURCE = 'resource { group: "test.tether.dev" version: "v1" name: "widgets" }'


def status(key):
    """Results in status under key, Kopf's id of the handler."""
    return f'results: RESULT_STORE_STATUS result_key: "{key}"'


# The default for Kopf's handler id of fn.
STATUS = status("fn")

# (name, decorator, positional args (default W), options, expected Binding in text format)
MAPPING = [
    ("create defaults", tether.on.create, (), {},
     f'id: "create-fn" kind: BINDING_KIND_CREATE {STATUS} {RESOURCE}'),
    ("create with every common option", tether.on.create, (), dict(
        id="mine", labels={"app": "web", "tier": tether.PRESENT, "legacy": tether.ABSENT},
        annotations={"a.example.com/x": "1", "b.example.com/y": tether.PRESENT, "c.example.com/z": tether.ABSENT},
        when="object.spec.size > 3", namespaces=["ns1", "ns2"], field_selector="metadata.name=w",
        retries=4, timeout=2.5, backoff=1, max_backoff=datetime.timedelta(minutes=1)),
     f'''id: "mine" kind: BINDING_KIND_CREATE {status("mine")} {RESOURCE} namespaces: "ns1" namespaces: "ns2"
         label_selector: "app=web,tier,!legacy" field_selector: "metadata.name=w"
         annotations {{ key: "a.example.com/x" operator: OPERATOR_EQUALS value: "1" }}
         annotations {{ key: "b.example.com/y" operator: OPERATOR_PRESENT }}
         annotations {{ key: "c.example.com/z" operator: OPERATOR_ABSENT }}
         when: "object.spec.size > 3" retries: 3 timeout {{ seconds: 2 nanos: 500000000 }}
         backoff {{ seconds: 1 }} max_backoff {{ seconds: 60 }}'''),
    ("a single namespace, and a long one", tether.on.create, (), dict(namespaces="n" * 63),
     f'id: "create-fn" kind: BINDING_KIND_CREATE {STATUS} {RESOURCE} namespaces: "{"n" * 63}"'),
    ("labels as a selector string", tether.on.update, (), dict(labels="app in (a,b),!x"),
     f'id: "update-fn" kind: BINDING_KIND_UPDATE {STATUS} {RESOURCE} label_selector: "app in (a,b),!x"'),
    ("retries=1, Kopf's single attempt, is no retry", tether.on.resume, (), dict(retries=1),
     f'id: "resume-fn" kind: BINDING_KIND_RESUME {STATUS} {RESOURCE} retries: 0'),
    ("negative retries mean forever", tether.on.resume, (), dict(retries=-5),
     f'id: "resume-fn" kind: BINDING_KIND_RESUME {STATUS} {RESOURCE} retries: -1'),
    ("kind instead of plural", tether.on.create, ("apps", "v1"), dict(kind="Deployment"),
     f'id: "create-fn" kind: BINDING_KIND_CREATE {STATUS} resource {{ group: "apps" version: "v1" kind: "Deployment" }}'),
    ("Kopf's core group form", tether.on.create, ("v1", "secrets"), {},
     f'id: "create-fn" kind: BINDING_KIND_CREATE {STATUS} resource {{ version: "v1" name: "secrets" }}'),
    ("delete optional", tether.on.delete, (), dict(optional=True),
     f'id: "delete-fn" kind: BINDING_KIND_DELETE {STATUS} {RESOURCE} optional: true'),
    ("delete strict", tether.on.delete, (), dict(finalizer=tether.STRICT),
     f'id: "delete-fn" kind: BINDING_KIND_DELETE {STATUS} {RESOURCE} finalizer: FINALIZER_POLICY_STRICT'),
    ("field", tether.on.field, (), dict(field="spec.size"),
     f'id: "field-fn" kind: BINDING_KIND_FIELD {status("fn/spec.size")} {RESOURCE} field: "spec.size"'),
    ("field as a tuple", tether.on.field, (), dict(field=("spec", "size")),
     f'id: "field-fn" kind: BINDING_KIND_FIELD {status("fn/spec.size")} {RESOURCE} field: "spec.size"'),
    ("event", tether.on.event, (), {},
     f'id: "event-fn" kind: BINDING_KIND_EVENT {STATUS} {RESOURCE}'),
    ("timer", tether.timer, (), dict(interval=60, initial_delay=5, idle=10.5, sharp=True, finalizer=tether.NONE),
     f'''id: "timer-fn" kind: BINDING_KIND_TIMER {STATUS} {RESOURCE} finalizer: FINALIZER_POLICY_NONE
         timer {{ interval {{ seconds: 60 }} initial_delay {{ seconds: 5 }} idle {{ seconds: 10 nanos: 500000000 }}
         sharp: true }}'''),
    ("timer via tether.on", tether.on.timer, (), dict(interval=0.1),
     f'id: "timer-fn" kind: BINDING_KIND_TIMER {STATUS} {RESOURCE} timer {{ interval {{ nanos: 100000000 }} }}'),
    ("daemon", tether.daemon, (), dict(cancellation_timeout=30, restart=True, finalizer=tether.HOLD),
     f'''id: "daemon-fn" kind: BINDING_KIND_DAEMON {STATUS} {RESOURCE} finalizer: FINALIZER_POLICY_HOLD
         daemon {{ cancellation_timeout {{ seconds: 30 }} restart: true }}'''),
    ("daemon defaults still carry daemon options", tether.daemon, (), {},
     f'id: "daemon-fn" kind: BINDING_KIND_DAEMON {STATUS} {RESOURCE} daemon {{ }}'),
    ("results in the annotation", tether.on.create, (), dict(results="annotation"),
     f'id: "create-fn" kind: BINDING_KIND_CREATE {RESOURCE}'),
    ("results in status, under Kopf's id", tether.on.update, (), dict(results="status", id="mine"),
     f'id: "mine" kind: BINDING_KIND_UPDATE {RESOURCE} {status("mine")}'),
    ("validate", tether.on.validate, (), dict(
        operations=["create", "UPDATE"], failure_policy="fail", side_effects=True, subresource="status",
        namespace_selector="env=prod", match_conditions={"not-system": "request.userInfo.username != 'x'"},
        timeout=5, finalizer=tether.STRICT, labels={"app": "web"}),
     f'''id: "validate-fn" kind: BINDING_KIND_VALIDATE {RESOURCE} label_selector: "app=web"
         finalizer: FINALIZER_POLICY_STRICT
         admission {{ operations: ADMISSION_OPERATION_CREATE operations: ADMISSION_OPERATION_UPDATE
           subresource: "status" namespace_selector: "env=prod"
           match_conditions {{ name: "not-system" expression: "request.userInfo.username != 'x'" }}
           timeout {{ seconds: 5 }} failure_policy: FAILURE_POLICY_FAIL side_effects: SIDE_EFFECTS_NONE_ON_DRY_RUN }}'''),
    ("mutate with Kopf's spelling", tether.on.mutate, (), dict(operation="DELETE", ignore_failures=True,
                                                                side_effects=False),
     f'''id: "mutate-fn" kind: BINDING_KIND_MUTATE {RESOURCE}
         admission {{ operations: ADMISSION_OPERATION_DELETE failure_policy: FAILURE_POLICY_IGNORE
           side_effects: SIDE_EFFECTS_NONE }}'''),
    ("ignore_failures=False fails closed", tether.on.validate, (), dict(ignore_failures=False),
     f'id: "validate-fn" kind: BINDING_KIND_VALIDATE {RESOURCE} admission {{ failure_policy: FAILURE_POLICY_FAIL }}'),
]

# (name, decorator, options, exception type, words the message must contain)
REFUSED = [
    ("Kopf's param", tether.on.create, dict(param=1), TypeError, ["param=", "no field"]),
    ("errors= as a string", tether.on.update, dict(errors="PERMANENT"), TypeError, ["errors=", "ErrorsMode"]),
    ("errors= on a review", tether.on.validate, dict(errors=tether.ErrorsMode.IGNORED), TypeError,
     ["errors=", "lifecycle, timer and daemon"]),
    ("old= without a field", tether.on.update, dict(old="a"), TypeError, ["old= needs field="]),
    ("old= where there is no old state", tether.on.create, dict(field="spec.x", old="a"), TypeError,
     ["update and field bindings only"]),
    ("a callable value on a daemon", tether.daemon, dict(field="spec.x", value=lambda value, **_: True), TypeError,
     ["daemons do not take"]),
    ("Kopf's resume deleted", tether.on.resume, dict(deleted=True), TypeError, ["deleted="]),
    ("Kopf's requires_finalizer", tether.on.event, dict(requires_finalizer=True), TypeError, ["requires_finalizer="]),
    ("Kopf's daemon initial delay", tether.daemon, dict(initial_delay=5), TypeError, ["initial_delay=", "stopped.wait"]),
    ("Kopf's cancellation polling", tether.daemon, dict(cancellation_polling=5), TypeError, ["cancellation_polling="]),
    ("Kopf's persistent webhook", tether.on.validate, dict(persistent=True), TypeError, ["persistent=", "STRICT"]),
    ("optional on a create", tether.on.create, dict(optional=True), TypeError, ["optional=", "delete"]),
    ("finalizer on a create", tether.on.create, dict(finalizer=tether.NONE), TypeError, ["finalizer="]),
    ("retries on a review", tether.on.validate, dict(retries=1), TypeError, ["retries=", "answered once"]),
    ("a typo", tether.on.create, dict(labes={}), TypeError, ["unexpected keyword argument 'labes'"]),
    ("a callable when on a daemon", tether.daemon, dict(when=lambda **_: True), TypeError, ["when=", "daemons"]),
    ("a callable label on a daemon", tether.daemon, dict(labels={"a": lambda value, **_: True}), TypeError,
     ["labels['a']", "daemons"]),
    ("an async callable when", tether.on.create, dict(when=_async_filter), TypeError, ["when=", "sync"]),
    ("a callable that wants runtime", tether.on.create, dict(when=lambda runtime: True), TypeError, ["runtime"]),
    ("a when that is no string", tether.on.create, dict(when=3), TypeError, ["CEL", "callable"]),
    ("a label that is no string", tether.on.create, dict(labels={"a": 1}), TypeError, ["string"]),
    ("a field without a path", tether.on.field, dict(field="spec..x"), ValueError, ["dotted path"]),
    ("a timer without interval", tether.timer, dict(interval=0.05), ValueError, ["interval="]),
    ("a negative timeout", tether.on.create, dict(timeout=-1), ValueError, ["negative"]),
    ("a timeout that is no duration", tether.on.create, dict(timeout="5s"), TypeError, ["seconds"]),
    ("backoff above its max", tether.on.create, dict(backoff=10, max_backoff=5), ValueError, ["max_backoff"]),
    ("HOLD on a webhook", tether.on.validate, dict(finalizer=tether.HOLD), ValueError, ["STRICT"]),
    ("STRICT failing open", tether.on.mutate, dict(finalizer=tether.STRICT, failure_policy="Ignore"), ValueError,
     ["contradicts"]),
    ("optional and strict", tether.on.delete, dict(optional=True, finalizer=tether.STRICT), ValueError,
     ["contradicts"]),
    ("a fractional webhook timeout", tether.on.validate, dict(timeout=1.5), ValueError, ["whole seconds"]),
    ("an unknown operation", tether.on.validate, dict(operations=["PATCH"]), ValueError, ["PATCH"]),
    ("both operation spellings", tether.on.validate, dict(operation="CREATE", operations=["UPDATE"]), TypeError,
     ["not both"]),
    ("a bad failure policy", tether.on.validate, dict(failure_policy="maybe"), ValueError, ["Ignore"]),
    ("a bad id", tether.on.create, dict(id="Bad_Id"), ValueError, ["DNS-1123"]),
    ("a namespace twice", tether.on.create, dict(namespaces=["a", "a"]), ValueError, ["twice"]),
    ("a namespace that is no label", tether.on.create, dict(namespaces=["Team_A"]), ValueError, ["namespace"]),
    ("a namespace too long", tether.on.create, dict(namespaces=["n" * 64]), ValueError, ["63"]),
    ("too many namespaces", tether.on.create, dict(namespaces=[f"ns{i}" for i in range(101)]), ValueError,
     ["100"]),
    ("a finalizer that is no policy", tether.on.delete, dict(finalizer="HOLD"), TypeError, ["tether.HOLD"]),
    ("a bad subresource", tether.on.validate, dict(subresource="Status!"), ValueError, ["subresource"]),
    ("results on a review", tether.on.validate, dict(results="status"), TypeError,
     ["results=", "lifecycle, timer and daemon"]),
    ("results in an unknown store", tether.on.create, dict(results="spec"), ValueError, ["'status'", "'annotation'"]),
    ("duplicate match conditions", tether.on.validate, dict(match_conditions=[("a", "true"), ("a", "false")]),
     ValueError, ["twice"]),
]


class KopfIds(unittest.TestCase):
    """Results in status go under the id Kopf gives the handler."""

    def key(self, decorator, f, **options):
        r = tether.Registry()
        decorator(*W, registry=r, **options)(f)
        # on.field registers its create companion after the field binding;
        # both store under the same key.
        keys = {bindings.to_proto(reg.spec).result_key for reg in r}
        (key,) = keys
        return key

    def test_the_key_is_kopfs_handler_id(self):
        class Kex:
            @staticmethod
            def create_fn(**_):
                pass

        def wrapper(**kw):
            return fn(**kw)

        wrapper.__wrapped__ = fn
        qualname = "KopfIds.test_the_key_is_kopfs_handler_id.<locals>.Kex.create_fn"
        cases = [
            ("a function: its qualified name", tether.on.create, Kex.create_fn, {}, qualname),
            ("id= given", tether.on.create, fn, dict(id="mine"), "mine"),
            ("a field binding: the field after a slash", tether.on.field, fn, dict(field="spec.size"), "fn/spec.size"),
            ("a field filter likewise", tether.on.update, fn, dict(field=("spec", "x"), id="upd"), "upd/spec.x"),
            ("a wrapped function: the wrapped one's", tether.on.create, wrapper, {}, "fn"),
        ]
        for name, decorator, f, options, want in cases:
            with self.subTest(name):
                self.assertEqual(self.key(decorator, f, **options), want)

    def test_a_partial_without_id_is_named_by_its_function(self):
        self.assertEqual(bindings.kopf_id(functools.partial(fn), None, None), "fn")

    def test_a_lambda_is_named_by_its_file_and_line(self):
        f = lambda **_: None  # noqa: E731
        self.assertEqual(bindings.kopf_id(f, None, None), f"lambda:{__file__}:{f.__code__.co_firstlineno}")

    def test_a_key_that_is_not_printable_ascii_asks_for_id(self):
        def f(**_):
            pass

        f.__qualname__ = "with space"
        with self.assertRaises(ValueError) as caught:
            tether.on.create(*W, registry=tether.Registry())(f)
        for words in ("'with space'", "id=", "results='annotation'"):
            self.assertIn(words, str(caught.exception))
        self.assertEqual(self.key(tether.on.create, f, results="annotation"), "")


class DecoratorsToBindings(unittest.TestCase):
    def test_options_map_to_binding_fields(self):
        for name, decorator, args, options, want in MAPPING:
            with self.subTest(name):
                got = binding(decorator, *args, **options)
                self.assertEqual(text_format.MessageToString(got), text_format.MessageToString(proto(want)))

    def test_unsupported_options_are_refused_at_decoration(self):
        for name, decorator, options, exc, words in REFUSED:
            with self.subTest(name):
                with self.assertRaises(exc) as caught:
                    binding(decorator, **options)
                for word in words:
                    self.assertIn(word, str(caught.exception))

    def test_errors_name_the_function(self):
        with self.assertRaises(ValueError) as caught:
            binding(tether.on.create, timeout=-1)
        self.assertIn("@tether.on.create() on fn", str(caught.exception))

    def test_a_resource_badly_named_is_refused(self):
        for args, options, exc, words in [
            (("g", ""), {}, ValueError, "name must not be empty"),
            (("g", "", "widgets"), {}, ValueError, "version must not be empty"),
            ((), dict(group="g"), TypeError, "name the resource"),
            (("a", "b", "c", "d"), {}, TypeError, "at most 3 positional arguments"),
            ((), dict(kind="Widget", plural="widgets"), TypeError, "named twice"),
            (("g", "v1", "widgets"), dict(kind="Widget"), TypeError, "at most 2 positional arguments"),
            (("g/v1", "widgets"), dict(group="h"), TypeError, "group='h' contradicts the positional group 'g'"),
            ((lambda r: True,), {}, TypeError, "callables, categories and EVERYTHING are not supported"),
            (("widgets",), dict(category="all"), TypeError, "name one resource per binding"),
        ]:
            with self.subTest(args=args, options=options):
                with self.assertRaises(exc) as caught:
                    tether.on.create(*args, registry=tether.Registry(), **options)(fn)
                self.assertIn(words, str(caught.exception))


class Registries(unittest.TestCase):
    def test_stacked_decorators_get_distinct_default_ids(self):
        r = tether.Registry()

        @tether.on.create(*W, registry=r)
        @tether.on.update(*W, registry=r)
        def reconcile(**_):
            pass

        self.assertEqual([reg.spec.id for reg in r], ["update-reconcile", "create-reconcile"])

    def test_an_id_used_twice_is_refused(self):
        r = tether.Registry()
        tether.on.create(*W, registry=r, id="same")(fn)
        with self.assertRaises(ValueError) as caught:
            tether.on.update(*W, registry=r, id="same")(fn)
        self.assertIn("already used by the create binding", str(caught.exception))

    def test_a_name_that_makes_no_id_asks_for_one(self):
        with self.assertRaises(ValueError) as caught:
            tether.on.create(*W, registry=tether.Registry())(lambda **_: None)
        self.assertIn("pass id=", str(caught.exception))

    def test_a_long_function_name_makes_a_default_id_that_fits(self):
        # Kopf's examples have names this long: "update-" and the name are 47 characters.
        r = tether.Registry()

        def eventual_success_with_a_few_messages_again(**_):
            pass

        def eventual_success_with_a_few_messages_later(**_):
            pass

        for f in (eventual_success_with_a_few_messages_again, eventual_success_with_a_few_messages_later):
            tether.on.update(*W, registry=r)(f)
            tether.on.update(*W, registry=tether.Registry())(f)  # the same id each time
        ids = [reg.spec.id for reg in r]
        self.assertEqual(len(set(ids)), 2, ids)
        for got in ids:
            self.assertLessEqual(len(got), 40, got)
            self.assertRegex(got, r"^update-eventual-success-with-a-[0-9a-f]{8}$")
        self.assertEqual(bindings.default_id(bindings.Kind.UPDATE, eventual_success_with_a_few_messages_again),
                         ids[0], "deterministic")

    def test_an_explicit_id_too_long_is_an_error(self):
        with self.assertRaises(ValueError) as caught:
            tether.on.create(*W, registry=tether.Registry(), id="x" * 41)(fn)
        self.assertIn(f"binding id {'x' * 41!r} is 41 characters long", str(caught.exception))
        self.assertIn("at most 40 characters", str(caught.exception))

    def test_the_decorator_returns_the_function(self):
        self.assertIs(tether.on.create(*W, registry=tether.Registry())(fn), fn)

    def test_registries_are_separate(self):
        a, b = tether.Registry(), tether.Registry()
        tether.on.create(*W, registry=a)(fn)
        self.assertEqual((len(a), len(b)), (1, 0))
        self.assertIsNone(b.get("create-fn"))

    def test_the_default_registry_is_used_without_registry(self):
        default = tether.get_default_registry()
        before = len(default)

        def only_in_default(**_):
            pass

        self.addCleanup(default._by_id.pop, "test-default-registry")  # leave it as it was
        tether.on.create(*W, id="test-default-registry")(only_in_default)
        self.assertEqual(len(default), before + 1)
        self.assertIs(default.get("test-default-registry").fn, only_in_default)


if __name__ == "__main__":
    unittest.main()
