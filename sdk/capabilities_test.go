package sdk_test

import (
	"context"
	"slices"
	"testing"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// TestCapabilitiesAreNegotiatedInTheHandshake: the SDK lists its
// capabilities in Hello, exposes what the broker offered, and sends an
// ack's Events only to a broker that has them or that predates
// capabilities.
func TestCapabilitiesAreNegotiatedInTheHandshake(t *testing.T) {
	bootstrap := tetherv1.Capability_CAPABILITY_CAPABILITIES
	events := tetherv1.Capability_CAPABILITY_HANDLER_EVENTS
	tests := []struct {
		name       string
		offered    []tetherv1.Capability
		wantListed bool
		wantEvents int
	}{
		{name: "a broker older than capabilities gets the events", offered: nil, wantEvents: 1},
		{name: "a broker that offers events gets them", offered: []tetherv1.Capability{bootstrap, events}, wantListed: true, wantEvents: 1},
		{name: "a broker that lists its capabilities without events gets none", offered: []tetherv1.Capability{bootstrap}, wantListed: true},
		{name: "a list without the bootstrap says nothing", offered: []tetherv1.Capability{tetherv1.Capability_CAPABILITY_PRIORITY}, wantEvents: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, &fakeBroker{capabilities: tt.offered})
			h := sdk.New("secret-ttl", hs.options()...)
			h.OnCreate(configMaps, func(_ context.Context, ev *sdk.Event) error {
				ev.Record(sdk.Normal, "Done", "")
				return nil
			})
			if got := h.BrokerCapabilities(); got.Listed || got.Offered != nil {
				t.Errorf("before any Welcome: %+v, want nothing", got)
			}
			hs.run(h)
			s := hs.session()
			sent := s.hello.GetCapabilities()
			for _, c := range []tetherv1.Capability{bootstrap, events, tetherv1.Capability_CAPABILITY_DAEMON_EXIT_RETRY_AFTER} {
				if !slices.Contains(sent, c) {
					t.Errorf("Hello.capabilities = %v, without %v", sent, c)
				}
			}
			s.deliver(t, delivery("d1"))
			if got := len(s.ack(t).GetEvents()); got != tt.wantEvents {
				t.Errorf("the ack has %d events, want %d", got, tt.wantEvents)
			}
			got := h.BrokerCapabilities()
			if got.Listed != tt.wantListed || !slices.Equal(got.Offered, tt.offered) {
				t.Errorf("BrokerCapabilities() = %+v, want listed %v, offered %v", got, tt.wantListed, tt.offered)
			}
			if got.Lacks(events) == (tt.wantEvents == 1) {
				t.Errorf("Lacks(HANDLER_EVENTS) = %v with %d events sent", got.Lacks(events), tt.wantEvents)
			}
		})
	}
}
