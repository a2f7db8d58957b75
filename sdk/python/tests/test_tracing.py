"""Traces (docs/observability.md, "Traces"): the Hello lists
CAPABILITY_TRACE_CONTEXT; a delivery with the broker's trace context names
its trace in its log lines (trace_id), with or without opentelemetry; with
opentelemetry importable its function runs in a "tether.handle" span whose
parent is the broker's delivery span. opentelemetry cannot be installed
where these tests run, so that path runs against tests/otelstub, a stand-in
with the real API's names and signatures."""

import asyncio
import os
import sys
import unittest

import tether
from tether import testing, tracing
from tether.v1 import broker_pb2 as pb

from broker_fake import FakeBroker, Runner
from test_runner import delivery

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "otelstub")
WIDGET = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
          "metadata": {"name": "w1", "namespace": "ns", "uid": "u1"}, "spec": {"size": 3}}


def fields(records):
    """The object fields of each log line about an object."""
    return [getattr(r, "tether_fields") for r in records if getattr(r, "tether_fields", None)]


def opentelemetry(test, importable):
    """Make the opentelemetry package importable (the stub) or not for the
    rest of test, whatever this machine has installed."""
    saved = {k: v for k, v in sys.modules.items() if k == "opentelemetry" or k.startswith("opentelemetry.")}
    for k in saved:
        del sys.modules[k]
    if importable:
        sys.path.insert(0, STUB)
    else:
        sys.modules["opentelemetry"] = None  # import raises ImportError
    tracing._otel.cache_clear()

    def restore():
        for k in [k for k in sys.modules if k == "opentelemetry" or k.startswith("opentelemetry.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        if importable:
            sys.path.remove(STUB)
        tracing._otel.cache_clear()

    test.addCleanup(restore)


class TraceId(unittest.TestCase):
    def test_the_trace_id_of_a_traceparent(self):
        for name, header, want in (
                ("valid", TRACEPARENT, TRACE),
                ("none", None, ""),
                ("not hex", f"00-{'x' * 32}-{PARENT}-01", ""),
                ("all zero trace", f"00-{'0' * 32}-{PARENT}-01", ""),
                ("all zero parent", f"00-{TRACE}-{'0' * 16}-01", ""),
                ("version ff", f"ff-{TRACE}-{PARENT}-01", ""),
                ("version 00 with more", f"{TRACEPARENT}-x", ""),
                ("a later version with more", f"01-{TRACE}-{PARENT}-01-x", TRACE)):
            with self.subTest(name):
                d = pb.Delivery(trace_context={"traceparent": header} if header else {})
                self.assertEqual(tracing.trace_id(d), want)


class WithoutOpenTelemetry(unittest.TestCase):
    def test_the_log_lines_name_the_trace_and_nothing_else_changes(self):
        opentelemetry(self, importable=False)
        reg = tether.Registry()

        @tether.on.create("test.tether.dev", "v1", "widgets", registry=reg, id="create")
        def created(logger, **_):
            logger.info("creating")
            return "done"

        with self.assertLogs("tether", "DEBUG") as logs:
            got = testing.FakeBroker(reg, trace_context={"traceparent": TRACEPARENT}).create(WIDGET)
        self.assertEqual((got.outcome, got.result), (testing.OK, "done"))
        self.assertEqual([f.get("trace_id") for f in fields(logs.records)], [TRACE, TRACE], logs.output)
        self.assertIsNone(tracing._otel())

    def test_a_delivery_without_trace_context_logs_no_trace_id(self):
        reg = tether.Registry()

        @tether.on.create("test.tether.dev", "v1", "widgets", registry=reg, id="create")
        def created(logger, **_):
            logger.info("creating")

        with self.assertLogs("tether", "DEBUG") as logs:
            testing.FakeBroker(reg).create(WIDGET)
        self.assertTrue(fields(logs.records))
        self.assertFalse([f for f in fields(logs.records) if "trace_id" in f], logs.output)


class WithOpenTelemetry(unittest.TestCase):
    def setUp(self):
        opentelemetry(self, importable=True)
        from opentelemetry import trace
        self.trace = trace
        trace.FINISHED.clear()

    def broker(self, reg, **kw):
        return testing.FakeBroker(reg, trace_context={"traceparent": TRACEPARENT}, **kw)

    def test_the_function_runs_in_a_span_under_the_brokers(self):
        reg, seen = tether.Registry(), []

        @tether.on.create("test.tether.dev", "v1", "widgets", registry=reg, id="create")
        def created(**_):  # a sync function: in a thread, with a copy of the context
            seen.append(self.trace.get_current_span())

        @tether.on.update("test.tether.dev", "v1", "widgets", registry=reg, id="update")
        async def updated(**_):
            seen.append(self.trace.get_current_span())
            raise tether.PermanentError("no")

        b = self.broker(reg)
        self.assertEqual(b.create(WIDGET).outcome, testing.OK)
        self.assertEqual(b.update(WIDGET, {**WIDGET, "spec": {"size": 4}}, attempt=2).outcome, testing.FAIL)
        spans = self.trace.FINISHED
        self.assertEqual(seen, spans, "the functions did not run in the SDK's spans")
        for s, binding, kind, attempt, outcome in ((spans[0], "create", "create", 1, "OUTCOME_OK"),
                                                   (spans[1], "update", "update", 2, "OUTCOME_FAIL")):
            with self.subTest(binding):
                self.assertEqual((s.name, s.scope, s.kind), ("tether.handle", "tether", self.trace.SpanKind.CONSUMER))
                self.assertEqual((s.trace_id, s.parent_id), (TRACE, PARENT))
                self.assertEqual(s.attributes, {"tether.binding.id": binding, "tether.delivery.id": s.attributes[
                    "tether.delivery.id"], "tether.delivery.kind": kind, "tether.delivery.attempt": attempt,
                                                "tether.ack.outcome": outcome})
        self.assertEqual(spans[0].status.status_code, self.trace.StatusCode.UNSET)
        self.assertEqual((spans[1].status.status_code, spans[1].status.description),
                         (self.trace.StatusCode.ERROR, "no"))

    def test_no_span_without_trace_context(self):
        reg = tether.Registry()

        @tether.on.create("test.tether.dev", "v1", "widgets", registry=reg, id="create")
        def created(**_):
            pass

        @tether.on.validate("test.tether.dev", "v1", "widgets", registry=reg, id="validate")
        def validated(**_):
            pass

        self.assertEqual(testing.FakeBroker(reg).create(WIDGET).outcome, testing.OK)
        self.assertTrue(testing.FakeBroker(reg).validate(WIDGET).allowed)
        self.assertEqual(self.trace.FINISHED, [])

    def test_a_reviews_function_runs_in_a_span_under_the_brokers(self):
        reg, seen = tether.Registry(), []

        @tether.on.validate("test.tether.dev", "v1", "widgets", registry=reg, id="validate")
        def validated(**_):
            seen.append(self.trace.get_current_span())

        self.assertTrue(self.broker(reg).validate(WIDGET).allowed)
        spans = self.trace.FINISHED
        self.assertEqual(seen, spans, "the review's function did not run in the SDK's span")
        self.assertEqual((spans[0].name, spans[0].trace_id, spans[0].parent_id), ("tether.handle", TRACE, PARENT))
        self.assertEqual((spans[0].attributes["tether.delivery.kind"], spans[0].attributes["tether.ack.outcome"]),
                         ("admission", "OUTCOME_OK"))


class Session(unittest.TestCase):
    """The real runner against the tests' broker on a localhost port."""

    def test_hello_lists_the_capability_and_the_log_lines_name_the_trace(self):
        opentelemetry(self, importable=True)
        from opentelemetry import trace
        trace.FINISHED.clear()
        reg = tether.Registry()

        @tether.on.create("test.tether.dev", "v1", "widgets", registry=reg, id="create")
        async def created(logger, **_):
            logger.info("creating")
            await asyncio.sleep(0)

        broker = FakeBroker(capabilities=(pb.CAPABILITY_CAPABILITIES, pb.CAPABILITY_TRACE_CONTEXT)).start()
        self.addCleanup(broker.stop)
        r = Runner(reg, broker=broker.address).start()
        self.addCleanup(lambda: r.done.is_set() or r.stop())
        self.assertIn(pb.CAPABILITY_TRACE_CONTEXT, broker.connected().hello.capabilities)
        with self.assertLogs("tether", "DEBUG") as logs:
            ack = broker.deliver(delivery("create", trace_context={"traceparent": TRACEPARENT}))
            self.assertEqual(ack.outcome, pb.OUTCOME_OK)
            broker.deliver(delivery("create"))
        traced = [f for f in fields(logs.records) if f.get("trace_id") == TRACE]
        self.assertEqual({f["delivery"] for f in traced}, {ack.delivery_id}, logs.output)
        self.assertEqual(len(traced), 2, logs.output)  # the function's line and the SDK's
        self.assertEqual([(s.trace_id, s.parent_id, s.attributes["tether.handler"]) for s in trace.FINISHED],
                         [(TRACE, PARENT, "test-handler")])


if __name__ == "__main__":
    unittest.main()
