"""The stub's trace API: spans with a parent, attributes, a status and a
current span in a context variable, as the real API's SDK keeps them."""

from __future__ import annotations

import contextlib
import contextvars
import enum
import itertools
from typing import Any, Iterator

FINISHED: list["Span"] = []
_current: contextvars.ContextVar["Span | None"] = contextvars.ContextVar("stub_current_span", default=None)
_ids = itertools.count(1)


class SpanKind(enum.Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    def __init__(self, status_code: StatusCode = StatusCode.UNSET, description: str | None = None):
        self.status_code, self.description = status_code, description


class Span:
    """A started span: its trace, its parent's span id (from the context it
    was started in), and what was set on it."""

    def __init__(self, name: str, trace_id: str, parent_id: str, kind: SpanKind, attributes: dict[str, Any]):
        self.name, self.trace_id, self.parent_id, self.kind = name, trace_id, parent_id, kind
        self.span_id = f"{next(_ids):016x}"
        self.attributes = dict(attributes)
        self.status = Status()
        self.ended = False

    def is_recording(self) -> bool:
        return not self.ended

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_status(self, status: Status) -> None:
        self.status = status


class Tracer:
    def __init__(self, name: str):
        self.name = name

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, context: dict | None = None, kind: SpanKind = SpanKind.INTERNAL,
                              attributes: dict[str, Any] | None = None, links: Any = None, start_time: Any = None,
                              record_exception: bool = True, set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[Span]:
        parent = (context or {}).get("span")
        span = Span(name, parent[0] if parent else f"{next(_ids):032x}", parent[1] if parent else "", kind,
                    attributes or {})
        span.scope = self.name
        token = _current.set(span)
        try:
            yield span
        finally:
            _current.reset(token)
            span.ended = True
            FINISHED.append(span)


def get_tracer(instrumenting_module_name: str, instrumenting_library_version: str | None = None,
               tracer_provider: Any = None, schema_url: str | None = None, attributes: Any = None) -> Tracer:
    return Tracer(instrumenting_module_name)


def get_current_span() -> Span | None:
    return _current.get()
