"""Running a handler: the Hello built from a registry, the connection (TLS
with a bearer token read from a file on every connection attempt, or plain
text for development), and sessions one after the other, with backoff,
until stopped; for a handler that answers reviews, such sessions with each
broker replica at once (replicas.py). A new channel for every session:
behind a Service the next connection may reach another broker replica (the
leader)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import random
import secrets
import signal
import socket
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import __version__ as protobuf_version

from . import bindings, capabilities, durations, flags, hooks, limits, liveness, replicas
from .activities import Activity
from .dispatch import Dispatcher
from .memos import Memos
from .log import LOGGER
from .registry import Registry, get_default_registry
from .session import Session, SessionEnded
from .workers import Workers
from .settings import FIELDS as SETTINGS
from .settings import OperatorSettings
from .types import Memo
from .v1 import broker_pb2 as pb
from .version import __version__

DEFAULT_BROKER = "127.0.0.1:7443"
DEFAULT_WINDOW = 16
DEFAULT_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# A projected ServiceAccount token meant for the broker alone (audience
# tether.dev/broker, the broker's --token-audience in deploy/), where the
# handler's manifests mount one; the Go SDK's DefaultBrokerTokenPath.
DEFAULT_BROKER_TOKEN_FILE = "/var/run/secrets/tether.dev/token"
# Read when no token file is given: the first that exists, at each attempt.
DEFAULT_TOKEN_FILES = (DEFAULT_BROKER_TOKEN_FILE, DEFAULT_TOKEN_FILE)
DEFAULT_DRAIN_TIMEOUT = 10.0
RECONNECT_MIN = 0.1
# The Go SDK's DefaultReconnectMax: back within about 2 s of the broker being
# ready again, so that a failover costs the lease and not the backoff; well
# inside the broker's default grace of 30 s.
RECONNECT_MAX = 2.0
# Seconds a connection to the broker may take to open (TCP, TLS and gRPC's
# first exchange): a Service can send a dial to a replica that is gone, where
# nothing answers, and gRPC's default of 20 s made a handler wait that long
# after a failover. The Go SDK's ConnectTimeout is the same.
CONNECT_TIMEOUT = 5.0
MAX_WINDOW = 1 << 16
SDK = (f"tether-python/{__version__} (grpcio {grpc.__version__}, protobuf {protobuf_version}, "
       f"python {platform.python_version()})")


class ConfigError(ValueError):
    """The handler cannot start as configured."""


def default_instance_id() -> str:
    return f"{socket.gethostname() or 'unknown'}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclasses.dataclass
class Config:
    """How to run a handler; the command line flags, as keywords."""

    name: str
    # A gRPC target, or several tried in turn, one per connection attempt:
    # broker replicas reached without a Service in front of them. A handler
    # with validate or mutate bindings keeps a session to each of several,
    # and to every address of a DNS name that has several (replicas.py).
    broker: str | tuple[str, ...] = DEFAULT_BROKER
    instance_id: str = dataclasses.field(default_factory=default_instance_id)
    window: int = DEFAULT_WINDOW
    insecure: bool = False
    # None: the first of DEFAULT_TOKEN_FILES that exists, unless insecure
    token_file: str | None = None
    tls_ca_file: str | None = None
    tls_server_name: str | None = None
    namespaces: tuple[str, ...] = ()
    grace: float | None = None
    absent_release_after: float | None = None
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    max_backoff: float = RECONNECT_MAX
    # Above 0 (--dev): while connected, this instance and any others of the
    # highest priority take all the handler's work from the in-cluster ones.
    priority: int = 0
    # http://HOST:PORT/PATH of the probes' endpoint (--liveness); None: none
    liveness: str | None = None


def hello(registry: Registry, cfg: Config) -> pb.Hello:
    """The Hello announcing registry's bindings; ConfigError says what is
    wrong before the broker would."""
    try:
        bindings.check_name("handler name", cfg.name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not 1 <= cfg.window <= MAX_WINDOW:
        raise ConfigError(f"window {cfg.window} is out of range 1..{MAX_WINDOW}")
    if not 0 <= cfg.priority <= limits.MAX_PRIORITY:
        raise ConfigError(f"priority {cfg.priority} is out of range 0..{limits.MAX_PRIORITY}")
    if cfg.insecure and (cfg.tls_ca_file or cfg.tls_server_name):
        raise ConfigError("a TLS CA file or server name makes no sense with insecure")
    if not len(registry):
        raise ConfigError("no bindings registered: decorate functions with @tether.on.create, ... first")
    msg = pb.Hello(handler=cfg.name, instance_id=cfg.instance_id, window=cfg.window, priority=cfg.priority,
                   protocol_version="v1", sdk=SDK, capabilities=capabilities.CAPABILITIES)
    try:
        scope = bindings.namespaces(cfg.namespaces)
    except ValueError as e:
        raise ConfigError(f"namespaces: {e}") from None
    for reg in registry:
        msg.bindings.append(bindings.to_proto(reg.spec, _scoped(reg.spec, scope)))
    total = sum(len(b.namespaces) for b in msg.bindings)
    if total > limits.MAX_HELLO_NAMESPACES:
        raise ConfigError(f"{total} namespaces in all the bindings, more than the {limits.MAX_HELLO_NAMESPACES} "
                          "the broker takes; bind cluster-wide and narrow with labels= or when=")
    # Zero is meaningful for both (no grace; never release): set means sent.
    if cfg.grace is not None:
        msg.grace.CopyFrom(durations.to_proto(cfg.grace))
    if cfg.absent_release_after is not None:
        msg.absent_release_after.CopyFrom(durations.to_proto(cfg.absent_release_after))
    return msg


def _scoped(spec: bindings.Spec, scope: tuple[str, ...]) -> tuple[str, ...] | None:
    """The namespaces of a binding under the runner's scope: the scope for a
    binding that names none, else those of its own the scope allows."""
    if not scope:
        return None
    if not spec.namespaces:
        return scope
    kept = tuple(ns for ns in spec.namespaces if ns in scope)
    if not kept:
        raise ConfigError(f"binding {spec.id!r} names the namespaces {list(spec.namespaces)}, "
                          f"none of which the handler's namespaces {list(scope)} allow")
    return kept


class _TokenFile(grpc.AuthMetadataPlugin):
    """Sends "authorization: Bearer <token>" with every stream, reading the
    first of the files that exists each time, so a rotated ServiceAccount
    token is picked up."""

    def __init__(self, *paths: str):
        self.paths = paths

    def __call__(self, context: Any, callback: Any) -> None:
        try:
            path, token = _read_token(self.paths)
        except OSError as e:
            callback((), OSError(f"reading the token: {e}"))
            return
        if not token:
            callback((), ValueError(f"the token file {path} is empty"))
            return
        callback((("authorization", "Bearer " + token),), None)


def _read_token(paths: tuple[str, ...]) -> tuple[str, str]:
    """The first of paths that exists, and the token in it."""
    for i, path in enumerate(paths):
        try:
            with open(path, encoding="utf-8") as f:
                return path, f.read().strip()
        except FileNotFoundError:
            if i == len(paths) - 1:
                raise
    raise FileNotFoundError("no token file given")


def root_certificates(cfg: Config) -> bytes | None:
    """The CA bundle of --tls-ca-file; None: the system roots. It is read at
    every connection attempt (fresh_root), so that a rotated CA (the broker's
    ConfigMap, mounted) is trusted at the next reconnect."""
    if not cfg.tls_ca_file:
        return None
    try:
        with open(cfg.tls_ca_file, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"TLS CA file: {e}") from None


def fresh_root(cfg: Config, last: bytes | None) -> bytes | None:
    """The CA file read again; the last one read when it cannot be (it was
    readable at start: a moment of a volume being updated)."""
    try:
        return root_certificates(cfg)
    except ConfigError as e:
        LOGGER.warning("%s; connecting with the CA read before", e)
        return last


def targets(cfg: Config) -> tuple[str, ...]:
    """The brokers to connect to in turn; ConfigError when there is none."""
    found = (cfg.broker,) if isinstance(cfg.broker, str) else tuple(cfg.broker)
    if not found or not all(isinstance(t, str) and t for t in found):
        raise ConfigError(f"broker {cfg.broker!r}: want a gRPC target such as {DEFAULT_BROKER}, or several")
    return found


def channel(cfg: Config, target: str, root: bytes | None, authority: str | None = None) -> grpc.aio.Channel:
    """A channel to target; authority, when given, is the HOST:PORT the
    connection is made to whatever address target is (one replica's of a
    DNS name), and TLS verifies its host unless cfg.tls_server_name says."""
    options = [
        ("grpc.keepalive_time_ms", 30_000),  # the broker allows one ping per 10 s
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.max_receive_message_length", 32 << 20),  # objects travel whole, with old side and diff
        ("grpc.primary_user_agent", SDK),
        # gRPC core's connect deadline is this "minimum reconnect backoff".
        ("grpc.min_reconnect_backoff_ms", int(CONNECT_TIMEOUT * 1000)),
    ]
    if authority:
        options.append(("grpc.default_authority", authority))
    if cfg.insecure:
        if cfg.token_file:
            LOGGER.warning("insecure connection: the token in %s is not sent", cfg.token_file)
        return grpc.aio.insecure_channel(target, options=options)
    if cfg.tls_server_name or authority:
        options.append(("grpc.ssl_target_name_override", cfg.tls_server_name or authority.rpartition(":")[0]))
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=root),
        grpc.metadata_call_credentials(_TokenFile(*((cfg.token_file,) if cfg.token_file else DEFAULT_TOKEN_FILES))))
    return grpc.aio.secure_channel(target, creds, options=options)


class Backoff:
    """From RECONNECT_MIN doubling to max; each delay is drawn from the upper
    half of its step, so that instances do not reconnect in lockstep."""

    def __init__(self, maximum: float):
        self.maximum = max(maximum, RECONNECT_MIN)
        self.step = 0.0

    def reset(self) -> None:
        self.step = 0.0

    def next(self) -> float:
        self.step = min(self.step * 2, self.maximum) if self.step else RECONNECT_MIN
        return random.uniform(self.step / 2, self.step)


async def operator(registry: Registry | None = None, *, stopping: asyncio.Event | None = None,
                   memo: Memo | None = None, stop_flag: flags.Flag | None = None,
                   ready_flag: flags.Flag | None = None, **settings: Any) -> None:
    """Run a handler until stopping or stop_flag is set (then drain, say
    goodbye and return): the startup functions, the sessions, then the
    cleanup functions. settings are Config's fields, or Kopf's names of
    them (namespaces=, priority=, liveness_endpoint=; clusterwide= and
    standalone= change nothing); memo is the startup, cleanup and probe
    functions' (default an empty tether.Memo), and each object's memo
    starts as a shallow copy of it. ready_flag is set when the broker first
    welcomes the handler (the startup functions done and the indices
    complete). The flags are Kopf's: an asyncio.Event or Future, a
    threading.Event or a concurrent.futures.Future, from any thread. Raises
    ConfigError before it connects, RejectedError when the broker refuses
    the handler, ActivityError when a startup or cleanup function fails
    for good."""
    flags.check("stop_flag", stop_flag)
    flags.check("ready_flag", ready_flag)
    if "name" not in settings:
        raise ConfigError("tether.operator() needs name=: the handler's name, which names its hold (the finalizer "
                          "tether.dev/NAME) and must be granted to its identity (Kopf's operator() has none)")
    cfg = Config(**_kopf_settings(settings))
    registry = registry if registry is not None else get_default_registry()
    hello(registry, cfg)  # a bad configuration is refused before any startup function runs
    targets(cfg)
    root_certificates(cfg)
    stopping = stopping or asyncio.Event()
    watcher = asyncio.create_task(_stop_on(stop_flag, stopping)) if stop_flag is not None else None
    memo = memo if memo is not None else Memo()
    options = OperatorSettings(**{name: getattr(cfg, name) for name in SETTINGS})
    try:
        endpoint = await _liveness(cfg, lambda: hooks.probe(registry, memo, options))
        try:
            if not await hooks.run(Activity.STARTUP, registry, memo=memo, settings=options, stopping=stopping):
                LOGGER.info("stopped before the startup functions were done")
                return
            options.freeze()
            cfg = dataclasses.replace(cfg, **options.values())
            on_welcome = _on_welcome(endpoint, ready_flag)
            try:
                await _serve(registry, cfg, stopping, on_welcome, Memos(memo))
            finally:
                await hooks.run(Activity.CLEANUP, registry, memo=memo, settings=options)
        finally:
            if endpoint:
                await endpoint.close()
    finally:
        if watcher:
            watcher.cancel()
    LOGGER.info("stopped")


# Kopf's names for operator()'s settings: Config's field, or None for one
# that changes nothing in Tether (it is what Tether does anyway).
_KOPF_SETTINGS = {"liveness_endpoint": "liveness", "clusterwide": None, "standalone": None}


def _kopf_settings(settings: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in settings.items():
        if name in _KOPF_SETTINGS:
            if _KOPF_SETTINGS[name] is not None:
                out[_KOPF_SETTINGS[name]] = value
        else:
            out[name] = value
    if isinstance(out.get("namespaces"), list):
        out["namespaces"] = tuple(out["namespaces"])
    return out


async def _stop_on(flag: flags.Flag, stopping: asyncio.Event) -> None:
    await flags.wait(flag)
    LOGGER.info("the stop flag is set: stopping")
    stopping.set()


def _on_welcome(endpoint: liveness.Endpoint | None, ready_flag: flags.Flag | None) -> Callable[[], None] | None:
    """What the first (and each) Welcome tells: the liveness endpoint and
    the ready flag."""
    if endpoint is None and ready_flag is None:
        return None

    def welcomed() -> None:
        if endpoint is not None:
            endpoint.mark_connected()
        flags.raise_(ready_flag)
    return welcomed


async def _liveness(cfg: Config, probe: liveness.Probe) -> liveness.Endpoint | None:
    """The --liveness endpoint, listening; None without one."""
    if not cfg.liveness:
        return None
    try:
        endpoint = liveness.Endpoint(cfg.liveness, probe)
        await endpoint.start()
    except (ValueError, OSError) as e:
        raise ConfigError(f"liveness endpoint: {e}") from None
    return endpoint


@dataclasses.dataclass
class _Plan:
    """What every session of the handler shares; root is the CA read last."""

    msg: pb.Hello
    registry: Registry
    dispatcher: Dispatcher
    cfg: Config
    on_welcome: Callable[[], None] | None
    root: bytes | None


async def _serve(registry: Registry, cfg: Config, stopping: asyncio.Event,
                 on_welcome: Callable[[], None] | None, memos: Memos) -> None:
    """Sessions until stopping is set: one after the other, with backoff,
    or one to each broker replica (replicas.py); memos outlive each
    session, as objects do."""
    msg = hello(registry, cfg)
    brokers = targets(cfg)
    root = root_certificates(cfg)  # an unreadable file is refused before the first attempt
    workers = Workers(cfg.window)
    plan = _Plan(msg, registry, Dispatcher(workers, memos, registry.indices, cfg.name), cfg, on_welcome, root)
    every = await replicas.replica_set(msg, brokers, CONNECT_TIMEOUT)
    if every is not None:
        msg.capabilities.append(pb.CAPABILITY_EVERY_REPLICA)
    LOGGER.info("handler %s (instance %s): %d bindings, connecting to %s%s%s", cfg.name, cfg.instance_id,
                len(msg.bindings), f"every broker replica of {every.broker}" if every else " or ".join(brokers),
                " in plain text" if cfg.insecure else "",
                f" at priority {cfg.priority}, taking over from lower priorities" if cfg.priority else "")

    async def replica(addr: str, stop: asyncio.Event, ended: Callable[[], None]) -> None:
        # Each replica's session has a window of its own: threads for it
        # too, so that a follower's reviews never wait for the leader's work.
        workers.grow(cfg.window)
        try:
            await _connect_loop(plan, (addr,), stop, every.authority, ended)
        finally:
            workers.grow(-cfg.window)
    try:
        if every is None:
            await _connect_loop(plan, brokers, stopping)
        else:
            await every.run(replica, stopping)
    finally:
        workers.shutdown()


async def _connect_loop(plan: _Plan, brokers: tuple[str, ...], stopping: asyncio.Event, authority: str | None = None,
                        ended: Callable[[], None] | None = None) -> None:
    """Sessions with brokers in turn, with backoff, until stopping is set;
    ended, when given (one replica of several), is told each time one
    ends. Raises RejectedError."""
    backoff = Backoff(plan.cfg.max_backoff)
    where = f" from broker replica {brokers[0]}" if ended else ""
    attempt = 0
    while not stopping.is_set():
        session = Session(plan.msg, plan.registry, plan.dispatcher, plan.cfg.drain_timeout, plan.on_welcome)
        plan.root = fresh_root(plan.cfg, plan.root)
        ch = channel(plan.cfg, brokers[attempt % len(brokers)], plan.root, authority)
        attempt += 1
        code = None
        try:
            await session.run(ch, stopping)
            why = "stopped"
        except SessionEnded as e:
            why, code = str(e), e.code
        finally:
            await ch.close()
        if stopping.is_set():
            break
        if ended:
            ended()
        if session.welcomed:
            backoff.reset()
        delay = backoff.next()
        if session.reviews_only and code == grpc.StatusCode.UNAVAILABLE:
            delay = 0.0  # the replica leads now: the full session is to be had at once
        LOGGER.warning("disconnected%s (%s); reconnecting in %.1fs", where, why, delay)
        try:
            await asyncio.wait_for(stopping.wait(), delay)
        except asyncio.TimeoutError:
            pass


def run(registry: Registry | None = None, *, memo: Memo | None = None, **settings: Any) -> None:
    """operator() until SIGTERM or SIGINT, which start the drain."""

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            LOGGER.info("received %s: stopping", sig.name)
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await operator(registry, stopping=stopping, memo=memo, **settings)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    asyncio.run(main())
