package session

import (
	"slices"

	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Capabilities is one side's list of protocol features from the handshake.
// A list without tetherv1.Capability_CAPABILITY_CAPABILITIES comes from a
// peer older than capabilities: it says nothing about what the peer has.
type Capabilities []tetherv1.Capability

// Listed tells whether the peer lists its capabilities, so that one it
// does not list is one it lacks.
func (c Capabilities) Listed() bool {
	return slices.Contains(c, tetherv1.Capability_CAPABILITY_CAPABILITIES)
}

// Has tells whether the peer lists cap.
func (c Capabilities) Has(cap tetherv1.Capability) bool {
	return slices.Contains(c, cap)
}

// offered is what a broker serving the kinds supported offers in Welcome:
// every feature it has, with admission only when it runs its webhook
// server and indexes only when it has their streams.
func offered(supported map[binding.Kind]bool) Capabilities {
	c := Capabilities{
		tetherv1.Capability_CAPABILITY_CAPABILITIES,
		tetherv1.Capability_CAPABILITY_HANDLER_EVENTS,
		tetherv1.Capability_CAPABILITY_RESOURCE_NAMES,
		tetherv1.Capability_CAPABILITY_DAEMON_EXIT_RETRY_AFTER,
		tetherv1.Capability_CAPABILITY_PRIORITY,
		tetherv1.Capability_CAPABILITY_RESULTS_IN_STATUS,
		tetherv1.Capability_CAPABILITY_DAEMON_EXIT_PATCH,
		tetherv1.Capability_CAPABILITY_PROGRESS,
		tetherv1.Capability_CAPABILITY_TRACE_CONTEXT,
		tetherv1.Capability_CAPABILITY_ACK_BATCH,
		tetherv1.Capability_CAPABILITY_DELIVERY_BATCH,
	}
	if supported[binding.Validate] || supported[binding.Mutate] {
		// Every replica answers reviews, so only a broker that serves
		// them takes reviews-only sessions.
		c = append(c, tetherv1.Capability_CAPABILITY_ADMISSION, tetherv1.Capability_CAPABILITY_EVERY_REPLICA)
	}
	if supported[binding.Index] {
		c = append(c, tetherv1.Capability_CAPABILITY_INDEXES)
	}
	return c
}

// capabilityNames are c's names for the log; "none listed" for an SDK that
// predates capabilities.
func capabilityNames(c Capabilities) []string {
	if len(c) == 0 {
		return []string{"none listed"}
	}
	names := make([]string, len(c))
	for i, v := range c {
		names[i] = v.String()
	}
	return names
}
