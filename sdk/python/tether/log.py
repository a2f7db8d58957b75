"""Logging as Kopf does it: lines about an object start with
[namespace/name]; with the JSON format each line is one JSON object whose
"object" names it. The SDK logs to "tether", functions' ``logger`` to
"tether.objects"."""

from __future__ import annotations

import datetime
import enum
import json
import logging
import sys
from typing import IO, Any

LOGGER = logging.getLogger("tether")
# A library logs nowhere until the program configures logging (the runner
# does, with configure); without this Python would print warnings anyway.
LOGGER.addHandler(logging.NullHandler())
OBJECTS = logging.getLogger("tether.objects")
FORMATS = ("plain", "json")
_FIELD = "tether_fields"  # the LogRecord attribute with the object's fields


class ObjectLogger(logging.LoggerAdapter):
    """A logger whose lines name one object (and binding and delivery)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**kwargs.get("extra", {}), _FIELD: self.extra}
        return msg, kwargs


def for_object(namespace: str, name: str, logger: logging.Logger = OBJECTS, **fields: Any) -> ObjectLogger:
    """A logger for lines about namespace/name; fields (binding, delivery)
    appear in JSON lines."""
    return ObjectLogger(logger, {"namespace": namespace, "name": name, **fields})


def _where(record: logging.LogRecord) -> str:
    fields = getattr(record, _FIELD, None)
    if not fields:
        return ""
    ns, name = fields.get("namespace"), fields.get("name")
    return f"[{ns}/{name}] " if ns else f"[{name}] "


class PlainFormatter(logging.Formatter):
    """[time] logger [LEVEL] [namespace/name] message"""

    def __init__(self) -> None:
        super().__init__("[%(asctime)s] %(name)s [%(levelname)s] %(where)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.where = _where(record)
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the object's
    fields, and the exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = dict(getattr(record, _FIELD, None) or {})
        if "name" in fields:
            line["object"] = {k: fields.pop(k) for k in ("namespace", "name") if fields.get(k)}
        line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class LogFormat(enum.Enum):
    """Kopf's log formats, for tether.configure: PLAIN and FULL are both
    Tether's plain lines (time, level, [namespace/name], message), JSON its
    JSON lines."""

    PLAIN = "plain"
    FULL = "full"
    JSON = "json"


def kopf_configure(debug: bool | None = None, verbose: bool | None = None, quiet: bool | None = None,
                   log_format: LogFormat = LogFormat.FULL, log_prefix: bool | None = False,
                   log_refkey: str | None = None) -> None:
    """Kopf's kopf.configure: log to stderr as the runner's flags do,
    DEBUG with debug or verbose, WARNING with quiet, else INFO. Lines about
    an object always start with [namespace/name] (log_prefix), and JSON
    lines name it under "object"."""
    if log_refkey is not None:
        raise TypeError("configure(): log_refkey= is not supported: JSON lines name the object under \"object\"")
    if not isinstance(log_format, LogFormat):
        raise TypeError(f"configure(): log_format= is a tether.LogFormat, not {log_format!r}")
    configure("json" if log_format is LogFormat.JSON else "plain", bool(debug or verbose),
              level=logging.WARNING if quiet and not (debug or verbose) else None)


def configure(fmt: str = "plain", verbose: bool = False, stream: IO[str] | None = None,
              level: int | None = None) -> None:
    """Send every logger's lines (the SDK's, the functions', the user's own)
    to stream, stderr by default, as the runner does: INFO, or DEBUG when
    verbose, or level when given."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if level is not None else logging.DEBUG if verbose else logging.INFO)
    # Debug lines of the event loop and gRPC's internals say nothing about the handler.
    for name in ("asyncio", "grpc"):
        logging.getLogger(name).setLevel(logging.INFO)
