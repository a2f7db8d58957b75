package binding

import (
	"errors"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// indexOptions refuses what an index binding cannot use: its objects are
// streamed to the instance without acks, so nothing is retried, timed out
// or held.
func indexOptions(pb *tetherv1.Binding) error {
	switch {
	case pb.Retries != nil:
		return fieldErr("retries", errors.New("does not apply to index bindings: their objects are not acked"))
	case pb.GetTimeout() != nil:
		return fieldErr("timeout", errors.New("does not apply to index bindings: their objects are not acked"))
	case pb.GetBackoff() != nil || pb.GetMaxBackoff() != nil:
		return fieldErr("backoff", errors.New("does not apply to index bindings: their objects are not acked"))
	}
	return nil
}
