"""A handler run the way ``python3 -m tether run`` runs it, in a thread of
the test process, against a real broker: Kopf's KopfRunner, for tests
that create objects in a cluster and read what the handler did.

    with tether.testing.TetherRunner(["run", "--insecure", "handler.py"]) as runner:
        ...  # create objects, wait for what the handler does
    assert runner.exit_code == 0 and runner.exception is None
    assert "created" in runner.output

The handler's files load into a registry of their own (tether.testing.load),
so several runners in one test process do not collide. Without --name the
handler is named after its first file (``testing-<file>``). While it runs,
sys.stdout is the runner's output, as in Kopf: what the handler prints is in
``runner.output``, and so is what the test prints meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

from . import cli, files, log, runner
from .registry import Registry, set_default_registry

# How long __exit__ waits for the handler to drain and stop, by default.
STOP_TIMEOUT = 30.0


class TetherRunner:
    """Runs a handler from command line arguments (with or without the
    leading "run") until the with block ends; then output, exit_code and
    exception say how it went. reraise: raise the handler's exception at
    the end of the block (default), as Kopf does."""

    def __init__(self, args: Sequence[str], *, timeout: float | None = None, reraise: bool = True):
        self.args = list(args)
        self.timeout = timeout if timeout is not None else STOP_TIMEOUT
        self.reraise = reraise
        self.exit_code: int | None = None
        self.exception: BaseException | None = None
        self._out = io.StringIO()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()

    @property
    def output(self) -> str:
        """What the handler logged and printed so far."""
        return self._out.getvalue()

    stdout = output

    def __enter__(self) -> TetherRunner:
        args = self._parse()
        registry = Registry()
        previous = set_default_registry(registry)
        try:
            for path in args.paths:
                files.import_file(path, f"tether_runner_{id(self)}_{os.path.basename(path)[:-3]}")
        finally:
            set_default_registry(previous)
        self._thread = threading.Thread(target=self._run, args=(registry, args), name="tether-runner", daemon=True)
        self._thread.start()
        self._ready.wait(self.timeout)
        return self

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Whether the handler stops by itself (refused, or failed) within
        timeout (default the runner's)."""
        if self._thread is None:
            return True
        self._thread.join(self.timeout if timeout is None else timeout)
        return not self._thread.is_alive()

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended: the handler stopped by itself
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(self.timeout)
            if self._thread.is_alive():
                self.exception = self.exception or TimeoutError(f"the handler did not stop within {self.timeout}s")
        if self.reraise and self.exception is not None and exc[0] is None:
            raise self.exception

    def _parse(self) -> Any:
        argv = self.args[1:] if self.args[:1] == ["run"] else self.args
        if "--name" not in argv and not any(a.startswith("--name=") for a in argv):
            first = next((a for a in argv if a.endswith(".py")), "handler")
            stem = re.sub(r"[^a-z0-9-]+", "-", os.path.basename(first)[:-3].lower()).strip("-")
            argv = [*argv, "--name", f"testing-{stem}"[:40].rstrip("-")]
        p = cli.parser()
        args = p.parse_args(["run", *argv])
        cli.check(p, args)
        if args.module:
            raise ValueError("TetherRunner loads files; import modules in the test instead of -m")
        return args

    def _run(self, registry: Registry, args: Any) -> None:
        # Every logger's lines, as the command's stderr has them: the
        # SDK's, the functions' ("[namespace/name] ..."), the user's own.
        handler = logging.StreamHandler(self._out)
        handler.setFormatter(log.PlainFormatter())
        handler.setLevel(logging.DEBUG if args.verbose else logging.INFO)
        logger, level = logging.getLogger(), logging.getLogger().level
        logger.addHandler(handler)
        logger.setLevel(min(level or logging.WARNING, handler.level))
        try:
            with contextlib.redirect_stdout(self._out):
                asyncio.run(self._operate(registry, args))
            self.exit_code = 0
        except BaseException as e:  # noqa: BLE001 - the test reads it from exception
            self.exception = e
            with contextlib.suppress(BaseException):
                self.exit_code = cli.exit_code(e, args.name)
            if self.exit_code is None:
                self.exit_code = 1
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            self._ready.set()

    async def _operate(self, registry: Registry, args: Any) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        await runner.operator(registry, stopping=self._stopping, **cli.settings(args))

