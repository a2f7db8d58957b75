"""Every broker replica ([admission.every] in docs/protocol.md), as the Go
SDK's sdk/replicas.go: a handler with validate or mutate bindings whose
broker address yields several replicas (each of the addresses it was given,
or every A and AAAA record of a DNS name such as the headless Service
tether-broker-replicas) keeps one session to each and lists
CAPABILITY_EVERY_REPLICA, so that whichever replica the API server calls has
an instance to answer the review, and no review waits for a leader. A
replica that does not lead takes its session for reviews only; lifecycle
deliveries, timers and daemons come only from the leader's session."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

from .log import LOGGER
from .v1 import broker_pb2 as pb

# How often the replicas' addresses are looked up again (and at once
# whenever one of their sessions ends), so that a new replica gets a
# session within seconds: the Go SDK's ResolveEvery.
RESOLVE_EVERY = 5.0

_REVIEWS = frozenset({pb.BINDING_KIND_VALIDATE, pb.BINDING_KIND_MUTATE})

# connect(address, stop, ended) keeps sessions with one replica until stop
# is set: each connection dialled to address, ended() called whenever one
# of them ends. It raises what must end them all (RejectedError).
Connect = Callable[[str, asyncio.Event, Callable[[], None]], Awaitable[None]]
Resolve = Callable[[], Awaitable[list[str]]]


def reviews(hello: pb.Hello) -> bool:
    """Whether the handler answers admission reviews."""
    return any(b.kind in _REVIEWS for b in hello.bindings)


def dns_target(target: str) -> tuple[str, str] | None:
    """The host and port of a gRPC target naming a host by DNS (HOST:PORT
    or dns:///HOST:PORT); None for an IP address, localhost, a target of
    another scheme, or one without a port."""
    if target.startswith("dns:///"):
        target = target[len("dns:///"):]
    if "://" in target or ":///" in target or target.startswith(("unix:", "ipv4:", "ipv6:")):
        return None
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or host.startswith("["):
        return None  # no port, or a bracketed IPv6 address
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if host == "localhost" or ":" in host:
        return None
    return host, port


async def lookup(host: str, port: str, timeout: float) -> list[str]:
    """Every address of host, with port (HOST:PORT, IPv6 in brackets),
    sorted; a loopback address counts as none (one broker, whichever
    loopback address). OSError when there is none, asyncio.TimeoutError
    when the lookup takes longer than timeout."""
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    out = set()
    for family, _, _, _, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0].split("%")[0])
        if ip.is_loopback:
            continue
        out.add(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    if not out:
        raise OSError(f"{host}: no address but loopback ones")
    return sorted(out)


async def replica_set(hello: pb.Hello, brokers: Sequence[str], timeout: float) -> ReplicaSet | None:
    """The set that serves the handler when it answers reviews and brokers
    yield several replicas: two distinct targets or more, or one DNS name
    with two addresses or more when the handler starts; None to keep one
    session as always (a loopback name, one address). timeout bounds each
    lookup."""
    if not reviews(hello):
        return None
    distinct = sorted(set(brokers))
    if len(distinct) > 1:
        async def given() -> list[str]:
            return distinct
        return ReplicaSet(", ".join(distinct), given, None)
    target = dns_target(distinct[0])
    if target is None:
        return None
    host, port = target

    async def resolve() -> list[str]:
        return await lookup(host, port, timeout)
    try:
        first = await resolve()
    except (OSError, asyncio.TimeoutError) as e:
        LOGGER.warning("cannot look up the broker replicas of %s (%s); keeping one session", distinct[0], e)
        return None
    if len(first) < 2:
        return None
    return ReplicaSet(distinct[0], resolve, f"{host}:{port}")


class ReplicaSet:
    """One session loop per replica address, started as an address appears
    and stopped (drained, with a goodbye) as it goes. broker names the
    replicas in logs; resolve gives their addresses now; authority is the
    name each connection is made to, whichever address is dialled (None:
    the address itself)."""

    def __init__(self, broker: str, resolve: Resolve, authority: str | None):
        self.broker = broker
        self.resolve = resolve
        self.authority = authority
        self._again = asyncio.Event()  # a session ended: look the replicas up now
        self._running: dict[str, tuple[asyncio.Event, asyncio.Task]] = {}
        self._leaving: set[asyncio.Task] = set()  # the loops of replicas gone, draining

    async def run(self, connect: Connect, stopping: asyncio.Event) -> None:
        """Keep a session to each replica until stopping is set; raise the
        first error of a replica's loop (a rejection), having stopped the
        others."""
        try:
            while not stopping.is_set():
                self._again.clear()
                try:
                    self._follow(await self.resolve(), connect)
                except (OSError, asyncio.TimeoutError) as e:
                    LOGGER.warning("cannot look up the broker replicas of %s (%s); keeping the sessions there are",
                                   self.broker, e)
                await self._wait(stopping)
        finally:
            await self._stop_all()

    def addresses(self) -> list[str]:
        """The replicas that have a session loop, sorted."""
        return sorted(self._running)

    async def _wait(self, stopping: asyncio.Event) -> None:
        """Until stopping, a session's end, a loop's error, or RESOLVE_EVERY."""
        waits = {asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(self._again.wait())}
        loops = {task for _, task in self._running.values()}
        try:
            done, _ = await asyncio.wait(waits | loops, timeout=RESOLVE_EVERY, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        for task in done & loops:
            task.result()  # raises the loop's error; a loop that returned was stopped

    def _follow(self, addrs: list[str], connect: Connect) -> None:
        for addr in list(self._running):
            if addr not in addrs:
                LOGGER.info("broker replica %s of %s is gone; ending its session", addr, self.broker)
                stop, task = self._running.pop(addr)
                stop.set()  # its loop drains and says goodbye by itself
                self._leaving.add(task)
                task.add_done_callback(self._leaving.discard)
        for addr in addrs:
            if addr not in self._running:
                stop = asyncio.Event()
                self._running[addr] = (stop, asyncio.create_task(connect(addr, stop, self._again.set)))

    async def _stop_all(self) -> None:
        running, self._running = self._running, {}
        for stop, _ in running.values():
            stop.set()
        tasks = [task for _, task in running.values()] + list(self._leaving)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
