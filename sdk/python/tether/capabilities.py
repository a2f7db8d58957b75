"""Capabilities: the protocol features each side lists in the handshake
(docs/protocol.md, "Capabilities"). A feature is used only when both sides
list it; a broker that lists none predates capabilities, and is served as
before."""

from __future__ import annotations

import dataclasses

from .v1 import broker_pb2 as pb

# What this SDK has, listed in every Hello.
CAPABILITIES = (
    pb.CAPABILITY_CAPABILITIES,
    pb.CAPABILITY_HANDLER_EVENTS,
    pb.CAPABILITY_RESOURCE_NAMES,
    pb.CAPABILITY_DAEMON_EXIT_RETRY_AFTER,
    pb.CAPABILITY_PRIORITY,
    pb.CAPABILITY_ADMISSION,
    pb.CAPABILITY_RESULTS_IN_STATUS,
    pb.CAPABILITY_DAEMON_EXIT_PATCH,
    pb.CAPABILITY_INDEXES,
    pb.CAPABILITY_PROGRESS,
    pb.CAPABILITY_TRACE_CONTEXT,
    pb.CAPABILITY_ACK_BATCH,
    pb.CAPABILITY_DELIVERY_BATCH,
)


@dataclasses.dataclass(frozen=True)
class BrokerCapabilities:
    """What a broker offered in its Welcome. listed is False before the
    first Welcome and for a broker older than capabilities: then nothing is
    known to be missing."""

    listed: bool = False
    offered: tuple[int, ...] = ()

    @classmethod
    def from_welcome(cls, w: pb.Welcome) -> BrokerCapabilities:
        offered = tuple(w.capabilities)
        return cls(listed=pb.CAPABILITY_CAPABILITIES in offered, offered=offered)

    def lacks(self, capability: int) -> bool:
        """Whether the broker is known not to have capability."""
        return self.listed and capability not in self.offered

    def has(self, capability: int) -> bool:
        """Whether the broker lists capability: a feature the handler may
        use only when both sides list it (a broker older than capabilities
        has none of those that came with them)."""
        return self.listed and capability in self.offered

    def names(self) -> list[str]:
        if not self.listed:
            return ["not listed (a broker older than capabilities)"]
        return [_name(c) for c in self.offered]


def _name(c: int) -> str:
    try:
        return pb.Capability.Name(c)
    except ValueError:  # newer than these stubs
        return str(c)


_last = BrokerCapabilities()


def broker_capabilities() -> BrokerCapabilities:
    """What the broker offered in this process's last Welcome."""
    return _last


def _welcomed(offer: BrokerCapabilities) -> None:
    global _last
    _last = offer
