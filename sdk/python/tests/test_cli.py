"""python3 -m tether run: its flags, and the process itself against the fake
broker (SIGTERM says goodbye and exits 0; a rejected Hello exits 2)."""

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
import unittest.mock

import grpc

import tether
from tether import cli, durations, runner
from tether.v1 import broker_pb2 as pb

from broker_fake import SDK_ROOT, WAIT, FakeBroker

HANDLER = textwrap.dedent('''
    import tether

    @tether.on.create("test.tether.dev", "v1", "widgets", id="create")
    def created(name, patch, logger, **_):
        logger.info("creating")
        patch.metadata.labels["seen"] = "yes"
        return {"name": name}
''')


def parse(*argv):
    return cli.parser().parse_args(["run", *argv])


class Flags(unittest.TestCase):
    def test_defaults(self):
        a = parse("h.py", "--name", "widgets")
        self.assertEqual((a.paths, a.module, a.name, a.broker, a.insecure, a.token_file, a.window, a.namespace),
                         (["h.py"], [], "widgets", None, False, None, 16, []))
        self.assertEqual((a.grace, a.absent_release_after, a.drain_timeout, a.max_backoff, a.log_format, a.verbose),
                         (None, None, 10.0, 2.0, "plain", False))
        self.assertEqual((a.dev, a.priority, cli.priority(a)), (False, None, 0))

    def test_dev_and_priority_become_the_hellos_priority(self):
        registry = tether.Registry()
        tether.on.create("test.tether.dev", "v1", "widgets", registry=registry, id="create")(lambda **_: None)
        for flags, want in (((), 0), (("--dev",), 1), (("--priority", "5"), 5), (("--dev", "--priority", "7"), 7),
                            (("--dev", "--priority", "0"), 0), (("--priority", "1000"), 1000)):
            with self.subTest(flags):
                a = parse("h.py", "--name", "w", *flags)
                msg = runner.hello(registry, runner.Config(name=a.name, priority=cli.priority(a)))
                self.assertEqual(msg.priority, want)

    def test_every_flag(self):
        a = parse("a.py", "b.py", "-m", "pkg.handlers", "--name", "w", "--broker", "broker:7443", "--broker", "b:1",
                  "--insecure", "--token-file", "/t", "--instance-id", "i-1", "--window", "4", "-n", "a", "--namespace", "b",
                  "--grace", "1m", "--absent-release-after", "0", "--drain-timeout", "500ms", "--max-backoff", "2",
                  "--log-format", "json", "--verbose")
        self.assertEqual((a.paths, a.module, a.broker, a.insecure, a.token_file, a.instance_id, a.window),
                         (["a.py", "b.py"], ["pkg.handlers"], ["broker:7443", "b:1"], True, "/t", "i-1", 4))
        self.assertEqual((a.namespace, a.grace, a.absent_release_after, a.drain_timeout, a.max_backoff),
                         (["a", "b"], 60.0, 0.0, 0.5, 2.0))
        self.assertEqual((a.log_format, a.verbose), ("json", True))
        self.assertIsNone(a.liveness)
        a = parse("h.py", "--name", "w", "--liveness", "http://0.0.0.0:8080/healthz")
        self.assertEqual(a.liveness, "http://0.0.0.0:8080/healthz")
        a = parse("h.py", "--name", "w", "--tls-ca-file", "ca.pem", "--tls-server-name", "broker.test")
        self.assertEqual((a.tls_ca_file, a.tls_server_name), ("ca.pem", "broker.test"))

    def test_bad_flags_exit_2(self):
        for argv in (["h.py"], ["h.py", "--name", "w", "--window", "0"], ["h.py", "--name", "w", "--grace", "soon"],
                     ["h.py", "--name", "w", "--log-format", "xml"], ["--name", "w"],
                     ["h.py", "--name", "w", "--insecure", "--tls-ca-file", "ca.pem"],
                     ["h.py", "--name", "w", "--priority", "-1"], ["h.py", "--name", "w", "--priority", "1001"],
                     ["h.py", "--name", "w", "--priority", "high"]):
            with self.subTest(argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit) as caught:
                    cli.main(["run", *argv])
                self.assertEqual(caught.exception.code, 2)

    def test_help_documents_every_flag(self):
        text = cli.parser()._subparsers._group_actions[0].choices["run"].format_help()
        for flag in ("--name", "--broker", "--insecure", "--token-file", "--tls-ca-file", "--tls-server-name",
                     "--instance-id", "--window", "--namespace", "--grace", "--absent-release-after",
                     "--drain-timeout", "--max-backoff", "--log-format", "--verbose", "--module", "--dev",
                     "--priority", "--liveness"):
            self.assertIn(flag, text)

    def test_help_gives_the_defaults_where_they_are_defined(self):
        def help_of(flag):
            text = cli.parser()._subparsers._group_actions[0].choices["run"].format_help()
            return " ".join(text.split("\n  " + flag + " D", 1)[1].split("\n  -", 1)[0].split())

        for reconnect_max, drain in ((runner.RECONNECT_MAX, runner.DEFAULT_DRAIN_TIMEOUT), (7.0, 3.5)):
            with self.subTest(reconnect_max=reconnect_max), \
                    unittest.mock.patch.multiple(runner, RECONNECT_MAX=reconnect_max, DEFAULT_DRAIN_TIMEOUT=drain):
                self.assertIn(f"(default {reconnect_max:g}s)", help_of("--max-backoff"))
                self.assertIn(f"waits start at {runner.RECONNECT_MIN:g}s", help_of("--max-backoff"))
                self.assertIn(f"(default {drain:g}s)", help_of("--drain-timeout"))

    def test_durations(self):
        for text, want in (("90", 90), ("1.5", 1.5), ("500ms", 0.5), ("30s", 30), ("5m", 300), ("1h30m", 5400),
                           ("0", 0)):
            self.assertEqual(durations.parse(text), want, text)
        for text in ("", "5 m", "m5", "-1", "-5m", "1d", "nan"):
            with self.assertRaises(ValueError, msg=text):
                durations.parse(text)

    def test_go_durations(self):
        for text, want in {"3s": 3, "1h30m": 5400, "0s": 0, "0": 0, "-5m": -300, "+2h": 7200, "1.5h": 5400,
                           "300ms": 0.3, "1ns": 1e-9, "2us": 2e-6, "2µs": 2e-6, "1h0m1s": 3601}.items():
            self.assertAlmostEqual(durations.parse_go(text), want, msg=text)
        for text in ("", "soon", "3", "1d", " 1h", "1h ", "-", ".", "h", "1hh"):
            with self.assertRaises(ValueError, msg=text):
                durations.parse_go(text)

    def test_a_file_that_does_not_load_exits_1(self):
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("raise RuntimeError('broken handler')\n")
        self.addCleanup(os.unlink, f.name)
        # main configures logging and imports: leave both as they were
        root = logging.getLogger()
        saved = root.handlers[:], root.level, sys.path[:]
        self.addCleanup(lambda: (setattr(root, "handlers", saved[0]), root.setLevel(saved[1]),
                                 setattr(sys, "path", saved[2]), sys.modules.pop(os.path.basename(f.name)[:-3], None)))
        for name in ("asyncio", "grpc"):
            self.addCleanup(logging.getLogger(name).setLevel, logging.getLogger(name).level)
        for argv in ([f.name], ["/no/such/handler.py"], ["-m", "no_such_module_here"]):
            with self.subTest(argv), contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(cli.main(["run", *argv, "--name", "w", "--insecure"]), 1)


