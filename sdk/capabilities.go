package sdk

import (
	"slices"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// capabilities are the protocol features this SDK has, listed in every
// Hello (docs/protocol.md, "Capabilities").
var capabilities = []tetherv1.Capability{
	tetherv1.Capability_CAPABILITY_CAPABILITIES,
	tetherv1.Capability_CAPABILITY_HANDLER_EVENTS,
	tetherv1.Capability_CAPABILITY_RESOURCE_NAMES,
	tetherv1.Capability_CAPABILITY_DAEMON_EXIT_RETRY_AFTER,
	tetherv1.Capability_CAPABILITY_PRIORITY,
	tetherv1.Capability_CAPABILITY_ADMISSION,
	tetherv1.Capability_CAPABILITY_RESULTS_IN_STATUS,
	tetherv1.Capability_CAPABILITY_DAEMON_EXIT_PATCH,
	tetherv1.Capability_CAPABILITY_TRACE_CONTEXT,
	tetherv1.Capability_CAPABILITY_DELIVERY_BATCH,
}

// BrokerCapabilities are the protocol features the broker offered in its
// last Welcome. Listed is false before the first Welcome, and for a broker
// older than capabilities, which lists none: then nothing is known to be
// missing, and the SDK uses every feature as it always has.
type BrokerCapabilities struct {
	Listed bool
	// Offered are the features the broker lists, in its order.
	Offered []tetherv1.Capability
}

// Lacks tells whether the broker is known not to have c: it lists its
// capabilities, and c is not among them.
func (b BrokerCapabilities) Lacks(c tetherv1.Capability) bool {
	return b.Listed && !slices.Contains(b.Offered, c)
}

func brokerCapabilities(w *tetherv1.Welcome) BrokerCapabilities {
	offered := slices.Clone(w.GetCapabilities())
	return BrokerCapabilities{
		Listed:  slices.Contains(offered, tetherv1.Capability_CAPABILITY_CAPABILITIES),
		Offered: offered,
	}
}

// BrokerCapabilities returns what the broker offered in its last Welcome.
func (h *Handler) BrokerCapabilities() BrokerCapabilities {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offered
}

func (h *Handler) setBrokerCapabilities(b BrokerCapabilities) {
	h.mu.Lock()
	h.offered = b
	h.mu.Unlock()
}

// capabilityNames are b's names for the log.
func capabilityNames(b BrokerCapabilities) []string {
	if !b.Listed {
		return []string{"not listed (a broker older than capabilities)"}
	}
	names := make([]string, len(b.Offered))
	for i, c := range b.Offered {
		names[i] = c.String()
	}
	return names
}
