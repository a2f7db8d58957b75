"""Log lines like Kopf's: [namespace/name] in plain text, fields in JSON."""

import io
import json
import logging
import unittest

from tether import log


class Lines(unittest.TestCase):
    def capture(self, fmt):
        stream = io.StringIO()
        root = logging.getLogger()
        saved = root.handlers[:], root.level
        self.addCleanup(lambda: (setattr(root, "handlers", saved[0]), root.setLevel(saved[1])))
        for name in ("asyncio", "grpc"):  # configure quiets them
            self.addCleanup(logging.getLogger(name).setLevel, logging.getLogger(name).level)
        log.configure(fmt, verbose=True, stream=stream)
        return stream

    def test_plain_lines_name_the_object(self):
        out = self.capture("plain")
        log.for_object("ns", "w1", binding="create").info("created %s", "it")
        log.for_object("", "cluster-wide").debug("hello")
        logging.getLogger("tether").info("no object")
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].endswith("tether.objects [INFO] [ns/w1] created it"), lines[0])
        self.assertTrue(lines[1].endswith("[DEBUG] [cluster-wide] hello"), lines[1])
        self.assertTrue(lines[2].endswith("tether [INFO] no object"), lines[2])

    def test_json_lines(self):
        out = self.capture("json")
        try:
            raise ValueError("boom")
        except ValueError:
            log.for_object("ns", "w1", binding="create", delivery="d1").exception("failed")
        line = json.loads(out.getvalue())
        self.assertEqual({k: line[k] for k in ("level", "logger", "message", "object", "binding", "delivery")},
                         {"level": "error", "logger": "tether.objects", "message": "failed",
                          "object": {"namespace": "ns", "name": "w1"}, "binding": "create", "delivery": "d1"})
        self.assertIn("ValueError: boom", line["exception"])
        self.assertIn("T", line["time"])

    def test_verbose_is_debug(self):
        self.capture("plain")
        self.assertEqual(logging.getLogger().level, logging.DEBUG)
        log.configure("plain", verbose=False, stream=io.StringIO())
        self.assertEqual(logging.getLogger().level, logging.INFO)
        with self.assertRaises(ValueError):
            log.configure("xml")

    def test_kopfs_configure(self):
        import tether
        self.capture("plain")
        root = logging.getLogger()
        for kw, level, formatter in (
                ({}, logging.INFO, log.PlainFormatter), ({"verbose": True}, logging.DEBUG, log.PlainFormatter),
                ({"debug": True, "log_format": tether.LogFormat.JSON}, logging.DEBUG, log.JsonFormatter),
                ({"quiet": True, "log_format": tether.LogFormat.PLAIN, "log_prefix": True}, logging.WARNING,
                 log.PlainFormatter)):
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                tether.configure(**kw)
                self.assertEqual(root.level, level)
                self.assertEqual([type(h.formatter) for h in root.handlers], [formatter])
        with self.assertRaisesRegex(TypeError, "log_refkey= is not supported"):
            tether.configure(log_refkey="k8s")


if __name__ == "__main__":
    unittest.main()
