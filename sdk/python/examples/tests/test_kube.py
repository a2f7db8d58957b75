"""kube.Client against a local HTTP server that answers as the API server
would: the paths and bodies it sends, its credentials, the errors it
raises, and how it finds the cluster."""

import base64
import http.server
import json
import os
import tempfile
import threading
import unittest

import kube


class Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request and answers with the server's next planned answer."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((self.command, self.path, self.headers.get("Authorization"), body))
        status, answer = self.server.answers.pop(0) if self.server.answers else (200, {})
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass  # the test's output is not the place for access logs


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        self.server.requests, self.server.answers = [], []
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.client = kube.Client(self.url, token=lambda: "t0k3n", field_manager="fm")

    def test_paths_queries_and_bodies(self):
        self.server.answers = [(200, {"items": [{"metadata": {"name": "x"}}]}), (200, {}), (201, {}), (200, {}),
                               (200, {}), (200, {"items": []})]
        self.assertEqual(self.client.list(kube.SECRETS, label_selector="replicator.tether.dev/copy=true"),
                         [{"metadata": {"name": "x"}}])
        self.client.get(kube.CONFIGMAPS, "ns", "a b")
        secret = {"metadata": {"name": "db", "namespace": "a"}, "data": {}}
        self.client.create(kube.SECRETS, "a", secret)
        self.client.replace(kube.SECRETS, "a", secret)
        self.client.delete(kube.SECRETS, "a", "db", uid="u1", resource_version="7")
        self.client.list(("apps", "v1", "deployments"), "ns")
        self.assertEqual(self.server.requests, [
            ("GET", "/api/v1/secrets?labelSelector=replicator.tether.dev%2Fcopy%3Dtrue", "Bearer t0k3n", None),
            ("GET", "/api/v1/namespaces/ns/configmaps/a%20b", "Bearer t0k3n", None),
            ("POST", "/api/v1/namespaces/a/secrets?fieldManager=fm", "Bearer t0k3n", secret),
            ("PUT", "/api/v1/namespaces/a/secrets/db?fieldManager=fm", "Bearer t0k3n", secret),
            ("DELETE", "/api/v1/namespaces/a/secrets/db", "Bearer t0k3n",
             {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "u1", "resourceVersion": "7"}}),
            ("GET", "/apis/apps/v1/namespaces/ns/deployments", "Bearer t0k3n", None),
        ])

    def test_errors_by_status_and_reason(self):
        for status, reason, cls in [(404, "NotFound", kube.NotFound), (409, "AlreadyExists", kube.AlreadyExists),
                                    (409, "Conflict", kube.Conflict), (422, "Invalid", kube.Invalid),
                                    (403, "Forbidden", kube.ApiError)]:
            self.server.answers = [(status, {"kind": "Status", "reason": reason, "message": f"said {reason}"})]
            with self.assertRaises(kube.ApiError) as caught:
                self.client.get(kube.SECRETS, "ns", "s")
            self.assertIs(type(caught.exception), cls)
            self.assertEqual((caught.exception.status, caught.exception.message), (status, f"said {reason}"))

    def test_no_token_no_header(self):
        kube.Client(self.url).get(kube.NAMESPACES, "", "default")
        self.assertEqual(self.server.requests, [("GET", "/api/v1/namespaces/default", None, None)])


