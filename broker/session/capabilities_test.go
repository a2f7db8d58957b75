package session

import (
	"slices"
	"testing"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestTheHandshakeNegotiatesCapabilities: the broker lists what it offers
// in every Welcome (admission, and reviews-only sessions on every replica,
// only when it serves webhooks), keeps what the
// instance listed, and welcomes an instance that lists none as before.
func TestTheHandshakeNegotiatesCapabilities(t *testing.T) {
	lifecycle := []tetherv1.Capability{
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
	sdk := []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS, 9999}
	for _, tc := range []struct {
		name      string
		opts      Options
		sent      []tetherv1.Capability
		wantOffer []tetherv1.Capability
		listed    bool
	}{
		{name: "an SDK older than capabilities is welcomed", opts: Options{}, wantOffer: lifecycle},
		{name: "an SDK's list is kept, unknown values too", opts: Options{}, sent: sdk, wantOffer: lifecycle, listed: true},
		{name: "a broker serving webhooks offers admission on every replica", opts: Options{Supported: AllKinds}, sent: sdk,
			wantOffer: append(slices.Clone(lifecycle), tetherv1.Capability_CAPABILITY_ADMISSION, tetherv1.Capability_CAPABILITY_EVERY_REPLICA), listed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.opts)
			c := h.connect(t)
			c.send(hello(func(h *tetherv1.Hello) { h.Capabilities = tc.sent }))
			w := c.welcome()
			if got := w.GetCapabilities(); !slices.Equal(got, tc.wantOffer) {
				t.Errorf("Welcome.capabilities = %v, want %v", got, tc.wantOffer)
			}
			in := h.instance(t).in
			if !slices.Equal([]tetherv1.Capability(in.Capabilities), tc.sent) {
				t.Errorf("instance capabilities = %v, want %v", in.Capabilities, tc.sent)
			}
			if got := in.Capabilities.Listed(); got != tc.listed {
				t.Errorf("Listed() = %v, want %v", got, tc.listed)
			}
			if tc.listed && in.Capabilities.Has(tetherv1.Capability_CAPABILITY_ADMISSION) {
				t.Error("Has(ADMISSION) for an instance that did not list it")
			}
			c.goodbye()
			c.end()
		})
	}
}
