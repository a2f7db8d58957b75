"""The stub's W3C propagator: the context it extracts is a dict whose
"span" is the remote parent's (trace id, span id), or nothing."""

from __future__ import annotations

from typing import Any


class TraceContextTextMapPropagator:
    def extract(self, carrier: dict[str, str], context: Any = None, getter: Any = None) -> dict:
        parts = carrier.get("traceparent", "").split("-")
        if len(parts) != 4:
            return {}
        return {"span": (parts[1], parts[2])}
