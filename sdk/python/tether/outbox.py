"""What the session's writer sends for the messages waiting in its outbox:
with a broker that lists CAPABILITY_ACK_BATCH, the acks that wait together
go as one AckBatch (docs/protocol.md, [ack.batch]).

Each write to the stream costs grpc.aio ~200 µs of CPU (a completion on
grpc's poller thread and a wake-up of the event loop), more than the rest
of a delivery's path, so acks that are ready together share one. What
waits together is only what is there already: the acks finished in the
same turn of the event loop, or while the previous write was under way.
Nothing waits on a timer to fill a batch, so no ack goes later than it
would alone."""

from __future__ import annotations

from collections.abc import Iterator

from . import limits
from .v1 import broker_pb2 as pb

# The bytes a ConnectRequest adds around its AckBatch: the field's tag and
# its length (a varint of at most 5 bytes).
_BATCH_OVERHEAD = 6


def writes(items: list, batching: bool) -> Iterator:
    """items in order, each run of acks in it as AckBatch messages when
    batching (the broker lists CAPABILITY_ACK_BATCH). A run of one ack goes
    as the plain Ack it is: the same message as without batches, with
    nothing copied. A batch holds at most MAX_ACK_BATCH acks and stays
    within the broker's bound on one message; each ack alone already does
    (outcome.request)."""
    run: list[pb.ConnectRequest] = []
    size = _BATCH_OVERHEAD
    for item in items:
        if batching and isinstance(item, pb.ConnectRequest) and item.HasField("ack"):
            # A request with only an ack is encoded as an entry of
            # AckBatch.acks is: a 1-byte tag, a length, the ack.
            n = item.ByteSize()
            if run and (len(run) == limits.MAX_ACK_BATCH or size + n > limits.DEFAULT_MAX_MESSAGE_BYTES):
                yield _batch(run)
                run, size = [], _BATCH_OVERHEAD
            run.append(item)
            size += n
            continue
        if run:
            yield _batch(run)
            run, size = [], _BATCH_OVERHEAD
        yield item
    if run:
        yield _batch(run)


def _batch(run: list[pb.ConnectRequest]) -> pb.ConnectRequest:
    if len(run) == 1:
        return run[0]
    return pb.ConnectRequest(ack_batch=pb.AckBatch(acks=[r.ack for r in run]))