class Process(unittest.TestCase):
    """The CLI as a process of its own."""

    def start(self, broker, *flags, code=HANDLER):
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "handler.py")
        with open(path, "w") as f:
            f.write(code)
        env = dict(os.environ, PYTHONPATH=SDK_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.Popen([sys.executable, "-m", "tether", "run", path, "--name", "py-widgets", "--broker",
                                 broker.address, "--insecure", *flags], env=env, cwd=folder,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def cleanup():
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=WAIT)
            os.unlink(path)
            os.rmdir(folder)

        self.addCleanup(cleanup)
        return proc

    def test_sigterm_says_goodbye_and_exits_0(self):
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        proc = self.start(broker, "--log-format", "json")
        s = broker.connected()
        self.assertEqual(s.hello.handler, "py-widgets")
        d = pb.Delivery(binding_id="create", kind=pb.DELIVERY_KIND_CREATE, attempt=1, object=b'{"metadata":{}}',
                        ref=pb.ObjectRef(namespace="ns", name="w1", uid="u1"))
        ack = broker.deliver(d)
        self.assertEqual((ack.patch, ack.result), (b'{"metadata":{"labels":{"seen":"yes"}}}', b'{"name":"w1"}'))
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=WAIT)
        self.assertEqual(proc.returncode, 0, stderr)
        self.assertEqual(len(broker.messages("goodbye")), 1)
        self.assertIn('"message": "creating", "object": {"namespace": "ns", "name": "w1"}', stderr)
        self.assertIn("received SIGTERM", stderr)

    def test_dev_connects_with_priority_1(self):
        for flags, want in ((("--dev",), 1), (("--dev", "--priority", "3"), 3)):
            with self.subTest(flags):
                broker = FakeBroker().start()
                self.addCleanup(broker.stop)
                proc = self.start(broker, *flags)
                self.assertEqual(broker.connected().hello.priority, want)
                proc.send_signal(signal.SIGTERM)
                _, stderr = proc.communicate(timeout=WAIT)
                self.assertEqual(proc.returncode, 0, stderr)
                self.assertIn(f"at priority {want}, taking over from lower priorities", stderr)

    def test_a_startup_function_that_fails_permanently_exits_1_before_connecting(self):
        broker = FakeBroker().start()
        self.addCleanup(broker.stop)
        proc = self.start(broker, code=HANDLER + textwrap.dedent('''
            @tether.on.startup()
            def connect_database(**_):
                raise tether.PermanentError("no database")
        '''))
        _, stderr = proc.communicate(timeout=WAIT)
        self.assertEqual(proc.returncode, 1, stderr)
        self.assertIn("startup function connect_database failed permanently: no database", stderr)
        self.assertEqual(broker.streams, [])

    def test_a_rejected_hello_exits_2_with_the_brokers_message(self):
        broker = FakeBroker(reject=(grpc.StatusCode.PERMISSION_DENIED, 'handler "py-widgets" is not granted')).start()
        self.addCleanup(broker.stop)
        proc = self.start(broker)
        _, stderr = proc.communicate(timeout=WAIT)
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertIn('PERMISSION_DENIED: handler "py-widgets" is not granted', stderr)
        self.assertEqual(len(broker.streams), 1)


if __name__ == "__main__":
    unittest.main()
