"""A small Kubernetes API client for the examples, on the standard library
only: the SDK brings no Kubernetes client and the examples add none. It
makes the five calls the replicator and the TTL reaper need (list, get,
create, replace, delete), JSON in and out, and raises ApiError subclasses
for the answers they act on.

It finds the cluster as a pod does (the service account's token and CA), or
from $KUBECONFIG naming a kubeconfig in JSON, for a handler run on a laptop:
``kubectl config view --minify --flatten -o json > kubeconfig.json`` writes
one (Python reads no YAML without a package). The examples call whatever
object has Api's methods, so their tests give them an in-memory fake."""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TIMEOUT = 30.0  # seconds for one call; a delivery that waits longer is retried by the broker anyway
NAMESPACES = ("", "v1", "namespaces")
SECRETS = ("", "v1", "secrets")
CONFIGMAPS = ("", "v1", "configmaps")

# A resource is (group, version, plural); tether.Resource, a NamedTuple
# starting with those three, is one too.
Resource = Sequence[str]
Object = dict[str, Any]


class ConfigError(Exception):
    """No cluster to talk to, or a kubeconfig this client cannot use."""


class ApiError(Exception):
    """The API server refused a call; status is the HTTP status, reason the
    Status object's reason (NotFound, AlreadyExists, Conflict, Invalid...)."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class NotFound(ApiError):
    pass


class AlreadyExists(ApiError):
    """A create of a name that is taken (409, reason AlreadyExists)."""


class Conflict(ApiError):
    """A write on a stale resourceVersion, or a failed delete precondition."""


class Invalid(ApiError):
    """An object the API server will not take (422), such as an update of an
    immutable Secret."""


def api_error(status: int, body: bytes) -> ApiError:
    """The error for an answer, from its Status object when it has one."""
    try:
        st = json.loads(body)
    except ValueError:
        st = {}
    if not isinstance(st, dict):
        st = {}
    reason = st.get("reason", "")
    message = st.get("message") or body.decode(errors="replace")[:200]
    if status == 404:
        return NotFound(status, reason or "NotFound", message)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(status, reason or "Conflict", message)
    if status == 422:
        return Invalid(status, reason or "Invalid", message)
    return ApiError(status, reason, message)


class Api(Protocol):
    """What the examples call; namespace is "" for cluster-scoped resources
    and, in list, for every namespace."""

    def list(self, resource: Resource, namespace: str = "", label_selector: str = "") -> list[Object]: ...

    def get(self, resource: Resource, namespace: str, name: str) -> Object: ...

    def create(self, resource: Resource, namespace: str, obj: Object) -> Object: ...

    def replace(self, resource: Resource, namespace: str, obj: Object) -> Object: ...

    def delete(self, resource: Resource, namespace: str, name: str, *, uid: str = "",
               resource_version: str = "") -> None: ...


class Client:
    """Api over HTTP(S). token is called for every request, so that a
    rotated service account token is picked up."""

    def __init__(self, server: str, *, token: Callable[[], str] = lambda: "",
                 tls: ssl.SSLContext | None = None, field_manager: str = "", user_agent: str = "tether-example"):
        self.server = server.rstrip("/")
        self.token = token
        self.tls = tls
        self.field_manager = field_manager
        self.user_agent = user_agent

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, service_account: str = SERVICE_ACCOUNT,
                         **options: Any) -> Client:
        """$KUBECONFIG when it is set, else the pod's service account."""
        if environ.get("KUBECONFIG"):
            return cls.from_kubeconfig(environ["KUBECONFIG"], **options)
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ConfigError("no cluster: not in a pod (no KUBERNETES_SERVICE_HOST) and KUBECONFIG is not set; "
                              "set it to the output of kubectl config view --minify --flatten -o json")
        token_file = os.path.join(service_account, "token")
        tls = ssl.create_default_context(cafile=os.path.join(service_account, "ca.crt"))
        return cls(f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
                   token=lambda: _read(token_file), tls=tls, **options)

    @classmethod
    def from_kubeconfig(cls, path: str, **options: Any) -> Client:
        """The current context of a JSON kubeconfig: its server and CA, and a
        token or a client certificate."""
        try:
            with open(path, encoding="utf-8") as f:
                cfg = json.load(f)
        except OSError as e:
            raise ConfigError(f"kubeconfig: {e}") from None
        except ValueError:
            raise ConfigError(f"kubeconfig {path} is not JSON (YAML needs a package): write it with "
                              "kubectl config view --minify --flatten -o json") from None
        try:
            ctx = _named(cfg, "contexts", cfg["current-context"])["context"]
            cluster = _named(cfg, "clusters", ctx["cluster"])["cluster"]
            server = cluster["server"]
            user = _named(cfg, "users", ctx["user"])["user"] if ctx.get("user") else {}
        except (KeyError, TypeError) as e:
            raise ConfigError(f"kubeconfig {path}: no current context, or no server for it ({e})") from None
        if user.get("exec") or user.get("auth-provider"):
            raise ConfigError(f"kubeconfig {path}: exec and auth-provider credentials are not supported; "
                              "use a token or a client certificate")
        here = os.path.dirname(os.path.abspath(path))
        tls = None
        if server.startswith("https:"):
            tls = ssl.create_default_context(cafile=_path(here, cluster.get("certificate-authority")),
                                             cadata=_data(cluster.get("certificate-authority-data")))
            if cluster.get("insecure-skip-tls-verify"):
                tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
            _client_certificate(tls, here, user)
        token = user.get("token", "")
        token_file = _path(here, user.get("tokenFile"))
        return cls(server, token=(lambda: _read(token_file)) if token_file else (lambda: token),
                   tls=tls, **options)

    def list(self, resource: Resource, namespace: str = "", label_selector: str = "") -> list[Object]:
        query = {"labelSelector": label_selector} if label_selector else {}
        return self._call("GET", self._url(resource, namespace, "", query)).get("items") or []

    def get(self, resource: Resource, namespace: str, name: str) -> Object:
        return self._call("GET", self._url(resource, namespace, name))

    def create(self, resource: Resource, namespace: str, obj: Object) -> Object:
        return self._call("POST", self._url(resource, namespace, "", self._manager()), obj)

    def replace(self, resource: Resource, namespace: str, obj: Object) -> Object:
        name = obj["metadata"]["name"]
        return self._call("PUT", self._url(resource, namespace, name, self._manager()), obj)

    def delete(self, resource: Resource, namespace: str, name: str, *, uid: str = "",
               resource_version: str = "") -> None:
        """Delete name, but only the object with this uid and version when
        they are given (a failed precondition is a Conflict)."""
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **({"preconditions": pre} if pre else {})}
        self._call("DELETE", self._url(resource, namespace, name), body)

    def _manager(self) -> dict[str, str]:
        return {"fieldManager": self.field_manager} if self.field_manager else {}

    def _url(self, resource: Resource, namespace: str, name: str = "", query: Mapping[str, str] | None = None) -> str:
        group, version, plural = resource[:3]
        parts = [self.server, "api" if not group else f"apis/{group}", version]
        if namespace:
            parts += ["namespaces", urllib.parse.quote(namespace, safe="")]
        parts.append(plural)
        if name:
            parts.append(urllib.parse.quote(name, safe=""))
        url = "/".join(parts)
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def _call(self, method: str, url: str, body: Object | None = None) -> Object:
        req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Accept": "application/json", "Content-Type": "application/json",
                                              "User-Agent": self.user_agent})
        if token := self.token():
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT, context=self.tls) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise api_error(e.code, e.read()) from None


