package session

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// streamIndexes starts the stream of each index binding to the instance,
// until ctx (the session) ends. Its messages go out with the deliveries,
// after Welcome; they take no window slot.
func (s *Server) streamIndexes(ctx context.Context, in *Instance, bindings []*binding.Binding, log hclog.Logger) {
	for _, b := range bindings {
		if b.Kind != binding.Index {
			continue
		}
		go func() {
			send := func(m *tetherv1.Indexed) error {
				select {
				case in.send <- &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Indexed{Indexed: m}}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := s.opts.Index(ctx, b, send); err != nil && ctx.Err() == nil {
				log.Error("index binding's stream stopped; the handler's view stays incomplete until it reconnects",
					"binding", b.ID, "error", err)
			}
		}()
	}
}