# A self-signed certificate and its key, made for these tests only: a CA
# that ssl parses, and a client certificate it loads.
CERT = """-----BEGIN CERTIFICATE-----
MIIBejCCAR+gAwIBAgIUZMMVWvb4Mgll5xLB85CW2EhTuf4wCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdC1jYTAeFw0yNjEyMDExMjExMzJaFw0zNjExMjgxMjEx
MzJaMBIxEDAOBgNVBAMMB3Rlc3QtY2EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AAThfiraziuAC0R70uqIAbRowrtmPeBRCQO0EEEC2IVWVo5K1zR4nsW8oH612rRT
6+1ggf039WJs2MKE64cQOTrVo1MwUTAdBgNVHQ4EFgQUCSGtS8pjQOjiBAlqJxK7
ocC+HkswHwYDVR0jBBgwFoAUCSGtS8pjQOjiBAlqJxK7ocC+HkswDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEAt1gPeUHxfsQ75UnWdclOh8r2ejWZ
fbl8qJiq3HnogI4CIQDmpR7ab8/e7L4RlGHfC9cPf6UW2uDkZZ8ZqEsOsoLMOQ==
-----END CERTIFICATE-----
"""
KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgdzBCZcNxqnQhDqQH
iGoZRP/VhwD1+HGhzOhroC8uaPShRANCAAThfiraziuAC0R70uqIAbRowrtmPeBR
CQO0EEEC2IVWVo5K1zR4nsW8oH612rRT6+1ggf039WJs2MKE64cQOTrV
-----END PRIVATE KEY-----
"""


def b64(text):
    return base64.b64encode(text.encode()).decode()


class Environment(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def kubeconfig(self, cluster, user):
        return self.write("kubeconfig.json", {
            "current-context": "dev",
            "contexts": [{"name": "other", "context": {"cluster": "x", "user": "x"}},
                         {"name": "dev", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}]})

    def test_a_kubeconfigs_current_context(self):
        path = self.kubeconfig({"server": "http://127.0.0.1:8001/"}, {"token": "abc"})
        c = kube.Client.from_environment({"KUBECONFIG": path}, field_manager="fm")
        self.assertEqual((c.server, c.token(), c.tls, c.field_manager), ("http://127.0.0.1:8001", "abc", None, "fm"))

    def test_a_token_file_is_read_on_every_call(self):
        self.write("token", "one\n")
        c = kube.Client.from_kubeconfig(self.kubeconfig({"server": "http://k:1"}, {"tokenFile": "token"}))
        self.assertEqual(c.token(), "one", "a relative tokenFile is relative to the kubeconfig")
        self.write("token", "two")
        self.assertEqual(c.token(), "two")

    def test_ca_and_client_certificate_data(self):
        c = kube.Client.from_kubeconfig(self.kubeconfig(
            {"server": "https://k:6443", "certificate-authority-data": b64(CERT)},
            {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}))
        self.assertEqual([ca["subject"] for ca in c.tls.get_ca_certs()], [((("commonName", "test-ca"),),)])
        self.assertTrue(c.tls.check_hostname)
        self.assertEqual(c.token(), "")

    def test_ca_and_client_certificate_files(self):
        self.write("ca.pem", CERT)
        self.write("key.pem", KEY)
        c = kube.Client.from_kubeconfig(self.kubeconfig(
            {"server": "https://k:6443", "certificate-authority": "ca.pem"},
            {"client-certificate": "ca.pem", "client-key": "key.pem"}))
        self.assertEqual(len(c.tls.get_ca_certs()), 1)
        insecure = kube.Client.from_kubeconfig(self.kubeconfig(
            {"server": "https://k:6443", "insecure-skip-tls-verify": True}, {}))
        self.assertFalse(insecure.tls.check_hostname)

    def test_what_it_cannot_use_says_so(self):
        for path, says in [
            (self.write("bad.yaml", "apiVersion: v1\nkind: Config\n"), "is not JSON"),
            (self.write("bad.json", {"current-context": "none"}), "no current context"),
            (self.kubeconfig({"server": "https://k"}, {"exec": {"command": "aws"}}), "exec and auth-provider"),
            (os.path.join(self.dir.name, "missing.json"), "No such file"),
        ]:
            with self.assertRaises(kube.ConfigError) as caught:
                kube.Client.from_kubeconfig(path)
            self.assertIn(says, str(caught.exception))
        with self.assertRaises(kube.ConfigError) as caught:
            kube.Client.from_environment({})
        self.assertIn("KUBECONFIG", str(caught.exception))

    def test_in_a_pod(self):
        self.write("token", "sa-token")
        self.write("ca.crt", CERT)
        for host, server in (("10.0.0.1", "https://10.0.0.1:443"), ("fd00::1", "https://[fd00::1]:443")):
            c = kube.Client.from_environment({"KUBERNETES_SERVICE_HOST": host}, service_account=self.dir.name)
            self.assertEqual(c.server, server)
        self.assertEqual(c.token(), "sa-token")
        self.write("token", "rotated")
        self.assertEqual(c.token(), "rotated", "the token is read again for every call")
        self.assertEqual(len(c.tls.get_ca_certs()), 1)


if __name__ == "__main__":
    unittest.main()