class Lazy:
    """An Api that finds the cluster on first use, so that importing an
    example (as its tests do before they put a fake in its place) needs
    none. Two threads using it first may both build a Client; one is kept."""

    def __init__(self, **options: Any):
        self._options = options
        self._client: Client | None = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = Client.from_environment(**self._options)
        return getattr(self._client, name)


def _named(cfg: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any]:
    for entry in cfg.get(section) or []:
        if entry.get("name") == name:
            return entry
    raise KeyError(f"{section} has no {name!r}")


def _path(here: str, path: str | None) -> str | None:
    """A kubeconfig's file path; relative ones are relative to the kubeconfig."""
    return os.path.join(here, path) if path else None


def _data(data: str | None) -> str | None:
    return base64.b64decode(data).decode() if data else None


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _client_certificate(tls: ssl.SSLContext, here: str, user: Mapping[str, Any]) -> None:
    """Load the user's client certificate and key; ssl reads them only from
    files, so inline data goes through a temporary file that is gone at once."""
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if cert and key:
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:
            f.write(_data(cert) + "\n" + _data(key))
            f.flush()
            tls.load_cert_chain(f.name)
    elif user.get("client-certificate") and user.get("client-key"):
        tls.load_cert_chain(_path(here, user["client-certificate"]), _path(here, user["client-key"]))
