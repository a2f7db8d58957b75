package session

import (
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// takeAck hands a to the delivery waiting for it.
func takeAck(in *Instance, a *tetherv1.Ack, log hclog.Logger) {
	if !in.win.ack(a) {
		log.Warn("ack for an unknown delivery ignored", "delivery", a.GetDeliveryId())
	}
}

// takeAckBatch takes batch's acks exactly as that many Acks sent one by
// one, in order. A batch from an instance whose Hello did not list
// CAPABILITY_ACK_BATCH, or of more than MaxAckBatch acks, breaks the
// protocol: the error ends the stream, as a second Hello does.
func takeAckBatch(in *Instance, batch *tetherv1.AckBatch, log hclog.Logger) error {
	if !in.Capabilities.Has(tetherv1.Capability_CAPABILITY_ACK_BATCH) {
		return status.Error(codes.InvalidArgument,
			"ack_batch may be sent only by an instance whose Hello lists CAPABILITY_ACK_BATCH")
	}
	if n := len(batch.GetAcks()); n > tetherv1.MaxAckBatch {
		return status.Errorf(codes.InvalidArgument, "ack_batch: %d acks, more than the %d allowed", n, tetherv1.MaxAckBatch)
	}
	for _, a := range batch.GetAcks() {
		takeAck(in, a, log)
	}
	return nil
}
