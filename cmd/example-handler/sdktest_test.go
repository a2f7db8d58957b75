package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/sdk/sdktest"
)

// TestTTLBindingsThroughTheSDK registers the TTL reaper and its webhook as
// main does and plays the broker (sdktest): a bad ttl is refused at
// admission with its message, a good one admitted, and a tick of a Secret
// whose ttl cannot be read fails for good rather than retrying forever.
func TestTTLBindingsThroughTheSDK(t *testing.T) {
	b := sdktest.New(t)
	h := sdk.New("example", b.Options()...)
	(&reaper{now: time.Now}).register(h, time.Minute, nil)
	registerTTLWebhook(h, nil)
	b.Run(h)

	v := b.Validate(sdk.OpCreate, ttlSecret("banana", time.Now()), nil)
	if v.Allowed || !strings.Contains(v.Message, `"banana" is not a duration`) {
		t.Errorf("a bad ttl: %+v, want it refused with its message", v)
	}
	if v := b.Validate(sdk.OpCreate, ttlSecret("10m", time.Now()), nil); !v.Allowed {
		t.Errorf("a good ttl: %+v, want it admitted", v)
	}
	if got := b.Tick(ttlSecret("banana", time.Now())); got.Outcome != sdktest.Fail || got.Binding != "ttl-secrets" {
		t.Errorf("a tick with a bad ttl: %v, want a permanent failure of ttl-secrets", got)
	}
}
