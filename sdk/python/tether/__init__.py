"""Tether's Python SDK: handlers for the Tether broker, in Kopf's shape.

    import tether

    @tether.on.create("example.com", "v1", "widgets")
    def created(spec, patch, logger, **_):
        patch.metadata.labels["example.com/seen"] = "yes"
        return {"size": spec.get("size")}

Run it with ``python3 -m tether run handler.py --name widgets``; test it
with tether.testing.FakeBroker. See README.md.
"""

from . import on
from .bindings import HOLD, NONE, STRICT, Finalizer
from .capabilities import BrokerCapabilities, broker_capabilities
from .daemons import AsyncDaemonStopped, DaemonStopped
from .delivery import DiffItem, Resource
from .errors import AdmissionError, ErrorsMode, PermanentError, RejectedError, TemporaryError
from .events import event, exception, info, warn
from .filters import all_, any_, none_, not_
from .hierarchies import (adjust_namespace, adopt, append_owner_reference, build_owner_reference, harmonize_naming, label,
                          remove_owner_reference)
from .hooks import ActivityError
from .kopfonly import missing
from .log import LogFormat
from .log import kopf_configure as configure
from .on import daemon, index, timer
from .patch import Patch
from .registry import Registry, get_default_registry, set_default_registry
from .runner import ConfigError, operator, run
from .selectors import ABSENT, PRESENT
from .settings import OperatorSettings, SettingsError
from .subhandlers import execute, register, subhandler
from .activities import ConnectionInfo
from .types import (Annotations, Body, BodyEssence, Diff, DiffOperation, Headers, Index, Labels, Logger, Memo, Meta,
                    Operation, RawBody, RawEvent, RawEventType, Reason, Spec, SSLPeer, Status, Store, UserInfo)
from .webhooks import (WebhookAutoServer, WebhookAutoTunnel, WebhookDockerDesktopServer, WebhookK3dServer,
                       WebhookMinikubeServer, WebhookNgrokTunnel, WebhookServer)
from .version import __version__

__all__ = [
    "on", "timer", "daemon", "index", "subhandler", "register", "execute",
    "HOLD", "STRICT", "NONE", "Finalizer", "PRESENT", "ABSENT",
    "TemporaryError", "PermanentError", "AdmissionError", "RejectedError", "ErrorsMode", "ConfigError", "ActivityError",
    "Registry", "get_default_registry", "set_default_registry", "run", "operator",
    "BrokerCapabilities", "broker_capabilities",
    "Patch", "Resource", "DiffItem", "DaemonStopped", "AsyncDaemonStopped",
    "OperatorSettings", "SettingsError",
    "all_", "any_", "none_", "not_",
    "adopt", "label", "append_owner_reference", "remove_owner_reference", "harmonize_naming", "adjust_namespace",
    "build_owner_reference", "OperatorRegistry",
    "event", "info", "warn", "exception", "configure", "LogFormat",
    # Kopf's type names, for annotations
    "Body", "RawBody", "Spec", "Meta", "Status", "Labels", "Annotations", "BodyEssence", "Diff", "DiffOperation",
    "Logger", "RawEvent", "RawEventType", "Operation", "UserInfo", "Reason", "Memo", "Index", "Store", "ConnectionInfo",
    "Headers", "SSLPeer",
    "WebhookServer", "WebhookAutoServer", "WebhookAutoTunnel", "WebhookK3dServer", "WebhookMinikubeServer",
    "WebhookDockerDesktopServer", "WebhookNgrokTunnel",
    "__version__",
]

# Kopf's name for the registry, so that `import tether as kopf` keeps working.
OperatorRegistry = Registry


def __getattr__(name: str) -> object:
    """Kopf's names that Tether has no counterpart for: an AttributeError
    that says why and what to do instead."""
    raise missing(name)
