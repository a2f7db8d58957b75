"""The --liveness endpoint, as ``kopf run --liveness http://0.0.0.0:8080/healthz``
serves it: GET on its path answers 503 until the broker has first welcomed
the handler (the startup functions are done and the handler is connected),
then 200 with the probe functions' results as a JSON object, under their
ids; 503 with the same object when a probe raised. A broker that goes away
later does not make it fail: the handler reconnects by itself, and a
restart would not bring the broker back. HTTP/1.0-style, one request per
connection, on asyncio alone."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from .log import LOGGER

# How long probe results are answered again before the probes run anew, so
# that frequent requests do not run them each time (Kopf's is the same).
PROBE_MAX_AGE = 10.0
# How long a client may take to send its request.
REQUEST_TIMEOUT = 5.0
# How long a request may take in all, the probes included; past it the
# connection is closed unanswered, which a client counts as a failure.
ANSWER_TIMEOUT = 30.0
MAX_HEADER_LINES = 100
DEFAULT_PORT = 80

Probe = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}


def parse(url: str) -> tuple[str, int, str]:
    """Host, port and path of an http:// URL; ValueError when it is not one."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme != "http" or not parts.hostname or port == -1 or parts.query or parts.fragment:
        raise ValueError(f"--liveness {url!r}: want http://HOST[:PORT]/PATH, such as http://0.0.0.0:8080/healthz")
    return parts.hostname, DEFAULT_PORT if port is None else port, parts.path or "/"


class Endpoint:
    def __init__(self, url: str, probe: Probe):
        self.host, self.port, self.path = parse(url)
        self.probe = probe
        self.connected = False
        self._server: asyncio.AbstractServer | None = None
        self._cached: tuple[float, bool, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    def mark_connected(self) -> None:
        self.connected = True

    async def start(self) -> None:
        """Listen; OSError when the address cannot be had. Port 0 takes a
        free one, which the log line names."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        LOGGER.info("serving the probes at http://%s:%d%s", self.host, self.port, self.path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _results(self) -> tuple[bool, dict[str, Any]]:
        async with self._lock:  # one run of the probes for requests that come together
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= PROBE_MAX_AGE:
                healthy, results = await self.probe()
                self._cached = (time.monotonic(), healthy, results)
            return self._cached[1], self._cached[2]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await asyncio.wait_for(self._answer(reader), ANSWER_TIMEOUT)
            head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
            writer.write(head.encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError) as e:
            LOGGER.debug("probe request not answered: %s", e)
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
        for _ in range(MAX_HEADER_LINES):
            if (await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)).strip() == b"":
                break
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            return 400, _json({"error": "not an HTTP request"})
        method, target = parts[0], urllib.parse.urlsplit(parts[1]).path
        if target != self.path:
            return 404, _json({"error": f"the probes are at {self.path}"})
        if method != "GET":
            return 405, _json({"error": "GET only"})
        if not self.connected:
            return 503, _json({"error": "not connected to the broker yet"})
        healthy, results = await self._results()
        return (200 if healthy else 503), _json(results)


def _json(value: Any) -> bytes:
    # A probe may return what JSON has no type for (a datetime): its str.
    return json.dumps(value, default=str).encode()
